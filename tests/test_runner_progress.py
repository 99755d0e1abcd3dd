"""The live view and the snapshot it draws (ablate.runner.progress), on a real SQLite queue with a
hand-driven worker: workers shown from their start, running items with step/total and their last
validation accuracy, an ETA once anything is measured, one line per event when not a terminal."""

from __future__ import annotations

import copy
import io
import re
import sqlite3
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from optuna.trial import TrialState
from rich.console import Console
from support import RAW, stores

from ablate import design
from ablate.runner import phases, progress, queue
from ablate.runner import study as st
from ablate.runner.countdown import LONGER, SLOWER


@pytest.fixture
def tmp_path(shm_tmp_path: Path) -> Path:
    return shm_tmp_path


@pytest.fixture
def study(tmp_path):
    raw = copy.deepcopy(RAW)
    del raw["tune"]
    spec = design.validate(raw)  # 2 cells × 2 seeds, 5 steps each
    opt, _ = st.prepare(spec, design.items(spec), stores(tmp_path))
    return opt


def finish(opt, trial):
    queue.finish(opt, trial, TrialState.COMPLETE, {"status": "complete", "val_accuracy": 0.5,
                                                   "test_accuracy": 0.25, "steps": 5}, 0.5)


def test_terminal_view_shows_workers_from_their_start(study):
    screen = io.StringIO()
    console = Console(file=screen, force_terminal=True, width=160)
    alive = {"host:1": None, "host:2": None}
    view = progress.View(study, console, [(w, lambda w=w: alive[w]) for w in alive])
    with view:
        view.poll()
        first = screen.getvalue()
        assert "host:1" in first and "host:2" in first and first.count("(starting)") == 2
        assert "ETA ?" in first  # nothing measured yet
        trial = phases.claim(study)
        queue.beat(study, trial.number, {"worker": "host:1", "step": 2,
                                         "last_val": {"accuracy": 0.5, "loss": 1.0, "step": 2}})
        snap = view.poll()
        assert [(r.worker, r.step, r.steps) for r in snap.items] == [("host:1", 2, 5)]
        text = screen.getvalue()
        assert "2/5" in text and "0.500 @2" in text
        finish(study, trial)
        alive["host:2"] = 0  # a worker exits
        snap = view.poll()
        assert snap.done == 1 and snap.seconds_per_step is not None and snap.eta_seconds(1) is not None
    text = screen.getvalue()
    assert "done RotRNN · seed 0: val acc 0.500 · test acc 0.250" in text and "(exited 0)" in text
    assert "(idle)" in text  # host:1 finished its item and has not claimed another


def test_view_in_a_pipe_is_one_line_per_event(study):
    log = io.StringIO()
    console = Console(file=log, force_terminal=False, width=80)
    view = progress.View(study, console, [("host:1", lambda: None)])
    long_cell = "x" * 200
    with view:
        trial = phases.claim(study)
        study_trial = queue.trial(study, trial.number)
        assert study_trial.user_attrs["cell_label"] == "RotRNN"
        trial.set_user_attr("cell_label", long_cell)  # a label wider than any terminal
        queue.beat(study, trial.number, {"worker": "host:1", "step": 1})
        view.poll()
        finish(study, trial)
        failing = phases.claim(study)
        queue.finish(study, failing, TrialState.FAIL, {"status": "failed", "failure_kind": "error",
                                                       "failure_message": "RuntimeError:\n  boom"})
        view.poll()
    lines = log.getvalue().splitlines()
    assert log.getvalue().endswith("\n")
    assert lines[0] == f"start {long_cell} · seed 0 (replicate, trial {trial.number}) on host:1"
    assert lines[1].startswith(f"done {long_cell} · seed 0: val acc 0.500 · test acc 0.250 · ")
    assert lines[2] == "error RotRNN · seed 1: RuntimeError: boom"
    assert lines[-1].startswith(f"{study.study_name}: 1 done · 0 running · 2 waiting · 1 failed · ETA ")
    assert all("\x1b[" not in line for line in lines)


def test_a_trial_shorter_than_a_look_still_has_its_start_line(study):
    # Started and finished between two looks (no look saw it running): its start line comes with
    # its done line, before it; a trial no worker recorded itself on (never started) gets none.
    log = io.StringIO()
    view = progress.View(study, Console(file=log, force_terminal=False, width=80), [("host:1", lambda: None)])
    with view:
        view.poll()
        trial = phases.claim(study)
        queue.beat(study, trial.number, {"worker": "host:1", "step": 5})
        finish(study, trial)
        unstarted = phases.claim(study)
        queue.finish(study, unstarted, TrialState.FAIL, {"status": "failed", "failure_kind": "error",
                                                         "failure_message": "boom"})
        view.poll()
        view.poll()
    lines = log.getvalue().splitlines()
    assert lines[:3] == [f"start RotRNN · seed 0 (replicate, trial {trial.number}) on host:1",
                         lines[1], "error RotRNN · seed 1: boom"]
    assert lines[1].startswith("done RotRNN · seed 0: val acc 0.500 · test acc 0.250 · ")
    assert sum(line.startswith("start ") for line in lines) == 1


def test_eta_from_measured_seconds_per_step():
    snap = progress.Snapshot(done=2, failed=0, running=1, waiting=3, new=0, seconds_per_step=0.5,
                             items=[progress.Running("w", "c", 0, "replicate", 40, 100, None)], mean_steps=100)
    # 60 steps left running (30 s), 3 waiting of 100 steps (50 s each) on 2 workers: the idle one
    # takes one at 0 and another at 50, the busy one one at 30: the last ends at 100 (an item is
    # not split between workers); with 100 workers the 3 start now and end at 50.
    assert snap.eta_seconds(2) == pytest.approx(100.0)
    assert snap.eta_seconds(100) == pytest.approx(50.0)
    assert progress.Snapshot(1, 0, 0, 0, 0, None).eta_seconds(1) == 0.0


