"""An Optuna study's RDB storage used as a work queue: with ``ablate.runner.rdb`` (opening the
storage, its lock, the tables and ids under a ``Study``), the only module that touches Optuna's
storage internals (private names, the SQLAlchemy engine under the storage, raw SQL).

Every other module of the runner goes through the functions here or Optuna's public API
(``Study``, ``Trial.set_user_attr``, ``Study.tell``, ``Study.user_attrs``). A queue item is a
trial: enqueued WAITING with its attributes, claimed by an atomic WAITING → RUNNING flip (the
flip fails for every process but one), kept alive by heartbeats, finished COMPLETE or FAIL
with attributes, re-queued as a fresh WAITING copy within a retry bound. Trials are named by
their ``number`` (public); the storage's trial ids stay in here.

- ``connect(url)``, ``lock(study, name)``, ``quiet_optuna``, ``storage_of``, ``HEARTBEAT_S``,
  ``GRACE_S`` and ``StaleCallback``: ``ablate.runner.rdb``'s, and ``StorageError``:
  ``ablate.stores``', re-exported here, where they were defined before (``x as x`` imports);
- the studies of a storage (``load``, ``create``, ``names``, ``summaries``, ``delete``),
  ``stored_distribution`` (a parameter distribution from its JSON) and
  Optuna's exceptions under ablate's names (``TrialFinished``, ``StorageInternal``, ``Pruned``):
  ``ablate.runner.rdb``'s, re-exported so that modules below the study reach Optuna through here;
- ``enqueue``, ``claim`` (oldest claimable first, optionally through a ``Gate`` and among trials
  with given attributes), ``claim_many`` (up to k claims, each atomic), ``beat``,
  ``finish`` (the attributes and the outcome: two transactions), ``set_running_attrs`` (several
  attributes of a running trial in one transaction), ``fail_running``, ``requeue``, ``stale``;
- parameters (what optuna-dashboard plots): ``set_params`` on a running trial, ``recode_params``
  when a categorical parameter's choices change (a grid grows a level);
- reading: ``entries`` (state and a few attributes per trial, without loading whole trials),
  ``trials`` / ``trial`` (whole ``FrozenTrial``s of a few), ``count``;
- across the studies of one storage: ``find`` (trials of any study by an attribute's values),
  ``activity`` (trials per state and the last activity of every study); ``add`` (a finished
  trial written whole: a result linked from another study) and ``set_finished_attrs`` (marking
  finished trials, which Optuna's API refuses).

A claim costs O(1) in the number of waiting trials: it reads the oldest WAITING ids a page at a
time (``LIMIT``) on an index over (study, state, trial id), and only the few attributes its gate
asks for. Groups of trials a gate holds back are skipped inside the query, and trials are
looked up by an attribute (``where``) through a partial index over that attribute's values.

Written against Optuna 5.0.0 and SQLAlchemy 2.1 (``pyproject.toml`` bounds Optuna to 5.0.x).
On an upgrade, re-check (tests/test_runner_queue.py exercises each):
- ``optuna.storages._rdb.models``: tables ``trials`` (trial_id, number, study_id, state as the
  enum's name, datetime_start, datetime_complete) and ``trial_user_attributes`` (trial_id, key, value_json = ``json.dumps(value)``);
- ``Study._storage`` (a ``_CachedStorage`` whose ``_backend`` is the ``RDBStorage``),
  ``Study._study_id``, ``RDBStorage.engine``, ``optuna.Trial(study, trial_id)``,
  ``get_trial_id_from_study_id_trial_number``;
- ``RDBStorage.set_trial_state_values(id, RUNNING)`` returning False, under a row lock, when the
  trial is no longer WAITING (the atomic claim); ``record_heartbeat``; ``_get_stale_trial_ids``;
- ``optuna.storages._rdb.models.TrialParamModel`` (table ``trial_params``: param_id, trial_id,
  param_name, param_value = the distribution's internal repr, distribution_json), and
  ``RDBStorage.set_trial_param`` checking a new distribution against the study's first record;
- ``requeue`` keeps the system attributes of ``RetryHeartbeatStaleTrialCallback`` (``failed_trial``,
  ``retry_history``: what ``retried_trial_number`` / ``retry_history`` read) but adds the copy
  through ``Study.add_trial`` itself: the callback class is experimental and its predecessor
  ``RetryFailedTrialCallback`` is deprecated for removal in 6.0;
- that Optuna's migrations (``optuna storage upgrade``) leave the ``ablate_*`` indexes alone
  (they are re-created, if missing, whenever a storage is opened);
- ``optuna.storages._rdb.storage._VersionManager`` (``_init_alembic``,
  ``check_table_schema_compatibility``), the tables ``version_info`` (schema_version,
  library_version: set at creation and by ``upgrade``) and ``alembic_version``: an opening skips
  alembic for a store stamped by the running Optuna version (``rdb._stamped_by_this_optuna``).
"""

