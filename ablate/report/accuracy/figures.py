"""The accuracy report's figures (matplotlib), in the page size, style and factor → channel
mapping of ``ablate.report.plotting``: a cell looks the same in every figure."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib as mpl
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from ablate import stats
from ablate.report import plotting
from ablate.report.accuracy.tables import level_names, test_verdict
from ablate.report.format import (
    NBSP,
    finite,
    level,
    metric_name,
    p_is,
)
from ablate.report.plotting import Channels, wrap

NEVER_COLOR = plotting.GREY["reference"]


CHANCE_COLOR = plotting.GREY["reference"]


def _chance_line(ax: Any, chance: float | None, vertical: bool = False) -> bool:
    """The chance line where it falls inside the axis the data set; whether it was drawn. Chance
    never widens the axis: cells at 0.35-0.40 with chance at 0.12 would be squeezed into a sliver."""
    if chance is None or not np.isfinite(chance):
        return False
    lo, hi = ax.get_xlim() if vertical else ax.get_ylim()
    if not min(lo, hi) <= chance <= max(lo, hi):
        return False
    line = ax.axvline if vertical else ax.axhline
    line(chance, color=CHANCE_COLOR, label="chance", zorder=1, **plotting.REFERENCE)
    (ax.set_xlim if vertical else ax.set_ylim)(lo, hi)
    return True


def _chance_handle(chance: float | None = None, drawn: bool = True) -> Any:
    """The legend's chance entry: the line, or — when it is off every axis — where chance is."""
    if drawn:
        return mpl.lines.Line2D([], [], color=CHANCE_COLOR, label="chance", **plotting.REFERENCE)
    return mpl.lines.Line2D([], [], ls="", label=f"chance ({chance:.3g}) is off the axis")


def _rows(n: int, lines: int) -> tuple[float, float]:
    """(height, tick label size) of a figure with a row per cell: ``n`` rows of ``lines`` label lines
    in all, shrunk to fit ``plotting.MAX_HEIGHT``."""
    want = 1.3 + 0.11 * lines + 0.09 * n  # a one-line row 0.2 in: two 18-row figures share a page
    room = plotting.MAX_HEIGHT - 1.5  # the legend above, the axis label and the extra legend below
    height = max(2.2, min(want, plotting.MAX_HEIGHT))
    pitch = min(room, height - 1.3) / max(1, n)
    return height, (7.5 if pitch >= 0.2 else 6.5 if pitch >= 0.15 else 5.5)


def _row_labels(rows: pd.DataFrame, channels: Channels, width: int) -> tuple[list[str], str]:
    """Each row's label and what the labels list: with a factor mapping that knows every cell,
    its levels (``rotation · xi · 4``, the key naming the factors) on one line; else the cell
    label, wrapped at ``width``."""
    names = level_names(rows, channels)
    if names and len(set(rows["cell_id"])) == len(rows):  # no two rows read the same
        return [names[str(c)] for c in rows["cell_id"]], channels.key
    return [wrap(lbl, width) for lbl in rows["cell_label"]], ""


def _channels(trials: pd.DataFrame, channels: Channels | None) -> Channels:
    return channels if channels is not None else Channels.from_trials(trials)


