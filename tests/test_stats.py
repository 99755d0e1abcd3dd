"""The accuracy statistics (``ablate.stats``) on constructed data — planted effects are found, null
effects stay near nominal — and on a real partial study."""

from __future__ import annotations

import gc
import itertools
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from frames import CHANCE, METRIC, A, B, factorial, make_trials, set_status
from scipy import stats as sps

from ablate import stats

# --- cell_summary ----------------------------------------------------------------------------


def test_cell_summary_exact_values_and_t_interval():
    values = [0.80, 0.82, 0.84, 0.86]
    trials = make_trials({"c": 0.0}, seeds=4, sd=0.0)
    trials[METRIC] = values
    row = stats.cell_summary(trials, METRIC, CHANCE).iloc[0]
    assert row["n"] == 4 and row["status"] == "complete"
    assert row["mean"] == pytest.approx(0.83)
    assert row["median"] == pytest.approx(0.83)
    assert row["sd"] == pytest.approx(np.std(values, ddof=1))
    half = sps.t.ppf(0.975, 3) * np.std(values, ddof=1) / 2
    assert row["ci_low"] == pytest.approx(0.83 - half)
    assert row["ci_high"] == pytest.approx(0.83 + half)
    assert (row["min"], row["max"]) == (pytest.approx(0.80), pytest.approx(0.86))


def test_an_accuracy_interval_stays_inside_zero_and_one():
    """Three seeds near 0.99 (as the 3-layer minGRU): the t interval 0.990 ± 0.013 would pass 1."""
    values = [0.985, 0.987, 0.998]
    trials = make_trials({"c": 0.0}, seeds=3, sd=0.0)
    trials[METRIC] = values
    row = stats.cell_summary(trials, METRIC, CHANCE).iloc[0]
    assert METRIC.endswith("accuracy") and stats.t_interval(values).ci_high > 1.0
    assert row["ci_high"] == 1.0 and row["ci_low"] == pytest.approx(stats.t_interval(values).ci_low)
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


# --- compare_to_reference ---------------------------------------------------------------------


def test_planted_effect_is_detected_with_the_right_sign_and_mark():
    rng = np.random.default_rng(7)
    trials = make_trials({"base": 0.80, "up": 0.85, "same1": 0.80, "same2": 0.80}, seeds=8, sd=0.01, rng=rng)
    cmp = stats.compare_to_reference(trials, METRIC, "base").set_index("cell_id")
    up = cmp.loc["up"]
    assert up["test"] == "exact sign-flip" and up["paired"] and up["n_pairs"] == 8 and up["exact"]
    assert up["p"] == pytest.approx(2 / 2**8)  # every one of 8 differences positive: the two extreme flips
    assert up["p_adj"] < 0.05 and up["significant"] and up["mark"] in ("*", "**", "***")
    assert up["p_adj"] >= up["p"]
    assert up["mean_diff"] > 0 and up["diff_ci_low"] > 0
    assert up["mean_diff"] == pytest.approx(0.05, abs=0.015)
    assert up["effect_size_kind"] == "d_z" and up["effect_size"] > 1
    assert up["es_ci_low"] <= up["effect_size"] <= up["es_ci_high"]
    assert up["t_p"] < up["p"]  # the t-test leans on normality; the exact test cannot go below 2/2^8
    assert up["prob_improvement"] == 1.0 and up["pi_ci_low"] == 1.0
    assert not cmp.loc[["same1", "same2"], "significant"].any()
    assert (cmp.loc[["same1", "same2"], "mark"] == "").all()
    assert "base" not in cmp.index and (cmp["reference_id"] == "base").all()


