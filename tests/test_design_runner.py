"""Tune-then-replicate on the Optuna queue, resume and extension, and plan's done/partial/new —
with a fake training function (no torch, no MLflow) so it runs in seconds."""

from __future__ import annotations

import copy
import math
import os
import shutil
import sys
import tempfile
import types
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.trial import TrialState
from typer.testing import CliRunner

from ablate import design, planning, spec
from ablate.cli import app
from ablate.runner import phases
from ablate.runner import study as st
from ablate.stores import Stores

RAW = {
    "name": "tuned",
    "task": {"name": "listops", "max_length": 40, "train_size": 100, "val_size": 50, "test_size": 50},
    "model": {"d_model": 16, "state_dim": 8, "layers": 1, "heads": 1},
    "train": {"steps": 5},
    "factors": {"variant": {"RotRNN": {"model.parameterisation": "rotation", "model.normalisation": "xi"},
                            "LRU": {"model.parameterisation": "complex_diagonal", "model.normalisation": "gamma"}}},
    "seeds": 2,
    "tune": {"trials": 4, "space": {"train.lr": {"low": 1e-4, "high": 1e-1, "log": True},
                                    "train.batch_size": [8, 16]}},
}
BEST_LR = 10**-2.5


def score(config: dict) -> float:
    """A made-up objective: best at lr = 10^-2.5, better with batch 16, worse for LRU."""
    lr, batch = config["train"]["lr"], config["train"]["batch_size"]
    return -abs(math.log10(lr) - math.log10(BEST_LR)) + 0.1 * (batch == 16) - 0.01 * (
        config["model"]["parameterisation"] != "rotation")


