"""ablate.runner.worker: execution that survives, with real worker processes and real stores (SQLite, MLflow)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.trial import TrialState
from support import ABLATE, TRAINABLE, FakeRun, spec_dict

SPEC = spec_dict(TRAINABLE)


def env_for(root: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "ABLATE_HOME": str(root / ".ablate"), "ABLATE_CACHE_DIR": str(root / "cache"),
            "ABLATE_HEARTBEAT_S": "1", "ABLATE_GRACE_S": "4", "OMP_NUM_THREADS": "1", **extra}


def cli(root: Path, *args: str, check: bool = True, **env: str) -> subprocess.CompletedProcess:
    res = subprocess.run([*ABLATE, *args], cwd=root, env=env_for(root, **env),
                         capture_output=True, text=True, timeout=600)
    if check:
        assert res.returncode == 0, f"{args}\n{res.stdout}\n{res.stderr}"
    return res


def spawn(root: Path, *args: str, **env: str) -> subprocess.Popen:
    return subprocess.Popen([*ABLATE, *args], cwd=root, env=env_for(root, **env),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def write_spec(root: Path, **changes) -> Path:
    spec = yaml.safe_load(yaml.safe_dump(SPEC))
    for key, value in changes.items():
        spec[key] = value
    path = root / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def load(root: Path, name: str = "exec") -> optuna.Study:
    from ablate.runner.study import storage  # takes the lock a fresh file's first process holds

    return optuna.load_study(study_name=name, storage=storage(f"sqlite:///{root / '.ablate' / 'optuna.db'}"))


def complete_per_item(study: optuna.Study) -> Counter:
    return Counter(t.user_attrs["item"] for t in study.trials if t.state == TrialState.COMPLETE)


def mlflow_runs(root: Path, name: str = "exec"):
    from mlflow.tracking import MlflowClient

    mlc = MlflowClient(f"sqlite:///{root / '.ablate' / 'mlflow.db'}")
    exp = mlc.get_experiment_by_name(name)
    return [r for r in mlc.search_runs([exp.experiment_id]) if r.data.tags.get("ablate.role") == "trial"]


def wait_running(root: Path, timeout: float = 120.0) -> optuna.trial.FrozenTrial:
    """Wait until some trial is RUNNING and has reported a step past 0 (the model is training)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if (root / ".ablate" / "optuna.db").exists():
            try:
                running = [t for t in load(root).trials if t.state == TrialState.RUNNING and t.user_attrs.get("step")]
            except KeyError:
                running = []
            if running:
                return running[0]
        time.sleep(0.5)
    raise AssertionError("no trial started running in time")


def test_four_workers_finish_twelve_items_exactly_once(tmp_path):
    write_spec(tmp_path, factors={"model.normalisation": ["xi", "gamma", "none"]}, seeds=4)
    res = cli(tmp_path, "run", "spec.yaml", "--workers", "4", "--checkpoint-every", "0")
    assert "12 done, 0 failed" in res.stdout
    study = load(tmp_path)
    per_item = complete_per_item(study)
    assert len(per_item) == 12 and set(per_item.values()) == {1}
    assert len(study.trials) == 12  # nothing ran twice, nothing failed (no "database is locked")
    assert len({t.user_attrs["worker"] for t in study.trials}) >= 2
    runs = mlflow_runs(tmp_path)
    assert len(runs) == 12 and {r.info.status for r in runs} == {"FINISHED"}


def test_kill9_mid_trial_is_recovered_by_another_worker(tmp_path):
    write_spec(tmp_path, train={**SPEC["train"], "steps": 20}, seeds=2)
    victim = spawn(tmp_path, "run", "spec.yaml", ABLATE_FAULT="slow@2")
    trial = wait_running(tmp_path)
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait()
    cli(tmp_path, "worker", "exec")  # waits out the grace period, recovers the item, runs all
    study = load(tmp_path)
    per_item = complete_per_item(study)
    assert len(per_item) == 2 and set(per_item.values()) == {1}
    killed = study.trials[trial.number]
    assert killed.state == TrialState.FAIL and killed.user_attrs["failure_kind"] == "killed"
    statuses = Counter(r.info.status for r in mlflow_runs(tmp_path))
    assert statuses["RUNNING"] == 0 and statuses["KILLED"] >= 1 and statuses["FINISHED"] == 2


