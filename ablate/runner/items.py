"""A study's items (one per cell, phase and seed) as trials on the Optuna queue: the attributes a
trial of an item carries, and the item's state read from all its trials (done, failed, running,
waiting, new) — what ``ablate status``, the results API, reuse and the workers count.

Trials marked ``dropped`` (``ablate rm --orphans``, ``ablate keep``) are left out of every
state; a cell trained until converged may hold several trials per item, one per ``budget``
(runner/study.py, its last section), and stays running or waiting while a longer run is queued.
"""

from __future__ import annotations

import datetime
import json
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from ablate.design import Item, canonical_json
from ablate.runner import queue

MAX_RETRIES = 2
# Training until converged (runner/study.py, its last section): the trial attributes of an
# extension, the steps it trains to and {"number", "steps"} of the run it continues.
BUDGET = "budget"
EXTENDED_FROM = "extended_from"
# A failed item counts as done when it failed for one of these reasons: re-running gives the same.
TERMINAL_KINDS = ("diverged", "error")
# A failed trial re-queued by ``ablate run --retry-failed`` (the moment): kept in the record, it no
# longer decides its item's state.
RETRIED = "retried"
# The user attributes item_state reads.
STATE_KEYS = ("item", "failure_kind", "dropped", BUDGET, RETRIED)
# The user attribute that removes a trial from its study's results (``ablate rm --orphans``).
DROPPED = "dropped"
# Failures that are not the item's: re-queued without a bound.
UNBOUNDED = ("interrupted", "infrastructure")
# Study user attribute: factor name → Optuna distribution (JSON) of its level labels.
PARAM_DISTRIBUTIONS = "param_distributions"


