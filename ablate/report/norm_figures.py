"""The ``norm_stability`` report's figures: norms against the training step and the time step,
the white-noise check, spectra, factor interactions and gradient norms.

Every function takes the frames of ``ablate.stats.norms`` (or the tidy curve frame) and the
report's ``plotting.Channels`` and returns a matplotlib Figure; nothing here computes a
statistic. The tables and sentences of the same report are ``ablate.report.norm_tables``.
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
from ablate.report.norm_tables import COLUMN_WORDS, Order
from ablate.report.plotting import Channels, wrap
from ablate.stats import norms as sn

__all__ = [
    "flagged_runs",
    "grad_figure",
    "interaction_figure",
    "norm_vs_step",
    "norm_vs_time",
    "spectrum_figure",
    "theory_ratio",
]

THEORY_COLOR = "black"
#: The white-noise curve: thin, solid, with open circles (no dash pattern: those mean variants).
NOISE = {"lw": 0.7, "ls": "-", "marker": "o", "ms": 2.5, "mfc": "white", "mew": 0.6}

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
    fig.legend(handles=handles, loc="outside upper center", ncols=plotting.legend_columns([h.get_label() for h in handles]),
               frameon=False, fontsize=7)
    if extra:
        fig.legend(handles=list(extra), loc="outside lower center",
                   ncols=plotting.legend_columns([h.get_label() for h in extra]), frameon=False, fontsize=7)


#: A panel of more variants than this draws each variant's mean only: a dozen variants' seeds and
#: bands on one panel hide the means they belong to.
BUSY = 4
#: A panel of at most this many variants shades its band (min–max over layers, or 10–90% over modes).
BANDS = 3
FLAG = {"marker": "X", "s": 34, "edgecolors": "black", "linewidths": 0.6, "zorder": 4}


def _facet_rows(order: Order, channels: Channels) -> list[tuple[str, list[tuple[str, str]]]]:
    """The variants of each facet (the levels of the factors past colour and line style), facets in
    their levels' order; one row holding every variant when the study has no third factor."""
    facets = channels.facets([c for c, _ in order])
    rows = [(f, [(c, lbl) for c, lbl in order if channels.facet(c) == f]) for f in facets]
    return [(f, m) for f, m in rows if m] or [("", list(order))]


def flagged_runs(*frames: pd.DataFrame | None) -> set[tuple[str, Any]]:
    """The (cell, seed) runs to mark as diverged: those any frame flags in an optional boolean
    ``nonfinite`` or ``flagged`` column (``stats.norms.per_seed``), and those with a non-finite
    ``value``."""
    out: set[tuple[str, Any]] = set()
    for frame in frames:
        if frame is None or frame.empty or not {"cell_id", "seed"} <= set(frame.columns):
            continue
        bad = pd.Series(False, index=frame.index)
        for column in ("nonfinite", "flagged"):  # stats.norms.per_seed: flagged = any flag (late growth too)
            if column in frame.columns:
                bad |= frame[column].fillna(False).astype(bool)
        if "value" in frame.columns:
            bad |= ~np.isfinite(frame["value"].to_numpy(float))
        out |= set(frame.loc[bad, ["cell_id", "seed"]].itertuples(index=False, name=None))
    return out


def _flag_handle() -> Any:
    return mpl.lines.Line2D([], [], ls="", marker="X", ms=6, mfc="0.5", mec="black", mew=0.6,
                            label="run flagged diverged / non-finite (its last finite value)")


def _mark_flagged(ax: Any, wide: pd.DataFrame, seeds: Sequence[Any], look: dict[str, Any]) -> None:
    """Each flagged seed's curve, ending in an × at its last finite value."""
    for seed in seeds:
        if seed not in wide.columns:
            continue
        curve = wide[seed].dropna()
        if curve.empty:
            continue
        ax.plot(curve.index, curve.to_numpy(), lw=0.7, color=look["color"], ls=look["linestyle"], gid=look["gid"])
        ax.scatter([curve.index[-1]], [curve.iloc[-1]], color=look["color"], gid=look["gid"], **FLAG)


def _grid(layers: Sequence[Sequence[Any]], ncols: int) -> list[tuple[int, int]]:
    """Where the panels of a facet × column grid go: a row per facet, its columns in order; one
    facet's columns wrapped at ``ncols``, as are rows longer than ``ncols`` + 2."""
    if len(layers) == 1 or max(len(x) for x in layers) > ncols + 2:
        return plotting.wrapped_places(sum(len(x) for x in layers), ncols)
    return [(r, c) for r, cols in enumerate(layers) for c in range(len(cols))]


