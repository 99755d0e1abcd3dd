"""Reports: papermill executes a parameterised notebook, nbconvert writes HTML, WeasyPrint a PDF.

Notebooks live as percent-format scripts in ``notebooks/`` (legible diffs); jupytext turns
them into notebooks. Every notebook reads results only through ``ablate.results``.
"""

from __future__ import annotations

import re
import tempfile
from importlib import resources
from pathlib import Path

from ablate import choices

FORMATS = ("html", "pdf")
# nbconvert links MathJax and require.js from a CDN; reports are offline and use no maths.
_EXTERNAL_SCRIPT = re.compile(r"<script[^>]*src=\"https?://[^\"]*\"[^>]*>\s*</script>", re.I)
_PRINT_CSS = """
<style>
@page { size: A4; margin: 14mm 12mm; }
body { font-family: 'DejaVu Sans', sans-serif; font-size: 10pt; }
img { max-width: 100% !important; height: auto; }
table { font-size: 8pt; max-width: 100%; border-collapse: collapse; }
th, td { padding: 2px 5px; word-break: break-word; }
pre { white-space: pre-wrap; word-break: break-all; font-size: 7.5pt; }
.jp-OutputArea-output { overflow: visible !important; }
</style>
"""


def notebook_path(report: str) -> Path:
    if report not in choices.REPORTS:
        raise ValueError(f"{report!r} is not one of: {', '.join(choices.REPORTS)}")
    return Path(str(resources.files("ablate.report") / "notebooks" / f"{report}.py"))


def execute(report: str, parameters: dict, workdir: Path):
    """Run the report notebook with papermill; returns the executed notebook node."""
    import jupytext
    import nbformat
    import papermill

    source = jupytext.read(notebook_path(report))
    source.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    src, out = workdir / f"{report}.ipynb", workdir / f"{report}.out.ipynb"
    nbformat.write(source, src)
    papermill.execute_notebook(
        str(src), str(out), parameters=parameters, kernel_name="python3", progress_bar=False, cwd=str(workdir)
    )
    return nbformat.read(out, as_version=4)


def to_html(notebook, title: str) -> str:
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(exclude_input=True, exclude_input_prompt=True, exclude_output_prompt=True)
    exporter.embed_images = True
    notebook.metadata["title"] = title
    html, _ = exporter.from_notebook_node(notebook)
    html = _EXTERNAL_SCRIPT.sub("", html)
    return html.replace("</head>", _PRINT_CSS + "</head>", 1)


def to_pdf(html: str, path: Path) -> None:
    import logging

    from weasyprint import HTML

    logging.getLogger("weasyprint").setLevel(logging.ERROR)
    logging.getLogger("fontTools").setLevel(logging.ERROR)
    HTML(string=html).write_pdf(str(path))


def render(
    study: str,
    reports: list[str],
    out_dir: Path,
    formats: tuple[str, ...] = FORMATS,
    storage: str | None = None,
    tracking_uri: str | None = None,
) -> list[Path]:
    """Render each report of a study into ``out_dir`` as ``<report>.html`` / ``<report>.pdf``."""
    from ablate.stores import resolve

    stores = resolve(storage, tracking_uri)  # absolute: the kernel runs in a scratch directory
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for report in reports:
        with tempfile.TemporaryDirectory() as tmp:
            nb = execute(report, {"study": study, "storage": stores.storage, "tracking_uri": stores.tracking},
                         Path(tmp))
        html = to_html(nb, f"{study} — {report.replace('_', ' ')}")
        if "html" in formats:
            path = out_dir / f"{report}.html"
            path.write_text(html, encoding="utf-8")
            written.append(path)
        if "pdf" in formats:
            path = out_dir / f"{report}.pdf"
            to_pdf(html, path)
            written.append(path)
    return written
