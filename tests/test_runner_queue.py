"""The study's storage as a work queue (ablate.runner.queue): claiming a queued item is atomic
(concurrent processes never take the same trial), oldest first, through a gate; heartbeats,
failing another process's trial, bounded re-queueing, stale trials, light reads."""

from __future__ import annotations

import multiprocessing as mp
import os
import sqlite3
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from ablate.runner import queue
from ablate.runner.queue import claim
from ablate.runner.study import storage


@pytest.fixture
def tmp_path(shm_tmp_path: Path) -> Path:
    return shm_tmp_path


def _claim_all(url: str, out) -> None:
    study = optuna.load_study(study_name="race", storage=storage(url))
    got = []
    while (trial := claim(study)) is not None:
        got.append(trial.number)
    out.put(got)


def _race(url: str, items: int = 40, processes: int = 4) -> list[int]:
    study = optuna.create_study(study_name="race", storage=storage(url))
    for i in range(items):
        queue.enqueue(study, {"item": str(i)})
    out = mp.get_context("fork").Queue()
    procs = [mp.get_context("fork").Process(target=_claim_all, args=(url, out)) for _ in range(processes)]
    for p in procs:
        p.start()
    claims = [n for _ in procs for n in out.get(timeout=120)]
    for p in procs:
        p.join()
    return claims


def test_concurrent_claims_on_sqlite_take_each_trial_once(tmp_path):
    # Without BEGIN IMMEDIATE, pysqlite lets two processes flip the same WAITING trial (seen:
    # 53 claims of 40 trials with 4 processes).
    assert sorted(_race(f"sqlite:///{tmp_path / 'optuna.db'}")) == list(range(40))


def test_concurrent_claims_on_postgres_take_each_trial_once(postgres_db):
    assert sorted(_race(postgres_db, items=60, processes=6)) == list(range(60))


class HoldCell:
    """A gate like the tuning rule's: holds back the flagged items of one cell."""

    keys = ("cell_id", "after")

    def __init__(self, cell: str | None) -> None:
        self.cell, self.asked = cell, 0

    def hold(self, attrs):
        self.asked += 1
        if attrs.get("after") and attrs.get("cell_id") == self.cell:
            return {"cell_id": self.cell, "after": True}
        return None


def test_a_queue_of_thousands_is_claimed_oldest_first_each_once_past_what_a_gate_holds(tmp_path):
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    study = optuna.create_study(study_name="big", storage=storage(url))
    n = 1500
    for i in range(n):  # every sixth item is a held one: cell c0, flagged
        queue.enqueue(study, {"item": str(i), "cell_id": f"c{i % 3}", "after": i % 2 == 0, "config": {"x": [i] * 50}})
    held = [i for i in range(n) if i % 6 == 0]
    gate = HoldCell("c0")
    first = [claim(study, gate) for _ in range(n - len(held) + 1)]
    assert first[-1] is None
    claimed = [t.number for t in first[:-1]]
    assert claimed == [i for i in range(n) if i % 6]  # oldest first, the held group skipped
    assert all(t.user_attrs["item"] == str(t.number) and t.user_attrs["config"]["x"][0] == t.number
               for t in first[:-1])
    # The held group is skipped inside the query: the gate sees each held item at most once per claim.
    assert gate.asked < 3 * (n - len(held) + 1)
    # Released, the held items come in order, then nothing.
    rest = [claim(study, HoldCell(None)) for _ in range(len(held) + 1)]
    assert rest[-1] is None and [t.number for t in rest[:-1]] == held
    states = queue.entries(study)
    assert len(states) == n and {e.state for e in states} == {TrialState.RUNNING}
    assert queue.count(study, (TrialState.RUNNING,)) == n and queue.count(study, (TrialState.WAITING,)) == 0


