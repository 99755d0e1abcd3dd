"""A worker: claim an item, train it with a heartbeat, record the outcome in Optuna and MLflow.

Outcomes: complete; ``diverged`` (a result of the cell, not retried); ``error`` (a bug: the
traceback is recorded, not retried); ``interrupted`` (SIGINT/SIGTERM: re-queued); ``killed``
(no heartbeat: re-queued by whichever process notices, see study.declare_dead); ``superseded``
(this worker was declared dead while still alive, e.g. stalled past the grace period: its item
was re-queued, so it drops its own result and moves on).
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from ablate import provenance
from ablate.runner import phases, queue, tracking
from ablate.runner.queue import HEARTBEAT_S
from ablate.runner.study import MAX_RETRIES, open_study, recover_stale, states_by_item
from ablate.spec import ProbeSpec
from ablate.stores import Stores

Event = Callable[[str, dict[str, Any]], None]
WORKER_ID = f"{socket.gethostname()}:{os.getpid()}"
RETRYABLE = ("oom", "infrastructure")
MAX_ACCUMULATE = 8
REQUEUE_WAIT_S = 30.0  # how long an idle worker waits for a re-queue another process has begun
PRELOAD_WAIT_S = 60.0  # how long a finishing worker lets the background imports complete


class Heartbeat:
    """Records a heartbeat (and the trial's current step) every HEARTBEAT_S seconds in a thread.

    Nested for the same trial (work() beats from the claim on, run_item adds the step), the inner
    one only lends its step to the outer thread: one beat per trial, not two. ``lost`` is set
    when the trial is found no longer RUNNING: another process declared this worker dead."""

    _active: dict[int, Heartbeat] = {}  # trial number -> the outermost heartbeat of this process

    def __init__(self, study: optuna.Study, number: int, step: Callable[[], int] | None = None) -> None:
        self._stop = threading.Event()
        self._step = step
        self._number = number
        self._outer = Heartbeat._active.get(number)
        self.lost = self._outer.lost if self._outer is not None else threading.Event()
        self._thread = threading.Thread(target=self._beat, args=(study, number), daemon=True)

    def _beat(self, study: optuna.Study, number: int) -> None:
        while not self._stop.is_set():
            try:
                step = self._step
                if not queue.beat(study, number, {"step": step()} if step is not None else None) \
                        and not self._stop.is_set():
                    self.lost.set()
                    return
            except Exception:  # a missed beat is tolerated; a long silence is what counts
                pass
            self._stop.wait(HEARTBEAT_S)

    def __enter__(self) -> Heartbeat:
        if self._outer is not None:
            self._outer._step = self._step
        else:
            Heartbeat._active[self._number] = self
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._outer is not None:
            self._outer._step = None
            return
        self._stop.set()
        self._thread.join()
        Heartbeat._active.pop(self._number, None)


class Interrupted(BaseException):
    """SIGTERM arrived: stop the current item and re-queue it."""


def _raise_interrupted(signum: int, frame: object) -> None:
    raise Interrupted()


class Superseded(Exception):
    """This worker's trial was declared dead and its item re-queued: the attempt is void."""


class _Watched:
    """A trial's reporter that stops training once the heartbeat finds the trial taken away."""

    def __init__(self, inner: tracking.TrialRun, lost: threading.Event) -> None:
        self.inner, self.lost = inner, lost

    def log_metrics(self, step: int, values: dict[str, float]) -> None:
        if self.lost.is_set():
            raise Superseded()
        self.inner.log_metrics(step, values)

    def log_curves(self, rows: Any) -> None:
        self.inner.log_curves(rows)


def run_item(
    study: optuna.Study, trial: optuna.Trial, stores: Stores, device: str, emit: Event, checkpoint_every: int = 0
) -> str:
    try:  # tuning: sample the setting; a replicate after tuning: take the cell's best one
        attrs = phases.prepare_item(study, trial)
    except Exception as exc:
        _fail(study, trial, "error", f"choosing the tuned setting: {type(exc).__name__}: {exc}",
              traceback.format_exc())
        emit("error", {"cell": trial.user_attrs.get("cell_label"), "seed": trial.user_attrs.get("seed"),
                       "message": f"{type(exc).__name__}: {exc}"})
        return "error"
    info = {"cell": attrs["cell_label"], "seed": attrs["seed"], "number": trial.number}
    current: dict[str, tracking.TrialRun | None] = {"run": None}
    try:
        return _train_item(study, trial, attrs, info, current, stores, device, emit, checkpoint_every)
    except (Superseded, optuna.exceptions.UpdateFinishedTrialError):
        # Another process failed this trial for lack of heartbeats and re-queued its item, which
        # may already be running elsewhere: drop this attempt; its checkpoint stays for the re-run.
        if current["run"] is not None:
            _quietly(current["run"].finish, "KILLED", {}, {"ablate.failure_kind": "superseded"})
        emit("superseded", {**info, "message": "declared dead by another worker; the item was re-queued"})
        return "superseded"


def _train_item(
    study: optuna.Study, trial: optuna.Trial, attrs: dict[str, Any], info: dict[str, Any],
    current: dict[str, tracking.TrialRun | None], stores: Stores, device: str, emit: Event,
    checkpoint_every: int,
) -> str:
    from ablate.training import run_trial

    emit("start", info)
    probes = ProbeSpec.model_validate(study.user_attrs.get("spec", {}).get("probes", {}))
    # Named by the item (cell/phase/seed, or cell/tune/index: tuning trials of a cell share seeds).
    checkpoint = checkpoint_dir() / study.study_name / f"{attrs['item'].replace('/', '-')}.pt"
    for key in ("status", "failure_kind", "failure_message", "traceback"):
        if trial.user_attrs.get(key) is not None:  # a retry inherits its predecessor's attributes
            trial.set_user_attr(key, None)
    trial.set_user_attr("worker", WORKER_ID)
    trial.set_user_attr("provenance", provenance.record(device))
    accumulate = 1
    run = current["run"] = _start_run(study, trial, attrs, stores, device)
    with Heartbeat(study, trial.number, lambda: run.last_step) as heartbeat:
        while True:
            try:
                result = run_trial(attrs["config"], attrs["seed"], probes, reporter=_Watched(run, heartbeat.lost),
                                   device=device, checkpoint=checkpoint, checkpoint_every=checkpoint_every,
                                   accumulate=accumulate)
                break
            except (KeyboardInterrupt, Interrupted):
                _quietly(run.finish, "KILLED", {}, {"ablate.failure_kind": "interrupted"})
                _fail(study, trial, "interrupted", "stopped by a signal; re-queued")
                _requeue(study, trial, bounded=False)
                emit("interrupted", info)
                raise
            except Superseded:
                raise
            except Exception as exc:
                kind, message, tb = classify(exc), f"{type(exc).__name__}: {exc}", traceback.format_exc()
                _quietly(run.finish, "FAILED", {}, {"ablate.failure_kind": kind, "ablate.traceback": tb})
                if kind == "oom" and accumulate < MAX_ACCUMULATE:
                    # Same effective batch in smaller pieces: the result stays comparable.
                    accumulate *= 2
                    trial.set_user_attr("accumulate", accumulate)
                    emit("oom", {**info, "message": f"{message}; retrying with {accumulate} micro-batches"})
                    run = current["run"] = _start_run(study, trial, attrs, stores, device)
                    continue
                _fail(study, trial, kind, message, tb)
                if kind in RETRYABLE:
                    _requeue(study, trial, bounded=True)
                    retries = queue.trial(study, trial.number).system_attrs.get("retry_history", [])
                    time.sleep(min(60.0, 2.0 ** len(retries)))
                else:
                    checkpoint.unlink(missing_ok=True)
                emit(kind, {**info, "message": message})
                return kind
        if heartbeat.lost.is_set():  # taken away after the last report: the re-run's result counts
            raise Superseded()
        trial.set_user_attr("seconds", result.seconds)
        trial.set_user_attr("steps", result.steps)
        # The run is finished (curves written) before the trial: a kill in between re-runs the item
        # rather than leaving a COMPLETE trial without its curves.
        if result.status == "diverged":
            run.finish("FAILED", {}, {"ablate.failure_kind": "diverged", "ablate.failure": result.reason})
            _fail(study, trial, "diverged", result.reason)
            checkpoint.unlink(missing_ok=True)
            emit("diverged", {**info, "message": result.reason})
            return "diverged"
        run.finish("FINISHED", result.metrics)
        queue.finish(study, trial, TrialState.COMPLETE, {**result.metrics, "status": "complete"},
                     result.metrics.get("val_accuracy", float("nan")))
    checkpoint.unlink(missing_ok=True)
    emit("complete", {**info, **result.metrics, "seconds": result.seconds})
    return "complete"


def _start_run(study: optuna.Study, trial: optuna.Trial, attrs: dict[str, Any], stores: Stores,
               device: str) -> tracking.TrialRun:
    run = tracking.TrialRun(
        stores,
        study.study_name,
        study.user_attrs.get("mlflow_parent_run_id"),
        name=f"{attrs['cell_label']} · seed {attrs['seed']}",
        config={"settings": attrs["settings"], **attrs["config"]},
        tags={
            "ablate.cell_id": attrs["cell_id"],
            "ablate.seed": str(attrs["seed"]),
            "ablate.phase": attrs["phase"],
            "ablate.trial_number": str(trial.number),
            "ablate.worker": WORKER_ID,
            **provenance.record(device),
        },
    )
    trial.set_user_attr("mlflow_run_id", run.run_id)
    return run


def classify(exc: BaseException) -> str:
    """oom (retried with accumulation), infrastructure (stores: retried with back-off), error (a bug)."""
    import torch

    text = str(exc).lower()
    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)) or "out of memory" in text or (
        "can't allocate memory" in text
    ):
        return "oom"
    infrastructure: tuple[type[BaseException], ...] = (ConnectionError, TimeoutError)
    try:
        import sqlalchemy.exc

        infrastructure += (sqlalchemy.exc.OperationalError, sqlalchemy.exc.InterfaceError)
    except ImportError:  # pragma: no cover
        pass
    try:
        import requests

        infrastructure += (requests.exceptions.ConnectionError, requests.exceptions.Timeout)
    except ImportError:  # pragma: no cover
        pass
    if isinstance(exc, infrastructure) or type(exc).__name__ == "MlflowException" and any(
        word in text for word in ("connection", "timed out", "unavailable", "locked")
    ):
        return "infrastructure"
    return "error"


