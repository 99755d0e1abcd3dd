"""ablate.runner.worker with ``fuse`` (runner/fused.py, issue 47): a worker that claims several items
of one cell and trains them as one model records each exactly as an item trained alone.

In-process workers on real stores (SQLite, MLflow); the study is support.TRAINABLE with 4 seeds (a
tiny listops model, 6 steps). Fused and apart results agree to float32 rounding (``F32``, as
tests/test_training_fused.py: batched products sum in another order)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from optuna.trial import TrialState
from support import TRAINABLE, spec_dict

F32 = 2e-4
SEEDS = 4


@pytest.fixture(autouse=True)
def _home(tmp_path, monkeypatch):
    monkeypatch.setenv("ABLATE_HOME", str(tmp_path / ".ablate"))
    monkeypatch.setenv("ABLATE_CACHE_DIR", str(tmp_path / "cache"))


def _prepare(root: Path, **sets):
    from ablate import design
    from ablate.runner import study as st
    from ablate.stores import Stores

    root.mkdir(parents=True, exist_ok=True)
    s = design.validate(spec_dict(TRAINABLE, seeds=SEEDS, sets=sets))
    where = Stores(f"sqlite:///{root / 'optuna.db'}", f"sqlite:///{root / 'mlflow.db'}", (root / "a").as_uri())
    st.prepare(s, design.items(s), where)
    return s.name, where


def _run(root: Path, fuse: int, **sets):
    from ablate.runner import study as st
    from ablate.runner import worker

    name, where = _prepare(root, **sets)
    events = []
    outcomes = worker.work(name, where, fuse=fuse, emit=lambda event, info: events.append((event, info)))
    return outcomes, st.open_study(name, where).trials, where, events


def _runs(where, name: str = "exec"):
    from mlflow.tracking import MlflowClient

    mlc = MlflowClient(where.tracking)
    exp = mlc.get_experiment_by_name(name)
    return [r for r in mlc.search_runs([exp.experiment_id]) if r.data.tags.get("ablate.role") == "trial"]


def _metrics(trial) -> dict[str, float]:
    return {k: v for k, v in trial.user_attrs.items()
            if k.startswith(("val_", "test_", "train_")) and isinstance(v, float)}


def test_four_seeds_fused_record_what_four_apart_record(tmp_path):
    fused_outcomes, fused, where, events = _run(tmp_path / "fused", fuse=4)
    apart_outcomes, apart, apart_where, _ = _run(tmp_path / "apart", fuse=1)
    assert fused_outcomes == apart_outcomes == {"complete": SEEDS}
    assert [t.state for t in fused] == [TrialState.COMPLETE] * SEEDS
    by_seed = {t.user_attrs["seed"]: t for t in apart}
    for trial in fused:
        alone = by_seed[trial.user_attrs["seed"]]
        mine, theirs = _metrics(trial), _metrics(alone)
        assert mine and set(mine) == set(theirs)
        for key, value in theirs.items():
            assert math.isclose(mine[key], value, rel_tol=F32, abs_tol=F32), key
        assert math.isclose(trial.value, alone.value, rel_tol=F32, abs_tol=F32)
        assert trial.user_attrs["steps"] == alone.user_attrs["steps"]
    # every item its own MLflow run, finished and committed, the one its trial recorded
    runs = {r.info.run_id: r for r in _runs(where)}
    assert len(runs) == SEEDS
    for trial in fused:
        run = runs[trial.user_attrs["mlflow_run_id"]]
        assert run.info.status == "FINISHED" and run.data.tags["ablate.committed"] == "true"
        assert run.data.tags["ablate.seed"] == str(trial.user_attrs["seed"])
        assert math.isclose(run.data.metrics["final/val_accuracy"], trial.user_attrs["val_accuracy"])
    # and every metric it logged (its last value: losses, norms, probes) as the run of its seed apart
    alone = {r.data.tags["ablate.seed"]: r.data.metrics for r in _runs(apart_where)}
    for run in runs.values():
        theirs = alone[run.data.tags["ablate.seed"]]
        assert set(run.data.metrics) == set(theirs)
        for key, value in theirs.items():
            assert math.isclose(run.data.metrics[key], value, rel_tol=F32, abs_tol=F32), key
    assert sum(event == "start" for event, _ in events) == SEEDS


def test_a_replicate_that_diverges_is_recorded_diverged_and_the_others_complete(tmp_path, monkeypatch):
    from ablate import training_fused

    real = training_fused.run_fused
    seen = []

    def one_diverges(configs, seeds, *args, **kwargs):
        seen.append(list(seeds))
        # a divergence bound only the second replicate's state passes (a FREE setting: it fuses)
        configs = [{**c, "train": {**c["train"], "divergence_norm": 1e-12}} if i == 1 else c
                   for i, c in enumerate(configs)]
        return real(configs, seeds, *args, **kwargs)

    monkeypatch.setattr(training_fused, "run_fused", one_diverges)
    outcomes, trials, where, _ = _run(tmp_path, fuse=4)
    assert seen and len(seen[0]) == SEEDS  # the four trained fused
    assert outcomes == {"complete": SEEDS - 1, "diverged": 1}
    diverged = [t for t in trials if t.state == TrialState.FAIL]
    assert len(diverged) == 1 and diverged[0].user_attrs["failure_kind"] == "diverged"
    assert diverged[0].user_attrs["seed"] == seen[0][1]
    assert sum(t.state == TrialState.COMPLETE for t in trials) == SEEDS - 1
    statuses = sorted(r.info.status for r in _runs(where))
    assert statuses == ["FAILED"] + ["FINISHED"] * (SEEDS - 1)


def test_a_replicate_its_pruner_stops_is_recorded_pruned_and_the_others_complete(tmp_path, monkeypatch):
    """The pruner's exception (``on_eval``) ends its replicate alone, recorded PRUNED as alone."""
    from ablate.runner import phases, queue

    class StopAt3:
        step = 0

        def __call__(self, step: int, val: dict) -> None:
            self.step = step
            if step >= 3:
                raise queue.Pruned(f"pruned at step {step}")

    monkeypatch.setattr(phases, "pruning", lambda study, trial, attrs: StopAt3() if attrs["seed"] == 2 else None)
    outcomes, trials, where, _ = _run(tmp_path, fuse=4)
    assert outcomes == {"complete": SEEDS - 1, "pruned": 1}
    (pruned,) = [t for t in trials if t.state == TrialState.PRUNED]
    assert pruned.user_attrs["seed"] == 2 and pruned.user_attrs["steps"] == 3
    assert pruned.user_attrs["status"] == "pruned"
    assert sorted(r.info.status for r in _runs(where)) == ["FINISHED"] * SEEDS


