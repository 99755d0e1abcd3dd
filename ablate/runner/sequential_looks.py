"""A sequential study (spec ``seeds: {min, max, step, until: decided}``): seeds are added look by
look until every comparison with the reference is decided.

The state lives in the Optuna study (user attribute ``ablate.sequential``): the current look, the
seeds planned per cell, the decided comparisons and every look's analysis. It advances in
``advance``, which whichever process finds a look finished calls — a worker with nothing left to
claim, or ``ablate run`` — under a lock of the study's storage, so that a look is analysed and its
next seeds are queued exactly once however many workers finish at once. Every step is idempotent:
the decisions of a look are a function of its data (the first n_k seeds of each cell), the next
items are queued only where no trial exists (``study.prepare``), and the state is written before
the queueing, so a process killed at any point leaves what the next call repeats or completes.

The analysis is ``ablate.stats.group_sequential`` (boundaries, decisions, valid p-values and repeated
intervals); the values per seed are the trials' own metrics (``test_accuracy``, …) or the norm
report's per-run measures (``norm.training``, …: ``ablate.stats.norms.per_seed`` of the runs'
curves).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import optuna

from ablate import design, faults
from ablate.design import Item
from ablate.runner import queue
from ablate.runner.items import item_state, trials_by_item
from ablate.runner.study import prepare
from ablate.spec import Spec
from ablate.stats.rules import EQUIVALENCE_MIN_SEEDS, NEVER_LEARNED_MARGIN
from ablate.stores import Stores
from ablate.terminal import count, duration

if TYPE_CHECKING:
    from ablate.stats.group_sequential import SequentialDesign

__all__ = ["STATE", "Advanced", "State", "advance", "advance_through", "changed_design_lines", "comparison_rows",
           "comparisons", "declared", "design_changes", "designs", "equivalence_interval", "equivalence_words",
           "fixed_after_looks", "items", "load_state", "outcome", "outcome_words", "planned_items", "reference_cell",
           "state_json", "step", "stored_items", "stored_state", "untrained_words"]

STATE = "ablate.sequential"
TERMINAL = ("done", "failed")


@dataclass
class State:
    """Where a sequential study stands. ``look`` is the index of the look being run (0-based);
    ``planned`` the seeds per cell asked for so far; ``decided`` comparison key → its deciding
    look's row; ``history`` every analysed look's rows; ``finished`` once nothing is open."""

    look: int = 0
    planned: dict[str, int] = field(default_factory=dict)
    decided: dict[str, dict[str, Any]] = field(default_factory=dict)
    history: list[list[dict[str, Any]]] = field(default_factory=list)
    finished: bool = False
    #: the design its looks were analysed under (``declared``), recorded with the first; None in a
    #: state written before it was recorded
    design: dict[str, Any] | None = None

    def dump(self) -> str:
        return json.dumps({"look": self.look, "planned": self.planned, "decided": self.decided,
                           "history": self.history, "finished": self.finished, "design": self.design},
                          allow_nan=True)

    @classmethod
    def of(cls, text: str | None) -> State | None:
        if not text:
            return None
        data = json.loads(text)
        return cls(int(data["look"]), dict(data["planned"]), dict(data["decided"]), list(data["history"]),
                   bool(data["finished"]), data.get("design"))


def outcome(row: Mapping[str, Any]) -> str:
    """A recorded comparison's outcome as it is said everywhere it is shown: its stored decision,
    except that a ``futile`` one that the futility boundary did not stop — it reached the last look
    with none of significant, equivalent or futile — is ``undecided``.

    ``decide`` records both as ``futile``; they are told apart by what it stored with them: a stop
    at the futility boundary has a finite ``futility_bound`` (the boundary it fell under), while the
    last look's futility boundary is infinite (stored as null) and a look without spread has none.
    Rows recorded before the futility boundary existed have no ``futility_bound`` at all: they could
    be futile only at the last look, so they read ``undecided`` too, as they should."""
    decision = str(row.get("decision"))
    if decision != "futile":
        return decision
    bound = row.get("futility_bound")
    stopped = isinstance(bound, int | float) and math.isfinite(bound)
    return "futile" if stopped else "undecided"


def outcome_words(row: Mapping[str, Any]) -> str:
    """``significant at look 3 (9 seeds)``, ``futile at look 2 (6 seeds)``, ``undecided at the last
    look (12 seeds)``, ``open at look 2 (6 seeds)``: the outcome with where it was reached."""
    said = outcome(row)
    where = "the last look" if said == "undecided" else f"look {row.get('look')}"
    return f"{said} at {where} ({row.get('seeds')} seeds)"


def load_state(study: optuna.Study | None) -> State | None:
    """The study's sequential state, or None (not sequential, or no look analysed yet)."""
    if study is None:
        return None
    return State.of(study.user_attrs.get(STATE))


