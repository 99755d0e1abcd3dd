"""Reports of an 18- and a 48-cell study (tests/synthetic_study.py: a committed export's real runs
dealt out to a larger grid, no training): the answer on page one, both reports within their page
budgets (the norm report's body ≤ 8 pages and whole ≤ 12, the accuracy report's body ≤ 3 and whole
≤ 11 at 18 cells), and a 48-cell study rendered in one pass with every page passing the page checker,
none of them (but the last) less than half full.

Figure-level checks at 4–48 cells (empty axes, overlapping text) are tests/test_report_figures.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import synthetic_study
from pdfs import has, page_problems, pages

from ablate.report.render import render

#: The norm report's page budget at 18 cells (issue 42): the answer and the body, then appendices.
BODY_PAGES, ALL_PAGES = 8, 12
#: The accuracy report's at 18 cells: the answer, the summary and its two figures, then every table in an appendix.
#: 11 pages, not 10, since page one says its answer in sentences above the table (the review's first request).
ACCURACY_BODY_PAGES, ACCURACY_PAGES = 3, 11
#: A page (but the last) filled less than this far down is mostly empty: a figure too tall for the rest of the
#: page before it, or two half-page figures that do not share one.
MIN_FILL = 0.5


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
    assert not page_problems(eighteen / "norm_stability.pdf", min_fill=MIN_FILL)


def test_the_18_cell_accuracy_report_keeps_its_page_budget(eighteen: Path) -> None:
    text = pages(eighteen / "accuracy.pdf")
    assert len(text) <= ACCURACY_PAGES, f"{len(text)} pages"
    body = next(i for i, page in enumerate(text) if has(page, "Appendix: cells"))  # the first appendix
    assert body < ACCURACY_BODY_PAGES, f"the body runs to page {body + 1}"
    assert has(text[1], "Summary")  # the summary on page two, its figures by page three
    assert any(has(page, "Main effects") for page in text[1:3])
    # Nothing lost: every table of the report is in an appendix, after the body.
    for table in ("Test accuracy per cell", "Every row:", "Power line", "IQM", "marginal mean", "Analysis of variance",
                  "still improving", "Appendix: tuning", "Appendix: against published numbers", "Appendix: failures"):
        assert any(has(page, table) for page in text[body:]), table
    assert not page_problems(eighteen / "accuracy.pdf", min_fill=MIN_FILL)


def test_a_48_cell_study_renders_in_one_pass(tmp_path: Path) -> None:
    res = synthetic_study.scaled(synthetic_study.GRIDS[48], seeds=3)
    paths = render(res.study, ["norm_stability", "accuracy"], tmp_path, ("pdf",), data=res)
    assert [p.name for p in paths] == ["norm_stability.pdf", "accuracy.pdf"]
    for path in paths:
        # No page but the last less than half full (a page-tall figure after a part-filled page, two half-page
        # figures a page each), no split identifier, no stray separator.
        assert not page_problems(path, min_fill=MIN_FILL), path.name
        assert has(pages(path)[0], "The answer")
