"""The page checker (``scripts/check_pages.py``): it finds an identifier split inside a word, a
line that begins with a separator and a near-empty page — and lets a break at ``=`` or ``,`` be."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.backends.backend_pdf import PdfPages
from matplotlib.figure import Figure
from pdfs import page_problems, text_problems

needs_poppler = pytest.mark.skipif(shutil.which("pdftotext") is None or shutil.which("pdftoppm") is None,
                                   reason="poppler-utils is not installed")
A4 = (8.27, 11.69)


def _page(pdf: PdfPages, lines: list[tuple[float, str]]) -> None:
    fig = Figure(figsize=A4)
    FigureCanvasAgg(fig)
    for y, text in lines:
        fig.text(0.1, y, text, fontsize=10)
    pdf.savefig(fig)


@needs_poppler
def test_a_bad_pdf_is_caught_page_by_page(tmp_path: Path) -> None:
    bad = tmp_path / "bad.pdf"
    with PdfPages(bad) as pdf:
        # page 1: a level broken inside, a line that starts with ", ", and nothing below the top tenth
        _page(pdf, [(0.93, "Variants: complex_diagonal and rotation, normalisation=xi."),
                    (0.91, "parameterisation=complex_diagon"), (0.89, "al, normalisation=xi, layers=1"),
                    (0.87, "parameterisation=rotation"), (0.85, ", normalisation=gamma")])
        # page 2: full, its identifiers broken where they may be
        _page(pdf, [(0.93, "parameterisation="), (0.91, "complex_diagonal, layers=1"), (0.08, "the foot of the page")])
        _page(pdf, [(0.93, "the last page may be short")])
    found = page_problems(bad)
    assert found == ["p. 1: empty: 12% full", "p. 1: leading: , normalisation=gamma",
                     "p. 1: split: complex_diagon / al (complex_diagonal)"]


def test_breaks_after_the_separators_are_where_identifiers_may_break() -> None:
    good = ["parameterisation=\ncomplex_diagonal, normalisation=\nxi, layers=1\nthe reference\nrotation · xi · 4\n"]
    assert text_problems(good) == []
    # an identifier the text never prints whole is found when named
    assert text_problems(["model.normali\nsation=xi\n"], ["model.normalisation"]) == [
        "p. 1: split: model.normali / sation (model.normalisation)"]
    assert text_problems(["a level complex_\ndiagonal\n"]) == ["p. 1: split: complex_ / diagonal"]
    assert text_problems(["α\n= 0.05 when\n"]) == ["p. 1: leading: = 0.05 when"]
