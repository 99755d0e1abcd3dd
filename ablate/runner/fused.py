"""A worker's fused items: several claimed items of one cell trained as one model (``ablate worker
--fuse K``, issue 47; ``ablate.training_fused``).

Each item goes through the worker's own path (runner/worker.py ``run_item``), in a thread of its
own: the link to a result found elsewhere, the choice of its setting, its start attributes, its
MLflow run and reporter, its heartbeat, and the record of its outcome (complete, diverged,
pruned, error, retried, superseded), exactly as for an item trained alone. Only the training call
meets here: ``run_item`` is given ``Group.train(i)``, and once every item of the group has either
asked to train or ended without training (linked, failed before training, superseded), the main
thread (where signals arrive, as when an item trains alone) trains the ones that fuse with the
first (``ablate.training_fused.fusable``) in one ``run_fused`` and hands each its result or its
exception. A group of one, claimed alone where its cell fuses, trains fused too: ``run_fused``
gives a replicate the same bits whatever K (it pairs a lone one with a twin), where apart
differs in the last bits, so a seed's run does not depend on whether its worker happened to claim
it alone. What does not fuse trains apart with ``run_trial``, one after another: an item whose
setting differs in more than the free train settings (a tuning item's sampled batch size), one
that resumes a checkpoint of another step than most of the group's, or one it cannot read, one that
continues a WSD branch, and every later call (a retry after an out-of-memory error or a tracking
failure).

Fused items write their checkpoints where and when each would alone (``run_fused``'s
``checkpoints``): a killed fused worker's items are re-queued by their heartbeats' silence, as any
killed item, and each resumes from its own checkpoint. The worker that claims them again reads
each item's checkpoint once, here, and fuses those that start at the step most of them do (after
a kill, a group's checkpoints are of one step) from there; the rest resume apart, as
``run_trial`` resumes the checkpoint it finds.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import optuna

    from ablate.training import TrialResult

WAIT_S = 0.25  # how often the main thread, waiting for its items, lets a signal's Interrupted through


@dataclass
class _Call:
    """One item's ``run_trial`` call, waiting for its result."""

    index: int  # the item's place in its group
    config: dict[str, Any]
    seed: int
    probes: Any
    options: dict[str, Any]
    done: threading.Event = field(default_factory=threading.Event)
    result: Any = None
    error: BaseException | None = None

    def settle(self, outcome: Any) -> None:
        if isinstance(outcome, BaseException):
            self.error = outcome
        else:
            self.result = outcome
        self.done.set()

    def resumes(self) -> tuple[int, dict[str, Any] | None] | None:
        """The step this call starts after and the checkpoint it resumes (0 and None: from the
        start); None when it cannot train fused: it continues a WSD branch or keeps a stable-phase
        checkpoint, or its checkpoint cannot be read (``run_trial`` then says so)."""
        if self.options.get("stable_checkpoint") is not None or self.options.get("branch") is not None:
            return None
        checkpoint = self.options.get("checkpoint")
        if checkpoint is None or not Path(checkpoint).exists():
            return 0, None
        from ablate.training import read_checkpoint

        try:
            saved = read_checkpoint(Path(checkpoint))
            return int(saved["step"]), saved
        except Exception:  # noqa: BLE001 - an unreadable checkpoint: run_trial's error, apart
            return None


