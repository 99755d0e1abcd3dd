"""ablate.runner.pool: ``ablate run --workers K`` with real worker processes and real stores —
signals forwarded to the workers (a scheduler's SIGTERM, a terminal's Ctrl-C), failed workers
reported with their last error, a storage that turns read-only mid-run — and the workers' start-up:
devices and thread counts per local worker, several workers on one GPU, a worker process that
opens its study before loading torch."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import processes as procs
import pytest

from ablate.runner import pool
from ablate.stores import Stores


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                out.append(int(entry))
    return out


def _workers(pid: int) -> list[int]:
    """The worker processes of the ``ablate run`` of ``pid``: the children of its zygote, named
    ``ablate-worker`` (what ``ps -o comm`` shows)."""
    found = []
    for child in _children(pid):
        for grandchild in _children(child):
            with contextlib.suppress(OSError), open(f"/proc/{grandchild}/comm") as f:
                if f.read().strip() == "ablate-worker":
                    found.append(grandchild)
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _both_training(root) -> bool:
    try:
        found = procs.trials(root) if procs.optuna_db(root).exists() else []
    except sqlite3.Error:  # the storage is being created
        return False
    return len([t for t in found if t["state"] == "RUNNING" and (t.get("step") or 0) >= 2]) == 2


@pytest.mark.parametrize(("sig", "group"), [(signal.SIGTERM, False), (signal.SIGINT, True)],
                         ids=["SIGTERM-to-the-parent", "SIGINT-to-the-group"])
def test_a_signal_stops_every_worker_and_requeues_their_items(tmp_path, sig, group):
    """SIGTERM to the parent alone (kill PID: before, it died with -15 and its workers ran on) and
    Ctrl-C to the whole group (the workers get it twice: from the terminal and from the parent)."""
    procs.write_spec(tmp_path, train={**procs.SPEC["train"], "steps": 60})
    proc = procs.spawn(tmp_path, "run", "spec.yaml", "--workers", "2", group=group, ABLATE_FAULT="slow@2")
    procs.wait_for(lambda: _both_training(tmp_path), "two trials training", proc)
    workers = _workers(proc.pid)
    assert len(workers) == 2
    out, err, seconds = procs.stop(proc, sig, group=group)
    print(f"run --workers 2, {signal.Signals(sig).name}{' to the group' if group else ''}: exit after {seconds:.1f} s")
    assert proc.returncode == procs.SIGNAL_EXIT[sig], (out, err)
    assert not [w for w in workers if _alive(w)]
    assert "Traceback" not in out + err
    assert "re-queued 2 running items" in procs.signal_line(err)
    assert sorted(procs.assert_consistent(tmp_path).values()) == ["waiting", "waiting"]
    # The live view's last frame shows no phantom running item.
    assert "0 running" in out.rsplit("faults:", 1)[-1], out
    for log in (tmp_path / ".ablate" / "logs").glob("*.log"):
        assert "Traceback" not in log.read_text()


def test_all_workers_failing_is_a_failed_run_with_each_workers_error(tmp_path):
    """Before: "0 done, 0 failed, 2 unfinished" and exit 0."""
    procs.write_spec(tmp_path)
    res = procs.ablate(tmp_path, "run", "spec.yaml", "--workers", "2", ABLATE_FAULT="error@claim")
    assert res.returncode == 1, res.stdout + res.stderr
    assert "Traceback" not in res.stdout + res.stderr
    lines = [line for line in res.stderr.splitlines() if "injected fault at claim" in line]
    assert len(lines) == 2 and all(line.startswith("error worker ") for line in lines), res.stderr
    assert "unfinished: run the same command to resume" in res.stderr
    assert procs.ablate(tmp_path, "run", "spec.yaml", "--workers", "2").returncode == 0
    assert sorted(procs.assert_consistent(tmp_path).values()) == ["done", "done"]


def test_a_storage_turning_read_only_mid_run_stops_the_workers_with_the_reason(tmp_path):
    """``chattr +i`` on optuna.db and its WAL files while two workers train: before, the workers
    died with a misleading message and the parent of SIGBUS (SQLite's mapped WAL index). A worker
    whose operation was in flight at that moment still meets the SIGBUS (a fault, not an
    exception); the parent then names the read-only file."""
    probe = tmp_path / "probe"
    probe.touch()
    if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(probe)]).returncode:
        pytest.skip("chattr +i is not available here (needs root and a filesystem that supports it)")
    subprocess.run(["chattr", "-i", str(probe)], check=True)
    procs.write_spec(tmp_path, train={**procs.SPEC["train"], "steps": 60})
    proc = procs.spawn(tmp_path, "run", "spec.yaml", "--workers", "2", ABLATE_FAULT="slow@2")
    files = []
    try:
        procs.wait_for(lambda: _both_training(tmp_path), "two trials training", proc)
        files = [str(p) for p in (tmp_path / ".ablate").glob("optuna.db*") if not p.name.endswith(".lock")]
        subprocess.run(["chattr", "+i", *files], check=True)
        out, err = proc.communicate(timeout=300)
    finally:
        if files:
            subprocess.run(["chattr", "-i", *files])
    assert proc.returncode == 1, (proc.returncode, out, err)  # not -SIGBUS
    assert "Traceback" not in out + err
    failed = [line for line in err.splitlines() if line.startswith("error worker ")]
    assert len(failed) == 2 and all("read-only" in line for line in failed), err


def test_a_worker_killed_by_sigbus_is_told_which_store_file_turned_read_only(tmp_path):
    db = tmp_path / "optuna.db"
    db.touch()
    stores = Stores(f"sqlite:///{db}", f"sqlite:///{tmp_path / 'mlflow.db'}", None)
    assert "memory-mapped file" in pool._exit(-signal.SIGBUS, stores)  # nothing read-only: the general cause
    assert pool._exit(-signal.SIGKILL, stores) == "was killed by SIGKILL"
    if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(db)]).returncode:
        pytest.skip("chattr +i is not available here (needs root and a filesystem that supports it)")
    try:
        said = pool._exit(-signal.SIGBUS, stores)
    finally:
        subprocess.run(["chattr", "-i", str(db)], check=True)
    assert said == f"was killed by SIGBUS (a mapped file of SQLite's: {db} is read-only now)"


def test_several_workers_share_one_named_gpu() -> None:
    assert pool.devices("cuda:0", 2) == ["cuda:0", "cuda:0"]
    assert pool.devices("cuda:1", 4) == ["cuda:1"] * 4
    assert pool.devices("cpu", 3) == ["cpu"] * 3


def test_each_worker_is_told_its_device_and_thread_count(monkeypatch) -> None:
    """What ``ablate run --workers 2 --device cuda:0`` starts: two ``ablate worker`` processes on
    cuda:0, each told its share of the cores by flag and by the variables torch, MKL and numba
    read when they load (the zygote that forks them is started with them); no
    CUDA_VISIBLE_DEVICES (the worker selects its GPU itself); the stores by environment."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(pool.os, "cpu_count", lambda: 16)
    stores = Stores("sqlite:///x.db", "sqlite:///y.db", None)
    devices = pool.devices("cuda:0", 2)
    assert devices == ["cuda:0", "cuda:0"]
    for device in devices:
        cmd, env = pool.worker_command("study", stores, device, pool.threads_per_worker(len(devices)), 50,
                                       workers=len(devices))
        assert cmd[:2] == ["worker", "study"]
        assert cmd[cmd.index("--device") + 1] == "cuda:0" and cmd[cmd.index("--threads") + 1] == "8"
        assert {k: env[k] for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")} == pool.thread_env(8)
        assert "CUDA_VISIBLE_DEVICES" not in env
        assert env["ABLATE_STORAGE"] == "sqlite:///x.db" and "x.db" not in " ".join(cmd)
        assert env["ABLATE_WORKERS"] == "2"  # a fused claim leaves an idle peer its share


def test_workers_sharing_a_gpu_count_once_among_those_that_train_side_by_side() -> None:
    assert pool.side_by_side(["cpu", "cpu"]) == 2
    assert pool.side_by_side(["cuda:0", "cuda:0", "cuda:0"]) == 1
    assert pool.side_by_side(["cuda:0", "cuda:1", "cuda:0", "cuda:1"]) == 2


def test_select_device_makes_the_workers_gpu_current(monkeypatch) -> None:
    import torch

    from ablate.runner.worker import select_device

    chosen: list[int] = []
    monkeypatch.setattr(torch.cuda, "set_device", chosen.append)
    for device in ("cpu", "cuda", "cuda:0", "cuda:3"):
        select_device(device)
    assert chosen == [0, 3]  # bare "cuda" is whatever is current already


def test_a_worker_opens_its_study_before_loading_torch(tmp_path: Path) -> None:
    """``ablate worker --threads 1`` on a study that is not there fails at the study, having loaded
    neither torch nor MLflow (they load in the background only once the study is open), and
    leaves the thread count in the environment for when they do."""
    code = textwrap.dedent(f"""
        import os, sys
        from typer.testing import CliRunner
        from ablate.cli import app
        res = CliRunner().invoke(app, ["worker", "missing", "--storage", "sqlite:///{tmp_path / 'o.db'}",
                                       "--tracking-uri", "sqlite:///{tmp_path / 'm.db'}", "--threads", "1"])
        print(res.exit_code, "torch" in sys.modules, "mlflow" in sys.modules, os.environ["OMP_NUM_THREADS"],
              os.environ["NUMBA_NUM_THREADS"])
    """)
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "NUMBA_NUM_THREADS")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1", "False", "False", "1", "1"], out.stdout + out.stderr


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_threads_share_the_cores(workers: int, monkeypatch) -> None:
    monkeypatch.setattr(pool.os, "cpu_count", lambda: 2)
    assert pool.threads_per_worker(workers) == max(1, 2 // workers)


def test_a_worker_killed_while_the_other_finishes_the_study_is_a_warning_and_exit_0(tmp_path):
    """The exit status is the study's: before, "2 done, 0 failed, 0 unfinished" and exit 1, so
    `ablate run … && ablate report …` and a SLURM job's state said the study failed."""
    procs.write_spec(tmp_path, train={**procs.SPEC["train"], "steps": 30})
    proc = procs.spawn(tmp_path, "run", "spec.yaml", "--workers", "2", ABLATE_FAULT="slow@2")
    procs.wait_for(lambda: _both_training(tmp_path), "two trials training", proc)
    victim = _workers(proc.pid)[0]
    os.kill(victim, signal.SIGKILL)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, (out, err)
    warned = [line for line in err.splitlines() if line.startswith("warning worker ")]
    assert len(warned) == 1 and "SIGKILL" in warned[0], err
    assert "2 done, 0 failed, 0 unfinished" in out, out
    assert sorted(procs.assert_consistent(tmp_path).values()) == ["done", "done"]


def test_the_estimate_times_a_trial_with_a_cpu_pool_workers_share(monkeypatch) -> None:
    monkeypatch.setattr(pool.os, "cpu_count", lambda: 8)
    assert pool.estimate_threads(4, "cpu") == 2
    assert pool.estimate_threads(1, "cpu") is None and pool.estimate_threads(4, "cuda") is None
