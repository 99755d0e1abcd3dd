"""The ``norm_stability`` report's figures: norms against the training step and the time step,
the white-noise check, spectra, factor interactions and gradient norms.

Every function takes the frames of ``ablate.stats.norms`` (or the tidy curve frame) and the
report's ``plotting.Channels`` and returns a matplotlib Figure; nothing here computes a
statistic. The tables and sentences of the same report are ``ablate.report.norm_stability``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import matplotlib as mpl
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from ablate import stats
from ablate.report import format as fmt
from ablate.report import plotting
from ablate.report.norm_stability import COLUMN_WORDS, Order
from ablate.report.plotting import Channels, wrap
from ablate.stats import norms as sn

__all__ = [
    "grad_figure",
    "interaction_figure",
    "norm_vs_step",
    "norm_vs_time",
    "spectrum_figure",
    "theory_ratio",
]

THEORY_COLOR, NOISE_COLOR = "black", "0.45"

#: Mathematical notation in figures, as matplotlib's mathtext (rendered offline, in the reports' font).
NORM = r"$\Vert x\Vert^2$"
NORM_T = r"$\Vert x_t\Vert^2$"
STATIONARY = r"$\mathrm{E}\,\Vert x_\infty^h\Vert^2$"
LAMBDA = r"$|\lambda|$"


def _channels(order: Order, channels: Channels | None) -> Channels:
    """The report's mapping, or (a figure built alone) one colour per variant."""
    if channels is not None:
        return channels
    return Channels.from_factors(["variant"], {"variant": [lbl for _, lbl in order]},
                                 {cid: {"variant": lbl} for cid, lbl in order})


def _legend(fig: Figure, order: Order, channels: Channels, extra: Sequence[Any] = ()) -> None:
    """The channels' legend (factor and levels); variants by name when the study has no factors."""
    if channels.factors:
        channels.legend(fig, extra=extra)
        return
    handles = [mpl.lines.Line2D([], [], color="black", lw=2, label=wrap(lbl, 40)) for _, lbl in order]
    fig.legend(handles=handles + list(extra), loc="outside upper center", ncols=3, frameon=False, fontsize=7)


