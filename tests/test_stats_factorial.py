"""Marginal means, main effects, interactions and the factorial ANOVA (``ablate.stats.factorial``) on
constructed data and on a real partial study."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from frames import METRIC, A, B, factorial, make_trials, set_status
from scipy import stats as sps

from ablate import stats


def test_main_effects_are_unweighted_marginal_means_with_ci():
    """Every cell ran seeds 0–3: a level's interval is the t interval of its per-seed means over the
    level's cells (a seed effect common to the cells does not average out of a marginal mean)."""
    trials = factorial(effect_a=0.05, seeds=4, sd=0.01, rng=np.random.default_rng(2))
    eff = stats.main_effects(trials, METRIC, [A, B])
    assert eff["factor"].tolist() == [A, A, B, B, B]
    assert eff["level"].tolist() == ["rotation", "diagonal", "xi", "none", "layer"]
    cell_means = trials.groupby("cell_id", sort=False)[METRIC].mean()
    rot = eff.set_index(["factor", "level"]).loc[(A, "rotation")]
    assert rot["mean"] == pytest.approx(cell_means[["rotation-xi", "rotation-none", "rotation-layer"]].mean())
    assert rot["n_cells"] == 3 and rot["n"] == 12 and rot["df"] == 3 and rot["interval"] == "seed-blocked t"
    per_seed = trials[trials[A] == "rotation"].groupby("seed")[METRIC].mean()
    est = stats.t_interval(per_seed, stats.robust_level(0.95))  # the report's 95%: t at 99%
    assert (rot["ci_low"], rot["ci_high"]) == pytest.approx((est.ci_low, est.ci_high))
    assert rot["ci_note"] == ""
    a = eff[eff["factor"] == A].set_index("level")
    assert a.loc["diagonal", "ci_low"] > a.loc["rotation", "ci_high"]  # the planted effect shows


def _unpaired(sd: dict[str, float], runs: int = 4, seed: int = 2) -> pd.DataFrame:
    """A 2 × 2 whose cells ran seeds of their own, each cell's runs of sd ``sd[level of A]``."""
    rng = np.random.default_rng(seed)
    cells = {f"{a}-{b}": 0.8 + 0.05 * i for i, a in enumerate(["rotation", "diagonal"]) for b in ["xi", "none"]}
    factors = {c: {A: c.split("-")[0], B: c.split("-")[1]} for c in cells}
    parts = [make_trials({c: mu}, {c: list(range(10 * i, 10 * i + runs))}, sd=sd[c.split("-")[0]], rng=rng,
                         factors=factors) for i, (c, mu) in enumerate(cells.items())]
    return pd.concat(parts, ignore_index=True)


def test_marginal_means_give_each_cell_its_own_variance_when_seeds_are_each_cells_own():
    trials = _unpaired({"rotation": 0.01, "diagonal": 0.01})
    rot = stats.main_effects(trials, METRIC, [A]).set_index("level").loc["rotation"]
    var = trials[trials[A] == "rotation"].groupby("cell_id")[METRIC].var().to_numpy()
    se = np.sqrt((var / 4).sum()) / 2
    df = (var / 4).sum() ** 2 / ((var / 4) ** 2 / 3).sum()  # Welch–Satterthwaite
    assert rot["interval"] == "Welch t" and rot["df"] == pytest.approx(df) and rot["se"] == pytest.approx(se)
    assert rot["ci_high"] - rot["mean"] == pytest.approx(sps.t.ppf(0.995, df) * se)


def test_a_level_whose_runs_vary_more_gets_a_wider_interval_than_the_pooled_variance_gives():
    """One level's runs vary 5× the other's: the pooled variance over all cells gave both levels the
    study's common spread, too narrow for the noisy level (and too wide for the quiet one)."""
    trials = _unpaired({"rotation": 0.002, "diagonal": 0.01}, seed=3)
    eff = stats.main_effects(trials, METRIC, [A]).set_index("level")
    resid = trials[METRIC] - trials.groupby("cell_id")[METRIC].transform("mean")
    pooled = sps.t.ppf(0.995, 12) * np.sqrt((resid**2).sum() / 12 * 2 / 4) / 2  # the pooled t's half-width
    half = eff["ci_high"] - eff["mean"]
    assert (eff["interval"] == "Welch t").all()
    assert half["diagonal"] > 1.2 * pooled > pooled > half["rotation"]


def test_the_pooled_variance_is_kept_only_where_a_cell_has_one_run():
    trials = _unpaired({"rotation": 0.01, "diagonal": 0.01})
    trials = set_status(trials, "rotation-xi", [1, 2, 3], "pending")  # one run left there
    eff = stats.main_effects(trials, METRIC, [A]).set_index("level")
    done = trials.dropna(subset=[METRIC])
    resid = done[METRIC] - done.groupby("cell_id")[METRIC].transform("mean")
    mse = (resid**2).sum() / (13 - 4)
    rot = eff.loc["rotation"]
    assert rot["interval"] == "pooled t: a cell has one run" and rot["df"] == 9
    assert rot["se"] == pytest.approx(np.sqrt(mse * (1 / 1 + 1 / 4)) / 2)
    assert eff.loc["diagonal", "interval"] == "Welch t"