def test_eta_prices_each_cell_at_its_own_rate():
    """A sequential tanh cell at 1 s a step beside linear ones at 0.25 s: the study's median rate
    alone would put the ETA at half of what is left."""
    snap = progress.Snapshot(done=2, failed=0, running=1, waiting=2, new=1, seconds_per_step=0.25,
                             items=[progress.Running("w", "tanh", 0, "replicate", 50, 100, None, cell_id="slow")],
                             mean_steps=100, cell_rates={"slow": 1.0, "fast": 0.25}, waiting_cells=["slow", "fast"])
    # running 50 × 1.0, waiting 100 × 1.0 and 100 × 0.25, new (no trial, no cell) 100 × the study's 0.25
    assert snap.eta_seconds(2) == pytest.approx((50 + 100 + 25 + 25) / 2)
    assert snap.eta_seconds(2) > progress.Snapshot(2, 0, 1, 2, 1, 0.25, snap.items, 100).eta_seconds(2)


def test_snapshot_measures_each_cell_and_knows_the_cells_still_waiting(study):
    trial = phases.claim(study)
    cell = queue.trial(study, trial.number).user_attrs["cell_id"]
    queue.beat(study, trial.number, {"worker": "host:1", "step": 2})
    snap = progress.snapshot(study)
    assert [r.cell_id for r in snap.items] == [cell] and cell in snap.cell_rates  # its own pace while running
    finish(study, trial)
    snap = progress.snapshot(study)
    cells = {t.user_attrs["cell_id"] for t in queue.trials(study, states=(TrialState.WAITING,))}
    assert len(cells) == 2 and set(snap.cell_rates) == {cell}
    assert len(snap.waiting_cells) == snap.waiting == 3 and set(snap.waiting_cells) == cells


def test_snapshot_over_the_specs_items_leaves_orphaned_trials_out(study):
    """After a spec changed, the old version's finished trials stay in the study (orphans) until
    kept or dropped: the run's view counts the current spec's items, not 45 of 88 done for 1 of 44."""
    items = design.items(design.validate(study.user_attrs["spec"], "study"))
    trial = phases.claim(study)
    finish(study, trial)
    key = queue.trial(study, trial.number).user_attrs["item"]
    assert (progress.snapshot(study, items).done, progress.snapshot(study, items).total) == (1, 4)
    rest = [i for i in items if i.key != key]  # a spec without that item: its trial is an orphan
    snap = progress.snapshot(study, rest)
    assert (snap.done, snap.waiting, snap.total) == (0, 3, 3) and len(snap.waiting_cells) == 3


# --- the live view frame by frame: a scripted run on a fake clock ---------------------------------

T0 = datetime(2026, 1, 1, 12, 0, 0)
STEPS = 10


def running(worker: str, number: int, step: int, started: float, cell: str = "A") -> progress.Running:
    return progress.Running(worker, cell, number % 2, "replicate", step, STEPS, T0 + timedelta(seconds=started),
                            number, cell_id=cell)


def look(t: float, done: int, items: list[progress.Running], waiting: int, *, failed: int = 0, new: int = 0,
         rate: float | None = 1.0) -> progress.Snapshot:
    return progress.Snapshot(done, failed, len(items), waiting, new, rate, items, STEPS,
                             T0 + timedelta(seconds=t))


# (clock, the look at the store, the local workers as (id, state, since), what finished since the last look)
def script() -> list[tuple[float, progress.Snapshot, list[tuple[str, str, float]], list[progress.Finished]]]:
    ok = lambda label: progress.Finished(label, True, "val acc 0.500 · ", 10.0)  # noqa: E731
    w = lambda *states: [(f"w{i + 1}", s, 0.0) for i, s in enumerate(states)]  # noqa: E731
    return [
        (0.0, look(0, 0, [], 8, rate=None), w("starting", "starting"), []),
        # Both claimed, neither has recorded itself yet: no "?" row, two rows for two workers.
        (1.0, look(1, 0, [running("?", 0, 0, 1), running("?", 1, 0, 1)], 6, rate=None),
         w("starting", "starting"), []),
        (3.0, look(3, 0, [running("w1", 0, 2, 1), running("?", 1, 0, 1)], 6, rate=None),
         w("running", "starting"), []),
        # A trial a killed earlier run left RUNNING on another worker: one row, under its own id.
        (5.0, look(5, 0, [running("w1", 0, 4, 1), running("w2", 1, 3, 1), running("old:99", 9, 3, -100)], 5,
                   rate=None), w("running", "running"), []),
        (12.0, look(12, 1, [running("w2", 1, 9, 1), running("w1", 2, 1, 11), running("old:99", 9, 3, -100)], 4),
         w("running", "running"), [ok("A · seed 0")]),
        # Two finishes in one look, the second slow: the measured rate rises (the raw ETA with it).
        (22.0, look(22, 3, [running("w1", 3, 1, 21), running("w2", 4, 0, 21), running("old:99", 9, 3, -100)], 2,
                    rate=2.0), w("running", "running"), [ok("A · seed 1"), ok("B · seed 0")]),
        # A duplicate attempt finishing (the done count does not move): no count on its line.
        (24.0, look(24, 3, [running("w1", 3, 2, 21), running("w2", 4, 1, 21), running("old:99", 9, 3, -100)], 2,
                    rate=2.0), w("running", "running"), [ok("B · seed 0")]),
        # The stale trial is failed and re-queued (its heartbeat timed out): more waiting.
        (30.0, look(30, 3, [running("w1", 3, 5, 21), running("w2", 4, 4, 21)], 3, failed=0, rate=2.0),
         w("running", "running"), [progress.Finished("A · seed 1", False, kind="killed", message="no heartbeat")]),
        # w2 dies; its item is still RUNNING until its heartbeat times out; a restarted w3 starts.
        (34.0, look(34, 3, [running("w1", 3, 7, 21), running("w2", 4, 5, 21)], 3, rate=2.0),
         [("w1", "running", 0.0), ("w2", "exited -9", 34.0), ("w3", "starting", 34.0)], []),
        (40.0, look(40, 4, [running("w3", 4, 0, 39), running("w1", 5, 0, 39)], 2, rate=2.0),
         [("w1", "running", 0.0), ("w2", "exited -9", 34.0), ("w3", "running", 34.0)], [ok("A · seed 0")]),
        # A sequential look adds four seed items.
        (50.0, look(50, 5, [running("w3", 4, 5, 39), running("w1", 6, 2, 45)], 5, new=0, rate=2.0),
         [("w1", "running", 0.0), ("w2", "exited -9", 34.0), ("w3", "running", 34.0)], [ok("A · seed 1")]),
        (60.0, look(60, 6, [running("w3", 7, 1, 58), running("w1", 6, 7, 45)], 4, rate=2.0),
         [("w1", "running", 0.0), ("w2", "exited -9", 34.0), ("w3", "running", 34.0)], [ok("B · seed 1")]),
        (75.0, look(75, 8, [running("w3", 9, 1, 73), running("w1", 8, 1, 73)], 2, rate=2.0),
         [("w1", "running", 0.0), ("w2", "exited -9", 34.0), ("w3", "running", 34.0)],
         [ok("B · seed 0"), ok("A · seed 2")]),
        (100.0, look(100, 12, [], 0, rate=2.0),
         [("w1", "exited 0", 99.0), ("w2", "exited -9", 34.0), ("w3", "exited 0", 99.0)],
         [ok("A · seed 3"), ok("B · seed 3"), ok("A · seed 4"), ok("B · seed 4")]),
    ]


