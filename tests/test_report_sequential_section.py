"""The sequential design as the reports print it (ablate.report.sequential_section): every number from
the study's recorded looks, decisions at the looks that made them."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from ablate import spec as spec_mod
from ablate.report import sequential_section as seqrep
from ablate.runner import sequential_looks

RAW = {
    "name": "seqreport",
    "task": {"name": "listops", "max_depth": 3, "max_args": 5, "min_length": 10, "max_length": 64,
             "train_size": 4000, "seed": 0},
    "model": {"family": "linear_rnn", "d_model": 32, "state_dim": 32, "layers": 2},
    "train": {"steps": 300, "batch_size": 32, "lr": 3.0e-3, "eval_every": 50},
    "factors": {"model.heads": [4, 1, 16]},
    "seeds": {"min": 3, "max": 9, "step": 2},
}


def run_looks(with_values: bool = False):
    spec = spec_mod.parse(RAW)
    cells = [c.id for c in sequential_looks.design.cells(spec)]
    ref = sequential_looks.reference_cell(spec)
    rng = np.random.default_rng(1)
    big, null = [c for c in cells if c != ref]
    base = 0.6 + rng.normal(0, 0.01, 9)
    values = {ref: base + rng.normal(0, 0.002, 9), big: base + 0.05 + rng.normal(0, 0.002, 9),
              null: base + rng.normal(0, 0.05, 9)}
    vals = {"test_accuracy": {c: dict(zip(spec.seed_list, v.tolist(), strict=True)) for c, v in values.items()}}
    st = sequential_looks.State(planned={c: 3 for c in cells})
    while not st.finished:
        sequential_looks.step(spec, st, vals)
    return (spec, st, big, null, ref, vals) if with_values else (spec, st, big, null, ref)


def test_the_tables_print_the_recorded_decisions():
    spec, st, big, null, ref = run_looks()
    state = {"look": st.look, "planned": st.planned, "decided": st.decided, "history": st.history,
             "finished": st.finished}
    labels = {c.id: c.label for c in sequential_looks.design.cells(spec)}
    table = seqrep.decisions_table(state, spec, labels)
    assert list(table["cell"]) == [labels[big], labels[null]]
    row = table.iloc[0]
    decided = st.decided[f"{big}:test_accuracy"]
    assert decided["decision"] == "significant" and row["decision"] == "significant"
    assert row["at look (seeds)"] == f"{decided['look']} ({decided['seeds']})"
    assert f"{decided['estimate']:+.3f}".replace("-", "−") in row.iloc[4]
    # The t path has one entry per look the comparison was analysed at.
    assert row["t (boundary) at each look"].count("→") == decided["look"] - 1
    looks = seqrep.looks_table(spec)
    assert list(looks["seeds per cell"]) == ["3", "5", "7", "9"]
    spent = [float(x) for x in looks["α spent (per comparison)"]]
    assert spent == sorted(spent) and math.isclose(spent[-1], 0.025, rel_tol=1e-3)
    said = " ".join(seqrep.sentences(state, spec, labels, labels[ref]))
    assert "significant" in said and labels[big] in said and "Seeds used" in said
    assert f"{sum(st.planned.values())} runs" in said


def test_the_procedure_says_which_test_the_looks_use():
    said = seqrep.procedure(spec_mod.parse(RAW))[0]
    assert "Each look tests it with the paired t test" in said and "Welch" in said
    assert "Each of the 2 comparisons (test_accuracy) is a group-sequential test at α/2 = 0.025" in said, said
    two = seqrep.procedure(spec_mod.parse({**RAW, "factors": {"model.heads": [4, 1]}}))[0]
    assert "Its one comparison (test_accuracy) is a group-sequential test at α = 0.05 whose α is spent" in two, two
    why = seqrep.fixed_why(spec_mod.parse({**RAW, "factors": {"model.heads": [4, 1]}}), 1)  # "α/1", "1 tests" before
    assert "boundary at α = 0.05 spent over the looks" in why and "would test it alone" in why and "α/1" not in why, why
    # untr (two cells at chance): the fixed exact test significant (p 0.018), the looks undecided — the
    # paragraph explained only the other way round.
    assert "The other way round" not in why
    other = seqrep.fixed_why(spec_mod.parse({**RAW, "factors": {"model.heads": [4, 1]}}), 1, fixed_only=1)
    assert "The other way round (1 comparison here): each look's boundary lies above a single test's" in other, other


def _trials(spec, planned, vals) -> pd.DataFrame:
    """The trials frame the reports read of the study ``run_looks`` ran: each cell's planned seeds."""
    cells = {c.id: c for c in sequential_looks.design.cells(spec)}
    rows = [{"cell_id": cid, "cell_label": cells[cid].label, "seed": s, "phase": "replicate", "status": "complete",
             "failure_kind": None, "failure_message": None, "model.heads": str(cells[cid].config["model"]["heads"]),
             "test_accuracy": vals["test_accuracy"][cid][s]}
            for cid, n in planned.items() for s in spec.seed_list[:n]]
    return pd.DataFrame(rows)


