"""The ``norm_stability`` report's presentation: its tables, its sentences and its figures.

Every function takes the frames of ``ablate.stats.norms`` (the analysis) and returns a display
frame (strings, one header per column), markdown text, or a matplotlib Figure; nothing here
computes a statistic, and the sentences use only the numbers the tables print, formatted by
``ablate.report.format``. Adding a section to the report touches its analysis function in
``ablate.stats.norms``, its table / text / figure here, and the notebook
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

from ablate.report import format as fmt
from ablate.report import plotting
from ablate.report.plotting import Channels, wrap
from ablate.stats import norms as sn

__all__ = [
    "MEASURE_WORDS",
    "check_table",
    "drift_table",
    "factor_table",
    "grad_figure",
    "header_lines",
    "norm_vs_step",
    "norm_vs_time",
    "provenance_rows",
    "ratio_table",
    "short_order",
    "spectrum_figure",
    "stability_table",
    "summary_text",
    "theory_ratio",
]

#: Each measure of ``stats.norms.MEASURES`` in words.
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


def _alpha(confidence: float) -> str:
    """The α an interval at ``confidence`` tests at, as the reports say it: ``α = 0.05``."""
    return f"α = {1 - confidence:.2g}"


def _ratio_verdict(o: pd.Series, at: str = "") -> str:
    tested = bool(np.isfinite(o["ratio_low"]))
    return fmt.verdict(bool(o["ratio_low"] > 1.0) if tested else None, at, few="too few units to test")


def _measure_line(m: str, table: pd.DataFrame, ratios: pd.DataFrame, at: str
                  ) -> tuple[str | None, str | None, int, int]:
    """The bullet of one measure, the most stable variant's label (None without ratios), and of the
    other variants how many it is significantly more stable than, out of how many."""
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
        return line, None, 0, 0
    ref_id, ref_label = r["reference_id"].iloc[0], r["reference"].iloc[0]
    ref_row = table[table["cell_id"] == ref_id].iloc[0]
    parts = [f"- **{words}**: {ref_label} varies least "
             f"(CV {fmt.with_ci(ref_row[f'cv_{m}'], ref_row[f'cv_{m}_low'], ref_row[f'cv_{m}_high'], sig=True)})"]
    others = r[r["cell_id"] != ref_id].sort_values("ratio")
    n_sig = int((others["ratio_low"] > 1.0).sum())
    for _, o in others.iterrows():
        trow = table[table["cell_id"] == o["cell_id"]].iloc[0]
        ratio = fmt.with_ci(o["ratio"], o["ratio_low"], o["ratio_high"], sig=True, unit="×")
        parts.append(f"{o['variant']}: CV {_sig(trow[f'cv_{m}'])}, {ratio} as large ({_ratio_verdict(o, at)})")
    return "; ".join(parts) + ".", ref_label, n_sig, len(others)


def summary_text(table: pd.DataFrame, ratios: pd.DataFrame, check: pd.DataFrame | None = None,
                 drift: pd.DataFrame | None = None, by_factor: pd.DataFrame | None = None,
                 confidence: float = 0.95) -> str:
    """Markdown stating which variant is more stable and by how much — every number as the tables
    print it (``stability_table``, ``ratio_table``, ``factor_table``, ``check_table``,
    ``drift_table``), significance in the one wording (``format.verdict``) of the ratio table's
    verdict column, so the opening line and the bullets cannot disagree."""
    if table.empty:
        return "No probe data yet."
    at = _alpha(confidence)
    lines: list[str] = []
    best: dict[str, str] = {}
    wins: dict[str, tuple[int, int]] = {}
    for m in sn.MEASURES:
        line, winner, n_sig, n_other = _measure_line(m, table, ratios, at)
        if line:
            lines.append(line)
        if winner is not None:
            best[m], wins[m] = winner, (n_sig, n_other)
    head = []
    if best:
        winners = set(best.values())
        counts = "; ".join(f"{MEASURE_WORDS[m]} against {k} of {n}" for m, (k, n) in wins.items())
        if len(winners) == 1:
            (winner,) = winners
            n = len(best)
            text = (f"**{winner}** has the most stable state norm (lowest CV) on {'every' if n > 1 else 'the one'} "
                    f"measure available ({', '.join(MEASURE_WORDS[m] for m in best)}). ")
            if all(k == n_ for k, n_ in wins.values()):
                text += f"Its lead over every other variant is {fmt.verdict(True, at)} on each ({counts})."
            elif not any(k for k, _ in wins.values()):
                text += f"Its lead over the other variants is {fmt.verdict(False, at)} on any measure ({counts})."
            else:
                text += f"Its lead is {fmt.verdict(True, at)} {counts} other variants."
            head.append(text)
        else:
            head.append("No variant is the most stable on every measure: "
                        + "; ".join(f"{MEASURE_WORDS[m]}: {v} (its lead {fmt.verdict(True, at)} against {k} of {n_})"
                                    for m, v in best.items() for k, n_ in [wins[m]]) + ".")
    if by_factor is not None and not by_factor.empty and len(table) > 2:
        printed = factor_table(by_factor)
        for factor, group in by_factor.groupby("factor", sort=False):
            parts = []
            for m in sn.MEASURES:
                g = group[np.isfinite(group[f"cv_{m}"].to_numpy(float))]
                if len(g) < 2:
                    continue
                lo, hi = g[f"cv_{m}"].idxmin(), g[f"cv_{m}"].idxmax()
                col = f"mean CV {MEASURE_WORDS[m]}"
                parts.append(f"{MEASURE_WORDS[m]} {g.loc[lo, 'level']} {printed.loc[lo, col]} vs {g.loc[hi, 'level']} "
                             f"{printed.loc[hi, col]}")
            if parts:
                lines.append(f"- **By {factor}** (mean CV over the variants at each level, lowest vs highest): "
                             + "; ".join(parts) + ".")
    if check is not None and not check.empty:
        printed = check_table(check)
        init = check.index[(check["when"] == "init") & check["noise_over_theory"].notna()]
        if len(init):
            ratio = check.loc[init, "noise_over_theory"]
            lo, hi = printed.loc[ratio.idxmin(), "noise / theory"], printed.loc[ratio.idxmax(), "noise / theory"]
            span = lo if lo == hi else f"{lo} to {hi}"
            lines.append(f"- **White-noise check**: at initialisation the measured ‖x<sub>L</sub>‖² on white-noise "
                         f"input is {span} times the theory across the variants (1 would be exact).")
        end = check.index[(check["when"] == "end") & check["stationary"].notna()]
        stat = [f"{check.loc[i, 'variant']} {printed.loc[i, 'stationary theory']}" for i in end]
        if stat:
            lines.append("- **Stationary theory** E‖x<sub>∞</sub><sup>h</sup>‖² per head at the end of training "
                         "(1 by construction for ξ): " + "; ".join(stat) + ".")
    if drift is not None and not drift.empty:
        printed = drift_table(drift)
        parts = [f"{drift.loc[i, 'variant']} {printed.loc[i, 'median |Δ|λ||']} (largest {printed.loc[i, 'largest |Δ|λ||']})"
                 for i in drift.index]
        lines.append("- **Spectrum drift**: median change of |λ| per mode from the first to the last probe: "
                     + "; ".join(parts) + ".")
    return "\n".join(head + [""] + lines)


def provenance_rows(df: pd.DataFrame) -> list[tuple[str, str]]:
    """What this report read, as rows for ``provenance.provenance_table``: curve rows and kinds."""
    kinds = ", ".join(sorted(set(df["kind"]))) if len(df) else fmt.DASH
    return [("curve rows", f"{len(df):,}"), ("curve kinds", kinds), ("numpy", np.__version__)]


# --- tables -------------------------------------------------------------------------------------------


def stability_table(table: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """``stats.norms.stability`` for print: counts, mean norm, and each measure's CV [CI]."""
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
    """``stats.norms.stability_ratios`` for print, without each reference's own 1×."""
    ratios = ratios[ratios["cell_id"] != ratios["reference_id"]]
    return pd.DataFrame({
        "measure": ratios["measure"].map(MEASURE_WORDS),
        "variant": ratios["variant"],
        "reference (most stable)": ratios["reference"],
        f"CV ratio [{fmt.level(confidence)} CI]": [
            fmt.with_ci(r, lo, hi, sig=True, unit="×")
            for r, lo, hi in zip(ratios["ratio"], ratios["ratio_low"], ratios["ratio_high"], strict=True)
        ],
        "verdict": [_ratio_verdict(o) for _, o in ratios.iterrows()],
    })


def factor_table(by_factor: pd.DataFrame) -> pd.DataFrame:
    """``stats.norms.stability_by_factor`` for print: each level's mean CV per measure."""
    out = by_factor[["factor", "level", "cells"]].copy()
    for m, words in MEASURE_WORDS.items():
        out[f"mean CV {words}"] = by_factor[f"cv_{m}"].map(_sig)
    return out


def check_table(check: pd.DataFrame) -> pd.DataFrame:
    """``stats.norms.theory_check`` for print."""
    return pd.DataFrame({
        "variant": check["variant"], "when": check["when"] + " (step " + check["step"].astype(str) + ")",
        "probe batch, last t": check["probe_last"].map(_sig), "white noise, last t": check["noise_last"].map(_sig),
        "theory, last t": check["theory_last"].map(_sig), "noise / theory": check["noise_over_theory"].map(_sig),
        "stationary theory": check["stationary"].map(_sig),
    })


def drift_table(drift: pd.DataFrame) -> pd.DataFrame:
    """``stats.norms.spectrum_drift`` for print."""
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