def utc_stamp() -> str:
    """Now, as the trial and study attributes record moments (UTC, to the second)."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def item_attrs(item: Item) -> dict[str, Any]:
    return {
        "item": item.key,
        "cell_id": item.cell.id,
        "cell_label": item.cell.label,
        "seed": item.seed,
        "phase": item.phase,
        "settings": json.loads(canonical_json(item.cell.labels)),
        "config": item.cell.config,
        "config_key": item.cell.config_key,  # stale results of this config under other code are found by it
        "code_version": item.cell.code_version,
        **item.extra_attrs(),  # tuned specs: the protocol, and a tuning item's index (runner/phases.py)
    }


def item_state(trials: Sequence[FrozenTrial | queue.Entry]) -> str:
    """The state of one item from all its trials: done, failed, running, waiting or new
    (trials marked ``dropped`` are not the study's any more)."""
    trials = [t for t in trials if not t.user_attrs.get(DROPPED)]
    states = [t.state for t in trials]
    if TrialState.COMPLETE in states or TrialState.PRUNED in states:  # a pruned tuning trial is a result
        # ... unless a longer run of it (until_converged: the section at the end) is still to come
        # (only extensions carry a budget, and each is longer than the runs before it)
        reached = max(t.user_attrs.get(BUDGET) or 0 for t in trials
                      if t.state in (TrialState.COMPLETE, TrialState.PRUNED))
        longer = [t.state for t in trials if (t.user_attrs.get(BUDGET) or 0) > reached]
        if TrialState.RUNNING in longer:
            return "running"
        return "waiting" if TrialState.WAITING in longer else "done"
    failures = [t for t in trials if t.state == TrialState.FAIL and not t.user_attrs.get(RETRIED)]
    if any(t.user_attrs.get("failure_kind") in TERMINAL_KINDS for t in failures):
        return "failed"
    if TrialState.RUNNING in states:
        return "running"
    if TrialState.WAITING in states:
        return "waiting"
    # Retries are bounded for failures that re-running may fix; a signal's interruption and a
    # store's outage are not the item's (a worker stops after a few outages in a row instead).
    retried = [t for t in failures if t.user_attrs.get("failure_kind") not in UNBOUNDED]
    if len(retried) > MAX_RETRIES:
        return "failed"
    return "new"


def retryable(study: optuna.Study, keys: Collection[str] | None = None) -> dict[str, list[Any]]:
    """The items failed for good otherwise than by diverging (a diverged cell is a result; an error
    or retries used up are not), each with its failed trials not yet retried: what ``ablate run
    --retry-failed`` re-queues and ``ablate plan`` lists. ``keys``: only these items (the current
    spec's: after a fix that changed a plug-in's source, its old cells' failures are orphans, and
    its new cells run without a retry)."""
    by_item: dict[str, list[queue.Entry]] = {}
    for entry in queue.entries(study, None, (*STATE_KEYS, "failure_message", "cell_label", "seed")):
        key = entry.user_attrs.get("item")
        if key and not entry.user_attrs.get(DROPPED) and (keys is None or key in keys):
            by_item.setdefault(key, []).append(entry)
    return {key: [t for t in trials if t.state == TrialState.FAIL and not t.user_attrs.get(RETRIED)]
            for key, trials in by_item.items() if item_state(trials) == "failed"
            and not any(t.user_attrs.get("failure_kind") == "diverged" for t in trials)}


def retry_failed(study: optuna.Study, keys: Collection[str] | None = None) -> list[str]:
    """Mark the failed trials of ``retryable`` items (of ``keys``) retried, so that each item is new
    again and is queued once more (``study.prepare``, under its queue lock); their attempts stay in
    the record. The items' labels (cell · seed)."""
    found = retryable(study, keys)
    numbers = [t.number for trials in found.values() for t in trials]
    if numbers:
        queue.set_finished_attrs(study, numbers, {RETRIED: utc_stamp()})
    return [f"{trials[-1].user_attrs.get('cell_label')} · seed {trials[-1].user_attrs.get('seed')}"
            for trials in found.values()]


def trials_by_item(study: optuna.Study) -> dict[str, list[FrozenTrial]]:
    """Every trial of the study, whole, by item key (what the results API reads); not the dropped."""
    out: dict[str, list[FrozenTrial]] = {}
    for trial in study.get_trials(deepcopy=False):
        key = trial.user_attrs.get("item")
        if key and not trial.user_attrs.get(DROPPED):
            out.setdefault(key, []).append(trial)
    return out


def states_by_item(study: optuna.Study, where: Mapping[str, Any] | None = None) -> dict[str, str]:
    """The state of every item with a trial (of those whose attributes match ``where``), read
    without loading the trials' configs."""
    by_item: dict[str, list[queue.Entry]] = {}
    for entry in queue.entries(study, where, STATE_KEYS):
        key = entry.user_attrs.get("item")
        if key and not entry.user_attrs.get(DROPPED):
            by_item.setdefault(key, []).append(entry)
    return {key: item_state(trials) for key, trials in by_item.items()}


def cell_trials(study: optuna.Study, cell_id: str, phase: str) -> list[FrozenTrial]:
    """The trials of one cell in one phase, whole, oldest first (read by the cell's index)."""
    return queue.trials(study, {"cell_id": cell_id, "phase": phase})


def level_params(study: optuna.Study, settings: Mapping[str, Any] | None) -> dict[str, tuple[Any, Any]]:
    """An item's factor levels as Optuna parameters (name → (label, distribution)) under the
    study's categorical distributions (``PARAM_DISTRIBUTIONS``); levels it does not list are left out."""
    from optuna.distributions import CategoricalDistribution

    known = study.user_attrs.get(PARAM_DISTRIBUTIONS) or {}
    out: dict[str, tuple[Any, Any]] = {}
    for name, label in (settings or {}).items():
        dist = queue.stored_distribution(known[name]) if name in known else None
        if isinstance(dist, CategoricalDistribution) and label in dist.choices:
            out[name] = (label, dist)
    return out


def counts(study: optuna.Study, items: list[Item] | None = None, states: dict[str, str] | None = None) -> Counter:
    """Items per state; with ``items`` also those of the spec not yet enqueued ("new");
    ``states``: ``states_by_item(study)`` when the caller read it already."""
    states = states_by_item(study) if states is None else states
    if items is None:
        return Counter(states.values())
    return Counter(states.get(i.key, "new") for i in items)


@dataclass
class Progress:
    done: int
    failed: int
    running: int
    waiting: int
    new: int

    @classmethod
    def of(cls, study: optuna.Study, items: list[Item] | None = None,
           states: dict[str, str] | None = None) -> Progress:
        c = counts(study, items, states)
        return cls(c["done"], c["failed"], c["running"], c["waiting"], c["new"])

    @property
    def finished(self) -> bool:
        return self.running == 0 and self.waiting == 0
