"""``ablate plan`` (ablate.planning): done / partial / new per cell, the estimate, invalid specs."""

from __future__ import annotations

import copy
import io
from pathlib import Path

import pytest
import yaml
from rich.console import Console
from support import RAW, finish
from typer.testing import CliRunner

from ablate import design, planning
from ablate.cli import app
from ablate.runner import phases
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


def test_estimate_scales_measured_timings_by_each_pending_trial(monkeypatch):
    raw = copy.deepcopy(RAW)
    del raw["tune"]
    s = design.validate(raw)
    plan = planning.build(s, storage="sqlite:////nonexistent/optuna.db")
    timing = planning.ShapeTiming(setup=0.5, step=0.01, val=0.2, test=0.1, probe=0.05, grads=0.02, first_use=3.0)
    calls = []
    monkeypatch.setattr(planning, "measure", lambda config, probes, device, steps: calls.append(device) or timing)
    monkeypatch.setattr(planning.os, "cpu_count", lambda: 2)
    overheads = planning.Overheads(queue=1.5, imports=4.0, trial=0.25)
    est = planning.estimate(plan, "cuda:0", overheads=overheads)
    assert calls == ["cuda:0", "cuda:0"] and est.shapes == 2 and est.trials == 4  # one dry run per model shape
    # 5 steps, eval every 50: 0 periodic evals, one convergence pass (step 4, the last fifth's
    # boundary) + final val + test; probes at 0 and the end (+ every 100: 0); gradient rows at the last step.
    per_trial = 0.5 + 5 * 0.01 + 2 * 0.2 + 0.1 + 2 * 0.05 + 1 * 0.02 + 0.25
    start = planning.CLI_START_S + 1.5 + 4.0 + 3.0
    assert est.trial_seconds == pytest.approx(4 * per_trial) and est.start_seconds == pytest.approx(start)
    assert est.seconds == pytest.approx(4 * per_trial + start)
    two = planning.estimate(plan, "cuda:0", workers=2, overheads=overheads)  # 2 trials each, imports at once
    assert two.seconds == pytest.approx(2 * per_trial + start)
    four = planning.estimate(plan, "cuda:0", workers=4, overheads=overheads)  # 4 importing on 2 cores
    assert four.seconds == pytest.approx(per_trial + start + 4.0)


def test_schedule_holds_replicates_until_their_cells_tuning_is_done():
    s = design.validate(RAW)  # 2 cells × (4 tuning trials + 2 replicates)
    items = design.items(s)
    seconds = [1.0] * len(items)
    assert planning.schedule(items, seconds, 1) == pytest.approx(len(items))
    # 2 workers: 8 tuning trials in 4 s, then 4 replicates in 2 s — no replicate before its cell's tuning.
    assert planning.schedule(items, seconds, 2) == pytest.approx(6.0)
    # 4 workers, a 5-s first tuning trial of the first cell: the other tuning is done by 3, the second
    # cell's replicates run 3–4, the first cell's wait for its slow trial (5–6); without the rule, 2–3.
    slow = [5.0 if (i.phase == "tune" and i.index == 0 and i.cell is items[0].cell) else 1.0 for i in items]
    assert planning.schedule(items, slow, 4) == pytest.approx(6.0)
    ungated = [design.Item(i.cell, i.seed, i.phase, i.index, None) for i in items]  # as if untuned
    assert planning.schedule(ungated, slow, 4) == pytest.approx(5.0)


def test_schedule_queues_an_extension_when_the_run_it_extends_ends():
    raw = copy.deepcopy(RAW)
    del raw["tune"]
    items = design.items(design.validate(raw))  # 2 cells × 2 seeds
    # Item 0 is extended (2 s), and that extension again (3 s): each claimable only once the run
    # before it ends, behind what is queued by then.
    runs = items + [items[0], items[0]]
    seconds = [1.0] * 4 + [2.0, 3.0]
    follows = [None] * 4 + [0, 4]
    # 2 workers: items 0, 1 at 0–1; items 2, 3 at 1–2 (queued before the extension, which is due at
    # 1); the extension 2–4; its extension 4–7, the other worker idle from 2 while it waits.
    assert planning.schedule(runs, seconds, 2, follows) == pytest.approx(7.0)
    assert planning.schedule(items, [1.0] * 4, 2) == pytest.approx(2.0)
    with pytest.raises(ValueError, match="never runs"):
        planning.schedule(items[:1] + [items[0]], [1.0, 1.0], 1, [None, 5])