def test_a_paired_level_that_lost_a_run_keeps_a_seed_blocked_interval():
    """Cells sharing seeds 0–7 with a seed effect 5× the runs' noise, one run lost (a seed flagged out):
    the level's interval was the pooled t, which counts the seed effect the cells share as if it
    averaged out (too narrow); it is the delete-one-seed jackknife's, over all 8 seeds."""
    trials = factorial(seeds=8, sd=0.002, rng=np.random.default_rng(5))
    shared = dict(zip(range(8), np.random.default_rng(6).normal(0, 0.01, 8), strict=True))
    trials[METRIC] = trials[METRIC] + trials["seed"].map(shared)
    lost = set_status(trials, "rotation-none", [3], "failed")
    rot = stats.main_effects(lost, METRIC, [A]).set_index("level").loc["rotation"]
    assert rot["interval"] == "seed-blocked t, jackknifed over 8 seeds (not every cell ran each)"
    runs = lost[(lost[A] == "rotation") & lost[METRIC].notna()]
    means = runs.groupby("cell_id")[METRIC].mean()
    loo = np.array([runs[runs["seed"] != s].groupby("cell_id")[METRIC].mean().mean() for s in range(8)])
    parts = 7 / 8 * (loo - loo.mean()) ** 2
    assert rot["se"] == pytest.approx(np.sqrt(parts.sum()))
    # seed 3, the one seed two cells ran, has no spread of its own: it counts with the other 7, so 7 df
    assert rot["df"] == 7
    assert rot["mean"] == pytest.approx(means.mean())  # every run counts
    assert rot["ci_high"] - rot["mean"] == pytest.approx(sps.t.ppf(0.995, rot["df"]) * rot["se"])
    assert rot["se"] > 1.5 * np.sqrt(runs.groupby("cell_id")[METRIC].var().mean() / 23)  # the pooled se
    whole = stats.main_effects(trials, METRIC, [A]).set_index("level")
    assert whole.loc["diagonal", "interval"] == "seed-blocked t" and whole.loc["diagonal", "df"] == 7
    # with every run, the jackknife is the per-seed means' t: losing a run changes the se a little
    assert rot["se"] == pytest.approx(whole.loc["rotation", "se"], rel=0.3)


def test_the_seed_jackknife_is_the_per_seed_means_t_when_every_cell_ran_every_seed():
    from ablate.stats.factorial import _seed_jackknife

    trials = factorial(seeds=5, sd=0.01, rng=np.random.default_rng(1))
    runs = trials[trials[A] == "rotation"]
    se, seeds, _, df = _seed_jackknife(runs, METRIC)
    assert seeds == 5 and se == pytest.approx(runs.groupby("seed")[METRIC].mean().std(ddof=1) / np.sqrt(5))
    assert df == 4
    # cells that share fewer than two seeds have none (they get Welch's t)
    assert _seed_jackknife(runs.assign(seed=runs["seed"] + 10 * runs["cell_id"].factorize()[0]), METRIC) is None


def test_a_cell_that_stopped_early_gives_its_levels_jackknife_the_df_of_its_own_seeds():
    """A sequential design's cell that stopped at 3 seeds while the others ran 16. Where all of the level's
    spread is that cell's (the others' runs equal), its interval rests on those 3 seeds: 2 df, not 15
    (Satterthwaite over the groups of seeds the same cells ran); with every cell on every seed, 15."""
    from ablate.stats.factorial import _seed_jackknife

    trials = factorial(seeds=16, sd=0.01, rng=np.random.default_rng(2))
    rotation = trials[trials[A] == "rotation"].copy()
    stopped = rotation["cell_id"] == "rotation-xi"
    rotation.loc[~stopped, METRIC] = 0.8  # the cells that ran on do not vary
    runs = rotation[~stopped | (rotation["seed"] < 3)]
    se, seeds, _, df = _seed_jackknife(runs, METRIC)
    assert seeds == 16 and df == pytest.approx(2.0) and se > 0
    level = stats.main_effects(runs, METRIC, [A]).set_index("level").loc["rotation"]
    assert level["df"] == pytest.approx(2.0)
    # Two groups that both vary: Satterthwaite over them, each on its seeds − 1
    varied = factorial(seeds=16, sd=0.01, rng=np.random.default_rng(3))
    varied = varied[(varied[A] == "rotation") & ((varied["cell_id"] != "rotation-xi") | (varied["seed"] < 3))]
    se, seeds, loo, df = _seed_jackknife(varied, METRIC)
    parts = 15 / 16 * (loo - loo.mean()) ** 2
    assert df == pytest.approx(parts.sum() ** 2 / (parts[:3].sum() ** 2 / 2 + parts[3:].sum() ** 2 / 12))
    assert 2 < df < 15
    assert _seed_jackknife(trials[trials[A] == "rotation"].iloc[::-1], METRIC)[3] == 15  # every seed: 15