def accuracy_by_cell(
    trials: pd.DataFrame,
    metric: str = "test_accuracy",
    chance: float | None = None,
    *,
    margin: float = stats.NEVER_LEARNED_MARGIN,
    confidence: float = 0.95,
    phase: str | None = "replicate",
    label_width: int = 34,
    title: str | None = None,
    channels: Channels | None = None,
    n_test: int | None = None,
) -> Figure:
    """One row per cell: each seed as a point in the cell's colour and marker, the mean with its t CI
    as a bar, the test set's own ±2 binomial SE as a grey band behind the mean (when ``n_test`` is
    known), and the chance line.

    Seeds at or below ``chance + margin`` (never learned) are drawn as grey crosses. The right
    margin gives n and, where any, the diverged / failed / pending counts; a cell with no completed
    run says ``pending`` (or ``no results``) there.
    """
    channels = _channels(trials, channels)
    summary = stats.cell_summary(trials, metric, chance, margin, confidence, phase)
    done = stats.completed_runs(trials, metric, phase)
    labels, key = _row_labels(summary, channels, label_width)
    height, size = _rows(len(labels), sum(max(1, lbl.count("\n") + 1) for lbl in labels))
    with plotting.style():
        fig = plotting.figure(height)
        if summary.empty:
            return plotting.no_data(fig, "no cells")
        ax = fig.add_subplot()
        ax.grid(axis="y", visible=False)
        y = np.arange(len(summary))
        rng = np.random.default_rng(0)
        threshold = (chance + margin) if chance is not None else -np.inf
        for i, (_, row) in enumerate(summary.iterrows()):
            look = channels.style(row["cell_id"])
            x = done.loc[done["cell_id"] == row["cell_id"], metric].to_numpy(float)
            jitter = rng.uniform(-0.14, 0.14, x.size)
            never = x <= threshold
            ax.scatter(x[~never], i + 0.18 + jitter[~never] * 0.5, s=14, color=look["color"], marker=look["marker"],
                       alpha=0.75, lw=0, zorder=2, gid=look["gid"])
            ax.scatter(x[never], i + 0.18 + jitter[never] * 0.5, s=16, color=NEVER_COLOR, marker="x", lw=1, zorder=2)
            if row["n"] == 0:
                continue
            se = stats.binomial_se(row["mean"], n_test) if n_test else np.nan
            if finite(se):
                ax.barh(i, 4 * se, left=row["mean"] - 2 * se, height=0.36, color="0.85", lw=0, zorder=1)
            lo = row["mean"] - row["ci_low"] if finite(row["ci_low"]) else 0.0
            hi = row["ci_high"] - row["mean"] if finite(row["ci_high"]) else 0.0
            ax.errorbar(row["mean"], i, xerr=[[lo], [hi]], fmt=look["marker"], ms=5, color=look["color"],
                        mec="black", mew=0.6, ecolor=look["color"], elinewidth=1.4, capsize=2.5, zorder=3, gid=look["gid"])
        if metric.endswith("accuracy"):  # a CI past [0, 1] (few seeds, wide spread) must not squash the points
            low, high = ax.get_xlim()
            ax.set_xlim(max(low, -0.02), min(high, 1.02))
        drawn = _chance_line(ax, chance, vertical=True)
        ax.set_yticks(y, labels)
        ax.tick_params(axis="y", labelsize=size)
        ax.set_ylim(len(summary) - 0.5, -0.5)
        ax.set_xlabel(metric_name(metric))
        # Right margin: counts per cell, on a twin axis so the layout engine makes room for it.
        right = ax.twinx()
        right.set_ylim(ax.get_ylim())
        right.set_yticks(y, [_counts_note(row) for _, row in summary.iterrows()])
        right.tick_params(axis="y", length=0, labelsize=min(7, size), labelcolor="0.3")
        right.grid(False)
        right.spines[["right", "top"]].set_visible(False)
        extra = [
            mpl.lines.Line2D([], [], ls="", marker="o", ms=4, color="0.4", alpha=0.75, label="seed"),
            mpl.lines.Line2D([], [], ls="-", marker="o", ms=5, mec="black", color="0.4",
                             label=f"mean ± {level(confidence)} CI"),
        ]
        if n_test:
            extra.append(mpl.patches.Patch(color="0.85", label=f"±2 SE of the test set (N = {n_test:,})"))
        if chance is not None:
            extra += [mpl.lines.Line2D([], [], ls="", marker="x", color=NEVER_COLOR, label="never learned"),
                      _chance_handle(chance, drawn)]
        channels.legend(fig, line=False, extra=extra)
        _key_title(ax, key, title)
    return fig


def _key_title(ax: Any, key: str, title: str | None = None) -> None:
    """The figure's title and what its row labels list (``rows: parameterisation · normalisation``)."""
    text = "\n".join(filter(None, [wrap(title, 80) if title else "", f"rows: {key}" if key else ""]))
    if text:
        ax.set_title(text, loc="left" if not title else "center", fontsize=7.5)


