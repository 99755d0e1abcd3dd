"""The model zoo: composable linear recurrences, minGRU/minLSTM, torch baselines, the network.

    build_model(model_spec, task) -> Network

``ablate.models.catalogue`` names every level of every model factor and where it is implemented.
Attributes load lazily (PEP 562), so importing the registry does not import torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "Block": "ablate.models.network",
    "Network": "ablate.models.network",
    "build_model": "ablate.models.network",
    "LinearRecurrence": "ablate.models.recurrent",
    "RecurrentLayer": "ablate.models.recurrent",
    "System": "ablate.models.parameterisations",
}

__all__ = ["Block", "LinearRecurrence", "Network", "RecurrentLayer", "System", "build_model"]


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])