from __future__ import annotations

import datetime
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import optuna
from optuna.trial import FrozenTrial, TrialState

from ablate import faults
from ablate.runner.rdb import GRACE_S as GRACE_S
from ablate.runner.rdb import HEARTBEAT_S as HEARTBEAT_S
from ablate.runner.rdb import Pruned as Pruned
from ablate.runner.rdb import StaleCallback as StaleCallback
from ablate.runner.rdb import StorageInternal as StorageInternal
from ablate.runner.rdb import TrialFinished as TrialFinished
from ablate.runner.rdb import (
    backend_of,
    cache_of,
    checked,
    engine_of,
    key_is,
    other_tables,
    study_id_of,
    system_attr_table,
    tables,
    trial_id_of,
)
from ablate.runner.rdb import connect as connect
from ablate.runner.rdb import create as create
from ablate.runner.rdb import delete as delete
from ablate.runner.rdb import load as load
from ablate.runner.rdb import lock as lock
from ablate.runner.rdb import names as names
from ablate.runner.rdb import quiet_optuna as quiet_optuna
from ablate.runner.rdb import storage_of as storage_of
from ablate.runner.rdb import stored_distribution as stored_distribution
from ablate.runner.rdb import summaries as summaries
from ablate.stores import StorageError as StorageError

# Oldest WAITING ids a claim reads at once; pages grow when a gate holds candidates back.
PAGE = 16
MAX_PAGE = 1024


# --- the queries the claim and the reads share ------------------------------------------------


def _matching(where: Mapping[str, Any]) -> Any:
    """The ids of trials whose user attributes equal ``where`` (key → value), as a subquery
    driven by its first key (give an indexed one)."""
    from sqlalchemy import exists, select

    _, attr_table = tables()
    first, *rest = where
    a = attr_table.alias("a")
    query = select(a.c.trial_id).where(key_is(a.c.key, first), a.c.value_json == json.dumps(where[first]))
    for key in rest:
        b = attr_table.alias(f"b_{key}")
        query = query.where(exists().where(b.c.trial_id == a.c.trial_id, key_is(b.c.key, key),
                                           b.c.value_json == json.dumps(where[key])))
    return query


def _attrs_of(conn: Any, ids: Sequence[int], keys: Sequence[str]) -> dict[int, dict[str, Any]]:
    from sqlalchemy import select

    _, attr_table = tables()
    out: dict[int, dict[str, Any]] = {i: {} for i in ids}
    if not keys or not ids:
        return out
    query = select(attr_table.c.trial_id, attr_table.c.key, attr_table.c.value_json).where(
        attr_table.c.trial_id.in_(list(ids)), attr_table.c.key.in_(list(keys)))
    for trial_id, key, value in conn.execute(query):
        out[trial_id][key] = json.loads(value)
    return out


# --- writing -----------------------------------------------------------------------------------


def enqueue(study: optuna.Study, attrs: Mapping[str, Any]) -> None:
    """Add one WAITING item carrying ``attrs`` as its user attributes."""
    study.enqueue_trial(params={}, user_attrs=dict(attrs), skip_if_exists=False)


