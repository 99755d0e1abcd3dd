"""How a task module registers itself: its parameter model's base, its entry, the decorator.

The task modules import this (never ``ablate.tasks.registry``, which imports them all), so the
registry and its tasks form no import circle.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from ablate.plugins import Plugin

if TYPE_CHECKING:
    from ablate.tasks.data import BuildContext, Generated

__all__ = ["REGISTERED", "Builder", "TaskEntry", "TaskParams", "register_task"]


class TaskParams(BaseModel):
    """Parameters shared by every task; each task subclasses this with its own. Types are strict
    (a boolean is never a number, 2.0 never an integer), as in the rest of a spec."""

    model_config = ConfigDict(extra="forbid", strict=True)

    # ge=0: numpy's SeedSequence refuses a negative seed, which failed every item at run time.
    seed: int = Field(0, ge=0, description="seed of generation and of the split; same seed, same tensors")

    def data_shape(self) -> tuple[int, int, int] | None:
        """(examples, time steps, features per step) of the data generated at most: what bounds
        its memory (``memory_problem``); None where a fixed data set sets them."""
        return None


Builder = Callable[[Any, "BuildContext"], "Generated"]


@dataclass(frozen=True)
class TaskEntry:
    name: str
    params: type[TaskParams]
    build: Builder
    version: int | str
    """Generator version: bump it whenever the generated data change, so caches are invalidated.
    A plug-in's reads ``"k+<source hash>"`` (``ablate.tasks.registry.task_entry``): its edits do too."""
    plugin: Plugin | None = None
    """Set for a task from outside the package (``ablate.plugins``): its identity enters cell ids."""


#: Task name → its entry, filled by ``register_task`` as the task modules are imported.
REGISTERED: dict[str, TaskEntry] = {}

def register_task(name: str, params: type[TaskParams], *, version: int) -> Callable[[Builder], Builder]:
    """Decorator registering ``build(params, ctx) -> Generated`` as task ``name``."""

    def decorate(build: Builder) -> Builder:
        if name in REGISTERED and REGISTERED[name].build is not build:
            raise ValueError(f"task {name!r} is registered twice")
        REGISTERED[name] = TaskEntry(name=name, params=params, build=build, version=version)
        return build

    return decorate
