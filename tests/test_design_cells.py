"""The cells a comparison selects (``ablate.design.cells.comparison_problems``): a selector must be
valid for, and match a cell of, some study it is given to."""

from __future__ import annotations

from support import DESIGN_BASE

from ablate import design


def specs() -> dict:
    heads = design.validate({**DESIGN_BASE, "name": "a", "factors": {"model.heads": [2, 4]}})
    layers = design.validate({**DESIGN_BASE, "name": "b", "factors": {"model.layers": [1, 2]}})
    return {"a": heads, "b": layers}


def test_a_valid_selection_has_no_problem():
    assert design.comparison_problems(specs(), [{"model.heads": 4}]) == []  # a factor of one study suffices
    assert design.comparison_problems(specs(), {"a": [{"model.heads": 2}]}) == []
    assert design.comparison_problems(specs(), []) == []


def test_a_selection_names_its_problem():
    assert design.comparison_problems(specs(), {"c": [{"model.heads": 2}]}) == [
        "compare: cells for 'c', which is not among the studies"]
    assert design.comparison_problems(specs(), [{"model.heads": 3}]) == [
        '--cells {"model.heads":3} matches no cell of a, b']
    lines = design.comparison_problems(specs(), {"a": [{"model.nope": 1}]})
    assert len(lines) == 1 and lines[0].startswith("--cells (study a): ") and "model.nope" in lines[0]


def test_a_plugin_that_cannot_be_found_is_a_spec_error_at_its_setting():
    """It used to escape validation as an internal error (the cell id hashes a plug-in's source)."""
    from support import errors

    msg = errors(model={**DESIGN_BASE["model"], "normalisation": "nosuch.mod:X"})
    assert msg.startswith("model.normalisation: normalisation plug-in 'nosuch.mod:X': cannot find 'nosuch.mod'")
