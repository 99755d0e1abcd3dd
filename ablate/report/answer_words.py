"""The answer page in words: what each factor, interaction and comparison did, what the answer
table's rows and cells mean, and the block every report prints on page one (``show_answer``).

Every number is one ``verdicts.answer_table`` prints, from the same ``Verdicts`` frames, so the
sentences cannot say what the table does not.
"""

from __future__ import annotations

import pandas as pd

from ablate.report import format as fmt
from ablate.report import never_learned as nl
from ablate.report import overrides
from ablate.report.verdicts import (
    NORM_WORDS,
    TWO_CELLS,
    Verdicts,
    answer_table,
    comparison_parts,
    level_means,
    measures_of,
    names,
    terms,
)
from ablate.stats.estimators import robust_level
from ablate.terminal import count

__all__ = ["answer_intro", "answer_lead", "answer_sentences", "show_answer", "summary_lead", "term_sentences"]


def _and(items: list[str], word: str = "and") -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + f" {word} " + items[-1]


def _or(items: list[str]) -> str:
    return _and(items, "or")




def _term_rows(v: Verdicts, term: str, measures: list[str] | None = None
               ) -> list[tuple[str, pd.Series, pd.DataFrame, str | None]]:
    """Per measure that tested ``term``: its ANOVA row, the main-effects frame and the measure key."""
    out = []
    for m in measures or measures_of(v):
        if m == v.metric:
            table, effects, measure = v.anova, v.effects, None
        else:
            table = v.norm_anova[v.norm_anova["measure"] == m] if len(v.norm_anova) else v.norm_anova
            effects, measure = v.norm_effects, m
        row = table[table["term"] == term] if len(table) else table
        if len(row):
            out.append((m, row.iloc[0], effects, measure))
    return out


def answer_sentences(v: Verdicts, named: int = 3) -> list[str]:
    """Page one's answer in words: what each factor and interaction does on each measure, and what
    the comparisons with the reference found — each number as the answer table prints it, from the
    same frames; for a sequential study, its declared comparisons' valid decisions counted."""
    if v.sequential:
        return _sequential_sentences(v, named)
    heads = {v.metric: fmt.metric_name(v.metric), **NORM_WORDS}
    lost = nl.lost_sentence([names(v)[0].get(c, c) for c in v.lost])
    looked = [f"**Seeds chosen after looking.** {v.after_looks[0].upper()}{v.after_looks[1:]}."] if v.after_looks else []
    return looked + [lost] * bool(lost) + term_sentences(v) + _comparison_sentences(v, heads, named)


def _sequential_sentences(v: Verdicts, named: int) -> list[str]:
    """A sequential study's answer: its declared comparisons counted by their valid decisions, the
    significant ones named with their estimate and the words the table prints."""
    table = v.sequential_beside
    if table is None or table.empty:
        return []
    said = list(table["sequential decision (valid)"])
    est = next(c for c in table.columns if str(c).startswith("estimate ["))
    found = [f"{c} on {m} ({e}) {w.removeprefix('significant ')}" for c, m, e, w in
             zip(table["cell"], table["measure"], table[est], said, strict=True) if w.startswith("significant")]
    counts = [(sum(w.startswith(k) for w in said), k) for k in ("equivalent", "futile", "undecided", "open")]
    words = {"open": "still open", "undecided": "undecided at the last look"}
    rest = ", ".join(f"{k} {words.get(w, w)}" for k, w in counts if k)
    shown = "; ".join(found[:named] + ([f"{len(found) - named} more (the table)"] if len(found) > named else []))
    verb = "none is" if not found else f"{len(found)} {'is' if len(found) == 1 else 'are'}"
    ids = {label: cid for cid, label in names(v)[0].items()}
    untrained = _untrained_sentence(v, [(ids.get(c, c), c, m, w.split(" at ")[0]) for c, m, w in
                                        zip(table["cell"], table["measure"], said, strict=True) if w[:4] != "open"])
    if len(said) == 1:  # "of the 1 comparisons …, none is significant and 1 futile": said of the one instead
        row = table.iloc[0]
        return [f"The one comparison the sequential design declared, {row['cell']} on {row['measure']} "
                f"({row[est]}), is {said[0]}.", *untrained]
    head = f"Of the {len(said)} comparisons the sequential design declared, {verb} significant"
    if found and not rest:  # every one significant: no closing dash before the full stop
        return [f"{head}: {shown}.", *untrained]
    return [head + (f" — {shown} —" if found else "") + (f" and {rest}." if rest else "."), *untrained]


