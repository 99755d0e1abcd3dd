"""Task names, their parameter models and their builders, importable without torch.

Each task module defines a ``TaskParams`` subclass and a ``build`` function decorated with
``@register_task(name, Params, version=k)`` (``ablate.tasks.registration``: the task modules
import that, not this, so that this module can import them). Importing this module imports every task module
(listed in ``TASK_MODULES``), so ``TASK_NAMES`` is complete as soon as it is imported. Task
modules import numpy at most; torch is only imported by ``ablate.tasks.load_task``.
"""

from __future__ import annotations

import importlib
from typing import Any

from ablate.tasks.registration import REGISTERED as _REGISTRY
from ablate.tasks.registration import TaskEntry, TaskParams, register_task

__all__ = ["TASK_MODULES", "TASK_NAMES", "TaskEntry", "TaskParams", "memory_limit", "memory_problem",
           "register_task", "task_entry", "task_params_model"]

TASK_MODULES = (
    "listops",
    "selective_copy",
    "associative_recall",
    "induction_heads",
    "adding",
    "delayed_copy",
    "digits",
    "fashion_mnist",
    "shakespeare",
    "speech_words",
)


def _unknown(name: object) -> ValueError:
    return ValueError(f"{name!r} is not one of: {', '.join(_REGISTRY)}")


def task_entry(name: str) -> TaskEntry:
    """The registered entry of ``name``; ``ValueError`` listing the valid names otherwise."""
    if not isinstance(name, str) or name not in _REGISTRY:
        raise _unknown(name)
    return _REGISTRY[name]


def task_params_model(name: str) -> type[TaskParams]:
    """The parameter model of task ``name``; ``ValueError`` listing the valid names otherwise."""
    return task_entry(name).params


# Bytes per value of a task's data once loaded: an int64 input and an int64 per-step target
# (ablate.tasks.load_task), and per example what generation holds besides (the row's array, its
# key in the de-duplication set): an estimate, on the high side.
BYTES_PER_VALUE = 16
BYTES_PER_EXAMPLE = 256


def memory_limit() -> int:
    """Bytes a task's data may take: half of this machine's memory (or of its cgroup's limit)."""
    import os

    total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    try:
        with open("/sys/fs/cgroup/memory.max") as f:
            text = f.read().strip()
        if text.isdigit():
            total = min(total, int(text))
    except OSError:
        pass
    return total // 2


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if n < 1000 or unit == "PB":
            return f"{n:,.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1000
    return ""  # pragma: no cover


def memory_problem(task: dict[str, Any]) -> tuple[str, str] | None:
    """(parameter, message) when a valid task's data would not fit in this machine's memory
    (``memory_limit``), with the bound; None when they fit (or a fixed data set sets them)."""
    entry = task_entry(task["name"])
    params = entry.params.model_validate({k: v for k, v in task.items() if k != "name"})
    shape = params.data_shape()
    if shape is None:
        return None
    examples, steps, features = shape
    per_example = steps * features * BYTES_PER_VALUE + BYTES_PER_EXAMPLE
    need, limit = examples * per_example, memory_limit()
    if need <= limit:
        return None
    train = getattr(params, "train_size", None)
    most = limit // per_example - (examples - train) if train is not None else 0
    bound = f"at most about {max(0, most):,} training examples of this length fit" if train is not None else \
        "shorten the sequences or use fewer examples"
    return ("train_size" if train is not None else "",
            f"its data would take about {_size(need)} in memory ({examples:,} examples of up to {steps:,} steps); "
            f"a task may take half of this machine's {_size(limit * 2)}: {bound}")


for _module in TASK_MODULES:
    importlib.import_module(f"ablate.tasks.{_module}")

TASK_NAMES: tuple[str, ...] = tuple(_REGISTRY)
