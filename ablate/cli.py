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
from typing import Annotated, Any

import typer
from rich.console import Console, ConsoleDimensions
from rich.table import Table

from ablate.spec import Spec, SpecError
from ablate.stores import StorageError


class _App(typer.Typer):
    """Typer whose every command turns a store error (unreachable, refusing, not ablate's) into
    one line and exit 1, wherever in the command it is raised."""

    def command(self, *args: Any, **kwargs: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        register = super().command(*args, **kwargs)

        def decorator(f: Callable[..., Any]) -> Callable[..., Any]:
            @functools.wraps(f)  # typer reads the options from the wrapped signature
            def guarded(*a: Any, **k: Any) -> Any:
                try:
                    return f(*a, **k)
                except StorageError as exc:
                    raise _store_error(exc) from None

            register(guarded)
            return f

        return decorator


app = _App(add_completion=False, rich_markup_mode="markdown", no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Systematic ablation studies of linear recurrent sequence models.")

# Lines as long as they need in a pipe or log file (SLURM, `tee`): wrapped or truncated at 80
# columns, a table cell reads "parameterisatio…" and one event spans two lines.
PIPE_WIDTH = 10_000


class _Console(Console):
    """A rich console that is as wide as its content when it does not write to a terminal."""

    @property
    def size(self) -> ConsoleDimensions:
        size = super().size
        return size if self.is_terminal else ConsoleDimensions(PIPE_WIDTH, size.height)


out = _Console()
err = _Console(stderr=True)

SetOpt = Annotated[list[str] | None, typer.Option("--set", help="override a spec value: path=value (YAML)")]
MultiOpt = Annotated[list[str] | None, typer.Option("-m", "--multirun", help="a factor for this study: path=level,"
                                                    "level,… (YAML each); recorded in the stored spec")]
StorageOpt = Annotated[str | None, typer.Option("--storage", help="Optuna storage URL [env ABLATE_STORAGE]")]
TrackingOpt = Annotated[
    str | None, typer.Option("--tracking-uri", help="MLflow tracking URI [env ABLATE_TRACKING_URI]")
]
ReuseOpt = Annotated[bool, typer.Option("--reuse/--no-reuse", help="link items other studies on the stores "
                                                                  "have finished instead of running them")]
ReuseStaleOpt = Annotated[bool, typer.Option("--reuse-stale", help="also reuse results of the same configs "
                                                                   "run by another code version (stale)")]


def _load(path: Path, overrides: list[str] | None, multirun: list[str] | None = None, plugins: bool = False) -> Spec:
    """The validated spec; ``plugins``: also run each plug-in it uses on a tiny batch."""
    from ablate import design
    from ablate.spec.files import multirun_overrides

    if not path.exists() and not path.suffix and len(path.parts) == 1:  # a study's name, not a file
        err.print(_not_a_file(path.name), highlight=False, markup=True, soft_wrap=True)
        raise typer.Exit(2)
    try:
        spec = design.load(path, [*(overrides or []), *multirun_overrides(multirun or [])])
        if plugins:
            from ablate.models.contract import spec_problems

            if problems := spec_problems(spec):
                raise SpecError(problems)
        return spec
    except SpecError as exc:
        for line in str(exc).splitlines():
            err.print(f"[red]error[/red] {line}", highlight=False, markup=True, soft_wrap=True)
        raise typer.Exit(2) from None


def _not_a_file(name: str) -> str:
    """The error for a study's name where a spec file is asked for (issue 43: ``ablate run NAME``)."""
    from rich.markup import escape

    found = [p for p in (Path("studies") / f"{name}.yaml", Path(f"{name}.yaml")) if p.is_file()]
    hint = f"; did you mean {escape(str(found[0]))}?" if found else ""
    return (f"[red]error[/red] {escape(name)} is not a file: this command takes a spec file (status, report and "
            f"worker take a study's name){hint}")


def _store_error(exc: Exception) -> typer.Exit:
    from rich.markup import escape

    from ablate.stores import redact

    err.print(f"[red]error[/red] {escape(redact(str(exc)))}", highlight=False, soft_wrap=True)
    return typer.Exit(1)


def _interrupted(signum: int, requeued: list[str], what: str = "interrupted") -> typer.Exit:
    """ONE line saying what a signal stopped and what was re-queued; exit 128 + the signal."""
    for s in (signal.SIGINT, signal.SIGTERM):  # the clean-up is done: a further signal must not cut this line
        signal.signal(s, signal.SIG_IGN)
    name = signal.Signals(signum).name
    items = f"re-queued {len(requeued)} running item(s): {', '.join(requeued)}" if requeued else \
        "no running item to re-queue"
    err.print(f"{what} ({name}): {items}; run the same command to resume", highlight=False, markup=False,
              soft_wrap=True)
    return typer.Exit(128 + signum)


def _unexpected(exc: BaseException) -> typer.Exit:
    """A bug: one line on the terminal (the traceback with ABLATE_TRACEBACK=1), exit 1."""
    import traceback

    from ablate.stores import redact

    if os.environ.get("ABLATE_TRACEBACK"):
        err.print(redact("".join(traceback.format_exception(exc))), highlight=False, markup=False)
    first = (str(exc).strip().splitlines() or [""])[0]
    err.print(f"error (internal) {type(exc).__name__}: {redact(first)[:500]}; ABLATE_TRACEBACK=1 shows where",
              highlight=False, markup=False, soft_wrap=True)
    return typer.Exit(1)


@app.command()
def validate(file: Path, set_: SetOpt = None, multirun: MultiOpt = None) -> None:
    """Check a study spec, and each plug-in it uses on a tiny batch; print OK or each error with its key path (exit 2)."""
    spec = _load(file, set_, multirun, plugins=True)
    from ablate.design import cells

    out.print(f"OK {spec.name}: {len(cells(spec))} cells × {len(spec.seed_list)} seeds")


@app.command()
def plan(
    file: Path,
    set_: SetOpt = None,
    multirun: MultiOpt = None,
    storage: StorageOpt = None,
    tracking_uri: TrackingOpt = None,
    estimate: Annotated[bool, typer.Option("--estimate", help="time a few training steps per model shape "
                                                              "and estimate the wall time of what is pending")] = False,
    device: Annotated[str, typer.Option(help="device of the --estimate dry run: cpu, cuda, cuda:k")] = "cpu",
    reuse: ReuseOpt = True,
    reuse_stale: ReuseStaleOpt = False,
    workers: Annotated[int, typer.Option(min=1, help="--estimate for this many local workers (as `ablate run "
                                                     "--workers`)")] = 1,
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
        sys.stdout.write(outputs.stdout)
        sys.stdout.flush()
        for p in outputs.write():  # the reference, with --docs
            err.print(f"wrote {p}")
        return
    if check:
        stale = outputs.stale()
        for p in stale:
            err.print(f"[red]stale[/red] {p}: run `ablate schema --docs docs/spec.md` to regenerate")
        raise typer.Exit(1 if stale else 0)
    for p in outputs.write():
        out.print(f"wrote {p}")


DeviceOpt = Annotated[str, typer.Option(help="cpu, cuda, cuda:k, or auto (one worker per visible GPU)")]
CheckpointOpt = Annotated[int, typer.Option("--checkpoint-every", help="steps between checkpoints (0: never)")]
VerboseOpt = Annotated[bool, typer.Option("-v", "--verbose", help="log each item's start and end")]


@app.command()
def run(
    file: Path,
    set_: SetOpt = None,
    multirun: MultiOpt = None,
    storage: StorageOpt = None,
    tracking_uri: TrackingOpt = None,
    device: DeviceOpt = "cpu",
    workers: Annotated[int, typer.Option(min=0, help="local worker processes; 0: only queue the items for "
                                                     "`ablate worker` processes elsewhere")] = 1,
    checkpoint_every: CheckpointOpt = 100,
    report: Annotated[bool, typer.Option("--report/--no-report", help="render the spec's reports after")] = False,
    verbose: VerboseOpt = False,
    reuse: ReuseOpt = True,
    reuse_stale: ReuseStaleOpt = False,
    retry_failed: Annotated[bool, typer.Option("--retry-failed", help="re-queue the items that failed with an "
                                               "error (not diverged), keeping their failed attempts")] = False,
) -> None:
    """Run every (cell, seed) of a study not already finished; resumes where it stopped. Items
    another study on the stores has finished are linked, not run again (--no-reuse runs them)."""
    spec = _load(file, set_, multirun, plugins=True)
    from rich.markup import escape

    from ablate.runner.launch import Stopped, run_study
    from ablate.runner.worker import WorkerStopped
    from ablate.stores import resolve

    try:
        after = run_study(spec, resolve(storage, tracking_uri), out, err, workers=workers, device=device,
                          checkpoint_every=checkpoint_every, verbose=verbose, reuse=reuse, reuse_stale=reuse_stale,
                          retry_failed=retry_failed)
    except Stopped as exc:
        raise _interrupted(exc.signum, exc.requeued, exc.what) from None
    except WorkerStopped as exc:
        raise _store_error(exc) from None
    if after is None:  # queue only
        return
    # The exit status is the study's: a worker that died while the others finished every item
    # (its item recovered and run again) is a warning, not a failed run.
    for line in after.worker_failures:
        kind = "[red]error[/red]" if after.unfinished or after.errors else "[yellow]warning[/yellow]"
        err.print(f"{kind} {escape(line)}", highlight=False, soft_wrap=True)
    out.print(f"{spec.name}: {after.done} done, {after.failed} failed, {after.unfinished} unfinished")
    if report:
        _render(spec.name, spec.report_names, Path("reports") / spec.name, ("html", "pdf"), storage, tracking_uri)
    if after.failed and after.errors:  # a diverged cell is a result; an error is a bug to look at
        err.print(f"{after.errors} item(s) failed with an error; see `ablate status {spec.name}` and the report; "
                  "after a fix, `ablate run SPEC --retry-failed` re-runs them", highlight=False)
        raise typer.Exit(1)
    if after.unfinished:
        err.print(f"{after.unfinished} item(s) unfinished: run the same command to resume, or "
                  f"see `ablate status {spec.name}`", highlight=False)
        raise typer.Exit(1)


@app.command("plugins")
def plugins_command() -> None:
    """The installed plug-ins (docs/plugins.md): kind, name, target, distribution, source hash, and whether each loads."""
    from ablate.models.contract import installed_rows

    rows = installed_rows()
    if not rows:
        out.print("no plug-ins installed (docs/plugins.md)")
        return
    _table("plug-ins", ["kind", "name", "target", "from", "source", "status"], rows)


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
    from ablate.runner.signals import Interrupted
    from ablate.runner.worker import WorkerStopped, work
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
    except Interrupted as exc:
        raise _interrupted(exc.signum, exc.requeued, "worker interrupted") from None
    except WorkerStopped as exc:
        raise _store_error(exc) from None
    except KeyboardInterrupt:  # before the worker installed its handlers: nothing was claimed
        raise _interrupted(signal.SIGINT, [], "worker interrupted") from None
    out.print(f"worker finished: {outcomes}")


@app.command()
def status(
    study: str,
    storage: StorageOpt = None,
    tracking_uri: TrackingOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object (counts, cells, running "
                                                         "items, ETA) for scripts")] = False,
) -> None:
    """Print a study's progress per cell and what is running, then exit."""
    import json

    from ablate.runner import locate, progress

    # One read-only opening of the study, its items' statuses read from the queue alone.
    found = locate.status(study, storage, tracking_uri, settle=True)  # ends what a kill left RUNNING
    snap = progress.snapshot(found.study)
    workers = snap.workers
    if as_json:
        sys.stdout.write(json.dumps(found.to_json(progress.status_json(study, snap, workers)), default=str) + "\n")
        return
    _status_table(study, found.cells)
    out.print(found.summary(progress.duration(snap.eta_seconds(workers))), highlight=False, soft_wrap=True)
    if snap.items:
        out.print(progress.table(study, snap, workers).renderables[-1])
    for line in found.sequential + found.extension_lines():  # looks; until converged; WSD continuations
        out.print(line, highlight=False, soft_wrap=True)


def _status_table(study: str, per_cell: list[dict]) -> None:
    """The per-cell counts of ``status``: a rich table, or above ``plan.PLAIN_ROWS`` cells plain
    aligned lines, as ``plan`` prints them (rich lays out 100 rows in seconds on a busy machine)."""
    from ablate.runner.plan import PLAIN_ROWS, plain_table
    from ablate.runner.standing import STATUSES

    title = f"{study}: status per cell"
    rows = [[c["cell_label"], *[str(c[s]) for s in STATUSES]] for c in per_cell]
    if len(rows) > PLAIN_ROWS:
        out.print("\n".join(plain_table(title, ["cell", *STATUSES], rows, set(STATUSES))), highlight=False,
                  markup=False, soft_wrap=True)
        return
    out.print(title, highlight=False, soft_wrap=True)  # a table title would pad to the table's width
    table = Table()
    table.add_column("cell")
    for s in STATUSES:
        table.add_column(s, justify="right")
    for row in rows:
        table.add_row(*row)
    out.print(table)


def _table(title: str, headers: list[str], rows: list[list[str]], right: set[str] = frozenset()) -> None:
    """A table: rich's on a terminal; plain aligned columns, never truncated, when piped."""
    if out.is_terminal:
        table = Table(title=title, title_justify="left")
        for h in headers:
            table.add_column(h, justify="right" if h in right else "left", overflow="fold")
        for row in rows:
            table.add_row(*row)
        out.print(table)
        return
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]

    def line(cells: list[str]) -> str:
        return "  ".join(c.rjust(w) if h in right else c.ljust(w)
                         for c, w, h in zip(cells, widths, headers, strict=True)).rstrip()

    print(title)
    print(line(headers))
    for row in rows:
        print(line(row))


@app.command("ls")
def ls(storage: StorageOpt = None, tracking_uri: TrackingOpt = None) -> None:
    """List the studies on the stores: cells, items done / failed / running / waiting (and how
    many were reused from other studies), last activity."""
    from ablate.runner import housekeeping as hk
    from ablate.runner import standing as sd
    from ablate.stores import redact, resolve

    url = sd.existing_store_url(storage)
    if url is None:
        out.print("no stores yet: no study has run here (see --storage, ABLATE_HOME)")
        return
    rows = hk.overview(resolve(url, tracking_uri, create=False))
    headers = ["study", "cells", "done", "reused", "failed", "running", "waiting", "dropped", "last activity"]
    table = [[r.name, str(r.cells), str(r.done), str(r.reused), str(r.failed), str(r.running), str(r.waiting),
              str(r.dropped), r.last.astimezone().strftime("%Y-%m-%d %H:%M:%S") if r.last else "-"] for r in rows]
    _table(f"studies on {redact(url)}", headers, table, set(headers[1:-1]))


def removal_question(plan: Any) -> tuple[str, str]:
    """What ``ablate rm`` removes, in words, and the question it asks (``plan``: a
    ``housekeeping.Removal``). The runs other studies reuse stay (the parent run's with them), and
    their results stay reusable: ``plan`` of those studies still names the removed study as where
    they were trained (issue 43: "48 trials, 0 MLflow runs; keep 49 runs that …" said neither)."""
    from ablate.runner import housekeeping as hk

    users = plan.users
    removed = hk.counted(plan.trials, "trial") + (f", {hk.counted(len(plan.runs), 'MLflow run')}"
                                                  if plan.runs or not plan.kept else "")
    kept = (f"; {hk.counted(len(plan.kept), 'MLflow run')} (the parent run's included) stay, since "
            f"{', '.join(users)} reuse{'s' if len(users) == 1 else ''} them: their results stay reusable, "
            f"and plan still names {plan.study!r} as where they were trained") if plan.kept else ""
    return removed, f"remove study {plan.study!r}: {removed}{kept}?"


def _confirm(question: str, yes: bool) -> None:
    if yes:
        return
    if not sys.stdin.isatty():
        err.print("[red]error[/red] not a terminal: nothing removed; pass --yes to remove without a question")
        raise typer.Exit(1)
    if not typer.confirm(question, default=False):
        err.print("nothing removed")
        raise typer.Exit(1)


@app.command("rm")
def rm(
    study: str,
    storage: StorageOpt = None,
    tracking_uri: TrackingOpt = None,
    orphans: Annotated[bool, typer.Option("--orphans", help="drop only the study's trials whose items belong to "
                                                            "no cell of its current spec")] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="do not ask for confirmation (scripts)")] = False,
    force: Annotated[bool, typer.Option("--force", help="remove even while workers run its items")] = False,
) -> None:
    """Remove a study: its queue entries (every trial) and its MLflow runs, after confirmation.
    Runs another study reuses stay (with their parent run); its links to other studies' runs
    remove nothing of theirs. With --orphans, drop only its orphaned trials."""
    from ablate.runner import housekeeping as hk
    from ablate.runner import sequential_looks
    from ablate.stores import resolve

    stores = resolve(storage, tracking_uri)
    try:
        if orphans:
            found = hk.study_orphans(study, stores, sequential_looks.items)
        else:
            plan = hk.removal(study, stores, force)
    except hk.StudyRunning as exc:
        err.print(f"[red]error[/red] {exc}")
        raise typer.Exit(1) from None
    except Exception as exc:  # the stores, MLflow included, unreachable or refusing: nothing was removed
        raise _store_error(exc) from None
    if orphans:
        if not found.found:
            out.print(f"{study}: no orphaned trials")
            return
        _confirm(f"drop {found.found.trials} finished trials ({len(found.found.finished)} items) and "
                 f"{len(found.found.unfinished)} queued items of {study!r} that belong to no cell of its spec?", yes)
        try:
            dropped = hk.drop(found)
        except Exception as exc:
            raise _store_error(exc) from None
        out.print(f"{study}: dropped {hk.counted(dropped.trials, 'trial')}; "
                  f"deleted {hk.counted(dropped.runs_deleted, 'MLflow run')}"
                  + (f", kept {len(dropped.runs_kept)} that other studies reuse" if dropped.runs_kept else "")
                  + (f"; {hk.counted(dropped.running, 'running item')} left alone" if dropped.running else ""))
        return
    removed, question = removal_question(plan)
    _confirm(question, yes)
    try:
        renamed = hk.remove(plan, stores)
    except Exception as exc:  # half done: running the same command again finishes it
        raise _store_error(exc) from None
    out.print(f"removed {study}: {removed} (deleted: `mlflow gc` purges them and their artifacts)"
              + (f"; kept {hk.counted(len(plan.kept), 'run')} in experiment {renamed!r}, reused by {', '.join(plan.users)}"
                 if plan.kept else ""), highlight=False)


