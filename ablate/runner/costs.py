"""What a trial of each cell will take: a cost model from the cell's shape, corrected by the
trials measured (``ablate.runner.progress`` prices its ETA with it).

``trial_cost`` counts a trial's work from its cell's config — layers, width, state, sequence
length, batch, and the training loop's counts of steps and validation passes
(``ablate.schedule``) — in relative units; ``cell_costs`` turns units into seconds with what the
finished trials took (a per-trial overhead and a rate per unit), each cell at its own finished
trials' time once it has some. So a study's first, cheap cells price its expensive ones by their
shapes, not by their own seconds per step.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from ablate.runner.timings import TRIAL_OVERHEAD_S

# Finished trials a rate or a cell's own time is the median of (the latest).
RECENT = 20
# Finished trials the machine's pace now is the median of, where the cells' timings are known:
# two or three rounds of a 2-worker run, so that a load that came or went shows within minutes.
PACE_RECENT = 6
# The cost model's units: a layer's work per position grows with width × (width + state) over this
# (a small model's step is mostly per-layer overhead, not arithmetic); a validation pass's example
# costs a third of a training one (forward only); a sequential recurrence (tanh, relu, a dense state
# matrix) twice a scan's, and torch's GRU and LSTM loops 2.5 times (a step of each against RotRNN's,
# benchmarks/bench_models.py at d 64, 2 layers, 1 thread: tanh 1.6× at L 64 and 2.2× at L 512, dense
# 1.5× and 1.8×, GRU 2.6× and 5.0×, LSTM 2.7× and 2.1×; their ETA was priced as a scan's, a third of
# the truth, until a trial of theirs had finished).
WIDTH_REF = 8192.0
FORWARD_SHARE = 1 / 3
SEQUENTIAL = 2.0
TORCH_LOOP = {"gru": 2.5, "lstm": 2.5}


def _length(task: dict[str, Any]) -> int:
    """The task's sequence length (its parameters' ``sequence_length``), else its length settings."""
    try:
        from ablate.tasks.registry import task_params_model

        return int(task_params_model(task["name"]).model_validate(
            {k: v for k, v in task.items() if k != "name"}).sequence_length())
    except Exception:  # a plug-in without one, a task of an older version: its declared length
        return int(next((task[k] for k in ("max_length", "seq_len", "length") if isinstance(task.get(k), int)), 64))


_COSTS: dict[str, float] = {}


def trial_cost(config: dict[str, Any], probes: Any = None) -> float:
    """A trial's work in the cost model's units (relative: ``cell_costs`` turns them into seconds):
    per example and step, (layers + 1) × sequence length × (1 + width·(width + state)/WIDTH_REF)
    — one more layer for the embedding, the head and the optimiser — times the batch and the steps,
    plus its validation passes (``ablate.schedule``'s counts, the final one and the test split) over
    the validation split at FORWARD_SHARE."""
    from ablate.schedule import Schedule

    key = json.dumps([config, probes], sort_keys=True, default=str)
    if key not in _COSTS:
        model, task, train = config.get("model", {}), config.get("task", {}), config.get("train", {})
        width = int(model.get("d_model", 64))
        state = int(model.get("state_dim", width))
        per_example = (int(model.get("layers", 1)) + 1) * _length(task) * (1.0 + width * (width + state) / WIDTH_REF)
        if model.get("family") in TORCH_LOOP:
            per_example *= TORCH_LOOP[model["family"]]
        elif model.get("nonlinearity", "none") not in ("none", None) or model.get("parameterisation") == "dense":
            per_example *= SEQUENTIAL
        when = Schedule.of(train, probes)
        passes = when.count("validates") + when.count("checks") + 2
        if len(_COSTS) > 1024:
            _COSTS.clear()
        _COSTS[key] = per_example * (when.steps * int(train.get("batch_size", 32))
                                     + passes * int(task.get("val_size", 1000)) * FORWARD_SHARE)
    return _COSTS[key]


def cell_costs(units: dict[str, float], timed: Sequence[tuple[str, float, float]],
               moving: Sequence[tuple[str, float, float]] = (), seconds: bool = False) -> dict[str, float]:
    """Seconds of one trial of each cell of ``units`` (cell id → ``trial_cost``): the median of its
    own finished trials (``timed``: cell id, wall seconds, the share of its steps it ran); else an
    overhead plus a rate per unit measured on every finished trial — a least-squares line once their
    costs differ by half, else the median rate over a default overhead — or, before any finished, the
    running ones' pace (``moving``: cell id, seconds so far, share of its steps done). Empty before
    anything was measured.

    ``seconds``: the units are each cell's seconds as ``ablate plan --estimate`` timed it on this
    machine (``timings``), so the cells' ratios are known and only the machine's pace now is not:
    each cell at its units times the latest finished trials' wall per unit (``PACE_RECENT``). A
    cell's own trials of an hour ago priced it at the pace of then: lru_ablations' tanh cell, timed
    beside a test suite at 2–3× its quiet wall, was priced so an hour after the suite ended, its
    ETA 1h29m with 51 minutes left."""
    own: dict[str, list[float]] = {}
    points = []
    for cell, wall, share in timed:
        if cell in units and share > 0:
            points.append((units[cell] * share, wall))
            if share >= 1.0:
                own.setdefault(cell, []).append(wall)
    if seconds and points:
        pace = float(np.median([w / u for u, w in points[-PACE_RECENT:]]))
        return {cell: pace * u for cell, u in units.items()}
    if points:
        u, w = np.array([p[0] for p in points[-200:]]), np.array([p[1] for p in points[-200:]])
        overhead = min(TRIAL_OVERHEAD_S, 0.5 * float(w.min()))  # at most half the shortest trial
        per_unit = float(np.median((w - overhead) / u))
        if len(u) >= 3 and u.max() >= 1.5 * u.min():
            slope, intercept = np.polyfit(u, w, 1)
            if slope > 0 and 0 <= intercept <= w.min():
                overhead, per_unit = float(intercept), float(slope)
    else:
        paced = [elapsed / (units[cell] * share) for cell, elapsed, share in moving if cell in units and share > 0]
        if not paced:
            return {}
        overhead, per_unit = 0.0, float(np.median(paced))
    return {cell: float(np.median(own[cell][-RECENT:])) if cell in own else overhead + per_unit * u
            for cell, u in units.items()}
