"""Cell identity (``ablate.design.identity``): ids stable under formatting and labels, changed by
what is trained (config, data version, code version, tuning protocol), and reused when a grid grows."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from support import BASE, DESIGN_BASE, VARIANT, make

from ablate import design, spec
from ablate.design import identity


def spec_errors(raw) -> str:
    with pytest.raises(spec.SpecError) as info:
        design.validate(raw)
    return str(info.value)


def with_(path: str, value):
    raw = yaml.safe_load(yaml.safe_dump(BASE))
    spec.set_path(raw, path, value) if "." in path else raw.__setitem__(path, value)
    return raw


def test_ids_stable_under_key_order_formatting_and_labels():
    factors = {"variant": VARIANT, "model.layers": [1, 2]}
    a = design.cells(make(factors=factors))
    reordered = copy.deepcopy(DESIGN_BASE)
    reordered = {k: reordered[k] for k in reversed(list(reordered))}
    reordered["model"] = dict(reversed(list(reordered["model"].items())))
    reordered["factors"] = {"model.layers": [1, 2], "variant": {k: dict(reversed(list(v.items())))
                                                                for k, v in VARIANT.items()}}
    text = yaml.safe_dump(reordered, default_flow_style=True, allow_unicode=True)
    b = design.cells(design.validate(yaml.safe_load(text)))
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
    monkeypatch.setattr(identity, "CODE_VERSION", "999")
    assert design.cell_id(s.baseline()) != cell.id
    monkeypatch.undo()
    import dataclasses

    from ablate.tasks import registry

    entry = registry.task_entry("listops")
    bumped = dataclasses.replace(entry, version=entry.version + 1)
    monkeypatch.setattr(registry, "task_entry", lambda name: bumped if name == "listops" else entry)
    identity.task_data_version.cache_clear()
    assert design.cell_id(s.baseline()) != cell.id  # a new generator version: new data, new cells
    monkeypatch.undo()
    identity.task_data_version.cache_clear()
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
    # Nor do the reports' judgements (`stats:`): an old spec and one that sets them share their cells.
    judged = design.items(make(factors={"model.layers": [1, 2]}, seeds=2, stats={"min_effect": 0.05, "power": 0.9}))
    assert [i.key for i in judged] == [i.key for i in small]


def test_cell_id_stable_under_key_order_and_formatting():
    s1 = design.validate(BASE)
    reordered = {k: BASE[k] for k in reversed(list(BASE))}
    reordered["model"] = dict(reversed(list(BASE["model"].items())))
    text = yaml.safe_dump(reordered, default_flow_style=True)
    s2 = design.validate(yaml.safe_load(text))
    assert sorted(c.id for c in design.cells(s1)) == sorted(c.id for c in design.cells(s2))
    # Writing a default explicitly resolves to the same config, hence the same id.
    explicit = with_("model.dropout", 0.0)
    assert {c.id for c in design.cells(design.validate(explicit))} == {c.id for c in design.cells(s1)}


def test_cell_id_changes_with_a_fixed_setting():
    ids = {c.id for c in design.cells(design.validate(BASE))}
    other = {c.id for c in design.cells(design.validate(with_("train.lr", 1e-3)))}
    assert ids.isdisjoint(other)


def test_a_setting_added_later_stays_out_of_the_id_at_its_neutral_value(monkeypatch):
    s = design.validate(BASE)
    before = [c.id for c in design.cells(s)]
    config = design.cells(s)[0].config
    # Pretend train.log_every were new, with its current value as the behaviour from before it existed.
    monkeypatch.setitem(identity.NEUTRAL, "train.log_every", config["train"]["log_every"])
    assert [c.id for c in design.cells(s)] == before  # ids hash the config without it...
    changed = copy.deepcopy(config)
    changed["train"]["log_every"] += 1
    assert identity.cell_id(changed) != identity.cell_id(config)  # ...and any other value is a new cell
    assert "log_every" not in identity.identity_config(config)["train"]
    assert "log_every" in identity.identity_config(changed)["train"]


def test_a_level_version_renews_only_the_cells_that_use_the_level(monkeypatch):
    from ablate.models import catalogue

    s = design.validate(BASE)
    before = {c.labels["model.parameterisation"] + "/" + c.labels["model.normalisation"]: c.id for c in design.cells(s)}
    bumped = [catalogue.Level(lv.name, lv.target, lv.description, lv.modes,
                             version=2 if lv.name == "complex_diagonal" else lv.version)
              for lv in catalogue.PARAMETERISATIONS]
    monkeypatch.setitem(catalogue.MODEL_FACTORS, "model.parameterisation",
                        catalogue.Registry("parameterisation", *bumped))
    after = {c.labels["model.parameterisation"] + "/" + c.labels["model.normalisation"]:
             identity.cell_id(c.config) for c in design.cells(s)}
    for label, cid in before.items():
        assert (after[label] != cid) == label.startswith("complex_diagonal"), label


def test_config_key_is_the_id_without_the_code_and_old_ids_stay_computable(monkeypatch):
    s = design.validate(BASE)
    cells = design.cells(s)
    assert all(c.config_key == identity.config_key(c.config) and c.code_version == "1" for c in cells)
    assert all(c.original_id == c.id for c in cells)  # at code version 1 they coincide
    monkeypatch.setattr(identity, "CODE_VERSION", "2")
    renewed = design.cells(s)  # the design's cache knows the code version
    assert [c.id for c in renewed] != [c.id for c in cells]
    assert [c.config_key for c in renewed] == [c.config_key for c in cells]
    assert [c.original_id for c in renewed] == [c.id for c in cells]
    assert {c.code_version for c in renewed} == {"2"}
    from ablate.models import catalogue

    bumped = [catalogue.Level(lv.name, lv.target, lv.description, lv.modes, version=3 if lv.name == "rotation" else 1)
              for lv in catalogue.PARAMETERISATIONS]
    monkeypatch.setitem(catalogue.MODEL_FACTORS, "model.parameterisation", catalogue.Registry("parameterisation", *bumped))
    rotation = next(c for c in cells if c.labels["model.parameterisation"] == "rotation")
    assert identity.code_version(rotation.config) == "2, model.parameterisation v3"
    assert identity.config_key(rotation.config) == rotation.config_key


def test_a_compare_section_leaves_the_spec_hash_of_specs_without_one(monkeypatch):
    s = design.validate(BASE)
    with_compare = design.validate({**BASE, "compare": ["a", {"study": "b", "cells": {"model.heads": 2}}]})
    assert design.spec_hash(s) == design.spec_hash(design.validate({**BASE, "compare": []}))
    assert design.spec_hash(with_compare) != design.spec_hash(s)
    assert [c.id for c in design.cells(with_compare)] == [c.id for c in design.cells(s)]
    assert with_compare.compare[0].study == "a" and with_compare.compare[1].selectors == [{"model.heads": 2}]
    assert "compare" in spec_errors({**BASE, "compare": [{"study": "bad name!"}]})


# Issue 18's settings: (path, a value that trains differently). At their defaults they stay out.
TRAINING_SETTINGS = [("train.schedule", "linear"), ("train.warmup_steps", 2), ("train.step_milestones", [0.3]),
                     ("train.step_gamma", 0.5), ("train.patience", 3), ("train.min_delta", 0.01),
                     ("train.converged_tol", 0.01)]


def test_schedule_patience_and_convergence_settings_keep_old_ids_at_their_defaults():
    config = design.cells(design.validate(BASE))[0].config
    seen = identity.identity_config(config)["train"]
    for path, _ in TRAINING_SETTINGS:
        assert path.split(".")[1] in config["train"] and path.split(".")[1] not in seen
        assert path in identity.NEUTRAL
    # The id of a config without the new keys at all (as an earlier version resolved it) is unchanged.
    old = copy.deepcopy(config)
    for path, _ in TRAINING_SETTINGS:
        del old["train"][path.split(".")[1]]
    assert identity.cell_id(old) == identity.cell_id(config)
    ids = {c.id for c in design.cells(design.validate(BASE))}
    for path, value in TRAINING_SETTINGS:
        assert ids.isdisjoint(c.id for c in design.cells(design.validate(with_(path, value)))), path


def test_a_pruner_enters_the_tuning_protocol_only_when_set():
    tuned = with_("tune", {"trials": 2, "space": {"train.lr": {"low": 1e-4, "high": 1e-2, "log": True}}})
    ids = [c.id for c in design.cells(design.validate(tuned))]
    tuned["tune"]["pruner"] = "none"
    assert [c.id for c in design.cells(design.validate(tuned))] == ids
    assert "pruner" not in design.tune_protocol(design.validate(tuned))
    tuned["tune"]["pruner"] = "median"
    assert design.tune_protocol(design.validate(tuned))["pruner"] == "median"
    assert set(ids).isdisjoint(c.id for c in design.cells(design.validate(tuned)))


QUICKSTART = Path(__file__).resolve().parents[1] / "studies/quickstart.yaml"


def test_the_wsd_settings_leave_the_ids_of_existing_studies_as_they_were():
    """The quickstart's cell ids as the code before WSD (git 5593cd2) computed them: the decay
    settings are at their neutral defaults there and stay out of the id."""
    cells = design.cells(design.load(QUICKSTART))
    assert sorted(c.id for c in cells) == ["a0b7932a663d", "c3f0607b27d7", "c5ad7f2c6408", "cf6d41011b7c"]
    assert all(c.config["train"]["decay_shape"] == "1-sqrt" for c in cells)
    wsd = {c.id for c in design.cells(design.load(QUICKSTART, ["train.schedule=wsd"]))}
    assert wsd.isdisjoint(c.id for c in cells)
    shaped = {c.id for c in design.cells(design.load(QUICKSTART,
                                                     ["train.schedule=wsd", "train.decay_shape=linear"]))}
    assert shaped.isdisjoint(wsd)


def test_a_warmup_count_equal_to_its_fraction_is_the_same_cell():
    # Issue 43: a WSD spec pinning the warm-up count its cells were trained with (a tenth of the
    # steps, before the wsd default became a fixed count) keeps their ids; another count is a new cell.
    wsd = {**BASE, "train": {**BASE.get("train", {}), "steps": 400, "schedule": "wsd"}}
    fraction = {**wsd, "train": {**wsd["train"], "warmup": 0.1, "warmup_steps": None}}
    config = design.cells(design.validate(wsd))[0].config
    assert config["train"]["warmup_steps"] == spec.WSD_WARMUP_STEPS  # the new default: 20, not 40
    pinned = {**wsd, "train": {**wsd["train"], "warmup_steps": 40}}
    old = copy.deepcopy(config)
    old["train"]["warmup_steps"] = None  # as the fraction resolved before: 40 steps
    assert design.cells(design.validate(pinned))[0].id == identity.cell_id(old)
    assert design.cells(design.validate(pinned))[0].config_key == identity.config_key(old)
    # warmup: 0.1 written out is the default's value: 20 steps on wsd, a new cell
    assert design.cells(design.validate(fraction))[0].id != identity.cell_id(old)


def test_a_version_change_names_only_what_changed():
    change = identity.version_change
    assert change("1", "2") == "code version 1 → 2"
    assert change("1", "1, model.parameterisation v2") == "model.parameterisation v1 → v2"
    plug = "1, model.parameterisation my.mod:Givens (my-pkg 0.1.0) source {}"
    assert change(plug.format("1a2b"), plug.format("3c4d")) == "model.parameterisation my.mod:Givens source 1a2b → 3c4d"
    assert change("1", plug.format("1a2b")) == \
        "model.parameterisation built-in → my.mod:Givens (my-pkg 0.1.0) source 1a2b"
    assert change("1, task.name v2", "2") == "code version 1 → 2; task.name v2 → v1"
