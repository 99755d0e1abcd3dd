"""The answer page: every verdict of a study on one page, in every report, from one family.

``study_verdicts`` runs each test the study's reports make — every cell against the declared
reference and every ANOVA term (main effects and two-way interactions), on accuracy and on each norm
measure — adjusts them together (``stats.family``: one Holm family for the whole study), and hands
the adjusted frames back to the reports, which print them in their bodies. ``answer_table`` is the
page-one table: one row per question (a factor, an interaction, a comparison), one column per
measure, each cell the effect with its interval and the verdict, made from the same frames the
body's tables print.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from ablate import stats
from ablate.report import format as fmt
from ablate.report import never_learned as nl
from ablate.report import overrides
from ablate.stats import family as fam

__all__ = ["NormInputs", "Verdicts", "answer_table", "comparison_parts", "level_means", "measures_of", "names",
           "norm_inputs", "reference", "study_verdicts", "terms"]

NORM_WORDS = {"training": "‖x‖² CV over training", "depth": "‖x‖² CV over layers",
              "seeds": "‖x‖² spread over seeds", "final": "final ‖x‖²"}


@dataclass
class Verdicts:
    """Every test of a study, adjusted over one family. Frames are empty where a report's analysis
    does not apply (no norm data, a measure nobody has, too few seeds)."""

    family: pd.DataFrame
    alpha: float
    metric: str
    reference: tuple[str, str]
    min_effect: float
    min_ratio: float
    sequential: bool
    comparisons: pd.DataFrame = field(default_factory=pd.DataFrame)  # accuracy: stats.compare_to_reference
    anova: pd.DataFrame = field(default_factory=pd.DataFrame)  # accuracy: terms, p_adj from the family
    anova_why: str = ""
    effects: pd.DataFrame = field(default_factory=pd.DataFrame)  # accuracy: stats.main_effects
    norm_comparisons: pd.DataFrame = field(default_factory=pd.DataFrame)  # stats.norms.compare
    norm_anova: pd.DataFrame = field(default_factory=pd.DataFrame)
    norm_anova_why: dict[str, str] = field(default_factory=dict)
    norm_effects: pd.DataFrame = field(default_factory=pd.DataFrame)
    flags: dict[str, list[str]] = field(default_factory=dict)  # cell id → flags (diverged, still improving, …)
    sequential_m: int | None = None  # a sequential design's comparisons (its family), else None
    labels: dict[str, str] = field(default_factory=dict)  # cell id → the short label both reports print
    key: str = ""  # what the short labels' parts are ("parameterisation · normalisation · layers")
    #: a sequential study: per comparison its decision beside the fixed-design exact test on the same
    #: seeds (``report.sequential.fixed_beside``; descriptive), and why the two can differ
    sequential_beside: pd.DataFrame = field(default_factory=pd.DataFrame)
    sequential_why: str = ""
    #: the m of the power lines' α/m: the family tested, else the design's; a sequential study's
    #: own family (its comparisons, Bonferroni), whose α/m its looks test at
    power_m: int = 1
    #: per cell, runs that never learned (``never_learned.counts``), by the rule's chance and margin
    never: pd.DataFrame = field(default_factory=pd.DataFrame)
    chance: float | None = None
    margin: float = 0.0
    #: the report parameters set when rendering away from their defaults: name → (value, default)
    rendered: dict[str, tuple[float, float]] = field(default_factory=dict)
    lost: list[str] = field(default_factory=list)  # cells with no finished run (``never_learned.lost_cells``)
    #: the reports the spec renders (None: not known): page one names the other only when it is one
    reports: tuple[str, ...] | None = None
    #: a fixed design whose seeds were first added look by look (``sequential_looks.fixed_after_looks``)
    after_looks: str = ""

    def policy(self) -> str:
        """The report's one sentence on the family (``stats.family.policy_sentence``)."""
        return fam.policy_sentence(self.family, self.alpha, self.sequential_m)