def test_claims_and_lookups_use_indexes_not_scans(tmp_path):
    """On SQLite: every SELECT of a gated claim and of a lookup by attribute searches an index
    (a claim stays O(1) in the number of waiting trials)."""
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    path = tmp_path / "optuna.db"
    study = optuna.create_study(study_name="plans", storage=storage(f"sqlite:///{path}"))
    for i in range(300):
        queue.enqueue(study, {"item": str(i), "cell_id": f"c{i % 3}", "after": True, "phase": "tune"})
    seen: list[tuple[str, object]] = []

    def record(conn, cursor, statement, parameters, context, executemany):
        seen.append((statement, parameters))

    event.listen(Engine, "before_cursor_execute", record)
    try:
        assert claim(study, HoldCell("c0")).number == 1
        assert len(queue.entries(study, {"cell_id": "c1", "phase": "tune"}, keys=("item",))) == 100
        assert len(queue.trials(study, {"cell_id": "c2"})) == 100
    finally:
        event.remove(Engine, "before_cursor_execute", record)
    selects = [(s, p) for s, p in seen if s.lstrip().upper().startswith("SELECT")]
    assert len(selects) > 5
    with sqlite3.connect(path) as db:
        for sql, params in selects:
            plan = [row[-1] for row in db.execute("EXPLAIN QUERY PLAN " + sql, params)]
            assert not [step for step in plan if step.startswith("SCAN")], (sql, plan)


def test_beat_fail_and_bounded_requeue(tmp_path):
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    study = optuna.create_study(study_name="life", storage=storage(url))
    queue.enqueue(study, {"item": "a", "cell_id": "c"})
    trial = claim(study)
    assert queue.beat(study, trial.number, {"step": 3})
    assert queue.trial(study, trial.number).user_attrs["step"] == 3
    # Another process declares it dead: attributes set while RUNNING, then FAIL; only once.
    assert queue.fail_running(study, trial.number, {"failure_kind": "killed"})
    assert not queue.fail_running(study, trial.number, {"failure_kind": "killed"})
    assert not queue.beat(study, trial.number, {"step": 4})  # the worker finds its trial taken
    frozen = queue.trial(study, trial.number)
    assert frozen.state == TrialState.FAIL and frozen.user_attrs == {"item": "a", "cell_id": "c", "step": 3,
                                                                     "failure_kind": "killed"}
    with pytest.raises(optuna.exceptions.UpdateFinishedTrialError):
        queue.finish(study, trial, TrialState.COMPLETE, {"status": "complete"}, 1.0)
    assert "status" not in queue.trial(study, trial.number).user_attrs  # the refused record wrote nothing
    # Re-queued as a WAITING copy with its attributes and retry history, within the bound.
    queue.requeue(study, trial.number, max_retry=1)
    again = claim(study)
    assert again.number == trial.number + 1 and again.user_attrs["item"] == "a"
    assert queue.trial(study, again.number).system_attrs["retry_history"] == [trial.number]
    queue.finish(study, again, TrialState.FAIL, {"failure_kind": "oom"})
    assert queue.trial(study, again.number).user_attrs["failure_kind"] == "oom"
    queue.requeue(study, again.number, max_retry=1)  # retried once already: no copy
    assert claim(study) is None and len(study.trials) == 2
    queue.requeue(study, again.number, max_retry=None)  # unbounded (an interruption)
    last = claim(study)
    queue.finish(study, last, TrialState.COMPLETE, {"status": "complete", "step": 9, "val/loss": 0.5}, 0.75)
    done = queue.trial(study, last.number)
    assert done.state == TrialState.COMPLETE and done.value == 0.75
    assert {k: done.user_attrs[k] for k in ("status", "step", "val/loss", "item")} == {
        "status": "complete", "step": 9, "val/loss": 0.5, "item": "a"}  # one write: replaced, added, kept


