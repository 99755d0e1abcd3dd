"""Few-run estimates after rliable: the interquartile mean, interval estimates of the mean and the
IQM, the probability of improvement, performance profiles — with intervals that cover at the seed
counts a study has (rliable's percentile bootstrap does not: at three runs its interval of the mean
is [min, max])."""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as sps

from ablate.stats.comparisons import MIN_N_TEST, prob_improvement, prob_improvement_ci
from ablate.stats.estimators import (
    ROUNDOFF,
    Estimate,
    clip_to,
    mean_interval,
    metric_range,
    robust_level,
)
from ablate.stats.selection import cell_rows, completed_runs, resolve_cell

__all__ = [
    "FEW_RUN_COLUMNS",
    "IQM_CI_MIN_N",
    "IQM_MIN_N",
    "IQM_TRIM",
    "clopper_pearson",
    "few_run_estimates",
    "iqm",
    "iqm_interval",
    "iqm_note",
    "performance_profile",
]


#: The share of runs the interquartile mean cuts from each end.
IQM_TRIM = 0.25
#: Fewest runs from which the IQM trims anything (⌊IQM_TRIM · n⌋ ≥ 1): below, it is the plain mean.
IQM_MIN_N = math.ceil(1 / IQM_TRIM)
#: Fewest runs that get an IQM interval: the fewest at which ``benchmarks/bench_stats_calibration.py``
#: measures its coverage (5 and 8 seeds, docs/calibration.md). At ``IQM_MIN_N`` the trim keeps 2 runs,
#: one degree of freedom: an unmeasured interval that spans most of an accuracy's range
#: (0.320 [0.000, 0.801]).
IQM_CI_MIN_N = 5
#: Normal samples drawn (once per run count and level, seeded) for the IQM interval's critical value.
IQM_CALIBRATION_DRAWS = 200_000


def iqm(values: Sequence[float] | np.ndarray, axis: int = -1) -> Any:
    """Interquartile mean: the mean of the middle 50% of the values (``scipy.stats.trim_mean``,
    ``IQM_TRIM`` cut from each end, ⌊0.25 n⌋ values: none below ``IQM_MIN_N``), rliable's aggregate for
    few runs."""
    return sps.trim_mean(np.asarray(values, dtype=float), IQM_TRIM, axis=axis)