@dataclass
class NormInputs:
    """The norm analysis's inputs, as the norm report builds them: the prepared curves, the probe
    norms per layer, one row per run (the unit of every test) and the variants as figures name them."""

    df: pd.DataFrame
    per_layer: pd.DataFrame
    seeds: pd.DataFrame
    order: list[tuple[str, str]]
    fig_order: list[tuple[str, str]]
    key: str


def norm_inputs(res: Any, trials: pd.DataFrame, factors: list[str]) -> NormInputs | None:
    """``NormInputs`` of a study whose curves were read, or None when it has no probe data."""
    from ablate.report import norm_tables as ns
    from ablate.stats import norms as sn

    if res.curves is None or len(res.curves) == 0:
        return None
    df = sn.prepare(res.curves, res.trials)
    if not len(df):
        return None
    order = sn.variants(df, res.trials)
    fig_order, key = ns.short_order(order)
    per_layer = sn.layer_norms(df, "probe")
    return NormInputs(df, per_layer, sn.per_seed(per_layer, trials, factors), order, fig_order, key)


def reference(res: Any, trials: pd.DataFrame, chosen: str | None = None) -> tuple[str, str]:
    """(cell id, why) of the declared reference as the trials name it: ``res.reference_cell``, and
    when that id has no rows — the baseline's id moved with the code, as a changed default moves it
    for a study rendered from an older export — the trials' cell with the baseline cell's label."""
    from ablate import design

    ref_id, why = res.reference_cell(chosen)
    ids = set(trials["cell_id"])
    if ref_id in ids or not len(trials):
        return ref_id, why
    label = next((c.label for c in design.cells(res.spec) if c.id == ref_id), None)
    match = trials.loc[trials["cell_label"] == label, "cell_id"] if label is not None else trials.iloc[0:0]
    if len(match):
        return str(match.iloc[0]), f"{why}; found by its label: its id changed with the code since these runs"
    return str(trials["cell_id"].iloc[0]), "the first cell: the spec's baseline has no runs here"


#: Why a study of two cells has no factor test: its one comparison is the factor's one contrast
#: (``design.family`` counts no term for it either).
TWO_CELLS = ("two cells: the comparison with the reference tests the factor's one contrast, paired on the seeds; "
             "an ANOVA would test it a second time, unpaired, and double its place in the family")


def two_cells(trials: pd.DataFrame) -> bool:
    """Whether the study has two cells, where a factor test would repeat the one comparison."""
    return trials["cell_id"].nunique() == 2


def accuracy_anova(trials: pd.DataFrame, metric: str, factors: list[str]) -> tuple[pd.DataFrame, str]:
    """The accuracy ANOVA the family takes (main effects and two-way interactions, seeds as
    replicates, at least ``MIN_N_TEST`` seeds in every cell, as every other test needs), on the
    finished levels of a partial study; or an empty frame and why not (``TWO_CELLS``: none for two)."""
    varied = [f for f in factors if f in trials.columns and trials[f].nunique() > 1]
    if not varied:
        return pd.DataFrame(), "no factor has two levels or more"
    if two_cells(trials):
        return pd.DataFrame(), TWO_CELLS
    ok, why = stats.anova_applicable(trials, metric, varied)
    data = trials
    if not ok:
        subset, dropped = stats.anova_on_finished_levels(trials, metric, varied)
        if dropped and stats.anova_applicable(subset, metric, varied)[0]:
            data, ok = subset, True
    if not ok:
        return pd.DataFrame(), why
    done = stats.completed_runs(data, metric)
    fewest = int(done.groupby("cell_id").size().min()) if len(done) else 0
    if fewest < stats.MIN_N_TEST:
        return pd.DataFrame(), (f"too few seeds to test (a cell has {fewest}; at least {stats.MIN_N_TEST} are "
                                "needed)")
    try:
        table = stats.anova(data, metric, varied, max_order=2)
    except stats.AnovaNotApplicable as exc:  # e.g. no spread at all: nothing to test
        return pd.DataFrame(), str(exc)
    return table[table["term"] != "Residual"].reset_index(drop=True), ""


