"""Calibration of the accuracy report's statistics, printed: the tests under the null, the coverage of
every interval the report labels 95%, and the convergence flag.

    python benchmarks/bench_stats_calibration.py [--studies 200] [--coverage-studies 40] [--runs 2000]
        [--alpha 0.05] [--seed 2024] [--parts null,coverage,convergence] [--noise-from HOME] [--before]
        [--tiny]

``--tiny`` runs a handful of studies of every part in seconds (``tests/test_bench_stats_calibration.py``
runs it): it checks that the benchmark runs, not the rates.

**Null false-positive rates.** Each null study is a reference and three other cells with the same
true accuracy, compared by ``ablate.stats.compare_to_reference`` exactly as the report does. Per
setting it prints the false-positive rate per comparison (uncorrected p < α, over 3 × studies
comparisons) and family-wise (any comparison significant after Holm, over the studies), for the
report's test (the exact permutation test), for the t-test it prints beside it, and for the t-test
the report used before (from two seeds on, zero spread giving p = 0), with the share of comparisons
that were not tested (too few seeds), and a 99.9% binomial band around α; and the rate of the 2 × 2
ANOVA of the same four cells per term. Settings: paired seeds (each seed shifts every cell alike, as
a shared data order does) with 2, 3, 5 and 8 seeds; unpaired 5 vs 5 runs; *discrete* accuracies —
each run's accuracy is the share of a 200-example test set it gets right, so ties between runs are
common; and the nulls that training gives beside the Gaussian ones: a heavy left tail (15% of runs
lose an exponential number of points, mean 6), log-normal seed effects (σ 0.5 and 1, their heavy
tail on the bad side), and accuracies at the ceiling (1 − Exp(0.003), a 1,000-example test set:
many runs tie at 1.0). A valid test stays at or below α; one far below α cannot detect anything
there (its smallest p is above α).

**Coverage.** Simulated studies of realistic seed-to-seed spread — a 2 × 2 × 2 factorial of eight
cells around accuracies 0.6–0.8, run-to-run sd 0.01–0.03, in three Gaussian settings: paired seeds
with a shared seed effect; the same with each run's accuracy a binomial share of a 1,000-example
test set; unpaired runs — and in the skewed ones of the nulls (a heavy left tail; log-normal seed
effects σ 0.5 and 1, paired and unpaired; accuracies at the ceiling, 0.99–1.0 with ties at 1.0,
exact and on a 1,000-example test set; and, as a stress beyond them, runs whose only noise is
log-normal σ 1) — analysed by the functions the report's notebook calls (``cell_summary``,
``compare_to_reference``, ``few_run_estimates``, ``performance_profile``, ``main_effects``). Each
interval's coverage is the share of the intervals the report would print that contain the true
value (from the simulation's parameters, or from a million draws of it where no closed form
exists), at every seed count the report shows it for, with the 99.9% binomial band around 95% for
that many intervals. The report's rule: at least 0.93 at 5 and 8 seeds, never below 0.90. An
entry in parentheses is the share of intervals the report prints at all (the rest are ``—``, e.g.
an IQM whose middle runs tie). ``--before`` adds the intervals the report printed before
(percentile bootstrap of the mean, the IQM and P(improvement); BCa bootstrap of the effect sizes).

**Convergence flag.** ``ablate.stats.convergence.last_fifth`` on simulated validation curves at
the passes a real trial makes (``ablate.schedule.Schedule``: one at the last fifth's boundary and
at least six in the window), for three budgets: a flat run (flagged "still improving" at most 5% of
the time, the test's level) and a run still gaining one point (0.01) over the last fifth (flagged
at least 90% of the time where its noise allows), with independent and AR(1)-correlated
pass-to-pass noise at several sizes, among them the residual sd measured on a finished quickstart
study's last fifths (``--noise-from`` its home, default the quickstart store found from here). The
last column is the most any 5%-level test of a rise could flag with that noise: the one-sided z
test on the fitted slope with the noise known. Rates only: no timings.
"""

from __future__ import annotations

import argparse
import itertools
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as sps

from ablate import stats
from ablate.stats.multiplicity import adjusted

CELLS = ("base", "a", "b", "c")
METRIC = "test_accuracy"
LEVEL = 0.95
#: The report's coverage rule: at least this at 5 and 8 seeds, and never below the floor.
REQUIRED, REQUIRED_AT, FLOOR = 0.93, (5, 8), 0.90


# --- null false-positive rates ------------------------------------------------------------------


#: The null study's cells as a 2 × 2 factorial, for the ANOVA's false-positive rate.
NULL_LEVELS = {"base": ("x0", "y0"), "a": ("x1", "y0"), "b": ("x0", "y1"), "c": ("x1", "y1")}


