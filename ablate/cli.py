"""The ``ablate`` command: parse, call the library, print, exit code.

Exit codes: 0 success; 1 a run left items failed with an error or unfinished, a worker failed,
or a store error; 2 invalid input; 130 / 143 stopped by SIGINT / SIGTERM (running items
re-queued). Heavy imports (torch, mlflow, papermill) happen inside the commands that need them.
No traceback reaches the terminal unless ``ABLATE_TRACEBACK=1``: errors are one line each.
"""

from __future__ import annotations

import functools
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ablate import cli_options as opt
from ablate.runner.forking import early
from ablate.stores import StorageError, resolve
from ablate.terminal import PipeConsole, Refused, Stopped, asking, count, internal_error, store_refused, table

if TYPE_CHECKING:  # ablate.spec (pydantic, numpy: 0.2 s) loads in _load: `ablate run` starts its zygote first
    from ablate.spec import Spec


class _App(typer.Typer):
    """Typer whose every command turns a store error (unreachable, refusing, not ablate's) into
    one line and exit 1, a refusal (``terminal.Refused``) into its lines and exit status, and a
    signal (``terminal.Stopped``) into one line and 128 + the signal, wherever they are raised."""

    def command(self, *args: Any, **kwargs: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        register = super().command(*args, **kwargs)

        def decorator(f: Callable[..., Any]) -> Callable[..., Any]:
            @functools.wraps(f)  # typer reads the options from the wrapped signature
            def guarded(*a: Any, **k: Any) -> Any:
                try:
                    return f(*a, **k)
                except (StorageError, Refused, Stopped) as exc:
                    said = store_refused(exc) if isinstance(exc, StorageError) else exc
                    if isinstance(said, Stopped):  # the clean-up is done: a further signal must not cut its line
                        for s in (signal.SIGINT, signal.SIGTERM):
                            signal.signal(s, signal.SIG_IGN)
                    said.print(err)
                    raise typer.Exit(said.code) from None

            register(guarded)
            return f

        return decorator


app = _App(add_completion=False, rich_markup_mode="markdown", no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Systematic ablation studies of linear recurrent sequence models.")

out = PipeConsole()
err = PipeConsole(stderr=True)


@app.callback()
def _ablate(version: opt.Version = False) -> None:  # --version acts in its callback, before any command
    pass


def _load(path: Path, overrides: list[str] | None, multirun: list[str] | None = None, plugins: bool = False) -> Spec:
    """The validated spec; ``plugins``: also run each plug-in it uses on a tiny batch."""
    from ablate import design
    from ablate.spec import SpecError, locate
    from ablate.spec.files import multirun_overrides

    if not path.exists() and not path.suffix and len(path.parts) == 1:  # a study's name, not a file
        raise Refused(_not_a_file(path.name))
    try:
        spec = design.load(path, [*(overrides or []), *multirun_overrides(multirun or [])])
        if plugins:
            from ablate.models.contract import spec_problems

            if problems := spec_problems(spec, lambda line: err.print(line, highlight=False, markup=False,
                                                                      soft_wrap=True)):
                raise locate(SpecError(problems), spec.origins)
        return spec
    except SpecError as exc:
        raise Refused(str(exc).splitlines()) from None


def _not_a_file(name: str) -> str:
    """The error for a study's name where a spec file is asked for (issue 43: ``ablate run NAME``)."""
    from rich.markup import escape

    found = [p for p in (Path("studies") / f"{name}.yaml", Path(f"{name}.yaml")) if p.is_file()]
    return (f"{escape(name)} is not a file: this command takes a spec file (status, report and worker take a "
            f"study's name){f'; did you mean {escape(str(found[0]))}?' if found else ''}")


@app.command()
def validate(file: opt.SpecFile, set_: opt.Set = None, multirun: opt.Multi = None) -> None:
    """Check a study spec, and each plug-in it uses on a tiny batch; print OK or each error with its key path (exit 2)."""
    spec = _load(file, set_, multirun, plugins=True)
    from ablate.design import cells

    n, k = len(cells(spec)), len(spec.seed_list)
    out.print(f"OK {spec.name}: {n} cell{'s' * (n != 1)} × {k} seed{'s' * (k != 1)}")


@app.command()
def plan(
    file: opt.SpecFile,
    set_: opt.Set = None,
    multirun: opt.Multi = None,
    storage: opt.Storage = None,
    tracking_uri: opt.Tracking = None,
    estimate: Annotated[bool, typer.Option("--estimate", help="time a few training steps per model shape "
                                                              "and estimate the wall time of what is pending")] = False,
    device: opt.Device = "cpu",
    reuse: opt.Reuse = True,
    reuse_stale: opt.ReuseStale = False,
    workers: Annotated[int, typer.Option(min=1, callback=opt.checked_workers,
                                         help="--estimate for this many local workers (as `ablate run --workers`)")] = 1,
) -> None:
    """One row per cell: id, level labels, trials, done / partial / reused / stale / new, where
    results come from; totals; orphaned trials; --estimate."""
    spec = _load(file, set_, multirun)
    from ablate.runner import plan_checks

    plan_checks.report(spec, storage, tracking_uri, reuse, reuse_stale, estimate, device, workers).print(out)


@app.command()
def schema(
    target: Annotated[str | None, typer.Argument(
        help="where to write the JSON Schema; '-' for standard output [docs/spec.schema.json, or standard "
             "output when it is not a terminal]", show_default=False)] = None,
    out_file: Annotated[Path | None, typer.Option("--out", help="where to write the JSON Schema (as TARGET)")] = None,
    docs: Annotated[Path | None, typer.Option("--docs", help="also write the spec reference (Markdown) here, "
                                                             "e.g. docs/spec.md")] = None,
    check: Annotated[bool, typer.Option("--check", help="write nothing; exit 1 if a file is stale")] = False,
) -> None:
    """Write the JSON Schema of a study spec (and with --docs the Markdown reference):
    `ablate schema > spec.schema.json` works as `ablate schema spec.schema.json`."""
    from ablate import schema as schema_mod

    try:
        outputs = schema_mod.outputs(target, out_file, docs, check, terminal=sys.stdout.isatty())
    except schema_mod.DestinationError as exc:
        err.print(f"[red]error[/red] {exc}")
        raise typer.Exit(2) from None
    if outputs.stdout is not None:
        written = list(outputs.write())  # the reference, with --docs: a failed write prints no schema
        sys.stdout.write(outputs.stdout)
        sys.stdout.flush()
        for p in written:
            err.print(f"wrote {p}")
        return
    if check:
        stale = outputs.stale()
        for p in stale:
            err.print(f"[red]stale[/red] {p}: run `ablate schema --docs docs/spec.md` to regenerate")
        raise typer.Exit(1 if stale else 0)
    for p in outputs.write():
        out.print(f"wrote {p}")


@app.command()
def run(
    file: opt.SpecFile,
    set_: opt.Set = None,
    multirun: opt.Multi = None,
    storage: opt.Storage = None,
    tracking_uri: opt.Tracking = None,
    device: opt.RunDevice = "cpu",
    workers: opt.Workers = 1,
    checkpoint_every: opt.Checkpoint = 100,
    report: Annotated[bool, typer.Option("--report/--no-report", help="render the spec's reports after")] = False,
    verbose: opt.Verbose = False,
    reuse: opt.Reuse = True,
    reuse_stale: opt.ReuseStale = False,
    retry_failed: Annotated[bool, typer.Option("--retry-failed", help="re-queue the items that failed with an "
                                               "error (not diverged), keeping their failed attempts")] = False,
    fuse: opt.Fuse = 0,
) -> None:
    """Run every (cell, seed) of a study not already finished; resumes where it stopped. Items
    another study on the stores has finished are linked, not run again (--no-reuse runs them)."""
    with early(workers, device, verbose, tracking_uri, file.name) as forker:  # the workers' imports begin now
        spec = _load(file, set_, multirun, plugins=True)
        from ablate.runner.launch import run_study

        after = run_study(spec, resolve(storage, tracking_uri), out, err, workers=workers, device=device,
                          checkpoint_every=checkpoint_every, verbose=verbose, reuse=reuse, reuse_stale=reuse_stale,
                          retry_failed=retry_failed, fuse=fuse, forker=forker)
    if after is None:  # queue only
        return
    after.print(out, err)
    if report:
        from ablate.report.commands import render_reports

        render_reports(out, spec.name, spec.report_names, Path("reports") / spec.name, ("html", "pdf"), storage,
                       tracking_uri)
    raise typer.Exit(after.verdict(err))


@app.command("plugins")
def plugins_command() -> None:
    """The installed plug-ins (docs/plugins.md): kind, name, target, distribution, code hash, and whether each
    loads; exit 1 when one fails to load."""
    from rich.markup import escape

    from ablate.models.contract import installed_rows, loads

    rows = installed_rows()
    if not rows:
        out.print("no plug-ins installed (docs/plugins.md)")
        return
    table(out, "plug-ins", ["kind", "name", "target", "from", "code hash", "status"], rows)
    if failing := [f"{kind} {name!r}" for kind, name, *_, status in rows if not loads(status)]:
        raise Refused(escape(f"{count(len(failing), 'plug-in')} {'fails' if len(failing) == 1 else 'fail'} to load: {', '.join(failing)}; their status says why: "
                             "fix them, or uninstall their distribution"), 1)


@app.command()
def worker(
    study: str,
    storage: opt.Storage = None,
    tracking_uri: opt.Tracking = None,
    device: opt.Device = "cpu",
    threads: Annotated[int | None, typer.Option(min=1, help="torch CPU threads [all cores]")] = None,
    checkpoint_every: opt.Checkpoint = 100,
    max_items: Annotated[int | None, typer.Option(min=1, help="stop after this many items")] = None,
    verbose: opt.WorkerVerbose = False,
    fuse: opt.Fuse = 0,
) -> None:
    """Pull pending items of a study from its shared storage until none is left."""
    from ablate.runner.launch import run_worker

    run_worker(study, resolve(storage, tracking_uri, create=False), err, device=device, threads=threads,
               checkpoint_every=checkpoint_every, max_items=max_items, verbose=verbose, fuse=fuse).print(out)


@app.command()
def status(
    study: str,
    storage: opt.Storage = None,
    tracking_uri: opt.Tracking = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object (counts, cells, running "
                                                         "items, ETA) for scripts")] = False,
) -> None:
    """Print a study's progress per cell and what is running, then exit."""
    from ablate.runner import views

    views.status(study, storage, tracking_uri, as_json).print(out)


@app.command("ls")
def ls(storage: opt.Storage = None, tracking_uri: opt.Tracking = None) -> None:
    """List the studies on the stores: cells, items done / failed / running / waiting of each
    study's current spec (and how many were reused from other studies), orphaned items, last activity."""
    from ablate.runner import views

    views.studies(storage, tracking_uri).print(out)


def _confirm(yes: bool) -> Callable[[str], None]:
    return asking(yes, lambda question: typer.confirm(question, default=False))


@app.command("rm")
def rm(
    study: str,
    storage: opt.Storage = None,
    tracking_uri: opt.Tracking = None,
    orphans: Annotated[bool, typer.Option("--orphans", help="drop only the study's trials whose items belong to "
                                                            "no cell of its current spec")] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="do not ask for confirmation (scripts)")] = False,
    force: Annotated[bool, typer.Option("--force", help="remove even while workers run its items")] = False,
) -> None:
    """Remove a study: its queue entries (every trial) and its MLflow runs, after confirmation.
    Runs another study reuses stay (with their parent run); its links to other studies' runs
    remove nothing of theirs. With --orphans, drop only its orphaned trials."""
    from ablate.runner import cleanup

    cleanup.rm(study, resolve(storage, tracking_uri, create=False), _confirm(yes), orphans, force).print(out)


