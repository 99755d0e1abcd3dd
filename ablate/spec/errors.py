"""SpecError, and pydantic's validation errors rewritten as (key path, message) pairs a user reads:
the path as written in the YAML (``model.init.r_min``, ``factors.x[1]``), choices listed, unknown
keys with the closest valid key."""

from __future__ import annotations

import difflib
import math
import re
import types
import typing
from collections.abc import Iterable, Sequence
from typing import Annotated, Any

from pydantic import BaseModel, ValidationError

from ablate import plugins
from ablate.models.catalogue import INIT_SCHEMES
from ablate.terminal import clip_words

Problems = list[tuple[str, str]]


MAX_WORD = 120  # a key or value longer than this is shortened wherever a message shows it
MAX_LINE = 2_000  # characters of one problem's message


def clip(text: str) -> str:
    """``text`` with every run of more than MAX_WORD non-blank characters shortened (a
    100,000-character key stays readable) and at most MAX_LINE characters long."""
    text = clip_words(text, MAX_WORD, 60)
    return text if len(text) <= MAX_LINE else text[: MAX_LINE - 1] + "…"


class SpecError(Exception):
    """A spec is invalid. ``problems`` holds (key path, message) pairs; ``where`` the matching
    "file:line" locations (or None) when the spec came from a file. Long keys and values are
    shortened (``clip``) wherever they appear."""

    def __init__(self, problems: Problems, where: list[str | None] | None = None):
        where = where if where is not None else [None] * len(problems)
        # Once each: a plug-in level is checked by two passes (its shape, its cells); and a fault
        # several levels of a factor share, in the same words, is one line naming them all.
        merged: dict[tuple[str, str, bool], tuple[list[str], str | None]] = {}
        for (path, msg), at in zip(problems, where, strict=True):
            m = re.fullmatch(r"(.*)\[(\d+)\]", path)
            stem, index = (m[1], m[2]) if m else (path, "")
            indices, _ = merged.setdefault((stem, msg, m is not None), ([], at))
            if index not in indices:
                indices.append(index)
        problems, self.where = [], []
        for (stem, msg, indexed), (indices, at) in merged.items():
            path = f"{stem}[{', '.join(indices)}]" if indexed else stem
            problems.append((clip(path), clip(msg)))
            self.where.append(at)
        self.problems = problems
        lines = []
        for (path, msg), at in zip(problems, self.where, strict=True):
            line = f"{path}: {msg}" if path else msg
            # "--set train.steps: train.steps: …" says the key twice: the override names it already
            # (unless the message goes on with an index into it: "seeds: [1]: …")
            twice = at == f"--set {path}" and not msg.startswith("[")
            lines.append(f"{at}: {msg}" if twice else f"{at}: {line}" if at else line)
        super().__init__("\n".join(lines))


_QUOTED = re.compile(r"'([^']*)'")
# the tags of the one discriminated union (model.init): a built-in scheme's name, or a plug-in's
# (spec.models.PLUGIN_INIT_TAG); built-ins only, so that a spec of built-ins never reads entry points
_UNION_TAGS = (*INIT_SCHEMES.builtin_names, "plugin-init")


#: The tags of a ``reports:`` entry's two forms (``spec.models._report_entry``).
REPORT_TAGS = ("report-name", "report-options")


def _loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for i, part in enumerate(loc):
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in _UNION_TAGS and i and loc[i - 1] == "init":
            continue  # the discriminated union adds the tag to the path; the user never wrote it
        elif part in REPORT_TAGS and i >= 2 and loc[i - 2] == "reports":
            continue  # likewise a reports: entry's form (a name, or a mapping with options)
        elif isinstance(part, str) and (part.startswith(("function-", "list[", "dict[")) or part in ("int", "str")):
            continue  # pydantic names a union member or validator; the user never wrote it
        else:
            out += ("." if out else "") + str(part)
    return out


_WANTED = {"int_type": "an integer", "float_type": "a number", "bool_type": "true or false",
           "string_type": "text", "int_parsing": "an integer", "float_parsing": "a number",
           "list_type": "a list", "dict_type": "a mapping", "model_type": "a mapping"}
_KIND = {bool: "a boolean (true/false)", int: "an integer", float: "a number", str: "text", list: "a list",
         dict: "a mapping", type(None): "null"}


