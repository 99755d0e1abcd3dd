"""A sequential study in a report (spec ``seeds: {min, max, step, until: decided}``): the
procedure, its looks and boundaries, and every comparison's decision with the p-value and interval
valid for the design (docs/science.md §14).

The numbers are the study's own record (``Results.sequential``: what each look analysed and
decided, written by the runner when it looked); nothing is re-tested here. A fixed-design p-value
after a data-dependent stop is wrong, so the reports print these in place of their fixed tests.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from ablate.report.format import DASH, NBSP, num, pval, signed
from ablate.runner import sequential_looks as runner_sequential
from ablate.spec import Spec
from ablate.stats.group_sequential import FUTILITY_BETA, spent
from ablate.stats.rules import EQUIVALENCE_MIN_SEEDS
from ablate.terminal import count

__all__ = ["boundaries_note", "decision_words", "decisions", "decisions_table", "estimate_column", "fixed_beside", "fixed_why",
           "looks_table", "procedure", "sentences"]

SHAPE_NAMES = {"obrien_fleming": "O'Brien–Fleming", "pocock": "Pocock", "power3": "power (α·t³)"}


def _shape(name: str) -> str:
    return SHAPE_NAMES.get(name, name)


def _value(x: Any, measure: str, sign: bool = True) -> str:
    """An estimate or an interval end: a difference for a metric, a ratio for a norm measure
    (analysed on the log scale)."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return DASH
    if measure.startswith("norm."):
        return f"{math.exp(float(x)):.3g}×"
    return signed(x) if sign else num(x)


def family_size(spec: Spec) -> int:
    """The sequential design's family: its comparisons (cell × measure), each tested at α/m."""
    return len(runner_sequential.comparisons(spec))


def procedure(spec: Spec) -> list[str]:
    """What the design is, in the report's words, with its numbers from the spec."""
    seq = spec.sequential
    m = len(runner_sequential.comparisons(spec))
    return [
        f"**Sequential seeds.** This study did not fix its seeds in advance: every cell ran {seq.min} seeds, then "
        f"the comparisons with the reference were analysed and {seq.step} seeds added to the cells of those still "
        f"open, look after look, up to {seq.max} (looks at {', '.join(map(str, seq.looks))} seeds). "
        + (f"Each of the {m} comparisons ({', '.join(seq.measures)}) is a group-sequential test at α/{m} = "
           f"{pval(seq.alpha / max(1, m), bound=True)} (the family's α {seq.alpha:g}, Bonferroni)" if m != 1 else
           f"Its one comparison ({', '.join(seq.measures)}) is a group-sequential test at α = {seq.alpha:g}")
        + f" whose α is spent across the "
        f"looks by the Lan–DeMets {_shape(seq.spending)} function. Each look tests it with the paired t test on "
        f"the seeds the cell shares with the reference (Welch's t test when they share fewer than two), against "
        f"boundaries computed for that t statistic (not a normal approximation): it is decided *significant* when "
        f"its t statistic crosses the look's boundary, *equivalent* when both one-sided tests against ±{num(spec.stats.min_effect)} "
        f"(norms: ×{spec.stats.min_ratio:g}) reject at the equivalence boundary (which spends β = "
        f"{seq.equivalence_beta:g}; from {EQUIVALENCE_MIN_SEEDS} seeds on, enough to have seen a rare failing "
        f"seed) — that is, when its {100 * (1 - 2 * seq.equivalence_beta):.3g}% equivalence interval, the "
        "estimate ± that boundary × its standard error, lies within the margin (the repeated CI, taken at the "
        "efficacy boundary, may reach past it; each equivalent comparison's equivalence interval is printed with "
        "it, and each futile one's interval at the futility boundary) — and *futile* when, before the last look, "
        "an effect of that size has become "
        f"unlikely — its interval widened to the non-binding futility boundary (which spends β = {FUTILITY_BETA:g} "
        f"of the power against it; the efficacy boundaries ignore it, so α stays what they spend) excludes it. A "
        f"comparison that reaches {seq.max} seeds with none of these is *undecided at the last look*: its seeds ran "
        "out; that says nothing of whether the effect is there.",
        "The p-values are stage-wise (the chance, with no effect, of crossing earlier or further at the deciding "
        f"look) and the intervals repeated confidence intervals at {100 * (1 - seq.alpha / max(1, m)):.3g}%, valid whichever "
        "look stopped the comparison; the fixed-design p-values of the other sections are not shown, because "
        "the number of seeds depended on the results.",
    ]


def _shown(x: float) -> str:
    return num(x, 2) if math.isfinite(x) else "∞"


