"""The shapes of ``model.init``: one per built-in initialisation scheme (``RingInit``,
``RotrnnInit``), and ``PluginInit``, the base of a plug-in scheme's parameters (docs/plugins.md);
``Init`` tells them apart by ``scheme``. The schemes themselves are ``ablate.models.inits``."""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import (
    Discriminator,
    Field,
    PlainSerializer,
    PlainValidator,
    Tag,
    ValidationError,
    ValidationInfo,
    model_validator,
)
from pydantic.json_schema import WithJsonSchema
from pydantic_core import InitErrorDetails, PydanticCustomError

from ablate import plugins
from ablate.models import catalogue
from ablate.spec.basemodel import Strict
from ablate.spec.basemodel import deferred as _deferred
from ablate.spec.errors import not_a_plugin

TWO_PI = 2 * math.pi  # a phase past a full turn repeats one below it


class RingInit(Strict):
    """LRU ring initialisation: |λ|² ~ U[r_min², r_max²], phase ~ U[0, max_phase]."""

    scheme: Literal["ring"] = "ring"
    r_min: float = Field(0.9, ge=0.0, lt=1.0, description="smallest eigenvalue magnitude")
    r_max: float = Field(0.999, gt=0.0, lt=1.0, description="largest eigenvalue magnitude")
    max_phase: float = Field(6.283, ge=0.0, le=TWO_PI, description="phases drawn from [0, max_phase]")
    identity_basis: bool = Field(False, description="rotation only: fix P = I instead of learning it")

    @model_validator(mode="after")
    def _ordered(self, info: ValidationInfo) -> RingInit:
        if self.r_min > self.r_max and not _deferred(info):
            raise ValueError(f"r_min ({self.r_min}) must not exceed r_max ({self.r_max})")
        return self


class RotrnnInit(Strict):
    """RotRNN initialisation: −log γ log-uniform between −log γ_max and −log γ_min, θ ~ U[0, max_phase]."""

    scheme: Literal["rotrnn"] = "rotrnn"
    gamma_min: float = Field(0.5, gt=0.0, lt=1.0, description="smallest decay γ")
    gamma_max: float = Field(0.999, gt=0.0, lt=1.0, description="largest decay γ")
    max_phase: float = Field(0.0314, ge=0.0, le=TWO_PI, description="rotation angles drawn from [0, max_phase]")
    identity_basis: bool = Field(False, description="fix P = I instead of learning it")

    @model_validator(mode="after")
    def _ordered(self, info: ValidationInfo) -> RotrnnInit:
        if self.gamma_min > self.gamma_max and not _deferred(info):
            raise ValueError(f"gamma_min ({self.gamma_min}) must not exceed gamma_max ({self.gamma_max})")
        return self


class PluginInit(Strict):
    """The parameters of an initialisation scheme from a plug-in (docs/plugins.md): its scheme
    class's ``Params``, a subclass of this one that adds its own fields (strict, with their bounds
    and defaults, as ``RingInit`` and ``RotrnnInit`` declare theirs)."""

    scheme: str = Field(description="an installed plug-in's name, or package.module:attribute")
    max_phase: float = Field(0.0314, ge=0.0, le=TWO_PI, description="phases drawn from [0, max_phase]")
    identity_basis: bool = Field(False, description="rotation only: fix P = I instead of learning it")


#: The built-in schemes' parameter models by name (``ablate.spec.paths`` says which holds a key).
BUILTIN_INITS: dict[str, type[Strict]] = {m.model_fields["scheme"].default: m for m in (RingInit, RotrnnInit)}

PLUGIN_INIT_TAG = "plugin-init"  # the union's tag of a plug-in scheme (spec.errors hides it from paths)


def _init_tag(value: Any) -> str | None:
    scheme = value.get("scheme") if isinstance(value, dict) else getattr(value, "scheme", None)
    if scheme is None:
        return None
    # a built-in name is told without looking for plug-ins (a spec of built-ins reads no entry points)
    return scheme if scheme in catalogue.INIT_SCHEMES.builtin_names else PLUGIN_INIT_TAG


def plugin_init_params(scheme: str) -> type[PluginInit]:
    """The parameter model of a plug-in init scheme (its class's ``Params``, else ``PluginInit``);
    ValueError naming the valid schemes, built-in and plug-in (the closest one too), for an unknown
    name, or saying why the plug-in cannot be used."""
    levels = catalogue.INIT_SCHEMES
    if not isinstance(scheme, str) or not levels.accepts(scheme):
        raise ValueError(not_a_plugin(scheme, levels.builtin_names, levels.plugins()))
    try:
        cls = levels.load(scheme)
    except plugins.PluginError as exc:
        raise ValueError(str(exc)) from None
    params = getattr(cls, "Params", None) or PluginInit  # none declared: max_phase and identity_basis only
    if not (isinstance(params, type) and issubclass(params, PluginInit)):
        raise ValueError(f"initialisation plug-in {scheme!r}: its Params is not a subclass of ablate.spec.PluginInit")
    return params


def _plugin_init(value: Any, info: ValidationInfo) -> PluginInit:
    if isinstance(value, PluginInit):
        return value
    if not isinstance(value, dict):
        raise ValueError("must be a mapping with a 'scheme' and that scheme's parameters")
    try:
        params = plugin_init_params(value["scheme"])
    except ValueError as exc:  # reported at model.init.scheme, where the name was written
        raise ValidationError.from_exception_data("init", [InitErrorDetails(
            type=PydanticCustomError("init_scheme", "{message}", {"message": str(exc)}),
            loc=("scheme",), input=value["scheme"])]) from None
    # its errors keep their keys (model.init.r_min), as a built-in scheme's do
    return params.model_validate(value, context=info.context)


PluginInitValue = Annotated[
    PluginInit,
    PlainValidator(_plugin_init),
    PlainSerializer(lambda v, info: v.model_dump(mode=info.mode)),
    WithJsonSchema({"type": "object", "properties": {"scheme": {"type": "string"}}, "required": ["scheme"],
                    "title": "a plug-in scheme and its parameters"}),
]

InitSpec = RingInit | RotrnnInit | PluginInit  # one shape per built-in scheme of catalogue.INIT_SCHEMES, then plug-ins'
Init = Annotated[
    Annotated[RingInit, Tag("ring")] | Annotated[RotrnnInit, Tag("rotrnn")]
    | Annotated[PluginInitValue, Tag(PLUGIN_INIT_TAG)],
    Discriminator(_init_tag, custom_error_type="union_tag_not_found",
                  custom_error_context={"discriminator": "'scheme'"}),
]
