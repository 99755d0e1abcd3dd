"""Tasks: registered by name, generated deterministically from a seed, cached on disk.

``load_task({"name": "listops", **params})`` returns ``TaskData`` with train / val / test
tensors and a ``TaskInfo``. Importing this package does not import torch (the spec validator
imports ``ablate.tasks.registry``); ``load_task`` does.

Layout: token inputs are int64 (N, L), right-padded with id 0; continuous inputs are float32
(N, L, input_dim), roughly standardised. Classification targets are int64 (N,); per-step
targets int64 (N, L) with -100 where nothing is scored. A new task is one module defining a
``TaskParams`` subclass and a ``build(params, ctx) -> Generated`` decorated with
``register_task``, listed in ``registry.TASK_MODULES``.
"""

from __future__ import annotations

import warnings
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from ablate.tasks import cache
from ablate.tasks.data import SPLITS, BuildContext, Generated, TaskData, TaskInfo, chance_level
from ablate.tasks.progress_bar import Reporter
from ablate.tasks.registry import task_entry, task_names, task_params_model

__all__ = ["TASK_NAMES", "TaskData", "TaskInfo", "load_task", "task_params_model", "task_cache_path"]


def _resolve(task: dict[str, Any]) -> tuple[str, dict[str, Any], str]:
    if "name" not in task:
        raise ValueError("a task needs a 'name'")
    name = task["name"]
    entry = task_entry(name)
    params = entry.params.model_validate({k: v for k, v in task.items() if k != "name"})
    dumped = params.model_dump(mode="json")
    return name, dumped, cache.data_version(name, dumped, entry.version)


def task_cache_path(task: dict[str, Any], cache_dir: Path | None = None) -> Path:
    """Where ``load_task`` keeps (or will keep) this task's generated data."""
    name, _, version = _resolve(task)
    return cache.cache_path(cache.cache_root(cache_dir), name, version)


def load_task(task: dict[str, Any], cache_dir: Path | None = None, *, progress: bool = True) -> TaskData:
    """Load ``{"name": ..., **params}`` from the cache, generating and caching it on a miss.

    The cache is ``cache_dir``, else ``$ABLATE_CACHE_DIR``, else ``~/.cache/ablate/tasks``.
    ``progress=False`` silences the progress bar that appears when generation is slow.
    """
    name, params, version = _resolve(task)
    root = cache.cache_root(cache_dir)
    path = cache.cache_path(root, name, version)
    data = _read_cached(path)
    if data is not None:
        return data
    with cache.locked(path):
        data = _read_cached(path)  # another process may have generated it while we waited
        if data is not None:
            return data
        entry = task_entry(name)
        with Reporter(name, enabled=progress) as reporter:
            gen = entry.build(entry.params.model_validate(params), BuildContext(reporter, root))
        meta = _meta(gen, name, params, version)
        cache.save(path, gen, meta)
    return _to_torch(gen.splits, meta)


def _read_cached(path: Path) -> TaskData | None:
    """The cached task, or None when absent or unreadable (then it is generated again)."""
    if not path.exists():
        return None
    try:
        splits, meta = cache.load(path)
    except (OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:
        warnings.warn(f"regenerating {path.name}: the cached file is unreadable ({exc})", stacklevel=3)
        return None
    return _to_torch(splits, meta)


def _meta(gen: Generated, name: str, params: dict[str, Any], version: str) -> dict[str, Any]:
    for split in SPLITS:
        x, y = gen.splits[split]
        if len(x) != len(y) or len(x) == 0:
            raise RuntimeError(f"{name}: split {split!r} has {len(x)} inputs and {len(y)} targets")
    info = TaskInfo(
        name=name,
        input_kind=gen.input_kind,
        vocab_size=gen.vocab_size,
        input_dim=gen.input_dim,
        num_classes=gen.num_classes,
        output_kind=gen.output_kind,
        metric=gen.metric,
        chance=chance_level(gen),
        seq_len=int(gen.splits["train"][0].shape[1]),
        data_version=version,
    )
    return {
        "info": info.__dict__,
        "params": params,
        "x_shift": gen.x_shift,
        "x_scale": gen.x_scale,
        "extra": gen.extra,
    }


def _to_torch(splits: dict[str, tuple[np.ndarray, np.ndarray]], meta: dict[str, Any]) -> TaskData:
    import torch

    info = TaskInfo(**meta["info"])
    out = {}
    for split in SPLITS:
        x, y = splits[split]
        if info.input_kind == "tokens":
            xt = torch.from_numpy(x.astype(np.int64))
        else:
            xf = x.astype(np.float32).reshape(len(x), x.shape[1], info.input_dim)
            xf -= np.asarray(meta["x_shift"], dtype=np.float32)
            xf /= np.asarray(meta["x_scale"], dtype=np.float32)
            xt = torch.from_numpy(xf)
        out[split] = (xt, torch.from_numpy(y.astype(np.int64)))
    return TaskData(info=info, **out)


def __getattr__(name: str) -> tuple[str, ...]:
    # TASK_NAMES (built-in and plug-in tasks) is read on first use, as ``registry.TASK_NAMES``
    if name == "TASK_NAMES":
        return task_names()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