@pytest.fixture
def tmp_path(tmp_path: Path):
    """A tmpfs directory where there is one: SQLite's syncs make Optuna several times slower on disk."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        yield tmp_path
        return
    path = Path(tempfile.mkdtemp(prefix="ablate-test-", dir=shm))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def stores(tmp_path: Path) -> Stores:
    return Stores(f"sqlite:///{tmp_path / 'optuna.db'}", f"sqlite:///{tmp_path / 'mlflow.db'}", None)


def finish(study: optuna.Study, trial: optuna.Trial, attrs: dict) -> None:
    value = score(attrs["config"])
    trial.set_user_attr("val_accuracy", value)
    trial.set_user_attr("status", "complete")
    study.tell(trial, value)


def tune_trials(study: optuna.Study, cell_id: str) -> list:
    return [t for t in study.get_trials() if t.user_attrs["cell_id"] == cell_id and t.user_attrs["phase"] == "tune"]


def test_replicates_wait_for_their_cells_tuning_then_take_the_best(tmp_path):
    s = spec.validate(RAW)
    items = design.items(s)
    study, queued = st.prepare(s, items, stores(tmp_path))
    assert queued == 2 * 4 + 2 * 2
    rot, lru = design.cells(s)
    # Claim every tuning item of both cells; finish RotRNN's, leave one of LRU's running.
    claimed = []
    for _ in range(8):
        trial = st.claim(study)
        attrs = phases.prepare_item(study, trial)
        assert attrs["phase"] == "tune"
        claimed.append((trial, attrs))
    held = next((t, a) for t, a in claimed if a["cell_id"] == lru.id)
    for trial, attrs in claimed:
        if trial is not held[0]:
            finish(study, trial, attrs)
    # Only RotRNN's replicates are claimable now.
    r1 = st.claim(study)
    r2 = st.claim(study)
    assert {r1.user_attrs["cell_id"], r2.user_attrs["cell_id"]} == {rot.id}
    assert st.claim(study) is None
    finish(study, held[0], held[1])
    r3 = st.claim(study)
    assert r3.user_attrs["cell_id"] == lru.id and r3.user_attrs["phase"] == "replicate"
    # The replicate trains the best finished tuning setting of its cell.
    for trial in (r1, r3):
        attrs = phases.prepare_item(study, trial)
        tuned = [t for t in tune_trials(study, attrs["cell_id"]) if t.state == TrialState.COMPLETE]
        best = max(tuned, key=lambda t: (t.user_attrs["val_accuracy"], -t.user_attrs["index"]))
        assert attrs["params"] == best.user_attrs["params"]
        assert attrs["config"]["train"]["lr"] == best.user_attrs["params"]["train.lr"]
        assert attrs["tuned_from"].startswith(f"{attrs['cell_id']}/tune/{best.user_attrs['index']} (val_accuracy")
        assert study._storage.get_trial(trial._trial_id).user_attrs["config"] == attrs["config"]


def test_sampled_settings_lie_in_the_space_and_are_stored(tmp_path):
    s = spec.validate(RAW)
    study, _ = st.prepare(s, design.items(s), stores(tmp_path))
    seen = []
    for _ in range(4):
        trial = st.claim(study)
        attrs = phases.prepare_item(study, trial)
        params = attrs["params"]
        assert set(params) == {"train.lr", "train.batch_size"}
        assert 1e-4 <= params["train.lr"] <= 1e-1 and params["train.batch_size"] in (8, 16)
        assert attrs["config"]["train"]["lr"] == params["train.lr"]
        stored = study._storage.get_trial(trial._trial_id).user_attrs
        assert stored["params"] == params and stored["config"] == attrs["config"]
        seen.append(params["train.lr"])
        finish(study, trial, attrs)
    assert len(set(seen)) == 4


def test_a_retried_tuning_item_reruns_the_same_setting(tmp_path):
    s = spec.validate(RAW)
    study, _ = st.prepare(s, design.items(s), stores(tmp_path))
    trial = st.claim(study)
    first = phases.prepare_item(study, trial)
    # The worker dies; the stale-trial callback re-enqueues a copy with its user attributes.
    study.tell(trial, state=TrialState.FAIL)
    optuna.storages.RetryFailedTrialCallback(max_retry=2)(study, study._storage.get_trial(trial._trial_id))
    while (again := st.claim(study)).user_attrs["item"] != first["item"]:
        pass
    assert again._trial_id != trial._trial_id
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

    monkeypatch.setitem(sys.modules, "ablate.training", fake)
    monkeypatch.setattr(worker.tracking, "TrialRun", Run)
    return worker.work(study_name, stores_)


def test_both_phases_resume_and_seeds_extend(tmp_path, monkeypatch):
    s = spec.validate(RAW)
    where = stores(tmp_path)
    study, _ = st.prepare(s, design.items(s), where)
    assert run_fake_worker(monkeypatch, s.name, where) == {"complete": 12}
    assert st.Progress.of(study, design.items(s)).done == 12
    # Re-running queues nothing; more seeds queue only the new replicates, which reuse the best.
    _, queued = st.prepare(s, design.items(s), where)
    assert queued == 0
    raw = copy.deepcopy(RAW)
    raw["seeds"] = 3
    more = spec.validate(raw)
    _, queued = st.prepare(more, design.items(more), where)
    assert queued == 2
    assert run_fake_worker(monkeypatch, s.name, where) == {"complete": 2}
    reps = [t for t in study.get_trials() if t.user_attrs["phase"] == "replicate"]
    for cell in design.cells(more):
        params = {repr(t.user_attrs["params"]) for t in reps if t.user_attrs["cell_id"] == cell.id}
        assert len(params) == 1  # every replicate seed of a cell trains the same tuned setting


def test_plan_marks_cells_done_partial_new_and_creates_no_store(tmp_path, monkeypatch):
    monkeypatch.setenv("ABLATE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("ABLATE_STORAGE", raising=False)
    raw = copy.deepcopy(RAW)
    del raw["tune"]
    raw["factors"]["model.layers"] = [1, 2]
    s = spec.validate(raw)
    plan = planning.build(s)
    assert {c.status for c in plan.cells} == {"new"} and "no results stored yet" in plan.note
    assert not (tmp_path / "home").exists()  # reading progress created nothing
    where = Stores(f"sqlite:///{tmp_path / 'home' / 'optuna.db'}", "", None)
    (tmp_path / "home").mkdir()
    study, _ = st.prepare(s, design.items(s), where)
    # Finish both seeds of the first cell and one seed of the second.
    cells = design.cells(s)
    for _ in range(3):
        trial = st.claim(study)
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
    s = spec.validate(raw)
    plan = planning.build(s, storage="sqlite:////nonexistent/optuna.db")
    timing = planning.ShapeTiming(setup=0.5, step=0.01, val=0.2, test=0.1, probe=0.05)
    calls = []
    monkeypatch.setattr(planning, "measure", lambda config, batch, device, steps: calls.append(device) or timing)
    est = planning.estimate(plan, "cuda:0")
    assert calls == ["cuda:0", "cuda:0"] and est.shapes == 2 and est.trials == 4  # one dry run per model shape
    # 5 steps, eval every 50: 0 periodic evals + final val + test; probes at 0 and the end (+ every 100: 0).
    per_trial = 0.5 + 5 * 0.01 + 0.2 + 0.1 + 2 * 0.05 + planning.TRIAL_OVERHEAD_S
    assert est.seconds == pytest.approx(4 * per_trial + planning.RUN_OVERHEAD_S)


@pytest.mark.slow  # imports torch and builds a model: seconds, not milliseconds
def test_measure_runs_a_tiny_model_for_real(tmp_path, monkeypatch):
    monkeypatch.setenv("ABLATE_CACHE_DIR", str(tmp_path))
    config = spec.validate({**RAW, "tune": None, "factors": {},
                            "task": {"name": "listops", "max_depth": 3, "min_length": 5, "max_length": 24,
                                     "train_size": 64, "val_size": 32, "test_size": 32},
                            "model": {"d_model": 8, "state_dim": 4, "layers": 1}, "train": {"steps": 3}}).baseline()
    t = planning.measure(config, probe_batch=8, steps=2)
    assert all(v > 0 for v in (t.setup, t.step, t.val, t.test, t.probe))
