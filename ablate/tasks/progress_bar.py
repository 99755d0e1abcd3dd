"""A progress bar that appears only when generation turns out to take a while."""

from __future__ import annotations

import sys
import time
from types import TracebackType

DELAY_S = 2.0


class Reporter:
    """Counts work done; shows a rich progress bar once ``delay`` seconds have passed.

    Builders call ``stage(description, total)`` then ``advance(n)``; quick generations print
    nothing. ``enabled=False`` silences it entirely (tests, non-interactive workers may set it).
    """

    def __init__(self, title: str, *, delay: float = DELAY_S, enabled: bool = True):
        self.title = title
        self.delay = delay
        self.enabled = enabled
        self._start = time.monotonic()
        self._progress = None  # rich.progress.Progress once shown
        self._task = None
        self._description = title
        self._total: float | None = None
        self._done = 0.0

    def stage(self, description: str, total: float | None) -> None:
        self._description = f"{self.title}: {description}"
        self._total = total
        self._done = 0.0
        if self._progress is not None:
            self._task = self._progress.add_task(self._description, total=total)
        self._maybe_show()

    def advance(self, n: float = 1) -> None:
        self._done += n
        if self._progress is not None:
            self._progress.update(self._task, advance=n)
        else:
            self._maybe_show()

    def _maybe_show(self) -> None:
        if not self.enabled or self._progress is not None:
            return
        if time.monotonic() - self._start < self.delay:
            return
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
            console=Console(file=sys.stderr),
        )
        self._progress.start()
        self._task = self._progress.add_task(self._description, total=self._total, completed=self._done)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def __enter__(self) -> Reporter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
