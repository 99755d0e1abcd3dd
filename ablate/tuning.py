"""Tune-then-replicate, the parts the runner and results share (neither Optuna nor torch).

The protocol (``ablate.design.tune_protocol``) travels with every item of a tuned study. A worker
that claims a tuning item samples a setting (``ablate.runner.phases``, seeded by
``sampler_seed``) and trains ``apply(config, params)``; a worker that claims a replicate item of
a cell whose tuning is over trains ``apply(config, best(...))``.
"""

from __future__ import annotations

import copy
import hashlib
import math
from typing import Any

from ablate.spec import set_path


def apply(config: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """``config`` with each dotted path of ``params`` set (the config is not modified)."""
    out = copy.deepcopy(config)
    for path, value in params.items():
        set_path(out, path, value)
    return out


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
