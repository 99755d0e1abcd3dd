"""Real ablate processes on real stores, for the fault tests: start a run or a worker with a fault
injected (``ABLATE_FAULT``, see ablate/faults.py), wait until it reaches the fault's point, signal
it, and check what the stores hold afterwards."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import time
from collections import Counter, defaultdict
from pathlib import Path

import yaml
from support import ABLATE, TRAINABLE, spec_dict

SPEC = spec_dict(TRAINABLE, name="faults", seeds=2,
                 sets={"train.steps": 8, "train.eval_every": 4, "train.log_every": 2, "probes.every": 4})


def env_for(root: Path, **extra: str) -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if k not in ("ABLATE_STORAGE", "ABLATE_TRACKING_URI")},
            "ABLATE_HOME": str(root / ".ablate"), "ABLATE_CACHE_DIR": str(root / "cache"),
            "ABLATE_HEARTBEAT_S": "1", "ABLATE_GRACE_S": "4", "OMP_NUM_THREADS": "1",
            "ABLATE_FAULT_MARK": str(root / "fault.mark"), **extra}


def write_spec(root: Path, **changes) -> Path:
    spec = yaml.safe_load(yaml.safe_dump(SPEC))
    spec.update(changes)
    path = root / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def spawn(root: Path, *args: str, group: bool = False, **env: str) -> subprocess.Popen:
    """``ablate ARGS`` in ``root``; ``group``: in a process group of its own, as a shell's job is
    (a terminal's Ctrl-C goes to the whole group)."""
    (root / "fault.mark").unlink(missing_ok=True)
    return subprocess.Popen([*ABLATE, *args], cwd=root, env=env_for(root, **env),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=group)


def ablate(root: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([*ABLATE, *args], cwd=root, env=env_for(root, **env),
                          capture_output=True, text=True, timeout=600)


def wait_for(predicate, what: str, proc: subprocess.Popen | None = None, timeout: float = 240.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if proc is not None and proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"the process ended ({proc.returncode}) before {what}:\n{out}\n{err}")
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def optuna_db(root: Path) -> Path:
    return root / ".ablate" / "optuna.db"


def _read(db: Path, sql: str) -> list[tuple]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30) as conn:
        return conn.execute(sql).fetchall()


def trials(root: Path) -> list[dict]:
    """Every trial: number, state, and the user attributes that say what it was."""
    rows = _read(optuna_db(root), "SELECT t.trial_id, t.number, t.state FROM trials t ORDER BY t.trial_id")
    attrs: dict[int, dict] = defaultdict(dict)
    for trial_id, key, value in _read(optuna_db(root), "SELECT trial_id, key, value_json FROM trial_user_attributes"):
        import json

        attrs[trial_id][key] = json.loads(value)
    return [{"number": n, "state": s, **attrs[i]} for i, n, s in rows]


def training_step(root: Path) -> int:
    """The highest step a RUNNING trial has reported (0 when none trains yet)."""
    if not optuna_db(root).exists():
        return 0
    try:
        return max([t.get("step") or 0 for t in trials(root) if t["state"] == "RUNNING"], default=0)
    except sqlite3.Error:
        return 0


def runs(root: Path) -> list[dict]:
    """Every trial run in MLflow: id, status and its ablate tags."""
    db = root / ".ablate" / "mlflow.db"
    rows = _read(db, "SELECT run_uuid, status FROM runs")
    tags: dict[str, dict] = defaultdict(dict)
    for run, key, value in _read(db, "SELECT run_uuid, key, value FROM tags WHERE key LIKE 'ablate.%'"):
        tags[run][key] = value
    return [{"run_id": r, "status": s, **tags[r]} for r, s in rows if tags[r].get("ablate.role") == "trial"]


def assert_consistent(root: Path) -> dict[str, str]:
    """What every signal, kill and store fault must leave: no trial RUNNING, every item finished
    or waiting, no MLflow run RUNNING, at most one FINISHED run per item and that one the run its
    COMPLETE trial recorded. Returns item → its state (done / waiting / failed)."""
    found = trials(root)
    assert not [t for t in found if t["state"] == "RUNNING"], found
    by_item: dict[str, list[dict]] = defaultdict(list)
    for t in found:
        by_item[t["item"]].append(t)
    states = {}
    for item, ts in by_item.items():
        kinds = [t["state"] for t in ts]
        assert kinds.count("COMPLETE") <= 1, ts
        assert "COMPLETE" in kinds or "WAITING" in kinds or any(
            t.get("failure_kind") in ("diverged", "error") for t in ts), (item, ts)
        states[item] = "done" if "COMPLETE" in kinds else "waiting" if "WAITING" in kinds else "failed"
    if (root / ".ablate" / "mlflow.db").exists():
        all_runs = runs(root)
        assert not [r for r in all_runs if r["status"] == "RUNNING"], all_runs
        finished = Counter((r["ablate.cell_id"], r["ablate.seed"], r["ablate.phase"]) for r in all_runs
                           if r["status"] == "FINISHED")
        assert set(finished.values()) <= {1}, finished
        recorded = {t["mlflow_run_id"] for t in found if t["state"] == "COMPLETE"}
        assert {r["run_id"] for r in all_runs if r["status"] == "FINISHED"} == recorded
    return states


def signal_line(stderr: str) -> str:
    """The one line that says what a signal stopped and what was re-queued (asserts there is one)."""
    lines = [line for line in stderr.splitlines() if "run the same command to resume" in line]
    assert len(lines) == 1, stderr
    return lines[0]


def stop(proc: subprocess.Popen, sig: int, group: bool = False) -> tuple[str, str, float]:
    """Send ``sig`` (to the process group with ``group``) and wait; (stdout, stderr, seconds to exit)."""
    start = time.monotonic()
    if group:
        os.killpg(proc.pid, sig)
    else:
        proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    return out, err, time.monotonic() - start


SIGNAL_EXIT = {signal.SIGINT: 130, signal.SIGTERM: 143}
