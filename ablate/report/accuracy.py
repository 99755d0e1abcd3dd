"""The ``accuracy`` report's presentation: its tables, its sentences and its figures.

Every function takes a frame from ``ablate.stats`` (the analysis) or the results API and returns a
display frame (strings, one header per column), a list of sentences, or a matplotlib Figure.
Sentences are made only from the strings the tables print (each sentence function builds the
table it speaks for and quotes its cells), with one wording of significance (``format.verdict``);
numbers, intervals, p-values and missing values are written by ``ablate.report.format``. Figures
share the page size, style and the one factor → channel mapping (``plotting.Channels``) of
``ablate.report.plotting``: a cell has the same colour, line style and marker in every figure.
Adding a section to the report touches its analysis function in ``ablate.stats``, its table /
sentences / figure here, and the notebook ``ablate/report/notebooks/accuracy.py`` that shows them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib as mpl
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from ablate import stats
from ablate.report import plotting
from ablate.report.format import (
    DASH,
    NBSP,
    count,
    finite,
    level,
    metric_name,
    num,
    p_is,
    pval,
    share,
    signed,
    verdict,
    with_ci,
)
from ablate.report.plotting import Channels, wrap
from ablate.report.provenance import provenance_table, spec_text, versions_table

__all__ = [
    "STILL_IMPROVING",
    "accuracy_by_cell",
    "anova_intro",
    "anova_table",
    "cell_table",
    "comparison_intro",
    "comparison_plot",
    "comparison_sentences",
    "comparison_table",
    "convergence_sentences",
    "convergence_table",
    "failure_table",
    "few_run_table",
    "header_lines",
    "interaction_grid",
    "interaction_plot",
    "learning_curves",
    "main_effects_plot",
    "main_effects_table",
    "no_anova_text",
    "performance_profile_plot",
    "power_table",
    "provenance_table",
    "reference_table",
    "spec_text",
    "summary_sentences",
    "tuning_intro",
    "tuning_sentences",
    "tuning_table",
    "versions_table",
]

NEVER_COLOR = plotting.GREY["reference"]
CHANCE_COLOR = plotting.GREY["reference"]
#: The mark after a cell that was still improving when its step budget ran out.
STILL_IMPROVING = "†"

# --- tables ------------------------------------------------------------------------------------


def _improving(conv: pd.DataFrame | None) -> set[str]:
    if conv is None or conv.empty:
        return set()
    return set(conv.loc[conv["still_improving"].astype(bool), "cell_id"])


def _name(label: Any, cid: Any, improving: set[str]) -> str:
    return str(label) + (f" {STILL_IMPROVING}" if cid in improving else "")


def cell_table(summary: pd.DataFrame, reference_id: str | None = None, confidence: float = 0.95,
               chance_known: bool = True, *, n_test: int | None = None,
               conv: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per cell (``stats.cell_summary``): status, n, mean [CI], the seed-to-seed sd beside the test
    set's own binomial standard error (when the test set's size ``n_test`` is known), median, and
    the diverged / never-learned / failed / pending counts, each in its own column. A cell still
    improving at the end of its budget (``stats.convergence``) is marked ``†``. ``status`` is left
    out when every cell is complete, ``failed`` / ``pending`` when no run is."""
    pct = level(confidence)
    improving = _improving(conv)
    se_col = f"test-set SE (N{NBSP}={NBSP}{n_test:,})" if n_test else None
    rows = []
    for _, r in summary.iterrows():
        label = _name(r["cell_label"], r["cell_id"], improving) + (
            " (reference)" if r["cell_id"] == reference_id else "")
        row = {
            "cell": label,
            "status": str(r["status"]).replace("_", " "),
            "n": int(r["n"]),
            f"mean [{pct} CI]": with_ci(r["mean"], r["ci_low"], r["ci_high"]),
            "sd over seeds": num(r["sd"]),
        }
        if se_col:
            row[se_col] = num(stats.binomial_se(r["mean"], n_test))
        row.update({
            "median": num(r["median"]),
            "diverged": share(r["n_diverged"], r["n_finished"]),
            "never learned": share(r["n_never_learned"], r["n_finished"]) if chance_known else DASH,
            "failed": count(r["n_failed"]),
            "pending": count(r["n_pending"]),
        })
        rows.append(row)
    cols = ["cell", "status", "n", f"mean [{pct} CI]", "sd over seeds", *([se_col] if se_col else []), "median",
            "diverged", "never learned", "failed", "pending"]
    out = pd.DataFrame(rows, columns=cols)
    # Columns with nothing to say give their room to the others: status when every cell is complete
    # (the header says so), failed and pending when no run is.
    drop = [c for c, empty in (("status", (out["status"] == "complete").all()), ("failed", (out["failed"] == "").all()),
                               ("pending", (out["pending"] == "").all())) if empty and len(out)]
    return out.drop(columns=drop)


_ES = {"d_z": "d_z", "hedges_g": "g"}


def _diffs_text(r: pd.Series) -> str:
    """The raw numbers of a comparison that was not tested: per-seed differences, or both sides."""
    if r["paired"] and r["diffs"] is not None and len(r["diffs"]):
        return "Δ per seed: " + ", ".join(signed(d) for d in r["diffs"])
    cell, ref = r["values_cell"] or (), r["values_ref"] or ()
    if not cell or not ref:
        return DASH
    return f"{', '.join(num(v) for v in cell)} vs {', '.join(num(v) for v in ref)}"


def test_verdict(r: pd.Series) -> str:
    """The one wording of a comparison's outcome, as its table prints it and its sentence says it:
    ``significant`` / ``not significant`` (after Holm, at α), or ``too few seeds to test (n = 2)``."""
    if not r["testable"]:
        return verdict(None, "", few=f"too few seeds to test (n{NBSP}={NBSP}{int(r['n'])})")
    return verdict(bool(r["significant"]), "")