def test_the_answer_page_shows_the_sequential_decision_beside_the_fixed_exact_test(monkeypatch):
    """The strong cell is decided significant at look 1 (3 seeds: its t crosses the boundary); the
    exact sign-flip test on those 3 seeds cannot go below 2/2³ = 0.25, so the fixed design would
    not call it: the page shows both, marks the difference, and says why."""
    from ablate import stats
    from ablate.report import answer_words, verdicts
    from ablate.report import format as fmt
    from ablate.stats import family as fam

    spec, st, big, null, ref, vals = run_looks(with_values=True)
    state = {"look": st.look, "planned": st.planned, "decided": st.decided, "history": st.history,
             "finished": st.finished}
    # The strong cell ran on to 9 seeds (as when another of its measures was still open): the fixed
    # column still tests the 3 its decision used.
    trials = _trials(spec, {**st.planned, big: 9}, vals)
    labels = {c.id: c.label for c in sequential_looks.design.cells(spec)}
    res = SimpleNamespace(spec=spec, factors=["model.heads"], sequential=state, chance=None)
    v = verdicts.study_verdicts(res, trials, "test_accuracy", (ref, labels[ref]))
    beside = v.sequential_beside
    assert list(beside["measure"]) == ["test_accuracy", "test_accuracy"]
    decided = st.decided[f"{big}:test_accuracy"]
    row = beside[beside["cell"] == v.labels[big]].iloc[0]
    assert row["sequential decision (valid)"] == (f"significant at look {decided['look']} ({decided['seeds']} seeds), "
                                                  f"stage-wise p {fmt.pval(decided['p'])}")
    # Which way and how far, first: the decision's estimate with its repeated interval, as the appendix prints it.
    est = seqrep.estimate_column(spec)
    assert list(beside.columns[:3]) == ["cell", "measure", est] and est.endswith("% repeated CI]")
    assert row[est] == (f"{fmt.signed(decided['estimate'])} [{fmt.signed(decided['rci_low'])}, "
                        f"{fmt.signed(decided['rci_high'])}]")
    appendix = seqrep.decisions_table(state, spec, v.labels).set_index("cell")
    assert appendix.loc[v.labels[big], est] == row[est]
    # The fixed column is the exact test on the seeds the look used (every cell's first 3), Holm-adjusted
    # over that fixed design's whole family (both comparisons and the ANOVA term).
    at = trials[trials["seed"].isin(spec.seed_list[:decided["seeds"]])]
    comps = stats.compare_to_reference(at, "test_accuracy", ref)
    comp = comps.set_index("cell_id").loc[big]
    assert comp["n"] == decided["seeds"] == 3 and comp["p_min"] == 0.25 and comp["p"] >= comp["p_min"]
    would = fam.adjust(fam.members([("test_accuracy", comps)],
                                   [("test_accuracy", verdicts.accuracy_anova(at, "test_accuracy", ["model.heads"])[0])]))
    assert len(would) == 3
    holm = would.set_index("key").loc[big, "p_adj"]
    assert row[seqrep.FIXED_COLUMN] == (f"not significant: p {fmt.pval(comp['p'])}, floor {fmt.pval(0.25)} at 3 seeds; "
                                        f"Holm p {fmt.pval(holm)}")
    assert row["differ"] == "yes"
    assert f"α/2 = {fmt.pval(0.025)}" in v.sequential_why and f"family of {len(would)} tests" in v.sequential_why
    # The floors of the two fixed designs: 2/2⁹ at the 9 seeds of the futile cell's look, 2/2³ at 3.
    assert f"(2/2ⁿ paired; here {fmt.pval(2 / 2**9)} to {fmt.pval(0.25)})" in v.sequential_why
    from ablate.report import display

    shown: list[str] = []
    monkeypatch.setattr(display, "display", lambda obj: shown.append(obj.data))
    answer_words.show_answer(v)
    page = "\n".join(shown)
    assert "Why the two can differ" in page and seqrep.FIXED_COLUMN in page and row[seqrep.FIXED_COLUMN] in page