def _type_message(kind: str, value: Any) -> str:
    """Why ``value`` is not of the wanted type, in the terms of YAML: strict types, so a boolean
    is never a number, quoted text never a number, 2.0 never an integer."""
    wanted = _WANTED[kind]
    got = _KIND.get(type(value), type(value).__name__)
    if isinstance(value, bool):
        return f"must be {wanted}; {str(value).lower()} is a boolean, not a number" if kind != "bool_type" else \
            f"must be true or false; got {got} {short(value)}"
    if isinstance(value, float) and kind == "int_type":
        if value.is_integer() and abs(value) < 1e15:  # past that, the digits to write are no help
            return f"must be an integer; {value!r} is written as a float: write {int(value)}"
        return f"must be an integer; got {value!r}"
    if isinstance(value, str) and kind in ("int_type", "float_type"):
        try:
            if not math.isfinite(float(value)):  # YAML's are .nan and .inf; "nan" stays text, quoted or not
                return f"must be {wanted}; got text {short(value)} (YAML writes .nan, .inf, -.inf)"
            return f"must be {wanted}, not text: write {value} without quotes"
        except ValueError:
            return f"must be {wanted}; got text {short(value)}"
    if value is None:
        return f"must be {wanted}; got nothing (an empty value)"
    return f"must be {wanted}; got {got} {short(value)}" if got not in ("a list", "a mapping") else \
        f"must be {wanted}; got {got}"


def _message(err: dict[str, Any]) -> str:
    kind, ctx, value = err["type"], err.get("ctx") or {}, err.get("input")
    if kind in _WANTED:
        return _type_message(kind, value)
    if kind == "literal_error":
        return not_one_of(value, _QUOTED.findall(str(ctx.get("expected", ""))))
    if kind == "union_tag_invalid":
        names = ", ".join(_QUOTED.findall(str(ctx.get("expected_tags", ""))))
        return f"{short(ctx.get('tag'))} is not one of: {names}"
    if kind == "union_tag_not_found":
        return f"needs a '{ctx.get('discriminator', 'scheme').strip(chr(39))}' key"
    if kind == "extra_forbidden":
        return "unknown key"
    if kind == "missing":
        return "required key is missing"
    if kind == "finite_number":
        return "must be a finite number"
    msg = err["msg"]
    return msg.removeprefix("Value error, ")


def short(value: Any, n: int = 60) -> str:
    """``repr(value)``, at most ``n`` characters (what a message shows of a value or a key)."""
    text = repr(value)
    return text if len(text) <= n else text[: n - 1] + "…"


def not_one_of(value: Any, names: list[str] | tuple[str, ...], plugins: bool = False,
               failing: Sequence[str] = ()) -> str:
    """'x is not one of: a, b', with the closest valid name; ``plugins``: the factor also takes a
    plug-in by path (``ablate.plugins``), which the message says; ``failing``: installed plug-ins
    left out of ``names`` because they fail to load, named apart."""
    close = difflib.get_close_matches(value, list(names), n=1) if isinstance(value, str) and len(value) <= 100 else []
    tail = "; or a plug-in as package.module:attribute" if plugins else ""
    broken = f" (not listed, as they fail to load: {', '.join(failing)}; see `ablate plugins`)" if failing else ""
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"{short(value)} is not one of: {', '.join(names)}{broken}{tail}{hint}"


def not_a_plugin(value: Any, builtin: Sequence[str], installed: Iterable[plugins.Plugin]) -> str:
    """``not_one_of`` over the built-in names and the installed plug-ins that load: one that fails
    to load would only fail again if chosen, so it is named apart, not offered."""
    ok: list[str] = []
    failing: list[str] = []
    for p in installed:
        (failing if plugins.load_problem(p) else ok).append(p.name)
    return not_one_of(value, [*builtin, *ok], plugins=True, failing=failing)


def validation_problems(exc: ValidationError, root: type[BaseModel]) -> Problems:
    """(key path, message) per error of ``root.model_validate``; unknown keys name the valid ones."""
    out: Problems = []
    for err in exc.errors():
        path = _loc(err["loc"])
        if err["type"] in ("union_tag_invalid", "union_tag_not_found"):
            path += ".scheme" if err["type"] == "union_tag_invalid" else ""
        if err["type"] == "extra_forbidden":
            msg = _unknown_key_message(err["loc"], root)
        else:
            msg = _bound_message(err, root) or _message(err)
        if (path, msg) not in out:
            out.append((path, msg))
    return out


