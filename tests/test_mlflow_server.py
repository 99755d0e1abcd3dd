"""``ablate serve`` and the tracking path through a real MLflow server: loopback binding, proxied
artifacts (what the results API reads), closing a killed worker's run, and no passwords shown."""

from __future__ import annotations

import os
import socket
import subprocess
import uuid
from pathlib import Path
from urllib.parse import urlparse

import pytest
from support import ABLATE

from ablate.serve import ServerConfig, bind_problem, check, describe
from ablate.stores import Stores
from ablate.terminal import Refused


def listening_hosts(port: int) -> set[str]:
    """The local addresses a TCP port listens on, from /proc/net/tcp{,6} (Linux)."""
    hosts = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(table):
            continue
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                if len(address) == 8:
                    hosts.add(".".join(str(int(address[i:i + 2], 16)) for i in (6, 4, 2, 0)))
                else:
                    hosts.add("::" if set(address) == {"0"} else address)
    return hosts


@pytest.mark.skipif(not os.path.exists("/proc/net/tcp"), reason="reads /proc/net/tcp (Linux)")
def test_server_listens_on_loopback_only(mlflow_server):
    port = urlparse(mlflow_server).port
    assert listening_hosts(port) == {"127.0.0.1"}


def test_artifacts_and_runs_go_through_the_server(mlflow_server):
    from mlflow.tracking import MlflowClient

    from ablate.runner import tracking

    study = f"srv-{uuid.uuid4().hex[:8]}"
    stores = Stores(storage="sqlite:///unused.db", tracking=mlflow_server, artifacts=None)
    run = tracking.TrialRun(stores, study, None, "cell · seed 0", {"model": {"d": 4}},
                            {"ablate.trial_number": "7"})
    run.log_metrics(1, {"train/loss": 2.0})
    run.log_curves([{"step": 1, "layer": 0, "head": 0, "t": t, "value": float(t), "kind": "probe"}
                    for t in range(5)])
    run.finish("FINISHED", {"test_accuracy": 0.5})

    exp = MlflowClient(mlflow_server).get_experiment_by_name(study)
    assert exp.artifact_location.startswith("mlflow-artifacts:"), "the server decides where artifacts go"
    curves = tracking.read_parquet_artifact(mlflow_server, run.run_id, tracking.CURVES_ARTIFACT)
    assert curves["value"].to_list() == [0.0, 1.0, 2.0, 3.0, 4.0]
    metrics = tracking.read_parquet_artifact(mlflow_server, run.run_id, tracking.METRICS_ARTIFACT)
    assert "train/loss" in metrics["name"].to_list()

    # A worker killed mid-trial leaves a RUNNING run that its trial number finds and closes.
    orphan = tracking.TrialRun(stores, study, None, "cell · seed 1", {}, {"ablate.trial_number": "8"})
    assert tracking.open_runs(mlflow_server, study, 8) == [orphan.run_id]
    assert tracking.open_runs(mlflow_server, study, 7) == []
    tracking.terminate(mlflow_server, orphan.run_id, "KILLED", "worker stopped sending heartbeats")
    assert MlflowClient(mlflow_server).get_run(orphan.run_id).info.status == "KILLED"


def test_serve_refuses_a_busy_port_clearly(mlflow_server, tmp_path):
    port = urlparse(mlflow_server).port
    res = subprocess.run([*ABLATE, "serve", "--port", str(port)], capture_output=True,
                         text=True, cwd=tmp_path, env={**os.environ, "ABLATE_HOME": str(tmp_path)}, timeout=60)
    assert res.returncode == 1
    assert f"port {port} on 127.0.0.1 is in use" in res.stderr and "Traceback" not in res.stderr


def test_server_config_keeps_the_backend_password_out_of_sight():
    cfg = ServerConfig(backend="postgresql+psycopg://mlflow:hunter2@db.internal:5432/mlflow", artifacts="/srv/art")
    assert not any("hunter2" in arg for arg in cfg.command()), "argv is visible to every user in ps"
    assert cfg.environment()["MLFLOW_BACKEND_STORE_URI"] == cfg.backend
    assert cfg.environment()["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] in ("false", os.environ.get(
        "MLFLOW_SERVER_ENABLE_JOB_EXECUTION"))
    assert cfg.command()[cfg.command().index("--host") + 1] == "127.0.0.1"
    text = "\n".join(describe(cfg))
    assert "hunter2" not in text and "mlflow:***@db.internal:5432" in text and "warning" not in text
    exposed = ServerConfig(backend="sqlite:///x.db", artifacts="/srv/art", host="0.0.0.0", port=5050)
    assert exposed.url == "http://127.0.0.1:5050"
    assert "without authentication" in "\n".join(describe(exposed))


