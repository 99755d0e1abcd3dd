"""The answer page (ablate.report.verdicts): every test of the study once, adjusted over one family,
and a page-one table whose every cell is traced to the body's frames."""

from __future__ import annotations

import dataclasses
import re
from types import SimpleNamespace

import numpy as np
import pytest
from frames import METRIC, A, B, factorial

from ablate.report import format as fmt
from ablate.report import verdicts
from ablate.report.accuracy.tables import floor_words, holm_first
from ablate.stats.family import reach_of
from ablate.stats.words import Reach


def _res(trials, min_effect: float = 0.01, chance: float | None = None) -> SimpleNamespace:
    spec = SimpleNamespace(stats=SimpleNamespace(min_effect=min_effect, power=0.8, min_ratio=1.25), sequential=None,
                           train=SimpleNamespace(steps=100))
    return SimpleNamespace(spec=spec, factors=[A, B], chance=chance)


def _verdicts(trials, **kw):
    ref = trials["cell_id"].iloc[0], trials["cell_label"].iloc[0]
    return verdicts.study_verdicts(_res(trials, **kw), trials, METRIC, ref)


def test_a_strong_factor_is_significant_on_the_page_and_in_the_body() -> None:
    trials = factorial(effect_a=0.05, seeds=6, sd=0.005, rng=np.random.default_rng(3))
    v = _verdicts(trials)
    # One family: 5 comparisons + 3 terms (two mains, one interaction), all adjusted together.
    assert len(v.family) == 8 and set(v.family["kind"]) == {"comparison", "term"}
    assert list(v.anova["term"]) == [A, B, f"{A} × {B}"]
    table = verdicts.answer_table(v)
    row = table[table["question"] == f"factor {A}"].iloc[0]
    body = v.anova[v.anova["term"] == A].iloc[0]
    assert row[fmt.metric_name(METRIC)].endswith(f"SIGNIFICANT (p {fmt.pval(body['p_adj'])})")
    assert body["p_adj"] == pytest.approx(v.family.loc[v.family["key"] == A, "p_adj"].iloc[0])
    # The level means on the page are the main-effects table's.
    means = v.effects[v.effects["factor"] == A]
    for level, mean in zip(means["level"], means["mean"], strict=True):
        assert f"{level} {fmt.num(mean)}" in row[fmt.metric_name(METRIC)]
    # Each comparison's cell quotes its difference and interval as the comparison frame has them.
    for r in v.comparisons.itertuples():
        cell = table.loc[table["question"].str.startswith(f"{v.labels[r.cell_id]} vs"), fmt.metric_name(METRIC)].iloc[0]
        assert cell.startswith(fmt.with_ci(r.mean_diff, r.diff_ci_low, r.diff_ci_high, 3, sign=True))


def test_equivalence_and_undecided_follow_the_interval_and_min_effect() -> None:
    trials = factorial(seeds=8, sd=0.001, rng=np.random.default_rng(4))
    v = _verdicts(trials, min_effect=0.05)  # every interval is far inside ±0.05
    cells = verdicts.answer_table(v)[fmt.metric_name(METRIC)]
    comparison_cells = [c for q, c in zip(verdicts.answer_table(v)["question"], cells, strict=True) if " vs " in q]
    assert comparison_cells and all(c.endswith("equivalent") for c in comparison_cells)
    v = _verdicts(trials, min_effect=0.0001)  # now the intervals are wider than ±min_effect
    table = verdicts.answer_table(v)
    assert all("undecided" in c for q, c in zip(table["question"], table[fmt.metric_name(METRIC)], strict=True)
               if " vs " in q)


def test_the_anova_needs_three_seeds_a_cell_as_every_other_test() -> None:
    trials = factorial(effect_a=0.05, seeds=2, rng=np.random.default_rng(5))
    v = _verdicts(trials)
    assert v.anova.empty and "too few seeds" in v.anova_why
    assert v.family.empty  # nothing is tested at 2 seeds: no comparison either
    assert "Nothing is tested" in v.policy()


