"""The ETA in words and the view's countdown (``ablate.runner.countdown``); the countdown frame by
frame is tested through the view's frames in test_runner_progress.py."""

from __future__ import annotations

from ablate.runner import countdown
from ablate.runner.eta import Running, Snapshot

STEPS = 100


def test_the_shown_eta_is_never_zero_while_items_run():
    assert countdown.eta_words(0.2, running=3) == "ETA finishing"
    assert countdown.eta_words(0.0, running=0) == "ETA 0m00s"
    assert countdown.eta_words(65.0, running=1) == "ETA 1m05s"
    assert countdown.eta_words(None, running=1) == "ETA ?"


def test_status_with_no_worker_running_shows_no_eta_as_if_one_were():
    """``ablate status`` of a stopped study read "ETA 1m06s": the time one worker would take, for
    a run nobody runs."""
    idle = Snapshot(4, 0, 0, 12, 0, 0.1, [], STEPS, waiting_cells=["A"] * 12)
    assert countdown.eta_text(idle, 1) == "no worker running (what is left: about 2m00s for one worker)"
    busy = Snapshot(4, 0, 1, 11, 0, 0.1, [Running("w1", "A", 0, "replicate", 10, STEPS, None, cell_id="A")],
                    STEPS, waiting_cells=["A"] * 11)
    assert countdown.eta_text(busy, 1).startswith("ETA ")
    assert countdown.eta_text(Snapshot(16, 0, 0, 0, 0, 0.1), 1) == "nothing left to run"
