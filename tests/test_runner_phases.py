"""Tune-then-replicate on the Optuna queue (ablate.runner.phases), resume and extension — with a fake
training function (no torch, no MLflow) so it runs in seconds."""

from __future__ import annotations

import copy
import sys
import types
from pathlib import Path

import pytest
from optuna.trial import TrialState
from support import RAW, finish, score, stores, tune_trials

from ablate import design
from ablate.runner import phases, queue
from ablate.runner import study as st
from ablate.stores import Stores


@pytest.fixture
def tmp_path(shm_tmp_path: Path) -> Path:
    return shm_tmp_path


def test_replicates_wait_for_their_cells_tuning_then_take_the_best(tmp_path):
    s = design.validate(RAW)
    items = design.items(s)
    study, queued = st.prepare(s, items, stores(tmp_path))
    assert queued == 2 * 4 + 2 * 2
    rot, lru = design.cells(s)
    # Claim every tuning item of both cells; finish RotRNN's, leave one of LRU's running.
    claimed = []
    for _ in range(8):
        trial = phases.claim(study)
        attrs = phases.prepare_item(study, trial)
        assert attrs["phase"] == "tune"
        claimed.append((trial, attrs))
    held = next((t, a) for t, a in claimed if a["cell_id"] == lru.id)
    for trial, attrs in claimed:
        if trial is not held[0]:
            finish(study, trial, attrs)
    # Only RotRNN's replicates are claimable now.
    r1 = phases.claim(study)
    r2 = phases.claim(study)
    assert {r1.user_attrs["cell_id"], r2.user_attrs["cell_id"]} == {rot.id}
    assert phases.claim(study) is None
    finish(study, held[0], held[1])
    r3 = phases.claim(study)
    assert r3.user_attrs["cell_id"] == lru.id and r3.user_attrs["phase"] == "replicate"
    # The replicate trains the best finished tuning setting of its cell.
    for trial in (r1, r3):
        attrs = phases.prepare_item(study, trial)
        tuned = [t for t in tune_trials(study, attrs["cell_id"]) if t.state == TrialState.COMPLETE]
        best = max(tuned, key=lambda t: (t.user_attrs["val_accuracy"], -t.user_attrs["index"]))
        assert attrs["params"] == best.user_attrs["params"]
        assert attrs["config"]["train"]["lr"] == best.user_attrs["params"]["train.lr"]
        assert attrs["tuned_from"].startswith(f"{attrs['cell_id']}/tune/{best.user_attrs['index']} (val_accuracy")
        assert queue.trial(study, trial.number).user_attrs["config"] == attrs["config"]


def test_sampled_settings_lie_in_the_space_and_are_stored(tmp_path):
    s = design.validate(RAW)
    study, _ = st.prepare(s, design.items(s), stores(tmp_path))
    seen = []
    for _ in range(4):
        trial = phases.claim(study)
        attrs = phases.prepare_item(study, trial)
        params = attrs["params"]
        assert set(params) == {"train.lr", "train.batch_size"}
        assert 1e-4 <= params["train.lr"] <= 1e-1 and params["train.batch_size"] in (8, 16)
        assert attrs["config"]["train"]["lr"] == params["train.lr"]
        stored = queue.trial(study, trial.number).user_attrs
        assert stored["params"] == params and stored["config"] == attrs["config"]
        seen.append(params["train.lr"])
        finish(study, trial, attrs)
    assert len(set(seen)) == 4


def test_a_retried_tuning_item_reruns_the_same_setting(tmp_path):
    s = design.validate(RAW)
    study, _ = st.prepare(s, design.items(s), stores(tmp_path))
    trial = phases.claim(study)
    first = phases.prepare_item(study, trial)
    # The worker dies; the stale-trial callback re-enqueues a copy with its user attributes.
    study.tell(trial, state=TrialState.FAIL)
    queue.requeue(study, trial.number, max_retry=2)
    while (again := phases.claim(study)).user_attrs["item"] != first["item"]:
        pass
    assert again.number != trial.number
    assert phases.prepare_item(study, again)["params"] == first["params"]


def run_fake_worker(monkeypatch, study_name: str, stores_: Stores) -> dict:
    """The real worker loop, with training and MLflow replaced by fakes."""
    from ablate.runner import worker

    fake = types.ModuleType("ablate.training")

    def run_trial(config, seed, probes, reporter=None, device="cpu", **options):
        return types.SimpleNamespace(status="complete", metrics={"val_accuracy": score(config), "test_accuracy": 0.5},
                                     steps=1, seconds=0.0, reason="")

    fake.run_trial = run_trial

    class Run:
        run_id = "fake"
        last_step = 0

        def __init__(self, *args, **kwargs):
            pass

        def finish(self, *args, **kwargs):
            pass

        def write(self, *args, **kwargs):  # the results, before the Optuna record
            pass

        def end(self, *args, **kwargs):  # after it
            pass

    monkeypatch.setitem(sys.modules, "ablate.training", fake)
    monkeypatch.setattr(worker.tracking, "TrialRun", Run)
    return worker.work(study_name, stores_)


def test_both_phases_resume_and_seeds_extend(tmp_path, monkeypatch):
    s = design.validate(RAW)
    where = stores(tmp_path)
    study, _ = st.prepare(s, design.items(s), where)
    assert run_fake_worker(monkeypatch, s.name, where) == {"complete": 12}
    assert st.Progress.of(study, design.items(s)).done == 12
    # Re-running queues nothing; more seeds queue only the new replicates, which reuse the best.
    _, queued = st.prepare(s, design.items(s), where)
    assert queued == 0
    raw = copy.deepcopy(RAW)
    raw["seeds"] = 3
    more = design.validate(raw)
    _, queued = st.prepare(more, design.items(more), where)
    assert queued == 2
    assert run_fake_worker(monkeypatch, s.name, where) == {"complete": 2}
    reps = [t for t in study.get_trials() if t.user_attrs["phase"] == "replicate"]
    for cell in design.cells(more):
        params = {repr(t.user_attrs["params"]) for t in reps if t.user_attrs["cell_id"] == cell.id}
        assert len(params) == 1  # every replicate seed of a cell trains the same tuned setting
