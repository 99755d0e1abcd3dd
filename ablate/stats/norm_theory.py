"""The norm report's descriptive checks against the theory: each variant's ‖x_t‖² on white noise
beside what its spectrum predicts (``theory_check``), and how far training moved the spectrum and
the input scale ξ or γ (``spectrum_drift``). Tables of means and medians over seeds, layers and
modes: nothing here is tested, so no seed-level reduction is needed (``ablate.stats.norms`` has the
tests); how they are shown is ``ablate.report.norm_tables``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ablate.stats.norms import Order, edge_steps


def theory_check(df: pd.DataFrame, order: Order) -> pd.DataFrame:
    """Per variant, at the first probe step and at each run's last: ‖x_t‖² at the last t on
    white-noise input, on the probe batch, the theory, and the stationary theory (means over seeds,
    layers, heads). Runs stopped early end at different steps; "end" is each run's own last probe,
    ``step_first`` to ``step`` the range they span (the variant's last step alone held only the
    runs that reached it).

    Columns: ``cell_id``, ``variant``, ``when`` (``init`` / ``end``), ``step_first``, ``step``,
    ``probe_last``, ``noise_last``, ``theory_last``, ``noise_over_theory``, ``stationary``."""
    rows = []
    for cid, label in order:
        sub = df[df["cell_id"] == cid]
        if sub.empty:
            continue
        last = sub.groupby("seed")["step"].transform("max")
        for when, at in (("init", sub[sub["step"] == edge_steps(sub)[0]]), ("end", sub[sub["step"] == last])):
            first, step = int(at["step"].min()), int(at["step"].max())

            def mean(kind: str, quantity: str, at: pd.DataFrame = at) -> float:
                v = at.loc[(at["kind"] == kind) & (at["quantity"] == quantity), "value"].to_numpy(float)
                return float(v.mean()) if v.size else np.nan

            noise, theory = mean("white_noise", "norm_sq_last"), mean("theory", "norm_sq_last")
            rows.append({"cell_id": cid, "variant": label, "when": when, "step_first": first, "step": step,
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
