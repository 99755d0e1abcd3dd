"""A spec's factors, normalised: each level with its label and the dotted paths it sets.

A factor named by a dotted path (``model.heads``) moves that path of the baseline; a factor with
a plain name (``variant``) is a *named* factor whose levels each set several paths
(``{model.parameterisation: rotation, model.normalisation: xi}``). Levels carry labels — given
(``{label:, value:}`` or a mapping label → level) or derived from the value — and the labels are
what cell labels, plans and result frames show. Each level is checked alone on the baseline.
"""

from __future__ import annotations

import copy
import difflib
import itertools
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from ablate.design.identity import canonical_json, spec_key
from ablate.spec import (
    FactorSpec,
    Problems,
    Spec,
    SpecError,
    get_path,
    leaf_paths,
    overlap,
    parse,
    path_problem,
    set_path,
    validation_problems,
)


def level_label(value: Any) -> str:
    """A short readable label for a factor level (mappings become key=value lists)."""
    if isinstance(value, dict):
        return ",".join(f"{str(k).split('.')[-1]}={level_label(v)}" for k, v in value.items())
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


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


def _parse_levels(name: str, raw: Any, problems: Problems) -> tuple[list[tuple[Any, str | None, str]], Any]:
    """[(value, label or None, where)], when — from any of the factor forms."""
    where = f"factors.{name}"
    when = None
    if isinstance(raw, dict) and ("levels" in raw or "when" in raw):
        try:
            long = FactorSpec.model_validate(raw)
        except ValidationError as exc:
            problems.extend((f"{where}.{p}" if p else where, m) for p, m in validation_problems(exc, FactorSpec))
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
    clash = {lbl for lbl in labels if labels.count(lbl) > 1}  # e.g. 1e-3 vs 1.0000001e-3: the exact value
    return [(repr(v) if isinstance(v, float) else canonical_json(v)) if lbl in clash else lbl
            for lbl, v in zip(labels, values, strict=True)]


def setting_where(factors: list[Factor], labels: dict[str, str], path: str) -> str | None:
    """The key path in the spec that gave ``path`` (``model.parameterisation``) its value in the
    cell with these level ``labels``: the factor level that sets it or a mapping above it
    (``factors.model.parameterisation[1]``, a named factor's ``factors.variant.levels[0].value.
    model.parameterisation``); None where the cell keeps the baseline's value. A problem found in
    a cell is located at the level the user wrote, not at the baseline's key."""
    for f in factors:
        lvl = f.level(labels.get(f.name, f.baseline_label))
        if lvl is None:
            continue
        for p in lvl.settings:
            if path == p or path.startswith(p + "."):
                return (f"{lvl.where}.{p}" if f.named else lvl.where) + path[len(p):]
    return None


_CACHE: dict[str, tuple[tuple[Factor, ...], Problems]] = {}


def parse_factors(spec: Spec) -> tuple[list[Factor], Problems]:
    """The spec's factors in declaration order, normalised, and the problems of those that are
    not valid (each left out). Conditions (``when``) are checked by ``ablate.design.selectors``."""
    key = spec_key(spec)
    if key not in _CACHE:
        if len(_CACHE) > 64:
            _CACHE.clear()
        _CACHE[key] = _parse_factors(spec)
    factors, problems = _CACHE[key]
    return list(factors), list(problems)


def _parse_factors(spec: Spec) -> tuple[tuple[Factor, ...], Problems]:
    problems: Problems = []
    base = spec.baseline(declared=True)
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
                close = [p for p in leaf_paths(base) if p.split(".")[-1] == name]
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
            problem = path_problem(base, path)
            if problem:
                problems.append((where, f"{path}: {problem}" if named else problem))
                bad = True
            elif path in owner or any(overlap(path, q) for q in owner):
                other = owner.get(path) or next(owner[q] for q in owner if overlap(path, q))
                problems.append((where, f"sets {path}, which factor {other!r} also sets; a path belongs to one factor"))
                bad = True
        for s, (_, _, lwhere) in zip(settings_list, parsed, strict=True):
            inner = [(a, b) for a, b in itertools.combinations(s, 2) if overlap(a, b)]
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
        dup = next((i for i, lbl in enumerate(labels) if labels.count(lbl) > 1), None)
        if dup is not None:
            shown, times = given[dup] or level_label(parsed[dup][0]), labels.count(labels[dup])
            problems.append((where, f"level {shown} appears {'twice' if times == 2 else f'{times} times'}; "
                                    "each level (and label) once"))
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
                resolved = parse({"name": spec.name, **alone}).baseline(declared=True)
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
    return tuple(out), problems
