"""Optuna, and only here: a study is a queue of items, one trial per (cell, phase, seed).

Items are enqueued as WAITING trials carrying their cell config in user attributes. A worker
claims one by flipping WAITING → RUNNING in the storage, which the RDB storage does atomically
(the flip fails for every worker but one), so concurrent workers never run an item twice.
Heartbeats mark trials of killed workers FAIL and re-enqueue them, up to a retry bound.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from ablate.design import Item, canonical_json, spec_hash
from ablate.spec import Spec
from ablate.stores import Stores, redact

HEARTBEAT_S = 10
GRACE_S = 30
MAX_RETRIES = 2
# A failed item counts as done when it failed for one of these reasons: re-running gives the same.
TERMINAL_KINDS = ("diverged", "error")

optuna.logging.set_verbosity(optuna.logging.WARNING)


class StorageError(Exception):
    """The study's storage cannot be reached or opened; the message is safe to show."""


def _on_stale(study: optuna.Study, trial: FrozenTrial) -> None:
    """A worker died mid-trial: record it, close its MLflow run, re-enqueue within the bound."""
    storage = study._storage
    storage.set_trial_user_attr(trial._trial_id, "status", "killed")
    storage.set_trial_user_attr(trial._trial_id, "failure_kind", "killed")
    storage.set_trial_user_attr(trial._trial_id, "failure_message", "worker stopped sending heartbeats")
    run_id = trial.user_attrs.get("mlflow_run_id")
    tracking = study.user_attrs.get("tracking_uri")
    if run_id and tracking:
        from ablate.runner import tracking as tr

        try:
            tr.terminate(tracking, run_id, "KILLED", "worker stopped sending heartbeats")
        except Exception:  # tracking unreachable: the trial state is what counts
            pass
    optuna.storages.RetryFailedTrialCallback(max_retry=MAX_RETRIES)(study, trial)


def storage(url: str) -> optuna.storages.RDBStorage:
    engine_kwargs: dict[str, Any] = {}
    if url.startswith("sqlite"):
        # Several local worker processes share one file: wait for the lock instead of failing.
        engine_kwargs["connect_args"] = {"timeout": 60}
    else:
        engine_kwargs["pool_pre_ping"] = True
    try:
        return optuna.storages.RDBStorage(
            url,
            engine_kwargs=engine_kwargs,
            heartbeat_interval=HEARTBEAT_S,
            grace_period=GRACE_S,
            heartbeat_stale_trial_callback=_on_stale,
        )
    except Exception as exc:  # sqlalchemy/driver errors carry the URL; never echo the password
        raise StorageError(f"cannot open storage {redact(url)}: {type(exc).__name__}: "
                           f"{redact(str(exc)).splitlines()[0]}") from None


def open_study(name: str, stores: Stores, create: bool = False) -> optuna.Study:
    store = storage(stores.storage)
    try:
        if create:
            return optuna.create_study(study_name=name, storage=store, load_if_exists=True, direction="maximize")
        return optuna.load_study(study_name=name, storage=store)
    except KeyError:
        raise StorageError(f"no study named {name!r} in {redact(stores.storage)}") from None


def item_attrs(item: Item) -> dict[str, Any]:
    return {
        "item": item.key,
        "cell_id": item.cell.id,
        "cell_label": item.cell.label,
        "seed": item.seed,
        "phase": item.phase,
        "settings": json.loads(canonical_json(item.cell.labels)),
        "config": item.cell.config,
    }


def item_state(trials: list[FrozenTrial]) -> str:
    """The state of one item from all its trials: done, failed, running, waiting or new."""
    states = [t.state for t in trials]
    if TrialState.COMPLETE in states:
        return "done"
    if any(t.state == TrialState.FAIL and t.user_attrs.get("failure_kind") in TERMINAL_KINDS for t in trials):
        return "failed"
    if TrialState.RUNNING in states:
        return "running"
    if TrialState.WAITING in states:
        return "waiting"
    if trials and len(trials) > MAX_RETRIES:
        return "failed"
    return "new"


def trials_by_item(study: optuna.Study) -> dict[str, list[FrozenTrial]]:
    out: dict[str, list[FrozenTrial]] = {}
    for trial in study.get_trials(deepcopy=False):
        key = trial.user_attrs.get("item")
        if key:
            out.setdefault(key, []).append(trial)
    return out


def prepare(spec: Spec, items: list[Item], stores: Stores) -> tuple[optuna.Study, int]:
    """Create or resume the study; enqueue the items that have no live or finished trial."""
    study = open_study(spec.name, stores, create=True)
    study.set_user_attr("spec", json.loads(canonical_json(spec.model_dump())))
    study.set_user_attr("spec_hash", spec_hash(spec))
    study.set_user_attr("tracking_uri", stores.tracking)
    existing = trials_by_item(study)
    queued = 0
    for item in items:
        if item_state(existing.get(item.key, [])) == "new":
            study.enqueue_trial(params={}, user_attrs=item_attrs(item), skip_if_exists=False)
            queued += 1
    return study, queued


def claim(study: optuna.Study) -> optuna.Trial | None:
    """Atomically take one WAITING trial (RUNNING from now on), or None when none is waiting."""
    store = study._storage
    for trial in study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
        if store.set_trial_state_values(trial._trial_id, state=TrialState.RUNNING):
            return optuna.Trial(study, trial._trial_id)
    return None


def counts(study: optuna.Study, items: list[Item] | None = None) -> Counter:
    """Items per state; with ``items`` also those of the spec not yet enqueued ("new")."""
    by_item = trials_by_item(study)
    keys = [i.key for i in items] if items is not None else list(by_item)
    return Counter(item_state(by_item.get(k, [])) for k in keys)


@dataclass
class Progress:
    done: int
    failed: int
    running: int
    waiting: int
    new: int

    @classmethod
    def of(cls, study: optuna.Study, items: list[Item] | None = None) -> Progress:
        c = counts(study, items)
        return cls(c["done"], c["failed"], c["running"], c["waiting"], c["new"])

    @property
    def finished(self) -> bool:
        return self.running == 0 and self.waiting == 0
