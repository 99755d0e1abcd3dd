"""Many workers on one PostgreSQL-backed study with a real MLflow tracking server.

Each test gets its own database; the workers are real ``ablate worker`` processes. Heartbeats
run at 1 s with a 10 s grace period (``ABLATE_HEARTBEAT_S`` / ``ABLATE_GRACE_S``) so that killed
workers' items come back quickly.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
import yaml
from support import ABLATE

SECRET = "pw-s3cr3t-Zq9"  # the test server trusts every connection, so any password "works"
SEEDS = 8
SPEC = {
    "task": {"name": "listops", "max_depth": 3, "max_args": 4, "min_length": 5, "max_length": 40,
             "train_size": 200, "val_size": 64, "test_size": 64, "seed": 0},
    "model": {"d_model": 16, "state_dim": 8, "layers": 1, "heads": 2},
    "train": {"steps": 4, "batch_size": 16, "eval_every": 4, "log_every": 2},
    "probes": {"every": 4, "batch": 8},
    "factors": {"model.normalisation": ["xi", "gamma", "none"]},
    "seeds": SEEDS,
}
ITEMS = 3 * SEEDS


def with_password(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).set(password=SECRET).render_as_string(hide_password=False)


def env_for(root: Path) -> dict[str, str]:
    return {
        **os.environ,
        "ABLATE_HOME": str(root / ".ablate"),
        "ABLATE_CACHE_DIR": str(root.parent / "task-cache"),
        "ABLATE_HEARTBEAT_S": "1",
        "ABLATE_GRACE_S": "10",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "PYTHONWARNINGS": "ignore",
        "COLUMNS": "200",  # rich tables: no wrapped cell labels
    }


def ablate(root: Path, *args: str, check: bool = True, timeout: float = 300,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    res = subprocess.run([*ABLATE, *args], capture_output=True, text=True, cwd=root,
                         env={**env_for(root), **(env or {})}, timeout=timeout)
    if check:
        assert res.returncode == 0, f"{args}: {res.stdout}\n{res.stderr}"
    return res


def enqueue(root: Path, name: str, storage: str, tracking: str) -> subprocess.CompletedProcess:
    """Queue a study's items for workers elsewhere, running none here (``ablate run --workers 0``)."""
    (root / "spec.yaml").write_text(yaml.safe_dump({"name": name, **SPEC}))
    res = ablate(root, "run", "spec.yaml", "--workers", "0", "--storage", storage, "--tracking-uri", tracking)
    assert f"({ITEMS} newly queued)" in res.stdout
    return res


def start_workers(root: Path, name: str, storage: str, tracking: str, n: int, first: int = 0,
                  **extra_env: str) -> list[subprocess.Popen]:
    """``n`` workers, their logs numbered from ``first``; ``extra_env`` adds to their environment."""
    (root / "logs").mkdir(exist_ok=True)
    procs = []
    for i in range(first, first + n):
        with open(root / "logs" / f"worker{i}.log", "w") as log:  # the child keeps its own handle
            procs.append(subprocess.Popen(
                # One item at a time: six workers share the items, so a kill hits items in flight
                # (a fused worker's kill: test_runner_worker_fused.py).
                [*ABLATE, "worker", name, "--storage", storage, "--tracking-uri", tracking, "--fuse", "1",
                 "--verbose"],  # each item's start and end in its log, for a failure's message
                cwd=root, env={**env_for(root), **extra_env}, stdout=log, stderr=subprocess.STDOUT))
    return procs


def wait_all(procs: list[subprocess.Popen], root: Path, storage: str, timeout: float = 600) -> list[int]:
    """Exit codes, in order; a generous bound (2-core CI machines are often shared)."""
    deadline = time.monotonic() + timeout
    while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
        time.sleep(0.5)
    if any(p.poll() is None for p in procs):
        queue = queue_state(storage)  # before the kill: what the waiting workers were waiting for
        for p in procs:
            p.kill()
        pytest.fail(f"workers {[p.returncode for p in procs]} did not finish within {timeout:.0f} s\n"
                    f"{queue}\n{worker_logs(root)[-4000:]}")
    return [p.returncode for p in procs]