def null_settings() -> list[tuple[Setting, int]]:
    """(setting, seeds) of the null studies: every cell at the same true accuracy."""
    gauss = Setting("paired", 0.8, 0.01, 0.01, None, True)
    binom = Setting("paired, 200-example test set", 0.8, 0.01, 0.01, 200, True)
    tail = Setting("paired, 15% of runs lose Exp(6 pt)", 0.8, 0.0125, 0.005, None, True, 0.15, 0.06)
    tail_u = Setting("unpaired, 15% of runs lose Exp(6 pt)", 0.8, 0.0125, 0.0, None, False, 0.15, 0.06)
    ln5 = Setting("paired, log-normal seeds σ 0.5", 0.7, 0.01, 0.01, None, True, seed_lognormal=0.5)
    ln1 = Setting("paired, log-normal seeds σ 1", 0.7, 0.005, 0.01, None, True, seed_lognormal=1.0)
    ln1_u = Setting("unpaired, log-normal seeds σ 1", 0.7, 0.01, 0.01, None, False, seed_lognormal=1.0)
    ceil = Setting("paired, ceiling, 1,000-ex. test set", 1.0, 0.0, 0.001, 1000, True, 1.0, 0.003)
    ceil_u = Setting("unpaired, ceiling, exact", 1.0, 0.0, 0.0, None, False, 1.0, 0.003)
    return [(gauss, 2), (gauss, 3), (gauss, 5), (gauss, 8), (Setting("unpaired", 0.8, 0.01, 0.0, None, False), 5),
            (binom, 2), (binom, 5), (binom, 8), (tail, 5), (tail, 8), (tail_u, 5), (ln5, 5), (ln5, 8), (ln1, 5),
            (ln1, 8), (ln1_u, 5), (ln1_u, 8), (ceil, 5), (ceil, 8), (ceil_u, 5)]


def null_trials(rng: np.random.Generator, setting: Setting, seeds: int) -> pd.DataFrame:
    """One null study: every cell at ``setting.base``, with its noise, seed effects, tail and ceiling
    (shared seeds when paired); the cells are the 2 × 2 factorial ``NULL_LEVELS``."""
    shared = seed_effects(setting, seeds, rng)
    rows = []
    for i, cell in enumerate(CELLS):
        values = _draw(setting, 0.0, shared if setting.paired else seed_effects(setting, seeds, rng), rng)
        x, y = NULL_LEVELS[cell]
        for s, p in enumerate(values):
            rows.append({"cell_id": cell, "cell_label": cell, "seed": s if setting.paired else 100 * i + s,
                         "phase": "replicate", "status": "complete", METRIC: float(p), "model.x": x, "model.y": y})
    return pd.DataFrame(rows)


def t_test_as_before(cmp: pd.DataFrame) -> np.ndarray:
    """The t-test p of every comparison with two values a side, as the report computed it before
    (paired t on the differences, else Welch): a zero spread gives p = 0 there."""
    out = []
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")  # scipy's precision warning for nearly equal values: the point here
        for r in cmp.itertuples():
            if r.paired:
                out.append(sps.ttest_1samp(np.asarray(r.diffs), 0.0).pvalue if len(r.diffs) >= 2 else np.nan)
            elif min(len(r.values_cell), len(r.values_ref)) >= 2:
                out.append(sps.ttest_ind(r.values_cell, r.values_ref, equal_var=False).pvalue)
            else:
                out.append(np.nan)
    return np.nan_to_num(np.asarray(out, dtype=float), nan=1.0)  # 0/0 (no difference at all): not a finding


def calibrate(studies: int, setting: Setting, seeds: int, alpha: float,
              rng: np.random.Generator) -> dict[str, float]:
    per = per_t = family = family_t = per_old = family_old = untested = 0
    anova_terms = anova_any = anova_runs = 0
    p_min = np.nan
    for _ in range(studies):
        trials = null_trials(rng, setting, seeds)
        cmp = stats.compare_to_reference(trials, METRIC, "base", alpha=alpha)
        per += int((cmp["p"] < alpha).sum())
        per_t += int((cmp["t_p"] < alpha).sum())
        family += bool(cmp["significant"].any())
        family_t += bool((cmp["t_p_adj"] < alpha).any())
        untested += int((~cmp["testable"]).sum())
        old = t_test_as_before(cmp)
        per_old += int((old < alpha).sum())
        family_old += bool(adjusted(old).min() < alpha)
        p_min = np.nanmin([p_min, *cmp["p_min"]]) if cmp["p_min"].notna().any() else p_min
        try:
            table = stats.anova(trials, METRIC, ["model.x", "model.y"])
        except stats.AnovaNotApplicable:
            continue  # no spread within the cells (ties at the ceiling): no F, counted as not significant
        finally:
            anova_runs += 1
        terms = table.loc[table["term"] != "Residual", "p"].to_numpy(float)
        anova_terms += int((terms < alpha).sum())
        anova_any += bool((terms < alpha).any())
    k = len(CELLS) - 1
    return {"per": per / (k * studies), "per_t": per_t / (k * studies), "family": family / studies,
            "family_t": family_t / studies, "per_old": per_old / (k * studies), "family_old": family_old / studies,
            "untested": untested / (k * studies), "p_min": p_min, "anova_term": anova_terms / (3 * anova_runs),
            "anova_any": anova_any / anova_runs}


