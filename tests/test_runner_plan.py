"""``ablate plan`` (ablate.runner.plan): done / partial / new per cell, the rows and the summary line,
invalid specs."""

from __future__ import annotations

import copy
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from rich.console import Console
from support import RAW, finish
from typer.testing import CliRunner

from ablate import design
from ablate.cli import app
from ablate.runner import phases
from ablate.runner import plan as planning
from ablate.runner import study as st
from ablate.stores import Stores


@pytest.fixture
def tmp_path(shm_tmp_path: Path) -> Path:
    return shm_tmp_path


def test_plan_marks_cells_done_partial_new_and_creates_no_store(tmp_path, monkeypatch):
    monkeypatch.setenv("ABLATE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("ABLATE_STORAGE", raising=False)
    raw = copy.deepcopy(RAW)
    del raw["tune"]
    raw["factors"]["model.layers"] = [1, 2]
    s = design.validate(raw)
    plan = planning.build(s)
    assert {c.status for c in plan.cells} == {"new"} and "no results stored yet" in plan.note
    assert not (tmp_path / "home").exists()  # reading progress created nothing
    where = Stores(f"sqlite:///{tmp_path / 'home' / 'optuna.db'}", "", None)
    (tmp_path / "home").mkdir()
    study, _ = st.prepare(s, design.items(s), where)
    # Finish both seeds of the first cell and one seed of the second.
    cells = design.cells(s)
    for _ in range(3):
        trial = phases.claim(study)
        finish(study, trial, phases.prepare_item(study, trial))
    plan = planning.build(s)
    assert [c.status for c in plan.cells] == ["done", "partial", "new", "new"]
    assert [c.finished for c in plan.cells] == [2, 1, 0, 0]
    assert len(plan.pending()) == 5 and plan.cells[0].cell.id == cells[0].id
    # Through the command line, with the same store.
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw, allow_unicode=True))
    res = CliRunner().invoke(app, ["plan", str(path)])
    assert res.exit_code == 0, res.output
    lines = {line.split()[1]: line for line in res.output.splitlines() if line.startswith("│")}
    assert "done" in lines[cells[0].id] and "partial" in lines[cells[1].id] and "new" in lines[cells[3].id]
    assert "4 cells × 2 seeds = 8 trials" in res.output
    assert "done 3, failed 0, running 0, pending 5" in res.output


def test_a_plan_of_many_cells_prints_one_plain_line_per_cell(tmp_path, monkeypatch):
    monkeypatch.setenv("ABLATE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("ABLATE_STORAGE", raising=False)
    raw = copy.deepcopy(RAW)
    del raw["tune"]
    raw["seeds"] = 1
    raw["factors"] = {"train.lr": [round(1e-3 * (1 + i), 6) for i in range(planning.PLAIN_ROWS + 1)]}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw))
    res = CliRunner().invoke(app, ["plan", str(path)])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[:2] == ["tuned: plan (full)", "cell id       train.lr  trials  done  failed  running  pending  status"]
    rows = [line.split() for line in lines[2 : 2 + planning.PLAIN_ROWS + 1]]
    assert [r[0] for r in rows] == [c.id for c in design.cells(design.validate(raw))]
    assert all(r[2:] == ["1", "0", "0", "0", "1", "new"] for r in rows) and "│" not in res.output


def test_plan_loads_neither_torch_nor_mlflow_nor_scipy(tmp_path):
    """``ablate plan`` imports the estimate's module (and through it the worker) at the top: what
    they import at the top must stay light, or every plan pays torch's and MLflow's seconds."""
    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump(RAW))
    code = ("import sys\nfrom ablate.cli import app\ntry:\n    app(['plan', sys.argv[1]], standalone_mode=False)\n"
            "finally:\n    print(sorted(m for m in ('torch', 'mlflow', 'scipy') if m in sys.modules), file=sys.stderr)")
    env = {**os.environ, "ABLATE_HOME": str(tmp_path / "home")}
    env.pop("ABLATE_STORAGE", None)
    done = subprocess.run([sys.executable, "-c", code, str(spec)], capture_output=True, text=True, env=env, check=True)
    assert "cells" in done.stdout and done.stderr.strip().splitlines()[-1] == "[]", done.stderr


