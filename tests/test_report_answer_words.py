"""The answer in words (ablate.report.answer_words): page one's sentences say the numbers the answer
table prints, and what its rows and cells mean."""

from __future__ import annotations

import dataclasses
import re
from types import SimpleNamespace

import numpy as np
from frames import METRIC, A, B, answer_res, answer_verdicts, factorial

from ablate.report import answer_words, verdicts
from ablate.report import format as fmt


def test_page_one_says_the_answer_in_words_with_the_tables_numbers() -> None:
    """The answer sentences name the significant factor with the p and level means its table row
    prints, the quiet factor with its p, and count the comparisons as the table's words do."""
    trials = factorial(effect_a=0.05, seeds=10, sd=0.004, rng=np.random.default_rng(3))
    v = answer_verdicts(trials, min_effect=0.001)
    words = answer_words.answer_sentences(v)
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
    key = answer_words.answer_intro(v)
    assert "N is the seeds per cell at which the power line (`stats.power`) would detect that smallest effect " \
           "(±0.001), not" in key
    # Accuracy alone (reports: [accuracy]): the key explains no ratio, geometric mean or norm flag it cannot show.
    assert not any(w in key for w in ("a ratio", "geometric", "min_ratio", "norms", "CV over layers")), key
    import pandas as pd

    with_norms = answer_words.answer_intro(dataclasses.replace(v, norm_comparisons=pd.DataFrame({"cell_id": ["x"]})))
    assert "(a ratio for a norm measure)" in with_norms and "(±0.001 or 1.25×)" in with_norms
    assert "(`stats.min_ratio`)" in with_norms and "late-growing norms" in with_norms


def test_the_words_say_when_nothing_is_tested_or_everything_is_equivalent() -> None:
    few = answer_verdicts(factorial(effect_a=0.05, seeds=2, rng=np.random.default_rng(5)))
    assert answer_words.answer_sentences(few) == [
        "No factor is tested: too few seeds to test (a cell has 2; at least 3 are needed).",
        f"None of the 5 comparisons with the reference **{few.labels[few.reference[0]]}** is tested: too few seeds "
        "or no spread (the table)."]
    same = answer_verdicts(factorial(seeds=8, sd=0.001, rng=np.random.default_rng(4)), min_effect=0.05)
    assert answer_words.answer_sentences(same)[-1].endswith("of its 5 tested comparisons, all 5 equivalent.")
    # The accuracy summary's factor lines are page one's, on its one measure.
    assert answer_words.term_sentences(same, [METRIC])[0].startswith(f"Not significant on {fmt.metric_name(METRIC)}: ")
    assert answer_words.answer_sentences(dataclasses.replace(same, sequential=True)) == []


