"""Selective copying (Gu & Dao 2023, Mamba; also minGRU): recall scattered tokens in order.

The first ``seq_len`` positions hold ``num_tokens`` data tokens at random positions among noise
tokens; then ``num_tokens`` copy markers follow, and at the j-th marker the target is the j-th
data token. Only those last ``num_tokens`` positions are scored (per-step accuracy).

Tokens: 0 padding, 1 copy marker, 2 … 1+``noise_vocab`` noise (one "blank" token by default,
as in Mamba), then ``data_vocab`` data tokens. Mamba used ``seq_len=4096``, 16 tokens, 16 symbols.
"""

from __future__ import annotations

import numpy as np
from pydantic import Field, model_validator

from ablate.tasks.data import IGNORE, BuildContext, Generated
from ablate.tasks.registration import register_task
from ablate.tasks.synthetic import SyntheticParams, per_step_token_task

MARKER = 1
NOISE = 2


class SelectiveCopyParams(SyntheticParams):
    seq_len: int = Field(256, ge=2, le=1_000_000, description="length of the region holding the data")
    num_tokens: int = Field(16, ge=1, description="data tokens to copy")
    # Each token is a row of the embedding and output layers: bounded as associative_recall's vocab_size.
    data_vocab: int = Field(16, ge=2, le=1_000_000, description="distinct data tokens")
    noise_vocab: int = Field(1, ge=1, le=1_000_000, description="distinct noise tokens (1: a single blank, as Mamba)")

    def sequence_length(self) -> int:
        return self.seq_len + self.num_tokens

    @model_validator(mode="after")
    def _fits(self) -> SelectiveCopyParams:
        if self.num_tokens > self.seq_len:
            raise ValueError(f"num_tokens ({self.num_tokens}) must not exceed seq_len ({self.seq_len})")
        return self

    @property
    def vocab_size(self) -> int:
        return NOISE + self.noise_vocab + self.data_vocab


def sample(rng: np.random.Generator, p: SelectiveCopyParams, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` inputs (n, seq_len + num_tokens) and per-step targets of the same shape."""
    k, length = p.num_tokens, p.seq_len
    data_start = NOISE + p.noise_vocab
    x = np.empty((n, length + k), dtype=np.int64)
    x[:, :length] = rng.integers(NOISE, data_start, size=(n, length))
    x[:, length:] = MARKER
    positions = np.sort(np.argsort(rng.random((n, length)), axis=1)[:, :k], axis=1)
    tokens = rng.integers(data_start, data_start + p.data_vocab, size=(n, k))
    np.put_along_axis(x, positions, tokens, axis=1)
    y = np.full((n, length + k), IGNORE, dtype=np.int64)
    y[:, length:] = tokens
    return x, y


@register_task("selective_copy", SelectiveCopyParams, version=1)
def build(p: SelectiveCopyParams, ctx: BuildContext) -> Generated:
    return per_step_token_task(p, sample, ctx.reporter, width=p.seq_len)
