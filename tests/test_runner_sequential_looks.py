"""A sequential study end to end (ablate.runner.sequential_looks): seeds added look by look by real
workers, every planned seed run exactly once, also when a process is killed at a look."""

from __future__ import annotations

import re
import signal
from collections import Counter

import processes as procs
import pytest

SEQUENTIAL = {"min": 3, "max": 7, "step": 2, "measures": ["test_accuracy", "norm.training"]}
FACTORS = {"model.normalisation": ["xi", "gamma"]}


def state(root):
    from ablate.runner import sequential_looks
    from ablate.runner.study import open_study
    from ablate.stores import Stores

    home = root / ".ablate"
    stores = Stores(f"sqlite:///{home / 'optuna.db'}", f"sqlite:///{home / 'mlflow.db'}", (home / "a").as_uri())
    return sequential_looks.load_state(open_study("faults", stores, read_only=True))



def check(root) -> None:
    """Every planned seed of every cell ran exactly once, the looks are in the state, nothing else ran."""
    states = procs.assert_consistent(root)
    st = state(root)
    assert st is not None and st.finished
    assert set(states.values()) == {"done"}
    per_cell = Counter(key.split("/")[0] for key in states)
    assert dict(per_cell) == {cell: n for cell, n in st.planned.items()}, (per_cell, st.planned)
    assert [len(rows) for rows in st.history] and all(r["seeds"] in (3, 5, 7) for rows in st.history for r in rows)
    decided = {r["key"]: r["decision"] for r in st.decided.values()}
    assert len(decided) == 2 and set(decided.values()) <= {"significant", "equivalent", "futile"}


@pytest.mark.slow
def test_kill9_at_a_look_then_two_workers_add_seeds_look_by_look_each_once(tmp_path):
    """kill -9 right after the first look was analysed and its state written, before its next seeds
    were queued; then two workers: the next run queues them (once) and adds seeds look by look, and
    the design finishes as an uninterrupted one would. One study for the whole path (CI time)."""
    procs.write_spec(tmp_path, seeds=SEQUENTIAL, factors=FACTORS)
    proc = procs.spawn(tmp_path, "run", "spec.yaml", ABLATE_FAULT="kill@look")
    proc.communicate(timeout=600)
    assert proc.returncode == -signal.SIGKILL
    st = state(tmp_path)
    assert st is not None and len(st.history) == 1  # the first look was analysed, then the kill
    res = procs.ablate(tmp_path, "run", "spec.yaml", "--workers", "2")
    assert res.returncode == 0, res.stderr
    check(tmp_path)
    # A look that added seeds says which look they are for (and, seen before the next look, that the ETA is to its end).
    assert "open comparisons decided; seeds added for look 3 of 3" in res.stdout, res.stdout
    # The live view counts the seeds the looks added: its totals end at the final plan's.
    counts = [(int(a), int(b)) for a, b in re.findall(r"(\d+)/(\d+) done", res.stdout)]
    planned = sum(state(tmp_path).planned.values())
    assert counts and counts[-1][1] == planned and all(a <= b for a, b in counts), (counts[-3:], planned)
    logs = {p: p.stat().st_size for p in (tmp_path / ".ablate" / "logs").glob("*.log")}
    again = procs.ablate(tmp_path, "run", "spec.yaml", "--workers", "2")  # resuming a finished design runs nothing
    assert again.returncode == 0 and "0 to run" in again.stdout, again.stdout
    # ... and starts no worker to find that out (a worker appends to its log when it starts)
    assert {p: p.stat().st_size for p in (tmp_path / ".ablate" / "logs").glob("*.log")} == logs
    status = procs.ablate(tmp_path, "status", "faults")
    assert "look" in status.stdout, status.stdout
    # The reports print the design and the decisions, and no fixed-design p-value.
    out = tmp_path / "reports"
    rep = procs.ablate(tmp_path, "report", "faults", "--out", str(out), "--format", "html")
    assert rep.returncode == 0, rep.stderr
    st = state(tmp_path)
    for name in ("accuracy", "norm_stability"):
        page = (out / f"{name}.html").read_text()
        assert "Sequential seeds" in page and "stage-wise p" in page and "repeated CI" in page, name
        assert ">p (Holm)<" not in page and ">p<" not in page, f"{name}: a fixed-design p after a sequential stop"
        for r in st.decided.values():  # every decision is in the table, at the look that made it
            assert f"{r['look']} ({r['seeds']})" in page and r["decision"] in page, name