def items(spec: Spec, study: optuna.Study | None = None) -> list[Item]:
    """The study's items: for a sequential spec, each cell on the seeds its looks have planned so
    far (``min`` before the first look); otherwise ``design.items(spec)``."""
    return planned_items(spec, load_state(study) if spec.sequential is not None else None)


def stored_state(spec: Spec, storage_url: str | None) -> State | None:
    """The sequential state of the study of ``spec`` as its storage holds it now (read only;
    nothing is created); None for a study that is not sequential, not stored yet, or in a store
    that cannot be read — a new PostgreSQL database has no tables until a study is created in it;
    the caller's own use of the store reports a broken one."""
    if spec.sequential is None:
        return None
    from ablate.runner.standing import existing_store_url
    from ablate.runner.study import StorageError, load, storage

    url = existing_store_url(storage_url)
    if url is None:
        return None
    try:
        return load_state(load(storage(url, read_only=True), spec.name))
    except (KeyError, StorageError):
        return None


def stored_items(spec: Spec, storage_url: str | None) -> list[Item]:
    """``items`` of the study of ``spec`` as its storage holds it now (``stored_state``):
    ``design.items(spec)`` (the first look's) before any look."""
    return planned_items(spec, stored_state(spec, storage_url))


def planned_items(spec: Spec, st: State | None) -> list[Item]:
    """The items ``st`` has planned (each cell on its looks' seeds so far), ``min`` seeds a cell
    before any look; a study that is not sequential, all of its items."""
    if spec.sequential is None:
        return design.items(spec)
    return design.items(spec, st.planned if st else None)


def reference_cell(spec: Spec) -> str:
    """The cell every comparison is against: the baseline cell, else the first (as the reports)."""
    grid = design.cells(spec)
    base = spec.baseline()
    return next((c.id for c in grid if c.config == base), grid[0].id)


def comparisons(spec: Spec) -> list[tuple[str, str]]:
    """(cell id, measure) of every declared comparison: each other cell against the reference on
    each measure of ``seeds.measures``, in design order."""
    ref = reference_cell(spec)
    return [(c.id, m) for c in design.cells(spec) if c.id != ref for m in spec.sequential.measures]


def _key(cell: str, measure: str) -> str:
    return f"{cell}:{measure}"


def comparison_rows(spec: Spec, decided: Mapping[str, Any], history: Sequence[Sequence[Mapping[str, Any]]]
                    ) -> dict[tuple[str, str], Mapping[str, Any]]:
    """(cell id, measure) → each declared comparison's row: its deciding look's, or its latest look's
    while open; in design order, without those no look has analysed yet."""
    latest = {r["key"]: r for rows in history for r in rows}
    out = {}
    for cell, measure in comparisons(spec):
        r = decided.get(_key(cell, measure)) or latest.get(_key(cell, measure))
        if r is not None:
            out[(cell, measure)] = r
    return out


def declared(spec: Spec) -> dict[str, Any]:
    """What every look's boundaries and decisions depend on, recorded with the first look: the
    seeds design, the equivalence and futility margins, and the comparisons (their number sets
    each one's α), by their cells' labels: a new code version gives the cells new ids, not the
    design new comparisons. ``labels`` (id → label) is not part of the design: it names the looks'
    cells once their ids have changed."""
    labels = {c.id: c.label for c in design.cells(spec)}
    return {"seeds": spec.sequential.model_dump(mode="json"), "stats.min_effect": spec.stats.min_effect,
            "stats.min_ratio": spec.stats.min_ratio,
            "comparisons": [_key(labels[c], m) for c, m in comparisons(spec)], "labels": labels}


