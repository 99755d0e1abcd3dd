"""What a storage holds for a spec, read without writing anything (``ablate plan``, the results
API and ``ablate status`` on a store that may not exist yet): the store's URL if there is one,
each item's state, what other studies hold for the unfinished items, the study's orphans, and
each item's status as the results API reports it (``statuses``), and those statuses counted per
cell and in total (``study_status``: what ``ablate status`` prints, ``results.status`` reads).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.trial import TrialState

from ablate.design import Item
from ablate.runner import queue
from ablate.runner.housekeeping import Orphans, orphans
from ablate.runner.items import DROPPED, STATE_KEYS, item_state, retryable, states_by_item
from ablate.runner.reuse import Reuse, find_reusable
from ablate.runner.study import extension_lines, lineage_lines, longest_run, recorded_tracking, storage
from ablate.stores import resolve, sqlite_path


def existing_store_url(storage_url: str | None) -> str | None:
    """The storage URL to read (``ablate.stores.resolve``'s, creating nothing), or None when there
    is no store yet: a SQLite URL whose file does not exist."""
    url = resolve(storage_url, create=False).storage
    if url.startswith("sqlite:///"):
        path = sqlite_path(url)
        return url if path is not None and path.is_file() else None
    return url


def item_states(study_name: str, keys: list[str], storage_url: str | None) -> dict[str, str] | None:
    """State per item key (done, failed, running, waiting, new), or None when the study has no
    store or no study of that name. Opens an existing store only; raises StorageError."""
    url = existing_store_url(storage_url)
    if url is None:
        return None
    try:
        opt = queue.load(storage(url, read_only=True), study_name)
    except KeyError:
        return None
    states = states_by_item(opt)
    return {k: states.get(k, "new") for k in keys}


@dataclass
class Standing:
    """What a storage holds for a spec's items, read without writing (``ablate plan``)."""

    stored: bool  # a study of the spec's name exists
    states: dict[str, str] = field(default_factory=dict)  # item key → state in this study
    linked: dict[str, str] = field(default_factory=dict)  # item key → the study it was reused from
    reuse: Reuse = field(default_factory=Reuse)  # what other studies hold for the unfinished items
    orphans: Orphans | None = None
    retryable: dict[str, str] = field(default_factory=dict)  # item key → why it failed (``items.retryable``)


def standing(study_name: str, items: Sequence[Item], storage_url: str | None,
             tracking_uri: str | None, reuse: bool = True) -> Standing | None:
    """The state of each item, what other studies hold for the unfinished ones, and the study's
    orphans; None when there is no store yet. Opens an existing store only; raises StorageError."""
    url = existing_store_url(storage_url)
    if url is None:
        return None
    # Read-only: a store on a read-only filesystem showed every finished item as new.
    store = storage(url, read_only=True)
    try:
        opt: optuna.Study | None = queue.load(store, study_name)
    except KeyError:
        opt = None
    out = Standing(opt is not None)
    if opt is not None:
        tracking_uri = recorded_tracking(opt, tracking_uri)
        states = states_by_item(opt)
        out.states = {i.key: states.get(i.key, "new") for i in items}
        for entry in queue.entries(opt, None, ("item", "reused_from", DROPPED)):
            origin = entry.user_attrs.get("reused_from")
            if isinstance(origin, dict) and not entry.user_attrs.get(DROPPED):
                out.linked[str(entry.user_attrs.get("item"))] = str(origin.get("study"))
        out.orphans = orphans(opt, items)
        out.retryable = {key: f"{t[-1].user_attrs.get('failure_kind')}: {t[-1].user_attrs.get('failure_message')}"
                         for key, t in retryable(opt, out.states).items() if t}
    else:
        out.states = {i.key: "new" for i in items}
    new = [i for i in items if out.states[i.key] == "new"]
    if reuse and new:
        out.reuse = find_reusable(store, study_name, tracking_uri, new)
    return out


# --- an item's status, as the results API reports it ---------------------------------------------

# What ``statuses`` reads of each trial: the item's state, the trial's own status, the budget of
# its run (``longest_run``: ``budget``, else the config's steps) and what ``ablate status`` shows.
# The items' statuses (as ``statuses`` reports them), in the order ``ablate status`` shows them.
STATUSES = ("complete", "pruned", "running", "pending", "diverged", "failed", "killed")
FAILED_STATUSES = ("diverged", "failed", "killed")
STATUS_KEYS = (*STATE_KEYS, "status", "config", "seconds", "continued_from", "failure_message", "cell_label",
               "seed", "test_accuracy")
#: What ``ablate status`` averages per cell over its finished replicates: a first look at the answer,
#: descriptive (the reports test it), without a render.
STATUS_METRIC = "test_accuracy"
# An item's state (``items.item_state``) → the statuses of the trial that stands for it.
STANDS_FOR = {"done": ("complete", "pruned"), "failed": ("diverged", "failed", "killed"), "running": ("running",),
              "waiting": ("pending",)}
_RANK = {"complete": 0, "pruned": 0, "diverged": 1, "failed": 2, "killed": 3, "running": 4, "pending": 5}


@dataclass(frozen=True)
class Status:
    """An item's status (complete, pruned, running, pending, diverged, failed, killed) and what its
    representative trial recorded: ``seconds``, and whether it ``continued`` a kept checkpoint."""

    status: str
    seconds: float | None = None
    continued: bool = False
    why: str = ""  # a failed item's "kind: message", as its trial recorded it
    value: float | None = None  # a complete item's ``STATUS_METRIC``


def trial_status(trial: Any) -> str:
    """A trial's own status: its state, or for a failed or pruned trial the ``status`` it recorded."""
    if trial.state == TrialState.COMPLETE:
        return "complete"
    if trial.state == TrialState.RUNNING:
        return "running"
    if trial.state == TrialState.WAITING:
        return "pending"
    return str(trial.user_attrs.get("status", "failed"))


def representative(trials: Sequence[Any]) -> tuple[Any, str]:
    """The trial that stands for an item (of its trials, none dropped) and the item's status: its
    completion (its longest finished run, also while a longer one trains), else its terminal
    failure, else its running or waiting trial, else (a failure about to be re-run) the latest."""
    state = item_state(trials)
    done = longest_run(trials)
    if done is not None and state in ("running", "waiting"):  # a longer run is to come: the longest so far
        return done, "complete"
    wanted = STANDS_FOR.get(state, ())
    if not wanted:
        return max(trials, key=lambda t: t.number), "pending"
    trial = min(trials, key=lambda t: (trial_status(t) not in wanted, _RANK.get(trial_status(t), 6), -t.number))
    return trial, trial_status(trial)


def statuses(study: optuna.Study, items: Sequence[Item]) -> list[Status]:
    """Each item's status (``representative``), in the order of ``items``: the ``status`` column
    of ``ablate.results``' trials, read through ``queue.entries`` (the few attributes it needs,
    not whole trials); an item without a trial is pending."""
    by_item: dict[str, list[queue.Entry]] = {}
    for entry in queue.entries(study, None, STATUS_KEYS):
        key = entry.user_attrs.get("item")
        if key and not entry.user_attrs.get(DROPPED):
            by_item.setdefault(key, []).append(entry)
    out = []
    for item in items:
        trials = by_item.get(item.key)
        if not trials:
            out.append(Status("pending"))
            continue
        trial, status = representative(trials)
        seconds = trial.user_attrs.get("seconds")
        attrs = trial.user_attrs
        why = f"{attrs.get('failure_kind') or status}: {attrs.get('failure_message') or 'no message recorded'}" \
            if status in FAILED_STATUSES else ""
        value = attrs.get(STATUS_METRIC) if status == "complete" else None
        out.append(Status(status, float(seconds) if isinstance(seconds, int | float) and not isinstance(seconds, bool)
                          else None, isinstance(attrs.get("continued_from"), dict), why,
                          float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None))
    return out


# --- a study's standing per cell: what ``ablate status`` prints ----------------------------------



@dataclass(frozen=True)
class StudyStatus:
    """A study's items counted by status, per cell and in total (``study_status``; ``ablate status``
    prints it, ``results.status`` reads it). ``cells``: one row per cell, in the items' order —
    ``cell_id``, ``cell_label``, ``trials`` (its items) and a count per status of ``STATUSES``;
    ``totals``: the counts over every cell; ``found``: each item's ``Status``; ``study``: the Optuna
    study it was read from (read only). "failed" in ``counts`` is every item finished without a
    result: diverged, failed with an error, or killed."""

    name: str
    study: optuna.Study
    cells: list[dict[str, Any]]
    totals: dict[str, int]
    found: list[Status]
    extends: bool = False  # the spec may extend runs (``train.until_converged``)
    sequential: list[str] = field(default_factory=list)  # a sequential study's lines (``results.status``)
    sequential_json: dict[str, Any] | None = None  # and its state for scripts (``sequential_looks.state_json``)
    failures: list[tuple[str, str]] = field(default_factory=list)  # (cell · seed, why) of each failed item
    items: tuple[Item, ...] = ()  # the spec's items counted: trials of no current item (orphans) are not its

    @property
    def done(self) -> int:
        return self.totals["complete"] + self.totals["pruned"]

    @property
    def failed(self) -> int:
        return self.totals["diverged"] + self.totals["failed"] + self.totals["killed"]

    def counts(self) -> dict[str, int]:
        """The totals as ``ablate status --json`` reports them (``counts``)."""
        return {"done": self.done, "running": self.totals["running"], "waiting": self.totals["pending"],
                "failed": self.failed, "diverged": self.totals["diverged"], "total": len(self.found)}

    def to_json(self, snapshot: dict[str, Any]) -> dict[str, Any]:
        """``ablate status --json``: the progress snapshot's plain data (``progress.status_json``)
        with these ``counts`` in place of its own, the ``cells``, and a sequential study's state."""
        return {**snapshot, "counts": self.counts(), "cells": self.cells,
                **({"sequential": self.sequential_json} if self.sequential_json is not None else {})}

    def summary(self, eta: str) -> str:
        """The line under the table: done, running, waiting, failed (diverged), and ``eta``."""
        t = self.totals
        return (f"{self.name}: {self.done} done · {t['running']} running · {t['pending']} waiting · "
                f"{self.failed} failed ({t['diverged']} diverged) · ETA {eta}")

    def failure_lines(self, most: int = 10) -> list[str]:
        """Why each failed item failed, one line each (``most`` of them, then a count), and where
        its traceback is: without them a researcher whose plug-in raised had only a count."""
        failed = self.failures
        if not failed:
            return []
        lines = [f"failed ({len(failed)}): why, as each item's trial recorded it:"]
        lines += [f"  {label}: {why[:300]}" for label, why in failed[:most]]
        if len(failed) > most:
            lines.append(f"  … and {len(failed) - most} more")
        lines.append(f"an error's traceback: ablate.results.load({self.name!r}).trials['traceback'], or the MLflow "
                     "run's tag ablate.traceback")
        return lines

    def seconds_per_item(self) -> float | None:
        """The mean training seconds of the complete items that recorded theirs (None: none did)."""
        done = [s.seconds for s in self.found if s.status == "complete" and s.seconds is not None]
        return sum(done) / len(done) if done else None

    def extension_lines(self) -> list[str]:
        """The items trained until converged and the runs that continued a kept checkpoint (WSD),
        one line each (``study.extension_lines``, ``study.lineage_lines``); reads the study's whole
        trials only when the spec may extend runs or an item continued."""
        if not self.extends and not any(s.continued for s in self.found):
            return []
        trials = self.study.get_trials(deepcopy=False)
        return extension_lines(trials) + lineage_lines(trials)


def study_status(name: str, study: optuna.Study, items: Sequence[Item], extends: bool = False) -> StudyStatus:
    """The items of ``study`` counted by status per cell and in total (``statuses``: the counts of
    ``ablate.results``' ``status`` column). ``extends``: the spec may extend runs
    (``study.extends_runs``). Reads the queue only; raises StorageError."""
    found = statuses(study, items)
    cells: dict[tuple[str, str], dict[str, Any]] = {}
    for item, s in zip(items, found, strict=True):
        cell = cells.setdefault((item.cell.id, item.cell.label), {"cell_id": item.cell.id, "cell_label": item.cell.label,
                                                                  "trials": 0, **dict.fromkeys(STATUSES, 0)})
        cell["trials"] += 1
        if s.status in STATUSES:
            cell[s.status] += 1
        if s.value is not None and item.phase != "tune":  # tuning trials never enter an estimate
            cell.setdefault(STATUS_METRIC, []).append(s.value)
    for cell in cells.values():  # the mean and its n, not the values: a first look, not the analysis
        values = cell.pop(STATUS_METRIC, [])
        cell[STATUS_METRIC] = sum(values) / len(values) if values else None
        cell[f"{STATUS_METRIC}_n"] = len(values)
    per_cell = list(cells.values())
    totals = {s: sum(c[s] for c in per_cell) for s in STATUSES}
    failures = [(f"{item.cell.label} · " + (f"tuning trial {item.index}" if item.phase == "tune" else f"seed {item.seed}"),
                 s.why) for item, s in zip(items, found, strict=True) if s.why]
    return StudyStatus(name, study, per_cell, totals, found, extends, failures=failures,
                       items=tuple(items))