def test_a_sequential_page_counts_its_declared_comparisons_by_their_valid_decisions() -> None:
    import pandas as pd

    beside = pd.DataFrame({"cell": ["a", "b", "c"], "measure": ["test_accuracy", "test_accuracy", "norm.final"],
                           "estimate [98.3% repeated CI]": ["−0.094 [−0.141, −0.046]", "+0.002 [−0.010, +0.014]",
                                                           "1.1× [0.8×, 1.5×]"],
                           "sequential decision (valid)": ["significant at look 3 (9 seeds), stage-wise p 0.0013",
                                                           "undecided at the last look (12 seeds)",
                                                           "futile at look 2 (6 seeds)"]})
    bare = {"labels": {"ida": "a"}, "reference": ("ida", "a"), "chance": None, "never": None}  # no chance level: no untrained-runs sentence
    v = SimpleNamespace(sequential=True, sequential_beside=beside, **bare)
    assert answer_words.answer_sentences(v) == [
        "Of the 3 comparisons the sequential design declared, 1 is significant — a on test_accuracy "
        "(−0.094 [−0.141, −0.046]) at look 3 (9 seeds), stage-wise p 0.0013 — and 1 futile, 1 undecided at the last look."]
    v.sequential_beside = beside.iloc[1:]
    # Every one significant (lru_ablations): the list ends the sentence, with no dash left before its full stop.
    every = SimpleNamespace(**bare, sequential=True, sequential_beside=beside.assign(
        **{"sequential decision (valid)": "significant at look 3 (9 seeds), stage-wise p 0.004"}))
    said = answer_words.answer_sentences(every)[0]
    assert said.endswith(", stage-wise p 0.004.") and "—" not in said and ": " in said, said
    assert answer_words.answer_sentences(v)[0].startswith("Of the 2 comparisons the sequential design declared, none is "
                                                      "significant and 1 futile")
    # An equivalent decision is counted too (it was left out: "none is significant and 1 undecided" of three).
    eq = SimpleNamespace(**bare, sequential=True, sequential_beside=beside.assign(**{"sequential decision (valid)": [
        "equivalent at look 1 (6 seeds); its 96% equivalence interval [−0.003, +0.009] lies within ±0.01",
        "undecided at the last look (12 seeds)", "equivalent at look 2 (12 seeds)"]}))
    assert answer_words.answer_sentences(eq) == [
        "Of the 3 comparisons the sequential design declared, none is significant and 2 equivalent, 1 undecided at "
        "the last look."]
    # A design of two cells declares one comparison: said of it, not "of the 1 comparisons …, none is significant
    # and 1 futile".
    one = SimpleNamespace(sequential=True, sequential_beside=beside.iloc[2:], **bare)
    # A decision on runs that mostly never learned is said after the verdicts, as on a fixed page: c's runs
    # did not train, so its futility says nothing of the variant trained.
    never = pd.DataFrame({"cell_id": ["idc", "idr"], "n_never_learned": [5, 1], "n_finished": [6, 6]})
    untrained = SimpleNamespace(sequential=True, sequential_beside=beside, labels={"ida": "a", "idc": "c", "idr": "R"},
                                reference=("idr", "R"), chance=0.1, never=never, metric=METRIC, margin=0.02)
    said = answer_words.answer_sentences(untrained)
    assert said[-1].startswith("**Untrained runs.** This decision compares runs that mostly never learned "
                               f"({fmt.metric_name(METRIC)} ≤ chance 0.100 + 0.02): c on norm.final, futile; its 5 of 6 "
                               "runs never learned."), said
    assert answer_words.answer_sentences(one) == [
        "The one comparison the sequential design declared, c on norm.final (1.1× [0.8×, 1.5×]), is futile at look 2 "
        "(6 seeds)."]