def design_changes(spec: Spec, st: State | None) -> list[str]:
    """How ``spec``'s sequential design differs from the one ``st``'s looks were analysed under
    (``seeds.max 6 → 9``, ``2 comparisons added``); empty when it is the same, or when the state
    recorded none (a study analysed before designs were recorded)."""
    if st is None or st.design is None or spec.sequential is None:
        return []
    was, now = st.design, declared(spec)
    out = [f"seeds.{k} {json.dumps(was['seeds'].get(k))} → {json.dumps(now['seeds'].get(k))}"
           for k in sorted(set(was.get("seeds", {})) | set(now["seeds"]))
           if was.get("seeds", {}).get(k) != now["seeds"].get(k)]
    out += [f"{k} {was.get(k)} → {now[k]}" for k in ("stats.min_effect", "stats.min_ratio") if was.get(k) != now[k]]
    before, after = set(was.get("comparisons", [])), set(now["comparisons"])
    out += [f"{count(len(keys), 'comparison')} {how}"
            for keys, how in ((after - before, "added"), (before - after, "removed")) if keys]
    if recoded := _recoded_cells(spec, st):
        out.append(f"new code for {count(len(recoded), 'cell')} ({'; '.join(recoded)}): "
                   f"{'its' if len(recoded) == 1 else 'their'} model, a plug-in's source or ablate's version changed, "
                   f"so {'its' if len(recoded) == 1 else 'their'} next seeds would not be the runs the looks compared")
    return out


def _recoded_cells(spec: Spec, st: State) -> list[str]:
    """The labels of cells whose code changed after ``st``'s looks: with the same comparisons (by
    label), a cell whose id the looks did not plan has a new id, and only code makes one."""
    was = st.design or {}
    if not st.history or set(was.get("comparisons", [])) != set(declared(spec)["comparisons"]):
        return []  # no look yet, or the cells changed (said as comparisons added or removed)
    return [c.label for c in design.cells(spec) if c.id not in st.planned]


def fixed_after_looks(spec: Spec, st: State | Mapping[str, Any] | None) -> str:
    """What to say of a study whose seeds were added look by look and whose spec now fixes their
    number (``seeds: 16`` after an undecided end): its fixed-design tests assume a seed count set
    before any result was seen. Empty otherwise."""
    history = st.history if isinstance(st, State) else (st or {}).get("history", [])
    if spec.sequential is not None or not history:
        return ""
    return (f"the seeds of {spec.name} were first added look by look under a sequential design "
            f"({count(len(history), 'look')} analysed); with a fixed number of seeds now, its reports test a "
            "fixed design, whose p-values assume the seed count was set before any result was seen: read them as "
            "descriptive, or run the design as a new study (another `name`; it reuses these runs)")


def changed_design_lines(spec: Spec, st: State | None) -> list[str]:
    """Why ``ablate run`` refuses a sequential study whose design or cells' code changed after a
    look (and what ``plan`` warns of); empty when neither did."""
    changes = design_changes(spec, st)
    if not changes:
        return []
    recoded = _recoded_cells(spec, st)
    looks = f"after {count(len(st.history), 'look')} had been analysed: {'; '.join(changes)}"
    new_code = ("to go on: restore the code the looks ran (the plug-in's source, ablate's version); or run the design "
                "on the new code as a new study (another `name`), whose looks start again")
    if len(changes) == 1 and recoded:
        return [f"{spec.name}: the code of its cells changed {looks}",
                "a comparison's looks test the runs of one code; the new code's seeds mixed into them would not be "
                "one experiment", new_code]
    return [f"{spec.name}: its sequential design changed {looks}",
            "the looks so far spent their α under the design they were analysed with; a design changed after "
            "looking (more seeds once a comparison ended undecided, another margin) no longer keeps its error "
            "rate, so this study goes on only with the design it declared",
            "to go on: put `seeds` (and `stats`, the cells) back as they were; to add seeds after an undecided "
            "end, run the new design as a new study (another `name`; it reuses these runs), and say with its "
            "results that its design was chosen after seeing these looks", *([new_code] if recoded else [])]


