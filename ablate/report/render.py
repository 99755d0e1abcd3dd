"""Reports: papermill executes a parameterised notebook, nbconvert writes HTML, WeasyPrint a PDF.

Notebooks live as percent-format scripts in ``notebooks/`` (legible diffs); jupytext turns
them into notebooks. Every notebook reads results only through ``ablate.results``.

A render runs its notebooks in a kernel each, side by side, up to the cores (IPC, each its own
output to a log; ``kernel_count``): on 2 idle cores the quickstart's two reports took 9.7 s
against 10.6 s in one kernel, a 12-cell study's 14.9 s against 18.0 s (``benchmarks/bench_reports.py``);
a thread turns each executed notebook into HTML and PDF meanwhile. The PDF gets the reports'
fonts by file (``ablate.report.fonts``), so its layout does not depend on the host's. A failing
cell raises ``ReportError`` naming the report, the section, the cell's first line and the error —
not a notebook traceback — and leaves the output folder as it was (``_staged``).

Every report has the same layout, one way from data to page:

    analysis        ablate.stats (accuracy), ablate.stats.norms (norm stability):
                    pure functions, frames in, numeric frames out; no formatting, no figures
    presentation    ablate.report.accuracy, ablate.report.norm_tables (+ norm_figures): that report's
                    tables (display frames), sentences and figures, from the analysis' frames
    notebook        ablate/report/notebooks/<report>.py: loads results, calls the two, shows
                    the output; thin
    shared          ablate.report.format (numbers, intervals, p-values, dashes, HTML and LaTeX tables),
                    ablate.report.plotting (figure size, style, the factor → channel mapping,
                    palettes, labels, SVG, exports), ablate.report.fonts, ablate.report.provenance_tables,
                    ablate.report.display (how a notebook puts a block on the page), this module

Adding a section to a report touches its analysis function, its presentation module and its
notebook; a new report adds one of each (and its name to the registered reports).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ablate.report import OPTIONAL_SECTIONS, REPORTS, default_sections, fonts, notebook_path, sections
from ablate.report.parameters import check_studies, check_study, only_declared

if TYPE_CHECKING:
    from ablate.results import Results, Studies
    from ablate.spec import Spec
    from ablate.stores import Stores

FORMATS = ("html", "pdf")
# nbconvert's template loads MathJax and require.js from a CDN and imports mermaid from one in an
# inline module; reports are static (images and tables) and must open offline: no scripts at all.
_SCRIPT = re.compile(r"<script\b[^>]*>.*?</script\s*>", re.I | re.S)


def _font_css() -> str:
    """Every element in the reports' two fonts (``ablate.report.fonts``), by their private names in
    the PDF (the files themselves, see ``to_pdf``) and DejaVu by name in a browser."""
    sans = f"'{fonts.FAMILY['sans']}', 'DejaVu Sans', sans-serif"
    mono = f"'{fonts.FAMILY['mono']}', 'DejaVu Sans Mono', monospace"
    return f"""
