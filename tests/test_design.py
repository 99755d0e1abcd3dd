"""Designs, factors, conditions and constraints: exact cell sets; labels; identity; items."""

from __future__ import annotations

import copy

import pytest
import yaml

from ablate import design, spec

BASE = {
    "name": "d",
    "task": {"name": "listops", "max_length": 40, "train_size": 100, "val_size": 50, "test_size": 50},
    "model": {"d_model": 16, "state_dim": 16, "layers": 1, "heads": 1},
    "train": {"steps": 5},
}
VARIANT = {
    "RotRNN": {"model.parameterisation": "rotation", "model.normalisation": "xi"},
    "LRU": {"model.parameterisation": "complex_diagonal", "model.normalisation": "gamma"},
}


def make(**parts) -> spec.Spec:
    raw = copy.deepcopy(BASE)
    raw.update(copy.deepcopy(parts))
    return spec.validate(raw)


def grid(**parts) -> list[dict[str, str]]:
    return [c.labels for c in design.cells(make(**parts))]


def errors(**parts) -> str:
    raw = copy.deepcopy(BASE)
    raw.update(copy.deepcopy(parts))
    with pytest.raises(spec.SpecError) as info:
        spec.validate(raw)
    return str(info.value)


def test_no_factors_is_one_baseline_cell():
    (cell,) = design.cells(make())
    assert cell.label == "baseline" and cell.labels == {} and cell.config == make().baseline()


def test_full_factorial_exact_cells_in_order():
    got = grid(factors={"model.layers": [1, 2], "model.normalisation": ["xi", "gamma", "none"]})
    assert [(g["model.layers"], g["model.normalisation"]) for g in got] == [
        ("1", "xi"), ("1", "gamma"), ("1", "none"), ("2", "xi"), ("2", "gamma"), ("2", "none")]


def test_named_factor_sets_several_paths_and_labels_cells():
    s = make(factors={"variant": VARIANT, "model.layers": [1, 2]})
    cells = design.cells(s)
    assert [c.label for c in cells] == ["RotRNN, layers=1", "RotRNN, layers=2", "LRU, layers=1", "LRU, layers=2"]
    assert cells[2].labels == {"variant": "LRU", "model.layers": "1"}
    assert cells[2].config["model"]["parameterisation"] == "complex_diagonal"
    assert cells[2].config["model"]["normalisation"] == "gamma"
    assert cells[2].settings["variant"] == VARIANT["LRU"]


def test_level_label_forms_are_equivalent():
    forms = [
        {"model.normalisation": [{"label": "ξ", "value": "xi"}, {"label": "γ", "value": "gamma"}]},
        {"model.normalisation": {"ξ": "xi", "γ": "gamma"}},
        {"model.normalisation": {"levels": {"ξ": "xi", "γ": "gamma"}}},
        {"model.normalisation": {"levels": [{"label": "ξ", "value": "xi"}, {"label": "γ", "value": "gamma"}]}},
    ]
    results = [[(c.id, c.label, c.labels["model.normalisation"]) for c in design.cells(make(factors=f))]
               for f in forms]
    assert all(r == results[0] for r in results)
    assert [label for _, label, _ in results[0]] == ["ξ", "γ"]
    # Labels do not enter the id: the unlabelled factor gives the same cells.
    plain = design.cells(make(factors={"model.normalisation": ["xi", "gamma"]}))
    assert [c.id for c in plain] == [cid for cid, _, _ in results[0]]
    assert [c.label for c in plain] == ["normalisation=xi", "normalisation=gamma"]


def test_mapping_levels_fill_defaults_and_get_readable_labels():
    s = make(factors={"model.init": [{"scheme": "ring", "r_min": 0.5}, {"scheme": "rotrnn"}]})
    ring, rot = design.cells(s)
    assert ring.config["model"]["init"] == {"scheme": "ring", "r_min": 0.5, "r_max": 0.999, "max_phase": 6.283,
                                            "identity_basis": False}
    assert ring.labels["model.init"] == "scheme=ring,r_min=0.5"
    assert rot.labels["model.init"] == "scheme=rotrnn"


