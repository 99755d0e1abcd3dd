"""A study: ablate's items on the Optuna work queue (runner/queue.py), one trial per (cell,
phase, seed) — their attributes, their states, queueing them, progress.

Items are enqueued as WAITING trials carrying their cell config in user attributes; workers
claim them atomically (queue.claim, with the tuning rule of runner/phases.py). Heartbeats mark
trials of killed workers FAIL and re-enqueue them, up to a retry bound. Nothing here touches
Optuna's storage internals: that is runner/queue.py's alone.

One cell store: the studies of one storage share their results. When a study is prepared, an
item finished in another study (same item key: same cell id, hence config, data, code and
tuning protocol, and the same seed or tuning index) is not queued but *linked*: a finished trial
is added to this study carrying the finished trial's attributes (metrics, provenance, the same
``mlflow_run_id``: the MLflow run is referenced, not copied) and ``reused_from`` (the study,
trial number and item of the trial that trained it). Results, reports, ``plan`` and ``status``
read it as their own; it survives the source study's removal. What is reused:

- completed items, and items that diverged (a result of the cell: the same config diverges
  again); not items that failed with an error (a bug, which a fix may remove without a code
  version bump) or ran out of retries (the machine, not the cell);
- only from studies on the same MLflow tracking store (the run must be readable);
- a tuned cell only whole: its tuning trials are linked only when the source study tuned it with
  exactly the tuning items this spec asks for, all finished (the replicates depend on the best
  of them), and then its finished replicates with them; missing replicate seeds run here on
  the same best setting. Otherwise nothing of the cell is reused (``Reuse.held`` says why);
- *stale* results, same config key (``ablate.design.config_key``) at another code version,
  only when asked (``reuse_stale``); they keep their ``code_version``.

Trials marked ``dropped`` (``ablate rm --orphans``, ``ablate keep``) are left out of every
state, result and reuse; their study keeps their numbers (Optuna numbers trials by count, so
trials are never deleted from a study that stays).

A cell trained until converged (``train.until_converged``) may hold several trials per replicate
item, one per budget: a run still improving is extended by a longer one queued for the same item
(``extend_runs``; the section at the end says why the same item, and how it is queued exactly
once). Its result is its longest finished run (``longest_run``).

So that optuna-dashboard shows an ablation rather than an optimisation, ``describe`` names the
objective (``val_accuracy``), says in the study's ``description`` attribute (and its dashboard
note, when optuna-dashboard is installed) what the trials are, and keeps the categorical
distribution of every factor (its level labels, in the spec's order) in ``PARAM_DISTRIBUTIONS``:
a running trial records its levels (and tuned values, runner/phases.py) as Optuna parameters,
which the dashboard's importance, parallel-coordinate and slice views read.
"""

from __future__ import annotations

import copy
import datetime
import difflib
import hashlib
import json
import os
import shutil
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from ablate import design
from ablate.design import Cell, Item, canonical_json, spec_hash
from ablate.runner import queue
from ablate.runner.queue import StorageError
from ablate.spec import Spec
from ablate.stores import Stores, redact

MAX_RETRIES = 2
# Training until converged (the section at the end): the trial attributes of an extension, the
# steps it trains to and {"number", "steps"} of the run it continues.
BUDGET = "budget"
EXTENDED_FROM = "extended_from"
# A failed item counts as done when it failed for one of these reasons: re-running gives the same.
TERMINAL_KINDS = ("diverged", "error")
# Failed items another study may reuse: a divergence is the cell's (an error may be fixed).
REUSABLE_FAILURES = ("diverged",)
# Items are looked up by cell (a replicate's cell tuning, a cell's tuning history, results of
# other studies) and by config key (stale results): indexed.
INDEXED = ("cell_id", "config_key")
# The user attributes item_state reads.
STATE_KEYS = ("item", "failure_kind", "dropped", BUDGET)
# The user attribute that removes a trial from its study's results (``ablate rm --orphans``).
DROPPED = "dropped"
# Specs a study remembers (``specs``), so that orphaned trials can be kept as a study of their own.
SPEC_HISTORY = 16
# What a linked trial does not take from the trial it links: the worker's own, and marks.
NOT_LINKED = ("worker", "step", DROPPED, "spec_hash")
# An item's own attributes (item_attrs): a link keeps its item's, whatever the source's were.
IDENTITY = ("item", "cell_id", "cell_label", "seed", "phase", "settings", "config", "config_key",
            "code_version", "index", "tune", "after_tune", "spec_hash", "linked_at", BUDGET, EXTENDED_FROM)