def design_family(res: Any) -> int:
    """m of the family the study's design implies (``ablate.design.family``): what ``ablate plan``
    warned with, and what the tests will be corrected over once the seeds allow them."""
    from ablate.design.family import family_size

    return family_size(res.spec)[0]


def study_verdicts(res: Any, trials: pd.DataFrame, metric: str, reference: tuple[str, str], alpha: float = 0.05,
                   confidence: float = 0.95, min_effect: float | None = None, norms: NormInputs | None = None,
                   design_m: int | None = None, margin: float | None = None) -> Verdicts:
    """Every test of the study on ``metric`` and, when ``norms`` is given (``norm_inputs``), on each
    norm measure, adjusted over one family. ``design_m``: the family its design implies
    (``ablate.design.family``), the m of the power lines while too few seeds allow a test. A
    sequential study tests nothing here (its seeds depended on the results): its power lines are at
    its own comparisons' α/m (``sequential_section.family_size``). ``margin``: a run of an accuracy
    ``metric`` never learned at ``≤ chance + margin`` (None: the accuracy report's default)."""
    seeds = norms.seeds if norms is not None else None
    spec = res.spec
    effect = spec.stats.min_effect if min_effect is None else min_effect
    sequential = spec.sequential is not None
    factors = [f for f in res.factors if f in trials.columns]
    ref_id = reference[0]
    comp, anova, why, effects = pd.DataFrame(), pd.DataFrame(), f"no {metric} recorded", pd.DataFrame()
    if metric in trials.columns:  # a task without the metric (a loss-only task) tests the norm measures alone
        comp = stats.compare_to_reference(trials, metric, ref_id, alpha, confidence=confidence, min_effect=effect,
                                          power=spec.stats.power)
        anova, why = accuracy_anova(trials, metric, factors)
        varied = [f for f in factors if trials[f].nunique() > 1]
        effects = stats.main_effects(trials, metric, varied, confidence) if varied else pd.DataFrame()
    ncomp = pd.DataFrame()
    nanova, nwhy, neffects = pd.DataFrame(), {}, pd.DataFrame()
    if seeds is not None and len(seeds):
        from ablate.stats import norms as sn

        ncomp = sn.compare(seeds, norms.per_layer, ref_id, norms.fig_order, alpha, confidence, spec.stats.min_ratio,
                           spec.stats.power)
        nanova, nwhy = (pd.DataFrame(), {m: TWO_CELLS for m in sn.OWN_MEASURES}) if two_cells(trials) \
            else sn.factor_anova(seeds, factors, alpha)
        neffects = sn.main_effects(seeds, factors, confidence)
    members = fam.members([(metric, comp), ("norm", ncomp)], [(metric, anova), ("norm", nanova)])
    if sequential:  # the seeds depended on the results: only the sequential design's tests are valid
        members = members.iloc[0:0]
    adjusted = fam.adjust(members, alpha)
    seq_m = None
    if sequential:  # its family is its comparisons (each at α/m, Bonferroni), not the fixed design's tests
        from ablate.report import sequential_section as seqrep

        seq_m = seqrep.family_size(spec)
    m = seq_m or len(adjusted) or design_m or 1  # nothing tested yet: the seeds a test will need at the design's α/m
    if len(comp):
        comp = power_at(fam.apply(comp, adjusted, metric, "comparison", alpha), alpha / m, effect, spec.stats.power)
    if len(anova):
        anova = fam.apply(anova, adjusted, metric, "term", alpha)
    if len(ncomp):
        ncomp = power_at(fam.apply(ncomp, adjusted, "norm", "comparison", alpha), alpha / m,
                         float(np.log(spec.stats.min_ratio)), spec.stats.power)
    if len(nanova):
        nanova = fam.apply(nanova, adjusted, "norm", "term", alpha)
    from ablate.report.norm_tables import short_order

    order = list(dict(zip(trials["cell_id"], trials["cell_label"], strict=True)).items())
    short, key = short_order(order)
    beside, seq_why = pd.DataFrame(), ""
    if sequential:
        fixed, sizes = {}, []
        for n in sorted({int(r["seeds"]) for r in seqrep.decisions(res.sequential, spec)}):
            fixed[n], size = _fixed_design(spec, trials, metric, ref_id, factors, alpha, norms, n)
            sizes.append(size)
        beside = seqrep.fixed_beside(res.sequential, spec, fixed, dict(short), alpha)
        floors = [x for at in fixed.values() for f in at.values() for x in f["p_min"]]
        fixed_only = int(((beside["differ"] == "yes")
                          & ~beside["sequential decision (valid)"].str.startswith("significant")).sum()) if len(beside) else 0
        seq_why = seqrep.fixed_why(spec, max(sizes, default=0), floors, alpha, fixed_only)
    margin = nl.default_margin() if margin is None else margin
    chance = res.chance if metric.endswith("accuracy") else None  # the accuracy report's rule, its chance
    never = nl.counts(trials, metric, chance, margin, factors)
    return Verdicts(adjusted, alpha, metric, reference, effect, spec.stats.min_ratio, sequential, comp, anova, why,
                    effects, ncomp, nanova, nwhy, neffects, _flags(trials, metric, seeds, spec.train.steps, effect, never),
                    seq_m, dict(short), key, beside, seq_why, m, never, chance, margin,
                    overrides.changed(alpha, confidence, margin, effect, spec.stats.min_effect), nl.lost_cells(trials),
                    _report_names(spec), _after_looks(res))


