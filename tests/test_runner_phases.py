"""Tune-then-replicate on the Optuna queue (ablate.runner.phases), resume and extension — with a fake
training function (no torch, no MLflow) so it runs in seconds; pruning of tuning trials, once with
real training and MLflow."""

from __future__ import annotations

import copy
import json
import sys
import types
from pathlib import Path

import optuna
import polars as pl
import pytest
from optuna.trial import TrialState
from support import RAW, FakeRun, finish, kept_checkpoint, score, stores, tune_trials

from ablate import design
from ablate.runner import items as its
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


def test_the_grid_sampler_runs_every_combination_once_per_cell_claimed_at_once(tmp_path):
    """Every cell tries the same settings (so no cell wins by a luckier draw of the sampler), each
    once, even when all of a cell's tuning items are claimed before any finishes."""
    raw = copy.deepcopy(RAW)
    raw["tune"] = {**raw["tune"], "sampler": "grid", "trials": 4,
                   "space": {"train.lr": [1e-3, 3e-3], "train.batch_size": [8, 16]}}
    s = design.validate(raw)
    study, _ = st.prepare(s, design.items(s), stores(tmp_path))
    claimed = []
    while (trial := phases.claim(study)) is not None and len(claimed) < 8:
        claimed.append((trial, phases.prepare_item(study, trial)))
    assert all(a["phase"] == "tune" for _, a in claimed) and len(claimed) == 8
    grid = {(0.001, 8), (0.001, 16), (0.003, 8), (0.003, 16)}
    for cell in design.cells(s):
        tried = [(a["params"]["train.lr"], a["params"]["train.batch_size"]) for _, a in claimed if a["cell_id"] == cell.id]
        assert sorted(tried) == sorted(grid)
    for trial, attrs in claimed:
        finish(study, trial, attrs)
    rep = phases.claim(study)
    assert phases.prepare_item(study, rep)["phase"] == "replicate"


def test_a_grid_on_several_tuning_seeds_runs_every_combination_on_each_and_picks_the_best_mean(tmp_path):
    """One tuning seed makes a pick among close settings a draw of that seed's noise; on k seeds
    the grid runs each combination on every one (trial i: combination i // k, seed i mod k) and
    the replicates take the combination with the best mean, not the luckiest trial."""
    raw = copy.deepcopy(RAW)
    raw["tune"] = {**raw["tune"], "sampler": "grid", "trials": 4, "seeds": 2, "space": {"train.lr": [1e-3, 3e-3]}}
    s = design.validate(raw)
    study, _ = st.prepare(s, design.items(s), stores(tmp_path))
    # lr 1e-3 has the best single trial (0.9 on seed 10000) but the worse mean (0.5 against 0.6).
    value = {(1e-3, 10000): 0.9, (1e-3, 10001): 0.1, (3e-3, 10000): 0.6, (3e-3, 10001): 0.6}
    claimed = []
    while len(claimed) < 8 and (trial := phases.claim(study)) is not None:
        claimed.append((trial, phases.prepare_item(study, trial)))
    assert len(claimed) == 8 and all(a["phase"] == "tune" for _, a in claimed)
    for cell in design.cells(s):
        ran = sorted((a["index"], a["params"]["train.lr"], a["seed"]) for _, a in claimed if a["cell_id"] == cell.id)
        assert ran == [(0, 1e-3, 10000), (1, 1e-3, 10001), (2, 3e-3, 10000), (3, 3e-3, 10001)]
    for trial, attrs in claimed:
        v = value[(attrs["params"]["train.lr"], attrs["seed"])]
        trial.set_user_attr("val_accuracy", v)
        trial.set_user_attr("status", "complete")
        study.tell(trial, v)
    rep = phases.prepare_item(study, phases.claim(study))
    assert rep["phase"] == "replicate" and rep["params"] == {"train.lr": 3e-3}
    assert rep["tuned_from"] == f"{rep['cell_id']}/tune/2 (val_accuracy 0.6, the mean over 2 tuning seeds)"


@pytest.mark.parametrize("sampler, trials, seeds", [("tpe", 4, 1), ("random", 4, 1), ("random", 6, 1),
                                                    ("random", 4, 2), ("gp", 4, 1)])
