"""Estimators every analysis shares: the t interval, the bootstrap, the coefficient of variation, the
significance marks, a test set's binomial error, and the per-cell summary of the accuracy report."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
from scipy import stats as sps

from ablate.stats.rules import NEVER_LEARNED_MARGIN
from ablate.stats.selection import UNFINISHED, cell_rows, completed_runs, infer_factors, phase_rows

__all__ = [
    "NEVER_LEARNED_MARGIN",
    "Estimate",
    "MARKS",
    "MIN_N_BOOTSTRAP",
    "ROBUST_WIDENING",
    "ROUNDOFF",
    "SUMMARY_COLUMNS",
    "binomial_se",
    "bootstrap_ci",
    "cell_summary",
    "clip_to",
    "cv",
    "cv_by",
    "cv_with_ci",
    "interval_note",
    "mark_for",
    "mean_interval",
    "metric_range",
    "no_spread",
    "robust_level",
    "t_interval",
]


#: (threshold, mark) on a corrected p-value; ``*`` uses ``alpha`` (0.05 unless told otherwise).
MARKS = ((0.001, "***"), (0.01, "**"))


#: Fewest observations for a bootstrap CI of a CV (effect sizes have an exact interval from three:
#: ``comparisons.effect_size_ci``).
MIN_N_BOOTSTRAP = 4


class Estimate(NamedTuple):
    """A point estimate with a confidence interval over ``n`` observations."""

    value: float
    ci_low: float
    ci_high: float
    n: int


#: A spread (largest − smallest value) at most this share of the values' scale (their largest
#: magnitude) is round-off, not data: an interval, F or p made of it would be a number about the
#: floating-point arithmetic (an sd of 1e-16 over five equal accuracies, an F of 3.6 between cells
#: that are all 1.0). Every "is there any spread" question in ``ablate.stats`` asks ``no_spread``.
ROUNDOFF = 1e-9

#: A report's interval at level 1 − a is the t (or noncentral t) interval at level 1 − a / this:
#: 99% for the 95% the report prints. Exact t intervals cover 0.85–0.89 at five to eight seeds when
#: runs are skewed (a few runs that lose points) or sit at the ceiling of an accuracy; nothing in
#: five runs that happen not to include such a run can tell, so the interval is widened for every
#: sample — it then covers ≥ 0.93 there and ~0.99 on normal runs (``robust_level``; measured by
#: ``benchmarks/bench_stats_calibration.py``, tables in docs/calibration.md).
ROBUST_WIDENING = 5.0


def robust_level(confidence: float) -> float:
    """The level whose exact-under-normality interval a report prints as ``confidence``:
    1 − (1 − confidence) / ``ROBUST_WIDENING`` (0.99 for 0.95)."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), not {confidence!r}")
    return 1.0 - (1.0 - confidence) / ROBUST_WIDENING


def no_spread(values: Sequence[float] | np.ndarray, scale: float | None = None) -> bool:
    """Whether the finite ``values`` have no spread beyond round-off: their range is at most
    ``ROUNDOFF`` × ``scale`` (default: their largest magnitude). Pass the scale of the quantities
    the values were computed from when they are differences (0.01 − 0.01 is a round-off of 1.0,
    not of 0.01). True for fewer than two values (nothing spreads)."""
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    if x.size < 2:
        return True
    size = float(np.max(np.abs(x))) if scale is None else abs(float(scale))
    return bool(np.ptp(x) <= ROUNDOFF * size)


def interval_note(values: Sequence[float] | np.ndarray, scale: float | None = None, what: str = "runs") -> str:
    """Why ``values`` have no interval, in a few words for a table (``''`` when they have one):
    ``no runs``, ``one run``, ``no spread: 3 runs equal``."""
    x = np.asarray(values, dtype=float)
    n = int(np.isfinite(x).sum())
    if n == 0:
        return f"no {what}"
    if n == 1:
        return f"one {what.rstrip('s')}"
    return f"no spread: {n} {what} equal" if no_spread(x, scale) else ""


def clip_to(estimate: Estimate, bounds: tuple[float, float]) -> Estimate:
    """``estimate`` with its interval clipped to ``bounds`` (an accuracy's [0, 1]); NaN stays NaN."""
    low, high = bounds
    return Estimate(estimate.value, float(np.clip(estimate.ci_low, low, high)),
                    float(np.clip(estimate.ci_high, low, high)), estimate.n)


def metric_range(metric: str) -> tuple[float, float]:
    """The values a metric can take: [0, 1] for an accuracy (a proportion), else unbounded."""
    return (0.0, 1.0) if metric.endswith("accuracy") else (-np.inf, np.inf)