def comparison_table(comp: pd.DataFrame, confidence: float = 0.95, conv: pd.DataFrame | None = None,
                     alpha: float | None = None) -> pd.DataFrame:
    """Per compared cell (``stats.compare_to_reference``): n, difference [t CI] (or the raw
    differences when there are too few seeds to test), the exact test, its p and Holm-adjusted p
    (printed on the side of ``alpha`` they fall: ``format.pval``), the verdict with its mark, the
    t-test's Holm-adjusted p beside it, and the effect size [noncentral-t CI]."""
    pct = level(confidence)
    improving = _improving(conv)
    rows = []
    for _, r in comp.iterrows():
        if r["paired"]:
            n = f"{int(r['n_pairs'])}{NBSP}pairs"
        else:
            n = f"{int(r['n_cell'])}{NBSP}vs{NBSP}{int(r['n_ref'])}"
        es = DASH
        if finite(r["effect_size"]):
            es = f"{_ES.get(r['effect_size_kind'], r['effect_size_kind'])}{NBSP}" + with_ci(
                r["effect_size"], r["es_ci_low"], r["es_ci_high"], digits=2, sign=True)
        if r["testable"]:
            diff = with_ci(r["mean_diff"], r["diff_ci_low"], r["diff_ci_high"], sign=True)
            if not finite(r["diff_ci_low"]) and r["paired"] and r["diffs"]:
                diff += " (every seed: no spread)"
        else:
            diff = _diffs_text(r)
        mark = r["mark"] or ("n.s." if r["testable"] else "")
        rows.append({
            "cell": _name(r["cell_label"], r["cell_id"], improving),
            "n": n,
            "mean": num(r["mean_cell"]),
            f"Δ vs reference [{pct} CI]": diff,
            "test": str(r["test"]) if r["testable"] else DASH,
            "p": pval(r["p"], alpha),
            "p (Holm)": pval(r["p_adj"], alpha),
            "verdict": f"{test_verdict(r)} {mark}".strip(),
            "t-test p (Holm)": pval(r["t_p_adj"], alpha),
            f"effect size [{pct} CI]": es,
        })
    cols = ["cell", "n", "mean", f"Δ vs reference [{pct} CI]", "test", "p", "p (Holm)", "verdict",
            "t-test p (Holm)", f"effect size [{pct} CI]"]
    return pd.DataFrame(rows, columns=cols)


def comparison_intro(comp: pd.DataFrame, alpha: float = 0.05) -> list[str]:
    """Which test the comparisons use and why, in the report's words (the numbers from ``comp``)."""
    tested = comp[comp["testable"]]
    text = [
        "Each cell against the reference on the seeds both ran (paired), or on all their runs when they share "
        "fewer than two seeds (unpaired). **The test is an exact permutation test** of the mean difference — "
        "sign-flip when paired, relabelling when unpaired: it assumes no normal distribution and stays exact when "
        "accuracies tie, as they do on a finite test set, or when every seed shows the same difference (where the "
        "t-test divides by a zero spread). Its p-values are Holm-corrected across the comparisons; the t-test's "
        "are shown beside them for reference. A comparison on fewer than three seeds is not tested: its raw "
        "differences are shown instead. Marks: \\* p_adj < α, \\*\\* < 0.01, \\*\\*\\* < 0.001; n.s. otherwise. "
        "Intervals: the difference's is the t interval (paired t, or Welch's); the effect size is Cohen's d_z "
        "(paired) or Hedges' g, its interval the exact one for the standardised difference (noncentral t).",
    ]
    if len(tested):
        floor = tested["p_min"].max()
        holm = alpha / len(tested)
        n = int(tested["n"].min())
        if floor > holm:
            text.append(f"**With {n} seeds no comparison can be significant here:** the exact test cannot give a "
                        f"p below {pval(floor, alpha)}, and Holm's first threshold over the {len(tested)} tested "
                        f"comparisons is α/{len(tested)} = {pval(holm, alpha)}. The power table says how many "
                        "seeds would.")
    return text


def power_table(comp: pd.DataFrame, power: float = 0.8) -> pd.DataFrame:
    """The power line of each comparison (``stats.compare_to_reference``): the observed spread, the
    power now to detect a difference of ``stats.min_effect`` and the seeds that would reach
    ``power``, at Holm's first threshold α/m over the m comparisons tested."""
    rows = []
    for _, r in comp.iterrows():
        spread = num(r["sd_diff"])
        if not finite(r["sd_diff"]):
            note = "spread unknown (one seed)"
        elif r["sd_diff"] == 0:
            note = "no spread in these seeds"
        else:
            note = "rough: spread from two seeds" if int(r["n"]) < stats.MIN_N_TEST else ""
        rows.append({
            "cell": str(r["cell_label"]),
            "n": int(r["n"]),
            "sd": spread,
            "power now": f"{r['power_now']:.0%}" if finite(r["power_now"]) else DASH,
            f"seeds for {power:.0%} power": str(int(r["seeds_needed"])) if finite(r["seeds_needed"]) else DASH,
            "at α/m": pval(r["power_alpha"]),
            "note": "; ".join(filter(None, [note, "" if r["paired"] else "unpaired: pooled sd of the runs"])),
        })
    cols = ["cell", "n", "sd", "power now", f"seeds for {power:.0%} power", "at α/m", "note"]
    return pd.DataFrame(rows, columns=cols).rename(columns={"sd": "sd of Δ"})


def few_run_table(few: pd.DataFrame, reference_id: str | None, confidence: float = 0.95) -> pd.DataFrame:
    """``stats.few_run_estimates`` for print: per cell n, the mean with its t interval, the
    interquartile mean with its trimmed-t interval — or, below ``stats.IQM_MIN_N`` runs, where it
    trims nothing, that it is the mean — and the probability of beating the reference with
    Newcombe's interval. Each header names its interval."""
    pct = level(confidence)
    iqm_col = f"IQM [{pct} trimmed-t CI]"
    rows = []
    for _, r in few.iterrows():
        n = int(r["n"])
        if 0 < n < stats.IQM_MIN_N:
            middle = f"= mean (n{NBSP}<{NBSP}{stats.IQM_MIN_N}: nothing trimmed)"
        else:
            middle = with_ci(r["iqm"], r["iqm_ci_low"], r["iqm_ci_high"])
        rows.append({
            "cell": str(r["cell_label"]) + (" (reference)" if r["cell_id"] == reference_id else ""),
            "n": n,
            f"mean [{pct} t CI]": with_ci(r["mean"], r["mean_ci_low"], r["mean_ci_high"]),
            iqm_col: middle,
            f"P(cell > reference) [{pct} Newcombe CI]": (
                with_ci(r["prob_improvement"], r["pi_ci_low"], r["pi_ci_high"], digits=2)
                if r["cell_id"] != reference_id else DASH),
        })
    cols = ["cell", "n", f"mean [{pct} t CI]", iqm_col, f"P(cell > reference) [{pct} Newcombe CI]"]
    return pd.DataFrame(rows, columns=cols)