def _stored_bounds(state: Mapping[str, Any] | None, looks: Sequence[int]) -> list[tuple[float, float] | None]:
    """Per look: the efficacy and equivalence t boundaries its analysis used, as recorded with its
    rows (a null is an infinite boundary); None where the look did not run or analysed no comparison
    on all its seeds paired (its rows' boundaries were then taken to other degrees of freedom)."""
    out: list[tuple[float, float] | None] = [None] * len(looks)
    for rows in (state or {}).get("history", []):
        for r in rows:
            n = r.get("seeds")
            if n not in looks or not r.get("paired") or r.get("df") is None or float(r["df"]) != n - 1:
                continue
            eff, eq = r.get("bound"), r.get("equivalence_bound")
            out[list(looks).index(n)] = (math.inf if eff is None else float(eff), math.inf if eq is None else float(eq))
    return out


def looks_table(spec: Spec, state: Mapping[str, Any] | None = None) -> pd.DataFrame:
    """Per look: seeds per cell, information fraction, α spent by then (per comparison), the
    efficacy boundary for a known sd (z) and the one the looks use, for the paired t statistic at
    the look's degrees of freedom, and the equivalence boundary (t). The same for every measure
    (they share α and the looks). The t boundaries of a look that ran are those it recorded in
    ``state`` (what decided, and what the decisions table's path prints), else this version's
    (``boundaries_note`` says where the two differ)."""
    seq = spec.sequential
    d = next(iter(runner_sequential.designs(spec).values()))
    eff, eff_t, eq = d.efficacy_z(), d.efficacy_t(), d.equivalence_t()
    stored = _stored_bounds(state, d.looks)
    return pd.DataFrame([{
        "look": str(k + 1),
        "seeds per cell": str(n),
        "information": f"{t:.2f}",
        "α spent (per comparison)": num(spent(t, d.level, seq.spending), 2, sig=True),
        "boundary |z| (known sd)": _shown(eff[k]),
        "boundary |t| (paired)": _shown(stored[k][0] if stored[k] else eff_t[k]),
        "equivalence t": _shown(stored[k][1] if stored[k] else eq[k]),
    } for k, (n, t) in enumerate(zip(d.looks, d.fractions, strict=True))])


def boundaries_note(spec: Spec, state: Mapping[str, Any] | None) -> str:
    """One line under the looks table when its t boundaries are not all of one source: those the
    looks recorded that this version computes otherwise (as printed), and the looks that recorded
    none (this version's); empty when they agree or no look has run."""
    if not state or not state.get("history"):
        return ""
    d = next(iter(runner_sequential.designs(spec).values()))
    now = list(zip(d.efficacy_t(), d.equivalence_t(), strict=True))
    stored = _stored_bounds(state, d.looks)
    out = []
    for i, name in ((0, "|t|"), (1, "equivalence t")):
        moved = [k for k, b in enumerate(stored) if b is not None and _shown(b[i]) != _shown(now[k][i])]
        if moved:
            out.append(f"{name} {', '.join(_shown(now[k][i]) for k in moved)} at look{'s' if len(moved) > 1 else ''} "
                       f"{', '.join(str(k + 1) for k in moved)}")
    text = ""
    if out:
        text = ("The t boundaries are those computed when each look ran (they made its decisions); this version "
                f"computes {' and '.join(out)}.")
    missing = [k + 1 for k, b in enumerate(stored) if b is None]
    if missing:
        several = len(missing) > 1
        text += (f"{' ' if text else ''}Look{'s' if several else ''} {', '.join(map(str, missing))} "
                 f"{'have' if several else 'has'} no recorded boundary (not run, or no comparison analysed on all "
                 "its seeds paired): this version's.")
    return text


def decisions(state: Mapping[str, Any] | None, spec: Spec) -> list[dict[str, Any]]:
    """Every declared comparison's row: its deciding look's, or its latest look's while open."""
    if not state:
        return []
    return [dict(r) for r in runner_sequential.comparison_rows(spec, state.get("decided", {}),
                                                                state.get("history", [])).values()]


def decision_words(state: Mapping[str, Any] | None, spec: Spec, measure: str) -> dict[str, str]:
    """Cell id → its comparison's decision on ``measure`` in a few words (``significant``,
    ``open at look 2``, ``undecided at the last look``), for a figure's margin."""
    out = {}
    for r in decisions(state, spec):
        if r["measure"] == measure:
            said = runner_sequential.outcome(r)
            out[r["cell_id"]] = {"open": f"open at look {r['look']}",
                                 "undecided": "undecided at the last look"}.get(said, said)
    return out