def _after_looks(res: Any) -> str:
    from ablate.runner.sequential_looks import fixed_after_looks

    state = getattr(res, "sequential", None)
    return fixed_after_looks(res.spec, state) if isinstance(state, dict) else ""


def _report_names(spec: Any) -> tuple[str, ...] | None:
    try:
        return tuple(spec.report_names)
    except AttributeError:  # a stand-in spec without its reports
        return None


def _fixed_design(spec: Any, trials: pd.DataFrame, metric: str, ref_id: str, factors: list[str], alpha: float,
                  norms: NormInputs | None, n: int) -> tuple[dict[str, pd.DataFrame], int]:
    """What a fixed design would test on each cell's first ``n`` seeds (the seeds a sequential look
    analysed): measure → its comparisons with ``p_adj`` Holm over that design's whole family
    (comparisons and ANOVA terms on every measure), and the family's size."""
    first = set(spec.seed_list[:n])
    comp, anova, ncomp, nanova = pd.DataFrame(), pd.DataFrame(), pd.DataFrame(), pd.DataFrame()
    if metric in trials.columns:
        at = trials[trials["seed"].isin(first)]
        comp = stats.compare_to_reference(at, metric, ref_id, alpha, min_effect=spec.stats.min_effect,
                                          power=spec.stats.power)
        anova, _ = accuracy_anova(at, metric, factors)
    if norms is not None and len(norms.seeds):
        from ablate.stats import norms as sn

        seeds = norms.seeds[norms.seeds["seed"].isin(first)]
        ncomp = sn.compare(seeds, norms.per_layer[norms.per_layer["seed"].isin(first)], ref_id, norms.fig_order,
                           alpha, min_ratio=spec.stats.min_ratio, power=spec.stats.power, ratio_intervals=False)
        nanova = pd.DataFrame() if two_cells(trials) else sn.factor_anova(seeds, factors, alpha)[0]
    would = fam.adjust(fam.members([(metric, comp), ("norm", ncomp)], [(metric, anova), ("norm", nanova)]), alpha)
    out = {metric: fam.apply(comp, would, metric, "comparison", alpha)} if len(comp) else {}
    if len(ncomp):
        norm_fixed = fam.apply(ncomp, would, "norm", "comparison", alpha)
        out.update({f"{fam.NORM_PREFIX}{m}": f for m, f in norm_fixed.groupby("measure", sort=False)})
    return out, len(would)