def test_every_frame_of_a_scripted_run_keeps_its_word():
    """Starts, finishes, a duplicate, a failure, a worker's death and restart, new items: at every
    frame one row per worker and no "?" row, a done counter that only moves forward (never the
    same "k/N done" twice in the log), and an ETA that never rises without saying why."""
    frames: list[progress.Frame] = []
    log: list[str] = []
    prev: progress.Frame | None = None
    clamped = 0  # finish frames where the plain estimate rose and the shown ETA did not
    for clock, snap, states, finished in script():
        slots = [progress.Slot(worker, state, since) for worker, state, since in states]
        alive = sum(not s.state.startswith("exited") for s in slots)
        f = progress.frame(snap, slots, prev, clock, max(1, alive), finished)
        started = [r for r in snap.items if r.worker != "?" and not any(f"trial {r.number})" in x for x in log)]
        log += progress.log_lines("s", finished, started, f, prev)
        screen = Console(record=True, width=160, file=io.StringIO())
        screen.print(progress.frame_table("s", f))
        text = screen.export_text()
        # One row per worker: the local ones, and each other worker once; never a "?" row.
        workers = [r.worker for r in f.rows]
        assert len(workers) == len(set(workers)) and "?" not in workers
        assert set(workers) == {s.worker for s in slots} | {r.worker for r in snap.items if r.worker not in ("?",)}
        assert "│ ?" not in text and all(text.count(f"│ {w} ") == 1 for w in workers)
        if prev is not None:
            assert f.done >= prev.done
            raw = snap.eta_seconds(f.workers)
            if f.eta is not None and prev.eta is not None and not f.eta_note:
                assert f.eta <= max(0.0, prev.eta - (clock - prev.at)) + 1e-9
            grew = snap.total > prev.total or snap.waiting + snap.new > prev.waiting or snap.failed > prev.failed
            if f.done > prev.done and not grew and f.workers >= prev.workers and prev.eta is not None:
                assert not f.eta_note and f.eta is not None and f.eta <= prev.eta - (clock - prev.at) + 1e-9
                clamped += raw is not None and raw > f.eta
        frames.append(f)
        prev = f
    assert clamped >= 1  # the script makes the plain estimate rise at a finish: the clamp was needed
    # The log: each count once and rising; a count-less line for the duplicate; ETAs never up unexplained.
    counts = [m.group(0) for m in (re.search(r" · \d+/\d+ done", line) for line in log) if m]
    numbers = [int(c.split("/")[0].removeprefix(" · ")) for c in counts]
    assert numbers == list(range(1, 13)) and len(set(counts)) == len(counts)
    assert "done B · seed 0: val acc 0.500 · 0m10s" in log  # the duplicate: no count, no ETA
    etas = [(line, i) for i, line in enumerate(log) if " · ETA " in line]
    assert any("(more work)" in line for line, _ in etas)  # the sequential look is why it rose there
    last = None
    for line, _ in etas:
        value = line.split(" · ETA ")[1].split(" ")[0]
        minutes, seconds = value.rstrip("s").split("m")
        eta = int(minutes) * 60 + int(seconds)
        if last is not None and "(" not in line.split(" · ETA ")[1]:
            assert eta <= last
        last = eta
    assert frames[-1].eta == 0.0 and frames[-1].done == 12


def shown(f: progress.Frame) -> str:
    screen = Console(record=True, width=200, file=io.StringIO())
    screen.print(progress.frame_table("s", f))
    return screen.export_text()


def test_the_folded_line_counts_only_workers_without_a_row_and_says_whose():
    """A worker that claims seeds to train fused records itself on each a moment apart: the one
    not recorded yet is no other worker while every worker has its row (it read "other workers:
    1 running"). The line counts workers of other processes beyond OTHER_ROWS, and says who."""
    slots = [progress.Slot("w1", "running", 0.0), progress.Slot("w2", "running", 0.0)]
    fused = [running("w1", 0, 3, 0), running("w2", 1, 0, 0, "B"), running("w2", 2, 0, 0, "B"), running("?", 3, 0, 0, "B")]
    f = progress.frame(look(1, 0, fused, 0), slots, None, 1.0, 2)
    assert [r.worker for r in f.rows] == ["w1", "w2"] and f.others == 0
    assert "other" not in shown(f)
    many = look(0, 0, [running(f"far:{i}", i, 1, 0) for i in range(progress.OTHER_ROWS + 3)]
                + [running("far:0", 20, 1, 0), running("?", 90, 0, 0), running("?", 91, 0, 0)], 0)
    f = progress.frame(many, [progress.Slot("w1", "starting", 0.0)], None, 0.0, 1)
    assert len(f.rows) == 1 + progress.OTHER_ROWS and f.others == 3
    assert ("and 3 more workers of other processes running items of this study (another ablate run or ablate "
            "worker, on this host or another)") in shown(f)


