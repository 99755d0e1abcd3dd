"""Local worker processes for ``ablate run --workers K``: devices, threads, a live view.

Each worker is an ``ablate worker`` process on the shared study, exactly as on a cluster, forked
by one zygote that imported what they need once (ablate/zygote.py, runner/forking.py); this
module only starts them with sensible devices and thread counts and watches the storage.

``run`` forwards the first SIGINT or SIGTERM it gets to its workers (a scheduler's SIGTERM stops
the whole group cleanly: each worker re-queues its item) and waits for them; workers ignore a
second signal, so a Ctrl-C that reached them directly as well does no harm.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from optuna.trial import TrialState
from rich.console import Console

from ablate.runner import forking, progress, queue
from ablate.runner.forking import thread_env, threads_per_worker
from ablate.runner.study import open_study
from ablate.runner.worker import worker_id
from ablate.stores import Stores, home, redact, sqlite_path

STOP_WAIT_S = 60.0  # after a signal, how long workers get to re-queue their items before SIGKILL


def devices(device: str, workers: int) -> list[str]:
    """One device per worker: ``auto`` is one worker per visible GPU (CPU workers without one)."""
    if device == "auto":
        import torch

        gpus = torch.cuda.device_count()
        return [f"cuda:{i}" for i in range(gpus)] if gpus else ["cpu"] * workers
    if device == "cuda":
        import torch

        gpus = max(1, torch.cuda.device_count())
        return [f"cuda:{i % gpus}" for i in range(workers)]
    return [device] * workers


def estimate_threads(workers: int, device: str) -> int | None:
    """The torch threads of the trial ``ablate plan --estimate`` times for ``workers`` local
    workers on ``device``: a CPU pool's worker gets its share of the cores; otherwise None (all)."""
    return threads_per_worker(workers) if workers > 1 and device == "cpu" else None


def side_by_side(device_list: list[str]) -> int:
    """How many of a pool's workers on ``device_list`` train side by side: each CPU worker on its
    share of the cores; workers that share one GPU count once (a cell's seeds fused in one of them
    beat a split between them)."""
    return len(set(device_list)) if any(d.startswith("cuda") for d in device_list) else len(device_list)


def worker_command(study: str, stores: Stores, device: str, threads: int, checkpoint_every: int,
                   verbose: bool = False, fuse: int = 1, workers: int = 1) -> tuple[list[str], dict[str, str]]:
    """The ``ablate worker`` arguments and environment of one local worker on ``device``, one of
    ``workers`` that train side by side (on their own cores or GPUs)."""
    # Stores go by environment, not argv: a URL's password would show in `ps`. ABLATE_WORKERS: a
    # fused claim leaves idle peers their share (runner/fused.py ``share``).
    env = {**os.environ, **thread_env(threads), "ABLATE_STORAGE": stores.storage,
           "ABLATE_TRACKING_URI": stores.tracking, "ABLATE_TRACEBACK": "1",  # tracebacks to its log
           "ABLATE_WORKERS": str(workers)}
    # Up to that many items of a cell trained as one model (0: the worker chooses); always passed:
    # the worker's own default is 0, so a run's --fuse 1 must say 1
    argv = ["worker", study, "--device", device, "--threads", str(threads),
            "--checkpoint-every", str(checkpoint_every), "--fuse", str(fuse)]
    return ([*argv, "-v"] if verbose else argv), env


def start(study: str, stores: Stores, device_list: list[str], checkpoint_every: int,
          verbose: bool = False, fuse: int = 1, forker: forking.Zygote | None = None) -> list[Any]:
    """The local workers, forked by one zygote (ablate/zygote.py, runner/forking.py: their imports
    paid once; ``forker``: one already started, ``forking.early``), else, where it cannot fork
    them, ``ablate worker`` processes started apart; each with ``pid``, Popen's ``poll``,
    ``wait``, ``send_signal`` and ``kill``, and ``log_path``."""
    threads = threads_per_worker(len(device_list))
    commands = [worker_command(study, stores, device, threads, checkpoint_every, verbose, fuse, side_by_side(device_list))
                for device in device_list]
    logs = home() / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    paths = [logs / f"{study}-worker{i}.log" for i in range(len(device_list))]
    starts = [path.stat().st_size if path.exists() else 0 for path in paths]  # this run's lines start there
    procs: list[Any] = []
    if forker is not None and forker.threads != threads:
        forker.cancel()  # started for other workers than these
        forker = None
    if hasattr(os, "fork") and commands:
        forker = forker or forking.Zygote(study, threads, verbose, "cpu" in device_list, forking.database(stores.tracking))
        try:
            procs = forker.fork([{"argv": argv, "env": env, "log": None if verbose else str(path)}
                                 for (argv, env), path in zip(commands, paths, strict=True)])
        except forking.Failed as exc:  # started apart below
            with open(logs / f"{study}-zygote.log", "a") as log:
                log.write(f"{exc}\n")
    if not procs:
        for (argv, env), path in zip(commands, paths, strict=True):
            log = open(path, "ab")  # noqa: SIM115 (lives as long as the process)
            # A file, not a pipe: a worker that writes much would block on a full pipe.
            procs.append(subprocess.Popen([sys.executable, "-m", "ablate.cli", *argv], env=env,
                                          stdout=None if verbose else subprocess.DEVNULL,
                                          stderr=None if verbose else log))
    for proc, path, at in zip(procs, paths, starts, strict=True):
        proc.log_path, proc.log_start = str(path), at
    return procs


@dataclass
class Outcome:
    """How the local workers ended: ``signum`` the signal forwarded to them (None: none came),
    ``failed`` one line per worker that failed (not counting one stopped by that signal),
    ``requeued`` the labels of the items the workers re-queued when signalled."""

    signum: int | None = None
    failed: list[str] = field(default_factory=list)
    requeued: list[str] = field(default_factory=list)


