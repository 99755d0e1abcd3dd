"""The analysis behind the ``norm_stability`` report: tidy curve frames in, tables, text and figures out.

Input is ``Results.curves`` (``ablate.probes.CURVE_SCHEMA`` plus ``cell_id``, ``cell_label``,
``seed`` and the factor columns) as pandas. A *variant* is a cell of the study. Nothing here reads
storage or imports torch; every function is deterministic (bootstraps are seeded).

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

import math
from collections.abc import Sequence
from typing import Any

import matplotlib as mpl
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from ablate import stats
from ablate.report.figures import STYLE, WIDTH, wrap

MEASURES = {"training": "over training steps", "depth": "over layers", "seeds": "over seeds"}
UNITS = {"training": ("seed", "layer"), "depth": ("seed", "step"), "seeds": ("layer", "step")}
ACROSS = {"training": "step", "depth": "layer", "seeds": "seed"}
THEORY_COLOR, NOISE_COLOR = "black", "0.45"


# --- frames ---------------------------------------------------------------------------------------


def prepare(curves: Any, trials: Any = None) -> pd.DataFrame:
    """Curves as pandas, replicate runs only (when ``trials`` tells the phase), old rows completed
    (no ``quantity`` column: every row was a probe ``norm_sq``)."""
    df = curves.to_pandas() if hasattr(curves, "to_pandas") else pd.DataFrame(curves)
    if df.empty:
        return df
    if "quantity" not in df.columns:
        df["quantity"] = "norm_sq"
    df["quantity"] = df["quantity"].fillna("norm_sq")
    if trials is not None:
        tr = trials.to_pandas() if hasattr(trials, "to_pandas") else trials
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
    if trials is not None:
        tr = trials.to_pandas() if hasattr(trials, "to_pandas") else trials
        order = tr[["cell_id", "cell_label"]].drop_duplicates("cell_id")
    else:
        order = df[["cell_id", "cell_label"]].drop_duplicates("cell_id")
    return [(c, lbl) for c, lbl in order.itertuples(index=False, name=None) if c in have]


def short_order(order: Sequence[tuple[str, str]]) -> tuple[list[tuple[str, str]], str]:
    """Compact labels for figures: when every label reads ``k1=v1, k2=v2, …`` with the same keys,
    ("v1 · v2 · …", "k1 · k2 · …" as the key); otherwise the labels unchanged and no key."""
    parsed = []
    for cid, label in order:
        parts = [p.split("=", 1) for p in str(label).split(", ")]
        if not all(len(p) == 2 for p in parts):
            return list(order), ""
        parsed.append((cid, [k for k, _ in parts], [v for _, v in parts]))
    keys = {tuple(k) for _, k, _ in parsed}
    if len(keys) != 1:
        return list(order), ""
    (names,) = keys
    short = [n.rsplit(".", 1)[-1] for n in names]
    return [(cid, " · ".join(v)) for cid, _, v in parsed], " · ".join(short)


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


# --- stability ------------------------------------------------------------------------------------


def _cv(x: np.ndarray) -> float:
    x = x[np.isfinite(x)]
    if x.size < 2:
        return np.nan
    m = abs(float(x.mean()))
    return float(x.std(ddof=1) / m) if m > 0 else np.inf


def stability_units(norms: pd.DataFrame, measure: str) -> pd.DataFrame:
    """The units of one measure: cell_id, the unit's keys, and its CV ``cv`` (NaN dropped)."""
    keys = ["cell_id", *UNITS[measure]]
    rows = [
        {**dict(zip(keys, key, strict=True)), "cv": _cv(g["value"].to_numpy(float))}
        for key, g in norms.groupby(keys, sort=False)
    ]
    out = pd.DataFrame(rows, columns=[*keys, "cv"])
    return out[np.isfinite(out["cv"].to_numpy(float))]


