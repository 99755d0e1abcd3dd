"""Spec files: reading them, ``extends`` chains, ``--set`` overrides, and errors located at file:line.

``read_raw`` / ``reads_raw`` give the merged, overridden plain data of a spec and where each key
path was written; ``located`` turns a SpecError raised while validating that data into one whose
problems carry those file:line locations. ``read`` / ``reads`` validate the shape only
(``ablate.spec.parse``); what a study runs is checked by ``ablate.design.load`` / ``loads``.
"""

from __future__ import annotations

import copy
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ablate.spec.errors import SpecError
from ablate.spec.loader import MAX_BYTES, parse_yaml, parse_yaml_lines
from ablate.spec.models import Spec, TuneParam, parse
from ablate.spec.paths import get_path

MAX_EXTENDS = 16  # length of an extends chain

Origins = dict[str, str]  # key path → "file:line" (or "--set path")

# Mappings whose keys are themselves dotted (factor names, search-space paths), with the keys
# their values may hold, so that `--set factors.model.heads.when=...` finds the factor.
_DOTTED_KEY_MAPS = {("factors",): {"levels", "when"}, ("tune", "space"): set(TuneParam.model_fields)}


def split_override(raw: dict[str, Any], path: str) -> list[str]:
    """The keys an override ``path`` names in ``raw``, dotted factor names and space paths kept whole."""
    parts = path.split(".")
    for prefix, subkeys in _DOTTED_KEY_MAPS.items():
        n = len(prefix)
        if tuple(parts[:n]) != prefix or len(parts) <= n:
            continue
        rest = parts[n:]
        try:
            existing = get_path(raw, ".".join(prefix))
        except KeyError:
            existing = {}
        existing = existing if isinstance(existing, dict) else {}
        for cut in range(len(rest), 0, -1):  # the longest existing key
            if ".".join(rest[:cut]) in existing:
                return [*prefix, ".".join(rest[:cut]), *rest[cut:]]
        if len(rest) > 1 and rest[-1] in subkeys:
            return [*prefix, ".".join(rest[:-1]), rest[-1]]
        return [*prefix, ".".join(rest)]
    return parts


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """``path=value`` overrides from the command line; the value is parsed as YAML.

    Factor names and search-space paths are dotted themselves: ``factors.model.layers=[1, 2]``
    sets the factor ``model.layers``; ``tune.space.train.lr.high=0.1`` its ``high``."""
    raw = copy.deepcopy(raw)
    for item in overrides:
        path, sep, text = item.partition("=")
        path = path.strip()
        if not sep or not path:
            raise SpecError([("--set", f"{item!r} is not of the form path=value")])
        if "" in path.split("."):
            raise SpecError([("--set", f"{item!r}: an empty key in {path} (two dots, or a dot at an end)")])
        value = parse_yaml(text, _origin(item, path))
        *parents, key = split_override(raw, path)
        node = raw
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise SpecError([(path, f"--set cannot set inside {part!r}: it is not a mapping")])
        node[key] = value
    return raw


def split_top_level(text: str) -> list[str]:
    """``text`` split at the commas outside brackets, braces, parentheses and quotes:
    ``1,[2,3],'a,b'`` is three (the ``-m`` values here, the selectors of ``ablate.design``)."""
    parts, depth, quote, start = [], 0, "", 0
    for i, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    return [*parts, text[start:]]


class Override(str):
    """An override as the command line wrote it: ``-m path=a,b`` becomes ``factors.path=[a, b]``,
    and its errors name ``-m path``, what the user typed, not ``--set factors.path``."""

    origin: str

    def __new__(cls, text: str, origin: str) -> Override:
        out = super().__new__(cls, text)
        out.origin = origin
        return out


def _origin(item: str, path: str) -> str:
    return getattr(item, "origin", f"--set {path}")