def _counts_note(row: pd.Series) -> str:
    if row["n"] == 0:
        return "pending" if row["status"] == "pending" else "no results"
    parts = [f"n={int(row['n'])}"]
    for col, word in (("n_diverged", "diverged"), ("n_failed", "failed"), ("n_pending", "pending")):
        if row[col]:
            parts.append(f"{int(row[col])} {word}")
    return ", ".join(parts)


def main_effects_plot(
    trials: pd.DataFrame,
    metric: str = "test_accuracy",
    factors: Sequence[str] | None = None,
    chance: float | None = None,
    *,
    confidence: float = 0.95,
    phase: str | None = "replicate",
    ncols: int = 3,
    channels: Channels | None = None,
) -> Figure:
    """One panel per factor: the marginal mean at each level with its CI (``stats.main_effects``),
    each level drawn in its channel (the colour factor's levels in their colours, the style
    factor's in their markers)."""
    channels = _channels(trials, channels)
    effects = stats.main_effects(trials, metric, factors, confidence, phase)
    factors = list(dict.fromkeys(effects["factor"]))
    ncols = max(1, min(ncols, len(factors)))
    nrows = max(1, math.ceil(len(factors) / ncols))
    with plotting.style():
        fig = plotting.figure(0.4 + 2.3 * nrows)
        if effects.empty or effects["mean"].isna().all():
            return plotting.no_data(fig, "no completed runs yet")
        places = plotting.wrapped_places(len(factors), ncols)
        axes = plotting.panel_grid(fig, places, sharex=False, sharey=True)
        tick_width = max(8, int(34 / ncols))
        for ax, factor in zip(axes, factors, strict=False):
            sub = effects[effects["factor"] == factor].reset_index(drop=True)
            x = np.arange(len(sub))
            ax.plot(x, sub["mean"], color="0.6", lw=0.9, zorder=1)
            for xi, (_, r) in zip(x, sub.iterrows(), strict=True):
                look = channels.level_look(factor, r["level"])
                if not finite(r["mean"]):
                    ax.annotate("no results", (xi, 0.02), xycoords=("data", "axes fraction"), ha="center",
                                fontsize=7, color="0.45")
                    continue
                err = [[r["mean"] - r["ci_low"] if finite(r["ci_low"]) else 0.0],
                       [r["ci_high"] - r["mean"] if finite(r["ci_high"]) else 0.0]]
                ax.errorbar(xi, r["mean"], yerr=err, fmt=look["marker"], ms=5, capsize=3, color=look["color"],
                            mec="black", mew=0.5, zorder=2, gid=look["gid"])
            ticks = [str(lv) for lv in sub["level"]]
            if sum(len(t) for t in ticks) + 2 * len(ticks) > 2 * tick_width:  # crowded: upright, do not wrap
                ax.set_xticks(x, [wrap(t, 2 * tick_width) for t in ticks], rotation=90)
            else:
                ax.set_xticks(x, [wrap(t, tick_width) for t in ticks])
            ax.set_xlim(-0.5, len(sub) - 0.5)
            ax.set_title(wrap(plotting.factor_name(factor, factors), 12 * (4 - ncols) + 18))
            ax.grid(axis="x", visible=False)
        _shared_axis(axes, places, chance, metric, confidence)
    return fig


def _shared_axis(axes: Any, places: list, chance: float | None, metric: str, confidence: float) -> None:
    """Panels sharing a y axis: the chance line on each (after every panel has its points, so the
    axis is the data's) and the axis label on the first column only."""
    for ax in axes:
        _chance_line(ax, chance)
    for ax, (_, col) in zip(axes, places, strict=True):
        if col == 0:
            ax.set_ylabel(f"{metric_name(metric)}\n(marginal mean ± {level(confidence)} CI)")
        else:
            ax.tick_params(labelleft=False)