def _untrained_sentence(v: Verdicts, rows: list[tuple[str, str, str, str]]) -> list[str]:
    """The decisions (``rows``: cell id, label, measure, decision) whose cell or reference mostly never
    learned, said after the verdicts: an *equivalent* there says both failed to train alike, not that
    the variants would match trained (``[]`` when none is, or the task has no chance level)."""
    if v.chance is None or v.never is None:
        return []
    hits = [f"{label} on {m}, {word}{cav}" for cid, label, m, word in rows
            if (cav := nl.cells_caveat(v.never, cid, v.reference[0]))]
    if not hits:
        return []
    these = "this decision compares" if len(hits) == 1 else f"these {len(hits)} decisions compare"
    return [f"**Untrained runs.** {these[0].upper()}{these[1:]} runs that mostly never learned "
            f"({nl.rule(v.metric, v.chance, v.margin)}): {'; '.join(hits)}. Where they did not train, a decision "
            "says how untrained runs differ, not how the variants would once trained."]


def term_sentences(v: Verdicts, measures: list[str] | None = None) -> list[str]:
    """What each factor and two-way interaction does on ``measures`` (default: every measure
    tested), at the family's Holm-adjusted p, with the marginal means the answer table prints; or
    why no factor is tested. None for a sequential study."""
    if v.sequential:
        return []
    heads = {v.metric: fmt.metric_name(v.metric), **NORM_WORDS}
    out, quiet, inter, inter_hit = [], [], 0, False
    for term in terms(v):
        rows = _term_rows(v, term, measures)
        if not rows:
            continue
        hits, rest = [], []
        for m, r, effects, measure in rows:
            if not bool(r["significant"]):
                rest.append(heads[m])
                continue
            means = (level_means(effects, term, measure) if " × " not in term and len(effects)
                     and (effects["factor"] == term).any() else "")
            what = means or f"partial η² {fmt.num(r['eta_sq_partial'], 2)}"
            hits.append(f"{heads[m]} ({what}; p (Holm) {fmt.p_is(r['p_adj'])})")
        # A significant term whose levels mostly never learned: the sentence says so, not only page 2.
        untrained = nl.term_caveat(v.never, term, v.metric, v.chance, v.margin) if hits else ""
        if " × " in term:
            inter += 1
            if hits:
                inter_hit = True
                out.append(f"The interaction **{term}** is significant on {_and(hits)}: one factor's effect there "
                           f"depends on the other's level{untrained}.")
        elif hits:
            out.append(f"**{term}** is significant on {_and(hits)}" + (f"; not on {_or(rest)}" if rest else "")
                       + f"{untrained}.")
        else:
            least = fmt.pval(min(float(r["p_adj"]) for _, r, _, _ in rows))
            quiet.append(f"**{term}** ({'smallest ' if len(rows) > 1 else ''}p (Holm) {least})")
    one = measures is not None and len(measures) == 1
    where = heads[measures[0]] if one else "any measure"
    none_inter = f"no two-way interaction is significant on {where} ({inter} tested)" if inter and not inter_hit else ""
    if quiet:
        out.append((f"Not significant on {where}: " if one else "Significant on no measure: ") + _and(quiet)
                   + (f"; {none_inter}." if none_inter else "."))
    elif none_inter:
        out.append(none_inter[0].upper() + none_inter[1:] + ".")
    if not terms(v) and v.anova_why and v.anova_why != TWO_CELLS and len(v.effects):  # two: the comparison says it
        out.append(f"No factor is tested: {v.anova_why.removeprefix('ANOVA not applicable: ')}.")
    return out


