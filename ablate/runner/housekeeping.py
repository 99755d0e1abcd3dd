"""Housekeeping of a storage's studies: orphans (trials whose items left the spec), dropping them
(``ablate rm --orphans``: ``study_orphans``, then ``drop``), keeping them as a study of their own
(``ablate keep``: ``keep``), removing a study (``ablate rm``: ``removal``, then ``remove``) and the
list of studies (``ablate ls``: ``overview``, which tells each study's orphans from its current items).

Dropped trials are marked, not deleted: their study keeps their numbers (Optuna numbers trials
by count). A run another study references (a link, runner/reuse.py) is never deleted.
"""

from __future__ import annotations

import datetime
import itertools
import shutil
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import optuna
from optuna.trial import TrialState

from ablate import design
from ablate.design import Item
from ablate.runner import queue
from ablate.runner.items import BUDGET, DROPPED, STATE_KEYS, item_state, states_by_item, utc_stamp
from ablate.runner.queue import StorageError
from ablate.runner.study import open_study, prepare, recorded_tracking, storage
from ablate.spec import Spec, SpecError
from ablate.stores import Stores, checkpoint_dir, redact
from ablate.terminal import count

# A study's current items for its spec: ``runner.sequential_looks.items`` (a sequential study's are the
# seeds its looks planned). sequential sits above housekeeping, so the caller hands it in. ``overview``
# opens only a sequential study to hand it over (its looks' state): another's items are its spec's alone.
ItemsOf = Callable[[Spec, optuna.Study | None], Sequence[Item]]

# What orphans and removals read of a study's trials.
ORPHAN_KEYS = ("item", "cell_id", "cell_label", "failure_kind", DROPPED, "spec_hash", "mlflow_run_id", "reused_from",
               BUDGET)


@dataclass
class Orphans:
    """A study's trials whose items belong to no cell of its current spec (not dropped): by item."""

    study: str
    finished: dict[str, list[queue.Entry]] = field(default_factory=dict)  # done or failed for good
    unfinished: dict[str, list[queue.Entry]] = field(default_factory=dict)  # waiting or running
    keep_as: str = ""  # a name no study on the storage has: what `ablate keep` is suggested to make

    @property
    def trials(self) -> int:
        return sum(len(v) for v in self.finished.values())

    @property
    def cells(self) -> dict[str, str]:
        """cell id → its label, of the finished orphans."""
        return {t[0].user_attrs.get("cell_id", ""): str(t[0].user_attrs.get("cell_label", ""))
                for t in self.finished.values()}

    def __bool__(self) -> bool:
        return bool(self.finished or self.unfinished)


_T = TypeVar("_T", queue.Entry, queue.Found)  # a trial as a study's reads (``entries``) or a storage's (``find``) give it


def orphaned_items(by_item: Mapping[str, list[_T]], keys: set[str]) -> tuple[dict[str, list[_T]], dict[str, list[_T]]]:
    """Of a study's items (key → its trials, none dropped) those not among ``keys`` (its current
    spec's): the finished (done, failed) and the unfinished (waiting, running). One rule for
    ``orphans`` and ``ablate ls``, so that ls counts the orphans plan and run list."""
    finished: dict[str, list[_T]] = {}
    unfinished: dict[str, list[_T]] = {}
    for key, trials in by_item.items():
        if key in keys:
            continue
        state = item_state(trials)
        if state in ("done", "failed"):
            finished[key] = trials
        elif state in ("waiting", "running"):
            unfinished[key] = trials
    return finished, unfinished


def orphans(study: optuna.Study, items: Sequence[Item]) -> Orphans:
    """The study's items that are not among ``items`` (its current spec's), with their trials."""
    keys = {i.key for i in items}
    by_item: dict[str, list[queue.Entry]] = {}
    for entry in queue.entries(study, None, ORPHAN_KEYS):
        key = entry.user_attrs.get("item")
        if key and key not in keys and not entry.user_attrs.get(DROPPED):
            by_item.setdefault(key, []).append(entry)
    out = Orphans(study.study_name)
    out.finished, out.unfinished = orphaned_items(by_item, keys)
    if out:
        taken = set(queue.names(queue.storage_of(study)))
        base = f"{study.study_name}-old"
        out.keep_as = next(n for n in itertools.chain([base], (f"{base}{k}" for k in itertools.count(2)))
                           if n not in taken)
    return out