def test_planted_negative_effect_by_label_unpaired():
    rng = np.random.default_rng(3)
    seeds = {"base": [0, 1, 2, 3, 4], "down": [10, 11, 12, 13, 14]}
    trials = make_trials({"base": 0.80, "down": 0.75}, seeds=seeds, rng=rng, factors={"down": {A: "d"}})
    trials["cell_label"] = trials["cell_label"].where(trials["cell_id"] != "base", "the baseline")
    row = stats.compare_to_reference(trials, METRIC, "the baseline").iloc[0]
    assert row["test"] == "exact permutation" and not row["paired"] and row["n_pairs"] == 0
    assert row["p"] == pytest.approx(2 / 252) and row["p_min"] == pytest.approx(2 / 252)  # C(10, 5) = 252
    assert row["mean_diff"] < 0 and row["diff_ci_high"] < 0 and row["significant"]
    assert row["effect_size_kind"] == "hedges_g" and row["effect_size"] < -1
    assert row["prob_improvement"] == 0.0 and row["diffs"] is None and len(row["values_cell"]) == 5
    direct = sps.ttest_ind(
        trials.loc[trials["cell_id"] == "down", METRIC],
        trials.loc[trials["cell_id"] == "base", METRIC],
        equal_var=False,
    )
    assert row["t_p"] == pytest.approx(direct.pvalue) and row["statistic"] == pytest.approx(direct.statistic)


def test_paired_when_two_or_more_seeds_are_shared_else_unpaired():
    seeds = {"base": [0, 1, 2, 3], "three": [0, 1, 2, 8], "two": [0, 1, 7, 8], "one": [0, 5, 6, 9], "lonely": [3]}
    trials = make_trials({c: 0.8 for c in seeds}, seeds=seeds)
    cmp = stats.compare_to_reference(trials, METRIC, "base").set_index("cell_id")
    assert cmp.loc["three", "test"] == "exact sign-flip" and cmp.loc["three", "n_pairs"] == 3
    assert cmp.loc["two", "paired"] and cmp.loc["two", "test"] == "too few seeds (n = 2)"
    assert cmp.loc["one", "test"] == "exact permutation" and cmp.loc["one", "n_pairs"] == 1
    assert cmp.loc["lonely", "test"] == "too few seeds (n = 1)" and np.isnan(cmp.loc["lonely", "p"])
    assert np.isnan(cmp.loc["lonely", "p_adj"]) and cmp.loc["lonely", "mark"] == ""
    assert not cmp.loc[["two", "lonely"], "testable"].any() and not cmp.loc[["two", "lonely"], "significant"].any()
    # Holm over the two comparisons that have a p-value, not four.
    p = cmp.loc[["three", "one"], "p"].sort_values()
    assert cmp.loc[p.index[0], "p_adj"] == pytest.approx(min(1, 2 * p.iloc[0]))


def test_two_seeds_with_equal_differences_are_not_evidence():
    """The issue's case: two seeds whose differences happened to be equal. The paired t-test has a
    zero variance there (p = 0); the comparison must say it cannot be tested and give the raw
    differences."""
    trials = make_trials({"base": 0.80, "up": 0.81}, seeds=2, sd=0.0)
    row = stats.compare_to_reference(trials, METRIC, "base").iloc[0]
    assert not row["testable"] and row["test"] == "too few seeds (n = 2)"
    assert np.isnan(row["p"]) and np.isnan(row["p_adj"]) and np.isnan(row["t_p"]) and row["mark"] == ""
    assert not row["significant"]
    assert row["diffs"] == pytest.approx((0.01, 0.01)) and row["mean_diff"] == pytest.approx(0.01)
    assert np.isnan(row["power_now"]) and np.isnan(row["seeds_needed"])  # a zero spread says nothing of power


def test_zero_spread_with_enough_seeds_gets_the_exact_p_not_zero():
    trials = make_trials({"base": 0.80, "up": 0.81, "tie": 0.80}, seeds=5, sd=0.0)
    cmp = stats.compare_to_reference(trials, METRIC, "base").set_index("cell_id")
    up = cmp.loc["up"]
    assert up["testable"] and up["p"] == pytest.approx(2 / 2**5) and up["p"] > 0  # never a p of 0
    assert np.isnan(up["t_p"]) and np.isnan(up["diff_ci_low"]) and np.isnan(up["effect_size"])
    assert not up["significant"]  # 0.0625 > 0.05: five seeds cannot reach α with this test
    tie = cmp.loc["tie"]
    assert tie["p"] == 1.0 and tie["mean_diff"] == 0.0 and tie["prob_improvement"] == 0.5


