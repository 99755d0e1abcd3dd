"""The ``accuracy`` report's presentation: its tables, its sentences and its figures.

Every function takes a frame from ``ablate.stats`` (the analysis) or the results API and returns a
display frame (strings, one header per column), a list of sentences, or a matplotlib Figure.
Sentences are made only from the numbers in the frames the tables print; numbers, intervals,
p-values and missing values are written by ``ablate.report.format``, figures share the page size,
style and palettes of ``ablate.report.plotting``. Adding a section to the report touches its
analysis function in ``ablate.stats``, its table / sentences / figure here, and the notebook
``ablate/report/notebooks/accuracy.py`` that shows them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

import matplotlib as mpl
import numpy as np
import pandas as pd
import yaml
from matplotlib.figure import Figure

from ablate import stats
from ablate.report import plotting
from ablate.report.format import (
    DASH,
    NBSP,
    ci,
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
from ablate.report.plotting import wrap

MEAN_COLOR = "black"
SEED_COLOR = "#4C72B0"
NEVER_COLOR = "#DD8452"
CHANCE_COLOR = "#C44E52"

# --- tables ------------------------------------------------------------------------------------


def cell_table(summary: pd.DataFrame, reference_id: str | None = None, confidence: float = 0.95,
               chance_known: bool = True) -> pd.DataFrame:
    """Per cell (``stats.cell_summary``): status, n, mean [CI], median, sd, and the diverged /
    never-learned / failed / pending counts, each in its own column."""
    pct = level(confidence)
    rows = []
    for _, r in summary.iterrows():
        label = str(r["cell_label"]) + (" (reference)" if r["cell_id"] == reference_id else "")
        rows.append({
            "cell": label,
            "status": str(r["status"]).replace("_", " "),
            "n": int(r["n"]),
            f"mean [{pct} CI]": with_ci(r["mean"], r["ci_low"], r["ci_high"]),
            "median": num(r["median"]),
            "sd": num(r["sd"]),
            "diverged": share(r["n_diverged"], r["n_finished"]),
            "never learned": share(r["n_never_learned"], r["n_finished"]) if chance_known else DASH,
            "failed": count(r["n_failed"]),
            "pending": count(r["n_pending"]),
        })
    cols = ["cell", "status", "n", f"mean [{pct} CI]", "median", "sd", "diverged", "never learned", "failed",
            "pending"]
    return pd.DataFrame(rows, columns=cols)


_ES = {"d_z": "d_z", "hedges_g": "g"}


def comparison_table(comp: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """Per compared cell (``stats.compare_to_reference``): test, n, difference [CI], effect size
    [CI], p, Holm-adjusted p with its mark, and the rank test's adjusted p."""
    pct = level(confidence)
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
        robust = DASH
        if r["robust_test"] and finite(r["robust_p_adj"]):
            robust = f"{pval(r['robust_p_adj'])} ({r['robust_test']})"
        rows.append({
            "cell": str(r["cell_label"]),
            "test": str(r["test"]).replace(" ", NBSP) if len(str(r["test"])) < 10 else r["test"],
            "n": n,
            "mean": num(r["mean_cell"]),
            f"Δ vs reference [{pct} CI]": with_ci(r["mean_diff"], r["diff_ci_low"], r["diff_ci_high"], sign=True),
            f"effect size [{pct} CI]": es,
            "p": pval(r["p"]),
            "p (Holm)": pval(r["p_adj"]),
            "": r["mark"] if r["mark"] else ("n.s." if finite(r["p_adj"]) else ""),
            "rank test p (Holm)": robust,
        })
    cols = ["cell", "test", "n", "mean", f"Δ vs reference [{pct} CI]", f"effect size [{pct} CI]", "p",
            "p (Holm)", "", "rank test p (Holm)"]
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


def provenance_table(prov: dict[str, Any]) -> pd.DataFrame:
    """``Results.provenance()`` as rows: study, spec hash, stores, counts, commits, devices, hosts, times."""

    def when(x: Any) -> str:
        return x.strftime("%Y-%m-%d %H:%M") if x is not None else DASH

    rows = [
        ("study", prov["study"]),
        ("spec hash", prov["spec_hash"]),
        ("Optuna storage", prov["stores"].get("storage", DASH)),
        ("MLflow tracking", prov["stores"].get("tracking", DASH)),
        ("items", f"{prov['items']} in {prov['cells']} cells: "
                  + ", ".join(f"{v} {k}" for k, v in prov["counts"].items())),
        ("reused", ", ".join(f"{n} items trained by study {k}" for k, n in prov.get("reused_from", {}).items())
         or DASH),
        ("git commit", _tally(prov["git_commits"])),
        ("devices", _tally(prov["devices"])),
        ("hosts", _tally(prov["hosts"])),
        ("first run started", when(prov["first_started"])),
        ("last run finished", when(prov["last_finished"])),
    ]
    return pd.DataFrame(rows, columns=["", "value"])