# The user attributes reuse reads of another study's trials.
SOURCE_KEYS = ("item", "cell_id", "config_key", "code_version", "failure_kind", "reused_from", DROPPED, BUDGET)

# Failures that are not the item's: re-queued without a bound.
UNBOUNDED = ("interrupted", "infrastructure")
# Failures whose attempt's run is the trial's result (its run ends FAILED, not KILLED).
RECORDED_KINDS = ("diverged", "error", "oom", "infrastructure")

KILLED_ATTRS = {"status": "killed", "failure_kind": "killed", "failure_message": "worker stopped sending heartbeats"}
# The objective every COMPLETE trial reports (worker.py tells the study this value).
OBJECTIVE = "val_accuracy"
# Study user attribute: factor name → Optuna distribution (JSON) of its level labels.
PARAM_DISTRIBUTIONS = "param_distributions"
# The description optuna-dashboard's note was last saved with: importing optuna_dashboard to compare
# costs seconds (it pulls in scikit-learn), on every `ablate run` of a study that has nothing to do.
NOTE_SAVED = "ablate.dashboard_note"
# The finished trials (numbers and states, hashed) when every MLflow run was last settled: a run is
# left RUNNING only by a trial that finished (or died) since, so an unchanged set needs no MLflow.
RUNS_SETTLED = "ablate.runs_settled"


# The tracking URI each study of this process reports to (the study's attribute holds it with the
# password redacted): where a killed worker's MLflow run is closed.
_TRACKING: dict[str, str] = {}


def storage(url: str, read_only: bool = False) -> optuna.storages.RDBStorage:
    """The Optuna storage at ``url`` as ablate uses it (``read_only``: an existing store, for
    reading only, writing nothing at all); raises StorageError."""
    return queue.connect(url, INDEXED, on_stale=_on_stale, read_only=read_only)


def open_study(name: str, stores: Stores, create: bool = False, read_only: bool = False) -> optuna.Study:
    store = storage(stores.storage, read_only=read_only and not create)
    _TRACKING[name] = stores.tracking
    try:
        if create:
            return optuna.create_study(study_name=name, storage=store, load_if_exists=True, direction="maximize")
        return optuna.load_study(study_name=name, storage=store)
    except KeyError:
        raise StorageError(f"{missing_study(name, optuna.get_all_study_names(store), stores.storage)}; "
                           f"{WHERE_STORES_ARE}") from None


