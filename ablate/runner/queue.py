"""An Optuna study's RDB storage used as a work queue: the one module that touches Optuna's
storage internals (private names, the SQLAlchemy engine under the storage, raw SQL).

Every other module of the runner goes through the functions here or Optuna's public API
(``Study``, ``Trial.set_user_attr``, ``Study.tell``, ``Study.user_attrs``). A queue item is a
trial: enqueued WAITING with its attributes, claimed by an atomic WAITING → RUNNING flip (the
flip fails for every process but one), kept alive by heartbeats, finished COMPLETE or FAIL
with attributes, re-queued as a fresh WAITING copy within a retry bound. Trials are named by
their ``number`` (public); the storage's trial ids stay in here.

- ``connect(url)``: SQLite serialised (BEGIN IMMEDIATE + WAL), PostgreSQL with timeouts,
  tables and ablate's indexes created by one process at a time;
- ``lock(study, name)``: an exclusive lock between processes (PostgreSQL advisory lock, a lock
  file beside a SQLite database);
- ``enqueue``, ``claim`` (oldest claimable first, optionally through a ``Gate``), ``beat``,
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
  alembic for a store stamped by the running Optuna version (``_stamped_by_this_optuna``).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import re
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import optuna
from optuna.trial import FrozenTrial, TrialState

from ablate import faults
from ablate.stores import StorageError as StorageError  # re-exported: where it was defined before
from ablate.stores import sqlite_lock, sqlite_path, storage_problem

# Seconds between a running trial's heartbeats, and of silence before it counts as killed.
HEARTBEAT_S = int(os.environ.get("ABLATE_HEARTBEAT_S", "10"))
GRACE_S = int(os.environ.get("ABLATE_GRACE_S", "30"))
# Oldest WAITING ids a claim reads at once; pages grow when a gate holds candidates back.
PAGE = 16
MAX_PAGE = 1024

warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)

StaleCallback = Callable[[optuna.Study, FrozenTrial], None]


def quiet_optuna() -> None:
    """Optuna's INFO lines (a study created, each trial finished) are noise beside ablate's own
    output: warnings only, from where ablate creates studies or a worker starts — not at import,
    which would change the logging of any program that merely imports ablate."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)


def _stamped_by_this_optuna(engine: Any) -> bool:
    """Whether the store's schema was created or upgraded by the running Optuna: then it is at
    Optuna's head revision, which Optuna otherwise finds by importing alembic and parsing every
    migration script (~0.4 s of CPU, on each opening of every command)."""
    from optuna.storages._rdb.models import SCHEMA_VERSION
    from sqlalchemy import exc, text

    try:
        with engine.connect() as conn:
            info = conn.execute(text("SELECT schema_version, library_version FROM version_info")).first()
            revision = conn.execute(text("SELECT version_num FROM alembic_version")).first()
    except exc.SQLAlchemyError:  # tables not there yet: Optuna's own path creates and stamps them
        return False
    return revision is not None and info is not None and tuple(info) == (SCHEMA_VERSION, optuna.__version__)


def _install_version_check() -> None:
    """Optuna's schema versioning, alembic left out for a store this Optuna version stamped
    (``optuna storage upgrade`` stamps its version too); any other store takes Optuna's path."""
    from optuna.storages._rdb import storage as rdb

    base = rdb._VersionManager
    if getattr(base, "ablate_stamped", False):
        return

    class StampedVersions(base):  # type: ignore[misc, valid-type]
        ablate_stamped = True

        def _init_alembic(self) -> None:
            if not _stamped_by_this_optuna(self.engine):
                super()._init_alembic()

        def check_table_schema_compatibility(self) -> None:
            if not _stamped_by_this_optuna(self.engine):
                super().check_table_schema_compatibility()

    rdb._VersionManager = StampedVersions


_install_version_check()


# --- opening -----------------------------------------------------------------------------------