def test_one_at_a_time_moves_each_factor_alone_from_the_baseline():
    s = make(design="one_at_a_time", factors={"model.layers": [1, 2, 4], "model.normalisation": ["xi", "none"]})
    cells = design.cells(s)
    # the baseline (layers 1, xi) once; layers 2 and 4; normalisation none. Levels equal to the
    # baseline coincide with the baseline cell.
    assert [c.label for c in cells] == ["baseline", "layers=2", "layers=4", "normalisation=none"]
    assert [(c.labels["model.layers"], c.labels["model.normalisation"]) for c in cells] == [
        ("1", "xi"), ("2", "xi"), ("4", "xi"), ("1", "none")]


def test_explicit_cells_by_label_or_value():
    s = make(factors={"variant": VARIANT, "model.layers": [1, 2, 4]},
             cells=[{"variant": "LRU", "model.layers": 4}, {"variant": "RotRNN"}, {"model.layers": "2"}])
    assert s.design == "cells"  # implied by cells:
    cells = design.cells(s)
    assert [c.label for c in cells] == ["LRU, layers=4", "RotRNN", "layers=2"]
    assert cells[1].config["model"]["layers"] == 1  # not named: the baseline


def test_explicit_cells_errors():
    msg = errors(factors={"variant": VARIANT}, cells=[{"variant": "GRU"}, {"varaint": "LRU"}])
    assert "cells[0].variant: 'GRU' is not a level of variant; levels: RotRNN, LRU" in msg
    assert "cells[1].varaint: 'varaint' is not a factor; did you mean 'variant'?" in msg
    assert "cells: design: cells needs a non-empty `cells:` list" in errors(design="cells")
    assert "lists cells for design: cells, but design is full" in errors(
        design="full", factors={"variant": VARIANT}, cells=[{"variant": "LRU"}])


def test_exclude_and_include_exact_cells():
    factors = {"variant": VARIANT, "model.layers": [1, 2, 4]}
    got = grid(factors=factors, exclude=[{"variant": "LRU", "model.layers": [2, 4]}])
    assert [(g["variant"], g["model.layers"]) for g in got] == [
        ("RotRNN", "1"), ("RotRNN", "2"), ("RotRNN", "4"), ("LRU", "1")]
    got = grid(factors=factors, include=[{"model.layers": 4}, {"variant": "LRU", "model.layers": 1}])
    assert [(g["variant"], g["model.layers"]) for g in got] == [("RotRNN", "4"), ("LRU", "1"), ("LRU", "4")]
    # A dotted path that is not a factor matches the resolved config.
    got = grid(factors=factors, exclude=[{"model.parameterisation": "complex_diagonal"}])
    assert {g["variant"] for g in got} == {"RotRNN"}
    # A named factor's level matches by value (the keys it names), too.
    got = grid(factors=factors, exclude=[{"variant": {"model.normalisation": "gamma"}}])
    assert {g["variant"] for g in got} == {"RotRNN"}


def test_constraint_errors_name_path_and_levels():
    factors = {"variant": VARIANT, "model.layers": [1, 2]}
    msg = errors(factors=factors, exclude=[{"variant": "LRUU"}], include=[{"model.depth": 3}, {"layers": 1}])
    assert "exclude[0].variant: 'LRUU' is not a level of variant; levels: RotRNN, LRU" in msg
    assert "include[0].model.depth: 'depth' is not a key of the baseline" in msg
    assert "include[1].layers: 'layers' is neither a factor nor a dotted path" in msg


def test_reference_cell_selectors_are_checked_like_constraints():
    factors = {"variant": VARIANT}
    ref = {"value": 0.9, "source": "a paper"}
    msg = errors(factors=factors, references=[{**ref, "cell": {"variant": "LRUU"}},
                                              {**ref, "cell": {"varient": "LRU"}}])
    assert "references[0].cell.variant: 'LRUU' is not a level of variant; levels: RotRNN, LRU" in msg
    assert "references[1].cell.varient: 'varient' is neither a factor nor a dotted path; did you mean 'variant'?" in msg
    assert make(factors=factors, references=[{**ref, "cell": {"variant": "LRU"}}])  # a valid selector passes