def enqueue_many(study: optuna.Study, items: Sequence[Mapping[str, Any]]) -> None:
    """Add WAITING items, each carrying its attributes, in one transaction: the rows that
    ``enqueue`` writes one transaction each (Optuna's ORM: ~17 ms an item, 1.7 s of a 100-cell
    ``ablate run --workers 0``). Numbers as Optuna gives them: a trial's number counts the
    study's trials of lower id, under a lock on the study's row (SQLite's BEGIN IMMEDIATE)."""
    from sqlalchemy import func, insert, select, update

    if not items:
        return
    trial_table, attr_table = tables()
    study_table, _ = other_tables()
    system_table = system_attr_table()
    sid = study_id_of(study)
    with engine_of(study).begin() as conn:
        conn.execute(select(study_table.c.study_id).where(study_table.c.study_id == sid).with_for_update())
        ids = [conn.execute(insert(trial_table).values(study_id=sid, number=None, state=TrialState.WAITING)
                            ).inserted_primary_key[0] for _ in items]
        earlier = trial_table.alias("earlier")
        conn.execute(update(trial_table).where(trial_table.c.trial_id.in_(ids)).values(
            number=select(func.count()).where(earlier.c.study_id == sid, earlier.c.trial_id < trial_table.c.trial_id)
            .scalar_subquery()))
        # enqueue_trial's fixed parameters (none): what Study.ask would read from a WAITING trial
        conn.execute(insert(system_table), [{"trial_id": t, "key": "fixed_params", "value_json": "{}"} for t in ids])
        rows = [{"trial_id": t, "key": k, "value_json": json.dumps(v)} for t, attrs in zip(ids, items, strict=True)
                for k, v in attrs.items()]
        for i in range(0, len(rows), CHUNK):
            conn.execute(insert(attr_table), rows[i : i + CHUNK])


class Gate(Protocol):
    """Which WAITING trials a claim may take.

    ``keys``: the user attributes ``hold`` reads from a candidate. ``hold(attrs)`` returns None
    when the candidate may be claimed, or the attribute values (key → value, the first key
    indexed) of the whole group of trials that must wait with it: the claim skips that group
    from then on. The candidate's own attributes must match the group it returns."""

    keys: tuple[str, ...]

    def hold(self, attrs: Mapping[str, Any]) -> Mapping[str, Any] | None: ...


def claim(study: optuna.Study, gate: Gate | None = None,
          where: Mapping[str, Any] | None = None) -> optuna.Trial | None:
    """Atomically take the oldest WAITING trial the gate lets through (RUNNING from now on), or
    None when there is none. Concurrent claims never take the same trial. ``where``: only trials
    whose user attributes equal these (key → value, the first key indexed)."""
    from sqlalchemy import select

    trial_table, _ = tables()
    store = cache_of(study)
    holds: list[Mapping[str, Any]] = []
    after, page = -1, PAGE
    while True:
        query = select(trial_table.c.trial_id).where(trial_table.c.study_id == study_id_of(study),
                                                     trial_table.c.state == TrialState.WAITING,
                                                     trial_table.c.trial_id > after)
        if where:
            query = query.where(trial_table.c.trial_id.in_(_matching(where)))
        for held in holds:
            query = query.where(trial_table.c.trial_id.not_in(_matching(held)))
        # A short read of its own: the gate and the flip open connections, and on SQLite every
        # transaction holds the write lock.
        with engine_of(study).connect() as conn:
            ids = list(conn.execute(query.order_by(trial_table.c.trial_id).limit(page)).scalars())
            attrs = _attrs_of(conn, ids, gate.keys) if gate is not None else {}
        if not ids:
            return None
        for trial_id in ids:
            after = trial_id
            if gate is not None:
                mine = attrs[trial_id]
                if any(all(mine.get(k) == v for k, v in held.items()) for held in holds):
                    continue
                held = gate.hold(mine)
                if held is not None:
                    holds.append(held)
                    continue
            # Beat before the flip, not after: Optuna never counts a RUNNING trial without a
            # heartbeat as stale, so a worker killed between the flip and a first beat would strand
            # the item (and every worker waiting for running items would wait for ever). A beat on
            # a WAITING trial means nothing, and a claimant that loses the flip leaves a fresh one.
            store.record_heartbeat(trial_id)
            try:
                taken = store.set_trial_state_values(trial_id, state=TrialState.RUNNING)
            except TrialFinished:  # claimed and finished since the read
                continue
            if taken:
                faults.inject("flip")
                return optuna.Trial(study, trial_id)
        page = min(MAX_PAGE, page * 4)