def referenced_runs(store: optuna.storages.RDBStorage, run_ids: Sequence[str], study_name: str) -> dict[str, list[str]]:
    """Run id → the other studies whose (not dropped) trials reference it."""
    out: dict[str, list[str]] = {}
    for entry in queue.find(store, "mlflow_run_id", list(run_ids), ("mlflow_run_id", DROPPED)):
        if entry.study != study_name and not entry.user_attrs.get(DROPPED):
            studies = out.setdefault(entry.user_attrs["mlflow_run_id"], [])
            if entry.study not in studies:
                studies.append(entry.study)
    return out


@dataclass
class Dropped:
    trials: int  # trials marked dropped
    runs_deleted: int
    runs_kept: dict[str, list[str]]  # run id → studies that reference it
    running: int  # orphan items left alone because a worker runs them


def drop_orphans(study: optuna.Study, items: Sequence[Item], tracking_uri: str | None,
                 why: dict[str, Any] | None = None, only: set[str] | None = None) -> Dropped:
    """Mark the orphans of ``study`` (see ``orphans``; of them the items in ``only``) dropped:
    finished and waiting ones (a waiting one is failed, so no worker runs it); running ones are
    left alone. Their MLflow runs (those trained in this study) are deleted unless another study
    references them."""
    found = orphans(study, items)
    if only is not None:
        found.finished = {k: v for k, v in found.finished.items() if k in only}
        found.unfinished = {k: v for k, v in found.unfinished.items() if k in only}
    mark = {DROPPED: {"at": utc_stamp(), **(why or {"why": "orphaned by a change of the spec"})}}
    finished = [t for trials in found.finished.values() for t in trials]
    waiting = [t for key, trials in found.unfinished.items() for t in trials
               if not any(x.state == TrialState.RUNNING for x in trials)]
    running = sum(any(x.state == TrialState.RUNNING for x in trials) for trials in found.unfinished.values())
    for entry in waiting:
        if entry.state == TrialState.WAITING:
            queue.fail_running(study, entry.number, {**mark, "status": "dropped", "failure_kind": "dropped",
                                                     "failure_message": "dropped: its cell left the spec"})
        else:
            finished.append(entry)
    queue.set_finished_attrs(study, [t.number for t in finished], mark)
    own_runs = sorted({t.user_attrs["mlflow_run_id"] for t in finished
                       if t.user_attrs.get("mlflow_run_id") and not t.user_attrs.get("reused_from")})
    kept = referenced_runs(queue.storage_of(study), own_runs, study.study_name) if own_runs else {}
    doomed = [r for r in own_runs if r not in kept]
    if doomed and tracking_uri:
        from ablate.runner import tracking

        tracking.delete_runs(tracking_uri, doomed)
    return Dropped(len(finished) + len(waiting), len(doomed) if tracking_uri else 0, kept, running)


@dataclass
class StudyOrphans:
    """A study opened with its current spec's items, and its orphans (``ablate rm --orphans``
    asks about ``found``, then ``drop`` drops them)."""

    study: optuna.Study
    items: list[Item]
    found: Orphans
    stores: Stores


def study_orphans(name: str, stores: Stores, items_of: ItemsOf) -> StudyOrphans:
    """Open study ``name``, validate the spec it stored and find its orphans (``orphans``), writing
    nothing; StorageError when there is no such study."""
    return _orphans_of(open_study(name, stores), stores, items_of)


def _orphans_of(study: optuna.Study, stores: Stores, items_of: ItemsOf) -> StudyOrphans:
    items = list(items_of(design.validate(study.user_attrs["spec"], f"study {study.study_name}"), study))
    return StudyOrphans(study, items, orphans(study, items), stores)


def drop(found: StudyOrphans, why: dict[str, Any] | None = None, only: set[str] | None = None) -> Dropped:
    """``drop_orphans`` of the study ``study_orphans`` opened, with the tracking store it recorded."""
    return drop_orphans(found.study, found.items, recorded_tracking(found.study, found.stores.tracking), why, only)


