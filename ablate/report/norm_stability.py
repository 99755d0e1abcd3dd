"""The ``norm_stability`` report's presentation: its tables, its sentences and its figures.

Every function takes the frames of ``ablate.stats_norms`` (the analysis) and returns a display
frame (strings, one header per column), markdown text, or a matplotlib Figure; nothing here
computes a statistic, and the sentences use only the numbers the tables print, formatted by
``ablate.report.format``. Adding a section to the report touches its analysis function in
``ablate.stats_norms``, its table / text / figure here, and the notebook
``ablate/report/notebooks/norm_stability.py`` that shows them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import matplotlib as mpl
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from ablate import stats_norms as sn
from ablate.report import format as fmt
from ablate.report import plotting
from ablate.report.plotting import wrap

__all__ = [
    "MEASURE_WORDS",
    "check_table",
    "drift_table",
    "factor_table",
    "grad_figure",
    "header_lines",
    "norm_vs_step",
    "norm_vs_time",
    "provenance_lines",
    "ratio_table",
    "short_order",
    "spectrum_figure",
    "stability_table",
    "summary_text",
]

#: Each measure of ``stats_norms.MEASURES`` in words.
MEASURE_WORDS = {"training": "over training steps", "depth": "over layers", "seeds": "over seeds"}
THEORY_COLOR, NOISE_COLOR = "black", "0.45"

Order = Sequence[tuple[str, str]]


def _sig(x: Any, digits: int = 3) -> str:
    """Norms and CVs span orders of magnitude: significant digits, not decimals."""
    return fmt.num(x, digits, sig=True)


# --- the header -------------------------------------------------------------------------------------


def header_lines(res: Any, trials: pd.DataFrame, order: Order, key: str = "") -> list[str]:
    """The opening paragraphs: the study, its probes, whether every run saw one probe batch, and
    what the figures' compact labels name (``key`` of ``short_order``)."""
    probes = res.spec.probes
    done = int((trials.status == "complete").sum())
    lines = [f"**Study** `{res.study}` · spec hash `{res.spec_hash}` · {len(trials)} trials · {done} complete · "
             f"{len(order)} variants with probe data",
             f"Probes: every {probes.every} steps and at the end, on the first {probes.batch} validation examples "
             f"(eval mode); white-noise probe {'on' if probes.white_noise else 'off'} "
             f"({probes.white_noise_batch} sequences, seed {probes.white_noise_seed})."]
    batch = sn.probe_batch_check(res.metrics)
    if batch is not None:
        runs, same = batch
        lines.append(f"Probe batch identical across all {runs} runs: "
                     f"**{'yes' if same else 'NO — cells differ in their task; compare with care'}**.")
    if key:
        lines.append(f"Figures label variants by their levels of: **{key}**.")
    return lines


def short_order(order: Order) -> tuple[list[tuple[str, str]], str]:
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


# --- text -----------------------------------------------------------------------------------------------