def _spy(monkeypatch) -> tuple[list, list]:
    """Each fused pass's (seeds, steps its replicates resume after) and each apart trial's seed."""
    from ablate import training, training_fused

    fused, apart = [], []
    real_fused, real_trial = training_fused.run_fused, training.run_trial

    def spy_fused(configs, seeds, *args, saved=None, **kwargs):
        fused.append((list(seeds), [s["step"] if s else 0 for s in saved or [None] * len(seeds)]))
        return real_fused(configs, seeds, *args, saved=saved, **kwargs)

    def spy_trial(config, seed, *args, **kwargs):
        apart.append(seed)
        return real_trial(config, seed, *args, **kwargs)

    monkeypatch.setattr(training_fused, "run_fused", spy_fused)
    monkeypatch.setattr(training, "run_trial", spy_trial)
    return fused, apart


def _killed_attempts(study, every: int, items: list) -> dict[str, int]:
    """The resume checkpoints a fused worker killed after its last one (every ``every`` steps)
    leaves for ``items``: written by one fused pass of their configurations; their steps."""
    import torch

    from ablate.spec import ProbeSpec
    from ablate.stores import checkpoint_dir
    from ablate.training_fused import run_fused

    paths = [checkpoint_dir() / study.study_name / f"{t.user_attrs['item'].replace('/', '-')}.pt" for t in items]
    probes = ProbeSpec.model_validate(study.user_attrs["spec"]["probes"])
    run_fused([t.user_attrs["config"] for t in items], [t.user_attrs["seed"] for t in items], probes,
              checkpoints=paths, checkpoint_every=every)  # complete, its last checkpoint left behind
    return {t.user_attrs["item"]: torch.load(p, weights_only=False)["step"] for t, p in zip(items, paths, strict=True)}


