"""One process that imports what a worker needs once and forks ``ablate run``'s local workers.

    ablate run --workers K  ──▶  zygote: imports torch, MLflow, numba (preload.MODULES)
                                   ├─ fork ─▶ worker 1: ``ablate worker STUDY --device …`` from its
                                   ├─ fork ─▶ worker 2   command line on, with its own log and pid
                                   └─ …

A worker imports seconds of modules before its first claim; K workers started apart paid them K
times, on cores they share with training (issue 43: a fresh run's start-up, both cores busy). The
zygote pays once. ``runner/forking.py`` (the run's side: started before queueing, so that its
imports overlap the queueing, and asked for the workers by runner/pool.py) runs it as
``python -m ablate.zygote FD NAME [--cpu] [--sql]``: requests on its stdin, one JSON line per worker
(``{"argv": [...], "env": {...}, "log": path or null}``, null: write to the run's terminal), their end meaning
no more; reports on descriptor FD, ``started PID`` per fork, then ``exited PID CODE`` (Popen's
returncode: negative for a signal) as each worker ends. It exits once every worker has.

It ignores SIGINT and SIGTERM: the run forwards those to the workers, and a group's signal (Ctrl-C,
a scheduler's SIGTERM) must not end the zygote before the workers it reports on. Not
multiprocessing's forkserver for that reason too (a killed server leaves every running worker
reading as exited), and because its children import the parent's ``__main__`` (``ablate.cli``, its
consoles bound to the terminal before the worker's log replaces it).
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import random
import signal
import sys
import traceback
from typing import Any, NoReturn

# Blocked from before a fork until the child has its own handlers: a signal the run forwards to a
# worker it has just been told of (it arrived while the workers were starting) waits for them.
# Ignored, as the zygote ignores them, it was lost, and that worker trained the whole study.
STOPS = {signal.SIGINT, signal.SIGTERM}


def _child(request: dict[str, Any], report_fd: int) -> NoReturn:
    """A worker, from the fork on: its descriptors, signals and random state its own, then
    ``ablate worker`` as its command line says; never returns."""
    code = 1
    try:
        os.close(report_fd)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPS)  # one sent since the fork is delivered here
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        if request.get("log"):
            os.dup2(null, 1)
            log = os.open(request["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            os.dup2(log, 2)
            os.close(log)
        os.close(null)
        os.environ.clear()
        os.environ.update(request["env"])
        random.seed()  # the zygote's state would otherwise be every worker's
        with contextlib.suppress(Exception):  # `ps -o comm`, top: which process is a worker (Linux)
            import ctypes

            ctypes.CDLL(None).prctl(15, b"ablate-worker")  # PR_SET_NAME
        sys.argv = ["ablate", *request["argv"]]
        from ablate import cli

        cli.main()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
    except KeyboardInterrupt:  # a SIGINT before the worker's own handlers: stopped, not failed
        code = 128 + signal.SIGINT
    except BaseException:  # noqa: BLE001 - the worker's own handlers print theirs; this is what escaped them
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


def main() -> None:
    """The zygote: ``python -m ablate.zygote FD NAME [--cpu] [--sql]`` (NAME: for ``ps``; ``--cpu``:
    some worker trains on the CPU, its scan kernels are loaded here; ``--sql``: MLflow's SQL store
    is imported too)."""
    report = os.fdopen(int(sys.argv[1]), "w", buffering=1)
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)
    from ablate.runner import preload

    preload.import_modules("--sql" in sys.argv[3:])
    if "--cpu" in sys.argv[3:]:  # CPU workers' scan kernels, loaded without running one (no torch op before a fork)
        with contextlib.suppress(Exception):  # else each worker loads them (or fails in the item that needs them)
            from ablate.ops import scan_numba

            scan_numba.load_kernels()
    import ablate.runner.launch  # noqa: F401  (what `ablate worker` runs; not ablate.cli: its consoles look at the terminal)

    # Frozen, the imports' objects are never walked by a worker's collector, and so stay shared
    # with the zygote's pages instead of being copied into each worker's. Not collected first: the
    # imports' few cyclic leftovers cost a worker nothing (shared pages); a full pass delayed every
    # worker's fork by 0.2 s of CPU (0.3 s of wall on busy cores).
    gc.freeze()
    running = 0
    for line in sys.stdin:
        signal.pthread_sigmask(signal.SIG_BLOCK, STOPS)
        pid = os.fork()
        if pid == 0:
            _child(json.loads(line), report.fileno())
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPS)
        running += 1
        with contextlib.suppress(OSError):  # the run was killed: the workers go on without it
            report.write(f"started {pid}\n")
    while running:
        pid, status = os.wait()
        running -= 1
        with contextlib.suppress(OSError):
            report.write(f"exited {pid} {os.waitstatus_to_exitcode(status)}\n")
    # Without the interpreter's teardown of torch, MLflow and numba: seconds on busy cores, during
    # which the run (which reaps the zygote) would wait for a process with nothing left to do.
    with contextlib.suppress(OSError):
        report.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