def claim_many(study: optuna.Study, k: int, gate: Gate | None = None,
               where: Mapping[str, Any] | None = None) -> list[optuna.Trial]:
    """Up to ``k`` trials, each taken by ``claim``'s atomic flip (oldest first): a worker that
    trains several at once (``--fuse``). Fewer when fewer are waiting."""
    taken: list[optuna.Trial] = []
    while len(taken) < k:
        trial = claim(study, gate, where)
        if trial is None:
            break
        taken.append(trial)
    return taken


def beat(study: optuna.Study, number: int, attrs: Mapping[str, Any] | None = None) -> bool:
    """Record a heartbeat of a RUNNING trial (and set ``attrs`` on it); False, recording nothing,
    when the trial is no longer RUNNING (another process declared its worker dead)."""
    from sqlalchemy import select

    trial_table, _ = tables()
    trial_id = trial_id_of(study, number)
    with engine_of(study).connect() as conn:
        state = conn.execute(select(trial_table.c.state).where(trial_table.c.trial_id == trial_id)).scalar_one()
    if state != TrialState.RUNNING:
        return False
    store = cache_of(study)
    store.record_heartbeat(trial_id)
    for key, value in (attrs or {}).items():
        store.set_trial_user_attr(trial_id, key, value)
    return True


def finish(study: optuna.Study, trial: optuna.Trial, state: TrialState, attrs: Mapping[str, Any],
           value: float | None = None) -> None:
    """Set ``attrs`` on this process's RUNNING trial, then finish it COMPLETE (with ``value``)
    or FAIL. Raises TrialFinished when another process finished it first (declared its worker
    dead)."""
    if attrs:
        set_running_attrs(study, trial, attrs)
    if state == TrialState.COMPLETE:
        study.tell(trial, value)
    else:
        study.tell(trial, state=state)


def set_running_attrs(study: optuna.Study, trial: optuna.Trial, attrs: Mapping[str, Any]) -> None:
    """``trial.set_user_attr`` for each of ``attrs``, in one transaction rather than one each
    (a trial's record sets a dozen: each its own write lock and, on SQLite, its own connection),
    the trial object's own copy updated as ``set_user_attr`` updates it. Raises TrialFinished,
    writing nothing, when the trial has finished (as Optuna's does): checked under the row lock (SQLite: the write lock)."""
    _set_attrs_if_unfinished(study, trial._trial_id, trial.number, attrs)
    trial._cached_frozen_trial.user_attrs.update(attrs)


def _set_attrs_if_unfinished(study: optuna.Study, trial_id: int, number: int, attrs: Mapping[str, Any]) -> None:
    from sqlalchemy import delete, insert, select

    if not attrs:
        return
    trial_table, attr_table = tables()
    with engine_of(study).begin() as conn:
        query = select(trial_table.c.state).where(trial_table.c.trial_id == trial_id)
        if conn.dialect.name != "sqlite":  # SQLite's BEGIN IMMEDIATE already holds the write lock
            query = query.with_for_update()
        state = conn.execute(query).scalar()
        if state not in ("RUNNING", "WAITING", TrialState.RUNNING, TrialState.WAITING):  # Optuna's rule: not finished
            raise TrialFinished(
                f"trial {number} is {state}: its attributes cannot change")
        conn.execute(delete(attr_table).where(attr_table.c.trial_id == trial_id, attr_table.c.key.in_(list(attrs))))
        conn.execute(insert(attr_table), [{"trial_id": trial_id, "key": k, "value_json": json.dumps(v)}
                                          for k, v in attrs.items()])