def interaction_plot(
    trials: pd.DataFrame,
    metric: str,
    f1: str,
    f2: str,
    chance: float | None = None,
    *,
    confidence: float = 0.95,
    phase: str | None = "replicate",
    channels: Channels | None = None,
) -> Figure:
    """Marginal means of ``metric`` over ``f2``'s levels (x axis), one line per level of ``f1`` in
    that level's channel (``f1`` is the earlier factor: colour before line style), with CIs.

    Parallel lines mean no interaction. Lines are dodged slightly so the CIs do not overlap.
    """
    channels = _channels(trials, channels)
    table = stats.interaction_table(trials, metric, f1, f2, confidence, phase=phase)
    with plotting.style():
        fig = plotting.figure(3.2)
        if table.empty or table["mean"].isna().all():
            return plotting.no_data(fig, "no completed runs yet")
        ax = fig.add_subplot()
        plotting.interaction_lines(ax, table, f1, f2, channels, 80)
        _chance_line(ax, chance)
        ax.set_xlabel(wrap(plotting.factor_name(f2, channels.factors or (f1, f2)), 60))
        ax.set_ylabel(f"{metric_name(metric)}\n(marginal mean ± {level(confidence)} CI)")
        ax.legend(title=wrap(plotting.factor_name(f1, channels.factors or (f1, f2)), 22), loc="center left",
                  bbox_to_anchor=(1.01, 0.5), frameon=False)
    return fig


def interaction_plots(
    trials: pd.DataFrame,
    metric: str,
    pairs: Sequence[tuple[str, str]],
    chance: float | None = None,
    *,
    confidence: float = 0.95,
    phase: str | None = "replicate",
    channels: Channels | None = None,
    ncols: int = 3,
) -> Figure:
    """Every factor pair's interaction (``interaction_plot``) as a panel of one figure, ``ncols`` to a
    row on a shared y axis: a third of a page for three factors where a figure per pair took a page
    and a half. The colour and style factors' levels are in the figure's legend above the panels; a
    pair whose first factor has neither channel gets its own legend in its panel."""
    channels = _channels(trials, channels)
    tables = [(f1, f2, stats.interaction_table(trials, metric, f1, f2, confidence, phase=phase)) for f1, f2 in pairs]
    tables = [(f1, f2, t) for f1, f2, t in tables if not t.empty and not t["mean"].isna().all()]
    ncols = max(1, min(ncols, len(tables)))
    nrows = max(1, math.ceil(len(tables) / ncols))
    with plotting.style():
        fig = plotting.figure(1.0 + 2.4 * nrows)
        if not tables:
            return plotting.no_data(fig, "no completed runs yet")
        places = plotting.wrapped_places(len(tables), ncols)
        axes = plotting.panel_grid(fig, places, sharex=False, sharey=True)
        names = channels.factors or tuple(dict.fromkeys(f for pair in pairs for f in pair))
        for ax, (f1, f2, table) in zip(axes, tables, strict=True):
            plotting.interaction_lines(ax, table, f1, f2, channels, 34)
            ax.set_title(wrap(f"{plotting.factor_name(f1, names)} × {plotting.factor_name(f2, names)}", 40),
                         fontsize=7.5)
            ax.set_xlabel(wrap(plotting.factor_name(f2, names), 30))
            if f1 not in (channels.color_factor, channels.style_factor):
                ax.legend(title=wrap(plotting.factor_name(f1, names), 22), fontsize=6.5, title_fontsize=6.5,
                          frameon=False, loc="best")
        _shared_axis(axes, places, chance, metric, confidence)
        channels.legend(fig, line=True, marker=True)
    return fig