class Group:
    """The meeting point of ``size`` items' training calls (the module's docstring)."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._cond = threading.Condition()
        self._calls: list[_Call] = []
        self._ended: set[int] = set()
        self._fused = False  # the one fused training is behind: later calls train apart
        self._aborted: BaseException | None = None

    def train(self, index: int) -> Callable[..., TrialResult]:
        """What item ``index`` trains with (called as ``ablate.training.run_trial``)."""

        def call(config: dict[str, Any], seed: int, probes: Any = None, **options: Any) -> TrialResult:
            mine = _Call(index, config, seed, probes, options)
            with self._cond:
                if self._aborted is not None:
                    raise self._aborted
                self._calls.append(mine)
                self._cond.notify_all()
            mine.done.wait()
            if mine.error is not None:
                raise mine.error
            return mine.result

        return call

    def end(self, index: int) -> None:
        """Item ``index`` is done (recorded, or failed before or after training)."""
        with self._cond:
            self._ended.add(index)
            self._cond.notify_all()

    def serve(self, check: Callable[[], None]) -> None:
        """In the main thread, until every item ended: train what they ask for. ``check`` raises a
        signal's Interrupted; whatever ends this early fails every waiting and later call with it."""
        try:
            while True:
                with self._cond:
                    while len(self._ended) < self._size and len(self._ended) + len(self._calls) < self._size:
                        self._cond.wait(WAIT_S)
                        check()
                    if len(self._ended) >= self._size:
                        return
                    calls, self._calls = sorted(self._calls, key=lambda c: c.index), []  # in claim order
                self._train(calls)
        except BaseException as exc:
            with self._cond:
                self._aborted = exc
                calls, self._calls = self._calls, []
            for waiting in calls:
                waiting.settle(exc)
            raise

    def _train(self, calls: list[_Call]) -> None:
        from ablate.training import run_trial
        from ablate.training_fused import fusable, run_fused

        together: list[_Call] = []
        saved: dict[int, tuple[int, dict[str, Any] | None]] = {}
        if not self._fused:
            self._fused = True
            saved = {c.index: r for c in calls if (r := c.resumes()) is not None}
            steps = [saved[c.index][0] for c in calls if c.index in saved]
            if steps:  # the step most of them start after (the first's, on a tie)
                step = max(steps, key=steps.count)
                ready = [c for c in calls if c.index in saved and saved[c.index][0] == step]
                first = ready[0]
                together = [c for c in ready if c.options.get("accumulate", 1) == first.options.get("accumulate", 1)
                            and c.options.get("device") == first.options.get("device")
                            and fusable([first.config, c.config]) is None]
        try:
            if together:
                try:
                    outcomes: Sequence[Any] = run_fused(
                        [c.config for c in together], [c.seed for c in together], together[0].probes,
                        [c.options.get("reporter") for c in together], together[0].options.get("device", "cpu"),
                        accumulate=together[0].options.get("accumulate", 1),
                        on_evals=[c.options.get("on_eval") for c in together],
                        checkpoints=[c.options.get("checkpoint") for c in together],
                        checkpoint_every=together[0].options.get("checkpoint_every", 0),
                        saved=[saved[c.index][1] for c in together])
                except Exception as exc:  # noqa: BLE001 - every item of the fused pass failed with it; each records it
                    outcomes = [exc] * len(together)
                for c, outcome in zip(together, outcomes, strict=True):
                    c.settle(outcome)
            for c in calls:
                if c.done.is_set():
                    continue
                try:
                    c.settle(run_trial(c.config, c.seed, c.probes, **c.options))
                except Exception as exc:  # noqa: BLE001 - the item's own thread records it
                    c.settle(exc)
        except BaseException as exc:  # an Interrupted: the calls not yet answered get it too
            for c in calls:
                if not c.done.is_set():
                    c.settle(exc)
            raise


def pruning_note(pruner: str, trials: int) -> str:
    """What fusing does to a tuning pruner ("" for none): a cell's tuning trials claimed as one
    group start together, and a pruner compares a trial only with its cell's finished ones, so the
    trials of a group are not pruned against each other — with few tuning trials a cell, none is.
    rotrnn_norm_stability's median pruner, its trials apart, stopped three lr 2e-2 trials; fused and
    run to the end, two of them were their cell's best (docs/replications.md)."""
    if pruner == "none":
        return ""
    return (f"tune.pruner {pruner}: tuning trials of a cell claimed together (fused) start together, and "
            "a pruner compares a trial only with its cell's finished ones, so they are not pruned against each "
            f"other ({trials} a cell: --fuse 1 trains them one at a time and prunes as specified)")