def _requeue(study: optuna.Study, trial: optuna.Trial, bounded: bool) -> None:
    queue.requeue(study, trial.number, MAX_RETRIES if bounded else None)


def _quietly(fn: Callable[..., Any], *args: Any) -> None:
    """Record to tracking if it can be reached; the Optuna trial state is what must not be lost."""
    try:
        fn(*args)
    except Exception:
        pass


def checkpoint_dir() -> Path:
    """Where trials checkpoint; share it between hosts (ABLATE_CHECKPOINT_DIR) to resume anywhere."""
    from ablate.stores import home

    return Path(os.environ.get("ABLATE_CHECKPOINT_DIR") or home() / "checkpoints").resolve()


def _fail(study: optuna.Study, trial: optuna.Trial, kind: str, message: str, tb: str = "") -> None:
    attrs = {"status": "diverged" if kind == "diverged" else "failed", "failure_kind": kind,
             "failure_message": message[:2000]}
    if tb:
        attrs["traceback"] = tb[-8000:]
    queue.finish(study, trial, TrialState.FAIL, attrs)


def _requeue_in_flight(study: optuna.Study) -> bool:
    """Whether some item's last trial failed in a retryable way and has no successor yet."""
    return "new" in states_by_item(study).values()


def _close_parent_if_done(study: optuna.Study, stores: Stores) -> None:
    """The study's MLflow parent run ends when nothing is left to run (by whichever worker sees it)."""
    parent = study.user_attrs.get("mlflow_parent_run_id")
    if parent and not queue.count(study, (TrialState.WAITING, TrialState.RUNNING)):
        try:
            tracking.terminate(stores.tracking, parent, "FINISHED")
        except Exception:  # tracking unreachable: the trials are what counts
            pass


