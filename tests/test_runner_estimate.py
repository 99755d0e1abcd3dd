"""``ablate plan --estimate`` (ablate.runner.estimate): measured timings scaled by each pending
trial, the schedule over workers, the extensions of a study until converged, the bookkeeping."""

from __future__ import annotations

import copy
import io
from pathlib import Path

import pytest
from rich.console import Console
from support import RAW

from ablate import design
from ablate.runner import estimate
from ablate.runner import plan as planning


@pytest.fixture
def tmp_path(shm_tmp_path: Path) -> Path:
    return shm_tmp_path


pytestmark = pytest.mark.usefixtures("own_timings_cache")


def test_a_second_estimate_reuses_the_first_ones_timings_and_says_so(monkeypatch):
    raw = copy.deepcopy(RAW)
    del raw["tune"]
    plan = planning.build(design.validate(raw), storage="sqlite:////nonexistent/optuna.db")
    timing = estimate.ShapeTiming(setup=0.5, step=0.01, val=0.2, test=0.1, probe=0.05, grads=0.02, first_use=3.0)
    calls = []
    monkeypatch.setattr(estimate, "measure", lambda config, probes, device, steps: calls.append(device) or timing)
    monkeypatch.setattr(estimate, "measure_overheads", lambda *a, **k: calls.append("overheads")
                        or estimate.Overheads(queue=1.5, imports=4.0, trial=0.25))
    first = estimate.estimate(plan, "cpu")
    assert calls == ["cpu", "cpu", "overheads"] and first.reused == 0
    second = estimate.estimate(plan, "cpu")
    assert calls == ["cpu", "cpu", "overheads"] and second.reused == 2  # nothing measured again
    assert second.seconds == pytest.approx(first.seconds)
    out = io.StringIO()
    estimate.render_estimate(second, Console(file=out, width=300))
    assert "2 timed by an earlier call within a day (this machine and versions), 0 measured now" in out.getvalue()
    assert estimate.estimate(plan, "cuda:0").reused == 0  # another device: measured
    monkeypatch.setattr(estimate.time, "time", lambda: 1e12)  # a day later: measured again
    assert estimate.estimate(plan, "cpu").reused == 0


def test_estimate_scales_measured_timings_by_each_pending_trial(monkeypatch):
    raw = copy.deepcopy(RAW)
    del raw["tune"]
    s = design.validate(raw)
    plan = planning.build(s, storage="sqlite:////nonexistent/optuna.db")
    timing = estimate.ShapeTiming(setup=0.5, step=0.01, val=0.2, test=0.1, probe=0.05, grads=0.02, first_use=3.0)
    calls = []
    monkeypatch.setattr(estimate, "measure", lambda config, probes, device, steps: calls.append(device) or timing)
    monkeypatch.setattr(estimate.os, "cpu_count", lambda: 2)
    overheads = estimate.Overheads(queue=1.5, imports=4.0, trial=0.25)
    est = estimate.estimate(plan, "cuda:0", overheads=overheads)
    assert calls == ["cuda:0", "cuda:0"] and est.shapes == 2 and est.trials == 4  # one dry run per model shape
    # 5 steps, eval every 50: 0 periodic evals, one convergence pass (step 4, the last fifth's
    # boundary) + final val + test; probes at 0 and the end (+ every 100: 0); gradient rows at the last step.
    per_trial = 0.5 + 5 * 0.01 + 2 * 0.2 + 0.1 + 2 * 0.05 + 1 * 0.02 + 0.25
    start = estimate.CLI_START_S + 1.5 + 4.0 + 3.0
    assert est.trial_seconds == pytest.approx(4 * per_trial) and est.start_seconds == pytest.approx(start)
    assert est.seconds == pytest.approx(4 * per_trial + start)
    two = estimate.estimate(plan, "cuda:0", workers=2, overheads=overheads)  # 2 trials each, imports at once
    assert two.seconds == pytest.approx(2 * per_trial + start)
    four = estimate.estimate(plan, "cuda:0", workers=4, overheads=overheads)  # 4 importing on 2 cores
    assert four.seconds == pytest.approx(per_trial + start + 4.0)


def test_schedule_holds_replicates_until_their_cells_tuning_is_done():
    s = design.validate(RAW)  # 2 cells × (4 tuning trials + 2 replicates)
    items = design.items(s)
    seconds = [1.0] * len(items)
    assert estimate.schedule(items, seconds, 1) == pytest.approx(len(items))
    # 2 workers: 8 tuning trials in 4 s, then 4 replicates in 2 s — no replicate before its cell's tuning.
    assert estimate.schedule(items, seconds, 2) == pytest.approx(6.0)
    # 4 workers, a 5-s first tuning trial of the first cell: the other tuning is done by 3, the second
    # cell's replicates run 3–4, the first cell's wait for its slow trial (5–6); without the rule, 2–3.
    slow = [5.0 if (i.phase == "tune" and i.index == 0 and i.cell is items[0].cell) else 1.0 for i in items]
    assert estimate.schedule(items, slow, 4) == pytest.approx(6.0)
    ungated = [design.Item(i.cell, i.seed, i.phase, i.index, None) for i in items]  # as if untuned
    assert estimate.schedule(ungated, slow, 4) == pytest.approx(5.0)


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
    assert estimate.schedule(runs, seconds, 2, follows) == pytest.approx(7.0)
    assert estimate.schedule(items, [1.0] * 4, 2) == pytest.approx(2.0)
    with pytest.raises(ValueError, match="never runs"):
        estimate.schedule(items[:1] + [items[0]], [1.0, 1.0], 1, [None, 5])