def test_after_a_signal_the_view_shows_no_eta_but_that_the_run_stopped():
    """Once the local workers' items are re-queued ``interrupted`` nothing of this run will run
    what is left: no ETA (it read "ETA 0m49s (re-queued)"), "stopping" until they exited, then
    "stopped"; no status line in a log while they stop (each re-queue has its line), and a finish
    in between carries its count without an ETA. Another process's worker still running: an ETA."""
    def slots(*states: str, stopping: bool = True) -> list[progress.Slot]:
        return [progress.Slot(f"w{i + 1}", s, 0.0, stopping=stopping) for i, s in enumerate(states)]

    busy = [running("w1", 0, 5, 0), running("w2", 1, 5, 0)]
    first = progress.frame(look(10, 2, busy, 8), slots("running", "running", stopping=False), None, 10.0, 2)
    assert first.eta is not None and not first.halt
    interrupted = progress.Finished("A · seed 0", False, kind="interrupted", message="stopped by a signal; re-queued",
                                    worker="w1")
    ok = progress.Finished("A · seed 1", True, "val acc 0.500 · ", 10.0, worker="w2")
    one = look(11, 3, [running("w2", 1, 5, 0)], 8)
    mid = progress.frame(one, slots("idle", "running"), first, 11.0, 2, [interrupted, ok])
    assert mid.eta is None and mid.halt == "stopping" and mid.summary("s").endswith("0 failed · stopping")
    assert progress.log_lines("s", [interrupted, ok], [], mid, first) == [
        "interrupted A · seed 0: stopped by a signal; re-queued", "done A · seed 1: val acc 0.500 · 0m10s · 3/12 done"]
    end = progress.frame(look(12, 3, [], 9), slots("exited 130", "exited 130"), mid, 12.0, 1)
    assert end.summary("s") == "s: 3 done · 0 running · 9 waiting · 0 failed · stopped" and "ETA" not in shown(end)
    # A killed local worker's item still RUNNING until its heartbeat times out: stopped all the same.
    stale = progress.frame(look(12, 3, [running("w1", 0, 5, 0)], 8), slots("exited -9", "exited 130"), mid, 12.0, 1)
    assert stale.halt == "stopped"
    # Not halted: a local worker not signalled, another process's worker running, or nothing left.
    assert not progress.frame(one, slots("idle", "running", stopping=False), first, 11.0, 2).halt
    far = look(11, 3, [running("far:1", 7, 5, 0)], 9)
    assert progress.frame(far, slots("exited 130", "exited 130"), first, 11.0, 1).eta is not None
    assert progress.frame(look(12, 12, [], 0), slots("exited 130", "exited 0"), mid, 12.0, 1).eta == 0.0


def test_a_claim_before_its_worker_records_itself_is_no_row(study):
    screen = io.StringIO()
    console = Console(file=screen, force_terminal=True, width=160)
    view = progress.View(study, console, [("host:1", lambda: None), ("host:2", lambda: None)])
    with view:
        phases.claim(study)  # claimed; the worker records itself a moment later
        view.poll()
        assert view.frame is not None and [r.worker for r in view.frame.rows] == ["host:1", "host:2"]
        assert view.frame.running == 1 and view.frame.others == 0
    assert "│ ?" not in screen.getvalue()


def test_an_eta_outgrown_is_revised_up_saying_so_and_one_run_out_is_unknown_until_a_finish():
    slots = [progress.Slot("w1", "running", 0.0)]
    first = progress.frame(look(0, 1, [running("w1", 1, 5, -10)], 1), slots, None, 0.0, 1)
    # 5 steps left at its own pace so far (10 s for 5 steps: 2 s a step), then 10 waiting at 1 s a step.
    assert first.eta == pytest.approx(20.0)
    # Ten seconds on, the item is at step 6 of 10 after 20 s: it needs ~13 s more, the countdown says 10;
    # priced at 4 s a step now: 40 s a trial, 20 s of it left, then one more.
    later = look(10, 1, [running("w1", 1, 6, -10)], 1, rate=4.0)
    f = progress.frame(later, slots, first, 10.0, 1)
    assert f.eta == pytest.approx(60.0) and f.eta_note.startswith("revised")
    line = "s: 1 done · 1 running · 1 waiting · 0 failed · ETA 1m00s (revised: the running items are slower than measured)"
    assert progress.log_lines("s", [], [], f, first) == [line]
    assert progress.log_lines("s", [], [], f, first, last=line) == []  # never the same status line twice
    kept = progress.frame(look(11, 1, [running("w1", 1, 7, -11)], 1, rate=4.0), slots, f, 11.0, 1)
    assert kept.kept_note.startswith("revised")  # beside the ETA a while on a terminal ...
    end = progress.frame(look(12, 3, [], 0, rate=4.0), slots, kept, 12.0, 1)
    assert end.eta == 0.0 and not end.eta_note and not end.kept_note  # ... but not past the run's end
    # Run out with work left, and no pace to tell by (the item just started): unknown, not a saw-tooth.
    fresh = look(20, 1, [running("w1", 1, 1, 18)], 1, rate=1.0)
    out = progress.frame(fresh, slots, first, 20.0, 1)
    assert out.eta is None and out.overdue and not out.eta_note
    assert progress.log_lines("s", [], [], out, first) == ["s: 1 done · 1 running · 1 waiting · 0 failed · ETA ?"]
    still = progress.frame(look(22, 1, [running("w1", 1, 2, 18)], 1), slots, out, 22.0, 1)
    assert still.eta is None and still.overdue
    # A finish does not revise while the countdown runs: it may only bring the ETA down ...
    soon = progress.frame(look(5, 2, [running("w1", 2, 1, 4)], 0, rate=4.0), slots, first, 5.0, 1)
    assert soon.eta == pytest.approx(15.0) and not soon.eta_note
    # ... but one after the countdown ran out, with an item running, is not "0m00s": it says so.
    done = progress.frame(look(21, 2, [running("w1", 2, 1, 20)], 0, rate=4.0), slots, first, 21.0, 1)
    assert done.eta == pytest.approx(39.0) and done.eta_note.startswith("revised")
    # After one ran out it measures anew: 10 s a trial at 1 s a step, 3 s of it gone.
    again = progress.frame(look(23, 2, [running("w1", 2, 1, 20)], 0), slots, still, 23.0, 1)
    assert again.eta == pytest.approx(7.0) and not again.overdue


def test_a_finish_read_a_look_late_still_carries_its_count():
    """A trial that finishes between the look at the finishes and the snapshot is counted before
    its line is printed: the count waits for its line, so every count shows once, in order."""
    ok = progress.Finished("A · seed 0", True, "", 3.0)
    slots = [progress.Slot("w1", "running", 0.0)]
    first = progress.frame(look(0, 0, [running("w1", 0, 1, 0)], 3), slots, None, 0.0, 1)
    both = progress.frame(look(5, 2, [], 2), slots, first, 5.0, 1, [ok])  # two done, one line so far
    late = progress.frame(look(6, 2, [], 2), slots, both, 6.0, 1, [ok])
    lines = progress.event_lines([ok], [], both, first) + progress.event_lines([ok], [], late, both)
    assert [line.split(" · ")[2] for line in lines] == ["1/4 done", "2/4 done"]