def test_invalid_specs_exit_2_and_write_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("ABLATE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("ABLATE_STORAGE", raising=False)
    for i, bad in enumerate(["not yaml: [", "name: x\ntask: {name: listops}\nmodel: {layers: 0}\n"]):
        path = tmp_path / f"bad{i}.yaml"
        path.write_text(bad)
        for command in ("validate", "plan", "run"):
            res = CliRunner().invoke(app, [command, str(path)])
            assert res.exit_code == 2 and isinstance(res.exception, SystemExit), res.output
            assert res.output.startswith("error") and "Traceback" not in res.output
    assert not (tmp_path / "home").exists()


def _row_numbers(text: str, headers: list[str]) -> dict[str, dict[str, int]]:
    """Cell id → the integer columns of a rendered rich table's rows."""
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip("│ ").split("│")]
        if len(cells) == len(headers) and cells[0] not in ("cell id", "cell"):
            rows[cells[0]] = {h: int(c) for h, c in zip(headers, cells, strict=True) if c.isdigit()}
    return rows


def test_plan_and_status_rows_agree_with_their_summaries(tmp_path):
    """On a study with done, failed, retried (waiting again), running, reused and reusable items,
    plan's rows sum to its summary line, status's rows to its summary, and the two agree."""
    import re

    from cell_store import finish_all, spec, where
    from optuna.trial import TrialState

    from ablate.runner import items as its
    from ablate.runner import locate, queue

    stores = where(tmp_path)
    source = spec("source", seeds=4)
    finish_all(st.prepare(source, design.items(source), stores).study)  # what "agree" can reuse
    two = spec("agree", seeds=3)
    study = st.prepare(two, design.items(two), stores, reuse=False).study

    def claim_and(outcome: str) -> None:
        trial = phases.claim(study)
        attrs = phases.prepare_item(study, trial)
        if outcome == "complete":
            finish(study, trial, attrs)
        elif outcome == "error":
            queue.finish(study, trial, TrialState.FAIL, {"status": "failed", "failure_kind": "error",
                                                         "failure_message": "a bug"})

    claim_and("error")
    assert len(its.retry_failed(study)) == 1  # new again, its failed attempt kept
    for outcome in ("complete", "error", "running"):
        claim_and(outcome)
    three = spec("agree", seeds=4)  # seed 3 of each cell (and the retried item): reusable from "source"
    for stage in ("before", "after"):
        if stage == "after":
            st.prepare(three, design.items(three), stores)  # links the reusable items, re-queues the retried
        plan = planning.build(three, stores.storage, stores.tracking)
        console = Console(file=io.StringIO(), width=250)
        planning.render(plan, console)
        text = console.file.getvalue()
        headers = ["cell id", "variant", "trials", *[t for t in planning.TALLIED if t != "reused" or plan.reused],
                   "status", *(["source"] if any(c.source for c in plan.cells) else [])]
        rows = _row_numbers(text, headers)
        assert len(rows) == 2, text
        (line,) = [line for line in text.splitlines() if line.startswith("done ")]
        summary = {name: int(n) for name, n in re.findall(r"(\w+) (\d+)", line)}
        for column in summary:
            assert summary[column] == sum(r[column] for r in rows.values()), (column, text)
        assert all(sum(r[c] for c in summary) == r["trials"] for r in rows.values()), text
        if stage == "before":
            assert (summary["reused"], summary["running"], summary["done"], summary["failed"]) == (3, 1, 1, 1), text
    found = locate.status("agree", stores.storage, stores.tracking)
    for cell in found.cells:
        assert sum(cell[s] for s in ("complete", "pruned", "running", "pending", "diverged", "failed", "killed")) \
            == cell["trials"]
    counts = found.counts()
    assert (counts["done"], counts["failed"], counts["running"], counts["waiting"]) == (
        summary["done"], summary["failed"], summary["running"], summary["pending"]), (counts, summary)
    assert f"{counts['done']} done · {counts['running']} running · {counts['waiting']} waiting · " \
           f"{counts['failed']} failed" in found.summary("?")


def test_the_summary_line_counts_one_cell_one_seed_one_trial_in_the_singular():
    raw = copy.deepcopy(RAW)
    del raw["tune"]
    raw["factors"] = {}
    one = design.validate({**raw, "seeds": 1})
    assert planning.summary_line(one, 1) == "1 cell × 1 seed = 1 trial"
    assert planning.summary_line(design.validate({**raw, "seeds": 2}), 3) == "3 cells × 2 seeds = 6 trials"