def fail_running(study: optuna.Study, number: int, attrs: Mapping[str, Any]) -> bool:
    """Fail an unfinished trial of some other process (RUNNING, or a WAITING orphan that is
    dropped), its ``attrs`` set (in one transaction) while it is still unfinished (a finished
    trial's attributes are frozen); False when another process got there first or the trial has
    just finished. The row-locked FAIL flip picks the one process that wins."""
    trial_id = trial_id_of(study, number)
    try:
        _set_attrs_if_unfinished(study, trial_id, number, attrs)
        return bool(cache_of(study).set_trial_state_values(trial_id, state=TrialState.FAIL))
    except TrialFinished:
        return False


# The user attributes of a failed trial that describe its attempt, not its item: a re-queued copy
# does not carry them. Carried, they read as the copy's own until its worker overwrote them (the
# live view showed the dead worker and its step, the ETA priced that step at the copy's elapsed
# time, results showed a waiting item's predecessor's failure, traceback, MLflow run and host).
# A deny-list: what the copy must keep is open-ended (the item, ``items.item_attrs`` with the
# design's ``extra_attrs``; the setting its attempt chose, a tuning trial's ``params`` and
# ``config``; what resuming its checkpoint reads, ``continued_from``, ``checkpoint_warning``, a
# pruner's ``intermediate``), and one of those forgotten would resume a checkpoint under another
# setting, where an attempt attribute forgotten here only shows stale. The failed trial keeps its own.
ATTEMPT_ATTRS = (
    "worker", "attempt", "provenance", "mlflow_run_id", "accumulate",  # who ran it, where, how (progress.ATTEMPT)
    "step", "last_val", "ended", "resumed_at",  # its progress (the heartbeat's, the start's)
    "status", "failure_kind", "failure_message", "traceback", "retried",  # its outcome and its mark (items.RETRIED)
)


def requeue(study: optuna.Study, number: int, max_retry: int | None) -> None:
    """Enqueue a WAITING copy of a failed trial (its user attributes but ``ATTEMPT_ATTRS``, its
    parameters and retry history), unless it has already been retried ``max_retry`` times (None:
    no bound)."""
    frozen = cache_of(study).get_trial(trial_id_of(study, number))
    system_attrs: dict[str, Any] = {"failed_trial": number, **frozen.system_attrs}
    system_attrs["retry_history"] = [*system_attrs.get("retry_history", []), number]
    if max_retry is not None and max_retry < len(system_attrs["retry_history"]):
        return
    user_attrs = {k: v for k, v in frozen.user_attrs.items() if k not in ATTEMPT_ATTRS}
    study.add_trial(optuna.create_trial(state=TrialState.WAITING, params=frozen.params,
                                        distributions=frozen.distributions, user_attrs=user_attrs,
                                        system_attrs=system_attrs))


def set_params(study: optuna.Study, number: int,
               params: Mapping[str, tuple[Any, optuna.distributions.BaseDistribution]]) -> None:
    """Record ``params`` (name → (value, distribution)) on a running trial as Optuna parameters,
    those it does not have yet (a re-queued copy carries its predecessor's). Raises ValueError
    when a distribution does not match the one the study already has under that name."""
    backend = backend_of(study)  # the cache in front of it knows only the trials this process made
    trial_id = trial_id_of(study, number)
    have = backend.get_trial(trial_id).params
    for name, (value, dist) in params.items():
        if name not in have:
            backend.set_trial_param(trial_id, name, dist.to_internal_repr(value), dist)


def backfill_params(study: optuna.Study, dists: Mapping[str, optuna.distributions.CategoricalDistribution]) -> int:
    """Give every trial of the study that has no parameters at all (recorded before ablate wrote
    them; finished trials cannot take them through Optuna's API) its factor levels, read from its
    ``settings`` attribute, under ``dists``. Returns the trials changed."""
    from optuna.storages._rdb import models
    from sqlalchemy import insert, select

    params = models.TrialParamModel.__table__
    trial_table, attr_table = tables()
    as_json = {name: optuna.distributions.distribution_to_json(d) for name, d in dists.items()}
    with engine_of(study).begin() as conn:
        bare = select(trial_table.c.trial_id).where(
            trial_table.c.study_id == study_id_of(study),
            trial_table.c.trial_id.not_in(select(params.c.trial_id).distinct()))
        rows = conn.execute(select(attr_table.c.trial_id, attr_table.c.value_json)
                            .where(attr_table.c.trial_id.in_(bare), key_is(attr_table.c.key, "settings")))
        out = []
        for trial_id, value_json in rows:
            settings = json.loads(value_json) or {}
            for name, label in settings.items():
                dist = dists.get(name)
                if dist is not None and label in dist.choices:
                    out.append({"trial_id": trial_id, "param_name": name, "param_value": dist.to_internal_repr(label),
                                "distribution_json": as_json[name]})
        for i in range(0, len(out), CHUNK):
            conn.execute(insert(params), out[i : i + CHUNK])
    return len({row["trial_id"] for row in out})