def multirun_overrides(items: list[str]) -> list[str]:
    """``-m path=v1,v2,...`` (Hydra's habit) as the ``--set`` overrides that make ``path`` a factor
    with those levels: ``factors.path=[v1, v2, ...]``, added or replacing a factor of that path.
    Each level is parsed as YAML; commas inside brackets or quotes do not split."""
    out = []
    for item in items:
        path, sep, text = item.partition("=")
        path = path.strip()
        if not sep or not path or not text.strip():
            raise SpecError([("-m", f"{item!r} is not of the form path=level,level,… (e.g. model.layers=1,2,4)")])
        if path.startswith("factors."):
            raise SpecError([("-m", f"{item!r}: give the path the factor moves (e.g. {path.removeprefix('factors.')}"
                                    f"=…), not factors.…")])
        levels = [part.strip() for part in split_top_level(text)]
        if any(not level for level in levels):
            raise SpecError([("-m", f"{item!r}: an empty level (two commas, or one at an end)")])
        out.append(Override(f"factors.{path}=[{', '.join(levels)}]", f"-m {path}"))
    return out


def merge(base: Any, child: Any, key: str = "") -> Any:
    """``extends``: mappings merge key by key (the child wins), ``null`` removes an inherited key,
    lists and scalars replace; a mapping whose ``scheme`` (an init) or ``name`` (the task) differs
    from the inherited one replaces it whole."""
    if not isinstance(base, dict) or not isinstance(child, dict):
        return copy.deepcopy(child)
    tag = "name" if key == "task" else "scheme" if key.endswith("init") else None
    if tag and tag in child and tag in base and child[tag] != base[tag]:
        return {k: copy.deepcopy(v) for k, v in child.items() if v is not None}
    out = copy.deepcopy(base)
    for sub, value in child.items():
        if value is None:
            out.pop(sub, None)
        elif sub in out:
            out[sub] = merge(out[sub], value, sub)
        else:
            out[sub] = copy.deepcopy(value)
    return out


def _parse(data: str | bytes, display: str, parent: Path, identity: Path | None,
           chain: tuple[Path, ...]) -> tuple[dict[str, Any], Origins]:
    """Spec text with its ``extends`` chain merged in; and where each key path was written."""
    raw, lines = parse_yaml_lines(data, display)
    if raw is None:  # nothing but comments, or a reader with nothing to read (a FIFO, /dev/null)
        raise SpecError([("", f"{display} is empty: a spec holds at least its name and task (see "
                              "studies/quickstart.yaml)")])
    if not isinstance(raw, dict):
        raise SpecError([("", f"{display} must be a mapping of keys (name, task, model, ...)")])
    origins: Origins = {p: f"{display}:{line}" for p, line in lines.items()}
    ext = raw.pop("extends", None)
    if ext is None:
        return raw, origins
    where = [origins.get("extends")]
    if isinstance(ext, str):
        ext = [ext]
    if not isinstance(ext, list) or not ext or not all(isinstance(e, str) and e for e in ext):
        raise SpecError([("extends", "must be a file name or a list of file names")], where)
    here = (*chain, identity) if identity is not None else chain
    merged: dict[str, Any] = {}
    base_origins: Origins = {}
    for name in ext:
        base = (parent / name).resolve()
        if base in here:
            cycle = " → ".join(p.name for p in (*here, base))
            raise SpecError([("extends", f"a cycle: {cycle}")], where)
        if len(here) >= MAX_EXTENDS:
            raise SpecError([("extends", f"more than {MAX_EXTENDS} files deep")], where)
        if not base.is_file():
            raise SpecError([("extends", f"cannot read {name!r} (looked for {base})")], where)
        sub, sub_origins = _read(base, here)
        merged = merge(merged, sub)
        base_origins.update(sub_origins)
    return merge(merged, raw), {**base_origins, **origins}


