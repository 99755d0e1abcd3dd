"""The accuracy report's tables: display frames (strings, one header per column) from the
analysis' frames (``ablate.stats``) and the results API."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pandas as pd

from ablate import stats, terminal
from ablate.report.format import (
    DASH,
    NBSP,
    count,
    finite,
    level,
    metric_name,
    num,
    pval,
    share,
    signed,
    verdict,
    with_ci,
)
from ablate.stats import family as fam

if TYPE_CHECKING:
    from ablate.report.plotting import Channels

#: The mark after a cell that was still improving when its step budget ran out.
STILL_IMPROVING = "†"


def level_names(cells: pd.DataFrame, channels: Channels) -> dict[str, str]:
    """Cell id → the cell named by its levels (``rotation · xi · 4``; ``channels.key`` names the
    factors), as the per-cell figures name their rows: a table row of one line where the label
    ``parameterisation=rotation, normalisation=xi, layers=4`` wraps to three. Empty — keep the labels
    — where the levels do not tell the cells apart, the mapping does not know a cell, or a cell's
    label does not name its levels (another study's minGRU beside a factor its family does not read)."""
    pairs = cells.drop_duplicates("cell_id")[["cell_id", "cell_label"]]
    if not channels.factors or not all(str(c) in channels.cells for c in pairs["cell_id"]):
        return {}
    names = {str(c): channels.compact(str(c)) for c in pairs["cell_id"]}
    if len(set(names.values())) < len(names) or not all(
            all(str(lv) in str(lbl) for lv in channels.cells[str(c)].values())
            for c, lbl in pairs.itertuples(index=False, name=None)):
        return {}
    return names


def named(frame: pd.DataFrame, names: dict[str, str]) -> pd.DataFrame:
    """``frame`` with each cell's ``cell_label`` replaced by its name in ``names`` (``level_names``)."""
    if not names or frame.empty or "cell_label" not in frame.columns:
        return frame
    out = frame.copy()
    out["cell_label"] = [names.get(str(c), lbl) for c, lbl in zip(out["cell_id"], out["cell_label"], strict=True)]
    return out


def constant_columns(table: pd.DataFrame, columns: Sequence[str]) -> tuple[pd.DataFrame, str]:
    """``table`` without those of ``columns`` that print one value on every row (the same test, the same
    ``4 pairs``), and the sentence that says them once (``Every row: n 4 pairs; test exact sign-flip.``):
    their room goes to the columns that differ, so that a row of an 18-cell table takes one line or two,
    not three."""
    same = [c for c in columns if c in table.columns and len(table) > 1 and table[c].nunique() == 1
            and str(table[c].iloc[0]) not in ("", DASH)]
    if not same:
        return table, ""
    said = "; ".join(f"{c} {table[c].iloc[0]}" for c in same)
    return table.drop(columns=same), f"Every row: {said}."


def names_line(names: dict[str, str], channels: Channels) -> str:
    """The sentence that says how the rows name their cells, or nothing when they name them by label."""
    return f"A row names its cell by its levels of {channels.key}." if names else ""


def _improving(conv: pd.DataFrame | None) -> set[str]:
    if conv is None or conv.empty:
        return set()
    return set(conv.loc[conv["still_improving"].astype(bool), "cell_id"])


def _why(note: Any) -> str:
    """The reason to print in place of a refused interval: a spread of round-off (``stats.no_spread``).
    Too few runs says itself in the n column beside it, where the value stands alone as before."""
    return note if isinstance(note, str) and note.startswith("no spread") else ""


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
            f"mean [{pct} CI]": with_ci(r["mean"], r["ci_low"], r["ci_high"], why=_why(r.get("ci_note"))),
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


def below_resolution(comp: pd.DataFrame, n_test: int | None) -> pd.Series:
    """Per comparison: whether its spread — the sd of the paired differences, or the runs' pooled sd
    (``sd_diff``) — is below one test example's worth of accuracy, 1/``n_test``, the test set's
    resolution. There the seeds agree to within one example and an effect size divided by that spread
    is arbitrarily large (d_z 534 on 3 seeds): ``comparison_table`` prints — in its place. All False
    without a test-set size (another metric, or a study varying its task)."""
    if not n_test or comp.empty or "sd_diff" not in comp.columns:
        return pd.Series(False, index=comp.index)
    sd = pd.to_numeric(comp["sd_diff"], errors="coerce")
    # A spread of exactly 0 is the analysis' own case ("no spread"), which prints its reason already.
    return (sd.notna() & (sd > 0) & (sd < 1.0 / n_test) & comp["testable"].astype(bool)).astype(bool)


#: What an effect size refused by ``below_resolution`` prints, and what its note names.
BELOW_RESOLUTION = "sd < 1/N"


def effect_size_note(comp: pd.DataFrame, n_test: int | None) -> str:
    """The line under the comparisons table on the effect sizes ``below_resolution`` refuses, naming
    them; empty when none is."""
    low = below_resolution(comp, n_test)
    if not low.any():
        return ""
    rows = comp[low]
    # The sd to two significant figures: the power table's 0.001 beside "below 0.001" would contradict it.
    cells = "; ".join(f"{r['cell_label']} (sd {num(r['sd_diff'], 2, sig=True)})" for _, r in rows.iterrows())
    spread = ("the sd of the paired differences" if rows["paired"].all() else "the runs' pooled sd"
              if not rows["paired"].any() else "the sd of the paired differences (unpaired: the runs' pooled sd)")
    return (f"Effect size {DASH} ({BELOW_RESOLUTION}): {spread} is below one test example's worth of accuracy, "
            f"1/N = {num(1.0 / n_test, 4, sig=True)} (N{NBSP}={NBSP}{n_test:,} test examples), so the seeds agree to "
            f"within the test set's resolution and a difference divided by that spread is as large as it is "
            f"arbitrary: {cells}. The difference and its interval stand.")


def comparison_table(comp: pd.DataFrame, confidence: float = 0.95, conv: pd.DataFrame | None = None,
                     alpha: float | None = None, *, n_test: int | None = None) -> pd.DataFrame:
    """Per compared cell (``stats.compare_to_reference``): n, difference [t CI] (or the raw
    differences when there are too few seeds to test), the exact test, its p and Holm-adjusted p
    (printed on the side of ``alpha`` they fall: ``format.pval``), the verdict with its mark, the
    t-test's p Holm-adjusted over these comparisons only beside it (``t_test_column``), and the
    effect size [noncentral-t CI] — ``—`` where its spread is below the resolution of a test set of
    ``n_test`` examples (``below_resolution``; ``effect_size_note`` says so under the table)."""
    pct = level(confidence)
    coarse = below_resolution(comp, n_test)
    improving = _improving(conv)
    t_col = t_test_column(comp)
    rows = []
    for i, r in comp.iterrows():
        if r["paired"]:
            n = f"{int(r['n_pairs'])}{NBSP}pairs"
        else:
            n = f"{int(r['n_cell'])}{NBSP}vs{NBSP}{int(r['n_ref'])}"
        note = _why(r.get("ci_note"))
        es = DASH
        if coarse[i]:
            es = f"{DASH} ({BELOW_RESOLUTION})"
        elif finite(r["effect_size"]):
            es = f"{_ES.get(r['effect_size_kind'], r['effect_size_kind'])}{NBSP}" + with_ci(
                r["effect_size"], r["es_ci_low"], r["es_ci_high"], digits=2, sign=True)
        elif r["testable"] and note:
            es = f"{DASH} ({note})"
        if r["testable"]:
            diff = with_ci(r["mean_diff"], r["diff_ci_low"], r["diff_ci_high"], sign=True, why=note)
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
            t_col: pval(r["t_p_adj"], alpha),
            f"effect size [{pct} CI]": es,
        })
    cols = ["cell", "n", "mean", f"Δ vs reference [{pct} CI]", "test", "p", "p (Holm)", "verdict",
            t_col, f"effect size [{pct} CI]"]
    return pd.DataFrame(rows, columns=cols)


