"""Seeds and the limits on them, shared by a spec's ``seeds:`` and ``tune.seeds:``, and the scalar
and choice types the spec's models share."""

from __future__ import annotations

from typing import Any, Literal

MAX_SEEDS = 1_000
MAX_TUNE_TRIALS = 1_000
MAX_SEED = 2**31 - 1
TUNE_SEED_BASE = 10_000  # tune.seeds: k means seeds 10000 … 10000+k−1

Scalar = str | bool | int | float


def choice(names: tuple[str, ...]) -> Any:
    """One of ``names`` (a Literal: the JSON Schema lists them)."""
    return Literal[names]  # type: ignore[valid-type]


def check_seeds(value: Any, what: str) -> int | list[int]:
    if isinstance(value, bool) or not isinstance(value, int | list):
        raise ValueError(f"must be a count (e.g. 3) or a list of seeds (e.g. [0, 1, 2]); got {value!r}")
    if isinstance(value, int):
        if not 1 <= value <= MAX_SEEDS:
            raise ValueError(f"a count of {what} must be between 1 and {MAX_SEEDS} (got {value})")
        return value
    if not value:
        raise ValueError(f"needs at least one {what[:-1]}")
    if len(value) > MAX_SEEDS:
        raise ValueError(f"at most {MAX_SEEDS} {what} (got {len(value)})")
    for i, seed in enumerate(value):
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
            raise ValueError(f"[{i}]: {seed!r} is not a seed (an integer from 0 to {MAX_SEED})")
    if len(set(value)) != len(value):
        dup = sorted({s for s in value if value.count(s) > 1})
        raise ValueError(f"repeats {', '.join(map(str, dup))}; each seed once")
    return list(value)
