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
    from ablate import design

    try:
        return design.load(path, overrides or [])
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
def plan(
    file: Path,
    set_: SetOpt = None,
    storage: StorageOpt = None,
    tracking_uri: TrackingOpt = None,
    estimate: Annotated[bool, typer.Option("--estimate", help="time a few training steps per model shape "
                                                              "and estimate the wall time of what is pending")] = False,
    device: Annotated[str, typer.Option(help="device of the --estimate dry run: cpu, cuda, cuda:k")] = "cpu",
) -> None:
    """One row per cell: id, level labels, trials, done / partial / new; totals; --estimate."""
    spec = _load(file, set_)
    from ablate import planning

    the_plan = planning.build(spec, storage)  # reads the study's storage only if it exists
    planning.render(the_plan, out)
    if estimate:
        planning.render_estimate(planning.estimate(the_plan, device), out)


@app.command()
def schema(
    out_file: Annotated[Path, typer.Option("--out", help="where to write the JSON Schema")] = Path(
        "docs/spec.schema.json"),
    docs: Annotated[Path | None, typer.Option("--docs", help="also write the spec reference (Markdown) here, "
                                                             "e.g. docs/spec.md")] = None,
    check: Annotated[bool, typer.Option("--check", help="write nothing; exit 1 if a file is stale")] = False,
) -> None:
    """Write the JSON Schema of a study spec (and with --docs the Markdown reference)."""
    from ablate import schema as schema_mod

    targets = {out_file: schema_mod.schema_text()}
    if docs is not None:
        targets[docs] = schema_mod.reference_markdown()
    stale = [p for p, text in targets.items() if not p.is_file() or p.read_text(encoding="utf-8") != text]
    if check:
        for p in stale:
            err.print(f"[red]stale[/red] {p}: run `ablate schema --docs docs/spec.md` to regenerate")
        raise typer.Exit(1 if stale else 0)
    for p, text in targets.items():
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
        out.print(f"wrote {p}")


def _progress_printer(total: int, verbose: bool = False):
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
        elif event in ("diverged", "error", "killed", "oom", "infrastructure", "superseded"):
            if event in ("diverged", "error"):  # the others are retried or re-run: not finished
                progress.advance(bar)
            progress.console.print(f"  [yellow]{event}[/yellow] {name}: {info.get('message', '')}")
        if verbose and event == "start":
            progress.console.print(f"  start {name}", highlight=False)

    return progress, emit


DeviceOpt = Annotated[str, typer.Option(help="cpu, cuda, cuda:k, or auto (one worker per visible GPU)")]
CheckpointOpt = Annotated[int, typer.Option("--checkpoint-every", help="steps between checkpoints (0: never)")]
VerboseOpt = Annotated[bool, typer.Option("-v", "--verbose", help="log each item's start and end")]


@app.command()
def run(
    file: Path,
    set_: SetOpt = None,
    storage: StorageOpt = None,
    tracking_uri: TrackingOpt = None,
    device: DeviceOpt = "cpu",
    workers: Annotated[int, typer.Option(min=0, help="local worker processes; 0: only queue the items for "
                                                     "`ablate worker` processes elsewhere")] = 1,
    checkpoint_every: CheckpointOpt = 100,
    report: Annotated[bool, typer.Option("--report/--no-report", help="render the spec's reports after")] = False,
    verbose: VerboseOpt = False,
) -> None:
    """Run every (cell, seed) of a study not already finished; resumes where it stopped."""
    spec = _load(file, set_)
    from ablate.design import items, spec_hash
    from ablate.runner import pool, tracking
    from ablate.runner import study as st
    from ablate.runner.worker import work
    from ablate.stores import resolve

    stores = resolve(storage, tracking_uri)
    todo = items(spec)
    def parent_run() -> str:
        import json

        return tracking.start_parent_run(stores, spec.name, json.dumps(spec.model_dump(), indent=2), spec_hash(spec))

    try:
        study, queued = st.prepare(spec, todo, stores, parent_run)
    except st.StorageError as exc:
        raise _store_error(exc) from None
    before = st.Progress.of(study, todo)
    out.print(f"{spec.name}: {len(todo)} trials, {before.done} done, {before.failed} failed, "
              f"{before.waiting + before.running} to run ({queued} newly queued)")
    if workers == 0:  # queue only: workers on other machines run the items
        return
    device_list = pool.devices(device, workers)
    try:
        if len(device_list) == 1:
            progress, emit = _progress_printer(before.waiting + before.running, verbose)
            with progress:
                work(spec.name, stores, device=device_list[0], emit=emit, checkpoint_every=checkpoint_every)
        else:
            procs = pool.start(spec.name, stores, device_list, checkpoint_every, verbose)
            pool.watch(spec.name, stores, procs, out)
    except KeyboardInterrupt:
        err.print("interrupted: running items were re-queued; run the same command to resume")
        raise typer.Exit(130) from None
    after = st.Progress.of(study, todo)
    out.print(f"{spec.name}: {after.done} done, {after.failed} failed, {after.waiting + after.running} unfinished")
    if report:
        _render(spec.name, spec.reports, Path("reports") / spec.name, ("html", "pdf"), storage, tracking_uri)
    errors = [t for t in study.get_trials(deepcopy=False) if t.user_attrs.get("failure_kind") == "error"]
    if after.failed and errors:  # a diverged cell is a result; an error is a bug to look at
        err.print(f"{len(errors)} item(s) failed with an error; see `ablate status {spec.name}` and the report")
        raise typer.Exit(1)