def test_worker_declared_dead_while_alive_drops_its_attempt_and_carries_on(tmp_path):
    """A stalled worker's trial is failed and re-queued by another process; when the worker
    resumes it must neither crash nor record a second result: it drops the attempt and works on."""
    from ablate.runner.study import declare_dead, open_study
    from ablate.stores import Stores

    write_spec(tmp_path, train={**SPEC["train"], "steps": 20})
    proc = spawn(tmp_path, "run", "spec.yaml", "--checkpoint-every", "0", ABLATE_FAULT="slow@2")
    trial = wait_running(tmp_path)
    root = tmp_path / ".ablate"
    stores = Stores(f"sqlite:///{root / 'optuna.db'}", f"sqlite:///{root / 'mlflow.db'}", (root / "a").as_uri())
    assert declare_dead(open_study("exec", stores), trial.number)  # the verdict another process makes
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0 and "Traceback" not in err, err
    study = load(tmp_path)
    assert list(complete_per_item(study).values()) == [1], (out, [(t.state, t.user_attrs) for t in study.trials])
    assert study.trials[trial.number].user_attrs["failure_kind"] == "killed"
    runs = mlflow_runs(tmp_path)
    assert Counter(r.info.status for r in runs) == {"KILLED": 1, "FINISHED": 1}
    assert [r.data.tags.get("ablate.failure_kind") for r in runs if r.info.status == "KILLED"] == ["superseded"]


def test_two_runs_queueing_at_once_queue_each_item_once(tmp_path):
    write_spec(tmp_path, seeds=40)
    procs = [spawn(tmp_path, "run", "spec.yaml", "--workers", "0") for _ in range(2)]
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
    items = Counter(t.user_attrs["item"] for t in load(tmp_path).trials)
    assert len(items) == 40 and set(items.values()) == {1}
    # Queueing starts no parent run; the first worker does (study.ensure_parent_run): two starting
    # at once start one.
    assert "mlflow_parent_run_id" not in load(tmp_path).user_attrs
    procs = [spawn(tmp_path, "worker", "exec", "--max-items", "1") for _ in range(2)]
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
    from mlflow.tracking import MlflowClient

    mlc = MlflowClient(f"sqlite:///{tmp_path / '.ablate' / 'mlflow.db'}")
    runs = mlc.search_runs([mlc.get_experiment_by_name("exec").experiment_id])
    parents = [r for r in runs if r.data.tags["ablate.role"] == "study"]
    assert len(parents) == 1 and parents[0].info.run_id == load(tmp_path).user_attrs["mlflow_parent_run_id"]
    assert {r.data.tags.get("mlflow.parentRunId") for r in runs if r.info.run_id != parents[0].info.run_id} == {parents[0].info.run_id}


def test_sigint_requeues_the_item_and_rerun_finishes_it(tmp_path):
    write_spec(tmp_path, train={**SPEC["train"], "steps": 20})
    proc = spawn(tmp_path, "run", "spec.yaml", ABLATE_FAULT="slow@2")
    trial = wait_running(tmp_path)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    study = load(tmp_path)
    interrupted = study.trials[trial.number]
    assert interrupted.state == TrialState.FAIL and interrupted.user_attrs["failure_kind"] == "interrupted"
    assert [t.state for t in study.trials[trial.number + 1 :]] == [TrialState.WAITING]
    cli(tmp_path, "run", "spec.yaml")
    study = load(tmp_path)
    assert set(complete_per_item(study).values()) == {1}
    cli(tmp_path, "run", "spec.yaml")  # resuming a finished study runs nothing
    assert len(load(tmp_path).trials) == len(study.trials)


