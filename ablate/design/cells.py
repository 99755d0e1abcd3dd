"""From a spec's factors to the work it implies: cells (resolved configs) and items.

Designs
    ``full`` (every combination), ``one_at_a_time`` (the baseline, and each level of each factor
    moved alone from it), ``cells`` (an explicit list). A factor with ``when:`` varies only in
    cells matching its condition and stays at the baseline elsewhere (combinations that then
    coincide are one cell). ``exclude`` drops matching cells; ``include`` keeps only matching ones.
Items
    One per (cell, phase, seed): ``cell/tune/<i>`` for the i-th tuning trial of a cell (seed
    ``tune.seeds[i mod k]``), ``cell/replicate/<seed>`` for each replicate seed.
"""

from __future__ import annotations

import copy
import difflib
import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ablate.design.factors import Factor, Level, parse_factors, setting_where
from ablate.design.identity import (
    canonical_json,
    cell_id,
    code_version,
    config_key,
    original_cell_id,
    spec_key,
)
from ablate.design.selectors import condition_problems, matches, selector_problems
from ablate.design.space import tune_protocol
from ablate.models.catalogue import MODEL_FACTORS, read_model, unread_by_levels, unread_settings
from ablate.plugins import PluginError, is_target
from ablate.spec import MAX_CELLS, Problems, Spec, SpecError, get_path, parse, set_path, wsd_warmup

MAX_INVALID_SHOWN = 5


@dataclass(frozen=True)
class Cell:
    id: str
    settings: dict[str, Any]  # factor name → level value (a named factor: its path → value mapping)
    config: dict[str, Any]  # resolved {task, model, train}
    labels: dict[str, str] = field(default_factory=dict)  # factor name → level label, every factor
    shown: tuple[str, ...] = ()  # the factors the cell label names
    parts: tuple[str, ...] = ()
    config_key: str = ""  # the id without the code version (identity.config_key): finds stale results
    code_version: str = ""  # the code part of the id as text (identity.code_version)
    original_id: str = ""  # the id at code version 1 without level versions (identity.original_cell_id)

    @property
    def label(self) -> str:
        return ", ".join(self.parts) if self.parts else "baseline"


@dataclass(frozen=True)
class Item:
    """One unit of work: a cell trained once on one seed in one phase."""

    cell: Cell
    seed: int
    phase: str = "replicate"  # "tune" or "replicate"
    index: int | None = None  # tune: the trial's index within its cell
    tune: dict[str, Any] | None = None  # the tuning protocol, when the spec tunes

    @property
    def key(self) -> str:
        return f"{self.cell.id}/{self.phase}/{self.index if self.phase == 'tune' else self.seed}"

    def extra_attrs(self) -> dict[str, Any]:
        """What a worker needs beyond the cell config: the protocol, and for tune, the index."""
        if not self.tune:
            return {}
        if self.phase == "tune":
            return {"index": self.index, "tune": self.tune}
        return {"after_tune": True, "tune": self.tune}