def queue_state(storage: str) -> str:
    """Each unfinished trial of the test's database: number, state, item, heartbeat age."""
    from sqlalchemy import create_engine, text

    engine = create_engine(storage)
    try:
        with engine.connect() as conn:
            rows = conn.execute(text(
                "SELECT t.number, t.state, a.value_json, now() - h.heartbeat FROM trials t "
                "LEFT JOIN trial_heartbeats h ON h.trial_id = t.trial_id "
                "LEFT JOIN trial_user_attributes a ON a.trial_id = t.trial_id AND a.key = 'item' "
                "WHERE t.state IN ('RUNNING', 'WAITING') ORDER BY t.number")).all()
    finally:
        engine.dispose()
    return "unfinished trials (number, state, item, heartbeat age):\n" + "\n".join(map(str, rows))


def worker_logs(root: Path) -> str:
    return "\n".join(p.read_text() for p in sorted((root / "logs").glob("*.log")))


def optuna_trials(name: str, storage: str):
    import optuna

    return optuna.load_study(study_name=name, storage=storage).get_trials(deepcopy=False)


def complete_per_item(trials) -> Counter:
    from optuna.trial import TrialState

    return Counter(t.user_attrs["item"] for t in trials if t.state == TrialState.COMPLETE)


def trial_runs(name: str, tracking: str):
    from mlflow.tracking import MlflowClient

    mlc = MlflowClient(tracking)
    exp = mlc.get_experiment_by_name(name)
    runs = mlc.search_runs([exp.experiment_id], max_results=1000)
    return mlc, exp, [r for r in runs if r.data.tags.get("ablate.role") == "trial"], runs


def stored_text(mlc, exp, runs, root: Path) -> str:
    """Everything MLflow holds for the study as text: experiment, params, tags, artifacts."""
    parts = [repr(exp.tags), exp.artifact_location or ""]
    for run in runs:
        parts += [repr(run.data.params), repr(run.data.tags), repr(run.info)]
        dest = root / "downloaded" / run.info.run_id
        dest.mkdir(parents=True)
        mlc.download_artifacts(run.info.run_id, "", str(dest))
        parts += [p.read_bytes().decode("latin-1") for p in dest.rglob("*") if p.is_file()]
    return "\n".join(parts)


@pytest.mark.slow
def test_six_workers_run_each_item_once_and_reports_render_remotely(tmp_path, postgres_db, mlflow_server):
    name = f"pg6-{uuid.uuid4().hex[:8]}"
    storage = with_password(postgres_db)
    queued = enqueue(tmp_path, name, storage, mlflow_server)

    workers = start_workers(tmp_path, name, storage, mlflow_server, 6)
    assert wait_all(workers, tmp_path, postgres_db) == [0] * 6, worker_logs(tmp_path)

    trials = optuna_trials(name, postgres_db)
    assert len(trials) == ITEMS, "no item may be run twice"
    per_item = complete_per_item(trials)
    assert len(per_item) == ITEMS and set(per_item.values()) == {1}
    mlc, exp, runs, all_runs = trial_runs(name, mlflow_server)
    assert Counter(r.info.status for r in runs) == {"FINISHED": ITEMS}
    assert {r.info.status for r in all_runs} == {"FINISHED"}, "the study's parent run ends with its last item"
    assert exp.artifact_location.startswith("mlflow-artifacts:"), "artifacts go through the server"

    # The stores by environment variables here, by options below.
    status = ablate(tmp_path, "status", name, env={"ABLATE_STORAGE": storage, "ABLATE_TRACKING_URI": mlflow_server})
    assert str(SEEDS) in status.stdout and "normalisation=gamma" in status.stdout
    report = ablate(tmp_path, "report", name, "--storage", storage, "--tracking-uri", mlflow_server,
                    "--format", "html", "--out", "out")
    html = {p.name: p.read_text() for p in (tmp_path / "out").glob("*.html")}
    assert set(html) == {"accuracy.html", "norm_stability.html"}
    assert "data:image/svg+xml;base64" in html["norm_stability.html"], "curves read back from the server's artifacts"

    # Credentials reach neither MLflow (params, tags, artifacts) nor logs nor reports.
    stored = stored_text(mlc, exp, all_runs, tmp_path)
    for where, text in [("mlflow", stored), ("worker logs", worker_logs(tmp_path)), ("status", status.stdout),
                        ("report log", report.stdout + report.stderr),
                        ("run --workers 0", queued.stdout + queued.stderr), *html.items()]:
        assert SECRET not in text, f"the storage password leaked into {where}"
    assert "postgresql+psycopg://postgres:***@" in stored  # the redacted URL is what is recorded


