"""A study's ETA (``Snapshot.eta_seconds``; ``ablate.runner.progress`` reads the snapshot from
the store and shows it), claim group by claim group: a worker that fuses claims several items of
one cell at once (``--fuse``, runner/fused.py) and trains them as one model, so they start and end
together and their group's wall is shared by its K items, not K times one. Priced item by item
(each item's wall times the items left, over the workers), a study of 2 workers and groups of 4
read 3× its true remainder at a quarter done, then fell to 0m00s with groups still running.

Each finished trial's wall is first brought to what it would take alone (its group's wall over
``fused_cost`` of the group's size, ``claim_groups``), for the steps of its group's longest trial:
a group trains until its last trial stops, those that stopped early frozen in it. A trial alone is
priced by a cost model where the cells' configs are known (``trial_cost``: a trial's work from its
cell's shape — layers, width, state, sequence length, batch — and its counts of steps and
validation passes): at what its own cell's finished trials took, else at the cost model's units
times the seconds per unit the finished trials measured (``cell_costs``); where ``ablate plan
--estimate`` timed every cell here (``timings``), at those seconds times the latest finished
trials' pace, whatever the cell (a load that came or went shows within a few trials); else, before any
finished, at the running ones' pace; without a config, at seconds per training step (the median of
the latest finished trials', each cell at its own rate once one of its trials finished or runs). So
the first, cheap cells do not price the dear ones.

The groups in flight (``in_flight``) keep their worker for their remaining steps; the waiting items
are then handed out as the workers claim them (``makespan``): to whichever worker is free first, the
oldest item and up to K − 1 more of its cell, no more than its share of the waiting split with the
workers idle then (``fused.share``). K is the largest group seen in the study (1 before any). The
ETA is when the last group ends: never less than the longest running group's remainder, and an
item is never split between workers.
"""

from __future__ import annotations

import heapq
import statistics
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ablate.runner import timings
from ablate.runner.costs import RECENT, cell_costs, trial_cost

# A fused group of K items takes 1 + FUSED_EXTRA × (K − 1) times one item's wall: bench_fused on the
# quickstart's shape (ablate/training_fused.py's table) measured K = 4 at 1.89× and K = 8 at 2.17×
# the trials per hour of items apart, i.e. walls of 2.1 and 3.7 lone items (0.37 and 0.38 a further item).
FUSED_EXTRA = 0.37


def fused_cost(k: int, fuse: int = 1) -> float:
    """A group of ``k`` items' wall in units of one item's alone; where the study fuses (``fuse``
    > 1), one item alone trains fused with a twin (runner/fused.py), as two do."""
    return 1.0 + FUSED_EXTRA * (max(2 if fuse > 1 else 1, k) - 1)


def claim_groups(spans: Sequence[tuple[str, str, float, float]]) -> list[int]:
    """Each finished trial's claim group (a number its group's trials share), from (worker,
    cell·phase key, start, end) seconds: the trials of one worker and key whose spans overlap, one
    through another (a worker trains one group at a time, so two of its trials that overlap were
    claimed together; trials one after another never overlap). An unknown worker ("", "?") is a
    group of its own."""
    groups = list(range(len(spans)))
    order = sorted(range(len(spans)), key=lambda i: (spans[i][0], spans[i][1], spans[i][2]))
    head, reach = -1, float("-inf")
    for i in order:
        if head >= 0 and spans[i][:2] == spans[head][:2] and spans[i][0] not in ("", "?") and spans[i][2] <= reach:
            groups[i] = groups[head]
            reach = max(reach, spans[i][3])
        else:
            head, reach = i, spans[i][3]
    return groups


def in_flight(items: Sequence[tuple[str, str, int, int]]) -> list[list[int]]:
    """The claim groups running now, as lists of indices into ``items`` (worker, cell·phase key,
    step, steps): a worker's items of one key are one group; an item whose worker has not recorded
    itself yet ("", "?": a moment after its claim) joins a group of its key, else is one of its own."""
    groups: dict[tuple[str, str], list[int]] = {}
    unknown = []
    for i, (worker, key, _, _) in enumerate(items):
        if worker in ("", "?"):
            unknown.append(i)
        else:
            groups.setdefault((worker, key), []).append(i)
    for i in unknown:
        key = items[i][1]
        home = next((g for (_, k), g in groups.items() if k == key), None)
        if home is not None:
            home.append(i)
        else:
            groups[("?", f"{key}#{i}")] = [i]
    return list(groups.values())