def test_items_a_killed_fused_worker_left_resume_fused_from_their_checkpoints(tmp_path, monkeypatch):
    """Every item has the checkpoint a killed fused attempt wrote at step 4: the next worker fuses
    them from there, records each resumed at 4 (its trial and run), and every metric as an
    uninterrupted fused run's."""
    from ablate.runner import study as st
    from ablate.runner import worker

    name, where = _prepare(tmp_path / "resumed")
    study = st.open_study(name, where)
    assert set(_killed_attempts(study, 2, study.trials).values()) == {4}
    fused, apart = _spy(monkeypatch)
    assert worker.work(name, where, fuse=4) == {"complete": SEEDS}
    seeds = [t.user_attrs["seed"] for t in study.trials]
    assert fused == [(seeds, [4] * SEEDS)] and apart == []
    _, whole, whole_where, _ = _run(tmp_path / "whole", fuse=4)
    expected = {t.user_attrs["item"]: t for t in whole}
    for trial in st.open_study(name, where).trials:
        assert trial.state == TrialState.COMPLETE and trial.user_attrs["resumed_at"] == 4
        assert "resumed_at" not in expected[trial.user_attrs["item"]].user_attrs
        mine, theirs = _metrics(trial), _metrics(expected[trial.user_attrs["item"]])
        assert mine and set(mine) == set(theirs)
        for key, value in theirs.items():
            assert math.isclose(mine[key], value, rel_tol=F32, abs_tol=F32), key
    # each run holds every metric the uninterrupted one logged, steps 0 to 4 replayed from its checkpoint
    theirs = {r.data.tags["ablate.seed"]: r for r in _runs(whole_where)}
    for run in _runs(where):
        assert run.data.tags["ablate.resumed_at"] == "4"
        other = theirs[run.data.tags["ablate.seed"]].data.metrics
        assert set(run.data.metrics) == set(other)
        for key, value in other.items():
            assert math.isclose(run.data.metrics[key], value, rel_tol=F32, abs_tol=F32), key


def test_a_resumed_item_records_its_step_with_its_start_fused_or_apart(tmp_path, monkeypatch):
    """The step an item resumes from is on its trial from its start, not only with its result: the
    live view's start line says it (``progress.start_line``). Read as the group starts training:
    two items resume step 4 fused, one step 3 apart, one has no checkpoint."""
    from ablate import training, training_fused
    from ablate.runner import progress, worker
    from ablate.runner import study as st

    name, where = _prepare(tmp_path)
    study = st.open_study(name, where)
    trials = study.trials
    _killed_attempts(study, 2, trials[:2])
    _killed_attempts(study, 3, trials[2:3])
    seen: dict[int, int | None] = {}
    real_fused, real_trial = training_fused.run_fused, training.run_trial

    def starting(train):
        def call(*args, **kwargs):
            for t in st.open_study(name, where).get_trials(states=(TrialState.RUNNING,)):
                assert t.user_attrs[progress.ATTEMPT] == t.number  # its own start, not a predecessor's
                seen.setdefault(t.number, t.user_attrs.get("resumed_at"))
            return train(*args, **kwargs)
        return call

    monkeypatch.setattr(training_fused, "run_fused", starting(real_fused))
    monkeypatch.setattr(training, "run_trial", starting(real_trial))
    assert worker.work(name, where, fuse=4) == {"complete": SEEDS}
    assert [seen[t.number] for t in trials] == [4, 4, 3, None]