def connect(url: str, indexed: Sequence[str] = (), on_stale: StaleCallback | None = None,
            read_only: bool = False) -> optuna.storages.RDBStorage:
    """Optuna's RDB storage at ``url``, with heartbeats, ready for several processes at once.

    ``indexed`` names user attributes that ``where`` lookups start from: each gets a partial
    index over its values. ``on_stale`` is Optuna's stale-trial callback (used by
    ``optuna.storages.fail_stale_trials``). ``read_only`` opens an existing store for reading
    only (status, results, reports), writing nothing, not even a lock file: it works on a
    read-only filesystem. Raises StorageError, its message without the password."""
    engine_kwargs: dict[str, Any] = {}
    engine_url = url
    if url.startswith("sqlite"):
        from sqlalchemy.pool import NullPool

        # Several local worker processes share one file: wait for the lock instead of failing.
        engine_kwargs["connect_args"] = {"timeout": 60}
        # No connection outlives an operation: SQLite maps the WAL index (-shm) into memory, and a
        # mapping still open when the file or its filesystem turns read-only kills the process with
        # SIGBUS at its next write; a fresh connection finds the file read-only and gets an error.
        engine_kwargs["poolclass"] = NullPool
        if read_only:
            engine_url = _read_only_sqlite(url)
    else:
        engine_kwargs["pool_pre_ping"] = True
        if url.startswith("postgresql"):  # an unreachable host fails in seconds, not minutes
            engine_kwargs["connect_args"] = {"connect_timeout": 10}
            if read_only:
                engine_kwargs["connect_args"]["options"] = "-c default_transaction_read_only=on"
    try:
        if read_only:
            store = optuna.storages.RDBStorage(engine_url, engine_kwargs=engine_kwargs, skip_table_creation=True)
        else:
            with _schema_lock(url, engine_kwargs):
                store = optuna.storages.RDBStorage(
                    url,
                    engine_kwargs=engine_kwargs,
                    heartbeat_interval=HEARTBEAT_S,
                    grace_period=GRACE_S,
                    heartbeat_stale_trial_callback=on_stale,
                )
                _create_indexes(store.engine, indexed)
    except Exception as exc:  # sqlalchemy/driver errors carry the URL; never echo the password
        raise StorageError(storage_problem(url, exc)) from None
    if url.startswith("sqlite") and not read_only:
        _serialise_sqlite(store.engine)
    return store


def _read_only_sqlite(url: str) -> str:
    """A URL that opens a SQLite file for reading only. Where the folder is read-only too, SQLite
    cannot create the WAL index it reads through: then the file is opened as immutable, which is
    right only when no write-ahead log is left beside it (a log is read through ``mode=ro``)."""
    from urllib.parse import quote

    path = sqlite_path(url)
    if path is None:
        return url
    if not path.is_file():
        raise StorageError(f"no study storage at {path}")
    options = "mode=ro"
    if not os.access(path.parent, os.W_OK) and not Path(f"{path}-wal").exists():
        options += "&immutable=1"
    return f"sqlite:///file:{quote(str(path.resolve()))}?{options}&uri=true"


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


_KEY = re.compile(r"[a-z_][a-z0-9_]*")


def _create_indexes(engine: Any, indexed: Sequence[str]) -> None:
    """ablate's own indexes on Optuna's tables (SQLite and PostgreSQL; other databases go without).

    Optuna indexes trials by study only, so finding the oldest WAITING trial walks every trial
    before it, and trial attributes by trial only. Partial indexes (``WHERE key = '...'``)
    keep the large ``config`` values out; queries name the key as a literal so the planner can
    use them. Adding indexes leaves the stores readable by any Optuna and optuna-dashboard."""
    if engine.url.get_backend_name() not in ("sqlite", "postgresql"):
        return
    from sqlalchemy import inspect, text

    trial_table, attr_table = _tables()
    wanted = {"ablate_trials_queue": f"ON {trial_table.name} (study_id, state, trial_id)"}
    for key in indexed:
        wanted[f"ablate_attr_{_checked(key)}"] = f"ON {attr_table.name} (value_json, trial_id) WHERE key = '{key}'"
    with engine.begin() as conn:
        # Only what is missing: creating an index locks its table against writes (PostgreSQL).
        present = {ix["name"] for table in (trial_table, attr_table) for ix in inspect(conn).get_indexes(table.name)}
        for name, definition in wanted.items():
            if name not in present:
                conn.execute(text(f"CREATE INDEX IF NOT EXISTS {name} {definition}"))


def _checked(key: str) -> str:
    """An attribute key that may be written into SQL as a literal (ours, never user input)."""
    if not _KEY.fullmatch(key):
        raise ValueError(f"attribute key {key!r} is not a lower-case identifier")
    return key


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