def _config(tmp_path: Path, **overrides: object) -> ServerConfig:
    values = {"backend": f"sqlite:///{tmp_path / 'mlflow.db'}", "artifacts": str(tmp_path / "artifacts"), **overrides}
    return ServerConfig(**values)  # type: ignore[arg-type]


@pytest.mark.parametrize(("overrides", "said"), [
    ({"port": 99999}, "--port 99999: give a port from 1 to 65535"),
    ({"port": -1}, "--port -1: give a port from 1 to 65535"),
    ({"port": 0}, "--port 0: give a port from 1 to 65535"),  # the URL shown to workers needs the port
    ({"workers": 0}, "--workers 0: give at least 1 server worker process"),
    ({"workers": -3}, "--workers -3: give at least 1 server worker process"),
    ({"artifacts": "/dev/null"}, "--artifacts-destination /dev/null: /dev/null is not a folder; give a folder"),
    ({"backend": "bogus://"}, "--backend-store-uri bogus://: 'bogus' is not a database MLflow keeps runs in; "
                              "give sqlite:///PATH or postgresql+psycopg://"),
    ({"backend": "a-path"}, "--backend-store-uri a-path: not a database URL; give sqlite:///PATH or postgresql"),
    ({"backend": "sqlite://"}, "--backend-store-uri sqlite://: an SQLite backend is a file"),
    ({"backend": "postgresql+nodriver://u:hunter2@h/db"},
     "--backend-store-uri postgresql+nodriver://u:***@h/db: unknown database driver 'postgresql+nodriver'"),
])
def test_serve_refuses_invalid_input_before_anything_starts(tmp_path, overrides, said):
    with pytest.raises(Refused) as refused:
        check(_config(tmp_path, **overrides))
    assert refused.value.code == 2 and len(refused.value.lines) == 1 and refused.value.lines[0].startswith(said)
    assert list(tmp_path.iterdir()) == [], "nothing created for a refused configuration"


def test_serve_refuses_folders_it_cannot_use(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(Refused, match=f"--artifacts-destination {tmp_path}/file/art: {tmp_path}/file is not a folder"):
        check(_config(tmp_path, artifacts=str(tmp_path / "file" / "art")))
    with pytest.raises(Refused, match=f"--backend-store-uri sqlite:///{tmp_path}: {tmp_path} is a folder; give "):
        check(_config(tmp_path, backend=f"sqlite:///{tmp_path}"))
    with pytest.raises(Refused, match=f"x.db: cannot create the database there: {tmp_path}/file is not a folder$"):
        check(_config(tmp_path, backend=f"sqlite:///{tmp_path / 'file' / 'x.db'}"))
    check(_config(tmp_path))  # folders that do not exist yet are created when the server starts


def test_serve_says_why_it_cannot_bind_the_host():
    with pytest.raises(Refused, match=r"^--host nosuch\.invalid: cannot be resolved \(.+\); give an address of "):
        bind_problem("nosuch.invalid", 5000)
    with pytest.raises(Refused, match=r"^--host 192\.0\.2\.1: 192\.0\.2\.1 is not an address of this machine"):
        bind_problem("192.0.2.1", 5000)  # TEST-NET-1: no machine's own address
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert bind_problem("127.0.0.1", port) == f"port {port} on 127.0.0.1 is in use (another server?); " \
                                                  "choose one with --port"
    assert bind_problem("127.0.0.1", port) is None


@pytest.mark.parametrize(("args", "said"), [
    (["--port", "99999"], "error --port 99999: give a port from 1 to 65535"),
    (["--workers", "0"], "error --workers 0: give at least 1 server worker process"),
    (["--backend-store-uri", "bogus://"], "error --backend-store-uri bogus://: 'bogus' is not a database"),
    (["--host", "nosuch.invalid"], "error --host nosuch.invalid: cannot be resolved"),
])
def test_cli_serve_refuses_invalid_input_in_one_line(tmp_path, args, said):
    res = subprocess.run([*ABLATE, "serve", *args], capture_output=True, text=True, cwd=tmp_path,
                         env={**os.environ, "ABLATE_HOME": str(tmp_path / "home")}, timeout=60)
    assert res.returncode == 2, res.stderr
    assert res.stderr.startswith(said) and res.stderr.count("\n") == 1 and res.stdout == ""
    assert not (tmp_path / "home" / "server").exists()
