"""The zygote that forks ``ablate run``'s local workers (ablate/zygote.py, runner/forking.py): real forks of real
``ablate`` commands — their exit statuses, names and logs, signals, a killed zygote, a failed one."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import processes as procs
import pytest

from ablate.runner import forking, pool
from ablate.stores import Stores

pytestmark = pytest.mark.skipif(not hasattr(os, "fork") or not os.path.exists("/proc"), reason="forks; reads /proc")


def _queued(tmp_path: Path) -> dict[str, str]:
    """A study of one queued item, and the environment of a worker that pauses once it claims it."""
    procs.write_spec(tmp_path, seeds=1)
    res = procs.ablate(tmp_path, "run", "spec.yaml", "--workers", "0")
    assert res.returncode == 0, res.stderr
    return procs.env_for(tmp_path, ABLATE_FAULT="pause@claim", ABLATE_FAULT_PAUSE_S="120", ABLATE_TRACEBACK="1")


def _paused_worker(tmp_path: Path) -> tuple[forking.Zygote, forking.Forked]:
    env = _queued(tmp_path)
    z = forking.Zygote("faults", 1)
    (worker,) = z.fork([{"argv": ["worker", "faults", "--threads", "1"], "env": env, "log": str(tmp_path / "w.log")}])
    procs.wait_for(lambda: (tmp_path / "fault.mark").exists(), "the worker's claim")
    return z, worker


def test_forked_commands_write_their_own_logs_and_report_their_exit_statuses(tmp_path):
    z = forking.Zygote("study", 1)
    env = {**os.environ, "ABLATE_HOME": str(tmp_path / ".ablate")}
    logs = [tmp_path / "missing.log", tmp_path / "version.log"]
    workers = z.fork([{"argv": ["status", "no-such-study"], "env": env, "log": str(logs[0])},
                      {"argv": ["--help"], "env": env, "log": str(logs[1])}])
    assert len({w.pid for w in workers} | {z.proc.pid, os.getpid()}) == 4
    codes = [w.wait(timeout=120) for w in workers]
    assert codes[0] not in (0, None) and codes[1] == 0
    assert "no-such-study" in logs[0].read_text()  # its error, in its own log
    assert logs[1].read_text() == ""  # its help went to stdout: not the log, not the zygote's
    z.close()
    assert z.proc.returncode == 0  # it exits once its workers have
    with open(tmp_path / "other", "w") as other:  # may reuse the report pipe's descriptor number
        z.close()  # closes nothing twice
        other.write("still open")


def test_a_worker_is_named_signalled_and_reported_by_pid_and_the_zygote_outlives_a_groups_sigterm(tmp_path):
    z, worker = _paused_worker(tmp_path)
    assert Path(f"/proc/{worker.pid}/comm").read_text().strip() == "ablate-worker"
    assert worker.poll() is None
    os.kill(z.proc.pid, signal.SIGTERM)  # a scheduler's SIGTERM reaches every process of the job
    os.kill(z.proc.pid, signal.SIGINT)
    time.sleep(0.5)
    assert z.proc.poll() is None
    worker.kill()
    assert worker.wait(timeout=60) == -signal.SIGKILL
    worker.kill()  # reported ended: nothing is sent to a pid that may be another process's now
    z.close()
    assert z.proc.returncode == 0


def test_a_worker_whose_zygote_was_killed_runs_on_and_reads_as_lost_once_it_ends(tmp_path):
    z, worker = _paused_worker(tmp_path)
    z.proc.kill()
    z.proc.wait()
    assert worker.poll() is None  # orphaned, not ended
    os.kill(worker.pid, signal.SIGKILL)
    procs.wait_for(lambda: worker.poll() is not None, "the orphan's end", timeout=60)
    assert worker.returncode == forking.LOST


def test_a_zygote_that_cannot_start_says_why_and_the_run_starts_its_workers_apart(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONHOME", str(tmp_path / "no-python"))
    broken = forking.Zygote("study", 1)
    monkeypatch.delenv("PYTHONHOME")
    with pytest.raises(forking.Failed, match=r"forking 0 of 1.*(?s:Python)"):
        broken.fork([{"argv": ["--help"], "env": dict(os.environ), "log": None}])

    def fail(self, requests):  # noqa: ANN001, ANN202
        self.cancel()
        raise forking.Failed("the process that forks the workers ended (-9) after forking 0 of 2")

    monkeypatch.setattr(forking.Zygote, "fork", fail)
    monkeypatch.setenv("ABLATE_HOME", str(tmp_path / ".ablate"))
    stores = Stores(f"sqlite:///{tmp_path / 'o.db'}", f"sqlite:///{tmp_path / 'm.db'}", None)
    workers = pool.start("no-such-study", stores, ["cpu", "cpu"], 50)
    assert all(isinstance(w, subprocess.Popen) for w in workers)
    assert all(w.wait(timeout=120) != 0 for w in workers)  # `ablate worker` apart, on a study not there
    assert "no-such-study" in pool.last_error(workers[0])
    assert "forking 0 of 2" in (tmp_path / ".ablate" / "logs" / "no-such-study-zygote.log").read_text()


def _zygotes(name: str, cwd: Path | None = None) -> list[int]:
    """The zygotes of studies called ``name`` (started in ``cwd``: other tests, run beside this
    one by pytest-xdist, start zygotes of their own ``spec.yaml``)."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            line = Path(f"/proc/{entry}/cmdline").read_bytes()
            where = Path(os.readlink(f"/proc/{entry}/cwd"))
        except OSError:
            continue
        if b"ablate.zygote\0" in line and b"\0" + name.encode() + b"\0" in line and cwd in (None, where):
            found.append(int(entry))
    return found