@app.command()
def keep(
    study: str,
    new: Annotated[str, typer.Argument(help="the name of the study that keeps them")],
    storage: opt.Storage = None,
    tracking_uri: opt.Tracking = None,
) -> None:
    """Keep the orphaned trials of STUDY as study NEW: NEW gets the spec they were queued under
    (renamed) and links them (nothing runs; the MLflow runs are shared); STUDY drops them."""
    from ablate.runner import cleanup

    cleanup.keep(study, new, resolve(storage, tracking_uri, create=False)).print(out)


@app.command()
def gc(
    storage: opt.Storage = None,
    every: Annotated[bool, typer.Option("--all", help="remove every kept checkpoint, also those a study's cells "
                                                      "still have (their longer runs then train from step 0)")] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="do not ask for confirmation (scripts)")] = False,
) -> None:
    """Remove the stable-phase checkpoints WSD runs kept (under the checkpoint folder's stable/) whose
    cell is in no study on the storage any more (after `ablate rm`); --all removes them all. A longer
    run of a cell whose checkpoint is gone trains from step 0."""
    from ablate.runner import cleanup

    cleanup.gc(storage, _confirm(yes), every).print(out)


@app.command("export")
def export_(
    args: Annotated[list[str], typer.Argument(
        help="the study (or several, or a spec file), then the directory to write", metavar="STUDY... DIR")],
    storage: opt.Storage = None,
    tracking_uri: opt.Tracking = None,
) -> None:
    """Write a study's tidy data into DIR: trials, metrics, curves and per-trial provenance as
    Parquet, the spec as it ran (spec.yaml), its hash, stores, factors and notes (study.json) and a
    manifest of sha256s. `ablate report --data DIR` renders from it with no store; pandas, polars or
    DuckDB read it without ablate. Several studies: DIR/STUDY each. DIR must be new, empty or an
    export of the same study (replaced)."""
    from ablate.report import commands

    commands.export(out, err, args, storage, tracking_uri, lambda path: _load(path, None))