def power_at(comp: pd.DataFrame, alpha_m: float, min_effect: float, power: float) -> pd.DataFrame:
    """The power line at ``alpha_m``: the family's first Holm threshold (α over the whole family, not
    over one report's comparisons; a comparison report's over its own), or a sequential study's
    per-comparison α/m."""
    out = comp.assign(power_alpha=alpha_m)
    lines = [stats.power_line(r.sd_diff, int(r.n), min_effect, alpha_m, power, bool(r.paired))
             for r in out.itertuples()]
    out["power_now"] = [now for now, _ in lines]
    out["seeds_needed"] = [need for _, need in lines]
    return out


def _flags(trials: pd.DataFrame, metric: str, seeds: pd.DataFrame | None, steps: int | None = None,
           min_gain: float = 0.01, never: pd.DataFrame | None = None) -> dict[str, list[str]]:
    """Per cell: the states a reader must see beside its verdicts — runs diverged, failed, never
    learned (``never``: ``never_learned.counts``, the accuracy report's rule), with non-finite or
    late-growing norms (``flagged``), and a cell still improving when its step budget ran out
    (``stats.cell_convergence``, as the accuracy report's convergence table has it)."""
    out: dict[str, list[str]] = {}
    improving: set[str] = set()
    if steps is not None:
        conv = stats.cell_convergence(trials, stats.step_budget(trials, steps), min_gain=min_gain)
        improving = {str(c) for c in conv.loc[conv["still_improving"].fillna(False).astype(bool), "cell_id"]}
    rep = stats.phase_rows(trials, "replicate")
    for cid, g in rep.groupby("cell_id", sort=False):
        flags = []
        k = int((g["status"] == "diverged").sum())
        if k:
            flags.append(f"{k} diverged")
        if "failed" in set(g["status"]):
            flags.append(f"{int((g['status'] == 'failed').sum())} failed")
        if never is not None and (said := nl.cell_flag(never, str(cid))):
            flags.append(said)
        column = "flagged" if seeds is not None and "flagged" in seeds.columns else "nonfinite"
        if seeds is not None and column in seeds.columns:
            mine = seeds[(seeds["cell_id"] == cid) & ~seeds.get("diverged", pd.Series(False, index=seeds.index))
                         .fillna(False).astype(bool)]  # a run whose training diverged is counted as that above
            bad = int(mine[column].fillna(False).astype(bool).sum())
            if bad:
                flags.append(f"{bad} run{'s' if bad > 1 else ''} with non-finite or late-growing norms")
        if str(cid) in improving:
            flags.append("still improving")
        if flags:
            out[str(cid)] = flags
    return out


# --- the page-one table ------------------------------------------------------------------------------


def _verdict_word(significant: bool, low: float, high: float, bound: tuple[float, float] | None,
                  needed: Any, tested: bool, p_adj: Any = None) -> str:
    if not tested:
        return "not tested"
    if significant:
        return f"SIGNIFICANT (p {fmt.pval(p_adj)})" if fmt.finite(p_adj) else "SIGNIFICANT"
    if bound is not None and np.isfinite(low) and np.isfinite(high) and bound[0] <= low and high <= bound[1]:
        return "equivalent"
    if fmt.finite(needed):
        # The seeds to detect the smallest effect of interest, not to decide this comparison: the key
        # under the table says so ("(~13 seeds)" beside an effect of 0.49 read as what this one needed);
        # said in every cell, it made each row of a 48-cell table four lines tall.
        return f"undecided (~{int(needed)} seeds)"
    return "undecided"