def test_several_attributes_are_one_write_and_none_on_a_finished_trial(tmp_path):
    from transactions import write_transactions

    study = optuna.create_study(study_name="attrs", storage=storage(f"sqlite:///{tmp_path / 'optuna.db'}"))
    queue.enqueue(study, {"item": "a", "status": "failed", "failure_kind": "oom"})
    trial = claim(study)
    with write_transactions() as writes:
        queue.set_running_attrs(study, trial, {"status": None, "failure_kind": None, "worker": "h:1", "steps": [1, 2]})
    assert [w.attrs() for w in writes] == [{"status", "failure_kind", "worker", "steps"}]
    want = {"item": "a", "status": None, "failure_kind": None, "worker": "h:1", "steps": [1, 2]}
    assert queue.trial(study, trial.number).user_attrs == want and trial.user_attrs == want  # the object's own copy too
    # Another process fails it: its attributes in one write, the FAIL flip in another.
    with write_transactions() as writes:
        assert queue.fail_running(study, trial.number, {"failure_kind": "killed", "failure_message": "silent",
                                                        "worker": "h:2"})
    assert len(writes) == 2 and writes[0].attrs() == {"failure_kind", "failure_message", "worker"}
    with write_transactions() as writes, pytest.raises(optuna.exceptions.UpdateFinishedTrialError):
        queue.set_running_attrs(study, trial, {"steps": 3, "seconds": 1.0})
    assert writes == [] and queue.trial(study, trial.number).user_attrs["worker"] == "h:2"
    assert trial.user_attrs["steps"] == [1, 2] and "seconds" not in trial.user_attrs
    # A WAITING trial (an orphan dropped before any worker claimed it) is unfinished too.
    queue.enqueue(study, {"item": "b"})
    waiting = study.get_trials(deepcopy=False)[-1]
    assert waiting.state == optuna.trial.TrialState.WAITING
    assert queue.fail_running(study, waiting.number, {"status": "dropped"})
    dropped = queue.trial(study, waiting.number)
    assert dropped.state == optuna.trial.TrialState.FAIL and dropped.user_attrs["status"] == "dropped"


def test_a_silent_running_trial_is_stale(tmp_path):
    path = tmp_path / "optuna.db"
    study = optuna.create_study(study_name="stale", storage=storage(f"sqlite:///{path}"))
    for i in range(3):
        queue.enqueue(study, {"item": str(i)})
    quiet, alive = claim(study), claim(study)
    assert queue.stale(study) == []
    with sqlite3.connect(path) as db:  # its worker last beat an hour ago
        db.execute("UPDATE trial_heartbeats SET heartbeat = datetime('now', '-1 hour') WHERE trial_id = "
                   "(SELECT trial_id FROM trials WHERE number = ?)", (quiet.number,))
    assert queue.stale(study) == [quiet.number]
    assert queue.beat(study, alive.number)


def _claim_killed_at_the_flip(url: str) -> None:
    os.environ["ABLATE_FAULT"] = "kill@flip"  # SIGKILL right after the trial turned RUNNING
    claim(optuna.load_study(study_name="flip", storage=storage(url)))


def test_a_worker_killed_the_moment_it_claims_leaves_a_trial_that_goes_stale(tmp_path):
    """Optuna never counts a RUNNING trial without a heartbeat as stale: a worker killed between
    the flip to RUNNING and its first beat would strand the item, and every other worker would
    wait for it for ever. The claim beats before the flip, so the trial has a heartbeat to age."""
    path = tmp_path / "optuna.db"
    url = f"sqlite:///{path}"
    study = optuna.create_study(study_name="flip", storage=storage(url))
    queue.enqueue(study, {"item": "a"})
    child = mp.get_context("fork").Process(target=_claim_killed_at_the_flip, args=(url,))
    child.start()
    child.join(timeout=120)
    assert child.exitcode == -9
    [stranded] = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    with sqlite3.connect(path) as db:  # its grace period has passed
        db.execute("UPDATE trial_heartbeats SET heartbeat = datetime('now', '-1 hour')")
    assert queue.stale(study) == [stranded.number]


