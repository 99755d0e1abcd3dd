"""Plug-ins: factor levels and tasks from a researcher's own package, found by name.

Two ways in, both resolved to a ``"module:attribute"`` target:

- an entry point: a distribution declares, in its ``pyproject.toml``,
  ``[project.entry-points."ablate.parameterisations"]  givens = "my_pkg.givens:Givens"``;
  the entry's name (``givens``) is then a level a spec names beside the built-ins. ``GROUPS``
  holds the one group of each kind;
- a path: a spec writes the target itself where a level name goes
  (``model.parameterisation: my_pkg.givens:Givens``), for code that is importable but not installed
  as a distribution.

A plug-in's *identity* is its distribution's name and version (where a distribution provides the
module) and a hash of the code of the module its target names (its syntax tree without
docstrings: comments, formatting and docstrings do not count). It enters the id of every
cell that uses it (``ablate.design.identity``): editing the plug-in's code makes new cells, and
the old ones are stale, as after a ``CODE_VERSION`` change.

This module imports nothing heavy: discovery reads the installed distributions' metadata (about a
tenth of a second, once per process, and only when a name is not a built-in's), and a target is
imported only when it is loaded (``Plugin.load``).
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import importlib.util
import json
import os
import re
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any

#: kind of plug-in → the entry-point group a distribution declares it in.
GROUPS: dict[str, str] = {
    "parameterisation": "ablate.parameterisations",
    "normalisation": "ablate.normalisations",
    "initialisation": "ablate.initialisations",
    "nonlinearity": "ablate.nonlinearities",
    "activation": "ablate.activations",
    "task": "ablate.tasks",
    "metric": "ablate.metrics",
    "section": "ablate.report_sections",
}

_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
TARGET = re.compile(rf"^{_IDENT}(\.{_IDENT})*:{_IDENT}(\.{_IDENT})*$")
"""What a spec writes for a plug-in by path: ``package.module:attribute``."""

HASH_CHARS = 12  # of a plug-in's source hash, as a cell id's
SLOW_IMPORT_S = 15.0  # a plug-in's import still running after this many seconds says so on stderr


class PluginError(Exception):
    """A plug-in cannot be found, imported or used; the message names it and says why."""


def is_target(name: object) -> bool:
    """True when ``name`` is written as ``module:attribute`` (a plug-in by path)."""
    return isinstance(name, str) and len(name) <= 500 and TARGET.match(name) is not None


@dataclass(frozen=True)
class Plugin:
    """One plug-in: its kind, the name a spec gives it, its target and where it comes from.

    ``distribution`` / ``version``: of the installed distribution that declares the entry point
    (or, for a plug-in by path, that provides its top-level package); None where none does."""

    kind: str
    name: str
    target: str
    distribution: str | None = None
    version: str | None = None

    @property
    def module(self) -> str:
        return self.target.partition(":")[0]

    @property
    def origin(self) -> str:
        """Where it comes from, for people: ``ablate-givens 0.1.0`` or ``path``."""
        return f"{self.distribution} {self.version}" if self.distribution else "path (no distribution)"

    def load(self) -> Any:
        """The object the target names; ``PluginError`` naming the plug-in and the import's
        message when it cannot be imported (never a silent fall-back)."""
        try:
            return load_target(self.target, f"{self.kind} plug-in {self.name!r}")
        except PluginError as exc:
            cause = exc.__cause__
            wrong_target = cause is None or (isinstance(cause, ModuleNotFoundError) and cause.name is not None
                                             and f"{self.module}.".startswith(f"{cause.name}."))
            if self.distribution is None or self.name == self.target or not wrong_target:
                raise
            # the target is in the package's metadata, read again only when it is reinstalled (editable too)
            raise PluginError(f"{exc} (entry point {self.name!r} in {GROUPS[self.kind]!r} of {self.origin}: fix its "
                              "target in that package's pyproject.toml, then reinstall it)") from cause


class HardExit(BaseException):
    """A plug-in's import called ``os._exit``, which no handler sees: raised in its place."""

    def __init__(self, code: int) -> None:
        super().__init__(f"os._exit({code}) called on import")


_REAL_EXIT = os._exit
_IMPORTING: set[int] = set()  # the threads importing a plug-in now
_GUARD = threading.Lock()


def _exit_on_import(code: int) -> None:
    if threading.get_ident() in _IMPORTING:
        raise HardExit(code)
    _REAL_EXIT(code)


@contextmanager
def importing() -> Iterator[None]:
    """While this thread imports a plug-in, its ``os._exit`` raises ``HardExit``: a module that
    called it ended `ablate validate` with exit 0 and no word (other threads exit as ever)."""
    me = threading.get_ident()
    with _GUARD:
        _IMPORTING.add(me)
        os._exit = _exit_on_import
    try:
        yield
    finally:
        with _GUARD:
            _IMPORTING.discard(me)
            if not _IMPORTING:
                os._exit = _REAL_EXIT