def t_test_column(comp: pd.DataFrame) -> str:
    """The t-test column's header: its Holm adjustment is over this table's comparisons only
    (``stats.compare_to_reference``), not over the study's family that p (Holm) is adjusted over, so
    the header says so — a t-test p below α beside a "not significant" is no verdict."""
    k = int(comp["t_p"].notna().sum()) if "t_p" in comp.columns else 0
    return f"t-test p (Holm over {'this' if k == 1 else 'these'} {k}; descriptive)"


def comparison_intro(comp: pd.DataFrame, alpha: float = 0.05, family: str = "the comparisons") -> list[str]:
    """Which test the comparisons use and why, in the report's words (the numbers from ``comp``).
    ``family``: what ``comp``'s p (Holm) is adjusted over — the comparisons alone as
    ``stats.compare_to_reference`` gives them; a report that took them from ``report.verdicts``
    names its family ("the study's one family (page one)")."""
    tested = comp[comp["testable"]]
    text = [
        "Each cell against the reference on the seeds both ran (paired), or on all their runs when they share "
        "fewer than two seeds (unpaired). **The test is an exact permutation test** of the mean difference — "
        "sign-flip when paired, relabelling when unpaired: it assumes no normal distribution and stays exact when "
        "accuracies tie, as they do on a finite test set, or when every seed shows the same difference (where the "
        f"t-test divides by a zero spread). Its p-values are Holm-adjusted over {family}; the t-test's "
        "are shown beside them for reference. A comparison on fewer than three seeds is not tested: its raw "
        "differences are shown instead. Marks: \\* p_adj < α, \\*\\* < 0.01, \\*\\*\\* < 0.001; n.s. otherwise. "
        "Intervals: the difference's is the t interval (paired t, or Welch's); the effect size is Cohen's d_z "
        "(paired) or Hedges' g, its interval the exact one for the standardised difference (noncentral t).",
    ]
    said = floor_words(tested, alpha)
    if said is not None:
        claim, reason = said
        text.append(f"**{claim}:** {reason}." + (" The power table says how many seeds would." if "no comparison"
                                                   in claim else ""))
    return text