def other_scheme(key: str, owners: Sequence[str], current: str) -> str:
    """That ``key`` is a parameter of the init schemes ``owners``, not of ``current`` (the one the
    spec selects), and how to select one: a scheme's parameters come with its name."""
    return (f"{key!r} is a parameter of init scheme {' or '.join(owners)}, not of {current!r}, the scheme "
            f"selected: select the scheme with its parameter, model.init: {{scheme: {owners[0]}, {key}: …}}")


def _models_in(ann: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation may hold (through Optional, unions, Annotated)."""
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return [ann]
    origin = typing.get_origin(ann)
    if origin is Annotated:
        return _models_in(typing.get_args(ann)[0])
    if origin in (typing.Union, types.UnionType):
        return [m for arg in typing.get_args(ann) for m in _models_in(arg)]
    return []


def _models_at(parents: Sequence[Any], root: type[BaseModel]) -> tuple[list[type[BaseModel]], list[type[BaseModel]]]:
    """The models the mapping at ``parents`` may be (one where the path decides it), and the
    members of the last discriminated union passed on the way (model.init's)."""
    candidates: list[type[BaseModel]] = [root]
    union: list[type[BaseModel]] = []
    i = 0
    while i < len(parents):
        part = parents[i]
        nxt: list[type[BaseModel]] = []
        for model in candidates:
            field = model.model_fields.get(part) if isinstance(part, str) else None
            if field is None:
                continue
            ann = field.annotation
            origin = typing.get_origin(ann)
            if origin in (dict, list):  # step over the key/index of a mapping/list of models
                ann = typing.get_args(ann)[-1]
                i += 1
            nxt += _models_in(ann)
        if len(nxt) > 1 and i + 1 < len(parents):  # a discriminated union: the next part is the tag
            tagged = [m for m in nxt if getattr(m.model_fields.get("scheme"), "default", None) == parents[i + 1]]
            if tagged:
                union, nxt, i = nxt, tagged, i + 1
        candidates = nxt
        i += 1
        if not candidates:
            break
    return candidates, union


def _description(loc: tuple[Any, ...], root: type[BaseModel]) -> str:
    """The description the schema gives the key at ``loc`` ('' where the path does not decide it)."""
    *parents, key = loc
    candidates, _ = _models_at(parents, root)
    field = candidates[0].model_fields.get(key) if len(candidates) == 1 and isinstance(key, str) else None
    return (field.description or "") if field is not None else ""


def _bound_message(err: dict[str, Any], root: type[BaseModel]) -> str | None:
    """'must be ≥ 3; got 2 — what the key is', for a number outside its field's bounds."""
    sign = _BOUNDS.get(err["type"])
    if sign is None:
        return None
    ctx = err.get("ctx") or {}
    limit = next(iter(ctx.values()), None)
    if limit is None:
        return None
    what = _description(err["loc"], root)
    limit = f"{limit:g}" if isinstance(limit, float) else limit
    return f"must be {sign} {limit}; got {short(err.get('input'))}" + (f" — {clip(what)}" if what else "")


_BOUNDS = {"greater_than_equal": "≥", "greater_than": ">", "less_than_equal": "≤", "less_than": "<"}


def _unknown_key_message(loc: tuple[Any, ...], root: type[BaseModel]) -> str:
    """'unknown key' with the valid keys of the mapping it is in, and the closest one."""
    *parents, key = loc
    candidates, union = _models_at(parents, root)
    if len(candidates) != 1:
        return "unknown key"
    valid = list(candidates[0].model_fields)
    tag = getattr(candidates[0].model_fields.get("scheme"), "default", None)
    owners = [str(m.model_fields["scheme"].default) for m in union if m is not candidates[0]
              and key in m.model_fields and isinstance(getattr(m.model_fields.get("scheme"), "default", None), str)]
    if owners and isinstance(tag, str):  # another scheme's parameter: its closest key here is the wrong fix
        return f"unknown key: {other_scheme(str(key), owners, tag)}"
    close = difflib.get_close_matches(str(key), valid, n=1) if len(str(key)) <= 100 else []
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"unknown key{hint} (valid: {', '.join(valid)})"
