"""The accuracy report's words: the lines around its tables and its sentences, each made only
from the strings the table it speaks for prints (it builds that table and quotes its cells)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pandas as pd

from ablate import stats
from ablate.report.accuracy.tables import (
    STILL_IMPROVING,
    cell_table,
    comparison_table,
    convergence_table,
    extended_text,
    floor_words,
    gain_points,
    holm_first,
    power_table,
    test_verdict,
)
from ablate.report.format import (
    DASH,
    NBSP,
    finite,
    level,
    metric_name,
    num,
    pval,
    verdict,
)
from ablate.stats.family import reach_of
from ablate.terminal import count
from ablate.tuning import at_edge

#: Tuned values further apart than this factor across cells earn a sentence (``tuning_sentences``).
SPREAD = 2.0


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
            if (edge := at_edge(v, dim.choices, dim.low, dim.high, dim.log)) is not None:
                edges.setdefault(edge, []).append(cell)
        for edge, cells in edges.items():
            out.append(f"The best {path} of {_which_cells(cells, list(values))} is at the {edge} end of the "
                       f"search space ({space_text(dim)}): the best setting may lie beyond it.")
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
        elif len(tune.seed_list) == 1:  # rotation_heads' re-draw: other picks, another verdict (replications.md)
            text += (" Each cell picked it on one tuning seed, whose noise can decide between close settings; "
                     f"`tune.seeds: 3` (with `tune.trials: {3 * tune.trials}`) picks by the mean over three.")
        out.append(text)
    return out


#: Cells a summary sentence names at most; past it, the appendix's tuning table gives each (a
#: 32-cell study's two edge sentences had named 16 labels of five factors each).
NAMED_CELLS = 3


def _which_cells(cells: list[str], every: list[str]) -> str:
    """``cells`` among ``every`` in few words: "every cell", one label, "2 of 8 cells (a; b)" or, for
    most of them, "6 of 8 cells (all but a; b)"; "8 of 32 cells (the appendix's tuning table gives
    each)" where it would name more than ``NAMED_CELLS``. Semicolons, because a label has commas."""
    if len(cells) == len(every):
        return "every cell"
    if len(cells) == 1:
        return cells[0]
    others = [c for c in every if c not in cells]
    named, how = (others, "all but ") if len(cells) > len(every) / 2 else (cells, "")
    if len(named) > NAMED_CELLS:
        return f"{len(cells)} of {len(every)} cells (the appendix's tuning table gives each)"
    return f"{len(cells)} of {len(every)} cells ({how}{'; '.join(named)})"


def space_text(dim: Any) -> str:
    """One dimension of a search space as the reports write it: ``choices 0.0025, 0.005`` or ``[0.001, 0.01] log``."""
    if dim.choices is not None:
        return "choices " + ", ".join(num(c, 4, sig=True) if isinstance(c, float) else str(c) for c in dim.choices)
    return f"[{dim.low:g}, {dim.high:g}]" + (" log" if dim.log else "")


def header_lines(res: Any, trials: pd.DataFrame) -> list[str]:
    """The opening paragraphs: the study and its runs by status. What the answer measures, and
    against which reference, follows the answer (``measure_lines``)."""
    replicates = trials[trials.phase == "replicate"]
    tuning = trials[trials.phase == "tune"]
    n_cells = replicates.cell_id.nunique()
    n_seeds = len(res.spec.seed_list)
    return [
        f"**Study** `{res.study}` · spec hash `{res.spec_hash}`"
        + (f" — {res.spec.description}" if res.spec.description else ""),
        f"{n_cells} cell{'s' if n_cells != 1 else ''} × {n_seeds} seed{'s' if n_seeds != 1 else ''} = "
        f"{len(replicates)} replicate run{'s' if len(replicates) != 1 else ''}"
        + (f", after {len(tuning)} tuning trial{'s' if len(tuning) != 1 else ''}" if len(tuning) else "")
        + ": " + ", ".join(f"{int(v)} {k}" for k, v in replicates.status.value_counts().items()) + ".",
    ]