def test_light_reads_load_only_what_is_asked(tmp_path):
    study = optuna.create_study(study_name="reads", storage=storage(f"sqlite:///{tmp_path / 'optuna.db'}"))
    for i in range(6):
        queue.enqueue(study, {"item": str(i), "cell_id": f"c{i % 2}", "phase": "tune" if i < 4 else "replicate",
                              "config": {"big": "x" * 1000}})
    claim(study)
    rows = queue.entries(study, keys=("item", "missing"))
    assert [(e.number, e.state, e.user_attrs) for e in rows] == [
        (0, TrialState.RUNNING, {"item": "0"}), *[(i, TrialState.WAITING, {"item": str(i)}) for i in range(1, 6)]]
    assert [e.number for e in queue.entries(study, {"cell_id": "c0", "phase": "tune"})] == [0, 2]
    assert [e.number for e in queue.entries(study, {"cell_id": "c0"}, states=(TrialState.WAITING,))] == [2, 4]
    whole = queue.trials(study, {"cell_id": "c1", "phase": "replicate"})
    assert [t.number for t in whole] == [5] and whole[0].user_attrs["config"] == {"big": "x" * 1000}
    assert [t.number for t in queue.trials(study, states=(TrialState.RUNNING,))] == [0]


def test_a_bad_attribute_key_never_reaches_sql(tmp_path):
    study = optuna.create_study(study_name="keys", storage=storage(f"sqlite:///{tmp_path / 'optuna.db'}"))
    with pytest.raises(ValueError, match="not a lower-case identifier"):
        queue.entries(study, {"cell_id' OR 1=1 --": "x"})


def test_reads_and_writes_across_the_studies_of_a_storage(tmp_path):
    """find (by an indexed attribute, over every study), activity, add (a finished trial written
    whole) and set_finished_attrs (marking a finished trial) — what the cell store across studies uses."""
    import datetime

    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    path = tmp_path / "optuna.db"
    store = storage(f"sqlite:///{path}")
    a = optuna.create_study(study_name="a", storage=store)
    b = optuna.create_study(study_name="b", storage=store)
    for i in range(200):
        queue.enqueue(a, {"item": f"x/{i}", "cell_id": f"c{i % 50}", "config_key": "k"})
    queue.enqueue(b, {"item": "y", "cell_id": "c0"})
    seen: list[tuple[str, object]] = []

    def record(conn, cursor, statement, parameters, context, executemany):
        seen.append((statement, parameters))

    event.listen(Engine, "before_cursor_execute", record)
    try:
        found = queue.find(store, "cell_id", ["c0", "c1"], ("item",))
    finally:
        event.remove(Engine, "before_cursor_execute", record)
    assert [(f.study, f.user_attrs) for f in found][:3] == [("a", {"item": "x/0"}), ("a", {"item": "x/1"}),
                                                           ("a", {"item": "x/50"})]
    assert len(found) == 9 and found[-1].study == "b" and all(f.state == TrialState.WAITING for f in found)
    with sqlite3.connect(path) as db:
        for sql, params in [(s, p) for s, p in seen if s.lstrip().upper().startswith("SELECT")]:
            plan = [row[-1] for row in db.execute("EXPLAIN QUERY PLAN " + sql, params)]
            assert not [step for step in plan if step.startswith(("SCAN trials", "SCAN trial_user"))], (sql, plan)
    assert len(queue.find(store, None, (), None)) == 201 and "config_key" in queue.find(store, None, (), None)[0].user_attrs
    activity = {x.study: x for x in queue.activity(store)}
    assert activity["a"].states == {TrialState.WAITING: 200} and activity["a"].last is None

    started = datetime.datetime(2026, 1, 2, 3, 4, 5)
    queue.add(b, TrialState.COMPLETE, {"item": "z", "cell_id": "c9"}, 0.5, started, started + datetime.timedelta(seconds=9))
    done = optuna.load_study(study_name="b", storage=f"sqlite:///{path}").trials[-1]
    assert done.state == TrialState.COMPLETE and done.value == 0.5 and done.user_attrs["item"] == "z"
    assert done.datetime_start == started and (done.datetime_complete - started).total_seconds() == 9
    assert queue.activity(store)[1].last is not None
    queue.set_finished_attrs(b, [done.number], {"dropped": {"why": "test"}, "item": "z2"})
    again = optuna.load_study(study_name="b", storage=f"sqlite:///{path}").trials[-1]
    assert again.user_attrs == {"item": "z2", "cell_id": "c9", "dropped": {"why": "test"}}


