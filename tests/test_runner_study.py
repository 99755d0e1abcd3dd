"""A study's MLflow runs settled as Optuna recorded them (``ablate.runner.study.settle_runs``):
once per change of the finished trials. (Reuse: tests/test_runner_reuse.py; orphans, ``ls``,
``rm``: tests/test_runner_housekeeping.py; training until converged: test_runner_study_extend.py.)
"""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from cell_store import spec, where
from optuna.trial import TrialState

from ablate import design
from ablate.runner import phases, queue
from ablate.runner import study as st
from ablate.stores import Stores


@pytest.fixture
def tmp_path(shm_tmp_path: Path) -> Path:
    return shm_tmp_path



def _recorded_then_killed(study: optuna.Study, stores: Stores) -> str:
    """One item recorded COMPLETE whose MLflow run was never ended (a kill between the two)."""
    from ablate.runner import tracking

    trial = phases.claim(study)
    attrs = phases.prepare_item(study, trial)
    run = tracking.TrialRun(stores, study.study_name, study.user_attrs.get("mlflow_parent_run_id"),
                            attrs["item"], attrs["config"], {"ablate.cell_id": attrs["cell_id"],
                                                             "ablate.trial_number": str(trial.number)})
    trial.set_user_attr("mlflow_run_id", run.run_id)
    queue.finish(study, trial, TrialState.COMPLETE, {"val_accuracy": 0.5, "test_accuracy": 0.5,
                                                     "status": "complete"}, 0.5)
    return run.run_id


def test_runs_are_settled_once_per_change_of_the_finished_trials(tmp_path):
    """A full settle is skipped while no trial finished since the last one (it costs MLflow's import on
    every idle `ablate run`), and never hides a run a later kill left RUNNING."""
    from ablate.runner import tracking

    stores = where(tmp_path)
    s = spec("settle")
    st.prepare(s, design.items(s), stores)
    study = st.open_study("settle", stores)
    first = _recorded_then_killed(study, stores)
    assert [r.run_id for r in tracking.running_runs(stores.tracking, "settle")] == [first]
    assert st.settle_runs(study, stores.tracking) == 1
    assert tracking.running_runs(stores.tracking, "settle") == []
    assert study.user_attrs[st.RUNS_SETTLED]
    assert st.settle_runs(study, stores.tracking) == 0
    second = _recorded_then_killed(study, stores)  # the finished set changed: the next settle looks again
    assert st.settle_runs(study, stores.tracking) == 1
    assert tracking.running_runs(stores.tracking, "settle") == []
    assert second != first


def _parent(stores: Stores, study: optuna.Study):
    from ablate.runner import tracking

    return tracking.client(stores.tracking).get_run(study.user_attrs["mlflow_parent_run_id"]).info.status


def _with_parent(name: str, stores: Stores) -> optuna.Study:
    s = spec(name)
    st.ensure_parent_run(st.prepare(s, design.items(s), stores).study, stores)
    return st.open_study(name, stores)


def test_a_parent_run_left_running_once_all_is_done_is_ended_by_the_next_settling(tmp_path):
    """Every item recorded, the workers killed before one ended the parent run (and a trial's run):
    the next settling ends both, once; an old store's mark (written before parents were settled)
    does not hide them."""
    from cell_store import finish_all

    stores = where(tmp_path)
    study = _with_parent("parent", stores)
    assert st.parent_status(study) is None  # items waiting: the parent stays open
    finish_all(study, stores=stores)
    study.set_user_attr("ablate.runs_settled", st.finished_mark(study))  # the old mark: ignored
    assert _parent(stores, study) == "RUNNING" and st.parent_status(study) == "FINISHED"
    assert st.settle_runs(study, stores.tracking) == 1
    assert _parent(stores, study) == "FINISHED"
    assert st.settle_runs(study, stores.tracking) == 0  # marked: no MLflow until a trial finishes again


def test_a_parent_ends_failed_when_an_item_errored_and_diverged_items_are_results(tmp_path):
    """A diverged item is a result (FINISHED); an item failed with an error is not (FAILED)."""
    from cell_store import finish_all

    stores = where(tmp_path)
    study = _with_parent("diverging", stores)
    finish_all(study, lambda attrs: "diverged" if attrs["seed"] == 0 else None, stores)
    assert st.parent_status(study) == "FINISHED"
    (tmp_path / "other").mkdir()
    stores2 = where(tmp_path / "other")
    failing = _with_parent("failing", stores2)
    finish_all(failing, lambda attrs: "error" if attrs["seed"] == 0 else None, stores2)
    assert st.parent_status(failing) == "FAILED"
    assert st.settle_runs(failing, stores2.tracking) == 1 and _parent(stores2, failing) == "FAILED"


def test_looking_a_study_up_where_there_is_no_store_creates_none(tmp_path):
    """``ablate rm``, ``keep`` and ``worker`` of a study on an empty home say there is no store
    and leave no SQLite file behind."""
    import pytest

    from ablate.runner.study import StorageError, open_study
    from ablate.stores import resolve

    stores = resolve(home_dir=tmp_path / "home", create=False)
    for read_only in (False, True):
        with pytest.raises(StorageError, match="there is no store at"):
            open_study("x", stores, read_only=read_only)
    assert not (tmp_path / "home").exists()


def test_the_commands_that_look_a_study_up_write_nothing_on_an_empty_home(tmp_path):
    import os
    import subprocess

    from support import ABLATE

    env = {**os.environ, "ABLATE_HOME": str(tmp_path / "home")}
    for args in (["rm", "x", "--yes"], ["keep", "x", "y"], ["worker", "x"], ["compare", "x", "y"], ["status", "x"],
                 ["report", "x"]):
        res = subprocess.run([*ABLATE, *args], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
        assert res.returncode == 1 and "no study named 'x': there is no store at" in res.stderr, (args, res.stderr)
        assert not list(tmp_path.iterdir()), args
