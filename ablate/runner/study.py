"""A study: ablate's items on the Optuna work queue (runner/queue.py), one trial per (cell,
phase, seed) — opening it, describing it, queueing its items, the lifecycle of dead workers'
trials and their MLflow runs, and training until converged (the section at the end).

Items are enqueued as WAITING trials carrying their cell config in user attributes
(runner/items.py, which also reads their states); workers claim them atomically (queue.claim,
with the tuning rule of runner/phases.py). Heartbeats mark trials of killed workers FAIL and
re-enqueue them, up to a retry bound. Nothing here touches Optuna's storage internals: that is
runner/queue.py's alone. The studies of a storage are opened, listed and deleted here (``storage``,
``open_study``, and ``load``, ``create``, ``names``, ``summaries``, ``delete`` with Optuna's
exceptions under ablate's names, ``TrialFinished``, ``StorageInternal``, ``Pruned``: runner/rdb.py's,
re-exported), so that the modules above call no Optuna function themselves.

When a study is prepared, items another study on the storage finished are linked rather than
queued (runner/reuse.py: one cell store). Orphans, ``ablate rm`` and ``ablate ls`` are
runner/housekeeping.py's; what ``ablate plan`` reads without writing is runner/standing.py's.

A cell trained until converged (``train.until_converged``) may hold several trials per replicate
item, one per budget: a run still improving is extended by a longer one queued for the same item
(``extend_runs``; the section at the end says why the same item, and how it is queued exactly
once). Its result is its longest finished run (``longest_run``).

What optuna-dashboard shows of a study (its objective, description, note and the factors'
distributions) is written by runner/dashboard.py's ``describe`` as the study is prepared.
"""

from __future__ import annotations

import contextlib
import copy
import datetime
import difflib
import hashlib
import json
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from ablate import faults
from ablate.design import Item, spec_hash
from ablate.runner import dashboard, queue
from ablate.runner import items as its
from ablate.runner.items import (
    BUDGET,
    DROPPED,
    EXTENDED_FROM,
    MAX_RETRIES,
    STATE_KEYS,
    item_attrs,
    item_state,
    states_by_item,
)
from ablate.runner.queue import Pruned as Pruned
from ablate.runner.queue import StorageError
from ablate.runner.queue import StorageInternal as StorageInternal
from ablate.runner.queue import TrialFinished as TrialFinished
from ablate.runner.queue import create as create
from ablate.runner.queue import delete as delete
from ablate.runner.queue import load as load
from ablate.runner.queue import names as names
from ablate.runner.queue import summaries as summaries
from ablate.runner.reuse import Reuse, find_reusable, link
from ablate.schedule import warmup_steps
from ablate.spec import Spec
from ablate.stores import Stores, redact, sqlite_path

# Items are looked up by cell (a replicate's cell tuning, a cell's tuning history, results of
# other studies) and by config key (stale results): indexed.
INDEXED = ("cell_id", "config_key")
# Specs a study remembers (``specs``), so that orphaned trials can be kept as a study of their own.
SPEC_HISTORY = 16
# Failures whose attempt's run is the trial's result (its run ends FAILED, not KILLED).
RECORDED_KINDS = ("diverged", "error", "oom", "infrastructure")

KILLED_ATTRS = {"status": "killed", "failure_kind": "killed", "failure_message": "worker stopped sending heartbeats"}
PARENT_RUN = "mlflow_parent_run_id"
# The finished trials (numbers and states, hashed) when every MLflow run was last settled: a run is
# left RUNNING only by a trial that finished (or died) since, so an unchanged set needs no MLflow.
RUNS_SETTLED = "ablate.settled"  # was "ablate.runs_settled", written before the parent run was settled too


# The tracking URI each study of this process reports to (the study's attribute holds it with the
# password redacted): where a killed worker's MLflow run is closed.
_TRACKING: dict[str, str] = {}