@dataclass
class Removal:
    """What ``ablate rm STUDY`` removes: the study (its queue entries, every trial) and the runs of
    its MLflow experiment, except the runs another study references (and their parent)."""

    study: str
    trials: int
    running: int
    tracking: str | None
    runs: list[str] = field(default_factory=list)  # run ids to delete
    kept: dict[str, list[str]] = field(default_factory=dict)  # run id → studies referencing it
    checkpoints: Path | None = None  # the study's checkpoint folder

    @property
    def users(self) -> list[str]:
        """The other studies that reference the kept runs, sorted."""
        return sorted({s for studies in self.kept.values() for s in studies})


class StudyRunning(Exception):
    """``ablate rm`` refused: workers run the study's trials (the message says how many)."""


def counted(count: int, noun: str) -> str:
    """"1 trial", "2 trials": a count and its noun, as the housekeeping commands print them."""
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def removal_question(plan: Removal) -> tuple[str, str]:
    """What ``ablate rm`` removes, in words, and the question it asks. The runs other studies reuse
    stay (the parent run's with them), and their results stay reusable: ``plan`` of those studies
    still names the removed study as where they were trained (issue 43: "48 trials, 0 MLflow runs;
    keep 49 runs that …" said neither)."""
    users = plan.users
    removed = counted(plan.trials, "trial") + (f", {counted(len(plan.runs), 'MLflow run')}"
                                               if plan.runs or not plan.kept else "")
    kept = (f"; {counted(len(plan.kept), 'MLflow run')} (the parent run's included) stay, since "
            f"{', '.join(users)} reuse{'s' if len(users) == 1 else ''} them: their results stay reusable, "
            f"and plan still names {plan.study!r} as where they were trained") if plan.kept else ""
    return removed, f"remove study {plan.study!r}: {removed}{kept}?"


def removal(name: str, stores: Stores, force: bool = False) -> Removal:
    """What removing study ``name`` would remove, read-only; StorageError when there is no such
    study, StudyRunning when workers run its trials (unless ``force``)."""
    study = open_study(name, stores)
    entries = queue.entries(study)
    tracking_uri = recorded_tracking(study, stores.tracking)
    runs: list[tuple[str, str | None, str]] = []
    if tracking_uri:
        from ablate.runner import tracking

        runs = tracking.experiment_runs(tracking_uri, name)
    kept = referenced_runs(queue.storage_of(study), [r for r, _, _ in runs], name) if runs else {}
    parents = {parent for run_id, parent, _ in runs if run_id in kept and parent}
    for parent in parents:  # the kept runs' parent stays, so the MLflow UI still nests them
        kept.setdefault(parent, [])
    running = sum(e.state == TrialState.RUNNING for e in entries)
    if running and not force:
        raise StudyRunning(f"{name} has {counted(running, 'running trial')} (workers at work): stop them first, "
                           "or pass --force")
    return Removal(name, len(entries), running, tracking_uri, [r for r, _, _ in runs if r not in kept], kept,
                   checkpoint_dir() / name)


def remove(plan: Removal, stores: Stores, checkpoints: Path | None = None) -> str | None:
    """Remove the study as ``plan`` says (see ``removal``): its runs, then the study with every
    trial (links other studies hold are copies and stay), then its checkpoints (``checkpoints``, or
    the plan's). The experiment is renamed (its name freed) and deleted unless it keeps runs others
    reference; returns its new name."""
    renamed = None
    checkpoints = checkpoints or plan.checkpoints
    if plan.tracking:
        from ablate.runner import tracking

        tracking.delete_runs(plan.tracking, plan.runs)
        users = plan.users
        note = (f"study {plan.study} removed {utc_stamp()}; kept {count(len(plan.kept), 'run')} referenced by " + ", ".join(users)
                if plan.kept else f"study {plan.study} removed {utc_stamp()}")
        renamed = tracking.retire_experiment(plan.tracking, plan.study, delete=not plan.kept, note=note)
    try:
        queue.delete(storage(stores.storage), plan.study)
    except KeyError:
        raise StorageError(f"no study named {plan.study!r} in {redact(stores.storage)}") from None
    if checkpoints is not None and checkpoints.is_dir():
        shutil.rmtree(checkpoints, ignore_errors=True)
    return renamed


