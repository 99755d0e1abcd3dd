"""Numbers the statistics decide by that ``ablate plan`` and ``ablate status`` say before any analysis:
here, importing nothing, so that saying them does not import scipy."""

from __future__ import annotations

__all__ = ["EQUIVALENCE_MIN_SEEDS", "NEVER_LEARNED_MARGIN"]

#: The fewest seeds a sequential look may declare a comparison equivalent on (``group_sequential``):
#: equivalence claims that nothing happens, and a rare seed that fails (one in seven) is missing from
#: 3–5 seeds too often — on such a cell, ±min_effect was declared equivalent 0.03–0.05 of the time at
#: β = 0.02 (benchmarks/bench_sequential_robust.py); from 6 on it held β. Here, not in that module,
#: so that ``ablate plan`` can say it.
EQUIVALENCE_MIN_SEEDS = 6

#: A completed run whose accuracy is ``≤ chance + NEVER_LEARNED_MARGIN`` never learned: the accuracy
#: report's ``margin`` parameter declares the same number (a test holds them equal), and a sequential
#: look's terminal line says it with no report at hand.
NEVER_LEARNED_MARGIN = 0.02