@app.command()
def worker(
    study: str,
    storage: StorageOpt = None,
    tracking_uri: TrackingOpt = None,
    device: Annotated[str, typer.Option(help="cpu, cuda, cuda:k")] = "cpu",
    threads: Annotated[int | None, typer.Option(min=1, help="torch CPU threads [all cores]")] = None,
    checkpoint_every: CheckpointOpt = 100,
    max_items: Annotated[int | None, typer.Option(min=1, help="stop after this many items")] = None,
    verbose: VerboseOpt = False,
) -> None:
    """Pull pending items of a study from its shared storage until none is left."""
    from ablate.runner import study as st
    from ablate.runner.worker import work
    from ablate.stores import resolve

    if threads:
        # Read by torch, MKL and numba when they load, which the worker does in the background
        # after opening the study (importing torch here would delay the first claim by seconds).
        from ablate.runner.pool import thread_env

        os.environ.update(thread_env(threads))
        if "torch" in sys.modules:
            sys.modules["torch"].set_num_threads(threads)

    def emit(event: str, info: dict) -> None:
        if verbose or event not in ("start", "complete"):
            err.print(f"{event} {info.get('cell')} · seed {info.get('seed')} {info.get('message', '')}",
                      highlight=False, markup=False)

    try:
        outcomes = work(study, resolve(storage, tracking_uri), device=device, emit=emit,
                        checkpoint_every=checkpoint_every, max_items=max_items)
    except st.StorageError as exc:
        raise _store_error(exc) from None
    except KeyboardInterrupt:
        err.print("worker interrupted: its item was re-queued")
        raise typer.Exit(130) from None
    out.print(f"worker finished: {outcomes}")


@app.command()
def status(study: str, storage: StorageOpt = None, tracking_uri: TrackingOpt = None) -> None:
    """Print a study's progress per cell and what is running, then exit."""
    from ablate import results
    from ablate.runner import progress
    from ablate.runner import study as st
    from ablate.stores import resolve

    try:
        res = results.load(study, storage, tracking_uri, curves=False)
        snap = progress.snapshot(st.open_study(study, resolve(storage, tracking_uri)))
    except st.StorageError as exc:
        raise _store_error(exc) from None
    table = Table(title=f"{study}: status per cell", title_justify="left")
    table.add_column("cell")
    states = ["complete", "running", "pending", "diverged", "failed", "killed"]
    for s in states:
        table.add_column(s, justify="right")
    for (label,), group in res.trials.group_by(["cell_label"], maintain_order=True):
        table.add_row(label, *[str((group["status"] == s).sum()) for s in states])
    out.print(table)
    workers = len({r.worker for r in snap.items}) or 1
    out.print(progress.table(study, snap, workers))