@contextmanager
def lock(study: optuna.Study, name: str) -> Iterator[None]:
    """Hold an exclusive lock named ``name`` between all processes on the study's storage."""
    with _db_lock(_engine(study), name):
        yield


# --- the internals, in one place ---------------------------------------------------------------


def _tables() -> tuple[Any, Any]:
    from optuna.storages._rdb import models

    return models.TrialModel.__table__, models.TrialUserAttributeModel.__table__


def _other_tables() -> tuple[Any, Any]:
    """The studies and heartbeat tables (reads across studies)."""
    from optuna.storages._rdb import models

    return models.StudyModel.__table__, models.TrialHeartbeatModel.__table__


def _store(study: optuna.Study) -> Any:
    return study._storage


def _backend(study: optuna.Study) -> optuna.storages.RDBStorage:
    """The RDB storage under the study's (Optuna wraps it in a cache)."""
    store = study._storage
    return getattr(store, "_backend", store)


def storage_of(study: optuna.Study) -> optuna.storages.RDBStorage:
    """The RDB storage a study lives in (to open the other studies of the same storage)."""
    return _backend(study)


def _engine(study: optuna.Study) -> Any:
    return _backend(study).engine


def _study_id(study: optuna.Study) -> int:
    return study._study_id


def _trial_id(study: optuna.Study, number: int) -> int:
    return _store(study).get_trial_id_from_study_id_trial_number(_study_id(study), number)


def _key_is(column: Any, key: str) -> Any:
    from sqlalchemy import literal_column

    return column == literal_column(f"'{_checked(key)}'")  # a literal: partial indexes match it


def _matching(where: Mapping[str, Any]) -> Any:
    """The ids of trials whose user attributes equal ``where`` (key → value), as a subquery
    driven by its first key (give an indexed one)."""
    from sqlalchemy import exists, select

    _, attr_table = _tables()
    first, *rest = where
    a = attr_table.alias("a")
    query = select(a.c.trial_id).where(_key_is(a.c.key, first), a.c.value_json == json.dumps(where[first]))
    for key in rest:
        b = attr_table.alias(f"b_{key}")
        query = query.where(exists().where(b.c.trial_id == a.c.trial_id, _key_is(b.c.key, key),
                                           b.c.value_json == json.dumps(where[key])))
    return query


def _attrs_of(conn: Any, ids: Sequence[int], keys: Sequence[str]) -> dict[int, dict[str, Any]]:
    from sqlalchemy import select

    _, attr_table = _tables()
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


class Gate(Protocol):
    """Which WAITING trials a claim may take.

    ``keys``: the user attributes ``hold`` reads from a candidate. ``hold(attrs)`` returns None
    when the candidate may be claimed, or the attribute values (key → value, the first key
    indexed) of the whole group of trials that must wait with it: the claim skips that group
    from then on. The candidate's own attributes must match the group it returns."""

    keys: tuple[str, ...]

    def hold(self, attrs: Mapping[str, Any]) -> Mapping[str, Any] | None: ...


def claim(study: optuna.Study, gate: Gate | None = None) -> optuna.Trial | None:
    """Atomically take the oldest WAITING trial the gate lets through (RUNNING from now on), or
    None when there is none. Concurrent claims never take the same trial."""
    from sqlalchemy import select

    trial_table, _ = _tables()
    store = _store(study)
    holds: list[Mapping[str, Any]] = []
    after, page = -1, PAGE
    while True:
        query = select(trial_table.c.trial_id).where(trial_table.c.study_id == _study_id(study),
                                                     trial_table.c.state == TrialState.WAITING,
                                                     trial_table.c.trial_id > after)
        for held in holds:
            query = query.where(trial_table.c.trial_id.not_in(_matching(held)))
        # A short read of its own: the gate and the flip open connections, and on SQLite every
        # transaction holds the write lock.
        with _engine(study).connect() as conn:
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
            except optuna.exceptions.UpdateFinishedTrialError:  # claimed and finished since the read
                continue
            if taken:
                faults.inject("flip")
                return optuna.Trial(study, trial_id)
        page = min(MAX_PAGE, page * 4)