WHERE_STORES_ARE = ("stores are found through --storage / storage=, $ABLATE_STORAGE, or the folder "
                    "home= / $ABLATE_HOME (default ./.ablate)")


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
    other run KILLED (a killed or interrupted attempt, or one superseded by a retry). How many
    runs it ended; tracking failures are swallowed (the Optuna record is what counts).

    The Optuna record is the commit point of a trial: its run stays RUNNING until then, so a
    kill between the two leaves no second FINISHED run for an item."""
    if not tracking:
        return 0
    mark = None
    if numbers is None:  # all: skipped (with MLflow's seconds of import) when no trial finished since the last
        finished = sorted((t.number, t.state.name) for t in study.get_trials(deepcopy=False) if t.state.is_finished())
        mark = hashlib.sha256(json.dumps(finished).encode()).hexdigest()[:16]
        if study.user_attrs.get(RUNS_SETTLED) == mark:
            return 0
    from ablate.runner import tracking as tr

    ended = 0
    try:
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
    except Exception:  # tracking unreachable: the trial state is what counts
        return ended
    if mark is not None:
        try:
            study.set_user_attr(RUNS_SETTLED, mark)
        except Exception:  # a read-only store: the next run that can write records it
            pass
    return ended


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


def factor_distributions(spec: Spec, known: Mapping[str, Any] | None = None
                         ) -> dict[str, optuna.distributions.CategoricalDistribution]:
    """Per factor, a categorical distribution over its level labels in the spec's order (and the
    baseline's label, where a cell shows it: a conditional factor that does not apply, a factor
    left at the baseline by a one-at-a-time design). ``known`` (name → distribution
    JSON, as stored) keeps the labels recorded before: those the spec no longer lists follow its
    own, so that every recorded value stays a choice."""
    factors, _ = design.parse_factors(spec)
    shown = {f.name: {c.labels[f.name] for c in design.cells(spec)} for f in factors}
    out = {}
    for f in factors:
        labels = [lvl.label for lvl in f.levels]
        if f.baseline_label in shown[f.name] and f.baseline_label not in labels:
            labels.append(f.baseline_label)
        if known and f.name in known:
            old = optuna.distributions.json_to_distribution(known[f.name])
            if isinstance(old, optuna.distributions.CategoricalDistribution):
                labels += [c for c in old.choices if c not in labels]
        out[f.name] = optuna.distributions.CategoricalDistribution(labels)
    return out


def describe(study: optuna.Study, spec: Spec) -> None:
    """What optuna-dashboard needs to show an ablation (see the module docstring): the objective's
    name, the description, the note, and the factors' distributions; parameters recorded under
    distributions that changed (a level added) are re-encoded."""
    study.set_metric_names([OBJECTIVE])
    text = description(spec)
    if study.user_attrs.get("description") != text:
        study.set_user_attr("description", text)
    known = study.user_attrs.get(PARAM_DISTRIBUTIONS) or {}
    dists = factor_distributions(spec, known)
    stored = {name: optuna.distributions.distribution_to_json(d) for name, d in dists.items()}
    if {k: known.get(k) for k in stored} != stored:
        for name, dist in dists.items():
            if name in known and known[name] != stored[name]:
                queue.recode_params(study, name, dist)
        study.set_user_attr(PARAM_DISTRIBUTIONS, {**known, **stored})
    # Trials recorded before levels were parameters (older stores) get them now, so the
    # dashboard's importance and slice views read the whole study.
    queue.backfill_params(study, dists)
    if study.user_attrs.get(NOTE_SAVED) == text:
        return
    try:
        import optuna_dashboard
    except ImportError:  # an optional tool: the description attribute says the same
        return
    if optuna_dashboard.get_note(study) != text:
        optuna_dashboard.save_note(study, text)
    study.set_user_attr(NOTE_SAVED, text)


def description(spec: Spec) -> str:
    """The study's description for optuna-dashboard (Markdown): an ablation queue, not a search."""
    factors = ", ".join(f"`{name}`" for name in spec.factors) or "none"
    lines = [
        f"**{spec.name}: an ablation study run by ablate** — a work queue, not an optimisation.",
        "",
        "Each trial trains one cell (a combination of factor levels) on one seed "
        "(`phase` replicate, or tune while a cell's tuning runs); trials run in queue order, so the "
        "best-so-far line and \"best trial\" mean only the highest validation accuracy so far.",
        f"Parameters are the factor levels ({factors}; categorical, in the spec's order) and, for "
        "tuned studies, the tuned values: importance, parallel coordinates and slices show how each "
        f"factor moves `{OBJECTIVE}`, the objective (validation accuracy at the end of training).",
        "User attributes hold the cell (`cell_label`, `cell_id`), `seed`, `phase`, its config and "
        "any failure. Test metrics, curves and statistics: `ablate report` or "
        f"`ablate.results.load({spec.name!r})`.",
    ]
    if spec.description:
        lines += ["", spec.description.strip()]
    return "\n".join(lines)


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
    if any(t.state == TrialState.FAIL and t.user_attrs.get("failure_kind") in TERMINAL_KINDS for t in trials):
        return "failed"
    if TrialState.RUNNING in states:
        return "running"
    if TrialState.WAITING in states:
        return "waiting"
    # Retries are bounded for failures that re-running may fix; a signal's interruption and a
    # store's outage are not the item's (a worker stops after a few outages in a row instead).
    retried = [t for t in trials if t.state == TrialState.FAIL and t.user_attrs.get("failure_kind") not in UNBOUNDED]
    if len(retried) > MAX_RETRIES:
        return "failed"
    return "new"


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