def comparison_plot(comparisons: pd.DataFrame, *, label_width: int = 34, metric: str | None = None,
                    channels: Channels | None = None, sequential: Mapping[str, str] | None = None) -> Figure:
    """Forest plot of ``stats.compare_to_reference``: each cell's difference from the reference with
    its CI in the cell's colour and marker (filled when significant, open when not); a comparison
    with too few seeds to test shows its raw per-seed differences as crosses and says so.
    ``sequential`` (cell id → its sequential decision, as the decisions table words it) replaces
    the fixed tests' marks and fill: a sequential study prints no fixed-design p."""
    channels = channels if channels is not None else Channels((), {})
    labels, key = _row_labels(comparisons, channels, label_width)
    height, size = _rows(len(labels), sum(lbl.count("\n") + 1 for lbl in labels))
    with plotting.style():
        fig = plotting.figure(height)
        if comparisons.empty:
            return plotting.no_data(fig, "nothing to compare")
        ax = fig.add_subplot()
        ax.grid(axis="y", visible=False)
        y = np.arange(len(comparisons))
        for yi, (_, row) in zip(y, comparisons.iterrows(), strict=True):
            look = channels.style(row["cell_id"])
            if not row["testable"]:
                raw = row["diffs"] if row["paired"] and row["diffs"] else ()
                ax.scatter(list(raw), [yi] * len(raw), marker="x", s=18, color=look["color"], lw=1, zorder=2, gid=look["gid"])
                continue
            e0 = row["mean_diff"] - row["diff_ci_low"] if finite(row["diff_ci_low"]) else 0.0
            e1 = row["diff_ci_high"] - row["mean_diff"] if finite(row["diff_ci_high"]) else 0.0
            sig = (sequential.get(row["cell_id"], "") == "significant") if sequential is not None else row["significant"]
            face = look["color"] if sig else "white"
            ax.errorbar(row["mean_diff"], yi, xerr=[[e0], [e1]], fmt=look["marker"], ms=5, color=look["color"],
                        mfc=face, mec=look["color"], capsize=2.5, lw=1.3, zorder=3, gid=look["gid"])
        ax.axvline(0, color=plotting.GREY["reference"], lw=0.8)
        ax.set_yticks(y, labels)
        ax.tick_params(axis="y", labelsize=size)
        ax.set_ylim(len(comparisons) - 0.5, -0.5)
        ref = comparisons["reference_label"].iloc[0]
        what = metric_name(metric) if metric else "metric"
        ax.set_xlabel(wrap(f"difference in {what} from: {ref}", 90))
        right = ax.twinx()
        right.set_ylim(ax.get_ylim())
        if sequential is not None:
            notes = [f"sequential: {sequential.get(row['cell_id'], 'not analysed')}" for _, row in comparisons.iterrows()]
        else:
            notes = [(f"{row['mark'] or 'n.s.'}  p_adj {p_is(row['p_adj'])} ({row['test']})" if row["testable"]
                      else test_verdict(row).replace(NBSP, " ")) for _, row in comparisons.iterrows()]
        right.set_yticks(y, notes)
        right.tick_params(axis="y", length=0, labelsize=min(7, size), labelcolor="0.3")
        right.grid(False)
        right.spines[["right", "top"]].set_visible(False)
        extra = [mpl.lines.Line2D([], [], ls="-", marker="o", color="0.3", label="Δ ± t CI, significant"),
                 mpl.lines.Line2D([], [], ls="-", marker="o", mfc="white", color="0.3", label="not significant"),
                 mpl.lines.Line2D([], [], ls="", marker="x", color="0.3", label="Δ per seed (not tested)")]
        channels.legend(fig, line=False, extra=extra)
        _key_title(ax, key)
    return fig


def _cell_order(curves: pd.DataFrame, cells: Sequence[str] | pd.DataFrame | None) -> list[tuple[str, str]]:
    """(cell_id, cell_label) pairs to draw, in order."""
    known = curves.drop_duplicates("cell_id")[["cell_id", "cell_label"]]
    if cells is None:
        return list(known.itertuples(index=False, name=None))
    if isinstance(cells, pd.DataFrame):
        frame = cells.drop_duplicates("cell_id")[["cell_id", "cell_label"]]
        return list(frame.itertuples(index=False, name=None))
    by_id = dict(known.itertuples(index=False, name=None))
    by_label = {lbl: cid for cid, lbl in by_id.items()}
    out = []
    for c in cells:
        if c in by_id:
            out.append((c, by_id[c]))
        elif c in by_label:
            out.append((by_label[c], c))
        else:
            out.append((c, c))  # a cell with no curves yet
    return out


