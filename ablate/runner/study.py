"""Optuna, and only here: a study is a queue of items, one trial per (cell, phase, seed).

Items are enqueued as WAITING trials carrying their cell config in user attributes. A worker
claims one by flipping WAITING → RUNNING in the storage, which the RDB storage does atomically
(the flip fails for every worker but one), so concurrent workers never run an item twice.
Heartbeats mark trials of killed workers FAIL and re-enqueue them, up to a retry bound.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from ablate.design import Item, canonical_json, spec_hash
from ablate.spec import Spec
from ablate.stores import Stores, redact, sqlite_lock, storage_problem

# Seconds between a running trial's heartbeats, and of silence before it counts as killed.
HEARTBEAT_S = int(os.environ.get("ABLATE_HEARTBEAT_S", "10"))
GRACE_S = int(os.environ.get("ABLATE_GRACE_S", "30"))
MAX_RETRIES = 2
# A failed item counts as done when it failed for one of these reasons: re-running gives the same.
TERMINAL_KINDS = ("diverged", "error")

optuna.logging.set_verbosity(optuna.logging.WARNING)
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)


class StorageError(Exception):
    """The study's storage cannot be reached or opened; the message is safe to show."""


KILLED_ATTRS = {"status": "killed", "failure_kind": "killed", "failure_message": "worker stopped sending heartbeats"}


def recover_stale(study: optuna.Study) -> int:
    """Fail the trials of workers that stopped sending heartbeats and re-queue their items.

    Unlike ``optuna.storages.fail_stale_trials`` (which fails first, after which a trial's
    attributes can no longer be set), the reason is recorded while the trial is still RUNNING;
    the row-locked FAIL flip then picks the one worker that handles it."""
    return sum(declare_dead(study, trial_id) for trial_id in study._storage._get_stale_trial_ids(study._study_id))


def declare_dead(study: optuna.Study, trial_id: int) -> bool:
    """Fail one RUNNING trial as killed, close its MLflow run and re-queue its item; False when
    another process got there first or the trial has just finished. Should its worker be alive
    after all, it finds the trial taken away and drops its attempt (worker.Superseded)."""
    store = study._storage
    try:
        for key, value in KILLED_ATTRS.items():
            store.set_trial_user_attr(trial_id, key, value)
        if not store.set_trial_state_values(trial_id, state=TrialState.FAIL):
            return False
    except optuna.exceptions.UpdateFinishedTrialError:
        return False
    _on_stale(study, store.get_trial(trial_id))
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
    optuna.storages.RetryFailedTrialCallback(max_retry=MAX_RETRIES)(study, trial)


def storage(url: str) -> optuna.storages.RDBStorage:
    engine_kwargs: dict[str, Any] = {}
    if url.startswith("sqlite"):
        # Several local worker processes share one file: wait for the lock instead of failing.
        engine_kwargs["connect_args"] = {"timeout": 60}
    else:
        engine_kwargs["pool_pre_ping"] = True
        if url.startswith("postgresql"):  # an unreachable host fails in seconds, not minutes
            engine_kwargs["connect_args"] = {"connect_timeout": 10}
    try:
        with _schema_lock(url, engine_kwargs):
            store = optuna.storages.RDBStorage(
                url,
                engine_kwargs=engine_kwargs,
                heartbeat_interval=HEARTBEAT_S,
                grace_period=GRACE_S,
                heartbeat_stale_trial_callback=_on_stale,
            )
    except Exception as exc:  # sqlalchemy/driver errors carry the URL; never echo the password
        raise StorageError(storage_problem(url, exc)) from None
    if url.startswith("sqlite"):
        _serialise_sqlite(store.engine)
    return store


@contextmanager
def _schema_lock(url: str, engine_kwargs: dict[str, Any]) -> Iterator[None]:
    """The first process on a fresh database creates Optuna's tables alone: processes starting
    together would race ("table ... already exists", "duplicate key ... pg_type")."""
    from sqlalchemy import create_engine

    engine = create_engine(url, **engine_kwargs)  # its own: the storage's engine does not exist yet
    try:
        with _db_lock(engine, "ablate-schema"):
            yield
    finally:
        engine.dispose()


