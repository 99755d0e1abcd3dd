"""Shared machinery of the synthetic tasks: split sizes and disjoint, seeded splits.

Each split draws from its own random stream (derived from the seed and the split's name), so
the test set does not change when ``train_size`` does. Splits are made disjoint by dropping
any example already drawn for the test, then the validation split.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import numpy as np
from pydantic import Field

from ablate.tasks.data import SPLITS, Generated, target_dtype, token_dtype
from ablate.tasks.progress_bar import Reporter
from ablate.tasks.registration import TaskParams

Example = tuple[np.ndarray, Any]
Sampler = Callable[[np.random.Generator, random.Random, int], list[Example]]
"""``sample(np_rng, py_rng, n)`` returns up to ``n`` examples (input row, target)."""

_STREAM = {"test": 1, "val": 2, "train": 3}
_GIVE_UP_AFTER = 50


class SyntheticParams(TaskParams):
    train_size: int = Field(10_000, ge=1, description="training examples")
    val_size: int = Field(1_000, ge=1, description="validation examples")
    test_size: int = Field(1_000, ge=1, description="test examples")

    def sequence_length(self) -> int:
        """Time steps of the longest example this generates (each task says)."""
        raise NotImplementedError

    def data_shape(self) -> tuple[int, int, int]:
        return self.train_size + self.val_size + self.test_size, self.sequence_length(), 1


def split_rngs(seed: int, split: str) -> tuple[np.random.Generator, random.Random]:
    """Independent numpy and Python generators for one split of one seed."""
    seq = np.random.SeedSequence([seed, _STREAM[split]])
    return np.random.default_rng(seq), random.Random(int(seq.generate_state(2, np.uint64)[0]))


def disjoint_splits(
    params: SyntheticParams, sample: Sampler, reporter: Reporter, *, chunk: int = 1_000
) -> dict[str, list[Example]]:
    """Draw ``{split: examples}`` with no input row in two splits (and none twice in one)."""
    sizes = {"test": params.test_size, "val": params.val_size, "train": params.train_size}
    seen: set[bytes] = set()
    out: dict[str, list[Example]] = {}
    reporter.stage("generating", total=sum(sizes.values()))
    for split in ("test", "val", "train"):
        np_rng, py_rng = split_rngs(params.seed, split)
        examples: list[Example] = []
        barren = 0
        while len(examples) < sizes[split]:
            fresh = 0
            for x, y in sample(np_rng, py_rng, min(chunk, sizes[split] - len(examples))):
                key = np.ascontiguousarray(x).tobytes()
                if key in seen:
                    continue
                seen.add(key)
                examples.append((x, y))
                fresh += 1
                if len(examples) == sizes[split]:
                    break
            reporter.advance(fresh)
            barren = 0 if fresh else barren + 1
            if barren >= _GIVE_UP_AFTER:
                raise ValueError(
                    f"only {len(seen)} distinct examples could be drawn for {sum(sizes.values())} "
                    "requested: the task's parameters allow too few; make sequences longer or the "
                    "vocabulary larger, or ask for fewer examples"
                )
        out[split] = examples
    return {s: out[s] for s in SPLITS}


def stack(examples: list[Example], x_dtype: Any, y_dtype: Any) -> tuple[np.ndarray, np.ndarray]:
    """Equal-length examples as (x, y) arrays in compact dtypes."""
    x = np.stack([e[0] for e in examples]).astype(x_dtype, copy=False)
    y = np.stack([e[1] for e in examples]).astype(y_dtype, copy=False)
    return x, y


def per_step_token_task(params: Any, sample_arrays: Callable[[np.random.Generator, Any, int], tuple[np.ndarray, np.ndarray]],
                        reporter: Reporter, width: int) -> Generated:
    """A per-step token task from a vectorised ``sample_arrays(rng, params, n)`` that returns
    (x, y) arrays of ``n`` rows: disjoint splits drawn in chunks of about 2M tokens (``width``
    tokens a row), stacked in the narrowest dtypes for ``params.vocab_size``."""
    def draw(rng: np.random.Generator, _py: random.Random, n: int) -> list[Example]:
        return list(zip(*sample_arrays(rng, params, n), strict=True))

    splits = disjoint_splits(params, draw, reporter, chunk=max(1, min(1_000, 2_000_000 // width)))
    x_dtype, y_dtype = token_dtype(params.vocab_size), target_dtype(params.vocab_size)
    return Generated(
        splits={s: stack(ex, x_dtype, y_dtype) for s, ex in splits.items()},
        input_kind="tokens",
        vocab_size=params.vocab_size,
        num_classes=params.vocab_size,
        output_kind="per_step",
    )
