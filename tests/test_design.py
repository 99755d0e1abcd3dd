"""Designs, factors, conditions and constraints (``ablate.design``): exact cell sets, labels,
items, and the errors that name key paths."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from support import BASE, DESIGN_BASE, VARIANT, errors, make

from ablate import design, spec


def spec_errors(raw) -> str:
    with pytest.raises(spec.SpecError) as info:
        design.validate(raw)
    return str(info.value)


def with_(path: str, value):
    raw = yaml.safe_load(yaml.safe_dump(BASE))
    spec.set_path(raw, path, value) if "." in path else raw.__setitem__(path, value)
    return raw


def grid(**parts) -> list[dict[str, str]]:
    return [c.labels for c in design.cells(make(**parts))]


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


def test_bad_factor_level_names_path_and_choices():
    msg = spec_errors(with_("factors", {"model.normalisation": ["xi", "zeta"]}))
    assert msg == ("factors.model.normalisation[1]: 'zeta' is not one of: xi, gamma, gamma_recomputed, none; "
                   "or a plug-in as package.module:attribute")


def test_bad_factor_heads():
    msg = spec_errors(with_("factors", {"model.heads": [2, 3]}))
    assert msg.startswith("factors.model.heads[1]: model: Value error") or "heads (3) must divide" in msg


def test_factor_path_must_exist():
    assert "factors.model.depth: 'depth' is not a key of the baseline" in spec_errors(with_("factors", {"model.depth": [1]}))


def test_grid_counts_and_seeds():
    s = design.validate(BASE)
    cells = design.cells(s)
    assert len(cells) == 4
    assert len(design.items(s)) == 12
    assert {c.settings["model.parameterisation"] for c in cells} == {"rotation", "complex_diagonal"}


def test_the_baseline_is_validated_only_where_a_cell_uses_it():
    root = Path(__file__).resolve().parents[1] / "studies"
    # Every cell sets heads: the baseline's 3 (which does not divide state_dim 64) is never used.
    heads = design.load(root / "rotation_heads.yaml", ["model.heads=3"])
    assert {c.config["model"]["heads"] for c in design.cells(heads)} == {1, 4, 16, 32}
    # No cell sets heads: every cell keeps the baseline's, and the error is the baseline's own, located.
    with pytest.raises(spec.SpecError) as info:
        design.load(root / "quickstart.yaml", ["model.heads=3"])
    line = (root / "quickstart.yaml").read_text(encoding="utf-8").splitlines().index("model:") + 1
    # the baseline's model block is the file's, its heads the command line's: both are named
    assert str(info.value) == (f"{root / 'quickstart.yaml'}:{line} and --set model.heads: model: heads (3) must divide "
                               "the 32 state_dim for rotation; valid heads: 1, 2, 4, 8, 16, 32")
    assert "the cell" not in str(info.value)
    # A baseline value moved by a factor only where it applies is checked in the cells that keep it.
    msg = errors(model={"d_model": 16, "state_dim": 16, "layers": 1, "heads": 3},
                 factors={"model.heads": {"levels": [2, 4], "when": {"model.parameterisation": "rotation"}},
                          "model.parameterisation": ["rotation", "real_diagonal"]})
    assert "heads (3) must divide the 16 state_dim for real_diagonal" in msg and "for rotation" not in msg
    ok = make(model={"d_model": 16, "state_dim": 15, "layers": 1, "heads": 3},
              factors={"model.parameterisation": ["real_diagonal"]})
    assert design.cells(ok)[0].config["model"]["heads"] == 3  # 15 real modes: 3 heads of 5


def _load_errors(raw) -> str:
    with pytest.raises(spec.SpecError) as info:
        design.loads(yaml.safe_dump(raw), "t.yaml")
    return str(info.value)


def test_store_limits_are_checked_before_a_spec_runs_with_the_limit_in_the_message():
    """Before: a 600-character study name passed validate, then run crashed in MLflow after
    writing the Optuna study."""
    assert "name: 600 characters; at most 240" in _load_errors(with_("name", "a" * 600))
    design.loads(yaml.safe_dump(with_("name", "a" * 240)), "t.yaml")
    long_label = {"levels": {"x" * 300: 1, "y": 2}}
    text = _load_errors(with_("factors", {"model.layers": long_label}))
    assert "the cell label" in text and "at most 232" in text and "x" * 300 not in text
    named = {"v" * 300: {"A": {"model.layers": 1}, "B": {"model.layers": 2}}}
    assert "MLflow keys hold at most 250" in _load_errors(with_("factors", named))
    # A stored spec is read whatever the limits: results of a study that ran stay readable.
    assert design.validate(with_("name", "a" * 600)).name == "a" * 600


def test_a_task_too_large_for_this_machine_is_refused_with_the_bound():
    """Before: task.train_size: 1e12 validated and `run` generated data forever."""
    from ablate.tasks.registry import memory_limit

    text = _load_errors(with_("task.train_size", 10**12))
    assert "task.train_size: its data would take about" in text and "training examples of this length fit" in text
    most = int(text.split("at most about ")[1].split(" ")[0].replace(",", ""))
    assert 0 < most < memory_limit()
    design.loads(yaml.safe_dump(with_("task.train_size", most)), "t.yaml")  # the bound given is one that fits
    factor = {"task.train_size": [100, 10**12]}
    assert "factors: the cell " in _load_errors(with_("factors", factor))


def test_a_level_given_twice_is_named_once_with_how_often_and_never_merged():
    # Two equal levels used to get different labels ('"xi"', 'xi') and pass as one cell.
    assert errors(factors={"model.normalisation": ["xi", "xi"]}).endswith(
        "factors.model.normalisation: level xi appears twice; each level (and label) once")
    assert "level gamma appears twice" in errors(factors={"model.normalisation": ["xi", "gamma", "gamma"]})
    assert "level 2 appears 3 times" in errors(factors={"model.layers": [2, 2, 2]})
    # Values that only look alike keep their exact values as labels.
    lr = design.validate({**DESIGN_BASE, "factors": {"train.lr": [1.0e-3, 1.0000001e-3]}})
    assert len(design.cells(lr)) == 2


def test_a_factor_the_family_does_not_read_is_refused_where_it_would_train_one_model_twice():
    msg = errors(model={**DESIGN_BASE["model"], "family": "gru"}, factors={"model.normalisation": ["xi", "gamma"]})
    assert ("the cell (normalisation=gamma) trains the same model as (normalisation=xi): family gru does not read "
            "model.normalisation. Vary it only where it applies (when: {model.family: linear_rnn})") in msg
    both = errors(factors={"model.family": ["linear_rnn", "mingru"], "model.heads": [1, 2]})
    assert "(family=mingru, heads=2) trains the same model as (family=mingru, heads=1)" in both
    # Varied only where the family reads it: three cells, each its own model.
    ok = design.validate({**DESIGN_BASE, "factors": {
        "model.family": ["linear_rnn", "mingru"],
        "model.heads": {"levels": [1, 2], "when": {"model.family": "linear_rnn"}}}})
    assert len(design.cells(ok)) == 3


def test_heads_an_lrus_levels_do_not_read_are_refused_in_a_new_spec_and_read_in_a_stored_one():
    """An LRU (complex diagonal + γ) at several head counts trains one model several times (its heads
    only group modes for the probes): its seeds would enter the analysis as replicates of three."""
    lru = {"variant": {"RotRNN": {"model.parameterisation": "rotation", "model.normalisation": "xi"},
                       "LRU": {"model.parameterisation": "complex_diagonal", "model.normalisation": "gamma"}},
           "model.heads": [1, 2, 4]}
    raw = {**DESIGN_BASE, "factors": lru}
    msg = _load_errors(raw)
    assert ("the cell (heads=2, LRU) trains the same model as (heads=1, LRU): complex_diagonal with normalisation "
            "gamma does not read model.heads (its heads only group modes for the norm probes)") in msg
    assert "(heads=4, LRU) trains the same model as (heads=1, LRU)" in msg and "(RotRNN" not in msg
    assert len(design.cells(design.validate(raw))) == 6  # a study stored with them reads as it ran
    # Under ξ, which normalises each group of modes, the heads are read: six models.
    xi = {**lru, "variant": {**lru["variant"], "LRU": {"model.parameterisation": "complex_diagonal",
                                                       "model.normalisation": "xi"}}}
    design.loads(yaml.safe_dump({**DESIGN_BASE, "factors": xi}), "t.yaml")


def test_every_committed_study_validates():
    root = Path(__file__).resolve().parents[1]
    specs = sorted((root / "studies").rglob("*.yaml"))
    assert len(specs) > 10
    for path in specs:
        design.load(path)


def test_a_sequential_design_on_the_cv_over_layers_needs_two_layers_in_every_cell():
    """`seeds.measures: [norm.depth]` on one-layer cells validated, and the looks would have added seeds
    to the last for comparisons that can never be decided (a one-layer run has no CV over layers)."""
    from support import spec_dict

    raw = spec_dict(BASE, factors={"model.layers": [2, 1]},
                    seeds={"min": 3, "max": 6, "step": 3, "measures": ["norm.depth"]})
    with pytest.raises(spec.SpecError) as refused:
        design.validate(raw)
    said = str(refused.value)
    assert "seeds.measures" in said and "1 cell has one (layers=1)" in said and "drop norm.depth" in said, said
    raw["factors"] = {"model.layers": [2, 4]}
    assert design.validate(raw).sequential.measures == ["norm.depth"]
    raw["seeds"]["measures"] = ["norm.training"]  # another norm measure: any layer count
    raw["factors"] = {"model.layers": [2, 1]}
    design.validate(raw)
