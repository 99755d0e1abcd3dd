"""The on-disk cache of generated tasks: one ``.npz`` per (name, params, generator version).

Files are written to a temporary name and renamed into place, so a reader never sees half a
file; a lock file keeps concurrent workers from generating the same task twice.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from filelock import FileLock

from ablate.tasks.data import SPLITS, Generated

FORMAT_VERSION = 1
"""Version of the cache layout and of the shared code (splitting, chance); bump on change."""

ENV_VAR = "ABLATE_CACHE_DIR"


def cache_root(cache_dir: Path | str | None = None) -> Path:
    """``cache_dir``, else ``$ABLATE_CACHE_DIR``, else ``~/.cache/ablate/tasks``."""
    if cache_dir is not None:
        return Path(cache_dir)
    if os.environ.get(ENV_VAR):
        return Path(os.environ[ENV_VAR])
    return Path.home() / ".cache" / "ablate" / "tasks"


def data_version(name: str, params: dict[str, Any], generator_version: int) -> str:
    """A short hash of the task name, its parameters and the versions of the code generating it."""
    key = json.dumps(
        {"name": name, "params": params, "generator": generator_version, "format": FORMAT_VERSION},
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def cache_path(root: Path, name: str, version: str) -> Path:
    return root / f"{name}-{version}.npz"


def save(path: Path, gen: Generated, meta: dict[str, Any]) -> None:
    """Write atomically: a temporary file in the same directory, then ``os.replace``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays = {f"{split}_{part}": gen.splits[split][i] for split in SPLITS for i, part in enumerate("xy")}
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}-", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez_compressed(f, meta=np.array(json.dumps(meta)), **arrays)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes it private; the cache may be shared
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def load(path: Path) -> tuple[dict[str, tuple[np.ndarray, np.ndarray]], dict[str, Any]]:
    with np.load(path, allow_pickle=False) as z:
        meta = json.loads(str(z["meta"]))
        splits = {s: (z[f"{s}_x"], z[f"{s}_y"]) for s in SPLITS}
    return splits, meta


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path.lock`` across processes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(path.with_suffix(".lock")):
        yield
