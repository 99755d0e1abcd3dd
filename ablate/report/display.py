"""How a report notebook puts text, tables and figures on the page (the seam with IPython's display).

The notebooks call these and nothing else to show output, so every report lays out its blocks
the same way: markdown paragraphs, tables with their heading and introduction as one block
(``format.table_block``), figures as embedded images with their title (``plotting.figure_html``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import pandas as pd
from IPython.display import HTML, Markdown, display
from matplotlib.figure import Figure

from ablate.report import format as fmt
from ablate.report import plotting

__all__ = ["chunks", "say", "show", "show_figure", "show_text"]


def say(*paragraphs: str) -> None:
    """Markdown paragraphs (empty ones skipped)."""
    display(Markdown("\n\n".join(p for p in paragraphs if p)))


def show(frame: pd.DataFrame, intro: str | Iterable[str] = (), heading: str | None = None) -> None:
    """A display frame as a table, with its heading and introduction kept on its page."""
    display(HTML(fmt.table_block(frame, intro, heading)))


def show_figure(fig: Figure, title: str | None = None, after: str = "") -> None:
    """A figure (with its title and ``after``, e.g. a table's HTML) as one unsplittable block."""
    display(HTML(plotting.figure_html(fig, title, after)))


def show_text(text: str, title: str | None = None) -> None:
    """Preformatted text (a spec as YAML) under a bold title."""
    display(HTML(fmt.preformatted_block(text, title)))


def chunks(seq: Sequence[Any] | Iterable[Any], n: int) -> list[list[Any]]:
    """``seq`` in pieces of at most ``n`` (one figure per piece); one empty piece when ``seq`` is."""
    seq = list(seq)
    return [seq[i : i + n] for i in range(0, len(seq), n)] or [[]]