def test_the_power_line_and_floor_use_the_whole_family() -> None:
    trials = factorial(effect_a=0.05, seeds=4, sd=0.01, rng=np.random.default_rng(6))
    v = _verdicts(trials)
    m = len(v.family)
    assert v.comparisons["power_alpha"].to_numpy() == pytest.approx(np.full(len(v.comparisons), 0.05 / m))
    first, m_said = holm_first(v.comparisons, 0.05)
    assert m_said == m and first == pytest.approx(0.05 / m)
    # What the floor leaves within reach is the family's: its comparisons' floors and its ANOVA terms.
    reach = reach_of(v.comparisons[v.comparisons["testable"]], 0.05)
    assert reach.m == m and reach.terms == int((v.family["kind"] == "term").sum())
    assert reach.floors == pytest.approx(sorted(v.comparisons.loc[v.comparisons["testable"], "p_min"]))
    assert reach.rejected == int(v.family.loc[v.family["kind"] == "term", "significant"].sum())


def test_mixed_floors_do_not_claim_that_nothing_can_pass() -> None:
    """One comparison at 3 paired seeds (floor 0.25), another at 8 (floor 1/128): the claim that no
    comparison can be significant would be false, so the floor used is the smallest — here below
    Holm's first threshold α/2, so the floor holds nothing back and nothing is said."""
    import pandas as pd

    tested = pd.DataFrame({"p_min": [0.25, 1 / 128], "n": [3, 8], "power_alpha": [0.025, 0.025],
                           "significant": [False, False]})
    assert floor_words(tested, 0.05) is None
    # Past α/2 but below what Holm gives behind the ANOVA terms a frame's α/m says there are: not "none can".
    claim, _ = floor_words(tested.assign(power_alpha=0.05 / 8), 0.05)
    assert claim.startswith("With 3–8 seeds a comparison can be significant only when at least 2 ")


def test_flags_show_diverged_runs_beside_their_comparison() -> None:
    trials = factorial(seeds=4, rng=np.random.default_rng(7))
    cell = trials["cell_id"].unique()[1]
    trials.loc[(trials["cell_id"] == cell) & (trials["seed"] == 0), ["status", METRIC]] = ["diverged", np.nan]
    v = _verdicts(trials)
    table = verdicts.answer_table(v)
    label = v.labels[cell]
    assert " · " in label and v.key == "parameterisation · normalisation"
    # The flags follow the question (a column of their own split the table, alone on the next page).
    assert table.loc[table["question"].str.startswith(f"{label} vs"), "question"].iloc[0].endswith(" — 1 diverged")
    assert "flags" not in table.columns


def test_past_max_rows_the_undecided_comparisons_are_counted_not_listed() -> None:
    trials = factorial(effect_a=0.05, seeds=10, sd=0.004, rng=np.random.default_rng(3))
    v = _verdicts(trials, min_effect=0.001)  # the other level of A: significant; the same level: undecided
    full = verdicts.answer_table(v)
    short = verdicts.answer_table(v, max_rows=2)
    comparisons = full[full["question"].str.contains(" vs ")]
    column = fmt.metric_name(METRIC)
    decided = comparisons[comparisons[column].str.contains("SIGNIFICANT|equivalent")]
    assert len(decided) and len(decided) < len(comparisons)
    rest = len(comparisons) - len(decided)
    assert list(short["question"]) == [*full["question"][~full["question"].str.contains(" vs ")], *decided["question"],
                                       f"the other {rest} comparisons"]
    assert short[column].iloc[-1] == f"{rest} undecided"


def test_a_baseline_whose_id_moved_with_the_code_is_found_by_its_label() -> None:
    """An export rendered by newer code: a changed default gives the baseline cell a new id, its runs
    keep the old one; the reports compare with those runs, found by the cell's label."""
    import synthetic_study

    res = synthetic_study.scaled(synthetic_study.GRIDS[4], seeds=3)
    trials = res.trials.to_pandas()
    base = res.baseline_cell
    assert verdicts.reference(res, trials) == res.reference_cell()
    moved = trials.assign(cell_id=trials["cell_id"].replace({base: "0ld1d0f0ld1d"}))
    ref_id, why = verdicts.reference(res, moved)
    assert ref_id == "0ld1d0f0ld1d" and "found by its label" in why
    gone = moved[moved["cell_id"] != "0ld1d0f0ld1d"]
    ref_id, why = verdicts.reference(res, gone)
    assert ref_id == gone["cell_id"].iloc[0] and why.startswith("the first cell")