def test_exact_permutation_p_values_on_known_cases():
    # Sign-flip, 4 pairs, differences (1, 2, 3, −4): |sum| ≥ 2 in 14 of the 16 flips.
    d = np.array([1.0, 2.0, 3.0, -4.0])
    flips = np.array(list(itertools.product([1, -1], repeat=4)))
    expected = np.mean(np.abs((flips * d).mean(axis=1)) >= abs(d.mean()) - 1e-12)
    res = stats.permutation_test(d, np.zeros(4), paired=True)
    assert res.exact and res.p == pytest.approx(expected) and res.p == pytest.approx(14 / 16)
    assert res.p_min == pytest.approx(2 / 16) and res.arrangements == 16
    # A zero difference flips onto itself: the smallest p rises to 2/2^(non-zero differences).
    assert stats.permutation_test([1.0, 1.0, 1.0, 0.0], [0.0] * 4, paired=True).p == pytest.approx(2 / 8)
    # Relabelling, 3 vs 3 with complete separation: the two extreme of C(6, 3) = 20 splits.
    res = stats.permutation_test([3.0, 4.0, 5.0], [0.0, 1.0, 2.0], paired=False)
    assert res.p == pytest.approx(2 / 20) and res.p_min == pytest.approx(2 / 20)
    # Enumerated by hand for an unbalanced, tied case: twice the smaller one-sided share of the
    # C(7, 3) = 35 splits (the null distribution is not symmetric when the sizes differ).
    x, y = np.array([0.5, 0.5, 0.7]), np.array([0.5, 0.4, 0.4, 0.6])
    pooled = np.concatenate([x, y])
    splits = [np.isin(np.arange(7), idx) for idx in itertools.combinations(range(7), 3)]
    obs = x.mean() - y.mean()
    null = np.array([pooled[m].mean() - pooled[~m].mean() for m in splits])
    hand = 2 * min(np.mean(null >= obs - 1e-12), np.mean(null <= obs + 1e-12))
    assert stats.permutation_test(x, y, paired=False).p == pytest.approx(hand) == pytest.approx(16 / 35)
    # Past the enumeration limit: Monte Carlo, seeded, and its p never below 2/(B + 1).
    big = stats.permutation_test(np.arange(20.0) + 1, np.zeros(20), paired=True, n_resamples=999, seed=1)
    assert not big.exact and big.p == pytest.approx(2 / 1000) and big.p_min == pytest.approx(2 / 1000)
    assert big == stats.permutation_test(np.arange(20.0) + 1, np.zeros(20), paired=True, n_resamples=999, seed=1)


def test_probability_of_improvement_counts_ties_half():
    assert stats.prob_improvement([1, 2], [0, 3]) == pytest.approx(0.5)
    assert stats.prob_improvement([1, 1], [1, 1]) == 0.5
    assert stats.prob_improvement([2, 3, 4], [1, 2, 3]) == pytest.approx(7 / 9)  # 6 wins and 2 ties of 9 pairs
    assert np.isnan(stats.prob_improvement([], [1]))


def test_power_line_matches_statsmodels_and_the_exact_floor():
    from statsmodels.stats.power import TTestPower

    now, needed = stats.power_line(sd=0.02, n=5, min_effect=0.01, alpha=0.05, power=0.8)
    assert now == pytest.approx(TTestPower().power(effect_size=0.5, nobs=5, alpha=0.05))
    assert needed == np.ceil(TTestPower().solve_power(effect_size=0.5, alpha=0.05, power=0.8))
    # A huge effect needs few seeds by the t-test, but the exact test needs 6 to reach p ≤ 0.05 at all.
    assert stats.power_line(sd=0.001, n=3, min_effect=0.05, alpha=0.05)[1] == 6
    assert stats.power_line(sd=0.001, n=3, min_effect=0.05, alpha=0.05, paired=False)[1] == 4  # 2/C(8,4) < 0.05
    assert all(np.isnan(stats.power_line(sd=0.0, n=5, min_effect=0.01, alpha=0.05)))
    assert all(np.isnan(stats.power_line(sd=0.01, n=1, min_effect=0.01, alpha=0.05)))