def test_a_requeued_copy_carries_its_item_and_none_of_its_failed_attempt(tmp_path):
    """A re-queued copy is its item again: the item's identity, the setting its attempt chose and
    what resuming that attempt's checkpoint reads (lineage, a pruner's reports); not the attempt's
    worker, start, progress, MLflow run or outcome, which stay on the failed trial (the reports')."""
    from ablate.runner import progress, reuse
    from ablate.runner import study as st
    from ablate.runner.items import BUDGET, EXTENDED_FROM, RETRIED

    item = {"item": "c1/replicate/0-80", "cell_id": "c1", "cell_label": "LRU", "seed": 0, "phase": "replicate",
            "settings": {"model": "LRU"}, "config": {"train": {"steps": 80}}, "config_key": "k1",
            "code_version": "v1", "spec_hash": "h1", "tune": {"objective": {"metric": "val_accuracy"}},
            "after_tune": True, BUDGET: 80, EXTENDED_FROM: {"number": 3, "steps": 40}}
    resumed = {"params": {"train.lr": 0.01}, "tuned_from": "c1/tune/2 (val_accuracy 0.9)",
               "continued_from": {"label": "LRU", "cell": "c1", "seed": 0, "step": 30},
               "checkpoint_warning": "kept checkpoint damaged — trains from step 0",
               "intermediate": {"20": 0.5}, "pruner_attrs": {"completed_rung_0": 0.5}}
    attempt = {"worker": "dead:1", progress.ATTEMPT: 0, "provenance": {"ablate.host": "dead"},
               "mlflow_run_id": "r1", "accumulate": 2, "step": 30, "last_val": {"accuracy": 0.5}, "resumed_at": 10}
    outcome = {"status": "failed", "failure_kind": "oom", "failure_message": "CUDA out of memory",
               "traceback": "Traceback (most recent call last): …"}
    study = optuna.create_study(study_name="copy", storage=storage(f"sqlite:///{tmp_path / 'optuna.db'}"))
    queue.enqueue(study, item)
    trial = claim(study)
    queue.set_running_attrs(study, trial, {**resumed, **attempt})
    queue.finish(study, trial, TrialState.FAIL, outcome)
    queue.requeue(study, trial.number, max_retry=2)
    copy = claim(study)
    assert queue.trial(study, copy.number).user_attrs == {**item, **resumed}
    assert queue.trial(study, trial.number).user_attrs == {**item, **resumed, **attempt, **outcome}
    assert queue.trial(study, copy.number).system_attrs["retry_history"] == [trial.number]
    # What other modules keep as an item's is never dropped; what marks one attempt always is.
    assert not set(queue.ATTEMPT_ATTRS) & {*reuse.IDENTITY, *st.EXTENSION_CARRIES}
    assert {progress.ATTEMPT, RETRIED, *st.KILLED_ATTRS, *reuse.NOT_LINKED} - {"dropped", "spec_hash"} <= set(
        queue.ATTEMPT_ATTRS)


