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
from statsmodels.stats.multitest import multipletests

from ablate.stats.estimators import MIN_N_BOOTSTRAP, bootstrap_ci, mark_for
from ablate.stats.selection import completed_runs, resolve_cell

__all__ = [
    "COMPARISON_COLUMNS",
    "MIN_N_TEST",
    "PERMUTATIONS",
    "PermutationResult",
    "comparability",
    "compare_to_reference",
    "permutation_test",
    "pi_statistic",
    "power_line",
    "prob_improvement",
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
    """
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    if paired:
        if x.shape != y.shape:
            raise ValueError("a paired test needs one value of each side per seed")
        d = x - y
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
    xa = np.moveaxis(np.asarray(x), axis, -1)[..., :, None]
    ya = np.moveaxis(np.asarray(y), axis, -1)[..., None, :]
    return np.mean((xa > ya) + 0.5 * (xa == ya), axis=(-2, -1))


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
    (statsmodels ``TTestPower`` / ``TTestIndPower``). The seeds needed are at least what the exact
    permutation test needs to reach ``alpha`` at all (``p_min ≤ alpha``). NaN when the sd is
    unknown or zero (fewer than two values, or every value equal); ``max_seeds`` caps the count.
    """
    from statsmodels.stats.power import TTestIndPower, TTestPower

    if not (np.isfinite(sd) and sd > 0 and n >= 2 and min_effect > 0):
        return np.nan, np.nan
    es = float(min_effect / sd)
    analysis = TTestPower() if paired else TTestIndPower()

    def at(k: int) -> float:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            value = (analysis.power(effect_size=es, nobs=k, alpha=alpha) if paired
                     else analysis.power(effect_size=es, nobs1=k, alpha=alpha, ratio=1.0))
        return float(np.asarray(value).ravel()[0])

    # Power grows with n: the smallest n that reaches it, by doubling then bisection on whole seeds
    # (statsmodels' root finder fails for large effects, where two seeds already suffice, and its
    # noncentral t can return NaN far beyond the answer).
    high = 2
    while high < max_seeds and not at(high) >= power:
        high *= 2
    if high >= max_seeds and not at(max_seeds) >= power:
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
    ref_by_seed: BySeed, cell_by_seed: BySeed, confidence: float, n_resamples: int, seed: int | None,
    permutations: int,
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
    }
    nan_keys = ("mean_diff", "sd_diff", "diff_ci_low", "diff_ci_high", "statistic", "df", "t_p", "p", "p_min",
                "effect_size", "es_ci_low", "es_ci_high", "prob_improvement", "pi_ci_low", "pi_ci_high")
    res.update(dict.fromkeys(nan_keys, np.nan))
    if ref.size and cell.size:
        res["mean_diff"] = res["mean_cell"] - res["mean_ref"]
        res["prob_improvement"] = prob_improvement(cell, ref)
        if min(ref.size, cell.size) >= MIN_N_TEST and n_resamples > 0:
            res["pi_ci_low"], res["pi_ci_high"] = bootstrap_ci(
                cell, ref, stat=pi_statistic, confidence=confidence, n_resamples=n_resamples,
                method="percentile", seed=seed)
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
    res["n"] = n
    res["testable"] = n >= MIN_N_TEST
    if not res["testable"]:
        res["test"] = f"too few seeds (n = {n})" if n else "no results"
        return res
    perm = permutation_test(x, y, paired=paired, n_resamples=permutations, seed=seed)
    kind = "sign-flip" if paired else "permutation"
    res.update(test=f"{'exact' if perm.exact else 'Monte Carlo'} {kind}", p=perm.p, p_min=perm.p_min,
               exact=perm.exact)
    spread = res["sd_diff"] > 0 if paired else (x.std() > 0 or y.std() > 0)
    if not spread:  # every difference equal: the exact p stands, t-based columns are undefined
        return res
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        t = sps.ttest_rel(x, y) if paired else sps.ttest_ind(x, y, equal_var=False)
        ci = t.confidence_interval(confidence)
    res.update(diff_ci_low=float(ci.low), diff_ci_high=float(ci.high), statistic=float(t.statistic),
               df=float(t.df), t_p=float(t.pvalue))
    if paired:
        res.update(effect_size_kind="d_z", effect_size=float(_dz(d)))
        if n >= MIN_N_BOOTSTRAP:
            res["es_ci_low"], res["es_ci_high"] = bootstrap_ci(
                d, stat=_dz, confidence=confidence, n_resamples=n_resamples, seed=seed)
    else:
        res.update(effect_size_kind="hedges_g", effect_size=float(_hedges_g(x, y)))
        if n >= MIN_N_BOOTSTRAP:
            res["es_ci_low"], res["es_ci_high"] = bootstrap_ci(
                x, y, stat=_hedges_g, confidence=confidence, n_resamples=n_resamples, seed=seed)
    return res


def _adjust(p: pd.Series, method: str) -> pd.Series:
    out = pd.Series(np.nan, index=p.index, dtype=float)
    ok = p.notna()
    if ok.any():
        out[ok] = multipletests(p[ok].to_numpy(float), method=method)[1]
    return out


def compare_to_reference(
    trials: pd.DataFrame,
    metric: str,
    reference_cell: str,
    alpha: float = 0.05,
    *,
    correction: str = "holm",
    confidence: float = 0.95,
    n_resamples: int = 2000,
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
      ``diff_ci_high`` — NaN when every difference is equal (the t statistic divides by a zero sd);
    - effect size: Cohen's d_z (paired) or Hedges' g, with a BCa bootstrap CI from
      ``MIN_N_BOOTSTRAP`` values (rough with a handful of seeds: about 86% coverage for a nominal
      95% at n = 5 in simulation);
    - rliable's **probability of improvement** P(cell > reference) over all pairs of runs, with a
      percentile bootstrap CI resampling each cell's runs on their own (stratified by cell);
    - a **power line**: the power now and the seeds that would detect a difference of
      ``min_effect`` with probability ``power`` (``power_line``), at ``power_alpha`` = α/m, the
      threshold of Holm's first step over the m comparisons.

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
        res = _compare_one(ref, values.get(cid, empty), confidence, n_resamples, seed, permutations)
        rows.append({"cell_id": cid, "cell_label": label, "reference_id": ref_id, "reference_label": labels[ref_id],
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
    m = max(1, len(out))
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
