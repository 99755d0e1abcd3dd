"""``run_study``, what ``ablate run`` calls, driven in this process: it queues, runs on one worker
under the live view, says what it did and returns the study's state; a second call runs nothing."""

from __future__ import annotations

import io
import json
import math
import re

from rich.console import Console
from support import stores

from ablate import design
from ablate.runner.launch import Outcome, look_line, run_study

SPEC = {
    "name": "launch",
    "task": {"name": "listops", "max_depth": 3, "max_length": 30, "train_size": 200, "val_size": 32,
             "test_size": 32},
    "model": {"d_model": 8, "state_dim": 8, "layers": 1, "heads": 2},
    "train": {"steps": 4, "batch_size": 8, "eval_every": 2, "log_every": 2},
    "probes": {"every": 2, "batch": 8},
    "factors": {"model.normalisation": ["xi", "gamma"]},
    "seeds": 1,
}


def consoles() -> tuple[Console, io.StringIO, Console, io.StringIO]:
    o, e = io.StringIO(), io.StringIO()
    return Console(file=o, width=200), o, Console(file=e, width=200), e


def _study(spec, tmp_path):
    import optuna

    return optuna.load_study(study_name=spec.name, storage=stores(tmp_path).storage)


def test_queue_only_queues_and_returns_nothing_to_judge(tmp_path, monkeypatch):
    monkeypatch.setenv("ABLATE_CACHE_DIR", str(tmp_path / "cache"))
    spec = design.validate(SPEC)
    out, o, err, _ = consoles()
    assert run_study(spec, stores(tmp_path), out, err, workers=0) is None
    assert o.getvalue().splitlines()[0] == "launch: 2 trials, 0 done, 0 failed, 2 to run (2 newly queued)"
    out, o, err, _ = consoles()  # queued already: nothing newly queued
    assert run_study(spec, stores(tmp_path), out, err, workers=0) is None
    assert "2 to run (0 newly queued)" in o.getvalue()
    # The dashboard's note is saved by a run that only queues too (its module alone: no seconds of
    # the dashboard's imports), the same as optuna-dashboard's own get_note reads.
    import optuna_dashboard

    assert "an ablation study run by ablate" in optuna_dashboard.get_note(_study(spec, tmp_path))
    assert "ablate.dashboard_note" in _study(spec, tmp_path).user_attrs


