"""The live view and the snapshot it draws (ablate.runner.progress), on a real SQLite queue with a
hand-driven worker: workers shown from their start, running items with step/total and their last
validation accuracy, an ETA once anything is measured, one line per event when not a terminal."""

from __future__ import annotations

import copy
import io
from pathlib import Path

import pytest
from optuna.trial import TrialState
from rich.console import Console
from support import RAW, stores

from ablate import design
from ablate.runner import phases, progress, queue
from ablate.runner import study as st


@pytest.fixture
def tmp_path(shm_tmp_path: Path) -> Path:
    return shm_tmp_path


@pytest.fixture
def study(tmp_path):
    raw = copy.deepcopy(RAW)
    del raw["tune"]
    spec = design.validate(raw)  # 2 cells × 2 seeds, 5 steps each
    opt, _ = st.prepare(spec, design.items(spec), stores(tmp_path))
    return opt


def finish(opt, trial):
    queue.finish(opt, trial, TrialState.COMPLETE, {"status": "complete", "val_accuracy": 0.5,
                                                   "test_accuracy": 0.25, "steps": 5}, 0.5)


def test_terminal_view_shows_workers_from_their_start(study):
    screen = io.StringIO()
    console = Console(file=screen, force_terminal=True, width=160)
    alive = {"host:1": None, "host:2": None}
    view = progress.View(study, console, [(w, lambda w=w: alive[w]) for w in alive])
    with view:
        view.poll()
        first = screen.getvalue()
        assert "host:1" in first and "host:2" in first and first.count("(starting)") == 2
        assert "ETA ?" in first  # nothing measured yet
        trial = phases.claim(study)
        queue.beat(study, trial.number, {"worker": "host:1", "step": 2,
                                         "last_val": {"accuracy": 0.5, "loss": 1.0, "step": 2}})
        snap = view.poll()
        assert [(r.worker, r.step, r.steps) for r in snap.items] == [("host:1", 2, 5)]
        text = screen.getvalue()
        assert "2/5" in text and "0.500 @2" in text
        finish(study, trial)
        alive["host:2"] = 0  # a worker exits
        snap = view.poll()
        assert snap.done == 1 and snap.seconds_per_step is not None and snap.eta_seconds(1) is not None
    text = screen.getvalue()
    assert "done RotRNN · seed 0: val acc 0.500 · test acc 0.250" in text and "(exited 0)" in text
    assert "(idle)" in text  # host:1 finished its item and has not claimed another


def test_view_in_a_pipe_is_one_line_per_event(study):
    log = io.StringIO()
    console = Console(file=log, force_terminal=False, width=80)
    view = progress.View(study, console, [("host:1", lambda: None)])
    long_cell = "x" * 200
    with view:
        trial = phases.claim(study)
        study_trial = queue.trial(study, trial.number)
        assert study_trial.user_attrs["cell_label"] == "RotRNN"
        trial.set_user_attr("cell_label", long_cell)  # a label wider than any terminal
        queue.beat(study, trial.number, {"worker": "host:1", "step": 1})
        view.poll()
        finish(study, trial)
        failing = phases.claim(study)
        queue.finish(study, failing, TrialState.FAIL, {"status": "failed", "failure_kind": "error",
                                                       "failure_message": "RuntimeError:\n  boom"})
        view.poll()
    lines = log.getvalue().splitlines()
    assert log.getvalue().endswith("\n")
    assert lines[0] == f"start {long_cell} · seed 0 (replicate, trial {trial.number}) on host:1"
    assert lines[1].startswith(f"done {long_cell} · seed 0: val acc 0.500 · test acc 0.250 · ")
    assert lines[2] == "error RotRNN · seed 1: RuntimeError: boom"
    assert lines[-1].startswith(f"{study.study_name}: 1 done · 0 running · 2 waiting · 1 failed · ETA ")
    assert all("\x1b[" not in line for line in lines)


def test_eta_from_measured_seconds_per_step():
    snap = progress.Snapshot(done=2, failed=0, running=1, waiting=3, new=0, seconds_per_step=0.5,
                             items=[progress.Running("w", "c", 0, "replicate", 40, 100, None)], mean_steps=100)
    # 60 steps left running + 3 × 100 waiting, at 0.5 s a step, on 2 workers; never below the running remainder.
    assert snap.eta_seconds(2) == pytest.approx((60 + 300) * 0.5 / 2)
    assert snap.eta_seconds(100) == pytest.approx(60 * 0.5)
    assert progress.Snapshot(1, 0, 0, 0, 0, None).eta_seconds(1) == 0.0


def test_eta_prices_each_cell_at_its_own_rate():
    """A sequential tanh cell at 1 s a step beside linear ones at 0.25 s: the study's median rate
    alone would put the ETA at half of what is left."""
    snap = progress.Snapshot(done=2, failed=0, running=1, waiting=2, new=1, seconds_per_step=0.25,
                             items=[progress.Running("w", "tanh", 0, "replicate", 50, 100, None, cell_id="slow")],
                             mean_steps=100, cell_rates={"slow": 1.0, "fast": 0.25}, waiting_cells=["slow", "fast"])
    # running 50 × 1.0, waiting 100 × 1.0 and 100 × 0.25, new (no trial, no cell) 100 × the study's 0.25
    assert snap.eta_seconds(2) == pytest.approx((50 + 100 + 25 + 25) / 2)
    assert snap.eta_seconds(2) > progress.Snapshot(2, 0, 1, 2, 1, 0.25, snap.items, 100).eta_seconds(2)


def test_snapshot_measures_each_cell_and_knows_the_cells_still_waiting(study):
    trial = phases.claim(study)
    cell = queue.trial(study, trial.number).user_attrs["cell_id"]
    queue.beat(study, trial.number, {"worker": "host:1", "step": 2})
    snap = progress.snapshot(study)
    assert [r.cell_id for r in snap.items] == [cell] and cell in snap.cell_rates  # its own pace while running
    finish(study, trial)
    snap = progress.snapshot(study)
    cells = {t.user_attrs["cell_id"] for t in queue.trials(study, states=(TrialState.WAITING,))}
    assert len(cells) == 2 and set(snap.cell_rates) == {cell}
    assert len(snap.waiting_cells) == snap.waiting == 3 and set(snap.waiting_cells) == cells


def test_snapshot_over_the_specs_items_leaves_orphaned_trials_out(study):
    """After a spec changed, the old version's finished trials stay in the study (orphans) until
    kept or dropped: the run's view counts the current spec's items, not 45 of 88 done for 1 of 44."""
    items = design.items(design.validate(study.user_attrs["spec"], "study"))
    trial = phases.claim(study)
    finish(study, trial)
    key = queue.trial(study, trial.number).user_attrs["item"]
    assert (progress.snapshot(study, items).done, progress.snapshot(study, items).total) == (1, 4)
    rest = [i for i in items if i.key != key]  # a spec without that item: its trial is an orphan
    snap = progress.snapshot(study, rest)
    assert (snap.done, snap.waiting, snap.total) == (0, 3, 3) and len(snap.waiting_cells) == 3