def test_two_cells_are_one_comparison_not_also_a_factor_test() -> None:
    """A factor test of two cells repeats their one comparison, unpaired, and doubles its place in the family."""
    trials = factorial(effect_a=0.05, seeds=6, sd=0.005, rng=np.random.default_rng(3))
    two = trials[trials["cell_id"].isin(trials["cell_id"].unique()[:2])]
    v = answer_verdicts(two)
    assert v.anova.empty and v.anova_why == verdicts.TWO_CELLS
    assert set(v.family["kind"]) == {"comparison"} and len(v.family) == 1
    assert not any(q.startswith("factor ") for q in verdicts.answer_table(v)["question"])
    assert not any(w.startswith("No factor is tested") for w in answer_words.answer_sentences(v))


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
    res = answer_res(trials, chance=0.5)
    v = verdicts.study_verdicts(res, trials, METRIC, ref, margin=0.02)
    summary = stats.cell_summary(trials, METRIC, 0.5, 0.02).set_index("cell_id")
    for cid, r in summary.iterrows():  # the flag's counts are the accuracy report's summary's
        said = [f for f in v.flags.get(cid, []) if "never learned" in f]
        assert said == ([f"{r['n_never_learned']} of {r['n_finished']} never learned"] if r["n_never_learned"] else [])
    assert v.flags[trials.loc[(trials[A] == "rotation") & (trials[B] == "none"), "cell_id"].iloc[0]] == \
        ["1 of 10 never learned"]
    table = verdicts.answer_table(v)
    assert table["question"].iloc[0] == f"factor {A} — diagonal: 30 of 30 never learned"
    said = next(w for w in answer_words.answer_sentences(v) if w.startswith(f"**{A}** is significant"))
    assert said.endswith(" — diagonal: 30 of 30 runs never learned (test accuracy ≤ chance 0.500 + 0.02): the "
                         "difference is between runs that trained and runs that did not.")
    # A significant comparison with a cell that never learned carries it; one run of 10 at chance is no caveat.
    last = answer_words.answer_sentences(v)[-1]
    significant = set(v.comparisons.loc[v.comparisons["significant"], "cell_id"])
    assert len(significant) == 3
    for cid in significant:
        assert re.search(re.escape(v.labels[cid]) + r" on test accuracy \([^;]*; its 10 of 10 runs never learned\)", last)
    assert "1 of 10 runs" not in last
    assert last.endswith("undecided — never learned: test accuracy ≤ chance 0.500 + 0.02; where a compared cell's "
                         "runs mostly never learned, the difference is that they did not train.")
    # The key says what the flag means, with the rule's numbers.
    assert "never learned: test accuracy ≤ chance 0.500 + 0.02" in answer_words.answer_intro(v)
    # A reference that never learned: the key flags it, and each significant comparison says so.
    diag = trials.loc[trials[A] == "diagonal", ["cell_id", "cell_label"]].iloc[0]
    v = verdicts.study_verdicts(res, trials, METRIC, (diag["cell_id"], diag["cell_label"]), margin=0.02)
    assert "interval; the reference's own flags: 10 of 10 never learned. A factor's" in answer_words.answer_intro(v)
    said = answer_words.answer_sentences(v)
    last = next(w for w in said if w.startswith("Against the reference"))
    assert last.count("; the reference's 10 of 10 runs never learned)") == len(v.comparisons.query("significant"))
    assert "; its 10 of 10 and the reference's 10 of 10" not in last  # rotation cells trained; only diagonal ones
    # An equivalent comparison with the untrained reference is said after: "equivalent" there says both
    # failed alike (it was counted among the equivalent ones with no word of it).
    untrained = said[-1]
    assert untrained.startswith("**Untrained runs.** ") and "runs that mostly never learned (test accuracy ≤ chance " \
        "0.500 + 0.02): " in untrained, said
    assert untrained.count(", equivalent; its 10 of 10 and the reference's 10 of 10 runs never learned") == 1, untrained
    # Without a known chance the rule does not apply: no flag, no caveat.
    blind = verdicts.study_verdicts(answer_res(trials), trials, METRIC, ref)
    assert not any("never learned" in f for fs in blind.flags.values() for f in fs)
    assert not any("never learned" in w for w in answer_words.answer_sentences(blind))


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
    plain = verdicts.study_verdicts(answer_res(trials), trials, METRIC, ref)
    lead = answer_words.answer_lead(plain)
    assert plain.rendered == {} and "(α = 0.05; key below)" in lead and "set when rendering" not in lead.lower()
    assert "the norm report's page one, rendered with the same parameters, is the same." in lead
    # A fixed design whose seeds were first added look by look says so first (sequential_looks.fixed_after_looks).
    looked = answer_words.answer_sentences(dataclasses.replace(plain, after_looks="the seeds of s were first added …"))
    assert looked[0].startswith("**Seeds chosen after looking.** The seeds of s were first added") and \
        looked[1:] == answer_words.answer_sentences(plain)
    # A spec with `reports: [accuracy]` has no norm report to point to (polar: page one named one).
    alone = answer_words.answer_lead(dataclasses.replace(plain, reports=("accuracy",)))
    assert "norm report" not in alone and alone.endswith("a column per measure the study's reports test."), alone
    assert "norm report" not in answer_words.answer_lead(dataclasses.replace(plain, reports=("accuracy",), sequential=True))
    shopped = verdicts.study_verdicts(answer_res(trials), trials, METRIC, ref, alpha=0.2)
    lead = answer_words.answer_lead(shopped)
    assert "(**α = 0.2, set when rendering** (`-p alpha`), not the reports' default 0.05 at which `ablate plan` " \
           "sized the seeds; key below)" in lead
    assert "Also set" not in lead
    more = verdicts.study_verdicts(answer_res(trials), trials, METRIC, ref, confidence=0.9, min_effect=0.05, margin=0.1)
    lead = answer_words.answer_lead(more, "norm_stability")
    assert lead.endswith("the accuracy report's page one, rendered with the same parameters, is the same. **Set when "
                         "rendering**, not the defaults: 90% intervals (`-p confidence`; default 95%), min_effect "
                         "±0.050 (`-p min_effect`; the spec's `stats.min_effect` is 0.010) and never learned at ≤ "
                         "chance + 0.1 (`-p margin`; default 0.02); the verdicts and flags below use them.")


def test_a_cell_none_of_whose_runs_finished_is_said_first_on_page_one() -> None:
    trials = factorial(effect_a=0.05, seeds=4, sd=0.005, rng=np.random.default_rng(3))
    cell = trials["cell_id"].unique()[1]
    trials.loc[trials["cell_id"] == cell, ["status", METRIC]] = ["diverged", np.nan]
    v = answer_verdicts(trials)
    assert v.lost == [cell]
    said = answer_words.answer_sentences(v)
    assert said[0] == (f"Nothing about **{v.labels[cell]}** is tested: no run of it finished (the table's flags say "
                       "how each ended); every verdict below rests on the cells whose runs finished.")
    assert not answer_words.answer_sentences(answer_verdicts(factorial(seeds=4, rng=np.random.default_rng(3))))[0].startswith(
        "Nothing about")