def comparison_parts(r: pd.Series, ratio: bool, v: Verdicts) -> tuple[str, str]:
    """A comparison's effect with its interval, and its verdict word."""
    if ratio:
        value, low, high = r["ratio"], r["ratio_low"], r["ratio_high"]
        text = fmt.with_ci(value, low, high, 2, sig=True) + "×" if fmt.finite(low) else f"{fmt.num(value, 3, sig=True)}×"
        bound = (1 / v.min_ratio, v.min_ratio)
    else:
        value, low, high = r["mean_diff"], r["diff_ci_low"], r["diff_ci_high"]
        text = fmt.with_ci(value, low, high, 3, sign=True) if fmt.finite(low) else fmt.signed(value, 3)
        bound = (-v.min_effect, v.min_effect)
    if not fmt.finite(value):
        return fmt.DASH, ""
    word = _verdict_word(bool(r["significant"]), float(low), float(high), bound, r.get("seeds_needed"),
                         bool(r["testable"]) and fmt.finite(r["p"]), r.get("p_adj"))
    return text, word


def _comparison_cell(r: pd.Series, ratio: bool, v: Verdicts) -> str:
    text, word = comparison_parts(r, ratio, v)
    return f"{text} {word}" if word else text


def level_means(effects: pd.DataFrame, factor: str, measure: str | None, digits: int = 3) -> str:
    sub = effects[effects["factor"] == factor]
    if measure is not None:
        sub = sub[sub["measure"] == measure]
        pieces = [f"{lv} {fmt.num(val, digits, sig=True)}" for lv, val in zip(sub["level"], sub["value"], strict=True)]
    else:
        pieces = [f"{lv} {fmt.num(val, digits)}" for lv, val in zip(sub["level"], sub["mean"], strict=True)]
    return " · ".join(pieces)


def _term_cell(table: pd.DataFrame, term: str, effects: pd.DataFrame, measure: str | None) -> str:
    row = table[table["term"] == term]
    if row.empty:
        return fmt.DASH
    r = row.iloc[0]
    what = (level_means(effects, term, measure) if " × " not in term and len(effects)
            else f"partial η² {fmt.num(r['eta_sq_partial'], 2)}")
    word = "SIGNIFICANT" if bool(r["significant"]) else "n.s."
    return f"{what}; {word} (p {fmt.pval(r['p_adj'])})"


#: Comparisons the answer table lists one by one; past this, the decided ones and one row counting
#: the rest (every comparison's row: the norm report's ratio table and the accuracy report's comparisons).
MAX_COMPARISON_ROWS = 16


def _decided_first(rows: list[dict[str, str]], columns: list[str], max_rows: int) -> list[dict[str, str]]:
    """``rows`` when at most ``max_rows``; else those with a verdict (SIGNIFICANT or equivalent) on
    some measure or a flag, and one row counting the others' verdicts per measure."""
    if len(rows) <= max_rows:
        return rows

    def decided(row: dict[str, str]) -> bool:
        return bool(row["flags"]) or any(w in row[c] for c in columns for w in ("SIGNIFICANT", "equivalent"))

    kept, rest = [r for r in rows if decided(r)], [r for r in rows if not decided(r)]
    if not rest:
        return kept
    summary = {"question": f"the other {len(rest)} comparisons" if len(rest) > 1 else "the other comparison", "flags": ""}
    for c in columns:
        words = ["undecided" if "undecided" in r[c] else "not tested" if "not tested" in r[c] else fmt.DASH
                 for r in rest]
        counts = {w: words.count(w) for w in ("undecided", "not tested") if words.count(w)}
        summary[c] = ", ".join(f"{k} {w}" for w, k in counts.items()) or fmt.DASH
    return [*kept, summary]


def names(v: Verdicts) -> tuple[dict[str, str], str]:
    """Cell id → the label the page names it by, and the reference's."""
    labels = v.labels or (dict(zip(v.comparisons["cell_id"], v.comparisons["cell_label"], strict=True))
                          if len(v.comparisons) else {})
    return labels, labels.get(v.reference[0], v.reference[1])