@dataclass
class Prepared:
    """What ``prepare`` did; unpacks as ``(study, queued)``."""

    study: optuna.Study
    queued: int  # items newly queued
    linked: Counter = field(default_factory=Counter)  # source study → items linked from it
    stale: int = 0  # of the linked, how many are stale (another code version)
    reuse: Reuse | None = None  # what other studies hold for the items that were not finished here

    def __iter__(self) -> Iterator[Any]:
        return iter((self.study, self.queued))


def prepare(spec: Spec, items: list[Item], stores: Stores,
            parent_run: Callable[[], str] | None = None, *, reuse: bool = True, reuse_stale: bool = False,
            enqueue_new: bool = True) -> Prepared:
    """Create or resume the study; link the items another study on the storage has finished
    (``reuse``; stale ones too with ``reuse_stale``), enqueue the others that have no live or
    finished trial (unless not ``enqueue_new``). ``parent_run`` starts the study's MLflow parent
    run (returning its id) if it has none yet."""
    study = open_study(spec.name, stores, create=True)
    describe(study, spec)  # first: the description heads the dashboard's table of study attributes
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
        if parent_run is not None and not study.user_attrs.get("mlflow_parent_run_id"):
            study.set_user_attr("mlflow_parent_run_id", parent_run())
        existing = states_by_item(study)
        new = [item for item in items if existing.get(item.key, "new") == "new"]
        done.reuse = find_reusable(queue.storage_of(study), spec.name, stores.tracking, new) if reuse and new \
            else Reuse()
        chosen = done.reuse.chosen(reuse_stale)
        sources: dict[str, optuna.Study] = {}
        for item in new:
            source = chosen.get(item.key)
            if source is not None:
                link(study, item, source, sources, digest)
                done.linked[source.study] += 1
                done.stale += source.stale
            elif enqueue_new:
                queue.enqueue(study, {**item_attrs(item), "spec_hash": digest})
                done.queued += 1
        if enqueue_new and extends_runs(dump):  # those a kill left unqueued (the section at the end)
            done.queued += queue_extensions(study, queue.trials(study, None, tuple(TrialState)))
    return done


# --- reuse across studies -------------------------------------------------------------------------


@dataclass(frozen=True)
class Source:
    """A finished trial of some study that an item of another can link."""

    study: str
    number: int
    item: str  # its item key (another cell id than the linking item's when stale)
    state: TrialState
    code_version: str  # the code that trained it
    stale: bool  # trained by another code version than the linking cell's
    link: bool  # itself a link (its study reused it from another)
    origin: dict[str, Any]  # the trial that trained it: {study, number, item}

    @property
    def trained_in(self) -> str:
        return str(self.origin.get("study", self.study))


@dataclass
class Reuse:
    """What the studies of a storage hold for some items: per item key the finished trial to link
    (``exact``: same key; ``stale``: same config key, another code version), and per cell id why
    results found elsewhere are not reused (``held``)."""

    exact: dict[str, Source] = field(default_factory=dict)
    stale: dict[str, Source] = field(default_factory=dict)
    held: dict[str, str] = field(default_factory=dict)

    def chosen(self, stale: bool = False) -> dict[str, Source]:
        """Item key → the source to link: the exact ones, and the stale ones when asked."""
        if not stale:
            return dict(self.exact)
        return {**self.stale, **self.exact}


def _suffix(item_key: str) -> str:
    """``phase/seed`` or ``tune/index``: an item's place in its cell."""
    return item_key.split("/", 1)[1] if "/" in item_key else ""


def _finished_ok(entry: queue.Found) -> bool:
    """A result another study can link: completed, pruned (a tuning trial its pruner stopped, as
    ``item_state`` counts it) or failed in a way that is the cell's own (a divergence)."""
    return entry.state in (TrialState.COMPLETE, TrialState.PRUNED) or (
        entry.state == TrialState.FAIL and entry.user_attrs.get("failure_kind") in REUSABLE_FAILURES)


def _rank(entry: queue.Found) -> tuple[int, int]:
    """Preference among candidates: completed first, trained there before linked there."""
    return (entry.state != TrialState.COMPLETE, bool(entry.user_attrs.get("reused_from")))


def _source(entry: queue.Found, stale: bool) -> Source:
    attrs = entry.user_attrs
    origin = attrs.get("reused_from") if isinstance(attrs.get("reused_from"), dict) else None
    return Source(entry.study, entry.number, str(attrs.get("item")), entry.state,
                  str(attrs.get("code_version") or design.ORIGINAL_CODE_VERSION), stale, origin is not None,
                  {k: origin[k] for k in ("study", "number", "item") if k in origin} if origin else
                  {"study": entry.study, "number": entry.number, "item": str(attrs.get("item"))})


