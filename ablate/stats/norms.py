"""The analysis behind the ``norm_stability`` report: tidy curve frames in, numeric frames out.

Input is ``Results.curves`` (``ablate.probes.CURVE_SCHEMA`` plus ``cell_id``, ``cell_label``,
``seed`` and the factor columns) as pandas. A *variant* is a cell of the study. Nothing here
formats, draws, reads storage or imports torch; every function is deterministic (bootstraps are
seeded). The coefficient of variation and the bootstraps are ``ablate.stats``' (``stats.cv``,
``stats.bootstrap_ci``). How the numbers are shown — tables, sentences, figures — is
``ablate.report.norm_stability``; adding a section to the report touches a function here, its
presentation there, and the notebook ``ablate/report/notebooks/norm_stability.py``.

The norm of a run at a probe step and layer is the probe batch's ‖x_t^h‖² averaged over t and heads
(``norm_sq_mean`` rows of kind ``probe``). Stability is its coefficient of variation (sd / mean):

    over training   per (seed, layer): CV across probe steps      → one unit per (seed, layer)
    over depth      per (seed, step):  CV across layers           → one unit per (seed, step)
    over seeds      per (layer, step): CV across seeds            → one unit per (layer, step)

A variant's value is the mean of its units and its CI a bootstrap of that mean over the units
(units of one run are not independent, so the intervals are optimistic when seeds are few).
Ratios compare each variant with the most stable one: mean CV / mean CV of the reference, with a
bootstrap CI resampling both variants' units independently.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from ablate.stats.estimators import bootstrap_ci, cv

__all__ = [
    "ACROSS",
    "MEASURES",
    "UNITS",
    "edge_steps",
    "layer_norms",
    "prepare",
    "probe_batch_check",
    "spectrum_drift",
    "stability",
    "stability_by_factor",
    "stability_ratios",
    "stability_units",
    "theory_check",
    "time_curves",
    "variants",
]

#: The three stability measures, in the order every table and sentence gives them.
MEASURES = ("training", "depth", "seeds")
#: The keys of one unit of each measure, and what its CV runs across.
UNITS = {"training": ("seed", "layer"), "depth": ("seed", "step"), "seeds": ("layer", "step")}
ACROSS = {"training": "step", "depth": "layer", "seeds": "seed"}

Order = Sequence[tuple[str, str]]  # (cell_id, cell_label) of the variants, in the plan's order


def _pandas(frame: Any) -> pd.DataFrame:
    return frame.to_pandas() if hasattr(frame, "to_pandas") else pd.DataFrame(frame)


# --- frames ---------------------------------------------------------------------------------------


def prepare(curves: Any, trials: Any = None) -> pd.DataFrame:
    """Curves as pandas, replicate runs only (when ``trials`` tells the phase), old rows completed
    (no ``quantity`` column: every row was a probe ``norm_sq``)."""
    df = _pandas(curves)
    if df.empty:
        return df
    if "quantity" not in df.columns:
        df["quantity"] = "norm_sq"
    df["quantity"] = df["quantity"].fillna("norm_sq")
    if trials is not None:
        tr = _pandas(trials)
        if "phase" in tr.columns:
            keep = tr.loc[tr["phase"] == "replicate", ["cell_id", "seed"]].drop_duplicates()
            df = df.merge(keep, on=["cell_id", "seed"], how="inner")
    if not (df["quantity"] == "norm_sq_mean").any():  # derive the summaries from an old dense curve
        dense = df[df["quantity"] == "norm_sq"]
        keys = ["cell_id", "cell_label", "seed", "kind", "step", "layer", "head"]
        mean = dense.groupby(keys, as_index=False, sort=False)["value"].mean().assign(quantity="norm_sq_mean", t=-1)
        df = pd.concat([df, mean], ignore_index=True)
    return df


def variants(df: pd.DataFrame, trials: Any = None) -> list[tuple[str, str]]:
    """(cell_id, cell_label) in the plan's order (the trials frame's), those with curves only."""
    have = set(df["cell_id"]) if not df.empty else set()
    order = _pandas(trials) if trials is not None else df
    order = order[["cell_id", "cell_label"]].drop_duplicates("cell_id")
    return [(c, lbl) for c, lbl in order.itertuples(index=False, name=None) if c in have]


def layer_norms(df: pd.DataFrame, kind: str = "probe", quantity: str = "norm_sq_mean") -> pd.DataFrame:
    """One row per (cell, seed, layer, step): the head mean of ``quantity`` rows of ``kind``."""
    sub = df[(df["kind"] == kind) & (df["quantity"] == quantity)]
    cols = ["cell_id", "cell_label", "seed", "layer", "step"]
    return sub.groupby(cols, as_index=False, sort=False)["value"].mean()


def time_curves(df: pd.DataFrame, kind: str) -> pd.DataFrame:
    """One row per (cell, seed, layer, step, t): the head mean of the dense ``norm_sq`` curve."""
    sub = df[(df["kind"] == kind) & (df["quantity"] == "norm_sq") & (df["t"] >= 0)]
    cols = ["cell_id", "cell_label", "seed", "layer", "step", "t"]
    return sub.groupby(cols, as_index=False, sort=False)["value"].mean()


def probe_batch_check(metrics: Any) -> tuple[int, bool] | None:
    """From ``Results.metrics``: (runs that logged a probe-batch fingerprint, whether all logged the
    same one), or None when none did. Norms of different runs compare only on one batch."""
    m = _pandas(metrics) if metrics is not None and len(metrics) else None
    if m is None or "name" not in m.columns:
        return None
    fp = m[m["name"] == "probe/batch_fingerprint"]
    if not len(fp):
        return None
    return int(fp[["cell_id", "seed"]].drop_duplicates().shape[0]), bool(fp["value"].nunique() == 1)


def edge_steps(df: pd.DataFrame) -> tuple[int, int]:
    """The first and the last probe step of ``df`` (what "initialisation" and "end" mean here)."""
    steps = df["step"].to_numpy()
    return int(steps.min()), int(steps.max())


# --- stability ------------------------------------------------------------------------------------


def stability_units(norms: pd.DataFrame, measure: str) -> pd.DataFrame:
    """The units of one measure: cell_id, the unit's keys, and its CV ``cv`` (undefined ones dropped)."""
    keys = ["cell_id", *UNITS[measure]]
    rows = [
        {**dict(zip(keys, key, strict=True)), "cv": cv(g["value"].to_numpy(float))}
        for key, g in norms.groupby(keys, sort=False)
    ]
    out = pd.DataFrame(rows, columns=[*keys, "cv"])
    return out[np.isfinite(out["cv"].to_numpy(float))]


