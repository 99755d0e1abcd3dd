"""The ``ablate`` command: parse, call the library, print, exit code.

Exit codes: 0 success, 1 a run finished with failed items or a store error, 2 invalid input.
Heavy imports (torch, mlflow, papermill) happen inside the commands that need them.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from ablate.spec import Spec, SpecError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Systematic ablation studies of linear recurrent sequence models.")
out = Console()
err = Console(stderr=True)

SetOpt = Annotated[list[str] | None, typer.Option("--set", help="override a spec value: path=value (YAML)")]
StorageOpt = Annotated[str | None, typer.Option("--storage", help="Optuna storage URL [env ABLATE_STORAGE]")]
TrackingOpt = Annotated[
    str | None, typer.Option("--tracking-uri", help="MLflow tracking URI [env ABLATE_TRACKING_URI]")
]


def _load(path: Path, overrides: list[str] | None) -> Spec:
    from ablate import spec as spec_mod

    try:
        return spec_mod.load(path, overrides or [])
    except SpecError as exc:
        for line in str(exc).splitlines():
            err.print(f"[red]error[/red] {line}", highlight=False, markup=True, soft_wrap=True)
        raise typer.Exit(2) from None


def _store_error(exc: Exception) -> typer.Exit:
    err.print(f"[red]error[/red] {exc}", highlight=False, soft_wrap=True)
    return typer.Exit(1)


@app.command()
def validate(file: Path, set_: SetOpt = None) -> None:
    """Check a study spec; print OK or each error with its key path (exit 2)."""
    spec = _load(file, set_)
    from ablate.design import cells

    out.print(f"OK {spec.name}: {len(cells(spec))} cells × {len(spec.seed_list)} seeds")


@app.command()
def plan(file: Path, set_: SetOpt = None, storage: StorageOpt = None, tracking_uri: TrackingOpt = None) -> None:
    """One row per cell: id, settings, seeds, and the number of trials."""
    spec = _load(file, set_)
    from ablate.design import cells

    table = Table(title=f"{spec.name}: plan")
    table.add_column("cell id")
    for path in spec.factors:
        table.add_column(path)
    table.add_column("seeds", justify="right")
    grid = cells(spec)
    for cell in grid:
        table.add_row(cell.id, *cell.labels.values(), str(len(spec.seed_list)))
    out.print(table)
    out.print(f"{len(grid)} cells × {len(spec.seed_list)} seeds = {len(grid) * len(spec.seed_list)} trials")


def _progress_printer(total: int):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        console=out, transient=False)
    bar = progress.add_task("trials", total=total)

    def emit(event: str, info: dict) -> None:
        name = f"{info.get('cell')} · seed {info.get('seed')}"
        if event == "start":
            progress.update(bar, description=f"running {name}")
        elif event == "complete":
            progress.advance(bar)
            acc = info.get("test_accuracy")
            progress.console.print(f"  done {name}: test accuracy {acc:.3f} ({info['seconds']:.0f} s)")
        elif event in ("diverged", "error"):
            progress.advance(bar)
            progress.console.print(f"  [yellow]{event}[/yellow] {name}: {info.get('message', '')}")

    return progress, emit


@app.command()
def run(
    file: Path,
    set_: SetOpt = None,
    storage: StorageOpt = None,
    tracking_uri: TrackingOpt = None,
    device: Annotated[str, typer.Option(help="cpu, cuda, cuda:k")] = "cpu",
    report: Annotated[bool, typer.Option("--report/--no-report", help="render the spec's reports after")] = False,
) -> None:
    """Run every (cell, seed) of a study not already finished; resumes where it stopped."""
    spec = _load(file, set_)
    from ablate.design import items, spec_hash
    from ablate.runner import study as st
    from ablate.runner import tracking
    from ablate.runner.worker import work
    from ablate.stores import resolve

    stores = resolve(storage, tracking_uri)
    todo = items(spec)
    try:
        study, queued = st.prepare(spec, todo, stores)
        if not study.user_attrs.get("mlflow_parent_run_id"):
            import json

            parent = tracking.start_parent_run(stores, spec.name, json.dumps(spec.model_dump(), indent=2),
                                               spec_hash(spec))
            study.set_user_attr("mlflow_parent_run_id", parent)
    except st.StorageError as exc:
        raise _store_error(exc) from None
    before = st.Progress.of(study, todo)
    out.print(f"{spec.name}: {len(todo)} trials, {before.done} done, {before.failed} failed, "
              f"{before.waiting + before.running} to run ({queued} newly queued)")
    progress, emit = _progress_printer(before.waiting + before.running)
    with progress:
        work(spec.name, stores, device=device, emit=emit)
    after = st.Progress.of(study, todo)
    out.print(f"{spec.name}: {after.done} done, {after.failed} failed, {after.waiting + after.running} unfinished")
    if report:
        _render(spec.name, spec.reports, Path("reports") / spec.name, ("html", "pdf"), storage, tracking_uri)
    if after.failed:
        raise typer.Exit(1)


@app.command()
def worker(
    study: str,
    storage: StorageOpt = None,
    tracking_uri: TrackingOpt = None,
    device: Annotated[str, typer.Option(help="cpu, cuda, cuda:k")] = "cpu",
) -> None:
    """Pull pending items of a study from its shared storage until none is left."""
    from ablate.runner import study as st
    from ablate.runner.worker import work
    from ablate.stores import resolve

    try:
        outcomes = work(study, resolve(storage, tracking_uri), device=device)
    except st.StorageError as exc:
        raise _store_error(exc) from None
    out.print(f"worker finished: {outcomes}")


@app.command()
def status(study: str, storage: StorageOpt = None, tracking_uri: TrackingOpt = None) -> None:
    """Print a study's progress per cell and exit."""
    from ablate import results
    from ablate.runner import study as st

    try:
        res = results.load(study, storage, tracking_uri, curves=False)
    except st.StorageError as exc:
        raise _store_error(exc) from None
    table = Table(title=f"{study}: status")
    table.add_column("cell")
    states = ["complete", "running", "pending", "diverged", "failed", "killed"]
    for s in states:
        table.add_column(s, justify="right")
    for (label,), group in res.trials.group_by(["cell_label"], maintain_order=True):
        table.add_row(label, *[str((group["status"] == s).sum()) for s in states])
    out.print(table)