def test_items_that_cannot_fuse_train_apart_in_the_group(tmp_path, monkeypatch):
    """In a group whose items resume checkpoints, those of the step most of them start after train
    fused; one whose checkpoint is of another step, and one with none, train apart, each from where
    it starts, to an uninterrupted run's result."""
    from ablate.runner import study as st
    from ablate.runner import worker

    name, where = _prepare(tmp_path)
    study = st.open_study(name, where)
    trials = study.trials
    assert set(_killed_attempts(study, 2, trials[:2]).values()) == {4}
    assert set(_killed_attempts(study, 3, trials[2:3]).values()) == {3}
    fused, apart = _spy(monkeypatch)
    outcomes = worker.work(name, where, fuse=4)
    assert outcomes == {"complete": SEEDS}
    assert fused == [([t.user_attrs["seed"] for t in trials[:2]], [4, 4])]
    assert apart == [t.user_attrs["seed"] for t in trials[2:]]
    done = st.open_study(name, where).trials
    assert [t.user_attrs.get("resumed_at") for t in done] == [4, 4, 3, None]
    expected = {t.user_attrs["item"]: t for t in _run(tmp_path / "whole", fuse=4)[1]}
    for trial in done:
        mine, theirs = _metrics(trial), _metrics(expected[trial.user_attrs["item"]])
        assert mine and set(mine) == set(theirs)
        for key, value in theirs.items():
            assert math.isclose(mine[key], value, rel_tol=F32, abs_tol=F32), key


def test_tuning_trials_of_a_cell_train_fused_and_so_do_its_replicates_after_them(tmp_path, monkeypatch):
    from ablate import training_fused

    real, calls = training_fused.run_fused, []

    def spy(configs, seeds, *args, **kwargs):
        calls.append(sorted({c["train"]["lr"] for c in configs}))
        return real(configs, seeds, *args, **kwargs)

    monkeypatch.setattr(training_fused, "run_fused", spy)
    tune = {"trials": 4, "space": {"train.lr": {"low": 1e-4, "high": 1e-1, "log": True}}}
    from ablate import design
    from ablate.runner import study as st
    from ablate.runner import worker
    from ablate.stores import Stores

    s = design.validate(spec_dict(TRAINABLE, seeds=2, tune=tune))
    where = Stores(f"sqlite:///{tmp_path / 'optuna.db'}", f"sqlite:///{tmp_path / 'mlflow.db'}", None)
    st.prepare(s, design.items(s), where)
    assert worker.work(s.name, where, fuse=4) == {"complete": 6}
    trials = st.open_study(s.name, where).trials
    tuned = [t for t in trials if t.user_attrs["phase"] == "tune"]
    lrs = sorted(t.user_attrs["config"]["train"]["lr"] for t in tuned)
    assert len(calls) == 2 and calls[0] == lrs  # the four sampled settings in one fused pass
    best = [t.user_attrs["config"]["train"]["lr"] for t in trials if t.user_attrs["phase"] == "replicate"]
    assert calls[1] == sorted(set(best)) and len(set(best)) == 1  # then both replicates, with the best


def test_without_fuse_the_worker_fuses_as_many_as_default_fuse_picks(tmp_path, monkeypatch):
    """``fuse=0`` (``--fuse`` not given): the worker claims up to ``default_fuse``'s K for the
    device and the item's configuration; with 1 there, it trains one item at a time."""
    from ablate import training_fused

    real, calls, asked = training_fused.run_fused, [], []

    def spy(configs, seeds, *args, **kwargs):
        calls.append(list(seeds))
        return real(configs, seeds, *args, **kwargs)

    def picks(k):
        def default_fuse(device, config):
            asked.append((device, config["task"]["name"]))
            return k
        return default_fuse

    monkeypatch.setattr(training_fused, "run_fused", spy)
    monkeypatch.setattr(training_fused, "default_fuse", picks(3))
    outcomes, _, _, _ = _run(tmp_path / "three", fuse=0)
    assert outcomes == {"complete": SEEDS} and asked[0] == ("cpu", "listops")
    assert [len(c) for c in calls] == [3, 1]  # three fused, then the fourth alone, fused too (the same bits)
    calls.clear()
    monkeypatch.setattr(training_fused, "default_fuse", picks(1))
    assert _run(tmp_path / "one", fuse=0)[0] == {"complete": SEEDS} and calls == []