def designs(spec: Spec) -> dict[str, SequentialDesign]:
    """Measure → its group-sequential design: the spec's looks, the family's α shared by Bonferroni
    over every comparison, the smallest effect (``stats.min_effect``; the log of
    ``stats.min_ratio`` for a norm measure, compared on the log scale)."""
    from ablate.stats.group_sequential import (
        SequentialDesign,  # scipy: not at import (ablate status, results.load)
    )

    seq = spec.sequential
    m = len(comparisons(spec))
    out = {}
    for measure in seq.measures:
        effect = math.log(spec.stats.min_ratio) if measure.startswith("norm.") else spec.stats.min_effect
        out[measure] = SequentialDesign(tuple(seq.looks), alpha=seq.alpha, comparisons=max(1, m),
                                        shape=seq.spending, beta=seq.equivalence_beta, min_effect=effect)
    return out


def _finished(study: optuna.Study, its: list[Item]) -> dict[str, tuple[Item, Any]]:
    """Item key → (item, its latest complete trial), of the replicates of ``its`` that finished."""
    by_item = trials_by_item(study)
    done: dict[str, tuple[Item, Any]] = {}
    for item in its:
        complete = [t for t in by_item.get(item.key, []) if t.state == optuna.trial.TrialState.COMPLETE]
        if item.phase == "replicate" and complete:
            done[item.key] = (item, max(complete, key=lambda t: t.number))
    return done


def _chance(done: Mapping[str, tuple[Item, Any]]) -> float | None:
    """The task's chance accuracy, as its runs logged it (None: none did)."""
    for _, trial in done.values():
        if isinstance(value := trial.user_attrs.get("chance"), int | float) and math.isfinite(value):
            return float(value)
    return None


def _values(done: Mapping[str, tuple[Item, Any]], stores: Stores, measure: str) -> dict[str, dict[int, float]]:
    """Cell → seed → the measure of its finished replicate (diverged and failed items: none)."""
    out: dict[str, dict[int, float]] = {}
    if not measure.startswith("norm."):
        for item, trial in done.values():
            value = trial.user_attrs.get(measure)
            if isinstance(value, int | float) and math.isfinite(value):
                out.setdefault(item.cell.id, {})[item.seed] = float(value)
        return out
    return _norm_values(stores, done, measure.removeprefix("norm."))


def _norm_values(stores: Stores, done: Mapping[str, tuple[Item, Any]], measure: str) -> dict[str, dict[int, float]]:
    """The norm report's per-run log value of ``measure`` from the runs' curves (``stats.norms``)."""
    import pandas as pd
    import polars as pl

    from ablate.runner import tracking
    from ablate.stats import norms

    runs = {t.user_attrs["mlflow_run_id"]: item for item, t in done.values() if t.user_attrs.get("mlflow_run_id")}
    frames = tracking.read_parquet_artifacts(stores.tracking, list(runs), tracking.CURVES_ARTIFACT)
    parts = []
    for run_id, frame in frames.items():
        if frame is None or isinstance(frame, Exception):
            continue
        item = runs[run_id]
        parts.append(frame.with_columns(pl.lit(item.cell.id).alias("cell_id"), pl.lit(item.cell.id).alias("cell_label"),
                                        pl.lit(item.seed, dtype=pl.Int64).alias("seed")).to_pandas())
    if not parts:
        return {}
    df = norms.prepare(pd.concat(parts, ignore_index=True))
    return per_run_values(norms.per_seed(norms.layer_norms(df, "probe")), measure)


def per_run_values(per_seed: Any, measure: str) -> dict[str, dict[int, float]]:
    """{cell: {seed: log value of ``measure``}} of a ``stats.norms.per_seed`` frame, on the runs the
    fixed-design report analyses (``norms.primary``: flagged runs left out), so a look never tests
    a run the report would not."""
    from ablate.stats import norms

    col = norms.COLUMN[measure]
    out: dict[str, dict[int, float]] = {}
    for r in norms.primary(per_seed).itertuples(index=False):
        value = getattr(r, col)
        if np.isfinite(value):
            out.setdefault(r.cell_id, {})[int(r.seed)] = float(value)
    return out


