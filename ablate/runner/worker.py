"""A worker: claim an item, train it with a heartbeat, record the outcome in Optuna and MLflow.

Outcomes: complete; ``pruned`` (a tuning trial its protocol's pruner stopped: a result, not
retried); ``reused`` (another study finished the item since it was queued: the trial
links that result instead of training, reuse.link_if_done_elsewhere); ``diverged`` (a result of
the cell, not retried); ``error`` (a bug: the traceback is recorded, not retried); ``oom`` (retried with gradient accumulation);
``infrastructure`` (MLflow or a disk failed: re-queued with back-off, without a bound, for it is
not the item's fault; after ``MAX_INFRASTRUCTURE_IN_A_ROW`` in a row, or a full disk, the worker
stops with the reason);
``interrupted`` (SIGINT/SIGTERM: re-queued, the worker stops); ``killed`` (no heartbeat:
re-queued by whichever process notices, see study.declare_dead); ``superseded`` (this worker
was declared dead while still alive, e.g. stalled past the grace period: its item was re-queued,
so it drops its own result and moves on). A study storage that cannot be written stops the
worker (``WorkerStopped``): its item is re-queued by the heartbeat's silence.

The heartbeat is runner/heartbeat.py's; when a signal interrupts the worker, and which sections
it must not cut in two, runner/signals.py's: here, what the worker does then (``_abandon``). What
kind a failure is, and whether the study storage itself failed, is runner/failures.py's.
What loads in the background while the worker reads the queue (torch, MLflow, the settling of
runs a kill left), and the selection of its device, are runner/preload.py's.

Exactly once in both stores: the Optuna record is the commit point. A trial's run gets its
results (tag ``ablate.committed=false``) and stays RUNNING until Optuna recorded the trial; only
then is it ended FINISHED (``ablate.committed=true``). A kill in between leaves a RUNNING run,
which ``study.settle_runs`` ends as Optuna recorded: FINISHED only if it is the run the
trial recorded, KILLED otherwise; results read only the recorded run of each item.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import traceback
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna
from optuna.trial import TrialState

from ablate import faults, provenance
from ablate.runner import failures, fused, phases, progress, queue, sequential_looks, tracking
from ablate.runner import study as st
from ablate.runner.heartbeat import Heartbeat
from ablate.runner.items import BUDGET, MAX_RETRIES, UNBOUNDED, states_by_item
from ablate.runner.preload import Preload, await_preload
from ablate.runner.preload import select_device as select_device  # re-exported: defined here before
from ablate.runner.reuse import link_if_done_elsewhere
from ablate.runner.signals import Interrupted, Signals
from ablate.runner.study import extend_runs, extends_runs, open_study, recover_stale, settle_runs
from ablate.spec import ProbeSpec
from ablate.stores import StorageError, Stores, checkpoint_dir, no_space, redact, storage_problem

if TYPE_CHECKING:
    from ablate.training import TrialResult

Event = Callable[[str, dict[str, Any]], None]
#: What trains a claimed item, called as ``ablate.training.run_trial`` (the default) is.
Train = Callable[..., "TrialResult"]


def worker_id(pid: int | None = None) -> str:
    """How a worker process names itself on its trials: host:pid (this process's when ``pid`` is
    None: asked each time, not kept from import, as a worker forked by ablate/zygote.py imported
    this module in its parent)."""
    return f"{socket.gethostname()}:{os.getpid() if pid is None else pid}"


MAX_ACCUMULATE = 8
MAX_INFRASTRUCTURE_IN_A_ROW = 3  # then the stores are down, not flaky: stop rather than fail every item
REQUEUE_WAIT_S = 30.0  # how long an idle worker waits for a re-queue another process has begun
# An idle worker's looks at others' running items, doubling: a count in the store (milliseconds),
# at most every half second, as the run's end waits for the last look (it looked every 2 s: up to
# 2 s of every run's end, benchmarks/bench_idle.py).
MIN_IDLE_WAIT_S, MAX_IDLE_WAIT_S = 0.1, 0.5
PRELOAD_WAIT_S = 60.0  # how long a finishing worker lets the background imports complete


class WorkerStopped(Exception):
    """The stores failed so that this worker cannot go on (a full disk, a study storage that
    cannot be written, MLflow down); the message is safe to show (no password)."""


class Superseded(Exception):
    """This worker's trial was declared dead and its item re-queued: the attempt is void."""


