"""How a report notebook puts text, tables and figures on the page (the seam with IPython's display),
and exports them for a paper.

The notebooks call these and nothing else to show output, so every report lays out its blocks
the same way: markdown paragraphs, tables with their heading and introduction as one block
(``format.table_block``), figures as embedded vector images with their title
(``plotting.figure_html``). After ``export_to(directory, report)`` every table shown with a
``name`` is also written to ``directory/tables/<report>-<name>.{csv,tex}`` and every figure to
``directory/figures/<report>-<name>.{pdf,svg,png}``; names are stable (given by the notebook, a
repeated one numbered ``-2``, ``-3`` in order), so a paper's ``\\includegraphics`` keeps working when
the report is rendered again.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from IPython.display import HTML, Markdown, display
from matplotlib.figure import Figure

from ablate.report import format as fmt
from ablate.report import plotting

__all__ = ["Export", "chunks", "export_table", "export_to", "exported", "say", "show", "show_figure", "show_text"]


class Export:
    """Where a report's tables and figures go, and what it has written there."""

    def __init__(self, directory: Path | None = None, report: str = "") -> None:
        self.directory = Path(directory) if directory else None
        self.report = report
        self.written: list[Path] = []
        self._seen: dict[str, int] = {}

    def stem(self, name: str, kind: str = "") -> str:
        """``<report>-<name>``, numbered when a ``kind`` (table, figure) of that name came before
        (``-2``, ``-3``, …)."""
        key = f"{kind}:{name}"
        self._seen[key] = self._seen.get(key, 0) + 1
        n = self._seen[key]
        return "-".join(filter(None, [self.report, name])) + (f"-{n}" if n > 1 else "")

    def table(self, frame: pd.DataFrame, name: str, caption: str = "", data: pd.DataFrame | None = None) -> None:
        if self.directory is not None:
            self.written += fmt.save_table(frame, self.directory / "tables", self.stem(name, "table"), caption,
                                           data)

    def figure(self, fig: Figure, name: str) -> None:
        if self.directory is not None:
            self.written += plotting.save_figure(fig, self.directory / "figures", self.stem(name, "figure"))


_EXPORT = Export()


def export_to(directory: str | Path | None, report: str) -> Export:
    """Export every named table and figure of ``report`` under ``directory`` (None: export nothing);
    what an earlier render of ``report`` left there goes first, so no stale file stays behind."""
    global _EXPORT
    _EXPORT = Export(Path(directory) if directory else None, report)
    if _EXPORT.directory is not None:
        for kind in ("figures", "tables"):
            for old in (_EXPORT.directory / kind).glob(f"{report}-*"):
                old.unlink()
    return _EXPORT


def exported() -> list[Path]:
    """The files written since ``export_to``."""
    return list(_EXPORT.written)


def export_table(frame: pd.DataFrame, name: str, caption: str = "", data: pd.DataFrame | None = None) -> None:
    """Export a table shown some other way (inside a figure's block) as ``name``."""
    _EXPORT.table(frame, name, caption, data)


def say(*paragraphs: str) -> None:
    """Markdown paragraphs (empty ones skipped)."""
    display(Markdown("\n\n".join(fmt.no_break_before_relations(p) for p in paragraphs if p)))


def show(frame: pd.DataFrame, intro: str | Iterable[str] = (), heading: str | None = None, *,
         name: str | None = None, data: pd.DataFrame | None = None, align_left: Iterable[str] = ()) -> None:
    """A display frame as a table, with its heading and introduction kept on its page; exported as
    ``name`` (with ``data``, the numeric frame behind it) when the report exports. ``align_left``:
    the columns set flush left (default: the text columns ``format.LEFT`` names)."""
    display(HTML(fmt.table_block(frame, intro, heading, align_left)))
    if name:
        intro_text = intro if isinstance(intro, str) else " ".join(i for i in intro if i)
        _EXPORT.table(frame, name, heading or _plain(intro_text), data)


def show_figure(fig: Figure, title: str | None = None, after: str = "", *, name: str | None = None) -> None:
    """A figure (with its title and ``after``, e.g. a table's HTML) as one unsplittable block;
    exported as ``name`` when the report exports."""
    display(HTML(plotting.figure_html(fig, title, after)))
    if name:
        _EXPORT.figure(fig, name)


def show_text(text: str, title: str | None = None) -> None:
    """Preformatted text (a spec as YAML) under a bold title."""
    display(HTML(fmt.preformatted_block(text, title)))


def chunks(seq: Sequence[Any] | Iterable[Any], n: int) -> list[list[Any]]:
    """``seq`` in pieces of at most ``n`` (one figure per piece); one empty piece when ``seq`` is."""
    seq = list(seq)
    return [seq[i : i + n] for i in range(0, len(seq), n)] or [[]]


def _plain(markdown: str) -> str:
    """A caption from a markdown introduction: its first sentence, without the markup."""
    text = markdown.replace("**", "").replace("\\*", "*").replace("`", "")
    first = text.split(". ")[0].strip()
    return first.rstrip(".") + "." if first else ""