def storage(url: str, read_only: bool = False) -> optuna.storages.RDBStorage:
    """The Optuna storage at ``url`` as ablate uses it (``read_only``: an existing store, for
    reading only, writing nothing at all); raises StorageError."""
    return queue.connect(url, INDEXED, on_stale=_on_stale, read_only=read_only)


def open_study(name: str, stores: Stores, create: bool = False, read_only: bool = False) -> optuna.Study:
    """The study ``name`` on ``stores`` (``create``: created when missing; ``read_only``: an
    existing store, writing nothing); raises StorageError naming the closest studies."""
    path = sqlite_path(stores.storage)
    if not create and path is not None and not path.is_file():  # looking a study up creates no store
        raise StorageError(f"{no_store(name, stores.storage)}; {WHERE_STORES_ARE}")
    store = storage(stores.storage, read_only=read_only and not create)
    _TRACKING[name] = stores.tracking
    try:
        return queue.create(store, name) if create else queue.load(store, name)
    except KeyError:
        raise StorageError(f"{missing_study(name, queue.names(store), stores.storage)}; "
                           f"{WHERE_STORES_ARE}") from None


WHERE_STORES_ARE = ("stores are found through --storage / storage=, $ABLATE_STORAGE, or the folder "
                    "home= / $ABLATE_HOME (default ./.ablate)")


def no_store(name: str, url: str) -> str:
    """The message for a study looked up where there is no store yet."""
    return f"no study named {name!r}: there is no store at {redact(url)}"


def missing_study(name: str, known: Sequence[str], url: str) -> str:
    """The message for a study name that is not in the storage at ``url``: the closest names,
    or the studies there."""
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
    if close:
        hint = f"; did you mean {' or '.join(repr(c) for c in close)}?"
    elif known:
        shown = ", ".join(sorted(known)[:10]) + (f", … ({len(known)} in all)" if len(known) > 10 else "")
        hint = f"; studies there: {shown}"
    else:
        hint = "; it holds no study yet"
    return f"no study named {name!r} in {redact(url)}{hint}"


def recover_stale(study: optuna.Study) -> list[int]:
    """Fail the trials of workers that stopped sending heartbeats and re-queue their items; the
    numbers of the trials this process declared dead (their MLflow runs: ``settle_runs``).

    Unlike ``optuna.storages.fail_stale_trials`` (which fails first, after which a trial's
    attributes can no longer be set), the reason is recorded while the trial is still RUNNING;
    the row-locked FAIL flip then picks the one worker that handles it."""
    return [number for number in queue.stale(study) if declare_dead(study, number, tracking=None)]


def declare_dead(study: optuna.Study, number: int, tracking: str | None = "") -> bool:
    """Fail trial ``number`` (RUNNING) as killed, re-queue its item and close its MLflow run
    (through ``tracking``: by default the process's tracking URI for the study; None: leave the
    run to ``settle_runs``); False when another process got there first or the trial has just
    finished. Should its worker be alive after all, it finds the trial taken away and drops
    its attempt (worker.Superseded)."""
    if not queue.fail_running(study, number, KILLED_ATTRS):
        return False
    queue.requeue(study, number, MAX_RETRIES)
    if tracking is not None:
        settle_runs(study, tracking or tracking_uri(study), [number])
    return True


def tracking_uri(study: optuna.Study) -> str | None:
    """The tracking URI this process uses for the study, else the study's own unless redacted."""
    uri = _TRACKING.get(study.study_name) or study.user_attrs.get("tracking_uri")
    return uri if uri and "***" not in uri else None


def recorded_tracking(study: optuna.Study, fallback: str) -> str:
    """The tracking URI the study recorded, or ``fallback`` where it recorded none or a redacted one
    (a password is never written to a store: then the caller's own URI is the one to use)."""
    uri = study.user_attrs.get("tracking_uri")
    return uri if uri and "***" not in uri else fallback