def _points(gain: Any) -> str:
    """A validation gain as accuracy points: ``+4.1 points``."""
    return f"{signed(100 * float(gain), 1)} points" if finite(gain) else DASH


def _steps(r: pd.Series) -> str:
    if not finite(r["steps_min"]):
        return DASH
    lo, hi = int(r["steps_min"]), int(r["steps_max"])
    used = f"{lo:,}" if lo == hi else f"{lo:,}–{hi:,}"
    return used + (f" of {int(r['budget']):,}" if finite(r["budget"]) else "")


def convergence_table(conv: pd.DataFrame, metric: str = "val accuracy") -> pd.DataFrame:
    """``stats.convergence`` for print: per cell the runs still improving, the largest gain of the
    validation metric over their last 20% of steps, the steps used of the budget, early stops and
    the median best step."""
    rows = []
    for _, r in conv.iterrows():
        known = int(r["n_known"])
        rows.append({
            "cell": _name(r["cell_label"], r["cell_id"], _improving(conv)),
            "runs": int(r["n"]),
            "still improving": (f"{int(r['n_unconverged'])} of {known}" if known else DASH),
            f"{metric} gain, last 20% of steps": _points(r["gain_max"]) if known else DASH,
            "steps used": _steps(r),
            "stopped early": count(r["n_stopped_early"]),
            "best step (median)": f"{int(r['best_step_median']):,}" if finite(r["best_step_median"]) else DASH,
        })
    cols = ["cell", "runs", "still improving", f"{metric} gain, last 20% of steps", "steps used", "stopped early",
            "best step (median)"]
    return pd.DataFrame(rows, columns=cols)


