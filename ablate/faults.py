"""Fault injection, to test recovery end to end with real processes: ``ABLATE_FAULT``.

    ABLATE_FAULT=kind@where[,kind@where...]

``where`` is a training step (an integer) or a named point of an item's life, in this order:

    flip        the item's trial was just flipped RUNNING; its heartbeat thread has not started
                (a kill there must not strand it: see queue.claim)
    claim       the item was just claimed (RUNNING), inside the claim's critical section (a
                signal there takes effect when the section ends); nothing else is done yet
    open_run    its MLflow run was just created; the trial has not yet recorded the run's id
    checkpoint  a checkpoint is about to be written
    record      training ended; nothing of the result is recorded yet (the MLflow run's results
                are written next, then the Optuna trial)
    commit      the MLflow run holds the results, and Optuna is about to record the trial (the
                commit point), inside the record's critical section
    committed   Optuna recorded the trial; the MLflow run is not yet marked finished
    extend      the trial is recorded and its MLflow run ended; a study training until converged
                has not yet queued the run's extension (``ablate.runner.study.extend_runs``)
    settle      every item is finished and the trials' runs are ended; the study's MLflow parent
                run is about to be ended (``ablate.runner.study.settle_runs``)
    settled     the parent run is ended; the mark that says so is not yet written
    look        a sequential study's look was analysed and its state written; its next seeds are
                not queued yet (``ablate.runner.sequential_looks.advance``)

``kind``:

    error    RuntimeError (a bug)
    oom      torch.OutOfMemoryError (only without gradient accumulation, so the retry succeeds)
    slow     0.2 s per step from that step on (a step only: a trial long enough to signal or kill)
    pause    wait ``ABLATE_FAULT_PAUSE_S`` seconds (default 2): the moment for a test's signal
    kill     SIGKILL this process (kill -9 at exactly that point)
    enospc   OSError ENOSPC, as a full disk raises it

At a named point a fault fires once per process (a retry in the same worker then passes); at a
step, every time the step is reached (``oom`` excepted, as above). Before firing, the process
writes its pid to the file ``ABLATE_FAULT_MARK`` names, if set, so a test knows it got there.
"""

from __future__ import annotations

import errno
import os
import signal
import time
from functools import lru_cache

POINTS = ("flip", "claim", "open_run", "checkpoint", "record", "commit", "committed", "extend", "settle", "settled",
          "look")
KINDS = ("error", "oom", "slow", "pause", "kill", "enospc")
_fired: set[tuple[str, str]] = set()


@lru_cache(maxsize=8)
def _parse(text: str) -> tuple[tuple[str, str], ...]:
    faults = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        kind, _, where = part.partition("@")
        if kind not in KINDS or not (where in POINTS or where.isdigit()):
            raise ValueError(f"ABLATE_FAULT: {part!r} is not kind@where with kind one of {', '.join(KINDS)} "
                             f"and where a step or one of {', '.join(POINTS)}")
        faults.append((kind, where))
    return tuple(faults)


def inject(where: str | int, accumulate: int = 1) -> None:
    """Fire the faults ``ABLATE_FAULT`` sets at ``where`` (a named point or a training step)."""
    text = os.environ.get("ABLATE_FAULT", "")
    if not text:
        return
    for kind, at in _parse(text):
        if isinstance(where, int):
            if not at.isdigit():
                continue
            if kind == "slow" and where >= int(at):
                time.sleep(0.2)
            if int(at) != where or kind == "slow" or (kind == "oom" and accumulate != 1):
                continue
        elif at != where or (kind, at) in _fired:
            continue
        else:
            _fired.add((kind, at))
        _fire(kind, str(where))


def _fire(kind: str, where: str) -> None:
    mark = os.environ.get("ABLATE_FAULT_MARK")
    if mark:
        with open(mark, "w") as f:
            f.write(str(os.getpid()))
    if kind == "pause":
        time.sleep(float(os.environ.get("ABLATE_FAULT_PAUSE_S", "2")))
    elif kind == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif kind == "enospc":
        raise OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)} (injected at {where})")
    elif kind == "error":
        raise RuntimeError(f"injected fault at {'step ' if where.isdigit() else ''}{where}")
    elif kind == "oom":
        import torch

        raise torch.OutOfMemoryError(f"injected out-of-memory at step {where}")
