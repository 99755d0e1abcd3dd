"""The frontier benchmark's vectorised look rule (benchmarks/bench_sequential_frontier.py) decides
as ablate.stats.sequential.decide does, look by look, on the same paired differences."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from ablate.stats import sequential as sq

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_sequential_frontier as frontier  # noqa: E402


def test_the_vectorised_rule_stops_where_decide_does():
    rng = np.random.default_rng(7)
    d = sq.SequentialDesign.of(3, 16, 2, comparisons=3, min_effect=1.0, shape="power3")
    # no effect, min_effect and twice it: every kind of decision, at early and late looks
    diffs = np.concatenate([rng.normal(e, 0.85, (40, 16)) for e in (0.0, 1.0, 2.0)])
    stop, sign = frontier.stops(d, diffs)
    kinds = set()
    for x, n, s in zip(diffs, stop, sign, strict=True):
        r = next(r for r in (sq.decide(d, diffs=x[:m], p_value=False) for m in d.looks) if r["decision"] != "open")
        kinds.add(r["decision"])
        assert r["n"] == n and (r["decision"] == "significant") == (s != 0), (r, n, s)
    assert kinds == {"significant", "equivalent", "futile"}
