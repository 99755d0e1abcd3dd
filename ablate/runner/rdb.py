"""Optuna's RDB storage, opened for the queue (``ablate.runner.queue``), and the internals under
it: with the queue, the only module that touches Optuna's private names and the SQLAlchemy engine.

- ``connect(url)``: SQLite serialised (BEGIN IMMEDIATE + WAL), PostgreSQL with timeouts, a
  read-only opening that writes nothing, tables and ablate's indexes created by one process at a
  time; Optuna's schema check without alembic for a store the running Optuna stamped;
- ``lock(study, name)``: an exclusive lock between processes (PostgreSQL advisory lock, a lock
  file beside a SQLite database);
- the studies of a storage: ``load``, ``create``, ``names``, ``summaries``, ``delete``,
  ``stored_distribution`` (a parameter distribution from its JSON), and
  Optuna's exceptions under ablate's names (``TrialFinished``, ``StorageInternal``, ``Pruned``):
  the only place besides the queue, the study and runner/samplers.py that calls Optuna;
- the internals the queue's SQL is written against: ``tables`` / ``other_tables`` (Optuna's
  table objects), ``cache_of`` / ``backend_of`` / ``storage_of`` / ``engine_of`` (what is under a
  ``Study``), ``study_id_of`` / ``trial_id_of`` (the storage's ids), ``key_is`` and ``checked``
  (an attribute key as a SQL literal).

What of Optuna this relies on, to re-check on an upgrade, is listed in ``ablate.runner.queue``'s
docstring, with the queue's own.
"""

from __future__ import annotations

import hashlib
import os
import re
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from ablate.stores import StorageError, from_template, sqlite_lock, sqlite_path, storage_problem, user_cache
from ablate.terminal import database_failure

# Seconds between a running trial's heartbeats, and of silence before it counts as killed.
HEARTBEAT_S = int(os.environ.get("ABLATE_HEARTBEAT_S", "10"))
GRACE_S = int(os.environ.get("ABLATE_GRACE_S", "30"))

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
            with _schema_lock(url, engine_kwargs), from_template(sqlite_path(url), store_template()):
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
    store.ablate_url = url  # a read-only store's own URL is a file: URI, not the URL the user gave
    if url.startswith("sqlite") and not read_only:
        _serialise_sqlite(store.engine)
    return store


def store_template() -> Path:
    """An empty SQLite study storage as this Optuna version builds it, kept in the user's cache: a
    fresh store is a copy (milliseconds) rather than Optuna's table creation and Alembic stamping
    (~0.6 s of CPU on the way to a new study's first trial); Optuna builds it, so the schema is
    Optuna's own; the version in the name keeps an upgraded Optuna from reusing an older one."""
    return user_cache() / "stores" / f"optuna-{optuna.__version__}.db"


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

    trial_table, attr_table = tables()
    wanted = {"ablate_trials_queue": f"ON {trial_table.name} (study_id, state, trial_id)"}
    for key in indexed:
        wanted[f"ablate_attr_{checked(key)}"] = f"ON {attr_table.name} (value_json, trial_id) WHERE key = '{key}'"
    with engine.begin() as conn:
        # Only what is missing: creating an index locks its table against writes (PostgreSQL).
        present = {ix["name"] for table in (trial_table, attr_table) for ix in inspect(conn).get_indexes(table.name)}
        for name, definition in wanted.items():
            if name not in present:
                conn.execute(text(f"CREATE INDEX IF NOT EXISTS {name} {definition}"))


def checked(key: str) -> str:
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
    with _db_lock(engine_of(study), name):
        yield


# --- the studies of a storage -------------------------------------------------------------------
# The rest of ablate opens, lists and deletes studies through these (re-exported by
# ``ablate.runner.queue`` and ``ablate.runner.study``), so that an Optuna upgrade that renames or
# re-signatures them is fixed here; tests/test_architecture.py holds other modules to it.