def _comparison_sentences(v: Verdicts, heads: dict[str, str], named: int) -> list[str]:
    """What the comparisons with the reference found: the significant ones named (``named`` at
    most, the rest counted), and how many were equivalent and undecided."""
    labels, ref = names(v)
    found, words, untested, marked, equivalent_rows = [], [], 0, [], []
    for frame, ratio in ((v.comparisons, False), (v.norm_comparisons, True)):
        for _, r in frame.iterrows() if len(frame) else ():
            text, word = comparison_parts(r, ratio, v)
            untested += word == "not tested"
            if not word or word == "not tested":
                continue
            words.append(word)
            if word == "equivalent":  # a significant one carries its caveat inline; these are said after
                m = r["measure"] if ratio else v.metric
                equivalent_rows.append((r["cell_id"], labels.get(r["cell_id"], r["cell_id"]), heads[m], word))
            if word.startswith("SIGNIFICANT"):
                m = r["measure"] if ratio else v.metric
                untrained = nl.cells_caveat(v.never, r["cell_id"], v.reference[0])
                marked.append(bool(untrained))
                found.append(f"{labels.get(r['cell_id'], r['cell_id'])} on {heads[m]} ({text}, p (Holm) "
                             f"{fmt.p_is(r['p_adj'])}{untrained})")
    if not words:
        head = f"None of the {untested} comparisons" if untested > 1 else "The one comparison"
        verb = "is tested" if untested > 1 else "is not tested"
        return [f"{head} with the reference **{ref}** {verb}: too few seeds or no spread (the table)."] if untested else []
    equivalent = sum(w == "equivalent" for w in words)
    undecided = sum(w.startswith("undecided") for w in words)
    rest = ", ".join(f"{k} {w}" for k, w in ((equivalent, "equivalent"), (undecided, "undecided")) if k)
    if not found:
        rest = rest if equivalent and undecided else f"all {rest}"
        return [f"No variant differs significantly from the reference **{ref}** on any measure: of its "
                f"{len(words)} tested comparisons, {rest}.", *_untrained_sentence(v, equivalent_rows)]
    cut = named if len(found) > named + 1 else len(found)  # "and 1 more" names no fewer words than the one
    shown = _and(found[:cut] + ([f"{len(found) - cut} more (the table)"] if len(found) > cut else []))
    tail = nl.comparisons_tail(v.metric, v.chance, v.margin) if any(marked[:cut]) else ""
    return [f"Against the reference **{ref}**, {len(found)} of {count(len(words), 'comparison')} "
            f"{'is' if len(found) == 1 else 'are'} significant: {shown}"
            + (f"; {rest}" if rest else "") + f"{tail}.", *_untrained_sentence(v, equivalent_rows)]


def answer_intro(v: Verdicts, confidence: float = 0.95) -> str:
    """What the answer table's cells mean, with the thresholds it used (printed under the table)."""
    level = fmt.level(confidence)
    detect = f"±{fmt.num(v.min_effect)}"
    # The reference's own flags: no row is its own, and every comparison's difference is from it.
    own = "; ".join(v.flags.get(str(v.reference[0]), []))
    # A page without norm measures (reports: [accuracy]) has no ratio, geometric mean or norm flag to explain.
    norms = bool(len(v.norm_comparisons) or len(v.norm_anova))
    return (f"**Key.** A comparison's cell: the difference from the reference **{v.reference[1]}**"
            + (" (a ratio for a norm measure)" if norms else "") + f" with its {level} interval"
            + (f"; the reference's own flags: {own}" if own else "")
            + ". A factor's: its marginal mean per level"
            + (" (norm measures: geometric; over layers (mean √CV)², as the norm report's stability table)" if norms
               else "") + "; an interaction's: partial η². "
            f"**SIGNIFICANT**: p (Holm) < {v.alpha:g}. **equivalent**: the interval within {detect} (`stats.min_effect`)"
            + (f" or [1/{v.min_ratio:g}, {v.min_ratio:g}] (`stats.min_ratio`)" if norms else "")
            + ". **undecided (~N seeds)**: neither; N is the seeds per cell at which the power line (`stats.power`) "
            f"would detect that smallest effect ({detect}" + (f" or {v.min_ratio:g}×" if norms else "")
            + "), not what this comparison's own effect needs. **not tested**: too few seeds or no spread. "
            + ("**—**: no such test (the spread over seeds has no factor test, its runs' deviations not being "
               "independent; CV over layers needs two layers). " if norms else "")
            + "After a dash in a question: its cell's flags (runs diverged, failed, never learned"
            + (", with non-finite or late-growing norms" if norms else "")
            + "; still improving when its budget ran out), or a factor's levels whose runs mostly never learned"
            + (f" (never learned: {nl.rule(v.metric, v.chance, v.margin)})" if v.chance is not None else "")
            + f". {level} intervals are computed at {fmt.level(robust_level(confidence))} to cover {level} on "
            "skewed and ceiling-bound runs (docs/calibration.md).")


