"""Signals in a worker: the first SIGINT or SIGTERM interrupts it (``Interrupted``) at once while
it trains, opens a run or waits, and at the end of a claim or of an Optuna record (short critical
sections that a signal must not cut in two). Its item is then failed ``interrupted`` and
re-queued, its MLflow run ended KILLED (runner/worker.py); further signals are ignored, so that
this clean-up completes.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived: the worker stops. ``signum`` is the signal, ``requeued`` the
    labels of the items it re-queued. A KeyboardInterrupt, so that libraries treat it as one
    (SQLAlchemy, for one, then drops the connection it was using)."""

    def __init__(self, signum: int, requeued: list[str] | None = None) -> None:
        super().__init__(signum)
        self.signum, self.requeued = signum, list(requeued or [])


class Signals:
    """SIGINT/SIGTERM → Interrupted in the main thread: at once outside critical sections, at
    their end inside one. Python drops an exception raised while it runs a ``__del__`` or a
    weakref callback, so ``check`` raises it again at the worker's safe points until the worker
    has caught it (``delivered``); later signals add nothing, so clean-up survives a second
    Ctrl-C or a scheduler's repeated SIGTERM. Outside the main thread (no signals) it does nothing."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.delivered = False
        self._critical = 0
        self._counting = threading.Lock()  # the item threads of a fused worker enter sections at once
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> Signals:
        if threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.signal(s, self._handle) for s in SIGNALS}
        return self

    def __exit__(self, *exc: object) -> None:
        for s, handler in self._previous.items():
            # After a signal the process is stopping: a later one (a burst of Ctrl-C, a scheduler's
            # repeated SIGTERM) must not land in a default handler before the caller says what was
            # re-queued and exits.
            signal.signal(s, signal.SIG_IGN if self.signum is not None else handler)

    def _handle(self, signum: int, frame: object) -> None:
        if self.signum is None:
            self.signum = signum
            if not self._critical:
                raise Interrupted(signum)

    def check(self) -> None:
        """Raise Interrupted if a signal came and the worker has not caught its Interrupted."""
        if self.signum is not None and not self.delivered and not self._critical:
            raise Interrupted(self.signum)

    def sleep(self, seconds: float) -> None:
        """time.sleep that a signal ends at once, even one whose Interrupted was dropped."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            self.check()
            time.sleep(min(0.25, left))
        self.check()

    @contextmanager
    def critical(self) -> Iterator[None]:
        """A section a signal must not cut in two (a claim, an Optuna record): its Interrupted
        comes at the end, if the section itself ended normally. Thread-safe: the item threads of a
        fused worker (runner/fused.py) each enter their own; the handler, in the main thread, only
        reads the count."""
        with self._counting:
            self._critical += 1
        try:
            yield
        finally:
            with self._counting:
                self._critical -= 1
        self.check()