def _on_stale(study: optuna.Study, trial: FrozenTrial) -> None:
    """A worker died mid-trial (trial already FAIL): re-enqueue within the bound, close its MLflow run."""
    queue.requeue(study, trial.number, MAX_RETRIES)
    settle_runs(study, tracking_uri(study), [trial.number])


def settle_runs(study: optuna.Study, tracking: str | None, numbers: Sequence[int] | None = None) -> int:
    """End the RUNNING MLflow runs of finished trials (of ``numbers``, or all) as Optuna recorded
    them: the run a COMPLETE trial recorded FINISHED, a failed trial's recorded run FAILED, any
    other run KILLED (a killed or interrupted attempt, or one superseded by a retry). With no
    ``numbers`` also the study's parent run, once every item is finished (``end_parent``): what
    a kill anywhere in the end-of-study sequence left RUNNING is ended by the next command that
    settles (a run, a worker, ``ablate status``). How many runs it ended; tracking failures are
    swallowed (the Optuna record is what counts) and leave the settling to the next command.

    The Optuna record is the commit point of a trial: its run stays RUNNING until then, so a
    kill between the two leaves no second FINISHED run for an item."""
    if not tracking:
        return 0
    if numbers is not None:
        return _settled(lambda tr: _end_trial_runs(study, tracking, tr, numbers))
    # All: skipped (with MLflow's seconds of import) when no trial finished since the last settling.
    # The mark is written only once the parent run was seen to, so a kill before that is redone.
    mark = finished_mark(study)
    if study.user_attrs.get(RUNS_SETTLED) == mark:
        return 0
    writable = "mode=ro" not in str(getattr(queue.storage_of(study), "url", ""))
    with queue.lock(study, f"ablate-settle:{study.study_name}") if writable else contextlib.nullcontext():
        if writable and _fresh_attrs(study).get(RUNS_SETTLED) == mark:  # another process settled meanwhile
            return 0
        ended = _settled(lambda tr: _end_trial_runs(study, tracking, tr, None) + end_parent(study, tracking, tr))
        if ended:
            faults.inject("settled")
        if ended is not None and writable:
            with contextlib.suppress(Exception):  # the next command that can write records it
                study.set_user_attr(RUNS_SETTLED, mark)
    return ended or 0


FINISHED_STATES = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)


def finished_mark(study: optuna.Study) -> str:
    """The finished trials (numbers and states), hashed; read without their attributes."""
    finished = sorted((t.number, t.state.name) for t in queue.entries(study, states=FINISHED_STATES))
    return hashlib.sha256(json.dumps(finished).encode()).hexdigest()[:16]


def _fresh_attrs(study: optuna.Study) -> dict[str, Any]:
    return queue.storage_of(study).get_study_user_attrs(study._study_id)


def _settled(fn: Callable[[Any], int]) -> int | None:
    """``fn(tracking module)``, or None when tracking failed (the trial state is what counts)."""
    from ablate.runner import tracking as tr

    try:
        return fn(tr)
    except Exception:
        return None


def _end_trial_runs(study: optuna.Study, tracking: str, tr: Any, numbers: Sequence[int] | None) -> int:
    ended = 0
    for run in tr.running_runs(tracking, study.study_name, numbers):
        try:
            trial = queue.trial(study, run.trial_number)
        except KeyError:
            continue
        if trial.state in (TrialState.RUNNING, TrialState.WAITING) or \
                trial.user_attrs.get("cell_id") != run.cell_id:  # alive, or not this study's trial
            continue
        kind = trial.user_attrs.get("failure_kind")
        recorded = trial.user_attrs.get("mlflow_run_id") == run.run_id
        if trial.state in (TrialState.COMPLETE, TrialState.PRUNED) and recorded:  # pruned: a result too
            status, tags = "FINISHED", {"ablate.committed": "true"}
        elif trial.state == TrialState.FAIL and recorded and kind in RECORDED_KINDS:
            status, tags = "FAILED", {"ablate.committed": "true", "ablate.failure_kind": str(kind)}
        else:
            why = kind if kind in ("killed", "interrupted") else "superseded"
            tags = {"ablate.failure": str(trial.user_attrs.get("failure_message") or why)}
            if why != "killed":  # a worker declared dead may be alive and tag its run superseded itself
                tags["ablate.failure_kind"] = why
            status = "KILLED"
        tr.terminate(tracking, run.run_id, status, tags=tags)
        ended += 1
    return ended