def find_reusable(store: optuna.storages.RDBStorage, study_name: str, tracking_uri: str | None,
                  items: Sequence[Item]) -> Reuse:
    """What the other studies on ``store`` (with the same tracking store) hold for ``items``: the
    finished trials they could link (see the module's docstring for the rules). Read-only."""
    out = Reuse()
    if not items:
        return out
    cells: dict[str, Cell] = {i.cell.id: i.cell for i in items}
    by_original = {c.original_id: c for c in cells.values() if c.original_id and c.original_id != c.id}
    by_key = {c.config_key: c for c in cells.values() if c.config_key}
    found: dict[tuple[str, int], queue.Found] = {}
    for key, values in (("cell_id", list(cells) + list(by_original)), ("config_key", list(by_key))):
        for entry in queue.find(store, key, values, SOURCE_KEYS) if values else []:
            found[(entry.study, entry.number)] = entry
    if not found:
        return out
    trackings = {s.study_name: s.user_attrs.get("tracking_uri")
                 for s in optuna.get_all_study_summaries(store, include_best_trial=False)}
    # Per cell, per kind (exact / stale), per source study: that study's trials by item suffix.
    groups: dict[tuple[str, bool, str], dict[str, list[queue.Found]]] = {}
    for entry in sorted(found.values(), key=lambda e: (e.study, e.number)):
        attrs = entry.user_attrs
        if attrs.get(DROPPED) or not attrs.get("item") or redact(trackings.get(entry.study) or "") != redact(tracking_uri):
            continue
        if attrs.get(BUDGET):  # an extension: its item's result at another budget (link_if_done_elsewhere)
            continue
        version = str(attrs.get("code_version") or design.ORIGINAL_CODE_VERSION)
        cid = attrs.get("cell_id")
        matches: list[tuple[Cell, bool]] = []
        if cid in cells and version == cells[cid].code_version and entry.study != study_name:
            matches.append((cells[cid], False))
        key_cell = by_key.get(attrs.get("config_key")) or (by_original.get(cid) if "config_key" not in attrs else None)
        if key_cell is not None and version != key_cell.code_version:
            matches.append((key_cell, True))
        for cell, stale in matches:
            groups.setdefault((cell.id, stale, entry.study), {}).setdefault(_suffix(attrs["item"]), []).append(entry)
    wanted: dict[str, list[Item]] = {}
    for item in items:
        wanted.setdefault(item.cell.id, []).append(item)
    for cid, cell_items in wanted.items():
        tuned = bool(cell_items[0].tune)
        for stale in (False, True):
            target = out.stale if stale else out.exact
            studies = {s: g for (c, k, s), g in groups.items() if c == cid and k == stale}
            if not studies:
                continue
            if tuned:
                choice, why = _tuned_source(cell_items, studies)
                if choice is None:
                    out.held.setdefault(cid, why)
                    continue
                studies = {choice: studies[choice]}
            for item in cell_items:
                candidates = [e for g in studies.values() for e in g.get(_suffix(item.key), []) if _finished_ok(e)]
                if candidates and item.key not in target:
                    target[item.key] = _source(min(candidates, key=_rank), stale)
    return out


def _tuned_source(cell_items: list[Item], studies: dict[str, dict[str, list[queue.Found]]]
                  ) -> tuple[str | None, str]:
    """(the study whose tuning of this cell a tuned cell can take whole — its tuning items are
    exactly those asked for, all finished, none by an error — or None, why none can be taken)."""
    asked = {_suffix(i.key) for i in cell_items if i.phase == "tune"}
    best, reasons = None, []
    for name, by_suffix in studies.items():
        tuning = {k: v for k, v in by_suffix.items() if k.startswith("tune/")}
        states = {k: item_state(v) for k, v in tuning.items()}
        if set(tuning) != asked:
            reasons.append(f"tuned in {name} with {len(tuning)} trials, this spec asks for {len(asked)}")
        elif any(s not in ("done", "failed") for s in states.values()):
            reasons.append(f"its tuning in {name} is not finished")
        elif any(not any(_finished_ok(e) for e in tuning[k]) for k in tuning):
            reasons.append(f"a tuning trial in {name} failed with an error")
        else:
            replicates = sum(any(_finished_ok(e) for e in v) for k, v in by_suffix.items() if not k.startswith("tune/"))
            if best is None or replicates > best[1]:
                best = (name, replicates)
    if best is not None:
        return best[0], ""
    return None, ("not reused: " + "; ".join(reasons) + " (a tuned cell is reused whole: its replicates depend "
                  "on the best of its tuning trials)")


