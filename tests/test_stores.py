"""ablate.stores: redaction, full disks, the limits the stores impose; and the whole-study check
that no password given in a storage or tracking URL is written anywhere ablate writes."""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

import pytest
from support import ABLATE

from ablate import stores


@pytest.mark.parametrize(("text", "shown"), [
    ("postgresql+psycopg://user:S3cret@db:5432/x", "postgresql+psycopg://user:***@db:5432/x"),
    ("http://alice:S3cret@mlflow:5000", "http://alice:***@mlflow:5000"),
    ("failed: API request to http://alice:S3cret@h/api/2.0/runs", "failed: API request to http://alice:***@h/api/2.0/runs"),
    ("postgresql//user:S3cret@db/x", "postgresql//user:***@db/x"),
    ("sqlite:///x.db?password=S3cret&mode=ro", "sqlite:///x.db?password=***&mode=ro"),
    ("host=db user=u password=S3cret dbname=x", "host=db user=u password=*** dbname=x"),
    ("sqlite:////tmp/a/optuna.db", "sqlite:////tmp/a/optuna.db"),
])
def test_redact_hides_passwords_in_urls_and_messages(text, shown):
    assert stores.redact(text) == shown
    assert "S3cret" not in stores.redact(text)


def test_a_database_error_is_described_by_its_root_cause():
    """Optuna wraps SQLite's "attempt to write a readonly database" in a StorageInternalError that
    guesses at "invalid data ... exceeding max length"."""
    import sqlite3

    import optuna

    try:
        try:
            raise sqlite3.OperationalError("attempt to write a readonly database")
        except sqlite3.OperationalError as inner:
            raise optuna.exceptions.StorageInternalError("invalid data in the commit, e.g. exceeding max "
                                                         "length") from inner
    except optuna.exceptions.StorageInternalError as exc:
        message = stores.storage_problem("sqlite:////tmp/x/optuna.db", exc)
    assert "attempt to write a readonly database" in message and "read-only" in message
    assert "max length" not in message


def test_no_space_names_the_fullest_folder_or_says_nothing(tmp_path):
    full = OSError(errno.ENOSPC, "No space left on device")
    assert stores.no_space(full, [tmp_path]).startswith(f"no space left on {tmp_path} (")
    assert stores.no_space(RuntimeError("database or disk is full"), [tmp_path]) is not None
    assert stores.no_space(ValueError("shape mismatch"), [tmp_path]) is None
    # torch.save only says "file write failed": a disk with room left is not the reason
    for said in ("PytorchStreamWriter failed writing file data/0: file write failed", "basic_ios::clear: iostream "
                 "error", "disk I/O error"):
        assert stores.no_space(RuntimeError(said), [tmp_path]) is None
    chained = RuntimeError("could not save")
    chained.__cause__ = full
    assert stores.no_space(chained, [tmp_path]) is not None


def test_no_space_on_a_real_full_filesystem(tmp_path):
    mount = tmp_path / "small"
    mount.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)]).returncode:
        pytest.skip("mounting a small tmpfs needs root")
    try:
        with pytest.raises(OSError) as info, open(mount / "fill", "wb") as f:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        message = stores.no_space(info.value, [tmp_path, mount / "checkpoints"])
        assert message == f"no space left on {mount / 'checkpoints'} (0 bytes free)"
    finally:
        subprocess.run(["umount", str(mount)])


def test_the_limits_are_the_installed_stores_own():
    from mlflow.store.tracking.dbmodels import models as mlflow_models
    from mlflow.utils import validation
    from optuna.storages._rdb import models as optuna_models

    assert stores.MAX_STUDY_NAME == optuna_models.MAX_INDEXED_STRING_LENGTH
    assert stores.MAX_EXPERIMENT_NAME == mlflow_models.SqlExperiment.__table__.c.name.type.length
    assert stores.MAX_RUN_NAME == mlflow_models.SqlRun.__table__.c.name.type.length
    assert stores.MAX_PARAM_KEY == validation.MAX_ENTITY_KEY_LENGTH
    assert stores.MAX_PARAM_VALUE == validation.MAX_PARAM_VAL_LENGTH
    assert stores.MAX_TAG_VALUE == validation.MAX_TAG_VAL_LENGTH
    assert stores.MAX_EXPERIMENT_NAME <= validation.MAX_EXPERIMENT_NAME_LENGTH


# --- no password written anywhere ----------------------------------------------------------------

PASSWORD = "Pw9zq7Secret"
SPEC = """
name: secrets
task: {name: listops, max_depth: 3, max_length: 30, train_size: 200, val_size: 32, test_size: 32}
model: {d_model: 8, state_dim: 8, layers: 1, heads: 2}
train: {steps: 8, batch_size: 8, eval_every: 4, log_every: 2}
probes: {every: 4, batch: 8}
factors: {model.normalisation: [xi, gamma]}
seeds: 1
"""


def _grep(root: Path) -> list[str]:
    """Files under ``root`` holding the password (in any encoding a store might use)."""
    import base64

    found = []
    needles = (PASSWORD.encode(), PASSWORD.encode("utf-16-le"), base64.b64encode(f"alice:{PASSWORD}".encode()))
    for path in root.rglob("*"):
        if path.is_file() and any(n in path.read_bytes() for n in needles):
            found.append(str(path))
    return found


