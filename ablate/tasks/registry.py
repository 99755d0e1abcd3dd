"""Task names, their parameter models and their builders, importable without torch.

Each task module defines a ``TaskParams`` subclass and a ``build`` function decorated with
``@register_task(name, Params, version=k)``. Importing this module imports every task module
(listed in ``TASK_MODULES``), so ``TASK_NAMES`` is complete as soon as it is imported. Task
modules import numpy at most; torch is only imported by ``ablate.tasks.load_task``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from ablate.tasks.base import BuildContext, Generated


class TaskParams(BaseModel):
    """Parameters shared by every task; each task subclasses this with its own."""

    model_config = ConfigDict(extra="forbid")

    seed: int = Field(0, description="seed of generation and of the split; same seed, same tensors")


Builder = Callable[[Any, "BuildContext"], "Generated"]


@dataclass(frozen=True)
class TaskEntry:
    name: str
    params: type[TaskParams]
    build: Builder
    version: int
    """Generator version: bump it whenever the generated data change, so caches are invalidated."""


_REGISTRY: dict[str, TaskEntry] = {}

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


def register_task(name: str, params: type[TaskParams], *, version: int) -> Callable[[Builder], Builder]:
    """Decorator registering ``build(params, ctx) -> Generated`` as task ``name``."""

    def decorate(build: Builder) -> Builder:
        if name in _REGISTRY and _REGISTRY[name].build is not build:
            raise ValueError(f"task {name!r} is registered twice")
        _REGISTRY[name] = TaskEntry(name=name, params=params, build=build, version=version)
        return build

    return decorate


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


for _module in TASK_MODULES:
    importlib.import_module(f"ablate.tasks.{_module}")

TASK_NAMES: tuple[str, ...] = tuple(_REGISTRY)