def _measure_line(m: str, table: pd.DataFrame, ratios: pd.DataFrame, at: str) -> tuple[str | None, str | None, bool]:
    """The bullet of one measure, the most stable variant's label (None without ratios), and
    whether its lead is significant against every other variant."""
    words = MEASURE_WORDS[m].capitalize()
    r = ratios[ratios["measure"] == m]
    if r.empty:
        valid = table[np.isfinite(table[f"cv_{m}"].to_numpy(float))]
        line = None
        if len(valid) == 1:
            row = valid.iloc[0]
            line = (f"- **{words}**: only {row['variant']} can be measured "
                    f"(CV {fmt.with_ci(row[f'cv_{m}'], row[f'cv_{m}_low'], row[f'cv_{m}_high'], sig=True)}).")
        elif m == "seeds" and table["seeds"].max() < 2:
            line = f"- **{words}**: one seed per variant, no spread to measure."
        elif m == "depth" and table["layers"].max() < 2:
            line = f"- **{words}**: one layer, no spread to measure."
        return line, None, False
    ref_id, ref_label = r["reference_id"].iloc[0], r["reference"].iloc[0]
    ref_row = table[table["cell_id"] == ref_id].iloc[0]
    parts = [f"- **{words}**: {ref_label} varies least "
             f"(CV {fmt.with_ci(ref_row[f'cv_{m}'], ref_row[f'cv_{m}_low'], ref_row[f'cv_{m}_high'], sig=True)})"]
    others = r[r["cell_id"] != ref_id].sort_values("ratio")
    clear = bool((others["ratio_low"] > 1.0).all())
    for _, o in others.iterrows():
        trow = table[table["cell_id"] == o["cell_id"]].iloc[0]
        tested = bool(np.isfinite(o["ratio_low"]))
        said = fmt.verdict(bool(o["ratio_low"] > 1.0) if tested else None, at, few="too few units to test")
        ratio = fmt.with_ci(o["ratio"], o["ratio_low"], o["ratio_high"], sig=True, unit="×")
        parts.append(f"{o['variant']}: CV {_sig(trow[f'cv_{m}'])}, {ratio} as large ({said})")
    return "; ".join(parts) + ".", ref_label, clear


def summary_text(table: pd.DataFrame, ratios: pd.DataFrame, check: pd.DataFrame | None = None,
                 drift: pd.DataFrame | None = None, by_factor: pd.DataFrame | None = None,
                 confidence: float = 0.95) -> str:
    """Markdown stating which variant is more stable and by how much — numbers only from the frames
    the tables print (``stats_norms.stability``, ``stability_ratios``, ``theory_check``,
    ``spectrum_drift``, ``stability_by_factor``)."""
    if table.empty:
        return "No probe data yet."
    at = fmt.level(confidence)
    lines: list[str] = []
    best: dict[str, str] = {}
    clear: dict[str, bool] = {}  # the most stable variant's lead is outside every ratio's CI
    for m in sn.MEASURES:
        line, winner, sure = _measure_line(m, table, ratios, at)
        if line:
            lines.append(line)
        if winner is not None:
            best[m], clear[m] = winner, sure
    head = []
    if best:
        winners = set(best.values())
        if len(winners) == 1:
            (winner,) = winners
            n = len(best)
            sure = [MEASURE_WORDS[m] for m in best if clear[m]]
            unsure = [MEASURE_WORDS[m] for m in best if not clear[m]]
            text = (f"**{winner}** has the most stable state norm (lowest CV) on {'every' if n > 1 else 'the one'} "
                    f"measure available ({', '.join(MEASURE_WORDS[m] for m in best)})")
            if sure and unsure:
                text += (f"; {fmt.verdict(True, at)} {', '.join(sure)} (CI of every ratio above 1), "
                         f"but not {', '.join(unsure)}")
            elif sure:
                text += f"; {fmt.verdict(True, at)} on each (CI of every ratio above 1)"
            else:
                text += f", but no difference is {fmt.verdict(True, at)}"
            head.append(text + ".")
        else:
            head.append("No variant is the most stable on every measure: "
                        + "; ".join(f"{MEASURE_WORDS[m]}: {v}" for m, v in best.items()) + ".")
    if by_factor is not None and not by_factor.empty and len(table) > 2:
        for factor, group in by_factor.groupby("factor", sort=False):
            parts = []
            for m in sn.MEASURES:
                g = group[np.isfinite(group[f"cv_{m}"].to_numpy(float))]
                if len(g) < 2:
                    continue
                lo, hi = g.loc[g[f"cv_{m}"].idxmin()], g.loc[g[f"cv_{m}"].idxmax()]
                ratio = hi[f"cv_{m}"] / lo[f"cv_{m}"] if lo[f"cv_{m}"] > 0 else np.inf
                parts.append(f"{MEASURE_WORDS[m]} {lo['level']} {_sig(lo[f'cv_{m}'])} vs {hi['level']} "
                             f"{_sig(hi[f'cv_{m}'])} ({_sig(ratio)}×)")
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
        stat = [f"{r['variant']} {_sig(r['stationary'])}" for _, r in end.iterrows() if np.isfinite(r["stationary"])]
        if stat:
            lines.append("- **Stationary theory** E‖x_∞^h‖² per head at the end of training (1 by construction "
                         "for ξ): " + "; ".join(stat) + ".")
    if drift is not None and not drift.empty:
        parts = [f"{r['variant']} {_sig(r['abs_change_median'], 2)} (largest {_sig(r['abs_change_max'], 2)})"
                 for _, r in drift.iterrows()]
        lines.append("- **Spectrum drift**: median change of |λ| per mode from the first to the last probe: "
                     + "; ".join(parts) + ".")
    return "\n".join(head + [""] + lines)