@app.command()
def keep(
    study: str,
    new: Annotated[str, typer.Argument(help="the name of the study that keeps them")],
    storage: StorageOpt = None,
    tracking_uri: TrackingOpt = None,
) -> None:
    """Keep the orphaned trials of STUDY as study NEW: NEW gets the spec they were queued under
    (renamed) and links them (nothing runs; the MLflow runs are shared); STUDY drops them."""
    from ablate.runner import housekeeping as hk
    from ablate.runner import sequential_looks
    from ablate.spec import NAME, NAME_RULE
    from ablate.stores import resolve

    if not NAME.match(new):
        err.print(f"[red]error[/red] NEW: {new!r}: {NAME_RULE}")
        raise typer.Exit(2)
    try:
        done = hk.keep(study, new, resolve(storage, tracking_uri), sequential_looks.items)
    except hk.NameTaken as exc:
        err.print(f"[red]error[/red] {exc}")
        raise typer.Exit(2) from None
    except hk.SpecNotRecorded as exc:
        err.print(f"[red]error[/red] {exc}")
        raise typer.Exit(1) from None
    except hk.NoneKept as exc:
        err.print(f"[red]error[/red] {exc}", highlight=False)
        raise typer.Exit(1) from None
    if done.dropped is None:
        out.print(f"{study}: no finished orphaned trials to keep")
        return
    out.print(f"kept {len(done.kept)} orphaned items of {study} as study {new} ({done.covered} of them in the spec they "
              f"were queued under, spec hash {done.spec_hash}; nothing was run); {study} dropped "
              f"{done.dropped.trials} trials" + (f"; {done.left} orphaned items are not in that spec and stay"
                                                  if done.left else ""), highlight=False)


