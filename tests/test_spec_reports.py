"""A ``reports:`` entry with options (ablate.spec.reports): its shape here, what the design knows
(cells, factors, the reference) by ``design.check``; every wrong entry names its key path, the valid
choices and the closest one."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from ablate import design
from ablate.report import default_sections, headings
from ablate.spec import SpecError

QUICKSTART = yaml.safe_load((Path(__file__).resolve().parents[1] / "studies" / "quickstart.yaml").read_text())


def _with(reports: list) -> dict:
    spec = copy.deepcopy(QUICKSTART)
    spec["reports"] = reports
    return spec


def _error(reports: list) -> str:
    with pytest.raises(SpecError) as exc:
        design.validate(_with(reports))
    return str(exc.value)


def test_names_and_entries_with_options_mix() -> None:
    spec = design.validate(_with(["accuracy", {"name": "norm_stability", "sections": ["the-answer", "summary"],
                                               "cells": {"model.normalisation": "xi"},
                                               "order": ["model.parameterisation"],
                                               "reference": "parameterisation=complex_diagonal, normalisation=xi"}]))
    assert spec.report_names == ["accuracy", "norm_stability"]
    opts = spec.report_options("norm_stability")
    assert opts.sections == ["the-answer", "summary"] and opts.selectors == [{"model.normalisation": "xi"}]
    assert spec.report_options("accuracy").sections is None  # a bare name: the whole report


def test_sections_are_the_notebooks_headings() -> None:
    assert headings("accuracy")[:2] == ("the-answer", "summary")
    assert "appendix-factor-effects" in headings("norm_stability")
    # Both reports: the answer, the summary and the figures, then the appendices, then provenance.
    for report in ("accuracy", "norm_stability"):
        shown = headings(report)
        first = next(i for i, h in enumerate(shown) if h.startswith("appendix-"))
        assert not any(h.startswith("appendix-") for h in shown[:first]) and shown[-1] == "provenance", report
        assert all(h.startswith("appendix-") for h in shown[first:] if h not in ("definitions", "provenance")), report
    assert headings("accuracy")[2:4] == ("main-effects", "per-cell")
    assert {"appendix-cells", "appendix-comparisons-with-the-reference", "appendix-few-run-estimates",
            "appendix-factor-effects", "appendix-convergence", "appendix-tuning"} <= set(headings("accuracy"))
    assert default_sections("accuracy") == headings("accuracy")  # every table by default, in its appendix


@pytest.mark.parametrize(("entry", "expected"), [
    ({"name": "norm_stabilty"}, "reports[0].name: 'norm_stabilty' is not one of: accuracy, norm_stability"),
    ({"name": "accuracy", "sections": ["summray"]}, "reports[0].sections[0]: 'summray' is not one of: the-answer"),
    ({"name": "accuracy", "sections": ["summary", "summary"]}, "reports[0].sections: lists a section twice"),
    ({"name": "accuracy", "order": ["model.normalisaton"]}, "did you mean 'model.normalisation'?"),
    ({"name": "accuracy", "cells": {"model.normalisation": "ksi"}}, "reports[0].cells"),
    ({"name": "accuracy", "reference": "rotation, xi"}, "reports[0].reference: 'rotation, xi' is not one of"),
    ({"name": "accuracy", "colour": "red"}, "reports[0].colour"),
    ({"name": "accuracy", "cells": {"model.normalisation": "gamma"}},
     "reports[0].reference: the selected cells leave out the baseline"),
])
def test_wrong_options_name_their_key_path(entry: dict, expected: str) -> None:
    assert expected in _error([entry])


def test_the_closest_section_is_suggested() -> None:
    assert "did you mean 'summary'?" in _error([{"name": "accuracy", "sections": ["summray"]}])


def test_the_docs_list_every_section_of_both_reports() -> None:
    """docs/reports.md names each report's sections as the notebooks head them (a renamed heading
    breaks a user's ``sections:``: the docs must follow)."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "reports.md").read_text()
    for report in ("accuracy", "norm_stability"):
        listed = [s for s in headings(report) if f"`{s}`" not in text]
        assert not listed, f"docs/reports.md does not name {report}'s sections {listed}"