def test_divergence_error_and_oom_are_recorded_by_kind(tmp_path):
    write_spec(tmp_path, train={**SPEC["train"], "divergence_norm": 1e-12})
    res = cli(tmp_path, "run", "spec.yaml")  # a diverged cell is a result: exit 0
    assert "diverged" in res.stdout
    (trial,) = load(tmp_path).trials
    assert trial.state == TrialState.FAIL and trial.user_attrs["failure_kind"] == "diverged"
    (run,) = mlflow_runs(tmp_path)
    assert run.info.status == "FAILED" and run.data.tags["ablate.failure_kind"] == "diverged"

    error_root = tmp_path / "error"
    error_root.mkdir()
    write_spec(error_root)
    res = cli(error_root, "run", "spec.yaml", check=False, ABLATE_FAULT="error@3")
    assert res.returncode == 1
    (trial,) = load(error_root).trials
    assert trial.user_attrs["failure_kind"] == "error"
    assert "injected fault at step 3" in trial.user_attrs["traceback"]
    assert "Traceback" in mlflow_runs(error_root)[0].data.tags["ablate.traceback"]
    cli(error_root, "run", "spec.yaml", check=False)  # an error is not blindly retried
    assert len(load(error_root).trials) == 1

    oom_root = tmp_path / "oom"
    oom_root.mkdir()
    write_spec(oom_root)
    cli(oom_root, "run", "spec.yaml", ABLATE_FAULT="oom@2")
    (trial,) = load(oom_root).trials
    assert trial.state == TrialState.COMPLETE and trial.user_attrs["accumulate"] == 2
    statuses = sorted(r.info.status for r in mlflow_runs(oom_root))
    assert statuses == ["FAILED", "FINISHED"]


def test_checkpoint_resume_reaches_the_uninterrupted_result(tmp_path, monkeypatch):
    monkeypatch.setenv("ABLATE_CACHE_DIR", str(tmp_path / "cache"))
    from ablate import design
    from ablate.training import run_trial

    config = design.validate({**SPEC, "train": {**SPEC["train"], "steps": 12}}).baseline()

    class Recording:
        def __init__(self, stop_at: int | None = None):
            self.metrics, self.curves, self.stop_at = [], [], stop_at

        def log_metrics(self, step, values):
            if self.stop_at is not None and step >= self.stop_at:
                raise KeyboardInterrupt  # the worker dies here
            self.metrics.append((step, values))

        def log_curves(self, rows):
            self.curves.append(rows)

    whole = Recording()
    expected = run_trial(config, seed=3, reporter=whole)
    ckpt = tmp_path / "ckpt.pt"
    with pytest.raises(KeyboardInterrupt):
        run_trial(config, seed=3, reporter=Recording(stop_at=9), checkpoint=ckpt, checkpoint_every=4)
    assert ckpt.exists()
    resumed_log = Recording()
    resumed = run_trial(config, seed=3, reporter=resumed_log, checkpoint=ckpt, checkpoint_every=4)
    assert resumed.metrics == expected.metrics
    assert resumed_log.metrics == whole.metrics  # the history before the kill is replayed
    assert len(resumed_log.curves) == len(whole.curves)
    for got, want in zip(resumed_log.curves, whole.curves, strict=True):
        assert got.equals(want)


def test_a_retryable_failure_is_requeued_after_a_backoff_and_its_retry_completes(tmp_path, monkeypatch):
    """Stores unreachable mid-trial (``infrastructure``): recorded by kind, re-queued within the
    bound (the back-off reads the retry history), and the retry is run by the same worker."""
    import types

    from ablate import design
    from ablate.runner import study as st
    from ablate.runner import worker
    from ablate.stores import Stores

    s = design.validate(SPEC)
    where = Stores(f"sqlite:///{tmp_path / 'optuna.db'}", f"sqlite:///{tmp_path / 'mlflow.db'}", None)
    st.prepare(s, design.items(s), where)
    calls = []

    def run_trial(config, seed, probes, reporter=None, device="cpu", **options):
        calls.append(seed)
        if len(calls) == 1:
            raise ConnectionError("tracking server unreachable")
        return types.SimpleNamespace(status="complete", metrics={"val_accuracy": 0.5}, steps=1, seconds=0.0,
                                     reason="", convergence={}, resumed_at=0)

    Run = FakeRun

    fake = types.ModuleType("ablate.training")
    fake.run_trial = run_trial
    monkeypatch.setitem(sys.modules, "ablate.training", fake)
    monkeypatch.setattr(worker.tracking, "TrialRun", Run)
    assert worker.work(s.name, where) == {"infrastructure": 1, "complete": 1}
    failed, retried = st.open_study(s.name, where).trials
    assert failed.state == TrialState.FAIL and failed.user_attrs["failure_kind"] == "infrastructure"
    assert retried.state == TrialState.COMPLETE and retried.system_attrs["retry_history"] == [failed.number]
    assert retried.user_attrs["item"] == failed.user_attrs["item"] and len(calls) == 2