def test_a_snapshot_counts_the_workers_running_its_items_at_least_one():
    running = [progress.Running(w, "c", 0, "replicate", 1, 10, None) for w in ("host:1", "host:2", "host:1")]
    assert progress.Snapshot(0, 0, 3, 0, 0, None, running).workers == 2
    assert progress.Snapshot(0, 0, 0, 3, 0, None).workers == 1


def simulated_etas(with_costs: bool, workers: int = 2, seeds: int = 8) -> list[tuple[int, int, float, float]]:
    """A study of a cheap cell (1 layer, 60 steps) and a dear one (4 layers, 160: about 4× its
    cost) queued cheap first, run by ``workers`` workers on a made-up machine whose per-step time
    is not the cost model's ((0.7 + 1.1 · layers), 0.5 s bookkeeping per trial, ±10% noise): at
    each finish, (done, total, the ETA the snapshot gives, the true time left)."""
    import numpy as np

    from ablate.runner.costs import cell_costs, trial_cost

    raw = copy.deepcopy(RAW)
    del raw["tune"]
    raw.update(seeds=seeds, factors={"variant": {"cheap": {"model.layers": 1, "train.steps": 60},
                                                 "dear": {"model.layers": 4, "train.steps": 160}}})
    spec = design.validate(raw)
    cells = {c.id: c for c in design.cells(spec)}
    queue_order = [i for i in design.items(spec)]
    queue_order.sort(key=lambda i: i.cell.config["model"]["layers"])  # the cheap cell first
    rng = np.random.default_rng(0)

    def truth(cell: str) -> float:
        cfg = cells[cell].config
        return (0.5 + cfg["train"]["steps"] * 0.004 * (0.7 + 1.1 * cfg["model"]["layers"])) * rng.uniform(0.9, 1.1)

    walls = [truth(i.cell.id) for i in queue_order]
    # List scheduling: the next item to whichever worker is free first.
    free, start, end = [0.0] * workers, [], []
    for wall in walls:
        w = min(range(workers), key=free.__getitem__)
        start.append(free[w])
        free[w] += wall
        end.append(free[w])
    makespan = max(end)
    units = {cid: trial_cost(c.config) for cid, c in cells.items()}
    out = []
    for t in sorted(set(end))[:-1]:
        done = [k for k in range(len(walls)) if end[k] <= t]
        running = [k for k in range(len(walls)) if start[k] <= t < end[k]]
        waiting = [k for k in range(len(walls)) if start[k] > t]
        steps = {k: queue_order[k].cell.config["train"]["steps"] for k in range(len(walls))}
        at = {k: int(steps[k] * (t - start[k]) / walls[k]) for k in running}
        items = [progress.Running(f"w{k}", "c", 0, "replicate", at[k], steps[k], None, cell_id=queue_order[k].cell.id)
                 for k in running]
        timed = [(queue_order[k].cell.id, walls[k], 1.0) for k in done]
        rate = float(np.median([walls[k] / steps[k] for k in done]))
        costs = cell_costs(units, timed) if with_costs else {}
        snap = progress.Snapshot(len(done), 0, len(running), len(waiting), 0, rate, items,
                                 float(np.mean([steps[k] for k in done + running])), cell_rates={},
                                 waiting_cells=[queue_order[k].cell.id for k in waiting], cell_costs=costs)
        out.append((len(done), len(walls), snap.eta_seconds(workers), makespan - t))
    return out


def test_an_eta_from_the_cost_model_is_within_30_percent_from_the_first_quarter_on():
    """Issue 43: cells 4× apart in cost, the cheap ones first. Priced by the cost model's units and
    corrected by the finished trials, the ETA is within ±30% of the truth at every finish from a
    quarter done on; the measured seconds per step alone are not (they price the dear cell's steps
    at the cheap one's rate)."""
    etas = simulated_etas(with_costs=True)
    assert len(etas) >= 12
    for done, total, eta, left in etas:
        if 4 * done >= total and left > 1.0:
            assert abs(eta - left) <= 0.3 * left, (done, eta, left)
    plain = [(done, eta, left) for done, total, eta, left in simulated_etas(with_costs=False) if 4 * done >= total]
    assert any(abs(eta - left) > 0.3 * left for done, eta, left in plain)


def test_the_snapshot_prices_cells_by_the_cost_model_once_a_trial_finished(study):
    items = design.items(design.validate(study.user_attrs["spec"], "study"))
    assert progress.snapshot(study, items).cell_costs == {}  # nothing measured yet
    trial = phases.claim(study)
    finish(study, trial)
    snap = progress.snapshot(study, items)
    assert set(snap.cell_costs) == {i.cell.id for i in items} and all(v > 0 for v in snap.cell_costs.values())
    assert snap.eta_seconds(1) == pytest.approx(sum(snap.cell_costs[c] for c in snap.waiting_cells))
    # ablate status reads the trials' own configs (no spec items): the same prices.
    assert progress.snapshot(study).cell_costs == pytest.approx(snap.cell_costs)


def test_status_shows_an_item_claimed_before_its_worker_recorded_itself_as_starting(study):
    trial = phases.claim(study)  # claimed: RUNNING, no worker recorded yet
    screen = Console(record=True, width=160, file=io.StringIO())
    screen.print(progress.table("s", progress.snapshot(study), 1))
    text = screen.export_text()
    assert progress.UNRECORDED in text and "│ ?" not in text
    queue.beat(study, trial.number, {"worker": "host:1", "step": 2})
    screen = Console(record=True, width=160, file=io.StringIO())
    screen.print(progress.table("s", progress.snapshot(study), 1))
    assert "host:1" in screen.export_text() and progress.UNRECORDED not in screen.export_text()