def parent_status(study: optuna.Study) -> str | None:
    """How the study's parent run ends, once every item with a trial is finished (None before):
    FINISHED when each has a result (a diverged cell's is one), FAILED when one failed otherwise
    (an error, or retries used up)."""
    by_item: dict[str, list[Any]] = {}
    for entry in queue.entries(study, None, STATE_KEYS):
        key = entry.user_attrs.get("item")
        if key and not entry.user_attrs.get(DROPPED):
            by_item.setdefault(key, []).append(entry)
    states = {key: item_state(trials) for key, trials in by_item.items()}
    if not states or any(s not in ("done", "failed") for s in states.values()):
        return None
    failed = [by_item[key] for key, s in states.items() if s == "failed"]
    return "FAILED" if any(not any(t.user_attrs.get("failure_kind") == "diverged" for t in trials)
                           for trials in failed) else "FINISHED"


def end_parent(study: optuna.Study, tracking: str, tr: Any) -> int:
    """End the study's MLflow parent run as its items stand (``parent_status``), if it is not so
    already: 1 when it did. A parent a later retry re-opened ends again when that retry is done."""
    parent = study.user_attrs.get(PARENT_RUN)
    status = parent_status(study) if parent else None
    if status is None:
        return 0
    faults.inject("settle")
    return int(tr.end_run(tracking, parent, status))


def ensure_parent_run(study: optuna.Study, stores: Stores) -> str:
    """The study's MLflow parent run, which its items' runs nest under, started now if it has none.
    Started by the first process that needs it — a worker before its first item, a run that
    links results — not by every ``ablate run`` as it queues: that imports MLflow (seconds of CPU)
    in a process that otherwise never does, beside the workers starting. Under the queue's lock,
    so that two processes never start two."""
    from ablate.runner import tracking

    parent = study.user_attrs.get(PARENT_RUN)
    if parent:
        return parent
    with queue.lock(study, f"ablate-queue:{study.study_name}"):
        parent = study.user_attrs.get(PARENT_RUN)
        if not parent:
            try:
                parent = tracking.start_parent_run(stores, study.study_name, json.dumps(study.user_attrs.get("spec"),
                                                   indent=2), str(study.user_attrs.get("spec_hash", "")))
            except StorageError:
                raise
            except Exception as exc:
                first = (str(exc).strip().splitlines() or [""])[0]
                raise StorageError(redact(f"cannot write to the tracking store {stores.tracking}: "
                                          f"{type(exc).__name__}: {first}")) from None
            study.set_user_attr(PARENT_RUN, parent)
    return parent


@dataclass
class Prepared:
    """What ``prepare`` did; unpacks as ``(study, queued)``."""

    study: optuna.Study
    queued: int  # items newly queued
    linked: Counter = field(default_factory=Counter)  # source study → items linked from it
    stale: int = 0  # of the linked, how many are stale (another code version)
    reuse: Reuse | None = None  # what other studies hold for the items that were not finished here
    retried: list[str] = field(default_factory=list)  # the failed items re-queued (--retry-failed)

    def __iter__(self) -> Iterator[Any]:
        return iter((self.study, self.queued))