@dataclass
class _Current:
    """What this worker holds now: the claimed trial (RUNNING, its item's label) and its checkpoint."""

    study: optuna.Study | None = None
    trial: optuna.Trial | None = None
    label: str = ""
    checkpoint: Path | None = None
    runs: list[tracking.TrialRun] = field(default_factory=list)
    message: str = ""  # the last failure's, for a worker that stops
    members: list[_Current] = field(default_factory=list)  # a fused group's items, each its own

    def take(self, trial: optuna.Trial | None) -> None:
        """Hold ``trial`` (None: nothing) from now on."""
        self.trial, self.checkpoint, self.runs, self.members = trial, None, [], []
        if trial is not None:
            attrs = trial.user_attrs
            self.label = f"{attrs.get('cell_label', '?')} · seed {attrs.get('seed', '?')}"

    def held(self) -> list[_Current]:
        """What is held item by item: a fused group's members, or this one item (or nothing)."""
        return self.members or ([self] if self.trial is not None else [])


class _Watched:
    """A trial's reporter that stops training once the heartbeat finds the trial taken away (or
    a signal's Interrupted was dropped)."""

    def __init__(self, inner: tracking.TrialRun, lost: threading.Event, signals: Signals | None = None) -> None:
        self.inner, self.lost, self.signals = inner, lost, signals

    def log_metrics(self, step: int, values: dict[str, float]) -> None:
        if self.signals is not None:
            self.signals.check()
        if self.lost.is_set():
            raise Superseded()
        _tracked(self.inner.log_metrics, step, values)

    def log_curves(self, rows: Any) -> None:
        _tracked(self.inner.log_curves, rows)


def _tracked(fn: Callable[..., Any], *args: Any) -> Any:
    """Call into MLflow; whatever it raises is a TrackingFailure (an infrastructure failure)."""
    try:
        return fn(*args)
    except (KeyboardInterrupt, Superseded):
        raise
    except Exception as exc:
        text = failures.text(exc)
        if "readonly database" in text:
            text += " (the MLflow store's file was deleted, moved or made read-only)"
        raise failures.TrackingFailure(f"tracking failed: {text}") from exc