def _titles(axes: Sequence[Any], names: Sequence[str], ncols: int) -> None:
    """Each panel's title, wrapped to its column's width."""
    for ax, name in zip(axes, names, strict=True):
        ax.set_title(wrap(name, max(18, 100 // max(1, ncols))), fontsize=7.5)


def norm_vs_step(norms: pd.DataFrame, order: Order, *, ylabel: str = f"{NORM} (mean over t, heads)",
                 ncols: int = 4, key: str = "", channels: Channels | None = None,
                 flags: pd.DataFrame | None = None) -> Figure:
    """Small multiples of ``stats.norms.layer_norms``: a row of panels per facet (the levels of the
    factors past colour and line style), a panel per layer that facet's variants have, every variant
    in its colour and line style with one legend for all. Up to ``BUSY`` variants a panel: each seed
    a thin line, the mean over seeds thick (at the steps every seed reached), the min–max band;
    beyond, the mean alone. Runs flagged diverged / non-finite (a ``nonfinite`` column of ``norms``
    or of the per-seed frame ``flags``, or a non-finite value) end in an ×. A log axis when the norms span more than 5×."""
    if norms.empty:
        return plotting.empty("no probe data yet")
    channels = _channels(order, channels)
    flagged = flagged_runs(norms, flags)
    norms = norms.assign(value=norms["value"].where(np.isfinite(norms["value"].to_numpy(float))))
    rows = _facet_rows(order, channels)
    layers = [sorted(norms.loc[norms["cell_id"].isin([c for c, _ in m]), "layer"].dropna().unique()) for _, m in rows]
    keep = [i for i, x in enumerate(layers) if len(x)]
    rows, layers = [rows[i] for i in keep], [layers[i] for i in keep]
    if not rows:
        return plotting.empty("no probe data yet")
    panels = [(facet, members, layer) for (facet, members), ls in zip(rows, layers, strict=True) for layer in ls]
    places = _grid(layers, ncols)
    nrows = 1 + max(r for r, _ in places)
    busy = max(len(m) for _, m in rows) > BUSY
    with plotting.style():
        fig = plotting.figure(1.4 + 1.6 * nrows)
        axes = plotting.panel_grid(fig, places)
        for ax, (_, members, layer) in zip(axes, panels, strict=True):
            sub = norms[norms["layer"] == layer]
            for cid, _ in members:
                v = sub[sub["cell_id"] == cid]
                if v.empty:
                    continue
                look = channels.style(cid)
                wide = v.pivot_table(index="step", columns="seed", values="value").sort_index()
                if not busy:
                    for seed in wide.columns:
                        ax.plot(wide.index, wide[seed], lw=0.5, alpha=0.4, color=look["color"], ls=look["linestyle"],
                                gid=look["gid"])
                    if wide.shape[1] > 1:
                        ax.fill_between(wide.index, wide.min(axis=1), wide.max(axis=1), color=look["color"],
                                        alpha=0.12, lw=0, gid=look["gid"])
                # The mean only where every seed has a value: past the first seed's early stop, or at one
                # seed's own end-of-run probe, a mean of the rest jumped and spiked.
                shared = wide.dropna(how="any")
                ax.plot(shared.index, shared.mean(axis=1), lw=1.7 if not busy else 1.3, color=look["color"],
                        ls=look["linestyle"], gid=look["gid"])
                _mark_flagged(ax, wide, [s for c, s in flagged if c == cid], look)
        # The layer column is nullable (float in pandas): name it as the integer it is.
        _titles(axes, [" · ".join(filter(None, [facet, f"layer {int(layer)}"])) for facet, _, layer in panels],
                1 + max(c for _, c in places))
        plotting.log_axis_if_wide(axes, norms["value"].to_numpy(float))
        for i in plotting.bottom_row(places):
            axes[i].set_xlabel("training step", fontsize=8)
            axes[i].tick_params(labelbottom=True)
        plotting.supylabel(fig, ylabel)
        if busy:
            extra = [mpl.lines.Line2D([], [], color="0.3", lw=1.3, label="mean over seeds, where every seed "
                                      f"reached (seeds and bands left out: over {BUSY} variants a panel)")]
        else:
            extra = [mpl.lines.Line2D([], [], color="0.3", lw=0.5, label="seed"),
                     mpl.lines.Line2D([], [], color="0.3", lw=1.7, label="mean over seeds, where every seed reached"),
                     mpl.patches.Patch(color="0.3", alpha=0.15, label="min–max over seeds")]
        if flagged:
            extra.append(_flag_handle())
        _legend(fig, order, channels, extra)
    return fig


def _edge(df: pd.DataFrame, cid: str) -> tuple[int, int]:
    return sn.edge_steps(df[df["cell_id"] == cid])


def norm_vs_time(df: pd.DataFrame, order: Order, channels: Channels | None = None) -> Figure:
    """Small multiples: a row per facet, a panel at the first and one at the last probe step.
    ‖x_t‖² (mean over heads, layers and seeds) on the probe batch in each variant's colour and line
    style (band: min–max over layers, on panels of up to ``BANDS`` variants), on white noise (a thin
    line with open circles) and the white-input theory (a broad pale line), both in the variant's
    colour and never in a dash pattern (those mean variants), one legend for all."""
    probe, noise, theory = (sn.time_curves(df, k) for k in ("probe", "white_noise", "theory"))
    shown = [(c, lbl) for c, lbl in order if (probe["cell_id"] == c).any()]
    if not shown:
        return plotting.empty("no probe data yet")
    channels = _channels(order, channels)
    rows = _facet_rows(shown, channels)
    edges = {cid: _edge(df, cid) for cid, _ in shown}
    same = len(set(edges.values())) == 1
    with plotting.style():
        fig = plotting.figure(1.2 + 1.9 * len(rows))
        places = [(r, col) for r in range(len(rows)) for col in range(2)]
        axes = plotting.panel_grid(fig, places)
        everything, names = [], []
        for r, (facet, members) in enumerate(rows):
            for col, when in enumerate(("initialisation", "end")):
                ax = axes[2 * r + col]
                step = next(iter(edges.values()))[col] if same else None
                names.append(" · ".join(filter(None, [facet, f"{when} (step {step})" if same else
                                                      f"{when} ({'first' if col == 0 else 'last'} probe step)"])))
                for cid, _ in members:
                    look, at = channels.style(cid), edges[cid][col]
                    for frame_, kind in ((probe, "probe"), (noise, "noise"), (theory, "theory")):
                        v = frame_[(frame_["cell_id"] == cid) & (frame_["step"] == at)]
                        if v.empty:
                            continue
                        by_layer = v.groupby(["layer", "t"])["value"].mean().unstack("layer")
                        x = by_layer.index.to_numpy() + 1
                        mean = by_layer.mean(axis=1).to_numpy()
                        everything.append(mean)
                        if kind == "probe":
                            if by_layer.shape[1] > 1 and len(members) <= BANDS:
                                ax.fill_between(x, by_layer.min(axis=1), by_layer.max(axis=1), color=look["color"],
                                                alpha=0.18, lw=0, gid=look["gid"])
                                everything.append(by_layer.to_numpy().ravel())
                            ax.plot(x, mean, color=look["color"], ls=look["linestyle"], lw=1.5, gid=look["gid"])
                        elif kind == "noise":  # in the variant's colour: several variants share a panel
                            ax.plot(x, mean, color=look["color"], **NOISE, markevery=max(1, len(x) // 10), gid=look["gid"])
                        else:
                            ax.plot(x, mean, color=look["color"], **plotting.REFERENCE, gid=look["gid"])
        _titles(axes, names, 2)
        plotting.log_axis_if_wide(axes, np.concatenate(everything) if everything else np.array([]))
        for i in plotting.bottom_row(places):
            axes[i].set_xlabel("time step t", fontsize=8)
            axes[i].tick_params(labelbottom=True)
        plotting.supylabel(fig, f"{NORM_T} (mean over heads, layers, seeds)")
        band = " (band: min–max over layers)" if max(len(m) for _, m in rows) <= BANDS else ""
        extra = [mpl.lines.Line2D([], [], color="0.3", lw=1.5, label=f"probe batch{band}"),
                 mpl.lines.Line2D([], [], color="0.3", **NOISE, label="white-noise input"),
                 mpl.lines.Line2D([], [], color="0.3", **plotting.REFERENCE, label=r"theory (white input, $x_0 = 0$)")]
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
            ax.axhline(1.0, color=THEORY_COLOR, **plotting.REFERENCE)
            ax.set_title(f"{when} (first probe step)" if when == "initialisation" else "end (last probe step)")
        plotting.log_axis_if_wide(axes, both["ratio"].to_numpy(float))
        plotting.xlabel(axes, 2, 2, "time step t")
        plotting.supylabel(fig, f"white-noise {NORM_T} / theory")
        extra = [mpl.lines.Line2D([], [], color=THEORY_COLOR, **plotting.REFERENCE, label="theory holds (ratio 1)")]
        _legend(fig, order, channels, extra)
    return fig


def spectrum_figure(df: pd.DataFrame, order: Order, channels: Channels | None = None) -> Figure:
    """Small multiples: a row per facet; columns |λ|, phase and the stationary theory norm per head
    against the training step. Each variant's median over modes (or heads) of all layers and seeds
    in its colour and line style, with the 10–90% band on panels of up to ``BANDS`` variants."""
    spec = df[df["kind"] == "spectrum"]
    stat = df[(df["kind"] == "theory") & (df["quantity"] == "norm_sq_stationary")]
    shown = [(c, lbl) for c, lbl in order if (spec["cell_id"] == c).any()]
    if not shown:
        return plotting.empty("no spectra recorded (input-dependent recurrences have none)")
    channels = _channels(order, channels)
    rows = _facet_rows(shown, channels)
    cols = [(q, src, title) for q, src, title in (("abs", spec, LAMBDA), ("phase", spec, r"phase of $\lambda$ (rad)"),
                                                  ("norm_sq_stationary", stat, f"stationary theory {STATIONARY}"))
            if (src["quantity"] == q).any()]
    places = [(r, c) for r in range(len(rows)) for c in range(len(cols))]
    banded = max(len(m) for _, m in rows) <= BANDS
    with plotting.style():
        fig = plotting.figure(1.2 + 1.7 * len(rows))
        axes = plotting.panel_grid(fig, places, sharey=False)
        names = []
        for r, (facet, members) in enumerate(rows):
            for c, (quantity, source, title) in enumerate(cols):
                ax = axes[r * len(cols) + c]
                names.append(" · ".join(filter(None, [facet, title])))
                seen = []
                for cid, _ in members:
                    v = source[(source["cell_id"] == cid) & (source["quantity"] == quantity)]
                    if v.empty:
                        continue
                    look = channels.style(cid)
                    q = v.groupby("step")["value"].quantile([0.1, 0.5, 0.9]).unstack()
                    if banded:
                        ax.fill_between(q.index, q[0.1], q[0.9], color=look["color"], alpha=0.2, lw=0, gid=look["gid"])
                    ax.plot(q.index, q[0.5], color=look["color"], ls=look["linestyle"], lw=1.4, gid=look["gid"])
                    seen.append(q.to_numpy(float).ravel() if banded else q[0.5].to_numpy(float))
                plotting.readable_limits(ax, np.concatenate(seen) if seen else np.array([]))
        _titles(axes, names, len(cols))
        for i in plotting.bottom_row(places):
            axes[i].set_xlabel("training step", fontsize=8)
            axes[i].tick_params(labelbottom=True)
        what = "median over modes of all layers and seeds" + ("; band 10–90%" if banded else "")
        _legend(fig, order, channels, [mpl.lines.Line2D([], [], color="0.3", lw=1.4, label=what)])
    return fig


def interaction_figure(seeds: pd.DataFrame, f1: str, f2: str, channels: Channels | None = None,
                       confidence: float = 0.95, measures: Sequence[str] = sn.OWN_MEASURES) -> Figure:
    """A panel per measure: its marginal means over ``f2``'s levels on the x axis, one line per level
    of ``f1`` in that level's channel, with CIs, on log axes — on each measure's scale of
    ``stats.norms.mean_scale``, the one the stability table and the main effects use (geometric means; over
    layers (mean √CV)²). Parallel lines mean no interaction. Not over seeds (``OWN_MEASURES``): its
    runs are not independent, so it has no marginal mean with an interval."""
    scaled = {m: sn.mean_scale(seeds, m) for m in measures}
    shown = [m for m, (data, col, _) in scaled.items() if np.isfinite(data[col].to_numpy(float)).any()]
    tables = {m: stats.interaction_table(scaled[m][0], scaled[m][1], f1, f2, confidence) for m in shown}
    # A measure some levels lack (CV over layers at one layer) can leave one level on an axis: no
    # interaction to draw there, only a lone point per line.
    tables = {m: t for m, t in tables.items()
              if all(t.loc[t["mean"].notna(), f].nunique() > 1 for f in (f1, f2))}
    with plotting.style():
        ncols = max(1, min(2, len(tables)))
        nrows = max(1, math.ceil(len(tables) / ncols))
        fig = plotting.figure(0.9 + 1.9 * nrows)  # two to a page: at 2.1 in a row each took a page alone
        if not tables:
            return plotting.no_data(fig, "no per-seed values yet")
        channels = channels or Channels.from_trials(seeds, [f1, f2])
        axes = np.atleast_1d(fig.subplots(nrows, ncols, squeeze=False)).ravel()
        for ax, (m, table) in zip(axes, tables.items(), strict=False):
            back = scaled[m][2]
            plotting.interaction_lines(ax, table, f1, f2, channels, transform=back)
            plotting.log_axis([ax], np.concatenate([back(table[c].to_numpy(float)) for c in ("mean", "ci_low", "ci_high")]))
            ax.set_title(COLUMN_WORDS[m], fontsize=8)
        for ax in axes[len(tables):]:
            ax.remove()
        names = channels.factors or (f1, f2)
        plotting.xlabel(axes, len(tables), ncols, wrap(plotting.factor_name(f2, names), 60))
        ci = f"± {fmt.level(confidence)} CI"
        plotting.supylabel(fig, f"marginal mean {ci} (geometric; over layers (mean √CV)²)" if "depth" in tables
                           else f"geometric marginal mean {ci}")
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, title=wrap(plotting.factor_name(f1, names), 40), loc="outside upper center",
                   ncols=min(len(labels), 6), frameon=False, fontsize=7, title_fontsize=7.5)
        flagged = flagged_runs(seeds.assign(value=0.0)) if "nonfinite" in seeds.columns else set()
        if flagged:  # a marginal mean hides its runs: say how many of them diverged
            note = mpl.lines.Line2D([], [], ls="", label=f"{len(flagged)} of {len(seeds)} runs flagged diverged / "
                                    "non-finite")
            fig.legend(handles=[note], loc="outside lower center", frameon=False, fontsize=7)
    return fig


def grad_figure(df: pd.DataFrame, order: Order, ncols: int = 4, channels: Channels | None = None) -> Figure:
    """Small multiples: a row per facet, a panel per optimiser group (recurrent parameters, decayed
    matrices, the rest, the total): the gradient norm against the step, mean over seeds, each
    variant in its colour and line style, on log axes."""
    g = df[(df["kind"] == "grad") & (df["layer"].isna() | (df["layer"] == -1))]  # group rows: no layer (-1 before)
    shown = [(c, lbl) for c, lbl in order if (g["cell_id"] == c).any()]
    if not shown:
        return plotting.empty("no gradient norms recorded")
    channels = _channels(order, channels)
    rows = _facet_rows(shown, channels)
    groups = [n for n in dict.fromkeys(g["quantity"]) if n != "total"]
    groups += ["total"] if (g["quantity"] == "total").any() else []
    places = _grid([groups] * len(rows), ncols)
    panels = [(facet, members, group) for facet, members in rows for group in groups]
    nrows = 1 + max(r for r, _ in places)
    mean = g.groupby(["cell_id", "quantity", "step"])["value"].mean()
    with plotting.style():
        fig = plotting.figure(1.2 + 1.6 * nrows)
        axes = plotting.panel_grid(fig, places)
        for ax, (_, members, group) in zip(axes, panels, strict=True):
            for cid, _ in members:
                if (cid, group) not in mean.index.droplevel("step"):
                    continue
                s = mean.loc[(cid, group)]
                look = channels.style(cid)
                ax.plot(s.index, s.to_numpy(), color=look["color"], ls=look["linestyle"], lw=1.2, gid=look["gid"])
        plotting.log_axis(axes, mean.to_numpy(float))
        _titles(axes, [" · ".join(filter(None, [facet, group])) for facet, _, group in panels],
                1 + max(c for _, c in places))
        for i in plotting.bottom_row(places):
            axes[i].set_xlabel("training step", fontsize=8)
            axes[i].tick_params(labelbottom=True)
        plotting.supylabel(fig, "gradient norm before clipping (mean over seeds)")
        _legend(fig, order, channels)
    return fig