def prepare(spec: Spec, items: list[Item], stores: Stores, *, reuse: bool = True, reuse_stale: bool = False,
            enqueue_new: bool = True, retry_failed: bool = False) -> Prepared:
    """Create or resume the study; link the items another study on the storage has finished
    (``reuse``; stale ones too with ``reuse_stale``), enqueue the others that have no live or
    finished trial (unless not ``enqueue_new``). ``retry_failed``: re-queue the items that failed
    otherwise than by diverging (``items.retry_failed``). The study's MLflow parent run is not
    started here (``ensure_parent_run``)."""
    queue.quiet_optuna()  # creating or loading the study would say so on stderr
    study = open_study(spec.name, stores, create=True)
    dashboard.describe(study, spec)  # first: the description heads the dashboard's table of study attributes
    dump = spec.model_dump(mode="json")  # unsorted: factor and level order are the spec's
    digest = spec_hash(spec)
    study.set_user_attr("spec", dump)
    study.set_user_attr("spec_hash", digest)
    study.set_user_attr("tracking_uri", redact(stores.tracking))  # never a password in a store
    study.set_user_attr("reuse", reuse)
    history = dict(study.user_attrs.get("specs") or {})
    history[digest] = {"spec": dump, "at": datetime.datetime.now(datetime.timezone.utc).isoformat()}
    study.set_user_attr("specs", dict(sorted(history.items(), key=lambda kv: kv[1]["at"])[-SPEC_HISTORY:]))
    done = Prepared(study, 0)
    # Two `ablate run`s at once would otherwise both queue every item (docs/multi-host.md).
    with queue.lock(study, f"ablate-queue:{study.study_name}"):
        if retry_failed:  # items failed with an error: new again, their failed attempts kept
            done.retried = its.retry_failed(study, {item.key for item in items})
        existing = states_by_item(study)
        new = [item for item in items if existing.get(item.key, "new") == "new"]
        done.reuse = find_reusable(queue.storage_of(study), spec.name, stores.tracking, new) if reuse and new \
            else Reuse()
        chosen = done.reuse.chosen(reuse_stale)
        sources: dict[str, optuna.Study] = {}
        queued: list[dict[str, Any]] = []
        for item in new:
            source = chosen.get(item.key)
            if source is not None:
                link(study, item, source, sources, digest)
                done.linked[source.study] += 1
                done.stale += source.stale
            elif enqueue_new:
                queued.append({**item_attrs(item), "spec_hash": digest})
        queue.enqueue_many(study, queued)
        done.queued += len(queued)
        if enqueue_new and extends_runs(dump):  # those a kill left unqueued (the section at the end)
            done.queued += queue_extensions(study, queue.trials(study, None, tuple(TrialState)))
    return done


# --- training until converged ----------------------------------------------------------------
#
# Training until converged (``train.until_converged: {max_steps, extend_by}``, WSD cells only).
#
# A replicate trial that finishes flagged "still improving" (``converged`` false, the convergence
# flag of ``ablate.stats.convergence``) below ``max_steps`` is continued within the same study: a
# new trial is queued for the *same item* (cell and seed) with ``train.steps`` raised by
# ``extend_by`` (capped at ``max_steps``). The worker runs it like any longer WSD run of the
# lineage: it branches from the kept stable-phase checkpoint of the run it extends
# (``phases.find_branch``), so it trains only the difference (the rest of the stable phase and
# its own decay). That repeats until a run converges or reaches ``max_steps``.
#
# Why the same item and cell id, not a new cell for the longer budget: ``until_converged`` is part
# of the declared cell (it enters the cell id), and its meaning is "this cell, trained until it
# converges" — so its result is one row per declared cell and seed, whatever budget it needed.
# An extension is a trial of that item carrying ``budget`` (the steps it trains to; absent on the
# declared run) and ``extended_from`` (the trial number and budget of the run it continues), and
# its own ``continued_from`` (the checkpoint it branched from) as every continuation. The item's
# result is its longest finished run (``longest_run``): the results API, the reports and ``status``
# read that one, and an item stays running/waiting while a longer run of it is queued
# (``item_state``). Another study reuses an extension only at the same budget.
#
# Exactly once, under several workers and kill -9: the extension is queued under the study's
# queue lock, and only when the item has no trial at that budget yet (any state: a killed
# extension is re-queued by the retry machinery, not here). Whichever process finishes the trial
# queues it (the worker, right after the record), and ``prepare`` (``ablate run`` on resume)
# and a worker with nothing left to claim queue any that a kill left unqueued — a pure function of
# the stored trials, so repeating it changes nothing.