def test_a_cell_still_improving_is_flagged() -> None:
    trials = factorial(seeds=4, rng=np.random.default_rng(7))
    cell = trials["cell_id"].unique()[2]
    # Every run of one cell used its whole budget and gained two points over its last fifth, far beyond noise.
    trials = trials.assign(steps=100, converged=True, val_gain_last=0.0, val_gain_se=0.001, stopped_early=False)
    mine = trials["cell_id"] == cell
    trials.loc[mine, ["converged", "val_gain_last"]] = [False, 0.02]
    v = _verdicts(trials)
    assert v.flags.get(cell) == ["still improving"]
    assert all(cid == cell for cid in v.flags)


def test_before_any_test_the_power_line_is_at_the_designs_alpha_over_m() -> None:
    """At 2 seeds nothing is tested, and the seeds a comparison needs were reckoned at α/1 ("m = 1
    test in the study's family"); they are reckoned at the α/m the design's family will be tested at."""
    from ablate.report.accuracy.text import comparison_sentences

    trials = factorial(effect_a=0.05, seeds=2, rng=np.random.default_rng(5))
    ref = trials["cell_id"].iloc[0], trials["cell_label"].iloc[0]
    v = verdicts.study_verdicts(_res(trials), trials, METRIC, ref, design_m=27)
    assert v.family.empty
    assert v.comparisons["power_alpha"].to_numpy() == pytest.approx(np.full(len(v.comparisons), 0.05 / 27))
    said = " ".join(comparison_sentences(v.comparisons, METRIC))
    assert "(m = 27 tests in the study's family)" in said


def test_no_sentence_says_none_can_be_significant_beside_a_significant_comparison() -> None:
    """The defect a reviewer found in rotrnn_vs_lru_tokens: 8 seeds' floor (0.0078) above Holm's first
    threshold over the family (α/8 = 0.00625) was said to make every comparison unreachable, next to
    comparisons marked significant — Holm is step-down, and the ANOVA terms it rejects first (F tests,
    no floor) leave the comparisons α/6. The sentences now say what it takes, never that none can be."""
    from ablate.report import accuracy as acc

    trials = factorial(effect_a=0.05, effect_b=0.05, seeds=8, sd=0.005, rng=np.random.default_rng(11))
    v = _verdicts(trials)
    comp = v.comparisons
    assert len(v.family) == 8 and comp["significant"].all()  # 5 comparisons at 0.0078 × 6 = 0.047
    assert (comp["p_min"] > 0.05 / 8).all()  # each above the first threshold: what the old rule read as "none"
    text = " ".join([*acc.comparison_sentences(comp, METRIC), *acc.comparison_intro(comp)])
    assert "no comparison can be significant" not in text.lower() and "p_adj = 0.047 *: significant" in text
    rejected = int(v.anova["significant"].sum())
    assert ("With 8 seeds a comparison can be significant only when at least 2 of the study's 3 ANOVA terms (F tests, "
            f"which have no floor) have smaller p's and are rejected first (here Holm rejects {rejected} of the 3)"
            ) in text
    assert "the exact test cannot give a p below 0.008 on any of them, above Holm's first threshold over the study's " \
           "8 tests, α/8 = 0.006" in text
    # Whatever a frame's family says, a frame with a significant comparison is never told that none can be:
    # here a family of 7 such comparisons and 1 term, where none could (7 × 0.0078 > α), yet these are marked.
    wrong = comp.assign(reach=[Reach.of([2 / 256] * 7, 1, 0.05)] * len(comp))
    assert not wrong["reach"].iloc[0].can(2 / 256)
    text = " ".join([*acc.comparison_sentences(wrong, METRIC), *acc.comparison_intro(wrong)])
    assert "no comparison can be significant" not in text.lower() and "significant" in text