def holm_first(comp: pd.DataFrame, alpha: float) -> tuple[float, int]:
    """(Holm's first threshold α/m, the family's size m): the comparisons' ``power_alpha`` — α over
    the study's whole family when the report took it from ``report.verdicts``, over the family its
    design implies while nothing is tested yet — else α over the comparisons tested here."""
    if "power_alpha" in comp and len(comp) and finite(comp["power_alpha"].iloc[0]):
        first = float(comp["power_alpha"].iloc[0])
    else:
        first = alpha / max(1, int(comp["testable"].sum()) if "testable" in comp else len(comp))
    return first, max(1, round(alpha / first))


def floor_words(tested: pd.DataFrame, alpha: float, on: str = "on any of them", significant: str = "significant"
                ) -> tuple[str, str] | None:
    """What the exact test's floor leaves within reach for the comparisons ``tested`` — their
    smallest floor in the family they were adjusted in (``stats.family.reach_of``), by the one rule
    (``ablate.stats.words.Reach.floor_words``) — as (claim, reason), a sentence being
    "{claim}: {reason}."; None when the floor holds nothing back. "No comparison can be
    significant" is said only when none can, and never beside a comparison marked significant.
    Every report that says what the seeds allow says it with this (the comparison report too)."""
    if tested.empty:
        return None
    reach = fam.reach_of(tested, alpha)
    floor = float(tested["p_min"].min())
    said = reach.floor_words(floor, seeds_text(tested), on, significant)
    if said is not None and not reach.can(floor) and "significant" in tested and tested["significant"].any():
        return None  # a frame that contradicts its own family: its table's verdicts stand, unexplained
    return said


def seeds_text(tested: pd.DataFrame) -> str:
    """"4 seeds", or "3–5 seeds" when the comparisons have different counts."""
    lo, hi = int(tested["n"].min()), int(tested["n"].max())
    return f"{lo} seeds" if lo == hi else f"{lo}–{hi} seeds"


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
        if not note and not finite(r["power_now"]):  # every blank power says why
            note = (f"no difference to detect (min_effect {num(r['min_effect'])})"
                    if not (finite(r.get("min_effect")) and r["min_effect"] > 0) else "power not computable")
        rows.append({
            "cell": str(r["cell_label"]),
            "n": int(r["n"]),
            "sd": spread,
            "power now": f"{r['power_now']:.0%}" if finite(r["power_now"]) else DASH,
            f"seeds for {power:.0%} power": str(int(r["seeds_needed"])) if finite(r["seeds_needed"]) else DASH,
            "at α/m": pval(r["power_alpha"], bound=True),
            "note": "; ".join(filter(None, [note, "" if r["paired"] else "unpaired: pooled sd of the runs"])),
        })
    cols = ["cell", "n", "sd", "power now", f"seeds for {power:.0%} power", "at α/m", "note"]
    return pd.DataFrame(rows, columns=cols).rename(columns={"sd": "sd of Δ"})


#: Fewest runs with an IQM interval; ``ablate.stats`` decides it (the exported frame has none below).
IQM_CI_MIN_N = stats.IQM_CI_MIN_N


