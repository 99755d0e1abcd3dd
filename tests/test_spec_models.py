"""The shapes of a spec (``ablate.spec.models``): defaults, error texts with key paths and
choices, and that ``parse`` checks the shape only while ``ablate.design.validate`` checks all."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest
from support import BASE

from ablate import design, spec
from ablate.spec.models import MAX_WHITE_NOISE_BATCH

ROOT = Path(__file__).resolve().parents[1]


def errors(raw) -> str:
    """The shape error of ``raw``; the whole validation reports the same."""
    with pytest.raises(spec.SpecError) as info:
        spec.parse(raw)
    with pytest.raises(spec.SpecError) as full:
        design.validate(raw)
    assert str(full.value) == str(info.value)
    return str(info.value)


def with_(path: str, value):
    raw = copy.deepcopy(BASE)
    spec.set_path(raw, path, value) if "." in path else raw.__setitem__(path, value)
    return raw


def test_valid_spec_resolves_defaults():
    s = design.validate(BASE)
    assert s.model.init.scheme == "rotrnn"
    assert s.baseline()["task"]["min_length"] == 10  # the task's own default filled in
    assert s.seed_list == [0, 1, 2]
    assert spec.parse(BASE) == s


def test_bad_baseline_choice():
    msg = errors(with_("model.parameterisation", "diagonal"))
    assert msg.startswith("model.parameterisation: 'diagonal' is not one of: rotation, complex_diagonal")


def test_unknown_keys_are_errors_with_suggestion():
    assert "model.layer: unknown key; did you mean 'layers'?" in errors(with_("model.layer", 3))
    assert "trian: unknown key; did you mean 'train'?" in errors(with_("trian", {}))
    assert "task.max_lenght: unknown key" in errors(with_("task.max_lenght", 3))


def test_a_sequential_design_of_too_many_looks_is_an_error_saying_the_step_to_change():
    # Each look's boundaries cost more the more looks there are: 998 looks would have spent hours on them.
    assert errors(with_("seeds", {"min": 3, "max": 1000, "step": 1})).startswith(
        "seeds: 998 looks (3 to 1000 seeds by 1); at most 64: a larger step")
    assert spec.parse(with_("seeds", {"min": 3, "max": 66, "step": 1})).sequential.looks[-1] == 66  # 64 looks


def test_a_measure_or_a_report_named_twice_is_an_error_at_its_key():
    # Both validated: a measure twice counted its comparisons twice in m, under one key.
    seeds = {"min": 3, "max": 6, "step": 3, "measures": ["test_accuracy", "norm.final", "test_accuracy"]}
    assert errors(with_("seeds", seeds)).startswith("seeds.measures: test_accuracy named twice; each measure once")
    msg = errors(with_("reports", ["accuracy", {"name": "accuracy", "sections": ["answer"]}]))
    assert msg.startswith("reports: accuracy named twice; each report once"), msg
    assert errors(with_("train.metrics", ["macro_f1", "macro_f1"])).startswith(
        "train.metrics: macro_f1 named twice; each metric once")


def test_unknown_task_lists_tasks():
    msg = errors(with_("task", {"name": "listopz"}))
    assert msg.startswith("task.name: 'listopz' is not one of: listops")


def test_bad_init_scheme():
    assert "model.init.scheme: 'circle' is not one of: ring, rotrnn" in errors(with_("model.init", {"scheme": "circle"}))
    msg = errors(with_("model.init", {"scheme": "ring", "r_min": 0.99, "r_max": 0.9}))
    assert msg == "model.init: r_min (0.99) must not exceed r_max (0.9)"


def test_heads_must_fit_the_parameterisations_state():
    # rotation: heads of even size; complex diagonal: heads group the state_dim/2 complex modes
    assert "rotation heads need an even size: state_dim/heads = 8/8 is odd" in errors(with_("model.heads", 8))
    raw = with_("model.parameterisation", "complex_diagonal")
    raw["model"]["heads"] = 8
    assert "heads (8) must divide the 4 complex modes (state_dim/2) for complex_diagonal" in errors(raw)
    raw["model"]["parameterisation"] = "real_diagonal"
    assert spec.parse({**raw, "factors": {}}).model.heads == 8  # a real mode per coordinate: 8 heads of 1
    assert "state_dim must be even for rotation (got 7)" in errors(with_("model.state_dim", 7))


def test_parse_checks_the_shape_only():
    """What the design implies is design.validate's: parse accepts a spec whose design fails."""
    raw = with_("factors", {"model.normalisation": ["xi", "zeta"]})
    assert spec.parse(raw).factors["model.normalisation"] == ["xi", "zeta"]
    with pytest.raises(spec.SpecError, match=r"factors.model.normalisation\[1\]: 'zeta' is not one of"):
        design.validate(raw)
    cells = {**BASE, "design": "cells"}
    assert spec.parse(cells).design == "cells"
    with pytest.raises(spec.SpecError, match="design: cells needs a non-empty `cells:` list"):
        design.validate(cells)


