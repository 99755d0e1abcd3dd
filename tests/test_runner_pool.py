"""ablate.runner.pool: ``ablate run --workers K`` with real worker processes and real stores —
signals forwarded to the workers (a scheduler's SIGTERM, a terminal's Ctrl-C), failed workers
reported with their last error, a storage that turns read-only mid-run."""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess

import processes as procs
import pytest


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
    workers = _children(proc.pid)
    assert len(workers) == 2
    out, err, seconds = procs.stop(proc, sig, group=group)
    print(f"run --workers 2, {signal.Signals(sig).name}{' to the group' if group else ''}: exit after {seconds:.1f} s")
    assert proc.returncode == procs.SIGNAL_EXIT[sig], (out, err)
    assert not [w for w in workers if _alive(w)]
    assert "Traceback" not in out + err
    assert "re-queued 2 running item(s)" in procs.signal_line(err)
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
    assert "item(s) unfinished" in res.stderr
    assert procs.ablate(tmp_path, "run", "spec.yaml", "--workers", "2").returncode == 0
    assert sorted(procs.assert_consistent(tmp_path).values()) == ["done", "done"]


def test_a_storage_turning_read_only_mid_run_stops_the_workers_with_the_reason(tmp_path):
    """``chattr +i`` on optuna.db and its WAL files while two workers train: before, the workers
    died with a misleading message and the parent of SIGBUS (SQLite's mapped WAL index)."""
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
