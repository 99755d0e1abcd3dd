"""Passed plug-in checks, remembered so that ``ablate validate`` and ``ablate run`` do not build
and run the same plug-in on the same tiny batch again (``ablate.models.contract``).

An entry is one small JSON file, ``checks/<key>.json`` under ``$ABLATE_CACHE_DIR`` (the task
cache's folder), else under ablate's user cache (``$XDG_CACHE_HOME/ablate``, else
``~/.cache/ablate``). Its key hashes everything the check's outcome depends on: what the caller
gives (the plug-ins' identities, with their code hash, ablate's ``CODE_VERSION`` and the config
the check built) and ``versions()`` — ablate's version and a hash of its own code, torch's and
Python's. Only a
passed check is written, through a temporary file renamed into place; an entry that cannot be
read or parsed is a miss, and the next pass overwrites it. ``ABLATE_NO_CACHE=1`` turns it off.

A leaf (it imports ``ablate.stores`` only), and light: a run of cache hits never imports torch.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import platform
import tempfile
from pathlib import Path
from typing import Any

DIR_VAR = "ABLATE_CACHE_DIR"
OFF_VAR = "ABLATE_NO_CACHE"


def enabled() -> bool:
    """False where ``$ABLATE_NO_CACHE`` is set to anything but empty or ``0``."""
    return os.environ.get(OFF_VAR, "") in ("", "0")


def checks_dir() -> Path:
    """Where passed checks are kept (the module's docstring says why there)."""
    from ablate.stores import user_cache

    given = os.environ.get(DIR_VAR)
    return (Path(given) if given else user_cache()) / "checks"


@functools.cache
def _ablate_code() -> str:
    """sha256 of ablate's own Python files: the check runs ablate's model code as well as the
    plug-in's, and ``CODE_VERSION`` is not bumped for every edit of it (~30 ms, once a process)."""
    root = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


@functools.cache
def versions() -> dict[str, str]:
    """What, besides the caller's parts, decides a check's outcome: ablate's version and code;
    torch's and Python's versions (read from metadata: torch is not imported)."""
    from importlib.metadata import PackageNotFoundError, version

    def of(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "?"

    return {"ablate": of("ablate"), "ablate_code": _ablate_code(),
            "torch": of("torch"), "python": platform.python_version()}


def key(parts: dict[str, Any]) -> str:
    """A stable hash of ``parts`` (JSON-able; key order does not count) and ``versions()``."""
    text = json.dumps({"parts": parts, "versions": versions()}, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def recall(entry: str) -> dict[str, Any] | None:
    """The record a passed check left under ``entry`` (a ``key``); None: none, the cache is off,
    or the file cannot be read as a record (then the next pass overwrites it)."""
    if not enabled():
        return None
    try:
        record = json.loads((checks_dir() / f"{entry}.json").read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and record.get("key") == entry else None


def remember(entry: str, record: dict[str, Any]) -> None:
    """Keep ``record`` of a passed check under ``entry``; a cache that cannot be written is only
    not kept (the check runs again next time)."""
    if not enabled():
        return
    folder = checks_dir()
    with contextlib.suppress(OSError):
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{entry}-", suffix=".tmp", dir=folder)
        try:
            with os.fdopen(fd, "w") as f:
                json.dump({**record, "key": entry}, f)
            os.replace(tmp, folder / f"{entry}.json")
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