def read_bounded(path: Path) -> bytes:
    """The bytes of a spec file, reading at most MAX_BYTES + 1 of them whatever ``path`` is: a
    device (/dev/zero, /dev/urandom) or a growing file is refused once past the limit, a FIFO
    without a writer reads as empty (its open does not wait for one), a folder is an error."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise SpecError([("", f"cannot read {path}: {exc.strerror or exc}")]) from None
    try:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise SpecError([("", f"{path} is a folder, not a spec file")])
        os.set_blocking(fd, True)  # a FIFO with a writer: wait for its data, as any reader would
        chunks, total = [], 0
        while total <= MAX_BYTES:
            chunk = os.read(fd, min(1 << 16, MAX_BYTES + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    except OSError as exc:
        raise SpecError([("", f"cannot read {path}: {exc.strerror or exc}")]) from None
    finally:
        os.close(fd)
    if total > MAX_BYTES:
        raise SpecError([("", f"{path} has more than {MAX_BYTES:,} bytes (reading stopped there); a spec is at most "
                              f"{MAX_BYTES:,}")])
    return b"".join(chunks)


def _read(path: Path, chain: tuple[Path, ...]) -> tuple[dict[str, Any], Origins]:
    return _parse(read_bounded(path), str(path), path.parent, path.resolve(), chain)


def _overridden(raw: dict[str, Any], origins: Origins, overrides: list[str] | None) -> tuple[dict[str, Any], Origins]:
    if not overrides:
        return raw, origins
    raw = apply_overrides(raw, overrides)
    for item in overrides:  # an overridden value was written on the command line, not in a file
        path = ".".join(split_override(raw, item.partition("=")[0].strip()))
        # a list or mapping replaced whole takes its items' lines with it: factors.x[1] came from -m x
        origins = {k: v for k, v in origins.items() if not (k == path or k.startswith((path + ".", path + "[")))}
        origins[path] = _origin(item, path)
    return raw, origins


def read_raw(path: str | Path, overrides: list[str] | None = None) -> tuple[dict[str, Any], Origins]:
    """A spec file as plain data, ``extends`` merged and ``--set`` applied, with the origin of
    each key path. SpecError for what cannot be read (missing file, bad YAML, an extends cycle)."""
    path = Path(path)
    try:
        raw, origins = _read(path, ())
    except RecursionError:
        raise SpecError([("", f"{path}: nesting too deep")]) from None
    return _overridden(raw, origins, overrides)


def reads_raw(text: str | bytes, source: str = "<spec>", overrides: list[str] | None = None,
              base_dir: str | Path | None = None) -> tuple[dict[str, Any], Origins]:
    """Spec text as ``read_raw`` reads a file (``extends`` resolved against ``base_dir``, default cwd)."""
    try:
        raw, origins = _parse(text, source, Path(base_dir or "."), None, ())
    except RecursionError:
        raise SpecError([("", f"{source}: nesting too deep")]) from None
    return _overridden(raw, origins, overrides)


def _command_line(origin: str) -> bool:
    return origin.startswith(("--set ", "-m "))  # what ``_origin`` and ``multirun_overrides`` write


def _where(path: str, origins: Origins) -> str | None:
    """Where the value at ``path`` was written: the origin of its longest key path prefix written
    somewhere, with every command-line override inside that key. A problem of a whole mapping
    (``factors``: two cells train one model) is as much the ``-m`` that added a factor to it as the
    file's line that opened it; and a mapping the command line alone filled has no origin of its
    own, only its keys'."""
    probe = path
    while probe:
        inside = list(dict.fromkeys(v for k, v in origins.items()
                                    if k.startswith((probe + ".", probe + "[")) and _command_line(v)))
        own = origins.get(probe)
        found = list(dict.fromkeys([own, *inside] if own is not None else inside))
        if found:
            return found[0] if len(found) == 1 else f"{', '.join(found[:-1])} and {found[-1]}"
        cut = max(probe.rfind("."), probe.rfind("["))
        probe = probe[:cut] if cut > 0 else ""
    return None


def locate(exc: SpecError, origins: Origins) -> SpecError:
    """The same errors, each with where its value was written (``_where``)."""
    where = [old if old is not None else _where(path, origins)
             for (path, _), old in zip(exc.problems, exc.where, strict=True)]
    return SpecError(exc.problems, where)


@contextmanager
def located(origins: Origins) -> Iterator[None]:
    """A SpecError raised inside comes out with the file:line of each problem (``locate``)."""
    try:
        yield
    except SpecError as exc:
        raise locate(exc, origins) from None


def read(path: str | Path, overrides: list[str] | None = None) -> Spec:
    """A spec file checked for its shape only (``parse``): what its keys and values are, not
    whether its design holds. To run, plan or report a study use ``ablate.design.load``."""
    raw, origins = read_raw(path, overrides)
    with located(origins):
        return parse(raw, str(path))


def reads(text: str | bytes, source: str = "<spec>", overrides: list[str] | None = None,
          base_dir: str | Path | None = None) -> Spec:
    """Spec text checked for its shape only; ``ablate.design.loads`` checks everything."""
    raw, origins = reads_raw(text, source, overrides, base_dir)
    with located(origins):
        return parse(raw, source)