def spec_for(study: optuna.Study, keys: set[str]) -> tuple[Spec, int] | None:
    """The spec the study recorded (``specs``, newest first) whose items cover most of ``keys``,
    and how many; None when no recorded spec covers any."""
    best: tuple[Spec, int] | None = None
    history = sorted((study.user_attrs.get("specs") or {}).values(), key=lambda e: e.get("at", ""), reverse=True)
    for entry in history:
        try:
            spec = design.validate(entry["spec"], f"a spec recorded by study {study.study_name}")
        except Exception:  # a spec an earlier version accepted and this one does not
            continue
        every = {c.id: spec.sequential.max for c in design.cells(spec)} if spec.sequential else None  # any look's
        covered = len(keys & {i.key for i in design.items(spec, every)})
        if covered and (best is None or covered > best[1]):
            best = (spec, covered)
    return best


class KeepRefused(Exception):
    """``ablate keep`` kept nothing; the message says why."""


class NameTaken(KeepRefused):
    """A study of the new name exists already."""


class SpecNotRecorded(KeepRefused):
    """The study did not record the spec its orphans ran under (stores from before spec history)."""


class NoneKept(KeepRefused):
    """None of the finished orphans could be linked to the new study (which is removed again)."""


@dataclass
class KeptAs:
    """What ``keep`` did: ``kept`` of the ``finished`` orphaned items of ``study`` are linked by
    study ``new`` (``covered`` of them in the spec they were queued under, hashed ``spec_hash``)
    and dropped by ``study`` (``dropped``); None of that when it had no finished orphans."""

    study: str
    new: str
    finished: int
    kept: set[str] = field(default_factory=set)
    covered: int = 0
    spec_hash: str = ""
    dropped: Dropped | None = None

    @property
    def left(self) -> int:
        """Finished orphaned items not in the recorded spec: they stay orphans of ``study``."""
        return self.finished - len(self.kept)


def keep(name: str, new: str, stores: Stores, items_of: ItemsOf) -> KeptAs:
    """Keep the finished orphans of study ``name`` as study ``new``: ``new`` gets the spec they were
    queued under (``spec_for``, renamed) and links them (nothing runs; the MLflow runs are shared),
    then ``name`` drops the ones linked. Raises NameTaken, SpecNotRecorded or NoneKept (a
    KeepRefused; ``new`` is not left behind), StorageError when there is no study ``name``, and
    SpecError on a ``new`` that is no study name (``ablate keep`` checks that as it parses)."""
    study = open_study(name, stores)
    if new in queue.names(queue.storage_of(study)):
        raise NameTaken(f"a study named {new!r} exists already: choose another name")
    found = _orphans_of(study, stores, items_of)
    orphaned = found.found
    if not orphaned.finished:
        return KeptAs(name, new, 0)
    chosen = spec_for(study, set(orphaned.finished))
    if chosen is None:
        raise SpecNotRecorded(
            f"the spec these trials ran under was not recorded (stores from before ablate recorded spec history); "
            f"run that spec under a new name instead: `ablate run OLD.yaml --set name={new} --workers 0` links them")
    old, covered = chosen
    spec = design.validate({**old.model_dump(mode="json"), "name": new}, f"study {new}")
    prepared = prepare(spec, design.items(spec), stores, enqueue_new=False)
    states = states_by_item(prepared.study)
    kept = {k for k in orphaned.finished if states.get(k) in ("done", "failed")}
    if not kept:  # nothing could be linked: leave no empty study behind under that name
        remove(removal(new, stores, force=True), stores)
        why = "; ".join(dict.fromkeys(prepared.reuse.held.values())) or "none of them is a finished result"
        raise NoneKept(f"none of the {len(orphaned.finished)} orphaned items of {name} could be kept as {new}: {why}")
    dropped = drop(found, {"why": f"kept as study {new}", "kept_as": new}, only=kept)
    return KeptAs(name, new, len(orphaned.finished), kept, covered, design.spec_hash(spec), dropped)


def studied_cells(storage_url: str) -> set[str]:
    """The cell ids some study on the storage still has (trials not dropped), read-only."""
    found = queue.find(storage(storage_url, read_only=True), None, (), ("cell_id", DROPPED))
    return {str(e.user_attrs["cell_id"]) for e in found if e.user_attrs.get("cell_id") and not e.user_attrs.get(DROPPED)}