def _panels(order: list[tuple[str, str]], channels: Channels,
            most: int | None = None) -> list[tuple[str, list[tuple[str, str]]]]:
    """The cells of each facet panel, panels in the facet factors' order ('' when there are none);
    with ``most``, a panel of more cells is split further by the style factor's levels."""
    facets = channels.facets([c for c, _ in order])
    panels = [(f, [(c, lbl) for c, lbl in order if channels.facet(c) == f]) for f in facets]
    split = channels.style_factor
    if most is None or split is None or max(len(m) for _, m in panels) <= most:
        return panels
    out = []
    for facet, members in panels:
        for lv in channels.levels[split]:
            these = [(c, lbl) for c, lbl in members if channels.cells.get(c, {}).get(split) == lv]
            if these:
                out.append((" · ".join(filter(None, [facet, f"{channels.name(split)} = {lv}"])), these))
    return out


def _remove_unused(axes: Sequence[Any], used: int) -> list[Any]:
    """The first ``used`` axes; the rest of the grid taken off the figure (no empty frame)."""
    for ax in axes[used:]:
        ax.remove()
    return list(axes[:used])


#: A performance-profile panel draws its cells' bands only up to this many cells: beyond, a dozen
#: overlapping bands hide the lines they belong to.
PROFILE_BANDS = 3
#: Cells on one performance-profile panel before the panels are split by the style factor too.
PROFILE_CELLS = 6


def learning_curves(
    curves: pd.DataFrame,
    metric: str = "val_accuracy",
    *,
    cells: Sequence[str] | pd.DataFrame | None = None,
    chance: float | None = None,
    ncols: int = 3,
    label_width: int | None = None,
    channels: Channels | None = None,
) -> Figure:
    """``metric`` against step, every cell on one panel per facet (the third factor's levels): the
    mean over seeds in the cell's colour and line style, the band between the lowest and the
    highest seed.

    ``curves`` is the long frame (``cell_id``, ``cell_label``, ``seed``, ``step``, ``metric`` —
    or ``name``, as ``Results.metrics`` spells it — and ``value``). ``cells`` chooses the cells: ids
    or labels, or a frame with ``cell_id`` / ``cell_label`` (the trials frame or a summary); cells
    without curves yet are listed as ``pending`` under the panel. The mean at a step is over the
    seeds that logged it.
    """
    key = "metric" if "metric" in curves.columns else "name" if "name" in curves.columns else None
    data = curves[curves[key] == metric] if key else curves
    order = _cell_order(data, cells)
    channels = channels if channels is not None else (
        Channels.from_trials(cells) if isinstance(cells, pd.DataFrame) else Channels((), {}))
    panels = _panels(order, channels)
    ncols = max(1, min(ncols, len(panels)))
    nrows = max(1, math.ceil(len(panels) / ncols))
    label_width = label_width or max(14, int(96 / ncols))
    with plotting.style():
        fig = plotting.figure(1.4 + 2.2 * nrows)
        if not order or data.empty:
            return plotting.no_data(fig, f"no {metric_name(metric)} curves yet")
        axes = _remove_unused(np.atleast_1d(fig.subplots(nrows, ncols, sharex=True, sharey=True, squeeze=False)).ravel(),
                              len(panels))
        unlabelled = not channels.factors
        for ax, (facet, members) in zip(axes, panels, strict=False):
            if facet:
                ax.set_title(wrap(facet, label_width), fontsize=7.5)
            waiting = []
            for cid, label in members:
                sub = data[data["cell_id"] == cid]
                if sub.empty:
                    waiting.append(label)
                    continue
                look = channels.style(cid)
                wide = sub.pivot_table(index="step", columns="seed", values="value").sort_index()
                if wide.shape[1] > 1:
                    ax.fill_between(wide.index, wide.min(axis=1), wide.max(axis=1), color=look["color"], alpha=0.13,
                                    lw=0, gid=look["gid"])
                ax.plot(wide.index, wide.mean(axis=1), color=look["color"], ls=look["linestyle"], lw=1.6,
                        label=wrap(label, 40) if unlabelled else None, gid=look["gid"])
            if waiting:
                ax.text(0.02, 0.02, "pending: " + wrap(", ".join(waiting), 60), transform=ax.transAxes, fontsize=6.5,
                        color="0.45", va="bottom")
        drawn = [_chance_line(ax, chance) for ax in axes]  # after every panel's curves: the shared axis is theirs
        for ax in axes:
            ax.tick_params(labelbottom=True)
        plotting.xlabel(axes, len(panels), ncols, "step")
        plotting.supylabel(fig, metric_name(metric))
        extra = [mpl.patches.Patch(color="0.5", alpha=0.25, label="lowest–highest seed"),
                 mpl.lines.Line2D([], [], lw=1.6, color="0.3", label="mean over seeds")]
        if chance is not None:
            extra.append(_chance_handle(chance, any(drawn)))
        if unlabelled:
            axes[0].legend(fontsize=6.5, frameon=False, loc="lower right")
        channels.legend(fig, extra=extra)
    return fig