def _look_rows(spec: Spec, st: State, values: Mapping[str, Mapping[str, Mapping[int, float]]],
               chance: float | None = None, accuracy: Mapping[str, Mapping[int, float]] | None = None
               ) -> list[dict[str, Any]]:
    """The analysis of the current look: every comparison still open, on the first n_k seeds; with
    ``chance`` known, each row (a norm measure's too) counts the runs of each side on those seeds
    that never learned, by their test accuracy (``accuracy``: cell → seed → it; default the looks'
    own ``test_accuracy`` values)."""
    from ablate.stats.group_sequential import decide

    ref = reference_cell(spec)
    acc = values.get("test_accuracy", {}) if accuracy is None else accuracy
    seeds = spec.seed_list
    n = spec.sequential.looks[st.look]
    by_measure = designs(spec)
    rows = []
    for cell, measure in comparisons(spec):
        key = _key(cell, measure)
        if key in st.decided:
            continue
        vals = values[measure]
        mine = {s: v for s, v in vals.get(cell, {}).items() if s in seeds[:n]}
        theirs = {s: v for s, v in vals.get(ref, {}).items() if s in seeds[:n]}
        shared = sorted(set(mine) & set(theirs))
        if len(shared) >= 2:
            res = decide(by_measure[measure], diffs=[mine[s] - theirs[s] for s in shared])
        else:
            res = decide(by_measure[measure], cell=list(mine.values()), ref=list(theirs.values()))
        if res["look"] == 0:  # too few values for this look (runs diverged or failed): still open
            res["look"] = st.look + 1
        res.pop("z_bounds", None)
        row = {"key": key, "cell_id": cell, "measure": measure, "seeds": n, "paired": len(shared) >= 2,
               **{k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in res.items()}}
        if chance is not None and acc:  # the accuracy report's rule, on this look's runs
            below = chance + NEVER_LEARNED_MARGIN
            side = [[v for s, v in acc.get(c, {}).items() if s in seeds[:n]] for c in (cell, ref)]
            row["never_learned"] = {"chance": chance, "margin": NEVER_LEARNED_MARGIN,
                                    "cell": [sum(v <= below for v in side[0]), len(side[0])],
                                    "reference": [sum(v <= below for v in side[1]), len(side[1])]}
        rows.append(row)
    return rows


def step(spec: Spec, st: State, values: Mapping[str, Mapping[str, Mapping[int, float]]],
         chance: float | None = None, accuracy: Mapping[str, Mapping[int, float]] | None = None
         ) -> list[dict[str, Any]]:
    """Analyse the current look of ``st`` on ``values`` (measure → cell → seed → value) and move
    ``st`` on: record its decisions, and either finish or plan the next look's seeds for the cells
    of the comparisons still open and the reference. Returns the rows it decided. Pure (no
    storage): ``advance`` runs it under the lock, the calibration benchmark on simulated values.
    ``chance``: the task's chance accuracy, by which each row counts the runs that never learned (their
    ``accuracy``, cell → seed → test accuracy; default ``values["test_accuracy"]``)."""
    looks = spec.sequential.looks
    rows = _look_rows(spec, st, values, chance, accuracy)
    st.history.append(rows)
    decided = [r for r in rows if r["decision"] != "open"]
    for r in decided:
        st.decided[r["key"]] = r
    still = [r for r in rows if r["decision"] == "open"]
    if not still or st.look == len(looks) - 1:
        st.finished = True
    else:
        st.look += 1
        for cell in {r["cell_id"] for r in still} | {reference_cell(spec)}:
            st.planned[cell] = looks[st.look]
    return decided


@dataclass(frozen=True)
class Advanced:
    """What one ``advance`` did: the look analysed (1-based), the comparisons it decided, how
    many stay open, the items it queued, and whether the study is finished."""

    look: int
    decided: list[dict[str, Any]]
    open: int
    queued: int
    finished: bool
    looks: int = 0  # the design's looks: the next one's number is said with it

    def event(self) -> dict[str, Any]:
        """What a worker reports of it (``launch.look_line``): the comparisons decided, apart from
        those that reached the last look undecided (``outcome``), the open ones and the queued items."""
        undecided = sum(outcome(r) == "undecided" for r in self.decided)
        return {"look": self.look, "decided": len(self.decided) - undecided, "undecided": undecided,
                "open": self.open, "queued": self.queued, "finished": self.finished, "looks": self.looks}