def run(study: str, stores: Stores, device_list: list[str], checkpoint_every: int, console: Console,
        verbose: bool = False, items: progress.ViewItems = None, fuse: int = 1,
        forker: forking.Zygote | None = None, said: progress.Said | None = None) -> Outcome:
    """Start the workers (``forker``: through that zygote, see ``start``), show the live view until
    they all exit, forwarding SIGINT/SIGTERM."""
    received: list[int] = []
    procs: list[Any] = []  # subprocess.Popen or forking.Forked

    def forward(signum: int, frame: object) -> None:
        if received:
            return
        received.append(signum)
        for p in procs:
            if p.poll() is None:
                p.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        with console.status(f"starting {len(device_list)} workers"):  # a zygote's imports: seconds
            procs += start(study, stores, device_list, checkpoint_every, verbose, fuse, forker)
        if received:  # a signal while they were starting
            for p in procs:
                p.send_signal(received[0])
        watch(study, stores, procs, console, received, items, said)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        for forked in {p.zygote for p in procs if isinstance(p, forking.Forked)}:
            forked.close()  # reaped: it exits once its workers have
    outcome = Outcome(received[0] if received else None)
    stopped_by = {128 + received[0], -received[0]} if received else set()
    for i, p in enumerate(procs):
        if p.returncode and p.returncode not in stopped_by:
            outcome.failed.append(f"worker {i} (pid {p.pid}) {_exit(p.returncode, stores)}: {last_error(p)}")
    if received:
        outcome.requeued = requeued_by(study, stores, [p.pid for p in procs])
    return outcome


def _exit(code: int, stores: Stores) -> str:
    if code == -signal.SIGBUS:
        return f"was killed by SIGBUS{_mapped_file_lost(stores)}"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with {code}"


def _mapped_file_lost(stores: Stores) -> str:
    """Why a worker got SIGBUS, where a store says: SQLite maps its WAL index (-shm) into memory,
    and a write to it after the file turned read-only (or its disk filled or vanished) is a bus
    error, not an exception. Connections close after each operation (runner/rdb.py), so only one
    in flight at that moment meets it; the others get the error in words."""
    for url in (stores.storage, stores.tracking):
        path = sqlite_path(url)
        if path is None:
            continue
        for file in (path, path.with_name(f"{path.name}-wal"), path.with_name(f"{path.name}-shm")):
            if file.exists() and not os.access(file, os.W_OK):
                return f" (a mapped file of SQLite's: {file} is read-only now)"
    return " (a memory-mapped file could not be read or written: a store turned read-only, or its disk filled or vanished)"


def last_error(proc: subprocess.Popen) -> str:
    """The last error a worker wrote to its log in this run (else its last line), and the log."""
    path = getattr(proc, "log_path", None)
    if not path:
        return "no log"
    try:
        with open(path, "rb") as f:
            f.seek(getattr(proc, "log_start", 0))
            lines = [line.strip() for line in f.read().decode(errors="replace").splitlines() if line.strip()]
    except OSError as exc:
        return f"its log {path} cannot be read ({exc.strerror})"
    errors = [line for line in lines if line.lower().startswith(("error", "stopped"))]
    shown = errors[-1] if errors else lines[-1] if lines else "it wrote nothing"
    return f"{redact(shown)[:500]} (log: {path})"


def requeued_by(study: str, stores: Stores, pids: list[int]) -> list[str]:
    """Labels of the items the given local worker processes failed ``interrupted`` (re-queued)."""
    workers = {f"{socket.gethostname()}:{pid}" for pid in pids}
    try:
        entries = queue.entries(open_study(study, stores, read_only=True),
                                keys=("worker", "failure_kind", "cell_label", "seed"), states=(TrialState.FAIL,))
    except Exception:
        return []
    return [f"{e.user_attrs.get('cell_label')} · seed {e.user_attrs.get('seed')}" for e in entries
            if e.user_attrs.get("failure_kind") == "interrupted" and e.user_attrs.get("worker") in workers]


def _until_exit(procs: list[subprocess.Popen], seconds: float) -> None:
    """Sleep ``seconds``, or less when the last worker exits: the run ends when its workers do,
    not at the view's next look."""
    end = time.monotonic() + seconds
    while time.monotonic() < end and any(p.poll() is None for p in procs):
        time.sleep(0.05)


def watch(study_name: str, stores: Stores, procs: list[subprocess.Popen], console: Console,
          signalled: list[int] | None = None, items: progress.ViewItems = None,
          said: progress.Said | None = None) -> list[int]:
    """Show the live view (progress.View) until every worker exits (read-only: the parent writes
    nothing to the storage). Each worker shows from its start, as ``starting`` until it claims an
    item. Once ``signalled`` holds a signal, workers get STOP_WAIT_S to stop, then SIGKILL."""
    signalled = signalled if signalled is not None else []
    study = open_study(study_name, stores, read_only=True)
    view = progress.View(study, console, [(worker_id(p.pid), p.poll) for p in procs], items, said=said)
    stop_by: float | None = None
    with view:
        while any(p.poll() is None for p in procs):
            try:
                view.poll()
            except Exception:  # a storage that cannot be read now: the next look tries again
                pass
            if signalled and stop_by is None:
                stop_by = time.monotonic() + STOP_WAIT_S
            if stop_by is not None and time.monotonic() > stop_by:
                for p in procs:
                    if p.poll() is None:
                        p.kill()
            _until_exit(procs, min(progress.POLL_S, 0.5) if signalled else progress.POLL_S)
        try:
            view.poll()  # the last look: what the workers left (nothing RUNNING after a clean stop)
        except Exception:
            pass
    return [p.wait() for p in procs]