def provenance_lines(res: Any, df: pd.DataFrame) -> list[str]:
    """The closing bullets: stores (credentials redacted by the results API), spec hash, curve rows."""
    kinds = ", ".join(sorted(set(df["kind"]))) if len(df) else fmt.DASH
    return [f"- stores: `{res.stores}`", f"- spec hash: `{res.spec_hash}`",
            f"- curve rows: {len(df)}; kinds: {kinds}", f"- numpy {np.__version__}"]


# --- tables -------------------------------------------------------------------------------------------


def stability_table(table: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """``stats_norms.stability`` for print: counts, mean norm, and each measure's CV [CI]."""
    out = pd.DataFrame({
        "variant": table["variant"],
        "seeds": table["seeds"],
        "layers": table["layers"],
        "probe steps": table["steps"],
        "mean ‖x‖²": table["mean_norm"].map(_sig),
    })
    for m, words in MEASURE_WORDS.items():
        out[f"CV {words} [{fmt.level(confidence)} CI]"] = [
            fmt.with_ci(v, lo, hi, sig=True)
            for v, lo, hi in zip(table[f"cv_{m}"], table[f"cv_{m}_low"], table[f"cv_{m}_high"], strict=True)
        ]
    return out


def ratio_table(ratios: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """``stats_norms.stability_ratios`` for print, without each reference's own 1×."""
    ratios = ratios[ratios["cell_id"] != ratios["reference_id"]]
    return pd.DataFrame({
        "measure": ratios["measure"].map(MEASURE_WORDS),
        "variant": ratios["variant"],
        "reference (most stable)": ratios["reference"],
        f"CV ratio [{fmt.level(confidence)} CI]": [
            fmt.with_ci(r, lo, hi, sig=True, unit="×")
            for r, lo, hi in zip(ratios["ratio"], ratios["ratio_low"], ratios["ratio_high"], strict=True)
        ],
    })


def factor_table(by_factor: pd.DataFrame) -> pd.DataFrame:
    """``stats_norms.stability_by_factor`` for print: each level's mean CV per measure."""
    out = by_factor[["factor", "level", "cells"]].copy()
    for m, words in MEASURE_WORDS.items():
        out[f"mean CV {words}"] = by_factor[f"cv_{m}"].map(_sig)
    return out


def check_table(check: pd.DataFrame) -> pd.DataFrame:
    """``stats_norms.theory_check`` for print."""
    return pd.DataFrame({
        "variant": check["variant"], "when": check["when"] + " (step " + check["step"].astype(str) + ")",
        "probe batch ‖x_L‖²": check["probe_last"].map(_sig), "white noise ‖x_L‖²": check["noise_last"].map(_sig),
        "theory ‖x_L‖²": check["theory_last"].map(_sig), "noise / theory": check["noise_over_theory"].map(_sig),
        "stationary theory": check["stationary"].map(_sig),
    })


def drift_table(drift: pd.DataFrame) -> pd.DataFrame:
    """``stats_norms.spectrum_drift`` for print."""
    return pd.DataFrame({
        "variant": drift["variant"], "steps": drift["first"].astype(str) + " → " + drift["last"].astype(str),
        "median |λ| (init → end)": [f"{_sig(a, 4)} → {_sig(b, 4)}"
                                    for a, b in zip(drift["abs_init"], drift["abs_end"], strict=True)],
        "median |Δ|λ||": drift["abs_change_median"].map(lambda x: _sig(x, 2)),
        "largest |Δ|λ||": drift["abs_change_max"].map(lambda x: _sig(x, 2)),
        "median |Δ phase|": drift["phase_change_median"].map(lambda x: _sig(x, 2)),
        "median relative Δ input scale": drift["scale_change_median"].map(lambda x: _sig(x, 2)),
    })


# --- figures ----------------------------------------------------------------------------------------------


def _legend(fig: Figure, order: Order, colors: dict[str, Any], extra: Sequence[Any] = (), title: str = "") -> None:
    handles = [mpl.lines.Line2D([], [], color=colors[c], lw=2, label=wrap(lbl, 40)) for c, lbl in order]
    longest = max((len(lbl) for _, lbl in order), default=0)
    ncols = 1 if longest > 45 else 2 if longest > 22 else 3
    fig.legend(handles=handles + list(extra), loc="outside upper center", ncols=ncols, frameon=False, fontsize=7,
               title=title or None, title_fontsize=7)


def _variant_colors(order: Order) -> dict[str, Any]:
    return plotting.palette([cid for cid, _ in order])


def norm_vs_step(norms: pd.DataFrame, order: Order, *, ylabel: str = "‖x‖² (mean over t, heads)",
                 ncols: int = 4, key: str = "") -> Figure:
    """A panel per layer (``stats_norms.layer_norms``): per variant each seed a thin line, the mean
    over seeds thick, the min–max band."""
    if norms.empty:
        return plotting.empty("no probe data yet")
    colors = _variant_colors(order)
    layers = sorted(norms["layer"].unique())
    ncols = max(1, min(ncols, len(layers)))
    nrows = math.ceil(len(layers) / ncols)
    with plotting.style():
        fig = plotting.figure(0.9 + 1.55 * nrows + 0.17 * math.ceil((len(order) + 3) / 2))
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
                    ax.fill_between(wide.index, wide.min(axis=1), wide.max(axis=1), color=colors[cid], alpha=0.15, lw=0)
                ax.plot(wide.index, wide.mean(axis=1), lw=1.6, color=colors[cid])
            ax.set_title(f"layer {layer}")
        for ax in axes[len(layers):]:
            ax.set_axis_off()
        plotting.log_axis_if_wide(axes[: len(layers)], norms["value"].to_numpy(float))
        fig.supxlabel("training step", fontsize=8)
        fig.supylabel(ylabel, fontsize=8)
        extra = [mpl.lines.Line2D([], [], color="0.3", lw=0.5, label="seed"),
                 mpl.lines.Line2D([], [], color="0.3", lw=1.6, label="mean over seeds"),
                 mpl.patches.Patch(color="0.3", alpha=0.15, label="min–max over seeds")]
        _legend(fig, order, colors, extra, key)
    return fig


def norm_vs_time(df: pd.DataFrame, order: Order) -> Figure:
    """Rows: variants; columns: first and last probe step. ‖x_t‖² (mean over heads, layers and seeds)
    on the probe batch (band: min–max over layers), on white noise, and the white-input theory."""
    probe, noise, theory = (sn.time_curves(df, k) for k in ("probe", "white_noise", "theory"))
    shown = [(c, lbl) for c, lbl in order if (probe["cell_id"] == c).any()]
    if not shown:
        return plotting.empty("no probe data yet")
    colors = _variant_colors(order)
    with plotting.style():
        fig = plotting.figure(0.7 + 1.6 * len(shown))
        axes = np.atleast_2d(fig.subplots(len(shown), 2, sharex=True, squeeze=False))
        everything = []
        for row, (cid, label) in enumerate(shown):
            first, last = sn.edge_steps(df[df["cell_id"] == cid])
            for col, (when, step) in enumerate((("initialisation", first), ("end", last))):
                ax = axes[row, col]
                for frame_, kind in ((probe, "probe"), (noise, "noise"), (theory, "theory")):
                    v = frame_[(frame_["cell_id"] == cid) & (frame_["step"] == step)]
                    if v.empty:
                        continue
                    by_layer = v.groupby(["layer", "t"])["value"].mean().unstack("layer")
                    x = by_layer.index.to_numpy() + 1
                    mean = by_layer.mean(axis=1).to_numpy()
                    everything.append(mean)
                    if kind == "probe":
                        if by_layer.shape[1] > 1:
                            ax.fill_between(x, by_layer.min(axis=1), by_layer.max(axis=1), color=colors[cid], alpha=0.18, lw=0)
                            everything.append(by_layer.to_numpy().ravel())
                        ax.plot(x, mean, color=colors[cid], lw=1.5)
                    elif kind == "noise":
                        ax.plot(x, mean, color=NOISE_COLOR, lw=1.1, ls="--")
                    else:
                        ax.plot(x, mean, color=THEORY_COLOR, lw=1.1, ls=":")
                ax.set_title(wrap(f"{label} · {when} (step {step})", 58), fontsize=7.5)
        plotting.log_axis_if_wide(axes.ravel(), np.concatenate(everything) if everything else np.array([]))
        fig.supxlabel("time step t", fontsize=8)
        fig.supylabel("‖x_t‖² (mean over heads, layers, seeds)", fontsize=8)
        handles = [mpl.lines.Line2D([], [], color="0.3", lw=1.5, label="probe batch (band: min–max over layers)"),
                   mpl.lines.Line2D([], [], color=NOISE_COLOR, lw=1.1, ls="--", label="white-noise input"),
                   mpl.lines.Line2D([], [], color=THEORY_COLOR, lw=1.1, ls=":", label="theory (white input, x₀ = 0)")]
        fig.legend(handles=handles, loc="outside upper center", ncols=3, frameon=False, fontsize=7)
    return fig


def spectrum_figure(df: pd.DataFrame, order: Order) -> Figure:
    """Rows: variants. Columns: |λ|, phase and the stationary theory norm per head against the training
    step: the median over modes (or heads) of all layers and seeds, with the 10–90% band."""
    spec = df[df["kind"] == "spectrum"]
    stat = df[(df["kind"] == "theory") & (df["quantity"] == "norm_sq_stationary")]
    shown = [(c, lbl) for c, lbl in order if (spec["cell_id"] == c).any()]
    if not shown:
        return plotting.empty("no spectra recorded (input-dependent recurrences have none)")
    colors = _variant_colors(order)
    panels = (("abs", spec, "|λ|"), ("phase", spec, "phase of λ (rad)"),
              ("norm_sq_stationary", stat, "stationary theory E‖x_∞^h‖²"))
    with plotting.style():
        fig = plotting.figure(0.6 + 1.45 * len(shown))
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
                plotting.readable_limits(ax, q.to_numpy(float))
                if row == 0:
                    ax.set_title(title)
                if col == 0:
                    ax.set_ylabel(wrap(label, 26), fontsize=7)
        fig.supxlabel("training step (median over modes of all layers and seeds; band 10–90%)", fontsize=8)
    return fig


def grad_figure(df: pd.DataFrame, order: Order, ncols: int = 3) -> Figure:
    """A panel per variant: gradient norm per optimiser group against the step (mean over seeds)."""
    g = df[(df["kind"] == "grad") & (df["layer"].isna() | (df["layer"] == -1))]  # group rows: no layer (-1 before)
    shown = [(c, lbl) for c, lbl in order if (g["cell_id"] == c).any()]
    if not shown:
        return plotting.empty("no gradient norms recorded")
    groups = list(dict.fromkeys(g["quantity"]))
    colors = plotting.palette(groups, "dark")
    ncols = max(1, min(ncols, len(shown)))
    nrows = math.ceil(len(shown) / ncols)
    with plotting.style():
        fig = plotting.figure(0.8 + 1.7 * nrows)
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