def beat(study: optuna.Study, number: int, attrs: Mapping[str, Any] | None = None) -> bool:
    """Record a heartbeat of a RUNNING trial (and set ``attrs`` on it); False, recording nothing,
    when the trial is no longer RUNNING (another process declared its worker dead)."""
    from sqlalchemy import select

    trial_table, _ = _tables()
    trial_id = _trial_id(study, number)
    with _engine(study).connect() as conn:
        state = conn.execute(select(trial_table.c.state).where(trial_table.c.trial_id == trial_id)).scalar_one()
    if state != TrialState.RUNNING:
        return False
    store = _store(study)
    store.record_heartbeat(trial_id)
    for key, value in (attrs or {}).items():
        store.set_trial_user_attr(trial_id, key, value)
    return True


def finish(study: optuna.Study, trial: optuna.Trial, state: TrialState, attrs: Mapping[str, Any],
           value: float | None = None) -> None:
    """Set ``attrs`` on this process's RUNNING trial, then finish it COMPLETE (with ``value``)
    or FAIL. Raises optuna.exceptions.UpdateFinishedTrialError when another process finished
    it first (declared its worker dead)."""
    if attrs:
        set_running_attrs(study, trial, attrs)
    if state == TrialState.COMPLETE:
        study.tell(trial, value)
    else:
        study.tell(trial, state=state)


def set_running_attrs(study: optuna.Study, trial: optuna.Trial, attrs: Mapping[str, Any]) -> None:
    """``trial.set_user_attr`` for each of ``attrs``, in one transaction rather than one each
    (a trial's record sets a dozen: each its own write lock and, on SQLite, its own connection),
    the trial object's own copy updated as ``set_user_attr`` updates it. Raises
    optuna.exceptions.UpdateFinishedTrialError, writing nothing, when the trial has finished
    (as Optuna's does): checked under the row lock (SQLite: the write lock)."""
    _set_attrs_if_unfinished(study, trial._trial_id, trial.number, attrs)
    trial._cached_frozen_trial.user_attrs.update(attrs)


def _set_attrs_if_unfinished(study: optuna.Study, trial_id: int, number: int, attrs: Mapping[str, Any]) -> None:
    from sqlalchemy import delete, insert, select

    if not attrs:
        return
    trial_table, attr_table = _tables()
    with _engine(study).begin() as conn:
        query = select(trial_table.c.state).where(trial_table.c.trial_id == trial_id)
        if conn.dialect.name != "sqlite":  # SQLite's BEGIN IMMEDIATE already holds the write lock
            query = query.with_for_update()
        state = conn.execute(query).scalar()
        if state not in ("RUNNING", "WAITING", TrialState.RUNNING, TrialState.WAITING):  # Optuna's rule: not finished
            raise optuna.exceptions.UpdateFinishedTrialError(
                f"trial {number} is {state}: its attributes cannot change")
        conn.execute(delete(attr_table).where(attr_table.c.trial_id == trial_id, attr_table.c.key.in_(list(attrs))))
        conn.execute(insert(attr_table), [{"trial_id": trial_id, "key": k, "value_json": json.dumps(v)}
                                          for k, v in attrs.items()])


def fail_running(study: optuna.Study, number: int, attrs: Mapping[str, Any]) -> bool:
    """Fail an unfinished trial of some other process (RUNNING, or a WAITING orphan that is
    dropped), its ``attrs`` set (in one transaction) while it is still unfinished (a finished
    trial's attributes are frozen); False when another process got there first or the trial has
    just finished. The row-locked FAIL flip picks the one process that wins."""
    trial_id = _trial_id(study, number)
    try:
        _set_attrs_if_unfinished(study, trial_id, number, attrs)
        return bool(_store(study).set_trial_state_values(trial_id, state=TrialState.FAIL))
    except optuna.exceptions.UpdateFinishedTrialError:
        return False


def requeue(study: optuna.Study, number: int, max_retry: int | None) -> None:
    """Enqueue a WAITING copy of a failed trial (its user attributes, parameters and retry
    history), unless it has already been retried ``max_retry`` times (None: no bound)."""
    frozen = _store(study).get_trial(_trial_id(study, number))
    system_attrs: dict[str, Any] = {"failed_trial": number, **frozen.system_attrs}
    system_attrs["retry_history"] = [*system_attrs.get("retry_history", []), number]
    if max_retry is not None and max_retry < len(system_attrs["retry_history"]):
        return
    study.add_trial(optuna.create_trial(state=TrialState.WAITING, params=frozen.params,
                                        distributions=frozen.distributions, user_attrs=frozen.user_attrs,
                                        system_attrs=system_attrs))