def null_tables(studies: int, alpha: float, rng: np.random.Generator) -> list[str]:
    """Print the null table; return the rates above their 99.9% band (the rule: a test's rate at or
    below α within sampling error; the t-tests are printed, not held to it)."""
    k = len(CELLS) - 1
    lo, hi = sps.binom.interval(0.999, k * studies, alpha)
    flo, fhi = sps.binom.interval(0.999, studies, alpha)
    alo, ahi = sps.binom.interval(0.999, 3 * studies, alpha)
    print(f"NULL FALSE-POSITIVE RATES: {studies} null studies per setting (reference + {k} cells, no effect), "
          f"α = {alpha:g}; 99.9% band around α: per comparison [{lo / (k * studies):.3f}, {hi / (k * studies):.3f}], "
          f"family-wise [{flo / studies:.3f}, {fhi / studies:.3f}], ANOVA per term [{alo / (3 * studies):.3f}, "
          f"{ahi / (3 * studies):.3f}]")
    print()
    header = (f"{'setting':<38}{'seeds':>6}{'untested':>10}{'smallest p':>12}{'exact: per':>12}{'family':>8}"
              f"{'t beside: per':>15}{'family':>8}{'t before: per':>15}{'family':>8}{'ANOVA: term':>13}{'any':>7}")
    print(header)
    print("-" * len(header))
    misses = []
    for setting, seeds in null_settings():
        r = calibrate(studies, setting, seeds, alpha, rng)
        p_min = "—" if np.isnan(r["p_min"]) else f"{r['p_min']:.4f}"
        print(f"{setting.name:<38}{seeds:>6}{r['untested']:>10.0%}{p_min:>12}{r['per']:>12.3f}{r['family']:>8.3f}"
              f"{r['per_t']:>15.3f}{r['family_t']:>8.3f}{r['per_old']:>15.3f}{r['family_old']:>8.3f}"
              f"{r['anova_term']:>13.3f}{r['anova_any']:>7.3f}")
        for what, rate, top in (("exact test per comparison", r["per"], hi / (k * studies)),
                                ("exact test family-wise (Holm)", r["family"], fhi / studies),
                                ("ANOVA per term", r["anova_term"], ahi / (3 * studies))):
            if rate > top:
                misses.append(f"null {setting.name}, {seeds} seeds: {what} {rate:.3f} above its band (≤ {top:.3f})")
    print()
    print("per: share of comparisons with uncorrected p < α; family: share of studies with any comparison "
          "significant after Holm. exact: the report's test; t beside: the t-test the report prints beside it "
          "(from 3 seeds); t before: the t-test the report used before, from 2 seeds, a zero spread giving p = 0. "
          "Untested comparisons (fewer than 3 seeds) count as not significant. ANOVA: the 2 × 2 factorial ANOVA "
          "of the same four cells (type II), share of its three terms with p < α (each printed uncorrected) and of "
          "studies with any; a study whose cells have no spread beyond round-off gets no ANOVA (not significant).")
    return misses


# --- coverage of the report's 95% intervals -----------------------------------------------------

FACTORS = ("model.a", "model.b", "model.c")
#: True effects of the factorial's factors (accuracy points as fractions) and of a × b: differences
#: from none to about two run-to-run sds, so the intervals are checked away from zero too.
EFFECTS = {"model.a": 0.01, "model.b": -0.02, "model.c": 0.0}
INTERACTION = 0.01
SEED_COUNTS = (3, 4, 5, 6, 8)


@dataclass(frozen=True)
class Setting:
    name: str
    base: float  # the reference cell's accuracy (before the tail and the ceiling)
    sd: float  # run-to-run sd within a cell (beyond the shared seed effect)
    seed_sd: float  # sd of the effect a seed has on every cell alike (0: unpaired, no shared seeds)
    test_size: int | None  # each accuracy a binomial share of this many examples, or exact
    paired: bool
    tail_share: float = 0.0  # the share of runs that lose points ...
    tail_mean: float = 0.0  # ... an exponential number of them, with this mean
    seed_lognormal: float = 0.0  # σ of log-normal seed effects (their lower tail heavy), 0: normal
    effect_scale: float = 1.0  # the factorial's effects times this (near the ceiling they are smaller)

    @property
    def gaussian(self) -> bool:
        """Whether every true value has a closed form (normal noise, no tail, nowhere near 0 or 1)."""
        return not (self.tail_share or self.seed_lognormal) and 0.05 < self.base < 0.95


SETTINGS = (
    Setting("paired, sd 0.02 + seed 0.01", 0.70, 0.02, 0.01, None, True),
    Setting("paired, sd 0.01 + seed 0.01, 1,000-example test set", 0.80, 0.01, 0.01, 1000, True),
    Setting("unpaired, sd 0.03", 0.60, 0.03, 0.0, None, False),
    Setting("paired, heavy left tail: 15% of runs lose Exp(6 points)", 0.80, 0.0125, 0.005, None, True, 0.15, 0.06),
    Setting("paired, log-normal seed effects σ 0.5 (sd 0.01) + sd 0.01", 0.70, 0.01, 0.01, None, True,
            seed_lognormal=0.5),
    Setting("paired, log-normal seed effects σ 1 (sd 0.01) + sd 0.005", 0.70, 0.005, 0.01, None, True,
            seed_lognormal=1.0),
    Setting("unpaired, log-normal seed effects σ 1 (sd 0.01) + sd 0.01", 0.70, 0.01, 0.01, None, False,
            seed_lognormal=1.0),
    # Beyond the nulls above: every run's noise log-normal σ 1 (skewness 6), nothing normal beside it.
    Setting("stress: unpaired, runs all log-normal σ 1 (sd 0.02)", 0.70, 0.0, 0.02, None, False, seed_lognormal=1.0),
    Setting("ceiling: 0.99–1.0, 1,000-example test set (ties at 1.0)", 1.0, 0.0, 0.001, 1000, True, 1.0, 0.003,
            effect_scale=0.1),
    Setting("ceiling: 0.99–1.0, exact (ties at 1.0)", 1.0, 0.0, 0.001, None, True, 1.0, 0.003, effect_scale=0.1),
)


def _cells() -> list[tuple[str, dict[str, str], float]]:
    """(cell id, levels, true probability of a correct answer before noise) of the 2 × 2 × 2 factorial."""
    out = []
    for levels in itertools.product((0, 1), repeat=len(FACTORS)):
        mu = sum(EFFECTS[f] * lv for f, lv in zip(FACTORS, levels, strict=True)) + INTERACTION * levels[0] * levels[1]
        cid = "".join(map(str, levels))
        out.append((cid, {f: f"l{lv}" for f, lv in zip(FACTORS, levels, strict=True)}, mu))
    return out