def advance(study: optuna.Study, spec: Spec, stores: Stores) -> Advanced | None:
    """If every item of the current look has finished, analyse it, record the decisions and queue
    the next look's seeds for the cells of open comparisons (the reference with them); queue any
    planned item that a killed process left unqueued. None when there was nothing to do."""
    if spec.sequential is None:
        return None
    looks = spec.sequential.looks
    decided: list[dict[str, Any]] = []
    # The analysis and the state under the lock; the queueing after it (``prepare`` takes the
    # storage's queue lock, which on SQLite is the same file).
    with queue.lock(study, f"ablate-sequential:{study.study_name}"):
        st = load_state(study) or State(planned={c.id: looks[0] for c in design.cells(spec)})
        planned = design.items(spec, st.planned)
        states = {key: item_state(ts) for key, ts in trials_by_item(study).items()}
        if not [i for i in planned if i.key not in states]:  # else: queue what a kill left unqueued
            if st.finished or any(states[i.key] not in TERMINAL for i in planned):
                return None
            if changed := changed_design_lines(spec, st):  # `ablate run` refuses first: never a mixed design
                raise RuntimeError(" ".join(changed))
            st.design = st.design or declared(spec)
            done = _finished(study, planned)
            values = {m: _values(done, stores, m) for m in spec.sequential.measures}
            decided = step(spec, st, values, _chance(done), _values(done, stores, "test_accuracy"))
            study.set_user_attr(STATE, st.dump())  # before queueing: a kill after it leaves items to queue
            faults.inject("look")
    done = prepare(spec, design.items(spec, st.planned), stores)
    return Advanced(len(st.history), decided, len(comparisons(spec)) - len(st.decided), done.queued, st.finished,
                    len(looks))


def advance_through(study: optuna.Study, spec: Spec, stores: Stores) -> list[Advanced]:
    """``advance``, again while a look it analysed left nothing to train: the next look's seeds
    may all be reused from another study (a converted or a twin study), and that look is then
    analysed now rather than left for the next ``ablate run`` (a run ended with its design
    unfinished, every item done). Stops at a look that queued seeds, at the last, or at None."""
    done: list[Advanced] = []
    for _ in range(len(spec.sequential.looks) + 2 if spec.sequential is not None else 0):  # each call a look, or a requeue
        advanced = advance(study, spec, stores)
        if advanced is None:
            break
        done.append(advanced)
        if advanced.queued or advanced.finished:
            break
    return done


def state_json(spec: Spec, st: State | None) -> dict[str, Any]:
    """A sequential study's state for scripts (``ablate status --json``'s ``sequential``): its looks,
    the look it is at (1-based; the last once finished), how many were analysed, and per declared
    comparison its outcome (``outcome``: significant, equivalent, futile, undecided, open) with the
    last analysed look's estimate and repeated interval — a difference, or for a norm measure a
    ratio (``scale``), as the reports print them — the equivalence interval its equivalence test
    read (``equivalence_low``/``_high``, same scale), its seeds, stage-wise p and how many runs of
    each side never learned (``never_learned``, by test accuracy; null without a chance level)."""
    looks = list(spec.sequential.looks)
    labels = {c.id: c.label for c in design.cells(spec)}
    found = comparison_rows(spec, st.decided, st.history) if st else {}
    rows = []
    for cell, measure in comparisons(spec):
        r = found.get((cell, measure), {})
        rows.append({"cell": labels.get(cell, cell), "cell_id": cell, "measure": measure,
                     "outcome": outcome(r) if r else "open", "look": r.get("look"), "seeds": r.get("seeds"),
                     "scale": "ratio" if measure.startswith("norm.") else "difference",
                     **{k: _on_scale(r.get(k), measure) for k in ("estimate", "rci_low", "rci_high")},
                     **{k: _on_scale(x, measure) for k, x in zip(("equivalence_low", "equivalence_high"),
                                                                  equivalence_interval(r) or (None, None), strict=True)},
                     "p": r.get("p") if isinstance(r.get("p"), float) and math.isfinite(r["p"]) else None,
                     "never_learned": r.get("never_learned")})
    return {"looks": looks, "look": (len(looks) if st.finished else st.look + 1) if st else 1,
            "analysed": len(st.history) if st else 0, "finished": bool(st and st.finished), "comparisons": rows}


