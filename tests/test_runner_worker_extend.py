"""Training until converged under kill -9, with real worker processes (ablate.runner.worker and the
until-converged section of ablate.runner.study): a worker killed at the end of a run still
improving, at each point between its training's end and its extension's queueing, leaves a study
that the other worker finishes with the extension queued once, every item finished once per
budget, nothing RUNNING, and the extension continuing from the kept stable-phase checkpoint.

The queueing logic alone, in-process: tests/test_runner_study_extend.py."""

from __future__ import annotations

import signal
import uuid
from collections import Counter
from pathlib import Path

import optuna
import processes as procs
import pytest
import yaml
from optuna.trial import TrialState

# The 24-step spec of tests/test_runner_worker.py's until-converged test: Digits at this rate has
# seed 0 still improving at 24 steps (extended to 40, the most) and seed 2 converged.
UNTIL = {"task": {"name": "digits"}, "model": {"d_model": 16, "state_dim": 16, "layers": 1, "heads": 2},
         "train": {"steps": 24, "batch_size": 32, "lr": 0.05, "eval_every": 2, "log_every": 4, "schedule": "wsd",
                   "warmup_steps": 2, "decay_steps": 3, "until_converged": {"max_steps": 40, "extend_by": 24}},
         "probes": {"every": 8, "batch": 8}, "seeds": [0, 2]}
STABLE_END = 21  # the 24-step run's: 24 − decay_steps
# Training's end (nothing recorded), Optuna's record made (the MLflow run still RUNNING), and both
# ended but the extension not queued: each a kill there must neither lose nor double it.
POINTS = ["record", "committed", "extend"]


def _trials(storage: str, name: str) -> list[optuna.trial.FrozenTrial]:
    from ablate.runner.study import storage as open_storage

    try:
        return optuna.load_study(study_name=name, storage=open_storage(storage)).get_trials(deepcopy=False)
    except KeyError:  # not queued yet
        return []


def _trial_runs(tracking: str, name: str) -> list:
    from mlflow.tracking import MlflowClient

    mlc = MlflowClient(tracking)
    exp = mlc.get_experiment_by_name(name)
    return [r for r in mlc.search_runs([exp.experiment_id], max_results=1000)
            if r.data.tags.get("ablate.role") == "trial"]


def kill_at_the_improving_runs_end(root: Path, point: str, storage: str, tracking: str, name: str) -> None:
    """A victim worker queues the study, claims the improving seed's run and is killed at ``point``
    of its end, while a second worker, started once the victim trains, runs the other seed and
    then whatever the kill left; check what the stores hold afterwards."""
    from ablate.runner.study import run_budget

    (root / "spec.yaml").write_text(yaml.safe_dump({"name": name, **UNTIL}))
    where = ("--storage", storage, "--tracking-uri", tracking)
    # The victim is `ablate run` itself (one worker, in its process): it queues the study and trains.
    victim = procs.spawn(root, "run", "spec.yaml", "--checkpoint-every", "0", *where, ABLATE_FAULT=f"kill@{point}")
    # The oldest item is claimed first: the victim's is seed 0, the one still improving at 24 steps.
    procs.wait_for(lambda: [t.user_attrs.get("seed") for t in _trials(storage, name) if t.state == TrialState.RUNNING]
                   == [0], "the victim to claim seed 0", victim)
    other = procs.spawn(root, "worker", name, "--checkpoint-every", "0", *where)
    _, victim_err = victim.communicate(timeout=300)
    assert victim.returncode == -signal.SIGKILL, victim_err
    assert (root / "fault.mark").read_text() == str(victim.pid)  # killed there, not elsewhere
    out, err = other.communicate(timeout=300)
    assert other.returncode == 0 and "Traceback" not in err, f"{out}\n{err}"

    trials = _trials(storage, name)
    assert not [t for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)], trials
    finished = Counter((t.user_attrs["seed"], run_budget(t.user_attrs)) for t in trials if t.state == TrialState.COMPLETE)
    assert finished == {(0, 24): 1, (0, 40): 1, (2, 24): 1}, finished  # each item once per budget
    (extension,) = [t for t in trials if run_budget(t.user_attrs) == 40]  # queued once, run once
    (declared,) = [t for t in trials if t.state == TrialState.COMPLETE and (t.user_attrs["seed"], run_budget(
        t.user_attrs)) == (0, 24)]
    assert extension.user_attrs["extended_from"] == {"number": declared.number, "steps": 24}
    assert extension.user_attrs["continued_from"]["step"] == STABLE_END  # from the kept checkpoint, not step 0
    assert extension.user_attrs["steps_trained"] == 40 - STABLE_END and extension.user_attrs["steps"] == 40
    seed0 = [t for t in trials if t.user_attrs["seed"] == 0 and run_budget(t.user_attrs) == 24]
    if point == "record":  # nothing was recorded: the killed attempt failed, its retry finished
        assert [(t.state, t.user_attrs.get("failure_kind")) for t in seed0] == [
            (TrialState.FAIL, "killed"), (TrialState.COMPLETE, None)]
    else:  # the record is the commit point: it stands, and nothing ran twice
        assert [t.state for t in seed0] == [TrialState.COMPLETE] and len(trials) == 3

    runs = _trial_runs(tracking, name)
    statuses = Counter(r.info.status for r in runs)
    assert statuses["RUNNING"] == 0, statuses
    recorded = {t.user_attrs["mlflow_run_id"] for t in trials if t.state == TrialState.COMPLETE}
    assert {r.info.run_id for r in runs if r.info.status == "FINISHED"} == recorded
    assert statuses == ({"FINISHED": 3, "KILLED": 1} if point == "record" else {"FINISHED": 3}), statuses


@pytest.fixture
def tmp_path(shm_tmp_path: Path) -> Path:
    return shm_tmp_path


@pytest.mark.slow
@pytest.mark.parametrize("point", POINTS)
def test_kill9_at_an_improving_runs_end_queues_its_extension_once(tmp_path, point):
    home = tmp_path / ".ablate"
    kill_at_the_improving_runs_end(tmp_path, point, f"sqlite:///{home / 'optuna.db'}", f"sqlite:///{home / 'mlflow.db'}",
                                   "uc")


@pytest.mark.slow
@pytest.mark.parametrize("point", POINTS)
def test_kill9_at_an_improving_runs_end_on_postgresql_with_a_tracking_server(tmp_path, point, postgres_db,
                                                                            mlflow_server):
    kill_at_the_improving_runs_end(tmp_path, point, postgres_db, mlflow_server, f"uc-{uuid.uuid4().hex[:8]}")
