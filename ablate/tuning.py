"""Tune-then-replicate, the parts that need neither Optuna nor torch.

The protocol (``ablate.design.tune_protocol``) travels with every item of a tuned study:
``space`` (dotted path → ``{type, low, high, log, step}`` or ``{type: categorical, choices}``),
``sampler``, ``startup_trials``, ``seeds``, ``objective``. A worker that claims a tuning item
samples a setting (``ablate.runner.phases``) and trains ``apply(config, params)``; a worker that
claims a replicate item of a cell whose tuning is over trains ``apply(config, best(...))``.
"""

from __future__ import annotations

import copy
import hashlib
import math
from typing import Any

from ablate.spec import Spec, SpecError, TuneParam, _validate_config, get_path, set_path

Problems = list[tuple[str, str]]


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


def space_problems(spec: Spec) -> Problems:
    """Each path exists, is not also a factor, has a fitting type, and its bounds and choices
    make valid configs when set alone on the baseline."""
    from ablate.design import _overlap, _path_problem

    assert spec.tune is not None
    base = spec.baseline()
    problems: Problems = []
    factor_paths: list[str] = []
    for name, raw in spec.factors.items():
        if "." in name:
            factor_paths.append(name)
        else:
            levels = raw.get("levels", raw) if isinstance(raw, dict) else raw
            values = levels.values() if isinstance(levels, dict) else levels if isinstance(levels, list) else []
            for v in values:
                v = v.get("value", v) if isinstance(v, dict) and set(v) == {"label", "value"} else v
                if isinstance(v, dict):
                    factor_paths += [p for p in v if isinstance(p, str)]
    for path, dim in spec.tune.space.items():
        at = f"tune.space.{path}"
        problem = _path_problem(base, path)
        if problem:
            problems.append((at, problem))
            continue
        clash = next((p for p in factor_paths if _overlap(p, path)), None)
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
                _validate_config({"name": spec.name, **trial})
            except SpecError as exc:
                for err_path, msg in exc.problems:
                    if err_path == path or err_path.startswith(path + "."):
                        problems.append((f"{at}.{key}", f"{v!r}: {msg}"))
                        break
    return problems


def apply(config: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """``config`` with each dotted path of ``params`` set (the config is not modified)."""
    out = copy.deepcopy(config)
    for path, value in params.items():
        set_path(out, path, value)
    return out


def sampler_seed(cell_id: str, index: int) -> int:
    """A stable seed per (cell, tuning trial): reproducible samples, different across trials."""
    return int(hashlib.sha256(f"{cell_id}/{index}".encode()).hexdigest()[:8], 16)


def best(results: list[tuple[int, dict[str, Any], float]], direction: str) -> tuple[int, dict[str, Any]] | None:
    """(index, params) of the best finished tuning trial; ties go to the lowest index."""
    finite = [(i, p, v) for i, p, v in results if isinstance(v, int | float) and math.isfinite(v)]
    if not finite:
        return None
    sign = -1.0 if direction == "maximize" else 1.0
    i, params, _ = min(finite, key=lambda r: (sign * r[2], r[0]))
    return i, params
