"""Selectors: which cells a ``when:`` condition, an ``exclude``/``include`` entry, or a reference's
``cell:`` means — the one matcher the design, results and reports share.

A selector maps keys to wanted values; a cell matches when every key matches:
- a factor key matches the cell's level by its label (text) or by its value;
- a dotted path matches the cell's resolved config value at that path;
- a list means any of; a mapping matches the keys it names;
- booleans never equal numbers (``true`` is not ``1``); ``2`` equals ``2.0``.

On the command line (``--cells``) a selector is written ``key=value, key=value`` (values read as
YAML: ``model.heads=8``, ``model.heads=[4, 8]``, ``variant=RotRNN``) or as a YAML mapping
(``{model.heads: 8}``): ``parse_selector``.
"""

from __future__ import annotations

import difflib
from typing import Any

from ablate.design.factors import Factor
from ablate.spec import Problems, get_path, path_problem
from ablate.spec.files import split_top_level


def _split_top(text: str) -> list[str]:
    """``text`` cut at the commas outside brackets and quotes, each part stripped, empty ones dropped."""
    return [p.strip() for p in split_top_level(text) if p.strip()]


def parse_selector(text: str, where: str = "--cells") -> dict[str, Any]:
    """A selector from text: ``key=value, key=value`` (values as YAML) or a YAML mapping.
    Raises SpecError naming ``where``."""
    from ablate.spec import SpecError, parse_yaml

    text = text.strip()
    if text.startswith("{"):
        value = parse_yaml(text, where)
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise SpecError([(where, f"{text!r} is not a mapping of factor or dotted path → value")])
        return value
    out: dict[str, Any] = {}
    for part in _split_top(text):
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise SpecError([(where, f"{part!r} is not of the form key=value (e.g. model.heads=8)")])
        out[key.strip()] = parse_yaml(value, f"{where} {key.strip()}") if value.strip() else ""
    if not out:
        raise SpecError([(where, "an empty selector; give key=value (e.g. model.heads=8)")])
    return out


def same(actual: Any, wanted: Any) -> bool:
    """``wanted`` matches ``actual``: a list means any of; a mapping matches the keys it names."""
    if isinstance(wanted, list):
        return any(same(actual, w) for w in wanted)
    if isinstance(wanted, dict):
        return isinstance(actual, dict) and all(k in actual and same(actual[k], v) for k, v in wanted.items())
    if isinstance(wanted, bool) or isinstance(actual, bool):
        return type(wanted) is type(actual) and wanted == actual
    if isinstance(wanted, int | float) and isinstance(actual, int | float):
        return wanted == actual
    return type(wanted) is type(actual) and wanted == actual


def level_matches(factor: Factor, label: str, wanted: Any, base: dict[str, Any]) -> bool:
    """The level ``label`` of ``factor`` is ``wanted`` (a label, a value, or a list of either)."""
    if isinstance(wanted, list):
        return any(level_matches(factor, label, w, base) for w in wanted)
    if isinstance(wanted, str) and wanted == label:
        return True
    lvl = factor.level(label)
    if lvl is not None:
        return same(lvl.value, wanted)
    return not factor.named and same(get_path(base, factor.name), wanted)


def matches(selector: dict[str, Any], config: dict[str, Any], labels: dict[str, str],
            factors: dict[str, Factor], base: dict[str, Any]) -> bool:
    """A cell (its resolved ``config`` and factor ``labels``) matches every key of ``selector``."""
    for key, wanted in selector.items():
        if key in factors and key in labels:
            if not level_matches(factors[key], labels[key], wanted, base):
                return False
            continue
        try:
            actual = get_path(config, key)
        except KeyError:
            return False
        if not same(actual, wanted):
            return False
    return True


def selector_problems(entry: Any, where: str, factors: dict[str, Factor], base: dict[str, Any],
                      allowed: set[str] | None = None, allowed_text: str = "") -> Problems:
    """Keys are factor names (values: their labels or values) or dotted paths of the baseline;
    ``allowed`` limits the factors a key may name (a condition names earlier factors only)."""
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
                if not any(level_matches(f, lvl.label, w, base) for lvl in f.levels) and not (
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
        problem = path_problem(base, key)
        if problem:
            problems.append((at, problem))
    return problems


def condition_problems(factors: list[Factor], base: dict[str, Any]) -> Problems:
    """Each ``when:`` is non-empty and names factors declared before its own (or unconditional
    ones), their levels, or dotted paths of the baseline."""
    problems: Problems = []
    by_name = {f.name: f for f in factors}
    for i, f in enumerate(factors):
        if f.when is not None:
            if not f.when:
                problems.append((f"{f.where}.when", "an empty condition; drop when: or give factor/path: value"))
            earlier = {g.name for g in factors[:i]} | {g.name for g in factors if not g.when}
            problems += selector_problems(f.when, f"{f.where}.when", by_name, base, earlier - {f.name},
                                          f"factors declared before {f.name!r} (or unconditional ones)")
    return problems