def test_without_a_look_the_answer_page_has_no_sequential_rows():
    spec = spec_mod.parse(RAW)
    assert seqrep.fixed_beside(None, spec, {}, {}).empty


def _state(st) -> dict:
    return {"look": st.look, "planned": st.planned, "decided": st.decided, "history": st.history,
            "finished": st.finished}


def test_status_says_where_each_open_comparison_stood_at_its_last_look():
    """lru_ablations after its first look listed its 4 open cells and nothing of where they stood:
    the wide ring's |t| was 45 against a boundary of 46.5, tanh's 2.8."""
    spec, _, big, null, ref, vals = run_looks(with_values=True)
    st = sequential_looks.State(planned={c.id: 3 for c in sequential_looks.design.cells(spec)})
    sequential_looks.step(spec, st, vals)
    labels = {c.id: c.label for c in sequential_looks.design.cells(spec)}
    said = sequential_looks.lines(spec, st)
    rows = {r["cell_id"]: r for r in st.history[0]}
    still = [c for c in (big, null) if f"{c}:test_accuracy" not in st.decided]
    assert still  # 3 seeds decide nothing here
    n_looks = len(spec.sequential.looks)
    # between looks no worker need be running (a stopped run): the look is under way, not "running"
    assert any(x.startswith(f"state: look 2 of {n_looks} ({spec.sequential.looks[1]} seeds) under way;") for x in said), said
    for cell in still:
        r = rows[cell]
        line = next(x for x in said if x.startswith(f"  open after look 1 (3 seeds): {labels[cell]} on test_accuracy: "))
        assert line.endswith(f"(repeated CI), |t| {abs(r['t']):.3g} against the boundary {r['bound']:.3g}"), line
    assert not any("open after" in x for x in sequential_looks.lines(spec, run_looks()[1]))  # finished: none open


def test_a_comparison_that_ran_out_of_seeds_reads_undecided_not_futile():
    """Review item 10: the null cell reaches the last look (9 seeds) with none of significant,
    equivalent or futile. The runner records it as futile; every place that shows it says
    "undecided at the last look", and "futile" is kept for a stop at the futility boundary."""
    from ablate.runner import launch
    from ablate.stats import group_sequential as sq

    spec, st, big, null, ref = run_looks()
    state = _state(st)
    labels = {c.id: c.label for c in sequential_looks.design.cells(spec)}
    row = st.decided[f"{null}:test_accuracy"]
    assert row["decision"] == "futile" and row["look"] == 4 and row["futility_bound"] is None  # as stored
    assert sequential_looks.outcome(row) == "undecided"
    assert sequential_looks.outcome_words(row) == "undecided at the last look (9 seeds)"
    table = seqrep.decisions_table(state, spec, labels).set_index("cell")
    assert table.loc[labels[null], "decision"] == "undecided at the last look"
    said = " ".join(seqrep.sentences(state, spec, labels, labels[ref]))
    assert f"Undecided at the last look (9 seeds): {labels[null]} on test_accuracy" in said and "futile" not in said
    assert seqrep.decision_words(state, spec, "test_accuracy")[null] == "undecided at the last look"
    beside = seqrep.fixed_beside(state, spec, {}, labels).set_index("cell")
    assert beside.loc[labels[null], "sequential decision (valid)"] == "undecided at the last look (9 seeds)"
    status = "\n".join(sequential_looks.lines(spec, st))
    assert "1 of 2 comparisons decided, 1 undecided at the last look" in status
    assert f"undecided at the last look (9 seeds): {labels[null]} on test_accuracy" in status and "futile" not in status
    printed = "\n".join(launch.look_decisions(spec, st))
    assert "1 undecided at the last look" in printed and f"undecided at the last look: {labels[null]}" in printed
    advanced = sequential_looks.Advanced(4, [row], 0, 0, True)
    assert launch.look_line(advanced.event()) == ("look 4: 0 comparisons decided, 1 undecided at the last look; "
                                                  "the sequential design is finished")
    # A stop at the futility boundary (before the last look, under its finite boundary) stays futile.
    d = sq.SequentialDesign.of(3, 16, 2, min_effect=1.0)
    base = np.array([0.3, -0.5, 0.6, 0.1, -0.2, 0.4, 0.0, 0.2, -0.3, 0.1, 0.3])
    stop = sq.decide(d, diffs=list(0.1 + (base - base.mean()) / base.std(ddof=1) * 0.3 * math.sqrt(11)))
    assert stop["decision"] == "futile" and math.isfinite(stop["futility_bound"])
    assert sequential_looks.outcome_words({**stop, "seeds": 11}) == "futile at look 5 (11 seeds)"
    # It is read from the interval at the futility boundary, which lies within ±min_effect (its repeated CI
    # need not): the words say which interval decided it.
    wide = spec_mod.parse({**RAW, "stats": {"min_effect": 1.0}})
    words = sequential_looks.equivalence_words({**stop, "measure": "test_accuracy"}, wide)
    low, high = stop["estimate"] - stop["futility_bound"] * stop["se"], stop["estimate"] + stop["futility_bound"] * stop["se"]
    assert words == f"; its interval at the futility boundary [{low:+.3f}, {high:+.3f}] lies within ±1", words
    assert -1 < low < high < 1 and stop["rci_high"] > 1, stop  # the repeated CI alone would not say "futile"
    # The last look as decide() returns it (its futility boundary infinite), and a row recorded before
    # the futility boundary existed (no futility_bound): both undecided.
    last = sq.decide(d, diffs=list(np.random.default_rng(0).normal(0.0, 3.0, 16)))
    assert last["decision"] == "futile" and sequential_looks.outcome(last) == "undecided"
    assert sequential_looks.outcome({"decision": "futile", "look": 4}) == "undecided"