def test_comparisons_carry_a_power_line_at_holms_first_threshold():
    rng = np.random.default_rng(2)
    trials = make_trials({"base": 0.8, "a": 0.8, "b": 0.8, "c": 0.8}, seeds=4, sd=0.01, rng=rng)
    cmp = stats.compare_to_reference(trials, METRIC, "base", min_effect=0.02, power=0.9)
    assert cmp["power_alpha"].tolist() == pytest.approx([0.05 / 3] * 3) and (cmp["min_effect"] == 0.02).all()
    row = cmp.iloc[0]
    assert (row["power_now"], row["seeds_needed"]) == pytest.approx(
        stats.power_line(row["sd_diff"], 4, 0.02, 0.05 / 3, 0.9, True))


def test_binomial_standard_error_of_the_test_set():
    assert stats.binomial_se(0.5, 100) == pytest.approx(0.05)
    assert np.isnan(stats.binomial_se(0.5, None))
    assert stats.binomial_se(np.array([0.0, 0.9]), 1000) == pytest.approx([0.0, np.sqrt(0.09 / 1000)])


def test_few_run_estimates_and_performance_profiles():
    trials = make_trials({"base": 0.80, "up": 0.85}, seeds=6, sd=0.01, rng=np.random.default_rng(4))
    trials = pd.concat([trials, make_trials({"two": 0.8}, seeds=2)], ignore_index=True)
    est = stats.few_run_estimates(trials, METRIC, "base", n_resamples=500).set_index("cell_id")
    up = trials.loc[trials.cell_id == "up", METRIC].to_numpy()
    assert est.loc["up", "iqm"] == pytest.approx(sps.trim_mean(up, 0.25))
    assert est.loc["up", "mean_ci_low"] <= up.mean() <= est.loc["up", "mean_ci_high"]
    assert est.loc["up", "prob_improvement"] == 1.0 and np.isnan(est.loc["base", "prob_improvement"])
    assert np.isnan(est.loc["two", "mean_ci_low"]) and est.loc["two", "n"] == 2  # too few runs for an interval
    again = stats.few_run_estimates(trials, METRIC, "base", n_resamples=500)
    pd.testing.assert_frame_equal(est.reset_index(), again)
    prof = stats.performance_profile(trials, METRIC, taus=[0.7, 0.825, 0.9], n_resamples=200)
    by = prof.set_index(["cell_id", "tau"])["fraction"]
    assert by[("base", 0.7)] == 1.0 and by[("base", 0.825)] == 0.0 and by[("up", 0.825)] == 1.0
    assert by[("up", 0.9)] == 0.0
    band = prof[prof.cell_id == "up"]
    assert (band.ci_low <= band.fraction).all() and (band.fraction <= band.ci_high).all()
    assert prof[prof.cell_id == "two"]["ci_low"].isna().all()


def test_convergence_from_constructed_frames_and_without_the_columns():
    trials = make_trials({"short": 0.7, "done": 0.8, "old": 0.8}, seeds=3)
    assert not stats.cell_convergence(trials, 300)["still_improving"].any()  # columns absent: unknown, not flagged
    trials["converged"] = [False, True, True, True, True, True, None, None, None]
    trials["val_gain_last"] = [0.041, 0.002, 0.01, 0.0, 0.001, 0.0, 0.03, np.nan, np.nan]
    trials["steps"] = [300, 300, 300, 180, 300, 300, np.nan, np.nan, np.nan]
    trials["stopped_early"] = [False, False, False, True, False, False, None, None, None]
    trials["best_step"] = [300, 290, 300, 150, 250, 300, None, None, None]
    conv = stats.cell_convergence(trials, {"short": 300, "done": 300, "old": 300}, min_gain=0.01).set_index("cell_id")
    assert conv.loc["short", "still_improving"] and conv.loc["short", "n_unconverged"] == 1
    assert conv.loc["short", "gain_max"] == pytest.approx(0.041)
    assert not conv.loc["done", "still_improving"] and conv.loc["done", "steps_differ"]
    assert conv.loc["done", "steps_min"] == 180 and conv.loc["done", "n_stopped_early"] == 1
    # No converged flag, but a gain of 3 points over the last 20%: still improving.
    assert conv.loc["old", "still_improving"] and conv.loc["old", "n_known"] == 1
    assert stats.step_budget(trials.assign(**{"train.steps": "600"}), 300) == {c: 600.0 for c in conv.index}
    # A run stopped early ended on its plateau: not still improving, even where a record from
    # before that rule says converged False.
    trials.loc[0, "stopped_early"] = True
    again = stats.cell_convergence(trials, {"short": 300, "done": 300, "old": 300}, min_gain=0.01).set_index("cell_id")
    assert not again.loc["short", "still_improving"] and again.loc["short", "n_stopped_early"] == 1
    assert again.loc["short", "gain_max"] == pytest.approx(0.01)  # the runs that used the budget, not the stop's


