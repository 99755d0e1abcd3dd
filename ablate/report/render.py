"""Reports: papermill executes a parameterised notebook, nbconvert writes HTML, WeasyPrint a PDF.

Notebooks live as percent-format scripts in ``notebooks/`` (legible diffs); jupytext turns
them into notebooks. Every notebook reads results only through ``ablate.results``.

Every report has the same layout, one way from data to page:

    analysis        ablate.stats (accuracy), ablate.stats_norms (norm stability):
                    pure functions, frames in, numeric frames out; no formatting, no figures
    presentation    ablate.report.accuracy, ablate.report.norm_stability: that report's
                    tables (display frames), sentences and figures, from the analysis' frames
    notebook        ablate/report/notebooks/<report>.py: loads results, calls the two, shows
                    the output; thin
    shared          ablate.report.format (numbers, intervals, p-values, dashes, HTML tables),
                    ablate.report.plotting (figure size, style, palettes, labels, saving),
                    ablate.report.display (how a notebook puts a block on the page), this module

Adding a section to a report touches its analysis function, its presentation module and its
notebook; a new report adds one of each (and its name to the registered reports).
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path

from ablate.report import MISSING_NOTES, REPORTS

FORMATS = ("html", "pdf")
# nbconvert's template loads MathJax and require.js from a CDN and imports mermaid from one in an
# inline module; reports are static (images and tables) and must open offline: no scripts at all.
_SCRIPT = re.compile(r"<script\b[^>]*>.*?</script\s*>", re.I | re.S)
_PRINT_CSS = """
<style>
@page {
  size: A4; margin: 13mm 11mm 15mm;
  @bottom-center { content: counter(page) " / " counter(pages); font-size: 7.5pt; color: #777; }
}
body { font-family: 'DejaVu Sans', sans-serif; font-size: 9.5pt; }
body.jp-Notebook, .jp-Notebook { padding: 0 !important; }
.jp-Cell, .jp-Cell-outputWrapper, .jp-OutputArea-child { padding: 0 !important; }
.jp-OutputArea-output { overflow: visible !important; padding: 0 !important; }
img { max-width: 100% !important; height: auto !important; max-height: 250mm; page-break-inside: avoid; }
.ablate-figure { break-inside: avoid; page-break-inside: avoid; margin: 2pt 0 6pt; }
.ablate-block > p, .ablate-block > h2 { break-after: avoid; page-break-after: avoid; }
h1, h2, h3 { page-break-after: avoid; break-after: avoid; }
/* a markdown cell introduces the output that follows it: keep them on one page */
.jp-MarkdownCell { page-break-after: avoid; break-after: avoid; }
h2 { margin-top: 12pt; border-bottom: 0.6pt solid #bbb; }
table { max-width: 100%; border-collapse: collapse; }
th, td { word-break: break-word; }
.jp-RenderedHTMLCommon table.ablate, table.ablate {
  font-size: 7.5pt; table-layout: auto !important; width: auto; max-width: 100%;
  margin: 3pt 0 8pt 0 !important; border-collapse: collapse; border: none;
}
.jp-RenderedHTMLCommon table.ablate th, .jp-RenderedHTMLCommon table.ablate td, table.ablate th, table.ablate td {
  padding: 1.5pt 4pt !important; text-align: right; vertical-align: top; white-space: normal !important;
  overflow-wrap: break-word; word-break: normal; hyphens: manual; border: none; border-bottom: 0.4pt solid #ccc;
  max-width: none;
}
table.ablate.wide { width: 100%; table-layout: fixed !important; }
table.ablate th { border-bottom: 0.8pt solid #555; font-weight: bold; background: none; }
table.ablate td.l, table.ablate th.l { text-align: left; }
table.ablate tbody tr:nth-child(odd) { background: #f5f5f5; }
table.ablate tr { page-break-inside: avoid; }
table.ablate thead { display: table-header-group; }
pre, pre.spec { white-space: pre-wrap; overflow-wrap: anywhere; font-size: 7pt; line-height: 1.25; }
pre.spec { background: #f7f7f7; padding: 4pt; column-count: 2; column-gap: 8mm; column-rule: 0.4pt solid #ddd;
  page-break-inside: auto !important; break-inside: auto !important; }
.jp-OutputArea-child { break-inside: auto !important; page-break-inside: auto !important; }
</style>
"""


class ReportError(Exception):
    """A report notebook raised; the message (no credentials) says which report and why."""


def notebook_path(report: str) -> Path:
    if report not in REPORTS:
        raise ValueError(f"{report!r} is not one of: {', '.join(REPORTS)}")
    return Path(str(resources.files("ablate.report") / "notebooks" / f"{report}.py"))


def declared_parameters(report: str) -> dict[str, object]:
    """Name → default of each assignment in the report notebook's ``parameters`` cell."""
    import ast

    text = notebook_path(report).read_text(encoding="utf-8")
    match = re.search(r'^# %% tags=\["parameters"\]\n(.*?)(?=^# %%)', text, re.M | re.S)
    if not match:
        return {}
    out: dict[str, object] = {}
    for node in ast.parse(match.group(1)).body:
        if isinstance(node, ast.Assign):
            try:
                default = ast.literal_eval(node.value)
            except ValueError:
                default = None
            out.update({t.id: default for t in node.targets if isinstance(t, ast.Name)})
    return out


def _declared(report: str, parameters: dict) -> dict:
    names = declared_parameters(report)
    return {k: v for k, v in parameters.items() if k in names}


def execute(report: str, parameters: dict, workdir: Path):
    """Run the report notebook with papermill; returns the executed notebook node."""
    import jupytext
    import nbformat
    import papermill

    source = jupytext.read(notebook_path(report))
    source.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # inherited by the kernel
    src, out = workdir / f"{report}.ipynb", workdir / f"{report}.out.ipynb"
    nbformat.write(source, src)
    try:
        papermill.execute_notebook(
            str(src), str(out), parameters=parameters, kernel_name="python3", progress_bar=False, cwd=str(workdir)
        )
    except papermill.PapermillExecutionError as exc:
        from ablate.stores import redact

        raise ReportError(redact(f"report {report!r} failed: {exc.ename}: {exc.evalue}")) from None
    return nbformat.read(out, as_version=4)


def _drop_stderr(notebook) -> None:
    """Warnings and progress bars a library wrote to stderr have no place in a report."""
    for cell in notebook.cells:
        if cell.get("cell_type") == "code":
            cell["outputs"] = [o for o in cell.get("outputs", [])
                               if not (o.get("output_type") == "stream" and o.get("name") == "stderr")]


def to_html(notebook, title: str, missing: list[str] | None = None) -> str:
    """The executed notebook as a static page; ``missing`` (what the data lack) as a note on top."""
    import html as html_text

    from nbconvert import HTMLExporter

    _drop_stderr(notebook)
    notebook.metadata.pop("papermill", None)  # it holds the parameters the notebook ran with
    exporter = HTMLExporter(exclude_input=True, exclude_input_prompt=True, exclude_output_prompt=True)
    exporter.embed_images = True
    notebook.metadata["title"] = title
    html, _ = exporter.from_notebook_node(notebook)
    html = _SCRIPT.sub("", html)
    if missing:
        note = "".join(f"<li>{html_text.escape(line)}</li>" for line in dict.fromkeys(missing))
        html = re.sub(r"(<body[^>]*>)", lambda m: m[1] + _MISSING.format(note), html, count=1)
    return html.replace("</head>", _PRINT_CSS + "</head>", 1)


_MISSING = ('<div class="ablate-missing" style="border:1pt solid #c60;padding:4pt 8pt;margin:4pt 0 8pt">'
            "<b>Incomplete data.</b> This report shows what the stores still hold:<ul>{}</ul></div>")


def to_pdf(html: str, path: Path) -> None:
    import logging

    from weasyprint import HTML

    logging.getLogger("weasyprint").setLevel(logging.ERROR)
    logging.getLogger("fontTools").setLevel(logging.ERROR)
    HTML(string=html).write_pdf(str(path))


@contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def render(
    study: str,
    reports: list[str],
    out_dir: Path,
    formats: tuple[str, ...] = FORMATS,
    storage: str | None = None,
    tracking_uri: str | None = None,
    parameters: dict | None = None,
) -> list[Path]:
    """Render each report of a study into ``out_dir`` as ``<report>.html`` / ``<report>.pdf``.

    ``parameters`` go to every report's notebook, after the study and stores (e.g. the accuracy
    report's ``reference``, ``metric``, ``alpha``); a report ignores those it does not declare."""
    from ablate.stores import resolve

    stores = resolve(storage, tracking_uri)  # absolute: the kernel runs in a scratch directory
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for report in reports:
        with tempfile.TemporaryDirectory() as tmp:
            notes = Path(tmp) / "missing.txt"
            # The stores go to the kernel by its environment, not as parameters: papermill writes
            # parameters into the executed notebook, and a URL may carry a password.
            env = {"ABLATE_STORAGE": stores.storage, "ABLATE_TRACKING_URI": stores.tracking, MISSING_NOTES: str(notes)}
            with _environment(env):
                nb = execute(report, {"study": study, **_declared(report, parameters or {})}, Path(tmp))
            missing = notes.read_text(encoding="utf-8").splitlines() if notes.exists() else []
        html = to_html(nb, f"{study} — {report.replace('_', ' ')}", missing)
        if "html" in formats:
            path = out_dir / f"{report}.html"
            path.write_text(html, encoding="utf-8")
            written.append(path)
        if "pdf" in formats:
            path = out_dir / f"{report}.pdf"
            to_pdf(html, path)
            written.append(path)
    return written