# --- kills and store faults at every point of an item's life (tests/processes.py; signals:
# tests/test_runner_signals.py) -----------------------------------------------------------------

import processes as procs  # noqa: E402


def test_kill9_the_moment_a_worker_claims_is_recovered_not_waited_for(tmp_path):
    """kill -9 right after the claim flipped the trial RUNNING, before any heartbeat thread: the
    next run finds the trial silent past its grace period and re-runs the item, where waiting for
    a running trial that never beats would hang every worker."""
    procs.write_spec(tmp_path, seeds=1)
    proc = procs.spawn(tmp_path, "run", "spec.yaml", ABLATE_FAULT="kill@flip")
    proc.communicate(timeout=300)
    assert proc.returncode == -signal.SIGKILL
    assert [t["state"] for t in procs.trials(tmp_path)] == ["RUNNING"]
    res = procs.ablate(tmp_path, "run", "spec.yaml")
    assert res.returncode == 0, res.stderr
    assert procs.assert_consistent(tmp_path) == {procs.trials(tmp_path)[0]["item"]: "done"}
    assert [t["state"] for t in procs.trials(tmp_path)] == ["FAIL", "COMPLETE"]


@pytest.mark.parametrize("point", ["commit", "committed"])
def test_kill9_around_the_optuna_record_leaves_one_finished_run_per_item(tmp_path, point):
    """kill -9 after the MLflow run holds the results but before (commit) or after (committed)
    Optuna recorded the trial: the Optuna record is the commit point, so the item has exactly one
    FINISHED run, the one Optuna recorded; the other attempt's run is KILLED."""
    from ablate import results

    procs.write_spec(tmp_path, seeds=1)
    proc = procs.spawn(tmp_path, "run", "spec.yaml", ABLATE_FAULT=f"kill@{point}")
    proc.communicate(timeout=300)
    assert proc.returncode == -signal.SIGKILL
    res = procs.ablate(tmp_path, "run", "spec.yaml")  # recovers the killed worker's item (or its run)
    assert res.returncode == 0, res.stderr
    assert procs.assert_consistent(tmp_path) == {procs.trials(tmp_path)[0]["item"]: "done"}
    statuses = sorted(r["status"] for r in procs.runs(tmp_path))
    assert statuses == (["FINISHED", "KILLED"] if point == "commit" else ["FINISHED"])
    os.environ["ABLATE_HOME"] = str(tmp_path / ".ablate")
    try:
        loaded = results.load("faults")
    finally:
        del os.environ["ABLATE_HOME"]
    assert loaded.trials["status"].to_list() == ["complete"]
    assert loaded.metrics["step"].max() == 8 and loaded.missing == []


def test_an_mlflow_store_lost_at_the_end_of_a_trial_is_an_infrastructure_failure_not_a_crash(tmp_path):
    """mlflow.db deleted while a trial records its results: retried with back-off, the worker
    stops after repeated failures with the reason (exit 1, no traceback), nothing is left
    RUNNING, and the next run (a fresh MLflow store) finishes the study."""
    procs.write_spec(tmp_path, seeds=1)
    proc = procs.spawn(tmp_path, "run", "spec.yaml", ABLATE_FAULT="pause@record", ABLATE_FAULT_PAUSE_S="3")
    procs.wait_for((tmp_path / "fault.mark").exists, "the worker recording", proc)
    (tmp_path / ".ablate" / "mlflow.db").unlink()
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 1 and "Traceback" not in out + err, out + err
    assert "infrastructure failures in a row" in err and "tracking failed" in err
    found = procs.trials(tmp_path)
    assert found[0]["failure_kind"] == "infrastructure" and not [t for t in found if t["state"] == "RUNNING"]
    assert procs.ablate(tmp_path, "run", "spec.yaml").returncode == 0
    assert procs.assert_consistent(tmp_path) == {found[0]["item"]: "done"}


def test_a_crash_of_the_worker_itself_requeues_its_item_and_prints_one_line(tmp_path):
    procs.write_spec(tmp_path, seeds=1)
    assert procs.ablate(tmp_path, "run", "spec.yaml", "--workers", "0").returncode == 0
    res = procs.ablate(tmp_path, "worker", "faults", ABLATE_FAULT="error@claim")
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
    assert "error (internal) RuntimeError: injected fault at claim" in res.stderr
    (trial, retry) = procs.trials(tmp_path)
    assert trial["failure_kind"] == "killed" and retry["state"] == "WAITING"


