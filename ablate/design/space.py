"""The search space a tuned spec implies, and the protocol that travels with its items.

The protocol (``tune_protocol``) enters every tuned cell's id and goes to the worker with each
item: ``space`` (dotted path → ``{type, low, high, log, step}`` or ``{type: categorical,
choices}``), ``sampler``, ``seeds``, ``objective``, ``pruner`` (only when not none) (and, on
items, ``startup_trials``).
"""

from __future__ import annotations

import copy
from typing import Any

from ablate.spec import Problems, Spec, SpecError, TuneParam, get_path, overlap, parse, path_problem, set_path


def _kind(base_value: Any, dim: TuneParam) -> str:
    if dim.choices is not None:
        return "categorical"
    if dim.type is not None:
        return dim.type
    return "int" if isinstance(base_value, int) and not isinstance(base_value, bool) else "float"


def resolve_space(spec: Spec) -> dict[str, dict[str, Any]]:
    """The search space with types resolved (from the baseline value where not given)."""
    assert spec.tune is not None
    base = spec.baseline()
    out: dict[str, dict[str, Any]] = {}
    for path, dim in spec.tune.space.items():
        kind = _kind(get_path(base, path), dim)
        if kind == "categorical":
            out[path] = {"type": kind, "choices": list(dim.choices or [])}
        elif kind == "int":
            out[path] = {"type": kind, "low": int(dim.low), "high": int(dim.high), "log": dim.log,
                         "step": int(dim.step or 1)}
        else:
            out[path] = {"type": kind, "low": float(dim.low), "high": float(dim.high), "log": dim.log,
                         "step": dim.step}
    return out


def tune_protocol(spec: Spec) -> dict[str, Any] | None:
    """The tuning protocol as plain data: enters the cell id (without ``startup_trials``)."""
    if spec.tune is None:
        return None
    protocol: dict[str, Any] = {
        "space": resolve_space(spec),
        "sampler": spec.tune.sampler,
        "seeds": spec.tune.seed_list,
        "objective": {"metric": spec.tune.objective.metric, "direction": spec.tune.objective.resolved_direction},
    }
    if spec.tune.pruner != "none":  # added later: without a pruner the protocol (and the ids) stay as before
        protocol["pruner"] = spec.tune.pruner
    return protocol


def _factor_paths(spec: Spec) -> list[str]:
    """The paths the factors set, read from the raw declarations (valid or not)."""
    paths: list[str] = []
    for name, raw in spec.factors.items():
        if "." in name:
            paths.append(name)
            continue
        levels = raw.get("levels", raw) if isinstance(raw, dict) else raw
        values = levels.values() if isinstance(levels, dict) else levels if isinstance(levels, list) else []
        for v in values:
            v = v.get("value", v) if isinstance(v, dict) and set(v) == {"label", "value"} else v
            if isinstance(v, dict):
                paths += [p for p in v if isinstance(p, str)]
    return paths


def space_problems(spec: Spec) -> Problems:
    """Each path exists, is not also a factor, has a fitting type, and its bounds and choices
    make valid configs when set alone on the baseline."""
    assert spec.tune is not None
    base = spec.baseline()
    problems: Problems = []
    factor_paths = _factor_paths(spec)
    for path, dim in spec.tune.space.items():
        at = f"tune.space.{path}"
        problem = path_problem(base, path)
        if problem:
            problems.append((at, problem))
            continue
        clash = next((p for p in factor_paths if overlap(p, path)), None)
        if clash:
            problems.append((at, f"{clash} is a factor; a path is either varied or tuned, not both"))
            continue
        value = get_path(base, path)
        if isinstance(value, dict):
            problems.append((at, "tune a leaf value (e.g. model.init.r_min), not a whole mapping"))
            continue
        kind = _kind(value, dim)
        if kind != "categorical" and (isinstance(value, bool | str)):
            problems.append((at, f"the baseline value {value!r} is not a number; tune it with choices: [...]"))
            continue
        if kind == "int":
            for key in ("low", "high", "step"):
                v = getattr(dim, key)
                if v is not None and not float(v).is_integer():
                    problems.append((f"{at}.{key}", f"{v:g} is not an integer (the path takes integers)"))
        tries = [("choices", c) for c in dim.choices] if dim.choices is not None else [
            ("low", dim.low), ("high", dim.high)]
        for key, v in tries:
            trial = copy.deepcopy(base)
            set_path(trial, path, int(v) if kind == "int" else v)
            try:
                parse({"name": spec.name, **trial})
            except SpecError as exc:
                for err_path, msg in exc.problems:
                    if err_path == path or err_path.startswith(path + "."):
                        # a bound's message names the value already ("must be < 1; got 1.0")
                        problems.append((f"{at}.{key}", msg if "; got " in msg else f"{v!r}: {msg}"))
                        break
    return problems