def test_page_one_says_the_answer_in_words_with_the_tables_numbers() -> None:
    """The answer sentences name the significant factor with the p and level means its table row
    prints, the quiet factor with its p, and count the comparisons as the table's words do."""
    trials = factorial(effect_a=0.05, seeds=10, sd=0.004, rng=np.random.default_rng(3))
    v = _verdicts(trials, min_effect=0.001)
    words = verdicts.answer_sentences(v)
    table = verdicts.answer_table(v)
    column = fmt.metric_name(METRIC)
    row = table.loc[table["question"] == f"factor {A}", column].iloc[0]
    means = row.split(";")[0]
    said = next(w for w in words if w.startswith(f"**{A}** is significant on {column}"))
    p_adj = v.anova.loc[v.anova["term"] == A, "p_adj"].iloc[0]
    assert f"({means}; p (Holm) {fmt.p_is(p_adj)})" in said
    quiet = v.anova.loc[v.anova["term"] == B, "p_adj"].iloc[0]
    assert f"Significant on no measure: **{B}** (p (Holm) {fmt.pval(quiet)}); no two-way interaction is " \
           "significant on any measure (1 tested)." in words
    comparisons = table.loc[table["question"].str.contains(" vs "), column]
    k_sig, k_und = comparisons.str.contains("SIGNIFICANT").sum(), comparisons.str.contains("undecided").sum()
    assert k_sig and k_und
    last = words[-1]
    assert last.startswith(f"Against the reference **{v.labels[v.reference[0]]}**, {k_sig} of {len(comparisons)} "
                           "comparisons are significant") and last.endswith(f"; {k_und} undecided.")
    # Each significant comparison cell prints its p (Holm); the key says what an undecided one's seeds are for.
    assert all("SIGNIFICANT (p " in c for c in comparisons if "SIGNIFICANT" in c)
    assert "N is the seeds per cell at which the power line (`stats.power`) would detect that smallest effect " \
           "(±0.001 or 1.25×)" in verdicts.answer_intro(v)


def test_the_words_say_when_nothing_is_tested_or_everything_is_equivalent() -> None:
    few = _verdicts(factorial(effect_a=0.05, seeds=2, rng=np.random.default_rng(5)))
    assert verdicts.answer_sentences(few) == [
        "No factor is tested: too few seeds to test (a cell has 2; at least 3 are needed).",
        f"None of the 5 comparisons with the reference **{few.labels[few.reference[0]]}** is tested: too few seeds "
        "or no spread (the table)."]
    same = _verdicts(factorial(seeds=8, sd=0.001, rng=np.random.default_rng(4)), min_effect=0.05)
    assert verdicts.answer_sentences(same)[-1].endswith("of its 5 tested comparisons, all 5 equivalent.")
    # The accuracy summary's factor lines are page one's, on its one measure.
    assert verdicts.term_sentences(same, [METRIC])[0].startswith(f"Not significant on {fmt.metric_name(METRIC)}: ")
    assert verdicts.answer_sentences(dataclasses.replace(same, sequential=True)) == []


def test_a_sequential_page_counts_its_declared_comparisons_by_their_valid_decisions() -> None:
    import pandas as pd

    beside = pd.DataFrame({"cell": ["a", "b", "c"], "measure": ["test_accuracy", "test_accuracy", "norm.final"],
                           "sequential decision (valid)": ["significant at look 3 (9 seeds), stage-wise p 0.0013",
                                                           "undecided at the last look (12 seeds)",
                                                           "futile at look 2 (6 seeds)"]})
    v = SimpleNamespace(sequential=True, sequential_beside=beside)
    assert verdicts.answer_sentences(v) == [
        "Of the 3 comparisons the sequential design declared, 1 is significant — a on test_accuracy at look 3 "
        "(9 seeds), stage-wise p 0.0013 — and 1 futile, 1 undecided at the last look."]
    v.sequential_beside = beside.iloc[1:]
    assert verdicts.answer_sentences(v)[0].startswith("Of the 2 comparisons the sequential design declared, none is "
                                                      "significant and 1 futile")


