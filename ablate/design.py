"""From a validated spec to the work it implies: factors → cells (resolved configs) → items.

Factors
    A factor named by a dotted path (``model.heads``) moves that path of the baseline; a factor
    with a plain name (``variant``) is a *named* factor whose levels each set several paths
    (``{model.parameterisation: rotation, model.normalisation: xi}``). Levels carry labels —
    given (``{label:, value:}`` or a mapping label → level) or derived from the value — and the
    labels are what cell labels, plans and result frames show.
Designs
    ``full`` (every combination), ``one_at_a_time`` (the baseline, and each level of each factor
    moved alone from it), ``cells`` (an explicit list). A factor with ``when:`` varies only in
    cells matching its condition and stays at the baseline elsewhere (combinations that then
    coincide are one cell). ``exclude`` drops matching cells; ``include`` keeps only matching ones.
Identity
    A cell's id hashes its resolved configuration (defaults filled), the task's data version
    (generator version and parameters) and ``CODE_VERSION`` — plus the tuning protocol (search
    space, sampler, objective, tuning seeds; not the trial budget) when the spec tunes. It does
    not depend on key order, YAML formatting, labels, the design or the study that asked for it:
    re-running a spec resumes, extending a grid or seeds reuses finished trials, and changing a
    fixed setting makes new cells.
Items
    One per (cell, phase, seed): ``cell/tune/<i>`` for the i-th tuning trial of a cell (seed
    ``tune.seeds[i mod k]``), ``cell/replicate/<seed>`` for each replicate seed.
"""

from __future__ import annotations

import copy
import difflib
import hashlib
import itertools
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from ablate.spec import (
    MAX_CELLS,
    MAX_ITEMS,
    FactorSpec,
    Spec,
    SpecError,
    _problems,
    _validate_config,
    get_path,
    set_path,
)

# Bump when a change to models or training makes old results incomparable (task generators
# carry their own version, which enters the id through the data version).
CODE_VERSION = "1"
ROOTS = ("task", "model", "train")
MAX_INVALID_SHOWN = 5

Problems = list[tuple[str, str]]


def canonical_json(data: Any) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str)


def config_hash(config: dict[str, Any], n: int = 12) -> str:
    """Hash of a resolved config and the code version (no data version: see ``cell_id``)."""
    blob = canonical_json({"config": config, "code": CODE_VERSION})
    return hashlib.sha256(blob.encode()).hexdigest()[:n]


@lru_cache(maxsize=256)
def _data_version(task_json: str) -> str:
    from ablate.tasks.cache import data_version as version_of
    from ablate.tasks.registry import task_entry

    task = json.loads(task_json)
    entry = task_entry(task["name"])
    params = entry.params.model_validate({k: v for k, v in task.items() if k != "name"}).model_dump(mode="json")
    return version_of(task["name"], params, entry.version)


def data_version(task: dict[str, Any]) -> str:
    """The task's data version: a hash of its name, parameters and generator version."""
    return _data_version(canonical_json(task))


def cell_id(config: dict[str, Any], tune: dict[str, Any] | None = None, n: int = 12) -> str:
    """hash(resolved config + task data version + code version [+ tuning protocol])."""
    key: dict[str, Any] = {"config": config, "data": data_version(config["task"]), "code": CODE_VERSION}
    if tune:
        key["tune"] = tune
    return hashlib.sha256(canonical_json(key).encode()).hexdigest()[:n]


def level_label(value: Any) -> str:
    """A short readable label for a factor level (mappings become key=value lists)."""
    if isinstance(value, dict):
        return ",".join(f"{str(k).split('.')[-1]}={level_label(v)}" for k, v in value.items())
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


# --- factors ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Level:
    label: str
    settings: dict[str, Any]  # dotted path → value
    value: Any  # as written: the path's value, or a named factor's mapping
    labelled: bool  # the label was given
    where: str  # key path of the value in the spec


@dataclass(frozen=True)
class Factor:
    name: str
    levels: tuple[Level, ...]
    when: dict[str, Any] | None = None
    baseline_label: str = "baseline"

    @property
    def named(self) -> bool:
        """A named factor (plain name) sets several paths; a path factor its own name."""
        return "." not in self.name

    @property
    def where(self) -> str:
        return f"factors.{self.name}"

    @property
    def paths(self) -> list[str]:
        return list(dict.fromkeys(p for lvl in self.levels for p in lvl.settings))

    def level(self, label: str) -> Level | None:
        return next((lvl for lvl in self.levels if lvl.label == label), None)

    def part(self, label: str) -> str:
        """How a cell label shows this factor at ``label``."""
        lvl = self.level(label)
        if lvl is not None and (lvl.labelled or self.named):
            return label
        return f"{self.name.split('.')[-1]}={label}"