def _linked_attrs(frozen: FrozenTrial, source: Source) -> dict[str, Any]:
    """The attributes a link takes from the trial it links: its results, not its identity."""
    attrs = {k: v for k, v in frozen.user_attrs.items() if k not in NOT_LINKED and k not in IDENTITY}
    for key in ("status", "failure_kind", "failure_message", "traceback"):  # not a retried attempt's
        attrs.setdefault(key, None)
    attrs["code_version"] = source.code_version  # the code that trained it, stale or not
    attrs["reused_from"] = {**source.origin, "code_version": source.code_version, "stale": source.stale}
    attrs["linked_at"] = _now()  # its times are the training's; this is when it joined the study
    return attrs


def link(study: optuna.Study, item: Item, source: Source, opened: dict[str, optuna.Study] | None = None,
         digest: str | None = None) -> None:
    """Add to ``study`` a finished trial for ``item`` that links ``source``: the item's identity,
    the source's results and MLflow run, and ``reused_from``."""
    opened = opened if opened is not None else {}
    if source.study not in opened:
        opened[source.study] = optuna.load_study(study_name=source.study, storage=queue.storage_of(study))
    frozen = queue.trial(opened[source.study], source.number)
    own = item_attrs(item)
    if item.tune:  # a tuned item's config is its sampled (or best) setting's: the source's
        own["config"] = frozen.user_attrs.get("config", own["config"])
    attrs = {**own, **_linked_attrs(frozen, source)}
    if digest:
        attrs["spec_hash"] = digest
    queue.add(study, frozen.state, attrs, frozen.value, frozen.datetime_start, frozen.datetime_complete,
              _linked_params(study, own, frozen))


def level_params(study: optuna.Study, settings: Mapping[str, Any] | None) -> dict[str, tuple[Any, Any]]:
    """An item's factor levels as Optuna parameters (name → (label, distribution)) under the
    study's categorical distributions (``PARAM_DISTRIBUTIONS``); levels it does not list are left out."""
    from optuna.distributions import CategoricalDistribution, json_to_distribution

    known = study.user_attrs.get(PARAM_DISTRIBUTIONS) or {}
    out: dict[str, tuple[Any, Any]] = {}
    for name, label in (settings or {}).items():
        dist = json_to_distribution(known[name]) if name in known else None
        if isinstance(dist, CategoricalDistribution) and label in dist.choices:
            out[name] = (label, dist)
    return out


def _linked_params(study: optuna.Study, own: dict[str, Any], frozen: FrozenTrial) -> dict[str, tuple[Any, Any]]:
    """A linked trial's Optuna parameters, as a trained one records them (phases.record_params):
    its levels, and the tuned values the source trial recorded."""
    out = level_params(study, own.get("settings"))
    tuned = frozen.user_attrs.get("params")
    for name in tuned if isinstance(tuned, dict) else ():
        if name in frozen.params and name in frozen.distributions:
            out[name] = (frozen.params[name], frozen.distributions[name])
    return out