def main_effects_table(effects: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """Per factor and level (``stats.main_effects``): cells with results, runs, marginal mean [CI]."""
    pct = level(confidence)
    rows = []
    for _, r in effects.iterrows():
        rows.append({
            "factor": r["factor"],
            "level": str(r["level"]),
            "cells": f"{int(r['n_cells'])}/{int(r['n_cells_total'])}",
            "runs": int(r["n"]),
            f"marginal mean [{pct} CI]": with_ci(r["mean"], r["ci_low"], r["ci_high"]),
        })
    return pd.DataFrame(rows, columns=["factor", "level", "cells", "runs", f"marginal mean [{pct} CI]"])


def interaction_grid(wide: pd.DataFrame, f1: str, f2: str) -> pd.DataFrame:
    """``stats.interaction_table(wide=True)`` with formatted means and the factors in the corner."""
    out = wide.map(num) if hasattr(wide, "map") else wide.applymap(num)
    out = out.reset_index()
    out.columns = [f"{f1} \\ {f2}", *[str(c) for c in wide.columns]]
    out.iloc[:, 0] = out.iloc[:, 0].astype(str)
    return out


def anova_table(table: pd.DataFrame) -> pd.DataFrame:
    """``stats.anova`` formatted: term, df, sums of squares, F, p with mark, partial η²."""
    rows = []
    for _, r in table.iterrows():
        resid = r["term"] == "Residual"
        rows.append({
            "term": r["term"],
            "df": num(r["df"], 0),
            "sum sq": num(r["sum_sq"], 4, sig=True),
            "mean sq": num(r["mean_sq"], 4, sig=True),
            "F": "" if resid else num(r["F"], 2),
            "p": "" if resid else f"{pval(r['p'])} {r['mark']}".strip(),
            "partial η²": "" if resid else num(r["eta_sq_partial"], 3),
        })
    return pd.DataFrame(rows, columns=["term", "df", "sum sq", "mean sq", "F", "p", "partial η²"])


FAILED = ("diverged", "failed", "killed")


def failure_table(trials: pd.DataFrame, max_message: int = 300) -> pd.DataFrame:
    """Runs that did not complete (diverged, failed, killed): cell, phase, seed, kind, attempts,
    message (shortened to ``max_message`` characters)."""
    bad = trials[trials["status"].isin(FAILED)]
    rows = []
    for _, r in bad.iterrows():
        message = str(r.get("failure_message") or "")
        if len(message) > max_message:
            message = message[: max_message - 1] + "…"
        rows.append({
            "cell": str(r["cell_label"]),
            "phase": str(r.get("phase", "replicate")),
            "seed": int(r["seed"]),
            "kind": str(r.get("failure_kind") or r["status"]),
            "attempts": int(r.get("attempts") or 1),
            "message": message,
        })
    return pd.DataFrame(rows, columns=["cell", "phase", "seed", "kind", "attempts", "message"])


def _params_text(params: Any, digits: int = 4) -> str:
    if not isinstance(params, str | dict) or not params:
        return DASH
    data = json.loads(params) if isinstance(params, str) else params
    parts = []
    for k, v in data.items():
        v = num(v, digits, sig=True) if isinstance(v, float) else str(v)
        parts.append(f"{k}={v}")
    return ", ".join(parts)


def tuning_table(tuning: pd.DataFrame, objective: str) -> pd.DataFrame:
    """Per cell (``Results.tuning``): trials used, the best setting and its objective value."""
    rows = []
    for _, r in tuning.iterrows():
        used = f"{int(r['complete'])} of {int(r['planned'])}"
        extra = [f"{int(r[k])} {k}" for k in ("failed", "unfinished") if int(r[k])]
        rows.append({
            "cell": str(r["cell_label"]),
            "trials complete": used + (f" ({', '.join(extra)})" if extra else ""),
            "best trial": str(int(r["best_index"])) if finite(r["best_index"]) else DASH,
            f"best {metric_name(objective)}": num(r["best_value"]),
            "best setting": _params_text(r["best_params"]),
            "replicates ran": _replicated(r["tuned_from"]),
        })
    return pd.DataFrame(rows, columns=["cell", "trials complete", "best trial", f"best {metric_name(objective)}",
                                       "best setting", "replicates ran"])


#: Tuned values further apart than this factor across cells earn a sentence (``tuning_sentences``).
SPREAD = 2.0


def _at_edge(value: float, dim: Any) -> str | None:
    """"largest" / "smallest" when ``value`` is the space's largest or smallest choice, or lies in
    the outer 5% of its range (on the log scale when the range is); else None."""
    if dim.choices is not None:
        numbers = [c for c in dim.choices if isinstance(c, int | float) and not isinstance(c, bool)]
        if len(numbers) < 2:
            return None
        return "largest" if value == max(numbers) else "smallest" if value == min(numbers) else None
    lo, hi, v = float(dim.low), float(dim.high), float(value)
    if dim.log:
        lo, hi, v = math.log(lo), math.log(hi), math.log(v)
    if hi <= lo:
        return None
    return "largest" if v >= hi - 0.05 * (hi - lo) else "smallest" if v <= lo + 0.05 * (hi - lo) else None


def tuning_sentences(tuning: pd.DataFrame, tune: Any) -> list[str]:
    """What the tuning table's "best setting" column says beyond its rows, per numeric dimension of
    the spec's ``tune``: cells whose best value is at the edge of the search space (the best may lie
    beyond it), and best values more than ``SPREAD``× apart across cells (a difference between cells
    can be one of that setting; when each cell drew its own values, the draws differ too)."""
    best = {str(r["cell_label"]): json.loads(r["best_params"]) for _, r in tuning.iterrows()
            if isinstance(r["best_params"], str) and r["best_params"]}
    out = []
    for path, dim in tune.space.items():
        values = {cell: v for cell, params in best.items() if isinstance(v := params.get(path), int | float)
                  and not isinstance(v, bool)}
        if not values:
            continue
        edges: dict[str, list[str]] = {}
        for cell, v in values.items():
            if (edge := _at_edge(v, dim)) is not None:
                edges.setdefault(edge, []).append(cell)
        for edge, cells in edges.items():
            out.append(f"The best {path} of {_which_cells(cells, list(values))} is at the {edge} end of the "
                       f"search space ({_space_text(dim)}): the best setting may lie beyond it.")
        positive = {c: v for c, v in values.items() if v > 0}
        if len(positive) < 2:
            continue
        low, high = min(positive, key=positive.get), max(positive, key=positive.get)
        ratio = positive[high] / positive[low]
        if ratio <= SPREAD:
            continue
        text = (f"The cells' best {path} spans {num(positive[low], 4, sig=True)} ({low}) to "
                f"{num(positive[high], 4, sig=True)} ({high}), {ratio:.1f}×: a difference between cells can be one "
                f"of {path}.")
        if tune.sampler != "grid":
            text += (f" Each cell drew its own {path} values ({tune.sampler} sampler); `tune.sampler: grid` tries "
                     "the same values in every cell.")
        out.append(text)
    return out


def _which_cells(cells: list[str], every: list[str]) -> str:
    """``cells`` among ``every`` in few words: "every cell", one label, "2 of 8 cells (a; b)" or, for
    most of them, "6 of 8 cells (all but a; b)". Semicolons, because a cell's label has commas."""
    if len(cells) == len(every):
        return "every cell"
    if len(cells) == 1:
        return cells[0]
    if len(cells) > len(every) / 2:
        return f"{len(cells)} of {len(every)} cells (all but {'; '.join(c for c in every if c not in cells)})"
    return f"{len(cells)} of {len(every)} cells ({'; '.join(cells)})"


def _space_text(dim: Any) -> str:
    """One dimension of a search space as the reports write it: ``choices 0.0025, 0.005`` or ``[0.001, 0.01] log``."""
    if dim.choices is not None:
        return "choices " + ", ".join(num(c, 4, sig=True) if isinstance(c, float) else str(c) for c in dim.choices)
    return f"[{dim.low:g}, {dim.high:g}]" + (" log" if dim.log else "")


def _replicated(source: Any) -> str:
    if not isinstance(source, str) or not source:
        return "not yet"
    parts = []
    for s in str(source).split("; "):
        _, _, rest = s.partition("/tune/")
        parts.append(f"tuning trial {rest}" if rest else s)
    return "; ".join(parts)


def reference_table(refs: pd.DataFrame, trials: pd.DataFrame, summary_by_metric: dict[str, pd.DataFrame],
                    confidence: float = 0.95) -> pd.DataFrame:
    """Published values (``Results.references``) next to this study's mean [CI] for the matching
    cell(s): source, whether confirmed, cell, metric, published, ours, difference, and whether the
    published value lies in our CI."""
    pct = level(confidence)
    rows = []
    for _, r in refs.iterrows():
        summary = summary_by_metric.get(r["metric"])
        ids = list(r["cell_ids"]) if r["cell_ids"] is not None else []
        matched = summary[summary["cell_id"].isin(ids)] if summary is not None and ids else pd.DataFrame()
        base = {
            "source": r["source"] + (f" ({r['note']})" if r["note"] else ""),
            "confirmed": "yes" if r["confirmed"] else "no (unconfirmed)",
            "metric": metric_name(r["metric"]),
            "published": num(r["value"]),
        }
        if matched.empty:
            rows.append({**base, "cell": f"{r['cell']}: no matching cell", "ours": DASH, "n": "",
                         "ours − published": DASH, "published in our CI": DASH})
            continue
        for k, (_, m) in enumerate(matched.iterrows()):
            if k:  # one reference, several cells: name the source once
                base = {key: "" for key in base}
            inside = DASH
            if finite(m["ci_low"]) and finite(m["ci_high"]):
                inside = "yes" if m["ci_low"] <= r["value"] <= m["ci_high"] else "no"
            rows.append({**base, "cell": str(m["cell_label"]),
                         "ours": with_ci(m["mean"], m["ci_low"], m["ci_high"]) if m["n"] else str(m["status"]),
                         "n": str(int(m["n"])),
                         "ours − published": signed(m["mean"] - r["value"]) if m["n"] else DASH,
                         "published in our CI": inside})
    cols = ["source", "confirmed", "cell", "metric", "published", f"ours: mean [{pct} CI]", "n",
            "ours − published", "published in our CI"]
    out = pd.DataFrame(rows).rename(columns={"ours": f"ours: mean [{pct} CI]"})
    return out.reindex(columns=cols)


# --- words around the tables -------------------------------------------------------------------


def header_lines(res: Any, trials: pd.DataFrame, metric: str, chance: float | None, margin: float,
                 reference: str, why: str) -> list[str]:
    """The opening paragraphs: the study, its runs by status, the metric and chance, the reference."""
    replicates = trials[trials.phase == "replicate"]
    tuning = trials[trials.phase == "tune"]
    n_cells = replicates.cell_id.nunique()
    n_seeds = len(res.spec.seed_list)
    name = metric_name(metric)
    return [
        f"**Study** `{res.study}` · spec hash `{res.spec_hash}`"
        + (f" — {res.spec.description}" if res.spec.description else ""),
        f"{n_cells} cell{'s' if n_cells != 1 else ''} × {n_seeds} seed{'s' if n_seeds != 1 else ''} = "
        f"{len(replicates)} replicate run{'s' if len(replicates) != 1 else ''}"
        + (f", after {len(tuning)} tuning trial{'s' if len(tuning) != 1 else ''}" if len(tuning) else "")
        + ": " + ", ".join(f"{int(v)} {k}" for k, v in replicates.status.value_counts().items()) + ".",
        f"Metric: **{name}** over replicate runs (tuning trials never enter an estimate). "
        + (f"Chance (majority class): {num(chance)}; a run *never learned* when its {name} ≤ chance + {margin:g}."
           if chance is not None else "Chance: not applicable or unknown; never-learned shares are not computed."),
        f"Reference cell: **{reference}** ({why}).",
    ]


def tuning_intro(tune: Any) -> str:
    """How the study tuned (the spec's ``tune``): trials, sampler, seeds, objective, search space."""
    space = "; ".join(f"{path}: {_space_text(dim)}" for path, dim in tune.space.items())
    verb = "maximising" if tune.objective.resolved_direction == "maximize" else "minimising"
    return (f"Each cell ran {tune.trials} tuning trial{'s' if tune.trials != 1 else ''} ({tune.sampler} sampler) "
            f"on tuning seeds {', '.join(map(str, tune.seed_list))}, {verb} {metric_name(tune.objective.metric)}; "
            f"its replicates then ran the best setting. Search space: {space}.")


def anova_intro(dropped: dict[str, list[Any]]) -> str:
    """What the ANOVA table is, and which factor levels a partial study's ANOVA leaves out."""
    text = ("Type II ANOVA of a full factorial model (every main effect and interaction) fitted by "
            "least squares (statsmodels). Marks on the uncorrected p: \\* < 0.05, \\*\\* < 0.01, "
            "\\*\\*\\* < 0.001.")
    if dropped:
        left = "; ".join(f"{f}: {', '.join(map(str, lv))}" for f, lv in dropped.items())
        text += (f" **Partial study:** over the levels with results so far — left out until they have "
                 f"completed runs: {left}.")
    return text


def no_anova_text(why: str, trials: pd.DataFrame, factors: Sequence[str], summary: pd.DataFrame, design: str,
                  full: bool) -> str:
    """Why there is no ANOVA table (``why`` from ``stats.anova_applicable``), in the design's terms."""
    empty = summary.loc[summary.n == 0, "cell_label"].tolist()
    if not full:
        combos = trials[list(factors)].drop_duplicates()
        total = math.prod(trials[f].nunique() for f in factors)
        why = (f"the design ({design}) is not a full factorial: it has {len(combos)} of the {total} "
               "combinations of the factors' levels. A factorial ANOVA needs them all; read the comparisons "
               "with the reference instead")
    elif empty:
        why += f"; cells without a completed run: {', '.join(empty[:8])}" + (" …" if len(empty) > 8 else "")
    return f"No ANOVA table: {why}."


# --- sentences ---------------------------------------------------------------------------------


def _direction(diff: float, higher_is_better: bool | None) -> str:
    if higher_is_better is None:
        return "is above" if diff > 0 else "is below"
    better = (diff > 0) == higher_is_better
    return "beats" if better else "trails"


def _plural(k: int, word: str, many: str | None = None) -> str:
    return f"{k} {word if k == 1 else (many or word + 's')}"


def _caveat(cid: Any, conv: pd.DataFrame | None, metric: str = "val accuracy") -> str:
    """What a sentence must add when it draws on a cell that was still improving."""
    if conv is None or conv.empty:
        return ""
    row = conv[conv["cell_id"] == cid]
    if row.empty or not bool(row["still_improving"].iloc[0]):
        return ""
    gain = row["gain_max"].iloc[0]
    how = f": {metric} {_points(gain)} over the last 20% of its steps" if finite(gain) else ""
    return f" ({STILL_IMPROVING} still improving when its budget ran out{how}; more steps may change this)"


def comparison_sentences(comp: pd.DataFrame, metric: str, alpha: float = 0.05, confidence: float = 0.95,
                         higher_is_better: bool | None = True, conv: pd.DataFrame | None = None,
                         power: float = 0.8) -> list[str]:
    """The comparisons in words, quoting the cells of ``comparison_table`` and ``power_table``:
    how many are significant (one wording: ``format.verdict``), each significant one, the largest
    of the rest, what could not be tested, and what the seeds allow."""
    if comp.empty:
        return ["There is no other cell to compare with the reference."]
    table = comparison_table(comp, confidence, conv, alpha)
    pct = level(confidence)
    delta = f"Δ vs reference [{pct} CI]"
    ref = comp["reference_label"].iloc[0]
    name = metric_name(metric)
    tested = comp[comp["testable"]]
    untested = comp[~comp["testable"]]
    sig = tested[tested["significant"]]
    at = f"α = {alpha:g}"
    out = []
    ns = ", ".join(map(str, sorted({int(n) for n in untested["n"]})))
    if not len(tested):
        out.append(f"None of the {_plural(len(comp), 'comparison')} with the reference ({ref}) can be tested: "
                   f"{'the cell has' if len(comp) == 1 else 'every cell has'} too few seeds (n = {ns}; the tests need "
                   f"{stats.MIN_N_TEST}). The raw differences are in the table: read them as description, not "
                   "evidence." + _caveat(comp["reference_id"].iloc[0], conv))
    else:
        head = (f"{len(sig)} of {_plural(len(tested), 'tested comparison')} with the reference ({ref}) "
                f"{'is' if len(sig) == 1 else 'are'} {verdict(True, at)} (exact permutation test, Holm's correction)")
        if len(untested):
            head += (f"; {_plural(len(untested), 'cell')} {'has' if len(untested) == 1 else 'have'} too few seeds to "
                     f"test (n = {ns}): {'its' if len(untested) == 1 else 'their'} raw differences are in the table")
        out.append(head + "." + _caveat(comp["reference_id"].iloc[0], conv))
    for i in sig.sort_values("p_adj").index:
        r, t = comp.loc[i], table.loc[i]
        verb = _direction(float(r["mean_diff"]), higher_is_better)
        out.append(f"{r['cell_label']} {verb} the reference on {name} by {t[delta]} ({t['n']}, {r['test']}, "
                   f"p_adj = {t['p (Holm)']} {r['mark']}: {test_verdict(r)} at {at})." + _caveat(r["cell_id"], conv))
    rest = tested[~tested["significant"]]
    if len(rest):
        i = rest["mean_diff"].abs().idxmax()
        r, t = comp.loc[i], table.loc[i]
        out.append(f"Of the differences that are {verdict(False, at)}, the largest is {r['cell_label']}: {t[delta]}, "
                   f"p_adj = {t['p (Holm)']}." + _caveat(r["cell_id"], conv))
    if len(untested) and untested["mean_diff"].notna().any():
        i = untested["mean_diff"].abs().idxmax()
        r, t = comp.loc[i], table.loc[i]
        out.append(f"Not tested, the largest raw difference is {r['cell_label']}'s: {t[delta]}; "
                   f"{test_verdict(r).replace(NBSP, ' ')}.")
    if len(tested):
        floor, holm = tested["p_min"].max(), alpha / len(tested)
        if floor > holm:
            out.append(f"With {int(tested['n'].min())} seeds no comparison can be {verdict(True, at)} here: the exact "
                       f"test cannot give a p below {pval(floor, alpha)}, above Holm's first threshold "
                       f"{pval(holm, alpha)}.")
    pw = power_table(comp, power)
    need = f"seeds for {power:.0%} power"
    have = pw[pw[need] != DASH]
    if len(have):
        counts = sorted({int(v) for v in have[need]})
        span = str(counts[0]) if len(counts) == 1 else f"{counts[0]}–{counts[-1]}"
        effect = comp["min_effect"].iloc[0]
        now = sorted({int(v) for v in comp["n"]})
        m = max(1, len(tested))
        out.append(f"To detect a difference of {num(effect)} (stats.min_effect) with {power:.0%} power at "
                   f"α/m = {pw['at α/m'].iloc[0]} (m = {_plural(m, 'tested comparison')}), a comparison needs "
                   f"{span} seeds (it has {', '.join(map(str, now))}).")
    return out


def summary_sentences(summary: pd.DataFrame, metric: str, chance: float | None, margin: float,
                      higher_is_better: bool | None = True, confidence: float = 0.95,
                      conv: pd.DataFrame | None = None) -> list[str]:
    """What the per-cell table says, in words (quoting ``cell_table``): best cell, never-learned and
    diverged runs, pending."""
    out = []
    name = metric_name(metric)
    table = cell_table(summary, confidence=confidence)
    mean_col = f"mean [{level(confidence)} CI]"
    have = summary[summary["n"] > 0]
    if len(have) and higher_is_better is not None:
        i = have["mean"].idxmax() if higher_is_better else have["mean"].idxmin()
        best = summary.loc[i]
        out.append(f"{'Highest' if higher_is_better else 'Lowest'} mean {name}: {best['cell_label']}, "
                   f"{table.loc[i, mean_col]} ({level(confidence)} CI, n = {int(best['n'])})."
                   + _caveat(best["cell_id"], conv))
    never = summary[pd.to_numeric(summary["n_never_learned"], errors="coerce").fillna(0) > 0]
    if chance is not None and len(never):
        total = int(never["n_never_learned"].sum())
        out.append(f"{_plural(total, 'run')} in {_plural(len(never), 'cell')} never learned ({name} ≤ chance "
                   f"{num(chance)} + {margin:g}); they count in the means.")
    div = summary[summary["n_diverged"] > 0]
    if len(div):
        total = int(div["n_diverged"].sum())
        out.append(f"{_plural(total, 'run')} in {_plural(len(div), 'cell')} diverged; diverged runs have no "
                   f"{name} and are left out of the means.")
    pending = summary[summary["status"] == "pending"]
    partial = summary[summary["status"] == "partial"]
    if len(pending) or len(partial):
        out.append(f"The study is partial: {_plural(len(pending), 'cell')} without results yet, "
                   f"{len(partial)} with some seeds still to run. Numbers will change as runs finish.")
    return out


def convergence_sentences(conv: pd.DataFrame, metric: str = "val accuracy") -> list[str]:
    """Which cells were still improving when their budget ran out, and which used other step counts,
    quoting ``convergence_table``; one sentence when the study records no convergence at all."""
    if conv.empty:
        return []
    table = convergence_table(conv, metric)
    gain_col = f"{metric} gain, last 20% of steps"
    out = []
    if not conv["n_known"].any():
        out.append("Whether the runs converged is not recorded for this study (its trials predate the record); "
                   "its conclusions cannot say whether more steps would change them.")
    still = conv[conv["still_improving"].astype(bool)]
    if len(still):
        parts = [f"{r['cell_label']} ({metric} {table.loc[i, gain_col]})" for i, r in still.iterrows()]
        out.append(f"Budget too small for {_plural(len(still), 'cell')} {STILL_IMPROVING}, still improving over the "
                   f"last 20% of their steps: {'; '.join(parts)}. Every conclusion drawn on "
                   f"{'it' if len(still) == 1 else 'them'} says so.")
    elif conv["n_known"].any():
        out.append("Every run whose convergence is recorded had stopped improving by the end of its budget.")
    differ = conv[conv["steps_differ"].astype(bool)]
    if len(differ):
        out.append("Steps actually used differ from the budget: "
                   + "; ".join(f"{r['cell_label']} {table.loc[i, 'steps used']}" for i, r in differ.iterrows())
                   + (f" ({_plural(int(differ['n_stopped_early'].sum()), 'run')} stopped early)."
                      if differ["n_stopped_early"].sum() else "."))
    return out


# --- figures -----------------------------------------------------------------------------------


def _chance_line(ax: Any, chance: float | None, vertical: bool = False) -> None:
    if chance is None or not np.isfinite(chance):
        return
    line = ax.axvline if vertical else ax.axhline
    line(chance, color=CHANCE_COLOR, ls="--", lw=1, label="chance", zorder=1)


def _chance_handle() -> Any:
    return mpl.lines.Line2D([], [], ls="--", lw=1, color=CHANCE_COLOR, label="chance")


def _channels(trials: pd.DataFrame, channels: Channels | None) -> Channels:
    return channels if channels is not None else Channels.from_trials(trials)


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
    labels = [wrap(lbl, label_width) for lbl in summary["cell_label"]]
    lines = sum(max(1, lbl.count("\n") + 1) for lbl in labels)
    height = max(2.2, 1.3 + 0.17 * lines + 0.12 * len(labels))
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
        _chance_line(ax, chance, vertical=True)
        if metric.endswith("accuracy"):  # a CI past [0, 1] (few seeds, wide spread) must not squash the points
            low, high = ax.get_xlim()
            ax.set_xlim(max(low, -0.02), min(high, 1.02))
        ax.set_yticks(y, labels)
        ax.set_ylim(len(summary) - 0.5, -0.5)
        ax.set_xlabel(metric_name(metric))
        # Right margin: counts per cell, on a twin axis so the layout engine makes room for it.
        right = ax.twinx()
        right.set_ylim(ax.get_ylim())
        right.set_yticks(y, [_counts_note(row) for _, row in summary.iterrows()])
        right.tick_params(axis="y", length=0, labelsize=7, labelcolor="0.3")
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
                      _chance_handle()]
        channels.legend(fig, line=False, extra=extra)
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