@app.command()
def report(
    studies: Annotated[list[str] | None, typer.Argument(help="a study name (or several), or a spec file (.yaml)",
                                                        metavar="STUDY...")] = None,
    storage: opt.Storage = None,
    tracking_uri: opt.Tracking = None,
    out_dir: Annotated[Path | None, typer.Option("--out", help="output directory [reports/STUDY, "
                                                               "reports/compare-NAME]")] = None,
    fmt: opt.Format = "html,pdf",
    only: Annotated[str | None, typer.Option("--reports", help="comma-separated report names")] = None,
    param: opt.Param = None,
    compare_: Annotated[bool, typer.Option("--compare", help="one comparison report over the studies "
                                                             "(as `ablate compare`)")] = False,
    cells: opt.Cells = None,
    export: Annotated[bool, typer.Option(
        "--export", help="also write every figure (PDF, SVG, 300-dpi PNG) to OUT/figures/ and every table "
        "(CSV, LaTeX) to OUT/tables/")] = False,
    data: Annotated[Path | None, typer.Option(
        "--data", help="render from an export (`ablate export STUDY DIR`) instead of the stores; a folder "
        "of exports: each, or with --compare one comparison over them", metavar="DIR")] = None,
) -> None:
    """Render a study's reports (HTML and PDF) with papermill; several studies: each one's, or with
    --compare one report over all. A spec file renders its study's reports, and its `compare:`
    comparison if it names one. --data DIR renders from an export, with no store."""
    from ablate.report import commands

    commands.report(out, studies or [], lambda path: _load(path, None), storage=storage, tracking_uri=tracking_uri,
                    out_dir=out_dir, fmt=fmt, only=only, param=param, compare_=compare_, cells=cells, export=export,
                    data=data)