# What an extension takes from the run it extends: the item's identity and its chosen setting.
EXTENSION_CARRIES = ("item", "cell_id", "cell_label", "seed", "phase", "settings", "config", "config_key", "code_version",
           "index", "tune", "after_tune", "spec_hash", "params", "tuned_from")
ALL_STATES = tuple(TrialState)


def run_budget(attrs: Mapping[str, Any]) -> int:
    """The steps a trial trains to: its ``budget`` when an extension, else its config's."""
    value = attrs.get(BUDGET)
    if isinstance(value, int):
        return value
    try:
        return int(attrs["config"]["train"]["steps"])
    except (KeyError, TypeError, ValueError):
        return 0


def _until_converged(attrs: Mapping[str, Any]) -> dict[str, Any] | None:
    try:
        train = attrs["config"]["train"]
    except (KeyError, TypeError):
        return None
    extend = train.get("until_converged")
    return extend if isinstance(extend, dict) and train.get("schedule") == "wsd" else None


def extends_runs(spec_data: Mapping[str, Any] | None) -> bool:
    """Whether a study's spec (as stored: plain data) may extend runs: ``until_converged`` in its
    baseline or set by a factor (cheap: decides whether the queue is scanned at all)."""
    if not isinstance(spec_data, Mapping):
        return False
    train = spec_data.get("train")
    if isinstance(train, Mapping) and train.get("until_converged"):
        return True
    return "until_converged" in repr(spec_data.get("factors")) or "until_converged" in repr(spec_data.get("cells"))


def next_budget(attrs: Mapping[str, Any]) -> int | None:
    """The budget a finished replicate run with ``attrs`` is extended to, or None: not a
    replicate of an until-converged WSD cell, converged (or no flag: diverged, or recorded
    before the flag), or at ``max_steps`` already."""
    extend = _until_converged(attrs)
    if extend is None or attrs.get("phase") != "replicate" or attrs.get("converged") is not False:
        return None
    steps, most = run_budget(attrs), int(extend["max_steps"])
    return None if steps >= most else min(steps + int(extend["extend_by"]), most)


def extension_attrs(attrs: Mapping[str, Any], number: int, target: int) -> dict[str, Any]:
    """The attributes of the trial that extends run ``number`` (``attrs``) to ``target`` steps."""
    out = {k: copy.deepcopy(attrs[k]) for k in EXTENSION_CARRIES if k in attrs}
    train = out["config"]["train"]
    # The warm-up in steps stays the declared run's: a fractional one would grow with the budget,
    # and a run whose warm-up differs cannot continue from the shorter one's stable phase.
    train["warmup_steps"] = warmup_steps(train)
    train["steps"] = target
    out[BUDGET] = target
    out[EXTENDED_FROM] = {"number": number, "steps": run_budget(attrs)}
    return out


