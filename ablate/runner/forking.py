"""The run's side of the zygote (ablate/zygote.py) that forks ``ablate run``'s local workers.

    z = Zygote(name, threads)   # started at once: its imports overlap the run's own work
    workers = z.fork(requests)  # one Forked per worker: pid, poll, wait, send_signal, kill (as Popen)

``ablate run --workers K`` starts it first of all (``early``), so that its imports overlap the
spec's validation and the queueing; runner/pool.py asks it for the workers and watches them as it
would ``subprocess.Popen`` ones; a zygote that cannot fork them raises ``Failed`` (what it wrote,
read back) and pool.py starts them apart. Also the threads a local worker gets (``thread_env``,
``threads_per_worker``): the zygote is started with them, as torch, MKL and numba read them when
they load.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

from ablate.stores import MLFLOW_DATABASES, resolve

LOST = 255  # a worker's exit status when the zygote that would have reported it is gone


def thread_env(threads: int) -> dict[str, str]:
    """The variables torch (OpenMP), MKL and numba read their thread counts from when they load."""
    return {var: str(threads) for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")}


def threads_per_worker(workers: int) -> int:
    """CPU workers share the cores: oversubscribed BLAS/OpenMP threads make everyone slower."""
    return max(1, (os.cpu_count() or 1) // max(1, workers))


def database(tracking_uri: str) -> bool:
    """Whether MLflow keeps runs in a database at ``tracking_uri`` (its SQL store), not in files or
    behind a server."""
    return tracking_uri.split(":", 1)[0].split("+", 1)[0] in MLFLOW_DATABASES


class Failed(Exception):
    """The zygote ended before forking every worker (what it wrote, in its log)."""


class Forked:
    """A forked worker, watched and signalled as pool.py does a ``subprocess.Popen``."""

    def __init__(self, pid: int, zygote: Zygote) -> None:
        self.pid, self.returncode, self.zygote = pid, None, zygote
        self.log_path: str | None = None
        self.log_start = 0

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.zygote.exit_code(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        end = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if end is not None and time.monotonic() > end:
                raise subprocess.TimeoutExpired(f"worker {self.pid}", timeout or 0)
            time.sleep(0.05)
        return self.returncode  # type: ignore[return-value]

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:  # not reported ended, so not reaped: the pid is still this worker's
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Zygote:
    """The parent's end: the zygote process (started at once: its imports begin while the run
    queues its items), the workers it forked and what it reported."""

    def __init__(self, name: str, threads: int, verbose: bool = False, cpu: bool = True, sql: bool = True) -> None:
        """``name``: the study or its spec's file, for ``ps``; ``threads``: each worker's (its
        environment's, as its imports read them); ``cpu``: load the CPU scan kernels; ``sql``:
        MLflow's SQL store too."""
        read, write = os.pipe()
        # Its own errors (a failed start) are read back into ``Failed``; nothing is written to
        # the logs before a worker is asked for (a run with nothing to run writes no file).
        self._errors = None if verbose else tempfile.TemporaryFile()  # noqa: SIM115 (closed in close())
        self.threads = threads
        flags = [*(["--cpu"] if cpu else []), *(["--sql"] if sql else [])]
        self.proc = subprocess.Popen([sys.executable, "-m", "ablate.zygote", str(write), name, *flags],
                                     stdin=subprocess.PIPE, env={**os.environ, **thread_env(threads)},
                                     pass_fds=(write,), stdout=None if verbose else subprocess.DEVNULL,
                                     stderr=self._errors)
        os.close(write)
        self._fd, self._buffer, self._ended = read, b"", False
        self.codes: dict[int, int] = {}
        self.forked = False

    def fork(self, requests: list[dict[str, Any]]) -> list[Forked]:
        """Send the requests (``{"argv", "env", "log"}``: ``ablate ARGV`` in ``env``, writing to the
        file ``log``, None: to the run's terminal); the forked workers, once the zygote has imported
        and forked them all."""
        assert self.proc.stdin is not None and not self.forked
        self.forked = True
        with contextlib.suppress(BrokenPipeError):  # died at once: told below, by the missing reports
            self.proc.stdin.write(b"".join(json.dumps(r).encode() + b"\n" for r in requests))
            self.proc.stdin.close()
        pids: list[int] = []
        while len(pids) < len(requests):
            line = self._line()
            if line is None:
                for pid in pids:  # forked before it ended: stopped, the caller starts all anew
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                said = self._said()
                self.cancel()
                raise Failed(f"the process that forks the workers ended ({self.proc.returncode}) after "
                             f"forking {len(pids)} of {len(requests)}{': ' + said if said else ''}")
            kind, pid, *rest = line.split()
            if kind == "started":
                pids.append(int(pid))
            else:
                self.codes[int(pid)] = int(rest[0])
        os.set_blocking(self._fd, False)
        return [Forked(pid, self) for pid in pids]

    def _said(self) -> str:
        if self._errors is None:
            return ""
        self._errors.seek(0)
        return self._errors.read().decode(errors="replace").strip()[-2000:]

    def cancel(self) -> None:
        """Stop the zygote and reap it: one not asked to fork (the run had nothing to run, or
        failed first), or that failed to."""
        self.proc.kill()
        self.close()

    def _line(self) -> str | None:
        """The next report, waiting for it (None: the zygote closed its end)."""
        while b"\n" not in self._buffer:
            chunk = os.read(self._fd, 4096)
            if not chunk:
                return None
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line.decode()

    def exit_code(self, pid: int) -> int | None:
        """``pid``'s exit status if reported (None: running); ``LOST`` for one that ended
        unreported because the zygote itself was killed."""
        while not self._ended:
            try:
                chunk = os.read(self._fd, 4096)
            except BlockingIOError:
                break
            if not chunk:  # the zygote has exited, or is exiting: reaped now, not left a zombie
                self._ended = True
                self.close()
                break
            self._buffer += chunk
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in lines:
            kind, other, *rest = line.decode().split()
            if kind == "exited":
                self.codes[int(other)] = int(rest[0])
        if pid in self.codes or not self._ended:
            return self.codes.get(pid)
        return None if _alive(pid) else LOST

    def close(self) -> None:
        """Reap the zygote (it ends once its workers have) and close its pipes; again, nothing (a
        descriptor closed twice could be another file's by then)."""
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # its workers have all ended (or it was killed): nothing of value left in it
            self.proc.kill()
            self.proc.wait()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        if self._errors is not None:
            self._errors.close()
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()


@contextlib.contextmanager
def early(workers: int, device: str, verbose: bool, tracking_uri: str | None, name: str) -> Iterator[Zygote | None]:
    """The zygote of the ``workers`` local workers ``ablate run`` will start on ``device``, started
    before anything else it does; stopped at the end unless it forked them (a spec refused, a
    study with nothing to run). None: no zygote (one worker trains in the run's process), or not
    yet (``auto`` and ``cuda`` ask torch for the devices: runner/pool.py starts it then)."""
    forker = None
    if workers >= 2 and device not in ("auto", "cuda") and hasattr(os, "fork"):
        uri = resolve(tracking=tracking_uri, create=False).tracking  # no folder made: the spec may yet be refused
        forker = Zygote(name, threads_per_worker(workers), verbose, cpu=device == "cpu", sql=database(uri))
    try:
        yield forker
    finally:
        if forker is not None and not forker.forked:
            forker.cancel()


def _alive(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie, an orphan nobody has reaped yet, has ended)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:  # no /proc: as the signal said
        return True


