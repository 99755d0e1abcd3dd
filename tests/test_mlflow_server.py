"""``ablate serve`` and the tracking path through a real MLflow server: loopback binding, proxied
artifacts (what the results API reads), closing a killed worker's run, and no passwords shown."""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path
from urllib.parse import urlparse

import pytest
from support import ABLATE

from ablate.serve import ServerConfig, describe
from ablate.stores import Stores


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