def test_the_looks_table_prints_the_boundaries_the_looks_recorded():
    """Review item 9: the looks table printed today's boundaries while the decisions table's paths
    printed those stored when each look ran. It prints the stored ones (they decided) and says in
    one line what this version computes where the two differ."""
    spec, st, *_ = run_looks()
    state = _state(st)
    d = next(iter(sequential_looks.designs(spec).values()))
    now = seqrep.looks_table(spec)
    assert list(now["boundary |t| (paired)"]) == [seqrep._shown(b) for b in d.efficacy_t()]
    assert seqrep.looks_table(spec, state).equals(now) and seqrep.boundaries_note(spec, state) == ""
    # An older version's boundaries at look 2, as an export of a study run then holds them.
    for r in state["history"][1]:
        r["bound"], r["equivalence_bound"] = 9.99, 7.77
    table = seqrep.looks_table(spec, state)
    assert table["boundary |t| (paired)"].iloc[1] == "9.99" and table["equivalence t"].iloc[1] == "7.77"
    assert table["boundary |t| (paired)"].iloc[2] == now["boundary |t| (paired)"].iloc[2]
    assert seqrep.boundaries_note(spec, state) == (
        "The t boundaries are those computed when each look ran (they made its decisions); this version computes "
        f"|t| {seqrep._shown(d.efficacy_t()[1])} at look 2 and equivalence t {seqrep._shown(d.equivalence_t()[1])} "
        "at look 2.")
    # The table's boundary at look 2 is the one the decisions table's path prints for it.
    labels = {c.id: c.label for c in sequential_looks.design.cells(spec)}
    path = seqrep.decisions_table(state, spec, labels).iloc[-1]["t (boundary) at each look"]
    assert path.split(" → ")[1].endswith("(9.99)")
    # Looks that did not run: this version's, and said so.
    short = {**state, "history": state["history"][:2]}
    assert seqrep.boundaries_note(spec, short).endswith(
        "Looks 3, 4 have no recorded boundary (not run, or no comparison analysed on all its seeds paired): this "
        "version's.")


def test_a_sequential_studys_power_line_is_at_its_own_alpha_over_m():
    """Review item 9: the sequential family is its comparisons (here 2, at α/2 Bonferroni); its power
    lines were at α/1 (the fixed family, emptied on purpose, counted none) or at the fixed design's m."""
    from ablate.report import answer_words, verdicts

    spec, st, big, null, ref, vals = run_looks(with_values=True)
    trials = _trials(spec, st.planned, vals)
    labels = {c.id: c.label for c in sequential_looks.design.cells(spec)}
    res = SimpleNamespace(spec=spec, factors=["model.heads"], sequential=_state(st), chance=None)
    for design_m in (None, 9):
        v = verdicts.study_verdicts(res, trials, "test_accuracy", (ref, labels[ref]), design_m=design_m)
        assert v.power_m == seqrep.family_size(spec) == 2
        assert np.allclose(v.comparisons["power_alpha"], 0.05 / 2)
    # The page's words: its rows are the declared comparisons, and no Holm p or permutation test is claimed.
    assert "no factor rows" in answer_words.answer_lead(v, "accuracy") and "One row per question" not in \
        answer_words.answer_lead(v, "norm_stability")
    for report in ("accuracy", "norm_stability"):
        lead = answer_words.summary_lead(v, report)
        assert "sequential design's decisions" in lead and "every p (Holm) is adjusted" not in lead
    assert "exact permutation tests (paired" not in answer_words.summary_lead(v, "norm_stability")


