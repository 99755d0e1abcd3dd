"""A running trial's heartbeat: a thread that records a beat every ``HEARTBEAT_S`` seconds (the
silence that tells other processes a worker died, runner/study.py ``recover_stale``) and the
trial's progress (step, last validation metrics) for the live view; it notices when the trial was
taken away (``lost``: another process declared this worker dead).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

import optuna

from ablate.runner import queue
from ablate.runner.queue import HEARTBEAT_S

# Seconds between progress records of a running trial (a small write, only when the step moved).
PROGRESS_S = float(os.environ.get("ABLATE_PROGRESS_S", "2"))


class Heartbeat:
    """Records a heartbeat every HEARTBEAT_S seconds in a thread, and the trial's progress (step,
    last validation metrics) within PROGRESS_S of its changing, so the live view follows.

    Nested for the same trial (work() beats from the claim on, run_item adds the progress), the
    inner one only lends its progress to the outer thread: one beat per trial, not two. ``lost``
    is set when the trial is found no longer RUNNING: another process declared this worker dead."""

    _active: dict[int, Heartbeat] = {}  # trial number -> the outermost heartbeat of this process

    def __init__(self, study: optuna.Study, number: int,
                 step: Callable[[], dict[str, Any]] | None = None) -> None:
        self._stop = threading.Event()
        self._step = step
        self._number = number
        self._outer = Heartbeat._active.get(number)
        self.lost = self._outer.lost if self._outer is not None else threading.Event()
        self._thread = threading.Thread(target=self._beat, args=(study, number), daemon=True)

    def _beat(self, study: optuna.Study, number: int) -> None:
        sent: dict[str, Any] = {}
        last = -float("inf")
        while not self._stop.is_set():
            try:
                step = self._step
                now = step() if step is not None else {}
            except Exception:  # progress is for the view: never a reason to miss a beat
                now = {}
            try:
                changed = {k: v for k, v in now.items() if sent.get(k) != v}
                if changed or time.monotonic() - last >= HEARTBEAT_S:
                    if not queue.beat(study, number, changed or None) and not self._stop.is_set():
                        self.lost.set()
                        return
                    sent.update(changed)
                    last = time.monotonic()
            except Exception:  # a missed beat is tolerated; a long silence is what counts
                pass
            self._stop.wait(min(PROGRESS_S, HEARTBEAT_S))

    def __enter__(self) -> Heartbeat:
        if self._outer is not None:
            self._outer._step = self._step
        else:
            Heartbeat._active[self._number] = self
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._outer is not None:
            self._outer._step = None
            return
        self._stop.set()
        self._thread.join()
        Heartbeat._active.pop(self._number, None)