def performance_profile_plot(profile: pd.DataFrame, metric: str = "test_accuracy", *, chance: float | None = None,
                             channels: Channels | None = None, ncols: int = 3, confidence: float = 0.95) -> Figure:
    """rliable's performance profiles (``stats.performance_profile``): per cell the share of runs
    scoring above τ against τ, as a step line in the cell's colour and line style with its
    pointwise exact (Clopper–Pearson) band; one panel per facet, split further by the style factor
    beyond ``PROFILE_CELLS`` cells a panel, and the bands drawn only on panels of at most
    ``PROFILE_BANDS`` cells."""
    channels = channels if channels is not None else Channels((), {})
    order = list(profile.drop_duplicates("cell_id")[["cell_id", "cell_label"]].itertuples(index=False, name=None))
    panels = _panels(order, channels, PROFILE_CELLS) if order else [("", [])]
    ncols = max(1, min(ncols if len(panels) <= 6 else 3, len(panels)))
    nrows = max(1, math.ceil(len(panels) / ncols))
    bands = max(len(m) for _, m in panels) <= PROFILE_BANDS
    with plotting.style():
        fig = plotting.figure(1.3 + 2.2 * nrows)
        if profile.empty:
            return plotting.no_data(fig, "no completed runs yet")
        axes = _remove_unused(np.atleast_1d(fig.subplots(nrows, ncols, sharex=True, sharey=True, squeeze=False)).ravel(),
                              len(panels))
        for ax, (facet, members) in zip(axes, panels, strict=False):
            if facet:
                ax.set_title(wrap(facet, 100 // ncols), fontsize=7.5)
            for cid, label in members:
                sub = profile[profile["cell_id"] == cid]
                look = channels.style(cid)
                if bands and sub["ci_low"].notna().any():
                    ax.fill_between(sub["tau"], sub["ci_low"], sub["ci_high"], step="post", color=look["color"],
                                    alpha=0.13, lw=0, gid=look["gid"])
                ax.step(sub["tau"], sub["fraction"], where="post", color=look["color"], ls=look["linestyle"], lw=1.5,
                        label=wrap(label, 40) if not channels.factors else None, gid=look["gid"])
            ax.set_ylim(-0.03, 1.03)
        drawn = [_chance_line(ax, chance, vertical=True) for ax in axes]
        for ax in axes:
            ax.tick_params(labelbottom=True)
        plotting.xlabel(axes, len(panels), ncols, f"τ ({metric_name(metric)})")
        plotting.supylabel(fig, f"share of runs with {metric_name(metric)} > τ")
        band = f"{level(confidence)} Clopper–Pearson band (pointwise)"
        extra = [mpl.patches.Patch(color="0.5", alpha=0.25, label=band) if bands else
                 mpl.lines.Line2D([], [], ls="", label=f"{band}s left out: over {PROFILE_BANDS} cells a panel")]
        if chance is not None:
            extra.append(_chance_handle(chance, any(drawn)))
        if not channels.factors:
            axes[0].legend(fontsize=6.5, frameon=False, loc="lower left")
        channels.legend(fig, extra=extra)
    return fig