def recode_params(study: optuna.Study, name: str, dist: optuna.distributions.CategoricalDistribution) -> int:
    """Give every recorded parameter ``name`` of the study the categorical distribution ``dist``,
    each value re-encoded from its own recorded distribution (categorical values are stored as
    indices into the choices). ``dist`` must hold every recorded value. Returns the rows changed."""
    from optuna.storages._rdb import models
    from sqlalchemy import select, update

    table = models.TrialParamModel.__table__
    trial_table, _ = tables()
    new_json = optuna.distributions.distribution_to_json(dist)
    changed = 0
    with engine_of(study).begin() as conn:
        rows = conn.execute(select(table.c.param_id, table.c.param_value, table.c.distribution_json)
                            .join(trial_table, trial_table.c.trial_id == table.c.trial_id)
                            .where(trial_table.c.study_id == study_id_of(study), table.c.param_name == name))
        for param_id, value, old_json in list(rows):
            if old_json == new_json:
                continue
            old = optuna.distributions.json_to_distribution(old_json)
            internal = dist.to_internal_repr(old.to_external_repr(value))
            conn.execute(update(table).where(table.c.param_id == param_id)
                         .values(param_value=internal, distribution_json=new_json))
            changed += 1
    return changed


def stale(study: optuna.Study) -> list[int]:
    """Numbers of the RUNNING trials whose heartbeat is older than the grace period."""
    ids = backend_of(study)._get_stale_trial_ids(study_id_of(study))
    return [cache_of(study).get_trial(i).number for i in ids]


# --- reading -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """A trial's number and state, its start and end, and only the user attributes asked for."""

    number: int
    state: TrialState
    user_attrs: dict[str, Any]
    started: datetime.datetime | None = None
    finished: datetime.datetime | None = None


def entries(study: optuna.Study, where: Mapping[str, Any] | None = None, keys: Sequence[str] = (),
            states: Sequence[TrialState] | None = None, finished_after: datetime.datetime | None = None) -> list[Entry]:
    """The study's trials (those matching ``where`` and ``states``, and finished at or after
    ``finished_after`` if given), oldest first, with the user attributes named in ``keys``: what
    counting, state rules and the live view need, without loading every trial's attributes
    (configs included) as ``Study.get_trials`` does."""
    from sqlalchemy import select

    trial_table, attr_table = tables()
    chosen = [trial_table.c.study_id == study_id_of(study)]
    if states is not None:
        chosen.append(trial_table.c.state.in_(list(states)))
    if where:
        chosen.append(trial_table.c.trial_id.in_(_matching(where)))
    if finished_after is not None:
        chosen.append(trial_table.c.datetime_complete >= finished_after)
    found: dict[int, dict[str, Any]] = {}
    with engine_of(study).connect() as conn:
        rows = list(conn.execute(select(trial_table.c.trial_id, trial_table.c.number, trial_table.c.state,
                                        trial_table.c.datetime_start, trial_table.c.datetime_complete)
                                 .where(*chosen).order_by(trial_table.c.trial_id)))
        if keys and rows:
            query = (select(attr_table.c.trial_id, attr_table.c.key, attr_table.c.value_json)
                     .join(trial_table, trial_table.c.trial_id == attr_table.c.trial_id)
                     .where(*chosen, attr_table.c.key.in_(list(keys))))
            for trial_id, key, value in conn.execute(query):
                found.setdefault(trial_id, {})[key] = json.loads(value)
    return [Entry(r.number, r.state, found.get(r.trial_id, {}), r.datetime_start, r.datetime_complete) for r in rows]


