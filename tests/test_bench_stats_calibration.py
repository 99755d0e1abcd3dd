"""The accuracy statistics' calibration benchmark (benchmarks/bench_stats_calibration.py): its
``--tiny`` mode runs every part, and its skewed nulls are what they say they are."""

from __future__ import annotations

import re
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_stats_calibration as bench  # noqa: E402


def test_tiny_runs_every_part_and_prints_every_setting(capsys: pytest.CaptureFixture[str]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        misses = bench.main(["--tiny"])
    out = capsys.readouterr().out
    assert isinstance(misses, list) and all(isinstance(m, str) for m in misses)
    for head in ("NULL FALSE-POSITIVE RATES", "COVERAGE of every interval", "THE WIDENING", "CONVERGENCE FLAG"):
        assert head in out
    for setting, seeds in bench.null_settings():
        row = next(line for line in out.splitlines() if line.startswith(setting.name) and
                   line[len(setting.name):].split()[0] == str(seeds))
        rates = [float(v) for v in re.findall(r"\b[01]\.\d{3}\b", row)]
        assert len(rates) == 8 and all(0.0 <= r <= 1.0 for r in rates), row
    for setting in bench.SETTINGS:
        assert f"{setting.name} (reference accuracy" in out
    assert "cell mean: t" in out and "marginal mean: blocked/Welch" in out


def test_the_skewed_nulls_are_what_their_names_say() -> None:
    rng = np.random.default_rng(0)
    lognormal = next(s for s in bench.SETTINGS if s.seed_lognormal == 1.0 and s.paired)
    effects = bench.seed_effects(lognormal, 200_000, rng)
    assert abs(effects.mean()) < 1e-4 and effects.std() == pytest.approx(lognormal.seed_sd, rel=0.05)
    assert np.mean(((effects - effects.mean()) / effects.std()) ** 3) < -2  # the heavy tail is on the bad side
    tail = next(s for s in bench.SETTINGS if s.tail_share)
    runs = bench._draw(tail, 0.0, np.zeros(200_000), rng)
    assert runs.mean() == pytest.approx(tail.base - tail.tail_share * tail.tail_mean, abs=5e-4)
    ceiling = next(s for s in bench.SETTINGS if s.base == 1.0 and s.test_size)
    runs = bench._draw(ceiling, 0.0, bench.seed_effects(ceiling, 10_000, rng), rng)
    assert runs.max() == 1.0 and 0.03 < np.mean(runs == 1.0) < 0.5  # ties at the ceiling
    assert np.mean(runs >= 0.99) > 0.95  # 0.99–1.0