def run_item(
    study: optuna.Study, trial: optuna.Trial, stores: Stores, device: str, emit: Event, checkpoint_every: int = 0,
    current: _Current | None = None, signals: Signals | None = None, train: Train | None = None,
) -> str:
    """Train one claimed trial and record its outcome; returns the outcome's kind. ``current``
    follows what is held (for the clean-up after a signal), ``signals`` guards the record.
    ``train`` trains it (None: ``ablate.training.run_trial``; ``ablate plan --estimate`` passes
    one that reports without training, to time this path's bookkeeping)."""
    current = current if current is not None else _Current(trial=trial)
    signals = signals if signals is not None else Signals()
    who = {"cell": trial.user_attrs.get("cell_label"), "seed": trial.user_attrs.get("seed")}
    try:  # finished meanwhile by another study: link it, do not train it again
        with signals.critical():  # the link finishes the trial: a signal must not cut it in two
            source = link_if_done_elsewhere(study, trial)
    except queue.TrialFinished:  # declared dead meanwhile: re-queued already
        emit("superseded", {**who, "message": "declared dead by another worker; the item was re-queued"})
        return "superseded"
    except Exception:  # the lookup only saves work: training the item is always right
        source = None
    if source is not None:
        emit("reused", {**who, "message": f"finished meanwhile in study {source}: linked, not trained"})
        return "reused"
    try:  # tuning: sample the setting; a replicate after tuning: take the cell's best one
        attrs = phases.prepare_item(study, trial)
    except Exception as exc:
        if failures.storage_failure(exc):
            raise
        with signals.critical():
            _fail(study, trial, "error", f"choosing the tuned setting: {failures.text(exc)}", redact(traceback.format_exc()))
        emit("error", {"cell": trial.user_attrs.get("cell_label"), "seed": trial.user_attrs.get("seed"),
                       "message": failures.text(exc)})
        return "error"
    try:  # levels and tuned values as Optuna parameters, for optuna-dashboard: display only
        phases.record_params(study, trial, attrs)
    except Exception:
        pass
    info = {"cell": attrs["cell_label"], "seed": attrs["seed"], "number": trial.number}
    try:
        return _train_item(study, trial, attrs, info, current, stores, device, emit, checkpoint_every, signals,
                           train)
    except (Superseded, queue.TrialFinished):
        # Another process failed this trial for lack of heartbeats and re-queued its item, which
        # may already be running elsewhere: drop this attempt; its checkpoint stays for the re-run.
        for run in current.runs:
            _quietly(run.end, "KILLED", {"ablate.failure_kind": "superseded"})
        current.take(None)
        emit("superseded", {**info, "message": "declared dead by another worker; the item was re-queued"})
        return "superseded"