def test_a_finite_space_runs_no_setting_twice_on_a_seed_before_each_ran_there(tmp_path, sampler, trials, seeds):
    """Optuna's random draws repeat (its samplers allow for noisy objectives); a tuning trial is a
    deterministic function of its setting and seed, so a repeat replays it and leaves a setting
    untried. A 2-choice, 2-trial study under TPE had 10 of its 32 cells try one learning rate twice.
    Every trial of both cells is claimed before any finishes, as fused claims are."""
    raw = copy.deepcopy(RAW)
    raw["tune"] = {"sampler": sampler, "trials": trials, "seeds": seeds,
                   "space": {"train.lr": [1e-3, 3e-3], "train.batch_size": [8, 16]}}
    s = design.validate(raw)
    study, _ = st.prepare(s, design.items(s), stores(tmp_path))
    claimed = []
    while len(claimed) < 2 * trials and (trial := phases.claim(study)) is not None:
        claimed.append(phases.prepare_item(study, trial))
    assert len(claimed) == 2 * trials and all(a["phase"] == "tune" for a in claimed)
    combos = {(lr, b) for lr in (1e-3, 3e-3) for b in (8, 16)}
    for cell in design.cells(s):
        for seed in s.tune.seed_list:
            ran = [(a["params"]["train.lr"], a["params"]["train.batch_size"]) for a in claimed
                   if a["cell_id"] == cell.id and a["seed"] == seed]
            assert set(ran) <= combos
            assert len(set(ran)) == min(len(ran), len(combos)), (sampler, ran)


def test_a_model_s_ask_for_a_setting_its_seed_ran_is_asked_again(tmp_path):
    """After its startup trials, TPE exploits: with one choice clearly best it asks for it again.
    On a seed that ran it, that trial would replay the finished one: an untried setting runs."""
    raw = copy.deepcopy(RAW)
    raw["tune"] = {"sampler": "tpe", "trials": 3, "startup_trials": 2, "space": {"train.lr": [1e-3, 3e-3, 1e-2]}}
    s = design.validate(raw)
    study, _ = st.prepare(s, design.items(s), stores(tmp_path))
    cell = design.cells(s)[0]
    runs = []
    while (trial := phases.claim(study)) is not None and len(runs) < 3:
        attrs = phases.prepare_item(study, trial)
        if attrs["cell_id"] != cell.id:
            continue
        runs.append(attrs["params"]["train.lr"])
        value = 0.9 if attrs["params"]["train.lr"] == runs[0] else 0.1  # the first setting is far the best
        trial.set_user_attr("val_accuracy", value)
        trial.set_user_attr("status", "complete")
        study.tell(trial, value)
    assert sorted(runs) == [1e-3, 3e-3, 1e-2]


def test_fused_tuning_items_prepared_at_once_each_see_the_others_settings(tmp_path):
    """A worker prepares its fused items in threads at once (worker._run_group): past the startup
    trials a model asked by each at the same moment saw none of the others' settings."""
    import threading

    raw = copy.deepcopy(RAW)
    raw["tune"] = {"sampler": "tpe", "trials": 3, "startup_trials": 0, "space": {"train.lr": [1e-3, 3e-3, 1e-2]}}
    s = design.validate(raw)
    study, _ = st.prepare(s, design.items(s), stores(tmp_path))
    for cell in design.cells(s):
        trials = [phases.claim(study)]
        trials += phases.claim_fusable(study, trials[0], 2)
        assert len(trials) == 3 and {t.user_attrs["cell_id"] for t in trials} == {cell.id}
        start = threading.Barrier(3)
        prepared: dict[int, dict] = {}

        def prepare(trial, start=start, prepared=prepared):
            start.wait()
            prepared[trial.number] = phases.prepare_item(study, trial)["params"]

        threads = [threading.Thread(target=prepare, args=(t,)) for t in trials]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(p["train.lr"] for p in prepared.values()) == [1e-3, 3e-3, 1e-2]