def test_estimate_prices_the_extensions_a_study_until_converged_may_still_make(monkeypatch):
    raw = copy.deepcopy(RAW)
    del raw["tune"]
    raw["train"] = {"steps": 24, "schedule": "wsd", "warmup_steps": 2, "decay_steps": 3,
                    "until_converged": {"max_steps": 60, "extend_by": 24}}
    s = design.validate(raw)
    plan = planning.build(s, storage="sqlite:////nonexistent/optuna.db")
    # Each of the 4 replicates may go 24 → 48 (from the 24-step run's stable end, 21) → 60 (from 45).
    extensions, replaced = planning.extension_runs(plan)
    assert replaced == set() and len(extensions) == 8
    assert [(c["train"]["steps"], c["train"]["warmup_steps"], step) for i, c, step in extensions
            if i.key == plan.items[0].key] == [(48, 2, 21), (60, 2, 45)]
    timing = planning.ShapeTiming(setup=0.5, step=0.01, val=0.2, test=0.1, probe=0.05, grads=0.02, first_use=3.0)
    monkeypatch.setattr(planning, "measure", lambda config, probes, device, steps: timing)
    overheads = planning.Overheads(queue=1.5, imports=4.0, trial=0.25)
    one = planning.estimate(plan, overheads=overheads)
    assert one.trials == 4 and one.extension_runs == 8 and one.extension_steps == 4 * ((48 - 21) + (60 - 45))
    # One worker runs everything in turn: the extensions add their own time, and no more.
    assert one.extension_seconds == pytest.approx(one.extension_trial_seconds) and one.extension_seconds > 0
    per = [planning.trial_seconds(c, s.probes, timing, 0.25, (c["train"]["steps"] - step) / c["train"]["steps"])
           for _, c, step in extensions]
    assert one.extension_trial_seconds == pytest.approx(sum(per))
    four = planning.estimate(plan, workers=4, overheads=overheads)  # one item's chain per worker
    assert four.extension_seconds == pytest.approx(per[0] + per[1])
    out = io.StringIO()
    planning.render_estimate(four, Console(file=out, width=200))
    assert "extensions (until converged): at most 8 more runs, 168 steps to train" in out.getvalue()
    # Without until_converged nothing is priced beyond the declared runs.
    del raw["train"]["until_converged"]
    plain = planning.estimate(planning.build(design.validate(raw), storage="sqlite:////nonexistent/optuna.db"),
                              overheads=overheads)
    assert plain.extension_runs == 0 and plain.extension_seconds == 0 and plain.seconds == pytest.approx(one.seconds)


@pytest.mark.slow  # imports torch and builds a model: seconds, not milliseconds
def test_measure_runs_a_tiny_model_for_real(tmp_path, monkeypatch):
    monkeypatch.setenv("ABLATE_CACHE_DIR", str(tmp_path))
    s = design.validate({**RAW, "tune": None, "factors": {},
                         "task": {"name": "listops", "max_depth": 3, "min_length": 5, "max_length": 24,
                                  "train_size": 64, "val_size": 32, "test_size": 32},
                         "model": {"d_model": 8, "state_dim": 4, "layers": 1}, "train": {"steps": 3},
                         "probes": {"batch": 8}})
    t = planning.measure(s.baseline(), s.probes, steps=2)
    assert all(v > 0 for v in (t.setup, t.step, t.val, t.test, t.probe, t.grads)) and t.probe_rows > 0
    o = planning.measure_overheads(s, design.items(s), s.baseline(), t.probe_rows)
    assert o.queue > 0 and o.imports > 0 and o.trial > 0


@pytest.mark.slow  # imports torch and MLflow, and times a worker's imports in a fresh process
def test_measured_bookkeeping_is_the_workers_own_path(tmp_path, monkeypatch):
    """The trial cycle ``measure_overheads`` times is ``runner.worker.run_item``'s, with a stand-in
    for training: the worker's record runs for each trial it claims, and what it leaves in the
    stores is what only the worker writes (start and result attributes, the run ended committed)."""
    import optuna
    from mlflow.tracking import MlflowClient

    from ablate.runner import worker

    monkeypatch.delenv("ABLATE_CHECKPOINT_DIR", raising=False)
    recorded = []
    record = worker._record

    def spy(*args, **kwargs):
        recorded.append(args[1].number)
        return record(*args, **kwargs)

    monkeypatch.setattr(worker, "_record", spy)
    s = design.validate({**RAW, "tune": None, "factors": {}, "seeds": 3})
    folder = tmp_path / "estimate"
    o = planning.measure_overheads(s, design.items(s), s.baseline(), probe_rows=4, folder=folder)
    assert o.trial > 0 and recorded == [0, 1]  # two trials, each recorded by the worker
    trials = optuna.load_study(study_name=None, storage=f"sqlite:///{folder / 'optuna.db'}").get_trials()
    done = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert [t.number for t in done] == [0, 1]
    for t in done:
        a = t.user_attrs
        assert a["worker"] == worker.WORKER_ID and a["provenance"]["ablate.device"].startswith("cpu")
        assert a["status"] == "complete" and a["steps_trained"] == a["steps"] == 5 and a["seconds"] >= 0
        assert a["converged"] is True and a["mlflow_run_id"] and t.value == 0.5
    client = MlflowClient(f"sqlite:///{folder / 'mlflow.db'}")
    runs = {r.info.run_id: r for r in client.search_runs([e.experiment_id for e in client.search_experiments()],
                                                           "tags.`ablate.role` = 'trial'")}
    assert set(runs) == {t.user_attrs["mlflow_run_id"] for t in done}
    for r in runs.values():
        assert r.info.status == "FINISHED" and r.data.tags["ablate.committed"] == "true"
        assert r.data.tags["ablate.worker"] == worker.WORKER_ID and r.data.metrics["final/val_accuracy"] == 0.5
    assert "ABLATE_CHECKPOINT_DIR" not in __import__("os").environ  # the worker's checkpoints went to the folder


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