def test_lost_seed_intervals_cover():
    """200 paired 2 × 3 studies at 4 seeds, a seed effect of sd 0.02 beside run noise 0.005, one random
    run of one rotation cell lost: the pooled t's 95% interval of rotation covered 0.81 of them."""
    rng = np.random.default_rng(11)
    hits = 0
    for _ in range(200):
        trials = factorial(seeds=4, sd=0.005, rng=rng)
        trials[METRIC] = trials[METRIC] + trials["seed"].map(dict(enumerate(rng.normal(0, 0.02, 4))))
        cell = ["rotation-xi", "rotation-none", "rotation-layer"][rng.integers(3)]
        lost = set_status(trials, cell, [int(rng.integers(4))], "failed")
        rot = stats.main_effects(lost, METRIC, [A]).set_index("level").loc["rotation"]
        hits += bool(rot["ci_low"] <= 0.8 <= rot["ci_high"])
    assert hits >= sps.binom.ppf(0.001, 200, 0.95)


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
    with pytest.raises(stats.AnovaNotApplicable, match="not every cell has a completed run"):
        stats.anova(set_status(trials, "diagonal-xi", [0, 1, 2], "pending"), METRIC, [A, B])
    # A combination the design never had is not "yet": the report must not promise it.
    ok, why = stats.anova_applicable(trials[trials.cell_id != "diagonal-xi"], METRIC, [A, B])
    assert not ok and why.endswith("not a full factorial: it has 5 of the 6 combinations of the factors' levels")
    with pytest.raises(stats.AnovaNotApplicable, match="replication"):
        stats.anova(factorial(seeds=1), METRIC, [A, B])
    ok, why = stats.anova_applicable(trials[trials[A] == "rotation"], METRIC, [A, B])
    assert not ok and A in why


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
    assert not ok and "not every cell has a completed run" in why
    subset, dropped = stats.anova_on_finished_levels(trials, "test_accuracy", factors)
    assert dropped == {"model.normalisation": ["none"]}
    table = stats.anova(subset, "test_accuracy", factors)
    assert list(table.term) == ["model.normalisation", "model.layers", "model.normalisation × model.layers",
                                "Residual"]
    assert table.loc[table.term == "Residual", "df"].item() == 7 - 4


def _two_cells(values: dict[str, list[float]]) -> pd.DataFrame:
    cells = {c: 0.0 for c in values}
    factors = {c: {A: c} for c in values}
    trials = make_trials(cells, seeds=len(next(iter(values.values()))), sd=0.0, factors=factors)
    for c, v in values.items():
        trials.loc[trials.cell_id == c, METRIC] = v
    return trials


def test_anova_refuses_a_residual_of_round_off():
    """Every run at 1.0 in two cells (one run a sum of ten 0.1s) gave F 3.6, p 0.13, partial η² 0.47;
    cells at 1.0 and 0.99 with no spread gave p 1.5e-54 ***. Neither has a residual to test against."""
    at_one = _two_cells({"rotation": [1.0, 1.0, 1.0], "diagonal": [sum([0.1] * 10), 1.0, 1.0]})
    apart = _two_cells({"rotation": [1.0, 1.0, 1.0], "diagonal": [0.99, 0.1 * 9.9, 1 - 0.01]})
    for trials in (at_one, apart):
        ok, why = stats.anova_applicable(trials, METRIC, [A])
        assert not ok and "no spread within the cells" in why
        with pytest.raises(stats.AnovaNotApplicable, match="round-off"):
            stats.anova(trials, METRIC, [A])
    spread = _two_cells({"rotation": [1.0, 0.99, 0.995], "diagonal": [0.97, 0.96, 0.965]})
    assert stats.anova(spread, METRIC, [A]).set_index("term").loc[A, "p"] < 0.05


def test_seed_blocked_marginal_means_at_the_ceiling_have_no_interval():
    """Two cells sharing seeds, every run 1.0: the marginal mean is 1.0 with no interval (was [1.0, 1.0])."""
    cells = {"rotation-xi": 0.0, "rotation-none": 0.0}
    factors = {c: {A: "rotation", B: c.split("-")[1]} for c in cells}
    trials = make_trials(cells, seeds=4, sd=0.0, factors=factors)
    trials[METRIC] = 1.0
    row = stats.main_effects(trials, METRIC, [A]).iloc[0]
    assert row["interval"] == "seed-blocked t" and row["mean"] == 1.0
    assert np.isnan(row["ci_low"]) and np.isnan(row["ci_high"]) and row["ci_note"] == "no spread: 4 seeds' means equal"


def test_marginal_means_of_an_accuracy_stay_inside_zero_and_one():
    """A marginal mean near 1.0 printed 1.000 [0.994, 1.006]: its interval is clipped to [0, 1]."""
    cells = {"rotation-xi": 0.0, "rotation-none": 0.0}
    factors = {c: {A: "rotation", B: c.split("-")[1]} for c in cells}
    trials = make_trials(cells, seeds=3, sd=0.0, factors=factors)
    trials[METRIC] = [1.0, 0.996, 1.0, 1.0, 1.0, 0.998]
    row = stats.main_effects(trials, METRIC, [A]).iloc[0]
    assert row["ci_high"] == 1.0 and row["ci_low"] < row["mean"] < 1.0 and row["ci_note"] == ""