def measure_lines(metric: str, chance: float | None, margin: float, reference: str, why: str) -> list[str]:
    """After the answer: the metric and chance (what *never learned* means in its flags), and the
    reference cell with why it is the reference."""
    name = metric_name(metric)
    return [
        f"Metric: **{name}** over replicate runs (tuning trials never enter an estimate). "
        + (f"Chance (majority class): {num(chance)}; a run *never learned* when its {name} ≤ chance + {margin:g}."
           if chance is not None else "Chance: not applicable or unknown; never-learned shares are not computed."),
        f"Reference cell: **{reference}** ({why}).",
    ]


def tuning_intro(tune: Any) -> str:
    """How the study tuned (the spec's ``tune``): trials, sampler, seeds, objective, search space."""
    space = "; ".join(f"{path}: {space_text(dim)}" for path, dim in tune.space.items())
    verb = "maximising" if tune.objective.resolved_direction == "maximize" else "minimising"
    seeds = tune.seed_list
    if tune.sampler == "grid" and len(seeds) > 1:
        how = (f": every combination on each of the tuning seeds {', '.join(map(str, seeds))}, {verb} "
               f"{metric_name(tune.objective.metric)}; its replicates then ran the combination with the best mean "
               "over the seeds (the best value below is that mean)")
    else:
        how = (f" on tuning seed{'s' if len(seeds) != 1 else ''} {', '.join(map(str, seeds))}, {verb} "
               f"{metric_name(tune.objective.metric)}; its replicates then ran the best setting")
    return (f"Each cell ran {tune.trials} tuning trial{'s' if tune.trials != 1 else ''} ({tune.sampler} sampler)"
            f"{how}. Search space: {space}.")


def anova_intro(dropped: dict[str, list[Any]], sequential: bool = False) -> str:
    """What the ANOVA table is, and which factor levels a partial study's ANOVA leaves out. A
    sequential study's table has no p: its seeds depended on the results."""
    text = "Type II ANOVA (statsmodels) of the main effects and two-way interactions, seeds as replicates, "
    if sequential:
        text += ("descriptive only: a sequential study's seeds per cell depended on the results, so its F tests' "
                 "p-values are not valid and are not shown; the sums of squares and effect sizes describe the runs.")
    else:
        text += (f"tested only when every cell has at least {stats.MIN_N_TEST} seeds. p (Holm) is adjusted over the "
                 "study's one confirmatory family (the answer page says what it holds); its marks: \\* < 0.05, "
                 "\\*\\* < 0.01, \\*\\*\\* < 0.001.")
    if dropped:
        left = "; ".join(f"{f}: {', '.join(map(str, lv))}" for f, lv in dropped.items())
        text += (f" **Partial study:** over the levels with results so far — left out until they have "
                 f"completed runs: {left}.")
    return text


def main_effects_withheld(trials: pd.DataFrame, factors: Sequence[str], design: str) -> str:
    """The sentence in place of the main-effects figure for a design that is not a full factorial:
    a level's marginal mean there averages cells that differ in other factors too, so the body shows
    what the design answers, each cell against the reference."""
    have, total = stats.factor_combinations(trials, factors)
    return (f"No main-effects figure: the design ({design}) is not a full factorial — it has {have} of the {total} "
            "combinations of the factors' levels, so a level's marginal mean would average cells that differ in "
            "other factors too and mix their effects into its own; what the design answers is each cell against "
            "the reference, in the per-cell figure below and the comparisons in the appendix.")


