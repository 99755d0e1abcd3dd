"""The base of every spec model, and the validation context that defers the checks of how a
model's values fit together (``ablate.spec.models``, ``ablate.spec.init_params``)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, ValidationInfo


class Strict(BaseModel):
    """Unknown keys are errors, and types are strict where a user would be surprised: a boolean is
    never a number, quoted text never a number, 2.0 never an integer (an integer is a number)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False, strict=True)


# Validation context key: leave out the checks of how a model's (or init's) values fit together
# (heads dividing state_dim, ordered bounds). ``parse(..., combinations=False)`` sets it for the
# baseline of a spec, whose combinations matter only where a cell keeps them (ablate.design
# validates every resolved cell in full).
DEFER_COMBINATIONS = "defer_combinations"


def deferred(info: ValidationInfo) -> bool:
    return bool(info.context and info.context.get(DEFER_COMBINATIONS))