def _level_look(channels: Channels, factor: str, lv: Any) -> dict[str, Any]:
    """How a level of ``factor`` is drawn where the factor has its own panel or line: its colour if
    it is the colour factor, its line style and marker if it is the style factor, else black."""
    lv = str(lv)
    gid = f"level:{factor}={lv}"
    if factor == channels.color_factor:
        return {"color": channels.color.get(lv, "black"), "linestyle": "-", "marker": "o", "gid": gid}
    if factor == channels.style_factor:
        return {"color": "0.2", "linestyle": channels.dash.get(lv, "-"), "marker": channels.marker.get(lv, "o"),
                "gid": gid}
    levels = channels.levels.get(factor, (lv,))
    k = levels.index(lv) if lv in levels else 0
    return {"color": "black", "linestyle": plotting.DASHES[k % len(plotting.DASHES)],
            "marker": plotting.MARKERS[k % len(plotting.MARKERS)], "gid": gid}


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
        axes = np.atleast_1d(fig.subplots(nrows, ncols, sharey=True, squeeze=False)).ravel()
        tick_width = max(8, int(34 / ncols))
        for ax, factor in zip(axes, factors, strict=False):
            sub = effects[effects["factor"] == factor].reset_index(drop=True)
            x = np.arange(len(sub))
            ax.plot(x, sub["mean"], color="0.6", lw=0.9, zorder=1)
            for xi, (_, r) in zip(x, sub.iterrows(), strict=True):
                look = _level_look(channels, factor, r["level"])
                if not finite(r["mean"]):
                    ax.annotate("no results", (xi, 0.02), xycoords=("data", "axes fraction"), ha="center",
                                fontsize=7, color="0.45")
                    continue
                err = [[r["mean"] - r["ci_low"] if finite(r["ci_low"]) else 0.0],
                       [r["ci_high"] - r["mean"] if finite(r["ci_high"]) else 0.0]]
                ax.errorbar(xi, r["mean"], yerr=err, fmt=look["marker"], ms=5, capsize=3, color=look["color"],
                            mec="black", mew=0.5, zorder=2, gid=look["gid"])
            _chance_line(ax, chance)
            ticks = [str(lv) for lv in sub["level"]]
            if sum(len(t) for t in ticks) + 2 * len(ticks) > 2 * tick_width:  # crowded: slant, do not wrap
                ax.set_xticks(x, [wrap(t, 2 * tick_width) for t in ticks], rotation=30, ha="right",
                              rotation_mode="anchor")
            else:
                ax.set_xticks(x, [wrap(t, tick_width) for t in ticks])
            ax.set_xlim(-0.5, len(sub) - 0.5)
            ax.set_title(wrap(plotting.factor_name(factor, factors), 12 * (4 - ncols) + 18))
            ax.grid(axis="x", visible=False)
        for ax in axes[len(factors) :]:
            ax.set_axis_off()
        for row in range(nrows):
            axes[row * ncols].set_ylabel(f"{metric_name(metric)}\n(marginal mean ± {level(confidence)} CI)")
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
        lines = list(dict.fromkeys(table[f1]))
        xs = list(dict.fromkeys(table[f2]))
        offsets = np.linspace(-0.08, 0.08, len(lines)) if len(lines) > 1 else [0.0]
        pos = {lv: i for i, lv in enumerate(xs)}
        for off, lv in zip(offsets, lines, strict=True):
            look = _level_look(channels, f1, lv)
            sub = table[table[f1] == lv]
            x = np.array([pos[v] for v in sub[f2]], dtype=float) + off
            err = [(sub["mean"] - sub["ci_low"]).fillna(0), (sub["ci_high"] - sub["mean"]).fillna(0)]
            ax.errorbar(x, sub["mean"], yerr=err, fmt=look["marker"], ls=look["linestyle"], ms=4.5, lw=1.3,
                        capsize=3, color=look["color"], mec="black", mew=0.5, label=wrap(lv, 22), gid=look["gid"])
        _chance_line(ax, chance)
        ax.set_xticks(range(len(xs)), [wrap(lv, max(8, int(80 / max(1, len(xs))))) for lv in xs])
        ax.set_xlim(-0.5, len(xs) - 0.5)
        ax.set_xlabel(wrap(plotting.factor_name(f2, channels.factors or (f1, f2)), 60))
        ax.set_ylabel(f"{metric_name(metric)}\n(marginal mean ± {level(confidence)} CI)")
        ax.grid(axis="x", visible=False)
        ax.legend(title=wrap(plotting.factor_name(f1, channels.factors or (f1, f2)), 22), loc="center left",
                  bbox_to_anchor=(1.01, 0.5), frameon=False)
    return fig


