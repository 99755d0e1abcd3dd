"""Local worker processes for ``ablate run --workers K``: devices, threads, a live view.

Each worker is an ``ablate worker`` process on the shared study, exactly as on a cluster; this
module only starts them with sensible devices and thread counts and watches the storage.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from rich.console import Console
from rich.live import Live

from ablate.runner import progress
from ablate.runner.study import open_study
from ablate.stores import Stores, home


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


def thread_env(threads: int) -> dict[str, str]:
    """The variables torch (OpenMP), MKL and numba read their thread counts from when they load."""
    return {var: str(threads) for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")}


def threads_per_worker(workers: int) -> int:
    """CPU workers share the cores: oversubscribed BLAS/OpenMP threads make everyone slower."""
    return max(1, (os.cpu_count() or 1) // max(1, workers))


def start(study: str, stores: Stores, device_list: list[str], checkpoint_every: int,
          verbose: bool = False) -> list[subprocess.Popen]:
    procs = []
    threads = threads_per_worker(len(device_list))
    for device in device_list:
        # Stores go by environment, not argv: a URL's password would show in `ps`.
        env = {**os.environ, **thread_env(threads), "ABLATE_STORAGE": stores.storage,
               "ABLATE_TRACKING_URI": stores.tracking}
        cmd = [sys.executable, "-m", "ablate.cli", "worker", study, "--device", device, "--threads", str(threads),
               "--checkpoint-every", str(checkpoint_every)]
        if verbose:
            cmd.append("-v")
        logs = home() / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        # A file, not a pipe: a worker that writes much would block on a full pipe.
        log = open(logs / f"{study}-worker{len(procs)}.log", "ab")  # noqa: SIM115 (lives as long as the process)
        proc = subprocess.Popen(cmd, env=env, stdout=None if verbose else subprocess.DEVNULL,
                                stderr=None if verbose else log)
        proc.log_path = log.name  # type: ignore[attr-defined]
        procs.append(proc)
    return procs


def watch(study_name: str, stores: Stores, procs: list[subprocess.Popen], console: Console) -> list[int]:
    """Show the live table until every worker exits; Ctrl-C forwards SIGINT (items re-queue)."""
    study = open_study(study_name, stores)
    try:
        with Live(console=console, refresh_per_second=2, transient=False) as live:
            while any(p.poll() is None for p in procs):
                live.update(progress.table(study_name, progress.snapshot(study), len(procs)))
                time.sleep(1.0)
            live.update(progress.table(study_name, progress.snapshot(study), len(procs)))
    except KeyboardInterrupt:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
        for p in procs:
            p.wait()
        raise
    codes = []
    for p in procs:
        codes.append(p.wait())
        log = getattr(p, "log_path", None)
        if p.returncode and log:
            with open(log, errors="replace") as f:
                tail = f.read().strip().splitlines()[-5:]
            console.print(f"[red]worker exited with {p.returncode}[/red]; last lines of {log}:")
            for line in tail:
                console.print(f"  {line}", highlight=False, markup=False)
    return codes
