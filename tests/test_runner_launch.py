"""``run_study``, what ``ablate run`` calls, driven in this process: it queues, runs on one worker
under the live view, says what it did and returns the study's state; a second call runs nothing."""

from __future__ import annotations

import io

from rich.console import Console
from support import stores

from ablate import design
from ablate.runner.launch import look_line, run_study

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


def test_queue_only_queues_and_returns_nothing_to_judge(tmp_path, monkeypatch):
    monkeypatch.setenv("ABLATE_CACHE_DIR", str(tmp_path / "cache"))
    spec = design.validate(SPEC)
    out, o, err, _ = consoles()
    assert run_study(spec, stores(tmp_path), out, err, workers=0) is None
    assert o.getvalue().splitlines()[0] == "launch: 2 trials, 0 done, 0 failed, 2 to run (2 newly queued)"
    out, o, err, _ = consoles()  # queued already: nothing newly queued
    assert run_study(spec, stores(tmp_path), out, err, workers=0) is None
    assert "2 to run (0 newly queued)" in o.getvalue()


def test_one_worker_runs_every_item_and_a_second_call_runs_none(tmp_path, monkeypatch):
    monkeypatch.setenv("ABLATE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("ABLATE_CHECKPOINT_DIR", str(tmp_path / "checkpoints"))
    spec = design.validate(SPEC)
    out, o, err, _ = consoles()
    after = run_study(spec, stores(tmp_path), out, err, workers=1, checkpoint_every=0)
    assert after is not None
    assert (after.done, after.failed, after.unfinished, after.errors, after.worker_failures) == (2, 0, 0, 0, [])
    out, o, err, _ = consoles()
    again = run_study(spec, stores(tmp_path), out, err, workers=1)
    assert again == after
    assert o.getvalue().startswith("launch: 2 trials, 2 done, 0 failed, 0 to run (0 newly queued)")


def test_look_line_says_what_a_look_decided():
    assert look_line({"look": 2, "decided": 1, "open": 3, "queued": 6}) == (
        "look 2: 1 comparison(s) decided, 3 open; 6 seed item(s) queued for the next look")
    assert look_line({"look": 3, "decided": 4, "finished": True}) == (
        "look 3: 4 comparison(s) decided; the sequential design is finished")
