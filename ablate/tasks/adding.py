"""The adding problem (Hochreiter & Schmidhuber 1997; Le et al. 2015), as classification.

Each step has two features: a value drawn from U[0, 1] (standardised when loaded) and a marker,
1 at exactly two steps (one in each half of the sequence), 0 elsewhere. The original target is
the sum of the two marked values, a regression; here it is the sum's bin among ``num_bins``
equally likely bins (edges from the sum's triangular distribution), so the metric is accuracy
and chance is 1 / ``num_bins``. More bins demand more precision (10 bins: about ±0.05 near 1).
"""

from __future__ import annotations

import math
import random

import numpy as np
from pydantic import Field

from ablate.tasks.data import BuildContext, Generated
from ablate.tasks.registration import register_task
from ablate.tasks.synthetic import Example, SyntheticParams, disjoint_splits, stack


class AddingParams(SyntheticParams):
    seq_len: int = Field(100, ge=2, le=1_000_000, description="steps per sequence (Le et al.: 100 … 1000)")
    num_bins: int = Field(10, ge=2, le=1000, description="equally likely classes of the sum")

    def sequence_length(self) -> int:
        return self.seq_len

    def data_shape(self) -> tuple[int, int, int]:
        return self.train_size + self.val_size + self.test_size, self.seq_len, 2  # value and marker


def bin_edges(num_bins: int) -> np.ndarray:
    """Inner edges splitting the sum of two U[0, 1] into ``num_bins`` equally likely bins."""
    q = np.arange(1, num_bins) / num_bins
    return np.where(q <= 0.5, np.sqrt(2 * q), 2 - np.sqrt(2 * (1 - q)))


def label(total: np.ndarray, num_bins: int) -> np.ndarray:
    return np.searchsorted(bin_edges(num_bins), total, side="right")


def sample(rng: np.random.Generator, p: AddingParams, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` raw inputs (n, seq_len, 2): value in [0, 1), marker in {0, 1}; and the bin labels."""
    half = p.seq_len // 2
    rows = np.arange(n)
    x = np.zeros((n, p.seq_len, 2), dtype=np.float32)
    x[..., 0] = rng.random((n, p.seq_len), dtype=np.float32)
    first = rng.integers(0, half, size=n)
    second = rng.integers(half, p.seq_len, size=n)
    x[rows, first, 1] = 1.0
    x[rows, second, 1] = 1.0
    total = x[rows, first, 0].astype(np.float64) + x[rows, second, 0]
    return x, label(total, p.num_bins)


@register_task("adding", AddingParams, version=1)
def build(p: AddingParams, ctx: BuildContext) -> Generated:
    def draw(rng: np.random.Generator, _py: random.Random, n: int) -> list[Example]:
        return list(zip(*sample(rng, p, n), strict=True))

    splits = disjoint_splits(p, draw, ctx.reporter, chunk=max(1, min(1_000, 1_000_000 // p.seq_len)))
    return Generated(
        splits={s: stack(ex, np.float32, np.int16) for s, ex in splits.items()},
        input_kind="continuous",
        input_dim=2,
        num_classes=p.num_bins,
        output_kind="classification",
        x_shift=[0.5, 0.0],
        x_scale=[1 / math.sqrt(12), 1.0],
    )
