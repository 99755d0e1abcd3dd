"""``ablate run`` as a library call: queue a study's items, run them with local workers (this
process, or a pool) under the live view, and say how the study stands after.

``run_study`` prints what it does as it goes (the queue's summary, reuse, orphans, a sequential
look, the live view, the events a worker prints itself) on the consoles it is given, and returns
the study's state (an ``Outcome`` that prints itself and tells its exit status). ``run_worker``
is ``ablate worker``. A signal ends either with ``Stopped``; a store that fails with
``StorageError``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import signal
import sys
from collections.abc import Callable

import optuna
from optuna.trial import TrialState
from rich.console import Console
from rich.markup import escape

from ablate.design import cells
from ablate.runner import dashboard, fused, pool, queue, sequential_looks, tracking
from ablate.runner import housekeeping as hk
from ablate.runner import items as its
from ablate.runner import study as st
from ablate.runner.forking import Zygote
from ablate.runner.plan import orphan_lines
from ablate.runner.signals import Interrupted
from ablate.runner.worker import WorkerStopped, work
from ablate.spec import Spec
from ablate.stores import StorageError, Stores, redact, storage_problem
from ablate.terminal import Refused, Said, Stopped, count


@dataclasses.dataclass(frozen=True)
class Outcome:
    """The study after the run: item counts, the items that failed with an error (a bug, not a
    diverged cell), and a line per worker that failed."""

    done: int
    failed: int
    unfinished: int
    errors: int
    worker_failures: list[str]
    study: str = ""
    # Items failed for good by running out of memory (or stores failing) at every retry: not a
    # result of the cell as a divergence is, and no run that ends with only these succeeded.
    exhausted: int = 0
    # Cells every run of which diverged: a result (exit 0), but nothing about them can be tested,
    # and a model that diverges everywhere it runs is more often a bug than a finding.
    diverged_cells: list[str] = dataclasses.field(default_factory=list)

    def print(self, out: Console, err: Console) -> None:
        """The workers that failed (a warning when the others finished every item: its item was
        recovered and run again), the cells no run of which trained, then the counts."""
        for line in self.worker_failures:
            kind = "[red]error[/red]" if self.unfinished or self.errors else "[yellow]warning[/yellow]"
            err.print(f"{kind} {escape(line)}", highlight=False, soft_wrap=True)
        if self.diverged_cells:
            n = len(self.diverged_cells)
            err.print(f"[yellow]warning[/yellow] every run of {n} cell{'s' if n > 1 else ''} diverged, so the reports "
                      f"test nothing about {'them' if n > 1 else 'it'}: {escape(', '.join(self.diverged_cells))} "
                      f"(where the model is not meant to blow up, look at its numerics: `ablate status "
                      f"{escape(self.study)}`)", highlight=False, soft_wrap=True)
        out.print(f"{self.study}: {self.done} done, {self.failed} failed, {self.unfinished} unfinished")

    def verdict(self, err: Console) -> int:
        """The exit status, the study's: 1, with what to do, when items failed with an error (a
        diverged cell is a result; an error is a bug to look at), ran out of memory at every retry
        or are unfinished; else 0."""
        if self.failed and self.errors:
            err.print(f"{count(self.errors, 'item')} failed with an error; see `ablate status {self.study}` and the report; "
                      "after a fix, the same command with --retry-failed re-runs them", highlight=False)
            return 1
        if self.failed and self.exhausted:
            err.print(f"{count(self.exhausted, 'item')} failed at every retry (out of memory at the most micro-batches, or "
                      f"the stores failing); see `ablate status {self.study}`; with a smaller batch, model or probe "
                      "(or more memory), the same command with --retry-failed re-runs them", highlight=False)
            return 1
        if self.unfinished:
            err.print(f"{count(self.unfinished, 'item')} unfinished: run the same command to resume, or "
                      f"see `ablate status {self.study}`", highlight=False)
            return 1
        return 0


def look_line(info: dict) -> str:
    """A sequential study's look, as a worker reports it."""
    undecided = f", {info['undecided']} undecided at the last look" if info.get("undecided") else ""
    if info.get("finished"):
        return (f"look {info['look']}: {count(info['decided'], 'comparison')} decided{undecided}; the sequential design is "
                "finished")
    nxt = f"look {info['look'] + 1} of {info['looks']}" if info.get("looks") else "the next look"
    return (f"look {info['look']}: {count(info['decided'], 'comparison')} decided, {info['open']} open; "
            f"{count(info['queued'], 'seed item')} queued for {nxt}")