def stability(norms: pd.DataFrame, order: Order, confidence: float = 0.95, n_resamples: int = 2000,
              seed: int = 0) -> pd.DataFrame:
    """Per variant: counts, the mean norm, and per measure the mean CV with its bootstrap CI.

    Columns: ``cell_id``, ``variant``, ``seeds``, ``layers``, ``steps``, ``mean_norm``, and per
    measure ``m``: ``cv_m``, ``cv_m_low``, ``cv_m_high``, ``n_m`` (units)."""
    units = {m: stability_units(norms, m) for m in MEASURES}
    rows = []
    for cid, label in order:
        sub = norms[norms["cell_id"] == cid]
        row: dict[str, Any] = {
            "cell_id": cid, "variant": label, "seeds": sub["seed"].nunique(), "layers": sub["layer"].nunique(),
            "steps": sub["step"].nunique(), "mean_norm": float(sub["value"].mean()) if len(sub) else np.nan,
        }
        for m in MEASURES:
            x = units[m].loc[units[m]["cell_id"] == cid, "cv"].to_numpy(float)
            low, high = bootstrap_ci(x, stat=np.mean, confidence=confidence, n_resamples=n_resamples, seed=seed)
            row.update({f"cv_{m}": float(x.mean()) if x.size else np.nan, f"cv_{m}_low": low,
                        f"cv_{m}_high": high, f"n_{m}": int(x.size)})
        rows.append(row)
    return pd.DataFrame(rows)