def _render(study: str, reports: list[str], out_dir: Path, formats: tuple[str, ...], storage, tracking_uri,
            parameters: dict | None = None) -> None:
    from ablate.report.render import ReportError, render
    from ablate.runner import study as st

    try:
        for path in render(study, reports, out_dir, formats, storage, tracking_uri, parameters):
            out.print(f"wrote {path}")
    except st.StorageError as exc:
        raise _store_error(exc) from None
    except ReportError as exc:
        raise _store_error(exc) from None


@app.command()
def report(
    study: str,
    storage: StorageOpt = None,
    tracking_uri: TrackingOpt = None,
    out_dir: Annotated[Path | None, typer.Option("--out", help="output directory [reports/STUDY]")] = None,
    fmt: Annotated[str, typer.Option("--format", help="comma-separated: html,pdf")] = "html,pdf",
    only: Annotated[str | None, typer.Option("--reports", help="comma-separated report names")] = None,
    param: Annotated[list[str] | None, typer.Option(
        "--param", "-p", help="KEY=VALUE for the report notebooks, e.g. -p reference='layers=2' -p alpha=0.01")] = None,
) -> None:
    """Render a study's reports (HTML and PDF) with papermill."""
    from ablate.report import REPORTS
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
            if n not in REPORTS:
                err.print(f"[red]error[/red] --reports: {n!r} is not one of: {', '.join(REPORTS)}")
                raise typer.Exit(2)
    else:
        try:
            opt = st.open_study(study, resolve(storage, tracking_uri))
        except st.StorageError as exc:
            raise _store_error(exc) from None
        names = list(opt.user_attrs.get("spec", {}).get("reports", REPORTS))
    parameters = _report_parameters(param or [], names)
    _render(study, names, out_dir or Path("reports") / study, formats, storage, tracking_uri, parameters)


def _report_parameters(pairs: list[str], reports: list[str]) -> dict:
    """``KEY=VALUE`` pairs (values read as YAML scalars) that some report declares; exit 2 otherwise."""
    import yaml

    from ablate.report.render import declared_parameters

    known: dict = {}
    for r in reports:
        known.update(declared_parameters(r))
    for name in ("study", "storage", "tracking_uri"):
        known.pop(name, None)
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or key not in known:
            err.print(f"[red]error[/red] --param {pair!r}: expected KEY=VALUE with KEY one of: "
                      f"{', '.join(sorted(known)) or 'none'}")
            raise typer.Exit(2)
        default = known[key]
        if isinstance(default, bool | int | float) and value.strip():  # numbers and switches; the rest is text
            try:
                parsed = yaml.safe_load(value)
            except yaml.YAMLError:
                parsed = None
            if not isinstance(parsed, bool | int | float) or isinstance(parsed, bool) != isinstance(default, bool):
                err.print(f"[red]error[/red] --param {key}: {value!r} is not a {type(default).__name__}")
                raise typer.Exit(2)
            out[key] = parsed
        else:
            out[key] = value or None
    return out


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
        raise _store_error(exc) from None
    raise typer.Exit(code)


@app.command()
def bench(
    lengths: Annotated[str | None, typer.Option(help="comma-separated sequence lengths [1024,4096; "
                                                     "--full: 256,1024,4096,16384]")] = None,
    device: Annotated[str, typer.Option(help="cpu, cuda or cuda:k")] = "cpu",
    layers: Annotated[bool, typer.Option("--layers/--no-layers", help="also time whole layers and a training step")]
    = True,
    repeats: Annotated[int | None, typer.Option(min=1, help="timed rounds [3; --full: 5]")] = None,
    full: Annotated[bool, typer.Option("--full", help="the long sweep: 4 lengths, 5 rounds, the torch "
                                                      "reference in the layer table (minutes)")] = False,
) -> None:
    """Scan kernels vs the per-step loop and the memory-bandwidth bound, then layers and training
    steps with their scan share, measured side by side (under a minute by default)."""
    from ablate.models.bench import run_bench

    try:
        sizes = tuple(int(x) for x in lengths.split(",")) if lengths else None
    except ValueError:
        err.print(f"[red]error[/red] --lengths: comma-separated integers, got {lengths!r}")
        raise typer.Exit(2) from None
    run_bench(lengths=sizes, device=device, layers=layers, repeats=repeats, full=full)


def main() -> None:  # pragma: no cover
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    sys.exit(app())


if __name__ == "__main__":  # pragma: no cover
    main()
