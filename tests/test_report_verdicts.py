"""The answer page (ablate.report.verdicts): every test of the study once, adjusted over one family,
and a page-one table whose every cell is traced to the body's frames."""

from __future__ import annotations

import numpy as np
import pytest
from frames import METRIC, A, B, answer_res, answer_verdicts, factorial

from ablate.report import format as fmt
from ablate.report import verdicts
from ablate.report.accuracy.tables import floor_words, holm_first
from ablate.stats.family import reach_of
from ablate.stats.words import Reach


def test_a_strong_factor_is_significant_on_the_page_and_in_the_body() -> None:
    trials = factorial(effect_a=0.05, seeds=6, sd=0.005, rng=np.random.default_rng(3))
    v = answer_verdicts(trials)
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
    v = answer_verdicts(trials, min_effect=0.05)  # every interval is far inside ±0.05
    cells = verdicts.answer_table(v)[fmt.metric_name(METRIC)]
    comparison_cells = [c for q, c in zip(verdicts.answer_table(v)["question"], cells, strict=True) if " vs " in q]
    assert comparison_cells and all(c.endswith("equivalent") for c in comparison_cells)
    v = answer_verdicts(trials, min_effect=0.0001)  # now the intervals are wider than ±min_effect
    table = verdicts.answer_table(v)
    assert all("undecided" in c for q, c in zip(table["question"], table[fmt.metric_name(METRIC)], strict=True)
               if " vs " in q)


def test_the_anova_needs_three_seeds_a_cell_as_every_other_test() -> None:
    trials = factorial(effect_a=0.05, seeds=2, rng=np.random.default_rng(5))
    v = answer_verdicts(trials)
    assert v.anova.empty and "too few seeds" in v.anova_why
    assert v.family.empty  # nothing is tested at 2 seeds: no comparison either
    assert "Nothing is tested" in v.policy()


def test_the_power_line_and_floor_use_the_whole_family() -> None:
    trials = factorial(effect_a=0.05, seeds=4, sd=0.01, rng=np.random.default_rng(6))
    v = answer_verdicts(trials)
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
    v = answer_verdicts(trials)
    table = verdicts.answer_table(v)
    label = v.labels[cell]
    assert " · " in label and v.key == "parameterisation · normalisation"
    # The flags follow the question (a column of their own split the table, alone on the next page).
    assert table.loc[table["question"].str.startswith(f"{label} vs"), "question"].iloc[0].endswith(" — 1 diverged")
    assert "flags" not in table.columns


def test_past_max_rows_the_undecided_comparisons_are_counted_not_listed() -> None:
    trials = factorial(effect_a=0.05, seeds=10, sd=0.004, rng=np.random.default_rng(3))
    v = answer_verdicts(trials, min_effect=0.001)  # the other level of A: significant; the same level: undecided
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
    v = answer_verdicts(trials)
    assert v.flags.get(cell) == ["still improving"]
    assert all(cid == cell for cid in v.flags)


def test_before_any_test_the_power_line_is_at_the_designs_alpha_over_m() -> None:
    """At 2 seeds nothing is tested, and the seeds a comparison needs were reckoned at α/1 ("m = 1
    test in the study's family"); they are reckoned at the α/m the design's family will be tested at."""
    from ablate.report.accuracy.text import comparison_sentences

    trials = factorial(effect_a=0.05, seeds=2, rng=np.random.default_rng(5))
    ref = trials["cell_id"].iloc[0], trials["cell_label"].iloc[0]
    v = verdicts.study_verdicts(answer_res(trials), trials, METRIC, ref, design_m=27)
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
    v = answer_verdicts(trials)
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
