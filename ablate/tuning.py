"""Tune-then-replicate, the parts the runner and results share (neither Optuna nor torch).

The protocol (``ablate.design.tune_protocol``) travels with every item of a tuned study. A worker
that claims a tuning item samples a setting (``ablate.runner.phases``, seeded by
``sampler_seed``) and trains ``apply(config, params)``; a worker that claims a replicate item of
a cell whose tuning is over trains ``apply(config, best(...))``.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import math
from typing import Any

from ablate.spec import set_path


def apply(config: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """``config`` with each dotted path of ``params`` set (the config is not modified)."""
    out = copy.deepcopy(config)
    for path, value in params.items():
        set_path(out, path, value)
    return out


def grid_point(space: dict[str, dict[str, Any]], index: int) -> dict[str, Any]:
    """The ``index``-th combination of the space's choices (the first dimension varies slowest),
    the setting of tuning trial ``index`` under the grid sampler. By index rather than Optuna's
    GridSampler, which picks an unvisited point at random from the history it sees: two workers
    sampling one cell at once see the same history, and a point could run twice, another never."""
    choices = [dim["choices"] for dim in space.values()]
    combos = list(itertools.product(*choices))
    if not 0 <= index < len(combos):
        raise IndexError(f"grid trial {index} of {len(combos)} combinations")
    return dict(zip(space, combos[index], strict=True))


def sampler_seed(cell_id: str, index: int) -> int:
    """A stable seed per (cell, tuning trial): reproducible samples, different across trials."""
    return int(hashlib.sha256(f"{cell_id}/{index}".encode()).hexdigest()[:8], 16)


def best(results: list[tuple[int, dict[str, Any], float]], direction: str) -> tuple[int, dict[str, Any]] | None:
    """(index, params) of the best finished tuning trial; ties go to the lowest index."""
    finite = [(i, p, v) for i, p, v in results if isinstance(v, int | float) and math.isfinite(v)]
    if not finite:
        return None
    sign = -1.0 if direction == "maximize" else 1.0
    i, params, _ = min(finite, key=lambda r: (sign * r[2], r[0]))
    return i, params
