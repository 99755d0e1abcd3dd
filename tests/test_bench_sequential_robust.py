"""The robustness benchmark's vectorised look rule (benchmarks/bench_sequential_robust.py) decides as
ablate.stats.group_sequential.decide does, at the same look, with the same estimate, se and boundaries,
on every kind of difference it draws (ties included: a look with no spread stays open)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

from ablate.runner import sequential_looks
from ablate.stats import group_sequential as sq

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_sequential_robust as robust  # noqa: E402


def test_the_vectorised_rule_stops_where_decide_does():
    rng = np.random.default_rng(11)
    for looks, m in ((3, 6, 9), 4), ((6, 12), 1):
        d = robust.design(looks, m)
        kinds = set()
        for dist, draw in robust.DISTRIBUTIONS.items():
            diffs = np.concatenate([e + 0.85 * draw(rng, (30, looks[-1])) for e in (0.0, 1.0, 2.0, -1.0)])
            if dist == "ties":  # every seed alike: no spread at any look, undecided at the last, no interval
                diffs[0, :] = 0.5
            r = robust.looks(d, diffs)
            for i, x in enumerate(diffs):
                seen = [sq.decide(d, diffs=x[:n], p_value=False) for n in looks]
                want = next((s for s in seen if s["decision"] != "open"), seen[-1])
                said = r["decision"][i]
                assert said == want["decision"] and r["n"][i] == want["n"], (dist, i, said, want)
                if math.isfinite(want["rci_low"]):
                    for key, theirs in (("est", "estimate"), ("se", "se"), ("bound", "bound"),
                                        ("equivalence_bound", "equivalence_bound")):
                        assert math.isclose(r[key][i], want[theirs], rel_tol=1e-9), (dist, i, key)
                    # the runner's words read the same interval the benchmark covers (none before 6 seeds)
                    if (interval := sequential_looks.equivalence_interval(want)) is not None:
                        assert math.isclose(interval[0], r["est"][i] - r["equivalence_bound"][i] * r["se"][i],
                                            rel_tol=1e-9, abs_tol=1e-12)
                    else:
                        assert want["n"] < 6 and r["equivalence_bound"][i] == math.inf
                kinds.add(said)
        assert {"significant", "equivalent", "futile"} <= kinds, kinds


def test_every_distribution_is_standardised():
    rng = np.random.default_rng(2)
    for dist, draw in robust.DISTRIBUTIONS.items():
        x = draw(rng, (400_000,))
        assert abs(x.mean()) < 0.01 and abs(x.std() - 1) < 0.02, (dist, x.mean(), x.std())


def test_tiny_prints_a_row_per_design_and_distribution(capsys):
    robust.main(["--tiny"])
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| 3, 6, 9") or
            line.startswith("| 6, 12")]
    assert len(rows) == 2 * len(robust.DISTRIBUTIONS)
    assert all(line.endswith("holds |") or "misses" in line for line in rows)