def test_a_grid_names_what_it_needs():
    raw = copy.deepcopy(RAW)
    raw["tune"] = {**raw["tune"], "sampler": "grid", "trials": 3, "space": {"train.lr": [1e-3, 3e-3]}}
    with pytest.raises(Exception, match="tune.trials must be 2"):
        design.validate(raw)
    raw["tune"]["seeds"] = 3  # every combination on each tuning seed
    with pytest.raises(Exception, match=r"on each of the 3 tuning seeds: tune.trials must be 6 .*× 3 seeds"):
        design.validate(raw)
    raw["tune"].update(trials=6, pruner="median")
    with pytest.raises(Exception, match="a pruned trial has no final value to average: tune.pruner must be none"):
        design.validate(raw)
    raw["tune"].update(seeds=1, trials=2)
    design.validate(raw)  # one tuning seed: each setting runs once, a pruner may stop it
    raw["tune"] = {**raw["tune"], "trials": 2, "space": {"train.lr": {"low": 1e-3, "high": 1e-2}}}
    with pytest.raises(Exception, match="tune.space.train.lr is a range"):
        design.validate(raw)


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
                                     steps=1, seconds=0.0, reason="", convergence={}, resumed_at=0)

    fake.run_trial = run_trial

    Run = FakeRun

    monkeypatch.setitem(sys.modules, "ablate.training", fake)
    monkeypatch.setattr(worker.tracking, "TrialRun", Run)
    return worker.work(study_name, stores_)


def test_both_phases_resume_and_seeds_extend(tmp_path, monkeypatch):
    s = design.validate(RAW)
    where = stores(tmp_path)
    study, _ = st.prepare(s, design.items(s), where)
    assert run_fake_worker(monkeypatch, s.name, where) == {"complete": 12}
    assert its.Progress.of(study, design.items(s)).done == 12
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


PRUNED_SPEC = {
    "name": "pruned",
    "task": {"name": "listops", "max_depth": 3, "max_length": 30, "train_size": 200, "val_size": 64, "test_size": 32},
    "model": {"d_model": 8, "state_dim": 8, "layers": 1, "heads": 1},
    "train": {"steps": 40, "batch_size": 16, "eval_every": 5, "log_every": 5},
    "probes": {"enabled": False},
    "factors": {"variant": {"RotRNN": {"model.parameterisation": "rotation", "model.normalisation": "xi"},
                            "LRU": {"model.parameterisation": "complex_diagonal", "model.normalisation": "gamma"}}},
    "seeds": 1,
    "tune": {"trials": 3, "pruner": "median", "objective": {"metric": "val_loss"},
             "space": {"train.lr": {"low": 1e-7, "high": 1e-1, "log": True}}},
}
GOOD, BAD = 3e-2, 1e-7  # a learning rate that lowers the validation loss within 10 steps, and one that cannot


def test_the_median_pruner_stops_a_bad_tuning_trial_against_its_own_cell_only(tmp_path):
    """Real training, one worker in process: in the first cell, two good settings finish and a bad
    one is pruned once its validation loss lies above their median past a quarter of the steps;
    in the second cell the same bad setting, first of its cell, runs to the end (the first cell's
    trials are not its history); a replicate given the bad setting is never pruned."""
    from ablate import results
    from ablate.runner import worker

    s = design.validate(PRUNED_SPEC)
    st_ = stores(tmp_path)
    study, _ = st.prepare(s, design.items(s), st_)
    rot, lru = design.cells(s)
    plan = {rot.id: [GOOD, GOOD, BAD], lru.id: [BAD, GOOD, GOOD]}
    outcomes: dict[str, list[str]] = {rot.id: [], lru.id: []}
    replicate = None
    while (trial := phases.claim(study)) is not None:
        cell, phase = trial.user_attrs["cell_id"], trial.user_attrs["phase"]
        if phase == "replicate":
            replicate = replicate or trial
            if trial.user_attrs["cell_id"] == rot.id:
                trial.set_user_attr("params", {"train.lr": BAD})  # as if tuning had chosen it
        else:
            trial.set_user_attr("params", {"train.lr": plan[cell][trial.user_attrs["index"]]})
        outcome = worker.run_item(study, trial, st_, "cpu", lambda event, info: None)
        outcomes[cell].append(f"{phase}:{outcome}")
    assert outcomes[rot.id] == ["tune:complete", "tune:complete", "tune:pruned", "replicate:complete"]
    assert outcomes[lru.id] == ["tune:complete", "tune:complete", "tune:complete", "replicate:complete"]

    pruned = next(t for t in study.get_trials() if t.state == TrialState.PRUNED)
    assert pruned.user_attrs["status"] == "pruned" and pruned.user_attrs["cell_id"] == rot.id
    steps = pruned.user_attrs["steps"]
    assert 10 <= steps < 40  # not before a quarter of the steps, and before the end
    assert sorted(int(k) for k in pruned.user_attrs["intermediate"]) == list(range(5, steps + 1, 5))
    res = results.load("pruned", st_.storage, st_.tracking, curves=False)
    assert res.trials.filter(pl.col("status") == "pruned").height == 1
    tuning_rows = {r["cell_id"]: r for r in res.tuning().iter_rows(named=True)}
    assert (tuning_rows[rot.id]["pruned"], tuning_rows[rot.id]["complete"]) == (1, 2)
    assert tuning_rows[lru.id]["pruned"] == 0
    done = res.trials.filter(pl.col("status") == "complete")
    assert done["steps"].to_list() == [40] * done.height and done["stopped_early"].to_list() == [False] * done.height
    assert done["converged"].null_count() == 0 and done["best_step"].min() >= 5
    # The replicate trained the bad setting to the end: below its cell's median, never asked.
    rep = res.trials.filter((pl.col("cell_id") == rot.id) & (pl.col("phase") == "replicate")).row(0, named=True)
    assert json.loads(rep["params"]) == {"train.lr": BAD} and rep["steps"] == 40
    assert phases.pruning(study, replicate, dict(replicate.user_attrs)) is None