def test_not_a_mapping_and_extends_are_refused():
    with pytest.raises(spec.SpecError, match="<spec> must be a mapping"):
        spec.parse([1, 2])
    with pytest.raises(spec.SpecError, match="only a spec file can extend"):
        spec.parse({"extends": "x.yaml", "name": "x"})


def test_spec_and_design_import_no_torch() -> None:
    """Validation stays torch-free (fast): the registries load implementations only when asked."""
    code = ("import sys\nfrom ablate import design, spec, tuning, schema\nfrom ablate.models import catalogue\n"
            "s = design.load('studies/quickstart.yaml')\nassert design.items(s)\nschema.reference_markdown()\n"
            "assert catalogue.PARAMETERISATIONS.names\nassert 'torch' not in sys.modules, 'torch imported'\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 0, res.stderr


@pytest.mark.parametrize(("yaml_text", "message"), [
    ("model: {d_model: true}", "model.d_model: must be an integer; true is a boolean, not a number"),
    ("train: {lr: true}", "train.lr: must be a number; true is a boolean, not a number"),
    ("model: {d_model: '16'}", "model.d_model: must be an integer, not text: write 16 without quotes"),
    ("train: {steps: 2.0}", "train.steps: must be an integer; 2.0 is written as a float: write 2"),
    ("task: {name: listops, train_size: 1e4}", "task.train_size: must be an integer; 10000.0 is written as a float"),
    ("model: {bidirectional: 1}", "model.bidirectional: must be true or false; got an integer 1"),
    ("probes: {every: [5]}", "probes.every: must be an integer; got a list"),
    # No 309 digits to copy; YAML's own NaN; an empty value is nothing, not "null None".
    ("train: {steps: 1e308}", "train.steps: must be an integer; got 1e+308"),
    ("train: {lr: nan}", "train.lr: must be a number; got text 'nan' (YAML writes .nan, .inf, -.inf)"),
    ("train: {steps: }", "train.steps: must be an integer; got nothing (an empty value)"),
    # Bounds a value must keep to train anything: a learning rate, a phase past a full turn.
    ("train: {lr: 1e308}", "train.lr: must be ≤ 10; got 1e+308"),
    ("train: {lr: 1e-320}", "train.lr: must be ≥"),
    ("train: {weight_decay: 1e300}", "train.weight_decay: must be ≤ 10; got 1e+300"),
    ("model: {init: {scheme: rotrnn, max_phase: 7.0}}", "model.init.max_phase: must be ≤ 6.28319; got 7.0"),
])
def test_types_are_strict_where_a_user_would_be_surprised(yaml_text, message):
    """Before: d_model: true became 1, lr: true 1.0, '16' and steps: 2.0 were accepted."""
    text = "name: x\ntask: {name: listops}\n" + yaml_text + "\n"
    if "task:" in yaml_text:
        text = "name: x\n" + yaml_text + "\n"
    with pytest.raises(spec.SpecError) as info:
        spec.reads(text)
    assert message in str(info.value)


def test_an_integer_is_a_number_and_an_exponent_is_a_float():
    s = spec.reads("name: x\ntask: {name: listops}\ntrain: {lr: 1e-3, grad_clip: 2, divergence_norm: 1E6}\n")
    assert (s.train.lr, s.train.grad_clip, s.train.divergence_norm) == (1e-3, 2.0, 1e6)


def test_sizes_that_allocate_their_own_tensors_are_bounded_naming_the_key_and_the_limit():
    # The white-noise probe allocates batch × length × d_model floats whatever the data: 10⁸ passed
    # and every item then ran out of memory.
    assert "probes.white_noise_batch: must be ≤ 100000" in errors(
        with_("probes", {"white_noise_batch": 100_000_000}))
    assert design.validate(with_("probes", {"white_noise_batch": MAX_WHITE_NOISE_BATCH}))  # the bound itself passes
    # A vocabulary is a row per token of the embedding and output layers.
    for task, key in (("induction_heads", "vocab"), ("delayed_copy", "vocab"), ("selective_copy", "data_vocab"),
                      ("selective_copy", "noise_vocab")):
        raw = with_("task", {"name": task, key: 10**12})
        assert f"task.{key}: must be ≤ 1000000" in errors(raw), task