@app.command()
def compare(
    studies: Annotated[list[str] | None, typer.Argument(help="the studies to compare", metavar="STUDY...")] = None,
    cells: opt.Cells = None,
    spec_file: Annotated[Path | None, typer.Option("--spec", parser=opt.spec_path("--spec"), help="a spec whose "
                                                   "`compare:` section names the studies and their cells")] = None,
    name: Annotated[str | None, typer.Option("--name", help="the comparison's name [the spec's name, or the "
                                                            "studies' joined by '-']")] = None,
    out_dir: Annotated[Path | None, typer.Option("--out", help="output directory [reports/compare-NAME]")] = None,
    fmt: opt.Format = "html,pdf",
    storage: opt.Storage = None,
    tracking_uri: opt.Tracking = None,
    param: opt.Param = None,
    data: Annotated[list[Path] | None, typer.Option(
        "--data", help="compare the studies of exports (`ablate export STUDY DIR`) instead of the stores': an "
        "export, or a folder of exports; repeat for several", metavar="DIR")] = None,
) -> None:
    """One report over several studies, or some of their cells: the variants' accuracy with CIs,
    hidden-state norm curves in shared axes, and the statistics where cells are comparable (same
    task and data version). Writes comparison.{html,pdf} under reports/compare-NAME. --data DIR
    (repeated) compares the exported studies, in that order, with no store."""
    spec = _load(spec_file, None) if spec_file is not None else None
    from ablate.report import commands

    commands.compare_command(out, studies or [], spec, cells=cells, name=name, out_dir=out_dir, fmt=fmt,
                             storage=storage, tracking_uri=tracking_uri, param=param, data=data)


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="interface to bind; 0.0.0.0 exposes it to the network")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port to listen on")] = 5000,
    backend: Annotated[str | None, typer.Option(
        "--backend-store-uri", help="runs database: sqlite:///PATH or postgresql+psycopg://… "
        "[$ABLATE_HOME/server/mlflow.db]")] = None,
    artifacts: Annotated[str | None, typer.Option(
        "--artifacts-destination", help="folder for artifacts, served to workers [$ABLATE_HOME/server/artifacts]")] = None,
    workers: Annotated[int, typer.Option(help="server worker processes")] = 1,
    allowed_hosts: Annotated[str | None, typer.Option(
        help="extra Host headers to accept, e.g. 'mlflow.cluster.local:5000' (localhost and private IPs are)")] = None,
) -> None:
    """Start an MLflow tracking server for workers on many machines (foreground; Ctrl-C stops it)."""
    from ablate.serve import ServeError, ServerConfig
    from ablate.serve import serve as run_server

    cfg = ServerConfig.default(backend=backend, artifacts=artifacts, host=host, port=port, workers=workers,
                               allowed_hosts=allowed_hosts)
    try:
        code = run_server(cfg, say=lambda line: out.print(line, highlight=False, markup=False, soft_wrap=True))
    except ServeError as exc:
        raise store_refused(exc) from None
    raise typer.Exit(code)


def main() -> None:  # pragma: no cover
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    try:
        sys.exit(app())  # typer turns a KeyboardInterrupt no command handled into exit 130
    except SystemExit as exc:
        if exc.code in (128 + signal.SIGINT, 128 + signal.SIGTERM):
            # Stopped by a signal, clean-up done: skip the interpreter's teardown of torch, MLflow
            # and Optuna (seconds) that a scheduler's grace period may not leave.
            import logging

            sys.stdout.flush()
            sys.stderr.flush()
            logging.shutdown()
            os._exit(int(exc.code))
        raise
    except Exception as exc:
        sys.exit(internal_error(err, exc))


if __name__ == "__main__":  # pragma: no cover
    main()