html, body, div, p, li, h1, h2, h3, h4, h5, h6, table, th, td, caption, b, em, strong, span {{ font-family: {sans}; }}
code, pre, kbd, samp {{ font-family: {mono}; }}
"""


# nbconvert's "basic" template: the cells' HTML without JupyterLab's 300 kB stylesheet (which asks
# for the host's UI fonts and costs WeasyPrint half a second a report); the page's style is ours.
_PAGE_CSS = """
@page {
  size: A4; margin: 13mm 11mm 15mm;
  @bottom-center { content: counter(page) " / " counter(pages); font-size: 7.5pt; color: #777; }
}
body { font-size: 9.5pt; line-height: 1.45; color: #111; max-width: 190mm; margin: 0 auto; padding: 0 4mm; }
@media print { body { max-width: none; padding: 0; } }
a.anchor-link { display: none; }
h1 { font-size: 19pt; margin: 4pt 0 10pt; }
h2 { font-size: 13pt; margin: 14pt 0 6pt; border-bottom: 0.6pt solid #bbb; font-weight: normal; }
h1, h2, h3 { page-break-after: avoid; break-after: avoid; }
p { margin: 4pt 0 6pt; }
ul { margin: 4pt 0 6pt; padding-left: 16pt; }
li { margin: 2pt 0; }
code { background: #f2f2f2; padding: 0 2pt; font-size: 88%; }
img { max-width: 100% !important; height: auto !important; max-height: 250mm; page-break-inside: avoid; }
.ablate-figure { break-inside: avoid; page-break-inside: avoid; margin: 2pt 0 6pt; }
.ablate-block > h2, .ablate-keep > p { break-after: avoid; page-break-after: avoid; }
/* a markdown cell introduces the output that follows it: keep them on one page */
.text_cell { page-break-after: avoid; break-after: avoid; }
table { max-width: 100%; border-collapse: collapse; }
table.ablate {
  font-size: 7.5pt; table-layout: auto; width: auto; max-width: 100%; margin: 3pt 0 8pt 0; border: none;
}
table.ablate th, table.ablate td {
  padding: 1.5pt 4pt; text-align: right; vertical-align: top; white-space: normal;
  overflow-wrap: break-word; word-break: normal; hyphens: manual; border: none; border-bottom: 0.4pt solid #ccc;
}
table.ablate.wide { width: 100%; table-layout: fixed; }
table.ablate caption { caption-side: top; text-align: left; font-size: 7pt; color: #555; padding: 0 0 2pt; }
table.ablate th { border-bottom: 0.8pt solid #555; font-weight: bold; background: none; }
table.ablate td.l, table.ablate th.l { text-align: left; }
/* a row group (one factor's levels, one source's cells) shares its shade and never splits across pages */
table.ablate tbody:nth-of-type(odd) td { background: #f5f5f5; }
table.ablate tbody, table.ablate tr { break-inside: avoid; page-break-inside: avoid; }
table.ablate tbody.group tr + tr td { border-top: none; }
/* The header goes with the first group rather than repeating on each page: with a repeating header
   WeasyPrint breaks inside the first row group when a table starts near the foot of a page. */
table.ablate thead { display: table-row-group; break-after: avoid; page-break-after: avoid; }
table.ablate.whole, .ablate-part { break-inside: avoid; page-break-inside: avoid; }
pre, pre.spec { white-space: pre-wrap; overflow-wrap: anywhere; font-size: 7pt; line-height: 1.25; }
pre.spec { background: #f7f7f7; padding: 4pt; column-count: 2; column-gap: 8mm; column-rule: 0.4pt solid #ddd; }
"""


class ReportError(Exception):
    """A report notebook raised; the message (no credentials) says which report and why."""


class Kernel:
    """A Python kernel for a render's notebooks, over IPC (a TCP kernel warns on the terminal that
    it runs unencrypted), its own output to a log file instead of the terminal. ``warm`` imports what every notebook needs while the caller does
    other work."""

    def __init__(self, workdir: Path) -> None:
        from jupyter_client.manager import AsyncKernelManager
        from nbclient.util import run_sync

        self._run_sync = run_sync
        self.log_path = workdir / "kernel.log"
        self._log = open(self.log_path, "w")  # noqa: SIM115 (closed in close())
        self.km = AsyncKernelManager(kernel_name="python3", transport="ipc", ip=str(workdir / "kernel"))
        # the notebooks' MLflow reads must not draw progress bars into the report
        env = {**os.environ, "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false", "PYTHONWARNINGS": "ignore"}
        run_sync(self.km.start_kernel)(stdout=self._log, stderr=self._log, cwd=str(workdir), env=env)
        self.kc = self.km.client()
        self.kc.start_channels()
        self._ready = False

    def warm(self, code: str) -> None:
        """Run ``code`` in the kernel without waiting for it, even before the kernel is up (ZeroMQ
        holds the request until it connects; the first notebook queues behind it), so that the
        kernel boots and imports while the caller does other work."""
        self.kc.execute(code, silent=True, store_history=False)

    def ready(self) -> None:
        """Wait until the kernel answers (after what ``warm`` queued)."""
        if not self._ready:
            self._run_sync(self.kc.wait_for_ready)(timeout=120)
            self._ready = True

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.kc.stop_channels()
        with contextlib.suppress(Exception):
            self._run_sync(self.km.shutdown_kernel)(now=True)  # its work is done: no graceful wait
        self._log.close()


@contextlib.contextmanager
def kernel(workdir: Path) -> Iterator[Kernel]:
    """A ``Kernel`` for the block, shut down after it."""
    k = Kernel(workdir)
    try:
        yield k
    finally:
        k.close()


#: What every report notebook imports first: warmed in the kernel while the renderer starts.
WARM_UP = ("import pandas, polars, numpy, scipy.stats, statsmodels.stats.multitest, matplotlib.figure, IPython.display\n"
           "import ablate.results, ablate.stats.comparisons, ablate.stats.few_run, ablate.stats.factorial, "
           "ablate.stats.convergence, ablate.stats.norms\n"
           "import ablate.report.accuracy, ablate.report.norm_tables, ablate.report.norm_figures, ablate.report.display")
_RESET = "get_ipython().run_line_magic('reset', '-f')  # a shared kernel: no names left by the previous report"


def execute(report: str, parameters: dict, workdir: Path, kernel: Kernel | None = None):
    """Run the report notebook with papermill (in ``kernel`` when given, else a kernel of its own);
    returns the executed notebook node. A failing cell raises ``ReportError`` naming the report,
    the cell (its section and first line) and the error."""
    import jupytext
    import nbformat
    import papermill

    source = jupytext.read(notebook_path(report))
    source.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    if kernel is not None:
        source.cells.insert(0, nbformat.v4.new_code_cell(_RESET, metadata={"tags": ["ablate-reset"]}))
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # inherited by a kernel of its own
    src, out = workdir / f"{report}.ipynb", workdir / f"{report}.out.ipynb"
    nbformat.write(source, src)
    # A kernel of our own already runs in its scratch directory; papermill's ``cwd`` would chdir this
    # whole process, under the thread writing the previous report's pages.
    if kernel is not None:
        kernel.ready()
    extra: dict[str, Any] = {"km": kernel.km, "kc": kernel.kc} if kernel is not None else {"cwd": str(workdir)}
    try:
        # Saved once at the end (or on a failure), not after every cell: a notebook of SVG figures
        # written ~50 times costs seconds of this process's CPU beside the kernel's.
        nb = papermill.execute_notebook(
            str(src), str(out), parameters=parameters, kernel_name="python3", progress_bar=False,
            request_save_on_cell_execute=False, **extra,
        )
    except papermill.PapermillExecutionError as exc:
        raise ReportError(_failure(report, exc, out)) from None
    nb.cells = [c for c in nb.cells if "ablate-reset" not in c.get("metadata", {}).get("tags", [])]
    return nb


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _failure(report: str, exc: Any, out: Path) -> str:
    """``report 'accuracy' failed in the cell under "Comparisons" (`comparisons = …`): KeyError: …,
    at ablate/report/accuracy/tables.py:123`` — credentials redacted."""
    import nbformat

    from ablate.stores import redact

    section, first = "", (exc.source or "").strip().splitlines()[0:1]
    try:  # papermill writes the notebook back with a notice cell on top: find the cell by its code
        cells = nbformat.read(out, as_version=4).cells
        at = next((i for i, c in enumerate(cells) if c.cell_type == "code" and c.source == exc.source),
                  exc.cell_index)
        heads = [line.lstrip("# ").strip() for c in cells[:at] if c.cell_type == "markdown"
                 for line in c.source.splitlines() if line.startswith("#")]
        section = heads[-1] if heads else ""
    except Exception:  # the notebook could not be written back: name the cell by its code alone
        pass
    where = ""
    # IPython writes "File /path/x.py:12, in f(…)", the standard library 'File "/path/x.py", line 12'
    frames = re.findall(r'File "?([^\s",]+?\.py)"?(?::(\d+)|, line (\d+))',
                        _ANSI.sub("", "\n".join(exc.traceback or [])))
    frames = [(f, a or b) for f, a, b in frames if "/ablate/" in f]
    if frames:
        path, line = frames[-1]
        where = f", at {path[path.rindex('/ablate/') + 1:]}:{line}"
    cell = f'the cell under "{section}"' if section else f"cell {exc.exec_count or exc.cell_index}"
    code = f" (`{first[0][:80]}`)" if first else ""
    return redact(f"report {report!r} failed in {cell}{code}: {exc.ename}: {exc.evalue}{where}")


def _drop_stderr(notebook) -> None:
    """Warnings and progress bars a library wrote to stderr have no place in a report."""
    for cell in notebook.cells:
        if cell.get("cell_type") == "code":
            cell["outputs"] = [o for o in cell.get("outputs", [])
                               if not (o.get("output_type") == "stream" and o.get("name") == "stderr")]


def to_html(notebook, title: str, missing: list[str] | None = None) -> str:
    """The executed notebook as one self-contained page: outputs only, no scripts, our stylesheet;
    ``missing`` (what the data lack) as a note on top."""

    from nbconvert import HTMLExporter

    _drop_stderr(notebook)
    notebook.metadata.pop("papermill", None)  # it holds the parameters the notebook ran with
    for i, cell in enumerate(notebook.cells):  # papermill's random ids would change every re-render
        cell["id"] = f"cell-{i}"
    exporter = HTMLExporter(template_name="basic", exclude_input=True, exclude_input_prompt=True,
                            exclude_output_prompt=True)
    body, _ = exporter.from_notebook_node(notebook)
    return page(_SCRIPT.sub("", body), title, missing)


def page(body: str, title: str, missing: list[str] | None = None) -> str:
    """A report's HTML body as one self-contained page in our stylesheet, ``missing`` on top."""
    import html as _html

    if missing:
        body = _MISSING.format("".join(f"<li>{_html.escape(line)}</li>" for line in dict.fromkeys(missing))) + body
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{_html.escape(title)}</title>\n<style>{_font_css()}{_PAGE_CSS}</style>\n</head>\n"
            f"<body>\n{body}\n</body>\n</html>\n")


_MISSING = ('<div class="ablate-missing" style="border:1pt solid #c60;padding:4pt 8pt;margin:4pt 0 8pt">'
            "<b>Incomplete data.</b> This report shows what the stores still hold:<ul>{}</ul></div>")


def to_pdf(html: str, path: Path) -> None:
    """``html`` as an A4 PDF in the reports' fonts (the font files themselves, ``ablate.report.fonts``)."""
    import logging

    from weasyprint import CSS, HTML
    from weasyprint.text.fonts import FontConfiguration

    logging.getLogger("weasyprint").setLevel(logging.ERROR)
    logging.getLogger("fontTools").setLevel(logging.ERROR)
    config = FontConfiguration()
    faces = CSS(string=fonts.font_face_css(), font_config=config)
    HTML(string=html).write_pdf(str(path), stylesheets=[faces], font_config=config)


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


@contextmanager
def _staged(path: Path) -> Iterator[Path]:
    """A scratch folder inside ``path`` (made for the block) that the block writes its pages into;
    they move into ``path`` only when the whole block succeeded. A render that fails part-way (a
    report section that raises after the notebooks rendered, Ctrl-C during a PDF) leaves ``path`` as
    it was: no half-new set of pages beside old ones, and no empty ``--out`` it made."""
    made = [p for p in (path, *path.parents) if not p.exists()]
    path.mkdir(parents=True, exist_ok=True)
    # Inside ``path``, so each move is a rename on one file system.
    stage = Path(tempfile.mkdtemp(prefix=".ablate-rendering-", dir=path))
    try:
        yield stage
        for item in sorted(stage.rglob("*")):
            if item.is_file():
                final = path / item.relative_to(stage)
                final.parent.mkdir(parents=True, exist_ok=True)
                os.replace(item, final)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        for folder in made:  # deepest first
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise
    shutil.rmtree(stage, ignore_errors=True)


def study_reports(study: str, storage: str | None = None, tracking_uri: str | None = None,
                  only: list[str] | None = None) -> tuple[Stores, list[str]]:
    """The stores that hold ``study`` (``results.locate``: from a subfolder of the project, the
    .ablate above) and its reports to render (``ablate report STUDY``): ``only``, else those its
    stored spec lists (every report when it lists none). Reads only; raises StorageError."""
    from ablate import results

    if only:
        return results.locate(study, storage, tracking_uri), list(only)
    stores, opt = results.located_study(study, storage, tracking_uri)
    return stores, report_names(opt.user_attrs.get("spec", {}).get("reports", REPORTS))


def report_names(entries: list[Any]) -> list[str]:
    """A stored spec's ``reports:`` entries by name (an entry with options is a mapping)."""
    return [e["name"] if isinstance(e, dict) else e for e in entries]


def export_reports(res: Results, only: list[str] | None = None) -> list[str]:
    """The reports to render of an export (``ablate report --data``): ``only``, else those its spec
    as it ran lists (the spec's default when it lists none)."""
    return list(only) if only else report_names(res.spec_data.get("reports", res.spec.report_names))


def render(
    study: str,
    reports: list[str],
    out_dir: Path,
    formats: tuple[str, ...] = FORMATS,
    storage: str | None = None,
    tracking_uri: str | None = None,
    parameters: dict | None = None,
    export: bool = False,
    data: Results | None = None,
) -> list[Path]:
    """Render each report of a study into ``out_dir`` as ``<report>.html`` / ``<report>.pdf``.

    The notebooks run in ``kernel_count`` kernels side by side. ``parameters`` go to every report's notebook, after the study
    and stores (e.g. the accuracy report's ``reference``, ``metric``, ``alpha``); a report ignores
    those it does not declare. ``export`` also writes each figure alone (PDF, SVG, 300-dpi PNG)
    into ``out_dir/figures/`` and each table (CSV, LaTeX) into ``out_dir/tables/``. ``data``: the
    study's ``ablate.results.Results`` already read (``read_export``: ``ablate report --data``);
    then no store is opened, or even looked for."""
    from concurrent.futures import ThreadPoolExecutor

    from ablate import results
    from ablate.stores import resolve

    stores = resolve(storage, tracking_uri, create=False) if data is None else None  # reading creates no store
    if data is not None:  # read already: its parameters checked before a kernel starts
        check_study(data, parameters or {})

    def write(nb, report: str, missing: list[str]) -> list[Path]:
        return save(to_html(nb, f"{study} — {report.replace('_', ' ')}", missing), report)

    def write_section(name: str, res: Results, missing: list[str]) -> list[Path]:
        """A report-section plug-in's page (``ablate.report.sections``)."""
        try:
            body, _ = sections.body(name, res, target if export else None)
        except sections.SectionError as exc:
            raise ReportError(str(exc)) from None
        return save(page(body, f"{study} — {name}", missing), sections.stem(name))

    def save(html: str, report: str) -> list[Path]:
        paths = []
        if "html" in formats:
            (target / f"{report}.html").write_text(html, encoding="utf-8")
            paths.append(out_dir / f"{report}.html")
        if "pdf" in formats:
            to_pdf(html, target / f"{report}.pdf")
            paths.append(out_dir / f"{report}.pdf")
        return paths

    # Each kernel runs its notebooks one after the other while a thread of this process turns each
    # executed one into HTML and PDF.
    # The stores go to the kernel by its environment, not as parameters: papermill writes
    # parameters into the executed notebook, and a URL may carry a password.
    notebooks = [r for r in reports if not sections.is_section(r)]
    lanes = kernel_count(len(notebooks))
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        env = {}
        if stores is not None:
            env.update({"ABLATE_STORAGE": stores.storage, "ABLATE_TRACKING_URI": stores.tracking})
        stack.enter_context(_environment(env))
        kernels = []
        for i in range(lanes):
            (Path(tmp) / f"kernel-{i}").mkdir()
            kernels.append(stack.enter_context(kernel(Path(tmp) / f"kernel-{i}")))
            kernels[-1].warm(WARM_UP)
        # While the kernels import, this process reads the stores, once for every report: the
        # notebooks read that file (their ``results_file``), not the stores.
        snapshot = Path(tmp) / "results.pickle"
        # Every report reads the curves: the study's one multiplicity family (report.verdicts) spans the
        # norm measures too, so even the accuracy report needs them to adjust its p-values.
        if data is None:
            loaded = results.load(study, stores.storage, stores.tracking, metrics=True, curves=True)
            check_study(loaded, parameters or {})
            results.save(loaded, snapshot)
            read_missing = list(loaded.missing)
        else:
            results.save(data, snapshot)
            read_missing = list(data.missing)
        # Every page and export is written here (``write``, ``save``, the notebooks' export_dir) and
        # moves into out_dir when all rendered. Absolute: the kernels run in scratch directories.
        target = stack.enter_context(_staged(out_dir.resolve()))
        # Entered after the stage, so it has finished every page before the stage moves or goes.
        writer = stack.enter_context(ThreadPoolExecutor(1))
        writer.submit(_preload)
        whole = loaded if data is None else data

        def run(report: str, k: Kernel) -> Any:
            work = Path(tmp) / report
            work.mkdir()
            options = whole.spec.report_options(report) if report in REPORTS else None
            params = {"study": study, "export_dir": str(target) if export else None, "results_file": str(snapshot)}
            if options is not None and (options.selectors or options.order):
                # What this report shows of the study: its own snapshot; the other reports keep theirs.
                params["results_file"] = str(work / "results.pickle")
                results.save(apply_options(whole, options), work / "results.pickle")
            if options is not None and options.reference is not None:
                params["reference"] = options.reference
            nb = execute(report, only_declared(report, {**params, **(parameters or {})}), work, k)
            if options is not None:
                nb.cells = keep_sections(nb.cells, options.sections or list(default_sections(report)))
                if not options.sections and OPTIONAL_SECTIONS.get(report):
                    nb.cells.insert(_appendix_start(nb.cells), _left_out_note(report))
            return writer.submit(write, nb, report, read_missing)

        def lane(i: int) -> dict[str, Any]:
            return {report: run(report, kernels[i]) for report in notebooks[i::lanes]}

        with ThreadPoolExecutor(lanes) as runners:
            written = {r: f for part in runners.map(lane, range(lanes)) for r, f in part.items()}
        done = [written[r] for r in notebooks]
        for name in [r for r in reports if sections.is_section(r)]:
            done.append(writer.submit(write_section, name, whole, read_missing))
        return [path for future in done for path in future.result()]


def kernel_count(notebooks: int) -> int:
    """How many kernels a render runs its notebooks in: one per notebook, up to the cores
    (``$ABLATE_REPORT_KERNELS`` sets it: ``benchmarks/bench_reports.py`` compares)."""
    wanted = os.environ.get("ABLATE_REPORT_KERNELS")
    most = int(wanted) if wanted and wanted.isdigit() and int(wanted) > 0 else (os.cpu_count() or 1)
    return max(1, min(notebooks, most))


def apply_options(res: Results, options: Any) -> Results:
    """``res`` as a report with ``options`` (``spec.reports.ReportOptions``) shows it: only the cells
    its selectors match (any of them), the variants sorted by its ``order`` factors' levels (the
    reports keep the trials frame's order of first appearance)."""
    import polars as pl

    from ablate import design

    keep = {c.id for sel in options.selectors for c in design.select(res.spec, sel)} if options.selectors else None

    def cut(frame: pl.DataFrame) -> pl.DataFrame:
        if keep is None or "cell_id" not in frame.columns or not frame.height:
            return frame
        return frame.filter(pl.col("cell_id").is_in(sorted(keep)))

    trials = cut(res.trials)
    if options.order:
        ranks = []
        for factor in options.order:
            seen = trials[factor].cast(pl.Utf8).unique(maintain_order=True).to_list()
            if isinstance(trials[factor].dtype, pl.Enum):  # the factor's own level order
                seen = [lv for lv in trials[factor].dtype.categories.to_list() if lv in set(seen)]
            ranks.append(pl.col(factor).cast(pl.Utf8).replace_strict(seen, list(range(len(seen))),
                                                                     default=len(seen)))
        trials = trials.with_row_index("_row").sort([*ranks, "_row"]).drop("_row")
    return dataclasses.replace(res, trials=trials, metrics=cut(res.metrics), curves=cut(res.curves))


def _left_out_note(report: str) -> Any:
    """The line at the end of the body of a report that left out its optional sections: which, and how to add them."""
    from nbformat.v4 import new_markdown_cell

    names = ", ".join(f"`{h}`" for h in OPTIONAL_SECTIONS[report])
    return new_markdown_cell(
        f"*The appendices follow. Left out by default (diagnostics beyond the five-minute read): {names}; a spec adds "
        f"them with `reports: [{{name: {report}, sections: [...]}}]` listing the sections wanted "
        "(docs/reports.md).*")


def _appendix_start(cells: list[Any]) -> int:
    """The index of the first appendix's heading cell (the end of the report's body), else the end."""
    for i, cell in enumerate(cells):
        if cell.get("cell_type") == "markdown" and "\n## Appendix" in "\n" + cell.get("source", ""):
            return i
    return len(cells)


def keep_sections(cells: list[Any], wanted: list[str]) -> list[Any]:
    """The executed notebook's cells with only the ``wanted`` sections (``ablate.report.slug`` of
    their ``## `` headings), in that order, after what precedes the first section (title, header)."""
    from ablate.report import slug

    head: list[Any] = []
    parts: dict[str, list[Any]] = {}
    current = head
    for cell in cells:
        text = cell.get("source", "") if cell.get("cell_type") == "markdown" else ""
        title = next((line[3:] for line in text.splitlines() if line.startswith("## ")), None)
        if title is not None:
            current = parts.setdefault(slug(title), [])
        current.append(cell)
    return head + [c for name in wanted for c in parts.get(name, [])]


def _preload() -> None:
    """Import what turns notebooks into pages while the kernel starts on the first one."""
    import nbconvert  # noqa: F401
    import weasyprint  # noqa: F401


class ComparisonError(ValueError):
    """A comparison that cannot be made as asked: no study named, a spec without a ``compare:``
    section, or cells that select nothing (``design.comparison_problems``); one line a problem
    (``lines``)."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = list(lines)
        super().__init__("\n".join(self.lines))


@dataclasses.dataclass(frozen=True)
class Comparison:
    """What one comparison report renders (``comparison``): ``studies`` in order, ``selectors``
    of their cells (one list for every study, or per study), its ``name`` (the title, and
    ``reports/compare-NAME``), and ``data``, the studies already read when they come from exports."""

    studies: list[str]
    selectors: dict[str, list[dict]] | list[dict]
    name: str
    data: Studies | None = None


def comparison(studies: list[str], cells: list[str] | None = None, spec: Spec | None = None, name: str | None = None,
               storage: str | None = None, tracking_uri: str | None = None,
               data: list[Path] | None = None) -> Comparison:
    """The comparison ``ablate compare`` renders: of ``studies``, or of those a spec's ``compare:``
    section names (with their cells; its name), or of the exports under ``data`` (each an export
    or a folder of them: every study, or those the spec names, in order; no store is opened).
    ``cells``: selectors as text (``design.parse_selector``) for every study, in place of the
    spec's. Each study's spec (as stored, or as its export holds it) is validated and the cells
    checked against it before anything is rendered. Raises ComparisonError, SpecError (a
    selector, or a spec this code does not accept), ExportError (an export that cannot be read, a
    study the exports do not hold) and StorageError (a study the stores do not hold)."""
    from ablate import design, results

    selectors: dict[str, list[dict]] | list[dict] = []
    if spec is not None:
        if not spec.compare:
            raise ComparisonError([f"{spec.name}: the spec has no `compare:` section (e.g. compare: "
                                   "[studyA, {study: studyB, cells: {model.heads: 8}}])"])
        studies = [e.study for e in spec.compare]
        selectors = {e.study: e.selectors for e in spec.compare if e.selectors}
        name = name or spec.name
    exported = results.read_exports_in(data, studies) if data else None  # every export verified
    if exported is not None:
        studies = exported.names
    if not studies:
        raise ComparisonError(["name the studies to compare (or --spec FILE)"])
    if cells:
        selectors = [design.parse_selector(text) for text in cells]
    if exported is not None:  # the specs as the exports hold them, validated by this code
        specs = {r.study: r.spec for r in exported.results}
    else:
        specs = results.stored_specs(studies, storage, tracking_uri)
    problems = design.comparison_problems(specs, selectors)
    if problems:
        raise ComparisonError(problems)
    return Comparison(list(studies), selectors, name or "-".join(studies), exported)


def render_comparison(
    studies: list[str],
    out_dir: Path,
    cells: dict[str, list[dict]] | list[dict] | None = None,
    formats: tuple[str, ...] = FORMATS,
    storage: str | None = None,
    tracking_uri: str | None = None,
    parameters: dict | None = None,
    title: str = "",
    report: str = "comparison",
    data: Studies | None = None,
) -> list[Path]:
    """Render one comparison report over ``studies`` (their cells matching ``cells``: selectors
    for every study, or per study) into ``out_dir`` as ``<report>.html`` / ``<report>.pdf``.
    ``data``: those studies already read (``results.read_exports``: ``ablate compare --data``);
    then no store is opened, or even looked for."""
    from ablate import results
    from ablate.stores import resolve

    stores = resolve(storage, tracking_uri, create=False) if data is None else None  # reading creates no store
    title = title or " vs ".join(studies)

    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        # As render: this process reads the stores once, the notebook that file (no URL among the
        # parameters the notebook keeps), in our kernel (IPC, quiet).
        both = data if data is not None else results.load(list(studies), stores.storage, stores.tracking,
                                                          curves=True, metrics=True)
        check_studies(both, cells, parameters or {})
        stage = stack.enter_context(_staged(out_dir.resolve()))
        snapshot = Path(tmp) / "results.pickle"
        results.save(both, snapshot)
        missing = [line for r in both.results for line in r.missing]
        params = {"studies": list(studies), "cells": cells or {}, "title": title, "results_file": str(snapshot)}
        with kernel(Path(tmp)) as k:
            nb = execute(report, {**params, **only_declared(report, parameters or {})}, Path(tmp), k)
        html = to_html(nb, f"{title} — comparison", missing)
        written: list[Path] = []
        if "html" in formats:
            (stage / f"{report}.html").write_text(html, encoding="utf-8")
            written.append(out_dir / f"{report}.html")
        if "pdf" in formats:
            to_pdf(html, stage / f"{report}.pdf")
            written.append(out_dir / f"{report}.pdf")
    return written