def test_pending_and_diverged_cells_are_compared_on_what_completed():
    trials = make_trials({"base": 0.8, "part": 0.8, "none": 0.8}, seeds=5)
    trials = set_status(trials, "part", [3, 4], "pending")
    trials = set_status(trials, "none", [0, 1, 2, 3, 4], "pending")
    cmp = stats.compare_to_reference(trials, METRIC, "base").set_index("cell_id")
    assert cmp.loc["part", "n_pairs"] == 3 and cmp.loc["part", "n_cell"] == 3
    assert cmp.loc["none", "test"] == "no results"


def test_comparisons_are_deterministic():
    trials = make_trials({"base": 0.8, "up": 0.82, "down": 0.79}, seeds=6, rng=np.random.default_rng(5))
    first = stats.compare_to_reference(trials, METRIC, "base", seed=3)
    again = stats.compare_to_reference(trials, METRIC, "base", seed=3)
    pd.testing.assert_frame_equal(first, again)


def test_unknown_reference_names_the_cells():
    with pytest.raises(KeyError, match="no cell"):
        stats.compare_to_reference(make_trials({"base": 0.8}), METRIC, "nope")


def _null_study(cells, seeds, paired, alpha, rng):
    trials = make_trials(cells, seeds=seeds, sd=0.01, seed_sd=0.01 if paired else 0.0, rng=rng)
    return stats.compare_to_reference(trials, METRIC, "base", alpha=alpha, n_resamples=0)


@pytest.mark.parametrize("paired", [True, False])
def test_false_positive_rate_stays_at_or_below_nominal(paired):
    """400 studies with no effect: reference + 3 cells, 8 shared seeds each (paired) or 5 runs on
    seeds of their own (unpaired), one fixed RNG. The exact tests are valid: their rate may not exceed α beyond
    binomial noise, and with these sizes they can reach it (p_min well below α)."""
    rng = np.random.default_rng(2024 + paired)
    studies, k, alpha = 400, 3, 0.05
    cells = {c: 0.8 for c in ["base", "a", "b", "c"]}
    seeds = 8 if paired else {c: [10 * i + s for s in range(5)] for i, c in enumerate(cells)}
    rejections = family_errors = t_rejections = 0
    # statsmodels' Holm calls gc.collect() on every call; freezing the (large, long-lived) heap
    # of the test process keeps each of those collections cheap.
    gc.freeze()
    try:
        outcomes = [_null_study(cells, seeds, paired, alpha, rng) for _ in range(studies)]
    finally:
        gc.unfreeze()
    for cmp in outcomes:
        assert (cmp["test"] == ("exact sign-flip" if paired else "exact permutation")).all()
        rejections += int((cmp["p"] < alpha).sum())
        t_rejections += int((cmp["t_p"] < alpha).sum())
        family_errors += bool(cmp["significant"].any())
    lo, hi = sps.binom.interval(0.999, studies * k, alpha)
    # Per comparison (uncorrected): at most α up to noise, and not vacuously conservative (the three
    # comparisons of a study share the reference, so the band is a little generous, not tight).
    assert sps.binom.ppf(0.001, studies * k, 0.6 * alpha) <= rejections <= hi, rejections / (studies * k)
    assert lo <= t_rejections <= hi  # the t-test beside it, on normal data, is at its nominal rate
    # Family-wise rate after Holm at most alpha (up to binomial noise over 400 studies).
    assert family_errors <= sps.binom.ppf(0.999, studies, alpha), family_errors / studies