def look_decisions(spec: Spec, state: sequential_looks.State | None, since: int = 0) -> list[str]:
    """Every look a sequential study analysed after its first ``since``: what it decided, each
    comparison (cell on measure: its decision, estimate and repeated interval, p), and how many stay
    open — what ``ablate run`` prints of the looks its workers made (a pool's workers report theirs
    to their own process)."""
    if state is None or spec.sequential is None:
        return []
    labels = {c.id: c.label for c in cells(spec)}
    out = []
    for k, rows in enumerate(state.history[since:], start=since + 1):
        ended = [r for r in rows if r.get("decision") != "open"]
        # Reaching the last look undecided ends a comparison without deciding it (outcome): said apart.
        undecided = sum(sequential_looks.outcome(r) == "undecided" for r in ended)
        seeds = rows[0]["seeds"] if rows else "?"
        out.append(f"look {k} ({seeds} seeds): {len(ended) - undecided} of {count(len(rows), 'open comparison')} decided"
                   + (f", {undecided} undecided at the last look" if undecided else "")
                   # A look seen only once the next was analysed too (a loaded view, a fast look) still says it
                   # added seeds; the ETA is said of the latest only.
                   + ("; the sequential design is finished" if state.finished and k == len(state.history)
                      else f"; seeds added for look {k + 1} of {len(spec.sequential.looks)}"
                      + (" (the ETA is to its end)" if k == len(state.history) else "")))
        for r in ended:
            p = f", p {r['p']:.3g}" if isinstance(r.get("p"), float) else ""
            said = sequential_looks.outcome(r)
            said = "undecided at the last look" if said == "undecided" else said
            out.append(f"  {said}: {sequential_looks.estimate_words(r, labels)}{p}"
                       f"{sequential_looks.equivalence_words(r, spec)}{sequential_looks.untrained_words(r)}")
    return out


def new_looks(spec: Spec, study: optuna.Study) -> Callable[[optuna.Study], list[str]]:
    """What the live view says of a sequential study's looks: each call gives the looks analysed
    since the previous (``look_decisions``), by whichever process made them; the first, those since
    ``study``'s state now."""
    seen = len(first.history) if (first := sequential_looks.load_state(study)) is not None else 0

    def lines(now: optuna.Study) -> list[str]:
        nonlocal seen
        state = sequential_looks.load_state(now)
        if state is None or len(state.history) <= seen:
            return []
        said, seen = look_decisions(spec, state, seen), len(state.history)
        return said

    return lines


def worker_events(err: Console, verbose: bool) -> Callable[[str, dict], None]:
    """What an in-process worker prints itself: what the store does not show as a finished trial
    (an out-of-memory retry, a superseded attempt), and with -v every event; the live view shows
    the rest; not a fused group's ``note``, which ``run_study`` printed when it queued the items."""

    def emit(event: str, info: dict) -> None:
        if event == "look":  # the live view says each look, whichever process made it (``new_looks``)
            return
        if event != "note" and (verbose or event in ("oom", "superseded", "reused", "warning", "pruned")):
            err.print(f"{event} {info.get('cell')} · seed {info.get('seed')} {info.get('message', '')}".rstrip(),
                      highlight=False, markup=False, soft_wrap=True)

    return emit


# What a reused item's light run is made of (tracking.Reused.of).
REUSED_KEYS = ("item", "cell_id", "cell_label", "seed", "phase", "settings", "reused_from", "mlflow_run_id",
               its.DROPPED)
REUSED_SHOWN = "ablate.reused_shown"