def trials(study: optuna.Study, where: Mapping[str, Any] | None = None,
           states: Sequence[TrialState] | None = None) -> list[FrozenTrial]:
    """Whole trials (all attributes), oldest first, of those matching ``where`` and ``states``;
    for a few trials (a cell's, the running ones), where ``Study.get_trials`` would load every
    unfinished one."""
    if where is None:
        if states is None:
            return study.get_trials(deepcopy=False)
        return backend_of(study).get_all_trials(study_id_of(study), deepcopy=False, states=tuple(states))
    from sqlalchemy import select

    trial_table, _ = tables()
    query = select(trial_table.c.trial_id).where(trial_table.c.study_id == study_id_of(study),
                                           trial_table.c.trial_id.in_(_matching(where)))
    if states is not None:
        query = query.where(trial_table.c.state.in_(list(states)))
    with engine_of(study).connect() as conn:
        ids = list(conn.execute(query.order_by(trial_table.c.trial_id)).scalars())
    store = cache_of(study)
    return [store.get_trial(i) for i in ids]


def trial(study: optuna.Study, number: int) -> FrozenTrial:
    """One trial, as stored now."""
    return cache_of(study).get_trial(trial_id_of(study, number))


def count(study: optuna.Study, states: Sequence[TrialState]) -> int:
    """How many of the study's trials are in ``states``."""
    from sqlalchemy import func, select

    trial_table, _ = tables()
    query = select(func.count()).select_from(trial_table).where(trial_table.c.study_id == study_id_of(study),
                                                          trial_table.c.state.in_(list(states)))
    with engine_of(study).connect() as conn:
        return int(conn.execute(query).scalar_one())


# --- across the studies of one storage ---------------------------------------------------------

CHUNK = 500  # values per IN (...) list: well under every database's limit on bound parameters


@dataclass(frozen=True)
class Found:
    """A trial of some study on the storage: the study's name, the trial's number and state,
    and the user attributes that were asked for."""

    study: str
    number: int
    state: TrialState
    user_attrs: dict[str, Any] = field(default_factory=dict)


def _utc(value: datetime.datetime | None) -> datetime.datetime | None:
    """Optuna stores naive UTC datetimes."""
    return value.replace(tzinfo=datetime.timezone.utc) if value is not None else None


def find(storage: optuna.storages.RDBStorage, key: str | None, values: Sequence[Any] = (),
         keys: Sequence[str] | None = (), states: Sequence[TrialState] | None = None) -> list[Found]:
    """Trials of every study on ``storage`` whose user attribute ``key`` is one of ``values``
    (``key`` None: every trial), oldest first, with the user attributes named in ``keys`` (None:
    all of them). Give an indexed ``key``: the lookup starts from its index."""
    from sqlalchemy import select

    trial_table, attr_table = tables()
    study_table, _ = other_tables()
    base = (select(trial_table.c.trial_id, trial_table.c.number, trial_table.c.state, study_table.c.study_name)
            .join(study_table, study_table.c.study_id == trial_table.c.study_id))
    if states is not None:
        base = base.where(trial_table.c.state.in_(list(states)))
    rows: list[Any] = []
    with storage.engine.connect() as conn:
        if key is None:
            rows = list(conn.execute(base))
        else:
            wanted = sorted({json.dumps(v) for v in values})
            for i in range(0, len(wanted), CHUNK):
                ids = select(attr_table.c.trial_id).where(key_is(attr_table.c.key, key),
                                                          attr_table.c.value_json.in_(wanted[i : i + CHUNK]))
                rows += list(conn.execute(base.where(trial_table.c.trial_id.in_(ids))))
        rows.sort(key=lambda r: r.trial_id)
        attrs: dict[int, dict[str, Any]] = {}
        if keys is None or keys:
            all_ids = [r.trial_id for r in rows]
            for i in range(0, len(all_ids), CHUNK):
                query = select(attr_table.c.trial_id, attr_table.c.key, attr_table.c.value_json).where(
                    attr_table.c.trial_id.in_(all_ids[i : i + CHUNK]))
                if keys is not None:
                    query = query.where(attr_table.c.key.in_(list(keys)))
                for trial_id, k, value in conn.execute(query):
                    attrs.setdefault(trial_id, {})[k] = json.loads(value)
    return [Found(r.study_name, r.number, r.state, attrs.get(r.trial_id, {})) for r in rows]