@app.command()
def gc(
    storage: StorageOpt = None,
    every: Annotated[bool, typer.Option("--all", help="remove every kept checkpoint, also those a study's cells "
                                                      "still have (their longer runs then train from step 0)")] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="do not ask for confirmation (scripts)")] = False,
) -> None:
    """Remove the stable-phase checkpoints WSD runs kept (under the checkpoint folder's stable/) whose
    cell is in no study on the storage any more (after `ablate rm`); --all removes them all. A longer
    run of a cell whose checkpoint is gone trains from step 0."""
    from ablate.runner import housekeeping as hk
    from ablate.runner import phases

    try:
        found = phases.garbage(storage, every)
    except phases.NoStores as exc:
        err.print(f"[red]error[/red] {exc}")
        raise typer.Exit(1) from None
    kept, drop = found.kept, found.drop
    if not kept:
        out.print(f"no kept checkpoints under {found.root / 'stable'}")
        return
    if not drop:
        out.print(f"{hk.counted(len(kept), 'kept checkpoint')} ({found.size / 2**20:.1f} MiB), each of a cell a "
                  "study still has: nothing to remove (--all removes them anyway)")
        return
    cells = sorted({f"{k.cell_label} ({k.cell_id})" for k in drop})
    _confirm(f"remove {hk.counted(len(drop), 'kept checkpoint')} ({found.drop_size / 2**20:.1f} MiB) of "
             f"{hk.counted(len(cells), 'cell')}: {', '.join(cells[:5])}{' …' if len(cells) > 5 else ''}?", yes)
    freed = phases.drop_kept(drop)
    out.print(f"removed {hk.counted(len(drop), 'kept checkpoint')}, {freed / 2**20:.1f} MiB; kept {len(kept) - len(drop)}",
              highlight=False)