def set_params(study: optuna.Study, number: int,
               params: Mapping[str, tuple[Any, optuna.distributions.BaseDistribution]]) -> None:
    """Record ``params`` (name → (value, distribution)) on a running trial as Optuna parameters,
    those it does not have yet (a re-queued copy carries its predecessor's). Raises ValueError
    when a distribution does not match the one the study already has under that name."""
    backend = _backend(study)  # the cache in front of it knows only the trials this process made
    trial_id = _trial_id(study, number)
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
    trial_table, attr_table = _tables()
    as_json = {name: optuna.distributions.distribution_to_json(d) for name, d in dists.items()}
    with _engine(study).begin() as conn:
        bare = select(trial_table.c.trial_id).where(
            trial_table.c.study_id == _study_id(study),
            trial_table.c.trial_id.not_in(select(params.c.trial_id).distinct()))
        rows = conn.execute(select(attr_table.c.trial_id, attr_table.c.value_json)
                            .where(attr_table.c.trial_id.in_(bare), _key_is(attr_table.c.key, "settings")))
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
    trial_table, _ = _tables()
    new_json = optuna.distributions.distribution_to_json(dist)
    changed = 0
    with _engine(study).begin() as conn:
        rows = conn.execute(select(table.c.param_id, table.c.param_value, table.c.distribution_json)
                            .join(trial_table, trial_table.c.trial_id == table.c.trial_id)
                            .where(trial_table.c.study_id == _study_id(study), table.c.param_name == name))
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
    ids = _backend(study)._get_stale_trial_ids(_study_id(study))
    return [_store(study).get_trial(i).number for i in ids]


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

    trial_table, attr_table = _tables()
    chosen = [trial_table.c.study_id == _study_id(study)]
    if states is not None:
        chosen.append(trial_table.c.state.in_(list(states)))
    if where:
        chosen.append(trial_table.c.trial_id.in_(_matching(where)))
    if finished_after is not None:
        chosen.append(trial_table.c.datetime_complete >= finished_after)
    found: dict[int, dict[str, Any]] = {}
    with _engine(study).connect() as conn:
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
        return _backend(study).get_all_trials(_study_id(study), deepcopy=False, states=tuple(states))
    from sqlalchemy import select

    trial_table, _ = _tables()
    query = select(trial_table.c.trial_id).where(trial_table.c.study_id == _study_id(study),
                                           trial_table.c.trial_id.in_(_matching(where)))
    if states is not None:
        query = query.where(trial_table.c.state.in_(list(states)))
    with _engine(study).connect() as conn:
        ids = list(conn.execute(query.order_by(trial_table.c.trial_id)).scalars())
    store = _store(study)
    return [store.get_trial(i) for i in ids]


def trial(study: optuna.Study, number: int) -> FrozenTrial:
    """One trial, as stored now."""
    return _store(study).get_trial(_trial_id(study, number))


def count(study: optuna.Study, states: Sequence[TrialState]) -> int:
    """How many of the study's trials are in ``states``."""
    from sqlalchemy import func, select

    trial_table, _ = _tables()
    query = select(func.count()).select_from(trial_table).where(trial_table.c.study_id == _study_id(study),
                                                          trial_table.c.state.in_(list(states)))
    with _engine(study).connect() as conn:
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

    trial_table, attr_table = _tables()
    study_table, _ = _other_tables()
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
                ids = select(attr_table.c.trial_id).where(_key_is(attr_table.c.key, key),
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

    trial_table, _ = _tables()
    study_table, beat_table = _other_tables()
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

    _, attr_table = _tables()
    ids = [_trial_id(study, n) for n in numbers]
    with _engine(study).begin() as conn:
        for i in range(0, len(ids), CHUNK):
            chunk = ids[i : i + CHUNK]
            conn.execute(delete(attr_table).where(attr_table.c.trial_id.in_(chunk),
                                                  attr_table.c.key.in_(list(attrs))))
            conn.execute(insert(attr_table), [{"trial_id": t, "key": _checked(k), "value_json": json.dumps(v)}
                                              for t in chunk for k, v in attrs.items()])
