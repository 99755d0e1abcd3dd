"""The one selector matcher (``ablate.design.selectors``): its documented semantics, and that results
(a reference's ``cell:``) select with it."""

from __future__ import annotations

import polars as pl
import pytest
from support import VARIANT, make

from ablate import design
from ablate.design.selectors import same
from ablate.spec import SpecError


def labels(spec, selector) -> list[str]:
    return [c.label for c in design.select(spec, selector)]


@pytest.fixture(scope="module")
def grid():
    return make(factors={"variant": VARIANT, "model.layers": [1, 2], "model.dropout": {"none": 0.0, "some": 0.1}})


def test_same_semantics():
    assert same(2, 2.0) and same(0.0, 0)  # numbers compare by value
    assert not same(True, 1) and not same(1, True) and not same(False, 0.0)  # booleans never equal numbers
    assert same(True, True) and not same("1", 1)
    assert same(3, [1, 3]) and not same(3, [1, 2])  # a list means any of
    assert same({"a": 1, "b": 2}, {"a": 1}) and not same({"a": 1}, {"a": 1, "b": 2})  # the keys it names
    assert not same(1, {"a": 1})


def test_a_factor_matches_by_label_or_value(grid):
    assert labels(grid, {"model.layers": 2}) == labels(grid, {"model.layers": "2"}) == [
        "RotRNN, layers=2, none", "RotRNN, layers=2, some", "LRU, layers=2, none", "LRU, layers=2, some"]
    assert labels(grid, {"model.dropout": "some"}) == labels(grid, {"model.dropout": 0.1})  # a given label
    assert labels(grid, {"variant": "LRU", "model.dropout": 0}) == ["LRU, layers=1, none", "LRU, layers=2, none"]
    # a named factor's level by its value: the mapping matches the keys it names
    assert labels(grid, {"variant": {"model.normalisation": "gamma"}}) == labels(grid, {"variant": "LRU"})
    assert labels(grid, {"variant": ["RotRNN", "LRU"], "model.layers": [1]}) == [
        "RotRNN, layers=1, none", "RotRNN, layers=1, some", "LRU, layers=1, none", "LRU, layers=1, some"]


def test_a_dotted_path_matches_the_resolved_config(grid):
    assert labels(grid, {"model.parameterisation": "complex_diagonal"}) == labels(grid, {"variant": "LRU"})
    assert labels(grid, {"model.init.scheme": "rotrnn", "model.layers": 1, "variant": "RotRNN"}) == [
        "RotRNN, layers=1, none", "RotRNN, layers=1, some"]
    assert labels(grid, {"model.bidirectional": 0}) == []  # false is not 0
    assert len(labels(grid, {"model.bidirectional": False})) == 8
    assert labels(grid, {"model.no_such_key": 1}) == []


def test_results_references_select_with_the_design_matcher():
    from ablate.results import Results

    ref = {"value": 0.5, "source": "a paper"}
    s = make(factors={"variant": VARIANT, "model.layers": [1, 2]},
             references=[{**ref, "cell": {"variant": {"model.normalisation": "gamma"}, "model.layers": 2}},
                         {**ref, "cell": {"model.layers": [1.0]}}, {**ref, "cell": {}}])
    res = Results(study="s", spec=s, spec_hash="", stores={}, factors=list(s.factors),
                  trials=pl.DataFrame({"cell_id": [], "cell_label": []}, schema={"cell_id": pl.Utf8,
                                                                                  "cell_label": pl.Utf8}))
    refs = res.references()
    assert refs["cell_labels"].to_list() == [["LRU, layers=2"], ["RotRNN, layers=1", "LRU, layers=1"],
                                             ["RotRNN, layers=1"]]
    assert refs["cell"].to_list()[2] == "baseline"


def test_selectors_from_the_command_line():
    from ablate.design import parse_selector

    assert parse_selector("model.heads=8") == {"model.heads": 8}
    assert parse_selector("model.heads=[4, 8], variant=RotRNN") == {"model.heads": [4, 8], "variant": "RotRNN"}
    assert parse_selector("{model.heads: 8, model.normalisation: xi}") == {"model.heads": 8, "model.normalisation": "xi"}
    assert parse_selector("train.lr=1.0e-3") == {"train.lr": 0.001}  # YAML 1.1, as --set reads values
    for bad in ("model.heads", "", "=8", "[1, 2]"):
        with pytest.raises(SpecError, match="--cells"):
            parse_selector(bad)


def test_a_reports_reference_may_be_a_selector_of_one_cell():
    """``-p reference='variant=LRU'``: a factor=level selector, as ``--cells`` reads it, names the
    one cell with runs it matches; one matching several, none, or naming no factor is refused
    with the cells there are."""
    from ablate.results import Results

    s = make(factors={"variant": VARIANT, "model.layers": [1, 2]})
    grid = design.cells(s)
    res = Results(study="s", spec=s, spec_hash="", stores={}, factors=list(s.factors),
                  trials=pl.DataFrame({"cell_id": [c.id for c in grid], "cell_label": [c.label for c in grid]}))
    by_label = {c.label: c.id for c in grid}
    assert res.reference_cell("variant=LRU, model.layers=2")[0] == by_label["LRU, layers=2"]
    assert res.reference_cell("{variant: RotRNN, model.layers: 1}")[0] == by_label["RotRNN, layers=1"]
    assert res.reference_cell("model.normalisation=gamma, model.layers=1")[0] == by_label["LRU, layers=1"]
    assert res.reference_cell("LRU, layers=2")[0] == by_label["LRU, layers=2"]  # a label still names its cell
    for text, said in [("variant=LRU", "it matches 'LRU, layers=1', 'LRU, layers=2', not one"),
                       ("variant=GRU", "'GRU' is not a level of variant"),
                       ("arch=LRU", "'arch' is neither a factor nor a dotted path"),
                       ("model.layers=3", "3 is not a level of model.layers"),
                       ("model.dropout=0.1", "it matches no cell, not one")]:
        with pytest.raises(KeyError) as caught:
            res.reference_cell(text)
        message = caught.value.args[0]
        assert message.startswith(f"no cell with id or label {text!r}; as a selector: ") and said in message, message
        assert message.endswith("cells are: 'RotRNN, layers=1', 'RotRNN, layers=2', 'LRU, layers=1', 'LRU, layers=2'")