@dataclass(frozen=True)
class Activity:
    """One study on the storage: its trials per state and when it was last active (UTC)."""

    study: str
    states: Counter
    last: datetime.datetime | None


def activity(storage: optuna.storages.RDBStorage) -> list[Activity]:
    """Every study on ``storage`` (by name) with its trials per state and its last activity: the
    latest start, completion or heartbeat of any of its trials."""
    from sqlalchemy import func, select

    trial_table, _ = tables()
    study_table, beat_table = other_tables()
    with storage.engine.connect() as conn:
        names = {r[0]: r[1] for r in conn.execute(select(study_table.c.study_id, study_table.c.study_name))}
        states: dict[int, Counter] = {i: Counter() for i in names}
        for study_id, state, n in conn.execute(select(trial_table.c.study_id, trial_table.c.state, func.count())
                                               .group_by(trial_table.c.study_id, trial_table.c.state)):
            states[study_id][state] += int(n)
        times = {r.study_id: r for r in conn.execute(
            select(trial_table.c.study_id, func.max(trial_table.c.datetime_start).label("started"),
                   func.max(trial_table.c.datetime_complete).label("completed"))
            .group_by(trial_table.c.study_id))}
        beats = {r[0]: r[1] for r in conn.execute(
            select(trial_table.c.study_id, func.max(beat_table.c.heartbeat))
            .join(beat_table, beat_table.c.trial_id == trial_table.c.trial_id).group_by(trial_table.c.study_id))}
    out = []
    for study_id, name in sorted(names.items(), key=lambda kv: kv[1]):
        t = times.get(study_id)
        moments = [m for m in (t.started if t else None, t.completed if t else None, beats.get(study_id)) if m]
        out.append(Activity(name, states[study_id], _utc(max(moments)) if moments else None))
    return out


def add(study: optuna.Study, state: TrialState, attrs: Mapping[str, Any], value: float | None,
        started: datetime.datetime | None, completed: datetime.datetime | None,
        params: Mapping[str, tuple[Any, optuna.distributions.BaseDistribution]] | None = None) -> None:
    """Write a finished trial (COMPLETE with ``value``, or FAIL) carrying ``attrs`` and ``params``
    (name → (value, distribution), as ``set_params``), with the given start and completion times
    (local, as Optuna gives them)."""
    now = datetime.datetime.now()
    params = dict(params or {})
    frozen = FrozenTrial(number=-1, state=state, value=value if state == TrialState.COMPLETE else None,
                         values=None, datetime_start=started or now, datetime_complete=completed or now,
                         params={k: v for k, (v, _) in params.items()},
                         distributions={k: d for k, (_, d) in params.items()}, user_attrs=dict(attrs), system_attrs={},
                         intermediate_values={}, trial_id=-1)
    study.add_trial(frozen)


def set_finished_attrs(study: optuna.Study, numbers: Sequence[int], attrs: Mapping[str, Any]) -> None:
    """Set user attributes on trials whether finished or not (Optuna's API refuses finished ones):
    for marks that leave the result as it is, e.g. ``dropped``. A ``Study`` object that had
    read these trials before keeps its cached copies; open the study again to see the marks."""
    from sqlalchemy import delete, insert

    _, attr_table = tables()
    ids = [trial_id_of(study, n) for n in numbers]
    with engine_of(study).begin() as conn:
        for i in range(0, len(ids), CHUNK):
            chunk = ids[i : i + CHUNK]
            conn.execute(delete(attr_table).where(attr_table.c.trial_id.in_(chunk),
                                                  attr_table.c.key.in_(list(attrs))))
            conn.execute(insert(attr_table), [{"trial_id": t, "key": checked(k), "value_json": json.dumps(v)}
                                              for t in chunk for k, v in attrs.items()])