def versions_table(prov: dict[str, Any]) -> pd.DataFrame:
    """Package versions as each run recorded them (``Results.provenance()["versions"]``)."""
    return pd.DataFrame([(pkg, _tally(v)) for pkg, v in prov["versions"].items()], columns=["package", "version"])


def _tally(counts: dict[str, int]) -> str:
    return "; ".join(f"{k} ({v} run{'s' if v != 1 else ''})" for k, v in counts.items()) or DASH


def spec_text(prov: dict[str, Any]) -> str:
    """The spec as run, as YAML, credentials redacted."""
    from ablate.stores import redact

    return redact(yaml.safe_dump(prov["spec"], sort_keys=False, allow_unicode=True, width=100))


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
    space = "; ".join(
        f"{path}: " + (f"choices {dim.choices}" if dim.choices is not None
                       else f"[{dim.low:g}, {dim.high:g}]" + (" log" if dim.log else ""))
        for path, dim in tune.space.items())
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


def _direction(diff: float, higher_is_better: bool) -> str:
    if higher_is_better is None:
        return "above" if diff > 0 else "below"
    better = (diff > 0) == higher_is_better
    return "beats" if better else "trails"


def comparison_sentences(comp: pd.DataFrame, metric: str, alpha: float = 0.05, confidence: float = 0.95,
                         higher_is_better: bool | None = True) -> list[str]:
    """One sentence per significant comparison, one for the rest; only numbers from ``comp``."""
    if comp.empty:
        return ["There is no other cell to compare with the reference."]
    ref = comp["reference_label"].iloc[0]
    tested = comp[comp["p_adj"].notna()]
    untested = comp[comp["p_adj"].isna()]
    name = metric_name(metric)
    out = []
    sig = tested[tested["p_adj"] < alpha]
    out.append(f"{len(sig)} of {len(tested)} comparison{'s' if len(tested) != 1 else ''} with the reference "
               f"({ref}) {'is' if len(sig) == 1 else 'are'} {verdict(True, f'α = {alpha:g}')} after Holm's correction"
               + (f"; {len(untested)} cell{'s' if len(untested) != 1 else ''} "
                  f"{'has' if len(untested) == 1 else 'have'} too few completed seeds to test." if len(untested)
                  else "."))
    for _, r in sig.sort_values("p_adj").iterrows():
        diff = float(r["mean_diff"])
        verb = _direction(diff, higher_is_better)
        es = ""
        if finite(r["effect_size"]):
            es = (f", {_ES.get(r['effect_size_kind'], r['effect_size_kind'])} = "
                  f"{with_ci(r['effect_size'], r['es_ci_low'], r['es_ci_high'], digits=2, sign=True)}")
        n = f"{int(r['n_pairs'])} shared seeds" if r["paired"] else f"{int(r['n_cell'])} vs {int(r['n_ref'])} seeds"
        out.append(f"{r['cell_label']} {verb} the reference on {name} by {signed(diff)} "
                   f"{ci(r['diff_ci_low'], r['diff_ci_high'])} ({r['test']}, {n}{es}, "
                   f"p_adj {p_is(r['p_adj'])} {r['mark']}).")
    rest = tested[~(tested["p_adj"] < alpha)]
    if len(rest):
        big = rest.loc[rest["mean_diff"].abs().idxmax()]
        out.append(f"Of the differences that are not significant, the largest is {big['cell_label']}: "
                   f"{signed(big['mean_diff'])} {ci(big['diff_ci_low'], big['diff_ci_high'])}, "
                   f"p_adj {p_is(big['p_adj'])}.")
    return out


def summary_sentences(summary: pd.DataFrame, metric: str, chance: float | None, margin: float,
                      higher_is_better: bool | None = True, confidence: float = 0.95) -> list[str]:
    """What the per-cell table says, in words: best cell, never-learned and diverged runs, pending."""
    out = []
    name = metric_name(metric)
    have = summary[summary["n"] > 0]
    if len(have) and higher_is_better is not None:
        best = have.loc[have["mean"].idxmax() if higher_is_better else have["mean"].idxmin()]
        out.append(f"Highest mean {name}: {best['cell_label']}, {with_ci(best['mean'], best['ci_low'], best['ci_high'])}"
                   f" ({level(confidence)} CI, n = {int(best['n'])})." if higher_is_better else
                   f"Lowest mean {name}: {best['cell_label']}, {with_ci(best['mean'], best['ci_low'], best['ci_high'])}"
                   f" ({level(confidence)} CI, n = {int(best['n'])}).")
    never = summary[pd.to_numeric(summary["n_never_learned"], errors="coerce").fillna(0) > 0]
    if chance is not None and len(never):
        total = int(never["n_never_learned"].sum())
        out.append(f"{total} run{'s' if total != 1 else ''} in {len(never)} cell{'s' if len(never) != 1 else ''} "
                   f"never learned ({name} ≤ chance {num(chance)} + {margin:g}); they count in the means.")
    div = summary[summary["n_diverged"] > 0]
    if len(div):
        total = int(div["n_diverged"].sum())
        out.append(f"{total} run{'s' if total != 1 else ''} in {len(div)} cell{'s' if len(div) != 1 else ''} "
                   f"diverged; diverged runs have no {name} and are left out of the means.")
    pending = summary[summary["status"] == "pending"]
    partial = summary[summary["status"] == "partial"]
    if len(pending) or len(partial):
        out.append(f"The study is partial: {len(pending)} cell{'s' if len(pending) != 1 else ''} without results yet, "
                   f"{len(partial)} with some seeds still to run. Numbers will change as runs finish.")
    return out