def link_if_done_elsewhere(study: optuna.Study, trial: optuna.Trial) -> str | None:
    """A claimed item that another study has finished since it was queued: finish this trial as
    a link to it instead of training (untuned items only: a tuned cell is reused whole, at
    ``prepare``). Returns the study that trained it, or None (nothing found, or reuse is off)."""
    attrs = trial.user_attrs
    if attrs.get("tune") or not study.user_attrs.get("reuse", True) or not attrs.get("code_version"):
        return None
    store = queue.storage_of(study)
    found = [e for e in queue.find(store, "cell_id", [attrs["cell_id"]], SOURCE_KEYS)
             if e.study != study.study_name and e.user_attrs.get("item") == attrs["item"] and _finished_ok(e)
             and not e.user_attrs.get(DROPPED) and e.user_attrs.get(BUDGET) == attrs.get(BUDGET)
             and e.user_attrs.get("code_version", design.ORIGINAL_CODE_VERSION) == attrs["code_version"]]
    for entry in sorted(found, key=_rank):
        other = optuna.load_study(study_name=entry.study, storage=store)
        if other.user_attrs.get("tracking_uri") != study.user_attrs.get("tracking_uri"):
            continue
        source = _source(entry, False)
        frozen = queue.trial(other, entry.number)
        queue.finish(study, trial, frozen.state, _linked_attrs(frozen, source), frozen.value)
        return source.trained_in
    return None


def counts(study: optuna.Study, items: list[Item] | None = None) -> Counter:
    """Items per state; with ``items`` also those of the spec not yet enqueued ("new")."""
    states = states_by_item(study)
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
    def of(cls, study: optuna.Study, items: list[Item] | None = None) -> Progress:
        c = counts(study, items)
        return cls(c["done"], c["failed"], c["running"], c["waiting"], c["new"])

    @property
    def finished(self) -> bool:
        return self.running == 0 and self.waiting == 0


# --- orphans, the studies of a storage, removing ---------------------------------------------------

# What orphans and removals read of a study's trials.
ORPHAN_KEYS = ("item", "cell_id", "cell_label", "failure_kind", DROPPED, "spec_hash", "mlflow_run_id", "reused_from",
               BUDGET)


@dataclass
class Orphans:
    """A study's trials whose items belong to no cell of its current spec (not dropped): by item."""

    study: str
    finished: dict[str, list[queue.Entry]] = field(default_factory=dict)  # done or failed for good
    unfinished: dict[str, list[queue.Entry]] = field(default_factory=dict)  # waiting or running

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


def orphans(study: optuna.Study, items: Sequence[Item]) -> Orphans:
    """The study's items that are not among ``items`` (its current spec's), with their trials."""
    keys = {i.key for i in items}
    by_item: dict[str, list[queue.Entry]] = {}
    for entry in queue.entries(study, None, ORPHAN_KEYS):
        key = entry.user_attrs.get("item")
        if key and key not in keys and not entry.user_attrs.get(DROPPED):
            by_item.setdefault(key, []).append(entry)
    out = Orphans(study.study_name)
    for key, trials in by_item.items():
        state = item_state(trials)
        if state in ("done", "failed"):
            out.finished[key] = trials
        elif state in ("waiting", "running"):
            out.unfinished[key] = trials
    return out


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


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
    mark = {DROPPED: {"at": _now(), **(why or {"why": "orphaned by a change of the spec"})}}
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
class Removal:
    """What ``ablate rm STUDY`` removes: the study (its queue entries, every trial) and the runs of
    its MLflow experiment, except the runs another study references (and their parent)."""

    study: str
    trials: int
    running: int
    tracking: str | None
    runs: list[str] = field(default_factory=list)  # run ids to delete
    kept: dict[str, list[str]] = field(default_factory=dict)  # run id → studies referencing it


def removal(name: str, stores: Stores) -> Removal:
    """What removing study ``name`` would remove, read-only; StorageError when there is no such study."""
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
    return Removal(name, len(entries), sum(e.state == TrialState.RUNNING for e in entries), tracking_uri,
                   [r for r, _, _ in runs if r not in kept], kept)


def remove(plan: Removal, stores: Stores, checkpoints: Path | None = None) -> str | None:
    """Remove the study as ``plan`` says (see ``removal``): its runs, then the study with every
    trial (links other studies hold are copies and stay), then its checkpoints. The experiment is
    renamed (its name freed) and deleted unless it keeps runs others reference; returns its new name."""
    renamed = None
    if plan.tracking:
        from ablate.runner import tracking

        tracking.delete_runs(plan.tracking, plan.runs)
        users = sorted({s for studies in plan.kept.values() for s in studies})
        note = (f"study {plan.study} removed {_now()}; kept {len(plan.kept)} runs referenced by " + ", ".join(users)
                if plan.kept else f"study {plan.study} removed {_now()}")
        renamed = tracking.retire_experiment(plan.tracking, plan.study, delete=not plan.kept, note=note)
    try:
        optuna.delete_study(study_name=plan.study, storage=storage(stores.storage))
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


