"""SpecError (``ablate.spec.errors``): each fault said once, however many passes or levels found it."""

from __future__ import annotations

from pathlib import Path

import pytest

from ablate.spec import SpecError
from ablate.spec.files import read


def test_a_fault_is_said_once_and_one_several_levels_share_names_them_all():
    plugin = "normalisation plug-in 'nomod:x': no source file for module 'nomod'"
    error = SpecError([("factors.model.normalisation[1]", plugin), ("factors.model.normalisation[1]", plugin),
                       ("factors.name[0]", "'name' has no dot"), ("factors.name[1]", "'name' has no dot"),
                       ("factors.model.layers[0]", "Input should be ≥ 1"), ("factors.model.layers[2]", "other"),
                       ("factors.name", "'name' has no dot")],
                      ["-m model.normalisation", "-m model.normalisation", "f.yaml:4", "f.yaml:5", None, None, None])
    assert str(error).splitlines() == [
        f"-m model.normalisation: factors.model.normalisation[1]: {plugin}",  # two passes: once
        "f.yaml:4: factors.name[0, 1]: 'name' has no dot",  # two levels, the same words: one line, the first place
        "factors.model.layers[0]: Input should be ≥ 1",
        "factors.model.layers[2]: other",
        "factors.name: 'name' has no dot",  # the factor itself is not one of its levels
    ]
    assert error.where == ["-m model.normalisation", "f.yaml:4", None, None, None]


def test_a_value_that_is_not_a_mapping_or_list_is_said_in_yaml_words_not_pydantics() -> None:
    """`--set model=3` said "Input should be a valid dictionary or instance of ModelSpec"."""
    root = Path(__file__).resolve().parents[1] / "studies" / "quickstart.yaml"
    for override, said in (("model=3", "model: must be a mapping; got an integer 3"),
                           ("factors=[1]", "factors: must be a mapping; got a list")):
        with pytest.raises(SpecError) as err:
            read(root, overrides=[override])
        assert said in str(err.value) and "instance of" not in str(err.value) and "Input should" not in str(err.value)


@pytest.mark.parametrize("override,said", [
    # pydantic said "Input should be greater than or equal to 3", and not what the key is
    ("seeds={min: 2}", "seeds.min: must be ≥ 3; got 2 — seeds per cell at the first look (3 at least: nothing is "
                       "tested on fewer)"),
    ("train.steps=0", "train.steps: must be ≥ 1; got 0 — optimiser steps"),
    ("model.init.max_phase=7.0", "model.init.max_phase: must be ≤ 6.28319; got 7.0 — rotation angles drawn from"),
])
def test_a_number_out_of_bounds_says_the_bound_the_value_and_what_the_key_is(override: str, said: str) -> None:
    root = Path(__file__).resolve().parents[1] / "studies" / "quickstart.yaml"
    with pytest.raises(SpecError) as err:
        read(root, overrides=[override])
    assert said in str(err.value) and "Input should" not in str(err.value)
