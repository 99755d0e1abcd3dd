"""ablate.runner.signals: when a SIGINT or SIGTERM interrupts a worker — at once outside a critical
section, at its end inside one, later signals ignored — in-process, then with real worker
processes at every point of an item's life (tests/processes.py)."""

from __future__ import annotations

import os
import re
import signal
import time

import processes as procs
import pytest

from ablate.runner.signals import SIGNALS, Interrupted, Signals


@pytest.fixture
def handlers():
    """The process's handlers are put back after each test (Signals leaves SIG_IGN after a signal)."""
    saved = {s: signal.getsignal(s) for s in SIGNALS}
    yield
    for s, handler in saved.items():
        signal.signal(s, handler)


def test_a_signal_interrupts_at_once_outside_a_critical_section(handlers):
    with pytest.raises(Interrupted) as caught, Signals():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises in here
    assert caught.value.signum == signal.SIGTERM
    assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN  # the process is stopping: no second one


def test_inside_a_critical_section_the_signal_comes_at_its_end_and_later_ones_add_nothing(handlers):
    done = []
    with Signals() as signals:
        with pytest.raises(Interrupted):
            with signals.critical():
                os.kill(os.getpid(), signal.SIGINT)
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.1)
                done.append("recorded")  # the section is not cut in two
        assert done == ["recorded"] and signals.signum == signal.SIGINT
        with pytest.raises(Interrupted):  # dropped somewhere (a __del__): raised again at a safe point
            signals.sleep(0.01)
        signals.delivered = True  # caught: the clean-up runs without another Interrupted
        signals.check()
        signals.sleep(0.01)


def test_without_a_signal_the_handlers_are_put_back(handlers):
    before = {s: signal.getsignal(s) for s in SIGNALS}
    with Signals() as signals:
        assert all(signal.getsignal(s) != before[s] for s in SIGNALS)
        with signals.critical():
            pass
        signals.check()
    assert {s: signal.getsignal(s) for s in SIGNALS} == before


# (command, signal, fault, the item afterwards). A pause at "claim" or "commit" lies inside a
# critical section: the signal takes effect at its end (the claim is then re-queued, the record
# completes); elsewhere the signal interrupts at once.
SIGNAL_CASES = [
    ("worker", signal.SIGTERM, "pause@claim", "waiting"),
    ("worker", signal.SIGINT, "pause@open_run", "waiting"),
    ("run", signal.SIGTERM, "slow@2", "waiting"),  # mid-step
    ("run", signal.SIGINT, "pause@checkpoint", "waiting"),
    ("run", signal.SIGTERM, "pause@record", "waiting"),
    ("run", signal.SIGINT, "pause@commit", "done"),
    ("worker", signal.SIGTERM, "pause@committed", "done"),
]


@pytest.mark.parametrize(("command", "sig", "fault", "after"), SIGNAL_CASES,
                         ids=[f"{c[0]}-{signal.Signals(c[1]).name}-{c[2]}" for c in SIGNAL_CASES])
def test_a_signal_at_any_point_leaves_nothing_running_and_says_what_was_requeued(tmp_path, command, sig, fault,
                                                                                 after):
    procs.write_spec(tmp_path, train={**procs.SPEC["train"], "steps": 40} if fault == "slow@2" else
                     procs.SPEC["train"])
    pause = "2" if fault.endswith(("claim", "commit")) else "120"  # critical sections end by themselves
    env = {"ABLATE_FAULT": fault, "ABLATE_FAULT_PAUSE_S": pause}
    if command == "worker":
        assert procs.ablate(tmp_path, "run", "spec.yaml", "--workers", "0").returncode == 0
        proc = procs.spawn(tmp_path, "worker", "faults", "--checkpoint-every", "2", **env)
    else:
        proc = procs.spawn(tmp_path, "run", "spec.yaml", "--checkpoint-every", "2", **env)
    mark = tmp_path / "fault.mark"
    if fault == "slow@2":
        procs.wait_for(lambda: procs.training_step(tmp_path) >= 2, "a trial training", proc)
    else:
        procs.wait_for(mark.exists, f"the worker at {fault}", proc)
    out, err, seconds = procs.stop(proc, sig)
    print(f"{command} {signal.Signals(sig).name} at {fault}: exit after {seconds:.1f} s")
    assert proc.returncode == procs.SIGNAL_EXIT[sig], (out, err)
    assert "Traceback" not in err + out
    line = procs.signal_line(err)
    states = procs.assert_consistent(tmp_path)
    first = procs.trials(tmp_path)[0]["item"]
    assert states[first] == after, procs.trials(tmp_path)
    assert sorted(states.values()) == sorted([after, "waiting"])  # the other item was never claimed
    if after == "waiting":
        assert "re-queued 1 running item: baseline · seed 0" in line
        interrupted = procs.trials(tmp_path)[0]
        assert interrupted["failure_kind"] == "interrupted"
        assert [r["ablate.failure_kind"] for r in procs.runs(tmp_path)] in ([], ["interrupted"])
    else:
        assert "no running item to re-queue" in line
        assert [r["status"] for r in procs.runs(tmp_path)] == ["FINISHED"]


def test_a_second_signal_during_clean_up_does_not_cut_it_and_the_study_resumes(tmp_path):
    procs.write_spec(tmp_path)
    proc = procs.spawn(tmp_path, "run", "spec.yaml", ABLATE_FAULT="pause@record", ABLATE_FAULT_PAUSE_S="120")
    procs.wait_for((tmp_path / "fault.mark").exists, "the worker recording", proc)
    proc.send_signal(signal.SIGTERM)
    for _ in range(5):  # a scheduler's repeated SIGTERM, an impatient Ctrl-C
        time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    # 143 (SIGTERM's) as a rule; 130 when the main thread was inside one C call while both signals
    # arrived, since Python then runs the pending handlers in signal-number order (SIGINT first).
    assert proc.returncode in (143, 130) and "Traceback" not in err, err
    assert "re-queued 1 running item:" in procs.signal_line(err)
    assert sorted(procs.assert_consistent(tmp_path).values()) == ["waiting", "waiting"]
    # `status`: the cell table agrees with the summary (the interrupted item is pending, not failed).
    status = procs.ablate(tmp_path, "status", "faults")
    row = next(line for line in status.stdout.splitlines() if "baseline" in line)
    assert [int(x) for x in re.findall(r"\d+", row)] == [0, 0, 0, 2, 0, 0, 0], status.stdout  # pending
    assert "0 done · 0 running · 2 waiting · 0 failed" in status.stdout
    res = procs.ablate(tmp_path, "run", "spec.yaml")
    assert res.returncode == 0, res.stderr
    assert sorted(procs.assert_consistent(tmp_path).values()) == ["done", "done"]