def _candidates(spec: Spec, fs: list[Factor], problems: Problems) -> list[tuple[dict[str, Level], str]]:
    """(factor → chosen level, where) per candidate cell, before conditions and constraints."""
    if spec.design == "full":
        total = math.prod(len(f.levels) for f in fs)
        if total > MAX_CELLS:
            sizes = " × ".join(str(len(f.levels)) for f in fs)
            problems.append(("factors", f"the full factorial has {total:,} cells ({sizes}); at most {MAX_CELLS:,}. "
                                        "Split the study, or use design: one_at_a_time or cells"))
            return []
        return [({f.name: lvl for f, lvl in zip(fs, combo, strict=True)}, "factors")
                for combo in itertools.product(*(f.levels for f in fs))]
    if spec.design == "one_at_a_time":
        return [({}, "factors")] + [({f.name: lvl}, f.where) for f in fs for lvl in f.levels]
    out = []
    by_name = {f.name: f for f in fs}
    if len(spec.cells) > MAX_CELLS:
        problems.append(("cells", f"{len(spec.cells):,} cells listed; at most {MAX_CELLS:,}"))
        return []
    for i, entry in enumerate(spec.cells):
        choice: dict[str, Level] = {}
        for key, wanted in entry.items():
            at = f"cells[{i}].{key}"
            if key not in by_name:
                close = difflib.get_close_matches(key, list(by_name), n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                problems.append((at, f"{key!r} is not a factor{hint} (factors: {', '.join(by_name) or 'none'})"))
                continue
            f = by_name[key]
            lvl = next((lv for lv in f.levels if isinstance(wanted, str) and lv.label == wanted), None)
            lvl = lvl or next((lv for lv in f.levels if canonical_json(lv.value) == canonical_json(wanted)), None)
            if lvl is None:
                problems.append((at, f"{wanted!r} is not a level of {key}; levels: "
                                     f"{', '.join(lv.label for lv in f.levels)}"))
                continue
            choice[key] = lvl
        out.append((choice, f"cells[{i}]"))
    return out


@dataclass
class _Built:
    config: dict[str, Any]
    labels: dict[str, str]
    settings: dict[str, Any]
    active: set[str]


def _build(choice: dict[str, Level], fs: list[Factor], base: dict[str, Any],
           by_name: dict[str, Factor]) -> _Built:
    config = copy.deepcopy(base)
    labels: dict[str, str] = {}
    active: set[str] = set()
    for f in [f for f in fs if not f.when] + [f for f in fs if f.when]:
        lvl = choice.get(f.name)
        if f.when is not None:
            if not matches(f.when, config, labels, by_name, base):
                labels[f.name] = f.baseline_label
                continue
            active.add(f.name)
        if lvl is None:
            labels[f.name] = f.baseline_label
            continue
        for path, value in lvl.settings.items():
            set_path(config, path, copy.deepcopy(value))
        labels[f.name] = lvl.label
    settings = {}
    for f in fs:
        lvl = f.level(labels[f.name])
        if lvl is not None:
            settings[f.name] = lvl.value
        else:
            settings[f.name] = {p: get_path(base, p) for p in f.paths} if f.named else get_path(base, f.name)
    return _Built(config, {f.name: labels[f.name] for f in fs}, settings, active)


def _compute_cells(spec: Spec) -> tuple[list[Cell], Problems]:
    fs, problems = parse_factors(spec)
    base = spec.baseline(declared=True)
    problems += condition_problems(fs, base)
    if problems:
        return [], problems
    by_name = {f.name: f for f in fs}
    for key in ("exclude", "include"):
        for i, entry in enumerate(getattr(spec, key)):
            problems += selector_problems(entry, f"{key}[{i}]", by_name, base)
    for i, ref in enumerate(spec.references):  # a typo here would only show as "no matching cell"
        problems += selector_problems(ref.cell, f"references[{i}].cell", by_name, base)
    tune = tune_protocol(spec) if spec.tune is not None else None
    candidates = _candidates(spec, fs, problems)
    if problems:
        return [], problems
    out: list[Cell] = []
    seen: set[str] = set()
    ever_active: set[str] = set()
    invalid: list[tuple[str, str, str]] = []
    dropped = 0
    base_problems = _baseline_problems(spec, base)
    keep_invalid_baseline = False
    trains: dict[str, Cell] = {}  # what a cell's family reads of its config → the first cell with it
    twins: Problems = []  # cells that train an earlier cell's model
    for choice, where in candidates:
        built = _build(choice, fs, base, by_name)
        ever_active |= built.active
        if spec.design == "cells":
            for name in choice:
                if by_name[name].when is not None and name not in built.active:
                    problems.append((f"{where}.{name}", f"does not apply to this cell: its condition (when: "
                                                        f"{by_name[name].when}) does not hold"))
        try:
            resolved = parse({"name": spec.name, **built.config}).baseline(declared=True)
            if not spec.tunes_warmup:  # a tuned warm-up or budget must not meet a warm-up fixed before it
                resolved["train"] = wsd_warmup(resolved["train"])
            error = None
        except SpecError as exc:
            resolved, error = built.config, exc.problems[0]
        if any(matches(e, resolved, built.labels, by_name, base) for e in spec.exclude) or (
            spec.include and not any(matches(e, resolved, built.labels, by_name, base) for e in spec.include)
        ):
            dropped += 1
            continue
        if spec.design == "full":
            shown = [f.name for f in fs if not f.when or f.name in built.active]
        else:
            shown = [name for name in choice if name in built.active or by_name[name].when is None]
        parts = tuple(by_name[n].part(built.labels[n]) for n in shown)
        if error is not None:
            if error in base_problems:  # the baseline's own combination, kept by this cell
                keep_invalid_baseline = True
                continue
            invalid.append((where, ", ".join(parts) or "baseline", f"{error[0]}: {error[1]}" if error[0] else error[1]))
            continue
        try:
            cid = cell_id(resolved, tune)  # a plug-in's source enters it: one that cannot be found says so here
        except PluginError as exc:
            path = _plugin_path(resolved, str(exc))
            problems.append(((setting_where(fs, built.labels, path) or path) if path else where, str(exc)))
            continue
        if cid in seen:  # two choices that resolve to the same model: one cell
            continue
        seen.add(cid)
        cell = Cell(cid, built.settings, resolved, built.labels, tuple(shown), parts, config_key(resolved, tune),
                    code_version(resolved), original_cell_id(resolved, tune))
        same = trains.setdefault(canonical_json([{**resolved, "model": read_model(resolved["model"])}, tune]), cell)
        if same is not cell:
            twins.append((where, _twin_problem(cell, same)))
        out.append(cell)
    if keep_invalid_baseline:  # fix the baseline first: other cells' errors likely follow from it
        return [], list(base_problems)
    for where, label, error in invalid[:MAX_INVALID_SHOWN]:
        problems.append((where, f"the cell ({label}) is invalid: {error}. Exclude it (exclude:) or vary the "
                                "factor only where it applies (when:)"))
    if len(invalid) > MAX_INVALID_SHOWN:
        problems.append(("factors", f"… and {len(invalid) - MAX_INVALID_SHOWN} more invalid cells"))
    problems += twins[:MAX_INVALID_SHOWN]
    if len(twins) > MAX_INVALID_SHOWN:
        problems.append(("factors", f"… and {len(twins) - MAX_INVALID_SHOWN} more cells that train another's model"))
    if spec.design != "cells":
        for f in fs:
            if f.when is not None and f.name not in ever_active:
                problems.append((f"{f.where}.when", f"never holds in this design ({spec.design}), so {f.name} "
                                                    "would never vary"))
    if not out and not problems:
        key = "include" if spec.include else "exclude"
        problems.append((key, f"no cell is left: exclude/include remove all {dropped} candidate cells"))
    return out, problems


def _plugin_path(config: dict[str, Any], message: str) -> str | None:
    """The model setting naming the plug-in a ``PluginError`` is about (its message quotes it)."""
    for path in MODEL_FACTORS:
        try:
            value = get_path(config, path)
        except KeyError:
            continue
        if is_target(value) and repr(value) in message:
            return path
    return None


def level_twins(grid: list[Cell]) -> Problems:
    """Cells that train an earlier cell's model because their levels do not read a setting the
    factors vary (``catalogue.unread_by_levels``: an LRU's heads under γ only group its modes, for
    the probes). Checked on a spec read from a file; a study stored before is read as it ran."""
    first: dict[str, Cell] = {}
    problems: Problems = []
    for cell in grid:
        model = cell.config["model"]
        unread = unread_by_levels(model)
        if not unread:
            continue
        key = canonical_json({**cell.config, "model": {k: v for k, v in read_model(model).items() if k not in unread}})
        same = first.setdefault(key, cell)
        if same is not cell:
            differ = [f"model.{k}" for k in unread if model.get(k) != same.config["model"].get(k)]
            problems.append(("factors", f"the cell ({cell.label}) trains the same model as ({same.label}): "
                                        f"{model['parameterisation']} with normalisation {model['normalisation']} does "
                                        f"not read {', '.join(differ)} (its heads only group modes for the norm probes), "
                                        f"so its seeds would replicate the other cell's. Vary it only where it "
                                        f"applies (when:) or exclude all but one of these cells"))
    return problems[:MAX_INVALID_SHOWN] + ([("factors", f"… and {len(problems) - MAX_INVALID_SHOWN} more cells that "
                                                        "train another's model")]
                                           if len(problems) > MAX_INVALID_SHOWN else [])


def _twin_problem(cell: Cell, same: Cell) -> str:
    """Why ``cell`` is ``same`` again: settings that differ where its family does not read them."""
    model, family = cell.config["model"], cell.config["model"]["family"]
    differ = [f"model.{k}" for k in unread_settings(family) if model.get(k) != same.config["model"].get(k)]
    return (f"the cell ({cell.label}) trains the same model as ({same.label}): family {family} does not read "
            f"{', '.join(differ)}. Vary it only where it applies (when: {{model.family: linear_rnn}}) or exclude one")


def _baseline_problems(spec: Spec, base: dict[str, Any]) -> Problems:
    """What is wrong with the baseline as a configuration of its own (its combinations included),
    as ``ablate.spec.parse`` words it; empty when it is valid."""
    try:
        parse({"name": spec.name, **base})
    except SpecError as exc:
        return list(exc.problems)
    return []


_CELL_CACHE: dict[str, tuple[list[Cell], Problems]] = {}


def cells_and_problems(spec: Spec) -> tuple[list[Cell], Problems]:
    """The spec's cells, or the problems that keep it from having them (cached per spec)."""
    key = spec_key(spec)
    if key not in _CELL_CACHE:
        if len(_CELL_CACHE) > 16:
            _CELL_CACHE.clear()
        _CELL_CACHE[key] = _compute_cells(spec)
    return _CELL_CACHE[key]


def cells(spec: Spec) -> list[Cell]:
    """The spec's cells, in design order (the first of any that coincide). SpecError if invalid."""
    out, problems = cells_and_problems(spec)
    if problems:
        raise SpecError(problems)
    return list(out)


def items(spec: Spec, planned: Mapping[str, int] | None = None) -> list[Item]:
    """Tuning items of every cell first (when the spec tunes), then the replicates. A sequential
    spec (``seeds: {min, max, …}``) replicates each cell on its first ``planned[cell id]`` seeds —
    what its looks have asked for so far (``ablate.runner.sequential_looks``) — and on ``min`` where
    nothing was planned yet."""
    grid = cells(spec)
    tune = tune_protocol(spec)
    out: list[Item] = []
    if spec.tune is not None:
        tune = {**(tune or {}), "startup_trials": spec.tune.resolved_startup_trials}
        seeds = spec.tune.seed_list
        out += [Item(c, seeds[i % len(seeds)], "tune", i, tune) for c in grid for i in range(spec.tune.trials)]
    seeds = spec.seed_list
    first = spec.sequential.min if spec.sequential is not None else len(seeds)
    out += [Item(c, seed, "replicate", None, tune) for c in grid
            for seed in seeds[: (planned or {}).get(c.id, first) if spec.sequential is not None else len(seeds)]]
    return out


def select(spec: Spec, selector: dict[str, Any]) -> list[Cell]:
    """The cells of ``spec`` that ``selector`` matches (``ablate.design.selectors``), in design order."""
    fs, _ = parse_factors(spec)
    by_name = {f.name: f for f in fs}
    base = spec.baseline()
    return [c for c in cells(spec) if matches(selector, c.config, c.labels, by_name, base)]


def selection_problems(spec: Spec, selector: Any, where: str = "cells") -> Problems:
    """What is wrong with ``selector`` as a selection of ``spec``'s cells (unknown factors, paths,
    levels), checked like ``exclude``/``include`` entries."""
    fs, problems = parse_factors(spec)
    if problems:
        return problems
    return selector_problems(selector, where, {f.name: f for f in fs}, spec.baseline())


def report_problems(spec: Spec, grid: list[Cell]) -> Problems:
    """What is wrong with the options of the spec's ``reports:`` entries, given its cells: sections
    the report lacks, selectors naming unknown factors or levels or matching no cell, ``order``
    naming no factor, a ``reference`` that is no cell's label or id (each with the valid choices)."""
    from ablate.spec.errors import not_one_of
    from ablate.spec.reports import ReportOptions

    problems: Problems = []
    factors = [f.name for f in parse_factors(spec)[0]]
    for i, entry in enumerate(spec.reports):
        if not isinstance(entry, ReportOptions):
            continue
        where = f"reports[{i}]"
        problems += entry.section_problems(where)
        for k, sel in enumerate(entry.selectors):
            at = f"{where}.cells" + (f"[{k}]" if isinstance(entry.cells, list) else "")
            found = selection_problems(spec, sel, at)
            if not found and not select(spec, sel):
                found = [(at, "matches no cell of the design")]
            problems += found
        problems += [(f"{where}.order[{k}]", not_one_of(f, factors) if factors else "the spec varies no factor")
                     for k, f in enumerate(entry.order) if f not in factors]
        shown = ([c for c in grid if any(c in select(spec, sel) for sel in entry.selectors)]
                 if entry.selectors else grid)
        if entry.reference is not None and not any(entry.reference in (c.id, c.label) for c in shown):
            problems.append((f"{where}.reference", not_one_of(entry.reference, [c.label for c in shown])))
        elif entry.reference is None and entry.selectors and shown and not any(c.config == spec.baseline()
                                                                             for c in shown):
            problems.append((f"{where}.reference", "the selected cells leave out the baseline, which the report "
                                                   "compares with by default: name one of them as the reference "
                                                   f"({', '.join(c.label for c in shown[:6])}"
                                                   f"{' …' if len(shown) > 6 else ''})"))
    return problems


def comparison_problems(specs: Mapping[str, Spec],
                        selectors: Mapping[str, list[dict[str, Any]]] | list[dict[str, Any]]) -> list[str]:
    """What is wrong with the cells a comparison selects of the studies ``specs`` (name → spec):
    ``selectors`` per study, or one list for all. One line per problem of the first selector
    that fails, none when every selector is valid for and matches a cell of some study it is
    given to (a selector may name a factor only some of the studies have)."""
    per = selectors if isinstance(selectors, Mapping) else {s: selectors for s in specs}
    for study in per:
        if study not in specs:
            return [f"compare: cells for {study!r}, which is not among the studies"]
    for sel in {canonical_json(x): x for sels in per.values() for x in sels}.values():
        used = [s for s, sels in per.items() if sel in sels]
        problems = [(s, selection_problems(specs[s], sel)) for s in used]
        if all(found for _, found in problems):
            return [f"--cells (study {s}): {path}: {msg}" for s, found in problems for path, msg in found]
        if not any(select(specs[s], sel) for s in used):
            return [f"--cells {canonical_json(sel)} matches no cell of {', '.join(used)}"]
    return []