def answer_lead(v: Verdicts, report: str = "accuracy") -> str:
    """The answer page's first paragraph in ``report`` (``accuracy`` or ``norm_stability``): what its
    rows are. A sequential study's page has a row per declared comparison and no factor rows."""
    other = "norm_stability" if report == "accuracy" else "accuracy"
    # The other report is named only where the spec renders it (reports: [accuracy] has no norm report).
    beside = v.reports is None or other in v.reports
    name = "norm" if other == "norm_stability" else "accuracy"
    if v.sequential:
        return ("One row per comparison the sequential design declared — each cell against the reference on each "
                "measure of its `seeds.measures` — with the decision its looks made. There are no factor rows: the "
                "seeds depended on the results, so no factor test is valid."
                + (f" This page and the {name} report's, rendered with the same parameters, say the same thing."
                   if beside else ""))
    alpha = overrides.alpha_words(v.alpha, v.rendered)  # an α set when rendering says so
    return (f"The table gives every verdict at the family's Holm-adjusted p ({alpha}; key below): a row "
            "per question (each factor, each two-way interaction, each variant against the reference), a column per "
            "measure the study's reports test"
            + (f"; the {name} report's page one, rendered with the same parameters, is the same" if beside else "")
            + f".{overrides.other_words(v.rendered)}")


def summary_lead(v: Verdicts, report: str = "accuracy") -> str:
    """The summary's first line in ``report``: where its numbers come from and how its comparisons
    were tested — by the fixed design's tests over one family, or, in a sequential study, by the
    design's looks alone (no fixed-design p, ANOVA or Holm p is printed)."""
    if report == "accuracy":
        return ("Generated from the numbers of the appendix tables; "
                + ("the comparisons with the reference are the sequential design's decisions (stage-wise p, "
                   "repeated intervals): no fixed-design p is valid after a data-dependent number of seeds."
                   if v.sequential else "every p (Holm) is adjusted over the study's one family."))
    if v.sequential:
        return ("Generated from the numbers of the tables below. Each run (cell × seed) gives one value per measure; "
                "the values and ratios per variant are descriptive, and the comparisons with the reference are the "
                "sequential design's decisions on the measures it declared (stage-wise p, repeated intervals): no "
                "permutation test, ANOVA or Holm p is valid after a data-dependent number of seeds, so none is "
                "printed.")
    factors = ("factors by an ANOVA with seeds as replicates" if len(v.norm_anova)
               else "no factor is tested (the appendix on factor effects says why)")
    return ("Generated from the numbers of the tables below. Each run (cell × seed) gives one value per measure; "
            "variants are compared with the declared reference on those values by exact permutation tests (paired on "
            f"shared seeds, never below three seeds), {factors}; every p (Holm) is adjusted over the study's one "
            "family (above).")


def show_answer(v: Verdicts, confidence: float = 0.95, report: str = "accuracy") -> None:
    """Page one's block in ``report``: the answer in words, what the table's rows are, the family
    sentence, the answer table, what its cells mean."""
    from ablate.report.display import say, show

    words = answer_sentences(v)
    if words:
        say(*[f"- {w}" for w in words])
    say(answer_lead(v, report))
    if v.sequential:
        say(v.policy())
        if len(v.sequential_beside):
            show(v.sequential_beside, name="sequential-vs-fixed", align_left=list(v.sequential_beside.columns),
                 intro="Each sequential comparison's decision beside what a fixed-design exact test on the same "
                       "seeds would say (descriptive, not valid after a data-dependent stop).")
            say(v.sequential_why)
        return
    table = answer_table(v)
    show(table, name="answer", align_left=list(table.columns),
         intro=f"Variants are named by their levels of {v.key}." if v.key else ())
    say(v.policy(), answer_intro(v, confidence))