@dataclass
class StudyRow:
    """One study of a storage, for ``ablate ls``: its current spec's items per state."""

    name: str
    cells: int
    done: int
    failed: int
    running: int
    waiting: int
    reused: int  # of the done and failed, linked from other studies
    dropped: int
    last: datetime.datetime | None
    orphaned: int | None = None  # items of no cell of the current spec (``orphaned_items``); None: not told apart
    unread: str = ""  # why the stored spec was not read (the counts are then of every item the study holds)


# What ``overview`` reads of every trial: the item's state, its cell, reuse and the moment it was linked.
LS_KEYS = (*STATE_KEYS, "cell_id", "reused_from", "linked_at")


def overview(stores: Stores, items_of: ItemsOf | None = None) -> list[StudyRow]:
    """Every study on the storage with its items per state and its last activity, read only: one
    pass over the trials and one read of every study's attributes (a sequential study is opened
    too, for its looks' state). With ``items_of`` the items are those of the spec each study stored
    and the rest are counted ``orphaned`` as ``orphans`` finds them: a study re-run under a changed
    spec keeps the old spec's items, which ``ablate status`` does not count as its own either.
    Without ``items_of``, or for a stored spec this code does not accept (``StudyRow.unread`` says
    why), every item a study holds."""
    store = storage(stores.storage, read_only=True)
    by_study: dict[str, dict[str, list[queue.Found]]] = {}
    dropped: Counter = Counter()
    linked: dict[str, datetime.datetime] = {}
    for entry in queue.find(store, None, (), LS_KEYS):
        at = entry.user_attrs.get("linked_at")
        if isinstance(at, str):
            when = datetime.datetime.fromisoformat(at)
            linked[entry.study] = max(linked.get(entry.study, when), when)
        if entry.user_attrs.get(DROPPED):
            dropped[entry.study] += 1
        elif entry.user_attrs.get("item"):
            by_study.setdefault(entry.study, {}).setdefault(entry.user_attrs["item"], []).append(entry)
    studies = queue.activity(store)
    attrs = {s.study_name: s.user_attrs for s in store.get_all_studies()} if items_of is not None else {}
    rows = []
    for act in studies:
        held = by_study.get(act.study, {})
        current, unread = None, ""
        if items_of is not None:
            if act.study not in attrs:  # removed since the storage was listed
                continue
            current, unread = _current_items(store, act.study, attrs[act.study], items_of)
        orphans_found = None
        if current is None:
            items = held
            cells = {t.user_attrs.get("cell_id") for v in held.values() for t in v}
        else:
            items = {i.key: held.get(i.key, []) for i in current}
            cells = {i.cell.id for i in current}
            finished, unfinished = orphaned_items(held, set(items))
            orphans_found = len(finished) + len(unfinished)
        states = Counter(item_state(v) for v in items.values())  # an item without a trial yet is new
        reused = sum(any(t.user_attrs.get("reused_from") and t.state != TrialState.WAITING for t in v)
                     for v in items.values())
        moments = [m for m in (act.last, linked.get(act.study)) if m is not None]
        rows.append(StudyRow(act.study, len(cells - {None}), states["done"], states["failed"], states["running"],
                             states["waiting"] + states["new"], reused, dropped[act.study],
                             max(moments) if moments else None, orphans_found, unread))
    return rows


def _current_items(store: optuna.storages.RDBStorage, name: str, attrs: Mapping[str, Any],
                   items_of: ItemsOf) -> tuple[list[Item] | None, str]:
    """The items of the spec study ``name`` stored (its ``attrs``), or None and why they are not
    known: a spec an earlier version accepted and this one does not, or no spec at all."""
    spec_data = attrs.get("spec")
    if spec_data is None:
        return None, "it has no stored spec (a study ablate did not make, or one being created)"
    try:
        spec = design.validate(spec_data, f"study {name}")
        return list(items_of(spec, queue.load(store, name) if spec.sequential else None)), ""
    except KeyError:  # removed since its attributes were read: counted as it was
        return None, "removed while it was listed"
    except SpecError as exc:
        problems = str(exc).splitlines() or ["invalid"]
        more = f" and {counted(len(problems) - 1, 'more problem')}" if len(problems) > 1 else ""
        return None, f"its stored spec is one this version of ablate does not accept ({problems[0]}{more})"