def _train_item(
    study: optuna.Study, trial: optuna.Trial, attrs: dict[str, Any], info: dict[str, Any], current: _Current,
    stores: Stores, device: str, emit: Event, checkpoint_every: int, signals: Signals,
    train: Train | None = None,
) -> str:
    if train is None:
        from ablate.training import run_trial as train

    emit("start", info)
    probes = ProbeSpec.model_validate(study.user_attrs.get("spec", {}).get("probes", {}))
    # Named by the item (cell/phase/seed, or cell/tune/index: tuning trials of a cell share seeds).
    # An extension (until_converged) has its own: the run it extends may have left one behind.
    extension = f"-{attrs[BUDGET]}" if attrs.get(BUDGET) else ""
    checkpoint = current.checkpoint = checkpoint_dir() / study.study_name / f"{attrs['item'].replace('/', '-')}{extension}.pt"
    # A copy queued before queue.ATTEMPT_ATTRS holds its predecessor's outcome: cleared; the start says whose
    # it is and the step it resumes from (its start line). One transaction (each its own takes the lock again).
    start: dict[str, Any] = {key: None for key in ("status", "failure_kind", "failure_message", "traceback", "resumed_at")
                             if trial.user_attrs.get(key) is not None}
    start.update(worker=worker_id(), provenance=provenance.record(device), **progress.start_attrs(trial.number, checkpoint))
    # WSD replicates keep their stable-phase checkpoint; a longer run of the same lineage and seed
    # starts from one (a retry that has its own resume checkpoint resumes from that instead).
    stable, branch, warning = phases.continuation(checkpoint_dir(), attrs, checkpoint.exists())
    if stable is not None and not checkpoint.exists():
        start["continued_from"] = branch.attr() if branch else None
    if warning:  # a damaged or missing kept checkpoint: trained from step 0 (the same result), and said
        start["checkpoint_warning"] = warning
        emit("warning", {**info, "message": warning})
    queue.set_running_attrs(study, trial, start)
    attrs["checkpoint_warning"] = trial.user_attrs.get("checkpoint_warning")  # a retry's too: it resumes that attempt
    lineage = trial.user_attrs.get("continued_from") if stable is not None else None
    if lineage:
        attrs = {**attrs, "continued_from": f"{lineage['label']} ({lineage['cell']}) · seed {lineage['seed']} "
                                            f"· step {lineage['step']}"}
    accumulate = 1
    on_eval = phases.pruning(study, trial, attrs)  # tuning items of a pruning protocol only
    started = time.perf_counter()
    with Heartbeat(study, trial.number, lambda: current.runs[-1].progress() if current.runs else {}) as heartbeat:
        while True:
            run = None
            try:
                run = _start_run(study, trial, attrs, stores, device, current)
                result = train(attrs["config"], attrs["seed"], probes, reporter=_Watched(run, heartbeat.lost, signals),
                               device=device, checkpoint=checkpoint, checkpoint_every=checkpoint_every,
                               accumulate=accumulate, on_eval=on_eval, stable_checkpoint=stable,
                               branch=branch.path if branch else None)
                if heartbeat.lost.is_set():  # taken away after the last report: the re-run's result counts
                    raise Superseded()
                phases.seal_stable(stable)  # complete now: its checksum, for the runs that continue from it
                # Over all attempts: the steps from the branch point (0 when trained from scratch).
                trained = result.steps - (lineage["step"] if lineage else 0)
                return _record(study, trial, run, result, trained, info, current, emit, signals)
            except queue.Pruned as exc:
                if heartbeat.lost.is_set():
                    raise Superseded() from None
                steps = on_eval.step if on_eval is not None else run.last_step
                return _record_pruned(study, trial, run, str(exc), steps, time.perf_counter() - started, info,
                                      current, emit, signals)
            except (KeyboardInterrupt, Superseded, queue.TrialFinished):
                raise
            except Exception as exc:
                if failures.storage_failure(exc):
                    raise
                kind, message, tb = failures.classify(exc), failures.text(exc), redact(traceback.format_exc())
                full = no_space(exc, failures.written_paths(stores))
                if full is not None:
                    kind, message = "infrastructure", full
                elif isinstance(exc, failures.TrackingFailure):
                    kind = "infrastructure"
                if run is not None:
                    _quietly(run.finish, "FAILED", {}, {"ablate.failure_kind": kind, "ablate.traceback": tb})
                if kind == "oom" and accumulate < MAX_ACCUMULATE:
                    # Same effective batch in smaller pieces: the result stays comparable.
                    accumulate *= 2
                    trial.set_user_attr("accumulate", accumulate)
                    emit("oom", {**info, "message": f"{message}; retrying with {accumulate} micro-batches"})
                    continue
                with signals.critical():
                    _fail(study, trial, kind, message, tb)
                    if kind in failures.RETRYABLE:
                        _requeue(study, trial, bounded=kind not in UNBOUNDED)
                current.take(None)
                if kind not in failures.RETRYABLE:
                    checkpoint.unlink(missing_ok=True)
                current.message = message
                emit(kind, {**info, "message": message})
                if full is not None:
                    raise WorkerStopped(full) from None
                return kind


def _record(study: optuna.Study, trial: optuna.Trial, run: tracking.TrialRun, result: Any, steps_trained: int,
            info: dict[str, Any], current: _Current, emit: Event, signals: Signals) -> str:
    """The outcome of a finished training, in the order that keeps the two stores consistent:
    the run's results (the run stays RUNNING), the Optuna record (the commit point: the result's
    attributes in one transaction, then the outcome), the run's end."""
    faults.inject("record")
    diverged = result.status == "diverged"
    tags = {"ablate.failure_kind": "diverged", "ablate.failure": result.reason} if diverged else {}
    resumed = {"resumed_at": result.resumed_at} if result.resumed_at else {}  # a killed attempt's checkpoint
    _tracked(run.write, {} if diverged else {**result.metrics, **_numbers(result.convergence)},
             {**tags, **{f"ablate.{k}": str(v) for k, v in resumed.items()}, "ablate.committed": "false"})
    with signals.critical():
        faults.inject("commit")
        # steps actually run, converged, val_gain_last, stopped_early, best_step (the contract
        # with the reports: results' trials frame has these columns); the steps of this run
        # (result.steps) over the convergence's own count
        attrs = {"steps_trained": steps_trained, "seconds": result.seconds, **result.convergence,
                 "steps": result.steps, **resumed}
        if diverged:
            _fail(study, trial, "diverged", result.reason, attrs=attrs)
        else:
            queue.finish(study, trial, TrialState.COMPLETE, {**attrs, **result.metrics, "status": "complete"},
                         result.metrics.get("val_accuracy", float("nan")))
    params = {} if diverged else {k: v for k, v in result.convergence.items() if v is not None}
    _end_committed(run, "FAILED" if diverged else "FINISHED", params, info, current, emit)
    if diverged:
        emit("diverged", {**info, "message": result.reason})
        return "diverged"
    emit("complete", {**info, **result.metrics, "seconds": result.seconds})
    return "complete"


