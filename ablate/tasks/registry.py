"""Task names, their parameter models and their builders, importable without torch.

Each task module defines a ``TaskParams`` subclass and a ``build`` function decorated with
``@register_task(name, Params, version=k)`` (``ablate.tasks.registration``: the task modules
import that, not this, so that this module can import them). Importing this module imports every task module
(listed in ``TASK_MODULES``), so ``BUILTIN_TASK_NAMES`` is complete as soon as it is imported. Task
modules import numpy at most; torch is only imported by ``ablate.tasks.load_task``.

Tasks from outside the package (``ablate.plugins``): the entry points of group ``ablate.tasks``
name a builder decorated with ``register_task`` under the entry's name; their modules are imported
on first need — a name that is not a built-in's, or ``TASK_NAMES`` (built-ins, then plug-ins) — and
one that fails is recorded in ``PLUGIN_ERRORS``, its name failing with the import's message. A spec may also name a registered builder by path, ``task.name:
package.module:build``.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any

from ablate import plugins
from ablate.tasks.registration import REGISTERED as _REGISTRY
from ablate.tasks.registration import TaskEntry, TaskParams, register_task

__all__ = ["BUILTIN_TASK_NAMES", "TASK_MODULES", "TaskEntry", "TaskParams", "memory_limit", "memory_problem",
           "register_task", "task_entry", "task_names", "task_params_model"]

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
    import difflib

    close = difflib.get_close_matches(name, list(_REGISTRY), n=1) if isinstance(name, str) and len(name) < 100 else []
    return ValueError(f"{name!r} is not one of: {', '.join(_REGISTRY)}; or a plug-in as package.module:build"
                      + (f"; did you mean {close[0]!r}?" if close else ""))


#: Task plug-in name → why it could not be loaded (its import's message).
PLUGIN_ERRORS: dict[str, str] = {}


def _by_path(target: str) -> TaskEntry:
    """The entry of a builder a spec names by ``module:attribute`` (registered when imported)."""
    plugin = plugins.by_path("task", target)
    try:
        build = plugin.load()
    except plugins.PluginError as exc:
        raise ValueError(str(exc)) from None
    for entry in list(_REGISTRY.values()):
        if entry.build is build:
            return _sourced(dataclasses.replace(entry, name=target, plugin=plugin))
    raise ValueError(f"task plug-in {target!r}: not a builder registered with ablate.tasks.register_task")


def task_entry(name: str) -> TaskEntry:
    """The registered entry of ``name`` (or a builder by path); ``ValueError`` listing the valid
    names otherwise, or saying why a plug-in task could not be loaded."""
    if name not in BUILTIN_TASK_NAMES:
        _ensure_plugins()
    if isinstance(name, str) and name in PLUGIN_ERRORS:
        raise ValueError(PLUGIN_ERRORS[name])
    if isinstance(name, str) and name not in _REGISTRY and plugins.is_target(name):
        return _by_path(name)
    if not isinstance(name, str) or name not in _REGISTRY:
        raise _unknown(name)
    return _sourced(_REGISTRY[name])


def _sourced(entry: TaskEntry) -> TaskEntry:
    """A plug-in's entry with its source hash in its version: an edited generator, new data."""
    if entry.plugin is None:
        return entry
    try:
        source = plugins.source_hash(entry.plugin)
    except plugins.PluginError as exc:
        raise ValueError(str(exc)) from None
    return dataclasses.replace(entry, version=f"{entry.version}+{source}")


def plugin_of(name: str) -> plugins.Plugin | None:
    """The plug-in that provides task ``name``; None for a built-in task."""
    return task_entry(name).plugin


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

BUILTIN_TASK_NAMES: tuple[str, ...] = tuple(_REGISTRY)


def _load_plugins() -> None:
    for plugin in plugins.installed_of("task"):
        if plugin.name in BUILTIN_TASK_NAMES:  # a built-in name is never replaced
            continue
        try:
            plugin.load()
        except (plugins.PluginError, ValueError) as exc:
            PLUGIN_ERRORS[plugin.name] = str(exc)
            continue
        if plugin.name not in _REGISTRY:
            PLUGIN_ERRORS[plugin.name] = (f"task plug-in {plugin.name!r} ({plugin.target}): its module registered "
                                          f"no task named {plugin.name!r} (register_task({plugin.name!r}, ...))")
            continue
        _REGISTRY[plugin.name] = dataclasses.replace(_REGISTRY[plugin.name], plugin=plugin)


_loaded = False


def _ensure_plugins() -> None:
    global _loaded
    if not _loaded:
        _loaded = True
        _load_plugins()


def task_names() -> tuple[str, ...]:
    """Every task name: the built-ins, then the installed plug-ins'."""
    _ensure_plugins()
    return tuple(_REGISTRY)


def __getattr__(name: str) -> tuple[str, ...]:
    # TASK_NAMES is read on first use: a spec of built-in tasks never looks for plug-ins
    if name == "TASK_NAMES":
        return task_names()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
