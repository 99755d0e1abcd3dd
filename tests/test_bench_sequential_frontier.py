"""The frontier benchmark's vectorised look rule (benchmarks/bench_sequential_frontier.py) decides
as ablate.stats.group_sequential.decide does, look by look, on the same paired differences."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from ablate.stats import group_sequential as sq

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


def test_tiny_prints_every_row(capsys):
    frontier.main(["--tiny"])
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 11  # five shapes alone, five futility levels, the fixed design's power
    assert all("│ null seeds" in line and ("all" in line or "misses" in line) for line in out[:10])
    powers = [float(p.split(": ")[1]) for p in out[10].split("seeds: ")[1].split(", ")]
    assert powers == sorted(powers) and 0 < powers[0] < powers[-1] < 1  # more seeds, more power