def test_contradictory_constraints_leave_no_cell():
    msg = errors(factors={"model.layers": [1, 2]}, include=[{"model.layers": 1}], exclude=[{"model.layers": 1}])
    assert "include: no cell is left: exclude/include remove all 2 candidate cells" in msg


def test_conditional_factor_varies_only_where_its_condition_holds():
    s = make(factors={"variant": VARIANT, "model.heads": {"levels": [1, 2, 4], "when": {"variant": "RotRNN"}}})
    cells = design.cells(s)
    assert [c.label for c in cells] == ["RotRNN, heads=1", "RotRNN, heads=2", "RotRNN, heads=4", "LRU"]
    assert cells[-1].labels == {"variant": "LRU", "model.heads": "1"}  # held at the baseline
    # The same condition written on the config path.
    s2 = make(factors={"variant": VARIANT,
                       "model.heads": {"levels": [1, 2, 4], "when": {"model.parameterisation": "rotation"}}})
    assert [c.id for c in design.cells(s2)] == [c.id for c in cells]


def test_condition_errors():
    msg = errors(factors={"model.heads": {"levels": [1, 2], "when": {"model.parameterisation": "complex_diagonal"}}})
    assert "factors.model.heads.when: never holds in this design (full)" in msg
    msg = errors(factors={"model.heads": {"levels": [1, 2], "when": {"variant": "RotRNN"}}})
    assert "factors.model.heads.when.variant: 'variant' is neither a factor nor a dotted path" in msg
    msg = errors(factors={"model.heads": {"levels": [1, 2], "when": {"model.parameterisaton": "rotation"}}})
    assert "did you mean 'model.parameterisation'?" in msg
    msg = errors(factors={"model.heads": {"levls": [1, 2]}})
    assert "factors.model.heads.levls: unknown key; did you mean 'levels'?" in msg


def test_invalid_combinations_are_named_and_can_be_excluded():
    factors = {"variant": VARIANT, "model.heads": [1, 16]}  # 16 heads: too many for either
    msg = errors(factors=factors)
    assert "the cell (RotRNN, heads=16) is invalid" in msg
    assert "the cell (LRU, heads=16) is invalid: model: heads (16) must divide the 8 complex modes" in msg
    assert "Exclude it (exclude:) or vary the factor only where it applies (when:)" in msg
    assert len(design.cells(make(factors=factors, exclude=[{"model.heads": 16}]))) == 2


def test_factor_shape_errors():
    assert "factors.model.layers: needs at least one level" in errors(factors={"model.layers": []})
    assert "factors.layers[0]: 'layers' has no dot, so it is a named factor" in errors(factors={"layers": [1]})
    assert "did you mean the path factor 'model.layers'?" in errors(factors={"layers": [1]})
    assert "appears twice" in errors(factors={"model.layers": [1, 1]})
    assert "factors.model.layers: a factor is a list of levels" in errors(factors={"model.layers": 3})
    msg = errors(factors={"variant": VARIANT, "model.normalisation": ["xi"]})
    assert "sets model.normalisation, which factor 'variant' also sets" in msg
    msg = errors(factors={"variant": {"A": {"model.parameterisation": "rotaton"}}})
    assert "factors.variant.A.model.parameterisation: 'rotaton' is not one of: rotation" in msg
    assert "a path starts with task., model., train." in errors(factors={"probes.every": [1]})


def test_huge_grids_are_refused_before_enumeration():
    factors = {f"model.{k}": list(range(1, 23)) for k in ("layers", "heads", "d_model")}
    msg = errors(factors=factors)
    assert "the full factorial has 10,648 cells (22 × 22 × 22); at most 10,000" in msg
    msg = errors(factors={"model.layers": list(range(1, 151))}, seeds=1000,
                 tune={"trials": 1000, "space": {"train.lr": [0.1]}})
    assert "a study has at most" in msg


def test_seeds_count_list_and_errors():
    assert make(seeds=3).seed_list == [0, 1, 2]
    assert make(seeds=[7, 3]).seed_list == [7, 3]
    assert "seeds: repeats 3" in errors(seeds=[3, 3])
    assert "seeds: needs at least one seed" in errors(seeds=[])
    assert "seeds: a count of seeds must be between 1 and 1000" in errors(seeds=0)
    assert "seeds: must be a count" in errors(seeds=True)
    assert "seeds: [1]: -1 is not a seed" in errors(seeds=[0, -1])


