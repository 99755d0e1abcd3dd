"""Induction heads (Olsson et al. 2022; the H3 / Hyena synthetic): complete a seen bigram.

Random tokens fill the sequence; a trigger token appears once at a random position, followed
by a target token; the sequence ends with the trigger again, and the target is the token that
followed it the first time. Only the last position is scored (per-step accuracy).

Tokens: 0 padding, 1 trigger, then ``vocab`` content tokens.
"""

from __future__ import annotations

import numpy as np
from pydantic import Field

from ablate.tasks.data import IGNORE, BuildContext, Generated
from ablate.tasks.registration import register_task
from ablate.tasks.synthetic import SyntheticParams, per_step_token_task

TRIGGER = 1
FIRST = 2


class InductionHeadsParams(SyntheticParams):
    seq_len: int = Field(
        128, ge=4, le=1_000_000, description="tokens per sequence, the final trigger included"
    )
    # Each token is a row of the embedding and output layers: bounded as associative_recall's vocab_size.
    vocab: int = Field(16, ge=2, le=1_000_000, description="distinct content tokens")

    def sequence_length(self) -> int:
        return self.seq_len

    @property
    def vocab_size(self) -> int:
        return FIRST + self.vocab


def sample(rng: np.random.Generator, p: InductionHeadsParams, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` inputs (n, seq_len) and targets scored only at the last position."""
    length = p.seq_len
    rows = np.arange(n)
    x = rng.integers(FIRST, p.vocab_size, size=(n, length))
    where = rng.integers(0, length - 2, size=n)  # the target at where + 1 stays before the end
    x[rows, where] = TRIGGER
    x[:, -1] = TRIGGER
    y = np.full((n, length), IGNORE, dtype=np.int64)
    y[:, -1] = x[rows, where + 1]
    return x, y


@register_task("induction_heads", InductionHeadsParams, version=1)
def build(p: InductionHeadsParams, ctx: BuildContext) -> Generated:
    return per_step_token_task(p, sample, ctx.reporter, width=p.seq_len)
