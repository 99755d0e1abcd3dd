"""The norm calibration benchmark's --tiny mode (benchmarks/bench_norm_calibration.py) and its null
studies: a late-diverging run that is flagged and calls nothing, heavy-tailed seed effects of the
sd asked for."""

from __future__ import annotations

import math
import re
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

from ablate.stats import norms as sn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_norm_calibration as bench  # noqa: E402


def test_tiny_prints_every_measure_of_the_late_run_null(capsys):
    bench.main(["--tiny", "--nulls", "late run"])
    out = capsys.readouterr().out
    for paired, seeds in bench.SETTINGS:
        setting = f"{seeds} {'paired' if paired else 'unpaired'}"
        assert re.search(rf"^late run\s+{setting}\s+training\s+[\d.]+\s+[\d.]+", out, re.M), out
    for m in sn.MEASURES:
        rows = re.findall(rf"\b{m}\s+([\d.]+)\s+([\d.]+)\s+(nan|[\d.]+)\s+\d+\s+(nan|[\d.]+)\s+\d+$", out, re.M)
        assert len(rows) == 2 and all(0 <= float(r[1]) <= 1 for r in rows), out
    caught = re.findall(r"late run flagged in ([\d.]+) of studies", out)
    assert caught == ["1.000", "1.000"], out  # one study a setting: the run is caught in both


def test_the_late_run_grows_ten_thousandfold_and_nothing_else_moves():
    p = replace(bench.Process(), late=True)
    norms = bench.simulate(p, 5, False, np.random.default_rng(3))
    base = bench.simulate(replace(p, late=False), 5, False, np.random.default_rng(3))
    ratio = (norms["value"] / base["value"]).to_numpy()
    assert np.isclose(ratio.max(), bench.LATE_FACTOR) and np.isclose(ratio.min(), 1.0)
    assert int((ratio > 1 + 1e-12).sum()) == p.layers * (p.steps // 2)  # one run, its probe steps past the middle


def test_heavy_tailed_seed_effects_have_the_sd_asked_for_and_a_long_right_tail():
    rng = np.random.default_rng(4)
    for tail in (0.5, 1.0):
        x = bench._effects(rng, 400_000, 0.35, tail)
        assert abs(x.mean()) < 0.01 and math.isclose(x.std(), 0.35, rel_tol=0.05)
        assert np.quantile(x, 0.999) > 3 * abs(np.quantile(x, 0.001))  # skewed: rare large seeds