def group_note(study: optuna.Study, trials: Sequence[optuna.Trial]) -> str:
    """``pruning_note`` for a claimed group of tuning trials of ``study`` ("" for one trial,
    replicates, no pruner). The protocol on a trial has no trial count: the study's spec has it."""
    pruner = str((trials[0].user_attrs.get("tune") or {}).get("pruner", "none"))
    if len(trials) < 2 or trials[0].user_attrs.get("phase") != "tune" or pruner == "none":
        return ""
    return pruning_note(pruner, int(((study.user_attrs.get("spec") or {}).get("tune") or {}).get("trials", 0)))


def room(fuse: int, device: str, first: optuna.Trial, max_items: int | None = None, done: int = 0,
         study: optuna.Study | None = None, me: str = "") -> int:
    """Up to how many items of a cell a worker claims with ``--fuse fuse`` on ``device`` with the
    trial ``first`` it has claimed, ``done`` of its ``max_items`` run: ``fuse``, or with 0 what
    ``ablate.training_fused.default_fuse`` measured to win for its configuration (imported here,
    at the claim: the worker's start does not wait for torch); with ``study``, no more than the
    ``share`` of its waiting items of this worker (``me``: its ``worker_id``)."""
    config = first.user_attrs["config"]
    if not fuse:
        from ablate.training_fused import default_fuse

        fuse = default_fuse(device, config)
    if max_items is not None:
        fuse = min(fuse, max_items - done)
    return min(fuse, share(study, me, first)) if study is not None and fuse > 1 else fuse


def share(study: optuna.Study, me: str, first: optuna.Trial, workers: int | None = None) -> int:
    """How many items worker ``me``, which has just claimed trial ``first`` of ``study``, may take,
    with the waiting ones: all of them, but split evenly with the study's idle workers — its
    ``workers`` (the environment's ``ABLATE_WORKERS``: ``ablate run`` sets it to its pool's size,
    workers that share one GPU counted once; 1 if unset) less the others holding a running item
    now. At a study's tail (the seeds one sequential look queues for its last open cell) K items
    fused in one worker while another waits take longer than K/2 fused in each on cores of their
    own (bench_fused: K = 4 1.91×, K = 8 2.33× the trials per hour of one)."""
    from optuna.trial import TrialState

    from ablate.runner import queue

    if workers is None:
        text = os.environ.get("ABLATE_WORKERS", "")
        workers = int(text) if text.isdigit() and int(text) > 0 else 1
    waiting = queue.count(study, (TrialState.WAITING,))
    if workers == 1 or not waiting:
        return 1 + waiting
    # Named as its holder now, not once its start is recorded: a peer claiming at this moment
    # (workers start together) must see this one busy, or each would leave the other a share.
    with contextlib.suppress(queue.TrialFinished):  # declared dead since: its own path says so
        queue.set_running_attrs(study, first, {"worker": me})
    busy = {e.user_attrs.get("worker") for e in queue.entries(study, keys=("worker",), states=(TrialState.RUNNING,))}
    idle = max(0, workers - 1 - len(busy - {me, None}))
    return -(-(1 + waiting) // (1 + idle))


def run_together(size: int, run_one: Callable[[int, Callable[..., TrialResult]], str],
                 check: Callable[[], None]) -> list[str]:
    """Run ``run_one(i, train)`` for every item i in a thread of its own, their training calls
    served by one ``Group`` in this thread; the items' outcomes, in order. Raises, once every
    thread ended, what ended this early (a signal's Interrupted) or what some item raised (the
    worker stops: a storage failure, a full disk)."""
    group = Group(size)
    outcomes: list[str] = [""] * size
    raised: list[BaseException | None] = [None] * size

    def item(i: int) -> None:
        try:
            outcomes[i] = run_one(i, group.train(i))
        except BaseException as exc:  # noqa: BLE001 - raised again in the main thread below
            raised[i] = exc
        finally:
            group.end(i)

    threads = [threading.Thread(target=item, args=(i,), name=f"ablate-fused-{i}", daemon=True) for i in range(size)]
    for thread in threads:
        thread.start()
    try:
        group.serve(check)
    finally:
        for thread in threads:
            thread.join()
    for exc in sorted((e for e in raised if e is not None), key=lambda e: not isinstance(e, KeyboardInterrupt)):
        raise exc
    return outcomes