def test_two_cells_are_one_comparison_not_also_a_factor_test() -> None:
    """A factor test of two cells repeats their one comparison, unpaired, and doubles its place in the family."""
    trials = factorial(effect_a=0.05, seeds=6, sd=0.005, rng=np.random.default_rng(3))
    two = trials[trials["cell_id"].isin(trials["cell_id"].unique()[:2])]
    v = _verdicts(two)
    assert v.anova.empty and v.anova_why == verdicts.TWO_CELLS
    assert set(v.family["kind"]) == {"comparison"} and len(v.family) == 1
    assert not any(q.startswith("factor ") for q in verdicts.answer_table(v)["question"])
    assert not any(w.startswith("No factor is tested") for w in verdicts.answer_sentences(v))


def _never_trials(seeds: int = 10):
    """The 2 × 3 factorial with every ``diagonal`` cell at chance (0.5 ± 0.005): those runs never
    learned (≤ chance + 0.02); and one ``rotation`` run at chance too."""
    trials = factorial(effect_a=-0.3, seeds=seeds, sd=0.005, rng=np.random.default_rng(3))
    one = trials.index[(trials[A] == "rotation") & (trials[B] == "none") & (trials["seed"] == 0)]
    trials.loc[one, METRIC] = 0.5
    return trials


def test_runs_that_never_learned_are_flagged_and_said_in_the_sentence_that_calls_their_factor_significant() -> None:
    """Page one flags a cell's never-learned runs by the accuracy report's rule, and a significant
    factor or comparison whose level (cell) mostly never learned says so in the same sentence."""
    from ablate import stats

    trials = _never_trials()
    ref = trials["cell_id"].iloc[0], trials["cell_label"].iloc[0]
    res = _res(trials, chance=0.5)
    v = verdicts.study_verdicts(res, trials, METRIC, ref, margin=0.02)
    summary = stats.cell_summary(trials, METRIC, 0.5, 0.02).set_index("cell_id")
    for cid, r in summary.iterrows():  # the flag's counts are the accuracy report's summary's
        said = [f for f in v.flags.get(cid, []) if "never learned" in f]
        assert said == ([f"{r['n_never_learned']} of {r['n_finished']} never learned"] if r["n_never_learned"] else [])
    assert v.flags[trials.loc[(trials[A] == "rotation") & (trials[B] == "none"), "cell_id"].iloc[0]] == \
        ["1 of 10 never learned"]
    table = verdicts.answer_table(v)
    assert table["question"].iloc[0] == f"factor {A} — diagonal: 30 of 30 never learned"
    said = next(w for w in verdicts.answer_sentences(v) if w.startswith(f"**{A}** is significant"))
    assert said.endswith(" — diagonal: 30 of 30 runs never learned (test accuracy ≤ chance 0.500 + 0.02): the "
                         "difference is between runs that trained and runs that did not.")
    # A significant comparison with a cell that never learned carries it; one run of 10 at chance is no caveat.
    last = verdicts.answer_sentences(v)[-1]
    significant = set(v.comparisons.loc[v.comparisons["significant"], "cell_id"])
    assert len(significant) == 3
    for cid in significant:
        assert re.search(re.escape(v.labels[cid]) + r" on test accuracy \([^;]*; its 10 of 10 runs never learned\)", last)
    assert "1 of 10 runs" not in last
    assert last.endswith("undecided — never learned: test accuracy ≤ chance 0.500 + 0.02; where a compared cell's "
                         "runs mostly never learned, the difference is that they did not train.")
    # The key says what the flag means, with the rule's numbers.
    assert "never learned: test accuracy ≤ chance 0.500 + 0.02" in verdicts.answer_intro(v)
    # A reference that never learned: the key flags it, and each significant comparison says so.
    diag = trials.loc[trials[A] == "diagonal", ["cell_id", "cell_label"]].iloc[0]
    v = verdicts.study_verdicts(res, trials, METRIC, (diag["cell_id"], diag["cell_label"]), margin=0.02)
    assert "interval; the reference's own flags: 10 of 10 never learned. A factor's" in verdicts.answer_intro(v)
    last = verdicts.answer_sentences(v)[-1]
    assert last.count("; the reference's 10 of 10 runs never learned)") == len(v.comparisons.query("significant"))
    assert "; its 10 of 10 and the reference's 10 of 10" not in last  # rotation cells trained; only diagonal ones
    # Without a known chance the rule does not apply: no flag, no caveat.
    blind = verdicts.study_verdicts(_res(trials), trials, METRIC, ref)
    assert not any("never learned" in f for fs in blind.flags.values() for f in fs)
    assert not any("never learned" in w for w in verdicts.answer_sentences(blind))


