"""The search space a tuned spec implies (``ablate.design.space``): resolved types, the protocol
on every item, and the errors of a bad space."""

from __future__ import annotations

from support import VARIANT, errors, make

from ablate import design

TUNE = {"trials": 3, "seeds": 2, "space": {"train.lr": {"low": 1e-4, "high": 1e-2, "log": True},
                                            "model.layers": {"low": 1, "high": 3},
                                            "train.batch_size": [16, 32]}}


def test_tune_items_come_first_with_disjoint_seeds():
    s = make(factors={"variant": VARIANT}, seeds=2, tune=TUNE)
    its = design.items(s)
    tune = [i for i in its if i.phase == "tune"]
    reps = [i for i in its if i.phase == "replicate"]
    assert its[: len(tune)] == tune and len(tune) == 2 * 3 and len(reps) == 2 * 2
    assert [i.seed for i in tune[:3]] == [10000, 10001, 10000]
    assert {i.seed for i in tune}.isdisjoint({i.seed for i in reps})
    assert tune[1].key == f"{tune[1].cell.id}/tune/1" and reps[1].key == f"{reps[1].cell.id}/replicate/1"
    proto = tune[0].extra_attrs()["tune"]
    assert proto["space"] == {
        "train.lr": {"type": "float", "low": 1e-4, "high": 1e-2, "log": True, "step": None},
        "model.layers": {"type": "int", "low": 1, "high": 3, "log": False, "step": 1},
        "train.batch_size": {"type": "categorical", "choices": [16, 32]},
    }
    assert proto["objective"] == {"metric": "val_accuracy", "direction": "maximize"}
    assert reps[0].extra_attrs()["after_tune"] is True


def test_tune_errors():
    assert "tune.seeds: shares seeds 10000 with seeds" in errors(seeds=[10000], tune=TUNE)
    assert "tune.space.model.layers: model.layers is a factor" in errors(
        factors={"model.layers": [1, 2]}, tune=TUNE)
    space = {"train.lr": {"low": 1e-2, "high": 1e-4}}
    assert "tune.space.train.lr: low (0.01) must not exceed high (0.0001)" in errors(tune={"trials": 2,
                                                                                           "space": space})
    bad = {"model.dropout": {"low": 0.0, "high": 1.0}, "model.layers": {"low": 1, "high": 2.5},
           "model.activation": ["gelu", "swish"], "model.width": [1], "train.lr": {"low": 0, "high": 1, "log": True}}
    msg = errors(tune={"trials": 2, "space": bad})
    assert "tune.space.train.lr: log needs low > 0" in msg
    del bad["train.lr"]
    msg = errors(tune={"trials": 2, "space": bad})
    assert "tune.space.model.dropout.high: must be < 1; got 1.0" in msg
    assert "tune.space.model.layers.high: 2.5 is not an integer" in msg
    assert "tune.space.model.activation.choices: 'swish': 'swish' is not one of: gelu, glu, half_glu" in msg
    assert "tune.space.model.width: 'width' is not a key of the baseline" in msg
    assert "tune.objective.metric: 'test_accuracy' is not one of: val_accuracy, val_loss, val_bpc" in errors(
        tune={**TUNE, "objective": {"metric": "test_accuracy"}})
    assert make(tune={**TUNE, "objective": {"metric": "val_loss"}}).tune.objective.resolved_direction == "minimize"


def test_resolve_space_types_come_from_the_baseline_unless_given():
    s = make(tune={"trials": 2, "space": {
        "model.layers": {"low": 1, "high": 4, "step": 1},          # int: the baseline value is an int
        "train.grad_clip": {"low": 1, "high": 4, "type": "int"},  # an explicit type wins
        "train.lr": {"low": 1e-4, "high": 1e-2, "step": 1e-4},     # float with a step
        "model.normalisation": ["xi", "gamma"]}})
    assert design.resolve_space(s) == {
        "model.layers": {"type": "int", "low": 1, "high": 4, "log": False, "step": 1},
        "train.grad_clip": {"type": "int", "low": 1, "high": 4, "log": False, "step": 1},
        "train.lr": {"type": "float", "low": 1e-4, "high": 1e-2, "log": False, "step": 1e-4},
        "model.normalisation": {"type": "categorical", "choices": ["xi", "gamma"]},
    }
    assert design.tune_protocol(make()) is None
    proto = design.tune_protocol(s)
    assert proto["sampler"] == "tpe" and proto["seeds"] == [10000]
    assert "startup_trials" not in proto  # the budget is not identity; items carry it
    assert design.items(s)[0].extra_attrs()["tune"]["startup_trials"] == 2


def test_space_paths_of_named_factors_and_non_numbers_are_refused():
    msg = errors(factors={"variant": VARIANT}, tune={"trials": 2, "space": {"model.normalisation": ["xi", "none"]}})
    assert "tune.space.model.normalisation: model.normalisation is a factor; a path is either varied or tuned" in msg
    msg = errors(tune={"trials": 2, "space": {"model.norm": {"low": 0, "high": 1}}})
    assert "tune.space.model.norm: the baseline value 'layer' is not a number; tune it with choices" in msg
    msg = errors(tune={"trials": 2, "space": {"model.init": {"low": 0, "high": 1}}})
    assert "tune.space.model.init: tune a leaf value (e.g. model.init.r_min), not a whole mapping" in msg
    msg = errors(tune={"trials": 2, "space": {"probes.every": {"low": 1, "high": 2}}})
    assert "tune.space.probes.every: a path starts with task., model., train." in msg
