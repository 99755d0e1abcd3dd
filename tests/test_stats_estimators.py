"""The estimators every analysis shares (``ablate.stats.estimators``): the per-cell summary and its t
interval, the test set's binomial error, the bootstrap, the coefficient of variation, the marks."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from frames import CHANCE, METRIC, A, B, factorial, make_trials, set_status
from scipy import stats as sps

from ablate import stats


def test_cell_summary_exact_values_and_t_interval():
    values = [0.80, 0.82, 0.84, 0.86]
    trials = make_trials({"c": 0.0}, seeds=4, sd=0.0)
    trials[METRIC] = values
    row = stats.cell_summary(trials, METRIC, CHANCE).iloc[0]
    assert row["n"] == 4 and row["status"] == "complete"
    assert row["mean"] == pytest.approx(0.83)
    assert row["median"] == pytest.approx(0.83)
    assert row["sd"] == pytest.approx(np.std(values, ddof=1))
    half = sps.t.ppf(0.995, 3) * np.std(values, ddof=1) / 2  # a report's 95%: t at robust_level, 99%
    assert row["ci_low"] == pytest.approx(0.83 - half)
    assert row["ci_high"] == pytest.approx(0.83 + half)
    assert (row["min"], row["max"]) == (pytest.approx(0.80), pytest.approx(0.86))
    assert row["ci_note"] == ""


def test_an_accuracy_interval_stays_inside_zero_and_one():
    """Three seeds near 0.99 (as the 3-layer minGRU): the t interval 0.990 ± 0.013 would pass 1."""
    values = [0.985, 0.987, 0.998]
    trials = make_trials({"c": 0.0}, seeds=3, sd=0.0)
    trials[METRIC] = values
    row = stats.cell_summary(trials, METRIC, CHANCE).iloc[0]
    t = stats.t_interval(values, stats.robust_level(0.95))
    assert METRIC.endswith("accuracy") and t.ci_high > 1.0
    assert row["ci_high"] == 1.0 and row["ci_low"] == pytest.approx(t.ci_low)
    assert stats.metric_range("test_loss") == (-np.inf, np.inf)


def test_t_interval_covers_the_true_mean_at_the_nominal_rate():
    rng = np.random.default_rng(1)
    hits = sum(
        lo <= 0.7 <= hi for _, lo, hi, _ in (stats.t_interval(rng.normal(0.7, 0.02, 5)) for _ in range(1000))
    )
    lo, hi = sps.binom.interval(0.999, 1000, 0.95)
    assert lo <= hits <= hi


def test_cell_summary_counts_diverged_never_learned_failed_and_pending_apart():
    trials = make_trials({"base": 0.85, "odd": 0.85, "waiting": 0.85}, seeds=6, sd=0.001)
    trials.loc[(trials["cell_id"] == "odd") & (trials["seed"].isin([0, 1])), METRIC] = 0.505  # never learned
    trials = set_status(trials, "odd", [2], "diverged")
    trials = set_status(trials, "odd", [3], "failed")
    trials = set_status(trials, "odd", [5], "pending")
    trials = set_status(trials, "waiting", list(range(6)), "pending")
    trials.loc[trials["cell_id"] == "waiting", "status"] = ["pending", "running"] * 3
    summary = stats.cell_summary(trials, METRIC, CHANCE, margin=0.02).set_index("cell_id")

    odd = summary.loc["odd"]
    assert odd["status"] == "partial"
    assert odd["n"] == 3  # seeds 0, 1 (never learned, still complete) and 4
    assert odd["n_never_learned"] == 2 and odd["n_diverged"] == 1
    assert odd["n_failed"] == 1 and odd["n_pending"] == 1 and odd["n_trials"] == 6
    assert odd["n_finished"] == 4  # complete + diverged; failed runs are not outcomes
    assert odd["never_learned_share"] == pytest.approx(2 / 4)
    assert odd["diverged_share"] == pytest.approx(1 / 4)
    learned = trials.loc[(trials["cell_id"] == "odd") & (trials["seed"] == 4), METRIC].iloc[0]
    assert odd["mean"] == pytest.approx((0.505 * 2 + learned) / 3)  # never-learned runs stay in the mean
    assert odd["mean_learned"] == pytest.approx(learned)

    waiting = summary.loc["waiting"]
    assert waiting["status"] == "pending" and waiting["n"] == 0 and waiting["n_pending"] == 6
    assert np.isnan(waiting["mean"]) and np.isnan(waiting["ci_low"]) and np.isnan(waiting["diverged_share"])
    assert summary.loc["base", "status"] == "complete"
    assert list(summary.index) == ["base", "odd", "waiting"]  # order of first appearance


def test_cell_summary_ignores_tuning_trials_and_keeps_factor_columns():
    trials = factorial(seeds=3)
    tune = trials.assign(phase="tune", **{METRIC: 0.1})
    summary = stats.cell_summary(pd.concat([trials, tune]), METRIC, CHANCE)
    assert (summary["n"] == 3).all() and (summary["mean"] > 0.7).all()
    assert [A, B] == [c for c in summary.columns if "." in c]
    assert summary.columns[2:4].tolist() == [A, B]


def test_cell_summary_without_a_known_chance_level():
    trials = make_trials({"x": 0.5}, seeds=3)
    row = stats.cell_summary(trials, METRIC, None).iloc[0]
    assert np.isnan(row["n_never_learned"]) and np.isnan(row["never_learned_share"])
    assert row["mean_learned"] == pytest.approx(row["mean"])


def test_cell_with_everything_diverged_has_no_results():
    trials = set_status(make_trials({"x": 0.8}, seeds=3), "x", [0, 1, 2], "diverged")
    row = stats.cell_summary(trials, METRIC, CHANCE).iloc[0]
    assert row["status"] == "no_results" and row["diverged_share"] == 1.0 and row["n"] == 0


def test_binomial_standard_error_of_the_test_set():
    assert stats.binomial_se(0.5, 100) == pytest.approx(0.05)
    assert np.isnan(stats.binomial_se(0.5, None))
    assert stats.binomial_se(np.array([0.0, 0.9]), 1000) == pytest.approx([0.0, np.sqrt(0.09 / 1000)])


def test_bootstrap_ci_is_deterministic_and_sensible():
    x = np.random.default_rng(0).normal(10, 1, 30)
    ci = stats.bootstrap_ci(x, seed=1)
    assert ci == stats.bootstrap_ci(x, seed=1)
    assert ci[0] < x.mean() < ci[1]
    assert all(np.isnan(stats.bootstrap_ci([1.0, 1.0, 1.0])))  # nothing to resample: no interval
    assert all(np.isnan(stats.bootstrap_ci([0.3, 0.1 + 0.2, 0.3])))  # 0.1 + 0.2 is 0.30000000000000004
    assert all(np.isnan(stats.bootstrap_ci([1.0])))


def test_cv_with_ci():
    x = np.random.default_rng(0).normal(10, 1, 40)
    est = stats.cv_with_ci(x, seed=0)
    assert est.value == pytest.approx(np.std(x, ddof=1) / np.mean(x))
    assert est.ci_low < est.value < est.ci_high and est.n == 40
    assert est.ci_low < 0.1 < est.ci_high
    assert np.isnan(stats.cv_with_ci([1.0]).value)
    frame = pd.DataFrame({"variant": ["a"] * 20 + ["b"] * 20, "norm": np.r_[x[:20], 3 * x[20:]]})
    by = stats.cv_by(frame, "norm", "variant", n_resamples=500)
    assert by["variant"].tolist() == ["a", "b"] and (by["n"] == 20).all()
    assert by["cv"].tolist() == pytest.approx(
        [stats.cv_with_ci(x[:20]).value, stats.cv_with_ci(x[20:]).value]
    )


def test_cv_point_estimate():
    x = np.random.default_rng(3).normal(5, 1, 12)
    assert stats.cv(x) == np.std(x, ddof=1) / abs(np.mean(x))
    assert stats.cv(np.r_[x, np.nan, np.inf]) == stats.cv(x)  # non-finite values are dropped
    assert stats.cv(x) == stats.cv_with_ci(x).value
    assert np.isnan(stats.cv([2.0])) and np.isnan(stats.cv([]))
    assert stats.cv([-1.0, 1.0]) == np.inf and np.isnan(stats.cv([0.0, 0.0]))


def test_marks():
    assert [stats.mark_for(p) for p in (0.0001, 0.005, 0.02, 0.05, 0.2, np.nan)] == [
        "***",
        "**",
        "*",
        "",
        "",
        "",
    ]


def test_no_interval_of_nothing_a_three_seed_cell_at_one():
    """Three runs at 1.0, and three that are 1.0 up to round-off (a sum of ten 0.1s): the mean, no
    interval, and why — never 1.000 [1.000, 1.000]."""
    for values in ([1.0, 1.0, 1.0], [sum([0.1] * 10), 1.0, 1.0]):
        trials = make_trials({"c": 0.0}, seeds=3, sd=0.0)
        trials[METRIC] = values
        row = stats.cell_summary(trials, METRIC, CHANCE).iloc[0]
        assert row["mean"] == pytest.approx(1.0)
        assert np.isnan(row["ci_low"]) and np.isnan(row["ci_high"])
        assert row["ci_note"] == "no spread: 3 runs equal"
        assert np.isnan(stats.t_interval(values).ci_low)


def test_round_off_is_judged_relative_to_the_values_scale():
    assert stats.no_spread([1.0, 1.0 + 1e-15]) and stats.no_spread([0.0, 0.0]) and stats.no_spread([5.0])
    assert not stats.no_spread([1.0, 1.0 + 1e-6])
    assert not stats.no_spread([1e-12, 2e-12])  # tiny values that differ by half their size do spread
    assert stats.no_spread([0.01, 0.01 + 1e-16], scale=1.0) and not stats.no_spread([0.01, 0.0101], scale=1.0)
    assert stats.interval_note([0.8]) == "one run" and stats.interval_note([]) == "no runs"
    assert stats.interval_note([0.8, 0.81]) == ""
    est = stats.t_interval([1e-12, 2e-12, 1.5e-12])
    assert est.ci_low < 1.5e-12 < est.ci_high


def test_the_reports_interval_is_wider_than_exact_and_clipped():
    assert stats.robust_level(0.95) == pytest.approx(0.99)
    with pytest.raises(ValueError, match="confidence"):
        stats.robust_level(1.0)
    values = [0.992, 0.997, 1.0, 0.999]
    est, note = stats.mean_interval(values, 0.95, stats.metric_range(METRIC))
    exact = stats.t_interval(values, 0.99)
    assert note == "" and est.ci_high == 1.0 and est.ci_low == pytest.approx(exact.ci_low)
    assert exact.ci_low < stats.t_interval(values, 0.95).ci_low