# --- identity -----------------------------------------------------------------------------------


def test_ids_stable_under_key_order_formatting_and_labels():
    factors = {"variant": VARIANT, "model.layers": [1, 2]}
    a = design.cells(make(factors=factors))
    reordered = copy.deepcopy(BASE)
    reordered = {k: reordered[k] for k in reversed(list(reordered))}
    reordered["model"] = dict(reversed(list(reordered["model"].items())))
    reordered["factors"] = {"model.layers": [1, 2], "variant": {k: dict(reversed(list(v.items())))
                                                                for k, v in VARIANT.items()}}
    text = yaml.safe_dump(reordered, default_flow_style=True, allow_unicode=True)
    b = design.cells(spec.validate(yaml.safe_load(text)))
    assert {c.id for c in a} == {c.id for c in b}
    # The same model reached through a path factor has the same id as through the named one.
    c = design.cells(make(factors={"model.parameterisation": ["rotation", "complex_diagonal"],
                                   "model.normalisation": ["xi", "gamma"], "model.layers": [1, 2]}))
    assert {x.id for x in a} <= {x.id for x in c}


def test_id_covers_config_data_version_code_and_tuning(monkeypatch):
    s = make()
    (cell,) = design.cells(s)
    assert cell.id == design.cell_id(s.baseline())
    assert design.cell_id(s.baseline()) != design.cell_id({**s.baseline(), "train": {**s.baseline()["train"],
                                                                                      "lr": 1e-3}})
    monkeypatch.setattr(design, "CODE_VERSION", "999")
    assert design.cell_id(s.baseline()) != cell.id
    monkeypatch.undo()
    import dataclasses

    from ablate.tasks import registry

    entry = registry.task_entry("listops")
    monkeypatch.setitem(registry._REGISTRY, "listops", dataclasses.replace(entry, version=entry.version + 1))
    design._data_version.cache_clear()
    assert design.cell_id(s.baseline()) != cell.id  # a new generator version: new data, new cells
    monkeypatch.undo()
    design._data_version.cache_clear()
    assert design.cell_id(s.baseline()) == cell.id
    tuned = make(tune={"trials": 2, "space": {"train.lr": {"low": 1e-4, "high": 1e-2, "log": True}}})
    assert design.cells(tuned)[0].id != cell.id
    budget = make(tune={"trials": 9, "space": {"train.lr": {"low": 1e-4, "high": 1e-2, "log": True}}})
    assert design.cells(budget)[0].id == design.cells(tuned)[0].id  # the budget is not identity


def test_extending_a_grid_or_seeds_reuses_items_and_a_fixed_change_makes_new_cells():
    small = design.items(make(factors={"model.layers": [1, 2]}, seeds=2))
    big = design.items(make(factors={"model.layers": [1, 2, 4], "model.normalisation": ["xi"]}, seeds=3))
    assert {i.key for i in small} < {i.key for i in big}
    assert len(big) - len(small) == 3 * 3 - 2 * 2
    changed = design.items(make(factors={"model.layers": [1, 2]}, seeds=2, train={"steps": 6}))
    assert not {i.key for i in small} & {i.key for i in changed}
    # Probes do not change what is trained: same cells.
    probed = design.items(make(factors={"model.layers": [1, 2]}, seeds=2, probes={"every": 7}))
    assert [i.key for i in probed] == [i.key for i in small]


# --- tuning -----------------------------------------------------------------------------------

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
    assert "tune.space.model.dropout.high: 1.0: Input should be less than 1" in msg
    assert "tune.space.model.layers.high: 2.5 is not an integer" in msg
    assert "tune.space.model.activation.choices: 'swish': 'swish' is not one of: gelu, glu, half_glu" in msg
    assert "tune.space.model.width: 'width' is not a key of the baseline" in msg
    assert "tune.objective.metric: 'test_accuracy' is not one of: val_accuracy, val_loss, val_bpc" in errors(
        tune={**TUNE, "objective": {"metric": "test_accuracy"}})
    assert make(tune={**TUNE, "objective": {"metric": "val_loss"}}).tune.objective.resolved_direction == "minimize"
