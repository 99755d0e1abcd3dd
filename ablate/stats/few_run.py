"""Few-run estimates as rliable makes them: the interquartile mean, interval estimates of the mean and
the IQM, the probability of improvement, performance profiles."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as sps

from ablate.stats.comparisons import MIN_N_TEST, pi_statistic, prob_improvement
from ablate.stats.estimators import bootstrap_ci
from ablate.stats.selection import cell_rows, completed_runs, resolve_cell

__all__ = [
    "FEW_RUN_COLUMNS",
    "few_run_estimates",
    "iqm",
    "performance_profile",
]


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
    ref_id = resolve_cell(trials, reference_cell) if reference_cell is not None else None
    ref = done.loc[done["cell_id"] == ref_id, metric].to_numpy(float) if ref_id is not None else np.array([])
    rows = []
    for _, cell in cell_rows(trials).iterrows():
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
                    x, ref, stat=pi_statistic, confidence=confidence, n_resamples=n_resamples,
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
    for _, cell in cell_rows(trials).iterrows():
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