def _end_committed(run: tracking.TrialRun, status: str, params: dict[str, Any], info: dict[str, Any],
                   current: _Current, emit: Event) -> None:
    """After the Optuna record: end the run (with ``params`` known only now) and drop the checkpoint."""
    try:
        faults.inject("committed")
        run.end(status, {"ablate.committed": "true"}, params)
    except Exception as exc:  # the trial counts; its run is ended by the next settle_runs
        emit("warning", {**info, "message": f"MLflow run {run.run_id} left RUNNING: {failures.text(exc)}"})
    if current.checkpoint is not None:
        current.checkpoint.unlink(missing_ok=True)


def _record_pruned(study: optuna.Study, trial: optuna.Trial, run: tracking.TrialRun, why: str, steps: int,
                   seconds: float, info: dict[str, Any], current: _Current, emit: Event, signals: Signals) -> str:
    """A tuning trial its pruner stopped: a result (PRUNED), recorded in the order of ``_record``."""
    _tracked(run.write, {"steps": steps, "seconds": seconds},
             {"ablate.status": "pruned", "ablate.pruned": why[:5000], "ablate.committed": "false"})
    with signals.critical():
        faults.inject("commit")
        queue.finish(study, trial, TrialState.PRUNED, {"status": "pruned", "steps": steps, "seconds": seconds,
                                                        "stopped_early": True, "failure_message": why})
    _end_committed(run, "FINISHED", {}, info, current, emit)
    emit("pruned", {**info, "message": why})
    return "pruned"


def _numbers(values: dict[str, Any]) -> dict[str, float]:
    """The numeric (and boolean, as 0/1) entries: what MLflow takes as metrics."""
    return {k: float(v) for k, v in values.items() if isinstance(v, int | float)}


def _start_run(study: optuna.Study, trial: optuna.Trial, attrs: dict[str, Any], stores: Stores,
               device: str, current: _Current | None = None) -> tracking.TrialRun:
    run = _tracked(
        tracking.TrialRun,
        stores,
        study.study_name,
        st.ensure_parent_run(study, stores),  # started by the preload: here, read
        f"{attrs['cell_label']} · seed {attrs['seed']}",
        attrs["config"],
        {
            "ablate.cell_id": attrs["cell_id"],
            "ablate.seed": str(attrs["seed"]),
            "ablate.phase": attrs["phase"],
            "ablate.trial_number": str(trial.number),
            "ablate.worker": worker_id(),
            **provenance.record(device),
            **({"ablate.continued_from": attrs["continued_from"]} if attrs.get("continued_from") else {}),
            **({"ablate.checkpoint_warning": attrs["checkpoint_warning"]} if attrs.get("checkpoint_warning") else {}),
        },
        attrs.get("settings"),
    )
    if current is not None:
        current.runs.append(run)
    faults.inject("open_run")
    trial.set_user_attr("mlflow_run_id", run.run_id)
    return run


def _requeue(study: optuna.Study, trial: optuna.Trial, bounded: bool) -> None:
    queue.requeue(study, trial.number, MAX_RETRIES if bounded else None)


def _quietly(fn: Callable[..., Any], *args: Any) -> None:
    """Record to tracking if it can be reached; the Optuna trial state is what must not be lost."""
    try:
        fn(*args)
    except Exception:
        pass


