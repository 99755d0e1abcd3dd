"""Dotted paths into a spec's baseline (``model.init.r_min``): reading, setting, checking.

Factors, conditions, constraints, the search space and ``--set`` all name values by a dotted
path; these are the few operations they share.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from typing import Any

ROOTS = ("task", "model", "train")  # the parts of the baseline a factor or the search space may move


def get_path(data: dict[str, Any], path: str) -> Any:
    """The value at a dotted path; KeyError naming the first missing part."""
    node: Any = data
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            raise KeyError(part)
        node = node[part]
    return node


def set_path(data: dict[str, Any], path: str, value: Any) -> None:
    """Set a dotted path in nested dicts, creating nothing: every parent must exist."""
    *parents, key = path.split(".")
    node = data
    for part in parents:
        node = node[part]
        if not isinstance(node, dict):
            raise KeyError(part)
    node[key] = value


def leaf_paths(data: Any, prefix: str = "") -> Iterator[str]:
    """Every dotted path of nested mappings, parents before their children."""
    if isinstance(data, dict):
        for k, v in data.items():
            sub = f"{prefix}.{k}" if prefix else str(k)
            yield sub
            yield from leaf_paths(v, sub)


def path_problem(base: dict[str, Any], path: str) -> str | None:
    """Why ``path`` is not a settable dotted path of the baseline ``base``, or None."""
    if path.split(".")[0] not in ROOTS:
        return f"a path starts with {', '.join(r + '.' for r in ROOTS)}; {path!r} does not"
    try:
        get_path(base, path)
    except KeyError as exc:
        other = _other_scheme(base, path)
        if other:
            return other
        close = difflib.get_close_matches(path, list(leaf_paths(base)), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        return f"{exc.args[0]!r} is not a key of the baseline{hint}"
    return None


def _other_scheme(base: dict[str, Any], path: str) -> str | None:
    """For ``model.init.KEY`` where KEY is no parameter of the baseline's init scheme but one of
    another built-in scheme's: that the key is the other scheme's, and how to select it. A path
    cannot change the scheme and add its key at once (each path must exist in the baseline), so the
    closest key of the baseline's scheme (``r_min`` → ``gamma_min``) would be the wrong fix."""
    from ablate.spec.errors import other_scheme
    from ablate.spec.init_params import BUILTIN_INITS

    parts = path.split(".")
    init = base.get("model", {}).get("init") if isinstance(base.get("model"), dict) else None
    if parts[:2] != ["model", "init"] or len(parts) != 3 or not isinstance(init, dict):
        return None
    key, current = parts[2], init.get("scheme")
    owners = [name for name, params in BUILTIN_INITS.items() if name != current and key in params.model_fields]
    if not owners:
        return None
    return other_scheme(key, owners, str(current))


def overlap(a: str, b: str) -> bool:
    """The paths are equal, or one lies inside the other (``model.init`` and ``model.init.r_min``)."""
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")
