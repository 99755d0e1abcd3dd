"""Parity: is the number of ones in a bit string odd? A classic test of state tracking: the
answer depends on every bit, and a linear recurrence must hold the count mod 2 for the whole
sequence (a rotation by π per one does it exactly; a decaying diagonal forgets).

Tokens: 1 is a zero bit, 2 a one bit (0 is ablate's padding id); the label is the parity.
"""

from __future__ import annotations

import random

import numpy as np
from pydantic import Field

from ablate.tasks.data import BuildContext, Generated
from ablate.tasks.registration import register_task
from ablate.tasks.synthetic import Example, SyntheticParams, disjoint_splits, stack


class ParityParams(SyntheticParams):
    """The parity of a random bit string of ``seq_len`` bits."""

    seq_len: int = Field(16, ge=2, le=100_000, description="bits per sequence")
    p_one: float = Field(0.5, gt=0.0, lt=1.0, description="probability of a one bit")

    def sequence_length(self) -> int:
        return self.seq_len


@register_task("parity", ParityParams, version=1)
def build(p: ParityParams, ctx: BuildContext) -> Generated:
    def draw(rng: np.random.Generator, _py: random.Random, n: int) -> list[Example]:
        bits = (rng.random((n, p.seq_len)) < p.p_one).astype(np.uint8)
        return list(zip(bits + 1, bits.sum(1) % 2, strict=True))

    splits = disjoint_splits(p, draw, ctx.reporter)
    return Generated(
        splits={s: stack(ex, np.uint8, np.int16) for s, ex in splits.items()},
        input_kind="tokens",
        vocab_size=3,
        num_classes=2,
        output_kind="classification",
    )
