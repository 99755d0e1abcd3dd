"""The ETA a study's views show, in words, and the live view's countdown: what ``ablate run`` shows
between two looks at the store is the previous ETA less the time since, not each look's fresh
estimate (``ablate.runner.eta``), which moves with every heartbeat and finish. The countdown rises
only for a reason it says beside it: more work, re-queued items, fewer workers, running items
slower than measured, or finished trials that took far longer than priced.
"""

from __future__ import annotations

from typing import Protocol

from ablate.runner.eta import Snapshot
from ablate.terminal import duration

#: The ETA's words for a study with nothing running or waiting (not "ETA 0m00s", as if something
#: were about to end).
NOTHING_LEFT = "nothing left to run"
FINISHING = "ETA finishing"
LAG_S = 2.0  # seconds an estimate may exceed the countdown between finishes before it is revised up
SLOWER = "revised: the running items are slower than measured"
# A finish revises the countdown up when it prices what is left this far above it (both): a noisy
# finish is no reason to, but lru_ablations' countdown showed 55m with 3h48m priced.
REVISE_RATIO, REVISE_S, LONGER = 1.5, 60.0, "revised: the finished trials took longer than priced"


def eta_words(seconds: float | None, running: int) -> str:
    """"ETA 1m05s"; "ETA finishing" when items run and the estimate rounds to nothing (a fused
    group's last members recording their results): never "ETA 0m00s" while something runs."""
    return FINISHING if running and seconds is not None and seconds < 0.5 else f"ETA {duration(seconds)}"


def eta_text(snap: Snapshot, workers: int) -> str:
    """``ablate status``'s ETA: ``eta_words``, or with items left and none running "no worker
    running" and what is left would take one worker (the ETA of a run that is not running)."""
    if snap.remaining and not snap.running:
        one = snap.eta_seconds(1)
        return "no worker running" + (f" (what is left: about {duration(one)} for one worker)" if one else "")
    if not snap.remaining and not snap.running:
        return NOTHING_LEFT
    return eta_words(snap.eta_seconds(workers), snap.running)


class Shown(Protocol):
    """What the view showed last (``progress.Frame``): when, its ETA and the counts it was for."""

    at: float
    eta: float | None
    overdue: bool
    done: int
    total: int
    waiting: int
    failed: int
    workers: int


def next_eta(snap: Snapshot, raw: float | None, done: int, workers: int, prev: Shown | None, clock: float,
             local: set[str]) -> tuple[float | None, str, bool]:
    """The ETA to show, why it rose ("" when it did not) and whether it is overdue: at most the
    previous one less the time since, unless the work grew, items were re-queued or workers
    left. Between finishes only: a countdown that a running item outgrows at its own pace so far
    is revised up, saying so; one that ran out becomes unknown until an item finishes (the
    estimate that ran out would run out again: e.g. priced on reused items, without the
    workers' start-up). A finish that measures a slower rate only lowers the ETA less, unless it
    prices what is left well above the countdown (``REVISE_RATIO``). The paces are the ``local``
    workers' items' when there are any (a killed run's stale trial has no pace to speak of)."""
    if prev is None or raw is None:
        return raw, "", False
    waiting = snap.waiting + snap.new
    reason = ("more work" if snap.total > prev.total else
              "re-queued" if snap.failed > prev.failed or waiting > prev.waiting else
              "fewer workers" if workers < prev.workers else "")
    if prev.eta is None:
        if prev.overdue and done == prev.done and not reason:
            return None, "", True
        return raw, "", False
    countdown = max(0.0, prev.eta - (clock - prev.at))
    if raw <= countdown:
        return raw, "", False
    if reason:
        return raw, reason, False
    if done > prev.done and countdown <= 0.0:  # a finish after it ran out: the rest is slower than priced
        return raw, SLOWER, False
    if done > prev.done and raw > REVISE_RATIO * countdown and raw - countdown > REVISE_S:
        return raw, LONGER, False
    if done == prev.done:
        if countdown <= 0.0:
            return None, "", True
        # A quarter in at least: a trial's first steps carry its start-up (data, compilation).
        paced = [r for r in snap.items if 0 < r.step < r.steps and 4 * r.step >= r.steps
                 and (not local or r.worker in local)]
        needs = max(((r.steps - r.step) * (r.elapsed(snap.taken) or 0.0) / r.step for r in paced), default=0.0)
        # Not for a second or two: the estimate lags the countdown by a look (a line each second).
        if countdown < needs and raw > countdown + max(LAG_S, 0.1 * countdown):
            return raw, SLOWER, False
    return countdown, "", False