def test_a_full_disk_stops_the_worker_saying_where(tmp_path):
    """ABLATE_HOME (stores, checkpoints) on a small tmpfs filled up while a trial trains. Before:
    the only output was "worker exited with 1"."""
    home = tmp_path / "small"
    home.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(home)]).returncode:
        pytest.skip("mounting a small tmpfs needs root")
    try:
        procs.write_spec(tmp_path, seeds=1)
        env = {"ABLATE_HOME": str(home / ".ablate"), "ABLATE_FAULT": "pause@checkpoint", "ABLATE_FAULT_PAUSE_S": "3"}
        proc = procs.spawn(tmp_path, "run", "spec.yaml", "--checkpoint-every", "2", **env)
        procs.wait_for((tmp_path / "fault.mark").exists, "the worker checkpointing", proc)
        with open(home / "filler", "wb") as f:  # the disk fills while the worker waits to checkpoint
            try:
                while True:
                    f.write(b"\0" * (1 << 16))
                    f.flush()
            except OSError:
                pass
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 1 and "Traceback" not in out + err, out + err
        assert f"no space left on {home}" in err
        (home / "filler").unlink()
        res = procs.ablate(tmp_path, "run", "spec.yaml", ABLATE_HOME=str(home / ".ablate"))
        assert res.returncode == 0, res.stdout + res.stderr
    finally:
        subprocess.run(["umount", "--lazy", str(home)])


def test_an_item_is_claimed_once_the_imports_are_loaded_and_old_runs_settled(tmp_path, monkeypatch):
    """With items waiting, the worker claims only once torch, the models and MLflow are imported
    and the runs a kill left RUNNING are settled (each held back here until the test lets it go):
    no item is held by a worker still starting, and its first trial lasts as its later ones
    (settling while it trained made it wait on MLflow's store and the interpreter)."""
    import threading
    import types

    from ablate import design
    from ablate.runner import preload, worker
    from ablate.runner import study as st
    from ablate.stores import Stores

    s = design.validate(SPEC)
    where = Stores(f"sqlite:///{tmp_path / 'optuna.db'}", f"sqlite:///{tmp_path / 'mlflow.db'}", None)
    st.prepare(s, design.items(s), where)
    imported, settled, seen, preloads, done = threading.Event(), threading.Event(), [], [], []

    class HeldPreload(preload.Preload):
        @staticmethod
        def _prepare(tracking_uri=None, device="cpu") -> None:
            imported.wait()

    def held(tracking_uri=None, then=None, device="cpu", needs=None):
        preloads.append(HeldPreload(tracking_uri, then, device, needs))
        threading.Timer(0.3, imported.set).start()  # the imports end a moment after the start
        return preloads[-1]

    def settle_runs(study, tracking_uri, dead=None):
        if dead is None:  # the preload's settling: over half a second after the imports
            settled.wait()
            done.append("settled")

    real_claim = worker.phases.claim

    def claim(study):
        seen.append(("claim", preloads[0].loaded.is_set(), done == ["settled"]))
        return real_claim(study)

    def run_trial(config, seed, probes, reporter=None, device="cpu", **options):
        seen.append(("train", preloads[0].loaded.is_set()))
        return types.SimpleNamespace(status="complete", metrics={"val_accuracy": 0.5}, steps=1, seconds=0.0,
                                     reason="", convergence={}, resumed_at=0)

    fake = types.ModuleType("ablate.training")
    fake.run_trial = run_trial
    monkeypatch.setitem(sys.modules, "ablate.training", fake)
    monkeypatch.setattr(worker.tracking, "TrialRun", FakeRun)
    monkeypatch.setattr(worker, "Preload", held)
    monkeypatch.setattr(worker, "settle_runs", settle_runs)
    monkeypatch.setattr(worker.phases, "claim", claim)
    threading.Timer(0.8, settled.set).start()
    assert worker.work(s.name, where, max_items=1) == {"complete": 1}
    assert seen == [("claim", True, True), ("train", True)]


WSD = {**SPEC["train"], "schedule": "wsd", "steps": 12, "warmup_steps": 2, "decay_steps": 3}


def _replicates(root: Path, name: str) -> dict[int, optuna.trial.FrozenTrial]:
    return {t.user_attrs["seed"]: t for t in load(root, name).trials if t.state == TrialState.COMPLETE}