def t_interval(values: Sequence[float] | np.ndarray, confidence: float = 0.95) -> Estimate:
    """Mean with the t-based interval ``mean ± t_{n-1} · sd/√n`` (scipy.stats.t), exact for normal
    values at ``confidence``.

    NaN bounds for fewer than two values and when they have no spread beyond round-off
    (``no_spread``): an interval of width zero, or of 1e-16, is not an interval.
    """
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    n = int(x.size)
    if n == 0:
        return Estimate(np.nan, np.nan, np.nan, 0)
    mean = float(x.mean())
    if n < 2:
        return Estimate(mean, np.nan, np.nan, n)
    if no_spread(x):
        return Estimate(mean, np.nan, np.nan, n)
    sem = float(x.std(ddof=1) / np.sqrt(n))
    low, high = sps.t.interval(confidence, n - 1, loc=mean, scale=sem)
    return Estimate(mean, float(low), float(high), n)


def mean_interval(values: Sequence[float] | np.ndarray, confidence: float = 0.95,
                  bounds: tuple[float, float] = (-np.inf, np.inf)) -> tuple[Estimate, str]:
    """The mean of the finite ``values`` with the interval a report prints at ``confidence``: the t
    interval at ``robust_level(confidence)``, clipped to ``bounds`` (``metric_range``), and why it
    is missing (``interval_note``; ``''`` when it is not)."""
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    return clip_to(t_interval(x, robust_level(confidence)), bounds), interval_note(x)


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
    any sample has fewer than two values, and when no sample has spread beyond round-off
    (``no_spread``: resampling cannot change the statistic, and a zero-width interval says nothing). ``BCa`` falls back to ``percentile`` when its correction is undefined.
    """
    arrays = [np.asarray(s, dtype=float) for s in samples]
    if paired:
        ok = np.logical_and.reduce([np.isfinite(a) for a in arrays])
        arrays = [a[ok] for a in arrays]
    else:
        arrays = [a[np.isfinite(a)] for a in arrays]
    if not arrays or min(a.size for a in arrays) < 2 or n_resamples <= 0:
        return (np.nan, np.nan)
    if all(no_spread(a) for a in arrays):
        return (np.nan, np.nan)
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


def binomial_se(accuracy: Any, n_test: Any) -> Any:
    """The test set's own standard error of an accuracy: sqrt(p(1 − p)/N) over its N examples
    (what a single run's accuracy would vary by on another test set of the same size). NaN when
    N is unknown."""
    p = np.asarray(accuracy, dtype=float)
    n = np.asarray(n_test if n_test is not None else np.nan, dtype=float)
    with np.errstate(all="ignore"):
        out = np.sqrt(np.clip(p, 0.0, 1.0) * (1.0 - np.clip(p, 0.0, 1.0)) / n)
    return float(out) if out.ndim == 0 else out


SUMMARY_COLUMNS = [
    "cell_id",
    "cell_label",
    "status",
    "n",
    "mean",
    "ci_low",
    "ci_high",
    "ci_note",
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
    margin: float = NEVER_LEARNED_MARGIN,
    confidence: float = 0.95,
    phase: str | None = "replicate",
) -> pd.DataFrame:
    """One row per cell: n, mean with its CI (``mean_interval``), spread, and outcome counts kept apart.

    Columns: ``cell_id``, ``cell_label``, the factor columns (after ``cell_label``), then

    - ``status``: ``complete`` (nothing pending or running), ``partial`` (some results, more
      coming), ``pending`` (no completed run yet and some pending/running, or no rows at all),
      ``no_results`` (nothing left to run and no completed run: all diverged or failed);
    - ``n``: completed runs with a finite metric; ``mean``, ``ci_low``, ``ci_high`` (``mean_interval``:
      the t interval at ``robust_level(confidence)``, clipped to the metric's range — an accuracy's
      interval stays in [0, 1]), ``ci_note`` (why the interval is NaN: ``one run``, ``no spread: 3
      runs equal``; ``''`` when it is not), ``sd`` (ddof 1), ``sem``, ``median``, ``min``, ``max``
      over them — NaN when ``n`` is 0 (and CI/sd/sem when ``n`` is 1);
    - ``mean_learned``: mean over completed runs with ``metric > chance + margin``;
    - ``n_finished`` = complete + diverged; ``n_diverged``, ``diverged_share``;
      ``n_never_learned`` (complete, ``metric ≤ chance + margin``), ``never_learned_share``; shares
      are over ``n_finished`` (NaN when it is 0). With ``chance=None`` (unknown) the never-learned
      columns are NaN and ``mean_learned`` equals ``mean``;
    - ``n_failed`` (infrastructure failures), ``n_pending`` (pending or running), ``n_trials``.
    """
    rows_all = phase_rows(trials, phase)
    done = completed_runs(trials, metric, phase)
    known = chance is not None and np.isfinite(chance)
    threshold = chance + margin if known else -np.inf
    factor_cols = infer_factors(trials)
    out = []
    for _, cell in cell_rows(trials).iterrows():
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
        est, note = mean_interval(x, confidence, metric_range(metric))
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
                "ci_note": note,
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