def _fail(study: optuna.Study, trial: optuna.Trial, kind: str, message: str, tb: str = "",
          attrs: dict[str, Any] | None = None) -> None:
    """Finish the trial FAIL with its failure's attributes (and ``attrs``: a diverged run's result),
    written in one transaction."""
    attrs = {**(attrs or {}), "status": "diverged" if kind == "diverged" else "failed", "failure_kind": kind,
             "failure_message": redact(message)[:2000], "worker": worker_id()}
    if tb:
        attrs["traceback"] = redact(tb)[-8000:]
    queue.finish(study, trial, TrialState.FAIL, attrs)


def _requeue_in_flight(study: optuna.Study) -> bool:
    """Whether some item's last trial failed in a retryable way and has no successor yet."""
    return "new" in states_by_item(study).values()


def _abandon(stores: Stores, current: _Current, crash: BaseException | None = None) -> list[str]:
    """After a signal: fail the held trial ``interrupted`` and re-queue its item (unless it was
    recorded meanwhile), and end its MLflow runs as Optuna now has it. The labels re-queued.
    After a ``crash`` of the worker itself: as a killed worker's (re-queued within the bound)."""
    study, requeued = current.study, []
    if study is None:
        return []
    # A tracking server that does not answer must not hold the exit up for MLflow's retries.
    os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] = "0"
    os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] = "5"
    for held in current.held():
        requeued += _abandon_one(stores, study, held, crash)
    current.take(None)
    return requeued


def _abandon_one(stores: Stores, study: optuna.Study, current: _Current, crash: BaseException | None) -> list[str]:
    trial, requeued = current.trial, []
    if trial is None:
        return []
    try:
        state = queue.trial(study, trial.number).state
        if state == TrialState.RUNNING and crash is not None:
            _fail(study, trial, "killed", f"the worker crashed: {failures.text(crash)}", redact(traceback.format_exc()))
            queue.requeue(study, trial.number, MAX_RETRIES)
            requeued.append(current.label)
        elif state == TrialState.RUNNING:
            _fail(study, trial, "interrupted", "stopped by a signal; re-queued")
            queue.requeue(study, trial.number, None)
            requeued.append(current.label)
        elif state == TrialState.COMPLETE and current.checkpoint is not None:  # recorded just before the signal
            current.checkpoint.unlink(missing_ok=True)
    except queue.TrialFinished:  # declared dead meanwhile: re-queued by another
        pass
    except Exception:  # the storage failed: the heartbeat's silence re-queues it after the grace period
        requeued.append(f"{current.label} (after the grace period: the study storage failed)")
    settle_runs(study, stores.tracking, [trial.number])
    return requeued


def work(
    study_name: str,
    stores: Stores,
    device: str = "cpu",
    emit: Event | None = None,
    wait_for_running: bool = True,
    checkpoint_every: int = 100,
    max_items: int | None = None,
    train: Train | None = None,
    fuse: int = 1,
) -> dict[str, int]:
    """Run items until none is waiting; with ``wait_for_running``, also outlive other workers'
    running items so that a killed worker's item (re-queued after its grace period) gets run.
    ``train``: the training function (None: ``ablate.training.run_trial``; ``ablate plan
    --estimate`` times this path with a stand-in). ``fuse``: claim up to that many items of one
    cell at once and train them as one model (runner/fused.py; 1: one at a time; 0: K by device and size).

    Raises Interrupted (SIGINT/SIGTERM, after re-queueing what it held), WorkerStopped (the stores
    failed: a full disk, MLflow down, a study storage that cannot be written) and StorageError
    (the study cannot be opened)."""
    emit = emit or (lambda event, info: None)
    queue.quiet_optuna()  # Optuna would log each tell and each sampler's in-memory study
    with Signals() as signals:
        current = _Current()
        try:
            return _work(study_name, stores, device, emit, wait_for_running, checkpoint_every, max_items,
                         signals, current, train, fuse)
        except Interrupted as exc:
            signals.delivered = True  # from here on signals are ignored: the clean-up completes
            raise Interrupted(exc.signum, _abandon(stores, current)) from None
        except (WorkerStopped, StorageError):
            raise
        except Exception as exc:
            if not failures.storage_failure(exc):  # a bug of the worker's own: its item goes back as a killed one's
                signals.delivered = True
                _abandon(stores, current, crash=exc)
                raise
            for held in current.held():  # nothing can be recorded: let the heartbeat's silence re-queue it
                for run in held.runs:
                    _quietly(run.end, "KILLED", {"ablate.failure_kind": "interrupted"})
            problem = no_space(exc, failures.written_paths(stores)) or (
                str(exc) if isinstance(exc, StorageError) else storage_problem(stores.storage, exc))
            raise WorkerStopped(f"the study storage failed: {problem}") from None