# --- comparisons -----------------------------------------------------------------------------


def comparison_plot(comparisons: pd.DataFrame, *, label_width: int = 34, metric: str | None = None,
                    channels: Channels | None = None, sequential: Mapping[str, str] | None = None) -> Figure:
    """Forest plot of ``stats.compare_to_reference``: each cell's difference from the reference with
    its CI in the cell's colour and marker (filled when significant, open when not); a comparison
    with too few seeds to test shows its raw per-seed differences as crosses and says so.
    ``sequential`` (cell id → its sequential decision, as the decisions table words it) replaces
    the fixed tests' marks and fill: a sequential study prints no fixed-design p."""
    channels = channels if channels is not None else Channels((), {})
    labels = [wrap(lbl, label_width) for lbl in comparisons["cell_label"]]
    lines = sum(lbl.count("\n") + 1 for lbl in labels)
    with plotting.style():
        fig = plotting.figure(max(2.2, 1.3 + 0.17 * lines + 0.12 * len(labels)))
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
        right.tick_params(axis="y", length=0, labelsize=7, labelcolor="0.3")
        right.grid(False)
        right.spines[["right", "top"]].set_visible(False)
        extra = [mpl.lines.Line2D([], [], ls="-", marker="o", color="0.3", label="Δ ± t CI, significant"),
                 mpl.lines.Line2D([], [], ls="-", marker="o", mfc="white", color="0.3", label="not significant"),
                 mpl.lines.Line2D([], [], ls="", marker="x", color="0.3", label="Δ per seed (not tested)")]
        channels.legend(fig, line=False, extra=extra)
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
            out.append((c, c))  # a cell with no curves yet
    return out


