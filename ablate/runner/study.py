"""A study: ablate's items on the Optuna work queue (runner/queue.py), one trial per (cell,
phase, seed) — their attributes, their states, queueing them, progress.

Items are enqueued as WAITING trials carrying their cell config in user attributes; workers
claim them atomically (queue.claim, with the tuning rule of runner/phases.py). Heartbeats mark
trials of killed workers FAIL and re-enqueue them, up to a retry bound. Nothing here touches
Optuna's storage internals: that is runner/queue.py's alone.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from ablate.design import Item, canonical_json, spec_hash
from ablate.runner import queue
from ablate.runner.queue import StorageError
from ablate.spec import Spec
from ablate.stores import Stores, redact

MAX_RETRIES = 2
# A failed item counts as done when it failed for one of these reasons: re-running gives the same.
TERMINAL_KINDS = ("diverged", "error")
# Items are looked up by cell (a replicate's cell tuning, a cell's tuning history): indexed.
INDEXED = ("cell_id",)
# The user attributes item_state reads.
STATE_KEYS = ("item", "failure_kind")

KILLED_ATTRS = {"status": "killed", "failure_kind": "killed", "failure_message": "worker stopped sending heartbeats"}


def storage(url: str) -> optuna.storages.RDBStorage:
    """The Optuna storage at ``url`` as ablate uses it; raises StorageError."""
    return queue.connect(url, INDEXED, on_stale=_on_stale)


def open_study(name: str, stores: Stores, create: bool = False) -> optuna.Study:
    store = storage(stores.storage)
    try:
        if create:
            return optuna.create_study(study_name=name, storage=store, load_if_exists=True, direction="maximize")
        return optuna.load_study(study_name=name, storage=store)
    except KeyError:
        raise StorageError(f"no study named {name!r} in {redact(stores.storage)}") from None


def recover_stale(study: optuna.Study) -> int:
    """Fail the trials of workers that stopped sending heartbeats and re-queue their items.

    Unlike ``optuna.storages.fail_stale_trials`` (which fails first, after which a trial's
    attributes can no longer be set), the reason is recorded while the trial is still RUNNING;
    the row-locked FAIL flip then picks the one worker that handles it."""
    return sum(declare_dead(study, number) for number in queue.stale(study))


def declare_dead(study: optuna.Study, number: int) -> bool:
    """Fail trial ``number`` (RUNNING) as killed, close its MLflow run and re-queue its item;
    False when another process got there first or the trial has just finished. Should its
    worker be alive after all, it finds the trial taken away and drops its attempt
    (worker.Superseded)."""
    if not queue.fail_running(study, number, KILLED_ATTRS):
        return False
    _on_stale(study, queue.trial(study, number))
    return True


def _on_stale(study: optuna.Study, trial: FrozenTrial) -> None:
    """A worker died mid-trial (trial already FAIL): close its MLflow run, re-enqueue within the bound."""
    tracking = study.user_attrs.get("tracking_uri")
    if tracking:
        from ablate.runner import tracking as tr

        try:
            # Its run by tag too: the worker may have died before recording the run id (and a
            # retried trial inherits its predecessor's id).
            run_ids = {trial.user_attrs.get("mlflow_run_id")} | set(
                tr.open_runs(tracking, study.study_name, trial.number))
            for run_id in run_ids - {None}:
                tr.terminate(tracking, run_id, "KILLED", "worker stopped sending heartbeats")
        except Exception:  # tracking unreachable: the trial state is what counts
            pass
    queue.requeue(study, trial.number, MAX_RETRIES)


def item_attrs(item: Item) -> dict[str, Any]:
    return {
        "item": item.key,
        "cell_id": item.cell.id,
        "cell_label": item.cell.label,
        "seed": item.seed,
        "phase": item.phase,
        "settings": json.loads(canonical_json(item.cell.labels)),
        "config": item.cell.config,
        **item.extra_attrs(),  # tuned specs: the protocol, and a tuning item's index (runner/phases.py)
    }


def item_state(trials: Sequence[FrozenTrial | queue.Entry]) -> str:
    """The state of one item from all its trials: done, failed, running, waiting or new."""
    states = [t.state for t in trials]
    if TrialState.COMPLETE in states or TrialState.PRUNED in states:  # a pruned tuning trial is a result
        return "done"
    if any(t.state == TrialState.FAIL and t.user_attrs.get("failure_kind") in TERMINAL_KINDS for t in trials):
        return "failed"
    if TrialState.RUNNING in states:
        return "running"
    if TrialState.WAITING in states:
        return "waiting"
    # Retries are bounded for failures that re-running may fix; a signal's interruption is free.
    retried = [t for t in trials if t.state == TrialState.FAIL and t.user_attrs.get("failure_kind") != "interrupted"]
    if len(retried) > MAX_RETRIES:
        return "failed"
    return "new"


def trials_by_item(study: optuna.Study) -> dict[str, list[FrozenTrial]]:
    """Every trial of the study, whole, by item key (what the results API reads)."""
    out: dict[str, list[FrozenTrial]] = {}
    for trial in study.get_trials(deepcopy=False):
        key = trial.user_attrs.get("item")
        if key:
            out.setdefault(key, []).append(trial)
    return out


def states_by_item(study: optuna.Study, where: Mapping[str, Any] | None = None) -> dict[str, str]:
    """The state of every item with a trial (of those whose attributes match ``where``), read
    without loading the trials' configs."""
    by_item: dict[str, list[queue.Entry]] = {}
    for entry in queue.entries(study, where, STATE_KEYS):
        key = entry.user_attrs.get("item")
        if key:
            by_item.setdefault(key, []).append(entry)
    return {key: item_state(trials) for key, trials in by_item.items()}