def test_a_run_starts_its_zygote_first_and_stops_it_when_it_has_nothing_to_fork(tmp_path):
    """``ablate run --workers 2`` starts the zygote before validating the spec (its imports overlap
    the run's own work); a refused spec then writes nothing and leaves no zygote behind, nor does
    a study with nothing left to run; one worker, or devices only torch can list, start none early."""
    for workers, device in ((1, "cpu"), (2, "auto")):
        with forking.early(workers, device, False, None, "x") as none:
            assert none is None
    with forking.early(2, "cpu", False, None, "early-test.yaml") as z:
        assert z is not None and z.threads == forking.threads_per_worker(2)
        procs.wait_for(lambda: _zygotes("early-test.yaml"), "the zygote's command line", timeout=30)
    assert z.proc.returncode is not None and not _zygotes("early-test.yaml")

    (tmp_path / "bad-spec.yaml").write_text("name: x\nmodel: {family: nope}\n")
    res = procs.ablate(tmp_path, "run", "bad-spec.yaml", "--workers", "2")
    assert res.returncode == 2, res.stdout + res.stderr
    assert not (tmp_path / ".ablate").exists() and not _zygotes("bad-spec.yaml", tmp_path)

    procs.write_spec(tmp_path, seeds=1)
    assert procs.ablate(tmp_path, "run", "spec.yaml", "--workers", "2").returncode == 0
    again = procs.ablate(tmp_path, "run", "spec.yaml", "--workers", "2")
    assert again.returncode == 0 and "0 to run" in again.stdout, again.stdout + again.stderr
    assert not _zygotes("spec.yaml", tmp_path)


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, -signal.SIGTERM), (signal.SIGINT, 128 + signal.SIGINT)])
def test_a_signal_sent_to_a_worker_before_it_has_its_handlers_stops_it(tmp_path, monkeypatch, signum, code):
    """A run forwards a signal that came while its workers were starting as soon as it learns their
    pids, which may be before a forked child has run at all (busy cores). The zygote ignores SIGINT
    and SIGTERM, and a child that still did ignored it and trained the whole study. Here every
    child sleeps 0.5 s after the fork, as an unscheduled one would; the signal must still stop it."""
    (tmp_path / "sitecustomize.py").write_text(
        "import os, time\n_fork = os.fork\n\ndef fork():\n    pid = _fork()\n    if pid == 0:\n"
        "        time.sleep(0.5)\n    return pid\n\nos.fork = fork\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    z = forking.Zygote("late", 1, cpu=False, sql=False)
    env = {**os.environ, "ABLATE_HOME": str(tmp_path / ".ablate")}
    spec = Path(__file__).resolve().parents[1] / "studies" / "quickstart.yaml"
    (worker,) = z.fork([{"argv": ["validate", str(spec)], "env": env, "log": str(tmp_path / "w.log")}])
    worker.send_signal(signum)
    assert worker.wait(timeout=120) == code  # not 0: it validated on
    assert not (tmp_path / "w.log").exists()  # stopped before it opened its log: no traceback in it
    z.close()