def _on_scale(x: Any, measure: str) -> float | None:
    """A look's value as it is read: a norm measure's (analysed on the log scale) as its ratio; None
    when there is none."""
    if not isinstance(x, int | float) or not math.isfinite(x):
        return None
    return math.exp(x) if measure.startswith("norm.") else float(x)


def _fmt(x: Any, measure: str) -> str:
    shown = _on_scale(x, measure)
    if shown is None:
        return "—"
    return f"{shown:.3g}×" if measure.startswith("norm.") else f"{shown:+.3f}"


def estimate_words(r: Mapping[str, Any], labels: Mapping[str, str]) -> str:
    """A look's row as status and the run's look lines say it: 'cell on measure: estimate [low,
    high] (repeated CI)', a norm measure's as a ratio (it is analysed on the log scale)."""
    m = r["measure"]
    return (f"{labels.get(r['cell_id'], r['cell_id'])} on {m}: {_fmt(r['estimate'], m)} "
            f"[{_fmt(r['rci_low'], m)}, {_fmt(r['rci_high'], m)}] (repeated CI)")


def equivalence_interval(r: Mapping[str, Any], bound: str = "equivalence_bound") -> tuple[float, float] | None:
    """A look's row's equivalence interval, estimate ± its equivalence boundary × se (on the scale
    it was analysed on: a norm measure's log); with ``bound="futility_bound"`` the interval a futility
    stop read. None where the look had no spread or no such boundary."""
    est, se, b = (r.get(k) for k in ("estimate", "se", bound))
    if not all(isinstance(x, int | float) and math.isfinite(x) for x in (est, se, b)):
        return None
    return est - b * se, est + b * se


def equivalence_words(r: Mapping[str, Any], spec: Spec, value: Callable[[Any, str], str] | None = None) -> str:
    """What the equivalence or futility test saw, where the repeated CI alone would mislead: the
    repeated CI is taken at the efficacy boundary (α/m), equivalence is tested at its own (β, Pocock)
    and futility at its own, so an *equivalent* or *futile* comparison's repeated CI may reach past the
    margin, and one undecided at the last look may have its repeated CI inside it. ``; its 96%
    equivalence interval [−0.007, +0.009] lies within ±0.01`` for an equivalent row, ``; its interval
    at the futility boundary […] lies within ±0.01`` for a futility stop, ``… reaches past ±0.01`` for
    an undecided one whose repeated CI lies within the margin, else ``""``. Each interval is estimate ±
    its boundary × se: inside the margin exactly when its test passed. ``value`` formats a number of
    the measure (default the terminal's; a report passes its own)."""
    value = value or _fmt
    said = outcome(r)
    interval = equivalence_interval(r, "futility_bound" if said == "futile" else "equivalence_bound")
    if said not in ("equivalent", "futile", "undecided") or interval is None:
        return ""
    m = r["measure"]
    delta = math.log(spec.stats.min_ratio) if m.startswith("norm.") else spec.stats.min_effect
    inside = [isinstance(x, int | float) and abs(x) < delta for x in (r.get("rci_low"), r.get("rci_high"))]
    if said == "undecided" and not all(inside):
        return ""
    margin = f"×{spec.stats.min_ratio:g} either way" if m.startswith("norm.") else f"±{spec.stats.min_effect:g}"
    what = (f"its {100 * (1 - 2 * spec.sequential.equivalence_beta):.3g}% equivalence interval" if said != "futile"
            else "its interval at the futility boundary")
    where = "reaches past" if said == "undecided" else "lies within"
    return f"; {what} [{value(interval[0], m)}, {value(interval[1], m)}] {where} {margin}"


def untrained_words(r: Mapping[str, Any]) -> str:
    """``; its 4 of 6 and the reference's 5 of 6 runs never learned (test_accuracy ≤ chance 0.1 + 0.02)``
    when a look's row compares a cell or reference whose runs mostly never learned, else ``""``: its
    decision then says how untrained runs differ (the reports' page one says the same)."""
    never = r.get("never_learned")
    if not isinstance(never, Mapping):
        return ""
    said = [f"{whose} {k} of {n}" for side, whose in (("cell", "its"), ("reference", "the reference's"))
            for k, n in [never.get(side) or (0, 0)] if n and 2 * k > n]
    if not said:
        return ""
    return (f"; {' and '.join(said)} runs never learned (test_accuracy ≤ chance {never['chance']:.3g} + "
            f"{never['margin']:g})")


