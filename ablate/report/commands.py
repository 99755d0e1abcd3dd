"""``ablate export``, ``ablate report`` and ``ablate compare`` as library calls: each checks its
options, reads every study (or export) before it writes anything, renders with
``ablate.report.render``, and prints a line per file it writes on the console it is given (a
render takes minutes: each line as its file is written). A refusal is a ``Refused`` (invalid
input: exit 2; a report that fails: exit 1), a store that fails a ``StorageError``.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape

from ablate import results
from ablate.report import REPORTS, render, sections
from ablate.report.parameters import STUDY_SPECIFIC, ParameterError, check_study, parse_parameters
from ablate.spec import SpecError, name_problem
from ablate.stores import redact
from ablate.terminal import Refused

if TYPE_CHECKING:
    from ablate.spec import Spec

#: Reads a spec file as the command does (its errors refused with exit 2).
LoadSpec = Callable[[Path], "Spec"]


def formats(fmt: str) -> tuple[str, ...]:
    """``--format``: comma-separated, each one of ``render.FORMATS``."""
    chosen = tuple(f.strip() for f in fmt.split(",") if f.strip())
    bad = [f for f in chosen if f not in render.FORMATS]
    if bad or not chosen:
        raise Refused(escape(f"--format: {bad[0] if bad else fmt!r} is not one of: {', '.join(render.FORMATS)}"))
    return chosen


def chosen_reports(only: str) -> list[str]:
    """``--reports``: comma-separated report (or section) names."""
    names = [n.strip() for n in only.split(",") if n.strip()]
    for n in names:
        if n not in REPORTS and not sections.is_section(n):
            raise Refused(escape(f"--reports: {n!r} is not one of: {', '.join(REPORTS)}"))
    return names


def report_parameters(pairs: list[str] | None, reports: list[str]) -> dict:
    """The ``--param`` pairs as the reports' parameters (``parameters.parse_parameters``); refused for one no
    report declares, one the command sets, or a value not of its kind or out of its range."""
    try:
        return parse_parameters(pairs or [], reports)
    except ParameterError as exc:
        raise Refused(escape(str(exc))) from None


def out_folder(path: Path, option: str = "--out") -> None:
    """Refused (exit 2) unless ``path`` is a folder this process can write in, or can be made one.
    Tried, not inferred (root may write where the permissions say no, and /proc refuses root): a
    folder made here is taken away again, a file made in one removed, so nothing is left."""
    where = escape(f"{option} {path}")
    if path.is_dir():
        try:
            with tempfile.TemporaryFile(dir=path):
                return
        except OSError as exc:
            raise Refused(f"{where}: cannot write in this folder ({escape(exc.strerror or str(exc))})") from None
    if path.exists() or path.is_symlink():
        raise Refused(f"{where}: exists and is not a folder; give a folder, or a path where one can be made")
    made: list[Path] = []
    try:
        for folder in reversed([path, *path.parents]):
            if not folder.exists():
                folder.mkdir()
                made.append(folder)
    except OSError as exc:
        why = f"{escape(str(folder.parent))} is not a folder" if folder.parent.exists() and not folder.parent.is_dir() \
            else escape(exc.strerror or str(exc))
        raise Refused(f"{where}: cannot be made a folder ({why})") from None
    finally:
        for folder in reversed(made):
            with contextlib.suppress(OSError):
                folder.rmdir()


def is_spec_file(arg: str) -> bool:
    return arg.endswith((".yaml", ".yml")) and Path(arg).is_file()


def _export_refused(exc: Exception) -> Refused:
    """An export that cannot be written or read: invalid input."""
    return Refused(escape(str(exc)))


def render_reports(out: Console, study: str, reports: list[str], out_dir: Path, formats: tuple[str, ...],
                   storage: str | None = None, tracking_uri: str | None = None, parameters: dict | None = None,
                   export: bool = False, data: results.Results | None = None) -> None:
    """Render a study's ``reports`` (``render.render``), a line per file written, and with
    ``export`` how many figures and tables went where; a failing report is refused with exit 1
    (the report, the cell and the error, not a notebook traceback)."""
    try:
        for path in render.render(study, reports, out_dir, formats, storage, tracking_uri, parameters, export, data):
            out.print(f"wrote {path}")
        if export:
            for kind, exts in (("figures", "PDF, SVG and PNG"), ("tables", "CSV and LaTeX")):
                files = sorted((out_dir / kind).glob("*")) if (out_dir / kind).is_dir() else []
                stems = {f.name.split(".")[0] for f in files if not f.name.endswith("-data.csv")}
                out.print(f"wrote {len(stems)} {kind} ({exts}) to {out_dir / kind}")
    except ParameterError as exc:  # a value the study read shows is not its own (a metric, a cell)
        raise Refused(escape(str(exc))) from None
    except render.ReportError as exc:
        raise Refused(escape(str(exc)), 1) from None


def export(out: Console, err: Console, args: list[str], storage: str | None, tracking_uri: str | None,
           load: LoadSpec) -> None:
    """``ablate export STUDY... DIR`` (or ``SPEC DIR``): every directory checked and every study
    read before any file is written (``results.export_many``), then a line per export."""
    if len(args) < 2:
        raise Refused("give a study and a directory: ablate export STUDY... DIR")
    names, dest = list(dict.fromkeys(args[:-1])), Path(args[-1])
    if len(names) == 1 and is_spec_file(names[0]):
        names = [load(Path(names[0])).name]
    try:
        for done in results.export_many(names, dest, storage, tracking_uri):
            rows = done.rows
            out.print(f"wrote {done.path}: {rows['trials']:,} trial{'s' if rows['trials'] != 1 else ''}, {rows['metrics']:,} metric rows, "
                      f"{rows['curves']:,} curve rows ({done.files} files, {done.size / 1e6:.2f} MB)", highlight=False)
            for line in done.missing:
                err.print(f"note: {line}", highlight=False, markup=False, soft_wrap=True)
    except results.ExportError as exc:
        raise _export_refused(exc) from None


def report(out: Console, studies: list[str], load: LoadSpec, *, storage: str | None = None,
           tracking_uri: str | None = None, out_dir: Path | None = None, fmt: str = "html,pdf",
           only: str | None = None, param: list[str] | None = None, compare_: bool = False,
           cells: list[str] | None = None, export: bool = False, data: Path | None = None) -> None:
    """``ablate report``: each study's reports (a spec file: its study's, and its ``compare:``
    comparison if it names one), or with ``compare_`` or ``cells`` one comparison over them; with
    ``data`` from the exports under it, with no store."""
    chosen_formats = formats(fmt)
    if data is not None:
        if studies:
            raise Refused("--data renders the studies of its exports: give no study with it")
        if compare_ or cells:
            compare(out, [], cells, None, None, out_dir, chosen_formats, None, None, param, data=[data])
        else:
            _from_exports(out, data, out_dir, chosen_formats, only, param, export)
        return
    if not studies:
        raise Refused("name a study (or a spec file), or give --data DIR")
    if compare_ or cells:
        if any(is_spec_file(a) for a in studies):
            raise Refused("--compare takes study names; for a spec's `compare:` use `ablate compare --spec FILE`")
        compare(out, studies, cells, None, None, out_dir, chosen_formats, storage, tracking_uri, param)
        return
    spec = None
    if len(studies) == 1 and is_spec_file(studies[0]):
        spec = load(Path(studies[0]))
        studies = [spec.name]
    names_only = chosen_reports(only) if only else None
    report_parameters(param, names_only or list(REPORTS))  # values and ranges before a store is looked for
    planned = []  # every study's reports, parameters and folder checked before the first renders
    for study in studies:
        # The stores that hold it (a subfolder of the project finds its .ablate above).
        stores, names = render.study_reports(study, storage, tracking_uri, names_only)
        target = out_dir / study if out_dir is not None and len(studies) > 1 else out_dir
        planned.append((study, stores, names, target or Path("reports") / study, report_parameters(param, names)))
    for *_, target, _ in planned:
        out_folder(target)
    read = _read_to_check(planned)
    for study, stores, names, target, parameters in planned:
        render_reports(out, study, names, target, chosen_formats, stores.storage, stores.tracking, parameters, export,
                       read.get(study))
    if spec is not None and spec.compare:
        compare(out, [], None, spec, None, None, chosen_formats, storage, tracking_uri, param)


def _read_to_check(planned: list) -> dict[str, results.Results]:
    """Each study read once and its study-specific parameters (a metric, a reference cell) checked
    before the first of several studies renders, so that a later study's refusal leaves no reports
    of the earlier ones behind; the reports render from what was read here. One study: nothing
    read here (``render`` reads it while its kernels start, and checks it then)."""
    if len(planned) < 2 or not any(STUDY_SPECIFIC & set(parameters) for *_, parameters in planned):
        return {}
    read = {}
    for study, stores, _, _, parameters in planned:
        read[study] = results.load(study, stores.storage, stores.tracking, metrics=True, curves=True)
        try:
            check_study(read[study], parameters)
        except ParameterError as exc:
            raise Refused(escape(str(exc))) from None
    return read


def _from_exports(out: Console, data: Path, out_dir: Path | None, chosen_formats: tuple[str, ...], only: str | None,
                  param: list[str] | None, export: bool) -> None:
    try:  # every export verified before any report is rendered
        read = [results.read_export(folder) for folder in results.exports_in(data)]
    except results.ExportError as exc:
        raise _export_refused(exc) from None
    planned = []
    for res in read:
        names = render.export_reports(res, chosen_reports(only) if only else None)
        target = out_dir / res.study if out_dir is not None and len(read) > 1 else out_dir
        planned.append((res, names, target or Path("reports") / res.study, report_parameters(param, names)))
    for res, _, target, parameters in planned:
        out_folder(target)
        try:  # read already: its metrics and cells checked before any report renders
            check_study(res, parameters)
        except ParameterError as exc:
            raise Refused(escape(str(exc))) from None
    for res, names, target, parameters in planned:
        render_reports(out, res.study, names, target, chosen_formats, None, None, parameters, export, data=res)


def compare_command(out: Console, studies: list[str], spec: Spec | None, *, cells: list[str] | None = None,
                    name: str | None = None, out_dir: Path | None = None, fmt: str = "html,pdf",
                    storage: str | None = None, tracking_uri: str | None = None, param: list[str] | None = None,
                    data: list[Path] | None = None) -> None:
    """``ablate compare``: one report over ``studies``, or those ``spec``'s ``compare:`` names, or
    the studies of the exports under ``data``."""
    if spec is not None and studies:
        raise Refused("give studies or --spec, not both")
    if data and studies:
        raise Refused("--data compares the studies of its exports: give no study with it (--spec picks among them)")
    compare(out, studies, cells, spec, name, out_dir, formats(fmt), storage, tracking_uri, param, data)


def compare(out: Console, studies: list[str], cells: list[str] | None, spec: Spec | None, name: str | None,
            out_dir: Path | None, chosen_formats: tuple[str, ...], storage: str | None, tracking_uri: str | None,
            param: list[str] | None, data: list[Path] | None = None) -> None:
    """One comparison report (``render.comparison``, checked before anything is rendered, then
    ``render.render_comparison``), a line per file written."""
    if name is not None:
        comparison_name(name, "--name")
    parameters = report_parameters(param, ["comparison"])
    try:
        asked = render.comparison(studies, cells, spec, name, storage, tracking_uri, data)
    except render.ComparisonError as exc:
        raise Refused([escape(line) for line in exc.lines]) from None
    except results.ExportError as exc:
        raise _export_refused(exc) from None
    except SpecError as exc:
        raise Refused(str(exc).splitlines()) from None
    if out_dir is None:  # the studies' names joined may be too long for a folder's
        comparison_name(asked.name, "the comparison's name (the studies' names joined; --name gives another)")
    target = out_dir or Path("reports") / f"compare-{asked.name}"
    out_folder(target)
    try:
        for path in render.render_comparison(asked.studies, target, asked.selectors, chosen_formats, storage,
                                             tracking_uri, parameters, title=asked.name, data=asked.data):
            out.print(f"wrote {path}")
    except ParameterError as exc:
        raise Refused(escape(str(exc))) from None
    except render.ReportError as exc:
        raise Refused(escape(redact(str(exc))), 1) from None


def comparison_name(name: str, what: str) -> None:
    """Refused unless ``name`` could name a study (``spec.name_problem``, as ``ablate keep`` checks a
    new study's): it names the folder ``reports/compare-NAME``."""
    if (why := name_problem(name)) is not None:
        raise Refused(escape(f"{what}: {why}"))
