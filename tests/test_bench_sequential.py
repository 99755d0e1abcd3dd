"""The sequential benchmark's --tiny mode (benchmarks/bench_sequential.py): both parts run in
seconds and print rows whose figures obey what the full run is read for."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np

from ablate.runner import sequential_looks

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_sequential as bench  # noqa: E402


def test_tiny_prints_the_calibration_and_the_runner_tables(capsys, monkeypatch):
    for name in bench.RUNNER:  # the benchmark memoises the runner's functions: put them back after
        monkeypatch.setattr(sequential_looks, name, getattr(sequential_looks, name))
    bench.main(["--tiny"])
    out = capsys.readouterr().out
    for shape in ("power3", "obrien_fleming"):
        alone = re.search(rf"^{shape}\s+efficacy alone\s+│\s+([\d.]+) \[([\d.]+), ([\d.]+)\] │\s+([\d.]+) .*│ (\w+)",
                          out, re.M)
        before = re.search(rf"^{shape}\s+z→t \(before\)\s+│\s+([\d.]+)", out, re.M)
        assert alone and before, out
        per, lo, hi, family = (float(alone.group(i)) for i in range(1, 5))
        assert lo < 0.05 / 3 < hi and 0 < per < 0.05 and per <= family <= 0.15
        # the same draws: the t boundaries are never below the tail-matched z ones, so they cross less
        assert per <= float(before.group(1))
        assert re.search(rf"^{shape}\s+procedure 0.85 δ .* holds$", out, re.M), out
        assert re.search(rf"^{shape}\s+0.85 │", out, re.M), out  # the runner's row


def test_the_null_differences_share_the_reference():
    d = bench.null_diffs(4000, 3, 5, 1.0, np.random.default_rng(0))
    assert d.shape == (4000, 3, 5)
    assert abs(d[..., 0].std() - 1.0) < 0.05  # a paired difference has sd ``noise``
    assert abs(np.corrcoef(d[:, 0, 0], d[:, 1, 0])[0, 1] - 0.5) < 0.05  # half of it the reference's