def power_floor_note(comp: pd.DataFrame) -> str:
    """The power table's line where its power is the t-test's and the exact test, which decides,
    cannot reach α/m at the comparisons' seed counts (its smallest p is above it): its own power there
    is 0. Empty where every comparison's exact test can reach α/m."""
    if comp.empty or not {"p_min", "power_alpha"} <= set(comp.columns):
        return ""
    floor, at = pd.to_numeric(comp["p_min"], errors="coerce"), pd.to_numeric(comp["power_alpha"], errors="coerce")
    out = comp[(floor > at) & comp["testable"].astype(bool)]
    if out.empty:
        return ""
    which = "every comparison" if len(out) == int(comp["testable"].sum()) else terminal.count(len(out), "comparison")
    return (f"The power is the t-test's: for {which} ({seeds_text(out)}) the exact test, which gives the verdict, "
            f"cannot give a p below {pval(float(floor[out.index].min()), bound=True)}, above α/m, so its own power "
            "there is 0 — the seeds column says how many would do.")


def few_run_note(few: pd.DataFrame) -> str:
    """The few-run table's line on the IQMs it prints without their interval (``IQM_CI_MIN_N``)."""
    n = pd.to_numeric(few["n"], errors="coerce") if "n" in few.columns else pd.Series(dtype=float)
    if not ((n >= stats.IQM_MIN_N) & (n < IQM_CI_MIN_N)).any():
        return ""
    return (f"IQM (n{NBSP}<{NBSP}{IQM_CI_MIN_N}): its interval is not shown below {IQM_CI_MIN_N} runs, the fewest "
            f"at which its coverage is measured (docs/calibration.md); at {stats.IQM_MIN_N} the quarter trimmed from "
            f"each end keeps {stats.IQM_MIN_N - 2} runs, one degree of freedom, and its interval would span most of "
            "the range.")


def few_run_table(few: pd.DataFrame, reference_id: str | None, confidence: float = 0.95) -> pd.DataFrame:
    """``stats.few_run_estimates`` for print: per cell n, the mean with its t interval, the
    interquartile mean with its trimmed-t interval — or, below ``stats.IQM_MIN_N`` runs, where it
    trims nothing, that it is the mean; below ``IQM_CI_MIN_N`` the IQM alone (``few_run_note`` says
    why) — and the probability
    of beating the reference with Newcombe's interval. Each header names its interval."""
    pct = level(confidence)
    iqm_col = f"IQM [{pct} trimmed-t CI]"
    rows = []
    for _, r in few.iterrows():
        n = int(r["n"])
        if 0 < n < stats.IQM_MIN_N:
            middle = f"the mean (n{NBSP}<{NBSP}{stats.IQM_MIN_N}: nothing trimmed)"
        elif n < IQM_CI_MIN_N:
            middle = f"{num(r['iqm'])} (n{NBSP}<{NBSP}{IQM_CI_MIN_N})"  # why: few_run_note
        else:
            middle = with_ci(r["iqm"], r["iqm_ci_low"], r["iqm_ci_high"], why=_why(r.get("iqm_ci_note")))
        rows.append({
            "cell": str(r["cell_label"]) + (" (reference)" if r["cell_id"] == reference_id else ""),
            "n": n,
            f"mean [{pct} t CI]": with_ci(r["mean"], r["mean_ci_low"], r["mean_ci_high"],
                                          why=_why(r.get("mean_ci_note"))),
            iqm_col: middle,
            f"P(cell > reference) [{pct} Newcombe CI]": (
                with_ci(r["prob_improvement"], r["pi_ci_low"], r["pi_ci_high"], digits=2)
                if r["cell_id"] != reference_id else DASH),
        })
    cols = ["cell", "n", f"mean [{pct} t CI]", iqm_col, f"P(cell > reference) [{pct} Newcombe CI]"]
    return pd.DataFrame(rows, columns=cols)


def gain_points(gain: Any) -> str:
    """A validation gain as accuracy points: ``+4.1 points``."""
    return f"{signed(100 * float(gain), 1)} points" if finite(gain) else DASH


def _steps(r: pd.Series) -> str:
    if not finite(r["steps_min"]):
        return DASH
    lo, hi = int(r["steps_min"]), int(r["steps_max"])
    used = f"{lo:,}" if lo == hi else f"{lo:,}–{hi:,}"
    reached = r.get("budget_reached")
    if finite(reached) and finite(r["budget"]) and reached > r["budget"]:  # extended: up to the budget reached
        return used + f" of {int(r['budget']):,}–{int(reached):,}"
    return used + (f" of {int(r['budget']):,}" if finite(r["budget"]) else "")