def possible_extensions(config: Mapping[str, Any], budget: int) -> list[tuple[dict[str, Any], int | None]]:
    """The runs that may still extend a replicate of ``config`` (its cell's, until converged) whose
    longest run so far trains to ``budget``, were each of them to end still improving: each run's
    config (as ``extension_attrs`` writes it) and the step it continues from, the run before's
    stable end (None where it cannot continue: it trains from step 0). What ``ablate plan
    --estimate`` prices; empty for a cell that does not extend or a budget at ``max_steps``."""
    from ablate.spec import TrainSpec
    from ablate.training import continuable  # torch: only the estimate, which measures with it, asks

    attrs: dict[str, Any] = {"config": copy.deepcopy(dict(config)), "phase": "replicate", "converged": False,
                             BUDGET: budget}
    # the declared warm-up in steps, as every extension of it pins it
    attrs["config"]["train"] = {**config["train"], "warmup_steps": warmup_steps(config["train"]), "steps": budget}
    out = []
    while (target := next_budget(attrs)) is not None:
        longer = extension_attrs(attrs, -1, target)
        out.append((longer["config"], continuable(TrainSpec.model_validate(attrs["config"]["train"]),
                                                  TrainSpec.model_validate(longer["config"]["train"]))))
        attrs = {**longer, "phase": "replicate", "converged": False}
    return out


def _not_dropped(trials: Sequence[Any]) -> list[Any]:
    return [t for t in trials if not t.user_attrs.get("dropped")]


def longest_run(trials: Sequence[Any]) -> Any | None:
    """The item's longest finished (COMPLETE) run, the latest of equal budgets; None if none."""
    done = [t for t in _not_dropped(trials) if t.state == TrialState.COMPLETE]
    return max(done, key=lambda t: (run_budget(t.user_attrs), t.number)) if done else None


def queue_extensions(study: optuna.Study, trials: Iterable[FrozenTrial]) -> int:
    """Queue the extension of every item whose longest finished run asks for one and that has no
    trial at that budget yet; how many were queued. The caller holds the study's queue lock
    (``extend_runs`` takes it; ``prepare`` holds it already)."""
    by_item: dict[str, list[FrozenTrial]] = {}
    for t in trials:
        key = t.user_attrs.get("item")
        if key and t.user_attrs.get("phase") == "replicate":
            by_item.setdefault(key, []).append(t)
    queued = 0
    for group in by_item.values():
        base = longest_run(group)
        target = None if base is None else next_budget(base.user_attrs)
        if target is None or any(run_budget(t.user_attrs) >= target for t in _not_dropped(group)):
            continue
        queue.enqueue(study, extension_attrs(base.user_attrs, base.number, target))
        queued += 1
    return queued


def extend_runs(study: optuna.Study, cells: Sequence[str] | None = None) -> int:
    """Queue the extensions the finished runs of ``cells`` (ids; None: every cell) ask for, under
    the study's queue lock, read fresh from the storage; how many were queued."""
    with queue.lock(study, f"ablate-queue:{study.study_name}"):
        if cells is None:
            trials = queue.trials(study, None, ALL_STATES)
        else:
            trials = [t for c in dict.fromkeys(cells) for t in queue.trials(study, {"cell_id": c, "phase": "replicate"})]
        return queue_extensions(study, trials)


# --- what plan, status and the reports say ------------------------------------------------------


@dataclass(frozen=True)
class Extension:
    """Where one item trained until converged stands: its declared budget, the longest finished
    run's budget (``reached``, 0 before any finished), a longer run queued or running
    (``pending``, its budget), ``max_steps``, and whether it is settled (converged, at the most,
    or given up: no longer run pending)."""

    cell_id: str
    cell_label: str
    seed: int
    declared: int
    reached: int
    pending: int | None
    max_steps: int
    converged: bool | None
    item: str = ""  # its key (``design.Item.key``)

    @property
    def extended(self) -> bool:
        return max(self.reached, self.pending or 0) > self.declared

    @property
    def open(self) -> bool:
        """It may still train: not finished yet, or still improving below the most."""
        return self.pending is not None or self.reached == 0 or (self.converged is False and self.reached < self.max_steps)

    def line(self) -> str:
        now = f"{self.declared} → {self.reached}" if self.reached else f"{self.declared} → (not finished)"
        more = f" ({self.pending} queued)" if self.pending is not None else ""
        state = ("converged" if self.converged else "still improving at the most" if self.reached >= self.max_steps
                 else "still improving")
        return (f"extended: {self.cell_label} · seed {self.seed}: {now}{more} of max {self.max_steps} steps"
                + (f" ({state})" if self.reached else ""))