def test_run_passes_its_fuse_to_every_worker_it_starts_even_1():
    """A worker's own default is 0 (chosen by device and size): ``ablate run --fuse 1`` must say 1."""
    from ablate.runner import pool
    from ablate.stores import Stores

    stores = Stores("sqlite:///x.db", "sqlite:///y.db", None)
    for fuse in (0, 1, 4):
        cmd, _ = pool.worker_command("study", stores, "cpu", 1, 50, fuse=fuse)
        assert cmd[cmd.index("--fuse") + 1] == str(fuse)


def test_claim_fusable_takes_items_of_the_first_ones_cell_and_phase_only(tmp_path):
    from ablate.runner import phases
    from ablate.runner import study as st

    name, where = _prepare(tmp_path, **{"train.steps": 6})
    study = st.open_study(name, where)
    first = phases.claim(study)
    more = phases.claim_fusable(study, first, 2)
    assert len(more) == 2 and len({t.number for t in [first, *more]}) == 3
    assert {t.user_attrs["cell_id"] for t in more} == {first.user_attrs["cell_id"]}
    rest = phases.claim_fusable(study, first, 5)
    assert len(rest) == SEEDS - 3  # only what was left
    assert phases.claim_fusable(study, first, 5) == []
    assert not phases.fusable_item({**first.user_attrs, "budget": 12})
    assert not phases.fusable_item({**first.user_attrs, "config": {**first.user_attrs["config"], "train": {
        **first.user_attrs["config"]["train"], "schedule": "wsd"}}})
    assert phases.fusable_item({**first.user_attrs, "phase": "tune"})


# --- through the command line, with real worker processes ---------------------------------------


