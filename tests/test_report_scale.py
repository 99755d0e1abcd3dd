"""Reports of an 18- and a 48-cell study (tests/synthetic_study.py: a committed export's real runs
dealt out to a larger grid, no training): the answer on page one, the norm report within its page
budget (body ≤ 8 pages, whole ≤ 12 at 18 cells), and a 48-cell study rendered in one pass with
every page passing the page checker.

Figure-level checks at 4–48 cells (empty axes, overlapping text) are tests/test_report_figures.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import synthetic_study
from pdfs import has, page_problems, pages

from ablate.report.render import render

#: The norm report's page budget at 18 cells (issue 42): the answer and the body, then appendices.
BODY_PAGES, ALL_PAGES = 8, 12


@pytest.fixture(scope="module")
def eighteen(tmp_path_factory: pytest.TempPathFactory) -> Path:
    res = synthetic_study.scaled(synthetic_study.GRIDS[18])
    out = tmp_path_factory.mktemp("scale18")
    render(res.study, ["norm_stability", "accuracy"], out, ("pdf",), data=res)
    return out


def test_the_answer_is_on_page_one_of_both_reports(eighteen: Path) -> None:
    for report in ("norm_stability", "accuracy"):
        first = pages(eighteen / f"{report}.pdf")[0]
        assert has(first, "The answer"), report
        assert has(first, "factor model.normalisation"), report  # the first rows of the table, not just its title


def test_the_18_cell_norm_report_keeps_its_page_budget(eighteen: Path) -> None:
    text = pages(eighteen / "norm_stability.pdf")
    assert len(text) <= ALL_PAGES, f"{len(text)} pages"
    body = next(i for i, page in enumerate(text) if has(page, "Appendix: factor effects"))  # the first appendix
    assert body < BODY_PAGES, f"the body runs to page {body + 1}"
    assert not page_problems(eighteen / "norm_stability.pdf")


def test_a_48_cell_study_renders_in_one_pass(tmp_path: Path) -> None:
    res = synthetic_study.scaled(synthetic_study.GRIDS[48], seeds=3)
    paths = render(res.study, ["norm_stability", "accuracy"], tmp_path, ("pdf",), data=res)
    assert [p.name for p in paths] == ["norm_stability.pdf", "accuracy.pdf"]
    for path in paths:
        # A page-tall figure after a part-filled page leaves that page part empty (a figure is never split);
        # every other finding of the page checker (split identifiers, stray separators) must be absent.
        assert not [p for p in page_problems(path) if ": empty: " not in p], path.name
        assert has(pages(path)[0], "The answer")
