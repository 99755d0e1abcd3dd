"""Multi-query associative recall (MQAR; Arora et al. 2023, zoology).

A sequence opens with ``num_kv_pairs`` key–value bigrams (distinct keys, values drawn with
replacement); every key is then queried once, in random order, at random positions of the
rest of the sequence, which is filled with a blank token. At a query the target is its value;
only query positions are scored. Unlike zoology, the value does not follow the query in the
input, so a bidirectional model cannot read the answer.

Tokens: 0 padding, 1 blank, then keys (the first half of the remaining ids), then values.
"""

from __future__ import annotations

import numpy as np
from pydantic import Field, model_validator

from ablate.tasks.data import IGNORE, BuildContext, Generated
from ablate.tasks.registration import register_task
from ablate.tasks.synthetic import SyntheticParams, per_step_token_task

BLANK = 1
FIRST_KEY = 2


class AssociativeRecallParams(SyntheticParams):
    seq_len: int = Field(64, ge=3, description="tokens per sequence (pairs, then queries among blanks)")
    num_kv_pairs: int = Field(8, ge=1, description="key–value pairs, each queried once")
    vocab_size: int = Field(256, ge=6, le=1_000_000, description="all token ids, padding and blank included")

    def sequence_length(self) -> int:
        return max(self.seq_len, self.num_keys)

    @model_validator(mode="after")
    def _fits(self) -> AssociativeRecallParams:
        if 3 * self.num_kv_pairs > self.seq_len:
            raise ValueError(
                f"seq_len ({self.seq_len}) must hold the pairs and one query per key: "
                f"at least 3 × num_kv_pairs = {3 * self.num_kv_pairs}"
            )
        if self.num_keys < self.num_kv_pairs:
            raise ValueError(
                f"vocab_size ({self.vocab_size}) leaves {self.num_keys} keys for {self.num_kv_pairs} pairs"
            )
        return self

    @property
    def num_keys(self) -> int:
        return (self.vocab_size - FIRST_KEY) // 2

    @property
    def first_value(self) -> int:
        return FIRST_KEY + self.num_keys


def sample(rng: np.random.Generator, p: AssociativeRecallParams, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` inputs (n, seq_len) and targets (values at query positions, ``IGNORE`` elsewhere)."""
    k, length = p.num_kv_pairs, p.seq_len
    rows = np.arange(n)[:, None]
    keys = FIRST_KEY + np.argsort(rng.random((n, p.num_keys)), axis=1)[:, :k]
    values = rng.integers(p.first_value, p.vocab_size, size=(n, k))
    x = np.full((n, length), BLANK, dtype=np.int64)
    x[:, 0 : 2 * k : 2] = keys
    x[:, 1 : 2 * k : 2] = values
    order = np.argsort(rng.random((n, k)), axis=1)
    slots = 2 * k + np.sort(np.argsort(rng.random((n, length - 2 * k)), axis=1)[:, :k], axis=1)
    x[rows, slots] = keys[rows, order]
    y = np.full((n, length), IGNORE, dtype=np.int64)
    y[rows, slots] = values[rows, order]
    return x, y


@register_task("associative_recall", AssociativeRecallParams, version=1)
def build(p: AssociativeRecallParams, ctx: BuildContext) -> Generated:
    return per_step_token_task(p, sample, ctx.reporter, width=max(p.seq_len, p.num_keys))