def load_target(target: str, what: str) -> Any:
    """Import ``module`` and follow ``attribute`` (dots allowed) of ``"module:attribute"``."""
    if not is_target(target):
        raise PluginError(f"{what}: {target!r} is not of the form package.module:attribute")
    module_name, _, attribute = target.partition(":")
    # A module that never finishes importing would hang validate and every worker without a word.
    watch = threading.Timer(SLOW_IMPORT_S, _still_importing, (what, module_name))
    watch.daemon = True
    watch.start()
    try:
        with importing():
            obj: Any = importlib.import_module(module_name)
    except KeyboardInterrupt:  # a module that never finishes importing: say whose, not a bare exit 130
        from rich.markup import escape

        from ablate.terminal import Refused

        raise Refused(escape(f"{what}: interrupted while importing {module_name!r} (its import did not finish)"),
                      130) from None
    # SystemExit too: a module that calls sys.exit on import ended `ablate validate` silently (exit 3).
    except (Exception, SystemExit, HardExit) as exc:  # any failure of a plug-in's import is reported as the plug-in's
        hint = f" ({not_found_hint()})" if isinstance(exc, ModuleNotFoundError) and exc.name is not None \
            and exc.name == module_name.partition(".")[0] else ""
        raise PluginError(f"{what}: cannot import {module_name!r}: {type(exc).__name__}: {exc}{hint}") from exc
    finally:
        watch.cancel()
    for part in attribute.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            close = _closest(part, [n for n in dir(obj) if not n.startswith("_")])
            raise PluginError(f"{what}: module {module_name!r} has no attribute {attribute!r}"
                              f"{f'; did you mean {close!r}?' if close else ''}") from None
    return obj


def _still_importing(what: str, module_name: str) -> None:
    sys.stderr.write(f"{what}: still importing {module_name!r} after {SLOW_IMPORT_S:g} s (Ctrl-C stops it and "
                     "names it)\n")
    sys.stderr.flush()


def _closest(name: str, names: list[str]) -> str | None:
    """The name of ``names`` closest to ``name``, case ignored first (SoftPlusReal → SoftplusReal)."""
    import difflib

    same = [n for n in names if n.lower() == name.lower()]
    return same[0] if same else next(iter(difflib.get_close_matches(name, names, n=1, cutoff=0.7)), None)


@lru_cache(maxsize=256)
def load_problem(plugin: Plugin) -> str | None:
    """Why ``plugin`` fails to load (``PluginError``'s message), or None when it loads. Imports it:
    asked only where an error lists the valid names, so that a broken plug-in is not offered."""
    try:
        plugin.load()
    except PluginError as exc:
        return str(exc)
    return None


def not_found_hint() -> str:
    """What to check when a plug-in's module is not found: a plug-in by path is code on the
    Python path with no package (docs/plugins.md §7), so "installed" alone does not fit."""
    path = os.environ.get("PYTHONPATH")
    return ("is its package installed in this environment, or its folder on PYTHONPATH? "
            + (f"PYTHONPATH is {path}" if path else "PYTHONPATH is unset"))


@cache
def installed() -> tuple[Plugin, ...]:
    """Every plug-in the installed distributions declare, in group then name order. Read once per
    process (installing a plug-in needs a new process, as it does for any Python package)."""
    out = []
    from importlib import metadata

    every = metadata.entry_points()  # one scan of the installed distributions (~0.1 s), then a select per group
    for kind, group in GROUPS.items():
        for ep in sorted(every.select(group=group), key=lambda e: e.name):
            dist = ep.dist
            out.append(Plugin(kind, ep.name, ep.value.split("[")[0].strip(),
                              dist.metadata["Name"] if dist is not None else None,
                              dist.version if dist is not None else None))
    return tuple(out)


def installed_of(kind: str) -> tuple[Plugin, ...]:
    """The installed plug-ins of one kind (``GROUPS``)."""
    if kind not in GROUPS:
        raise ValueError(f"unknown plug-in kind {kind!r}; valid: {', '.join(GROUPS)}")
    return tuple(p for p in installed() if p.kind == kind)


@lru_cache(maxsize=64)
def _distribution_of(top: str) -> tuple[str, str] | None:
    from importlib import metadata

    names = metadata.packages_distributions().get(top) or []
    for name in names:
        try:
            return metadata.metadata(name)["Name"], metadata.version(name)
        except metadata.PackageNotFoundError:  # pragma: no cover - listed but gone
            continue
    return None


