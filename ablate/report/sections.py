"""Report sections from plug-ins: a researcher's own analysis, rendered beside the built-in reports.

A section is a function ``section(results) -> iterable of blocks``: it receives the study's
``ablate.results.Results`` (the tidy frames every report reads) and yields, in page order,

- text: a paragraph (inline markdown: ``**bold**``, ``*emphasis*``, ```code```);
- a matplotlib ``Figure``;
- a table: a pandas or polars ``DataFrame``;
- ``(title, figure or table)``: the block with its heading, and the name its export is written under.

It is installed as an entry point of group ``ablate.report_sections`` (``ablate.plugins``) or named
by path, and chosen by name in the spec's ``reports:``. ``render.render`` makes it a page of its
own, ``<name>.html`` / ``<name>.pdf``, laid out as the built-in reports are (``format.table_block``,
``plotting.figure_html``), and with ``--export`` writes its figures to ``figures/<name>-<title>.*``
and tables to ``tables/<name>-<title>.*``. A section that fails, or yields something else, raises
``SectionError`` naming it (and, with ``ABLATE_TRACEBACK=1``, prints the section's own traceback).
A section's target is resolved — imported and its attribute found, not run — whenever a command
asks ``is_section`` of it, so ``ablate report`` refuses one that cannot be loaded before any page
renders (``ablate validate`` resolves them through ``ablate.models.contract``).
"""

from __future__ import annotations

import html as _html
import re
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.markup import escape

from ablate import plugins, terminal
from ablate.report import COMPARISONS, REPORTS

if TYPE_CHECKING:
    from ablate.results import Results


class SectionError(terminal.Refused):
    """A report-section plug-in cannot be loaded, failed or broke its contract; the message names
    it. A refusal (exit 2) where it reaches the command: one that cannot be loaded is found while
    the command checks its reports, before anything renders (a render turns a failure into its
    own error, exit 1)."""

    def __init__(self, message: str) -> None:
        super().__init__(escape(message))  # printed as rich markup; str() is the message itself
        self.args = (message,)

    def __str__(self) -> str:
        return str(self.args[0])


def is_section(name: str) -> bool:
    """True for a report-section plug-in (installed, or by path), False for a built-in report or
    any other name. A section's target is resolved here (``resolve``): ``SectionError`` when it
    cannot be imported or has no such attribute."""
    if name in REPORTS or name in COMPARISONS:
        return False
    if not (any(p.name == name for p in plugins.installed_of("section")) or plugins.is_target(name)):
        return False
    resolve(name)
    return True


def plugin_of(name: str) -> plugins.Plugin:
    return plugins.find("section", name)


def resolve(name: str) -> Any:
    """The function section ``name`` names, imported but not run; ``SectionError`` naming it
    (its import's traceback printed with ABLATE_TRACEBACK=1) when it cannot be loaded."""
    plugin = plugin_of(name)
    try:
        return plugin.load()
    except plugins.PluginError as exc:
        raise SectionError(f"{exc}{terminal.plugin_traceback(exc.__cause__, f'report section {name!r}')}") from None


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower() or "block"


def stem(name: str) -> str:
    """The file name (without suffix) of a section's page: its name, a path's punctuation as ``-``."""
    return name if re.fullmatch(r"[A-Za-z0-9_-]+", name) else _slug(name)


def _frame(item: Any) -> Any:
    """A pandas frame for a pandas or polars one; None for anything else."""
    import pandas as pd

    if isinstance(item, pd.DataFrame):
        return item
    if type(item).__module__.startswith("polars") and hasattr(item, "to_pandas"):
        return item.to_pandas()
    return None


def body(name: str, results: Results, export_dir: Path | None = None) -> tuple[str, list[Path]]:
    """The section's page body (HTML) and, with ``export_dir``, the files it exported there."""
    from matplotlib.figure import Figure

    from ablate.report import format as fmt
    from ablate.report import plotting
    from ablate.report.display import Export

    plugin = plugin_of(name)
    who = f"report section {name!r} ({plugin.target}, {plugin.origin})"
    section = resolve(name)
    export = Export(export_dir, stem(plugin.name))
    parts = [f"<h1>{_html.escape(results.study)} — {_html.escape(plugin.name.replace('_', ' '))}</h1>"]
    try:
        with plotting.style():
            blocks: Iterable[Any] = section(results)
            for k, block in enumerate(blocks, 1):
                title, item = block if isinstance(block, tuple) and len(block) == 2 else (None, block)
                name_k = _slug(str(title)) if title else f"{k}"
                if isinstance(item, str):
                    parts.append((f"<h2>{_html.escape(str(title))}</h2>" if title else "")
                                 + f"<p>{fmt.inline_markdown(item)}</p>")
                elif isinstance(item, Figure):
                    parts.append(plotting.figure_html(item, str(title) if title else None))
                    export.figure(item, name_k)
                elif (frame := _frame(item)) is not None:
                    parts.append(fmt.table_block(frame, heading=str(title) if title else None))
                    export.table(frame, name_k)
                else:
                    raise SectionError(f"{who}: block {k} is a {type(item).__name__}; a section yields text, "
                                       "matplotlib figures, pandas or polars frames, or (title, one of those)")
    except SectionError:
        raise
    except Exception as exc:  # the plug-in's own failure is reported as its, in one line
        raise SectionError(f"{who} failed: {type(exc).__name__}: {terminal.one_line(exc)}"
                           f"{terminal.plugin_traceback(exc, who)}") from exc
    return "\n".join(parts), export.written