@contextmanager
def _db_lock(engine: Any, name: str) -> Iterator[None]:
    """An exclusive lock between processes: a PostgreSQL session-level advisory lock named
    ``name`` on its own connection, or the lock file beside a SQLite database (one host);
    nothing on other databases."""
    if engine.url.get_backend_name() == "sqlite":
        with sqlite_lock(engine.url.render_as_string()):
            yield
        return
    if engine.url.get_backend_name() != "postgresql":
        yield
        return
    from sqlalchemy import text

    key = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)
    with engine.connect() as conn:
        conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": key})
        try:
            yield
        finally:
            conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": key})


def _serialise_sqlite(engine: Any) -> None:
    """Make every SQLite transaction take the write lock at BEGIN.

    pysqlite starts a transaction only at the first write, so Optuna's read-then-update of a
    trial's state (row-locked on PostgreSQL) is not atomic on SQLite: two workers could both
    flip the same WAITING trial to RUNNING. BEGIN IMMEDIATE (SQLAlchemy's documented recipe)
    serialises them; WAL keeps readers unblocked meanwhile."""
    from sqlalchemy import event

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, record: Any) -> None:
        dbapi_connection.isolation_level = None  # we issue BEGIN ourselves
        dbapi_connection.execute("PRAGMA journal_mode=WAL")

    @event.listens_for(engine, "begin")
    def _begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    engine.dispose()  # connections made before the listeners existed are dropped


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
        **item.extra_attrs(),  # tuned specs: the protocol, and a tuning item's index (runner/phases.py)
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
    # Retries are bounded for failures that re-running may fix; a signal's interruption is free.
    retried = [t for t in trials if t.state == TrialState.FAIL and t.user_attrs.get("failure_kind") != "interrupted"]
    if len(retried) > MAX_RETRIES:
        return "failed"
    return "new"


def trials_by_item(study: optuna.Study) -> dict[str, list[FrozenTrial]]:
    out: dict[str, list[FrozenTrial]] = {}
    for trial in study.get_trials(deepcopy=False):
        key = trial.user_attrs.get("item")
        if key:
            out.setdefault(key, []).append(trial)
    return out


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
    with _db_lock(_engine(study), f"ablate-queue:{study.study_name}"):
        if parent_run is not None and not study.user_attrs.get("mlflow_parent_run_id"):
            study.set_user_attr("mlflow_parent_run_id", parent_run())
        existing = trials_by_item(study)
        for item in items:
            if item_state(existing.get(item.key, [])) == "new":
                study.enqueue_trial(params={}, user_attrs=item_attrs(item), skip_if_exists=False)
                queued += 1
    return study, queued


def claim(study: optuna.Study) -> optuna.Trial | None:
    """Atomically take one WAITING trial (RUNNING from now on), or None when none is waiting."""
    from ablate.runner.phases import blocked_cells

    store = study._storage
    blocked: set[str] | None = None  # replicates wait for their cell's tuning to finish
    for trial_id in _waiting_ids(study):
        trial = store.get_trial(trial_id)
        if trial.state != TrialState.WAITING:
            continue  # claimed by another worker since the ids were read
        if trial.user_attrs.get("after_tune"):
            if blocked is None:
                blocked = blocked_cells(study, study.get_trials(deepcopy=False, states=(TrialState.WAITING,)))
            if trial.user_attrs.get("cell_id") in blocked:
                continue
        if store.set_trial_state_values(trial_id, state=TrialState.RUNNING):
            # Beat at once: Optuna never counts a RUNNING trial without any heartbeat as stale,
            # so a worker killed before its first beat would otherwise strand the item.
            store.record_heartbeat(trial_id)
            return optuna.Trial(study, trial_id)
    return None


def _waiting_ids(study: optuna.Study) -> list[int]:
    """Ids of the WAITING trials, oldest first, read without their attributes: loading every
    waiting trial's attributes made a claim cost seconds once thousands were queued."""
    from optuna.storages._rdb.models import TrialModel
    from sqlalchemy import select

    query = (select(TrialModel.trial_id)
             .where(TrialModel.study_id == study._study_id, TrialModel.state == TrialState.WAITING)
             .order_by(TrialModel.trial_id))
    with _engine(study).connect() as conn:
        return list(conn.execute(query).scalars())


def _engine(study: optuna.Study) -> Any:
    """The SQLAlchemy engine under the study's RDB storage (Optuna may wrap it in a cache)."""
    store = study._storage
    return getattr(store, "_backend", store).engine


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
