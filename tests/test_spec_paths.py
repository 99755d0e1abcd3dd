"""Dotted paths into the baseline (``ablate.spec.paths``): an init parameter of a scheme the baseline
does not select is named as that scheme's, with how to select it — not offered the closest key of
the selected scheme (``r_min`` → ``gamma_min`` sends the user to the wrong parameter)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from ablate import design, spec
from ablate.spec.paths import path_problem

RING_FIX = "select the scheme with its parameter, model.init: {scheme: ring, r_min: …}"


def rotrnn_baseline() -> dict:
    return {"model": {"init": {"scheme": "rotrnn", "gamma_min": 0.5, "gamma_max": 0.999}}, "task": {}, "train": {}}


def test_another_schemes_parameter_is_named_as_that_schemes_with_how_to_select_it():
    said = path_problem(rotrnn_baseline(), "model.init.r_min")
    assert said == f"'r_min' is a parameter of init scheme ring, not of 'rotrnn', the scheme selected: {RING_FIX}"
    assert "gamma_min" not in said
    # a parameter of no scheme is still a typo, with the closest key
    assert path_problem(rotrnn_baseline(), "model.init.gamma_mn") == (
        "'gamma_mn' is not a key of the baseline; did you mean 'model.init.gamma_min'?")
    # a ring baseline: gamma_min is rotrnn's
    ring = {"model": {"init": {"scheme": "ring", "r_min": 0.9}}}
    assert path_problem(ring, "model.init.gamma_min").startswith(
        "'gamma_min' is a parameter of init scheme rotrnn, not of 'ring'")
    assert path_problem(rotrnn_baseline(), "model.init.max_phase.x") is not None  # deeper: not a scheme's key


def spec_file(tmp_path: Path) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(textwrap.dedent("""\
        name: s
        task: {name: listops, max_length: 40, train_size: 100, val_size: 50, test_size: 50}
        model: {d_model: 16, state_dim: 8, layers: 1, parameterisation: rotation, init: {scheme: rotrnn}}
        train: {steps: 5}
        factors:
          arch:
            RotRNN: {model.parameterisation: rotation}
            LRU: {model.parameterisation: complex_diagonal, model.init.r_min: 0.95}
        seeds: 3
    """))
    return path


def test_a_level_and_a_set_of_another_schemes_parameter_say_whose_it_is(tmp_path):
    path = spec_file(tmp_path)
    with pytest.raises(spec.SpecError) as info:
        design.load(path)
    said = str(info.value)
    assert said.startswith(f"{path}:6: factors.arch: model.init.r_min: 'r_min' is a parameter of init scheme ring"), said
    assert RING_FIX in said and "did you mean" not in said
    # --set into the baseline's init: pydantic's unknown key, worded the same
    with pytest.raises(spec.SpecError) as info:
        design.load(path, ["factors={}", "model.init.r_min=0.9"])
    said = str(info.value)
    assert "model.init.r_min: unknown key: 'r_min' is a parameter of init scheme ring, not of 'rotrnn'" in said, said
    assert RING_FIX in said and "gamma_min" not in said