@pytest.mark.slow
def test_kill9_at_a_look_on_postgresql_with_a_tracking_server(tmp_path, postgres_db, mlflow_server):
    """The same kill on PostgreSQL and a real MLflow server (the norm measure is read from its
    artifacts): the look's seeds are queued once, every planned seed runs once."""
    import uuid

    import optuna

    from ablate.runner import sequential_looks

    name = f"seq-{uuid.uuid4().hex[:8]}"
    procs.write_spec(tmp_path, name=name, seeds=SEQUENTIAL, factors=FACTORS)
    stores = ("--storage", postgres_db, "--tracking-uri", mlflow_server)
    proc = procs.spawn(tmp_path, "run", "spec.yaml", *stores, ABLATE_FAULT="kill@look")
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == -signal.SIGKILL, err
    st = sequential_looks.load_state(optuna.load_study(study_name=name, storage=postgres_db))
    assert st is not None and len(st.history) == 1
    res = procs.ablate(tmp_path, "run", "spec.yaml", "--workers", "2", *stores)
    assert res.returncode == 0, res.stderr
    study = optuna.load_study(study_name=name, storage=postgres_db)
    st = sequential_looks.load_state(study)
    assert st is not None and st.finished and len(st.decided) == 2
    trials = study.get_trials(deepcopy=False)
    assert not [t for t in trials if t.state == optuna.trial.TrialState.RUNNING]
    done = Counter(t.user_attrs["item"] for t in trials if t.state == optuna.trial.TrialState.COMPLETE)
    assert set(done.values()) == {1}, done  # no seed ran twice
    assert dict(Counter(key.split("/")[0] for key in done)) == st.planned  # and none is missing


def test_looks_read_the_norm_measures_without_the_runs_the_report_leaves_out():
    """A run flagged for late growth has finite per-run values in per_seed, but the fixed-design
    report leaves it out (norms.primary): the sequential looks must leave it out too."""
    import numpy as np
    import pandas as pd

    from ablate.runner.sequential_looks import per_run_values
    from ablate.stats import norms

    rng = np.random.default_rng(3)
    steps = np.arange(9)
    rows = []
    for cell in ("ref", "a"):
        for seed in range(5):
            for layer in range(2):
                logs = 0.3 * steps / 8 + rng.normal(0, 0.05, len(steps)) + rng.normal(0, 0.2)
                if (cell, seed) == ("a", 2):  # grows 10⁴× over the second half, finite throughout
                    logs = logs + np.log(1e4) * np.clip((steps - 4) / 4, 0, 1)
                rows += [{"cell_id": cell, "cell_label": cell, "seed": seed, "layer": layer, "step": 100 * int(k),
                          "value": float(np.exp(v))} for k, v in zip(steps, logs, strict=True)]
    ps = norms.per_seed(pd.DataFrame(rows))
    late = ps[(ps["cell_id"] == "a") & (ps["seed"] == 2)]
    assert late["flag"].iloc[0].startswith("late"), ps[["cell_id", "seed", "flag"]]
    for measure in ("training", "final", "seeds"):
        col = norms.COLUMN[measure]
        assert np.isfinite(late[col].iloc[0]) or measure == "seeds"
        got = per_run_values(ps, measure)
        assert 2 not in got["a"], (measure, got)
        assert set(got["ref"]) == set(range(5)) and set(got["a"]) == {0, 1, 3, 4}, (measure, got)


