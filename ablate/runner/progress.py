"""What a study is doing right now, read from its storage: counts, running items, an ETA."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from datetime import datetime

import optuna
from optuna.trial import TrialState
from rich.console import Group
from rich.table import Table
from rich.text import Text

from ablate.runner import queue
from ablate.runner.study import counts


@dataclass
class Running:
    worker: str
    cell: str
    seed: int
    phase: str
    step: int
    steps: int
    started: datetime | None


@dataclass
class Snapshot:
    done: int
    failed: int
    running: int
    waiting: int
    new: int
    mean_seconds: float | None
    items: list[Running] = field(default_factory=list)

    @property
    def remaining(self) -> int:
        return self.running + self.waiting + self.new

    def eta_seconds(self, workers: int) -> float | None:
        if self.mean_seconds is None:
            return None
        return self.mean_seconds * self.remaining / max(1, workers)


def snapshot(study: optuna.Study) -> Snapshot:
    c = counts(study)
    seconds = [e.user_attrs["seconds"] for e in queue.entries(study, keys=("seconds",), states=(TrialState.COMPLETE,))
               if "seconds" in e.user_attrs]
    running = [
        Running(
            worker=str(t.user_attrs.get("worker", "?")),
            cell=str(t.user_attrs.get("cell_label", "?")),
            seed=int(t.user_attrs.get("seed", -1)),
            phase=str(t.user_attrs.get("phase", "")),
            step=int(t.user_attrs.get("step", 0)),
            steps=int(t.user_attrs.get("config", {}).get("train", {}).get("steps", 0)),
            started=t.datetime_start,
        )
        for t in queue.trials(study, states=(TrialState.RUNNING,))
    ]
    return Snapshot(c["done"], c["failed"], c["running"], c["waiting"], c["new"],
                    statistics.fmean(seconds) if seconds else None, running)


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def table(name: str, snap: Snapshot, workers: int) -> Group:
    """Totals and ETA on a line of their own (a table title would wrap at the table's width when
    few items run), then a rich table with one row per running item, if any."""
    title = (f"{name}: {snap.done} done · {snap.running} running · {snap.waiting + snap.new} waiting · "
             f"{snap.failed} failed · ETA {_duration(snap.eta_seconds(workers))}")
    tab = Table()
    for col in ("worker", "cell", "seed", "phase", "step", "elapsed"):
        tab.add_column(col, justify="right" if col in ("seed", "step", "elapsed") else "left")
    now = datetime.now()
    for r in sorted(snap.items, key=lambda r: r.worker):
        elapsed = (now - r.started).total_seconds() if r.started else None
        tab.add_row(r.worker, r.cell, str(r.seed), r.phase, f"{r.step}/{r.steps}", _duration(elapsed))
    return Group(Text(title), tab) if snap.items else Group(Text(title))