def _finals(trial: optuna.trial.FrozenTrial) -> dict[str, float]:
    return {k: v for k, v in trial.user_attrs.items() if k.startswith(("val_", "test_")) and isinstance(v, float)}


def test_a_doubled_wsd_study_trains_only_the_difference_and_equals_scratch(tmp_path):
    short, scratch = tmp_path / "short", tmp_path / "scratch"
    for root in (short, scratch):
        root.mkdir()
    write_spec(short, name="wsd", train=WSD, seeds=2)
    cli(short, "run", "spec.yaml")
    first = _replicates(short, "wsd")
    assert all(t.user_attrs["continued_from"] is None and t.user_attrs["steps_trained"] == 12 for t in first.values())
    doubled = {**WSD, "steps": 24}
    write_spec(short, name="wsd_long", train=doubled, seeds=2)  # the same stores: the short run's checkpoints
    plan = cli(short, "plan", "spec.yaml").stdout
    assert "continues" in plan and "from step 9: 15 of 24 steps to train" in " ".join(plan.split()), plan
    cli(short, "run", "spec.yaml")
    write_spec(scratch, name="wsd_long", train=doubled, seeds=2)
    cli(scratch, "run", "spec.yaml")
    continued, fresh = _replicates(short, "wsd_long"), _replicates(scratch, "wsd_long")
    assert set(continued) == set(fresh) == {0, 1}
    for seed, trial in continued.items():
        assert trial.user_attrs["continued_from"] == {"cell": first[seed].user_attrs["cell_id"],
                                                     "label": first[seed].user_attrs["cell_label"],
                                                     "seed": seed, "step": 9}
        assert trial.user_attrs["steps_trained"] == 15 and trial.user_attrs["steps"] == 24
        assert fresh[seed].user_attrs["continued_from"] is None and fresh[seed].user_attrs["steps_trained"] == 24
        assert _finals(trial) and _finals(trial) == pytest.approx(_finals(fresh[seed]), rel=1e-6, abs=1e-7)
    tags = {r.data.tags["ablate.seed"]: r.data.tags.get("ablate.continued_from") for r in mlflow_runs(short, "wsd_long")}
    assert tags["0"].endswith("· seed 0 · step 9") and tags["0"].startswith(first[0].user_attrs["cell_label"])


def test_a_cosine_study_keeps_no_stable_checkpoint_and_continues_nothing(tmp_path):
    write_spec(tmp_path, name="cos", train={**SPEC["train"], "steps": 6})
    cli(tmp_path, "run", "spec.yaml")
    write_spec(tmp_path, name="cos_long", train={**SPEC["train"], "steps": 12})
    assert "continues" not in cli(tmp_path, "plan", "spec.yaml").stdout
    (trial,) = _replicates(tmp_path, "cos").values()
    assert "continued_from" not in trial.user_attrs and trial.user_attrs["steps_trained"] == 6
    assert not (tmp_path / ".ablate" / "checkpoints" / "stable").exists()


# Digits learns steadily at this rate: over the last fifth of its 21-step stable phase seed 0 is
# still improving at 24 steps (its trend test's t is 4.2 on 3 df, the bound 2.35), seed 2 has
# converged (t 0.0): flags far from the edge.
UNTIL = {"name": "uc", "task": {"name": "digits"}, "model": {"d_model": 16, "state_dim": 16, "layers": 1, "heads": 2},
         "train": {"steps": 24, "batch_size": 32, "lr": 0.05, "eval_every": 2, "log_every": 4, "schedule": "wsd",
                   "warmup_steps": 2, "decay_steps": 3}, "probes": {"every": 8, "batch": 8}, "seeds": [0, 2]}


def _write(root: Path, spec: dict) -> None:
    (root / "spec.yaml").write_text(yaml.safe_dump(spec))