@dataclass
class StudyRow:
    """One study of a storage, for ``ablate ls``."""

    name: str
    cells: int
    done: int
    failed: int
    running: int
    waiting: int
    reused: int  # of the done and failed, linked from other studies
    dropped: int
    last: datetime.datetime | None


def overview(stores: Stores) -> list[StudyRow]:
    """Every study on the storage with its items per state and its last activity."""
    store = storage(stores.storage)
    by_study: dict[str, dict[str, list[queue.Found]]] = {}
    dropped: Counter = Counter()
    linked: dict[str, datetime.datetime] = {}
    for entry in queue.find(store, None, (), ("item", "cell_id", "failure_kind", DROPPED, "reused_from", "linked_at",
                                                    BUDGET)):
        at = entry.user_attrs.get("linked_at")
        if isinstance(at, str):
            when = datetime.datetime.fromisoformat(at)
            linked[entry.study] = max(linked.get(entry.study, when), when)
        if entry.user_attrs.get(DROPPED):
            dropped[entry.study] += 1
        elif entry.user_attrs.get("item"):
            by_study.setdefault(entry.study, {}).setdefault(entry.user_attrs["item"], []).append(entry)
    rows = []
    for act in queue.activity(store):
        items = by_study.get(act.study, {})
        states = Counter(item_state(v) for v in items.values())
        reused = sum(any(t.user_attrs.get("reused_from") and t.state != TrialState.WAITING for t in v)
                     for v in items.values())
        cells = {t.user_attrs.get("cell_id") for v in items.values() for t in v}
        moments = [m for m in (act.last, linked.get(act.study)) if m is not None]
        rows.append(StudyRow(act.study, len(cells - {None}), states["done"], states["failed"], states["running"],
                             states["waiting"] + states["new"], reused, dropped[act.study],
                             max(moments) if moments else None))
    return rows


# --- read-only progress, for `ablate plan` ---------------------------------------------------


def existing_store_url(storage_url: str | None) -> str | None:
    """The storage URL to read, or None when there is no store yet (nothing is created)."""
    from ablate import stores

    url = storage_url or os.environ.get("ABLATE_STORAGE")
    if url is None:  # the default of ablate.stores.resolve, without its mkdir
        path = stores.home().resolve() / "optuna.db"
        return f"sqlite:///{path}" if path.is_file() else None
    if url.startswith("sqlite:///"):
        return url if Path(url.removeprefix("sqlite:///")).is_file() else None
    return url


def item_states(study_name: str, keys: list[str], storage_url: str | None) -> dict[str, str] | None:
    """State per item key (done, failed, running, waiting, new), or None when the study has no
    store or no study of that name. Opens an existing store only; raises StorageError."""
    url = existing_store_url(storage_url)
    if url is None:
        return None
    try:
        opt = optuna.load_study(study_name=study_name, storage=storage(url, read_only=True))
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


def standing(study_name: str, items: Sequence[Item], storage_url: str | None,
             tracking_uri: str | None, reuse: bool = True) -> Standing | None:
    """The state of each item, what other studies hold for the unfinished ones, and the study's
    orphans; None when there is no store yet. Opens an existing store only; raises StorageError."""
    url = existing_store_url(storage_url)
    if url is None:
        return None
    store = storage(url)
    try:
        opt: optuna.Study | None = optuna.load_study(study_name=study_name, storage=store)
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
    else:
        out.states = {i.key: "new" for i in items}
    new = [i for i in items if out.states[i.key] == "new"]
    if reuse and new:
        out.reuse = find_reusable(store, study_name, tracking_uri, new)
    return out


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
    out["config"]["train"]["steps"] = target
    out[BUDGET] = target
    out[EXTENDED_FROM] = {"number": number, "steps": run_budget(attrs)}
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
                             best.user_attrs.get("converged") if best is not None else None))
    for item in items:
        setting = _until_converged({"config": item.cell.config})
        if item.phase != "replicate" or setting is None or item.key in by_item:
            continue
        steps = int(item.cell.config["train"]["steps"])
        out.append(Extension(item.cell.id, item.cell.label, item.seed, steps, 0, None, int(setting["max_steps"]), None))
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