def makespan(busy: Sequence[float], workers: int, queued: Sequence[str | None],
             price: Callable[[str | None, int], float], fuse: int = 1) -> float:
    """When the last item ends: ``busy`` the seconds left of each group in flight (each holds a
    worker), ``workers`` in all (those beyond the groups in flight idle now), ``queued`` the cells of the items not
    claimed yet, oldest first, and ``price(cell, k)`` the wall of a group of k of that cell. The
    worker free first claims the oldest item and up to ``fuse`` − 1 more of its cell, oldest first,
    no more than ceil(waiting / (1 + the other workers idle then)) (``fused.share``)."""
    free = sorted(busy) + [0.0] * max(0, max(1, workers) - len(busy))
    end = max(free, default=0.0)
    if not queued:
        return end
    heapq.heapify(free)
    by_cell: dict[str | None, deque[int]] = {}
    for i, cell in enumerate(queued):
        by_cell.setdefault(cell, deque()).append(i)
    taken = [False] * len(queued)
    head, left = 0, len(queued)
    while left:
        while taken[head]:
            head += 1
        t = heapq.heappop(free)
        cell = queued[head]
        idle = sum(f <= t for f in free)
        k = min(max(1, fuse), -(-left // (1 + idle)) if fuse > 1 else 1)
        mine = by_cell[cell]
        n = 0
        while mine and n < k:
            taken[mine.popleft()] = True
            n += 1
        left -= n
        finish = t + price(cell, n)
        end = max(end, finish)
        heapq.heappush(free, finish)
    return end


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
    resumed_at: int = 0  # the step of a killed attempt's checkpoint it resumed from (0: from the start)
    begun: bool = True  # its worker recorded its start (not only its name, at a fused claim: ``fused.share``)
    params: dict[str, Any] = field(default_factory=dict)  # its tuned setting (a tuning trial's, a tuned replicate's)
    ended: bool = False  # trained to its end (stopped early), its fused group still training

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
    # The cost model's (``cell_costs``): cell id → seconds of one trial; the cell of each item not queued.
    cell_costs: dict[str, float] = field(default_factory=dict)
    new_cells: list[str] = field(default_factory=list)
    fuse: int = 1  # the most items seen claimed as one group (fused): how the waiting ones will be claimed

    @property
    def remaining(self) -> int:
        return self.running + self.waiting + self.new

    @property
    def total(self) -> int:
        return self.done + self.failed + self.remaining

    @property
    def workers(self) -> int:
        """The workers running its items (at least 1): what ``ablate status`` divides the work by."""
        return len({r.worker for r in self.items}) or 1

    def eta_seconds(self, workers: int) -> float | None:
        """Seconds until every item is finished with ``workers`` workers (more where more groups
        run): claim group by claim group (``makespan``); 0 when nothing is left, None before
        anything was measured."""
        if not self.remaining:
            return 0.0
        if self.seconds_per_step is None:
            return None
        study_rate = self.seconds_per_step

        def lone(cell: str | None) -> float:  # one trial of ``cell`` alone, in seconds
            if cell in self.cell_costs:
                return self.cell_costs[cell]
            return self.cell_rates.get(cell or "", study_rate) * (self.mean_steps or 0.0)

        flights = in_flight([(r.worker, f"{r.cell_id}/{r.phase}", r.step, r.steps) for r in self.items])
        busy = []
        for group in flights:
            busy.append(self._left([self.items[i] for i in group], study_rate))
        left = self.waiting + self.new  # items not claimed yet
        known = (self.waiting_cells + self.new_cells)[:left] if self.cell_costs else self.waiting_cells[:left]
        queued: list[str | None] = [*known, *[None] * (left - len(known))]
        return makespan(busy, workers, queued, lambda cell, k: lone(cell) * fused_cost(k, self.fuse), self.fuse)

    def _left(self, group: Sequence[Running], study_rate: float) -> float:
        """Seconds a claim group in flight has left: its wall (a trial alone, ``fused_cost`` of its
        size) less its time since the claim; past that wall, its steps left at its own pace so far
        once a quarter in, else its share of steps left of one more wall. Not its pace before its
        wall has passed: the seconds from the claim to its first step (data, building the fused
        model) make a quarter's pace read a group twice as slow as it runs. Without a claim time,
        its share of steps left of its wall."""
        first = group[0]
        step, steps = max(r.step for r in group), first.steps
        if not steps:
            return 0.0
        alone = (self.cell_costs[first.cell_id] if first.cell_id in self.cell_costs
                 else steps * self.cell_rates.get(first.cell_id, study_rate))
        wall, share = alone * fused_cost(len(group), self.fuse), max(0, steps - step) / steps
        elapsed = max((r.elapsed(self.taken) or 0.0 for r in group), default=0.0) if first.started else None
        if elapsed is None:
            return wall * share
        if wall > elapsed:
            return wall - elapsed
        return elapsed * (steps - step) / step if 4 * step >= steps else wall * share


def rate(measured: Sequence[tuple[float, int]]) -> float:
    """Seconds per step of finished trials: the median over the latest."""
    return statistics.median(wall / n for wall, n in measured[-RECENT:])


def pace(moving: Sequence[tuple[float, int]]) -> float:
    """Seconds per step of running trials: their time so far over their steps so far."""
    return sum(e for e, _ in moving) / sum(n for _, n in moving)


def trial_costs(configs: dict[str, dict[str, Any]], timed: Sequence[tuple[str, float, int]],
                running: Sequence[Running], shares: Sequence[float], now: datetime) -> dict[str, float]:
    """``cell_costs`` from the store's trials: each cell's units, its finished trials' walls (each
    alone: ``fused_cost``) and the share of their cell's steps they ran, the running ones' pace
    (a quarter in at least: a trial's first steps carry its start-up; ``shares``: the ``fused_cost``
    of each one's group)."""
    try:
        trainable = {cell: config for cell, config in configs.items() if config.get("train")}
        # Seconds as ``ablate plan --estimate`` timed each shape here, else the shapes' cost model.
        kept = timings.kept_trial_seconds(trainable)
        units = kept or {cell: trial_cost(config) for cell, config in trainable.items()}
    except Exception:  # a config this version cannot read: no cost model, the rates alone
        return {}

    def share(cell: str, steps: int) -> float:
        total = int(configs.get(cell, {}).get("train", {}).get("steps", 0) or 0)
        return min(1.0, steps / total) if total else 0.0

    moving = [(r.cell_id, (r.elapsed(now) or 0.0) / cost, r.step / r.steps)
              for r, cost in zip(running, shares, strict=True) if r.steps and 4 * r.step >= r.steps]
    return cell_costs(units, [(cell, wall, share(cell, n)) for cell, wall, n in timed], moving, seconds=bool(kept))