def test_three_hosts_queueing_at_once_queue_each_item_once(tmp_path, postgres_db, mlflow_server):
    """`ablate run --workers 0` from three places at the same moment: each item once, no run yet."""
    name = f"pgq-{uuid.uuid4().hex[:8]}"
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump({"name": name, **SPEC}))
    args = [*ABLATE, "run", "spec.yaml", "--workers", "0",
            "--storage", postgres_db, "--tracking-uri", mlflow_server]
    procs = [subprocess.Popen(args, cwd=tmp_path, env=env_for(tmp_path), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], outs
    assert sorted(int(o.split("(")[-1].split()[0]) for o, _ in outs) == [0, 0, ITEMS]  # "(N newly queued)"
    items = Counter(t.user_attrs["item"] for t in optuna_trials(name, postgres_db))
    assert len(items) == ITEMS and set(items.values()) == {1}
    from mlflow.tracking import MlflowClient

    # No run yet: the parent run is started by the first worker (test_runner_worker.py: two at once start one).
    exp = MlflowClient(mlflow_server).get_experiment_by_name(name)
    assert exp is None or not MlflowClient(mlflow_server).search_runs([exp.experiment_id])


def holders(study) -> set[str]:
    """The pids of the workers holding a RUNNING trial of ``study``."""
    from optuna.trial import TrialState

    return {str(t.user_attrs.get("worker", "")).rsplit(":", 1)[-1]
            for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))}