def _preload() -> threading.Thread:
    """Import torch, the models and MLflow in a daemon thread; an import error is left for the
    item that needs the module to raise (and record) when it imports it itself."""

    def load() -> None:
        try:
            import mlflow.tracking  # noqa: F401

            import ablate.training  # noqa: F401
        except Exception:
            pass

    thread = threading.Thread(target=load, name="ablate-preload", daemon=True)
    thread.start()
    return thread


def select_device(device: str) -> None:
    """Make ``cuda:k`` this process's current CUDA device, so that work launched without a device
    of its own (Triton's kernels, cuBLAS and cuDNN handles) runs on the worker's GPU: several
    workers can share one GPU, or each take its own, with no CUDA_VISIBLE_DEVICES."""
    if device.startswith("cuda"):
        import torch

        index = torch.device(device).index
        if index is not None:
            torch.cuda.set_device(index)


def _await_preload(study: optuna.Study, trial: optuna.Trial, preload: threading.Thread, emit: Event,
                   device: str) -> None:
    """Wait for the preload with the item claimed (then select the device): a signal meanwhile
    re-queues the item."""
    try:
        preload.join()
        select_device(device)
    except (KeyboardInterrupt, Interrupted):
        _fail(study, trial, "interrupted", "stopped by a signal before training; re-queued")
        _requeue(study, trial, bounded=False)
        emit("interrupted", {"cell": trial.user_attrs.get("cell_label"), "seed": trial.user_attrs.get("seed"),
                             "number": trial.number})
        raise


