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

This is the analysis of the ``accuracy`` report and the estimators every analysis shares (``cv``,
``cv_with_ci``, ``bootstrap_ci``, ``t_interval``); the norm-stability analysis is
``ablate.stats_norms``. Nothing here formats a number or draws: the accuracy report's tables,
sentences and figures are ``ablate.report.accuracy``. Adding a section to that report touches a
function here, its presentation there, and the notebook ``ablate/report/notebooks/accuracy.py``.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
from scipy import stats as sps
from statsmodels.stats.multitest import multipletests

__all__ = [
    "AnovaNotApplicable",
    "Estimate",
    "anova",
    "anova_applicable",
    "anova_on_finished_levels",
    "bootstrap_ci",
    "cell_summary",
    "comparability",
    "compare_to_reference",
    "completed_runs",
    "cv",
    "cv_by",
    "cv_with_ci",
    "infer_factors",
    "interaction_table",
    "is_full_factorial",
    "main_effects",
    "mark_for",
    "marginal_means",
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
#: Fewest observations (pairs, or per group) for a rank test's robustness column or a bootstrap CI.
MIN_N_RANK = 3
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
      ``confidence``), ``sd`` (ddof 1), ``sem``, ``median``, ``min``, ``max`` over them — NaN when
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

COMPARISON_COLUMNS = [
    "cell_id",
    "cell_label",
    "reference_id",
    "reference_label",
    "test",
    "paired",
    "n_ref",
    "n_cell",
    "n_pairs",
    "mean_ref",
    "mean_cell",
    "mean_diff",
    "diff_ci_low",
    "diff_ci_high",
    "statistic",
    "df",
    "p",
    "p_adj",
    "mark",
    "significant",
    "effect_size_kind",
    "effect_size",
    "es_ci_low",
    "es_ci_high",
    "robust_test",
    "robust_p",
    "robust_p_adj",
]


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
    ref_by_seed: BySeed, cell_by_seed: BySeed, confidence: float, n_resamples: int, seed: int | None
) -> dict[str, Any]:
    (ref_seeds, ref), (cell_seeds, cell) = ref_by_seed, cell_by_seed
    shared, in_ref, in_cell = np.intersect1d(ref_seeds, cell_seeds, return_indices=True)
    res: dict[str, Any] = {
        "n_ref": int(ref.size),
        "n_cell": int(cell.size),
        "n_pairs": int(shared.size),
        "mean_ref": float(ref.mean()) if ref.size else np.nan,
        "mean_cell": float(cell.mean()) if cell.size else np.nan,
        "test": "insufficient data",
        "paired": False,
        "robust_test": "",
    }
    nan_keys = ("mean_diff", "diff_ci_low", "diff_ci_high", "statistic", "df", "p")
    res.update(dict.fromkeys(nan_keys, np.nan))
    res.update({"effect_size_kind": "", "effect_size": np.nan, "es_ci_low": np.nan, "es_ci_high": np.nan})
    res["robust_p"] = np.nan
    if ref.size and cell.size:
        res["mean_diff"] = res["mean_cell"] - res["mean_ref"]
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        if shared.size >= 2:
            x, y = cell[in_cell], ref[in_ref]
            d = x - y
            t = sps.ttest_rel(x, y)
            ci = t.confidence_interval(confidence)
            res.update(
                test="paired t",
                paired=True,
                mean_ref=float(y.mean()),
                mean_cell=float(x.mean()),
                mean_diff=float(d.mean()),
                diff_ci_low=float(ci.low),
                diff_ci_high=float(ci.high),
                statistic=float(t.statistic),
                df=float(t.df),
                p=float(t.pvalue),
                effect_size_kind="d_z",
                effect_size=float(_dz(d)),
            )
            if d.size >= MIN_N_BOOTSTRAP:
                res["es_ci_low"], res["es_ci_high"] = bootstrap_ci(
                    d, stat=_dz, confidence=confidence, n_resamples=n_resamples, seed=seed
                )
            if d.size >= MIN_N_RANK:
                res["robust_test"] = "Wilcoxon"
                if np.any(d != 0):
                    res["robust_p"] = float(sps.wilcoxon(x, y).pvalue)
        elif ref.size >= 2 and cell.size >= 2:
            x, y = cell, ref
            t = sps.ttest_ind(x, y, equal_var=False)
            ci = t.confidence_interval(confidence)
            res.update(
                test="Welch t",
                diff_ci_low=float(ci.low),
                diff_ci_high=float(ci.high),
                statistic=float(t.statistic),
                df=float(t.df),
                p=float(t.pvalue),
                effect_size_kind="hedges_g",
                effect_size=float(_hedges_g(x, y)),
            )
            if min(x.size, y.size) >= MIN_N_BOOTSTRAP:
                res["es_ci_low"], res["es_ci_high"] = bootstrap_ci(
                    x, y, stat=_hedges_g, confidence=confidence, n_resamples=n_resamples, seed=seed
                )
            if min(x.size, y.size) >= MIN_N_RANK:
                res["robust_test"] = "Mann-Whitney"
                res["robust_p"] = float(sps.mannwhitneyu(x, y, alternative="two-sided").pvalue)
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
) -> pd.DataFrame:
    """Compare every other cell with ``reference_cell`` (its id or its label) on ``metric``.

    Per cell, over completed runs (one value per seed):

    - **paired** on the seeds both cells share when there are at least two: ``ttest_rel``; the
      effect size is Cohen's d_z (mean difference / sd of differences); robustness column:
      Wilcoxon signed-rank (needs ``MIN_N_RANK`` pairs; with n pairs its smallest attainable
      two-sided p is 2/2ⁿ, e.g. 0.0625 for 5 seeds);
    - otherwise **unpaired**: Welch's ``ttest_ind(equal_var=False)``; Hedges' g; robustness
      column: Mann–Whitney U;
    - fewer than two values on either side: ``test = "insufficient data"``, NaN p.

    ``p_adj`` is corrected across the comparisons that have a p-value (statsmodels
    ``multipletests``, ``correction`` = ``"holm"`` by default); ``robust_p_adj`` likewise across
    the robustness tests. ``mark``: ``***`` / ``**`` / ``*`` for ``p_adj`` below 0.001 / 0.01 /
    ``alpha``. Effect-size CIs are bootstrap (BCa, ``n_resamples`` resamples, ``seed``; NaN
    below ``MIN_N_BOOTSTRAP`` observations or with ``n_resamples=0``); with a handful of seeds
    they under-cover (about 86% actual coverage for a nominal 95% at n = 5 in simulation), so read
    them as rough. ``mean_diff`` is cell − reference (over the shared seeds when paired), with the
    test's t interval (exact under normality) in ``diff_ci_low`` / ``diff_ci_high``.

    Columns: ``cell_id``, ``cell_label``, ``reference_id``, ``reference_label``, ``test``,
    ``paired``, ``n_ref``, ``n_cell``, ``n_pairs``, ``mean_ref``, ``mean_cell``, ``mean_diff``,
    ``diff_ci_low``, ``diff_ci_high``, ``statistic``, ``df``, ``p``, ``p_adj``, ``mark``,
    ``significant`` (``p_adj < alpha``), ``effect_size_kind`` (``d_z`` / ``hedges_g``),
    ``effect_size``, ``es_ci_low``, ``es_ci_high``, ``robust_test``, ``robust_p``,
    ``robust_p_adj``; one row per non-reference cell, in cell order.
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
        res = _compare_one(ref, values.get(cid, empty), confidence, n_resamples, seed)
        rows.append(
            {
                "cell_id": cid,
                "cell_label": label,
                "reference_id": ref_id,
                "reference_label": labels[ref_id],
                **res,
            }
        )
    out = pd.DataFrame(rows, columns=[c for c in COMPARISON_COLUMNS if c not in ("p_adj", "mark")])
    out["p"] = out["p"].astype(float)
    out["robust_p"] = out["robust_p"].astype(float)
    out["p_adj"] = _adjust(out["p"], correction)
    out["robust_p_adj"] = _adjust(out["robust_p"], correction)
    out["mark"] = [mark_for(p, alpha) for p in out["p_adj"]]
    out["significant"] = (out["p_adj"] < alpha).astype(bool)
    out["paired"] = out["paired"].astype(bool)
    return out[COMPARISON_COLUMNS]


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