def show_reused(study: optuna.Study, stores: Stores, err: Console) -> int:
    """Give the study's reused items their light runs in its MLflow experiment (those without
    one: links made by ``prepare``, or by a worker that found an item finished elsewhere); how
    many it made. A tracking store that fails here costs the light runs only: a warning."""
    try:
        trials = [(e.number, e.state == TrialState.FAIL, e.user_attrs)
                  for e in queue.entries(study, keys=REUSED_KEYS,
                                         states=(TrialState.COMPLETE, TrialState.FAIL, TrialState.PRUNED))
                  if e.user_attrs.get("reused_from")]
        if not trials:
            return 0
        # The reused items last given their light runs: the same set again needs no MLflow (seconds of
        # import on every idle `ablate run` of a study that reuses), as settle_runs' mark.
        mark = hashlib.sha256(json.dumps(sorted(number for number, _, _ in trials)).encode()).hexdigest()[:16]
        if study.user_attrs.get(REUSED_SHOWN) == mark:
            return 0
        with queue.lock(study, f"ablate-reused:{study.study_name}"):  # two `ablate run`s: one light run an item
            made = tracking.log_reused(stores, study.study_name, study.user_attrs.get(st.PARENT_RUN), trials)
        study.set_user_attr(REUSED_SHOWN, mark)
        return made
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0]
        err.print(redact(f"warning: the reused items are not shown in MLflow: {type(exc).__name__}: {first}"),
                  highlight=False, markup=False, soft_wrap=True)
        return 0


def checkpoint_warnings(study: optuna.Study) -> set[str]:
    """The warning lines of the items that trained from step 0 for want of a sound kept checkpoint,
    as an in-process worker prints them (``worker_events``; a retry repeats its attempt's line)."""
    try:
        found = queue.entries(study, keys=("checkpoint_warning", "cell_label", "seed"))
    except Exception:  # a line the store cannot give is not worth failing the run for
        return set()
    return {f"warning {e.user_attrs.get('cell_label')} · seed {e.user_attrs.get('seed')} "
            f"{e.user_attrs['checkpoint_warning']}" for e in found if e.user_attrs.get("checkpoint_warning")}


def settle_after_stop(name: str, stores: Stores) -> int:
    """After a signal stopped the workers: end the MLflow runs of the trials they recorded but
    had no time to end (a worker ends its run after the Optuna record, its commit point). A
    later run would settle them, but `ablate run` has exited by then. How many it ended."""
    try:
        return st.settle_runs(st.open_study(name, stores, read_only=True), stores.tracking)
    except Exception:  # the store went away: the next run settles them
        return 0


def pruning_note(spec: Spec, fuse: int) -> str:
    """What fusing does to the spec's pruner ("" when nothing: ``fused.pruning_note``)."""
    if fuse == 1 or spec.tune is None:
        return ""
    return fused.pruning_note(spec.tune.pruner, spec.tune.trials)