# --- main effects, interactions, ANOVA ------------------------------------------------------


def test_main_effects_are_unweighted_marginal_means_with_ci():
    trials = factorial(effect_a=0.05, seeds=4, sd=0.01, rng=np.random.default_rng(2))
    eff = stats.main_effects(trials, METRIC, [A, B])
    assert eff["factor"].tolist() == [A, A, B, B, B]
    assert eff["level"].tolist() == ["rotation", "diagonal", "xi", "none", "layer"]
    cell_means = trials.groupby("cell_id", sort=False)[METRIC].mean()
    rot = eff.set_index(["factor", "level"]).loc[(A, "rotation")]
    assert rot["mean"] == pytest.approx(cell_means[["rotation-xi", "rotation-none", "rotation-layer"]].mean())
    assert rot["n_cells"] == 3 and rot["n"] == 12 and rot["df"] == 24 - 6
    resid = trials[METRIC] - trials.groupby("cell_id")[METRIC].transform("mean")
    mse = (resid**2).sum() / 18
    se = np.sqrt(mse * 3 / 4) / 3
    assert rot["se"] == pytest.approx(se)
    assert rot["ci_high"] - rot["mean"] == pytest.approx(sps.t.ppf(0.975, 18) * se)
    a = eff[eff["factor"] == A].set_index("level")
    assert a.loc["diagonal", "ci_low"] > a.loc["rotation", "ci_high"]  # the planted effect shows


def test_marginal_means_are_not_tilted_by_unbalanced_cells():
    trials = factorial(effect_b=0.1, seeds=6, sd=0.0)
    trials = set_status(trials, "rotation-layer", [1, 2, 3, 4, 5], "pending")  # 1 run left there
    eff = stats.main_effects(trials, METRIC, [A]).set_index("level")
    assert eff.loc["rotation", "mean"] == pytest.approx(eff.loc["diagonal", "mean"])
    assert eff.loc["rotation", "mean_runs"] < eff.loc["rotation", "mean"]  # the naive mean is tilted


def test_interaction_table_long_and_wide():
    trials = factorial(effect_a=0.05, effect_b=0.01, seeds=3, sd=0.0)
    long = stats.interaction_table(trials, METRIC, A, B)
    assert len(long) == 6 and {A, B, "mean", "ci_low", "ci_high", "n"} <= set(long.columns)
    wide = stats.interaction_table(trials, METRIC, A, B, wide=True)
    assert wide.index.tolist() == ["rotation", "diagonal"] and wide.columns.tolist() == [
        "xi",
        "none",
        "layer",
    ]
    assert wide.loc["diagonal", "layer"] == pytest.approx(0.8 + 0.05 + 0.02)


def test_is_full_factorial():
    trials = factorial(seeds=2)
    assert stats.is_full_factorial(trials, [A, B])
    assert stats.is_full_factorial(trials, [A])
    partial = trials[trials["cell_id"] != "diagonal-none"]
    assert not stats.is_full_factorial(partial, [A, B])
    pending = set_status(trials, "diagonal-none", [0, 1], "pending")
    assert stats.is_full_factorial(pending, [A, B])
    assert not stats.is_full_factorial(pending, [A, B], metric=METRIC)
    assert not stats.is_full_factorial(trials, [])


