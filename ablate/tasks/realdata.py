"""Shared machinery of the real-data tasks: seeded index splits and standardisation."""

from __future__ import annotations

import math

import numpy as np
from pydantic import Field

from ablate.tasks.registration import TaskParams


class FractionSplitParams(TaskParams):
    val_fraction: float = Field(0.1, gt=0.0, lt=0.5, description="share of examples held out for validation")
    test_fraction: float = Field(0.2, gt=0.0, lt=0.5, description="share of examples held out for testing")


def fraction_split(n: int, seed: int, val_fraction: float, test_fraction: float) -> dict[str, np.ndarray]:
    """Disjoint sorted index sets {train, val, test} of ``range(n)`` from a seeded permutation."""
    order = np.random.default_rng(np.random.SeedSequence([seed, 0])).permutation(n)
    n_test, n_val = round(n * test_fraction), round(n * val_fraction)
    return {
        "train": np.sort(order[n_test + n_val :]),
        "val": np.sort(order[n_test : n_test + n_val]),
        "test": np.sort(order[:n_test]),
    }


def scalar_stats(x: np.ndarray) -> tuple[float, float]:
    """Mean and standard deviation over all entries, for ``x_shift`` / ``x_scale``."""
    if x.dtype == np.uint8:  # exact and cheap: from the histogram of byte values
        counts = np.bincount(x.reshape(-1), minlength=256).astype(np.float64)
        values = np.arange(256, dtype=np.float64)
        mean = float((counts * values).sum() / counts.sum())
        var = float((counts * (values - mean) ** 2).sum() / counts.sum())
    else:
        flat = x.astype(np.float64).reshape(-1)
        mean, var = float(flat.mean()), float(flat.var())
    return mean, math.sqrt(var) or 1.0
