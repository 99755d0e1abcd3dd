"""What a study is doing right now, read from its storage: counts, running items, an ETA, and the
live view of ``ablate run`` (a table on a terminal, one line per event in a pipe or log file).

The view shows what the store says: a running item is a RUNNING trial with its worker, cell,
step (recorded by the worker's heartbeat within a few seconds) and last validation metrics. The
only thing it adds is the local worker processes the pool started (``Slot``), so that a worker
shows from its start, before it has claimed anything.

The ETA and what it is priced from: ``ablate.runner.eta``; the countdown shown, and when it rises:
``ablate.runner.countdown``.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from ablate import tuning
from ablate.design import Item
from ablate.runner import eta, phases, queue
from ablate.runner.countdown import FINISHING, NOTHING_LEFT, eta_text, eta_words, next_eta
from ablate.runner.eta import Running, Snapshot
from ablate.runner.items import DROPPED, counts
from ablate.terminal import count, duration

# Seconds between two looks at the store, and between status lines in a pipe when nothing happens.
POLL_S = 1.0
QUIET_LINE_S = 60.0
ATTEMPT = "attempt"  # whose start it is: copies queued before queue.ATTEMPT_ATTRS hold their predecessor's


def snapshot(study: optuna.Study, items: Sequence[Item] | None = None) -> Snapshot:
    """The study now; with ``items`` (the spec's) counted over those alone, so that the trials of
    cells the spec no longer has (orphans of an earlier version) are neither done nor waiting."""
    c = counts(study, list(items) if items is not None else None)
    keys = {i.key for i in items} if items is not None else None
    # The cells' configs price their trials (``trial_cost``): the spec's items', else the trials' own.
    configs = {i.cell.id: i.cell.config for i in items} if items is not None else {}
    extra = ("config",) if items is None else ()
    finished = queue.entries(study, keys=("steps", "cell_id", "phase", "worker", *extra), states=(TrialState.COMPLETE,))
    running = [
        Running(
            worker=str(t.user_attrs.get("worker", "?")) if t.user_attrs.get(ATTEMPT, t.number) == t.number else "?",
            cell=str(t.user_attrs.get("cell_label", "?")),
            seed=int(t.user_attrs.get("seed", -1)),
            phase=str(t.user_attrs.get("phase", "")),
            step=int(t.user_attrs.get("step", 0)),
            steps=int(t.user_attrs.get("config", {}).get("train", {}).get("steps", 0)),
            started=t.datetime_start,
            number=t.number,
            last_val=dict(t.user_attrs.get("last_val") or {}),
            cell_id=str(t.user_attrs.get("cell_id", "")),
            resumed_at=int(t.user_attrs.get("resumed_at") or 0),
            begun=ATTEMPT in t.user_attrs,
            params=tuning.setting_of(t.user_attrs),
            ended=bool(t.user_attrs.get("ended")),
        )
        for t in queue.trials(study, states=(TrialState.RUNNING,))
    ]
    # In the order they finished (the store's is the queue's): the latest measure the pace now.
    spans = sorted(((e.user_attrs, e.started, e.finished) for e in finished
                    if e.started and e.finished and isinstance(e.user_attrs.get("steps"), int)
                    and e.user_attrs["steps"] > 0), key=lambda span: span[2])
    # A fused group's trials each last the group's wall: brought to one trial's alone (``eta``), of
    # the steps of its longest trial (one that stopped early is frozen in the group, which trains on:
    # priced at its own steps, every early stop read as a dearer step, and a cell of twice the work
    # as one of the same, since a group's trials all take one wall whatever their steps).
    groups = eta.claim_groups([(str(a.get("worker", "")), f"{a.get('cell_id')}/{a.get('phase')}", start.timestamp(),
                                end.timestamp()) for a, start, end in spans])
    size, longest = Counter(groups), {}
    for (a, _, _), g in zip(spans, groups, strict=True):
        longest[g] = max(longest.get(g, 0), a["steps"])
    flights = eta.in_flight([(r.worker, f"{r.cell_id}/{r.phase}", r.step, r.steps) for r in running])
    running_k = {r: len(g) for g in flights for r in g}
    fuse = max([*size.values(), *running_k.values(), 1])
    timed = [(str(a.get("cell_id", "")), (end - start).total_seconds() / eta.fused_cost(size[g], fuse), longest[g])
             for (a, start, end), g in zip(spans, groups, strict=True)]
    shares = [eta.fused_cost(running_k[i], fuse) for i in range(len(running))]
    measured = [(wall, n) for _, wall, n in timed]
    by_cell: dict[str, list[tuple[float, int]]] = {}
    for cell, wall, n in timed:
        by_cell.setdefault(cell, []).append((wall, n))
    now = datetime.now()
    # Before a trial finished: the running items' own pace, start-up included (an overestimate).
    moving: dict[str, list[tuple[float, int]]] = {}
    for i, r in enumerate(running):
        if r.step > 0:
            moving.setdefault(r.cell_id, []).append(((r.elapsed(now) or 0.0) / shares[i], r.step))
    # The median of the latest (a worker's first trial also pays its warm-up), else the running pace.
    rate = eta.rate(measured) if measured else eta.pace([m for ms in moving.values() for m in ms]) if moving else None
    cell_rates = {cell: eta.pace(ms) for cell, ms in moving.items()} | {cell: eta.rate(ms) for cell, ms in by_cell.items()}
    waiting: dict[str, str] = {}
    for e in queue.entries(study, keys=("item", "cell_id", DROPPED, *extra), states=(TrialState.WAITING,)):
        if e.user_attrs.get("item") and not e.user_attrs.get(DROPPED) and (keys is None or e.user_attrs["item"] in keys):
            waiting.setdefault(e.user_attrs["item"], str(e.user_attrs.get("cell_id", "")))
            if isinstance(e.user_attrs.get("config"), dict):
                configs.setdefault(str(e.user_attrs.get("cell_id", "")), e.user_attrs["config"])
    for e in finished:
        if isinstance(e.user_attrs.get("config"), dict):
            configs.setdefault(str(e.user_attrs.get("cell_id", "")), e.user_attrs["config"])
    for t in queue.trials(study, states=(TrialState.RUNNING,)) if items is None else ():
        configs.setdefault(str(t.user_attrs.get("cell_id", "")), t.user_attrs.get("config", {}))
    new_cells: list[str] = []
    if items is not None and c["new"]:
        queued = {e.user_attrs.get("item") for e in queue.entries(study, keys=("item",))}
        new_cells = [i.cell.id for i in items if i.key not in queued]
    costs = eta.trial_costs(configs, timed, running, shares, now)
    seen = [n for _, n in measured] + [r.steps for r in running if r.steps]
    return Snapshot(c["done"], c["failed"], c["running"], c["waiting"], c["new"], rate, running,
                    statistics.fmean(seen) if seen else None, now, cell_rates, list(waiting.values()),
                    costs, new_cells, fuse)


def summary_line(name: str, snap: Snapshot, workers: int) -> str:
    """Totals and the ETA on one line (a terminal's view and a log's status lines alike)."""
    return (f"{name}: {snap.done} done · {snap.running} running · {snap.waiting + snap.new} waiting · "
            f"{snap.failed} failed · {eta_text(snap, workers)}")


def _val(r: Running) -> str:
    acc = r.last_val.get("accuracy")
    return f"{acc:.3f} @{int(r.last_val.get('step', 0))}" if isinstance(acc, int | float) else ""


@dataclass
class Slot:
    """A local worker process of the pool: shown from its start, before it claims anything."""

    worker: str  # as the worker records itself on its trials (worker.worker_id)
    state: str  # starting, idle, exited N
    since: float = field(default_factory=time.monotonic)
    stopping: bool = False  # a signal reached it (its item was re-queued ``interrupted``): it runs nothing more


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
        # Claimed a moment ago: its worker records itself with the item's start (not a "?" worker).
        who: str | Text = r.worker if r.worker not in ("", "?") else Text(UNRECORDED, style="dim")
        step = f"{r.step}/{r.steps}" + (" ended" if r.ended else "")  # waits for its fused group to end
        tab.add_row(who, r.cell, str(r.seed), _phase([r]), step, _val(r), duration(r.elapsed(now)))
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
        "workers_running": len({r.worker for r in snap.items}),  # 0: the ETA is one worker's, were one started
        "seconds_per_step": snap.seconds_per_step,
        "running": [{"trial_number": r.number, "worker": r.worker, "cell": r.cell, "seed": r.seed, "phase": r.phase,
                     "params": r.params, "step": r.step, "steps": r.steps, "ended": r.ended,
                     "elapsed_seconds": r.elapsed(now), "last_val": r.last_val}
                    for r in snap.items],
    }


# --- the live view -------------------------------------------------------------------------------
#
# A frame of the view is a pure function of the store's snapshot, the local worker slots, the
# previous frame and the clock (``frame``), so that what it may show can be checked frame by
# frame: one row per worker, a done counter that only moves forward, and an ETA that counts down
# between frames unless it says why it rose (``Frame.eta_note``).

# Workers of other processes (another host's, a killed run's) shown as rows of their own; more are counted on a line.
OTHER_ROWS = 8
# A running item's worker before it recorded itself (it does with the item's start, just after the claim).
UNRECORDED = "(starting)"
# Seconds a terminal keeps the reason of an ETA's rise beside it.
NOTE_S = 15.0
# Seconds a started item's line waits for the rest of its claim group to record themselves.
HOLD_S = 5.0


@dataclass(frozen=True)
class Row:
    """One worker: the item it runs, or its state (``starting``, ``idle``, ``exited N``)."""

    worker: str
    cell: str = ""
    seed: str = ""
    phase: str = ""
    step: str = ""
    val: str = ""
    elapsed: str = ""
    state: str = ""  # set when the worker runs nothing


@dataclass(frozen=True)
class Frame:
    """What the view shows at one moment (``at``: the clock's seconds)."""

    at: float
    done: int
    total: int
    running: int
    waiting: int
    failed: int
    workers: int
    eta: float | None
    eta_note: str = ""  # why the ETA rose since the previous frame; empty when it did not
    rows: tuple[Row, ...] = ()
    others: int = 0  # workers of other processes running items without a row of their own
    logged: int = 0  # the done count a log has shown (finish lines carry it), at most ``done``
    overdue: bool = False  # the ETA ran out with work left: unknown ("?") until an item finishes
    # The latest rise's reason and when it was given: a terminal keeps showing it for NOTE_S.
    kept_note: str = ""
    noted: float | None = None
    halt: str = ""  # "stopping", "stopped": nothing of this run will take what is left (``_halt``): no ETA

    def summary(self, name: str) -> str:
        shown = self.eta_note or self.kept_note
        note = f" ({shown})" if shown and self.shown_eta() != FINISHING else ""
        return (f"{name}: {self.done} done · {self.running} running · {self.waiting} waiting · "
                f"{self.failed} failed · " + (self.halt or f"{self.shown_eta()}{note}"))

    def shown_eta(self) -> str:
        """"ETA 1m05s" (``eta_words``); "nothing left to run" once nothing runs or waits."""
        return eta_words(self.eta, self.running) if self.running or self.waiting else NOTHING_LEFT


def _phase(group: Sequence[Running]) -> str:
    return tuning.phase_words(group[0].phase, [r.params for r in group])


def _item_row(group: Sequence[Running], now: datetime) -> Row:
    """A worker's row: its latest item (the last of ``group``) and those it trains fused with it
    (``--fuse``), their seeds in its seed column; the step and validation of the one furthest on
    (one that stopped early waits, frozen, for the group's longest)."""
    r = max(reversed(group), key=lambda g: g.step)
    shown = sorted({g.seed for g in group})  # tuning trials on one seed differ in their setting (the phase)
    seed = ",".join(map(str, shown[:4])) + (f",…+{len(shown) - 4}" if len(shown) > 4 else "")
    return Row(r.worker, r.cell, seed, _phase(group), f"{r.step}/{r.steps}", _val(r), duration(r.elapsed(now)))


def _fused(items: list[Running]) -> list[Running]:
    """A worker's latest item and those it trains with it as one model: the same cell and phase
    (its older items elsewhere are stale claims awaiting their heartbeat timeout)."""
    latest = items[-1]
    return [r for r in items if (r.cell_id or r.cell) == (latest.cell_id or latest.cell) and r.phase == latest.phase]


def _rows(snap: Snapshot, slots: Sequence[Slot], clock: float) -> tuple[tuple[Row, ...], int]:
    """One row per local worker (its latest running item, else its state), one per other worker
    running something (up to OTHER_ROWS), and how many further workers there are. An item whose
    worker has not recorded itself yet (a moment after its claim) is no worker's: a local row may
    show it already (seeds fused with another item) or a "starting" one stands for it."""
    by_worker: dict[str, list[Running]] = {}
    for r in sorted(snap.items, key=lambda r: r.number):
        if r.worker not in ("", "?"):
            by_worker.setdefault(r.worker, []).append(r)  # the latest last
    rows: list[Row] = []
    for s in slots:
        held = by_worker.pop(s.worker, None)
        if held and not s.state.startswith("exited"):
            rows.append(_item_row(_fused(held), snap.taken))
        else:
            state = "stopping" if s.stopping and not s.state.startswith("exited") else s.state
            rows.append(Row(s.worker, state=state, elapsed=duration(clock - s.since)))
    others = [held for _, held in sorted(by_worker.items())]
    rows += [_item_row(_fused(held), snap.taken) for held in others[:OTHER_ROWS]]
    return tuple(rows), len(others[OTHER_ROWS:])


def _halt(snap: Snapshot, slots: Sequence[Slot]) -> str:
    """"stopping", then "stopped" (they exited, or nothing runs): items are left, every local worker
    was signalled or exited and no other process's runs one, so none runs until a resume; else ""."""
    local, exited = {s.worker for s in slots}, [s.state.startswith("exited") for s in slots]
    if (not slots or not snap.remaining or not all(e or s.stopping for e, s in zip(exited, slots, strict=True))
            or any(r.worker not in local | {"", "?"} for r in snap.items)):
        return ""
    return "stopped" if all(exited) or not snap.running else "stopping"


def frame(snap: Snapshot, slots: Sequence[Slot], prev: Frame | None, clock: float, workers: int,
          finished: Sequence[Finished] = ()) -> Frame:
    """The view's next frame from the store's ``snap``, the local ``slots``, the ``prev`` frame
    and the ``clock`` (monotonic seconds), with ``workers`` workers alive; ``finished``: the
    trials that finished since the previous frame, read before ``snap`` (so that ``snap``
    counts each of them)."""
    done = max(snap.done, prev.done if prev else 0)
    halt = _halt(snap, slots)
    eta, note, overdue = (None, "", False) if halt else next_eta(snap, snap.eta_seconds(workers), done, workers,
                                                                 prev, clock, {s.worker for s in slots})
    # A terminal redraws several times a second: the reason of a rise stays beside it a while, not
    # one frame (a log prints it once, with the rise).
    kept, noted = (note, clock) if note else ("", None)
    left = snap.running + snap.waiting + snap.new  # none: the run's end has no rise left to explain
    if not note and prev is not None and prev.noted is not None and clock - prev.noted < NOTE_S \
            and eta is not None and not overdue and left:
        kept, noted = prev.kept_note, prev.noted
    rows, others = _rows(snap, slots, clock)
    ok = sum(e.ok for e in finished)
    logged = min(done, prev.logged + ok) if prev else done
    return Frame(clock, done, max(snap.total, done), snap.running, snap.waiting + snap.new, snap.failed, workers,
                 eta, note, rows, others, logged, overdue, kept, noted, halt)


def frame_table(name: str, f: Frame) -> Group:
    """A frame on a terminal: its totals and ETA on a line, then its rows."""
    tab = Table()
    for col in ("worker", "cell", "seed", "phase", "step", "val acc", "elapsed"):
        tab.add_column(col, justify="right" if col in ("seed", "step", "val acc", "elapsed") else "left",
                       no_wrap=col in ("worker", "step", "elapsed"))
    for r in f.rows:
        cell: str | Text = Text(f"({r.state})", style="dim") if r.state else r.cell
        tab.add_row(r.worker, cell, r.seed, r.phase, r.step, r.val, r.elapsed)
    parts: list[Any] = [Text(f.summary(name))]
    if tab.row_count:
        parts.append(tab)
    if f.others:
        parts.append(Text(f"and {count(f.others, 'more worker')} of other processes running items of this study "
                          "(another ablate run or ablate worker, on this host or another)", style="dim"))
    return Group(*parts)


@dataclass(frozen=True)
class Finished:
    """A trial that finished since the last look, as a line of the view reports it."""

    label: str  # cell · seed
    ok: bool  # completed (else failed)
    scores: str = ""  # "val acc 0.500 · test acc 0.250 · "
    wall: float | None = None
    kind: str = ""  # a failure's kind
    message: str = ""
    start: str = ""  # its start line, when it started and ended between two looks (none showed it running)
    worker: str = ""


def start_line(cell: str, seed: Any, phase: str, number: int, worker: str, resumed_at: int = 0) -> str:
    """The event line of a trial's start; one that resumes a killed attempt's checkpoint says from where."""
    resumed = f", resumed from its checkpoint at step {resumed_at}" if resumed_at else ""
    return f"start {cell} · seed {seed} ({phase}, trial {number}) on {worker}{resumed}"


def start_attrs(number: int, checkpoint: Path) -> dict[str, int]:
    """What a worker records with the start of trial ``number`` for its start line: that it is this
    trial's (ATTEMPT), and the step a killed attempt's ``checkpoint`` resumes from (an unreadable one: none)."""
    if not checkpoint.exists():
        return {ATTEMPT: number}
    import torch

    try:  # mapped, not read: the step alone is wanted, not every tensor
        step = int(torch.load(checkpoint, mmap=True, weights_only=False)["step"])
    except Exception:
        step = 0
    return {ATTEMPT: number, **({"resumed_at": step} if step else {})}


def event_lines(finished: Sequence[Finished], started: Sequence[Running], f: Frame, prev: Frame | None,
                picked: Sequence[str] = ()) -> list[str]:
    """The lines of one look: each finish and failure (after its start, when no look saw it
    running), the tuned settings those finishes ``picked`` (``View._tuned``), then each start. A finish that moved the done counter carries it (each its own
    number) and the ETA; one that did not (a duplicate attempt, an item outside the spec) carries
    neither, so no count repeats."""
    shown = prev.logged if prev else f.logged - min(f.logged, sum(e.ok for e in finished))
    counted = {id(e): shown + i + 1 for i, e in enumerate([e for e in finished if e.ok][:max(0, f.logged - shown)])}
    lines = []
    for e in finished:
        if e.start:
            lines.append(e.start)
        if not e.ok:
            lines.append(f"{e.kind or 'failed'} {e.label}: {e.message}")
            continue
        tail = ""
        if id(e) in counted:
            tail = f" · {counted[id(e)]}/{f.total} done" + ("" if f.halt else f" · {f.shown_eta()}" + (
                f" ({f.eta_note})" if f.eta_note else ""))
        lines.append(f"done {e.label}: {e.scores}{duration(e.wall)}{tail}")
    return lines + list(picked) + start_lines(started)


def _span(values: Sequence[int]) -> str:
    """"0–3" for a run of consecutive numbers, else "0, 2, 5"."""
    ordered = sorted(values)
    consecutive = ordered == list(range(ordered[0], ordered[0] + len(ordered)))
    return f"{ordered[0]}–{ordered[-1]}" if consecutive else ", ".join(map(str, ordered))


def start_lines(started: Sequence[Running]) -> list[str]:
    """A start line per item, or one per claim group: a worker's items of one cell and phase that
    start in one look train as one model (``--fuse``) and end together ("start A · seeds 0–3
    (replicate, trials 8–11, fused) on w1"); one that resumes a checkpoint has a line of its own."""
    groups: dict[tuple[Any, ...], list[Running]] = {}
    for r in started:
        groups.setdefault((r.worker, r.cell_id or r.cell, r.phase) if not r.resumed_at else (r.number,), []).append(r)
    lines = []
    for group in groups.values():
        r = group[0]
        if len(group) == 1:
            lines.append(start_line(r.cell, r.seed, _phase(group), r.number, r.worker, r.resumed_at))
        else:
            seeds = sorted({g.seed for g in group})  # tuning trials on one seed differ in their setting
            seed = f"seed {seeds[0]}" if len(seeds) == 1 else f"seeds {_span(seeds)}"
            lines.append(f"start {r.cell} · {seed} ({_phase(group)}, trials "
                         f"{_span([g.number for g in group])}, fused) on {r.worker}")
    return lines


def log_lines(name: str, finished: Sequence[Finished], started: Sequence[Running], f: Frame, prev: Frame | None,
              quiet: bool = False, last: str = "", picked: Sequence[str] = ()) -> list[str]:
    """A look's lines in a pipe or log: its events (``event_lines``), then the status line when
    the ETA rose or became unknown and no event line says so, or when ``quiet`` (a minute
    without a line) and nothing else is printed — never the status line printed ``last`` again."""
    lines = event_lines(finished, started, f, prev, picked)
    summary = f.summary(name)
    changed = f.eta_note or f.overdue and not (prev is not None and prev.overdue)
    if summary != last and (changed and not any(" · ETA " in line for line in lines) or quiet and not lines):
        lines.append(summary)
    return lines


#: What a live view counts: the spec's items, or a function of the study giving them at each poll.
ViewItems = Sequence[Item] | Callable[[optuna.Study], Sequence[Item]] | None
Said = Callable[[optuna.Study], Sequence[str]]


class View:
    """``ablate run``'s view of a study while its workers run. Each ``poll`` reads the store,
    makes the next ``Frame`` and prints one line per event since the last (an item started,
    finished or failed); on a terminal the frame's table stays below those lines, refreshed;
    elsewhere (a pipe, a SLURM log) a status line follows when the ETA rose (saying why), and
    at most once a minute when the status changed and nothing else was printed. ``close``
    prints the last state (unless a pipe has it already) and ends with a newline.

    ``workers``: the local worker processes as (worker id, a callable giving its exit code or
    None while it runs), shown from their start; ``items``: the spec's, what the totals count — or a
    function of the study giving them at each poll (a sequential study: its looks add seeds);
    ``said``: a function of the study giving lines to print as they come (a sequential study's looks,
    which any worker process may make); ``clock``: monotonic seconds (a test's fake clock)."""

    def __init__(self, study: optuna.Study, console: Console,
                 workers: Sequence[tuple[str, Callable[[], int | None]]] = (),
                 items: ViewItems = None, clock: Callable[[], float] = time.monotonic,
                 said: Said | None = None) -> None:
        self.study, self.console, self.items, self.clock, self.said = study, console, items, clock, said
        self.name = study.study_name
        self.procs = list(workers)
        self.slots = [Slot(worker, "starting", clock()) for worker, _ in self.procs]
        self.live: Live | None = None
        self.started: set[int] = set()
        self.picked: set[str] = set()  # the cells whose tuned setting was said (``_tuned``)
        self.edge_said = False  # ``phases.EDGE_NOTE``, once
        self.holding: dict[int, float] = {}  # recorded items whose start line waits for their group's (HOLD_S)
        # Finished before this view began: not events of this run.
        self.finished = {e.number for e in queue.entries(study, states=(TrialState.COMPLETE, TrialState.FAIL))}
        self.since = datetime.now() - timedelta(seconds=5)
        self.last_line = clock()
        self.last_summary = ""
        self.snap: Snapshot | None = None
        self.frame: Frame | None = None
        self.closed = False
        self._lock = threading.Lock()

    def __enter__(self) -> View:
        if self.console.is_terminal:
            self.live = Live(console=self.console, refresh_per_second=4, transient=False)
            self.live.__enter__()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        for slot in self.slots if exc_type is not None else ():  # this process's worker stopped (a signal, a store)
            slot.stopping = True
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
                    slot.state, slot.since = f"exited {exit_code}", self.clock()
            elif slot.worker in running:
                slot.state = "running"
            elif slot.state == "running":
                slot.state, slot.since = "idle", self.clock()

    def poll(self) -> Snapshot:
        with self._lock:
            items = self.items(self.study) if callable(self.items) else self.items
            finished = self._finished()  # before the snapshot: it counts every finish reported
            for slot in self.slots:  # its item re-queued "interrupted": a signal reached it, it exits next
                slot.stopping = slot.stopping or any(e.kind == "interrupted" and e.worker == slot.worker for e in finished)
            snap = self.snap = snapshot(self.study, items)
            self._update_slots(snap)
            prev, now = self.frame, self.clock()
            f = self.frame = frame(snap, self.slots, prev, now, self.workers(), finished)
            started, picked = self._started(snap), self._tuned(finished, items)
            if self.live is not None:
                lines = event_lines(finished, started, f, prev, picked)
            else:  # a status line when quiet for a minute, if it says something new
                lines = log_lines(self.name, finished, started, f, prev, now - self.last_line > QUIET_LINE_S,
                                  self.last_summary, picked)
            for line in [*lines, *(self.said(self.study) if self.said else ())]:
                self._say(line)
            if self.live is not None:
                self.live.update(frame_table(self.name, f), refresh=True)
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
            self.poll()
        except Exception:  # the store went away: the last state shown stays the last word
            pass
        if self.live is not None:
            self.live.__exit__(None, None, None)
            self.live = None
        elif self.frame is not None and self.frame.summary(self.name) != self.last_summary:
            self._say(self.frame.summary(self.name))

    def _say(self, line: str) -> None:
        self.console.print(line, highlight=False, markup=False, soft_wrap=True)
        self.last_line = self.clock()
        if self.frame is not None and line == self.frame.summary(self.name):
            self.last_summary = line

    def _tuned(self, finished: Sequence[Finished], items: Sequence[Item] | None) -> list[str]:
        """Once a cell, when a finish ends its tuning: its pick, and whether it lies at an edge (``phases.picks``)."""
        to_come = {i.cell.label for i in items or () if i.phase == "tune"} - self.picked  # an untuned study: none
        new = phases.picks(self.study, items or (), frozenset(self.picked)) if finished and to_come else {}
        self.picked |= set(new)
        edge = [] if self.edge_said or not any(pick.at for pick in new.values()) else [phases.EDGE_NOTE]
        self.edge_said |= bool(edge)
        return [pick.line(cell) for cell, pick in new.items()] + edge

    def _finished(self) -> list[Finished]:
        """Trials finished since the last look (finishes first in a look: within one, an item
        usually ended before the next began)."""
        out = []
        cutoff, self.since = self.since, datetime.now() - timedelta(seconds=5)  # overlap: clocks and commits
        keys = ("cell_label", "seed", "phase", "val_accuracy", "test_accuracy", "failure_kind", "failure_message",
                "worker", "resumed_at", "params", ATTEMPT)
        for e in queue.entries(self.study, keys=keys, states=(TrialState.COMPLETE, TrialState.FAIL),
                               finished_after=cutoff):
            if e.number in self.finished:
                continue
            self.finished.add(e.number)
            a = e.user_attrs
            phase = tuning.phase_words(str(a.get("phase", "")), [tuning.setting_of(a)])
            label = f"{a.get('cell_label')} · seed {a.get('seed')}" + (f" ({phase})" if a.get("phase") == "tune" else "")
            start = ""
            worker = str(a.get("worker") or "") if a.get(ATTEMPT, e.number) == e.number else ""  # else a predecessor's
            if e.number not in self.started and worker not in ("", "?"):  # a trial shorter than a look
                self.started.add(e.number)
                start = start_line(str(a.get("cell_label")), a.get("seed"), phase, e.number, worker,
                                   int(a.get("resumed_at") or 0))
            wall = (e.finished - e.started).total_seconds() if e.finished and e.started else None
            if e.state == TrialState.COMPLETE:
                scores = "".join(f"{name} {a[k]:.3f} · " for k, name in (("val_accuracy", "val acc"),
                                                                          ("test_accuracy", "test acc"))
                                 if isinstance(a.get(k), int | float))
                out.append(Finished(label, True, scores, wall, start=start, worker=worker))
            else:
                message = " ".join(str(a.get("failure_message") or "").split())
                out.append(Finished(label, False, kind=str(a.get("failure_kind") or ""), message=message,
                                    start=start, worker=worker))
        return out

    def _started(self, snap: Snapshot) -> list[Running]:
        """The items whose worker recorded itself since the last look; one whose cell and phase has
        items not started yet (no worker, or named at the claim only) waits for them (HOLD_S at
        most; not at the close): a fused group's members record themselves a moment apart, and are
        one start line (``start_lines``)."""
        out, now = [], self.clock()
        unrecorded = {(r.cell_id or r.cell, r.phase) for r in snap.items
                      if (r.worker in ("", "?") or not r.begun) and r.number not in self.started}
        for r in snap.items:
            if r.number in self.started or r.worker in ("", "?"):
                continue
            first = self.holding.setdefault(r.number, now)
            if (r.cell_id or r.cell, r.phase) in unrecorded and now - first < HOLD_S and not self.closed:
                continue
            self.started.add(r.number)
            self.holding.pop(r.number, None)
            out.append(r)
        return out