def test_anova_detects_planted_main_effect_and_no_spurious_interaction():
    trials = factorial(effect_a=0.03, seeds=4, sd=0.01, rng=np.random.default_rng(4))
    table = stats.anova(trials, METRIC, [A, B]).set_index("term")
    assert table.index.tolist() == [A, B, f"{A} × {B}", "Residual"]
    assert table.loc[A, "p"] < 1e-3 and table.loc[A, "mark"] == "***"
    assert table.loc[B, "p"] > 0.05 and table.loc[f"{A} × {B}", "p"] > 0.05
    assert table.loc["Residual", "df"] == 24 - 6
    assert table.loc[A, "eta_sq_partial"] > 0.5
    # Type II sums of squares in a balanced design equal the classical ones.
    grand = trials[METRIC].mean()
    ss_a = sum(12 * (g.mean() - grand) ** 2 for _, g in trials.groupby(A)[METRIC])
    assert table.loc[A, "sum_sq"] == pytest.approx(ss_a)


def test_anova_finds_a_planted_interaction():
    trials = factorial(interaction=0.03, seeds=4, sd=0.01, rng=np.random.default_rng(8))
    table = stats.anova(trials, METRIC, [A, B]).set_index("term")
    assert table.loc[f"{A} × {B}", "p"] < 0.001


def test_anova_false_positive_rate_for_the_interaction():
    rng = np.random.default_rng(99)
    hits = sum(
        stats.anova(factorial(effect_a=0.02, seeds=3, rng=rng), METRIC, [A, B])
        .set_index("term")
        .loc[f"{A} × {B}", "p"]
        < 0.05
        for _ in range(100)
    )
    assert hits <= sps.binom.ppf(0.999, 100, 0.05)


def test_anova_refuses_designs_it_does_not_fit():
    trials = factorial(seeds=3)
    with pytest.raises(stats.AnovaNotApplicable, match="fewer than two levels"):
        stats.anova(trials[trials[A] == "rotation"], METRIC, [A, B])
    with pytest.raises(stats.AnovaNotApplicable, match="full factorial"):
        stats.anova(set_status(trials, "diagonal-xi", [0, 1, 2], "pending"), METRIC, [A, B])
    with pytest.raises(stats.AnovaNotApplicable, match="replication"):
        stats.anova(factorial(seeds=1), METRIC, [A, B])
    ok, why = stats.anova_applicable(trials[trials[A] == "rotation"], METRIC, [A, B])
    assert not ok and A in why


# --- bootstrap and coefficient of variation ---------------------------------------------------


def test_bootstrap_ci_is_deterministic_and_sensible():
    x = np.random.default_rng(0).normal(10, 1, 30)
    ci = stats.bootstrap_ci(x, seed=1)
    assert ci == stats.bootstrap_ci(x, seed=1)
    assert ci[0] < x.mean() < ci[1]
    assert stats.bootstrap_ci([1.0, 1.0, 1.0]) == (1.0, 1.0)
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


def test_no_torch_needed():
    code = ("import sys, ablate.stats, ablate.stats.norms, ablate.report.accuracy, ablate.report.norm_stability; "
            "assert 'torch' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[1])


def test_full_grid_levels_iterate_in_spec_order():
    trials = factorial(seeds=2)
    combos = list(itertools.product(["rotation", "diagonal"], ["xi", "none", "layer"]))
    long = stats.interaction_table(trials, METRIC, A, B)
    assert list(zip(long[A], long[B], strict=True)) == combos


# --- on a real partial study (tests/real_studies.py) ------------------------------------------------


@pytest.fixture(scope="module")
def res(accuracy_study):
    import real_studies as studies

    return studies.load(accuracy_study, studies.ACCURACY_NAME, curves=False, metrics=True)


def test_anova_on_the_levels_with_results(res):
    trials = res.trials.to_pandas()
    factors = ["model.normalisation", "model.layers"]
    ok, why = stats.anova_applicable(trials, "test_accuracy", factors)
    assert not ok and "full factorial" in why
    subset, dropped = stats.anova_on_finished_levels(trials, "test_accuracy", factors)
    assert dropped == {"model.normalisation": ["none"]}
    table = stats.anova(subset, "test_accuracy", factors)
    assert list(table.term) == ["model.normalisation", "model.layers", "model.normalisation × model.layers",
                                "Residual"]
    assert table.loc[table.term == "Residual", "df"].item() == 7 - 4