def stability_table(norms: pd.DataFrame, order: Sequence[tuple[str, str]], confidence: float = 0.95,
                    n_resamples: int = 2000, seed: int = 0) -> pd.DataFrame:
    """Per variant: counts, the mean norm, and per measure the mean CV with its bootstrap CI."""
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
            low, high = stats.bootstrap_ci(x, stat=np.mean, confidence=confidence, n_resamples=n_resamples, seed=seed)
            row.update({f"cv_{m}": float(x.mean()) if x.size else np.nan, f"cv_{m}_low": low,
                        f"cv_{m}_high": high, f"n_{m}": int(x.size)})
        rows.append(row)
    return pd.DataFrame(rows)


def _ratio_of_means(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.mean(a, axis=axis) / np.mean(b, axis=axis)


def ratio_table(norms: pd.DataFrame, table: pd.DataFrame, confidence: float = 0.95, n_resamples: int = 2000,
                seed: int = 0) -> pd.DataFrame:
    """Per measure and variant: mean CV / the most stable variant's, with a bootstrap CI."""
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
                low, high = stats.bootstrap_ci(a, b, stat=_ratio_of_means, confidence=confidence,
                                               n_resamples=n_resamples, seed=seed)
            rows.append({"measure": m, "cell_id": row["cell_id"], "variant": row["variant"],
                         "reference_id": ref["cell_id"], "reference": ref["variant"], "ratio": ratio,
                         "ratio_low": low, "ratio_high": high})
    return pd.DataFrame(rows, columns=["measure", "cell_id", "variant", "reference_id", "reference", "ratio",
                                       "ratio_low", "ratio_high"])


def factor_table(table: pd.DataFrame, trials: Any, factors: Sequence[str]) -> pd.DataFrame:
    """Per factor with two or more levels and per level: the mean over cells at that level of each
    measure's CV (which factor carries the stability). Cells without a value on a measure are skipped."""
    tr = trials.to_pandas() if hasattr(trials, "to_pandas") else trials
    rows = []
    for factor in factors:
        if factor not in tr.columns:
            continue
        cvs = table[["cell_id", *[f"cv_{m}" for m in MEASURES]]]  # not "variant": a factor may bear that name
        levels = tr[["cell_id", factor]].drop_duplicates("cell_id").merge(cvs, on="cell_id")
        if levels[factor].nunique() < 2 or levels[factor].nunique() == len(levels):
            continue  # one level, or one cell per level (then Table 1 says it already)
        for level, group in levels.groupby(factor, sort=False):
            row: dict[str, Any] = {"factor": factor, "level": level, "cells": len(group)}
            for m in MEASURES:
                v = group[f"cv_{m}"].to_numpy(float)
                v = v[np.isfinite(v)]
                row[f"cv_{m}"] = float(v.mean()) if v.size else np.nan
            rows.append(row)
    return pd.DataFrame(rows, columns=["factor", "level", "cells", *[f"cv_{m}" for m in MEASURES]])


def display_factors(factors: pd.DataFrame) -> pd.DataFrame:
    out = factors[["factor", "level", "cells"]].copy()
    for m, words in MEASURES.items():
        out[f"mean CV {words}"] = factors[f"cv_{m}"].map(_fmt)
    return out


# --- theory check and spectrum drift ----------------------------------------------------------------


def _edge_steps(df: pd.DataFrame) -> tuple[int, int]:
    steps = df["step"].to_numpy()
    return int(steps.min()), int(steps.max())


def theory_check(df: pd.DataFrame, order: Sequence[tuple[str, str]]) -> pd.DataFrame:
    """Per variant, at the first and last probe step: ‖x_t‖² at the last t on white-noise input,
    on the probe batch, the theory, and the stationary theory (means over seeds, layers, heads)."""
    rows = []
    for cid, label in order:
        sub = df[df["cell_id"] == cid]
        if sub.empty:
            continue
        for when, step in zip(("init", "end"), _edge_steps(sub), strict=True):
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


def spectrum_drift(df: pd.DataFrame, order: Sequence[tuple[str, str]]) -> pd.DataFrame:
    """Per variant: median |λ| at the first and last probe step, median and largest |Δ|λ|| per mode,
    median |Δ phase|, and the median relative change of the input scale (ξ or γ)."""
    spec = df[df["kind"] == "spectrum"]
    rows = []
    for cid, label in order:
        sub = spec[spec["cell_id"] == cid]
        if sub.empty:
            continue
        first, last = _edge_steps(sub)
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


# --- text -----------------------------------------------------------------------------------------------


def _fmt(x: float, digits: int = 3) -> str:
    if x is None or not np.isfinite(x):
        return "n/a"
    return f"{x:.{digits}g}"


def _ci(low: float, high: float, digits: int = 3, unit: str = "") -> str:
    if not (np.isfinite(low) and np.isfinite(high)):
        return "no CI"
    return f"95% CI {_fmt(low, digits)}{unit}–{_fmt(high, digits)}{unit}"


def summary_text(table: pd.DataFrame, ratios: pd.DataFrame, check: pd.DataFrame | None = None,
                 drift: pd.DataFrame | None = None, by_factor: pd.DataFrame | None = None) -> str:
    """Markdown stating which variant is more stable and by how much — numbers only from the tables."""
    if table.empty:
        return "No probe data yet."
    lines: list[str] = []
    best: dict[str, str] = {}
    clear: dict[str, bool] = {}  # the most stable variant's lead is outside every ratio's CI
    for m, words in MEASURES.items():
        r = ratios[ratios["measure"] == m]
        if r.empty:
            valid = table[np.isfinite(table[f"cv_{m}"].to_numpy(float))]
            if len(valid) == 1:
                row = valid.iloc[0]
                lines.append(f"- **{words.capitalize()}**: only {row['variant']} can be measured "
                             f"(CV {_fmt(row[f'cv_{m}'])}, {_ci(row[f'cv_{m}_low'], row[f'cv_{m}_high'])}).")
            elif m == "seeds" and table["seeds"].max() < 2:
                lines.append(f"- **{words.capitalize()}**: one seed per variant, no spread to measure.")
            elif m == "depth" and table["layers"].max() < 2:
                lines.append(f"- **{words.capitalize()}**: one layer, no spread to measure.")
            continue
        ref_id, ref_label = r["reference_id"].iloc[0], r["reference"].iloc[0]
        ref_row = table[table["cell_id"] == ref_id].iloc[0]
        best[m] = ref_label
        parts = [f"- **{words.capitalize()}**: {ref_label} varies least (CV {_fmt(ref_row[f'cv_{m}'])}, "
                 f"{_ci(ref_row[f'cv_{m}_low'], ref_row[f'cv_{m}_high'])})"]
        others = r[r["cell_id"] != ref_id].sort_values("ratio")
        clear[m] = bool((others["ratio_low"] > 1.0).all())
        for _, o in others.iterrows():
            trow = table[table["cell_id"] == o["cell_id"]].iloc[0]
            if np.isfinite(o["ratio_low"]) and o["ratio_low"] <= 1.0:
                verdict = "not distinguishable from it at 95%"
            elif np.isfinite(o["ratio_low"]):
                verdict = "clearly less stable"
            else:
                verdict = "too few units for a CI"
            parts.append(f"{o['variant']}: CV {_fmt(trow[f'cv_{m}'])}, {_fmt(o['ratio'])}× as large "
                         f"({_ci(o['ratio_low'], o['ratio_high'], unit='×')}; {verdict})")
        lines.append("; ".join(parts) + ".")
    head = []
    if best:
        winners = set(best.values())
        if len(winners) == 1:
            (winner,) = winners
            n = len(best)
            sure = [MEASURES[m] for m in best if clear[m]]
            unsure = [MEASURES[m] for m in best if not clear[m]]
            text = (f"**{winner}** has the most stable state norm (lowest CV) on {'every' if n > 1 else 'the one'} "
                    f"measure available ({', '.join(MEASURES[m] for m in best)})")
            if sure and unsure:
                text += (f"; clearly so (95% CI of every ratio above 1) {', '.join(sure)}, but not distinguishable "
                         f"from the next variant {', '.join(unsure)}")
            elif sure:
                text += "; clearly so on each (95% CI of every ratio above 1)"
            else:
                text += ", but no difference is clear at 95%"
            head.append(text + ".")
        else:
            head.append("No variant is the most stable on every measure: "
                        + "; ".join(f"{MEASURES[m]}: {v}" for m, v in best.items()) + ".")
    if by_factor is not None and not by_factor.empty and len(table) > 2:
        for factor, group in by_factor.groupby("factor", sort=False):
            parts = []
            for m, words in MEASURES.items():
                g = group[np.isfinite(group[f"cv_{m}"].to_numpy(float))]
                if len(g) < 2:
                    continue
                lo, hi = g.loc[g[f"cv_{m}"].idxmin()], g.loc[g[f"cv_{m}"].idxmax()]
                ratio = hi[f"cv_{m}"] / lo[f"cv_{m}"] if lo[f"cv_{m}"] > 0 else np.inf
                parts.append(f"{words} {lo['level']} {_fmt(lo[f'cv_{m}'])} vs {hi['level']} {_fmt(hi[f'cv_{m}'])} "
                             f"({_fmt(ratio)}×)")
            if parts:
                lines.append(f"- **By {factor}** (mean CV over the variants at each level, lowest vs highest): "
                             + "; ".join(parts) + ".")
    if check is not None and not check.empty:
        init = check[(check["when"] == "init") & check["noise_over_theory"].notna()]
        if len(init):
            worst = init.loc[(init["noise_over_theory"] - 1).abs().idxmax()]
            dev = abs(worst["noise_over_theory"] - 1)
            lines.append(f"- **White-noise check**: at initialisation the measured ‖x_L‖² on white-noise input is "
                         f"within {dev:.1%} of the theory for every variant (largest deviation: {worst['variant']}).")
        end = check[check["when"] == "end"]
        stat = [f"{r['variant']} {_fmt(r['stationary'])}" for _, r in end.iterrows() if np.isfinite(r["stationary"])]
        if stat:
            lines.append("- **Stationary theory** E‖x_∞^h‖² per head at the end of training (1 by construction "
                         "for ξ): " + "; ".join(stat) + ".")
    if drift is not None and not drift.empty:
        parts = [f"{r['variant']} {_fmt(r['abs_change_median'], 2)} (largest {_fmt(r['abs_change_max'], 2)})"
                 for _, r in drift.iterrows()]
        lines.append("- **Spectrum drift**: median change of |λ| per mode from the first to the last probe: "
                     + "; ".join(parts) + ".")
    return "\n".join(head + [""] + lines)


# --- tables for display -----------------------------------------------------------------------------


def display_stability(table: pd.DataFrame) -> pd.DataFrame:
    out = pd.DataFrame({
        "variant": table["variant"],
        "seeds": table["seeds"],
        "layers": table["layers"],
        "probe steps": table["steps"],
        "mean ‖x‖²": table["mean_norm"].map(_fmt),
    })
    for m, words in MEASURES.items():
        out[f"CV {words} [95% CI]"] = [
            f"{_fmt(v)} [{_fmt(lo)}, {_fmt(hi)}]" if np.isfinite(lo) else _fmt(v)
            for v, lo, hi in zip(table[f"cv_{m}"], table[f"cv_{m}_low"], table[f"cv_{m}_high"], strict=True)
        ]
    return out


def display_ratios(ratios: pd.DataFrame) -> pd.DataFrame:
    ratios = ratios[ratios["cell_id"] != ratios["reference_id"]]  # the reference's own 1× says nothing
    return pd.DataFrame({
        "measure": ratios["measure"].map(MEASURES),
        "variant": ratios["variant"],
        "reference (most stable)": ratios["reference"],
        "CV ratio [95% CI]": [
            f"{_fmt(r)}× [{_fmt(lo)}, {_fmt(hi)}]" if np.isfinite(lo) else f"{_fmt(r)}×"
            for r, lo, hi in zip(ratios["ratio"], ratios["ratio_low"], ratios["ratio_high"], strict=True)
        ],
    })


def display_check(check: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({
        "variant": check["variant"], "when": check["when"] + " (step " + check["step"].astype(str) + ")",
        "probe batch ‖x_L‖²": check["probe_last"].map(_fmt), "white noise ‖x_L‖²": check["noise_last"].map(_fmt),
        "theory ‖x_L‖²": check["theory_last"].map(_fmt), "noise / theory": check["noise_over_theory"].map(_fmt),
        "stationary theory": check["stationary"].map(_fmt),
    })


def display_drift(drift: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({
        "variant": drift["variant"], "steps": drift["first"].astype(str) + " → " + drift["last"].astype(str),
        "median |λ| (init → end)": [f"{_fmt(a, 4)} → {_fmt(b, 4)}" for a, b in zip(drift["abs_init"],
                                                                                   drift["abs_end"], strict=True)],
        "median |Δ|λ||": drift["abs_change_median"].map(lambda x: _fmt(x, 2)),
        "largest |Δ|λ||": drift["abs_change_max"].map(lambda x: _fmt(x, 2)),
        "median |Δ phase|": drift["phase_change_median"].map(lambda x: _fmt(x, 2)),
        "median relative Δ input scale": drift["scale_change_median"].map(lambda x: _fmt(x, 2)),
    })


# --- figures ----------------------------------------------------------------------------------------------


def palette(order: Sequence[tuple[str, str]]) -> dict[str, Any]:
    n = max(1, len(order))
    colors = sns.color_palette("colorblind", n) if n <= 10 else sns.color_palette("husl", n)
    return {cid: colors[i] for i, (cid, _) in enumerate(order)}


def _figure(height: float) -> Figure:
    fig = Figure(figsize=(WIDTH, height), layout="constrained", dpi=150)
    FigureCanvasAgg(fig)
    return fig


def _empty(message: str) -> Figure:
    with mpl.rc_context(STYLE):
        fig = _figure(1.2)
        ax = fig.add_subplot()
        ax.set_axis_off()
        ax.text(0.5, 0.5, message, ha="center", va="center", color="0.4")
    return fig


def _log_if_wide(axes: Sequence[Any], values: np.ndarray, ratio: float = 30.0) -> bool:
    v = values[np.isfinite(values) & (values > 0)]
    if v.size and values[np.isfinite(values)].min() > 0 and v.max() / v.min() > ratio:
        for ax in axes:
            ax.set_yscale("log")
            ax.yaxis.set_major_locator(mpl.ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
            ax.yaxis.set_major_formatter(mpl.ticker.FuncFormatter(lambda y, _: f"{y:g}"))
            ax.yaxis.set_minor_formatter(mpl.ticker.NullFormatter())
        return True
    return False


def _legend(fig: Figure, order: Sequence[tuple[str, str]], colors: dict[str, Any], extra: Sequence[Any] = (),
            title: str = "") -> None:
    handles = [mpl.lines.Line2D([], [], color=colors[c], lw=2, label=wrap(lbl, 40)) for c, lbl in order]
    longest = max((len(lbl) for _, lbl in order), default=0)
    ncols = 1 if longest > 45 else 2 if longest > 22 else 3
    fig.legend(handles=handles + list(extra), loc="outside upper center", ncols=ncols, frameon=False, fontsize=7,
               title=title or None, title_fontsize=7)


def norm_vs_step(norms: pd.DataFrame, order: Sequence[tuple[str, str]], *, ylabel: str = "‖x‖² (mean over t, heads)",
                 ncols: int = 4, key: str = "") -> Figure:
    """A panel per layer: per variant each seed a thin line, the mean over seeds thick, the min–max band."""
    if norms.empty:
        return _empty("no probe data yet")
    colors = palette(order)
    layers = sorted(norms["layer"].unique())
    ncols = max(1, min(ncols, len(layers)))
    nrows = math.ceil(len(layers) / ncols)
    with mpl.rc_context(STYLE):
        fig = _figure(0.9 + 1.55 * nrows + 0.17 * math.ceil((len(order) + 3) / 2))
        axes = np.atleast_1d(fig.subplots(nrows, ncols, sharex=True, squeeze=False)).ravel()
        for ax, layer in zip(axes, layers, strict=False):
            sub = norms[norms["layer"] == layer]
            for cid, _ in order:
                v = sub[sub["cell_id"] == cid]
                if v.empty:
                    continue
                wide = v.pivot_table(index="step", columns="seed", values="value").sort_index()
                for seed in wide.columns:
                    ax.plot(wide.index, wide[seed], lw=0.5, alpha=0.45, color=colors[cid])
                if wide.shape[1] > 1:
                    ax.fill_between(wide.index, wide.min(1), wide.max(1), color=colors[cid], alpha=0.15, lw=0)
                ax.plot(wide.index, wide.mean(1), lw=1.6, color=colors[cid])
            ax.set_title(f"layer {layer}")
        for ax in axes[len(layers):]:
            ax.set_axis_off()
        _log_if_wide(axes[: len(layers)], norms["value"].to_numpy(float))
        fig.supxlabel("training step", fontsize=8)
        fig.supylabel(ylabel, fontsize=8)
        extra = [mpl.lines.Line2D([], [], color="0.3", lw=0.5, label="seed"),
                 mpl.lines.Line2D([], [], color="0.3", lw=1.6, label="mean over seeds"),
                 mpl.patches.Patch(color="0.3", alpha=0.15, label="min–max over seeds")]
        _legend(fig, order, colors, extra, key)
    return fig


def norm_vs_time(df: pd.DataFrame, order: Sequence[tuple[str, str]]) -> Figure:
    """Rows: variants; columns: first and last probe step. ‖x_t‖² (mean over heads, layers and seeds)
    on the probe batch (band: min–max over layers), on white noise, and the white-input theory."""
    probe, noise, theory = (time_curves(df, k) for k in ("probe", "white_noise", "theory"))
    shown = [(c, lbl) for c, lbl in order if (probe["cell_id"] == c).any()]
    if not shown:
        return _empty("no probe data yet")
    colors = palette(order)
    with mpl.rc_context(STYLE):
        fig = _figure(0.7 + 1.6 * len(shown))
        axes = np.atleast_2d(fig.subplots(len(shown), 2, sharex=True, squeeze=False))
        everything = []
        for row, (cid, label) in enumerate(shown):
            first, last = _edge_steps(df[df["cell_id"] == cid])
            for col, (when, step) in enumerate((("initialisation", first), ("end", last))):
                ax = axes[row, col]
                for frame_, style in ((probe, "probe"), (noise, "noise"), (theory, "theory")):
                    v = frame_[(frame_["cell_id"] == cid) & (frame_["step"] == step)]
                    if v.empty:
                        continue
                    by_layer = v.groupby(["layer", "t"])["value"].mean().unstack("layer")
                    x = by_layer.index.to_numpy() + 1
                    mean = by_layer.mean(1).to_numpy()
                    everything.append(mean)
                    if style == "probe":
                        if by_layer.shape[1] > 1:
                            ax.fill_between(x, by_layer.min(1), by_layer.max(1), color=colors[cid], alpha=0.18, lw=0)
                            everything.append(by_layer.to_numpy().ravel())
                        ax.plot(x, mean, color=colors[cid], lw=1.5)
                    elif style == "noise":
                        ax.plot(x, mean, color=NOISE_COLOR, lw=1.1, ls="--")
                    else:
                        ax.plot(x, mean, color=THEORY_COLOR, lw=1.1, ls=":")
                ax.set_title(wrap(f"{label} · {when} (step {step})", 58), fontsize=7.5)
        _log_if_wide(axes.ravel(), np.concatenate(everything) if everything else np.array([]))
        fig.supxlabel("time step t", fontsize=8)
        fig.supylabel("‖x_t‖² (mean over heads, layers, seeds)", fontsize=8)
        handles = [mpl.lines.Line2D([], [], color="0.3", lw=1.5, label="probe batch (band: min–max over layers)"),
                   mpl.lines.Line2D([], [], color=NOISE_COLOR, lw=1.1, ls="--", label="white-noise input"),
                   mpl.lines.Line2D([], [], color=THEORY_COLOR, lw=1.1, ls=":", label="theory (white input, x₀ = 0)")]
        fig.legend(handles=handles, loc="outside upper center", ncols=3, frameon=False, fontsize=7)
    return fig


def spectrum_figure(df: pd.DataFrame, order: Sequence[tuple[str, str]]) -> Figure:
    """Rows: variants. Columns: |λ|, phase and the stationary theory norm per head against the training
    step: the median over modes (or heads) of all layers and seeds, with the 10–90% band."""
    spec = df[df["kind"] == "spectrum"]
    stat = df[(df["kind"] == "theory") & (df["quantity"] == "norm_sq_stationary")]
    shown = [(c, lbl) for c, lbl in order if (spec["cell_id"] == c).any()]
    if not shown:
        return _empty("no spectra recorded (input-dependent recurrences have none)")
    colors = palette(order)
    panels = (("abs", spec, "|λ|"), ("phase", spec, "phase of λ (rad)"),
              ("norm_sq_stationary", stat, "stationary theory E‖x_∞^h‖²"))
    with mpl.rc_context(STYLE):
        fig = _figure(0.6 + 1.45 * len(shown))
        axes = np.atleast_2d(fig.subplots(len(shown), 3, sharex=True, squeeze=False))
        for row, (cid, label) in enumerate(shown):
            for col, (quantity, source, title) in enumerate(panels):
                ax = axes[row, col]
                v = source[(source["cell_id"] == cid) & (source["quantity"] == quantity)]
                if v.empty:
                    ax.set_axis_off()
                    continue
                q = v.groupby("step")["value"].quantile([0.1, 0.5, 0.9]).unstack()
                ax.fill_between(q.index, q[0.1], q[0.9], color=colors[cid], alpha=0.2, lw=0)
                ax.plot(q.index, q[0.5], color=colors[cid], lw=1.5)
                _readable_limits(ax, q.to_numpy(float))
                if row == 0:
                    ax.set_title(title)
                if col == 0:
                    ax.set_ylabel(wrap(label, 26), fontsize=7)
        fig.supxlabel("training step (median over modes of all layers and seeds; band 10–90%)", fontsize=8)
    return fig


def _readable_limits(ax: Any, values: np.ndarray) -> None:
    """No offset notation, and a visible span for (near-)constant data such as ξ's stationary norm."""
    ax.ticklabel_format(axis="y", useOffset=False, style="plain")
    v = values[np.isfinite(values)]
    if v.size:
        lo, hi = float(v.min()), float(v.max())
        mid = 0.5 * (lo + hi)
        if hi - lo < 1e-3 * max(abs(mid), 1e-12):
            pad = 0.05 * abs(mid) if mid else 0.05
            ax.set_ylim(mid - pad, mid + pad)


def grad_figure(df: pd.DataFrame, order: Sequence[tuple[str, str]], ncols: int = 3) -> Figure:
    """A panel per variant: gradient norm per optimiser group against the step (mean over seeds)."""
    g = df[(df["kind"] == "grad") & (df["layer"] == -1)]
    shown = [(c, lbl) for c, lbl in order if (g["cell_id"] == c).any()]
    if not shown:
        return _empty("no gradient norms recorded")
    groups = list(dict.fromkeys(g["quantity"]))
    colors = dict(zip(groups, sns.color_palette("dark", len(groups)), strict=True))
    ncols = max(1, min(ncols, len(shown)))
    nrows = math.ceil(len(shown) / ncols)
    with mpl.rc_context(STYLE):
        fig = _figure(0.8 + 1.7 * nrows)
        axes = np.atleast_1d(fig.subplots(nrows, ncols, sharex=True, sharey=True, squeeze=False)).ravel()
        for ax, (cid, label) in zip(axes, shown, strict=False):
            v = g[g["cell_id"] == cid].groupby(["quantity", "step"])["value"].mean()
            for name in groups:
                if name in v.index.get_level_values(0):
                    s = v.loc[name]
                    ax.plot(s.index, s.to_numpy(), color=colors[name], lw=1.2, ls="--" if name == "total" else "-")
            ax.set_yscale("log")
            ax.set_title(wrap(label, max(18, 100 // ncols)), fontsize=7)
        for ax in axes[len(shown):]:
            ax.set_axis_off()
        fig.supxlabel("training step", fontsize=8)
        fig.supylabel("gradient norm (before clipping)", fontsize=8)
        handles = [mpl.lines.Line2D([], [], color=colors[n], lw=1.2, ls="--" if n == "total" else "-", label=n)
                   for n in groups]
        fig.legend(handles=handles, loc="outside upper center", ncols=len(groups), frameon=False, fontsize=7)
    return fig