def _cli(root: Path, *args: str, **env: str):
    import os
    import subprocess

    from support import ABLATE

    full = {**os.environ, "ABLATE_HOME": str(root / ".ablate"), "ABLATE_CACHE_DIR": str(root / "cache"),
            "ABLATE_HEARTBEAT_S": "1", "ABLATE_GRACE_S": "4", "OMP_NUM_THREADS": "1", **env}
    return subprocess.Popen([*ABLATE, *args], cwd=root, env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _study(root: Path, url: str | None = None):
    import optuna

    from ablate.runner.study import storage

    url = url or f"sqlite:///{root / '.ablate' / 'optuna.db'}"
    return optuna.load_study(study_name="exec", storage=storage(url))


def _spec(root: Path, **train) -> None:
    import yaml

    root.mkdir(parents=True, exist_ok=True)
    raw = spec_dict(TRAINABLE, seeds=SEEDS, train={**TRAINABLE["train"], **train})
    (root / "spec.yaml").write_text(yaml.safe_dump(raw))


def test_run_with_fuse_and_two_workers_records_every_item_once(tmp_path):
    _spec(tmp_path)
    proc = _cli(tmp_path, "run", "spec.yaml", "--workers", "2", "--fuse", "2")
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, (out, err)
    assert f"{SEEDS} done, 0 failed" in out
    trials = _study(tmp_path).trials
    assert len(trials) == SEEDS and {t.state for t in trials} == {TrialState.COMPLETE}


def _fused_worker_past(root: Path, step: int, **stores: str):
    """A worker with --fuse 4 on a queued study, once its four items have all trained past ``step``."""
    import time

    queued = _cli(root, "run", "spec.yaml", "--workers", "0", **stores)
    assert queued.wait(timeout=300) == 0
    proc = _cli(root, "worker", "exec", "--fuse", str(SEEDS), ABLATE_PROGRESS_S="0.2", **stores)
    deadline = time.time() + 300
    while time.time() < deadline:
        running = [t for t in _study(root, stores.get("ABLATE_STORAGE")).trials if t.state == TrialState.RUNNING]
        if len(running) == SEEDS and min(t.user_attrs.get("step") or 0 for t in running) > step:
            return proc
        time.sleep(0.3)
    raise AssertionError(f"the fused items did not train together in time: {proc.communicate(timeout=60)}")


def test_sigint_to_a_fused_worker_requeues_all_its_items(tmp_path):
    import signal

    _spec(tmp_path, steps=600, eval_every=100, log_every=100)
    proc = _fused_worker_past(tmp_path, 50)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "Traceback" not in err, err
    trials = _study(tmp_path).trials
    interrupted = [t for t in trials if t.state == TrialState.FAIL]
    assert len(interrupted) == SEEDS and {t.user_attrs["failure_kind"] for t in interrupted} == {"interrupted"}
    assert sum(t.state == TrialState.WAITING for t in trials) == SEEDS
    runs = _runs(_where(tmp_path))
    assert len(runs) == SEEDS and {r.info.status for r in runs} == {"KILLED"}


def _where(root: Path):
    from ablate.stores import Stores

    home = root / ".ablate"
    return Stores(f"sqlite:///{home / 'optuna.db'}", f"sqlite:///{home / 'mlflow.db'}", None)


@pytest.mark.parametrize("store", ["sqlite", "postgresql"])
def test_a_killed_fused_worker_s_items_are_requeued_and_resume_from_their_checkpoints(tmp_path, store, request):
    """kill -9 once every fused item wrote its checkpoint; a fresh fused worker re-queues all four,
    each resumes from its own (its record says from which step: none trains step 1 again), and every
    item completes with the metrics of an uninterrupted fused run."""
    import os
    import signal
    import time

    import torch

    stores = {} if store == "sqlite" else {"ABLATE_STORAGE": request.getfixturevalue("postgres_db"),
                                           "ABLATE_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    train = {"steps": 300, "eval_every": 50, "log_every": 50}
    _spec(tmp_path, **train)
    victim = _fused_worker_past(tmp_path, 0, **stores)
    folder = tmp_path / ".ablate" / "checkpoints"
    deadline = time.time() + 300
    while len(list(folder.rglob("*.pt"))) < SEEDS and time.time() < deadline and victim.poll() is None:
        time.sleep(0.1)
    if victim.poll() is None:  # else it ended without the checkpoints: the assertion below says so
        os.kill(victim.pid, signal.SIGKILL)
    victim.wait()
    saved = {path.stem: torch.load(path, weights_only=False)["step"] for path in folder.rglob("*.pt")}
    assert len(saved) == SEEDS and all(0 < step < train["steps"] for step in saved.values()), saved
    rerun = _cli(tmp_path, "worker", "exec", "--fuse", str(SEEDS), **stores)  # after the grace period
    reference = tmp_path / "uninterrupted"
    _spec(reference, **train)
    whole = _cli(reference, "run", "spec.yaml", "--workers", "1", "--fuse", str(SEEDS))
    for proc in (rerun, whole):
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, (out, err)
    trials = _study(tmp_path, stores.get("ABLATE_STORAGE")).trials
    killed = [t for t in trials if t.state == TrialState.FAIL]
    assert len(killed) == SEEDS and {t.user_attrs["failure_kind"] for t in killed} == {"killed"}
    done = {t.user_attrs["item"]: t for t in trials if t.state == TrialState.COMPLETE}
    assert sorted(done) == sorted(t.user_attrs["item"] for t in killed)
    assert not list(folder.rglob("*.pt"))  # each dropped once its item was recorded
    expected = {t.user_attrs["item"]: t for t in _study(reference).trials}
    assert {t.state for t in expected.values()} == {TrialState.COMPLETE}
    for item, trial in done.items():
        mine, theirs = _metrics(trial), _metrics(expected[item])
        assert mine and set(mine) == set(theirs)
        for key, value in theirs.items():
            assert math.isclose(mine[key], value, rel_tol=F32, abs_tol=F32), (item, key)
        assert trial.user_attrs["steps"] == train["steps"]
        assert trial.user_attrs["resumed_at"] == saved[item.replace("/", "-")]


def test_two_fused_workers_on_postgresql_record_every_item_once(tmp_path, postgres_db):
    import optuna
    import yaml

    seeds = 2 * SEEDS
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec_dict(TRAINABLE, seeds=seeds)))
    stores = {"ABLATE_STORAGE": postgres_db, "ABLATE_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    assert _cli(tmp_path, "run", "spec.yaml", "--workers", "0", **stores).wait(timeout=300) == 0
    workers = [_cli(tmp_path, "worker", "exec", "--fuse", str(SEEDS), **stores) for _ in range(2)]
    for proc in workers:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, (out, err)
    trials = optuna.load_study(study_name="exec", storage=postgres_db).trials
    assert len(trials) == seeds and {t.state for t in trials} == {TrialState.COMPLETE}
    assert len({t.user_attrs["item"] for t in trials}) == seeds


def test_a_fused_claim_leaves_idle_peers_their_share_of_the_waiting_items(tmp_path, monkeypatch):
    """With ``ABLATE_WORKERS`` (``ablate run`` sets it to its pool's size) a worker that claims the
    first of four items takes, of --fuse 4, its share with the workers not holding an item now: two
    of them with one idle peer, so that the peer trains the other two at once; all four when the
    peer is busy (it will be, for the rest of its own group) or when there is no peer."""
    from ablate.runner import fused, phases, queue, worker
    from ablate.runner import study as st

    name, where = _prepare(tmp_path / "share")
    study = st.open_study(name, where)
    mine = phases.claim(study)
    queue.set_running_attrs(study, mine, {"worker": "killed:1"})  # an earlier attempt's, not a busy peer's
    assert [fused.share(study, "me", mine, workers) for workers in (1, 2, 3, 4, 5)] == [4, 2, 2, 1, 1]
    assert mine.user_attrs["worker"] == "me"  # claimed: a peer claiming now sees it busy
    monkeypatch.setenv("ABLATE_WORKERS", "2")
    assert fused.share(study, "me", mine) == 2
    for text in ("", "0", "two", "-3"):  # unset or unreadable: a worker alone
        monkeypatch.setenv("ABLATE_WORKERS", text)
        assert fused.share(study, "me", mine) == 4
    theirs = phases.claim(study)
    queue.set_running_attrs(study, theirs, {"worker": "elsewhere:1"})  # a peer trains it: not idle
    assert [fused.share(study, "me", mine, workers) for workers in (2, 3)] == [3, 2]  # 2 waiting, with mine
    assert fused.share(study, "elsewhere:1", theirs, 2) == 3  # its own item does not make it busy, mine does
    assert fused.room(4, "cpu", mine, study=study, me="me") == 3  # alone (ABLATE_WORKERS unreadable)
    monkeypatch.setenv("ABLATE_WORKERS", "3")
    assert [fused.room(k, "cpu", mine, 2, d, study, "me") for k, d in ((4, 0), (1, 0), (4, 1))] == [2, 1, 1]

    name, where = _prepare(tmp_path / "busy")
    study = st.open_study(name, where)
    queue.set_running_attrs(study, phases.claim(study), {"worker": "elsewhere:1"})
    fused_seeds, apart = _spy(monkeypatch)
    monkeypatch.setenv("ABLATE_WORKERS", "2")
    assert worker.work(name, where, fuse=4, max_items=3) == {"complete": 3}  # the peer's is left
    assert [len(seeds) for seeds, _ in fused_seeds] == [3] and apart == []
    name, where = _prepare(tmp_path / "idle")
    fused_seeds.clear()
    apart.clear()
    assert worker.work(name, where, fuse=4) == {"complete": SEEDS}
    # two, leaving the idle peer its two; this peer never comes, so each later claim leaves it one,
    # trained fused alone (a seed's bits do not depend on whether its worker claimed it alone)
    assert [len(seeds) for seeds, _ in fused_seeds] == [2, 1, 1] and apart == []