def test_a_worker_training_seeds_fused_shows_them_all_in_its_row():
    """``--fuse``: a worker holds several running items of one cell at once; its row names their
    seeds, not one of them (an older item of another cell is a stale claim, not shown)."""
    def item(number: int, seed: int, cell: str) -> progress.Running:
        return progress.Running("w1", cell, seed, "replicate", 5, STEPS, T0, number, cell_id=cell)

    held = [item(0, 4, "B"), item(1, 0, "A"), item(2, 2, "A"), item(3, 1, "A")]
    f = progress.frame(look(1, 0, held, 0), [progress.Slot("w1", "running", 0.0)], None, 1.0, 1)
    (row,) = f.rows
    assert (row.cell, row.seed) == ("A", "0,1,2")
    many = [item(i, i, "A") for i in range(6)]
    (row,) = progress.frame(look(1, 0, many, 0), [], None, 1.0, 1).rows  # another process's worker
    assert row.seed == "0,1,2,3,…+2"
    # Its latest item stopped early at step 3 and waits for the others: the row goes on with them.
    held[-1].step, held[-1].ended, held[-2].step = 3, True, 8
    (row,) = progress.frame(look(1, 0, held, 0), [progress.Slot("w1", "running", 0.0)], None, 1.0, 1).rows
    assert row.step == f"8/{STEPS}"


def test_a_view_whose_workers_were_signalled_ends_saying_it_stopped(study):
    """In a pipe: a local worker's item re-queued ``interrupted``, then the worker exits 130: no
    status line while it stops, and the last one says the run stopped, with no ETA. A worker of
    this process that raised (the in-process worker of ``ablate run``) stops the view the same."""
    log = io.StringIO()
    code: dict[str, int | None] = {"host:1": None}
    view = progress.View(study, Console(file=log, force_terminal=False, width=200), [("host:1", lambda: code["host:1"])])
    with view:
        trial = phases.claim(study)
        queue.beat(study, trial.number, {"worker": "host:1", "step": 2})
        view.poll()
        queue.finish(study, trial, TrialState.FAIL, {"status": "failed", "failure_kind": "interrupted",
                                                     "failure_message": "stopped by a signal; re-queued",
                                                     "worker": "host:1"})
        queue.requeue(study, trial.number, None)
        view.poll()
        code["host:1"] = 130
    lines = log.getvalue().splitlines()
    assert lines[1:] == ["interrupted RotRNN · seed 0: stopped by a signal; re-queued",
                         f"{study.study_name}: 0 done · 0 running · 4 waiting · 0 failed · stopped"]
    screen = io.StringIO()
    view = progress.View(study, Console(file=screen, force_terminal=True, width=200), [("host:2", lambda: None)])
    with pytest.raises(KeyboardInterrupt), view:
        view.poll()
        raise KeyboardInterrupt
    assert view.frame is not None and view.frame.halt == "stopped"
    text = screen.getvalue()
    assert "0 failed · ETA ?" in text and text.rfind("0 failed · stopped") > text.rfind("ETA")  # the last frame


def test_an_item_resuming_a_checkpoint_says_from_which_step_in_its_start_line(study, tmp_path):
    """A killed attempt's item resumes from its checkpoint: its worker records the step with its
    start (``progress.start_attrs``), and the start line says so — seen running, or only finished.
    A re-queued copy carries none of its predecessor's attempt (``queue.ATTEMPT_ATTRS``); one
    queued before that, in a stored study, holds the dead worker and its step until its own start:
    no start line (nor row) for it before, as it read "on" the dead worker."""
    import torch

    attempt = progress.ATTEMPT
    assert progress.start_attrs(7, tmp_path / "none.pt") == {attempt: 7}
    (tmp_path / "bad.pt").write_bytes(b"not a checkpoint")
    assert progress.start_attrs(7, tmp_path / "bad.pt") == {attempt: 7}  # training's own error says what is wrong
    torch.save({"step": 200, "model": {"w": torch.zeros(3)}}, tmp_path / "ckpt.pt")
    assert progress.start_attrs(7, tmp_path / "ckpt.pt") == {attempt: 7, "resumed_at": 200}
    killed = phases.claim(study)
    queue.beat(study, killed.number, {"worker": "dead:1", attempt: killed.number, "step": 300})
    queue.finish(study, killed, TrialState.FAIL, {"status": "failed", "failure_kind": "killed"})
    queue.requeue(study, killed.number, None)
    log = io.StringIO()
    view = progress.View(study, Console(file=log, force_terminal=False, width=200), [("host:1", lambda: None)])
    with view:
        view.poll()
        copy = queue.claim(study, where={"item": queue.trial(study, killed.number).user_attrs["item"]})
        assert copy.number != killed.number and not {"worker", attempt, "step"} & set(
            queue.trial(study, copy.number).user_attrs)
        queue.beat(study, copy.number, {"worker": "dead:1", attempt: killed.number, "step": 300})  # as queued before
        snap = view.poll()
        assert [r.worker for r in snap.items] == ["?"] and view.frame is not None and view.frame.others == 0
        queue.beat(study, copy.number, {"worker": "host:1", **progress.start_attrs(copy.number, tmp_path / "ckpt.pt")})
        view.poll()
        short = phases.claim(study)  # started and finished between two looks
        queue.beat(study, short.number, {"worker": "host:1", attempt: short.number, "resumed_at": 3})
        finish(study, short)
        fresh = phases.claim(study)
        queue.beat(study, fresh.number, {"worker": "host:1"})
        view.poll()
    lines = log.getvalue().splitlines()
    assert not any("dead:1" in line for line in lines)
    assert (f"start RotRNN · seed 0 (replicate, trial {copy.number}) on host:1, resumed from its checkpoint at "
            "step 200") in lines
    assert f"start RotRNN · seed 1 (replicate, trial {short.number}) on host:1, resumed from its checkpoint at step 3" \
        in lines
    assert f"start LRU · seed 0 (replicate, trial {fresh.number}) on host:1" in lines


def test_a_fused_groups_start_is_one_line_once_its_members_started():
    """Item 19 of the P1 probe: "start LRU, ξ · seed 2" came a look after its three siblings,
    which all ended together. A worker's items of one cell that start in one look are one line;
    one that resumes a checkpoint, or of another worker, has its own."""
    group = [running("w1", n, 0, 0, "B") for n in (8, 9, 10, 11)]
    for r, seed in zip(group, (0, 1, 2, 3), strict=True):
        r.seed = seed
    resumed = running("w1", 12, 0, 0, "B")
    resumed.resumed_at = 40
    lines = progress.start_lines([*group, resumed, running("w2", 13, 0, 0, "B")])
    assert lines == ["start B · seeds 0–3 (replicate, trials 8–11, fused) on w1",
                     "start B · seed 0 (replicate, trial 12) on w1, resumed from its checkpoint at step 40",
                     "start B · seed 1 (replicate, trial 13) on w2"]
    gaps = [running("w1", n, 0, 0) for n in (2, 6, 7)]
    for r, seed in zip(gaps, (0, 2, 5), strict=True):
        r.seed = seed
    assert progress.start_lines(gaps) == ["start A · seeds 0, 2, 5 (replicate, trials 2, 6, 7, fused) on w1"]


