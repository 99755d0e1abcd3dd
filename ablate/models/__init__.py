"""The model zoo: composable linear recurrences, minGRU/minLSTM, torch baselines, the network.

    build_model(model_spec, task) -> Network

Registries map the names of ``ablate.choices`` to the class or function that implements them.
"""

from ablate.models.inits import INIT_SCHEMES
from ablate.models.network import (
    ACTIVATIONS,
    FAMILIES,
    NORMS,
    POOLINGS,
    Block,
    Network,
    build_model,
)
from ablate.models.normalisations import NORMALISATIONS
from ablate.models.parameterisations import PARAMETERISATIONS, System
from ablate.models.recurrent import NONLINEARITIES, LinearRecurrence, RecurrentLayer

__all__ = [
    "ACTIVATIONS",
    "FAMILIES",
    "INIT_SCHEMES",
    "NONLINEARITIES",
    "NORMALISATIONS",
    "NORMS",
    "PARAMETERISATIONS",
    "POOLINGS",
    "Block",
    "LinearRecurrence",
    "Network",
    "RecurrentLayer",
    "System",
    "build_model",
]