def test_estimate_prices_the_extensions_a_study_until_converged_may_still_make(monkeypatch):
    raw = copy.deepcopy(RAW)
    del raw["tune"]
    raw["train"] = {"steps": 24, "schedule": "wsd", "warmup_steps": 2, "decay_steps": 3,
                    "until_converged": {"max_steps": 60, "extend_by": 24}}
    s = design.validate(raw)
    plan = planning.build(s, storage="sqlite:////nonexistent/optuna.db")
    # Each of the 4 replicates may go 24 → 48 (from the 24-step run's stable end, 21) → 60 (from 45).
    extensions, replaced = estimate.extension_runs(plan)
    assert replaced == set() and len(extensions) == 8
    assert [(c["train"]["steps"], c["train"]["warmup_steps"], step) for i, c, step in extensions
            if i.key == plan.items[0].key] == [(48, 2, 21), (60, 2, 45)]
    timing = estimate.ShapeTiming(setup=0.5, step=0.01, val=0.2, test=0.1, probe=0.05, grads=0.02, first_use=3.0)
    monkeypatch.setattr(estimate, "measure", lambda config, probes, device, steps: timing)
    overheads = estimate.Overheads(queue=1.5, imports=4.0, trial=0.25)
    one = estimate.estimate(plan, overheads=overheads)
    assert one.trials == 4 and one.extension_runs == 8 and one.extension_steps == 4 * ((48 - 21) + (60 - 45))
    # One worker runs everything in turn: the extensions add their own time, and no more.
    assert one.extension_seconds == pytest.approx(one.extension_trial_seconds) and one.extension_seconds > 0
    per = [estimate.trial_seconds(c, s.probes, timing, 0.25, (c["train"]["steps"] - step) / c["train"]["steps"])
           for _, c, step in extensions]
    assert one.extension_trial_seconds == pytest.approx(sum(per))
    four = estimate.estimate(plan, workers=4, overheads=overheads)  # one item's chain per worker
    assert four.extension_seconds == pytest.approx(per[0] + per[1])
    out = io.StringIO()
    estimate.render_estimate(four, Console(file=out, width=200))
    assert "extensions (until converged): at most 8 more runs, 168 steps to train" in out.getvalue()
    # Without until_converged nothing is priced beyond the declared runs.
    del raw["train"]["until_converged"]
    plain = estimate.estimate(planning.build(design.validate(raw), storage="sqlite:////nonexistent/optuna.db"),
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
    t = estimate.measure(s.baseline(), s.probes, steps=2)
    assert all(v > 0 for v in (t.setup, t.step, t.val, t.test, t.probe, t.grads)) and t.probe_rows > 0
    o = estimate.measure_overheads(s, design.items(s), s.baseline(), t.probe_rows)
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
    o = estimate.measure_overheads(s, design.items(s), s.baseline(), probe_rows=4, folder=folder)
    assert o.trial > 0 and recorded == [0, 1]  # two trials, each recorded by the worker
    trials = optuna.load_study(study_name=None, storage=f"sqlite:///{folder / 'optuna.db'}").get_trials()
    done = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert [t.number for t in done] == [0, 1]
    for t in done:
        a = t.user_attrs
        assert a["worker"] == worker.worker_id() and a["provenance"]["ablate.device"].startswith("cpu")
        assert a["status"] == "complete" and a["steps_trained"] == a["steps"] == 5 and a["seconds"] >= 0
        assert a["converged"] is True and a["mlflow_run_id"] and t.value == 0.5
    client = MlflowClient(f"sqlite:///{folder / 'mlflow.db'}")
    runs = {r.info.run_id: r for r in client.search_runs([e.experiment_id for e in client.search_experiments()],
                                                           "tags.`ablate.role` = 'trial'")}
    assert set(runs) == {t.user_attrs["mlflow_run_id"] for t in done}
    for r in runs.values():
        assert r.info.status == "FINISHED" and r.data.tags["ablate.committed"] == "true"
        assert r.data.tags["ablate.worker"] == worker.worker_id() and r.data.metrics["final/val_accuracy"] == 0.5
    assert "ABLATE_CHECKPOINT_DIR" not in __import__("os").environ  # the worker's checkpoints went to the folder


def test_the_estimate_says_it_prices_each_trial_whole_when_early_stopping_or_a_pruner_may_end_some(monkeypatch):
    """lru_ablations' first tuned grid (patience 8, the median pruner) was estimated at 1 h 23 min,
    each trial at its full 4,000 steps, with nothing said of the trials that would stop sooner."""
    timing = estimate.ShapeTiming(setup=0.5, step=0.01, val=0.2, test=0.1, probe=0.05)
    monkeypatch.setattr(estimate, "measure", lambda config, probes, device, steps: timing)
    overheads = estimate.Overheads(queue=1.5, imports=4.0, trial=0.25)

    def said(raw: dict) -> str:
        out = io.StringIO()
        est = estimate.estimate(planning.build(design.validate(raw), storage="sqlite:////nonexistent/optuna.db"),
                                "cpu", overheads=overheads)
        estimate.render_estimate(est, Console(file=out, width=400))
        return out.getvalue()

    plain = copy.deepcopy(RAW)
    del plain["tune"]
    assert "full budget" not in said(plain)
    stops = copy.deepcopy(plain)
    stops["train"] = {**stops["train"], "patience": 8}
    assert "; each trial at its full budget: early stopping (train.patience) may end some sooner" in said(stops)
    tuned = copy.deepcopy(RAW)
    tuned["train"] = {**tuned["train"], "patience": 8}
    tuned["tune"] = {**tuned["tune"], "pruner": "median"}
    assert ("each trial at its full budget: early stopping (train.patience) and pruning (tune.pruner: median) "
            "may end some sooner") in said(tuned)