def _path(state: Mapping[str, Any], key: str) -> str:
    """The comparison's t statistic at each look against that look's boundary."""
    steps = []
    for rows in state.get("history", []):
        for r in rows:
            if r["key"] == key:
                t, b = r.get("t"), r.get("bound")
                steps.append(f"{r['seeds']}:{NBSP}{num(t, 2) if t is not None else DASH}"
                             f"{NBSP}({num(b, 2) if b is not None else DASH})")
    return " → ".join(steps)


#: The decisions table's words for an outcome that is not a decision.
_DECISION_CELL = {"open": "open (still running)", "undecided": "undecided at the last look"}


def estimate_column(spec: Spec) -> str:
    """The heading of a comparison's estimate with its repeated interval, at the per-comparison
    level α/m the design spends: ``estimate [98.8% repeated CI]``."""
    seq = spec.sequential
    return f"estimate [{100 * (1 - seq.alpha / max(1, len(runner_sequential.comparisons(spec)))):.3g}% repeated CI]"


def _estimate(r: Mapping[str, Any]) -> str:
    """A look's estimate and repeated interval: ``−0.094 [−0.141, −0.046]``, a norm's as ratios."""
    m = r["measure"]
    return f"{_value(r.get('estimate'), m)} [{_value(r.get('rci_low'), m)}, {_value(r.get('rci_high'), m)}]"


def decisions_table(state: Mapping[str, Any] | None, spec: Spec, labels: Mapping[str, str]) -> pd.DataFrame:
    """Per comparison: the cell, the measure, the decision, the look and seeds it was made at,
    the estimate with its repeated interval, the stage-wise p and the t statistic's path."""
    rows = []
    for r in decisions(state, spec):
        rows.append({
            "cell": labels.get(r["cell_id"], r["cell_id"]),
            "measure": r["measure"],
            "decision": _DECISION_CELL.get(said := runner_sequential.outcome(r), said),
            "at look (seeds)": f"{r['look']} ({r['seeds']})",
            estimate_column(spec): _estimate(r),
            "stage-wise p": pval(r["p"]) if r.get("p") is not None else DASH,
            "t (boundary) at each look": _path(state, r["key"]),
        })
    return pd.DataFrame(rows)


def sentences(state: Mapping[str, Any] | None, spec: Spec, labels: Mapping[str, str], reference: str) -> list[str]:
    """One sentence per decision kind, from the rows the table prints."""
    seq = spec.sequential
    rows = decisions(state, spec)
    if not rows:
        return [f"Sequential seeds: no look has been analysed yet ({seq.min} seeds per cell first)."]
    out = []
    size = f"±{num(spec.stats.min_effect)}; norms ×{spec.stats.min_ratio:g}"
    for kind, lead, words in (
            ("significant", "Sequentially decided, significant", "differ from the reference {ref}"),
            ("equivalent", "Sequentially decided, equivalent", f"are equivalent to the reference {{ref}} (within {size})"),
            ("futile", "Stopped as futile at the futility boundary",
             f"against the reference {{ref}}: an effect of ±{num(spec.stats.min_effect)} (norms "
             f"×{spec.stats.min_ratio:g}) had become unlikely"),
            ("undecided", f"Undecided at the last look ({seq.max} seeds)",
             "against the reference {ref}: the seeds ran out before their boundaries decided them either way")):
        these = [r for r in rows if runner_sequential.outcome(r) == kind]
        if not these:
            continue
        parts = []
        for r in these:
            p = f", stage-wise p {pval(r['p'])}" if kind == "significant" and r.get("p") is not None else ""
            parts.append(f"{labels.get(r['cell_id'], r['cell_id'])} on {r['measure']} "
                         f"({_value(r.get('estimate'), r['measure'])} [{_value(r.get('rci_low'), r['measure'])}, "
                         f"{_value(r.get('rci_high'), r['measure'])}], {r['seeds']} seeds{p}"
                         f"{runner_sequential.equivalence_words(r, spec, _value)})")
        out.append(f"{lead}: {'; '.join(parts)} {words.format(ref=reference)}.")
    still = [r for r in rows if r["decision"] == "open"]
    if still:
        out.append(f"Still open: {len(still)} comparison{'s' if len(still) != 1 else ''} (the study has more looks "
                   "to run).")
    seeds = sum(state.get("planned", {}).values())
    cells = len(state.get("planned", {})) or 1
    out.append(f"Seeds used: {seeds} runs over {cells} cells, {seeds / cells:.1f} per cell on average, against "
               f"{seq.max} per cell for a fixed design at the largest size ({seeds / (cells * seq.max):.0%}).")
    return out


#: The fixed-design column's heading: what it would say, and that it is not a verdict.
FIXED_COLUMN = "fixed-design exact test, same seeds (descriptive)"


