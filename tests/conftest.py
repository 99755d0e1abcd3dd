"""Shared fixtures: a fresh PostgreSQL database per test, one real MLflow tracking server per session.

Both are xdist-safe: databases get unique names, and a session's server listens on a free port.
``scripts/test.sh`` starts PostgreSQL (``$ABLATE_TEST_POSTGRES``) and an MLflow server
(``$ABLATE_TEST_MLFLOW``); without the latter each test session starts its own ``ablate serve``.
The small real studies that the results, statistics and report tests read (``tests/real_studies.py``)
are built once per session, shared by its xdist workers.
"""

from __future__ import annotations

import gc
import os
import shutil
import socket
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest


def pytest_configure(config: pytest.Config) -> None:
    """The user's cache (the tracking-store template, measured timings, passed plug-in checks where
    $ABLATE_CACHE_DIR is unset) stays out of the tests: each session, and each xdist worker, gets
    one of its own; the CLI's subprocesses inherit it. The check cache is on whatever the user's
    shell says, so that a test sees what a user sees."""
    os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="ablate-test-cache-")
    os.environ.pop("ABLATE_NO_CACHE", None)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def postgres_url() -> str:
    """An admin URL of the test PostgreSQL server (skips the test when there is none)."""
    url = os.environ.get("ABLATE_TEST_POSTGRES")
    if not url:
        pytest.skip("ABLATE_TEST_POSTGRES is not set (scripts/test.sh starts a PostgreSQL server and sets it)")
    return url


@pytest.fixture(scope="session")
def slurm_conf() -> str:
    """The slurm.conf of the test SLURM cluster (skips the test when there is none)."""
    conf = os.environ.get("ABLATE_TEST_SLURM")
    if not conf:
        pytest.skip("ABLATE_TEST_SLURM is not set (scripts/test.sh starts a one-node SLURM cluster with "
                    "scripts/slurm.sh where slurm-wlm is installed, and sets it)")
    return conf


def _admin(url: str, sql: str) -> None:
    import psycopg
    from sqlalchemy.engine import make_url

    conninfo = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(conninfo, autocommit=True, connect_timeout=10) as conn:
        conn.execute(sql)


@pytest.fixture
def postgres_db(postgres_url: str) -> Iterator[str]:
    """The URL of a new, empty database, dropped after the test."""
    from sqlalchemy.engine import make_url

    name = f"ablate_test_{uuid.uuid4().hex[:12]}"
    _admin(postgres_url, f'CREATE DATABASE "{name}"')
    yield make_url(postgres_url).set(database=name).render_as_string(hide_password=False)
    _admin(postgres_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The http:// URI of a running MLflow tracking server; use a unique experiment (study) name."""
    from ablate.serve import ServeError, ServerConfig, start, stop, wait_healthy

    given = os.environ.get("ABLATE_TEST_MLFLOW")
    if given:
        try:
            wait_healthy(given, timeout=240)  # scripts/test.sh starts it alongside the tests
        except ServeError as exc:
            log = os.environ.get("ABLATE_TEST_MLFLOW_LOG")
            pytest.fail(f"{exc}\n{open(log).read()[-3000:] if log and os.path.exists(log) else ''}")
        yield given
        return
    root = tmp_path_factory.mktemp("mlflow-server")
    cfg = ServerConfig(backend=f"sqlite:///{root / 'mlflow.db'}", artifacts=str(root / "artifacts"), port=free_port())
    log_path = root / "server.log"
    with open(log_path, "w") as log:
        proc = start(cfg, log)
        try:
            wait_healthy(cfg.url, proc, timeout=240)
        except ServeError as exc:
            stop(proc)
            pytest.fail(f"{exc}\n{log_path.read_text()[-3000:]}")
        yield cfg.url
        stop(proc)


@pytest.fixture(autouse=True)
def _nothing_frozen() -> None:
    """Every test starts with no frozen objects. An in-process worker froze its imports (its
    preload does, for its collector's sake) and that lasted for every later test in the pytest
    process; ablate's Holm (``adjusted``) leaves a process that froze its own heap as it is, so
    statsmodels' ``gc.collect()`` walked everything later tests had left alive on each call (and
    ``gc.get_freeze_count`` counted the frozen heap): a norm-report test that takes 5 s alone took
    91 s there. ``gc.unfreeze`` moves the list back in O(1), whatever its length."""
    gc.unfreeze()


@pytest.fixture
def shm_tmp_path(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs directory where there is one: SQLite's syncs make Optuna several times slower on disk."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        yield tmp_path
        return
    path = Path(tempfile.mkdtemp(prefix="ablate-test-", dir=shm))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def accuracy_study(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Path:
    """The root of the partial accuracy study of ``tests/real_studies.py``, built once per session."""
    import real_studies as studies

    return studies.shared_root(tmp_path_factory, request.config, "accuracy-study", studies.build_accuracy)


@pytest.fixture(scope="session")
def norm_study(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Path:
    """The root of the norm study of ``tests/real_studies.py``, built once per session."""
    import real_studies as studies

    return studies.shared_root(tmp_path_factory, request.config, "norm-study", studies.build_norm)


@pytest.fixture(scope="session")
def studies_root(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Path:
    """The root of the three studies on one store of ``tests/real_studies.py`` (a first grid, a
    follow-up that reuses half, another task), built once per session."""
    import real_studies as studies

    return studies.shared_root(tmp_path_factory, request.config, "three-studies", studies.build_studies)


@pytest.fixture
def own_timings_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No timings another test's ``plan --estimate`` kept (``ablate.runner.timings.timings_file``)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
