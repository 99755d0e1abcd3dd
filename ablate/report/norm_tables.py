"""The ``norm_stability`` report's presentation: its tables and its sentences (its figures are
``ablate.report.norm_figures``).

Every function takes the frames of ``ablate.stats.norms`` (the analysis) and returns a display
frame (strings, one header per column) or markdown text; nothing here
computes a statistic, and the sentences use only the numbers the tables print, formatted by
``ablate.report.format``. Adding a section to the report touches its analysis function in
``ablate.stats.norms``, its table / text here (a figure in ``norm_figures``), and the notebook
``ablate/report/notebooks/norm_stability.py`` that shows them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from ablate import stats
from ablate.report import format as fmt
from ablate.report.accuracy.tables import floor_words
from ablate.stats import norms as sn

__all__ = [
    "COLUMN_WORDS",
    "MEAN_WORDS",
    "MEASURE_WORDS",
    "VALUE_WORDS",
    "anova_grid",
    "anova_table",
    "check_table",
    "drift_table",
    "effects_column",
    "effects_table",
    "factor_sentences",
    "flag_lines",
    "grid_notes",
    "header_lines",
    "measure_lines",
    "heads_line",
    "provenance_rows",
    "ratio_grid",
    "ratio_table",
    "short_order",
    "stability_table",
    "summary_text",
    "tests_text",
    "wide",
]

#: Each measure of ``stats.norms.MEASURES`` in words: where it varies, what varies, and as a column heading.
MEASURE_WORDS = {"training": "over training steps", "depth": "over layers", "seeds": "over seeds",
                 "final": "at the end of training"}
#: "CV" in every table and sentence is this: said once in the report's header.
CV_WORDS = "CV is the coefficient of variation, sd / mean, of ‖x‖² (over a run's probe steps, or over its layers)"
VALUE_WORDS = {"training": "CV of ‖x‖²", "depth": "CV of ‖x‖²", "seeds": "spread of log ‖x‖²", "final": "‖x‖²"}
COLUMN_WORDS = {"training": "CV over training steps", "depth": "CV over layers",
                "seeds": "spread of log ‖x‖² over seeds",
                "final": "final ‖x‖²"}
#: The mean over seeds each measure's values are (``stats.norms.mean_scale``), for a variant and a
#: factor level alike; a comparison's ratio is of geometric means on every measure but over seeds.
MEAN_WORDS = {"training": "geometric mean", "depth": "(mean √CV)²", "final": "geometric mean"}

Order = Sequence[tuple[str, str]]


def _sig(x: Any, digits: int = 3) -> str:
    """Norms and CVs span orders of magnitude: significant digits, not decimals."""
    return fmt.num(x, digits, sig=True)


# --- the header -------------------------------------------------------------------------------------


def header_lines(res: Any, trials: pd.DataFrame, order: Order) -> list[str]:
    """The opening line: the study and its runs — and, where the cells did not see one probe batch,
    that warning, before any verdict. What was measured follows the answer (``measure_lines``)."""
    done = int((trials.status == "complete").sum())
    lines = [f"**Study** `{res.study}` · spec hash `{res.spec_hash}` · {len(trials)} trials · {done} complete · "
             f"{len(order)} variants with probe data"]
    batch = sn.probe_batch_check(res.metrics)
    if batch is not None and not batch[1]:
        lines.append(f"Probe batch identical across {_probe_runs(trials, batch[0])}: "
                     "**NO — cells differ in their task; compare with care**.")
    return lines


def measure_lines(res: Any, trials: pd.DataFrame, key: str = "") -> list[str]:
    """What the answer's measures are, said after it: the probes, whether every run saw one probe
    batch, what the compact labels name (``key`` of ``short_order``) and the CV. (Which ‖x‖² is per
    head, ``heads_line``, qualifies page one's verdicts: it goes before them.)"""
    probes = res.spec.probes
    line = (f"**Measured:** probes every {probes.every} steps and at the end, on the first {probes.batch} validation "
            "examples (eval mode)")
    batch = sn.probe_batch_check(res.metrics)
    if batch is not None and batch[1]:
        line += f", the same examples in {_probe_runs(trials, batch[0])}"
    line += ("; " + (f"a white-noise probe of {probes.white_noise_batch} sequences (seed {probes.white_noise_seed})."
                     if probes.white_noise else "no white-noise probe."))
    lines = [line + f" {CV_WORDS}."]
    if key:
        lines.append(f"Figures and tables label variants by their levels of: **{key}**.")
    return lines


def _probe_runs(trials: pd.DataFrame, runs: int) -> str:
    """"all N runs", saying when tuning trials are among them: the probe check counts every run that
    probed, more than the analyses' replicate runs."""
    analysed = int((trials["phase"] == "replicate").sum()) if "phase" in trials else len(trials)
    return f"all {runs} runs" + (f" (tuning trials included; {analysed} analysed)" if runs > analysed else "")


def heads_line(spec: Any, where: str = "the figures and the stability table's") -> str:
    """Where the head counts of the study's cells differ: which ‖x‖² is per head and which is the
    whole state's, and what ξ does to the whole state's (a heads effect on it is partly by design).
    ``where``: the per-head ‖x‖² the reader is pointed to (another report's, from the accuracy report)."""
    from ablate import design

    models = [c.config["model"] for c in design.cells(spec)]
    if len({m.get("heads") for m in models}) < 2:
        return ""
    line = (f"Head counts differ: ‖x‖² is per head (the mean over heads) in {where} "
            "mean ‖x‖², so that head counts compare; the final ‖x‖² is the whole state's (summed over heads), "
            "which a head count that only groups the same modes leaves unchanged.")
    if any(m.get("normalisation") == "xi" for m in models):
        line += (" Under ξ every head has unit stationary power, so the whole state's ‖x‖² grows with the head "
                 "count by construction: a heads effect on the final ‖x‖² is in part that.")
    return line


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


#: Why an interval is missing that a reader sees without being told (one seed: a single value).
_PLAIN = ("", "one seed", "no seeds")


def _no_interval(cell: str, note: Any) -> str:
    """``cell`` with why it has no interval, when the reason is not plain: "0.23 (no interval: …)"."""
    if cell == fmt.DASH or "[" in cell or not isinstance(note, str) or note in _PLAIN:
        return cell
    return f"{cell} (no interval: {note})"


def _value_only(cell: str) -> str:
    """The value of a printed "value [CI]" or "value (no interval: …)" cell."""
    return cell.split(" [")[0].split(" (")[0]


def _value_cells(table: pd.DataFrame, confidence: float = 0.95) -> dict[str, list[str]]:
    """Each measure's column of ``stability_table`` as it prints: value [CI] per variant, or the
    value and why it has no interval."""
    out = {}
    for m in sn.MEASURES:
        col = sn.VALUE[m]  # geometric means; over layers (mean √CV)²; over seeds the mean deviation
        v, lo, hi = table[col], table[f"{col}_low"], table[f"{col}_high"]
        notes = table[f"{col}_note"] if f"{col}_note" in table.columns else [""] * len(table)
        out[m] = [_no_interval(fmt.with_ci(a, b, c, sig=True), n) for a, b, c, n in zip(v, lo, hi, notes, strict=True)]
    return out


def _ratio_cell(r: pd.Series) -> str:
    """A comparison's ratio as its table prints it: ratio [CI], or the raw values when untested,
    or the ratio and why it has no interval."""
    note = r["note"] if "note" in r.index and isinstance(r["note"], str) else ""
    if not r["testable"] and r["measure"] == "seeds":  # one spread per side: no per-seed values to show
        text = f"{_sig(r['ratio'])}×" if fmt.finite(r["ratio"]) else fmt.DASH
        return f"{text} ({note})" if note and text != fmt.DASH and not note.endswith("not tested") else text
    if not r["testable"] and note.startswith("no spread"):
        return f"{_sig(r['ratio'])}× on every seed" if fmt.finite(r["ratio"]) else fmt.DASH
    if not r["testable"]:
        cell = ", ".join(_sig(np.exp(v)) for v in r["values_cell"] or ())
        ref = ", ".join(_sig(np.exp(v)) for v in r["values_ref"] or ())
        return f"{_sig(r['ratio'])}× (per seed {cell or fmt.DASH} vs {ref or fmt.DASH})" if fmt.finite(r["ratio"]) else fmt.DASH
    return _no_interval(fmt.with_ci(r["ratio"], r["ratio_low"], r["ratio_high"], sig=True, unit="×"), note)


#: Why a variant can lack a measure.
_NO_VALUE = {"training": "fewer than two probe steps", "depth": "one layer", "seeds": "one seed",
             "final": "no probe"}


def _verdict(r: pd.Series) -> str:
    note = r["note"] if "note" in r.index and isinstance(r["note"], str) else ""
    if not r["testable"] and (note.startswith("no spread") or "has no spread" in note):
        return fmt.verdict(None, few=f"not tested: {note}")
    if not r["testable"]:
        return fmt.verdict(None, few=f"too few seeds to test (n{fmt.NBSP}={fmt.NBSP}{int(r['n'])})")
    return fmt.verdict(bool(r["significant"]))


def _unreachable(comp: pd.DataFrame, alpha: float) -> dict[str, tuple[str, str]]:
    """Per measure where the exact test's floor holds its comparisons back: (claim, reason), in the
    accuracy report's words (``accuracy.tables.floor_words``: none can be significant, or only
    behind the ANOVA terms Holm rejects first)."""
    out = {}
    for m, group in comp.groupby("measure", sort=False):
        said = floor_words(group[group["testable"]], alpha, on="on any comparison")
        if said is not None:
            out[str(m)] = said
    return out


#: Variants a summary sentence names inline; past this, the significant ones (at most this many),
#: and the answer table every one.
INLINE_VARIANTS = 3


def summary_text(table: pd.DataFrame, comp: pd.DataFrame, reference: tuple[str, str],
                 anova: pd.DataFrame | None = None, effects: pd.DataFrame | None = None,
                 check: pd.DataFrame | None = None, alpha: float = 0.05, confidence: float = 0.95,
                 sensitivity: pd.DataFrame | None = None, caveat: Callable[[str], str] | None = None) -> str:
    """Markdown: how each variant's norm compares with the declared ``reference`` (cell id, why)
    on each measure, which factor effects the ANOVA finds, and the white-noise check — every number
    as the tables print it (``stability_table``, ``ratio_table``, ``anova_table``, ``effects_table``,
    ``check_table``), the verdicts in the one wording (``format.verdict``); the runs left out
    and what putting the late-growing ones back changes (``flag_lines``). ``caveat``: term → what a
    significant term's sentence must add (page one's never-learned words, ``never_learned.term_caveat``)."""
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
    # The factor analysis is named only where its ANOVA ran (a design that is not a full factorial
    # has none), and as Table 1: the notebook numbers tables in order of appearance, and it comes first.
    analysed = set(anova["measure"]) if anova is not None and len(anova) else set()
    floors = _unreachable(comp, alpha) if len(comp) else {}
    if floors and len(set(floors.values())) == 1 and len(floors) == comp["measure"].nunique():
        claim, reason = next(iter(floors.values()))  # the same on every measure: said once
        factor = " and the factor analysis (Table 1)" if analysed else ""
        still = f"; the intervals{factor} still apply" if "no comparison" in claim else ""
        head.append(f"**On every measure, {claim[:1].lower() + claim[1:]}:** {reason}{still}.")
        floors = {}
    for m in sn.MEASURES:
        rows = comp[comp["measure"] == m] if len(comp) else comp
        have = [i for i, c in enumerate(cells[m]) if c != fmt.DASH]
        if not have:
            continue
        words = MEASURE_WORDS[m]
        ref_row = table.index[table["cell_id"] == ref_id]
        ref_cell = cells[m][table.index.get_loc(ref_row[0])] if len(ref_row) else fmt.DASH
        scale = f", {MEAN_WORDS[m]} over seeds" if m == "depth" else ""
        head_words = f"- **{words[:1].upper() + words[1:]}** ({VALUE_WORDS[m]}{scale})"
        if ref_cell == fmt.DASH:  # e.g. over layers with a one-layer reference: nothing to compare with it
            listed = "; ".join(f"{table.loc[i, 'variant']} {cells[m][table.index.get_loc(i)]}"
                               for i in table.index[[c != fmt.DASH for c in cells[m]]])
            takes = "the factor analysis (Table 1) takes these" if m in analysed else "the variants that have one"
            lines.append(f"{head_words}: the reference {ref_label} has no value ({_NO_VALUE[m]}), so nothing is "
                         f"compared with it; {takes}: {listed}.")
            continue
        parts = [f"{head_words}: {ref_label} {ref_cell}"]
        listed = rows
        if len(rows) > INLINE_VARIANTS:  # past a few variants the answer table holds them: name the significant
            listed = rows[rows["significant"].astype(bool)].head(INLINE_VARIANTS)
            tested = int(rows["testable"].sum())
            parts.append(f"{int(rows['significant'].sum())} of {tested} tested variant{'s' if tested != 1 else ''} "
                         "differ significantly" + (" (every variant's ratio: the answer table)" if tested else ""))
        for _, r in listed.iterrows():
            i = table.index.get_loc(table.index[table["cell_id"] == r["cell_id"]][0])
            value = _value_only(cells[m][i])
            # Over layers the values are (mean √CV)² but the ratio is the test's, of geometric means: said,
            # so that it is not read as the quotient of the two values printed beside it.
            of = "ratio of geometric means " if m == "depth" else ""
            if r["testable"]:
                parts.append(f"{labels[r['cell_id']]} {value}, {of}{_ratio_cell(r)} the reference's ({_verdict(r)})")
            elif fmt.finite(r["ratio"]):  # the head or the ratio table says why it is not tested
                parts.append(f"{labels[r['cell_id']]} {value} ({of}{_sig(r['ratio'])}×, not tested)")
        text = "; ".join(parts) + "."
        values = table[sn.VALUE[m]].to_numpy(float)
        if m != "final" and np.isfinite(values).sum() > 2:
            low = table.iloc[int(np.nanargmin(values))]
            text += f" Lowest: {low['variant']} (descriptive, not a test)."
        if m in floors:
            text += f" ({floors[m][0]}: {floors[m][1]}.)"
        lines.append(text)
    lines += factor_sentences(anova, effects, alpha, caveat)
    lines += flag_lines(table, sensitivity)
    if check is not None and not check.empty:
        printed = check_table(check)
        init = check.index[(check["when"] == "init") & check["noise_over_theory"].notna()]
        if len(init):
            ratio = check.loc[init, "noise_over_theory"]
            lo, hi = printed.loc[ratio.idxmin(), "noise / theory"], printed.loc[ratio.idxmax(), "noise / theory"]
            span = lo if lo == hi else f"{lo} to {hi}"
            lines.append(f"- **White-noise check**: at initialisation the measured ‖x<sub>L</sub>‖² on white-noise "
                         f"input is {span} times the theory across the variants (1 would be exact; the white-noise check's table).")
    return "\n".join([" ".join(head), "", *lines])


def _term_words(term: str, measure: str) -> str:
    parts = term.split(" × ")
    what = "the final ‖x‖²" if measure == "final" else f"the {VALUE_WORDS[measure]} {MEASURE_WORDS[measure]}"
    if len(parts) == 1:
        return f"**{parts[0]}** changes {what}"
    return f"**the effect of {parts[0]} on {what} depends on {parts[1]}**"


def factor_sentences(anova: pd.DataFrame | None, effects: pd.DataFrame | None, alpha: float = 0.05,
                     caveat: Callable[[str], str] | None = None) -> list[str]:
    """One sentence per ANOVA term that passes (Holm across the screen), with its F, p and the
    marginal means of a main effect as ``effects_table`` prints them, and ``caveat(term)`` (levels
    whose runs never learned: the effect is then that they did not train); one sentence when none
    passes."""
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
                text += ": " + ", ".join(f"{sub.loc[j, 'level']} {_value_only(shown.loc[j, col])}" for j in sub.index)
        out.append(text + (caveat(r["term"]) if caveat else "") + ".")
    if not out:
        out.append(f"- **Factor effects**: no factor or two-factor interaction changes any measure significantly "
                   f"(ANOVA of the per-seed values, {len(anova)} terms, Holm across them, α = {alpha:g}; Table 1).")
    return out


def flag_lines(table: pd.DataFrame, sensitivity: pd.DataFrame | None = None) -> list[str]:
    """The runs ``stats.norms.per_seed`` flagged (``stability``'s ``flags``), as one line: which,
    why, and that the values and tests leave them out; and, with ``sensitivity``
    (``stats.norms.sensitivity``), which verdicts putting the late-growing ones back changes — or
    that it changes none."""
    if table.empty or "flagged" not in table.columns or not table["flagged"].sum():
        return []
    named = "; ".join(f"{r.variant}: {r.flags}" for r in table.itertuples() if r.flagged)
    total = int(table["flagged"].sum())
    line = (f"- **{total} run{'s' if total != 1 else ''} flagged and left out** of every value, interval and test "
            f"above (marked in the figures): {named}.")
    if sensitivity is not None and len(sensitivity):
        changed = sensitivity[sensitivity["significant"].fillna(False) != sensitivity["significant_back"].fillna(False)]
        if changed.empty:
            line += " Put back (the late-growing ones), no comparison's verdict changes."
        else:
            what = "; ".join(f"{r.cell_label} {MEASURE_WORDS[r.measure]} becomes "
                             f"{fmt.verdict(bool(r.significant_back))} (p (Holm) {fmt.pval(r.p_adj_back)})"
                             for r in changed.itertuples())
            line += f" Put back (the late-growing ones), these verdicts change — they rest on those runs: {what}."
    return [line]


def provenance_rows(df: pd.DataFrame) -> list[tuple[str, str]]:
    """What this report read, as rows for ``provenance.provenance_table``: curve rows and kinds."""
    kinds = ", ".join(sorted(set(df["kind"]))) if len(df) else fmt.DASH
    return [("curve rows", f"{len(df):,}"), ("curve kinds", kinds), ("numpy", np.__version__)]


# --- tables -------------------------------------------------------------------------------------------


def stability_table(table: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """``stats.norms.stability`` for print: counts, mean norm, and each measure's value [CI] (or
    why it has none); a ``flagged`` column counts the runs left out, 0 included (``flag_lines``
    names them)."""
    out = pd.DataFrame({
        "variant": table["variant"],
        "seeds": table["seeds"],
        # one column for the two counts: with the flagged count as well, five count columns pushed the
        # last measure onto a second part of the table in three of the committed studies
        "layers × probe steps": [f"{a} × {b}" for a, b in zip(table["layers"], table["steps"], strict=True)],
        "mean ‖x‖²": table["mean_norm"].map(_sig),
    })
    if "flagged" in table.columns:  # runs left out: counted, named in the summary; a 0 says none was
        out.insert(2, "flagged", table["flagged"].astype(int).astype(str))
    pct = fmt.level(confidence)
    for m, cells in _value_cells(table, confidence).items():
        out[f"{COLUMN_WORDS[m]} [{pct} CI]"] = cells
    return out


def ratio_table(comp: pd.DataFrame, confidence: float = 0.95, min_ratio: float | None = None) -> pd.DataFrame:
    """``stats.norms.compare`` for print, one line a row: per measure and variant, the seeds, the
    ratio to the reference [CI] (or the per-seed values when untested), p, Holm's p with its mark (or
    why it is not tested), and — with ``min_ratio`` — the seeds a ratio of ``min_ratio`` would need
    (the power line). Which exact test each row ran: ``tests_text``; the verdicts: the answer page."""
    pct = fmt.level(confidence)
    rows = []
    for _, r in comp[~comp["measure"].isin(unreferenced(comp))].iterrows():
        n = f"{int(r['n_pairs'])}{fmt.NBSP}pairs" if r["paired"] else f"{int(r['n_cell'])}{fmt.NBSP}vs{fmt.NBSP}{int(r['n_ref'])}"
        rows.append({"measure": MEASURE_WORDS[r["measure"]], "variant": r["cell_label"], "seeds": n,
                     f"ratio to the reference [{pct} CI]": _ratio_cell(r), "p": fmt.pval(r["p"]),
                     "p (Holm)": f"{fmt.pval(r['p_adj'])} {r['mark']}".strip() if r["testable"] else _verdict(r),
                     "power": fmt.count(r["seeds_needed"]) if fmt.finite(r["seeds_needed"]) else fmt.DASH})
    cols = ["measure", "variant", "seeds", f"ratio to the reference [{pct} CI]", "p", "p (Holm)"]
    out = pd.DataFrame(rows, columns=[*cols, "power"])
    if min_ratio is None:
        return out[cols]
    return out.rename(columns={"power": f"seeds for {fmt.num(min_ratio, 3, sig=True)}×"})


def ratio_grid(comp: pd.DataFrame, confidence: float = 0.95, min_ratio: float | None = None,
               tested: bool = True) -> pd.DataFrame:
    """``ratio_table`` one row per variant and one column per measure, each cell "ratio [CI]; p" (p
    Holm-adjusted, with its mark) or why it is not tested: a page for 17 variants where the long form
    takes three. The reasons, long and repeated from row to row, are numbered footnotes (``¹``) whose
    texts are ``grid.attrs["notes"]``, in number order. ``tested=False`` (a sequential study): the
    ratios alone."""
    long = ratio_table(comp, confidence, min_ratio)
    if long.empty:
        return long
    ratio = f"ratio to the reference [{fmt.level(confidence)} CI]"
    notes: list[str] = []

    def mark(note: str) -> str:
        if note not in notes:
            notes.append(note)
        return _SUPERSCRIPT[notes.index(note) % len(_SUPERSCRIPT)]

    def shorten(text: str) -> str:
        return _NO_INTERVAL.sub(lambda m: f" (no interval{mark(m.group(1))})", text)

    seeds = long.groupby("variant", sort=False)["seeds"].first()
    grid = pd.DataFrame({"variant": list(seeds.index), "seeds": list(seeds)})
    for words in dict.fromkeys(long["measure"]):
        sub = long[long["measure"] == words].set_index("variant")
        cells = []
        for v in grid["variant"]:
            if v not in sub.index:
                cells.append(fmt.DASH)
                continue
            r = sub.loc[v]
            value, holm = str(r[ratio]), str(r["p (Holm)"])
            first, _, why = value.partition("; ")  # "1× on every seed; not tested: …"
            text = shorten(first) + (f"; not tested{mark(why)}" if why else "")
            if tested and not why:
                text += f"; p {holm}" if holm[:1].isdigit() or holm.startswith("<") else f"; not tested{mark(holm)}"
            cells.append(text)
        grid[words] = cells
    grid.attrs["notes"] = notes
    return grid


#: Footnote marks of ``ratio_grid``.
_SUPERSCRIPT = "¹²³⁴⁵⁶⁷⁸⁹"
_NO_INTERVAL = re.compile(r" \(no interval: (.*)\)$")


def grid_notes(grid: pd.DataFrame) -> str:
    """``ratio_grid``'s footnotes as one line: "¹ 4 paired seeds: …; ² …"."""
    return "; ".join(f"{_SUPERSCRIPT[i % len(_SUPERSCRIPT)]} {n}" for i, n in enumerate(grid.attrs.get("notes", [])))


def tests_text(comp: pd.DataFrame) -> str:
    """The exact tests ``ratio_table``'s rows ran, counted: "exact sign-flip (51), exact permutation (4)"."""
    tested = comp[comp["testable"].astype(bool)] if len(comp) else comp
    counts = tested["test"].astype(str).value_counts(sort=False) if len(tested) else pd.Series(dtype=int)
    return ", ".join(f"{name} ({int(k)})" for name, k in counts.items()) or fmt.DASH


def unreferenced(comp: pd.DataFrame) -> list[str]:
    """The measures the reference has no value of (over layers, with a one-layer reference): their
    rows would each say "0 vs 0"; ``ratio_table`` leaves them out and ``unreferenced_note`` says why."""
    if comp.empty:
        return []
    return [str(m) for m, g in comp.groupby("measure", sort=False) if (g["n_ref"] == 0).all()]


def unreferenced_note(comp: pd.DataFrame, reference: str, anova: pd.DataFrame | None = None) -> str:
    """One sentence for the measures ``ratio_table`` leaves out, or "" — naming the factor analysis
    (``anova``, ``stats.norms.factor_anova``'s terms) where it analysed them."""
    gone = unreferenced(comp)
    if not gone:
        return ""
    words = ", ".join(f"{MEASURE_WORDS[m]} ({_NO_VALUE[m]})" for m in gone)
    analysed = anova is not None and len(anova) and set(gone) <= set(anova["measure"])
    return (f" Not in the table: {words} — the reference {reference} has no value there, so nothing is compared "
            "with it" + ("; the factor analysis (Table 1) takes the variants that have one." if analysed else "."))


def effects_column(confidence: float = 0.95) -> str:
    """``effects_table``'s value column."""
    return f"marginal mean [{fmt.level(confidence)} CI]"


def effects_table(effects: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """``stats.norms.main_effects`` for print: the marginal mean [CI] of each level, the measure
    named with its mean (``MEAN_WORDS``: "CV over layers, (mean √CV)²")."""
    return pd.DataFrame({
        "measure": effects["measure"].map(lambda m: f"{COLUMN_WORDS[m]}, {MEAN_WORDS[m]}"),
        "factor": effects["factor"], "level": effects["level"].astype(str),
        "cells": effects["n_cells"].astype(int).astype(str), "runs": effects["n"].astype(int).astype(str),
        effects_column(confidence): [
            _no_interval(fmt.with_ci(v, lo, hi, sig=True), n) for v, lo, hi, n in
            zip(effects["value"], effects["low"], effects["high"],
                effects["note"] if "note" in effects.columns else [""] * len(effects), strict=True)],
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


def wide(long: pd.DataFrame, rows: list[str], cell: Any) -> pd.DataFrame:
    """A long per-measure table (``anova_table``, ``effects_table``) one row per ``rows`` key and one
    column per measure, each cell ``cell(row)`` of the long table's row: a table of terms or levels
    instead of one of terms × measures."""
    if long.empty:
        return long
    keys = list(dict.fromkeys(tuple(r[c] for c in rows) for _, r in long.iterrows()))
    out = pd.DataFrame([dict(zip(rows, k, strict=True)) for k in keys], columns=rows)
    for measure in dict.fromkeys(long["measure"]):
        sub = {tuple(r[c] for c in rows): cell(r) for _, r in long[long["measure"] == measure].iterrows()}
        out[measure] = [sub.get(k, fmt.DASH) for k in keys]
    return out


def anova_grid(anova: pd.DataFrame, tested: bool = True) -> pd.DataFrame:
    """``anova_table`` a row per term and a column per measure: "F(df) = F, p (Holm) mark; η² x" —
    without the p where the seeds depended on the results (``tested=False``: a sequential study)."""
    printed = anova_table(anova).assign(mark=anova["mark"].to_numpy())

    def cell(r: pd.Series) -> str:
        p = f", p {r['p (Holm)']} {r['mark']}".rstrip() if tested else ""
        return f"F({r['df']}) = {r['F']}{p}; η² {r['partial η²']}"

    return wide(printed, ["term"], cell)


def check_table(check: pd.DataFrame) -> pd.DataFrame:
    """``stats.norm_theory.theory_check`` for print."""
    return pd.DataFrame({
        "variant": check["variant"],
        "when": [f"{w} (step {b:,})" if a == b else f"{w} (steps {a:,}–{b:,})"
                 for w, a, b in zip(check["when"], check.get("step_first", check["step"]), check["step"], strict=True)],
        "probe batch, last t": check["probe_last"].map(_sig), "white noise, last t": check["noise_last"].map(_sig),
        "theory, last t": check["theory_last"].map(_sig), "noise / theory": check["noise_over_theory"].map(_sig),
        "stationary theory": check["stationary"].map(_sig),
    })


def drift_table(drift: pd.DataFrame) -> pd.DataFrame:
    """``stats.norm_theory.spectrum_drift`` for print."""
    return pd.DataFrame({
        "variant": drift["variant"], "steps": drift["first"].astype(str) + " → " + drift["last"].astype(str),
        "median |λ| (init → end)": [f"{_sig(a, 4)} → {_sig(b, 4)}"
                                    for a, b in zip(drift["abs_init"], drift["abs_end"], strict=True)],
        "median |Δ|λ||": drift["abs_change_median"].map(lambda x: _sig(x, 2)),
        "largest |Δ|λ||": drift["abs_change_max"].map(lambda x: _sig(x, 2)),
        "median |Δ phase|": drift["phase_change_median"].map(lambda x: _sig(x, 2)),
        "median relative Δ input scale": drift["scale_change_median"].map(lambda x: _sig(x, 2)),
    })