def _fixed_words(r: Mapping[str, Any] | None, alpha: float) -> tuple[str, bool | None]:
    """A fixed-design comparison row in words, and whether it is significant (None: not tested)."""
    if r is None:
        return f"not in this report{NBSP}{DASH}", None
    p, n = r.get("p"), r.get("n")
    seeds = f"{int(n)} seeds" if n is not None and math.isfinite(float(n)) else "seeds"
    if p is None or not math.isfinite(float(p)):
        return f"not tested ({r.get('test') or 'too few seeds'})", None
    significant = bool(math.isfinite(float(r.get("p_adj", math.nan))) and float(r["p_adj"]) < alpha)
    floor = f", floor {pval(r['p_min'], bound=True)}" if r.get("p_min") is not None and math.isfinite(float(r["p_min"])) else ""
    return (f"{'significant' if significant else 'not significant'}: p {pval(p)}{floor} at {seeds}; "
            f"Holm p {pval(r.get('p_adj'))}"), significant


def fixed_beside(state: Mapping[str, Any] | None, spec: Spec, fixed: Mapping[int, Mapping[str, pd.DataFrame]],
                 labels: Mapping[str, str], alpha: float = 0.05) -> pd.DataFrame:
    """Per sequential comparison: its decision (look, seeds, stage-wise p) beside what the
    fixed-design exact test on the same seeds would say. ``fixed``: seeds per cell (a look's) →
    measure (as the sequential design names it: ``test_accuracy``, ``norm.final``) → the
    comparison frame of a fixed design on the first that many seeds (``cell_id``, ``n``, ``p``,
    ``p_min``, ``p_adj`` Holm over that design's family). ``differ``: the two disagree on
    significance (an open comparison is not compared). The estimate with its repeated interval
    comes first: a decision says nothing of which way, or how far, a cell differs."""
    rows, est = [], estimate_column(spec)
    for r in decisions(state, spec):
        frame = fixed.get(int(r["seeds"]), {}).get(r["measure"])
        hit = frame[frame["cell_id"] == r["cell_id"]] if frame is not None and len(frame) else None
        words, fixed_sig = _fixed_words(hit.iloc[0].to_dict() if hit is not None and len(hit) else None, alpha)
        decision = r["decision"]
        p = f", stage-wise p {pval(r['p'])}" if decision == "significant" and r.get("p") is not None else ""
        seq_words = runner_sequential.outcome_words(r) + p + runner_sequential.equivalence_words(r, spec, _value)
        differ = (decision != "open" and fixed_sig is not None and (decision == "significant") != fixed_sig)
        rows.append({"cell": labels.get(r["cell_id"], r["cell_id"]), "measure": r["measure"], est: _estimate(r),
                     "sequential decision (valid)": seq_words, FIXED_COLUMN: words,
                     "differ": "yes" if differ else ""})
    return pd.DataFrame(rows, columns=["cell", "measure", est, "sequential decision (valid)", FIXED_COLUMN, "differ"])


def fixed_why(spec: Spec, fixed_m: int, floors: Sequence[float] = (), alpha: float = 0.05,
              fixed_only: int = 0) -> str:
    """Why the two columns can differ, with the numbers of this study: the sequential design's
    per-comparison α and t boundary, the exact tests' floors (``floors``: the comparisons'
    ``p_min``) and the fixed family's size; and, when ``fixed_only`` comparisons are significant in
    the fixed column but not sequentially, why that way round happens."""
    m = max(1, family_size(spec))
    seen = sorted({float(f) for f in floors if math.isfinite(float(f))})
    low = (f"; here {pval(seen[0], bound=True)}" + (f" to {pval(seen[-1], bound=True)}" if len(seen) > 1 else "")
           if seen else "")
    return ("**Why the two can differ.** The sequential look compares the paired t statistic with its "
            + (f"boundary at α/{m} = {pval(alpha / m, bound=True)}" if m > 1 else f"boundary at α = {alpha:g}")
            + " spent over the looks: when a cell's differences from the "
            "reference barely vary, t crosses it at a few seeds. The exact permutation test makes no "
            "normality assumption, so its p cannot fall below a floor set by the seeds alone (2/2ⁿ paired"
            f"{low}), and the fixed design would "
            + (f"Holm-adjust it over its whole family of {fixed_m} tests (every comparison and ANOVA term on every "
               "measure)" if fixed_m != 1 else "test it alone (its family has this one test)")
            + "."
            + (f" The other way round ({count(fixed_only, 'comparison')} here): each look's boundary lies above "
               "a single test's threshold (α is spread over the looks), and the permutation test weighs the "
               "seeds' differences otherwise than the t statistic, so the fixed test can call significant what the "
               "looks left undecided." if fixed_only else "")
            + " The fixed column is descriptive only: the number of "
            "seeds depended on the results, so its p-values are not valid; the verdicts are the sequential ones.")
