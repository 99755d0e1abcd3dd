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

from ablate import stats
from ablate.report import format as fmt
from ablate.report import plotting
from ablate.report.plotting import Channels, wrap
from ablate.stats import norms as sn

__all__ = [
    "COLUMN_WORDS",
    "MEASURE_WORDS",
    "VALUE_WORDS",
    "anova_table",
    "check_table",
    "drift_table",
    "effects_table",
    "factor_sentences",
    "interaction_figure",
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

#: Each measure of ``stats.norms.MEASURES`` in words: where it varies, what varies, and as a column heading.
MEASURE_WORDS = {"training": "over training steps", "depth": "over layers", "seeds": "over seeds",
                 "final": "at the end of training"}
VALUE_WORDS = {"training": "CV of ‖x‖²", "depth": "CV of ‖x‖²", "seeds": "sd of log ‖x‖²", "final": "‖x‖²"}
COLUMN_WORDS = {"training": "CV over training steps", "depth": "CV over layers", "seeds": "sd of log ‖x‖² over seeds",
                "final": "final ‖x‖²"}
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
    """Compact labels for figures and tables: when every label reads ``k1=v1, k2=v2, …`` with the
    same two or more keys, ("v1 · v2 · …", "k1 · k2 · …" as the key); otherwise (one factor: a bare
    level such as "0" would not say of what) the labels unchanged and no key."""
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
    if len(names) < 2:
        return list(order), ""
    short = [n.rsplit(".", 1)[-1] for n in names]
    return [(cid, " · ".join(v)) for cid, _, v in parsed], " · ".join(short)


# --- text -----------------------------------------------------------------------------------------------


def _alpha(confidence: float) -> str:
    """The α an interval at ``confidence`` tests at, as the reports say it: ``α = 0.05``."""
    return f"α = {1 - confidence:.2g}"


def _value_cells(table: pd.DataFrame, confidence: float = 0.95) -> dict[str, list[str]]:
    """Each measure's column of ``stability_table`` as it prints: value [CI] per variant."""
    out = {}
    for m in sn.MEASURES:
        col = sn.VALUE[m]  # geometric means; over layers (mean √CV)²; over seeds the sd
        v, lo, hi = table[col], table[f"{col}_low"], table[f"{col}_high"]
        out[m] = [fmt.with_ci(a, b, c, sig=True) for a, b, c in zip(v, lo, hi, strict=True)]
    return out


def _ratio_cell(r: pd.Series) -> str:
    """A comparison's ratio as its table prints it: ratio [CI], or the raw values when untested."""
    if not r["testable"] and r["measure"] == "seeds":  # one spread per side: no per-seed values to show
        return f"{_sig(r['ratio'])}×" if fmt.finite(r["ratio"]) else fmt.DASH
    if not r["testable"]:
        cell = ", ".join(_sig(np.exp(v)) for v in r["values_cell"] or ())
        ref = ", ".join(_sig(np.exp(v)) for v in r["values_ref"] or ())
        return f"{_sig(r['ratio'])}× (per seed {cell or fmt.DASH} vs {ref or fmt.DASH})" if fmt.finite(r["ratio"]) else fmt.DASH
    return fmt.with_ci(r["ratio"], r["ratio_low"], r["ratio_high"], sig=True, unit="×")


#: Why a variant can lack a measure.
_NO_VALUE = {"training": "fewer than two probe steps", "depth": "one layer", "seeds": "one seed",
             "final": "no probe"}


def _verdict(r: pd.Series) -> str:
    if not r["testable"]:
        return fmt.verdict(None, few=f"too few seeds to test (n{fmt.NBSP}={fmt.NBSP}{int(r['n'])})")
    return fmt.verdict(bool(r["significant"]))


def _unreachable(comp: pd.DataFrame, alpha: float) -> dict[str, str]:
    """Per measure where no comparison can be significant: why (the exact test's floor against
    Holm's first threshold), in the accuracy report's words."""
    out = {}
    for m, group in comp.groupby("measure", sort=False):
        tested = group[group["testable"]]
        if tested.empty:
            continue
        floor, holm = float(tested["p_min"].min()), alpha / max(1, len(tested))
        if floor > holm:
            out[str(m)] = (f"with {int(tested['n'].max())} seeds the exact test cannot give a p below {fmt.pval(floor)}, "
                           f"and Holm's first threshold over {len(tested)} comparisons is {fmt.pval(holm)}: "
                           "no comparison can be significant")
    return out


def summary_text(table: pd.DataFrame, comp: pd.DataFrame, reference: tuple[str, str],
                 anova: pd.DataFrame | None = None, effects: pd.DataFrame | None = None,
                 check: pd.DataFrame | None = None, alpha: float = 0.05, confidence: float = 0.95) -> str:
    """Markdown: how each variant's norm compares with the declared ``reference`` (cell id, why)
    on each measure, which factor effects the ANOVA finds, and the white-noise check — every number
    as the tables print it (``stability_table``, ``ratio_table``, ``anova_table``, ``effects_table``,
    ``check_table``), the verdicts in the one wording (``format.verdict``)."""
    if table.empty:
        return "No probe data yet."
    ref_id, why = reference
    labels = dict(zip(table["cell_id"], table["variant"], strict=True))
    ref_label = labels.get(ref_id, ref_id)
    cells = _value_cells(table, confidence)
    head = [f"Every variant is compared with the reference **{ref_label}** ({why}), declared before the "
            "results were seen, on one value per seed and measure."]
    n_max = int(table["seeds"].max()) if len(table) else 0
    if n_max < stats.MIN_N_TEST:
        head.append(f"**Nothing is tested: {n_max} seed{'s' if n_max != 1 else ''} per variant.** A test needs at "
                    f"least {stats.MIN_N_TEST} (the seed is the unit: with two, a spread rests on one degree of "
                    "freedom); the values and ratios below are descriptive.")
    lines: list[str] = []
    floors = _unreachable(comp, alpha) if len(comp) else {}
    if floors and len(set(floors.values())) == 1 and len(floors) == comp["measure"].nunique():
        said = next(iter(floors.values()))  # the same on every measure: said once
        head.append(f"**{said[:1].upper() + said[1:]}** on any measure; the intervals and the factor "
                    "analysis below still apply.")
        floors = {}
    for m in sn.MEASURES:
        rows = comp[comp["measure"] == m] if len(comp) else comp
        have = [i for i, c in enumerate(cells[m]) if c != fmt.DASH]
        if not have:
            continue
        words = MEASURE_WORDS[m]
        ref_row = table.index[table["cell_id"] == ref_id]
        ref_cell = cells[m][table.index.get_loc(ref_row[0])] if len(ref_row) else fmt.DASH
        head_words = f"- **{words[:1].upper() + words[1:]}** ({VALUE_WORDS[m]})"
        if ref_cell == fmt.DASH:  # e.g. over layers with a one-layer reference: nothing to compare with it
            listed = "; ".join(f"{table.loc[i, 'variant']} {cells[m][table.index.get_loc(i)]}"
                               for i in table.index[[c != fmt.DASH for c in cells[m]]])
            lines.append(f"{head_words}: the reference {ref_label} has no value ({_NO_VALUE[m]}), so nothing is "
                         f"compared with it; the factor analysis below takes these: {listed}.")
            continue
        parts = [f"{head_words}: {ref_label} {ref_cell}"]
        for _, r in rows.iterrows():
            i = table.index.get_loc(table.index[table["cell_id"] == r["cell_id"]][0])
            value = cells[m][i].split(" [")[0]
            if r["testable"]:
                parts.append(f"{labels[r['cell_id']]} {value}, {_ratio_cell(r)} the reference's ({_verdict(r)})")
            elif fmt.finite(r["ratio"]):  # the head or Table 2 says why it is not tested
                parts.append(f"{labels[r['cell_id']]} {value} ({_sig(r['ratio'])}×, not tested)")
        text = "; ".join(parts) + "."
        values = table[sn.VALUE[m]].to_numpy(float)
        if m != "final" and np.isfinite(values).sum() > 2:
            low = table.iloc[int(np.nanargmin(values))]
            text += f" Lowest: {low['variant']} (descriptive, not a test)."
        if m in floors:
            text += f" ({floors[m][:1].upper() + floors[m][1:]}.)"
        lines.append(text)
    lines += factor_sentences(anova, effects, alpha)
    if check is not None and not check.empty:
        printed = check_table(check)
        init = check.index[(check["when"] == "init") & check["noise_over_theory"].notna()]
        if len(init):
            ratio = check.loc[init, "noise_over_theory"]
            lo, hi = printed.loc[ratio.idxmin(), "noise / theory"], printed.loc[ratio.idxmax(), "noise / theory"]
            span = lo if lo == hi else f"{lo} to {hi}"
            lines.append(f"- **White-noise check**: at initialisation the measured ‖x<sub>L</sub>‖² on white-noise "
                         f"input is {span} times the theory across the variants (1 would be exact; Table 5).")
    return "\n".join([" ".join(head), "", *lines])


def _term_words(term: str, measure: str) -> str:
    parts = term.split(" × ")
    what = "the final ‖x‖²" if measure == "final" else f"the {VALUE_WORDS[measure]} {MEASURE_WORDS[measure]}"
    if len(parts) == 1:
        return f"**{parts[0]}** changes {what}"
    return f"**the effect of {parts[0]} on {what} depends on {parts[1]}**"


def factor_sentences(anova: pd.DataFrame | None, effects: pd.DataFrame | None, alpha: float = 0.05) -> list[str]:
    """One sentence per ANOVA term that passes (Holm across the screen), with its F, p and the
    geometric marginal means of a main effect as ``effects_table`` prints them; one sentence
    when none passes."""
    if anova is None or anova.empty:
        return []
    printed = anova_table(anova)
    out = []
    for i, r in anova.iterrows():
        if not r["significant"]:
            continue
        p_text = printed.loc[i, "p (Holm)"]
        stat = f"F({printed.loc[i, 'df']}) = {printed.loc[i, 'F']}, p (Holm) {'< ' + p_text[1:] if p_text.startswith('<') else '= ' + p_text}"
        text = f"- {_term_words(r['term'], r['measure'])} ({stat}; partial η² {printed.loc[i, 'partial η²']})"
        if effects is not None and len(effects) and " × " not in r["term"]:
            shown = effects_table(effects)
            sub = effects[(effects["measure"] == r["measure"]) & (effects["factor"] == r["term"])]
            if len(sub):
                col = shown.columns[-1]
                text += ": " + ", ".join(f"{sub.loc[j, 'level']} {shown.loc[j, col].split(' [')[0]}" for j in sub.index)
        out.append(text + ".")
    if not out:
        out.append(f"- **Factor effects**: no factor or two-factor interaction changes any measure significantly "
                   f"(ANOVA of the per-seed values, {len(anova)} terms, Holm across them, α = {alpha:g}; Table 3).")
    return out


def provenance_rows(df: pd.DataFrame) -> list[tuple[str, str]]:
    """What this report read, as rows for ``provenance.provenance_table``: curve rows and kinds."""
    kinds = ", ".join(sorted(set(df["kind"]))) if len(df) else fmt.DASH
    return [("curve rows", f"{len(df):,}"), ("curve kinds", kinds), ("numpy", np.__version__)]


# --- tables -------------------------------------------------------------------------------------------


def stability_table(table: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """``stats.norms.stability`` for print: counts, mean norm, and each measure's value [CI]."""
    out = pd.DataFrame({
        "variant": table["variant"],
        "seeds": table["seeds"],
        "layers": table["layers"],
        "probe steps": table["steps"],
        "mean ‖x‖²": table["mean_norm"].map(_sig),
    })
    pct = fmt.level(confidence)
    for m, cells in _value_cells(table, confidence).items():
        out[f"{COLUMN_WORDS[m]} [{pct} CI]"] = cells
    return out


def ratio_table(comp: pd.DataFrame, confidence: float = 0.95, min_ratio: float | None = None) -> pd.DataFrame:
    """``stats.norms.compare`` for print: per measure and variant, the seeds, the ratio to the
    reference [CI] (or the per-seed values when untested), the exact test, p, Holm's p, verdict,
    and — with ``min_ratio`` — the seeds a ratio of ``min_ratio`` would need (the power line)."""
    pct = fmt.level(confidence)
    rows = []
    for _, r in comp[~comp["measure"].isin(unreferenced(comp))].iterrows():
        n = f"{int(r['n_pairs'])}{fmt.NBSP}pairs" if r["paired"] else f"{int(r['n_cell'])}{fmt.NBSP}vs{fmt.NBSP}{int(r['n_ref'])}"
        rows.append({"measure": MEASURE_WORDS[r["measure"]], "variant": r["cell_label"], "seeds": n,
                     f"ratio to the reference [{pct} CI]": _ratio_cell(r),
                     "test": str(r["test"]) if r["testable"] else fmt.DASH, "p": fmt.pval(r["p"]),
                     "p (Holm)": fmt.pval(r["p_adj"]), "verdict": f"{_verdict(r)} {r['mark']}".strip(),
                     "power": fmt.count(r["seeds_needed"]) if fmt.finite(r["seeds_needed"]) else fmt.DASH})
    cols = ["measure", "variant", "seeds", f"ratio to the reference [{pct} CI]", "test", "p", "p (Holm)", "verdict"]
    out = pd.DataFrame(rows, columns=[*cols, "power"])
    if min_ratio is None:
        return out[cols]
    return out.rename(columns={"power": f"seeds for {fmt.num(min_ratio, 3, sig=True)}×"})


def unreferenced(comp: pd.DataFrame) -> list[str]:
    """The measures the reference has no value of (over layers, with a one-layer reference): their
    rows would each say "0 vs 0"; ``ratio_table`` leaves them out and ``unreferenced_note`` says why."""
    if comp.empty:
        return []
    return [str(m) for m, g in comp.groupby("measure", sort=False) if (g["n_ref"] == 0).all()]


def unreferenced_note(comp: pd.DataFrame, reference: str) -> str:
    """One sentence for the measures ``ratio_table`` leaves out, or ""."""
    gone = unreferenced(comp)
    if not gone:
        return ""
    words = ", ".join(f"{MEASURE_WORDS[m]} ({_NO_VALUE[m]})" for m in gone)
    return (f" Not in the table: {words} — the reference {reference} has no value there, so nothing is compared "
            "with it; the factor analysis below takes the variants that have one.")


def effects_table(effects: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """``stats.norms.main_effects`` for print: the geometric marginal mean [CI] of each level."""
    pct = fmt.level(confidence)
    return pd.DataFrame({
        "measure": effects["measure"].map(lambda m: f"{COLUMN_WORDS[m]}"),
        "factor": effects["factor"], "level": effects["level"].astype(str),
        "cells": effects["n_cells"].astype(int).astype(str), "runs": effects["n"].astype(int).astype(str),
        f"geometric marginal mean [{pct} CI]": [fmt.with_ci(v, lo, hi, sig=True) for v, lo, hi in
                                               zip(effects["value"], effects["low"], effects["high"], strict=True)],
    }, index=effects.index)


def anova_table(anova: pd.DataFrame) -> pd.DataFrame:
    """``stats.norms.factor_anova`` for print: measure, term, df (term, residual), F, p, Holm's p,
    partial η², verdict."""
    return pd.DataFrame({
        "measure": anova["measure"].map(lambda m: COLUMN_WORDS[m]),
        "term": anova["term"],
        "df": [f"{int(a)}, {int(b)}" for a, b in zip(anova["df"], anova["df_resid"], strict=True)],
        "F": anova["F"].map(lambda x: fmt.num(x, 2)),
        "p": anova["p"].map(fmt.pval),
        "p (Holm)": anova["p_adj"].map(fmt.pval),
        "partial η²": anova["eta_sq_partial"].map(lambda x: fmt.num(x, 3)),
        "verdict": [f"{fmt.verdict(bool(s))} {mk}".strip() for s, mk in zip(anova["significant"], anova["mark"],
                                                                            strict=True)],
    }, index=anova.index)


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