def run_study(spec: Spec, stores: Stores, out: Console, err: Console, *, workers: int = 1, device: str = "cpu",
              checkpoint_every: int = 100, verbose: bool = False, reuse: bool = True,
              reuse_stale: bool = False, retry_failed: bool = False, fuse: int = 1,
              forker: Zygote | None = None) -> Outcome | None:
    """Queue every item of ``spec`` not already finished (``retry_failed``: and those that failed
    otherwise than by diverging, their failed attempts kept) and, unless ``workers`` is 0 (queue
    only: ``None``), run them on ``workers`` local workers on ``device`` (each training up to
    ``fuse`` items of a cell as one model; ``forker``: a zygote started for them already,
    ``forking.early``); the study's state after."""
    stored = sequential_looks.stored_state(spec, stores.storage)
    if changed := sequential_looks.changed_design_lines(spec, stored):  # before the spec is stored with the study
        raise Refused(changed)
    todo = sequential_looks.planned_items(spec, stored)  # a sequential study: the seeds its looks planned

    try:
        prepared = st.prepare(spec, todo, stores, reuse=reuse, reuse_stale=reuse_stale, retry_failed=retry_failed)
        study, queued = prepared
        if prepared.linked:  # the linked items' runs nest under it (show_reused); otherwise the first worker starts it
            st.ensure_parent_run(study, stores)
        states = its.states_by_item(study)
        before = its.Progress.of(study, todo, states)
        orphans = hk.orphans(study, todo)
    except st.StorageError:
        raise
    except KeyboardInterrupt:
        raise Stopped(signal.SIGINT, [], "interrupted while queueing") from None
    except Exception as exc:  # a store that fails while items are queued (read-only, full, gone)
        raise st.StorageError(storage_problem(stores.storage, exc)) from None
    with contextlib.suppress(Exception):  # the note repeats the description attribute: not worth a failed run
        dashboard.save_note(study, spec)
    if line := sequential_looks.fixed_after_looks(spec, sequential_looks.load_state(study)):
        err.print(f"warning {line}", highlight=False, markup=False, soft_wrap=True)
    if prepared.retried:
        shown = "; ".join(prepared.retried[:5]) + (f"; … {len(prepared.retried) - 5} more" if len(prepared.retried) > 5
                                                   else "")
        out.print(f"retrying {count(len(prepared.retried), 'failed item')}, their failed attempts kept: {shown}",
                  highlight=False, soft_wrap=True)
    linked = "".join(f", {n} reused from {source}" for source, n in prepared.linked.items())
    if prepared.stale:
        linked += f" ({prepared.stale} of them stale, by --reuse-stale)"
    out.print(f"{spec.name}: {count(len(todo), 'trial')}, {before.done} done, {before.failed} failed, "
              f"{before.waiting + before.running} to run ({queued} newly queued{linked})", highlight=False)
    stale = {k: v for k, v in (prepared.reuse.stale if prepared.reuse else {}).items() if not reuse_stale}
    if stale:
        old = sorted({s.code_version for s in stale.values()})
        out.print(f"stale: {count(len(stale), 'trial')} {'has' if len(stale) == 1 else 'have'} results from code version "
                  f"{', '.join(old)} in study "
                  f"{', '.join(sorted({s.study for s in stale.values()}))}: not reused (--reuse-stale reuses them)",
                  highlight=False, soft_wrap=True)
    held = prepared.reuse.held if prepared.reuse else {}
    for cell_id, why in list(held.items())[:3]:
        out.print(f"cell {cell_id}: {why}", highlight=False, soft_wrap=True)
    if len(held) > 3:
        out.print(f"… and {len(held) - 3} more tuned cells not reused (see `ablate plan`)")
    for line in orphan_lines(orphans, spec.name):
        out.print(line, highlight=False, soft_wrap=True)
    tuning_left = any(i.phase == "tune" and states.get(i.key, "new") in ("waiting", "running", "new") for i in todo)
    if tuning_left and (line := pruning_note(spec, fuse)):  # queue only too: `ablate worker` fuses by default
        out.print(line, highlight=False, soft_wrap=True)
    show_reused(study, stores, err)
    idle = not (before.waiting + before.running)
    said = new_looks(spec, study) if spec.sequential is not None else None
    # A look whose seeds are all done but that no worker analysed (one killed, or stopped by
    # --max-items): analyse it here, queue only too, so that remote workers find its next seeds.
    if idle and spec.sequential is not None:
        try:
            advanced = sequential_looks.advance_through(study, spec, stores)
        except Exception as exc:
            raise st.StorageError(storage_problem(stores.storage, exc)) from None
        if advanced:
            for line in said(study):
                out.print(line, highlight=False, markup=False, soft_wrap=True)
            idle = not advanced[-1].queued
    if workers == 0:  # queue only: workers on other machines run the items
        return None
    if idle:  # nothing to run: no worker is started (seconds of imports for nothing) ...
        st.settle_runs(study, stores.tracking)  # ... but a run a kill left RUNNING after its record is ended
        workers = 0
    device_list = pool.devices(device, workers) if workers else []
    if spec.sequential is None and 0 < before.waiting < len(device_list):  # the rest would start only to exit
        out.print(f"{count(before.waiting, 'item')} to run: {count(before.waiting, 'worker')}, not {len(device_list)}", highlight=False)
        device_list = device_list[:before.waiting]
    # The live view's totals: a sequential study's grow as its looks add seeds.
    view_items = (lambda study: sequential_looks.items(spec, study)) if spec.sequential is not None else todo
    failed: list[str] = []
    try:
        if len(device_list) == 1:  # this process is the worker; the view follows it from a thread
            from ablate.runner.progress import View
            from ablate.runner.worker import worker_id

            with View(st.open_study(spec.name, stores), out, [(worker_id(), lambda: None)], view_items,
                      said=said).following():
                work(spec.name, stores, device=device_list[0], emit=worker_events(err, verbose),
                     checkpoint_every=checkpoint_every, fuse=fuse)
        elif device_list:
            warned = checkpoint_warnings(study)
            outcome = pool.run(spec.name, stores, device_list, checkpoint_every, out, verbose, view_items, fuse,
                               forker, said)
            for line in sorted(checkpoint_warnings(study) - warned):  # the workers wrote theirs to their logs
                err.print(line, highlight=False, markup=False, soft_wrap=True)
            if outcome.signum is not None:
                settle_after_stop(spec.name, stores)
                raise Stopped(outcome.signum, outcome.requeued)
            failed = outcome.failed
    except Interrupted as exc:
        settle_after_stop(spec.name, stores)
        raise Stopped(exc.signum, exc.requeued) from None
    except WorkerStopped as exc:  # the stores failed under the in-process worker
        raise StorageError(str(exc)) from None
    if device_list:  # items a worker linked instead of training (finished meanwhile elsewhere)
        show_reused(study, stores, err)
    try:  # read-only: the storage may have failed for writing (that may be why workers stopped); when no
        # worker ran, the study opened above reads the same store (a command opens its storage once)
        view = st.open_study(spec.name, stores, read_only=True) if device_list else study
        todo = sequential_looks.items(spec, view)  # a sequential study's looks may have added seeds
        states = its.states_by_item(view)
        after = its.Progress.of(view, todo, states)
        looks = list(said(view)) if said else []  # the looks the view had not said yet
        failures = queue.entries(view, keys=("failure_kind", its.RETRIED, "item"))
        errors = [e for e in failures if e.user_attrs.get("failure_kind") == "error" and not e.user_attrs.get(its.RETRIED)]
        diverged = {e.user_attrs.get("item") for e in failures if e.user_attrs.get("failure_kind") == "diverged"}
        # an item whose extension diverged after a finished run is done, not lost
        diverged &= {key for key, state in states.items() if state == "failed"}
        gave_up = [t for t in its.retryable(view, {i.key for i in todo}).values()
                   if not any(e.user_attrs.get("failure_kind") == "error" for e in t)] if after.failed else []
    except Exception as exc:
        raise st.StorageError(storage_problem(stores.storage, exc)) from None
    for line in looks:
        out.print(line, highlight=False, markup=False, soft_wrap=True)
    cells: dict[str, bool] = {}  # cell label → every item of it diverged
    for item in todo:
        cells[item.cell.label] = cells.get(item.cell.label, True) and item.key in diverged
    return Outcome(done=after.done, failed=after.failed, unfinished=after.waiting + after.running,
                   errors=len(errors), worker_failures=failed, study=spec.name, exhausted=len(gave_up),
                   diverged_cells=[label for label, lost in cells.items() if lost])


