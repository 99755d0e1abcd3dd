"""The norm-stability analysis (``ablate.stats.norms``): the seed as the unit, a declared reference,
log-scale ratios, factor effects — on constructed frames and on a real study."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from frames import curve_frame, steady_and_wild

from ablate import stats
from ablate.stats import norm_theory
from ablate.stats import norms as sn
from ablate.stats.estimators import robust_level


def seeded(values: dict[str, np.ndarray], factors: dict[str, dict[str, str]] | None = None
           ) -> tuple[pd.DataFrame, pd.DataFrame, list[tuple[str, str]]]:
    """(layer norms, per-seed frame, order) of ``curve_frame(values)``, with factor columns."""
    df = curve_frame(values)
    norms = sn.layer_norms(df)
    trials = None
    if factors:
        trials = pd.DataFrame([{"cell_id": f"c{i}", **factors[label]} for i, label in enumerate(values)])
    return norms, sn.per_seed(norms, trials), sn.variants(df)


def test_each_run_is_one_value_per_measure_computed_from_its_own_curves():
    df, steady = steady_and_wild()
    norms = sn.layer_norms(df)
    ps = sn.per_seed(norms)
    assert len(ps) == 8 and ps.groupby("cell_id").size().tolist() == [4, 4]  # 2 variants × 4 seeds
    run = ps[(ps["cell_id"] == "c0") & (ps["seed"] == 2)].iloc[0]
    assert run["cv_training"] == pytest.approx(np.mean([stats.cv(steady[2, layer]) for layer in range(3)]))
    assert run["cv_depth"] == pytest.approx(np.mean([stats.cv(steady[2, :, k]) for k in range(6)]))
    assert run["final_norm"] == pytest.approx(np.exp(np.log(steady[2, :, -1]).mean()))
    logs = np.log(steady[:, :, :])  # seeds × layers × steps
    others = np.median(np.delete(logs, 2, axis=0), axis=0)  # the median of the other three seeds
    assert run["dev_seeds"] == pytest.approx(np.mean(np.abs(logs[2] - others)) / sn.norm_seeds.kappa(4))
    assert run["flag"] == "" and run["bad_norms"] == 0
    assert run["log_cv_training"] == pytest.approx(np.log(run["cv_training"]))


def test_the_spread_over_seeds_does_not_depend_on_how_many_seeds():
    """The mean leave-one-out-median deviation over κ(n): on average the sd of log ‖x‖² with 3
    seeds as with 12 (a CV across n seeds shrinks with n — the comparison report once compared 2
    seeds with 3)."""
    rng = np.random.default_rng(0)
    few, many = [], []
    for _ in range(300):
        values = np.exp(rng.normal(0, 0.3, (12, 1, 1)) + rng.normal(0, 0.05, (12, 2, 4)))
        norms = sn.layer_norms(curve_frame({"a": values}))
        few.append(sn.sd_over_seeds(norms, seeds=[0, 1, 2])[0])
        many.append(sn.sd_over_seeds(norms)[0])
    sd = np.sqrt(0.3**2 + 0.05**2)
    assert np.mean(few) == pytest.approx(sd, rel=0.06) and np.mean(many) == pytest.approx(sd, rel=0.03)
    logs = np.log(values).reshape(12, -1)
    direct = np.mean([np.mean(np.abs(logs[i] - np.median(np.delete(logs, i, 0), 0))) for i in range(12)])
    assert sn.sd_over_seeds(norms)[0] == pytest.approx(direct / sn.norm_seeds.kappa(12))


def test_kappa_is_the_normal_mean_deviation_from_the_others_median():
    """κ(2) = E|Z₁ − Z₂| = 2/√π; κ(n) at larger n against a Monte Carlo of a million draws."""
    assert sn.norm_seeds.kappa(2) == pytest.approx(2 / np.sqrt(np.pi), rel=1e-6)
    rng = np.random.default_rng(1)
    for n in (3, 4, 7):
        z = rng.standard_normal((200_000, n))
        mc = np.mean(np.abs(z[:, 0] - np.median(z[:, 1:], axis=1)))
        assert sn.norm_seeds.kappa(n) == pytest.approx(mc, rel=0.01)


def test_one_odd_run_moves_the_other_runs_deviations_little():
    """The old deviation from a shared mean moved every run of the variant when one run was off;
    from the median of the others, the other runs barely move."""
    rng = np.random.default_rng(4)
    logs = rng.normal(0, 0.2, (6, 2, 5))
    odd = logs.copy()
    odd[5] += 5.0  # one run e⁵ ≈ 150× off
    dev = [sn.per_seed(sn.layer_norms(curve_frame({"a": np.exp(x)})))["dev_seeds"].to_numpy() for x in (logs, odd)]
    assert np.max(np.abs(dev[1][:5] / dev[0][:5] - 1)) < 0.15 and dev[1][5] > 10 * dev[0][5]
def test_a_variants_value_is_the_interval_of_scipy_on_its_scale():
    """Over training and at the end: exp of the t interval of the mean log; over layers: the t
    interval of the mean √CV, squared (scipy's one-sample t, computed independently), at the level
    the reports print as 95 % (``robust_level``)."""
    from scipy import stats as sps

    v = np.array([0.12, 0.31, 0.22, 0.47, 0.18])
    for m in ("training", "final"):
        est = sn.value_interval(v, m)
        ci = sps.ttest_1samp(np.log(v), 0).confidence_interval(robust_level(0.95))
        assert (est.value, est.ci_low, est.ci_high, est.n) == pytest.approx(
            (np.exp(np.log(v).mean()), np.exp(ci.low), np.exp(ci.high), 5))
    est = sn.value_interval(v, "depth")
    ci = sps.ttest_1samp(np.sqrt(v), 0).confidence_interval(robust_level(0.95))
    assert (est.value, est.ci_low, est.ci_high) == pytest.approx((np.sqrt(v).mean() ** 2, ci.low**2, ci.high**2))
    # Where the interval on √CV reaches below 0 its square would turn back up: the lower end is 0.
    wide = sn.value_interval([0.01, 0.9, 0.02], "depth")
    assert wide.ci_low == 0.0 and wide.ci_high > 0.9 and np.isnan(sn.value_interval([0.3], "depth").ci_low)
    with pytest.raises(ValueError, match="per-run measure"):
        sn.value_interval(v, "seeds")


def test_the_interval_over_layers_covers_where_the_log_scale_did_not():
    """CVs of two layers whose log-norms differ by 0.4 ± a seed × layer offset of sd 0.15 (the
    calibration benchmark's process): a CV of two values, |x₁ − x₂| / (√2 x̄), is skewed to the left
    on the log scale by the runs whose layers happen to be close. On √CV the t interval covers its
    estimand (E √CV)²; the t interval of the mean log, its geometric mean, falls short."""
    rng = np.random.default_rng(2026)

    def cvs(n: int) -> np.ndarray:
        logs = rng.normal(0, 0.15, (n, 2)) + [0.0, 0.4]
        cv = stats.cv(np.exp(logs[0]))  # the toolkit's CV of two values: √2 · tanh(|log x₂/x₁| / 2)
        assert cv == pytest.approx(np.sqrt(2) * np.tanh(abs(logs[0, 1] - logs[0, 0]) / 2))
        return np.sqrt(2) * np.tanh(np.abs(logs[:, 1] - logs[:, 0]) / 2)

    pool = cvs(1_000_000)
    sqm, gm = np.sqrt(pool).mean() ** 2, np.exp(np.log(pool).mean())
    draws = cvs(2500 * 5).reshape(2500, 5)
    exact = 0.75  # the level robust_level widens to 95 %: the plain t intervals at 95 %, compared as such
    now = np.mean([e.ci_low <= sqm <= e.ci_high for e in (sn.value_interval(d, "depth", exact) for d in draws)])
    before = np.mean([e.ci_low <= gm <= e.ci_high for e in (sn.value_interval(d, "training", exact) for d in draws)])
    assert now >= 0.93 and before < now - 0.02


def test_variants_are_compared_with_the_declared_reference_not_the_most_stable():
    norms, ps, order = seeded({"ref": np.exp(0.2 * np.random.default_rng(1).standard_normal((8, 2, 6))),
                               "calm": 1 + 0.01 * np.random.default_rng(2).standard_normal((8, 2, 6))})
    comp = sn.compare(ps, norms, "c0", order)
    assert set(comp["reference_id"]) == {"c0"} and set(comp["cell_id"]) == {"c1"}
    assert list(comp["measure"]) == ["training", "depth", "seeds", "final"]
    training = comp[comp["measure"] == "training"].iloc[0]
    # The ratio is exp(mean log difference) with the t interval of the paired differences (at the
    # level compare_to_reference prints as 95%: stats.robust_level).
    d = ps[ps.cell_id == "c1"]["log_cv_training"].to_numpy() - ps[ps.cell_id == "c0"]["log_cv_training"].to_numpy()
    assert training["ratio"] == pytest.approx(np.exp(d.mean()))
    low, high = stats.t_interval(d, robust_level(0.95))[1:3]
    assert (training["ratio_low"], training["ratio_high"]) == pytest.approx((np.exp(low), np.exp(high)))
    assert training["paired"] and training["test"] == "exact sign-flip" and training["significant"]
    assert training["ratio_high"] < 0.2  # "calm" varies far less over training than the reference


def test_nothing_is_tested_below_three_seeds():
    norms, ps, order = seeded({"a": np.exp(np.random.default_rng(3).standard_normal((2, 2, 5))),
                               "b": 1 + 0.01 * np.random.default_rng(4).standard_normal((2, 2, 5))},
                              {"a": {"m.p": "x"}, "b": {"m.p": "y"}})
    comp = sn.compare(ps, norms, "c0", order)
    assert not comp["testable"].any() and comp["p"].isna().all() and not comp["significant"].any()
    anova, why = sn.factor_anova(ps, ["m.p"])
    assert anova.empty and all(w.startswith("no ANOVA: too few seeds") for m, w in why.items() if m != "seeds")
    assert why["seeds"] == sn.NO_SEEDS_ANOVA  # never: the runs' deviations share their variant's median


def test_over_seeds_both_sides_use_the_same_seeds():
    rng = np.random.default_rng(5)
    norms, ps, order = seeded({"five": np.exp(rng.normal(0, 0.3, (5, 1, 1)) + rng.normal(0, 0.02, (5, 2, 4))),
                               "three": np.exp(rng.normal(0, 0.3, (3, 1, 1)) + rng.normal(0, 0.02, (3, 2, 4)))})
    row = sn.compare(ps, norms, "c0", order).set_index("measure").loc["seeds"]
    assert row["n"] == 3 and row["n_cell"] == 3 and row["n_ref"] == 3  # the shared seeds 0, 1, 2
    expected = sn.sd_over_seeds(norms[norms.cell_id == "c1"])[0] / sn.sd_over_seeds(
        norms[norms.cell_id == "c0"], seeds=[0, 1, 2])[0]
    assert row["ratio"] == pytest.approx(expected)


def test_a_factor_and_its_interaction_are_found_and_a_null_factor_is_not():
    """CV over training: heads matter only for the rotation parameterisation; noise is a seed-level
    random effect. The ANOVA of per-seed logs finds the main effect and the interaction."""
    rng = np.random.default_rng(6)
    values, factors = {}, {}
    for p in ("rotation", "complex"):
        for h in ("1", "8"):
            scale = 0.05 if (p, h) != ("rotation", "8") else 0.2  # one cell drifts more over training
            drift = np.linspace(0, 1, 6)[None, None, :] * rng.lognormal(np.log(scale), 0.1, (6, 1, 1))
            values[f"{p}-{h}"] = np.exp(drift + rng.normal(0, 0.005, (6, 2, 6)))
            factors[f"{p}-{h}"] = {"model.parameterisation": p, "model.heads": h}
    _, ps, _ = seeded(values, factors)
    anova, _ = sn.factor_anova(ps, ["model.parameterisation", "model.heads"])
    training = anova[anova["measure"] == "training"].set_index("term")
    assert training.loc["model.parameterisation × model.heads", "significant"]
    assert training.loc["model.heads", "significant"]
    effects = sn.main_effects(ps, ["model.parameterisation", "model.heads"])
    heads = effects[(effects["measure"] == "training") & (effects["factor"] == "model.heads")].set_index("level")
    assert heads.loc["8", "value"] > heads.loc["1", "value"]
    # Holm across every term of every measure: the adjusted p is never below the raw one.
    assert (anova["p_adj"] >= anova["p"] - 1e-12).all()


def test_a_levels_marginal_mean_is_its_measures_one_estimator():
    """Page one's factor row printed rotation_heads' CV over layers at heads=4 as 0.41 (a geometric
    mean) where Table 1 and the summary printed 0.418 ((mean √CV)²): a level's value over layers is
    now (mean √CV)² over its runs as Table 1's, its interval the t interval on √CV squared; over
    training and at the end, still the geometric mean."""
    rng = np.random.default_rng(40)
    values = {f"h{h}": np.exp(rng.normal(0, 0.4, (5, 3, 6)) + rng.normal(0, 0.6, (5, 1, 1))) for h in (1, 4)}
    factors = {"h1": {"model.heads": "1"}, "h4": {"model.heads": "4"}}
    norms, ps, order = seeded(values, factors)
    effects = sn.main_effects(ps, ["model.heads"]).set_index(["measure", "level"])
    table = sn.stability(ps, norms, order).set_index("cell_id")
    for level, cid in (("1", "c0"), ("4", "c1")):
        runs = ps.loc[ps["cell_id"] == cid, "cv_depth"].to_numpy(float)
        depth = effects.loc[("depth", level)]
        assert depth["value"] == pytest.approx(np.mean(np.sqrt(runs)) ** 2, rel=1e-12)
        assert depth["value"] == pytest.approx(table.loc[cid, sn.VALUE["depth"]], rel=1e-12)
        assert depth["value"] != pytest.approx(np.exp(np.mean(np.log(runs))), rel=1e-3)  # not the geometric mean
        training = ps.loc[ps["cell_id"] == cid, "cv_training"].to_numpy(float)
        assert effects.loc[("training", level), "value"] == pytest.approx(np.exp(np.mean(np.log(training))))
    # Two factors: the unweighted mean over the level's cells of their mean √CV, squared, with the interval
    # of the per-seed means on √CV (the cells share their seeds), squared.
    quad = {f"{a}{b}": np.exp(rng.normal(0, 0.4, (4, 2, 5)) + rng.normal(0, 0.5, (4, 1, 1)))
            for a in "xy" for b in "pq"}
    levels = {k: {"m.a": k[0], "m.b": k[1]} for k in quad}
    _, ps, _ = seeded(quad, levels)
    x = ps[ps["m.a"] == "x"]
    root = x.assign(r=np.sqrt(x["cv_depth"])).groupby("seed")["r"].mean().to_numpy(float)
    est = stats.t_interval(root, robust_level(0.95))
    row = sn.main_effects(ps, ["m.a", "m.b"]).set_index(["measure", "factor", "level"]).loc[("depth", "m.a", "x")]
    assert row["value"] == pytest.approx(est.value**2)
    assert (row["low"], row["high"]) == pytest.approx((max(est.ci_low, 0.0) ** 2, est.ci_high**2))
    assert row["note"] == ""


def test_per_seed_carries_the_factor_levels_and_is_deterministic():
    norms, ps, _ = seeded({"a": np.exp(np.random.default_rng(7).standard_normal((3, 2, 4))),
                           "b": np.exp(np.random.default_rng(8).standard_normal((3, 2, 4)))},
                          {"a": {"m.p": "x"}, "b": {"m.p": "y"}})
    assert ps.groupby("cell_id")["m.p"].first().to_dict() == {"c0": "x", "c1": "y"}
    pd.testing.assert_frame_equal(ps, sn.per_seed(norms, ps[["cell_id", "m.p"]]))


# --- on a real study (tests/real_studies.py) ---------------------------------------------------------


@pytest.fixture(scope="module")
def res(norm_study):
    import real_studies as studies

    return studies.load(norm_study, studies.NORM["name"])


def test_analysis_of_the_study(res):
    df = sn.prepare(res.curves, res.trials)
    order = sn.variants(df, res.trials)
    assert [label for _, label in order] == ["RotRNN", "LRU"]
    norms = sn.layer_norms(df)
    ps = sn.per_seed(norms, res.trials)
    assert len(ps) == 4 and (ps["steps"] == 3).all() and (ps["layers"] == 2).all()
    table = sn.stability(ps, norms, order)
    assert table["seeds"].tolist() == [2, 2] and table["steps"].tolist() == [3, 3]
    assert (table["n_training"] == 2).all() and (table["n_seeds"] == 2).all()
    comp = sn.compare(ps, norms, res.reference_cell()[0], order)
    assert not comp["testable"].any()  # two seeds: nothing tested
    check = norm_theory.theory_check(df, order)
    rot = check[check["variant"] == "RotRNN"]
    assert np.allclose(rot["stationary"], 1.0)
    assert sn.probe_batch_check(res.metrics) == (4, True)


def test_the_final_norm_is_the_whole_states_whatever_its_heads():
    """One state of norm 4 read as one head (4) or as four heads of 1 each: the same final ‖x‖²
    (a per-head norm would differ fourfold and make the head count look like an effect)."""
    one = curve_frame({"one": np.full((3, 1, 2), 4.0)})
    four = pd.concat([curve_frame({"four": np.full((3, 1, 2), 1.0)}).assign(head=h) for h in range(4)])
    for df in (one, four):
        assert sn.per_seed(sn.layer_norms(df))["final_norm"].tolist() == pytest.approx([4.0] * 3)


def test_a_measure_some_levels_cannot_have_is_analysed_on_the_levels_that_have_it():
    """Over layers at one layer there is nothing: the depth ANOVA runs on the four-layer cells."""
    rng = np.random.default_rng(9)
    values, factors = {}, {}
    for p in ("rotation", "complex"):
        for layers in (1, 4):
            values[f"{p}-{layers}"] = np.exp(0.2 * rng.standard_normal((4, layers, 5)))
            factors[f"{p}-{layers}"] = {"model.parameterisation": p, "model.layers": str(layers)}
    _, ps, _ = seeded(values, factors)
    anova, why = sn.factor_anova(ps, ["model.parameterisation", "model.layers"])
    assert set(anova.loc[anova["measure"] == "depth", "term"]) == {"model.parameterisation"}
    assert why["depth"] == "ANOVA on the cells that have the measure only (left out: model.layers = 1)"
    assert "model.layers" in set(anova.loc[anova["measure"] == "training", "term"])


def test_a_partial_anova_names_what_it_left_out_when_the_factor_still_varies():
    """Layers 1/2/4: over layers the one-layer cells drop out and layers still varies (2, 4); the
    sentence named the collapsed factors only and printed "()"."""
    rng = np.random.default_rng(10)
    values, factors = {}, {}
    for p in ("rotation", "complex"):
        for layers in (1, 2, 4):
            values[f"{p}-{layers}"] = np.exp(0.2 * rng.standard_normal((4, layers, 5)))
            factors[f"{p}-{layers}"] = {"model.parameterisation": p, "model.layers": str(layers)}
    _, ps, _ = seeded(values, factors)
    _, why = sn.factor_anova(ps, ["model.parameterisation", "model.layers"])
    assert why["depth"] == "ANOVA on the cells that have the measure only (left out: model.layers = 1)"


def test_the_spread_test_enumerates_every_split_and_finds_a_wider_spread():
    rng = np.random.default_rng(11)
    same = rng.normal(0, 1, (4, 6))
    p, exact, p_min = sn.norm_seeds.spread_test(same, same.copy(), paired=False)
    assert exact and p == 1.0 and p_min == pytest.approx(2 / 70)  # C(8, 4) splits, none more extreme
    wide, narrow = rng.normal(0, 3, (6, 6)), rng.normal(0, 1, (6, 6))
    p, exact, _ = sn.norm_seeds.spread_test(wide, narrow, paired=False)
    assert exact and p < 0.01
    # Monte Carlo beyond the limit gives (hits + 1)/(B + 1) near the exact p.
    p_mc, exact_mc, p_min_mc = sn.norm_seeds.spread_test(wide, narrow, paired=False, n_resamples=500)
    assert not exact_mc and p_min_mc == pytest.approx(2 / 501) and p_mc == pytest.approx(p, abs=0.02)
    # Paired: the 2⁶ swaps of each seed's two runs.
    p, exact, p_min = sn.norm_seeds.spread_test(wide, narrow, paired=True)
    assert exact and p_min == pytest.approx(2 / 64) and p <= 2 / 64 + 1e-12


def test_a_level_difference_is_not_a_spread_difference():
    """Each variant is aligned on its own median first: a variant 10× the reference's norm with the
    same spread is not called different over seeds."""
    rng = np.random.default_rng(12)
    ref = rng.normal(0, 0.3, (6, 8))
    p, _, _ = sn.norm_seeds.spread_test(ref[::-1] + np.log(10), ref, paired=False)
    assert p == 1.0
    # Paired or not, any level that is the same over seeds (unit by unit) leaves the test's p as it is,
    # while the same shift in one seed alone (a spread) moves it.
    cell = rng.normal(0, 0.3, (8, 8))
    level = rng.normal(0, 2, (1, 8))
    ref8 = rng.normal(0, 0.3, (8, 8))
    for paired in (False, True):
        p = sn.norm_seeds.spread_test(cell, ref8, paired)[0]
        assert sn.norm_seeds.spread_test(cell + level, ref8, paired)[0] == pytest.approx(p, abs=1e-12)
        assert sn.norm_seeds.spread_test(cell, ref8 - level, paired)[0] == pytest.approx(p, abs=1e-12)
        one = np.zeros_like(cell)
        one[3] = 3.0
        assert sn.norm_seeds.spread_test(cell + one, ref8, paired)[0] < p


def test_the_ratio_interval_inverts_the_test_and_says_when_it_cannot():
    rng = np.random.default_rng(13)
    cell, ref = rng.normal(0, 0.6, (8, 10)), rng.normal(0, 0.3, (8, 10))
    low, high, why = sn.norm_seeds.ratio_interval(cell, ref, paired=True)
    ratio = sn.norm_seeds.spread(cell) / sn.norm_seeds.spread(ref)
    assert why == "" and low < ratio < high
    # At its bounds the test's p sits at α: just inside is not rejected, just outside is.
    for bound, inside in ((low, 1.01), (high, 0.99)):
        assert sn.norm_seeds.spread_test(cell / (bound * inside), ref, paired=True)[0] > 0.05
        assert sn.norm_seeds.spread_test(cell / (bound / inside), ref, paired=True)[0] <= 0.05
    low, high, why = sn.norm_seeds.ratio_interval(cell[:5], ref[:5], paired=True)
    assert np.isnan(low) and np.isnan(high) and "5 paired seeds: the test's smallest p is 0.063" in why  # as every report prints 2/2⁵


def test_over_seeds_on_different_seeds_is_the_whole_run_permutation():
    """Relabelling per-seed deviations rejects too often under the null (they share their variant's
    centre); different seeds take the whole-run permutation, and find a real difference."""
    rng = np.random.default_rng(3)
    norms, _, order = seeded({"narrow": np.exp(rng.normal(0, 0.1, (6, 1, 1)) + rng.normal(0, 0.01, (6, 2, 4))),
                              "wide": np.exp(rng.normal(0, 0.6, (6, 1, 1)) + rng.normal(0, 0.01, (6, 2, 4)))})
    norms.loc[norms["cell_id"] == "c1", "seed"] += 100  # no seed shared
    ps = sn.per_seed(norms)
    row = sn.compare(ps, norms, "c0", order).set_index("measure").loc["seeds"]
    assert not row["paired"] and row["test"] == "exact whole-run permutation" and row["n"] == 6
    assert row["p"] < 0.05 and row["ratio"] > 2 and row["ratio_low"] > 1


# --- runs that diverged, and round-off --------------------------------------------------------------


def test_a_run_with_infinite_or_zero_norms_is_flagged_not_dropped():
    """A layer that overflows to inf at the last two probes once gave a normal-looking final ‖x‖²
    from the layers left; an all-zero layer vanished from "training" and "final"."""
    rng = np.random.default_rng(20)
    values = np.exp(rng.normal(0, 0.2, (5, 2, 6)))
    values[1, 0, -2:] = np.inf
    values[3, 1, :] = 0.0
    norms = sn.layer_norms(curve_frame({"a": values}))
    assert np.isinf(norms["value"]).sum() == 2 and norms["bad"].sum() == 8
    ps = sn.per_seed(norms).set_index("seed")
    assert ps.loc[1, "bad_norms"] == 2 and ps.loc[3, "bad_norms"] == 6
    assert ps.loc[1, "flag"].startswith("non-finite or zero ‖x‖² at 2") and ps.loc[3, "flag"]
    assert ps.loc[[1, 3], ["cv_training", "cv_depth", "final_norm", "dev_seeds"]].isna().all().all()
    table = sn.stability(ps.reset_index(), norms, [("c0", "a")])
    assert table.loc[0, "seeds"] == 5 and table.loc[0, "flagged"] == 2 and table.loc[0, "n_final"] == 3
    assert "seed 1: non-finite" in table.loc[0, "flags"] and "seed 3: non-finite" in table.loc[0, "flags"]
    # A head that is NaN makes its layer's value NaN (pandas' mean would have skipped it).
    two = pd.concat([curve_frame({"a": values[:1]}).assign(head=h) for h in range(2)], ignore_index=True)
    two.loc[(two["head"] == 1) & (two["step"] == 0) & (two["layer"] == 0), "value"] = np.nan
    assert np.isnan(sn.layer_norms(two).query("layer == 0 and step == 0")["value"]).all()


def null_study(seeds: int, paired: bool, late: bool, seed: int) -> dict[str, np.ndarray]:
    """Four identical variants (seed offset, drift, layer offset, noise on the log scale); with
    ``late``, one run's ‖x‖² grows 10⁴× over the second half of its probe steps (finite)."""
    rng = np.random.default_rng(seed)
    k = np.linspace(0, 1, 11)
    shared = rng.normal(0, 0.3, (seeds, 1, 1))
    out = {}
    for name in ("ref", "a", "b", "c"):
        own = rng.normal(0, 0.3, (seeds, 1, 1))
        logs = ((shared if paired else 0) + own + rng.normal(0, 0.4, (seeds, 1, 1)) * k
                + rng.normal(0, 0.1, (seeds, 2, 1)) + rng.normal(0, 0.05, (seeds, 2, 11)))
        out[name] = logs
    out["b"][2] += np.log(1e4) * np.clip((k - 0.5) / 0.5, 0, 1) if late else 0
    return {name: np.exp(v) for name, v in out.items()}


@pytest.mark.parametrize(("seeds", "paired"), [(5, False), (8, True)])
def test_four_identical_variants_with_a_late_diverging_run_call_nothing_and_show_it(seeds, paired):
    values = null_study(seeds, paired, late=True, seed=seeds + 1)
    grid = {"ref": ("p0", "q0"), "a": ("p0", "q1"), "b": ("p1", "q0"), "c": ("p1", "q1")}
    norms, ps, order = seeded(values, {k: {"f.p": v[0], "f.q": v[1]} for k, v in grid.items()})
    if not paired:
        norms["seed"] += 100 * norms["cell_id"].str[1:].astype(int)
        ps = sn.per_seed(norms, ps[["cell_id", "f.p", "f.q"]].drop_duplicates())
    flagged = ps[ps["flag"] != ""]
    assert len(flagged) == 1 and flagged.iloc[0]["cell_id"] == "c2"
    assert flagged.iloc[0]["flag"].startswith("late growth: ‖x‖² grew")
    table = sn.stability(ps, norms, order)
    assert table.set_index("cell_id").loc["c2", "flagged"] == 1 and "late growth" in table.loc[2, "flags"]
    comp = sn.compare(ps, norms, "c0", order)
    anova, _ = sn.factor_anova(ps, ["f.p", "f.q"])
    assert not comp["significant"].any() and not anova["significant"].any()
    assert comp.loc[comp["cell_id"] == "c2", "n_cell"].min() == seeds - 1  # the primary analysis leaves it out
    # What the late run changes: nothing — the same verdicts, p and ratios as with the run deleted.
    gone = norms[~((norms["cell_id"] == "c2") & (norms["seed"] == flagged.iloc[0]["seed"]))]
    ps_gone = sn.per_seed(gone, ps[["cell_id", "f.p", "f.q"]].drop_duplicates())
    pd.testing.assert_frame_equal(comp, sn.compare(ps_gone, gone, "c0", order))
    back = sn.sensitivity(ps, norms, "c0", order)
    assert back is not None and back.loc[back["cell_id"] == "c2", "n_cell_back"].max() == seeds
    assert (back["significant"] == comp.set_index(["measure", "cell_id"]).loc[
        list(zip(back["measure"], back["cell_id"], strict=True)), "significant"].to_numpy()).all()
    assert sn.sensitivity(ps[ps["flag"] == ""], norms, "c0", order) is None


def test_a_cell_exactly_a_multiple_of_its_reference_is_not_tested_on_round_off():
    """A cell exactly 1.1× its reference: its CVs equal the reference's up to 2e-16, once a
    sign-flip p of 0.125; identical seeds once printed 0.23 [0.23, 0.23]."""
    rng = np.random.default_rng(21)
    ref = np.exp(rng.normal(0, 0.3, (5, 2, 6)))
    norms, ps, order = seeded({"ref": ref, "cell": 1.1 * ref})
    comp = sn.compare(ps, norms, "c0", order).set_index("measure")
    for m in ("training", "depth"):
        assert np.isnan(comp.loc[m, "p"]) and not comp.loc[m, "testable"] and np.isnan(comp.loc[m, "ratio_low"])
        assert comp.loc[m, "note"].startswith("no spread beyond round-off")
    assert comp.loc["seeds", "ratio"] == pytest.approx(1.0)
    same = np.repeat(np.exp(rng.normal(0, 0.3, (1, 2, 6))), 4, axis=0)
    norms, ps, order = seeded({"same": same, "other": ref[:4]})
    table = sn.stability(ps, norms, order).set_index("cell_id")
    for m in ("training", "depth", "final"):
        col = sn.VALUE[m]
        assert np.isnan(table.loc["c0", f"{col}_low"]) and table.loc["c0", f"{col}_note"] == "no spread beyond round-off"
        assert np.isfinite(table.loc["c1", f"{col}_low"]) and table.loc["c1", f"{col}_note"] == ""
    assert table.loc["c0", "sd_seeds"] == 0.0 and np.isnan(table.loc["c0", "sd_seeds_low"])


def test_the_anova_refuses_runs_equal_to_round_off():
    values, factors = {}, {}
    for p in ("x", "y"):
        for q in ("u", "v"):
            values[f"{p}{q}"] = np.tile(np.exp(np.linspace(0, 1, 6))[None, None, :] * (2.0 if p == "y" else 1.0),
                                        (3, 2, 1))
            factors[f"{p}{q}"] = {"f.p": p, "f.q": q}
    _, ps, _ = seeded(values, factors)
    anova, why = sn.factor_anova(ps, ["f.p", "f.q"])
    assert anova.empty or not (anova["measure"] == "training").any()
    assert why["training"].startswith("no ANOVA") and "round-off" in why["training"]


def test_two_seeds_give_no_interval_over_seeds_and_say_why():
    rng = np.random.default_rng(22)
    norms, ps, order = seeded({"a": np.exp(rng.normal(0, 0.3, (2, 2, 5)))})
    row = sn.stability(ps, norms, order).iloc[0]
    assert np.isnan(row["sd_seeds_low"]) and row["sd_seeds_note"].startswith("2 seeds")


def test_a_run_whose_training_diverged_has_no_values_though_its_probes_are_finite():
    """A loss that turned NaN at step 31 left one finite probe, at step 0: its 'final' norm was its
    initial one, and a factor whose level always diverged was called significant on it."""
    rng = np.random.default_rng(8)
    norms, _, order = seeded({"ok": np.exp(rng.normal(0, 0.1, (4, 2, 5))),
                              "nan": np.exp(rng.normal(0, 0.1, (4, 2, 5)))})
    trials = pd.DataFrame({"cell_id": ["c0"] * 4 + ["c1"] * 4, "seed": [0, 1, 2, 3] * 2,
                           "status": ["complete"] * 4 + ["diverged"] * 4, "steps": [100] * 4 + [31] * 4})
    ps = sn.per_seed(norms, trials, factors=[])
    lost = ps[ps["cell_id"] == "c1"]
    assert lost["diverged"].all() and lost["nonfinite"].all() and lost["flagged"].all()
    assert (lost["flag"] == "training diverged at step 31 (its last probe is not its end)").all()
    assert lost[["cv_training", "cv_depth", "final_norm", "dev_seeds"]].isna().all().all()
    kept = ps[ps["cell_id"] == "c0"]
    assert not kept["diverged"].any() and kept["final_norm"].notna().all() and (kept["flag"] == "").all()
    # The over-seeds comparison with a variant none of whose runs is left is a row, untested (it
    # raised an IndexError); the other measures have no row for it.
    comp = sn.compare(sn.primary(ps), norms, "c0", order)
    assert list(comp["measure"]) == ["seeds"] and not comp["testable"].any() and not comp["significant"].any()
