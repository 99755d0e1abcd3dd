"""The sequential design as the reports print it (ablate.report.sequential): every number from
the study's recorded looks, decisions at the looks that made them."""

from __future__ import annotations

import math

import numpy as np

from ablate import spec as spec_mod
from ablate.report import sequential as seqrep
from ablate.runner import sequential

RAW = {
    "name": "seqreport",
    "task": {"name": "listops", "max_depth": 3, "max_args": 5, "min_length": 10, "max_length": 64,
             "train_size": 4000, "seed": 0},
    "model": {"family": "linear_rnn", "d_model": 32, "state_dim": 32, "layers": 2},
    "train": {"steps": 300, "batch_size": 32, "lr": 3.0e-3, "eval_every": 50},
    "factors": {"model.heads": [4, 1, 16]},
    "seeds": {"min": 3, "max": 9, "step": 2},
}


def run_looks():
    spec = spec_mod.parse(RAW)
    cells = [c.id for c in sequential.design.cells(spec)]
    ref = sequential.reference_cell(spec)
    rng = np.random.default_rng(1)
    big, null = [c for c in cells if c != ref]
    base = 0.6 + rng.normal(0, 0.01, 9)
    values = {ref: base + rng.normal(0, 0.002, 9), big: base + 0.05 + rng.normal(0, 0.002, 9),
              null: base + rng.normal(0, 0.05, 9)}
    vals = {"test_accuracy": {c: dict(zip(spec.seed_list, v.tolist(), strict=True)) for c, v in values.items()}}
    st = sequential.State(planned={c: 3 for c in cells})
    while not st.finished:
        sequential.step(spec, st, vals)
    return spec, st, big, null, ref


def test_the_tables_print_the_recorded_decisions():
    spec, st, big, null, ref = run_looks()
    state = {"look": st.look, "planned": st.planned, "decided": st.decided, "history": st.history,
             "finished": st.finished}
    labels = {c.id: c.label for c in sequential.design.cells(spec)}
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