# --- figures -----------------------------------------------------------------------------------


def _chance_line(ax: Any, chance: float | None, vertical: bool = False) -> None:
    if chance is None or not np.isfinite(chance):
        return
    line = ax.axvline if vertical else ax.axhline
    line(chance, color=CHANCE_COLOR, ls="--", lw=1, label="chance", zorder=1)




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
    with plotting.style():
        fig = plotting.figure(height)
        if summary.empty:
            return plotting.no_data(fig, "no cells")
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
            label=f"mean ± {level(confidence)} CI",
        )
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
        handles = [
            mpl.lines.Line2D([], [], ls="", marker="o", ms=4, color=SEED_COLOR, label="seed"),
            mpl.lines.Line2D(
                [], [], ls="", marker="D", ms=4, color=MEAN_COLOR, label=f"mean ± {level(confidence)} CI"
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
    with plotting.style():
        fig = plotting.figure(0.4 + 2.3 * nrows)
        if effects.empty or effects["mean"].isna().all():
            return plotting.no_data(fig, "no completed runs yet")
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
) -> Figure:
    """Marginal means of ``metric`` over ``f1`` levels (x axis), one line per ``f2`` level, with CIs.

    Parallel lines mean no interaction. Lines are dodged slightly so the CIs do not overlap.
    """
    table = stats.interaction_table(trials, metric, f1, f2, confidence, phase=phase)
    with plotting.style():
        fig = plotting.figure(3.2)
        if table.empty or table["mean"].isna().all():
            return plotting.no_data(fig, "no completed runs yet")
        ax = fig.add_subplot()
        levels1 = list(dict.fromkeys(table[f1]))
        levels2 = list(dict.fromkeys(table[f2]))
        colors = plotting.palette(levels2)
        offsets = np.linspace(-0.08, 0.08, len(levels2)) if len(levels2) > 1 else [0.0]
        pos = {lv: i for i, lv in enumerate(levels1)}
        for off, lv2 in zip(offsets, levels2, strict=True):
            color = colors[lv2]
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
        ax.set_ylabel(f"{metric_name(metric)}\n(marginal mean ± {level(confidence)} CI)")
        ax.grid(axis="x", visible=False)
        ax.legend(title=wrap(f2, 22), loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    return fig


# --- comparisons -----------------------------------------------------------------------------


def comparison_plot(comparisons: pd.DataFrame, *, label_width: int = 34, metric: str | None = None) -> Figure:
    """Forest plot of ``stats.compare_to_reference``: each cell's difference from the reference with
    its CI, and the significance mark; cells without a test are listed as such."""
    labels = [wrap(lbl, label_width) for lbl in comparisons["cell_label"]]
    lines = sum(lbl.count("\n") + 1 for lbl in labels)
    with plotting.style():
        fig = plotting.figure(max(2.0, 0.9 + 0.17 * lines + 0.12 * len(labels)))
        if comparisons.empty:
            return plotting.no_data(fig, "nothing to compare")
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
        what = metric_name(metric) if metric else "metric"
        ax.set_xlabel(wrap(f"difference in {what} from: {ref}", 90))
        right = ax.twinx()
        right.set_ylim(ax.get_ylim())
        notes = [
            (
                f"{row['mark'] or 'n.s.'}  p_adj {p_is(row['p_adj'])} ({row['test']})"
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
    with plotting.style():
        fig = plotting.figure(0.5 + 1.9 * nrows)
        if not order:
            return plotting.no_data(fig, f"no {metric_name(metric)} curves yet")
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
        fig.supylabel(metric_name(metric), fontsize=8)
        handles = [
            mpl.lines.Line2D([], [], lw=0.7, color=SEED_COLOR, label="seed"),
            mpl.lines.Line2D([], [], lw=2, color=MEAN_COLOR, label="mean over seeds"),
        ]
        if chance is not None:
            handles.append(mpl.lines.Line2D([], [], ls="--", lw=1, color=CHANCE_COLOR, label="chance"))
        fig.legend(handles=handles, loc="outside upper center", ncols=len(handles), frameon=False)
    return fig