def extension_history(trials: Iterable[Any], items: Iterable[Any] = ()) -> list[Extension]:
    """One ``Extension`` per replicate item of an until-converged cell among ``trials`` (whole
    trials), and per item of ``items`` (``design.Item``) that has no trial yet, in that order."""
    by_item: dict[str, list[Any]] = {}
    for t in trials:
        if t.user_attrs.get("item") and t.user_attrs.get("phase") == "replicate" and _until_converged(t.user_attrs):
            by_item.setdefault(t.user_attrs["item"], []).append(t)
    out = []
    for group in by_item.values():
        group = _not_dropped(group)
        if not group:
            continue
        first = min(group, key=lambda t: t.number)
        declared = min(run_budget(t.user_attrs) for t in group)
        best = longest_run(group)
        reached = run_budget(best.user_attrs) if best is not None else 0
        waiting = [run_budget(t.user_attrs) for t in group if t.state in (TrialState.WAITING, TrialState.RUNNING)
                   and run_budget(t.user_attrs) > reached]
        setting = _until_converged(first.user_attrs) or {}
        out.append(Extension(str(first.user_attrs.get("cell_id")), str(first.user_attrs.get("cell_label")),
                             int(first.user_attrs.get("seed", 0)), declared, reached, max(waiting) if waiting else None,
                             int(setting.get("max_steps", declared)),
                             best.user_attrs.get("converged") if best is not None else None,
                             str(first.user_attrs["item"])))
    for item in items:
        setting = _until_converged({"config": item.cell.config})
        if item.phase != "replicate" or setting is None or item.key in by_item:
            continue
        steps = int(item.cell.config["train"]["steps"])
        out.append(Extension(item.cell.id, item.cell.label, item.seed, steps, 0, None, int(setting["max_steps"]), None,
                             item.key))
    return out


def extension_lines(trials: Iterable[Any], items: Iterable[Any] = ()) -> list[str]:
    """What ``ablate plan`` and ``ablate status`` say of the items trained until converged (those
    of ``trials``, and of ``items`` without a trial yet): one line per extended item, and the most
    steps the open ones may still train."""
    found = extension_history(trials, items)
    out = [e.line() for e in found if e.extended]
    still = [e for e in found if e.open]
    if still:
        most = sum(e.max_steps - max(e.reached, e.pending or 0, e.declared) for e in still)
        out.append(f"until converged: {len(still)} of {len(found)} replicates may still train, up to "
                   f"{max(e.max_steps for e in still)} steps each ({most:,} more steps at most)")
    return out


def lineage_lines(trials: Iterable[Any], most: int = 10) -> list[str]:
    """What ``ablate status`` says of the runs that continued a kept stable-phase checkpoint: per
    item its longest finished run's ``continued_from`` (at most ``most`` lines, then a count)."""
    by_item: dict[str, list[Any]] = {}
    for t in trials:
        if t.user_attrs.get("item"):
            by_item.setdefault(t.user_attrs["item"], []).append(t)
    out = []
    for group in by_item.values():
        best = longest_run(group)
        branch = best.user_attrs.get("continued_from") if best is not None else None
        if isinstance(branch, dict):
            a = best.user_attrs
            out.append(f"continued: {a.get('cell_label')} · seed {a.get('seed')} ({run_budget(a)} steps) from "
                       f"{branch.get('label')} ({branch.get('cell')}) · seed {branch.get('seed')} at step "
                       f"{branch.get('step')}: {a.get('steps_trained', '?')} steps trained")
    return out[:most] + ([f"… and {len(out) - most} more continued runs"] if len(out) > most else [])