def no_anova_text(why: str, trials: pd.DataFrame, factors: Sequence[str], summary: pd.DataFrame, design: str,
                  full: bool) -> str:
    """Why there is no ANOVA table (``why`` from ``stats.anova_applicable``), in the design's terms."""
    empty = summary.loc[summary.n == 0, "cell_label"].tolist()
    if not full:
        have, total = stats.factor_combinations(trials, factors, phase=None)
        why = (f"the design ({design}) is not a full factorial: it has {have} of the {total} "
               "combinations of the factors' levels. A factorial ANOVA needs them all; read the comparisons "
               "with the reference instead")
    elif empty:
        why += f"; cells without a completed run: {', '.join(empty[:8])}" + (" …" if len(empty) > 8 else "")
    return f"No ANOVA table: {why}."


def _one_sided(r: pd.Series) -> bool:
    """Every paired difference on one side of zero, and an interval that excludes it."""
    diffs = r.get("diffs")
    same_side = (diffs is not None and len(diffs) > 0 and (all(d > 0 for d in diffs) or all(d < 0 for d in diffs)))
    low, high = r.get("diff_ci_low"), r.get("diff_ci_high")
    return bool(same_side and finite(low) and finite(high) and (low > 0 or high < 0))


def _direction(diff: float, higher_is_better: bool | None) -> str:
    if higher_is_better is None:
        return "is above" if diff > 0 else "is below"
    better = (diff > 0) == higher_is_better
    return "beats" if better else "trails"


