"""The copying-memory task (Hochreiter & Schmidhuber 1997; Arjovsky et al. 2016).

``num_tokens`` data tokens, then ``delay`` − 1 blanks and a delimiter, then ``num_tokens``
blanks during which the data must be reproduced in order. Unlike the original, only those
final positions are scored, so accuracy is not inflated by predicting blanks.

Tokens: 0 padding, 1 blank, 2 delimiter, then ``vocab`` data tokens (the original uses 8).
"""

from __future__ import annotations

import numpy as np
from pydantic import Field

from ablate.tasks.data import IGNORE, BuildContext, Generated
from ablate.tasks.registration import register_task
from ablate.tasks.synthetic import SyntheticParams, per_step_token_task

BLANK = 1
DELIMITER = 2
FIRST = 3


class DelayedCopyParams(SyntheticParams):
    num_tokens: int = Field(10, ge=1, description="data tokens to remember")
    delay: int = Field(100, ge=1, le=1_000_000, description="steps from the last data token to the delimiter")
    # Each token is a row of the embedding and output layers: bounded as associative_recall's vocab_size.
    vocab: int = Field(8, ge=2, le=1_000_000, description="distinct data tokens")

    def sequence_length(self) -> int:
        return self.seq_len

    @property
    def vocab_size(self) -> int:
        return FIRST + self.vocab

    @property
    def seq_len(self) -> int:
        return 2 * self.num_tokens + self.delay


def sample(rng: np.random.Generator, p: DelayedCopyParams, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` inputs (n, 2 num_tokens + delay) and targets scored on the last ``num_tokens``."""
    k = p.num_tokens
    data = rng.integers(FIRST, p.vocab_size, size=(n, k))
    x = np.full((n, p.seq_len), BLANK, dtype=np.int64)
    x[:, :k] = data
    x[:, k + p.delay - 1] = DELIMITER
    y = np.full((n, p.seq_len), IGNORE, dtype=np.int64)
    y[:, -k:] = data
    return x, y


@register_task("delayed_copy", DelayedCopyParams, version=1)
def build(p: DelayedCopyParams, ctx: BuildContext) -> Generated:
    return per_step_token_task(p, sample, ctx.reporter, width=p.seq_len)
