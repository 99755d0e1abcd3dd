"""Statistics for ablation studies: per-cell summaries, comparisons, main effects, ANOVA.

Everything here is a pure function of the tidy *trials* frame the results API produces (one row
per (cell, seed)): ``cell_id``, ``cell_label``, ``seed``, ``phase``, ``status``, metric columns
(``test_accuracy``, ...; NaN unless the run completed) and one column per factor, named by its
dotted path (``model.layers``) and holding the level's label. All tests come from scipy and
statsmodels; nothing here imports torch.

Conventions, decided once for every function:

* **Which runs count.** Only rows whose ``phase`` is ``"replicate"`` (when the column exists; pass
  ``phase=None`` to use every row) and whose ``status`` is ``"complete"`` with a finite metric.
  Tuning trials explore hyper-parameters and would bias a cell's estimate.
* **Diverged, never learned, failed.** A *diverged* run has no metric; it is counted apart and
  never enters a mean. A run that completed but whose metric is ``≤ chance + margin`` *never
  learned*: it is a genuine outcome of the configuration, so ``mean`` (and every test) includes it,
  as is standard; its share is reported next to the mean, and ``mean_learned`` gives the mean over
  the runs that did learn so a reader can see how much the never-learned runs pull the mean down.
  A *failed* run (infrastructure: crash, lost worker) says nothing about the configuration: counted
  apart, left out of every share's denominator. Shares are over the *finished* runs
  (complete + diverged), so ``learned + never_learned + diverged`` shares sum to one.
* **Order.** Cells and factor levels keep their order of first appearance in ``trials`` (or the
  category order of a categorical column), which is the plan's order when the results API wrote
  it.
* **Determinism.** Every bootstrap takes a ``seed`` (default 0); equal inputs give equal outputs.
* **Few seeds.** Comparisons are tested by exact permutation tests (valid under ties and zero
  spread, no normality assumed), never on fewer than ``MIN_N_TEST`` values; the t-test sits beside
  them, rliable's few-run estimates (bootstrap intervals, probability of improvement,
  performance profiles) beside both, and a power line says how many seeds a difference of
  ``stats.min_effect`` would need.

This is the analysis of the ``accuracy`` report and the estimators every analysis shares (``cv``,
``cv_with_ci``, ``bootstrap_ci``, ``t_interval``); the norm-stability analysis is
``ablate.stats_norms``. Nothing here formats a number or draws: the accuracy report's tables,
sentences and figures are ``ablate.report.accuracy``. Adding a section to that report touches a
function here, its presentation there, and the notebook ``ablate/report/notebooks/accuracy.py``.
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
from scipy import stats as sps
from statsmodels.stats.multitest import multipletests

__all__ = [
    "AnovaNotApplicable",
    "COMPARISON_COLUMNS",
    "CONVERGENCE_COLUMNS",
    "Estimate",
    "FEW_RUN_COLUMNS",
    "MIN_N_TEST",
    "PERMUTATIONS",
    "PermutationResult",
    "anova",
    "anova_applicable",
    "anova_on_finished_levels",
    "binomial_se",
    "bootstrap_ci",
    "cell_summary",
    "comparability",
    "compare_to_reference",
    "completed_runs",
    "convergence",
    "cv",
    "cv_by",
    "cv_with_ci",
    "few_run_estimates",
    "infer_factors",
    "interaction_table",
    "iqm",
    "is_full_factorial",
    "main_effects",
    "mark_for",
    "marginal_means",
    "performance_profile",
    "permutation_test",
    "power_line",
    "prob_improvement",
    "step_budget",
    "t_interval",
]

#: Columns of the trials frame that are not factors.
STANDARD_COLUMNS = frozenset(
    {"cell_id", "cell_label", "seed", "phase", "status", "failure_kind", "failure_message"}
)
#: Statuses of runs that have not finished yet.
UNFINISHED = ("pending", "running")
#: (threshold, mark) on a corrected p-value; ``*`` uses ``alpha`` (0.05 unless told otherwise).
MARKS = ((0.001, "***"), (0.01, "**"))
#: Fewest observations for a bootstrap CI of an effect size or a CV.
MIN_N_BOOTSTRAP = 4


class AnovaNotApplicable(ValueError):
    """The design does not support the requested ANOVA; the message says why."""


class Estimate(NamedTuple):
    """A point estimate with a confidence interval over ``n`` observations."""

    value: float
    ci_low: float
    ci_high: float
    n: int


# --- selection -------------------------------------------------------------------------------


def infer_factors(trials: pd.DataFrame) -> list[str]:
    """The factor columns of ``trials``: those named by a dotted path, in column order."""
    return [c for c in trials.columns if "." in str(c) and c not in STANDARD_COLUMNS]


def _phase_rows(trials: pd.DataFrame, phase: str | None) -> pd.DataFrame:
    if phase is None or "phase" not in trials.columns:
        return trials
    return trials[trials["phase"] == phase]


def completed_runs(trials: pd.DataFrame, metric: str, phase: str | None = "replicate") -> pd.DataFrame:
    """Rows of ``phase`` that completed with a finite ``metric`` (the runs every estimate uses)."""
    if metric not in trials.columns:
        raise KeyError(f"metric {metric!r} is not a column of the trials frame")
    rows = _phase_rows(trials, phase)
    values = pd.to_numeric(rows[metric], errors="coerce")
    keep = (rows["status"] == "complete") & np.isfinite(values.to_numpy(dtype=float, na_value=np.nan))
    out = rows[keep].copy()
    out[metric] = values[keep].astype(float)
    return out


def _ordered_unique(series: pd.Series) -> list[Any]:
    if isinstance(series.dtype, pd.CategoricalDtype):
        present = set(series.dropna())
        return [c for c in series.cat.categories if c in present]
    return list(pd.unique(series.dropna()))


def _cells(trials: pd.DataFrame) -> pd.DataFrame:
    """One row per cell (id, label, factor levels) in order of first appearance."""
    cols = ["cell_id", "cell_label", *infer_factors(trials)]
    cols = [c for c in cols if c in trials.columns]
    return trials[cols].drop_duplicates("cell_id").reset_index(drop=True)


def _resolve_cell(trials: pd.DataFrame, cell: str) -> str:
    ids = trials["cell_id"].to_numpy()
    if cell in set(ids):
        return cell
    cells = trials[["cell_id", "cell_label"]].drop_duplicates("cell_id")
    by_label = cells.loc[cells["cell_label"] == cell, "cell_id"]
    if len(by_label) == 1:
        return str(by_label.iloc[0])
    known = ", ".join(map(repr, cells["cell_label"])) or "none"
    raise KeyError(f"no cell with id or label {cell!r}; cells are: {known}")


# --- small estimators ------------------------------------------------------------------------


def metric_range(metric: str) -> tuple[float, float]:
    """The values a metric can take: [0, 1] for an accuracy (a proportion), else unbounded."""
    return (0.0, 1.0) if metric.endswith("accuracy") else (-np.inf, np.inf)


def t_interval(values: Sequence[float] | np.ndarray, confidence: float = 0.95) -> Estimate:
    """Mean with the t-based interval ``mean ± t_{n-1} · sd/√n`` (scipy.stats.t).

    NaN bounds for fewer than two values; a zero-width interval when all values are equal.
    """
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    n = int(x.size)
    if n == 0:
        return Estimate(np.nan, np.nan, np.nan, 0)
    mean = float(x.mean())
    if n < 2:
        return Estimate(mean, np.nan, np.nan, n)
    sem = float(x.std(ddof=1) / np.sqrt(n))
    if sem == 0.0:
        return Estimate(mean, mean, mean, n)
    low, high = sps.t.interval(confidence, n - 1, loc=mean, scale=sem)
    return Estimate(mean, float(low), float(high), n)


def bootstrap_ci(
    *samples: Sequence[float] | np.ndarray,
    stat: Callable[..., Any] = np.mean,
    confidence: float = 0.95,
    n_resamples: int = 2000,
    method: str = "BCa",
    paired: bool = False,
    seed: int | None = 0,
) -> tuple[float, float]:
    """Bootstrap confidence interval of ``stat(*samples)`` via ``scipy.stats.bootstrap``.

    ``stat`` must accept an ``axis`` keyword (vectorised), as numpy reductions do. Non-finite
    values are dropped (per sample; pairs are dropped together when ``paired``). Returns NaNs when
    any sample has fewer than two values; ``(s, s)`` when resampling cannot change the statistic
    (all values equal). ``BCa`` falls back to ``percentile`` when its correction is undefined.
    """
    arrays = [np.asarray(s, dtype=float) for s in samples]
    if paired:
        ok = np.logical_and.reduce([np.isfinite(a) for a in arrays])
        arrays = [a[ok] for a in arrays]
    else:
        arrays = [a[np.isfinite(a)] for a in arrays]
    if not arrays or min(a.size for a in arrays) < 2 or n_resamples <= 0:
        return (np.nan, np.nan)
    if all(np.all(a == a[0]) for a in arrays):
        with np.errstate(all="ignore"):
            s = float(stat(*arrays, axis=-1))
        return (s, s)
    methods = [method] if method == "percentile" else [method, "percentile"]
    low = high = np.nan
    for m in methods:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            res = sps.bootstrap(
                tuple(arrays),
                stat,
                n_resamples=n_resamples,
                confidence_level=confidence,
                method=m,
                paired=paired,
                vectorized=True,
                rng=np.random.default_rng(seed),
            )
        low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
        if not (np.isnan(low) or np.isnan(high)):
            break
    return (low, high)


def _cv(x: np.ndarray, axis: int = -1, ddof: int = 1) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.std(x, axis=axis, ddof=ddof) / np.abs(np.mean(x, axis=axis))


def cv(values: Sequence[float] | np.ndarray, ddof: int = 1) -> float:
    """Coefficient of variation ``sd / |mean|`` of the finite ``values``.

    NaN for fewer than two values; infinite when the mean is zero and the sd is not (NaN when both
    are). The point estimate of ``cv_with_ci``.
    """
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    return float(_cv(x, ddof=ddof)) if x.size >= 2 else np.nan


def cv_with_ci(
    values: Sequence[float] | np.ndarray,
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: int | None = 0,
    ddof: int = 1,
) -> Estimate:
    """Coefficient of variation ``sd / |mean|`` with a bootstrap CI (BCa, percentile fallback).

    Non-finite values are dropped. ``value`` is NaN for fewer than two values; the CI is NaN for
    fewer than ``MIN_N_BOOTSTRAP`` values. A mean of zero gives an infinite CV.
    """
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    n = int(x.size)
    if n < 2:
        return Estimate(np.nan, np.nan, np.nan, n)
    value = cv(x, ddof=ddof)
    if n < MIN_N_BOOTSTRAP:
        return Estimate(value, np.nan, np.nan, n)

    def stat(a: np.ndarray, axis: int = -1) -> np.ndarray:
        return _cv(a, axis=axis, ddof=ddof)

    low, high = bootstrap_ci(x, stat=stat, confidence=confidence, n_resamples=n_resamples, seed=seed)
    return Estimate(value, low, high, n)


def cv_by(
    frame: pd.DataFrame,
    value: str,
    by: str | Sequence[str],
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: int | None = 0,
) -> pd.DataFrame:
    """``cv_with_ci`` of column ``value`` within each group of ``by``.

    Columns: the ``by`` columns, ``n``, ``mean``, ``sd``, ``cv``, ``cv_ci_low``, ``cv_ci_high``.
    Groups keep their order of first appearance.
    """
    keys = [by] if isinstance(by, str) else list(by)
    rows = []
    for key, group in frame.groupby(keys, sort=False, observed=True, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        x = pd.to_numeric(group[value], errors="coerce").to_numpy(dtype=float, na_value=np.nan)
        x = x[np.isfinite(x)]
        est = cv_with_ci(x, confidence=confidence, n_resamples=n_resamples, seed=seed)
        rows.append(
            {
                **dict(zip(keys, key, strict=True)),
                "n": est.n,
                "mean": float(x.mean()) if x.size else np.nan,
                "sd": float(x.std(ddof=1)) if x.size > 1 else np.nan,
                "cv": est.value,
                "cv_ci_low": est.ci_low,
                "cv_ci_high": est.ci_high,
            }
        )
    return pd.DataFrame(rows, columns=[*keys, "n", "mean", "sd", "cv", "cv_ci_low", "cv_ci_high"])


def mark_for(p: float, alpha: float = 0.05) -> str:
    """``'***'`` below 0.001, ``'**'`` below 0.01, ``'*'`` below ``alpha``, else ``''`` (and for NaN)."""
    if p is None or not np.isfinite(p) or p >= alpha:
        return ""
    for threshold, mark in MARKS:
        if p < threshold:
            return mark
    return "*"


# --- per-cell summary ------------------------------------------------------------------------

SUMMARY_COLUMNS = [
    "cell_id",
    "cell_label",
    "status",
    "n",
    "mean",
    "ci_low",
    "ci_high",
    "sd",
    "sem",
    "median",
    "min",
    "max",
    "mean_learned",
    "n_finished",
    "n_diverged",
    "diverged_share",
    "n_never_learned",
    "never_learned_share",
    "n_failed",
    "n_pending",
    "n_trials",
]


def cell_summary(
    trials: pd.DataFrame,
    metric: str,
    chance: float | None,
    margin: float = 0.02,
    confidence: float = 0.95,
    phase: str | None = "replicate",
) -> pd.DataFrame:
    """One row per cell: n, mean with its t-based CI, spread, and outcome counts kept apart.

    Columns: ``cell_id``, ``cell_label``, the factor columns (after ``cell_label``), then

    - ``status``: ``complete`` (nothing pending or running), ``partial`` (some results, more
      coming), ``pending`` (no completed run yet and some pending/running, or no rows at all),
      ``no_results`` (nothing left to run and no completed run: all diverged or failed);
    - ``n``: completed runs with a finite metric; ``mean``, ``ci_low``, ``ci_high`` (t interval at
      ``confidence``, clipped to the metric's range: an accuracy's interval stays in [0, 1]), ``sd`` (ddof 1), ``sem``, ``median``, ``min``, ``max`` over them — NaN when
      ``n`` is 0 (and CI/sd/sem when ``n`` is 1);
    - ``mean_learned``: mean over completed runs with ``metric > chance + margin``;
    - ``n_finished`` = complete + diverged; ``n_diverged``, ``diverged_share``;
      ``n_never_learned`` (complete, ``metric ≤ chance + margin``), ``never_learned_share``; shares
      are over ``n_finished`` (NaN when it is 0). With ``chance=None`` (unknown) the never-learned
      columns are NaN and ``mean_learned`` equals ``mean``;
    - ``n_failed`` (infrastructure failures), ``n_pending`` (pending or running), ``n_trials``.
    """
    rows_all = _phase_rows(trials, phase)
    done = completed_runs(trials, metric, phase)
    known = chance is not None and np.isfinite(chance)
    threshold = chance + margin if known else -np.inf
    factor_cols = infer_factors(trials)
    out = []
    for _, cell in _cells(trials).iterrows():
        cid = cell["cell_id"]
        rows = rows_all[rows_all["cell_id"] == cid]
        status = rows["status"].astype(str)
        x = done.loc[done["cell_id"] == cid, metric].to_numpy(dtype=float)
        n = int(x.size)
        n_div = int((status == "diverged").sum())
        n_failed = int((status == "failed").sum())
        n_pending = int(status.isin(UNFINISHED).sum())
        n_never = int((x <= threshold).sum()) if known else np.nan
        n_finished = n + n_div
        est = t_interval(x, confidence)
        low, high = metric_range(metric)
        est = Estimate(est.value, float(np.clip(est.ci_low, low, high)), float(np.clip(est.ci_high, low, high)), est.n)
        if n_pending and n_finished:
            cell_status = "partial"
        elif n_pending or len(rows) == 0:
            cell_status = "pending"
        elif n == 0:
            cell_status = "no_results"
        else:
            cell_status = "complete"
        learned = x[x > threshold]
        out.append(
            {
                "cell_id": cid,
                "cell_label": cell["cell_label"],
                **{f: cell[f] for f in factor_cols},
                "status": cell_status,
                "n": n,
                "mean": est.value,
                "ci_low": est.ci_low,
                "ci_high": est.ci_high,
                "sd": float(x.std(ddof=1)) if n > 1 else np.nan,
                "sem": float(x.std(ddof=1) / np.sqrt(n)) if n > 1 else np.nan,
                "median": float(np.median(x)) if n else np.nan,
                "min": float(x.min()) if n else np.nan,
                "max": float(x.max()) if n else np.nan,
                "mean_learned": float(learned.mean()) if learned.size else np.nan,
                "n_finished": n_finished,
                "n_diverged": n_div,
                "diverged_share": n_div / n_finished if n_finished else np.nan,
                "n_never_learned": n_never,
                "never_learned_share": n_never / n_finished if n_finished and known else np.nan,
                "n_failed": n_failed,
                "n_pending": n_pending,
                "n_trials": int(len(rows)),
            }
        )
    cols = SUMMARY_COLUMNS[:2] + factor_cols + SUMMARY_COLUMNS[2:]
    return pd.DataFrame(out, columns=cols)


# --- comparisons with a reference ------------------------------------------------------------

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
    return float(_prob_improvement(x, y))


def _prob_improvement(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
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


def binomial_se(accuracy: Any, n_test: Any) -> Any:
    """The test set's own standard error of an accuracy: sqrt(p(1 − p)/N) over its N examples
    (what a single run's accuracy would vary by on another test set of the same size). NaN when
    N is unknown."""
    p = np.asarray(accuracy, dtype=float)
    n = np.asarray(n_test if n_test is not None else np.nan, dtype=float)
    with np.errstate(all="ignore"):
        out = np.sqrt(np.clip(p, 0.0, 1.0) * (1.0 - np.clip(p, 0.0, 1.0)) / n)
    return float(out) if out.ndim == 0 else out


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
                cell, ref, stat=_prob_improvement, confidence=confidence, n_resamples=n_resamples,
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
    ref_id = _resolve_cell(trials, reference_cell)
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


# --- few-run estimates (rliable's practice) --------------------------------------------------


def iqm(values: Sequence[float] | np.ndarray, axis: int = -1) -> Any:
    """Interquartile mean: the mean of the middle 50% of the values (``scipy.stats.trim_mean``,
    25% cut from each end), rliable's aggregate for few runs."""
    return sps.trim_mean(np.asarray(values, dtype=float), 0.25, axis=axis)


FEW_RUN_COLUMNS = ["cell_id", "cell_label", "n", "mean", "mean_ci_low", "mean_ci_high", "iqm", "iqm_ci_low",
                   "iqm_ci_high", "prob_improvement", "pi_ci_low", "pi_ci_high"]


def few_run_estimates(
    trials: pd.DataFrame,
    metric: str,
    reference_cell: str | None = None,
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: int | None = 0,
    phase: str | None = "replicate",
) -> pd.DataFrame:
    """Interval estimates for few runs as ``rliable`` (Agarwal et al. 2021) makes them, per cell:
    the mean and the interquartile mean with percentile bootstrap CIs, and — against
    ``reference_cell`` — the probability of improvement P(cell > reference) with its CI.

    rliable's stratified bootstrap resamples runs within each task; a study has one task, so the
    strata are the cells: each cell's runs are resampled on their own (and both cells' runs, on
    their own, for the probability of improvement). rliable itself is not used: 1.2 needs
    ``arch < 8``, whose 7.x does not import under pandas 3. CIs need ``MIN_N_TEST`` runs (NaN
    below). Columns ``FEW_RUN_COLUMNS``, cells in order.
    """
    done = completed_runs(trials, metric, phase)
    ref_id = _resolve_cell(trials, reference_cell) if reference_cell is not None else None
    ref = done.loc[done["cell_id"] == ref_id, metric].to_numpy(float) if ref_id is not None else np.array([])
    rows = []
    for _, cell in _cells(trials).iterrows():
        x = done.loc[done["cell_id"] == cell["cell_id"], metric].to_numpy(float)
        row: dict[str, Any] = {"cell_id": cell["cell_id"], "cell_label": cell["cell_label"], "n": int(x.size)}
        row.update(dict.fromkeys(FEW_RUN_COLUMNS[3:], np.nan))
        if x.size:
            row.update(mean=float(x.mean()), iqm=float(iqm(x)))
        if x.size >= MIN_N_TEST and n_resamples > 0:
            row["mean_ci_low"], row["mean_ci_high"] = bootstrap_ci(
                x, stat=np.mean, confidence=confidence, n_resamples=n_resamples, method="percentile", seed=seed)
            row["iqm_ci_low"], row["iqm_ci_high"] = bootstrap_ci(
                x, stat=iqm, confidence=confidence, n_resamples=n_resamples, method="percentile", seed=seed)
        if ref_id is not None and cell["cell_id"] != ref_id and x.size and ref.size:
            row["prob_improvement"] = prob_improvement(x, ref)
            if min(x.size, ref.size) >= MIN_N_TEST and n_resamples > 0:
                row["pi_ci_low"], row["pi_ci_high"] = bootstrap_ci(
                    x, ref, stat=_prob_improvement, confidence=confidence, n_resamples=n_resamples,
                    method="percentile", seed=seed)
        rows.append(row)
    return pd.DataFrame(rows, columns=FEW_RUN_COLUMNS)


def performance_profile(
    trials: pd.DataFrame,
    metric: str,
    taus: Sequence[float] | np.ndarray | None = None,
    confidence: float = 0.95,
    n_resamples: int = 1000,
    seed: int | None = 0,
    phase: str | None = "replicate",
) -> pd.DataFrame:
    """rliable's performance profile (run-score distribution) per cell: the share of runs whose
    ``metric`` exceeds τ, for each τ, with a pointwise percentile bootstrap band over the cell's
    runs (from ``MIN_N_TEST`` runs). ``taus`` default: 101 points spanning every completed value.

    Columns: ``cell_id``, ``cell_label``, ``tau``, ``fraction``, ``ci_low``, ``ci_high``; cells
    with no completed run are left out."""
    done = completed_runs(trials, metric, phase)
    cols = ["cell_id", "cell_label", "tau", "fraction", "ci_low", "ci_high"]
    if done.empty:
        return pd.DataFrame(columns=cols)
    if taus is None:
        v = done[metric].to_numpy(float)
        span = max(float(v.max() - v.min()), 1e-9)
        taus = np.linspace(v.min() - 0.05 * span, v.max() + 0.05 * span, 101)
    taus = np.asarray(taus, dtype=float)
    rng = np.random.default_rng(seed)
    lo_q, hi_q = (1 - confidence) / 2, 1 - (1 - confidence) / 2
    parts = []
    for _, cell in _cells(trials).iterrows():
        x = done.loc[done["cell_id"] == cell["cell_id"], metric].to_numpy(float)
        if not x.size:
            continue
        fraction = (x[:, None] > taus[None, :]).mean(axis=0)
        low = high = np.full(taus.size, np.nan)
        if x.size >= MIN_N_TEST and n_resamples > 0:
            boot = x[rng.integers(0, x.size, size=(n_resamples, x.size))]
            shares = (boot[:, :, None] > taus[None, None, :]).mean(axis=1)
            low, high = np.quantile(shares, lo_q, axis=0), np.quantile(shares, hi_q, axis=0)
        parts.append(pd.DataFrame({"cell_id": cell["cell_id"], "cell_label": cell["cell_label"], "tau": taus,
                                   "fraction": fraction, "ci_low": low, "ci_high": high}))
    return pd.concat(parts, ignore_index=True)[cols] if parts else pd.DataFrame(columns=cols)


# --- convergence -----------------------------------------------------------------------------

#: What a trial records of its convergence (null where a trial predates them): whether it
#: converged, the gain of the validation metric over the last 20% of the steps it ran, the steps
#: it ran, whether it stopped early, and the step of its best validation value.
CONVERGENCE_COLUMNS = ("converged", "val_gain_last", "steps", "stopped_early", "best_step")


def step_budget(trials: pd.DataFrame, default: int | None) -> dict[Any, float]:
    """Cell id → its step budget: the ``train.steps`` factor's level where a factor moves it, else
    ``default`` (the spec's ``train.steps``)."""
    out: dict[Any, float] = {}
    for _, cell in _cells(trials).iterrows():
        level = cell.get("train.steps") if "train.steps" in trials.columns else None
        value = pd.to_numeric(pd.Series([level]), errors="coerce").iloc[0] if level is not None else np.nan
        out[cell["cell_id"]] = float(value) if np.isfinite(value) else (float(default) if default else np.nan)
    return out


def _flag(value: Any) -> bool | None:
    """A recorded yes/no (bool, 0/1, "true"/"false"), or None where nothing was recorded."""
    if value is None or (isinstance(value, float) and np.isnan(value)) or value is pd.NA:
        return None
    if isinstance(value, str):
        return {"true": True, "false": False, "1": True, "0": False}.get(value.strip().lower())
    return bool(value)


def convergence(
    trials: pd.DataFrame,
    budget: dict[Any, float] | float | None = None,
    min_gain: float = 0.01,
    phase: str | None = "replicate",
) -> pd.DataFrame:
    """Per cell, over its completed runs: which were still improving when their budget ran out,
    and how many steps they used.

    A run is *still improving* when it records ``converged`` False, or — where ``converged`` is
    null but ``val_gain_last`` is known — when its validation metric gained at least
    ``min_gain`` over the last 20% of its steps; never when it stopped early (its plateau ended
    it, not the budget; trials recorded before ``training.convergence`` said so hold False
    there). Columns missing from ``trials`` (studies that predate them) count as unknown, never
    as converged. ``budget`` is a cell id → steps mapping (``step_budget``) or one number.

    Columns: ``cell_id``, ``cell_label``, ``n`` (completed runs), ``n_known`` (runs with any
    convergence record), ``n_unconverged``, ``still_improving`` (any run still improving),
    ``gain_max`` / ``gain_median`` (``val_gain_last`` over the still-improving runs, else over the
    runs that did not stop early; NaN when every run stopped early), ``budget``, ``steps_min``,
    ``steps_max``, ``steps_differ`` (some run used a number of steps other than the budget),
    ``n_stopped_early``, ``best_step_median``."""
    rows_all = _phase_rows(trials, phase)
    done = rows_all[rows_all["status"] == "complete"]

    def column(frame: pd.DataFrame, name: str) -> pd.Series:
        if name in frame.columns:
            return frame[name]
        return pd.Series([None] * len(frame), index=frame.index, dtype=object)

    cols = ["cell_id", "cell_label", "n", "n_known", "n_unconverged", "still_improving", "gain_max", "gain_median",
            "budget", "steps_min", "steps_max", "steps_differ", "n_stopped_early", "best_step_median"]
    rows = []
    for _, cell in _cells(trials).iterrows():
        runs = done[done["cell_id"] == cell["cell_id"]]
        conv = column(runs, "converged")
        gain = pd.to_numeric(column(runs, "val_gain_last"), errors="coerce").to_numpy(float)
        steps = pd.to_numeric(column(runs, "steps"), errors="coerce").to_numpy(float)
        early = column(runs, "stopped_early")
        best = pd.to_numeric(column(runs, "best_step"), errors="coerce").to_numpy(float)
        flags = [_flag(v) for v in conv]
        conv_known = np.array([f is not None for f in flags], dtype=bool)
        conv_false = np.array([f is False for f in flags], dtype=bool)
        by_gain = ~conv_known & np.isfinite(gain) & (gain >= min_gain)
        stopped = np.array([_flag(v) is True for v in early], dtype=bool)
        unconverged = (conv_false | by_gain) & ~stopped
        known = conv_known | np.isfinite(gain)
        # The gains of the runs still improving, else of those that ran their whole budget: an early
        # stop's gain over its last fifth came before its plateau and says nothing about the budget.
        g = gain[(unconverged if unconverged.any() else ~stopped) & np.isfinite(gain)]
        cap = budget.get(cell["cell_id"], np.nan) if isinstance(budget, dict) else (
            float(budget) if budget is not None else np.nan)
        s = steps[np.isfinite(steps)]
        rows.append({
            "cell_id": cell["cell_id"], "cell_label": cell["cell_label"], "n": int(len(runs)),
            "n_known": int(known.sum()), "n_unconverged": int(unconverged.sum()),
            "still_improving": bool(unconverged.any()),
            "gain_max": float(g.max()) if g.size else np.nan, "gain_median": float(np.median(g)) if g.size else np.nan,
            "budget": cap, "steps_min": float(s.min()) if s.size else np.nan,
            "steps_max": float(s.max()) if s.size else np.nan,
            "steps_differ": bool(s.size and np.isfinite(cap) and np.any(s != cap)),
            "n_stopped_early": int(stopped.sum()),
            "best_step_median": float(np.median(best[np.isfinite(best)])) if np.isfinite(best).any() else np.nan,
        })
    return pd.DataFrame(rows, columns=cols)


# --- factorial structure ---------------------------------------------------------------------


def _check_factors(trials: pd.DataFrame, factors: str | Sequence[str]) -> list[str]:
    factors = [factors] if isinstance(factors, str) else list(factors)
    missing = [f for f in factors if f not in trials.columns]
    if missing:
        raise KeyError(
            f"factor column(s) {missing} not in the trials frame; factors: {infer_factors(trials)}"
        )
    return factors


def is_full_factorial(
    trials: pd.DataFrame,
    factors: Sequence[str],
    metric: str | None = None,
    phase: str | None = "replicate",
) -> bool:
    """Whether every combination of the factors' levels is a cell of ``trials``.

    Levels are those appearing in ``trials``. With ``metric`` given, every combination must also
    have at least one completed run (what an ANOVA on a partial study needs). False for no factors.
    """
    factors = _check_factors(trials, factors)
    if not factors:
        return False
    rows = _phase_rows(trials, phase)
    levels = [_ordered_unique(rows[f]) for f in factors]
    have = rows if metric is None else completed_runs(trials, metric, phase)
    present = set(map(tuple, have[factors].drop_duplicates().itertuples(index=False)))
    return all(combo in present for combo in itertools.product(*levels))


def _cell_stats(done: pd.DataFrame, metric: str, by: list[str]) -> pd.DataFrame:
    """Per cell with completed runs: the ``by`` levels, n, mean, sum of squared deviations."""
    g = done.groupby("cell_id", sort=False)[metric]
    cells = done.drop_duplicates("cell_id").set_index("cell_id")[by]
    out = cells.assign(
        n=g.size(),
        mean=g.mean(),
        ss=g.apply(lambda s: float(((s - s.mean()) ** 2).sum())),
    )
    return out.reset_index()


def marginal_means(
    trials: pd.DataFrame,
    metric: str,
    by: str | Sequence[str],
    confidence: float = 0.95,
    phase: str | None = "replicate",
) -> pd.DataFrame:
    """Marginal means of ``metric`` for each combination of the ``by`` factors' levels.

    A marginal mean is the *unweighted* mean of the means of the cells at that combination (the
    estimated marginal mean of the full-interaction cell-means model), so an unbalanced or partial
    study does not tilt it towards the cells that happen to have more runs. Its standard error
    uses the within-cell variance pooled over all cells (the model's residual mean square):
    ``se = sqrt(MSE · Σ 1/n_i) / k`` over the ``k`` cells averaged, with ``N − C`` degrees of
    freedom (N runs, C cells); the CI is t-based. Cells with no completed run are left out
    (``n_cells`` says how many went in, ``n_cells_total`` how many exist).

    Columns: the ``by`` columns, ``n_cells``, ``n_cells_total``, ``n`` (runs), ``mean``, ``se``,
    ``ci_low``, ``ci_high``, ``df``, ``mean_runs`` (plain mean over the runs, for reference).
    """
    by = _check_factors(trials, by)
    done = completed_runs(trials, metric, phase)
    all_cells = _phase_rows(trials, phase).drop_duplicates("cell_id")
    cols = [*by, "n_cells", "n_cells_total", "n", "mean", "se", "ci_low", "ci_high", "df", "mean_runs"]
    if done.empty:
        return pd.DataFrame(columns=cols)
    cs = _cell_stats(done, metric, by)
    df_resid = int(cs["n"].sum() - len(cs))
    mse = float(cs["ss"].sum() / df_resid) if df_resid > 0 else np.nan
    tq = float(sps.t.ppf(0.5 + confidence / 2, df_resid)) if df_resid > 0 else np.nan
    levels = [_ordered_unique(_phase_rows(trials, phase)[f]) for f in by]
    rows = []
    for combo in itertools.product(*levels):
        mask = np.logical_and.reduce([cs[f] == lv for f, lv in zip(by, combo, strict=True)])
        sub = cs[mask]
        total = int(
            np.logical_and.reduce([all_cells[f] == lv for f, lv in zip(by, combo, strict=True)]).sum()
        )
        if total == 0:
            continue  # a combination that is not a cell of this design
        k = len(sub)
        mean = float(sub["mean"].mean()) if k else np.nan
        se = float(np.sqrt(mse * (1.0 / sub["n"]).sum()) / k) if k else np.nan
        runs = done[np.logical_and.reduce([done[f] == lv for f, lv in zip(by, combo, strict=True)])]
        rows.append(
            {
                **dict(zip(by, combo, strict=True)),
                "n_cells": k,
                "n_cells_total": total,
                "n": int(sub["n"].sum()) if k else 0,
                "mean": mean,
                "se": se,
                "ci_low": mean - tq * se,
                "ci_high": mean + tq * se,
                "df": df_resid if df_resid > 0 else np.nan,
                "mean_runs": float(runs[metric].mean()) if len(runs) else np.nan,
            }
        )
    return pd.DataFrame(rows, columns=cols)


def main_effects(
    trials: pd.DataFrame,
    metric: str,
    factors: Sequence[str] | None = None,
    confidence: float = 0.95,
    phase: str | None = "replicate",
) -> pd.DataFrame:
    """Marginal mean of ``metric`` at each level of each factor, with its CI.

    See ``marginal_means`` for the estimator. ``factors`` defaults to ``infer_factors(trials)``.
    Columns: ``factor``, ``level``, ``n_cells``, ``n_cells_total``, ``n``, ``mean``, ``se``,
    ``ci_low``, ``ci_high``, ``df``, ``mean_runs``; factors in the order given, levels in order.
    """
    factors = infer_factors(trials) if factors is None else _check_factors(trials, factors)
    parts = []
    for f in factors:
        mm = marginal_means(trials, metric, [f], confidence, phase)
        parts.append(mm.rename(columns={f: "level"}).assign(factor=f))
    cols = [
        "factor",
        "level",
        "n_cells",
        "n_cells_total",
        "n",
        "mean",
        "se",
        "ci_low",
        "ci_high",
        "df",
        "mean_runs",
    ]
    if not parts:
        return pd.DataFrame(columns=cols)
    return pd.concat(parts, ignore_index=True)[cols]


def interaction_table(
    trials: pd.DataFrame,
    metric: str,
    f1: str,
    f2: str,
    confidence: float = 0.95,
    wide: bool = False,
    phase: str | None = "replicate",
) -> pd.DataFrame:
    """Two-factor marginal means (``marginal_means(by=[f1, f2])``).

    Long form (default) has the columns of ``marginal_means``; ``wide=True`` returns the means
    pivoted to ``f1`` levels × ``f2`` levels (for a table in a report).
    """
    if f1 == f2:
        raise ValueError("an interaction needs two different factors")
    long = marginal_means(trials, metric, [f1, f2], confidence, phase)
    if not wide:
        return long
    table = long.pivot(index=f1, columns=f2, values="mean")
    order1 = [lv for lv in _ordered_unique(trials[f1]) if lv in table.index]
    order2 = [lv for lv in _ordered_unique(trials[f2]) if lv in table.columns]
    return table.loc[order1, order2]


# --- ANOVA -----------------------------------------------------------------------------------


def anova_applicable(
    trials: pd.DataFrame, metric: str, factors: Sequence[str], phase: str | None = "replicate"
) -> tuple[bool, str]:
    """Whether ``anova`` applies, and if not, why (a sentence for the report)."""
    try:
        factors = _check_factors(trials, factors)
    except KeyError as exc:
        return False, str(exc.args[0])
    if not factors:
        return False, "no factors were varied"
    done = completed_runs(trials, metric, phase)
    if done.empty:
        return False, "no completed runs yet"
    single = [f for f in factors if done[f].nunique() < 2]
    if single:
        return False, f"factor(s) {', '.join(single)} have fewer than two levels with completed runs"
    if not is_full_factorial(trials, factors, metric, phase):
        return False, "not a full factorial design with completed runs in every cell (yet)"
    n_cells = done.groupby(factors, observed=True).ngroups
    if len(done) <= n_cells:
        return False, "no replication: a cell needs at least two completed seeds"
    return True, ""


def anova(
    trials: pd.DataFrame,
    metric: str,
    factors: Sequence[str] | None = None,
    typ: int = 2,
    max_order: int | None = None,
    phase: str | None = "replicate",
) -> pd.DataFrame:
    """Factorial ANOVA table (statsmodels ``ols`` + ``anova_lm``, type II by default).

    The model has every main effect and every interaction up to ``max_order`` factors (default:
    all). Raises ``AnovaNotApplicable`` unless the design is full factorial with ≥ 2 levels per
    factor, every cell has a completed run, and some cell is replicated (see
    ``anova_applicable``). Columns: ``term`` (``a``, ``a × b``, …, ``Residual``), ``df``,
    ``sum_sq``, ``mean_sq``, ``F``, ``p``, ``eta_sq_partial`` (SS_term / (SS_term + SS_resid)),
    ``mark`` (on the uncorrected p, alpha 0.05).
    """
    from statsmodels.formula.api import ols
    from statsmodels.stats.anova import anova_lm

    factors = infer_factors(trials) if factors is None else _check_factors(trials, factors)
    ok, why = anova_applicable(trials, metric, factors, phase)
    if not ok:
        raise AnovaNotApplicable(f"ANOVA not applicable: {why}")
    done = completed_runs(trials, metric, phase)
    # Formula-safe names: dotted paths are not valid identifiers.
    alias = {f: f"f{i}" for i, f in enumerate(factors)}
    data = pd.DataFrame({alias[f]: done[f].astype(str).to_numpy() for f in factors})
    data["y"] = done[metric].to_numpy(float)
    order = len(factors) if max_order is None else max(1, min(max_order, len(factors)))
    terms = [
        ":".join(f"C({alias[f]})" for f in combo)
        for k in range(1, order + 1)
        for combo in itertools.combinations(factors, k)
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = ols("y ~ " + " + ".join(terms), data=data).fit()
        table = anova_lm(fit, typ=typ)
    back = {f"C({a})": f for f, a in alias.items()}
    names = [
        "Residual" if t == "Residual" else " × ".join(back.get(p, p) for p in t.split(":"))
        for t in table.index
    ]
    ss_resid = float(table.loc["Residual", "sum_sq"])
    out = pd.DataFrame(
        {
            "term": names,
            "df": table["df"].to_numpy(float),
            "sum_sq": table["sum_sq"].to_numpy(float),
        }
    )
    out["mean_sq"] = out["sum_sq"] / out["df"]
    out["F"] = table["F"].to_numpy(float)
    out["p"] = table["PR(>F)"].to_numpy(float)
    is_resid = out["term"] == "Residual"
    out["eta_sq_partial"] = np.where(is_resid, np.nan, out["sum_sq"] / (out["sum_sq"] + ss_resid))
    out["mark"] = [mark_for(p) for p in out["p"]]
    return out


def anova_on_finished_levels(
    trials: pd.DataFrame, metric: str, factors: Sequence[str], phase: str | None = "replicate"
) -> tuple[pd.DataFrame, dict[str, list[Any]]]:
    """For a partial study: ``trials`` without the factor levels that have no completed run yet.

    Returns ``(subset, dropped)`` where ``dropped`` maps each factor to the levels left out. When
    the design is full factorial over the remaining levels, ``anova(subset, ...)`` is the ANOVA
    of the study *so far*; a report must say which levels it leaves out. ``dropped`` is empty
    when every level has a completed run (then ``subset`` is ``trials``).
    """
    factors = _check_factors(trials, factors)
    done = completed_runs(trials, metric, phase)
    rows = _phase_rows(trials, phase)
    dropped: dict[str, list[Any]] = {}
    keep = np.ones(len(trials), dtype=bool)
    for f in factors:
        have = set(done[f].dropna())
        gone = [lv for lv in _ordered_unique(rows[f]) if lv not in have]
        if gone:
            dropped[f] = gone
            keep &= ~trials[f].isin(gone).to_numpy()
    return (trials[keep] if dropped else trials), dropped


# --- across studies --------------------------------------------------------------------------


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