def _caveat(cid: Any, conv: pd.DataFrame | None, metric: str = "val accuracy") -> str:
    """What a sentence must add when it draws on a cell that was still improving."""
    if conv is None or conv.empty:
        return ""
    row = conv[conv["cell_id"] == cid]
    if row.empty or not bool(row["still_improving"].iloc[0]):
        return ""
    gain = row["gain_max"].iloc[0]
    how = f": {metric} {gain_points(gain)} over the last 20% of its steps" if finite(gain) else ""
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
        out.append(f"None of the {count(len(comp), 'comparison')} with the reference ({ref}) can be tested: "
                   f"{'the cell has' if len(comp) == 1 else 'every cell has'} too few seeds (n = {ns}; the tests need "
                   f"{stats.MIN_N_TEST}). The raw differences are in the table: read them as description, not "
                   "evidence." + _caveat(comp["reference_id"].iloc[0], conv))
    else:
        head = (f"{len(sig)} of {count(len(tested), 'tested comparison')} with the reference ({ref}) "
                f"{'is' if len(sig) == 1 else 'are'} {verdict(True, at)} (exact permutation test, Holm's correction)")
        if len(untested):
            head += (f"; {count(len(untested), 'cell')} {'has' if len(untested) == 1 else 'have'} too few seeds to "
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
        text = (f"Of the differences that are {verdict(False, at)}, the largest is {r['cell_label']}: {t[delta]}, "
                f"p_adj = {t['p (Holm)']}.")
        if _one_sided(r):  # a clear effect the family's correction or the seeds' floor holds back: say which
            reach = reach_of(tested, alpha)
            if not reach.can(r["p_min"]):  # its floor is out of reach whatever the other tests give
                why = f"with {int(r['n'])} seeds {reach.floor_words(r['p_min'], '', 'on it')[1]}"
            else:
                first, m = holm_first(comp, alpha)
                why = (f"its p = {pval(r['p'], alpha)} before correction, and Holm's first threshold over the study's "
                       f"{m} tests is {pval(first, alpha, bound=True)}")
            text += (f" Its interval excludes 0 and it is {'ahead' if r['mean_diff'] > 0 else 'behind'} on every "
                     f"seed, yet not significant: {why} — more seeds would decide it.")
        out.append(text + _caveat(r["cell_id"], conv))
    if len(untested) and untested["mean_diff"].notna().any():
        i = untested["mean_diff"].abs().idxmax()
        r, t = comp.loc[i], table.loc[i]
        out.append(f"Not tested, the largest raw difference is {r['cell_label']}'s: {t[delta]}; "
                   f"{test_verdict(r).replace(NBSP, ' ')}.")
    said = floor_words(tested, alpha, significant=verdict(True, at))
    if said is not None:  # what the seeds' floor leaves within reach of Holm's thresholds (tables.floor_words)
        out.append(f"{said[0]}: {said[1]}.")
    pw = power_table(comp, power)
    need = f"seeds for {power:.0%} power"
    have = pw[pw[need] != DASH]
    if len(have):
        counts = sorted({int(v) for v in have[need]})
        span = str(counts[0]) if len(counts) == 1 else f"{counts[0]}–{counts[-1]}"
        effect = comp["min_effect"].iloc[0]
        now = sorted({int(v) for v in comp["n"]})
        m = holm_first(comp, alpha)[1]  # the family's m, as the α/m beside it (the design's, untested)
        out.append(f"To detect a difference of {num(effect)} (stats.min_effect) with {power:.0%} power at "
                   f"α/m = {pw['at α/m'].iloc[0]} (m = {count(m, 'test')} in the study's family), a comparison needs "
                   f"{span} seeds (it has {', '.join(map(str, now))}).")
    return out


def summary_sentences(summary: pd.DataFrame, metric: str, chance: float | None, margin: float,
                      higher_is_better: bool | None = True, confidence: float = 0.95,
                      conv: pd.DataFrame | None = None) -> list[str]:
    """What the per-cell table says, in words (quoting ``cell_table``): best cell (the largest mean
    is no test: said so, as the norm report's lowest is), never-learned and diverged runs, pending."""
    out = []
    name = metric_name(metric)
    table = cell_table(summary, confidence=confidence)
    mean_col = f"mean [{level(confidence)} CI]"
    have = summary[summary["n"] > 0]
    if len(have) and higher_is_better is not None:
        i = have["mean"].idxmax() if higher_is_better else have["mean"].idxmin()
        best = summary.loc[i]
        out.append(f"{'Highest' if higher_is_better else 'Lowest'} mean {name}: {best['cell_label']}, "
                   f"{table.loc[i, mean_col]} ({level(confidence)} CI, n = {int(best['n'])}; descriptive, not a test)."
                   + _caveat(best["cell_id"], conv))
    never = summary[pd.to_numeric(summary["n_never_learned"], errors="coerce").fillna(0) > 0]
    if chance is not None and len(never):
        total = int(never["n_never_learned"].sum())
        out.append(f"{count(total, 'run')} in {count(len(never), 'cell')} never learned ({name} ≤ chance "
                   f"{num(chance)} + {margin:g}); they count in the means.")
    div = summary[summary["n_diverged"] > 0]
    if len(div):
        total = int(div["n_diverged"].sum())
        out.append(f"{count(total, 'run')} in {count(len(div), 'cell')} diverged; diverged runs have no "
                   f"{name} and are left out of the means.")
    pending = summary[summary["status"] == "pending"]
    partial = summary[summary["status"] == "partial"]
    if len(pending) or len(partial):
        out.append(f"The study is partial: {count(len(pending), 'cell')} without results yet, "
                   f"{len(partial)} with some seeds still to run. Numbers will change as runs finish.")
    return out


def t_test_note(comp: pd.DataFrame, family_m: int) -> str:
    """The comparisons table's line on its t-test column: adjusted over these comparisons, not over
    the study's family of ``family_m`` tests that p (Holm) and the verdicts are."""
    k = int(comp["t_p"].notna().sum()) if "t_p" in comp.columns else 0
    if not k:
        return ""
    return (f"The t-test p is Holm-adjusted over {'this' if k == 1 else 'these'} {count(k, 'comparison')} only, "
            f"not over the study's family of {count(family_m, 'test')} that p (Holm) is adjusted over: a check on "
            "the exact test beside it, not a verdict.")


#: Cells whose runs, not the cells themselves, were still improving that the sentence names; the rest it counts.
SOME_NAMED = 3


def convergence_sentences(conv: pd.DataFrame, metric: str = "val accuracy") -> list[str]:
    """Which cells were still improving when their budget ran out, and which used other step counts,
    quoting ``convergence_table``; one sentence when the study records no convergence at all."""
    if conv.empty:
        return []
    table = convergence_table(conv, metric)
    gain_col = f"{metric} gain, last 20% of steps"
    out = []
    if not conv["n_known"].any():
        ran = pd.to_numeric(conv["steps_max"], errors="coerce").dropna()
        # Runs that recorded their steps did record convergence: too short a run leaves too few
        # validation passes in its last fifth to measure a trend (``stats.convergence.last_fifth``).
        why = (f"cannot be measured at {count(int(ran.max()), 'step')} per run (the last 20% of a run needs at "
               "least 3 validation passes)" if len(ran) else "is not recorded for this study (its trials predate the record)")
        out.append(f"Whether the runs converged {why}; its conclusions cannot say whether more steps would change them.")
    cell_flag = conv["still_improving"].astype(bool)
    still = conv[cell_flag]
    if len(still):
        parts = [f"{r['cell_label']} ({metric} {table.loc[i, gain_col]})" for i, r in still.iterrows()]
        out.append(f"Budget too small for {count(len(still), 'cell')} {STILL_IMPROVING}, still improving over the "
                   f"last 20% of their steps: {'; '.join(parts)}. Every conclusion drawn on "
                   f"{'it' if len(still) == 1 else 'them'} says so.")
    # The table's per-run count ("1 of 4 still improving") in cells whose runs together were not rising:
    # a sentence that every run had stopped improving would contradict it.
    runs = pd.to_numeric(conv["n_unconverged"], errors="coerce").fillna(0).astype(int)
    some = conv[~cell_flag & (runs > 0)]
    if len(some):
        k = int(runs[some.index].sum())
        parts = [f"{r['cell_label']} {table.loc[i, 'still improving']} ({metric} {table.loc[i, gain_col]})"
                 for i, r in some.iterrows()]
        # A few named, the rest counted: the convergence table names them all (18 cells made a page of it).
        named = "; ".join(parts[:SOME_NAMED]) + (f"; and {len(parts) - SOME_NAMED} more cells (the convergence "
                                                  "table)" if len(parts) > SOME_NAMED else "")
        out.append(f"{count(k, 'run')} in {count(len(some), 'cell')} without {STILL_IMPROVING} "
                   f"{'was' if k == 1 else 'were'} still improving when {'its' if k == 1 else 'their'} budget ran out, "
                   f"though {'its cell' if len(some) == 1 else 'their cells'} taken as a whole "
                   f"{'was' if len(some) == 1 else 'were'} not: {named}.")
    elif not len(still) and conv["n_known"].any():
        out.append("Every run whose convergence is recorded had stopped improving by the end of its budget.")
    if "n_extended" in conv.columns and conv["n_extended"].fillna(0).astype(int).any():
        grown = conv[conv["n_extended"].fillna(0).astype(int) > 0]
        extended = int(grown["n_extended"].sum())
        continued = int(grown["n_continued"].fillna(0).sum()) if "n_continued" in grown.columns else 0
        how = ("each extended run continued its shorter run's stable-phase checkpoint" if continued == extended
               else "no extended run could continue a stable-phase checkpoint: each trained from step 0"
               if continued == 0 else
               f"{continued} of the {extended} extended runs continued their shorter run's stable-phase "
               "checkpoint, the others trained from step 0")
        out.append("Trained until converged (train.until_converged), while still improving: "
                   + "; ".join(f"{r['cell_label']} {extended_text(r)}" for _, r in grown.iterrows())
                   + f" — {how}; a cell's results are those of its runs' longest finished budgets.")
    differ = conv[conv["steps_differ"].astype(bool)]
    if len(differ):
        out.append("Steps actually used differ from the budget: "
                   + "; ".join(f"{r['cell_label']} {table.loc[i, 'steps used']}" for i, r in differ.iterrows())
                   + (f" ({count(int(differ['n_stopped_early'].sum()), 'run')} stopped early)."
                      if differ["n_stopped_early"].sum() else "."))
    return out
