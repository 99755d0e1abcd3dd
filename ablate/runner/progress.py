"""What a study is doing right now, read from its storage: counts, running items, an ETA, and the
live view of ``ablate run`` (a table on a terminal, one line per event in a pipe or log file).

The view shows what the store says: a running item is a RUNNING trial with its worker, cell,
step (recorded by the worker's heartbeat within a few seconds) and last validation metrics. The
only thing it adds is the local worker processes the pool started (``Slot``), so that a worker
shows from its start, before it has claimed anything.

ETA: seconds per training step measured on the latest finished trials (the median of wall time
from claim to finish over steps, so per-trial overheads are included and one slow warm-up does
not dominate), or on the running ones before any finished; times the steps left (the running
items' remaining steps, then the waiting items at the mean steps per item), spread over the
workers, and never less than the longest running item's remainder. Each cell's steps are
priced at that cell's own rate once one of its trials finished or runs, the study's otherwise:
cells of one study can differ twofold per step (a sequential tanh recurrence, four layers).
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import optuna
from optuna.trial import TrialState
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from ablate.design import Item
from ablate.runner import queue
from ablate.runner.study import DROPPED, counts

# Seconds between two looks at the store, and between status lines in a pipe when nothing happens.
POLL_S = 1.0
QUIET_LINE_S = 60.0
RECENT = 20  # finished trials the seconds per step are measured on


@dataclass
class Running:
    worker: str
    cell: str
    seed: int
    phase: str
    step: int
    steps: int
    started: datetime | None
    number: int = -1
    last_val: dict[str, float] = field(default_factory=dict)  # accuracy, loss, bpc, … and their step
    cell_id: str = ""

    def elapsed(self, now: datetime | None = None) -> float | None:
        return ((now or datetime.now()) - self.started).total_seconds() if self.started else None


@dataclass
class Snapshot:
    done: int
    failed: int
    running: int
    waiting: int
    new: int
    seconds_per_step: float | None  # measured: finished trials, else running ones; None before any
    items: list[Running] = field(default_factory=list)
    mean_steps: float | None = None  # steps per item, over the items seen (finished and running)
    taken: datetime = field(default_factory=datetime.now)
    cell_rates: dict[str, float] = field(default_factory=dict)  # cell id → its own seconds per step
    waiting_cells: list[str] = field(default_factory=list)  # the cell id of each waiting item

    @property
    def remaining(self) -> int:
        return self.running + self.waiting + self.new

    @property
    def total(self) -> int:
        return self.done + self.failed + self.remaining

    def eta_seconds(self, workers: int) -> float | None:
        """Seconds until every item is finished with ``workers`` workers; 0 when nothing is left,
        None before anything was measured."""
        if not self.remaining:
            return 0.0
        if self.seconds_per_step is None:
            return None
        def rate(cell: str) -> float:
            return self.cell_rates.get(cell, self.seconds_per_step)

        running = [max(0, r.steps - r.step) * rate(r.cell_id) for r in self.items]
        left = self.waiting + self.new  # items not claimed yet; "new" ones have no trial, so no cell
        known = self.waiting_cells[:left]
        per_step = sum(rate(c) for c in known) + (left - len(known)) * self.seconds_per_step
        queued = (self.mean_steps or 0.0) * per_step
        return max(max(running, default=0.0), (sum(running) + queued) / max(1, workers))


def _rate(measured: Sequence[tuple[float, int]]) -> float:
    """Seconds per step of finished trials: the median over the latest."""
    return statistics.median(wall / n for wall, n in measured[-RECENT:])


def _pace(moving: Sequence[tuple[float, int]]) -> float:
    """Seconds per step of running trials: their time so far over their steps so far."""
    return sum(e for e, _ in moving) / sum(n for _, n in moving)


def snapshot(study: optuna.Study, items: Sequence[Item] | None = None) -> Snapshot:
    """The study now; with ``items`` (the spec's) counted over those alone, so that the trials of
    cells the spec no longer has (orphans of an earlier version) are neither done nor waiting."""
    c = counts(study, list(items) if items is not None else None)
    keys = {i.key for i in items} if items is not None else None
    finished = queue.entries(study, keys=("steps", "cell_id"), states=(TrialState.COMPLETE,))
    running = [
        Running(
            worker=str(t.user_attrs.get("worker", "?")),
            cell=str(t.user_attrs.get("cell_label", "?")),
            seed=int(t.user_attrs.get("seed", -1)),
            phase=str(t.user_attrs.get("phase", "")),
            step=int(t.user_attrs.get("step", 0)),
            steps=int(t.user_attrs.get("config", {}).get("train", {}).get("steps", 0)),
            started=t.datetime_start,
            number=t.number,
            last_val=dict(t.user_attrs.get("last_val") or {}),
            cell_id=str(t.user_attrs.get("cell_id", "")),
        )
        for t in queue.trials(study, states=(TrialState.RUNNING,))
    ]
    timed = [(str(e.user_attrs.get("cell_id", "")), (e.finished - e.started).total_seconds(), e.user_attrs["steps"])
             for e in finished
             if e.started and e.finished and isinstance(e.user_attrs.get("steps"), int) and e.user_attrs["steps"] > 0]
    measured = [(wall, n) for _, wall, n in timed]
    by_cell: dict[str, list[tuple[float, int]]] = {}
    for cell, wall, n in timed:
        by_cell.setdefault(cell, []).append((wall, n))
    now = datetime.now()
    # Before a trial finished: the running items' own pace, start-up included (an overestimate).
    moving: dict[str, list[tuple[float, int]]] = {}
    for r in running:
        if r.step > 0:
            moving.setdefault(r.cell_id, []).append((r.elapsed(now) or 0.0, r.step))
    if measured:  # the median of the latest: a worker's first trial also pays its warm-up
        rate: float | None = _rate(measured)
    else:
        rate = _pace([m for ms in moving.values() for m in ms]) if moving else None
    cell_rates = {cell: _pace(ms) for cell, ms in moving.items()} | {cell: _rate(ms) for cell, ms in by_cell.items()}
    waiting: dict[str, str] = {}
    for e in queue.entries(study, keys=("item", "cell_id", DROPPED), states=(TrialState.WAITING,)):
        if e.user_attrs.get("item") and not e.user_attrs.get(DROPPED) and (keys is None or e.user_attrs["item"] in keys):
            waiting.setdefault(e.user_attrs["item"], str(e.user_attrs.get("cell_id", "")))
    seen = [n for _, n in measured] + [r.steps for r in running if r.steps]
    return Snapshot(c["done"], c["failed"], c["running"], c["waiting"], c["new"], rate, running,
                    statistics.fmean(seen) if seen else None, now, cell_rates, list(waiting.values()))


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def summary_line(name: str, snap: Snapshot, workers: int) -> str:
    """Totals and the ETA on one line (a terminal's view and a log's status lines alike)."""
    return (f"{name}: {snap.done} done · {snap.running} running · {snap.waiting + snap.new} waiting · "
            f"{snap.failed} failed · ETA {duration(snap.eta_seconds(workers))}")


def _val(r: Running) -> str:
    acc = r.last_val.get("accuracy")
    return f"{acc:.3f} @{int(r.last_val.get('step', 0))}" if isinstance(acc, int | float) else ""


@dataclass
class Slot:
    """A local worker process of the pool: shown from its start, before it claims anything."""

    worker: str  # as the worker records itself on its trials (worker.worker_id)
    state: str  # starting, idle, exited N
    since: float = field(default_factory=time.monotonic)


def table(name: str, snap: Snapshot, workers: int, slots: Sequence[Slot] = ()) -> Group:
    """Totals and ETA on a line of their own, then one row per running item and per local worker
    without one (starting, idle, exited)."""
    tab = Table()
    for col in ("worker", "cell", "seed", "phase", "step", "val acc", "elapsed"):
        tab.add_column(col, justify="right" if col in ("seed", "step", "val acc", "elapsed") else "left",
                       no_wrap=col in ("worker", "step", "elapsed"))
    now = datetime.now()
    busy = {r.worker for r in snap.items}
    for r in sorted(snap.items, key=lambda r: r.worker):
        tab.add_row(r.worker, r.cell, str(r.seed), r.phase, f"{r.step}/{r.steps}", _val(r), duration(r.elapsed(now)))
    for s in slots:
        if s.worker not in busy:
            tab.add_row(s.worker, Text(f"({s.state})", style="dim"), "", "", "", "",
                        duration(time.monotonic() - s.since))
    title = Text(summary_line(name, snap, workers))
    return Group(title, tab) if tab.row_count else Group(title)


def status_json(name: str, snap: Snapshot, workers: int) -> dict[str, Any]:
    """The snapshot as plain data (``ablate status --json``)."""
    now = datetime.now()
    return {
        "study": name,
        "counts": {"done": snap.done, "running": snap.running, "waiting": snap.waiting + snap.new,
                   "failed": snap.failed, "total": snap.total},
        "eta_seconds": snap.eta_seconds(workers),
        "seconds_per_step": snap.seconds_per_step,
        "running": [{"trial_number": r.number, "worker": r.worker, "cell": r.cell, "seed": r.seed, "phase": r.phase,
                     "step": r.step, "steps": r.steps, "elapsed_seconds": r.elapsed(now), "last_val": r.last_val}
                    for r in snap.items],
    }


# --- the live view -------------------------------------------------------------------------------


#: What a live view counts: the spec's items, or a function of the study giving them at each poll.
ViewItems = Sequence[Item] | Callable[[optuna.Study], Sequence[Item]] | None


class View:
    """``ablate run``'s view of a study while its workers run. Each ``poll`` reads the store and
    prints one line per event since the last (an item started, finished or failed); on a terminal
    a table of the workers and running items stays below those lines, refreshed; elsewhere (a
    pipe, a SLURM log) a status line follows when nothing happened for a minute. ``close`` prints
    the last state and ends with a newline.

    ``workers``: the local worker processes as (worker id, a callable giving its exit code or
    None while it runs), shown from their start; ``items``: the spec's, what the totals count — or a
    function of the study giving them at each poll (a sequential study: its looks add seeds)."""

    def __init__(self, study: optuna.Study, console: Console,
                 workers: Sequence[tuple[str, Callable[[], int | None]]] = (),
                 items: ViewItems = None) -> None:
        self.study, self.console, self.items = study, console, items
        self.name = study.study_name
        self.procs = list(workers)
        self.slots = [Slot(worker, "starting") for worker, _ in self.procs]
        self.live: Live | None = None
        self.started: set[int] = set()
        # Finished before this view began: not events of this run.
        self.finished = {e.number for e in queue.entries(study, states=(TrialState.COMPLETE, TrialState.FAIL))}
        self.since = datetime.now() - timedelta(seconds=5)
        self.last_line = time.monotonic()
        self.snap: Snapshot | None = None
        self.closed = False
        self._lock = threading.Lock()

    def __enter__(self) -> View:
        if self.console.is_terminal:
            self.live = Live(console=self.console, refresh_per_second=4, transient=False)
            self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def workers(self) -> int:
        alive = sum(code() is None for _, code in self.procs)
        return max(1, alive)

    def _update_slots(self, snap: Snapshot) -> None:
        running = {r.worker for r in snap.items}
        for slot, (_, code) in zip(self.slots, self.procs, strict=True):
            exit_code = code()
            if exit_code is not None:
                if not slot.state.startswith("exited"):
                    slot.state, slot.since = f"exited {exit_code}", time.monotonic()
            elif slot.worker in running:
                slot.state = "running"
            elif slot.state == "running":
                slot.state, slot.since = "idle", time.monotonic()

    def poll(self) -> Snapshot:
        with self._lock:
            items = self.items(self.study) if callable(self.items) else self.items
            snap = self.snap = snapshot(self.study, items)
            self._update_slots(snap)
            workers = self.workers()
            for line in self._events(snap, workers):
                self._say(line)
            if self.live is not None:
                self.live.update(table(self.name, snap, workers, self.slots), refresh=True)
            elif time.monotonic() - self.last_line > QUIET_LINE_S:
                self._say(summary_line(self.name, snap, workers))
            return snap

    @contextmanager
    def following(self, every: float = POLL_S) -> Iterator[View]:
        """Poll in a background thread while the body runs (a worker in this process); a failed
        look at the store is skipped, never raised into the worker."""
        stop = threading.Event()

        def loop() -> None:
            while not stop.wait(every):
                try:
                    self.poll()
                except Exception:
                    continue

        thread = threading.Thread(target=loop, daemon=True)
        with self:
            thread.start()
            try:
                yield self
            finally:
                stop.set()
                thread.join()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            snap = self.poll()
        except Exception:  # the store went away: the last state shown stays the last word
            snap = None
        if self.live is not None:
            self.live.__exit__(None, None, None)
            self.live = None
        elif snap is not None:
            self._say(summary_line(self.name, snap, self.workers()))

    def _say(self, line: str) -> None:
        self.console.print(line, highlight=False, markup=False, soft_wrap=True)
        self.last_line = time.monotonic()

    def _events(self, snap: Snapshot, workers: int) -> list[str]:
        lines = []  # finishes first: within one look, an item usually ended before the next began
        cutoff, self.since = self.since, snap.taken - timedelta(seconds=5)  # overlap: clocks and commits
        keys = ("cell_label", "seed", "phase", "val_accuracy", "test_accuracy", "failure_kind", "failure_message")
        for e in queue.entries(self.study, keys=keys, states=(TrialState.COMPLETE, TrialState.FAIL),
                               finished_after=cutoff):
            if e.number in self.finished:
                continue
            self.finished.add(e.number)
            a = e.user_attrs
            name = f"{a.get('cell_label')} · seed {a.get('seed')}"
            wall = (e.finished - e.started).total_seconds() if e.finished and e.started else None
            if e.state == TrialState.COMPLETE:
                scores = "".join(f"{label} {a[k]:.3f} · " for k, label in (("val_accuracy", "val acc"),
                                                                             ("test_accuracy", "test acc"))
                                 if isinstance(a.get(k), int | float))
                lines.append(f"done {name}: {scores}{duration(wall)} · {snap.done}/{snap.total} done · "
                             f"ETA {duration(snap.eta_seconds(workers))}")
            else:
                message = " ".join(str(a.get("failure_message") or "").split())
                lines.append(f"{a.get('failure_kind') or 'failed'} {name}: {message}")
        for r in snap.items:
            if r.number not in self.started and r.worker != "?":  # "on ?" until the worker records itself
                self.started.add(r.number)
                lines.append(f"start {r.cell} · seed {r.seed} ({r.phase}, trial {r.number}) on {r.worker}")
        return lines