def _ratio_of_means(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.mean(a, axis=axis) / np.mean(b, axis=axis)


def stability_ratios(norms: pd.DataFrame, table: pd.DataFrame, confidence: float = 0.95, n_resamples: int = 2000,
                     seed: int = 0) -> pd.DataFrame:
    """Per measure and variant of ``table`` (``stability``): mean CV / the most stable variant's,
    with a bootstrap CI (1 for the reference itself). Measures with fewer than two variants
    measured are left out.

    Columns: ``measure``, ``cell_id``, ``variant``, ``reference_id``, ``reference``, ``ratio``,
    ``ratio_low``, ``ratio_high``."""
    rows = []
    for m in MEASURES:
        units = stability_units(norms, m)
        valid = table[np.isfinite(table[f"cv_{m}"].to_numpy(float))]
        if len(valid) < 2:
            continue
        ref = valid.loc[valid[f"cv_{m}"].idxmin()]
        b = units.loc[units["cell_id"] == ref["cell_id"], "cv"].to_numpy(float)
        for _, row in valid.iterrows():
            a = units.loc[units["cell_id"] == row["cell_id"], "cv"].to_numpy(float)
            ratio = float(a.mean() / b.mean()) if b.mean() > 0 else np.inf
            if row["cell_id"] == ref["cell_id"]:
                low = high = 1.0
            else:
                low, high = bootstrap_ci(a, b, stat=_ratio_of_means, confidence=confidence,
                                               n_resamples=n_resamples, seed=seed)
            rows.append({"measure": m, "cell_id": row["cell_id"], "variant": row["variant"],
                         "reference_id": ref["cell_id"], "reference": ref["variant"], "ratio": ratio,
                         "ratio_low": low, "ratio_high": high})
    return pd.DataFrame(rows, columns=["measure", "cell_id", "variant", "reference_id", "reference", "ratio",
                                       "ratio_low", "ratio_high"])


def stability_by_factor(table: pd.DataFrame, trials: Any, factors: Sequence[str]) -> pd.DataFrame:
    """Per factor with two or more levels and per level: the mean over cells at that level of each
    measure's CV (which factor carries the stability). Cells without a value on a measure are
    skipped; a factor with one cell per level is left out (``stability`` says it already).

    Columns: ``factor``, ``level``, ``cells``, ``cv_m`` per measure ``m``."""
    tr = _pandas(trials)
    rows = []
    for factor in factors:
        if factor not in tr.columns:
            continue
        cvs = table[["cell_id", *[f"cv_{m}" for m in MEASURES]]]  # not "variant": a factor may bear that name
        levels = tr[["cell_id", factor]].drop_duplicates("cell_id").merge(cvs, on="cell_id")
        if levels[factor].nunique() < 2 or levels[factor].nunique() == len(levels):
            continue
        for lv, group in levels.groupby(factor, sort=False):
            row: dict[str, Any] = {"factor": factor, "level": lv, "cells": len(group)}
            for m in MEASURES:
                v = group[f"cv_{m}"].to_numpy(float)
                v = v[np.isfinite(v)]
                row[f"cv_{m}"] = float(v.mean()) if v.size else np.nan
            rows.append(row)
    return pd.DataFrame(rows, columns=["factor", "level", "cells", *[f"cv_{m}" for m in MEASURES]])


# --- theory check and spectrum drift ----------------------------------------------------------------


def theory_check(df: pd.DataFrame, order: Order) -> pd.DataFrame:
    """Per variant, at the first and last probe step: ‖x_t‖² at the last t on white-noise input,
    on the probe batch, the theory, and the stationary theory (means over seeds, layers, heads).

    Columns: ``cell_id``, ``variant``, ``when`` (``init`` / ``end``), ``step``, ``probe_last``,
    ``noise_last``, ``theory_last``, ``noise_over_theory``, ``stationary``."""
    rows = []
    for cid, label in order:
        sub = df[df["cell_id"] == cid]
        if sub.empty:
            continue
        for when, step in zip(("init", "end"), edge_steps(sub), strict=True):
            at = sub[sub["step"] == step]

            def mean(kind: str, quantity: str, at: pd.DataFrame = at) -> float:
                v = at.loc[(at["kind"] == kind) & (at["quantity"] == quantity), "value"].to_numpy(float)
                return float(v.mean()) if v.size else np.nan

            noise, theory = mean("white_noise", "norm_sq_last"), mean("theory", "norm_sq_last")
            rows.append({"cell_id": cid, "variant": label, "when": when, "step": step,
                         "probe_last": mean("probe", "norm_sq_last"), "noise_last": noise, "theory_last": theory,
                         "noise_over_theory": noise / theory if theory and np.isfinite(theory) else np.nan,
                         "stationary": mean("theory", "norm_sq_stationary")})
    return pd.DataFrame(rows)


def _paired(sub: pd.DataFrame, quantity: str, first: int, last: int) -> pd.DataFrame:
    """``quantity`` per (seed, layer, t) at two steps: columns init, end."""
    q = sub[sub["quantity"] == quantity]
    keys = ["seed", "layer", "t"]
    a = q[q["step"] == first].set_index(keys)["value"]
    b = q[q["step"] == last].set_index(keys)["value"]
    return pd.DataFrame({"init": a, "end": b}).dropna()


def spectrum_drift(df: pd.DataFrame, order: Order) -> pd.DataFrame:
    """Per variant: median |λ| at the first and last probe step, median and largest |Δ|λ|| per mode,
    median |Δ phase|, and the median relative change of the input scale (ξ or γ).

    Columns: ``cell_id``, ``variant``, ``first``, ``last``, ``abs_init``, ``abs_end``,
    ``abs_change_median``, ``abs_change_max``, ``phase_change_median``, ``scale_change_median``."""
    spec = df[df["kind"] == "spectrum"]
    rows = []
    for cid, label in order:
        sub = spec[spec["cell_id"] == cid]
        if sub.empty:
            continue
        first, last = edge_steps(sub)
        mag, phase, scale = (_paired(sub, q, first, last) for q in ("abs", "phase", "input_scale"))
        d_mag = (mag["end"] - mag["init"]).abs()
        with np.errstate(all="ignore"):
            rel_scale = ((scale["end"] - scale["init"]).abs() / scale["init"].abs()).replace(np.inf, np.nan)
        rows.append({
            "cell_id": cid, "variant": label, "first": first, "last": last,
            "abs_init": float(mag["init"].median()) if len(mag) else np.nan,
            "abs_end": float(mag["end"].median()) if len(mag) else np.nan,
            "abs_change_median": float(d_mag.median()) if len(d_mag) else np.nan,
            "abs_change_max": float(d_mag.max()) if len(d_mag) else np.nan,
            "phase_change_median": float((phase["end"] - phase["init"]).abs().median()) if len(phase) else np.nan,
            "scale_change_median": float(rel_scale.median()) if rel_scale.notna().any() else np.nan,
        })
    return pd.DataFrame(rows)
