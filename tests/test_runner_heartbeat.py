"""ablate.runner.heartbeat: a running trial's beat records its progress within PROGRESS_S, a nested
heartbeat only lends its progress (one thread per trial), and a trial taken away sets ``lost``."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable

import optuna
import pytest
from optuna.trial import TrialState

from ablate.runner import heartbeat
from ablate.runner.heartbeat import Heartbeat
from ablate.runner.study import storage


def wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


@pytest.fixture
def running(tmp_path, monkeypatch) -> tuple[optuna.Study, optuna.Trial]:
    monkeypatch.setattr(heartbeat, "PROGRESS_S", 0.05)
    study = optuna.create_study(study_name="beat", storage=storage(f"sqlite:///{tmp_path / 'optuna.db'}"))
    return study, study.ask()


def step_of(study: optuna.Study, number: int) -> object:
    return study.trials[number].user_attrs.get("step")


def test_progress_is_recorded_and_a_nested_heartbeat_only_lends_it(running):
    study, trial = running
    # Threads of this test's own, not the process's count: a thread an earlier test left may end meanwhile.
    before = set(threading.enumerate())
    progress = {"step": 3}
    with Heartbeat(study, trial.number) as outer:
        with Heartbeat(study, trial.number, lambda: dict(progress)) as inner:
            beating = set(threading.enumerate()) - before
            assert inner.lost is outer.lost and len(beating) == 1  # one beat per trial
            wait_for(lambda: step_of(study, trial.number) == 3)
            progress["step"] = 7
            wait_for(lambda: step_of(study, trial.number) == 7)
        progress["step"] = 9  # lent back: the outer beat no longer reads it
        time.sleep(0.3)
        assert step_of(study, trial.number) == 7
    assert not any(t.is_alive() for t in beating) and trial.number not in Heartbeat._active


def test_a_trial_taken_away_sets_lost(running):
    study, trial = running
    steps = itertools.count(1)  # a moving step: beats every PROGRESS_S, not every HEARTBEAT_S
    with Heartbeat(study, trial.number, lambda: {"step": next(steps)}) as beat:
        wait_for(lambda: step_of(study, trial.number) is not None)
        assert not beat.lost.is_set()
        study.tell(trial, state=TrialState.FAIL)  # as another process declaring this worker dead
        wait_for(beat.lost.is_set)
