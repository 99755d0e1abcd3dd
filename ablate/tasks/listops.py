"""ListOps (Nangia & Bowman 2018) as in the Long Range Arena: nested MAX / MIN / MED / SM lists.

A tree is drawn as in LRA's generator: below ``max_depth`` a node is an operator with
probability ``op_prob`` (else a digit), an operator takes 2 … ``max_args`` arguments, and trees
whose token count falls outside [``min_length``, ``max_length``] are rejected. The root is
always an operator (LRA rejects digit roots by length anyway). Labels are the value, 0 … 9.

Tokens: 0 padding, 1 … 10 the digits 0 … 9, then ``[MIN [MAX [MED [SM ]``; sequences are
right-padded to the longest one generated (``TaskInfo.seq_len``), not to ``max_length``. LRA's own setting
is ``max_depth=10, max_args=10, min_length=500, max_length=2000`` with 96k/2k/2k examples; the
defaults here are small so a 2-layer model learns something in a few hundred steps.
"""

from __future__ import annotations

import random

import numpy as np
from pydantic import Field, model_validator

from ablate.tasks.data import BuildContext, Generated, pad_sequences
from ablate.tasks.registration import register_task
from ablate.tasks.synthetic import Example, SyntheticParams, disjoint_splits

VOCAB = ("<pad>", *"0123456789", "[MIN", "[MAX", "[MED", "[SM", "]")
TOKEN = {s: i for i, s in enumerate(VOCAB)}
OPERATORS = ("[MIN", "[MAX", "[MED", "[SM")
CLOSE = TOKEN["]"]
DIGIT = [TOKEN[str(d)] for d in range(10)]


class ListOpsParams(SyntheticParams):
    max_depth: int = Field(3, ge=2, le=30, description="deepest nesting; 2 = one flat operator")
    max_args: int = Field(5, ge=2, le=50, description="most arguments of one operator")
    min_length: int = Field(10, ge=3, description="fewest tokens in a sequence")
    max_length: int = Field(100, ge=3, le=20_000, description="most tokens (LRA: 2000)")
    op_prob: float = Field(0.25, gt=0.0, lt=1.0, description="chance that a non-root node is an operator")

    def sequence_length(self) -> int:
        return self.max_length

    @model_validator(mode="after")
    def _lengths(self) -> ListOpsParams:
        if self.min_length > self.max_length:
            raise ValueError(f"min_length ({self.min_length}) must not exceed max_length ({self.max_length})")
        longest = longest_tree(self.max_depth, self.max_args)
        if self.min_length > longest:
            raise ValueError(
                f"min_length ({self.min_length}) is unreachable: trees of max_depth {self.max_depth} "
                f"and max_args {self.max_args} have at most {longest} tokens"
            )
        return self


def longest_tree(max_depth: int, max_args: int) -> int:
    """Tokens in the largest tree: every node below ``max_depth`` an operator of ``max_args``."""
    length = 1
    for _ in range(max_depth - 1):
        length = 2 + max_args * length
        if length > 10**9:
            break
    return length


class _TooLong(Exception):
    pass


def apply(op: str, values: list[int]) -> int:
    """The value of an operator over its arguments, as LRA computes it."""
    if op == "[MIN":
        return min(values)
    if op == "[MAX":
        return max(values)
    if op == "[MED":  # LRA: int(np.median(values)), so a median between two digits is floored
        s = sorted(values)
        mid = len(s) // 2
        return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) // 2
    return sum(values) % 10


def _tree(rng: random.Random, depth: int, p: ListOpsParams, out: list[int]) -> int:
    if depth < p.max_depth and (depth == 1 or rng.random() < p.op_prob):
        op = OPERATORS[int(rng.random() * 4)]
        out.append(TOKEN[op])
        values = [_tree(rng, depth + 1, p, out) for _ in range(2 + int(rng.random() * (p.max_args - 1)))]
        out.append(CLOSE)
        if len(out) > p.max_length:
            raise _TooLong
        return apply(op, values)
    value = int(rng.random() * 10)
    out.append(DIGIT[value])
    if len(out) > p.max_length:
        raise _TooLong
    return value


MAX_REJECTIONS = 1_000_000


def sample_one(rng: random.Random, p: ListOpsParams) -> tuple[list[int], int]:
    """One (tokens, value) drawn by rejection on its length."""
    for _ in range(MAX_REJECTIONS):
        out: list[int] = []
        try:
            value = _tree(rng, 1, p, out)
        except _TooLong:
            continue
        if len(out) >= p.min_length:
            return out, value
    raise ValueError(
        f"listops: {MAX_REJECTIONS} trees in a row fell outside [{p.min_length}, {p.max_length}] tokens; "
        "widen the length range, or raise op_prob, max_args or max_depth"
    )


@register_task("listops", ListOpsParams, version=1)
def build(p: ListOpsParams, ctx: BuildContext) -> Generated:
    def sample(_np_rng: np.random.Generator, rng: random.Random, n: int) -> list[Example]:
        return [(np.array(t, dtype=np.uint8), v) for t, v in (sample_one(rng, p) for _ in range(n))]

    splits = disjoint_splits(p, sample, ctx.reporter, chunk=200)
    length = max(len(x) for examples in splits.values() for x, _ in examples)
    arrays = {
        s: (pad_sequences([x for x, _ in ex], length=length), np.array([v for _, v in ex], dtype=np.uint8))
        for s, ex in splits.items()
    }
    return Generated(
        splits=arrays,
        input_kind="tokens",
        vocab_size=len(VOCAB),
        num_classes=10,
        output_kind="classification",
    )