def test_no_password_given_in_the_urls_is_written_anywhere(tmp_path, postgres_url):
    """A real study with a password in BOTH URLs (a PostgreSQL role with a password; an MLflow
    server reached as user:password@host), two local workers (their command lines), a status, a
    report: every table of both databases, every file under ABLATE_HOME, the artifacts, the
    reports, the worker logs and the processes' command lines are searched for the password."""
    import psycopg
    from conftest import free_port
    from sqlalchemy.engine import make_url

    from ablate.serve import ServerConfig, start, stop, wait_healthy

    admin = make_url(postgres_url).set(drivername="postgresql").render_as_string(hide_password=False)
    db, role = f"ablate_secret_{os.getpid()}", f"ablate_secret_{os.getpid()}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{PASSWORD}'")
        conn.execute(f"CREATE DATABASE {db} OWNER {role}")
    url = make_url(postgres_url)
    storage = f"postgresql+psycopg://{role}:{PASSWORD}@{url.host}:{url.port}/{db}"
    server_root = tmp_path / "server"
    cfg = ServerConfig(backend=f"sqlite:///{server_root / 'mlflow.db'}", artifacts=str(server_root / "artifacts"),
                       port=free_port())
    server_root.mkdir()
    log = open(server_root / "server.log", "w")  # noqa: SIM115
    server = start(cfg, log)
    try:
        wait_healthy(cfg.url, server, timeout=240)
        tracking = cfg.url.replace("http://", f"http://alice:{PASSWORD}@")
        (tmp_path / "spec.yaml").write_text(SPEC)
        env = {**os.environ, "ABLATE_HOME": str(tmp_path / ".ablate"), "ABLATE_CACHE_DIR": str(tmp_path / "cache"),
               "ABLATE_STORAGE": storage, "ABLATE_TRACKING_URI": tracking}

        def ablate(*args: str) -> subprocess.CompletedProcess:
            res = subprocess.run([*ABLATE, *args], cwd=tmp_path, env=env,
                                 capture_output=True, text=True, timeout=900)
            assert res.returncode == 0, res.stdout + res.stderr
            assert PASSWORD not in res.stdout + res.stderr
            return res

        run = subprocess.Popen([*ABLATE, "run", "spec.yaml", "--workers", "2"],
                               cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        command_lines = set()
        while run.poll() is None:  # the run's and its workers' command lines, as `ps` shows them
            for entry in os.listdir("/proc"):
                try:
                    command_lines.add(Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace"))
                except OSError:
                    pass
        out, err = run.communicate()
        assert run.returncode == 0, out + err
        # The workers share the command line of the zygote that forked them (ablate/zygote.py: its
        # spec's file, as the run starts it before reading the spec).
        assert any("ablate.zygote\0" in c and "\0spec.yaml\0" in c for c in command_lines)
        assert not [c for c in command_lines if PASSWORD in c]
        assert PASSWORD not in out + err
        ablate("status", "secrets")
        ablate("report", "secrets", "--out", "reports", "--format", "html")
    finally:
        stop(server)
        log.close()
    # Every table of the Optuna database, dumped.
    with psycopg.connect(admin.rsplit("/", 1)[0] + f"/{db}") as conn:
        tables = [r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")]
        dump = "".join(str(row) for t in tables for row in conn.execute(f'SELECT * FROM "{t}"'))
    assert "secrets" in dump and "cell_label" in dump  # the dump holds the study's rows
    assert PASSWORD not in dump
    # The MLflow server's database and artifacts, ABLATE_HOME (logs, checkpoints), the reports.
    assert _grep(server_root) == []
    assert _grep(tmp_path / ".ablate") == []
    assert _grep(tmp_path / "reports") == []
    assert (tmp_path / "reports" / "accuracy.html").exists()
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
        conn.execute(f"DROP ROLE IF EXISTS {role}")


def test_a_store_where_nothing_can_be_written_is_an_error_naming_it_not_a_wait_or_a_traceback(tmp_path):
    # /proc takes no new files, even from root: FileLock took the lock file it could not create
    # for one held elsewhere and waited for ever; a folder that cannot be made was an internal error.
    with pytest.raises(stores.StorageError, match=r"cannot write beside the store sqlite:////proc/x\.db"):
        with stores.sqlite_lock("sqlite:////proc/x.db"):
            pass
    with pytest.raises(stores.StorageError, match=r"cannot make the folder of the store sqlite:////proc/none/m\.db"):
        stores.resolve(f"sqlite:///{tmp_path / 'optuna.db'}", "sqlite:////proc/none/m.db")
    assert not list(tmp_path.iterdir())  # nothing written


def test_a_tracking_uri_naming_a_file_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    # MLflow takes it for a file store's folder and failed only at the first item, after the study
    # was written and its items queued.
    monkeypatch.delenv("ABLATE_TRACKING_URI", raising=False)
    monkeypatch.delenv("ABLATE_STORAGE", raising=False)
    afile = tmp_path / "notadb"
    afile.write_text("")
    home = tmp_path / "home"
    for uri in (str(afile), afile.as_uri(), f"file:{afile}"):
        with pytest.raises(stores.BadStoreUrl) as info:
            stores.resolve(tracking=uri, home_dir=home)
        assert str(info.value).startswith(f"tracking URI {uri} is a file, not a folder or a database URL; expected")
        assert info.value.code == 2
    assert not home.exists()
    # A folder (existing or not) and a database URL are still a tracking store.
    for uri in (str(tmp_path), str(tmp_path / "new"), f"sqlite:///{afile}"):
        assert stores.resolve(tracking=uri, home_dir=home).tracking == uri


def test_a_password_after_a_long_run_of_letters_is_still_hidden():
    # The scheme's length is bounded (a 100,000-character name took seconds to redact): a longer
    # run before "://" leaves the scheme's end, and the password is hidden all the same.
    assert stores.redact("a" * 100 + "postgresql://u:pw@h/db") == "a" * 100 + "postgresql://u:***@h/db"
    assert stores.redact("x" * 100_000) == "x" * 100_000