def _leaf_paths(data: Any, prefix: str = "") -> Iterator[str]:
    if isinstance(data, dict):
        for k, v in data.items():
            sub = f"{prefix}.{k}" if prefix else str(k)
            yield sub
            yield from _leaf_paths(v, sub)


def _path_problem(base: dict[str, Any], path: str) -> str | None:
    """Why ``path`` is not a settable dotted path of the baseline, or None."""
    if path.split(".")[0] not in ROOTS:
        return f"a path starts with {', '.join(r + '.' for r in ROOTS)}; {path!r} does not"
    try:
        get_path(base, path)
    except KeyError as exc:
        close = difflib.get_close_matches(path, list(_leaf_paths(base)), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        return f"{exc.args[0]!r} is not a key of the baseline{hint}"
    return None


def _overlap(a: str, b: str) -> bool:
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


def _parse_levels(name: str, raw: Any, problems: Problems) -> tuple[list[tuple[Any, str | None, str]], Any]:
    """[(value, label or None, where)], when — from any of the factor forms."""
    where = f"factors.{name}"
    when = None
    if isinstance(raw, dict) and ("levels" in raw or "when" in raw):
        from pydantic import ValidationError

        try:
            long = FactorSpec.model_validate(raw)
        except ValidationError as exc:
            problems.extend((f"{where}.{p}" if p else where, m) for p, m in _problems(exc, FactorSpec))
            return [], None
        when, raw, where = long.when, long.levels, f"{where}.levels"
    if isinstance(raw, list):
        out: list[tuple[Any, str | None, str]] = []
        for i, item in enumerate(raw):
            if isinstance(item, dict) and set(item) == {"label", "value"}:
                if not isinstance(item["label"], str) or not item["label"].strip():
                    problems.append((f"{where}[{i}].label", "a label is non-empty text"))
                    continue
                out.append((item["value"], item["label"], f"{where}[{i}].value"))
            elif isinstance(item, dict) and "label" in item and len(item) <= 2:
                problems.append((f"{where}[{i}]", "a labelled level is {label: ..., value: ...}"))
            else:
                out.append((item, None, f"{where}[{i}]"))
        return out, when
    if isinstance(raw, dict):
        for label in raw:  # a misspelt long form would otherwise read as a level labelled "levls"
            close = difflib.get_close_matches(str(label), ["levels", "when"], n=1, cutoff=0.7)
            if close and label not in ("levels", "when") and where == f"factors.{name}":
                problems.append((f"{where}.{label}", f"unknown key; did you mean {close[0]!r}? (a factor "
                                                     "mapping is label → level, or {levels: ..., when: ...})"))
                return [], None
        return [(value, label, f"{where}.{label}") for label, value in raw.items()], when
    problems.append((where, "a factor is a list of levels, a mapping label → level, or "
                            "{levels: ..., when: ...}"))
    return [], None


def _auto_labels(values: list[Any]) -> list[str]:
    labels = [level_label(v) for v in values]
    for i, lbl in enumerate(labels):
        if labels.count(lbl) > 1:  # e.g. 1e-3 vs 1.0000001e-3: fall back to the exact value
            labels[i] = canonical_json(values[i]) if not isinstance(values[i], float) else repr(values[i])
    return labels


def parse_factors(spec: Spec) -> list[Factor]:
    """The spec's factors in declaration order, normalised; SpecError naming every problem."""
    return list(_parse_factors_cached(_key(spec), spec))


def _key(spec: Spec) -> str:
    return canonical_json([spec.model_dump(mode="json"), list(spec.factors)])


_FACTOR_CACHE: dict[str, tuple[Factor, ...]] = {}


def _parse_factors_cached(key: str, spec: Spec) -> tuple[Factor, ...]:
    if key in _FACTOR_CACHE:
        return _FACTOR_CACHE[key]
    problems: Problems = []
    base = spec.baseline()
    base_json = canonical_json(base)
    out: list[Factor] = []
    owner: dict[str, str] = {}  # path → factor setting it
    for name, raw in spec.factors.items():
        where = f"factors.{name}"
        parsed, when = _parse_levels(name, raw, problems)
        if not parsed:
            if not any(p.startswith(where) for p, _ in problems):
                problems.append((where, "needs at least one level"))
            continue
        named = "." not in name
        settings_list: list[dict[str, Any]] = []
        bad = False
        for value, _, lwhere in parsed:
            if not named:
                settings_list.append({name: value})
                continue
            if not isinstance(value, dict) or not value:
                close = [p for p in _leaf_paths(base) if p.split(".")[-1] == name]
                hint = f"; did you mean the path factor {close[0]!r}?" if close else ""
                problems.append((lwhere, f"{name!r} has no dot, so it is a named factor: each level is a "
                                         f"mapping of dotted paths to values{hint}"))
                bad = True
                continue
            settings_list.append(dict(value))
        if bad:
            continue
        paths = list(dict.fromkeys(p for s in settings_list for p in s))
        for path in paths:
            problem = _path_problem(base, path)
            if problem:
                problems.append((where, f"{path}: {problem}" if named else problem))
                bad = True
            elif path in owner or any(_overlap(path, q) for q in owner):
                other = owner.get(path) or next(owner[q] for q in owner if _overlap(path, q))
                problems.append((where, f"sets {path}, which factor {other!r} also sets; a path belongs to one factor"))
                bad = True
        for s, (_, _, lwhere) in zip(settings_list, parsed, strict=True):
            inner = [(a, b) for a, b in itertools.combinations(s, 2) if _overlap(a, b)]
            if inner:
                problems.append((lwhere, f"sets both {inner[0][0]} and {inner[0][1]}"))
                bad = True
        if bad:
            continue
        for path in paths:
            owner[path] = name
        given = [lbl for _, lbl, _ in parsed]
        auto = _auto_labels([v for v, _, _ in parsed])
        labels = [g if g is not None else a for g, a in zip(given, auto, strict=True)]
        dup = sorted({lbl for lbl in labels if labels.count(lbl) > 1})
        if dup:
            problems.append((where, f"level {dup[0]!r} appears twice; each level (and label) once"))
            continue
        levels = []
        baseline_label = None
        for (value, lbl, lwhere), label, settings in zip(parsed, labels, settings_list, strict=True):
            level = Level(label, settings, value, lbl is not None, lwhere)
            levels.append(level)
            alone = copy.deepcopy(base)
            for path, v in settings.items():
                set_path(alone, path, copy.deepcopy(v))
            try:
                resolved = _validate_config({"name": spec.name, **alone}).baseline()
            except SpecError as exc:
                for err_path, msg in exc.problems:  # only errors of the level's own paths: others
                    for path in settings:  # may depend on the cell and are checked per cell
                        if err_path == path or err_path.startswith((path + ".", path + "[")):
                            at = lwhere if not named else f"{lwhere}.{path}"
                            problems.append((at, msg if err_path == path else f"{err_path}: {msg}"))
                            break
                continue
            if baseline_label is None and canonical_json(resolved) == base_json:
                baseline_label = label
        if baseline_label is None:
            baseline_label = "baseline" if named else level_label(get_path(base, name))
        out.append(Factor(name, tuple(levels), when, baseline_label))
    by_name = {f.name: f for f in out}
    for i, f in enumerate(out):
        if f.when is not None:
            if not f.when:
                problems.append((f"{f.where}.when", "an empty condition; drop when: or give factor/path: value"))
            earlier = {g.name for g in out[:i]} | {g.name for g in out if not g.when}
            problems += _check_match(f.when, f"{f.where}.when", by_name, base, earlier - {f.name},
                                     f"factors declared before {f.name!r} (or unconditional ones)")
    if problems:
        raise SpecError(problems)
    result = tuple(out)
    if len(_FACTOR_CACHE) > 64:
        _FACTOR_CACHE.clear()
    _FACTOR_CACHE[key] = result
    return result


# --- matching: when, exclude, include ----------------------------------------------------------


def _same(actual: Any, wanted: Any) -> bool:
    """``wanted`` matches ``actual``: a list means any of; a mapping matches the keys it names."""
    if isinstance(wanted, list):
        return any(_same(actual, w) for w in wanted)
    if isinstance(wanted, dict):
        return isinstance(actual, dict) and all(k in actual and _same(actual[k], v) for k, v in wanted.items())
    if isinstance(wanted, bool) or isinstance(actual, bool):
        return type(wanted) is type(actual) and wanted == actual
    if isinstance(wanted, int | float) and isinstance(actual, int | float):
        return wanted == actual
    return type(wanted) is type(actual) and wanted == actual


def _level_matches(f: Factor, label: str, wanted: Any, base: dict[str, Any]) -> bool:
    if isinstance(wanted, list):
        return any(_level_matches(f, label, w, base) for w in wanted)
    if isinstance(wanted, str) and wanted == label:
        return True
    lvl = f.level(label)
    if lvl is not None:
        return _same(lvl.value, wanted)
    return not f.named and _same(get_path(base, f.name), wanted)


def _holds(entry: dict[str, Any], config: dict[str, Any], labels: dict[str, str],
           factors: dict[str, Factor], base: dict[str, Any]) -> bool:
    for key, wanted in entry.items():
        if key in factors and key in labels:
            if not _level_matches(factors[key], labels[key], wanted, base):
                return False
            continue
        try:
            actual = get_path(config, key)
        except KeyError:
            return False
        if not _same(actual, wanted):
            return False
    return True


def _check_match(entry: Any, where: str, factors: dict[str, Factor], base: dict[str, Any],
                 allowed: set[str] | None = None, allowed_text: str = "") -> Problems:
    """Keys are factor names (values: their labels or values) or dotted paths of the baseline."""
    if not isinstance(entry, dict):
        return [(where, "must be a mapping of factor or dotted path → value (or list of values)")]
    problems: Problems = []
    for key, wanted in entry.items():
        at = f"{where}.{key}"
        if key in factors:
            if allowed is not None and key not in allowed:
                problems.append((at, f"a condition may refer to {allowed_text}"))
                continue
            f = factors[key]
            for w in wanted if isinstance(wanted, list) else [wanted]:
                if not any(_level_matches(f, lvl.label, w, base) for lvl in f.levels) and not (
                    isinstance(w, str) and w == f.baseline_label
                ):
                    names = ", ".join(lvl.label for lvl in f.levels)
                    problems.append((at, f"{w!r} is not a level of {key}; levels: {names}"))
            continue
        if "." not in key:
            close = difflib.get_close_matches(key, list(factors), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            problems.append((at, f"{key!r} is neither a factor nor a dotted path{hint} "
                                 f"(factors: {', '.join(factors) or 'none'})"))
            continue
        problem = _path_problem(base, key)
        if problem:
            problems.append((at, problem))
    return problems


# --- cells ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    id: str
    settings: dict[str, Any]  # factor name → level value (a named factor: its path → value mapping)
    config: dict[str, Any]  # resolved {task, model, train}
    labels: dict[str, str] = field(default_factory=dict)  # factor name → level label, every factor
    shown: tuple[str, ...] = ()  # the factors the cell label names
    parts: tuple[str, ...] = ()

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


def tune_protocol(spec: Spec) -> dict[str, Any] | None:
    """The tuning protocol as plain data: enters the cell id (without ``startup_trials``)."""
    if spec.tune is None:
        return None
    from ablate.tuning import resolve_space

    return {
        "space": resolve_space(spec),
        "sampler": spec.tune.sampler,
        "seeds": spec.tune.seed_list,
        "objective": {"metric": spec.tune.objective.metric, "direction": spec.tune.objective.resolved_direction},
    }


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
            if not _holds(f.when, config, labels, by_name, base):
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
    problems: Problems = []
    try:
        fs = parse_factors(spec)
    except SpecError as exc:
        return [], list(exc.problems)
    base = spec.baseline()
    by_name = {f.name: f for f in fs}
    for key in ("exclude", "include"):
        for i, entry in enumerate(getattr(spec, key)):
            problems += _check_match(entry, f"{key}[{i}]", by_name, base)
    for i, ref in enumerate(spec.references):  # a typo here would only show as "no matching cell"
        problems += _check_match(ref.cell, f"references[{i}].cell", by_name, base)
    tune = tune_protocol(spec) if spec.tune is not None else None
    candidates = _candidates(spec, fs, problems)
    if problems:
        return [], problems
    out: list[Cell] = []
    seen: set[str] = set()
    ever_active: set[str] = set()
    invalid: list[tuple[str, str, str]] = []
    dropped = 0
    for choice, where in candidates:
        built = _build(choice, fs, base, by_name)
        ever_active |= built.active
        if spec.design == "cells":
            for name in choice:
                if by_name[name].when is not None and name not in built.active:
                    problems.append((f"{where}.{name}", f"does not apply to this cell: its condition (when: "
                                                        f"{by_name[name].when}) does not hold"))
        try:
            resolved = _validate_config({"name": spec.name, **built.config}).baseline()
            error = None
        except SpecError as exc:
            resolved, error = built.config, exc.problems[0]
        if any(_holds(e, resolved, built.labels, by_name, base) for e in spec.exclude) or (
            spec.include and not any(_holds(e, resolved, built.labels, by_name, base) for e in spec.include)
        ):
            dropped += 1
            continue
        if spec.design == "full":
            shown = [f.name for f in fs if not f.when or f.name in built.active]
        else:
            shown = [name for name in choice if name in built.active or by_name[name].when is None]
        parts = tuple(by_name[n].part(built.labels[n]) for n in shown)
        if error is not None:
            invalid.append((where, ", ".join(parts) or "baseline", f"{error[0]}: {error[1]}" if error[0] else error[1]))
            continue
        cid = cell_id(resolved, tune)
        if cid in seen:  # two choices that resolve to the same model: one cell
            continue
        seen.add(cid)
        out.append(Cell(cid, built.settings, resolved, built.labels, tuple(shown), parts))
    for where, label, error in invalid[:MAX_INVALID_SHOWN]:
        problems.append((where, f"the cell ({label}) is invalid: {error}. Exclude it (exclude:) or vary the "
                                "factor only where it applies (when:)"))
    if len(invalid) > MAX_INVALID_SHOWN:
        problems.append(("factors", f"… and {len(invalid) - MAX_INVALID_SHOWN} more invalid cells"))
    if spec.design != "cells":
        for f in fs:
            if f.when is not None and f.name not in ever_active:
                problems.append((f"{f.where}.when", f"never holds in this design ({spec.design}), so {f.name} "
                                                    "would never vary"))
    if not out and not problems:
        key = "include" if spec.include else "exclude"
        problems.append((key, f"no cell is left: exclude/include remove all {dropped} candidate cells"))
    return out, problems


_CELL_CACHE: dict[str, tuple[list[Cell], Problems]] = {}


def _cells_checked(spec: Spec) -> tuple[list[Cell], Problems]:
    key = _key(spec)
    if key not in _CELL_CACHE:
        if len(_CELL_CACHE) > 16:
            _CELL_CACHE.clear()
        _CELL_CACHE[key] = _compute_cells(spec)
    return _CELL_CACHE[key]


def cells(spec: Spec) -> list[Cell]:
    """The spec's cells, in design order (the first of any that coincide). SpecError if invalid."""
    out, problems = _cells_checked(spec)
    if problems:
        raise SpecError(problems)
    return list(out)


def items(spec: Spec) -> list[Item]:
    """Tuning items of every cell first (when the spec tunes), then the replicates."""
    grid = cells(spec)
    tune = tune_protocol(spec)
    out: list[Item] = []
    if spec.tune is not None:
        tune = {**(tune or {}), "startup_trials": spec.tune.resolved_startup_trials}
        seeds = spec.tune.seed_list
        out += [Item(c, seeds[i % len(seeds)], "tune", i, tune) for c in grid for i in range(spec.tune.trials)]
    out += [Item(c, seed, "replicate", None, tune) for c in grid for seed in spec.seed_list]
    return out


def check(spec: Spec) -> None:
    """Everything the spec implies is valid: factors, conditions, constraints, every cell, the
    search space, the seeds, and the study's size. Raises SpecError naming key paths."""
    problems: Problems = []
    if spec.design == "cells" and not spec.cells:
        problems.append(("cells", "design: cells needs a non-empty `cells:` list"))
    if spec.cells and spec.design != "cells":
        problems.append(("cells", f"lists cells for design: cells, but design is {spec.design}"))
    if spec.tune is not None:
        both = sorted(set(spec.tune.seed_list) & set(spec.seed_list))
        if both:
            problems.append(("tune.seeds", f"shares seeds {', '.join(map(str, both[:5]))} with seeds: tuning "
                                           "seeds must be disjoint from the replicate seeds"))
        from ablate.tuning import space_problems

        problems += space_problems(spec)
    if problems:
        raise SpecError(problems)
    grid, problems = _cells_checked(spec)
    if problems:
        raise SpecError(problems)
    per_cell = len(spec.seed_list) + (spec.tune.trials if spec.tune else 0)
    if len(grid) * per_cell > MAX_ITEMS:
        raise SpecError([("seeds", f"{len(grid):,} cells × {per_cell:,} trials each = {len(grid) * per_cell:,} "
                                   f"trials; a study has at most {MAX_ITEMS:,}")])


def spec_hash(spec: Spec) -> str:
    return hashlib.sha256(canonical_json(spec.model_dump()).encode()).hexdigest()[:12]