# Optuna's exceptions under ablate's names: what a caller catches or raises.
TrialFinished = optuna.exceptions.UpdateFinishedTrialError  # another process finished the trial first
StorageInternal = optuna.exceptions.StorageInternalError  # the storage failed under Optuna
Pruned = optuna.TrialPruned  # a tuning trial the pruner stopped


@contextmanager
def opening(store: optuna.storages.BaseStorage) -> Iterator[None]:
    """The first reads of a store a command makes: a database that fails under them (Optuna says
    StorageInternalError and guesses at "invalid data in the commit") is a ``StorageError`` saying
    what the database said, as ``connect`` says it."""
    try:
        yield
    except Exception as exc:
        if database_failure(exc) is None:  # not the database under Optuna: ablate's or Optuna's
            raise
        backend = getattr(store, "_backend", store)
        url = getattr(backend, "ablate_url", None) or str(getattr(backend, "url", "the study storage"))
        raise StorageError(storage_problem(url, exc)) from None


def load(store: optuna.storages.BaseStorage, name: str) -> optuna.Study:
    """The study ``name`` in ``store``; raises KeyError when there is none (``study.open_study``
    says which names are close)."""
    with opening(store):
        return optuna.load_study(study_name=name, storage=store)


def create(store: optuna.storages.BaseStorage, name: str, direction: str = "maximize") -> optuna.Study:
    """The study ``name`` in ``store``, created when it does not exist yet."""
    return optuna.create_study(study_name=name, storage=store, load_if_exists=True, direction=direction)


def names(store: optuna.storages.BaseStorage) -> list[str]:
    """The names of the studies in ``store``."""
    with opening(store):
        return list(optuna.get_all_study_names(store))


def summaries(store: optuna.storages.BaseStorage) -> list[optuna.study.StudySummary]:
    """The studies in ``store`` without their trials (name, user attributes, start time)."""
    with opening(store):
        return list(optuna.get_all_study_summaries(store, include_best_trial=False))


def delete(store: optuna.storages.BaseStorage, name: str) -> None:
    """Delete the study ``name`` and all its trials from ``store``."""
    with opening(store):
        optuna.delete_study(study_name=name, storage=store)


def stored_distribution(text: str) -> optuna.distributions.BaseDistribution:
    """A parameter distribution from the JSON Optuna stores it as (``study.PARAM_DISTRIBUTIONS``
    keeps the factors' so)."""
    return optuna.distributions.json_to_distribution(text)


# --- the internals, in one place ---------------------------------------------------------------


def tables() -> tuple[Any, Any]:
    from optuna.storages._rdb import models

    return models.TrialModel.__table__, models.TrialUserAttributeModel.__table__


def system_attr_table() -> Any:
    from optuna.storages._rdb import models

    return models.TrialSystemAttributeModel.__table__


def other_tables() -> tuple[Any, Any]:
    """The studies and heartbeat tables (reads across studies)."""
    from optuna.storages._rdb import models

    return models.StudyModel.__table__, models.TrialHeartbeatModel.__table__


def cache_of(study: optuna.Study) -> Any:
    return study._storage


def backend_of(study: optuna.Study) -> optuna.storages.RDBStorage:
    """The RDB storage under the study's (Optuna wraps it in a cache)."""
    store = study._storage
    return getattr(store, "_backend", store)


def storage_of(study: optuna.Study) -> optuna.storages.RDBStorage:
    """The RDB storage a study lives in (to open the other studies of the same storage)."""
    return backend_of(study)


def engine_of(study: optuna.Study) -> Any:
    return backend_of(study).engine


def study_id_of(study: optuna.Study) -> int:
    return study._study_id


def trial_id_of(study: optuna.Study, number: int) -> int:
    return cache_of(study).get_trial_id_from_study_id_trial_number(study_id_of(study), number)


def key_is(column: Any, key: str) -> Any:
    from sqlalchemy import literal_column

    return column == literal_column(f"'{checked(key)}'")  # a literal: partial indexes match it