def cell_trials(study: optuna.Study, cell_id: str, phase: str) -> list[FrozenTrial]:
    """The trials of one cell in one phase, whole, oldest first (read by the cell's index)."""
    return queue.trials(study, {"cell_id": cell_id, "phase": phase})


def prepare(spec: Spec, items: list[Item], stores: Stores,
            parent_run: Callable[[], str] | None = None) -> tuple[optuna.Study, int]:
    """Create or resume the study; enqueue the items that have no live or finished trial.
    ``parent_run`` starts the study's MLflow parent run (returning its id) if it has none yet."""
    study = open_study(spec.name, stores, create=True)
    study.set_user_attr("spec", spec.model_dump(mode="json"))  # unsorted: factor and level order are the spec's
    study.set_user_attr("spec_hash", spec_hash(spec))
    study.set_user_attr("tracking_uri", stores.tracking)
    queued = 0
    # Two `ablate run`s at once would otherwise both queue every item (docs/multi-host.md).
    with queue.lock(study, f"ablate-queue:{study.study_name}"):
        if parent_run is not None and not study.user_attrs.get("mlflow_parent_run_id"):
            study.set_user_attr("mlflow_parent_run_id", parent_run())
        existing = states_by_item(study)
        for item in items:
            if existing.get(item.key, "new") == "new":
                queue.enqueue(study, item_attrs(item))
                queued += 1
    return study, queued


def counts(study: optuna.Study, items: list[Item] | None = None) -> Counter:
    """Items per state; with ``items`` also those of the spec not yet enqueued ("new")."""
    states = states_by_item(study)
    if items is None:
        return Counter(states.values())
    return Counter(states.get(i.key, "new") for i in items)


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


# --- read-only progress, for `ablate plan` ---------------------------------------------------


def existing_store_url(storage_url: str | None) -> str | None:
    """The storage URL to read, or None when there is no store yet (nothing is created)."""
    from ablate import stores

    url = storage_url or os.environ.get("ABLATE_STORAGE")
    if url is None:  # the default of ablate.stores.resolve, without its mkdir
        path = stores.home().resolve() / "optuna.db"
        return f"sqlite:///{path}" if path.is_file() else None
    if url.startswith("sqlite:///"):
        return url if Path(url.removeprefix("sqlite:///")).is_file() else None
    return url


def item_states(study_name: str, keys: list[str], storage_url: str | None) -> dict[str, str] | None:
    """State per item key (done, failed, running, waiting, new), or None when the study has no
    store or no study of that name. Opens an existing store only; raises StorageError."""
    url = existing_store_url(storage_url)
    if url is None:
        return None
    try:
        opt = optuna.load_study(study_name=study_name, storage=storage(url))
    except KeyError:
        return None
    states = states_by_item(opt)
    return {k: states.get(k, "new") for k in keys}