def norm_vs_step(norms: pd.DataFrame, order: Order, *, ylabel: str = f"{NORM} (mean over t, heads)",
                 ncols: int = 4, key: str = "", channels: Channels | None = None) -> Figure:
    """A panel per layer (``stats.norms.layer_norms``) — and per facet level when the study has a
    third factor — with every variant in its colour and line style: each seed a thin line, the
    mean over seeds thick, the min–max band. A log axis when the norms span more than 5×."""
    if norms.empty:
        return plotting.empty("no probe data yet")
    channels = _channels(order, channels)
    layers = sorted(norms["layer"].unique())
    facets = channels.facets([c for c, _ in order])
    panels = [(f, layer) for f in facets for layer in layers]
    ncols = max(1, min(ncols, len(layers)))
    nrows = math.ceil(len(panels) / ncols)
    with plotting.style():
        fig = plotting.figure(1.3 + 1.6 * nrows)
        axes = np.atleast_1d(fig.subplots(nrows, ncols, sharex=True, sharey=True, squeeze=False)).ravel()
        for ax, (facet, layer) in zip(axes, panels, strict=False):
            sub = norms[norms["layer"] == layer]
            for cid, _ in order:
                if channels.facet(cid) != facet:
                    continue
                v = sub[sub["cell_id"] == cid]
                if v.empty:
                    continue
                look = channels.style(cid)
                wide = v.pivot_table(index="step", columns="seed", values="value").sort_index()
                for seed in wide.columns:
                    ax.plot(wide.index, wide[seed], lw=0.5, alpha=0.4, color=look["color"], ls=look["linestyle"], gid=look["gid"])
                if wide.shape[1] > 1:
                    ax.fill_between(wide.index, wide.min(axis=1), wide.max(axis=1), color=look["color"], alpha=0.12,
                                    lw=0, gid=look["gid"])
                ax.plot(wide.index, wide.mean(axis=1), lw=1.7, color=look["color"], ls=look["linestyle"], gid=look["gid"])
            # The layer column is nullable (float in pandas): name it as the integer it is.
            name = f"layer {int(layer)}" if layer == layer else ""
            ax.set_title(wrap(" · ".join(filter(None, [facet, name])), max(18, 100 // ncols)), fontsize=7.5)
        for ax in axes[len(panels):]:
            ax.set_axis_off()
        plotting.log_axis_if_wide(axes[: len(panels)], norms["value"].to_numpy(float))
        plotting.xlabel(axes, len(panels), ncols, "training step")
        fig.supylabel(ylabel, fontsize=8)
        extra = [mpl.lines.Line2D([], [], color="0.3", lw=0.5, label="seed"),
                 mpl.lines.Line2D([], [], color="0.3", lw=1.7, label="mean over seeds"),
                 mpl.patches.Patch(color="0.3", alpha=0.15, label="min–max over seeds")]
        _legend(fig, order, channels, extra)
    return fig


def norm_vs_time(df: pd.DataFrame, order: Order, channels: Channels | None = None) -> Figure:
    """Rows: variants; columns: first and last probe step. ‖x_t‖² (mean over heads, layers and seeds)
    on the probe batch in the variant's colour (band: min–max over layers), on white noise
    (dashed grey), and the white-input theory (dotted black)."""
    probe, noise, theory = (sn.time_curves(df, k) for k in ("probe", "white_noise", "theory"))
    shown = [(c, lbl) for c, lbl in order if (probe["cell_id"] == c).any()]
    if not shown:
        return plotting.empty("no probe data yet")
    channels = _channels(order, channels)
    with plotting.style():
        fig = plotting.figure(0.9 + 1.6 * len(shown))
        axes = np.atleast_2d(fig.subplots(len(shown), 2, sharex=True, squeeze=False))
        everything = []
        for row, (cid, label) in enumerate(shown):
            look = channels.style(cid)
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
                            ax.fill_between(x, by_layer.min(axis=1), by_layer.max(axis=1), color=look["color"],
                                            alpha=0.18, lw=0, gid=look["gid"])
                            everything.append(by_layer.to_numpy().ravel())
                        ax.plot(x, mean, color=look["color"], ls=look["linestyle"], lw=1.5, gid=look["gid"])
                    elif kind == "noise":
                        ax.plot(x, mean, color=NOISE_COLOR, lw=1.1, ls="--")
                    else:
                        ax.plot(x, mean, color=THEORY_COLOR, lw=1.1, ls=":")
                ax.set_title(wrap(f"{label} · {when} (step {step})", 58), fontsize=7.5)
        plotting.log_axis_if_wide(axes.ravel(), np.concatenate(everything) if everything else np.array([]))
        plotting.xlabel(axes.ravel(), axes.size, 2, "time step t")
        fig.supylabel(f"{NORM_T} (mean over heads, layers, seeds)", fontsize=8)
        extra = [mpl.lines.Line2D([], [], color="0.3", lw=1.5, label="probe batch (band: min–max over layers)"),
                 mpl.lines.Line2D([], [], color=NOISE_COLOR, lw=1.1, ls="--", label="white-noise input"),
                 mpl.lines.Line2D([], [], color=THEORY_COLOR, lw=1.1, ls=":", label=r"theory (white input, $x_0 = 0$)")]
        _legend(fig, order, channels, extra)
    return fig


def theory_ratio(df: pd.DataFrame, order: Order, channels: Channels | None = None) -> Figure:
    """The white-noise norm divided by the white-input theory, against the time step t, at the first
    and the last probe step: every variant on one panel in its colour and line style (1 = the theory
    holds exactly). A log axis when the ratios span more than 5×."""
    noise, theory = sn.time_curves(df, "white_noise"), sn.time_curves(df, "theory")
    if noise.empty or theory.empty:
        return plotting.empty("no white-noise probe or no theory recorded")
    channels = _channels(order, channels)
    keys = ["cell_id", "layer", "step", "t", "seed"]
    both = noise.merge(theory, on=keys, suffixes=("_noise", "_theory"))
    both = both[both["value_theory"] > 0]
    if both.empty:
        return plotting.empty("no theory to compare with")
    both["ratio"] = both["value_noise"] / both["value_theory"]
    with plotting.style():
        fig = plotting.figure(3.0)
        axes = np.atleast_1d(fig.subplots(1, 2, sharey=True, squeeze=False)).ravel()
        for ax, when in zip(axes, ("initialisation", "end"), strict=True):
            for cid, _ in order:
                v = both[both["cell_id"] == cid]
                if v.empty:
                    continue
                first, last = sn.edge_steps(df[df["cell_id"] == cid])
                v = v[v["step"] == (first if when == "initialisation" else last)]
                curve = v.groupby("t")["ratio"].mean()
                look = channels.style(cid)
                ax.plot(curve.index + 1, curve.to_numpy(), color=look["color"], ls=look["linestyle"], lw=1.5, gid=look["gid"])
            ax.axhline(1.0, color=THEORY_COLOR, lw=0.9, ls=":")
            ax.set_title(f"{when} (first probe step)" if when == "initialisation" else "end (last probe step)")
        plotting.log_axis_if_wide(axes, both["ratio"].to_numpy(float))
        plotting.xlabel(axes, 2, 2, "time step t")
        fig.supylabel(f"white-noise {NORM_T} / theory", fontsize=8)
        extra = [mpl.lines.Line2D([], [], color=THEORY_COLOR, lw=0.9, ls=":", label="theory holds (ratio 1)")]
        _legend(fig, order, channels, extra)
    return fig


def spectrum_figure(df: pd.DataFrame, order: Order, channels: Channels | None = None) -> Figure:
    """Rows: variants. Columns: |λ|, phase and the stationary theory norm per head against the training
    step: the median over modes (or heads) of all layers and seeds, with the 10–90% band, in the
    variant's colour and line style."""
    spec = df[df["kind"] == "spectrum"]
    stat = df[(df["kind"] == "theory") & (df["quantity"] == "norm_sq_stationary")]
    shown = [(c, lbl) for c, lbl in order if (spec["cell_id"] == c).any()]
    if not shown:
        return plotting.empty("no spectra recorded (input-dependent recurrences have none)")
    channels = _channels(order, channels)
    panels = (("abs", spec, LAMBDA), ("phase", spec, r"phase of $\lambda$ (rad)"),
              ("norm_sq_stationary", stat, f"stationary theory {STATIONARY}"))
    with plotting.style():
        fig = plotting.figure(0.6 + 1.45 * len(shown))
        axes = np.atleast_2d(fig.subplots(len(shown), 3, sharex=True, squeeze=False))
        for row, (cid, label) in enumerate(shown):
            look = channels.style(cid)
            for col, (quantity, source, title) in enumerate(panels):
                ax = axes[row, col]
                v = source[(source["cell_id"] == cid) & (source["quantity"] == quantity)]
                if v.empty:
                    ax.set_axis_off()
                    continue
                q = v.groupby("step")["value"].quantile([0.1, 0.5, 0.9]).unstack()
                ax.fill_between(q.index, q[0.1], q[0.9], color=look["color"], alpha=0.2, lw=0, gid=look["gid"])
                ax.plot(q.index, q[0.5], color=look["color"], ls=look["linestyle"], lw=1.5, gid=look["gid"])
                plotting.readable_limits(ax, q.to_numpy(float))
                if row == 0:
                    ax.set_title(title)
                if col == 0:
                    ax.set_ylabel(wrap(label, 26), fontsize=7)
        fig.supxlabel("training step (median over modes of all layers and seeds; band 10–90%)", fontsize=8)
    return fig


def interaction_figure(seeds: pd.DataFrame, f1: str, f2: str, channels: Channels | None = None,
                       confidence: float = 0.95, measures: Sequence[str] = sn.MEASURES) -> Figure:
    """A panel per measure: its geometric marginal means (``stats.norms.per_seed``'s log values, as
    the ANOVA fits them) over ``f2``'s levels on the x axis, one line per level of ``f1`` in that
    level's channel, with CIs, on log axes. Parallel lines mean no interaction."""
    shown = [m for m in measures if np.isfinite(seeds[sn.COLUMN[m]].to_numpy(float)).any()]
    tables = {m: stats.interaction_table(seeds, sn.COLUMN[m], f1, f2, confidence) for m in shown}
    tables = {m: t for m, t in tables.items() if not t.empty and t["mean"].notna().any()}
    with plotting.style():
        ncols = max(1, min(2, len(tables)))
        nrows = max(1, math.ceil(len(tables) / ncols))
        fig = plotting.figure(0.9 + 2.1 * nrows)
        if not tables:
            return plotting.no_data(fig, "no per-seed values yet")
        channels = channels or Channels.from_trials(seeds, [f1, f2])
        axes = np.atleast_1d(fig.subplots(nrows, ncols, squeeze=False)).ravel()
        for ax, (m, table) in zip(axes, tables.items(), strict=False):
            lines, xs = list(dict.fromkeys(table[f1])), list(dict.fromkeys(table[f2]))
            offsets = np.linspace(-0.08, 0.08, len(lines)) if len(lines) > 1 else [0.0]
            pos = {lv: i for i, lv in enumerate(xs)}
            for off, lv in zip(offsets, lines, strict=True):
                look = channels.level_look(f1, lv)
                sub = table[table[f1] == lv]
                x = np.array([pos[v] for v in sub[f2]], dtype=float) + off
                mean, low, high = (np.exp(sub[c].to_numpy(float)) for c in ("mean", "ci_low", "ci_high"))
                err = [np.nan_to_num(mean - low), np.nan_to_num(high - mean)]
                ax.errorbar(x, mean, yerr=err, fmt=look["marker"], ls=look["linestyle"], ms=4.5, lw=1.3, capsize=3,
                            color=look["color"], mec="black", mew=0.5, label=wrap(lv, 22), gid=look["gid"])
            ax.set_yscale("log")
            ax.set_xticks(range(len(xs)), [wrap(lv, max(8, int(40 / max(1, len(xs))))) for lv in xs])
            ax.set_xlim(-0.5, len(xs) - 0.5)
            ax.set_title(COLUMN_WORDS[m], fontsize=8)
            ax.grid(axis="x", visible=False)
        for ax in axes[len(tables):]:
            ax.set_axis_off()
        names = channels.factors or (f1, f2)
        fig.supxlabel(wrap(plotting.factor_name(f2, names), 60), fontsize=8)
        fig.supylabel(f"geometric marginal mean ± {fmt.level(confidence)} CI", fontsize=8)
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, title=wrap(plotting.factor_name(f1, names), 40), loc="outside upper center",
                   ncols=min(len(labels), 6), frameon=False, fontsize=7, title_fontsize=7.5)
    return fig


#: Optimiser groups are drawn in greys and line styles: colours belong to the factor levels.
GROUP_STYLE = (("0.1", "-"), ("0.45", "-"), ("0.65", "-."), ("0.1", "--"))


def grad_figure(df: pd.DataFrame, order: Order, ncols: int = 3) -> Figure:
    """A panel per variant: gradient norm per optimiser group against the step (mean over seeds), each
    group in its grey and line style (the total dashed)."""
    g = df[(df["kind"] == "grad") & (df["layer"].isna() | (df["layer"] == -1))]  # group rows: no layer (-1 before)
    shown = [(c, lbl) for c, lbl in order if (g["cell_id"] == c).any()]
    if not shown:
        return plotting.empty("no gradient norms recorded")
    groups = list(dict.fromkeys(g["quantity"]))
    others = [n for n in groups if n != "total"]
    look = {n: GROUP_STYLE[i % 3] for i, n in enumerate(others)}
    look["total"] = GROUP_STYLE[3]
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
                    color, ls = look[name]
                    ax.plot(s.index, s.to_numpy(), color=color, lw=1.2, ls=ls)
            ax.set_yscale("log")
            ax.set_title(wrap(label, max(18, 100 // ncols)), fontsize=7)
        for ax in axes[len(shown):]:
            ax.set_axis_off()
        plotting.xlabel(axes, len(shown), ncols, "training step")
        fig.supylabel("gradient norm (before clipping)", fontsize=8)
        handles = [mpl.lines.Line2D([], [], color=look[n][0], lw=1.2, ls=look[n][1], label=n) for n in groups]
        fig.legend(handles=handles, title="optimiser group", loc="outside upper center", ncols=len(groups),
                   frameon=False, fontsize=7, title_fontsize=7.5)
    return fig