@pytest.mark.slow
def test_killing_two_workers_loses_nothing_and_leaves_no_run_running(tmp_path, postgres_db, mlflow_server):
    from optuna.trial import TrialState

    name = f"pgkill-{uuid.uuid4().hex[:8]}"
    enqueue(tmp_path, name, postgres_db, mlflow_server)
    seed = random.randrange(10**6)
    rng = random.Random(seed)
    # Worker 0, started alone, pauses at step 2 of its first trial and says so in the mark file:
    # killed there, it is certain to leave a trial half-trained (a random moment alone may miss
    # every trial, for 4-step trials end within a second). Started with the others, it could find
    # every item taken on a loaded machine.
    mark = tmp_path / "paused.mark"
    workers = start_workers(tmp_path, name, postgres_db, mlflow_server, 1, ABLATE_FAULT="pause@2",
                            ABLATE_FAULT_PAUSE_S="5", ABLATE_FAULT_MARK=str(mark))
    import optuna

    study = optuna.load_study(study_name=name, storage=postgres_db)  # once: opening a storage is costly
    deadline = time.monotonic() + 300
    while not mark.exists():
        assert time.monotonic() < deadline and workers[0].poll() is None, worker_logs(tmp_path)
        time.sleep(0.05)
    workers[0].send_signal(signal.SIGKILL)  # within its 5 s pause: mid-trial, for sure
    # 0.2 s a step: their items outlast the random wait below (4-step items had all ended within it
    # on a quiet machine, each worker exiting 0 before the kill: seed 528851).
    workers += start_workers(tmp_path, name, postgres_db, mlflow_server, 5, first=1, ABLATE_FAULT="slow@1")
    # The second victim, one of the others holding a trial (its ``worker`` attribute is host:pid;
    # worker 0's stays RUNNING until its heartbeat is stale), at a random moment after: mid-trial,
    # mid-logging or between items.
    while len(busy := [i for i in range(1, 6) if str(workers[i].pid) in holders(study)]) < 3:
        assert time.monotonic() < deadline, worker_logs(tmp_path)
        time.sleep(0.2)
    time.sleep(rng.uniform(0.0, 2.5))
    # Drawn after the wait from those still running: one that ran out of items meanwhile exited 0
    # (seen once on a loaded machine, the kill then landing on an ended process).
    victims = [0, rng.choice([i for i in busy if workers[i].poll() is None] or busy)]
    workers[victims[1]].send_signal(signal.SIGKILL)

    codes = wait_all(workers, tmp_path, postgres_db)
    assert [codes[v] for v in victims] == [-signal.SIGKILL] * 2, f"seed {seed}"
    assert [c for i, c in enumerate(codes) if i not in victims] == [0] * 4, worker_logs(tmp_path)

    trials = optuna_trials(name, postgres_db)
    per_item = complete_per_item(trials)
    assert len(per_item) == ITEMS and set(per_item.values()) == {1}, f"seed {seed}: {per_item}"
    assert not [t for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    killed = [t for t in trials if t.user_attrs.get("failure_kind") == "killed" and t.state == TrialState.FAIL]
    assert any(str(t.user_attrs.get("worker", "")).endswith(f":{workers[0].pid}") for t in killed), \
        f"seed {seed}: the trial worker 0 held when killed at step 2 is recorded killed: {killed}"
    _, _, runs, all_runs = trial_runs(name, mlflow_server)
    statuses = Counter(r.info.status for r in runs)
    assert statuses["FINISHED"] >= ITEMS, f"seed {seed}: {statuses}"
    assert "RUNNING" not in {r.info.status for r in all_runs}, f"seed {seed}: a run was left RUNNING"


UNREACHABLE = "postgresql+psycopg://alice:{pw}@127.0.0.1:{port}/ablate"
MALFORMED = "postgresql+psycopg//alice:{pw}@127.0.0.1:{port}/ablate"


def _closed_port() -> int:
    with socket.socket() as sock:  # nothing listens there once the probe socket is closed
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("command", ["worker", "status", "report", "run"])
def test_bad_storage_url_is_a_clear_error(tmp_path, command):
    port = _closed_port()
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump({"name": "bad", **SPEC}))
    target = ["spec.yaml"] if command == "run" else ["bad"]
    # Unreachable: the store's fault (exit 1); malformed: the input's, refused before any store is asked (exit 2).
    for template, expected, code in [(UNREACHABLE, f"127.0.0.1:{port}", 1), (MALFORMED, "malformed storage URL", 2)]:
        url = template.format(pw=SECRET, port=port)
        res = ablate(tmp_path, command, *target, "--storage", url, check=False, timeout=120)
        output = res.stdout + res.stderr
        assert res.returncode == code, output
        assert expected in output and "Traceback" not in output, output
        assert SECRET not in output and "alice:***@" in output, output


@pytest.mark.parametrize("text, shown", [
    ("postgresql+psycopg://alice:{pw}@db:5432/x", "postgresql+psycopg://alice:***@db:5432/x"),
    ("postgresql+psycopg://alice:a/{pw}@db/x", "postgresql+psycopg://alice:***@db/x"),
    ("postgresql+psycopg//alice:{pw}@db/x", "postgresql+psycopg//alice:***@db/x"),
    ("error at alice:{pw}@db", "error at alice:***@db"),
    ("postgresql+psycopg://alice@db/x?sslmode=require&password={pw}", "…?sslmode=require&password=***"),
    ("http://127.0.0.1:5000/api/2.0", "http://127.0.0.1:5000/api/2.0"),
    ("sqlite:////tmp/x.db", "sqlite:////tmp/x.db"),
])
def test_redact_hides_passwords_wherever_they_sit(text, shown):
    from ablate.stores import redact

    out = redact(text.format(pw=SECRET))
    assert SECRET not in out
    assert out.endswith(shown.removeprefix("…"))