def test_one_worker_runs_every_item_and_a_second_call_runs_none(tmp_path, monkeypatch):
    monkeypatch.setenv("ABLATE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("ABLATE_CHECKPOINT_DIR", str(tmp_path / "checkpoints"))
    spec = design.validate(SPEC)
    out, o, err, _ = consoles()
    after = run_study(spec, stores(tmp_path), out, err, workers=1, checkpoint_every=0)
    assert after is not None
    assert (after.done, after.failed, after.unfinished, after.errors, after.worker_failures) == (2, 0, 0, 0, [])
    import optuna_dashboard

    assert "an ablation study run by ablate" in optuna_dashboard.get_note(_study(spec, tmp_path))
    out, o, err, _ = consoles()
    again = run_study(spec, stores(tmp_path), out, err, workers=1)
    assert again == after
    assert o.getvalue().startswith("launch: 2 trials, 2 done, 0 failed, 0 to run (0 newly queued)")


def test_a_study_reusing_cells_shows_every_cell_in_its_mlflow_experiment(tmp_path, monkeypatch):
    """Its parent run nests a light run per reused item beside the trained ones; re-running adds none."""
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("ABLATE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("ABLATE_CHECKPOINT_DIR", str(tmp_path / "checkpoints"))
    out, _, err, _ = consoles()
    assert run_study(design.validate(SPEC), stores(tmp_path), out, err, workers=1, checkpoint_every=0).done == 2
    follow = design.validate({**SPEC, "name": "follow", "factors": {"model.normalisation": ["xi", "gamma", "none"]}})
    for said in ("1 newly queued, 2 reused from launch", "0 newly queued"):
        out, o, err, e = consoles()
        assert run_study(follow, stores(tmp_path), out, err, workers=0) is None  # queue only: nothing trained
        assert f"({said})" in o.getvalue() and "warning" not in e.getvalue()
    mlc = MlflowClient(stores(tmp_path).tracking)
    runs = mlc.search_runs([mlc.get_experiment_by_name("follow").experiment_id])
    parent = next(r for r in runs if r.data.tags["ablate.role"] == "study")
    light = [r for r in runs if r.data.tags["ablate.role"] == "reused"]
    assert len(runs) == 3 and len(light) == 2  # the parent and one light run per reused item, once
    assert {r.data.tags["ablate.level.model.normalisation"] for r in light} == {"xi", "gamma"}
    assert all(r.data.tags["mlflow.parentRunId"] == parent.info.run_id and r.info.status == "FINISHED"
               and r.data.tags["ablate.reused_from"] == "launch" and r.data.metrics["final/val_accuracy"] >= 0
               for r in light)
    assert parent.data.tags["ablate.reused_items"] == "2"


def test_look_line_says_what_a_look_decided():
    # ``ablate worker`` prints this line: it names the look its seeds are for, and no ETA (it shows none).
    assert look_line({"look": 2, "decided": 1, "open": 3, "queued": 6, "looks": 4}) == (
        "look 2: 1 comparison decided, 3 open; 6 seed items queued for look 3 of 4")
    assert look_line({"look": 2, "decided": 1, "open": 3, "queued": 6}) == (  # an event without the design's looks
        "look 2: 1 comparison decided, 3 open; 6 seed items queued for the next look")
    assert look_line({"look": 3, "decided": 4, "finished": True}) == (
        "look 3: 4 comparisons decided; the sequential design is finished")


def test_a_stopped_run_leaves_no_mlflow_run_of_a_recorded_trial_running(tmp_path, monkeypatch):
    """A worker stopped right after its Optuna record (the commit point), before it ended its
    MLflow run: the run is ended FINISHED before `ablate run` exits, not by the next run."""
    import signal

    import pytest
    from mlflow.tracking import MlflowClient
    from optuna.trial import TrialState

    from ablate.runner import launch, phases, queue, tracking
    from ablate.runner import study as st
    from ablate.runner.signals import Interrupted

    monkeypatch.setenv("ABLATE_CACHE_DIR", str(tmp_path / "cache"))
    where = stores(tmp_path)
    opened: list[str] = []

    def stopped_after_the_record(name, stores, **kwargs):
        study = st.open_study(name, stores)
        trial = phases.claim(study)
        attrs = queue.trial(study, trial.number).user_attrs
        run = tracking.TrialRun(stores, name, None, "x", {}, {"ablate.trial_number": str(trial.number),
                                                             "ablate.cell_id": attrs["cell_id"]})
        trial.set_user_attr("mlflow_run_id", run.run_id)
        queue.finish(study, trial, TrialState.COMPLETE, {"status": "complete", "val_accuracy": 0.5}, 0.5)
        opened.append(run.run_id)
        raise Interrupted(signal.SIGINT)

    monkeypatch.setattr(launch, "work", stopped_after_the_record)
    out, _, err, _ = consoles()
    with pytest.raises(launch.Stopped):
        run_study(design.validate(SPEC), where, out, err, workers=1)
    assert MlflowClient(where.tracking).get_run(opened[0]).info.status == "FINISHED"


def test_an_interrupted_run_ends_its_view_saying_it_stopped_not_with_an_eta(tmp_path, monkeypatch):
    """Its worker re-queued its item and stopped: the view's last line says the run stopped, with no
    ETA (it read "ETA 0m49s (re-queued)"), and leaves what was re-queued and what to do to the
    line the stop prints after it (terminal.Stopped: "re-queued 1 running item: …; run the same
    command to resume")."""
    import signal

    import pytest
    from optuna.trial import TrialState

    from ablate.runner import launch, phases, queue
    from ablate.runner import study as st
    from ablate.runner.signals import Interrupted
    from ablate.runner.worker import worker_id

    monkeypatch.setenv("ABLATE_CACHE_DIR", str(tmp_path / "cache"))

    def interrupted(name, stores, **kwargs):
        study = st.open_study(name, stores)
        trial = phases.claim(study)
        queue.beat(study, trial.number, {"worker": worker_id(), "step": 2})
        queue.finish(study, trial, TrialState.FAIL, {"status": "failed", "failure_kind": "interrupted",
                                                     "failure_message": "stopped by a signal; re-queued",
                                                     "worker": worker_id()})
        queue.requeue(study, trial.number, None)
        raise Interrupted(signal.SIGINT, ["gamma · seed 0"])

    monkeypatch.setattr(launch, "work", interrupted)
    out, o, err, _ = consoles()
    with pytest.raises(launch.Stopped) as stopped:
        run_study(design.validate(SPEC), stores(tmp_path), out, err, workers=1)
    assert stopped.value.requeued == ["gamma · seed 0"]
    lines = o.getvalue().splitlines()
    assert lines[-1] == "launch: 0 done · 0 running · 2 waiting · 0 failed · stopped"
    assert not any("ETA" in line for line in lines)


def test_look_decisions_lists_every_look_since_with_what_it_decided():
    from ablate.runner.launch import look_decisions
    from ablate.runner.sequential_looks import State

    spec = design.validate({**SPEC, "factors": {"model.normalisation": ["xi", "gamma", "none"]},
                            "seeds": {"min": 3, "max": 6, "step": 3, "measures": ["test_accuracy"]}})
    ref, a, b = design.cells(spec)
    row = {"measure": "test_accuracy", "estimate": 0.1, "rci_low": 0.02, "rci_high": 0.2, "p": 0.004}
    first = [{**row, "cell_id": a.id, "decision": "better", "seeds": 3, "look": 1},
             {**row, "cell_id": b.id, "decision": "open", "seeds": 3, "look": 1}]
    second = [{**row, "cell_id": b.id, "decision": "equivalent", "seeds": 6, "look": 2, "p": None}]
    state = State(look=1, planned={}, decided={}, history=[first, second], finished=True)
    lines = look_decisions(spec, state)
    assert lines == ["look 1 (3 seeds): 1 of 2 open comparisons decided; seeds added for look 2 of 2",
                     f"  better: {a.label} on test_accuracy: +0.100 [+0.020, +0.200] (repeated CI), p 0.004",
                     "look 2 (6 seeds): 1 of 1 open comparison decided; the sequential design is finished",
                     f"  equivalent: {b.label} on test_accuracy: +0.100 [+0.020, +0.200] (repeated CI)"]
    assert look_decisions(spec, state, since=1) == lines[2:]
    # A norm measure is analysed on the log scale: its line says the ratio, as status and the reports do
    # (it printed the log, "-0.223 [-0.4, -0.05]", for a ratio of 0.8).
    norm = {**first[0], "measure": "norm.final", "estimate": math.log(0.8), "rci_low": math.log(0.67),
            "rci_high": math.log(0.95)}
    said = look_decisions(spec, State(look=1, planned={}, decided={}, history=[[norm]], finished=True))
    assert said[1] == f"  better: {a.label} on norm.final: 0.8× [0.67×, 0.95×] (repeated CI), p 0.004", said
    # Before the last look, the latest line says its seeds are for the next look and the ETA to its end.
    running = State(look=1, planned={}, decided={}, history=[first], finished=False)
    assert look_decisions(spec, running)[0] == ("look 1 (3 seeds): 1 of 2 open comparisons decided; seeds added for "
                                                "look 2 of 2 (the ETA is to its end)")
    assert look_decisions(spec, None) == [] and look_decisions(design.validate(SPEC), state) == []


def test_a_pooled_sequential_run_prints_every_look(tmp_path, monkeypatch):
    # Issue 43: with two workers (a pool) run printed look 1 and nothing for the looks after it.
    monkeypatch.setenv("ABLATE_HOME", str(tmp_path / "home"))
    spec = design.validate({**SPEC, "name": "looks", "seeds": {"min": 3, "max": 6, "step": 3,
                                                                "measures": ["test_accuracy"]}})
    out, o, err, e = consoles()
    outcome = run_study(spec, stores(tmp_path), out, err, workers=2)
    assert outcome is not None and not outcome.unfinished
    text = o.getvalue()  # the live view says each look as it comes, whichever worker made it
    assert "look 1 (3 seeds): " in text
    from ablate.runner import sequential_looks
    from ablate.runner import study as st

    state = sequential_looks.load_state(st.open_study("looks", stores(tmp_path), read_only=True))
    for k in range(1, len(state.history) + 1):
        assert text.count(f"look {k} (") == 1, text  # once: live, not again at the end
    if len(state.history) > 1:  # with the ETA's words when the view saw look 1 before look 2 was analysed
        assert "seeds added for look 2 of 2" in text, text


def test_a_sequential_run_whose_next_look_is_all_reused_analyses_it_in_the_same_run(tmp_path):
    """A sequential study whose look-2 seeds another study had already run (converted from a fixed
    study, or its twin): one `ablate run` analysed look 1, reused look 2's seeds, trained nothing,
    and ended with look 2 never analysed and the design unfinished; a second run was needed."""
    from cell_store import finish_all
    from cell_store import spec as cell_spec

    from ablate.runner import sequential_looks
    from ablate.runner import study as st

    where = stores(tmp_path)
    source = cell_spec("source", seeds=6)
    finish_all(st.prepare(source, design.items(source), where).study)
    seq = cell_spec("seq", seeds={"min": 3, "max": 6, "step": 3, "measures": ["test_accuracy"]})
    out, o, err, e = consoles()
    outcome = run_study(seq, where, out, err, workers=2)
    assert outcome is not None and not outcome.unfinished
    text = o.getvalue()
    state = sequential_looks.load_state(st.open_study("seq", where, read_only=True))
    assert state.finished and len(state.history) == 2, text
    assert "look 1 (3 seeds): " in text and "look 2 (6 seeds): " in text, text
    assert "start " not in text, text  # every seed reused: nothing trained, no worker started
    # `ablate status --json` gives scripts the same state: finished, both looks, the comparison's outcome.
    from ablate.runner import views

    buf = io.StringIO()
    views.status("seq", where.storage, where.tracking, as_json=True).print(Console(file=buf))
    said = json.loads(buf.getvalue())["sequential"]
    assert said["finished"] and said["analysed"] == 2 and said["looks"] == [3, 6]
    assert [(r["cell"], r["measure"]) for r in said["comparisons"]] == [("LRU", "test_accuracy")]


def test_a_worker_that_ends_a_look_analyses_the_next_when_its_seeds_are_all_reused(tmp_path):
    """The worker's side of the test above: look 1's seeds train here, look 2's (3–5) were run by
    another study. The worker that analysed look 1 queued nothing and stopped, leaving look 2 unanalysed."""
    from cell_store import finish_all
    from cell_store import spec as cell_spec

    from ablate.runner import sequential_looks
    from ablate.runner import study as st

    where = stores(tmp_path)
    source = cell_spec("source", seeds=[3, 4, 5])
    finish_all(st.prepare(source, design.items(source), where).study)
    seq = cell_spec("seq", seeds={"min": 3, "max": 6, "step": 3, "measures": ["test_accuracy"]})
    out, o, err, e = consoles()
    outcome = run_study(seq, where, out, err, workers=1)
    assert outcome is not None and not outcome.unfinished
    state = sequential_looks.load_state(st.open_study("seq", where, read_only=True))
    text = o.getvalue()
    assert state.finished and [rows[0]["seeds"] for rows in state.history] == [3, 6], text
    assert "look 2 (6 seeds): " in text, text


def test_a_queue_only_run_analyses_a_look_whose_seeds_are_all_done(tmp_path):
    """`ablate run --workers 0` (workers elsewhere: SLURM) returned before looking at the design: a look
    whose seeds were all done, by workers stopped with --max-items, stayed unanalysed and its next seeds
    unqueued, while `ablate plan` said "`ablate run` analyses a look once its seeds are done"."""
    from cell_store import finish_all
    from cell_store import spec as cell_spec
    from optuna.trial import TrialState

    from ablate.runner import queue, sequential_looks
    from ablate.runner import study as st

    where = stores(tmp_path)
    seq = cell_spec("seq", seeds={"min": 3, "max": 6, "step": 3, "measures": ["test_accuracy"]})
    out, o, err, e = consoles()
    assert run_study(seq, where, out, err, workers=0) is None  # look 1's seeds queued
    assert finish_all(st.open_study("seq", where))  # ... and run elsewhere
    assert sequential_looks.load_state(st.open_study("seq", where, read_only=True)) is None
    out, o, err, e = consoles()
    assert run_study(seq, where, out, err, workers=0) is None
    study = st.open_study("seq", where, read_only=True)
    state = sequential_looks.load_state(study)
    assert state is not None and [rows[0]["seeds"] for rows in state.history] == [3], o.getvalue()
    assert "look 1 (3 seeds): " in o.getvalue()
    assert state.finished or queue.count(study, (TrialState.WAITING,)) == 6  # 3 more seeds of each cell


def test_a_worker_stopped_by_max_items_analyses_the_look_its_last_item_ended(tmp_path, monkeypatch):
    """A worker with --max-items whose last item was the last of a look returned without analysing it:
    the look waited for another worker or an `ablate run`."""
    from cell_store import finish_all
    from cell_store import spec as cell_spec
    from optuna.trial import TrialState

    from ablate.runner import phases, queue, sequential_looks, worker
    from ablate.runner import study as st

    monkeypatch.setenv("ABLATE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("ABLATE_CHECKPOINT_DIR", str(tmp_path / "checkpoints"))
    where = stores(tmp_path)
    seq = cell_spec("seq", seeds={"min": 3, "max": 6, "step": 3, "measures": ["test_accuracy"]})
    out, o, err, e = consoles()
    assert run_study(seq, where, out, err, workers=0) is None
    study = st.open_study("seq", where)
    kept = phases.claim(study)  # held back while the others finish, then failed and retried by the worker
    assert len(finish_all(study)) == 5
    queue.finish(study, kept, TrialState.FAIL, {"status": "failed", "failure_kind": "infrastructure"})
    queue.requeue(study, kept.number, None)
    assert worker.work("seq", where, max_items=1, fuse=1) == {"complete": 1}
    state = sequential_looks.load_state(st.open_study("seq", where, read_only=True))
    assert state is not None and len(state.history) == 1


def test_a_sequential_design_changed_after_its_looks_is_refused_not_silently_mixed(tmp_path):
    """recall5 ended at max 6 with comparisons undecided; raising `seeds.max` to 9 and running again
    did nothing and said nothing, while status read 'looks at 3, 6, 9' beside 'finished' (the new spec
    stored over the one its looks were analysed under). Now run refuses before storing anything, and
    plan warns."""
    import pytest
    from cell_store import finish_all
    from cell_store import spec as cell_spec
    from support import VARIANT

    from ablate.runner import plan as planning
    from ablate.runner import sequential_looks
    from ablate.runner import study as st
    from ablate.terminal import Refused

    where = stores(tmp_path)
    source = cell_spec("source", seeds=6)
    finish_all(st.prepare(source, design.items(source), where).study)
    seeds = {"min": 3, "max": 6, "step": 3, "measures": ["test_accuracy"]}
    seq = cell_spec("seq", seeds=seeds)
    out, o, err, e = consoles()
    run_study(seq, where, out, err, workers=1)
    state = sequential_looks.load_state(st.open_study("seq", where, read_only=True))
    assert state.finished and state.design == sequential_looks.declared(seq)
    # Comparisons by their cells' labels, not ids: a new code version renames cells, not the design.
    assert state.design["comparisons"] == ["LRU:test_accuracy"]
    stored = st.open_study("seq", where, read_only=True).user_attrs["spec"]

    more = cell_spec("seq", seeds={**seeds, "max": 9})
    with pytest.raises(Refused) as refused:
        run_study(more, where, *consoles()[::2], workers=1)
    assert refused.value.code == 2 and "seeds.max 6 → 9" in refused.value.lines[0], refused.value.lines
    assert st.open_study("seq", where, read_only=True).user_attrs["spec"] == stored  # nothing stored over it
    warned = [x for x in planning.sequential_lines(more, where.storage) if x.startswith("warning: ")]
    assert warned and "seeds.max 6 → 9" in warned[0]
    assert not any(x.startswith("warning: ") for x in planning.sequential_lines(seq, where.storage))
    # A margin, and a cell added (its comparisons change every comparison's α), are changes too.
    assert sequential_looks.design_changes(cell_spec("seq", seeds=seeds, stats={"min_effect": 0.05}), state) == [
        "stats.min_effect 0.01 → 0.05"]
    third = {**VARIANT, "real": {"model.parameterisation": "real_diagonal", "model.normalisation": "xi"}}
    assert sequential_looks.design_changes(cell_spec("seq", seeds=seeds, factors={"variant": third}), state) == [
        "1 comparison added"]
    assert sequential_looks.design_changes(seq, state) == []
    # The same spec goes on as before (nothing left: no error, nothing run).
    again = run_study(seq, where, *consoles()[::2], workers=1)
    assert again is not None and not again.unfinished


def test_a_sequential_study_whose_code_changed_after_a_look_is_refused(tmp_path, monkeypatch):
    """A plug-in edited (or ablate upgraded) between looks gives the cells new ids: the next run
    trained the new code's cells from look 1's seed count while the state was at look 2, and would
    have analysed them against look 2's boundaries beside the old code's look 1. Now it refuses, names
    the cells, and says how to go on."""
    import pytest
    from cell_store import finish_all
    from cell_store import spec as cell_spec

    from ablate.design import identity
    from ablate.runner import sequential_looks
    from ablate.runner import study as st
    from ablate.terminal import Refused

    where = stores(tmp_path)
    seeds = {"min": 3, "max": 6, "step": 3, "measures": ["test_accuracy"]}
    seq = cell_spec("seq", seeds=seeds)
    assert run_study(seq, where, *consoles()[::2], workers=0) is None
    finish_all(st.open_study("seq", where))
    assert run_study(seq, where, *consoles()[::2], workers=0) is None  # look 1 analysed
    state = sequential_looks.load_state(st.open_study("seq", where, read_only=True))
    assert len(state.history) == 1
    monkeypatch.setattr(identity, "CODE_VERSION", "2")
    recoded = cell_spec("seq", seeds=seeds)
    assert {c.id for c in design.cells(recoded)}.isdisjoint(state.planned)
    (change,) = sequential_looks.design_changes(recoded, state)
    assert change.startswith("new code for 2 cells (RotRNN; LRU): "), change
    with pytest.raises(Refused) as refused:
        run_study(recoded, where, *consoles()[::2], workers=0)
    lines = refused.value.lines
    assert refused.value.code == 2 and lines[0].startswith("seq: the code of its cells changed after 1 look had been "
                                                           "analysed: new code for 2 cells"), lines
    assert "restore the code the looks ran" in lines[-1] and "as a new study" in lines[-1]
    # The looks' cells keep their labels under their old ids: plan's lines name them, not an id.
    assert state.design["labels"] == {c: label for c, label in zip(state.planned, ["RotRNN", "LRU"], strict=True)}
    monkeypatch.setattr(identity, "CODE_VERSION", "1")  # the code restored: it goes on
    assert sequential_looks.design_changes(cell_spec("seq", seeds=seeds), state) == []


def test_an_outcome_prints_itself_and_gives_the_exit_status():
    from ablate.runner.launch import Outcome

    out, o, err, e = consoles()
    recovered = Outcome(done=2, failed=1, unfinished=0, errors=0, worker_failures=["worker 1 died"], study="s")
    recovered.print(out, err)
    assert o.getvalue() == "s: 2 done, 1 failed, 0 unfinished\n"
    assert e.getvalue() == "warning worker 1 died\n"  # the others finished every item: a diverged cell is a result
    assert recovered.verdict(err) == 0
    out, o, err, e = consoles()
    broken = Outcome(2, 1, 0, 1, ["worker 1 died [x]"], "s")
    broken.print(out, err)
    assert e.getvalue() == "error worker 1 died [x]\n"
    assert broken.verdict(err) == 1 and "1 item failed with an error; see `ablate status s`" in e.getvalue()
    out, o, err, e = consoles()
    assert Outcome(0, 0, 2, 0, [], "s").verdict(err) == 1
    assert e.getvalue().startswith("2 items unfinished: run the same command to resume")


def test_run_worker_pulls_the_queued_items_and_says_so(tmp_path, monkeypatch):
    from ablate.runner.launch import run_worker

    monkeypatch.setenv("ABLATE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("ABLATE_CHECKPOINT_DIR", str(tmp_path / "checkpoints"))
    spec = design.validate(SPEC)
    out, o, err, e = consoles()
    assert run_study(spec, stores(tmp_path), out, err, workers=0) is None
    said = run_worker(spec.name, stores(tmp_path), err, checkpoint_every=0, max_items=1, verbose=True)
    assert len(said.lines) == 1 and said.lines[0].startswith("worker finished: ")
    assert "start " in e.getvalue() and "complete " in e.getvalue()  # verbose: each item's start and end
    out, o, err, _ = consoles()
    assert run_study(spec, stores(tmp_path), out, err, workers=0) is None
    assert "launch: 2 trials, 1 done, 0 failed, 1 to run" in o.getvalue()


def test_a_tracking_store_that_cannot_be_written_stops_the_run_with_its_name(tmp_path, monkeypatch):
    # The parent run is started by the first worker (not while queueing): its failure is the run's.
    import pytest

    from ablate.stores import StorageError, Stores

    monkeypatch.setenv("ABLATE_CACHE_DIR", str(tmp_path / "cache"))
    spec = design.validate(SPEC)
    good = stores(tmp_path)
    out, o, err, _ = consoles()
    assert run_study(spec, good, out, err, workers=0) is None  # queueing needs no tracking store
    assert "mlflow_parent_run_id" not in _study(spec, tmp_path).user_attrs
    broken = Stores(good.storage, "sqlite:////proc/mlflow.db", good.artifacts)
    with pytest.raises(StorageError, match=r"cannot write beside the store sqlite:////proc/mlflow\.db"):
        run_study(spec, broken, *consoles()[::2], workers=1, checkpoint_every=0)
    assert [t.state.name for t in _study(spec, tmp_path).get_trials()] == ["WAITING", "WAITING"]  # nothing lost


def test_no_more_local_workers_start_than_items_wait(tmp_path, monkeypatch):
    """``--workers 8`` on a study of 2 items starts 2 workers (the others would only start and exit:
    issue found by a user who gave 50), and says so."""
    from ablate.runner import launch, pool

    monkeypatch.setenv("ABLATE_HOME", str(tmp_path / "home"))
    started: list[list[str]] = []

    def fake_run(name, stores_, device_list, *args, **kwargs):
        started.append(device_list)
        return pool.Outcome()

    monkeypatch.setattr(launch.pool, "run", fake_run)
    out, o, err, _ = consoles()
    run_study(design.validate(SPEC), stores(tmp_path), out, err, workers=8)
    assert started == [["cpu", "cpu"]]
    assert "2 items to run: 2 workers, not 8" in o.getvalue()


def test_a_run_whose_every_item_ran_out_of_memory_at_every_retry_exits_1_saying_so(tmp_path, monkeypatch):
    import torch

    monkeypatch.setenv("ABLATE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("ABLATE_CHECKPOINT_DIR", str(tmp_path / "checkpoints"))

    def out_of_memory(*args, **kwargs):
        raise torch.OutOfMemoryError("DefaultCPUAllocator: can't allocate memory")

    monkeypatch.setattr("ablate.training.run_trial", out_of_memory)
    spec = design.validate({**SPEC, "factors": {"model.normalisation": ["xi"]}})
    out, o, err, e = consoles()
    after = run_study(spec, stores(tmp_path), out, err, workers=1, checkpoint_every=0)
    assert after is not None
    # An out-of-memory failure is not a result of the cell (as a divergence is): the run did nothing.
    assert (after.done, after.failed, after.errors, after.exhausted) == (0, 1, 0, 1)
    assert after.verdict(err) == 1
    assert "1 item failed at every retry (out of memory at the most micro-batches" in e.getvalue()
    # ... and a diverged cell alone is still a result: exit 0.
    assert Outcome(0, 1, 0, 0, [], "s").verdict(err) == 0


def test_a_run_whose_cells_all_diverged_says_so_and_is_still_a_result(tmp_path, monkeypatch):
    """Before: "launch: 0 done, 2 failed, 0 unfinished" and nothing else, for a plug-in that turned
    NaN at its first steps everywhere — a bug the researcher met only in the reports."""
    monkeypatch.setenv("ABLATE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("ABLATE_CHECKPOINT_DIR", str(tmp_path / "checkpoints"))
    spec = design.validate({**SPEC, "train": {**SPEC["train"], "divergence_norm": 1e-12}})
    out, o, err, e = consoles()
    after = run_study(spec, stores(tmp_path), out, err, workers=1, checkpoint_every=0)
    assert after is not None and (after.done, after.failed, after.errors) == (0, 2, 0)
    assert after.diverged_cells == ["normalisation=xi", "normalisation=gamma"]
    out, o, err, e = consoles()
    after.print(out, err)
    assert e.getvalue().replace("\n", " ").startswith(
        "warning every run of 2 cells diverged, so the reports test nothing about them: normalisation=xi, "
        "normalisation=gamma")
    assert after.verdict(err) == 0
    assert Outcome(2, 0, 0, 0, [], "s").diverged_cells == []


def test_a_run_whose_tuning_trials_may_fuse_says_what_that_does_to_its_pruner(tmp_path, monkeypatch):
    from ablate.runner.launch import pruning_note, run_worker

    monkeypatch.setenv("ABLATE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("ABLATE_CHECKPOINT_DIR", str(tmp_path / "checkpoints"))
    tuned = {**SPEC, "tune": {"trials": 3, "sampler": "grid", "pruner": "median", "objective": {"metric": "val_accuracy"},
                              "space": {"train.lr": [1e-3, 1e-2, 3e-2]}}}
    spec = design.validate(tuned)
    note = pruning_note(spec, 0)
    assert note.startswith("tune.pruner median: tuning trials of a cell claimed together (fused) start together")
    assert "(3 a cell: --fuse 1 trains them one at a time and prunes as specified)" in note
    assert pruning_note(spec, 1) == "" and pruning_note(design.validate(SPEC), 0) == ""
    assert pruning_note(design.validate({**tuned, "tune": {**tuned["tune"], "pruner": "none"}}), 4) == ""
    out, o, err, _ = consoles()  # queue only: the workers elsewhere fuse by default
    run_study(spec, stores(tmp_path), out, err, workers=0, fuse=0)
    assert note in o.getvalue()
    # `ablate worker` on that queue says it too, once, though each of the 2 cells fuses 2 of its 3 trials
    # (the cell's count, not the group's: the trials carry no count, the study's spec does)
    _, _, err, e = consoles()
    said = run_worker(spec.name, stores(tmp_path), err, checkpoint_every=0, fuse=2)
    # 3 tuning trials and a replicate a cell, a trial trained apart after its cell's group perhaps pruned
    assert sum(map(int, re.findall(r": (\d+)", said.lines[0]))) == 8, said.lines
    assert e.getvalue().replace("\n", " ").count(note) == 1 and "note " not in e.getvalue()
    out, o, err, e = consoles()
    again = design.validate({**tuned, "name": "launch-in-process"})
    run_study(again, stores(tmp_path), out, err, workers=1, checkpoint_every=0, fuse=0, verbose=True, reuse=False)
    assert note in o.getvalue() and note not in e.getvalue()  # said once, when queued
    out, o, err, _ = consoles()  # its tuning done: nothing to say
    run_study(spec, stores(tmp_path), out, err, workers=1, fuse=0)
    assert "tune.pruner" not in o.getvalue()


def test_a_sequential_study_made_fixed_says_its_tests_come_after_its_looks(tmp_path):
    """After an undecided end, `seeds: 6` in place of the sequential design ran as a fixed design
    without a word: its p-values then assume a seed count set before any result was seen. Run, plan
    and page one now say so."""
    from types import SimpleNamespace

    from cell_store import finish_all
    from cell_store import spec as cell_spec

    from ablate.report import verdicts
    from ablate.runner import plan as planning
    from ablate.runner import sequential_looks
    from ablate.runner import study as st

    where = stores(tmp_path)
    source = cell_spec("source", seeds=6)
    finish_all(st.prepare(source, design.items(source), where).study)
    seq = cell_spec("seq", seeds={"min": 3, "max": 6, "step": 3, "measures": ["test_accuracy"]})
    run_study(seq, where, *consoles()[::2], workers=1)
    fixed = cell_spec("seq", seeds=6)
    out, o, err, e = consoles()
    run_study(fixed, where, out, err, workers=1)
    said = "the seeds of seq were first added look by look under a sequential design (2 looks analysed)"
    assert f"warning {said}" in " ".join(e.getvalue().split()), e.getvalue()
    assert any(said in x and x.startswith("warning: ") for x in planning.sequential_lines(fixed, where.storage))
    assert not planning.sequential_lines(cell_spec("source", seeds=6), where.storage)  # never sequential: no word
    state = sequential_looks.load_state(st.open_study("seq", where, read_only=True))
    res = SimpleNamespace(spec=fixed, sequential=json.loads(state.dump()))
    assert verdicts._after_looks(res).startswith(said)
    assert verdicts._after_looks(SimpleNamespace(spec=seq, sequential=json.loads(state.dump()))) == ""