def find(kind: str, name: str) -> Plugin:
    """The plug-in of ``kind`` a spec names ``name``: an installed one of that name, else one by
    path (``by_path``: PluginError when ``name`` is not ``module:attribute`` either)."""
    for plugin in installed_of(kind):
        if plugin.name == name:
            return plugin
    return by_path(kind, name)


def by_path(kind: str, target: str) -> Plugin:
    """The plug-in a spec names by ``module:attribute``, with the distribution that provides its
    top-level package if one does (so its version enters the identity as an entry point's does)."""
    if not is_target(target):
        raise PluginError(f"{kind} plug-in {target!r} is not of the form package.module:attribute")
    dist = _distribution_of(target.split(".")[0].split(":")[0])
    return Plugin(kind, target, target, *(dist or (None, None)))


_DOCUMENTED = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def _code(node: ast.AST) -> Any:
    """A syntax tree as plain data: each node's type and fields, without positions, docstrings, and
    fields that are None or empty (Python 3.13's ``ast.dump`` leaves those out and 3.12's prints
    them, so a tree dumped as text would change with the Python version)."""
    if isinstance(node, list):
        return [_code(n) for n in node]
    if not isinstance(node, ast.AST):
        return repr(node)  # constants: 1 and 1.0 and '1' differ
    body = getattr(node, "body", None)
    if isinstance(node, _DOCUMENTED) and body and isinstance(body[0], ast.Expr) \
            and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
        node.body = body[1:]  # a docstring: documentation, not behaviour
    fields = [(f, getattr(node, f, None)) for f in node._fields]
    return [type(node).__name__, *[[f, _code(v)] for f, v in fields if v is not None and v != []]]


def code_hash(source: bytes) -> str:
    """sha256 of a module's code: its syntax tree without docstrings (``_code``), so comments,
    blank lines, formatting and docstrings do not change it and any other edit does; of the bytes
    when the text does not parse as Python (then every edit counts)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):  # ValueError: a null byte
        return hashlib.sha256(source).hexdigest()[:HASH_CHARS]
    text = json.dumps(_code(tree), separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:HASH_CHARS]


@lru_cache(maxsize=256)
def _hash_file(path: str, _mtime_ns: int, _size: int, code: bool = True) -> str:
    with open(path, "rb") as f:
        data = f.read()
    return code_hash(data) if code else hashlib.sha256(data).hexdigest()[:HASH_CHARS]


def _source_file(plugin: Plugin) -> str:
    try:
        with importing():
            spec = importlib.util.find_spec(plugin.module)
    except (Exception, SystemExit, HardExit) as exc:  # a parent package that fails to import (or exits)
        raise PluginError(f"{plugin.kind} plug-in {plugin.name!r}: cannot find {plugin.module!r}: "
                          f"{type(exc).__name__}: {exc}") from exc
    if spec is None or not spec.origin or not os.path.isfile(spec.origin):
        raise PluginError(f"{plugin.kind} plug-in {plugin.name!r}: no source file for module {plugin.module!r}"
                          + (f" ({not_found_hint()})" if spec is None else ""))
    return spec.origin


def source_hash(plugin: Plugin) -> str:
    """The hash of the code (``code_hash``) of the module the plug-in's target names (its
    package's ``__init__.py`` for a package). Found without importing that module (its parent
    packages are imported), so ``ablate plan`` keeps off torch; re-read when the file changes."""
    path = _source_file(plugin)
    st = os.stat(path)
    return _hash_file(path, st.st_mtime_ns, st.st_size)


def file_hash(plugin: Plugin) -> str:
    """sha256 of the bytes of the plug-in's source file: its identity's ``source`` before ablate
    hashed code (``identity``), which ``ablate.design.identity.version_change`` compares with."""
    path = _source_file(plugin)
    st = os.stat(path)
    return _hash_file(path, st.st_mtime_ns, st.st_size, False)


def identity(plugin: Plugin) -> dict[str, str]:
    """What enters a cell's id for a plug-in: its target, distribution and version, and the hash
    of its code (``code``; ``source`` was the hash of the file's bytes, before comments and
    docstrings stopped counting: the key's name tells the two apart in a stored code version)."""
    out = {"target": plugin.target, "code": source_hash(plugin)}
    if plugin.distribution:
        out["distribution"] = f"{plugin.distribution} {plugin.version}"
    return out


def describe(plugin: Plugin) -> str:
    """One line for ``ablate plugins`` and provenance: ``name = target (origin, source hash)``."""
    try:
        source = source_hash(plugin)
    except PluginError as exc:
        source = f"unavailable: {exc}"
    return f"{plugin.name} = {plugin.target} ({plugin.origin}; source {source})"