def test_the_state_lines_price_the_seeds_left_in_minutes_and_seconds():
    """`ablate status` priced 6 seed items at 2 s each as "about 0 min of one worker's time"."""
    from cell_store import spec as cell_spec

    from ablate import design
    from ablate.runner import sequential_looks

    spec = cell_spec("seq", seeds={"min": 3, "max": 6, "step": 3, "measures": ["test_accuracy"]})
    st = sequential_looks.State(planned={c.id: 3 for c in design.cells(spec)})
    said = sequential_looks.lines(spec, st, seconds_per_item=2.0)
    assert "pending seeds: at most 6 more seed items to the last look, about 0m12s of one worker's time" in said, said
    assert "open: 1 comparison, cell LRU (and the reference RotRNN)" in said, said
    st.look, st.planned = 1, {c: 6 for c in st.planned}  # at the last look: "at most 0 more seed items" before
    assert "pending seeds: none beyond this look's, the last" in sequential_looks.lines(spec, st, 2.0)


def test_a_look_on_runs_that_never_learned_says_so_in_the_terminal():
    """Two cells at chance read "equivalent: … +0.001 [-0.004, +0.006]" at the look, in `ablate run`'s
    look lines and in `ablate status`, with no word that neither trained (page one said it; the
    terminal did not)."""
    from cell_store import spec as cell_spec

    from ablate import design
    from ablate.runner import sequential_looks
    from ablate.runner.launch import look_decisions

    spec = cell_spec("seq", seeds={"min": 6, "max": 12, "step": 6, "measures": ["test_accuracy"]})
    ids = [c.id for c in design.cells(spec)]
    ref = sequential_looks.reference_cell(spec)
    other = next(c for c in ids if c != ref)
    at_chance = [0.101, 0.099, 0.1, 0.102, 0.1, 0.131]  # 5 of 6 at or below 0.1 + 0.02
    values = {"test_accuracy": {ref: dict(enumerate(at_chance)), other: dict(enumerate(v + d for v, d in zip(
        at_chance, [0.001, -0.001, 0.002, 0.0, 0.001, -0.002], strict=True)))}}
    st = sequential_looks.State(planned={c: 6 for c in ids})
    decided = sequential_looks.step(spec, st, values, chance=0.1)
    assert [r["decision"] for r in decided] == ["equivalent"], decided
    assert decided[0]["never_learned"] == {"chance": 0.1, "margin": 0.02, "cell": [5, 6], "reference": [5, 6]}
    said = "; its 5 of 6 and the reference's 5 of 6 runs never learned (test_accuracy ≤ chance 0.1 + 0.02)"
    printed = look_decisions(spec, st)
    assert printed[1].startswith("  equivalent: ") and printed[1].endswith(said), printed
    assert any(line.endswith(said) for line in sequential_looks.lines(spec, st)), sequential_looks.lines(spec, st)

    # A norm measure's comparison on the same runs says it too, by their test accuracy (page one did;
    # the terminal said it of accuracy rows only).
    norm_spec = cell_spec("seq", seeds={"min": 6, "max": 12, "step": 6, "measures": ["norm.final"]})
    st = sequential_looks.State(planned={c: 6 for c in ids})
    logs = {"norm.final": {c: {s: 0.1 * s + (0.01 * (s % 3) if c == other else 0.0) for s in range(6)} for c in ids}}
    sequential_looks.step(norm_spec, st, logs, chance=0.1, accuracy=values["test_accuracy"])
    assert st.history[0][0]["never_learned"]["cell"] == [5, 6]
    assert sequential_looks.untrained_words(st.history[0][0]) == said

    # Trained runs, or no chance known (a task that logs none): the line is as before.
    for chance, shift in ((0.1, 0.5), (None, 0.0)):
        st = sequential_looks.State(planned={c: 6 for c in ids})
        trained = {m: {c: {s: v + shift for s, v in by.items()} for c, by in cells.items()} for m, cells in values.items()}
        (row,) = sequential_looks.step(spec, st, trained, chance=chance)
        assert sequential_looks.untrained_words(row) == "", row
        assert "never learned" not in "\n".join(look_decisions(spec, st))


