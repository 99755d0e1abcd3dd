"""Comparisons of cells with a declared reference: exact permutation tests, the t-test beside them,
effect sizes, the probability of improvement, Holm across the family, the power line; and which
variants of several studies can be compared at all."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
from scipy import stats as sps
from scipy.optimize import brentq
from scipy.special import nctdtr

from ablate.stats.estimators import ROUNDOFF, mark_for, metric_range, no_spread, robust_level
from ablate.stats.multiplicity import adjusted
from ablate.stats.selection import completed_runs, resolve_cell

__all__ = [
    "COMPARISON_COLUMNS",
    "MIN_N_TEST",
    "PERMUTATIONS",
    "PermutationResult",
    "comparability",
    "compare_to_reference",
    "effect_size_ci",
    "permutation_test",
    "pi_statistic",
    "power_line",
    "prob_improvement",
    "prob_improvement_ci",
    "t_test_power",
]


#: Fewest observations (shared seeds, or runs on each side) a comparison is tested on. With two,
#: the spread rests on one degree of freedom and the exact test cannot go below p = 0.5: the
#: report says "too few seeds to test (n = 2)" and gives the raw differences instead.
MIN_N_TEST = 3


#: A permutation test enumerates every arrangement when there are at most this many (exact);
#: beyond, it draws this many at random (seeded; p = (k + 1)/(B + 1), still valid).
PERMUTATIONS = 9999


COMPARISON_COLUMNS = [
    "cell_id",
    "cell_label",
    "reference_id",
    "reference_label",
    "test",
    "testable",
    "paired",
    "n",
    "n_ref",
    "n_cell",
    "n_pairs",
    "mean_ref",
    "mean_cell",
    "mean_diff",
    "diffs",
    "values_cell",
    "values_ref",
    "sd_diff",
    "diff_ci_low",
    "diff_ci_high",
    "ci_note",
    "p",
    "p_min",
    "exact",
    "p_adj",
    "mark",
    "significant",
    "statistic",
    "df",
    "t_p",
    "t_p_adj",
    "effect_size_kind",
    "effect_size",
    "es_ci_low",
    "es_ci_high",
    "prob_improvement",
    "pi_ci_low",
    "pi_ci_high",
    "min_effect",
    "power_alpha",
    "power_now",
    "seeds_needed",
]


class PermutationResult(NamedTuple):
    """A two-sided permutation test: its p, whether every arrangement was enumerated, the smallest
    p the test can give at these sizes, and how many arrangements there are."""

    p: float
    exact: bool
    p_min: float
    arrangements: float


def _mean_of_differences(d: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(d, axis=axis)


def _difference_of_means(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(x, axis=axis) - np.mean(y, axis=axis)


def permutation_test(
    x: Sequence[float] | np.ndarray,
    y: Sequence[float] | np.ndarray,
    *,
    paired: bool,
    n_resamples: int = PERMUTATIONS,
    seed: int | None = 0,
) -> PermutationResult:
    """Two-sided permutation test of a mean difference (``scipy.stats.permutation_test``).

    ``paired``: the sign-flip (Fisher–Pitman) test of mean(x − y) = 0 — under the null each pair's
    difference is as likely positive as negative. Otherwise the relabelling test of
    mean(x) − mean(y) = 0 — under the null the runs are exchangeable between the two cells. No
    normality is assumed and ties, discrete accuracies and zero spread (every difference equal)
    are fine: the p is exact, not an approximation that divides by the sd. Every arrangement is
    enumerated when there are at most ``n_resamples`` (``exact``), else ``n_resamples`` are drawn
    with ``seed`` (then ``p_min`` is 2/(B + 1)). ``p_min`` is the smallest p possible at these sizes — 2/2ᵏ for k non-zero
    differences (0.0625 for five seeds), 2/C(n_x + n_y, n_x) unpaired — which is why few seeds
    cannot reach small α however large the effect. Two-sided p is twice the smaller one-sided p
    (scipy's convention; the same as |statistic| ≥ |observed| when the null distribution is
    symmetric, as the sign-flip's always is). NaN p for an empty side.

    A difference within round-off of zero (at most ``estimators.ROUNDOFF`` × the values' largest
    magnitude) counts as zero, and a pooled sample with no spread beyond round-off gives p = 1: two
    cells that are 1.1× a reference computed two ways differ by 2e-16, which is not evidence.

    A non-finite value (NaN, ±inf) is refused with a ``ValueError`` naming the side and the count:
    a run without a value is not an observation to permute, and arithmetic on it would make every
    arrangement's statistic NaN (scipy then reports p = 0). Drop such runs first — for a paired test
    the whole pair — as ``compare_to_reference`` does (it only sees completed runs).
    """
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    for side, values in (("x", x), ("y", y)):
        bad = int(np.count_nonzero(~np.isfinite(values)))
        if bad:
            raise ValueError(
                f"permutation_test: {side} has {bad} non-finite value{'s' if bad != 1 else ''} (NaN or ±inf) "
                f"of {values.size}; drop the runs without a value first"
                + (" (a paired test: drop the whole pair)" if paired else ""))
    if paired:
        if x.shape != y.shape:
            raise ValueError("a paired test needs one value of each side per seed")
        d = x - y
        scale = float(max(np.max(np.abs(x), initial=0.0), np.max(np.abs(y), initial=0.0)))
        d = np.where(np.abs(d) <= ROUNDOFF * scale, 0.0, d)
        nonzero = int(np.count_nonzero(d))
        arrangements = 2.0 ** d.size
        if d.size == 0:
            return PermutationResult(np.nan, True, np.nan, 0.0)
        if nonzero == 0:
            return PermutationResult(1.0, True, 1.0, arrangements)
        data: tuple[np.ndarray, ...] = (d,)
        statistic: Callable[..., Any] = _mean_of_differences
        kind = "samples"
        p_min = min(1.0, 2.0 ** (1 - nonzero))
    else:
        if x.size == 0 or y.size == 0:
            return PermutationResult(np.nan, True, np.nan, 0.0)
        arrangements = float(math.comb(x.size + y.size, x.size))
        if no_spread(np.concatenate([x, y])):
            return PermutationResult(1.0, True, 1.0, arrangements)
        data = (x, y)
        statistic = _difference_of_means
        kind = "independent"
        p_min = min(1.0, 2.0 / arrangements)
    exact = arrangements <= n_resamples
    if not exact:
        p_min = 2.0 / (n_resamples + 1)
    res = sps.permutation_test(
        data, statistic, permutation_type=kind, vectorized=True, n_resamples=n_resamples,
        alternative="two-sided", rng=np.random.default_rng(seed),
    )
    return PermutationResult(float(min(1.0, res.pvalue)), exact, float(p_min), arrangements)


def prob_improvement(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> float:
    """P(X > Y) + ½ P(X = Y) over every pair of a run of ``x`` and a run of ``y`` (rliable's
    probability of improvement, the normalised Mann–Whitney U); NaN for an empty side."""
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    if not x.size or not y.size:
        return np.nan
    return float(pi_statistic(x, y))


def pi_statistic(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    """``prob_improvement`` along ``axis`` of arrays (vectorised over the other axes)."""
    xa = np.moveaxis(np.asarray(x), axis, -1)[..., :, None]
    ya = np.moveaxis(np.asarray(y), axis, -1)[..., None, :]
    return np.mean((xa > ya) + 0.5 * (xa == ya), axis=(-2, -1))


def prob_improvement_ci(
    x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray, confidence: float = 0.95
) -> tuple[float, float]:
    """Confidence interval of the probability of improvement θ = P(X > Y) + ½ P(X = Y) from runs
    ``x`` and ``y``: Newcombe's score interval for the Mann–Whitney AUC (Newcombe 2006, *Statistics
    in Medicine* 25:543, method 5), with a continuity correction of 1/(2 m n).

    The interval is every θ with ``|θ̂ − θ| − 1/(2mn) ≤ z · sqrt(V(θ))``, where V is Hanley and
    McNeil's variance of the AUC at θ with n* = (m + n)/2 runs a side:
    ``V(θ) = θ(1 − θ)[1 + (n* − 1)(1 − θ)/(2 − θ) + (n* − 1)θ/(1 + θ)] / (m n)``. Because the variance
    is taken at θ, not at θ̂, the interval is never [1, 1] when every run of ``x`` beats every run of
    ``y`` (the percentile bootstrap's answer at any n) and stays inside [0, 1]. Without the
    correction it covers 90% at three runs a side when there is no effect (complete separation,
    which has probability 1/10 there, excludes ½); ``benchmarks/bench_stats_calibration.py``
    measures it with the correction at the sizes the reports show. Non-finite values are dropped;
    NaN for an empty side."""
    xa = np.asarray(x, dtype=float)
    ya = np.asarray(y, dtype=float)
    xa, ya = xa[np.isfinite(xa)], ya[np.isfinite(ya)]
    m, n = xa.size, ya.size
    if not m or not n:
        return (np.nan, np.nan)
    theta = float(pi_statistic(xa, ya))
    z2 = float(sps.norm.ppf(0.5 + confidence / 2)) ** 2
    half = (m + n) / 2.0 - 1.0
    correction = 0.5 / (m * n)

    def var(t: float) -> float:
        return t * (1.0 - t) * (1.0 + half * (1.0 - t) / (2.0 - t) + half * t / (1.0 + t)) / (m * n)

    # With the correction 0 < θ̂ + c and θ̂ − c < 1, so each bound has a sign change to bracket.
    below, above = theta - correction, theta + correction
    low = 0.0 if below <= 0 else float(brentq(lambda t: (below - t) ** 2 - z2 * var(t), 0.0, below))
    high = 1.0 if above >= 1 else float(brentq(lambda t: (t - above) ** 2 - z2 * var(t), above, 1.0))
    return (low, high)


def _nct_cdf(df: float, nc: float, x: float) -> float:
    """P(T ≤ x) for T noncentral t(df, nc): scipy's value (``scipy.stats.nct.cdf`` without its
    per-call argument checks), which is NaN far in a tail; there the cdf is 0 (nc above x) or 1
    (below). Checked against a quadrature over the chi distribution: at every NaN on a grid of
    df 1 to 20000, |x| ≤ 100, nc ≤ 60 the rule is within 1e-17 of the cdf: a NaN is a known 0 or
    1, never "unknown" (read as unknown, it had sent power_line's search past its answer)."""
    value = float(nctdtr(df, nc, x))
    return value if math.isfinite(value) else (0.0 if nc > x else 1.0)


def _noncentrality_bounds(t: float, df: float, confidence: float) -> tuple[float, float]:
    """The noncentrality parameters δ whose noncentral t(df, δ) puts ``t`` at its upper and lower
    (1 − confidence)/2 tails: the exact interval for δ given an observed t (Steiger and Fouladi 1997)."""
    if t < 0:  # by symmetry; scipy's noncentral t is also steadiest for t ≥ 0
        low, high = _noncentrality_bounds(-t, df, confidence)
        return (-high, -low)
    tail = (1.0 - confidence) / 2.0

    def cdf(nc: float) -> float:
        return _nct_cdf(df, nc, t)

    spread = math.sqrt(1.0 + t * t / (2.0 * df))  # the large-sample sd of t about δ

    def solve(q: float, guess: float) -> float:
        low, high = guess - spread, guess + spread
        while cdf(low) < q:  # the cdf falls as δ rises: widen until the root is bracketed
            low -= 2.0 * spread
        while cdf(high) > q:
            high += 2.0 * spread
        return float(brentq(lambda nc: cdf(nc) - q, low, high, xtol=1e-8))

    z = float(sps.norm.ppf(1.0 - tail))
    return (solve(1.0 - tail, t - z * spread), solve(tail, t + z * spread))


def effect_size_ci(
    x: Sequence[float] | np.ndarray,
    y: Sequence[float] | np.ndarray,
    *,
    paired: bool,
    confidence: float = 0.95,
) -> tuple[float, float]:
    """The exact confidence interval of a standardised mean difference under normal runs, by
    inverting the noncentral t distribution of the t statistic.

    ``paired``: δ_z = E(x − y)/sd(x − y), whose estimate is Cohen's d_z; ``t = d_z √n`` is noncentral t
    with n − 1 degrees of freedom and noncentrality δ_z √n. Unpaired: δ = (μ_x − μ_y)/σ with a
    common σ, estimated by Hedges' g; the pooled t statistic is noncentral t with n_x + n_y − 2
    degrees of freedom and noncentrality δ / sqrt(1/n_x + 1/n_y). A bootstrap of d or g falls well
    short of its level with a handful of seeds; this is exact at every n for normal runs, and
    ``benchmarks/bench_stats_calibration.py`` measures it on simulated accuracies. NaN
    when there is no spread (t is infinite) or fewer than two values a side (pairs)."""
    xa = np.asarray(x, dtype=float)
    ya = np.asarray(y, dtype=float)
    with np.errstate(all="ignore"):
        if paired:
            d = xa - ya
            n = int(d.size)
            if n < 2:
                return (np.nan, np.nan)
            scale = 1.0 / math.sqrt(n)
            t = float(d.mean() / (d.std(ddof=1) * scale))
            df = n - 1
        else:
            nx, ny = int(xa.size), int(ya.size)
            if min(nx, ny) < 2:
                return (np.nan, np.nan)
            pooled = math.sqrt(((nx - 1) * xa.var(ddof=1) + (ny - 1) * ya.var(ddof=1)) / (nx + ny - 2))
            scale = math.sqrt(1.0 / nx + 1.0 / ny)
            t = float((xa.mean() - ya.mean()) / (pooled * scale))
            df = nx + ny - 2
    if not math.isfinite(t):
        return (np.nan, np.nan)
    low, high = _noncentrality_bounds(t, df, confidence)
    return (low * scale, high * scale)


def t_test_power(effect_size: float, n: int, alpha: float, paired: bool = True) -> float:
    """The power of a two-sided t test at level ``alpha`` for a standardised difference
    ``effect_size``: ``n`` pairs (df n − 1, noncentrality es·√n), or ``n`` runs a side (pooled,
    df 2n − 2, noncentrality es·√(n/2)). The power is P(T > t_crit) + P(T < −t_crit) under the
    noncentral t, statsmodels' formula (``TTestPower`` / ``TTestIndPower``) and equal to it wherever
    that is finite. statsmodels returns NaN where either tail's cdf is NaN, which happens only far
    in that tail, where the cdf is 0 or 1 (``_nct_cdf``); the power itself need not be near 1
    there: the wrong-way tail's NaN comes with powers of 0.002 to 0.99 (two-sample, few runs)."""
    df = n - 1 if paired else 2 * n - 2
    nc = float(effect_size) * math.sqrt(n if paired else n / 2.0)
    crit = float(sps.t.isf(alpha / 2.0, df))
    return 1.0 - _nct_cdf(df, nc, crit) + _nct_cdf(df, nc, -crit)


def power_line(
    sd: float,
    n: int,
    min_effect: float,
    alpha: float,
    power: float = 0.8,
    paired: bool = True,
    max_seeds: int = 10_000,
) -> tuple[float, float]:
    """(power now, seeds needed): the power of a two-sided t-test with ``n`` seeds (pairs, or
    runs per cell) to detect a difference of ``min_effect`` given the observed ``sd`` (of the
    paired differences, or the pooled sd of the runs), and the seeds that reach ``power``
    (``t_test_power``, statsmodels' ``TTestPower`` / ``TTestIndPower`` where those are finite).
    The seeds needed are at least what the exact permutation test needs to reach ``alpha`` at all
    (``p_min ≤ alpha``). NaN when the sd is unknown or zero (fewer than two values, or every value
    equal); ``max_seeds`` caps the count.
    """
    if not (np.isfinite(sd) and sd > 0 and n >= 2 and min_effect > 0):
        return np.nan, np.nan
    es = float(min_effect / sd)

    def at(k: int) -> float:
        return t_test_power(es, k, alpha, paired)

    # Power grows with n: the smallest n that reaches it, by doubling then bisection on whole seeds
    # (statsmodels' root finder fails for large effects, where two seeds already suffice). at()
    # is never NaN: statsmodels' NaN near power 1, read as "not reached", had sent the doubling
    # past the answer and the bisection to a count many times too large (958 seeds for 132).
    high = 2
    while high < max_seeds and at(high) < power:
        high *= 2
    if high >= max_seeds and at(max_seeds) < power:
        needed = max_seeds
    else:
        low, high = max(2, high // 2), min(high, max_seeds)
        while low < high:
            mid = (low + high) // 2
            low, high = (low, mid) if at(mid) >= power else (mid + 1, high)
        needed = low
    return at(n), float(max(needed, _exact_floor(alpha, paired)))


def _exact_floor(alpha: float, paired: bool) -> int:
    """Fewest seeds at which the exact test can give p ≤ alpha at all."""
    for n in range(2, 64):
        p_min = 2.0 ** (1 - n) if paired else 2.0 / math.comb(2 * n, n)
        if p_min <= alpha:
            return n
    return 64


def _dz(d: np.ndarray, axis: int = -1) -> np.ndarray:
    """Cohen's d_z: mean of the paired differences over their sd (±inf when the sd is 0)."""
    with np.errstate(all="ignore"):
        m = np.mean(d, axis=axis)
        s = np.std(d, axis=axis, ddof=1)
        return np.where(s > 0, m / np.where(s > 0, s, 1.0), np.sign(m) * np.inf)


def _hedges_g(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    """Hedges' g of ``x − y``: Cohen's d on the pooled sd times ``1 − 3/(4(n_x+n_y) − 9)``."""
    nx, ny = x.shape[axis], y.shape[axis]
    with np.errstate(all="ignore"):
        pooled = np.sqrt(
            ((nx - 1) * np.var(x, axis=axis, ddof=1) + (ny - 1) * np.var(y, axis=axis, ddof=1))
            / (nx + ny - 2)
        )
        diff = np.mean(x, axis=axis) - np.mean(y, axis=axis)
        d = np.where(pooled > 0, diff / np.where(pooled > 0, pooled, 1.0), np.sign(diff) * np.inf)
    return d * (1.0 - 3.0 / (4.0 * (nx + ny) - 9.0))


BySeed = tuple[np.ndarray, np.ndarray]  # (sorted seeds, one value per seed)


def _by_seed(done: pd.DataFrame, metric: str) -> dict[Any, BySeed]:
    """Per cell: one value per seed, sorted by seed; a (cell, seed) that ran twice is averaged."""
    cells = done["cell_id"].to_numpy()
    seeds = done["seed"].to_numpy()
    values = done[metric].to_numpy(float)
    out: dict[Any, BySeed] = {}
    for cid in pd.unique(cells):
        mask = cells == cid
        unique, inverse = np.unique(seeds[mask], return_inverse=True)
        out[cid] = (unique, np.bincount(inverse, weights=values[mask]) / np.bincount(inverse))
    return out


def _compare_one(
    ref_by_seed: BySeed, cell_by_seed: BySeed, confidence: float, seed: int | None, permutations: int,
    bounds: tuple[float, float] = (-np.inf, np.inf),
) -> dict[str, Any]:
    (ref_seeds, ref), (cell_seeds, cell) = ref_by_seed, cell_by_seed
    shared, in_ref, in_cell = np.intersect1d(ref_seeds, cell_seeds, return_indices=True)
    paired = shared.size >= 2
    res: dict[str, Any] = {
        "n_ref": int(ref.size),
        "n_cell": int(cell.size),
        "n_pairs": int(shared.size),
        "mean_ref": float(ref.mean()) if ref.size else np.nan,
        "mean_cell": float(cell.mean()) if cell.size else np.nan,
        "paired": bool(paired),
        "diffs": None,
        "values_cell": tuple(float(v) for v in cell),
        "values_ref": tuple(float(v) for v in ref),
        "effect_size_kind": "",
        "exact": False,
        "ci_note": "",
    }
    nan_keys = ("mean_diff", "sd_diff", "diff_ci_low", "diff_ci_high", "statistic", "df", "t_p", "p", "p_min",
                "effect_size", "es_ci_low", "es_ci_high", "prob_improvement", "pi_ci_low", "pi_ci_high")
    res.update(dict.fromkeys(nan_keys, np.nan))
    if ref.size and cell.size:
        res["mean_diff"] = res["mean_cell"] - res["mean_ref"]
        res["prob_improvement"] = prob_improvement(cell, ref)
        if min(ref.size, cell.size) >= MIN_N_TEST:
            res["pi_ci_low"], res["pi_ci_high"] = prob_improvement_ci(cell, ref, confidence)
    if paired:
        x, y = cell[in_cell], ref[in_ref]
        d = x - y
        n = int(d.size)
        res.update(mean_ref=float(y.mean()), mean_cell=float(x.mean()), mean_diff=float(d.mean()),
                   diffs=tuple(float(v) for v in d), sd_diff=float(d.std(ddof=1)))
    else:
        x, y = cell, ref
        n = int(min(x.size, y.size))
        if n >= 2:  # the pooled sd of the runs: what an unpaired power line needs
            res["sd_diff"] = float(np.sqrt((x.var(ddof=1) + y.var(ddof=1)) / 2.0))
    scale = float(max(np.max(np.abs(x), initial=0.0), np.max(np.abs(y), initial=0.0)))
    # Round-off is no spread: an sd of 1e-17 would make a t of 1e14 and a power line of two seeds.
    flat = no_spread(d, scale) if paired else (no_spread(x, scale) and no_spread(y, scale))
    if flat and np.isfinite(res["sd_diff"]):
        res["sd_diff"] = 0.0
    res["n"] = n
    res["testable"] = n >= MIN_N_TEST
    if not res["testable"]:
        res["test"] = f"too few seeds (n = {n})" if n else "no results"
        res["ci_note"] = f"n = {n}: not tested"
        return res
    perm = permutation_test(x, y, paired=paired, n_resamples=permutations, seed=seed)
    kind = "sign-flip" if paired else "permutation"
    res.update(test=f"{'exact' if perm.exact else 'Monte Carlo'} {kind}", p=perm.p, p_min=perm.p_min,
               exact=perm.exact)
    if flat:  # every difference equal (to round-off): the exact p stands, t-based columns are undefined
        res["ci_note"] = "no spread: every Δ equal" if paired else "no spread: each cell's runs equal"
        return res
    level = robust_level(confidence)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        t = sps.ttest_rel(x, y) if paired else sps.ttest_ind(x, y, equal_var=False)
        ci = t.confidence_interval(level)
    widest = bounds[1] - bounds[0]  # a difference of two values in [lo, hi] lies in [lo − hi, hi − lo]
    res.update(diff_ci_low=float(np.clip(ci.low, -widest, widest)), diff_ci_high=float(np.clip(ci.high, -widest, widest)),
               statistic=float(t.statistic), df=float(t.df), t_p=float(t.pvalue))
    res.update(effect_size_kind="d_z" if paired else "hedges_g",
               effect_size=float(_dz(d) if paired else _hedges_g(x, y)))
    res["es_ci_low"], res["es_ci_high"] = effect_size_ci(x, y, paired=paired, confidence=level)
    return res


def _adjust(p: pd.Series, method: str) -> pd.Series:
    out = pd.Series(np.nan, index=p.index, dtype=float)
    ok = p.notna()
    if ok.any():
        out[ok] = adjusted(p[ok].to_numpy(float), method)
    return out


def compare_to_reference(
    trials: pd.DataFrame,
    metric: str,
    reference_cell: str,
    alpha: float = 0.05,
    *,
    correction: str = "holm",
    confidence: float = 0.95,
    seed: int | None = 0,
    phase: str | None = "replicate",
    min_effect: float = 0.01,
    power: float = 0.8,
    permutations: int = PERMUTATIONS,
) -> pd.DataFrame:
    """Compare every other cell with ``reference_cell`` (its id or its label) on ``metric``.

    Per cell, over completed runs (one value per seed):

    - **paired** on the seeds both cells share when there are at least two, else **unpaired**;
      ``n`` is the number of pairs (or the smaller cell's runs);
    - **the test** is the permutation test of the mean difference (``permutation_test``): exact
      sign-flip when paired, exact relabelling when unpaired (Monte Carlo beyond ``permutations``
      arrangements). It assumes no normal distribution and stays exact under ties, discrete
      accuracies and zero spread, which are the rule with a handful of seeds on a finite test set;
      ``p_min`` says how small its p can get with this ``n``;
    - **fewer than** ``MIN_N_TEST`` **values**: not tested (``testable`` False, ``test`` =
      ``"too few seeds (n = 2)"``, NaN p, never significant); ``diffs`` (paired: one per shared
      seed) or ``values_cell`` / ``values_ref`` carry the raw numbers instead;
    - beside it, the classical t-test (``ttest_rel`` / Welch's ``ttest_ind``): ``statistic``,
      ``df``, ``t_p``, ``t_p_adj`` and the t interval of the difference in ``diff_ci_low`` /
      ``diff_ci_high`` (at ``robust_level(confidence)``, clipped to the differences the metric
      allows: ±1 for an accuracy) — NaN when every difference is equal to round-off
      (``estimators.no_spread`` on the values' scale: the t statistic would divide by a zero or
      1e-17 sd; ``sd_diff`` is then 0), and ``ci_note`` says why;
    - effect size: Cohen's d_z (paired) or Hedges' g, with the noncentral-t interval of the
      standardised difference (``effect_size_ci`` at ``robust_level(confidence)``) wherever the
      comparison is tested and has spread;
    - rliable's **probability of improvement** P(cell > reference) over all pairs of runs, with
      Newcombe's continuity-corrected score interval (``prob_improvement_ci``) from ``MIN_N_TEST``
      runs a side;
    - a **power line**: the power now and the seeds that would detect a difference of
      ``min_effect`` with probability ``power`` (``power_line``), at ``power_alpha`` = α/m, the
      threshold of Holm's first step over the m comparisons that are tested (a comparison with too
      few seeds has no p and takes no share of α).

    ``seed`` seeds the Monte Carlo permutations (beyond ``permutations`` arrangements); every
    interval is analytic. Coverage of each interval at the seed counts the report shows is measured
    by ``benchmarks/bench_stats_calibration.py``.

    ``p_adj`` (and ``t_p_adj``) are corrected across the tested comparisons (statsmodels
    ``multipletests``, ``correction`` = ``"holm"``). ``mark``: ``***`` / ``**`` / ``*`` for
    ``p_adj`` below 0.001 / 0.01 / ``alpha``; ``significant`` is ``p_adj < alpha``. ``mean_diff``
    is cell − reference (over the shared seeds when paired). One row per non-reference cell, in
    cell order, with the columns ``COMPARISON_COLUMNS``.
    """
    ref_id = resolve_cell(trials, reference_cell)
    labels = dict(
        zip(trials["cell_id"].to_numpy(), trials["cell_label"].to_numpy(), strict=True)
    )  # first-seen order
    values = _by_seed(completed_runs(trials, metric, phase), metric)
    empty: BySeed = (np.array([]), np.array([]))
    ref = values.get(ref_id, empty)
    rows = []
    for cid, label in labels.items():
        if cid == ref_id:
            continue
        res = _compare_one(ref, values.get(cid, empty), confidence, seed, permutations, metric_range(metric))
        rows.append({"cell_id": cid, "cell_label": label, "reference_id": ref_id, "reference_label": labels.get(ref_id, ref_id),
                     **res})
    out = pd.DataFrame(rows, columns=COMPARISON_COLUMNS)
    for col in ("p", "t_p", "p_min", "sd_diff"):
        out[col] = out[col].astype(float)
    out["p_adj"] = _adjust(out["p"], correction)
    out["t_p_adj"] = _adjust(out["t_p"], correction)
    out["mark"] = [mark_for(p, alpha) for p in out["p_adj"]]
    out["significant"] = (out["p_adj"] < alpha).astype(bool)
    out["testable"] = out["testable"].fillna(False).astype(bool)
    out["paired"] = out["paired"].astype(bool)
    out["exact"] = out["exact"].fillna(False).astype(bool)
    m = max(1, int((out["testable"] & out["p"].notna()).sum()))  # Holm's m: the comparisons tested
    out["min_effect"] = float(min_effect)
    out["power_alpha"] = alpha / m
    lines = [power_line(r.sd_diff, int(r.n), min_effect, alpha / m, power, bool(r.paired))
             for r in out.itertuples()]
    out["power_now"] = [now for now, _ in lines]
    out["seeds_needed"] = [need for _, need in lines]
    return out[COMPARISON_COLUMNS]


def comparability(variants: pd.DataFrame, reference: str) -> pd.DataFrame:
    """Which variants can be compared with the ``reference`` variant (its ``cell_id``): those
    trained and tested on the same data — the same task with the same data version (generator
    version and parameters). Accuracy on different data, or state norms of different probe
    batches, are not comparable.

    ``variants`` has ``cell_id``, ``task`` (the resolved task as JSON) and ``data_version``
    (``ablate.results.Studies.variants``). Columns: ``cell_id``, ``comparable`` (bool),
    ``same_task`` (the task's name), ``differs`` (the task parameters whose value differs from
    the reference's, a list; empty when only the generator version differs).
    """
    import json

    if reference not in set(variants["cell_id"]):
        raise KeyError(f"reference {reference!r} is not a variant")
    ref = variants.loc[variants["cell_id"] == reference].iloc[0]
    ref_task = json.loads(ref["task"])
    rows = []
    for _, v in variants.iterrows():
        task = json.loads(v["task"])
        keys = list(dict.fromkeys([*ref_task, *task]))
        rows.append({
            "cell_id": v["cell_id"],
            "comparable": bool(v["data_version"] == ref["data_version"]),
            "same_task": bool(task.get("name") == ref_task.get("name")),
            "differs": [k for k in keys if task.get(k) != ref_task.get(k)],
        })
    return pd.DataFrame(rows, columns=["cell_id", "comparable", "same_task", "differs"])