def _trimmed_studentised(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(IQM, Tukey–McLaughlin standard error) along the last axis: the winsorised variance over
    h(h − 1)/(n − 1), h the values kept (Yuen 1974)."""
    x = np.sort(x, axis=-1)
    n = x.shape[-1]
    g = int(IQM_TRIM * n)
    h = n - 2 * g
    centre = x[..., g:n - g].mean(axis=-1)
    w = x.copy()
    if g:
        w[..., :g] = x[..., g:g + 1]
        w[..., n - g:] = x[..., n - g - 1:n - g]
    se = np.sqrt((n - 1) * w.var(axis=-1, ddof=1) / (h * (h - 1)))
    return centre, se


@lru_cache(maxsize=64)
def _iqm_critical(n: int, confidence: float) -> float:
    """The ``confidence`` quantile of |IQM − μ| / se over normal samples of ``n``: what Student's t
    with h − 1 degrees of freedom approximates (and, at four to eight runs, undershoots)."""
    rng = np.random.default_rng(0)
    chunk = max(1, 2_000_000 // n)  # bounded memory whatever n
    stats_ = []
    for start in range(0, IQM_CALIBRATION_DRAWS, chunk):
        centre, se = _trimmed_studentised(rng.standard_normal((min(chunk, IQM_CALIBRATION_DRAWS - start), n)))
        stats_.append(np.abs(centre) / se)
    return float(np.quantile(np.concatenate(stats_), confidence))


def iqm_interval(values: Sequence[float] | np.ndarray, confidence: float = 0.95) -> Estimate:
    """The IQM of the finite ``values`` with a trimmed-t interval: IQM ± c · se, se the Tukey–McLaughlin
    standard error (winsorised variance; Yuen 1974), c the ``confidence`` quantile of |IQM − μ| / se
    over normal samples of the same size (``_iqm_critical``, seeded, cached) in place of Student's
    t(h − 1), which at five to eight runs covers a point or two short. Exact for normal runs; the
    trimming and winsorising keep it from leaning on one odd run, and
    ``benchmarks/bench_stats_calibration.py`` measures it on simulated accuracies.

    NaN bounds below ``IQM_MIN_N`` values, where nothing is trimmed (the IQM is the mean: use its t
    interval); below ``IQM_CI_MIN_N``, where the trim keeps two runs and the benchmark does not measure
    its coverage; and when the middle values tie (a winsorised spread of zero, or of round-off — an se
    at most ``ROUNDOFF`` × the values' scale: nothing to scale by). ``iqm_note`` says which."""
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    n = int(x.size)
    if n == 0:
        return Estimate(np.nan, np.nan, np.nan, 0)
    centre = float(iqm(x))
    if n < IQM_CI_MIN_N:
        return Estimate(centre, np.nan, np.nan, n)
    _, se = _trimmed_studentised(x)
    se = float(se)
    if not se > ROUNDOFF * float(np.max(np.abs(x))):
        return Estimate(centre, np.nan, np.nan, n)
    half = _iqm_critical(n, float(confidence)) * se
    return Estimate(centre, centre - half, centre + half, n)


def iqm_note(values: Sequence[float] | np.ndarray) -> str:
    """Why ``iqm_interval`` has no interval for ``values`` (``''`` when it has one)."""
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    if x.size < IQM_MIN_N:
        return f"n < {IQM_MIN_N}: nothing trimmed" if x.size else "no runs"
    if x.size < IQM_CI_MIN_N:
        return f"n < {IQM_CI_MIN_N}: {x.size - 2 * int(IQM_TRIM * x.size)} runs kept, coverage not measured"
    if np.isnan(iqm_interval(x).ci_low):
        return f"no spread: the middle {x.size - 2 * int(IQM_TRIM * x.size)} runs equal"
    return ""


def clopper_pearson(k: Any, n: Any, confidence: float = 0.95) -> tuple[Any, Any]:
    """The exact (Clopper–Pearson) interval of a binomial share from ``k`` of ``n``, vectorised:
    beta quantiles, [0, …] at k = 0 and […, 1] at k = n; it covers at least ``confidence`` for every
    true share (``scipy.stats.binomtest(k, n).proportion_ci(method="exact")`` one at a time)."""
    k = np.asarray(k, dtype=float)
    n = np.asarray(n, dtype=float)
    tail = (1.0 - confidence) / 2.0
    with np.errstate(all="ignore"):
        low = np.where(k > 0, sps.beta.ppf(tail, k, n - k + 1), 0.0)
        high = np.where(k < n, sps.beta.ppf(1.0 - tail, k + 1, n - k), 1.0)
    return (float(low), float(high)) if low.ndim == 0 else (low, high)


FEW_RUN_COLUMNS = ["cell_id", "cell_label", "n", "mean", "mean_ci_low", "mean_ci_high", "mean_ci_note", "iqm",
                   "iqm_trim", "iqm_ci_low", "iqm_ci_high", "iqm_ci_note", "prob_improvement", "pi_ci_low",
                   "pi_ci_high"]


def few_run_estimates(
    trials: pd.DataFrame,
    metric: str,
    reference_cell: str | None = None,
    confidence: float = 0.95,
    phase: str | None = "replicate",
) -> pd.DataFrame:
    """rliable's few-run estimates (Agarwal et al. 2021) per cell, with intervals that cover at a
    handful of seeds: the mean with its interval (``estimators.mean_interval``: t at
    ``robust_level(confidence)``), the interquartile mean with its trimmed-t interval
    (``iqm_interval`` at ``robust_level(confidence)``; ``iqm_trim`` runs cut from each end — zero
    below ``IQM_MIN_N``, where the IQM is the mean and has no interval of its own; no interval below
    ``IQM_CI_MIN_N``), both clipped to the metric's range (``metric_range``), with ``mean_ci_note`` / ``iqm_ci_note`` saying why an
    interval is NaN (``interval_note``, ``iqm_note``; ``''`` when it is not), and — against
    ``reference_cell`` — the probability of improvement P(cell > reference) over every pair of runs
    with Newcombe's score interval (``prob_improvement_ci``).

    rliable's stratified percentile bootstrap is not used: with three runs its interval of the mean
    is [min, max], narrower than the t interval, and at three to eight runs its intervals cover well
    short of their level (``benchmarks/bench_stats_calibration.py --before`` measures them).
    Intervals need ``MIN_N_TEST`` runs (NaN below). Columns ``FEW_RUN_COLUMNS``, cells in order.
    """
    done = completed_runs(trials, metric, phase)
    ref_id = resolve_cell(trials, reference_cell) if reference_cell is not None else None
    ref = done.loc[done["cell_id"] == ref_id, metric].to_numpy(float) if ref_id is not None else np.array([])
    bounds = metric_range(metric)
    rows = []
    for _, cell in cell_rows(trials).iterrows():
        x = done.loc[done["cell_id"] == cell["cell_id"], metric].to_numpy(float)
        row: dict[str, Any] = {"cell_id": cell["cell_id"], "cell_label": cell["cell_label"], "n": int(x.size)}
        row.update(dict.fromkeys(FEW_RUN_COLUMNS[3:], np.nan))
        row["iqm_trim"] = int(IQM_TRIM * x.size)
        few = f"n < {MIN_N_TEST}" if x.size else "no runs"
        row["mean_ci_note"] = row["iqm_ci_note"] = few
        if x.size:
            row.update(mean=float(x.mean()), iqm=float(iqm(x)))
        if x.size >= MIN_N_TEST:
            mean, row["mean_ci_note"] = mean_interval(x, confidence, bounds)
            row["mean_ci_low"], row["mean_ci_high"] = mean.ci_low, mean.ci_high
            middle = clip_to(iqm_interval(x, robust_level(confidence)), bounds)
            row["iqm_ci_low"], row["iqm_ci_high"] = middle.ci_low, middle.ci_high
            row["iqm_ci_note"] = iqm_note(x)
        if ref_id is not None and cell["cell_id"] != ref_id and x.size and ref.size:
            row["prob_improvement"] = prob_improvement(x, ref)
            if min(x.size, ref.size) >= MIN_N_TEST:
                row["pi_ci_low"], row["pi_ci_high"] = prob_improvement_ci(x, ref, confidence)
        rows.append(row)
    return pd.DataFrame(rows, columns=FEW_RUN_COLUMNS)


def performance_profile(
    trials: pd.DataFrame,
    metric: str,
    taus: Sequence[float] | np.ndarray | None = None,
    confidence: float = 0.95,
    phase: str | None = "replicate",
) -> pd.DataFrame:
    """rliable's performance profile (run-score distribution) per cell: the share of runs whose
    ``metric`` exceeds τ, for each τ, with a pointwise exact (Clopper–Pearson) band: at each τ the
    interval of a binomial share from the k of the cell's n runs above it (``clopper_pearson``, from
    ``MIN_N_TEST`` runs), which covers the true share at every τ at least ``confidence`` of the time
    (a bootstrap band is [1, 1] wherever every run is above τ). ``taus`` default: 101 points spanning
    every completed value.

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
    parts = []
    for _, cell in cell_rows(trials).iterrows():
        x = done.loc[done["cell_id"] == cell["cell_id"], metric].to_numpy(float)
        if not x.size:
            continue
        above = (x[:, None] > taus[None, :]).sum(axis=0)
        low = high = np.full(taus.size, np.nan)
        if x.size >= MIN_N_TEST:
            low, high = clopper_pearson(above, x.size, confidence)
        parts.append(pd.DataFrame({"cell_id": cell["cell_id"], "cell_label": cell["cell_label"], "tau": taus,
                                   "fraction": above / x.size, "ci_low": low, "ci_high": high}))
    return pd.concat(parts, ignore_index=True)[cols] if parts else pd.DataFrame(columns=cols)
