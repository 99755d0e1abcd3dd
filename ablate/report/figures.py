"""Figure builders for the reports: each takes the tidy frames and returns a matplotlib Figure.

Figures are built on ``matplotlib.figure.Figure`` with an Agg canvas (never pyplot), so they
render headless, touch no global backend state, and display inline in Jupyter. They are sized for
an A4 page (``WIDTH`` inches wide, height growing with content), use print-legible font sizes,
and wrap long labels instead of letting them run off the page.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from typing import Any

import matplotlib as mpl
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from ablate import stats

__all__ = [
    "WIDTH",
    "accuracy_by_cell",
    "comparison_plot",
    "interaction_plot",
    "learning_curves",
    "main_effects_plot",
    "wrap",
]

#: Figure width in inches: fits an A4 page (8.27 in) with margins.
WIDTH = 6.8
STYLE = {
    "font.size": 8,
    "axes.titlesize": 8.5,
    "axes.labelsize": 8,
    "xtick.labelsize": 7.5,
    "ytick.labelsize": 7.5,
    "legend.fontsize": 7.5,
    "legend.title_fontsize": 8,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "grid.linewidth": 0.5,
    "pdf.fonttype": 42,
    "svg.fonttype": "none",
}
MEAN_COLOR = "black"
SEED_COLOR = "#4C72B0"
NEVER_COLOR = "#DD8452"
CHANCE_COLOR = "#C44E52"


def wrap(label: Any, width: int = 30) -> str:
    """Wrap ``label`` onto lines of at most ``width`` characters (breaking long words if needed)."""
    text = str(label)
    return "\n".join(textwrap.wrap(text, width=width, break_on_hyphens=False)) or text


def _figure(width: float, height: float) -> Figure:
    fig = Figure(figsize=(min(width, WIDTH), height), layout="constrained", dpi=150)
    FigureCanvasAgg(fig)
    return fig


def _no_data(fig: Figure, message: str) -> Figure:
    ax = fig.add_subplot()
    ax.set_axis_off()
    ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes, color="0.4")
    return fig


def _chance_line(ax: Any, chance: float | None, vertical: bool = False) -> None:
    if chance is None or not np.isfinite(chance):
        return
    line = ax.axvline if vertical else ax.axhline
    line(chance, color=CHANCE_COLOR, ls="--", lw=1, label="chance", zorder=1)


def _metric_label(metric: str) -> str:
    return metric.replace("_", " ").replace("/", " ")


# --- accuracy per cell -----------------------------------------------------------------------


def accuracy_by_cell(
    trials: pd.DataFrame,
    metric: str = "test_accuracy",
    chance: float | None = None,
    *,
    margin: float = 0.02,
    confidence: float = 0.95,
    phase: str | None = "replicate",
    label_width: int = 34,
    title: str | None = None,
) -> Figure:
    """One row per cell: each seed as a point, the mean with its t CI as a bar, the chance line.

    Seeds at or below ``chance + margin`` (never learned) are drawn in a second colour. The right
    margin gives n and, where any, the diverged / failed / pending counts; a cell with no completed
    run says ``pending`` (or ``no results``) there.
    """
    summary = stats.cell_summary(trials, metric, chance, margin, confidence, phase)
    done = stats.completed_runs(trials, metric, phase)
    labels = [wrap(lbl, label_width) for lbl in summary["cell_label"]]
    lines = sum(max(1, lbl.count("\n") + 1) for lbl in labels)
    height = max(2.0, 0.9 + 0.17 * lines + 0.12 * len(labels))
    with mpl.rc_context(STYLE):
        fig = _figure(WIDTH, height)
        if summary.empty:
            return _no_data(fig, "no cells")
        ax = fig.add_subplot()
        ax.grid(axis="y", visible=False)
        y = np.arange(len(summary))
        rng = np.random.default_rng(0)
        threshold = (chance + margin) if chance is not None else -np.inf
        for i, cid in enumerate(summary["cell_id"]):
            x = done.loc[done["cell_id"] == cid, metric].to_numpy(float)
            jitter = rng.uniform(-0.12, 0.12, x.size)
            never = x <= threshold
            ax.scatter(x[~never], i + jitter[~never], s=12, color=SEED_COLOR, alpha=0.7, lw=0, zorder=2)
            ax.scatter(x[never], i + jitter[never], s=14, color=NEVER_COLOR, marker="x", lw=1, zorder=2)
        have = summary["n"] > 0
        lo = (summary["mean"] - summary["ci_low"]).fillna(0)
        hi = (summary["ci_high"] - summary["mean"]).fillna(0)
        ax.errorbar(
            summary.loc[have, "mean"],
            y[have.to_numpy()],
            xerr=[lo[have], hi[have]],
            fmt="D",
            ms=4,
            color=MEAN_COLOR,
            ecolor=MEAN_COLOR,
            elinewidth=1.2,
            capsize=2.5,
            zorder=3,
            label=f"mean ± {confidence:.0%} CI",
        )
        _chance_line(ax, chance, vertical=True)
        if metric.endswith("accuracy"):  # a CI past [0, 1] (few seeds, wide spread) must not squash the points
            low, high = ax.get_xlim()
            ax.set_xlim(max(low, -0.02), min(high, 1.02))
        ax.set_yticks(y, labels)
        ax.set_ylim(len(summary) - 0.5, -0.5)
        ax.set_xlabel(_metric_label(metric))
        # Right margin: counts per cell, on a twin axis so the layout engine makes room for it.
        right = ax.twinx()
        right.set_ylim(ax.get_ylim())
        right.set_yticks(y, [_counts_note(row) for _, row in summary.iterrows()])
        right.tick_params(axis="y", length=0, labelsize=7, labelcolor="0.3")
        right.grid(False)
        right.spines[["right", "top"]].set_visible(False)
        handles = [
            mpl.lines.Line2D([], [], ls="", marker="o", ms=4, color=SEED_COLOR, label="seed"),
            mpl.lines.Line2D(
                [], [], ls="", marker="D", ms=4, color=MEAN_COLOR, label=f"mean ± {confidence:.0%} CI"
            ),
        ]
        if chance is not None:
            handles.append(
                mpl.lines.Line2D([], [], ls="", marker="x", color=NEVER_COLOR, label="never learned")
            )
            handles.append(mpl.lines.Line2D([], [], ls="--", color=CHANCE_COLOR, label="chance"))
        fig.legend(handles=handles, loc="outside lower center", ncols=len(handles), frameon=False)
        if title:
            ax.set_title(wrap(title, 80))
    return fig


def _counts_note(row: pd.Series) -> str:
    if row["n"] == 0:
        return "pending" if row["status"] == "pending" else "no results"
    parts = [f"n={int(row['n'])}"]
    for col, word in (("n_diverged", "diverged"), ("n_failed", "failed"), ("n_pending", "pending")):
        if row[col]:
            parts.append(f"{int(row[col])} {word}")
    return ", ".join(parts)


# --- main effects and interactions -----------------------------------------------------------


def main_effects_plot(
    trials: pd.DataFrame,
    metric: str = "test_accuracy",
    factors: Sequence[str] | None = None,
    chance: float | None = None,
    *,
    confidence: float = 0.95,
    phase: str | None = "replicate",
    ncols: int = 3,
) -> Figure:
    """One panel per factor: the marginal mean at each level with its CI (``stats.main_effects``)."""
    effects = stats.main_effects(trials, metric, factors, confidence, phase)
    factors = list(dict.fromkeys(effects["factor"]))
    ncols = max(1, min(ncols, len(factors)))
    nrows = max(1, math.ceil(len(factors) / ncols))
    with mpl.rc_context(STYLE):
        fig = _figure(WIDTH, 0.4 + 2.3 * nrows)
        if effects.empty or effects["mean"].isna().all():
            return _no_data(fig, "no completed runs yet")
        axes = np.atleast_1d(fig.subplots(nrows, ncols, sharey=True, squeeze=False)).ravel()
        tick_width = max(8, int(34 / ncols))
        for ax, factor in zip(axes, factors, strict=False):
            sub = effects[effects["factor"] == factor].reset_index(drop=True)
            x = np.arange(len(sub))
            err = [(sub["mean"] - sub["ci_low"]).fillna(0), (sub["ci_high"] - sub["mean"]).fillna(0)]
            ax.errorbar(x, sub["mean"], yerr=err, fmt="o-", ms=4, lw=1.2, capsize=3, color=MEAN_COLOR)
            for xi in x[sub["mean"].isna().to_numpy()]:  # a level whose cells have no results yet
                ax.annotate("no results", (xi, 0.02), xycoords=("data", "axes fraction"), ha="center",
                            fontsize=7, color="0.45")
            _chance_line(ax, chance)
            ticks = [str(lv) for lv in sub["level"]]
            if sum(len(t) for t in ticks) + 2 * len(ticks) > 2 * tick_width:  # crowded: slant, do not wrap
                ax.set_xticks(x, [wrap(t, 2 * tick_width) for t in ticks], rotation=30, ha="right",
                              rotation_mode="anchor")
            else:
                ax.set_xticks(x, [wrap(t, tick_width) for t in ticks])
            ax.set_xlim(-0.5, len(sub) - 0.5)
            ax.set_title(wrap(factor, 12 * (4 - ncols) + 18))
            ax.grid(axis="x", visible=False)
        for ax in axes[len(factors) :]:
            ax.set_axis_off()
        for row in range(nrows):
            axes[row * ncols].set_ylabel(f"{_metric_label(metric)}\n(marginal mean ± {confidence:.0%} CI)")
    return fig


def interaction_plot(
    trials: pd.DataFrame,
    metric: str,
    f1: str,
    f2: str,
    chance: float | None = None,
    *,
    confidence: float = 0.95,
    phase: str | None = "replicate",
) -> Figure:
    """Marginal means of ``metric`` over ``f1`` levels (x axis), one line per ``f2`` level, with CIs.

    Parallel lines mean no interaction. Lines are dodged slightly so the CIs do not overlap.
    """
    table = stats.interaction_table(trials, metric, f1, f2, confidence, phase=phase)
    with mpl.rc_context(STYLE):
        fig = _figure(WIDTH, 3.2)
        if table.empty or table["mean"].isna().all():
            return _no_data(fig, "no completed runs yet")
        ax = fig.add_subplot()
        levels1 = list(dict.fromkeys(table[f1]))
        levels2 = list(dict.fromkeys(table[f2]))
        palette = sns.color_palette("colorblind", len(levels2))
        offsets = np.linspace(-0.08, 0.08, len(levels2)) if len(levels2) > 1 else [0.0]
        pos = {lv: i for i, lv in enumerate(levels1)}
        for color, off, lv2 in zip(palette, offsets, levels2, strict=True):
            sub = table[table[f2] == lv2]
            x = np.array([pos[v] for v in sub[f1]], dtype=float) + off
            err = [(sub["mean"] - sub["ci_low"]).fillna(0), (sub["ci_high"] - sub["mean"]).fillna(0)]
            ax.errorbar(
                x, sub["mean"], yerr=err, fmt="o-", ms=4, lw=1.2, capsize=3, color=color, label=wrap(lv2, 22)
            )
        _chance_line(ax, chance)
        ax.set_xticks(
            range(len(levels1)), [wrap(lv, max(8, int(80 / max(1, len(levels1))))) for lv in levels1]
        )
        ax.set_xlim(-0.5, len(levels1) - 0.5)
        ax.set_xlabel(wrap(f1, 60))
        ax.set_ylabel(f"{_metric_label(metric)}\n(marginal mean ± {confidence:.0%} CI)")
        ax.grid(axis="x", visible=False)
        ax.legend(title=wrap(f2, 22), loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    return fig


# --- comparisons -----------------------------------------------------------------------------


def comparison_plot(comparisons: pd.DataFrame, *, label_width: int = 34, metric: str | None = None) -> Figure:
    """Forest plot of ``stats.compare_to_reference``: each cell's difference from the reference with
    its CI, and the significance mark; cells without a test are listed as such."""
    labels = [wrap(lbl, label_width) for lbl in comparisons["cell_label"]]
    lines = sum(lbl.count("\n") + 1 for lbl in labels)
    with mpl.rc_context(STYLE):
        fig = _figure(WIDTH, max(2.0, 0.9 + 0.17 * lines + 0.12 * len(labels)))
        if comparisons.empty:
            return _no_data(fig, "nothing to compare")
        ax = fig.add_subplot()
        ax.grid(axis="y", visible=False)
        y = np.arange(len(comparisons))
        have = comparisons["mean_diff"].notna().to_numpy()
        sub = comparisons[have]
        err = [
            (sub["mean_diff"] - sub["diff_ci_low"]).fillna(0),
            (sub["diff_ci_high"] - sub["mean_diff"]).fillna(0),
        ]
        colors = np.where(sub["significant"], MEAN_COLOR, "0.55")
        for yi, (_, row), e0, e1, c in zip(y[have], sub.iterrows(), err[0], err[1], colors, strict=True):
            ax.errorbar(row["mean_diff"], yi, xerr=[[e0], [e1]], fmt="D", ms=4, color=c, capsize=2.5, lw=1.2)
        ax.axvline(0, color="0.3", lw=0.8)
        ax.set_yticks(y, labels)
        ax.set_ylim(len(comparisons) - 0.5, -0.5)
        ref = comparisons["reference_label"].iloc[0]
        what = _metric_label(metric) if metric else "metric"
        ax.set_xlabel(wrap(f"difference in {what} from: {ref}", 90))
        right = ax.twinx()
        right.set_ylim(ax.get_ylim())
        notes = [
            (
                f"{row['mark'] or 'n.s.'}  p_adj={row['p_adj']:.2g} ({row['test']})"
                if np.isfinite(row["p_adj"])
                else row["test"]
            )
            for _, row in comparisons.iterrows()
        ]
        right.set_yticks(y, notes)
        right.tick_params(axis="y", length=0, labelsize=7, labelcolor="0.3")
        right.grid(False)
        right.spines[["right", "top"]].set_visible(False)
    return fig


# --- learning curves -------------------------------------------------------------------------


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
            out.append((c, c))  # a cell with no curves yet: drawn as an empty panel
    return out


def learning_curves(
    curves: pd.DataFrame,
    metric: str = "val_accuracy",
    *,
    cells: Sequence[str] | pd.DataFrame | None = None,
    chance: float | None = None,
    ncols: int = 3,
    label_width: int | None = None,
) -> Figure:
    """``metric`` against step, one panel per cell: each seed a thin line, the mean over seeds thick.

    ``curves`` is the long frame (``cell_id``, ``cell_label``, ``seed``, ``step``, ``metric`` —
    or ``name``, as ``Results.metrics`` spells it — and ``value``). ``cells`` chooses and orders the panels: ids or labels, or a frame with
    ``cell_id`` / ``cell_label`` (the trials frame or a summary) so that cells without curves yet
    appear as empty ``pending`` panels. Panels share both axes. The mean at a step is over the
    seeds that logged it.
    """
    key = "metric" if "metric" in curves.columns else "name" if "name" in curves.columns else None
    data = curves[curves[key] == metric] if key else curves
    order = _cell_order(data, cells)
    ncols = max(1, min(ncols, len(order) or 1))
    nrows = max(1, math.ceil(len(order) / ncols))
    label_width = label_width or max(14, int(96 / ncols))
    with mpl.rc_context(STYLE):
        fig = _figure(WIDTH, 0.5 + 1.9 * nrows)
        if not order:
            return _no_data(fig, f"no {_metric_label(metric)} curves yet")
        axes = np.atleast_1d(fig.subplots(nrows, ncols, sharex=True, sharey=True, squeeze=False)).ravel()
        for ax, (cid, label) in zip(axes, order, strict=False):
            sub = data[data["cell_id"] == cid]
            ax.set_title(wrap(label, label_width), fontsize=7.5)
            if sub.empty:
                ax.text(0.5, 0.5, "pending", ha="center", va="center", transform=ax.transAxes, color="0.5")
                continue
            for _, run in sub.groupby("seed", sort=True):
                run = run.sort_values("step")
                ax.plot(run["step"], run["value"], lw=0.7, alpha=0.45, color=SEED_COLOR)
            mean = sub.groupby("step", sort=True)["value"].mean()
            ax.plot(mean.index, mean.to_numpy(), lw=2, color=MEAN_COLOR)
            _chance_line(ax, chance)
        for ax in axes[len(order) :]:
            ax.set_axis_off()
        for ax in axes[: len(order)]:
            ax.tick_params(labelbottom=True)
        fig.supxlabel("step", fontsize=8)
        fig.supylabel(_metric_label(metric), fontsize=8)
        handles = [
            mpl.lines.Line2D([], [], lw=0.7, color=SEED_COLOR, label="seed"),
            mpl.lines.Line2D([], [], lw=2, color=MEAN_COLOR, label="mean over seeds"),
        ]
        if chance is not None:
            handles.append(mpl.lines.Line2D([], [], ls="--", lw=1, color=CHANCE_COLOR, label="chance"))
        fig.legend(handles=handles, loc="outside upper center", ncols=len(handles), frameon=False)
    return fig