def _work(study_name: str, stores: Stores, device: str, emit: Event, wait_for_running: bool, checkpoint_every: int,
          max_items: int | None, signals: Signals, current: _Current, train: Train | None = None,
          fuse: int = 1) -> dict[str, int]:
    study = current.study = open_study(study_name, stores)
    # What training needs (torch, the models, mlflow: 5-10 s) loads in the background from here
    # while the worker reads the queue; the same thread then ends what a kill left between a run's
    # results and its record, before this worker claims an item.
    preload = Preload(stores.tracking, lambda: settle_runs(study, stores.tracking), device,
                      needs=lambda: st.ensure_parent_run(study, stores))
    try:
        return _serve(study, stores, device, emit, wait_for_running, checkpoint_every, max_items, signals, current,
                      preload, train, fuse)
    finally:
        preload.join(PRELOAD_WAIT_S)  # not exiting mid-import (a daemon thread inside torch's init)


def _run_group(study: optuna.Study, trials: list[optuna.Trial], stores: Stores, device: str, emit: Event,
               checkpoint_every: int, current: _Current, signals: Signals) -> list[str]:
    """Claimed items of one cell, each through ``run_item`` in a thread of its own, trained as one
    model where they fuse (runner/fused.py); their outcomes, in order."""
    if note := fused.group_note(study, trials):  # `ablate worker` prints it once; `ablate run` did when queueing
        emit("note", {"message": note})
    current.members = []
    for trial in trials:
        current.members.append(_Current(study=study))
        current.members[-1].take(trial)

    def one(i: int, train: Train) -> str:  # Signals' check and critical are thread-safe
        return run_item(study, trials[i], stores, device, emit, checkpoint_every, current.members[i],
                        signals, train)

    return fused.run_together(len(trials), one, signals.check)


def _sequential_spec(study: optuna.Study) -> Any:
    """The study's spec when it adds seeds look by look (``seeds: {min, max, …}``), else None."""
    from ablate import design

    raw = study.user_attrs.get("spec")
    if not isinstance(raw, dict) or not isinstance(raw.get("seeds"), dict):
        return None
    return design.validate(raw, f"study {study.study_name}")