def test_the_never_learned_margin_is_the_accuracy_reports():
    """The terminal's rule and the report's are one number: the report's declared `margin`."""
    from ablate import stats
    from ablate.report.never_learned import default_margin

    assert default_margin() == stats.NEVER_LEARNED_MARGIN


def test_an_equivalent_look_says_the_interval_equivalence_was_tested_with():
    """The repeated CI is at the efficacy boundary, equivalence at its own: at look 1 of (6, 12) a
    comparison was "equivalent" beside a repeated CI reaching past ±0.01, and at the last look one
    was "undecided" beside a repeated CI inside ±0.01 — the line must say what decided it."""
    from cell_store import spec as cell_spec

    from ablate import design
    from ablate.runner import sequential_looks
    from ablate.runner.launch import look_decisions

    spec = cell_spec("seq", seeds={"min": 6, "max": 12, "step": 6, "measures": ["test_accuracy"]})
    ids = [c.id for c in design.cells(spec)]
    ref = sequential_looks.reference_cell(spec)
    other = next(c for c in ids if c != ref)
    base = [0.81, 0.79, 0.8, 0.82, 0.78, 0.8, 0.81, 0.79, 0.8, 0.82, 0.78, 0.8]

    def look(diffs):
        values = {"test_accuracy": {ref: dict(enumerate(base)), other: {s: base[s] + d for s, d in enumerate(diffs)}}}
        st = sequential_looks.State(planned={c: len(diffs) for c in ids}, look=0 if len(diffs) == 6 else 1)
        sequential_looks.step(spec, st, values)
        return st, st.history[-1][0]

    st, row = look([0.003 + d for d in (0.005, -0.005, 0.004, -0.004, 0.003, -0.003)])
    assert sequential_looks.outcome(row) == "equivalent" and row["rci_high"] > 0.01, row  # the CI alone: not within
    words = sequential_looks.equivalence_words(row, spec)
    low, high = (float(x) for x in re.search(r"interval \[(\S+), (\S+)\] lies within ±0.01$", words).groups())
    assert -0.01 < low < high < 0.01 and words.startswith("; its 96% equivalence interval"), words
    assert look_decisions(spec, st)[1].endswith(words)

    st, row = look([-0.0035 + d for d in (0.012, -0.012, 0.008, -0.008, 0.004, -0.004) * 2])
    assert sequential_looks.outcome(row) == "undecided" and -0.01 < row["rci_low"] < row["rci_high"] < 0.01, row
    assert "reaches past ±0.01" in sequential_looks.equivalence_words(row, spec)
    assert any("reaches past ±0.01" in line for line in sequential_looks.lines(spec, st))
    st, row = look([0.02 + d for d in (0.006, -0.006, 0.004, -0.004, 0.002, -0.002) * 2])  # CI outside: nothing to add
    assert sequential_looks.equivalence_words(row, spec) == ""


def test_plan_says_when_no_comparison_can_end_equivalent():
    """Equivalence waits for 6 seeds (stats.rules.EQUIVALENCE_MIN_SEEDS): a design whose max is 5 can
    only end a comparison significant, futile or undecided, and `ablate plan` says so before it runs."""
    from cell_store import spec as cell_spec

    from ablate import design
    from ablate.runner import sequential_looks

    short = cell_spec("seq", seeds={"min": 3, "max": 5, "step": 2, "measures": ["test_accuracy"]})
    st = sequential_looks.State(planned={c.id: 3 for c in design.cells(short)})
    note = "note: no comparison can end equivalent: equivalence is declared from 6 seeds on, and seeds.max is 5"
    assert note in sequential_looks.lines(short, st)
    enough = cell_spec("seq", seeds={"min": 3, "max": 6, "step": 3, "measures": ["test_accuracy"]})
    assert not any(line.startswith("note: no comparison") for line in sequential_looks.lines(enough, None))
