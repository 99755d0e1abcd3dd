"""One cell store: the studies of one storage share their results. When a study is prepared, an
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
  only when asked (``reuse_stale``); they keep their ``code_version``;
- an extension (training until converged) only at the same budget.

Read-only but for ``link`` and ``link_if_done_elsewhere``, which add or finish a trial of the
linking study.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from ablate import design
from ablate.design import Cell, Item
from ablate.runner import queue
from ablate.runner.items import (
    BUDGET,
    DROPPED,
    EXTENDED_FROM,
    item_attrs,
    item_state,
    level_params,
    utc_stamp,
)
from ablate.stores import redact

# Failed items another study may reuse: a divergence is the cell's (an error may be fixed).
REUSABLE_FAILURES = ("diverged",)
# What a linked trial does not take from the trial it links: the worker's own, and marks.
NOT_LINKED = ("worker", "step", DROPPED, "spec_hash")
# An item's own attributes (item_attrs): a link keeps its item's, whatever the source's were.
IDENTITY = ("item", "cell_id", "cell_label", "seed", "phase", "settings", "config", "config_key",
            "code_version", "index", "tune", "after_tune", "spec_hash", "linked_at", BUDGET, EXTENDED_FROM)
# The user attributes reuse reads of another study's trials.
SOURCE_KEYS = ("item", "cell_id", "config_key", "code_version", "failure_kind", "reused_from", DROPPED, BUDGET)


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
                 for s in queue.summaries(store)}
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
    attrs["linked_at"] = utc_stamp()  # its times are the training's; this is when it joined the study
    return attrs


def link(study: optuna.Study, item: Item, source: Source, opened: dict[str, optuna.Study] | None = None,
         digest: str | None = None) -> None:
    """Add to ``study`` a finished trial for ``item`` that links ``source``: the item's identity,
    the source's results and MLflow run, and ``reused_from``."""
    opened = opened if opened is not None else {}
    if source.study not in opened:
        opened[source.study] = queue.load(queue.storage_of(study), source.study)
    frozen = queue.trial(opened[source.study], source.number)
    own = item_attrs(item)
    if item.tune:  # a tuned item's config is its sampled (or best) setting's: the source's
        own["config"] = frozen.user_attrs.get("config", own["config"])
    attrs = {**own, **_linked_attrs(frozen, source)}
    if digest:
        attrs["spec_hash"] = digest
    queue.add(study, frozen.state, attrs, frozen.value, frozen.datetime_start, frozen.datetime_complete,
              _linked_params(study, own, frozen))


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
        other = queue.load(store, entry.study)
        if other.user_attrs.get("tracking_uri") != study.user_attrs.get("tracking_uri"):
            continue
        source = _source(entry, False)
        frozen = queue.trial(other, entry.number)
        queue.finish(study, trial, frozen.state, _linked_attrs(frozen, source), frozen.value)
        return source.trained_in
    return None
