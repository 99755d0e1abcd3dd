"""The ETA by claim groups (ablate/runner/eta.py), on synthetic runs: no store, no clock."""

from __future__ import annotations

import numpy as np
import pytest

from ablate.runner import eta
from ablate.runner.eta import Running, Snapshot

STEPS = 100


def test_a_fused_group_costs_less_than_its_items_apart_and_a_lone_one_trains_with_a_twin():
    assert eta.fused_cost(1) == 1.0 and 1.0 < eta.fused_cost(4) < 4.0
    assert eta.fused_cost(1, fuse=8) == eta.fused_cost(2) > eta.fused_cost(1)


def test_claim_groups_are_a_workers_overlapping_trials_of_one_cell():
    spans = [
        ("w1", "A/replicate", 0.0, 20.0), ("w1", "A/replicate", 0.2, 20.1), ("w1", "A/replicate", 0.4, 19.9),
        ("w2", "A/replicate", 0.1, 20.0),  # the same cell, claimed at once by another worker: its own group
        ("w1", "B/replicate", 20.5, 30.0), ("w1", "B/replicate", 30.2, 40.0),  # one after another: apart
        ("?", "C/replicate", 0.0, 5.0), ("?", "C/replicate", 0.0, 5.0),  # no worker recorded: each alone
    ]
    groups = eta.claim_groups(spans)
    assert [groups.count(g) for g in groups] == [3, 3, 3, 1, 1, 1, 1, 1]
    assert eta.claim_groups([]) == []


def test_in_flight_groups_a_workers_items_and_lets_an_unrecorded_one_join_its_cell():
    items = [("w1", "A", 5, 10), ("w1", "A", 5, 10), ("?", "A", 0, 10), ("w2", "B", 1, 10), ("?", "C", 0, 10)]
    assert sorted(map(sorted, eta.in_flight(items))) == [[0, 1, 2], [3], [4]]


def test_makespan_hands_the_waiting_out_in_claim_groups():
    one = lambda cell, k: 10.0 * eta.fused_cost(k)  # noqa: E731
    # 2 idle workers, 4 cells of 4 seeds, groups of up to 8: a cell a claim, two at once.
    assert eta.makespan([], 2, ["A"] * 4 + ["B"] * 4 + ["C"] * 4 + ["D"] * 4, one, 8) == pytest.approx(
        2 * one("A", 4))
    # Items one at a time (K = 1): 16 items on 2 workers.
    assert eta.makespan([], 2, ["A"] * 16, one, 1) == pytest.approx(8 * 10.0)
    # The last cell's 4 seeds and 2 idle workers: split 2 and 2 (fused.share), not 4 on one.
    assert eta.makespan([], 2, ["A"] * 4, one, 8) == pytest.approx(one("A", 2))
    # A group in flight keeps its worker: the other takes the waiting cell now.
    assert eta.makespan([30.0], 2, ["A"] * 4, one, 8) == pytest.approx(30.0)
    assert eta.makespan([30.0, 5.0], 2, [], one, 8) == 30.0


def fused_run(workers: int = 2, cells: int = 4, seeds: int = 4, fuse: int = 8,
              seed: int = 0) -> list[tuple[int, int, float, float]]:
    """A made-up study run by ``workers`` workers that claim a cell's seeds as one fused group
    (as ``fused.room`` and ``fused.share`` do): each cell's items alone take 10–14 s (±10% noise),
    a group of k ``fused_cost(k, fuse)`` times that (one alone trains with a twin). At each group's end: (done, total, the snapshot's
    ETA, the true time left)."""
    rng = np.random.default_rng(seed)
    lone = {f"c{i}": 12.0 * rng.uniform(0.9, 1.1) for i in range(cells)}
    queued = [f"c{i}" for i in range(cells) for _ in range(seeds)]
    # Truth: the same claim rule the estimator assumes, with the cells' true costs.
    free, groups, pos = [0.0] * workers, [], 0
    while pos < len(queued):
        w = min(range(workers), key=free.__getitem__)
        t, cell = free[w], queued[pos]
        idle = sum(f <= t for i, f in enumerate(free) if i != w)
        k = min(fuse, -(-(len(queued) - pos) // (1 + idle)), queued[pos:].count(cell))
        wall = lone[cell] * eta.fused_cost(k, fuse) * rng.uniform(0.95, 1.05)
        groups.append((f"w{w}", cell, k, t, t + wall))
        free[w] = t + wall
        pos += k
    makespan = max(end for *_, end in groups)
    out = []
    for now in sorted({end for *_, end in groups})[:-1]:
        finished = [g for g in groups if g[4] <= now]
        running = [g for g in groups if g[3] <= now < g[4]]
        items = [Running(w, cell, s, "replicate", int(STEPS * (now - start) / (end - start)), STEPS, None,
                         cell_id=cell) for w, cell, k, start, end in running for s in range(k)]
        # What the snapshot measures: each finished trial's wall brought to one alone, per step.
        rates = {cell: (end - start) / eta.fused_cost(k, fuse) / STEPS for _, cell, k, start, end in finished}
        done = sum(k for *_, k, _, _ in finished)
        waiting = queued[sum(k for *_, k, _, _ in finished + running):]
        snap = Snapshot(done, 0, len(items), len(waiting), 0, float(np.median(list(rates.values()))), items,
                        STEPS, cell_rates=rates, waiting_cells=waiting, fuse=max(k for _, _, k, _, _ in groups))
        out.append((done, len(queued), snap.eta_seconds(workers), makespan - now))
    return out


@pytest.mark.parametrize("shape", [(2, 4, 4), (2, 6, 3), (3, 5, 8), (2, 3, 10)])
def test_the_eta_of_a_fused_run_is_near_the_truth_at_every_finish(shape):
    """Item 7 of the P1 probe: priced per item, a 2×2 study of 4 seeds on 2 workers read 1m46s
    with 30 s left, then 0m00s with a group running. By claim groups the ETA is within 15% of
    the true time left at every group's end (cells a fifth apart in cost, walls ±5%)."""
    workers, cells, seeds = shape
    runs = [r for s in range(3) for r in fused_run(workers, cells, seeds, seed=s)]
    assert len(runs) >= 3
    for done, total, got, left in runs:
        assert got is not None and abs(got - left) <= 0.15 * left + 0.5, (done, total, got, left)


def test_an_item_counted_once_per_group_not_once_per_seed():
    """Two groups of 4 in flight on 2 workers, 8 seeds waiting in 2 cells: the work left is 2 +
    2 group walls over 2 workers, not 16 items' walls (each item carries its group's wall)."""
    items = [Running(w, c, s, "replicate", 50, STEPS, None, cell_id=c) for w, c in (("w1", "A"), ("w2", "B"))
             for s in range(4)]
    rate = 0.1  # seconds a step, alone
    snap = Snapshot(0, 0, 8, 8, 0, rate, items, STEPS, waiting_cells=["C"] * 4 + ["D"] * 4, fuse=4)
    group = rate * STEPS * eta.fused_cost(4)
    assert snap.eta_seconds(2) == pytest.approx(group / 2 + group)
