"""A worker: claim an item, train it with a heartbeat, record the outcome in Optuna and MLflow.

Outcomes: complete; ``diverged`` (a result of the cell, not retried); ``error`` (a bug: the
traceback is recorded, not retried); ``interrupted`` (SIGINT/SIGTERM: re-queued); ``killed``
(no heartbeat: re-queued by whichever process notices, see study._on_stale).
"""

from __future__ import annotations

import signal
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

import optuna
from optuna.trial import TrialState

from ablate.runner import tracking
from ablate.runner.study import HEARTBEAT_S, claim, open_study
from ablate.spec import ProbeSpec
from ablate.stores import Stores

Event = Callable[[str, dict[str, Any]], None]


class Heartbeat:
    """Records a heartbeat for a running trial every HEARTBEAT_S seconds in a daemon thread."""

    def __init__(self, study: optuna.Study, trial_id: int) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, args=(study._storage, trial_id), daemon=True)

    def _beat(self, store: Any, trial_id: int) -> None:
        while not self._stop.is_set():
            try:
                store.record_heartbeat(trial_id)
            except Exception:  # a missed beat is tolerated; a long silence is what counts
                pass
            self._stop.wait(HEARTBEAT_S)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


class Interrupted(BaseException):
    """SIGTERM arrived: stop the current item and re-queue it."""


def _raise_interrupted(signum: int, frame: object) -> None:
    raise Interrupted()


def run_item(study: optuna.Study, trial: optuna.Trial, stores: Stores, device: str, emit: Event) -> str:
    from ablate.training import run_trial

    attrs = trial.user_attrs
    info = {"cell": attrs["cell_label"], "seed": attrs["seed"], "number": trial.number}
    emit("start", info)
    probes = ProbeSpec.model_validate(study.user_attrs.get("spec", {}).get("probes", {}))
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
            "ablate.device": device,
        },
    )
    trial.set_user_attr("mlflow_run_id", run.run_id)
    with Heartbeat(study, trial._trial_id):
        try:
            result = run_trial(attrs["config"], attrs["seed"], probes, reporter=run, device=device)
        except (KeyboardInterrupt, Interrupted):
            run.finish("KILLED", {}, {"ablate.failure_kind": "interrupted"})
            _fail(study, trial, "interrupted", "stopped by a signal; re-queued")
            optuna.storages.RetryFailedTrialCallback(max_retry=None)(study, study._storage.get_trial(trial._trial_id))
            emit("interrupted", info)
            raise
        except Exception as exc:
            tb = traceback.format_exc()
            run.finish("FAILED", {}, {"ablate.failure_kind": "error", "ablate.traceback": tb})
            _fail(study, trial, "error", f"{type(exc).__name__}: {exc}", tb)
            emit("error", {**info, "message": f"{type(exc).__name__}: {exc}"})
            return "error"
    trial.set_user_attr("seconds", result.seconds)
    trial.set_user_attr("steps", result.steps)
    if result.status == "diverged":
        run.finish("FAILED", {}, {"ablate.failure_kind": "diverged", "ablate.failure": result.reason})
        _fail(study, trial, "diverged", result.reason)
        emit("diverged", {**info, "message": result.reason})
        return "diverged"
    run.finish("FINISHED", result.metrics)
    for key, value in result.metrics.items():
        trial.set_user_attr(key, value)
    trial.set_user_attr("status", "complete")
    study.tell(trial, result.metrics.get("val_accuracy", float("nan")))
    emit("complete", {**info, **result.metrics, "seconds": result.seconds})
    return "complete"


def _fail(study: optuna.Study, trial: optuna.Trial, kind: str, message: str, tb: str = "") -> None:
    trial.set_user_attr("status", "diverged" if kind == "diverged" else "failed")
    trial.set_user_attr("failure_kind", kind)
    trial.set_user_attr("failure_message", message[:2000])
    if tb:
        trial.set_user_attr("traceback", tb[-8000:])
    study.tell(trial, state=TrialState.FAIL)


def work(
    study_name: str,
    stores: Stores,
    device: str = "cpu",
    emit: Event | None = None,
    wait_for_running: bool = True,
) -> dict[str, int]:
    """Run items until none is waiting; with ``wait_for_running``, also outlive other workers'
    running items so that a killed worker's item (re-queued after its grace period) gets run."""
    emit = emit or (lambda event, info: None)
    study = open_study(study_name, stores)
    outcomes: dict[str, int] = {}
    previous = signal.signal(signal.SIGTERM, _raise_interrupted)
    try:
        while True:
            optuna.storages.fail_stale_trials(study)
            trial = claim(study)
            if trial is None:
                running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
                if wait_for_running and running:
                    time.sleep(2.0)
                    continue
                return outcomes
            outcome = run_item(study, trial, stores, device, emit)
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
    finally:
        signal.signal(signal.SIGTERM, previous)