def extended_text(r: pd.Series) -> str:
    """How a cell's runs were trained until converged: ``1 of 2 runs, 300 → 600 steps``, or ``2 of 8
    runs, 4,000 → 8,000–16,000 steps`` where they stopped at different budgets; — when none was."""
    n = int(r.get("n_extended", 0) or 0)
    if not n:
        return DASH
    top, low = int(r["budget_reached"]), r.get("budget_extended_min")
    reached = f"{int(low):,}–{top:,}" if finite(low) and int(low) < top else f"{top:,}"
    return f"{n} of {int(r['n'])} run{'s' if int(r['n']) != 1 else ''}, {int(r['budget']):,} → {reached} steps"


def convergence_table(conv: pd.DataFrame, metric: str = "val accuracy") -> pd.DataFrame:
    """``stats.convergence`` for print: per cell the runs still improving, the largest gain of the
    validation metric over their last 20% of steps, the steps used of the budget, early stops and
    the median best step; where some run was trained until converged (``train.until_converged``),
    which runs of each cell were extended and to what budget (``extended``)."""
    extended = "n_extended" in conv.columns and bool(conv["n_extended"].fillna(0).astype(int).any())
    rows = []
    for _, r in conv.iterrows():
        known = int(r["n_known"])
        rows.append({
            "cell": _name(r["cell_label"], r["cell_id"], _improving(conv)),
            "runs": int(r["n"]),
            "still improving": (f"{int(r['n_unconverged'])} of {known}" if known else DASH),
            # the gain of the runs still improving: none flagged, no such gain (the frame's fallback is the
            # gain of every full-budget run, which the column's caption does not define)
            f"{metric} gain, last 20% of steps": (gain_points(r["gain_max"]) if known and int(r["n_unconverged"])
                                                   else DASH),
            "steps used": _steps(r),
            "stopped early": count(r["n_stopped_early"]),
            "best step (median)": f"{int(r['best_step_median']):,}" if finite(r["best_step_median"]) else DASH,
            **({"extended (until converged)": extended_text(r)} if extended else {}),
        })
    cols = ["cell", "runs", "still improving", f"{metric} gain, last 20% of steps", "steps used", "stopped early",
            "best step (median)", *(["extended (until converged)"] if extended else [])]
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
            f"marginal mean [{pct} CI]": with_ci(r["mean"], r["ci_low"], r["ci_high"], why=_why(r.get("ci_note"))),
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
    """``stats.anova`` formatted: term, df, sums of squares, F, p, partial η²; with ``p_adj`` (the
    study's family, ``report.verdicts``) a "p (Holm)" column carries the mark, else the mark is on p."""
    adjusted = "p_adj" in table.columns
    rows = []
    for _, r in table.iterrows():
        resid = r["term"] == "Residual"
        row = {
            "term": r["term"],
            "df": num(r["df"], 0),
            "sum sq": num(r["sum_sq"], 4, sig=True),
            "mean sq": num(r["mean_sq"], 4, sig=True),
            "F": "" if resid else num(r["F"], 2),
            "p": "" if resid else (pval(r["p"]) if adjusted else f"{pval(r['p'])} {r['mark']}".strip()),
        }
        if adjusted:
            row["p (Holm)"] = "" if resid else f"{pval(r['p_adj'])} {r['mark']}".strip()
        row["partial η²"] = "" if resid else num(r["eta_sq_partial"], 3)
        rows.append(row)
    cols = ["term", "df", "sum sq", "mean sq", "F", "p", *(["p (Holm)"] if adjusted else []), "partial η²"]
    return pd.DataFrame(rows, columns=cols)


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
                         "ours": (with_ci(m["mean"], m["ci_low"], m["ci_high"], why=_why(m.get("ci_note"))) if m["n"]
                                  else str(m["status"])),
                         "n": str(int(m["n"])),
                         "ours − published": signed(m["mean"] - r["value"]) if m["n"] else DASH,
                         "published in our CI": inside})
    cols = ["source", "confirmed", "cell", "metric", "published", f"ours: mean [{pct} CI]", "n",
            "ours − published", "published in our CI"]
    out = pd.DataFrame(rows).rename(columns={"ours": f"ours: mean [{pct} CI]"})
    return out.reindex(columns=cols)