def test_a_started_item_waits_for_the_rest_of_its_group_a_few_seconds_at_most(study):
    """The first item of a fused claim is named at the claim (``fused.share``), before its
    siblings are claimed: its line waits while an item of its cell has not started (HOLD_S)."""
    clock = [0.0]
    view = progress.View(study, Console(file=io.StringIO(), width=200), clock=lambda: clock[0])
    named = running("w1", 0, 0, 0, "B")
    named.begun = False
    unrecorded = running("?", 1, 0, 0, "B")
    look_ = look(0, 0, [named, unrecorded], 0)
    assert view._started(look_) == []
    named.begun, unrecorded.worker = True, "w1"
    assert [r.number for r in view._started(look(1, 0, [named, unrecorded], 0))] == [0, 1]
    alone = running("w2", 5, 0, 0, "C")
    alone.begun = False  # a worker of an older version records no attempt: shown after HOLD_S
    assert view._started(look(2, 0, [alone], 0)) == []
    clock[0] = progress.HOLD_S + 2.0
    assert [r.number for r in view._started(look(9, 0, [alone], 0))] == [5]


def test_an_estimate_a_look_behind_the_countdown_is_no_revision():
    """Between finishes the estimate lags the countdown by a look: a second or two above it is no
    reason to say "revised" (a log printed it four times in 4 s, the ETA falling each time)."""
    slots = [progress.Slot("w1", "running", 0.0)]
    first = progress.frame(look(0, 1, [running("w1", 1, 5, -10)], 1), slots, None, 0.0, 1)
    near = look(1, 1, [running("w1", 1, 3, -9)], 1, rate=1.5)  # its pace says slower; the estimate 1 s over
    assert near.eta_seconds(1) == pytest.approx(first.eta)
    f = progress.frame(near, slots, first, 1.0, 1)
    assert f.eta == pytest.approx(first.eta - 1.0) and not f.eta_note
    far = progress.frame(look(1, 1, [running("w1", 1, 3, -9)], 1, rate=1.0), slots, first, 1.0, 1)
    assert far.eta is not None and far.eta > first.eta and far.eta_note == SLOWER


def test_a_finish_that_prices_what_is_left_far_above_the_countdown_revises_it_saying_so():
    """lru_ablations' run printed "ETA 55m15s" on a finish while what was left was priced at 3h48m:
    a finish could only lower the countdown. Within half again the countdown, or a minute, it
    still holds (a finish's noise is no reason for a saw-tooth)."""
    slots = [progress.Slot("w1", "running", 0.0)]
    first = progress.frame(look(0, 0, [running("w1", 0, 1, 0)], 30), slots, None, 0.0, 1)
    assert first.eta == pytest.approx(31 * STEPS)  # 1 s a step: the running trial, then 30 more

    def after_a_finish(rate: float) -> progress.Frame:
        return progress.frame(look(10, 1, [running("w1", 1, 0, 10)], 29, rate=rate), slots, first, 10.0, 1)
    countdown = first.eta - 10.0
    held = after_a_finish(1.4)  # 1.4 × 300 s: within half again
    assert held.eta == pytest.approx(countdown) and not held.eta_note
    revised = after_a_finish(3.0)  # the rest three times the price: 900 s and more against 300
    assert revised.eta == pytest.approx(look(10, 1, [running("w1", 1, 0, 10)], 29, rate=3.0).eta_seconds(1))
    assert revised.eta >= 3 * countdown and revised.eta_note == LONGER
    assert progress.log_lines("s", [], [], revised, first)[-1].endswith(f"({LONGER})")
    small = progress.frame(look(10, 1, [running("w1", 1, 0, 10)], 1, rate=3.0), slots,
                           progress.frame(look(0, 0, [running("w1", 0, 1, 0)], 2), slots, None, 0.0, 1), 10.0, 1)
    assert small.eta == pytest.approx(20.0) and not small.eta_note  # 3× but a minute over at most: held


def test_a_fused_group_whose_trials_stopped_early_prices_a_dearer_cell_by_its_shape(tmp_path):
    """rotrnn_norm_stability's ETA read 12 minutes with 28 left: each trial of a fused group was
    priced at its own steps, though the group trains until its longest trial stops (an early stop
    is frozen, not freed), so 8 equal walls over 4,300–8,000 steps fit a line with no slope and
    its 4-layer cells cost as much as its 1-layer ones. The group's wall is of its longest trial's
    steps: a cell of 2.5× the work costs 2.5× as much."""
    from ablate.runner.costs import trial_cost

    raw = copy.deepcopy(RAW)
    del raw["tune"]
    raw.update(factors={"model.layers": [1, 4]}, seeds=4)
    raw["train"]["steps"] = 8
    spec = design.validate(raw)
    opt, _ = st.prepare(spec, design.items(spec), stores(tmp_path))
    items = design.items(spec)
    group = [phases.claim(opt) for _ in range(4)]  # one worker's fused claim of the 1-layer cell's seeds
    assert len({t.user_attrs["cell_id"] for t in group}) == 1
    for trial in group:
        queue.set_running_attrs(opt, trial, {"worker": "w1"})
    for trial, steps in zip(group, (3, 4, 6, 8), strict=True):
        queue.finish(opt, trial, TrialState.COMPLETE, {"status": "complete", "val_accuracy": 0.5, "steps": steps}, 0.5)
    with sqlite3.connect(tmp_path / "optuna.db") as db:  # one wall for the group, as a fused group's trials take
        db.executemany("UPDATE trials SET datetime_start = ?, datetime_complete = ? WHERE number = ?",
                       [("2026-12-07 04:00:00.000000", "2026-12-07 04:03:00.000000", t.number) for t in group])
    costs = progress.snapshot(opt, items).cell_costs
    one, four = group[0].user_attrs["cell_id"], next(c for c in costs if c != group[0].user_attrs["cell_id"])
    shape = trial_cost(next(i.cell.config for i in items if i.cell.id == four)) / trial_cost(
        next(i.cell.config for i in items if i.cell.id == one))
    assert shape > 2.0
    assert costs[four] / costs[one] == pytest.approx(shape, rel=0.1)