def _render(study: str, reports: list[str], out_dir: Path, formats: tuple[str, ...], storage, tracking_uri,
            parameters: dict | None = None, export: bool = False, data=None) -> None:
    from ablate.report.render import ReportError, render

    try:
        for path in render(study, reports, out_dir, formats, storage, tracking_uri, parameters, export, data):
            out.print(f"wrote {path}")
        if export:
            for kind, exts in (("figures", "PDF, SVG and PNG"), ("tables", "CSV and LaTeX")):
                files = sorted((out_dir / kind).glob("*")) if (out_dir / kind).is_dir() else []
                stems = {f.name.split(".")[0] for f in files if not f.name.endswith("-data.csv")}
                out.print(f"wrote {len(stems)} {kind} ({exts}) to {out_dir / kind}")
    except ReportError as exc:  # the report, the cell and the error, not a notebook traceback
        from rich.markup import escape

        err.print(f"[red]error[/red] {escape(str(exc))}", highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None


FormatOpt = Annotated[str, typer.Option("--format", help="comma-separated: html,pdf")]
ParamOpt = Annotated[list[str] | None, typer.Option(
    "--param", "-p", help="KEY=VALUE for the report notebooks, e.g. -p reference='layers=2' -p alpha=0.01")]
CellsOpt = Annotated[list[str] | None, typer.Option(
    "--cells", help="only cells matching a selector, e.g. 'model.heads=8' or 'model.heads=[4, 8], variant=RotRNN' "
                    "(the design's selector syntax); repeat for any of several")]


def _formats(fmt: str) -> tuple[str, ...]:
    formats = tuple(f.strip() for f in fmt.split(",") if f.strip())
    bad = [f for f in formats if f not in ("html", "pdf")]
    if bad or not formats:
        err.print(f"[red]error[/red] --format: {bad[0] if bad else fmt!r} is not one of: html, pdf")
        raise typer.Exit(2)
    return formats


def _is_spec_file(arg: str) -> bool:
    return arg.endswith((".yaml", ".yml")) and Path(arg).is_file()


def _export_error(exc: Exception) -> typer.Exit:
    """An export that cannot be written or read: one line, exit 2 (invalid input)."""
    from rich.markup import escape

    err.print(f"[red]error[/red] {escape(str(exc))}", highlight=False, soft_wrap=True)
    return typer.Exit(2)


@app.command("export")
def export_(
    args: Annotated[list[str], typer.Argument(
        help="the study (or several, or a spec file), then the directory to write", metavar="STUDY... DIR")],
    storage: StorageOpt = None,
    tracking_uri: TrackingOpt = None,
) -> None:
    """Write a study's tidy data into DIR: trials, metrics, curves and per-trial provenance as
    Parquet, the spec as it ran (spec.yaml), its hash, stores, factors and notes (study.json) and a
    manifest of sha256s. `ablate report --data DIR` renders from it with no store; pandas, polars or
    DuckDB read it without ablate. Several studies: DIR/STUDY each. DIR must be new, empty or an
    export of the same study (replaced)."""
    from ablate import results

    if len(args) < 2:
        err.print("[red]error[/red] give a study and a directory: ablate export STUDY... DIR")
        raise typer.Exit(2)
    names, dest = list(dict.fromkeys(args[:-1])), Path(args[-1])
    if len(names) == 1 and _is_spec_file(names[0]):
        names = [_load(Path(names[0]), None).name]
    try:  # every directory checked and every study read before any file is written
        written = results.export_many(names, dest, storage, tracking_uri)
    except results.ExportError as exc:
        raise _export_error(exc) from None
    try:
        for done in written:
            rows = done.rows
            out.print(f"wrote {done.path}: {rows['trials']:,} trials, {rows['metrics']:,} metric rows, "
                      f"{rows['curves']:,} curve rows ({done.files} files, {done.size / 1e6:.2f} MB)", highlight=False)
            for line in done.missing:
                err.print(f"note: {line}", highlight=False, markup=False, soft_wrap=True)
    except results.ExportError as exc:
        raise _export_error(exc) from None


@app.command()
def report(
    studies: Annotated[list[str] | None, typer.Argument(help="a study name (or several), or a spec file (.yaml)",
                                                        metavar="STUDY...")] = None,
    storage: StorageOpt = None,
    tracking_uri: TrackingOpt = None,
    out_dir: Annotated[Path | None, typer.Option("--out", help="output directory [reports/STUDY, "
                                                               "reports/compare-NAME]")] = None,
    fmt: FormatOpt = "html,pdf",
    only: Annotated[str | None, typer.Option("--reports", help="comma-separated report names")] = None,
    param: ParamOpt = None,
    compare_: Annotated[bool, typer.Option("--compare", help="one comparison report over the studies "
                                                             "(as `ablate compare`)")] = False,
    cells: CellsOpt = None,
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
    from ablate.report.render import study_reports

    formats = _formats(fmt)
    studies = studies or []
    if data is not None:
        if studies:
            err.print("[red]error[/red] --data renders the studies of its exports: give no study with it")
            raise typer.Exit(2)
        if compare_ or cells:
            _compare([], cells, None, None, out_dir, formats, None, None, param, data=[data])
        else:
            _report_from_exports(data, out_dir, formats, only, param, export)
        return
    if not studies:
        err.print("[red]error[/red] name a study (or a spec file), or give --data DIR")
        raise typer.Exit(2)
    if compare_ or cells:
        if any(_is_spec_file(a) for a in studies):
            err.print("[red]error[/red] --compare takes study names; for a spec's `compare:` use `ablate compare --spec FILE`")
            raise typer.Exit(2)
        _compare(studies, cells, None, None, out_dir, formats, storage, tracking_uri, param)
        return
    spec = None
    if len(studies) == 1 and _is_spec_file(studies[0]):
        spec = _load(Path(studies[0]), None)
        studies = [spec.name]
    chosen = _only(only) if only else None
    for study in studies:
        # The stores that hold it (a subfolder of the project finds its .ablate above).
        stores, names = study_reports(study, storage, tracking_uri, chosen)
        parameters = _report_parameters(param or [], names)
        target = out_dir / study if out_dir is not None and len(studies) > 1 else out_dir
        _render(study, names, target or Path("reports") / study, formats, stores.storage, stores.tracking,
                parameters, export)
    if spec is not None and spec.compare:
        _compare([], None, spec, None, None, formats, storage, tracking_uri, param)


def _only(only: str) -> list[str]:
    from ablate.report import REPORTS, sections

    names = [n.strip() for n in only.split(",") if n.strip()]
    for n in names:
        if n not in REPORTS and not sections.is_section(n):
            err.print(f"[red]error[/red] --reports: {n!r} is not one of: {', '.join(REPORTS)}")
            raise typer.Exit(2)
    return names


def _report_from_exports(data: Path, out_dir: Path | None, formats: tuple[str, ...], only: str | None,
                         param: list[str] | None, export: bool) -> None:
    from ablate import results
    from ablate.report.render import export_reports

    try:  # every export verified before any report is rendered
        read = [results.read_export(folder) for folder in results.exports_in(data)]
    except results.ExportError as exc:
        raise _export_error(exc) from None
    for res in read:
        names = export_reports(res, _only(only) if only else None)
        parameters = _report_parameters(param or [], names)
        target = out_dir / res.study if out_dir is not None and len(read) > 1 else out_dir
        _render(res.study, names, target or Path("reports") / res.study, formats, None, None, parameters, export,
                data=res)


@app.command()
def compare(
    studies: Annotated[list[str] | None, typer.Argument(help="the studies to compare", metavar="STUDY...")] = None,
    cells: CellsOpt = None,
    spec_file: Annotated[Path | None, typer.Option("--spec", help="a spec whose `compare:` section names the "
                                                                 "studies and their cells")] = None,
    name: Annotated[str | None, typer.Option("--name", help="the comparison's name [the spec's name, or the "
                                                            "studies' joined by '-']")] = None,
    out_dir: Annotated[Path | None, typer.Option("--out", help="output directory [reports/compare-NAME]")] = None,
    fmt: FormatOpt = "html,pdf",
    storage: StorageOpt = None,
    tracking_uri: TrackingOpt = None,
    param: ParamOpt = None,
    data: Annotated[list[Path] | None, typer.Option(
        "--data", help="compare the studies of exports (`ablate export STUDY DIR`) instead of the stores': an "
        "export, or a folder of exports; repeat for several", metavar="DIR")] = None,
) -> None:
    """One report over several studies, or some of their cells: the variants' accuracy with CIs,
    hidden-state norm curves in shared axes, and the statistics where cells are comparable (same
    task and data version). Writes comparison.{html,pdf} under reports/compare-NAME. --data DIR
    (repeated) compares the exported studies, in that order, with no store."""
    spec = _load(spec_file, None) if spec_file is not None else None
    if spec is not None and studies:
        err.print("[red]error[/red] give studies or --spec, not both")
        raise typer.Exit(2)
    if data and studies:
        err.print("[red]error[/red] --data compares the studies of its exports: give no study with it "
                  "(--spec picks among them)")
        raise typer.Exit(2)
    _compare(studies or [], cells, spec, name, out_dir, _formats(fmt), storage, tracking_uri, param, data)


def _compare(studies: list[str], cells: list[str] | None, spec: Spec | None, name: str | None, out_dir: Path | None,
             formats: tuple[str, ...], storage: str | None, tracking_uri: str | None, param: list[str] | None,
             data: list[Path] | None = None) -> None:
    from rich.markup import escape

    from ablate import results
    from ablate.report.render import ComparisonError, ReportError, comparison, render_comparison

    try:
        asked = comparison(studies, cells, spec, name, storage, tracking_uri, data)
    except ComparisonError as exc:
        for line in exc.lines:
            err.print(f"[red]error[/red] {escape(line)}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    except results.ExportError as exc:
        raise _export_error(exc) from None
    except SpecError as exc:
        for line in str(exc).splitlines():
            err.print(f"[red]error[/red] {line}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    parameters = _report_parameters(param or [], ["comparison"])
    try:
        for path in render_comparison(asked.studies, out_dir or Path("reports") / f"compare-{asked.name}",
                                      asked.selectors, formats, storage, tracking_uri, parameters, title=asked.name,
                                      data=asked.data):
            out.print(f"wrote {path}")
    except ReportError as exc:
        raise _store_error(exc) from None


def _report_parameters(pairs: list[str], reports: list[str]) -> dict:
    """The ``--param`` pairs as the reports' parameters; exit 2 on one no report declares."""
    from rich.markup import escape

    from ablate.report.render import ParameterError, parse_parameters

    try:
        return parse_parameters(pairs, reports)
    except ParameterError as exc:
        err.print(f"[red]error[/red] {escape(str(exc))}")
        raise typer.Exit(2) from None


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
        sys.exit(_unexpected(exc).exit_code)


if __name__ == "__main__":  # pragma: no cover
    main()