def lines(spec: Spec, st: State | None, seconds_per_item: float | None = None) -> list[str]:
    """What ``ablate plan`` and ``ablate status`` say of a sequential study: the design, the look
    it is at, what each look decided (which way, with its valid interval and p), what is open,
    which cells wait for seeds, and the most it may still cost."""
    seq = spec.sequential
    if seq is None:
        return []
    cmp = comparisons(spec)
    labels = {c.id: c.label for c in design.cells(spec)}
    ref = reference_cell(spec)
    started = st is not None  # no stored state: no look has begun (its seeds may all be reused, none run)
    st = st or State(planned={c: seq.looks[0] for c in labels})
    labels = {**(st.design or {}).get("labels", {}), **labels}  # the looks' cells, under their old ids too
    head = (f"sequential seeds: looks at {', '.join(map(str, seq.looks))} seeds per cell; {count(len(cmp), 'comparison')} with "
            f"{labels[ref]} on {', '.join(seq.measures)}; {seq.spending} α-spending, family α {seq.alpha:g} "
            f"(Bonferroni), equivalence within {spec.stats.min_effect:g} (norms: ×{spec.stats.min_ratio:g})")
    out = [head, "test: at each look the paired t test of each cell against the reference on their shared seeds "
           "(Welch's when they share fewer than two), against boundaries computed for that t statistic"]
    if seq.max < EQUIVALENCE_MIN_SEEDS:
        out.append(f"note: no comparison can end equivalent: equivalence is declared from {EQUIVALENCE_MIN_SEEDS} seeds "
                   f"on, and seeds.max is {seq.max}")
    out += [f"warning: {line}" for line in changed_design_lines(spec, st if started else None)]
    where = ("finished" if st.finished else f"look {st.look + 1} of {len(seq.looks)} ({seq.looks[st.look]} seeds) "
             # Not "running" when no worker is: after a stop it waits for the next `ablate run`; and a
             # first look whose seeds were all reused still waits for that run to analyse it.
             + ("under way" if started else "not analysed yet (`ablate run` analyses a look once its seeds are done)"))
    undecided = sum(outcome(r) == "undecided" for r in st.decided.values())  # ended at the last look, not decided
    out.append(f"state: {where}; {len(st.decided) - undecided} of {count(len(cmp), 'comparison')} decided"
               + (f", {undecided} undecided at the last look" if undecided else ""))
    for r in sorted(st.decided.values(), key=lambda r: (r.get("look") or 0, r["key"])):
        p = f", p {r['p']:.3g}" if isinstance(r.get("p"), float) and math.isfinite(r["p"]) else ""
        out.append(f"  {outcome_words(r)}: {estimate_words(r, labels)}{p}{equivalence_words(r, spec)}"
                   f"{untrained_words(r)}")
    # Where each open comparison stood at the last look: how far its |t| is from the boundary it must pass.
    for r in (r for r in (st.history[-1] if st.history else []) if r["key"] not in st.decided):
        t, bound = r.get("t"), r.get("bound")
        if isinstance(t, float) and isinstance(bound, float) and math.isfinite(t) and math.isfinite(bound):
            out.append(f"  open after look {len(st.history)} ({r['seeds']} seeds): {estimate_words(r, labels)}, "
                       f"|t| {abs(t):.3g} against the boundary {bound:.3g}")
    open_cells = sorted({c for c, m in cmp if _key(c, m) not in st.decided})
    if open_cells and not st.finished:
        out.append(f"open: {count(len(cmp) - len(st.decided), 'comparison')}, "
                   + ("cell " if len(open_cells) == 1 else "cells ")
                   + "; ".join(labels[c] for c in open_cells) + f" (and the reference {labels[ref]})")
        most = sum(seq.max - st.planned.get(c, seq.looks[0]) for c in {*open_cells, ref})
        cost = f", about {duration(most * seconds_per_item)} of one worker's time" if seconds_per_item else ""
        out.append(f"pending seeds: at most {most} more seed items to the last look{cost}" if most else
                   "pending seeds: none beyond this look's, the last")
    return out