def work(
    study_name: str,
    stores: Stores,
    device: str = "cpu",
    emit: Event | None = None,
    wait_for_running: bool = True,
    checkpoint_every: int = 100,
    max_items: int | None = None,
) -> dict[str, int]:
    """Run items until none is waiting; with ``wait_for_running``, also outlive other workers'
    running items so that a killed worker's item (re-queued after its grace period) gets run."""
    emit = emit or (lambda event, info: None)
    study = open_study(study_name, stores)
    # What training needs (torch, the models, mlflow: 5-10 s) loads in the background from here,
    # so the first claim does not wait for it; the item's heartbeat runs from the claim on.
    preload = _preload()
    outcomes: dict[str, int] = {}
    requeue_deadline = time.monotonic() + REQUEUE_WAIT_S  # also at start: a verdict may be in flight
    previous = signal.signal(signal.SIGTERM, _raise_interrupted)
    try:
        while True:
            recover_stale(study)
            trial = phases.claim(study)
            if trial is None:
                if wait_for_running and queue.count(study, (TrialState.RUNNING,)):
                    time.sleep(2.0)
                    continue
                # A trial declared dead is failed first and re-queued a moment later (study.declare_dead).
                if wait_for_running and time.monotonic() < requeue_deadline and _requeue_in_flight(study):
                    time.sleep(1.0)
                    continue
                _close_parent_if_done(study, stores)
                return outcomes
            # Beat from the claim on: finishing the preload, choosing the setting and opening the
            # MLflow run come before run_item's heartbeat (which lends it the step) and take seconds.
            with Heartbeat(study, trial.number):
                _await_preload(study, trial, preload, emit, device)
                outcome = run_item(study, trial, stores, device, emit, checkpoint_every)
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
            if outcome == "superseded":
                requeue_deadline = time.monotonic() + REQUEUE_WAIT_S
            if max_items is not None and sum(outcomes.values()) >= max_items:
                return outcomes
    finally:
        signal.signal(signal.SIGTERM, previous)
        preload.join(PRELOAD_WAIT_S)  # not exiting mid-import (a daemon thread inside torch's init)