def run_worker(study: str, stores: Stores, err: Console, *, device: str = "cpu", threads: int | None = None,
               checkpoint_every: int = 100, max_items: int | None = None, verbose: bool = False,
               fuse: int = 1) -> Said:
    """``ablate worker``: pull the pending items of ``study`` until none is left (or ``max_items``),
    printing its events on ``err`` (with ``verbose`` each item's start and end too), with
    ``threads`` torch CPU threads, up to ``fuse`` items of a cell trained as one model; what it
    says when done."""
    if threads:
        # Read by torch, MKL and numba when they load, which the worker does in the background
        # after opening the study (importing torch here would delay the first claim by seconds).
        os.environ.update(pool.thread_env(threads))
        if "torch" in sys.modules:
            sys.modules["torch"].set_num_threads(threads)

    noted: set[str] = set()

    def emit(event: str, info: dict) -> None:
        if event == "look":
            err.print(look_line(info), highlight=False, markup=False, soft_wrap=True)
        elif event == "note":
            if info["message"] not in noted:
                noted.add(info["message"])
                err.print(info["message"], highlight=False, markup=False, soft_wrap=True)
        elif verbose or event not in ("start", "complete"):
            err.print(f"{event} {info.get('cell')} · seed {info.get('seed')} {info.get('message', '')}",
                      highlight=False, markup=False)

    try:
        outcomes = work(study, stores, device=device, emit=emit, checkpoint_every=checkpoint_every,
                        max_items=max_items, fuse=fuse)
    except Interrupted as exc:
        raise Stopped(exc.signum, exc.requeued, "worker interrupted") from None
    except WorkerStopped as exc:
        raise StorageError(str(exc)) from None
    except KeyboardInterrupt:  # before the worker installed its handlers: nothing was claimed
        raise Stopped(signal.SIGINT, [], "worker interrupted") from None
    return Said([f"worker finished: {outcomes}"])