def seed_effects(setting: Setting, size: int, rng: np.random.Generator) -> np.ndarray:
    """The effect of each of ``size`` seeds, mean 0 and sd ``seed_sd``: normal, or minus a centred
    log-normal (a seed that does badly does much worse than one that does well does better)."""
    if not setting.seed_lognormal:
        return rng.normal(0.0, setting.seed_sd, size)
    s2 = setting.seed_lognormal**2
    z = rng.lognormal(0.0, setting.seed_lognormal, size)
    return -setting.seed_sd * (z - math.exp(s2 / 2)) / math.sqrt((math.exp(s2) - 1) * math.exp(s2))


def _draw(setting: Setting, mu: float, shared: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    p = setting.base + setting.effect_scale * mu + shared + rng.normal(0.0, setting.sd, shared.shape)
    if setting.tail_share:
        p = p - (rng.random(shared.shape) < setting.tail_share) * rng.exponential(setting.tail_mean, shared.shape)
    p = np.clip(p, 0.0, 1.0)  # an accuracy: at the ceiling, runs tie at 1.0
    if setting.test_size:
        return rng.binomial(setting.test_size, p) / setting.test_size
    return p


def study_trials(setting: Setting, seeds: int, rng: np.random.Generator) -> pd.DataFrame:
    """One simulated study of the factorial: ``seeds`` runs per cell (shared seeds when paired; each
    unpaired run then has its own draw of the seed effect)."""
    cells = _cells()
    shared = seed_effects(setting, seeds, rng)
    rows = []
    for k, (cid, levels, mu) in enumerate(cells):
        values = _draw(setting, mu, shared if setting.paired else seed_effects(setting, seeds, rng), rng)
        label = ", ".join(f"{f.split('.')[-1]}={lv}" for f, lv in levels.items())
        for s, v in enumerate(values):
            rows.append({"cell_id": cid, "cell_label": label, "seed": s if setting.paired else 100 * k + s,
                         "phase": "replicate", "status": "complete", METRIC: float(v), **levels})
    return pd.DataFrame(rows)


@dataclass
class Truth:
    """What each interval estimates, for one setting: per cell the mean, the IQM, the share of runs
    above the profile's τ; per comparison the difference, the standardised difference and P(improvement);
    per factor level the marginal mean."""

    mean: dict[str, float]
    iqm: dict[str, float]
    above: dict[str, np.ndarray]
    taus: np.ndarray
    diff: dict[str, float]
    std_diff: dict[str, float]
    pi: dict[str, float]
    marginal: dict[tuple[str, str], float]


def truth_of(setting: Setting, draws: int, rng: np.random.Generator) -> Truth:
    """The true values. For a Gaussian setting in closed form where they are exact — means,
    differences, marginal means and standardised differences, from the run variance
    σ² + τ² + E[p(1 − p)]/N (a paired difference's from 2σ² and both cells' binomial terms, the seed
    effect τ cancelling) — and otherwise (a tail, log-normal seed effects, the ceiling) from
    ``draws`` runs per cell: independent ones (their own seed effects) for the IQM, P(improvement),
    the profile's shares and an unpaired standardised difference, runs sharing one seed effect per
    draw for a paired one. Their Monte Carlo error is far below any interval's width."""
    cells = _cells()
    ref, (_, _, mu_ref) = cells[0][0], cells[0]
    v_seed = setting.sd**2 + setting.seed_sd**2

    def binomial(m: float) -> float:  # E[p(1 − p)]/N: the test set's own variance of one run
        return (m * (1 - m) - v_seed) / setting.test_size if setting.test_size else 0.0

    big = {cid: _draw(setting, mu, seed_effects(setting, draws, rng), rng) for cid, _, mu in cells}
    if setting.gaussian:
        mean = {cid: setting.base + mu for cid, _, mu in cells}
    else:
        mean = {cid: float(v.mean()) for cid, v in big.items()}
        shared = seed_effects(setting, draws, rng)
        together = {cid: _draw(setting, mu, shared, rng) for cid, _, mu in cells}
    taus = np.quantile(big[ref], [0.25, 0.5, 0.75])
    diff, std_diff, pi = {}, {}, {}
    for cid, _, mu in cells[1:]:
        x, y = big[cid], big[ref]  # drawn with their own seed effects: runs of different seeds
        pi[cid] = float(np.mean(x > y) + 0.5 * np.mean(x == y))
        if setting.gaussian:
            diff[cid] = mu - mu_ref
            if setting.paired:
                var = 2 * setting.sd**2 + binomial(mean[cid]) + binomial(mean[ref])
            else:
                var = v_seed + (binomial(mean[cid]) + binomial(mean[ref])) / 2
        else:
            diff[cid] = mean[cid] - mean[ref]
            var = (float(np.var(together[cid] - together[ref])) if setting.paired
                   else (float(x.var()) + float(y.var())) / 2)
        std_diff[cid] = diff[cid] / math.sqrt(var)
    marginal = {(f, lv): float(np.mean([mean[cid] for cid, levels, _ in cells if levels[f] == lv]))
                for f in FACTORS for lv in ("l0", "l1")}
    return Truth(mean=mean, iqm={cid: float(stats.iqm(v)) for cid, v in big.items()},
                 above={cid: (v[:, None] > taus[None, :]).mean(axis=0) for cid, v in big.items()}, taus=taus,
                 diff=diff, std_diff=std_diff, pi=pi, marginal=marginal)


class Tally:
    """Per (interval, seed count): intervals the report would print, and how many covered."""

    def __init__(self) -> None:
        self.shown: dict[tuple[str, int], int] = {}
        self.hit: dict[tuple[str, int], int] = {}
        self.asked: dict[tuple[str, int], int] = {}

    def add(self, name: str, n: int, low: Any, high: Any, truth: Any) -> None:
        low, high, truth = (np.atleast_1d(np.asarray(v, dtype=float)) for v in (low, high, truth))
        shown = np.isfinite(low) & np.isfinite(high)
        key = (name, n)
        self.asked[key] = self.asked.get(key, 0) + int(low.size)
        self.shown[key] = self.shown.get(key, 0) + int(shown.sum())
        self.hit[key] = self.hit.get(key, 0) + int((shown & (low <= truth) & (truth <= high)).sum())


INTERVALS = (
    # name, what the report prints it as, from how many seeds
    ("cell mean: t", "per-cell table and figure: mean [95% CI]", 2),
    ("Δ vs reference: t", "comparisons: Δ [95% CI], paired t or Welch", 3),
    ("effect size: noncentral t", "comparisons: d_z or g [95% CI]", 3),
    ("few-run mean: t", "few-run: mean [95% t CI]", 3),
    ("few-run IQM: trimmed t", "few-run: IQM [95% trimmed-t CI]", stats.IQM_CI_MIN_N),
    ("P(improvement): Newcombe", "few-run: P(cell > reference) [95% Newcombe CI]", 3),
    ("profile band: Clopper–Pearson", "profiles: 95% band at τ = reference quartiles", 3),
    ("marginal mean: blocked/Welch", "main effects: marginal mean [95% CI]", 2),
)
BEFORE = (
    ("before: mean, percentile bootstrap", 3),
    ("before: IQM, percentile bootstrap", 3),
    ("before: P(improvement), percentile", 3),
    ("before: effect size, BCa bootstrap", 4),
)


def score_study(trials: pd.DataFrame, truth: Truth, n: int, tally: Tally, before: bool) -> None:
    """The report's intervals of one study, against the truth (the calls of the accuracy notebook)."""
    ref = _cells()[0][0]
    summary = stats.cell_summary(trials, METRIC, None, confidence=LEVEL)
    tally.add("cell mean: t", n, summary["ci_low"], summary["ci_high"], summary["cell_id"].map(truth.mean))
    comp = stats.compare_to_reference(trials, METRIC, ref, confidence=LEVEL)
    tested = comp[comp["testable"]]
    tally.add("Δ vs reference: t", n, tested["diff_ci_low"], tested["diff_ci_high"],
              tested["cell_id"].map(truth.diff))
    tally.add("effect size: noncentral t", n, tested["es_ci_low"], tested["es_ci_high"],
              tested["cell_id"].map(truth.std_diff))
    few = stats.few_run_estimates(trials, METRIC, ref, LEVEL)
    tally.add("few-run mean: t", n, few["mean_ci_low"], few["mean_ci_high"], few["cell_id"].map(truth.mean))
    if n >= stats.IQM_CI_MIN_N:
        tally.add("few-run IQM: trimmed t", n, few["iqm_ci_low"], few["iqm_ci_high"], few["cell_id"].map(truth.iqm))
    others = few[few["cell_id"] != ref]
    tally.add("P(improvement): Newcombe", n, others["pi_ci_low"], others["pi_ci_high"], others["cell_id"].map(truth.pi))
    prof = stats.performance_profile(trials, METRIC, taus=truth.taus, confidence=LEVEL)
    for cid, part in prof.groupby("cell_id", sort=False):
        tally.add("profile band: Clopper–Pearson", n, part["ci_low"], part["ci_high"], truth.above[cid])
    effects = stats.main_effects(trials, METRIC, list(FACTORS), LEVEL)
    tally.add("marginal mean: blocked/Welch", n, effects["ci_low"], effects["ci_high"],
              [truth.marginal[(f, lv)] for f, lv in zip(effects["factor"], effects["level"], strict=True)])
    if before:
        score_before(trials, comp, truth, n, tally, ref)


def score_before(trials: pd.DataFrame, comp: pd.DataFrame, truth: Truth, n: int, tally: Tally, ref: str) -> None:
    """The intervals the report printed before: rliable's percentile bootstrap (2,000 resamples) of
    the mean, the IQM and P(improvement), and the BCa bootstrap of d_z / g from four seeds."""
    from ablate.stats.comparisons import pi_statistic

    values = {cid: g[METRIC].to_numpy(float) for cid, g in trials.groupby("cell_id", sort=False)}
    for cid, x in values.items():
        tally.add("before: mean, percentile bootstrap", n,
                  *stats.bootstrap_ci(x, stat=np.mean, method="percentile"), truth.mean[cid])
        tally.add("before: IQM, percentile bootstrap", n,
                  *stats.bootstrap_ci(x, stat=stats.iqm, method="percentile"), truth.iqm[cid])
        if cid != ref:
            tally.add("before: P(improvement), percentile", n,
                      *stats.bootstrap_ci(x, values[ref], stat=pi_statistic, method="percentile"), truth.pi[cid])
    if n < stats.MIN_N_BOOTSTRAP:
        return
    for r in comp[comp["testable"]].itertuples():
        x, y = values[r.cell_id], values[ref]
        if r.paired:
            def dz(d: np.ndarray, axis: int = -1) -> np.ndarray:
                return np.mean(d, axis=axis) / np.std(d, axis=axis, ddof=1)
            low, high = stats.bootstrap_ci(x - y, stat=dz)
        else:
            def g(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
                na, nb = a.shape[axis], b.shape[axis]
                pooled = np.sqrt(((na - 1) * np.var(a, axis=axis, ddof=1) + (nb - 1) * np.var(b, axis=axis, ddof=1))
                                 / (na + nb - 2))
                return (np.mean(a, axis=axis) - np.mean(b, axis=axis)) / pooled * (1 - 3 / (4 * (na + nb) - 9))
            low, high = stats.bootstrap_ci(x, y, stat=g)
        tally.add("before: effect size, BCa bootstrap", n, low, high, truth.std_diff[r.cell_id])


def coverage_tables(studies: int, rng: np.random.Generator, before: bool, seed_counts: tuple[int, ...] = SEED_COUNTS,
                    draws: int = 1_000_000) -> list[str]:
    """Print one coverage table per setting; return the entries that miss the report's rule."""
    misses = []
    rows = [(name, what, first) for name, what, first in INTERVALS]
    if before:
        rows += [(name, "(no longer printed)", first) for name, first in BEFORE]
    print(f"COVERAGE of every interval the accuracy report labels 95%: {studies} simulated studies per setting and "
          f"seed count, each a 2 × 2 × 2 factorial of 8 cells (factor effects {', '.join(f'{v:+g}' for v in EFFECTS.values())}"
          f", a × b {INTERACTION:+g}). Rule: ≥ {REQUIRED} at {' and '.join(map(str, REQUIRED_AT))} seeds, never below "
          f"{FLOOR}. Band: the 99.9% binomial band around 0.95 for that row's intervals at 5 seeds.")
    for setting in SETTINGS:
        truth = truth_of(setting, draws, rng)
        tally = Tally()
        for n in seed_counts:
            for _ in range(studies):
                score_study(study_trials(setting, n, rng), truth, n, tally, before)
        print()
        print(f"{setting.name} (reference accuracy {setting.base:g})")
        head = f"{'interval':<38}" + "".join(f"{f'{n} seeds':>14}" for n in seed_counts) + f"{'band':>16}  printed as"
        print(head)
        print("-" * (len(head) + 40))
        for name, what, first in rows:
            cells = []
            for n in seed_counts:
                key = (name, n)
                if n < first or not tally.shown.get(key):
                    cells.append(f"{'—':>14}")
                    continue
                rate = tally.hit[key] / tally.shown[key]
                printed = tally.shown[key] / tally.asked[key]
                text = f"{rate:.3f}" + ("" if printed > 0.995 else f" ({printed:.0%})")
                cells.append(f"{text:>14}")
                if not name.startswith("before") and (rate < FLOOR or (n in REQUIRED_AT and rate < REQUIRED)):
                    misses.append(f"{setting.name}: {name} at {n} seeds covers {rate:.3f}")
            k = tally.shown.get((name, 5), 0)
            band = sps.binom.interval(0.999, k, LEVEL) if k else (np.nan, np.nan)
            band_text = f"[{band[0] / k:.3f}, {band[1] / k:.3f}]" if k else "—"
            print(f"{name:<38}" + "".join(cells) + f"{band_text:>16}  {what}")
    print()
    print("Each entry: the share of printed intervals that contain the true value; in parentheses, where not every "
          "interval is printed, the share that is (— in the report otherwise). — in a column: the report does not "
          f"show that interval at that seed count (the IQM's from {stats.IQM_CI_MIN_N} runs).")
    return misses


# --- the widening: exact t against the report's interval, one cell at a time -----------------------

WIDTH_SEEDS = (3, 4, 5, 6, 8, 10, 15)


def _minus_lognormal(rng: np.random.Generator, shape: tuple[int, int], sigma: float, sd: float) -> np.ndarray:
    z = rng.lognormal(0.0, sigma, shape)
    s2 = sigma**2
    return -sd * (z - math.exp(s2 / 2)) / math.sqrt((math.exp(s2) - 1) * math.exp(s2))


def width_tables(samples: int, rng: np.random.Generator) -> list[str]:
    """Coverage of a cell mean's exact 95% t interval and of the report's (``stats.robust_level``),
    ``samples`` cells of each seed count, on one cell's runs drawn from each null: the widening's
    effect without the factorial around it (vectorised: the same formula as ``stats.t_interval``)."""
    def tail(sd: float) -> Callable[[tuple[int, int]], np.ndarray]:
        return lambda sh: 0.8 + rng.normal(0, sd, sh) - (rng.random(sh) < 0.15) * rng.exponential(0.06, sh)

    nulls = [
        ("15% lose Exp(6 pt), sd 0.0125", tail(0.0125), 0.8 - 0.15 * 0.06),
        ("15% lose Exp(6 pt), sd 0.01", tail(0.01), 0.8 - 0.15 * 0.06),
        ("ceiling: 1 − Exp(0.003)", lambda sh: 1.0 - rng.exponential(0.003, sh), 1.0 - 0.003),
        ("log-normal σ 1 (0.01) + normal 0.01", lambda sh: 0.7 + _minus_lognormal(rng, sh, 1.0, 0.01)
         + rng.normal(0, 0.01, sh), 0.7),
        ("log-normal σ 1 only (stress)", lambda sh: 0.7 + _minus_lognormal(rng, sh, 1.0, 0.02), 0.7),
        ("log-normal σ 0.5 only", lambda sh: 0.7 + _minus_lognormal(rng, sh, 0.5, 0.02), 0.7),
        ("normal", lambda sh: rng.normal(0.7, 0.01, sh), 0.7),
    ]
    robust = stats.robust_level(LEVEL)
    print(f"THE WIDENING: coverage of a cell mean's interval, {samples} cells per entry, at "
          f"{' / '.join(map(str, WIDTH_SEEDS))} seeds: the exact t interval at {LEVEL:.0%} and the report's "
          f"(t at {robust:.0%}, printed as {LEVEL:.0%})")
    print()
    head = f"{'runs':<40}{'exact t':<44}report's"
    print(head)
    print("-" * 92)
    misses = []
    for name, draw, truth in nulls:
        exact, report = [], []
        for n in WIDTH_SEEDS:
            x = draw((samples, n))
            m, se = x.mean(axis=1), x.std(axis=1, ddof=1) / math.sqrt(n)
            for level, out in ((LEVEL, exact), (robust, report)):
                q = float(sps.t.ppf(0.5 + level / 2, n - 1))
                out.append(float(np.mean((m - q * se <= truth) & (truth <= m + q * se))))
        print(f"{name:<40}{' '.join(f'{v:.3f}' for v in exact):<44}{' '.join(f'{v:.3f}' for v in report)}")
        for n, v in zip(WIDTH_SEEDS, report, strict=True):
            if v < FLOOR or (n in REQUIRED_AT and v < REQUIRED):
                misses.append(f"widening: {name} at {n} seeds covers {v:.3f}")
    print()
    return misses


# --- the convergence flag ------------------------------------------------------------------------

#: (steps, eval_every) of the budgets simulated: the quickstart's, and two longer runs.
BUDGETS = ((300, 50), (4000, 200), (8000, 100))
GAIN = 0.01  # a run still gaining one point over the last fifth
AR_PHI = 0.5


def window_passes(steps: int, eval_every: int) -> np.ndarray:
    """The steps of a trial's validation passes inside its last fifth, as ``Schedule`` places them."""
    from ablate.schedule import Schedule, window_start

    sched = Schedule(steps, eval_every, log_every=25)
    start = window_start(steps)
    return np.array([s for s in range(start, steps + 1) if sched.validates(s) or sched.checks(s) or s == steps],
                    dtype=float)


def measured_noise(home: str | None) -> tuple[float, float, float, int] | None:
    """(median residual sd, median lag-1 autocorrelation of the residuals, sd implied by the median
    recorded ``val_gain_se``, runs) of the last fifths of a finished quickstart study's replicate runs:
    the residuals of its validation accuracy around a line through the window's passes."""
    from ablate import results
    from ablate.schedule import window_start

    try:
        res = results.load("quickstart", home=home, curves=False, metrics=True)
    except Exception as exc:  # a machine without the study: say so, simulate the fixed levels only
        print(f"(no quickstart study to measure the noise from: {type(exc).__name__}: {exc})")
        return None
    trials = res.trials.to_pandas()
    metrics = res.metrics.to_pandas()
    curves = metrics[(metrics["name"] == "val/accuracy") & (metrics["phase"] == "replicate")]
    sds, phis, implied = [], [], []
    for (cid, seed), run in curves.groupby(["cell_id", "seed"]):
        steps = int(trials.loc[(trials.cell_id == cid) & (trials.seed == seed), "steps"].iloc[0])
        window = run[run["step"] >= window_start(steps)].sort_values("step")
        x, y = window["step"].to_numpy(float), window["value"].to_numpy(float)
        if x.size < 4:
            continue
        fit = np.polyfit(x, y, 1)
        resid = y - np.polyval(fit, x)
        sds.append(math.sqrt(float((resid**2).sum()) / (x.size - 2)))
        phis.append(float(np.corrcoef(resid[:-1], resid[1:])[0, 1]) if resid.std() > 0 else 0.0)
        se = trials.loc[(trials.cell_id == cid) & (trials.seed == seed), "val_gain_se"].iloc[0]
        sxx = float(((x - x.mean()) ** 2).sum())
        if np.isfinite(se):
            implied.append(float(se) * math.sqrt(sxx) / (steps - window_start(steps)))
    if not sds:
        return None
    return float(np.median(sds)), float(np.median(phis)), float(np.median(implied)), len(sds)


def flag_rates(steps: int, eval_every: int, sd: float, phi: float, runs: int, rng: np.random.Generator
               ) -> tuple[float, float, float, float]:
    """(flat flagged, flat cell of 8 runs with any flagged, rising flagged, best 5%-level test's
    power) for one budget and noise."""
    from ablate.spec.models import TrainSpec
    from ablate.stats.convergence import ALPHA, last_fifth

    tol = TrainSpec.model_fields["converged_tol"].default
    x = window_passes(steps, eval_every)
    start = float(steps - steps // 5)
    rise = GAIN * (x - start) / (steps - start)
    noise = rng.normal(0.0, sd, (runs, x.size))
    if phi:  # AR(1) across successive passes, stationary with the same marginal sd
        for j in range(1, x.size):
            noise[:, j] = phi * noise[:, j - 1] + math.sqrt(1 - phi**2) * noise[:, j]

    def flagged(curve: np.ndarray) -> bool:
        return last_fifth(list(zip(x.astype(int).tolist(), curve.tolist(), strict=True)), steps, True, tol)[
            "converged"] is False

    flat = np.array([flagged(0.7 + e) for e in noise])
    rising = np.array([flagged(0.7 + rise + e) for e in noise])
    cells = flat[: runs // 8 * 8].reshape(-1, 8).any(axis=1)
    se_gain = sd * (steps - start) / math.sqrt(float(((x - x.mean()) ** 2).sum()))
    best = float(sps.norm.cdf(GAIN / se_gain - sps.norm.ppf(1 - ALPHA)))
    return float(flat.mean()), float(cells.mean()), float(rising.mean()), best


def convergence_tables(runs: int, home: str | None, rng: np.random.Generator) -> list[str]:
    print("CONVERGENCE FLAG (ablate.stats.convergence.last_fifth, tol = train.converged_tol's default): "
          f"{runs} simulated runs per entry; a flat run, and one still gaining {GAIN:g} over the last fifth.")
    for steps, every in BUDGETS:
        passes = window_passes(steps, every)
        print(f"  steps {steps}, eval_every {every}: {passes.size} passes in the last fifth "
              f"({', '.join(str(int(s)) for s in passes[:8])}{' …' if passes.size > 8 else ''})")
    noise = measured_noise(home)
    sizes = [(f"{sd * 100:g} pt", sd) for sd in (0.001, 0.0025, 0.005, 0.01)]
    if noise is not None:
        sd, phi, implied, n_runs = noise
        print(f"  measured on the quickstart's {n_runs} replicate runs: residual sd of the last fifth's passes around "
              f"a line {sd:.4f} (median; {implied:.4f} from the recorded val_gain_se), lag-1 autocorrelation "
              f"of the residuals {phi:+.2f}")
        sizes.insert(0, (f"measured {sd * 100:.2f} pt", sd))
    # Independent noise is what the trend test assumes (the rule); AR(1) noise is the robustness check.
    levels = [(name, sd, 0.0) for name, sd in sizes]
    levels += [(f"{name}, AR(1) φ {AR_PHI}", sd, AR_PHI) for name, sd in sizes if sd in (sizes[0][1], 0.0025, 0.01)]
    lo, hi = sps.binom.interval(0.999, runs, 0.05)
    print(f"  99.9% band around 5% for {runs} runs: [{lo / runs:.3f}, {hi / runs:.3f}]")
    print()
    head = f"{'pass-to-pass noise':<30}" + "".join(
        f"{f'{s}/{e}: flat':>17}{'cell of 8':>10}{'rising':>8}{'best':>7}" for s, e in BUDGETS)
    print(head)
    print("-" * len(head))
    misses = []
    for name, sd, phi in levels:
        text = f"{name:<30}"
        for steps, every in BUDGETS:
            flat, cell, rising, best = flag_rates(steps, every, sd, phi, runs, rng)
            text += f"{flat:>17.3f}{cell:>10.3f}{rising:>8.3f}{best:>7.2f}"
            if flat > hi / runs:
                misses.append(f"{name}, {steps}/{every}: a flat run is flagged {flat:.3f}"
                              + (" (robustness row: the test assumes independent noise)" if phi else ""))
            if rising < 0.9 and best >= 0.9:
                misses.append(f"{name}, {steps}/{every}: a rising run is flagged {rising:.3f} where a test could "
                              f"reach {best:.2f}")
        print(text)
    print()
    print("flat: share of flat runs flagged still improving (the test's level is 5%); cell of 8: share of 8-run cells "
          "with any run flagged (what marks a cell †); rising: share of runs gaining one point over the last fifth "
          "flagged; best: the power of the best 5%-level test of a rise with the noise known (one-sided z on the "
          "fitted slope) — where it is below 0.90, no test can flag 90% of such runs from these passes.")
    return misses


def main(argv: list[str] | None = None) -> list[str]:
    """Run the parts asked for, print their tables; return the misses of the rules."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--studies", type=int, default=200, help="null studies per setting")
    parser.add_argument("--coverage-studies", type=int, default=40, help="studies per setting and seed count")
    parser.add_argument("--runs", type=int, default=2000, help="simulated runs per convergence entry")
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=2024)
    parser.add_argument("--parts", default="null,coverage,widths,convergence")
    parser.add_argument("--width-samples", type=int, default=40_000, help="cells per entry of the widening table")
    parser.add_argument("--noise-from", default=None, help="home of a finished quickstart study (its .ablate)")
    parser.add_argument("--before", action="store_true", help="also the intervals the report printed before")
    parser.add_argument("--seeds", default=",".join(map(str, SEED_COUNTS)),
                        help="the seed counts of the coverage tables, comma-separated")
    parser.add_argument("--tiny", action="store_true",
                        help="a few studies of everything, in seconds: checks the benchmark runs, not the rates")
    args = parser.parse_args(argv)
    seed_counts, draws = tuple(int(n) for n in args.seeds.split(",")), 1_000_000
    if args.tiny:
        args.studies, args.coverage_studies, args.runs, args.width_samples = 4, 1, 40, 2000
        seed_counts, draws = (3, 5), 20_000
    parts = set(args.parts.split(","))
    rng = np.random.default_rng(args.seed)
    misses: list[str] = []
    sections: list[tuple[str, Callable[[], Any]]] = [
        ("null", lambda: misses.extend(null_tables(args.studies, args.alpha, rng))),
        ("coverage", lambda: misses.extend(coverage_tables(args.coverage_studies, rng, args.before, seed_counts,
                                                           draws))),
        ("widths", lambda: misses.extend(width_tables(args.width_samples, rng))),
        ("convergence", lambda: misses.extend(convergence_tables(args.runs, args.noise_from, rng))),
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, run in sections:
            if name in parts:
                run()
                print()
    if {"null", "coverage", "widths", "convergence"} & parts:
        print("Misses of the rules above:" if misses else "Every entry meets its rule.")
        for m in misses:
            print(f"  {m}")
    return misses


if __name__ == "__main__":
    main()