def test_an_alpha_set_when_rendering_is_labelled_beside_the_verdicts_it_sets() -> None:
    """``-p alpha`` (and confidence, min_effect, margin) away from its default is said on page one
    with the default it replaced; at the defaults nothing is said. Both reports declare the same
    defaults, and ``ablate plan`` sizes the seeds at the same α."""
    from ablate.report.parameters import declared_parameters
    from ablate.runner.plan_checks import REPORT_ALPHA

    accuracy, norm = declared_parameters("accuracy"), declared_parameters("norm_stability")
    assert accuracy["alpha"] == norm["alpha"] == REPORT_ALPHA and accuracy["confidence"] == norm["confidence"]
    assert accuracy["margin"] == norm["margin"]  # both page ones flag never-learned runs by one rule
    trials = factorial(effect_a=0.05, seeds=6, sd=0.005, rng=np.random.default_rng(3))
    ref = trials["cell_id"].iloc[0], trials["cell_label"].iloc[0]
    plain = verdicts.study_verdicts(_res(trials), trials, METRIC, ref)
    lead = verdicts.answer_lead(plain)
    assert plain.rendered == {} and "(α = 0.05; key below)" in lead and "set when rendering" not in lead.lower()
    assert "the norm report's page one, rendered with the same parameters, is the same." in lead
    shopped = verdicts.study_verdicts(_res(trials), trials, METRIC, ref, alpha=0.2)
    lead = verdicts.answer_lead(shopped)
    assert "(**α = 0.2, set when rendering** (`-p alpha`), not the reports' default 0.05 at which `ablate plan` " \
           "sized the seeds; key below)" in lead
    assert "Also set" not in lead
    more = verdicts.study_verdicts(_res(trials), trials, METRIC, ref, confidence=0.9, min_effect=0.05, margin=0.1)
    lead = verdicts.answer_lead(more, "norm_stability")
    assert lead.endswith("the accuracy report's page one, rendered with the same parameters, is the same. **Set when "
                         "rendering**, not the defaults: 90% intervals (`-p confidence`; default 95%), min_effect "
                         "±0.050 (`-p min_effect`; the spec's `stats.min_effect` is 0.010) and never learned at ≤ "
                         "chance + 0.1 (`-p margin`; default 0.02); the verdicts and flags below use them.")


def test_a_cell_none_of_whose_runs_finished_is_said_first_on_page_one() -> None:
    trials = factorial(effect_a=0.05, seeds=4, sd=0.005, rng=np.random.default_rng(3))
    cell = trials["cell_id"].unique()[1]
    trials.loc[trials["cell_id"] == cell, ["status", METRIC]] = ["diverged", np.nan]
    v = _verdicts(trials)
    assert v.lost == [cell]
    said = verdicts.answer_sentences(v)
    assert said[0] == (f"Nothing about **{v.labels[cell]}** is tested: no run of it finished (the table's flags say "
                       "how each ended); every verdict below rests on the cells whose runs finished.")
    assert not verdicts.answer_sentences(_verdicts(factorial(seeds=4, rng=np.random.default_rng(3))))[0].startswith(
        "Nothing about")