def _render(study: str, reports: list[str], out_dir: Path, formats: tuple[str, ...], storage, tracking_uri) -> None:
    from ablate.report.render import render
    from ablate.runner import study as st

    try:
        for path in render(study, reports, out_dir, formats, storage, tracking_uri):
            out.print(f"wrote {path}")
    except st.StorageError as exc:
        raise _store_error(exc) from None


@app.command()
def report(
    study: str,
    storage: StorageOpt = None,
    tracking_uri: TrackingOpt = None,
    out_dir: Annotated[Path | None, typer.Option("--out", help="output directory [reports/STUDY]")] = None,
    fmt: Annotated[str, typer.Option("--format", help="comma-separated: html,pdf")] = "html,pdf",
    only: Annotated[str | None, typer.Option("--reports", help="comma-separated report names")] = None,
) -> None:
    """Render a study's reports (HTML and PDF) with papermill."""
    from ablate import choices
    from ablate.runner import study as st
    from ablate.stores import resolve

    formats = tuple(f.strip() for f in fmt.split(",") if f.strip())
    bad = [f for f in formats if f not in ("html", "pdf")]
    if bad or not formats:
        err.print(f"[red]error[/red] --format: {bad[0] if bad else fmt!r} is not one of: html, pdf")
        raise typer.Exit(2)
    if only:
        names = [n.strip() for n in only.split(",") if n.strip()]
        for n in names:
            if n not in choices.REPORTS:
                err.print(f"[red]error[/red] --reports: {n!r} is not one of: {', '.join(choices.REPORTS)}")
                raise typer.Exit(2)
    else:
        try:
            opt = st.open_study(study, resolve(storage, tracking_uri))
        except st.StorageError as exc:
            raise _store_error(exc) from None
        names = list(opt.user_attrs.get("spec", {}).get("reports", choices.REPORTS))
    _render(study, names, out_dir or Path("reports") / study, formats, storage, tracking_uri)


def main() -> None:  # pragma: no cover
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    sys.exit(app())


if __name__ == "__main__":  # pragma: no cover
    main()