def _panels(order: list[tuple[str, str]], channels: Channels) -> list[tuple[str, list[tuple[str, str]]]]:
    """The cells of each facet panel, panels in the facet factors' order ('' when there are none)."""
    facets = channels.facets([c for c, _ in order])
    return [(f, [(c, lbl) for c, lbl in order if channels.facet(c) == f]) for f in facets]


def learning_curves(
    curves: pd.DataFrame,
    metric: str = "val_accuracy",
    *,
    cells: Sequence[str] | pd.DataFrame | None = None,
    chance: float | None = None,
    ncols: int = 2,
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
        axes = np.atleast_1d(fig.subplots(nrows, ncols, sharex=True, sharey=True, squeeze=False)).ravel()
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
            _chance_line(ax, chance)
        for ax in axes[len(panels) :]:
            ax.set_axis_off()
        for ax in axes[: len(panels)]:
            ax.tick_params(labelbottom=True)
        plotting.xlabel(axes, len(panels), ncols, "step")
        fig.supylabel(metric_name(metric), fontsize=8)
        extra = [mpl.patches.Patch(color="0.5", alpha=0.25, label="lowest–highest seed"),
                 mpl.lines.Line2D([], [], lw=1.6, color="0.3", label="mean over seeds")]
        if chance is not None:
            extra.append(_chance_handle())
        if unlabelled:
            axes[0].legend(fontsize=6.5, frameon=False, loc="lower right")
        channels.legend(fig, extra=extra)
    return fig


def performance_profile_plot(profile: pd.DataFrame, metric: str = "test_accuracy", *, chance: float | None = None,
                             channels: Channels | None = None, ncols: int = 2, confidence: float = 0.95) -> Figure:
    """rliable's performance profiles (``stats.performance_profile``): per cell the share of runs
    scoring above τ against τ, as a step line in the cell's colour and line style with its
    pointwise exact (Clopper–Pearson) band; one panel per facet."""
    channels = channels if channels is not None else Channels((), {})
    order = list(profile.drop_duplicates("cell_id")[["cell_id", "cell_label"]].itertuples(index=False, name=None))
    panels = _panels(order, channels)
    ncols = max(1, min(ncols, len(panels)))
    nrows = max(1, math.ceil(len(panels) / ncols))
    with plotting.style():
        fig = plotting.figure(1.3 + 2.2 * nrows)
        if profile.empty:
            return plotting.no_data(fig, "no completed runs yet")
        axes = np.atleast_1d(fig.subplots(nrows, ncols, sharex=True, sharey=True, squeeze=False)).ravel()
        for ax, (facet, members) in zip(axes, panels, strict=False):
            if facet:
                ax.set_title(wrap(facet, 60), fontsize=7.5)
            for cid, label in members:
                sub = profile[profile["cell_id"] == cid]
                look = channels.style(cid)
                if sub["ci_low"].notna().any():
                    ax.fill_between(sub["tau"], sub["ci_low"], sub["ci_high"], step="post", color=look["color"],
                                    alpha=0.13, lw=0, gid=look["gid"])
                ax.step(sub["tau"], sub["fraction"], where="post", color=look["color"], ls=look["linestyle"], lw=1.5,
                        label=wrap(label, 40) if not channels.factors else None, gid=look["gid"])
            _chance_line(ax, chance, vertical=True)
            ax.set_ylim(-0.03, 1.03)
        for ax in axes[len(panels):]:
            ax.set_axis_off()
        for ax in axes[: len(panels)]:
            ax.tick_params(labelbottom=True)
        plotting.xlabel(axes, len(panels), ncols, f"τ ({metric_name(metric)})")
        fig.supylabel(f"share of runs with {metric_name(metric)} > τ", fontsize=8)
        extra = [mpl.patches.Patch(color="0.5", alpha=0.25,
                                   label=f"{level(confidence)} Clopper–Pearson band (pointwise)")]
        if chance is not None:
            extra.append(_chance_handle())
        if not channels.factors:
            axes[0].legend(fontsize=6.5, frameon=False, loc="lower left")
        channels.legend(fig, extra=extra)
    return fig