def test_a_tuning_trial_is_told_from_its_cells_others_on_its_seed_by_its_setting(tmp_path):
    """A tuning trial shares its seed with the cell's other tuning trials on that seed (three
    rows "RotRNN · 10000 · tune" for three learning rates, seen on rotrnn_vs_lru_tokens): its start
    and done lines, its row in `ablate status` and its JSON say its setting."""
    spec = design.validate(copy.deepcopy(RAW))  # tuned: train.lr and train.batch_size, 4 trials a cell
    opt, _ = st.prepare(spec, design.items(spec), stores(tmp_path))
    log = io.StringIO()
    view = progress.View(opt, Console(file=log, force_terminal=False, width=100), [("host:1", lambda: None)])
    with view:
        view.poll()
        trial = phases.claim(opt)
        params = phases.prepare_item(opt, trial)["params"]
        words = f"lr={params['train.lr']:.3g} batch_size={params['train.batch_size']}"
        queue.beat(opt, trial.number, {"worker": "host:1", "step": 2})
        snap = view.poll()
        screen = io.StringIO()
        Console(file=screen, width=200).print(progress.table(opt.study_name, snap, 1))
        assert f"tune {words}" in screen.getvalue()
        (shown,) = progress.status_json(opt.study_name, snap, 1)["running"]
        assert shown["params"] == params
        finish(opt, trial)
        view.poll()
    lines = log.getvalue().splitlines()
    seed = trial.user_attrs["seed"]
    assert lines[0] == f"start RotRNN · seed {seed} (tune {words}, trial {trial.number}) on host:1"
    assert lines[1].startswith(f"done RotRNN · seed {seed} (tune {words}): val acc 0.500")


def test_a_fused_group_of_tuning_trials_names_each_setting_once():
    group = [running("w1", n, 0, 0) for n in range(4)]
    for r, (seed, lr) in zip(group, [(0, 0.01), (0, 0.0025), (1, 0.01), (1, 0.0025)], strict=True):
        r.seed, r.phase, r.params = seed, "tune", {"train.lr": lr}
    assert progress.start_lines(group) == ["start A · seeds 0–1 (tune lr=0.0025,0.01, trials 0–3, fused) on w1"]
    (row,) = progress.frame(look(1, 0, group, 0), [progress.Slot("w1", "running", 0.0)], None, 1.0, 1).rows
    assert (row.seed, row.phase) == ("0,1", "tune lr=0.0025,0.01")
    assert progress.start_lines(group[:2]) == ["start A · seed 0 (tune lr=0.0025,0.01, trials 0–1, fused) on w1"]


def test_a_fused_replicate_that_stopped_early_reads_ended_until_its_group_ends(study):
    """A replicate trained fused that stops early waits, frozen, for its group's longest; `ablate
    status` said "3600/8000" for it while its siblings went on, as if it were stuck. Its heartbeat
    records that it ended (its final metrics came: ``TrialRun.progress``); a re-queued copy
    (a killed worker's) carries none of it."""
    trial = phases.claim(study)
    queue.beat(study, trial.number, {"worker": "host:1", "step": 3, "ended": True})
    snap = progress.snapshot(study)
    screen = io.StringIO()
    Console(file=screen, width=200).print(progress.table(study.study_name, snap, 1))
    assert "3/5 ended" in screen.getvalue()
    assert progress.status_json(study.study_name, snap, 1)["running"][0]["ended"] is True
    queue.finish(study, trial, TrialState.FAIL, {"status": "failed", "failure_kind": "interrupted"})
    queue.requeue(study, trial.number, None)
    copy_ = [t for t in study.get_trials() if t.state == TrialState.WAITING
             and t.user_attrs.get("seed") == trial.user_attrs["seed"]]
    assert copy_ and all("ended" not in t.user_attrs for t in copy_)


def test_a_cell_s_tuned_setting_is_said_once_when_its_tuning_ends_with_a_note_for_an_edge_pick(tmp_path):
    """rotrnn_vs_lru_tokens tuned both models to its grid's top, which only the report said, after
    every replicate trained. Said as the replicates started, it missed those that ran between two
    looks (a log of a 16-trial study had none); said when a finish ends a cell's tuning, it comes
    before any replicate, with the pick itself. Once a cell; no note for a pick inside the space."""
    raw = copy.deepcopy(RAW)
    raw["tune"] = {**raw["tune"], "sampler": "grid", "trials": 3, "space": {"train.lr": [1e-3, 3e-3, 1e-2]}}
    spec = design.validate(raw)
    opt, _ = st.prepare(spec, design.items(spec), stores(tmp_path))
    inside, edge = design.cells(spec)
    log = io.StringIO()
    view = progress.View(opt, Console(file=log, force_terminal=False, width=300), [("host:1", lambda: None)],
                         design.items(spec))
    with view:
        while (trial := phases.claim(opt)) is not None and trial.user_attrs["phase"] == "tune":
            attrs = phases.prepare_item(opt, trial)
            lr = attrs["params"]["train.lr"]
            value = (0.6 if lr == 3e-3 else 0.5) if attrs["cell_id"] == inside.id else lr  # the edge cell: larger, better
            queue.finish(opt, trial, TrialState.COMPLETE, {"val_accuracy": value, "status": "complete"}, value)
            view.poll()
        assert trial is not None and trial.user_attrs["phase"] == "replicate"  # none has trained
        said = [line for line in log.getvalue().splitlines() if line.startswith(("tuned ", "note: "))]
        queue.finish(opt, trial, TrialState.COMPLETE, {"val_accuracy": 0.5, "status": "complete"}, 0.5)
        view.poll()
    assert said == [f"tuned {inside.label}: lr=0.003 (val_accuracy 0.600)",
                    f"tuned {edge.label}: lr=0.01 (val_accuracy 0.010) · train.lr at the largest end of its space",
                    phases.EDGE_NOTE]
    assert [line for line in log.getvalue().splitlines() if line.startswith(("tuned ", "note: "))] == said  # once