def test_successive_halving_keeps_its_rungs_on_the_trials_and_prunes_the_worst_third(tmp_path):
    """Rungs at steps/9 = 10 and 30 (reduction 3): the first two trials pass the first rung
    (fewer than three to compare), the third, worst of three there, is pruned; the rung values
    live on the queue's trials (``pruner_attrs``), as the in-memory study is rebuilt each pass."""
    raw = copy.deepcopy(RAW)
    raw["train"] = {"steps": 90, "eval_every": 10}
    raw["tune"] = {**raw["tune"], "trials": 4, "pruner": "successive_halving"}
    s = design.validate(raw)
    study, _ = st.prepare(s, design.items(s), stores(tmp_path))
    verdicts = []
    for accuracy in (0.5, 0.6, 0.4):
        trial = phases.claim(study)
        attrs = phases.prepare_item(study, trial)
        report = phases.pruning(study, trial, attrs)
        try:
            report(10, {"accuracy": accuracy, "loss": 1.0})
            verdicts.append("kept")
            finish(study, trial, attrs)
        except optuna.TrialPruned:
            verdicts.append("pruned")
            queue.finish(study, trial, TrialState.PRUNED, {"status": "pruned"})
        assert queue.trial(study, trial.number).user_attrs["pruner_attrs"] == {"completed_rung_0": accuracy}
    assert verdicts == ["kept", "kept", "pruned"]
    # The next trial's setting is sampled with the pruned one in its history (TPE ranks it by its values).
    attrs = phases.prepare_item(study, phases.claim(study))
    assert attrs["phase"] == "tune" and 1e-4 <= attrs["params"]["train.lr"] <= 1e-1


# --- which kept stable-phase checkpoints `ablate gc` removes ------------------------------------------


def test_garbage_is_the_kept_checkpoints_of_cells_no_study_has(tmp_path):
    s = stores(tmp_path)
    spec = design.validate({**copy.deepcopy(RAW), "name": "g"})
    st.prepare(spec, design.items(spec), s)
    studied = design.cells(spec)[0].id
    root = tmp_path / "ckpt"
    assert phases.garbage(s.storage, root=root) == phases.Garbage(root, [], [])  # none kept: no store asked
    kept_checkpoint(root, studied, size=100)
    gone = kept_checkpoint(root, "deadbeef0000", size=300)
    found = phases.garbage(s.storage, root=root)
    assert [k.path for k in found.drop] == [gone] and len(found.kept) == 2
    assert (found.size, found.drop_size) == (400, 300)
    assert {k.cell_id for k in phases.garbage(s.storage, every=True, root=root).drop} == {studied, "deadbeef0000"}
    with pytest.raises(phases.NoStores, match="no stores here to tell which cells are still studied: pass "
                                              "--storage, or --all"):
        phases.garbage(f"sqlite:///{tmp_path / 'none.db'}", root=root)
    assert len(phases.garbage(f"sqlite:///{tmp_path / 'none.db'}", every=True, root=root).drop) == 2
    assert phases.drop_kept(found.drop) == 300 and not gone.exists()
    assert phases.garbage(s.storage, root=root).drop == []
