"""The safe, bounded YAML loader of spec files, and its limits.

YAML's safe loader, stricter: duplicate keys and non-text keys are errors, dates stay text, only
plain-data tags are accepted, and nesting, alias expansion and size are bounded (a spec is
refused, with a message, past the limits below). Line numbers are kept for error messages.
Numbers as YAML 1.2 reads them: ``1e-3`` and ``1E5`` are floats (YAML 1.1, PyYAML's, needs a dot,
``1.0e-3``, and reads ``1e-3`` as text).
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from ablate.spec.errors import SpecError, short

MAX_BYTES = 1_000_000  # a spec file
MAX_NODES = 100_000  # YAML nodes after expanding aliases (bounds "billion laughs")
MAX_DEPTH = 48  # nesting of YAML collections


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # libyaml's parser where built
    """Safe loading, stricter: duplicate keys and non-text keys are errors; dates stay text;
    only plain-data tags (str, int, float, bool, null, map, seq) are accepted."""

    yaml_implicit_resolvers = {
        first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[str, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            if not isinstance(key_node, yaml.ScalarNode):
                what = "a mapping" if isinstance(key_node, yaml.MappingNode) else "a list"
                raise yaml.constructor.ConstructorError(
                    None, None, f"mapping keys must be text; this key is {what}", key_node.start_mark)
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, str):
                raise yaml.constructor.ConstructorError(
                    None, None, f"mapping keys must be text; {short(key_node.value)} reads as {short(key)} "
                                "(quote it)", key_node.start_mark)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {short(key)} (first at line {seen[key] + 1})", key_node.start_mark)
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)

    def construct_undefined(self, node: yaml.Node) -> Any:
        tag = node.tag.replace("tag:yaml.org,2002:", "!!")
        raise yaml.constructor.ConstructorError(
            None, None, f"tag {tag} is not allowed: a spec holds plain data (text, numbers, true/false, "
                        "lists, mappings)", node.start_mark)


# YAML 1.2 floats that YAML 1.1 reads as text: an exponent without a dot (1e-3, 1E5, .5e-2).
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9][0-9_]*)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)

for _tag in ("binary", "set", "omap", "pairs", "timestamp"):
    _Loader.add_constructor(f"tag:yaml.org,2002:{_tag}", _Loader.construct_undefined)
_Loader.add_constructor(None, _Loader.construct_undefined)


def _check_tree(node: yaml.Node, source: str) -> None:
    """Refuse deep nesting, recursive aliases and alias expansion past MAX_NODES (billion laughs)."""
    sizes: dict[int, int] = {}
    active: set[int] = set()
    aliased: list[bool] = []  # whether a node was reached twice: an alias multiplied it

    def size(n: yaml.Node, depth: int) -> int:
        key = id(n)
        if key in sizes:
            aliased.append(True)
            return sizes[key]
        if depth > MAX_DEPTH:
            raise SpecError([("", f"{source}: nesting deeper than {MAX_DEPTH} levels (line {n.start_mark.line + 1})")])
        if key in active:
            raise SpecError([("", f"{source}: an alias refers to itself (line {n.start_mark.line + 1})")])
        active.add(key)
        total = 1
        if isinstance(n, yaml.SequenceNode):
            total += sum(size(c, depth + 1) for c in n.value)
        elif isinstance(n, yaml.MappingNode):
            total += sum(size(k, depth + 1) + size(v, depth + 1) for k, v in n.value)
        active.discard(key)
        sizes[key] = total
        if total > MAX_NODES and aliased:
            raise SpecError([("", f"{source}: too large after expanding aliases (over {MAX_NODES:,} values); "
                                  "anchors and aliases must not multiply the spec")])
        if total > MAX_NODES:
            raise SpecError([("", f"{source}: too large (over {MAX_NODES:,} values); a spec is a baseline, its "
                                  "factors and seeds: hundreds of values, not more")])
        return total

    size(node, 0)


def _line_map(node: yaml.Node | None) -> dict[str, int]:
    """Key path (as errors write it: a.b[0].c, dotted keys kept) → 1-based line."""
    lines: dict[str, int] = {}
    if node is None:
        return lines
    stack: list[tuple[yaml.Node, str]] = [(node, "")]
    while stack and len(lines) < MAX_NODES:
        n, path = stack.pop()
        if isinstance(n, yaml.MappingNode):
            for k, v in n.value:
                if not isinstance(k, yaml.ScalarNode) or k.tag == "tag:yaml.org,2002:merge":
                    continue
                sub = f"{path}.{k.value}" if path else str(k.value)
                lines.setdefault(sub, k.start_mark.line + 1)
                stack.append((v, sub))
        elif isinstance(n, yaml.SequenceNode):
            for i, v in enumerate(n.value):
                sub = f"{path}[{i}]"
                lines.setdefault(sub, v.start_mark.line + 1)
                stack.append((v, sub))
    return lines


def parse_yaml_lines(text: str | bytes, source: str = "<spec>") -> tuple[Any, dict[str, int]]:
    """Safe YAML → (plain data, key path → line). Errors are SpecError with the line."""
    if len(text) > MAX_BYTES:
        raise SpecError([("", f"{source} is {len(text):,} bytes; a spec is at most {MAX_BYTES:,}")])
    try:
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        depth = 0  # a cheap, non-recursive look at the nesting first: composing recurses
        for event in yaml.parse(text, Loader=_Loader):
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    raise SpecError([("", f"{source}: nesting deeper than {MAX_DEPTH} levels "
                                          f"(line {event.start_mark.line + 1})")])
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
        loader = _Loader(text)
        try:
            node = loader.get_single_node()
            if node is None:
                return None, {}
            _check_tree(node, source)
            data = loader.construct_document(node)
        finally:
            loader.dispose()
    except UnicodeDecodeError as exc:
        raise SpecError([("", f"{source} is not UTF-8 text ({exc.reason} at byte {exc.start})")]) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        if mark is not None and mark.column > 1024 and "expected" in problem:
            problem += " (a key written without '? ' is at most 1024 characters)"
        raise SpecError([("", f"{source} is not valid YAML{where}: {problem}")]) from None
    except RecursionError:
        raise SpecError([("", f"{source}: nesting too deep")]) from None
    except SpecError:
        raise
    except Exception as exc:  # PyYAML's constructors fail on some odd scalars (e.g. an empty !!int)
        raise SpecError([("", f"{source} is not valid YAML: {type(exc).__name__} reading a value")]) from None
    return data, _line_map(node)


def parse_yaml(text: str | bytes, source: str = "<spec>") -> Any:
    """Safe YAML: plain data only; a tag that would construct Python objects is an error."""
    return parse_yaml_lines(text, source)[0]