def _serve(study: optuna.Study, stores: Stores, device: str, emit: Event, wait_for_running: bool,
           checkpoint_every: int, max_items: int | None, signals: Signals, current: _Current,
           preload: Preload, train: Train | None = None, fuse: int = 1) -> dict[str, int]:
    """Claim and run items until none is left (what ``work`` documents)."""
    # Fault injection fires once per process at a named point: it tests the path of one item.
    fuse = 1 if train is not None or os.environ.get("ABLATE_FAULT") else fuse
    if queue.count(study, (TrialState.WAITING,)):
        # An item is claimed by a worker ready to train it: its imports are done first. Claimed
        # while they load, it would be held idle for seconds that another, ready worker could use,
        # and its trial would last those seconds longer than the worker's later ones.
        await_preload(preload, device)
    outcomes: dict[str, int] = {}
    in_a_row = 0  # infrastructure failures
    requeue_deadline = time.monotonic() + REQUEUE_WAIT_S  # also at start: a verdict may be in flight
    idle_wait = MIN_IDLE_WAIT_S
    spec = _sequential_spec(study)
    extending = extends_runs(study.user_attrs.get("spec"))  # until_converged: runs still improving go on
    while True:
        signals.check()
        with signals.critical():  # a claim, or a re-queue, is not cut in two
            dead = recover_stale(study)
            trial = phases.claim(study)
            current.take(trial)
            group = [trial] if trial is not None else []
            if trial is not None:
                faults.inject("claim")
                room = fused.room(fuse, device, trial, max_items, sum(outcomes.values()), study, worker_id())
                group += phases.claim_fusable(study, trial, room - 1)
        if dead:
            settle_runs(study, stores.tracking, dead)
        if trial is None:
            if extending:  # an extension a kill left unqueued (its run finished, the queueing did not)
                with signals.critical():
                    if extend_runs(study):
                        continue
            if spec is not None:  # a sequential study: a finished look queues the next one's seeds
                with signals.critical():
                    advanced = sequential_looks.advance_through(study, spec, stores)
                for look in advanced:
                    emit("look", look.event())
                if advanced and advanced[-1].queued:
                    continue
            if wait_for_running and queue.count(study, (TrialState.RUNNING, TrialState.WAITING)):
                # Others' items may yet fail and be re-queued, and a peer's look may have queued seeds
                # since this claim. Looked at often at first: the last item of a run usually ends
                # within a second, and the run ends when its workers do.
                signals.sleep(idle_wait)
                idle_wait = min(2 * idle_wait, MAX_IDLE_WAIT_S)
                continue
            # A trial declared dead is failed first and re-queued a moment later (study.declare_dead).
            if wait_for_running and time.monotonic() < requeue_deadline and _requeue_in_flight(study):
                signals.sleep(1.0)
                continue
            settle_runs(study, stores.tracking)  # what kills left RUNNING, and the parent run once all is done
            return outcomes
        idle_wait = MIN_IDLE_WAIT_S
        # Beat from the claim on: choosing the setting and opening the MLflow run come before
        # run_item's heartbeat (which lends it the step) and can take seconds.
        with ExitStack() as beats:
            for held in group:
                beats.enter_context(Heartbeat(study, held.number))
            await_preload(preload, device)
            if len(group) > 1 or fused.room(fuse, device, trial) > 1:  # alone too, where its cell fuses
                kinds = _run_group(study, group, stores, device, emit, checkpoint_every, current, signals)
            else:
                kinds = [run_item(study, trial, stores, device, emit, checkpoint_every, current, signals, train)]
        message = "; ".join(m for m in [current.message, *(held.message for held in current.members)] if m)
        current.take(None)
        for trial, outcome in zip(group, kinds, strict=True):
            if extending and outcome == "complete":  # this process finished it: it queues its extension
                faults.inject("extend")
                with signals.critical():
                    extend_runs(study, [trial.user_attrs.get("cell_id")])
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
            in_a_row = in_a_row + 1 if outcome == "infrastructure" else 0
            if in_a_row >= MAX_INFRASTRUCTURE_IN_A_ROW:
                raise WorkerStopped(f"stopped after {in_a_row} infrastructure failures in a row (items re-queued); "
                                    f"the last: {message}")
            if outcome in failures.RETRYABLE:  # back off before the next claim (it may be the same item)
                retries = queue.trial(study, trial.number).system_attrs.get("retry_history", [])
                signals.sleep(min(60.0, 2.0 ** len(retries)))
            if outcome == "superseded":
                requeue_deadline = time.monotonic() + REQUEUE_WAIT_S
        if max_items is not None and sum(outcomes.values()) >= max_items:
            if spec is not None:  # its last item may have ended a look: analysed now, not by the next worker
                with signals.critical():
                    for look in sequential_looks.advance_through(study, spec, stores):
                        emit("look", look.event())
            return outcomes