def test_requeue_copies_parameters_and_warns_nothing(tmp_path):
    """The re-queue is our own copy through Study.add_trial: no experimental or deprecated Optuna
    class (its callback is experimental; RetryFailedTrialCallback goes in Optuna 6)."""
    import warnings

    from optuna.distributions import CategoricalDistribution, FloatDistribution

    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    study = optuna.create_study(study_name="params", storage=storage(url))
    queue.enqueue(study, {"item": "a"})
    queue.enqueue(study, {"item": "b"})
    trial = claim(study)
    levels = CategoricalDistribution(["xi", "gamma"])
    queue.set_params(study, trial.number, {"model.normalisation": ("gamma", levels), "train.lr": (0.01, FloatDistribution(
        1e-4, 1e-1, log=True))})
    queue.set_params(study, trial.number, {"model.normalisation": ("gamma", levels)})  # already there: kept
    other = claim(study)
    with pytest.raises(ValueError):  # the study's distribution under that name is another kind
        queue.set_params(study, other.number, {"train.lr": ("big", CategoricalDistribution(["big"]))})
    assert queue.fail_running(study, trial.number, {"failure_kind": "killed"})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        queue.requeue(study, trial.number, max_retry=2)
    assert [str(w.message) for w in caught] == []
    again = claim(study)
    frozen = queue.trial(study, again.number)
    assert frozen.params == {"model.normalisation": "gamma", "train.lr": 0.01}
    assert frozen.system_attrs["retry_history"] == [trial.number] and frozen.system_attrs["failed_trial"] == trial.number
    # A level added in front: every recorded value re-encoded, none misread.
    grown = CategoricalDistribution(["none", "xi", "gamma"])
    assert queue.recode_params(study, "model.normalisation", grown) == 2
    fresh = optuna.load_study(study_name="params", storage=storage(url)).trials
    assert [t.params.get("model.normalisation") for t in fresh] == ["gamma", None, "gamma"]
    assert {t.distributions["model.normalisation"] for t in fresh if t.params} == {grown}
    assert queue.recode_params(study, "model.normalisation", grown) == 0


def test_entries_finished_after(tmp_path):
    import time
    from datetime import datetime, timedelta

    study = optuna.create_study(study_name="since", storage=storage(f"sqlite:///{tmp_path / 'optuna.db'}"))
    for i in range(3):
        queue.enqueue(study, {"item": str(i)})
    first = claim(study)
    queue.finish(study, first, TrialState.COMPLETE, {}, 1.0)
    mark = datetime.now() + timedelta(milliseconds=50)
    time.sleep(0.1)
    second = claim(study)
    queue.finish(study, second, TrialState.FAIL, {"failure_kind": "error"})
    assert [e.number for e in queue.entries(study, finished_after=mark)] == [second.number]
    done = queue.entries(study, states=(TrialState.COMPLETE,))[0]
    assert done.started is not None and done.finished >= done.started


def _enqueue_both_ways(url: str) -> list[optuna.trial.FrozenTrial]:
    study = optuna.create_study(storage=storage(url), study_name="both")
    queue.enqueue(study, {"cell_id": "a", "seed": 0, "config": {"lr": 0.1}})
    queue.enqueue_many(study, [{"cell_id": "b", "seed": s, "config": {"lr": 0.2}} for s in range(3)])
    queue.enqueue(study, {"cell_id": "c", "seed": 0})
    queue.enqueue_many(study, [])
    return optuna.load_study(study_name="both", storage=storage(url)).get_trials(deepcopy=False)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_items_queued_together_are_the_trials_enqueue_writes(tmp_path, backend, request):
    url = f"sqlite:///{tmp_path / 'optuna.db'}" if backend == "sqlite" else request.getfixturevalue("postgres_db")
    trials = _enqueue_both_ways(url)
    assert [t.number for t in trials] == list(range(5))
    assert [(t.user_attrs.get("cell_id"), t.user_attrs.get("seed")) for t in trials] == \
        [("a", 0), ("b", 0), ("b", 1), ("b", 2), ("c", 0)]
    one, many = trials[0], trials[1]
    for field in ("state", "params", "system_attrs", "datetime_start", "datetime_complete", "value"):
        assert getattr(many, field) == getattr(one, field), field
    assert many.user_attrs == {"cell_id": "b", "seed": 0, "config": {"lr": 0.2}}
    study = optuna.load_study(study_name="both", storage=storage(url))
    assert [claim(study).number for _ in range(5)] == list(range(5))  # oldest first, as ever