def test_status_json_gives_each_declared_comparison_its_outcome_and_estimate():
    """`ablate status --json` had counts and cells but nothing of a sequential study's looks: a script
    waiting on a decision had to parse the text lines."""
    spec, st, big, null, ref = run_looks()
    said = sequential_looks.state_json(spec, st)
    assert said["finished"] and said["analysed"] == len(st.history) and said["looks"] == list(spec.sequential.looks)
    rows = {r["cell_id"]: r for r in said["comparisons"]}
    assert set(rows) == {big, null}
    decided = st.decided[f"{big}:test_accuracy"]
    assert rows[big]["outcome"] == "significant" and rows[big]["scale"] == "difference"
    assert rows[big]["estimate"] == decided["estimate"] and rows[big]["p"] == decided["p"]
    assert rows[null]["outcome"] == sequential_looks.outcome(st.decided[f"{null}:test_accuracy"])
    # A norm measure is given as the ratio the reports print (analysed on the log scale).
    norm = {**decided, "key": f"{big}:norm.final", "measure": "norm.final"}
    ratio = sequential_looks.state_json(
        spec.model_copy(update={"seeds": spec.seeds.model_copy(update={"measures": ["norm.final"]})}),
        sequential_looks.State(look=0, planned={}, decided={norm["key"]: norm}, history=[[norm]]))
    (r,) = ratio["comparisons"][:1]
    assert r["scale"] == "ratio" and r["estimate"] == pytest.approx(math.exp(decided["estimate"]))
    # The interval its equivalence test read, on the same scale (a script can check a decision against it).
    if decided["seeds"] < 6:  # no equivalence test before 6 seeds: no interval to give
        assert rows[big]["equivalence_low"] is None and r["equivalence_low"] is None
    later = {**decided, "equivalence_bound": 3.0}
    low = later["estimate"] - 3.0 * later["se"]
    json_row = sequential_looks.state_json(spec, sequential_looks.State(
        look=0, planned={}, decided={later["key"]: later}, history=[[later]]))["comparisons"][0]
    assert json_row["equivalence_low"] == pytest.approx(low)
    before = sequential_looks.state_json(spec, None)  # no look yet: every comparison open at look 1
    assert before["look"] == 1 and before["analysed"] == 0 and {r["outcome"] for r in before["comparisons"]} == {"open"}


def test_an_equivalent_decision_prints_its_equivalence_interval_in_the_reports_numbers():
    """The page-one table printed "equivalent at look 2" beside a repeated CI that reached past ±0.01: the
    decision now carries the interval it was read from, in the report's own number format."""
    spec = spec_mod.parse({**RAW, "seeds": {"min": 6, "max": 12, "step": 3}})  # equivalence from 6 seeds on
    cells = [c.id for c in sequential_looks.design.cells(spec)]
    ref = sequential_looks.reference_cell(spec)
    rng = np.random.default_rng(4)
    base = 0.6 + rng.normal(0, 0.01, 12)
    vals = {"test_accuracy": {c: dict(zip(spec.seed_list, (base + rng.normal(0, 0.003, 12)).tolist(), strict=True))
                              for c in cells}}
    st = sequential_looks.State(planned={c: 3 for c in cells})
    while not st.finished:
        sequential_looks.step(spec, st, vals)
    labels = {c.id: c.label for c in sequential_looks.design.cells(spec)}
    equivalent = [r for r in st.decided.values() if sequential_looks.outcome(r) == "equivalent"]
    assert equivalent, st.decided
    beside = seqrep.fixed_beside(_state(st), spec, {}, labels).set_index("cell")
    said = " ".join(seqrep.sentences(_state(st), spec, labels, labels[ref]))
    for r in equivalent:
        low = r["estimate"] - r["equivalence_bound"] * r["se"]
        words = beside.loc[labels[r["cell_id"]], "sequential decision (valid)"]
        assert words.startswith("equivalent at look") and "; its 96% equivalence interval [" in words, words
        assert words.endswith("lies within ±0.01") and f"{low:+.3f}".replace("-", "−") in words, words
        assert f"{low:+.3f}".replace("-", "−") in said