def test_until_converged_extends_the_improving_run_once_per_budget_and_equals_scratch(tmp_path, monkeypatch):
    """Seed 0 (improving) is extended 24 → 40 (48 capped at max_steps), the extension queued once
    and branching from the declared run's stable-phase checkpoint; seed 2 (converged) is not.
    The item's result, its 40-step run, equals training 40 steps from scratch. (Two processes
    queueing at once: tests/test_runner_study_extend.py.)"""
    from ablate import design
    from ablate.runner import plan as planning
    from ablate.spec import ProbeSpec
    from ablate.training import run_trial

    _write(tmp_path, {**UNTIL, "train": {**UNTIL["train"], "until_converged": {"max_steps": 40, "extend_by": 24}}})
    spec = design.load(tmp_path / "spec.yaml")
    assert planning.until_converged_lines(spec, f"sqlite:///{tmp_path / '.ablate' / 'optuna.db'}") == [
        "until converged: 2 of 2 replicates may still train, up to 40 steps each (32 more steps at most)"]
    cli(tmp_path, "run", "spec.yaml", "--checkpoint-every", "0")
    trials = load(tmp_path, "uc").trials
    assert len(trials) == 3 and {t.state for t in trials} == {TrialState.COMPLETE}  # nothing twice, none failed
    by_seed = {s: [t for t in trials if t.user_attrs["seed"] == s] for s in (0, 2)}
    assert [t.user_attrs["config"]["train"]["steps"] for t in by_seed[0]] == [24, 40]
    assert by_seed[0][0].user_attrs["converged"] is False
    assert len(by_seed[2]) == 1 and by_seed[2][0].user_attrs["converged"] is True
    first, third = by_seed[0]
    assert third.user_attrs["extended_from"] == {"number": first.number, "steps": 24}
    assert third.user_attrs["continued_from"]["step"] == 21  # the declared run's stable end
    assert third.user_attrs["steps_trained"] == 19
    status = " ".join(cli(tmp_path, "status", "uc").stdout.split())
    assert "extended: baseline · seed 0: 24 → 40 of max 40 steps" in status, status
    assert "continued: baseline · seed 0 (40 steps) from baseline" in status and "at step 21" in status

    monkeypatch.setenv("ABLATE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("ABLATE_FAULT", "")
    config = design.cells(design.validate({**UNTIL, "train": {**UNTIL["train"], "steps": 40}}))[0].config

    class Quiet:
        history: list = []

        def log_metrics(self, step, values): ...

        def log_curves(self, rows): ...

    fresh = run_trial(config, 0, ProbeSpec.model_validate(UNTIL["probes"]), Quiet())
    want = {**fresh.metrics, **fresh.convergence}
    assert _finals(third) and _finals(third) == pytest.approx({k: want[k] for k in _finals(third)}, rel=1e-6, abs=1e-7)


def test_importing_the_runner_leaves_optunas_logging_alone_and_a_worker_quiets_it(tmp_path):
    """Optuna configures its logger (level INFO) on first use, so the level is set first, the
    way a program that imports ablate would set it; a fresh process, so no earlier import counts."""
    code = """if True:
        import optuna
        optuna.logging.set_verbosity(optuna.logging.DEBUG)
        import ablate.runner.queue, ablate.runner.worker
        print(optuna.logging.get_verbosity())
        from ablate.runner import worker
        from ablate.stores import resolve
        try:
            worker.work("none", resolve(home_dir="home"))
        except Exception:  # no such study: the worker has started all the same
            pass
        print(optuna.logging.get_verbosity())
    """
    res = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env={k: v for k, v in os.environ.items() if k not in ("ABLATE_STORAGE", "ABLATE_TRACKING_URI")})
    assert res.stdout.split() == [str(optuna.logging.DEBUG), str(optuna.logging.WARNING)], res.stderr


def test_a_worker_whose_claim_came_just_before_a_peer_queued_items_stays_and_trains_them(tmp_path, monkeypatch):
    """A peer's sequential look queues the next seeds between this worker's empty claim and its
    count of running items (none: the peer has not claimed any yet). The worker looks again and
    trains them: it ended there, leaving a two-worker run's later looks to one worker."""
    from ablate import design
    from ablate.runner import phases, worker
    from ablate.runner import study as st
    from ablate.stores import Stores

    s = design.validate(SPEC)
    where = Stores(f"sqlite:///{tmp_path / 'optuna.db'}", f"sqlite:///{tmp_path / 'mlflow.db'}", None)
    st.prepare(s, design.items(s), where)
    real, claims = phases.claim, []

    def claim(study):  # the first saw the queue empty, a moment before the peer filled it
        claims.append(study)
        return None if len(claims) == 1 else real(study)

    monkeypatch.setattr(phases, "claim", claim)
    assert worker.work(s.name, where) == {"complete": len(design.items(s))}