def measures_of(v: Verdicts) -> list[str]:
    """The measures the study's reports test: the metric, then each norm measure with a test."""
    return [v.metric] + [m for m in ("training", "depth", "seeds", "final")
                         if len(v.norm_comparisons) and m in set(v.norm_comparisons["measure"])
                         or len(v.norm_anova) and m in set(v.norm_anova["measure"])]


def answer_table(v: Verdicts, max_rows: int = MAX_COMPARISON_ROWS) -> pd.DataFrame:
    """One row per question — each factor's main effect, each two-way interaction, each cell
    against the reference — and one column per measure tested: the effect (a difference, or a ratio
    for a norm measure, with its interval; a factor's marginal means per level), the verdict
    (significant at the family's Holm-adjusted p; equivalent when the interval lies within
    ±``min_effect`` or [1/``min_ratio``, ``min_ratio``]; else undecided with the seeds the power line
    asks for); a cell's flags follow its question, after a dash. Past ``max_rows`` comparisons, those decided on some measure (or
    flagged) and one row counting the others' verdicts."""
    measures = measures_of(v)
    heads = {v.metric: fmt.metric_name(v.metric), **NORM_WORDS}
    rows: list[dict[str, str]] = []
    for term in terms(v):
        row = {"question": f"factor {term}" if " × " not in term else f"interaction {term}", "flags": ""}
        for m in measures:
            if m == v.metric:
                row[heads[m]] = _term_cell(v.anova, term, v.effects, None) if len(v.anova) else fmt.DASH
            else:
                sub = v.norm_anova[v.norm_anova["measure"] == m] if len(v.norm_anova) else v.norm_anova
                row[heads[m]] = _term_cell(sub, term, v.norm_effects, m) if len(sub) else fmt.DASH
        # A factor's levels that mostly never learned; an interaction's cells only where it is
        # significant (their own rows carry them, and a quiet term's list was noise).
        if " × " not in term or any("SIGNIFICANT" in row[heads[m]] for m in measures):
            row["flags"] = "; ".join(f"{level}: {k} of {n} never learned"
                                     for level, k, n in nl.mostly(v.never, term.split(" × ")))
        rows.append(row)
    cells = list(dict.fromkeys([*(v.comparisons["cell_id"] if len(v.comparisons) else []),
                                *(v.norm_comparisons["cell_id"] if len(v.norm_comparisons) else [])]))
    labels, ref = names(v)
    compared = []
    for cid in cells:
        row = {"question": f"{labels.get(cid, cid)} vs {ref}", "flags": ", ".join(v.flags.get(str(cid), []))}
        for m in measures:
            if m == v.metric:
                sub = v.comparisons[v.comparisons["cell_id"] == cid]
                row[heads[m]] = _comparison_cell(sub.iloc[0], False, v) if len(sub) else fmt.DASH
            else:
                sub = v.norm_comparisons[(v.norm_comparisons["cell_id"] == cid) & (v.norm_comparisons["measure"] == m)]
                row[heads[m]] = _comparison_cell(sub.iloc[0], True, v) if len(sub) else fmt.DASH
        compared.append(row)
    rows += _decided_first(compared, [heads[m] for m in measures], max_rows)
    cols = ["question", *[heads[m] for m in measures], "flags"]
    out = pd.DataFrame(rows, columns=cols)
    # A cell's flags follow its question: a column of their own made the table too wide for a page,
    # and its part 2 was that one column, alone on the next page.
    out["question"] = [f"{q} — {f}" if f else q for q, f in zip(out["question"], out["flags"], strict=True)]
    return out.drop(columns=["flags"])


def terms(v: Verdicts) -> list[str]:
    """Every ANOVA term tested on some measure, main effects first."""
    terms = dict.fromkeys([*(v.anova["term"] if len(v.anova) else []),
                           *(v.norm_anova["term"] if len(v.norm_anova) else [])])
    return sorted(terms, key=lambda t: t.count(" × "))
