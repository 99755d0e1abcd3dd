"""A study spec: pydantic models, YAML loading, and errors that name the key path (and line).

The baseline (``task``, ``model``, ``train``, ``probes``) is one complete configuration;
``factors`` move dotted paths of it through levels; ``design``, ``exclude``/``include`` and
``when`` choose the cells; ``tune`` searches some paths per cell before replicating the best.
The meaning of factors, designs and constraints lives in ``ablate.design``; this module holds
their shape, the YAML loader (safe, bounded, duplicate keys refused, line numbers kept),
``extends`` and ``--set``. Everything here is torch-free so ``validate`` and ``plan`` answer fast.
"""

from __future__ import annotations

import copy
import difflib
import re
import types
import typing
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainValidator,
    ValidationError,
    field_validator,
    model_validator,
)

from ablate import choices
from ablate.tasks.registry import task_params_model

# --- limits: a spec is refused, with a message, past these --------------------------------------

MAX_BYTES = 1_000_000  # a spec file
MAX_NODES = 100_000  # YAML nodes after expanding aliases (bounds "billion laughs")
MAX_DEPTH = 48  # nesting of YAML collections
MAX_EXTENDS = 16  # length of an extends chain
MAX_CELLS = 10_000  # cells a design may enumerate (before exclude/include)
MAX_SEEDS = 1_000
MAX_TUNE_TRIALS = 1_000
MAX_ITEMS = 200_000  # trials of a study: cells × (tuning trials + seeds)
MAX_SEED = 2**31 - 1
TUNE_SEED_BASE = 10_000  # tune.seeds: k means seeds 10000 … 10000+k−1


class SpecError(Exception):
    """A spec is invalid. ``problems`` holds (key path, message) pairs; ``where`` the matching
    "file:line" locations (or None) when the spec came from a file."""

    def __init__(self, problems: list[tuple[str, str]], where: list[str | None] | None = None):
        self.problems = problems
        self.where = where if where is not None else [None] * len(problems)
        lines = []
        for (path, msg), at in zip(problems, self.where, strict=True):
            line = f"{path}: {msg}" if path else msg
            lines.append(f"{at}: {line}" if at else line)
        super().__init__("\n".join(lines))


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


def _choice(names: tuple[str, ...]) -> Any:
    return Literal[names]  # type: ignore[valid-type]


# --- the baseline -------------------------------------------------------------------------------


class RingInit(Strict):
    """LRU ring initialisation: |λ|² ~ U[r_min², r_max²], phase ~ U[0, max_phase]."""

    scheme: Literal["ring"] = "ring"
    r_min: float = Field(0.9, ge=0.0, lt=1.0, description="smallest eigenvalue magnitude")
    r_max: float = Field(0.999, gt=0.0, lt=1.0, description="largest eigenvalue magnitude")
    max_phase: float = Field(6.283, ge=0.0, description="phases drawn from [0, max_phase]")
    identity_basis: bool = Field(False, description="rotation only: fix P = I instead of learning it")

    @model_validator(mode="after")
    def _ordered(self) -> RingInit:
        if self.r_min > self.r_max:
            raise ValueError(f"r_min ({self.r_min}) must not exceed r_max ({self.r_max})")
        return self


class RotrnnInit(Strict):
    """RotRNN initialisation: −log γ log-uniform between −log γ_max and −log γ_min, θ ~ U[0, max_phase]."""

    scheme: Literal["rotrnn"] = "rotrnn"
    gamma_min: float = Field(0.5, gt=0.0, lt=1.0, description="smallest decay γ")
    gamma_max: float = Field(0.999, gt=0.0, lt=1.0, description="largest decay γ")
    max_phase: float = Field(0.0314, ge=0.0, description="rotation angles drawn from [0, max_phase]")
    identity_basis: bool = Field(False, description="fix P = I instead of learning it")

    @model_validator(mode="after")
    def _ordered(self) -> RotrnnInit:
        if self.gamma_min > self.gamma_max:
            raise ValueError(f"gamma_min ({self.gamma_min}) must not exceed gamma_max ({self.gamma_max})")
        return self


Init = Annotated[RingInit | RotrnnInit, Field(discriminator="scheme")]


class ModelSpec(Strict):
    """The network: an encoder, ``layers`` residual blocks around a recurrence, a head."""

    family: _choice(choices.FAMILIES) = Field("linear_rnn", description="model family")
    d_model: int = Field(64, ge=1, le=65_536, description="width of the residual stream")
    state_dim: int = Field(64, ge=2, le=65_536, description="N: real state size per layer (complex modes count twice)")
    layers: int = Field(2, ge=1, le=1_024, description="residual blocks")
    parameterisation: _choice(choices.PARAMETERISATIONS) = Field("rotation", description="how the state matrix is built")
    normalisation: _choice(choices.NORMALISATIONS) = Field("xi", description="input scaling of the recurrence")
    heads: int = Field(1, ge=1, le=65_536, description="groups of state sharing a decay (rotation) / a ξ")
    nonlinearity: _choice(choices.NONLINEARITIES) = Field("none", description="inside the recurrence; none = linear scan")
    activation: _choice(choices.ACTIVATIONS) = Field("gelu", description="between layers")
    norm: _choice(choices.NORMS) = Field("layer", description="pre-norm of each block")
    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    bidirectional: bool = False
    pooling: _choice(choices.POOLINGS) = Field("mean", description="sequence pooling before a classification head")
    init: Init = Field(default_factory=RotrnnInit, description="initialisation scheme and its parameters")

    @model_validator(mode="after")
    def _state_shape(self) -> ModelSpec:
        if self.family != "linear_rnn":
            return self
        if self.parameterisation in ("rotation", "complex_diagonal") and self.state_dim % 2:
            raise ValueError(f"state_dim must be even for {self.parameterisation} (got {self.state_dim})")
        units = self.state_dim // 2 if self.parameterisation == "complex_diagonal" else self.state_dim
        if units % self.heads:
            what = "complex modes (state_dim/2)" if self.parameterisation == "complex_diagonal" else "state_dim"
            valid = [h for h in range(1, min(units, 4096) + 1) if units % h == 0]
            raise ValueError(f"heads ({self.heads}) must divide the {units} {what} for {self.parameterisation}; "
                             f"valid heads: {', '.join(map(str, valid))}")
        if self.parameterisation == "rotation" and (self.state_dim // self.heads) % 2:
            raise ValueError(
                f"rotation heads need an even size: state_dim/heads = {self.state_dim}/{self.heads} "
                f"is odd; valid heads here are 1 … {self.state_dim // 2} dividing {self.state_dim // 2}"
            )
        return self


class TrainSpec(Strict):
    """The optimisation of one trial: AdamW, linear warm-up then cosine decay."""

    steps: int = Field(300, ge=1, le=100_000_000, description="optimiser steps")
    batch_size: int = Field(32, ge=1, le=1_000_000)
    lr: float = Field(3e-3, gt=0.0, description="peak learning rate")
    recurrent_lr_factor: float = Field(0.5, gt=0.0, description="learning-rate factor for ν, θ, γ, M, B")
    weight_decay: float = Field(0.05, ge=0.0)
    warmup: float = Field(0.1, ge=0.0, lt=1.0, description="fraction of steps of linear warm-up")
    grad_clip: float = Field(1.0, ge=0.0, description="0 disables clipping")
    eval_every: int = Field(50, ge=1, description="steps between validation passes")
    log_every: int = Field(
        25, ge=1,
        description="steps between logged training metrics (five per log; each costs about 0.2 ms in a "
        "SQLite MLflow store: every 25 keeps logging under 1% of a small model's trial)",
    )
    divergence_norm: float = Field(1e6, gt=0.0, description="a state norm past this marks the run diverged")


class ProbeSpec(Strict):
    """Hidden-state norm probes on a fixed validation batch (do not change a cell's identity)."""

    every: int = Field(
        100, ge=1,
        description="steps between hidden-state norm probes (one probe costs about one training step "
        "of a small model: every 100 keeps probes near 1% of a trial's time)",
    )
    batch: int = Field(64, ge=1, description="size of the fixed probe batch")
    enabled: bool = Field(True, description="false: no probes (training-batch norms still guard divergence)")
    white_noise: bool = Field(True, description="also probe each recurrent layer with unit-variance Gaussian input")
    white_noise_batch: int = Field(32, ge=1, description="sequences in the white-noise probe")
    white_noise_seed: int = Field(0, ge=0, description="seed of the white-noise input (the same in every trial)")
    theory: bool = Field(True, description="record the white-input theory E‖x_t‖² of each linear layer")
    spectrum: bool = Field(True, description="record |λ|, phase, per-head decay and input scale per layer")
    grads: bool = Field(True, description="record gradient norms per parameter group at probe steps")


def resolve_task(raw: Any) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """Validate a task mapping against its registered parameters; defaults filled."""
    if not isinstance(raw, dict):
        return {}, [("task", "must be a mapping with a 'name' and that task's parameters")]
    if "name" not in raw:
        return {}, [("task.name", "required key is missing")]
    try:
        params_model = task_params_model(raw["name"])
    except ValueError as exc:
        return {}, [("task.name", str(exc))]
    except TypeError:  # an unhashable name
        return {}, [("task.name", f"{raw['name']!r} is not a task name")]
    try:
        params = params_model.model_validate({k: v for k, v in raw.items() if k != "name"})
    except ValidationError as exc:
        return {}, [(f"task.{p}" if p else "task", m) for p, m in _problems(exc, model=params_model)]
    return {"name": raw["name"], **params.model_dump()}, []


# --- factors, designs, tuning: shapes (their meaning is in ablate.design) -----------------------


class LabelledLevel(Strict):
    """A factor level with a name for reports: ``{label: RotRNN, value: …}``."""

    label: str = Field(description="what reports and frames show for this level")
    value: Any = Field(description="the level: a value of the factor's path, or for a named factor a "
                                   "mapping of dotted paths to values")


class FactorSpec(Strict):
    """The long form of a factor: its levels and an optional condition."""

    levels: list[Any] | dict[str, Any] = Field(
        description="a list of levels (each a value or {label:, value:}), or a mapping label → level")
    when: dict[str, Any] | None = Field(
        None, description="vary this factor only in cells matching all of these (factor or dotted path → "
                          "value or list of values); elsewhere it stays at the baseline")


def _identity(value: Any) -> Any:
    return value


Factor = Annotated[
    Any,
    PlainValidator(_identity, json_schema_input_type=list[LabelledLevel | Any] | FactorSpec | dict[str, Any]),
]
Match = dict[str, Any]


def _check_seeds(value: Any, what: str) -> int | list[int]:
    if isinstance(value, bool) or not isinstance(value, int | list):
        raise ValueError(f"must be a count (e.g. 3) or a list of seeds (e.g. [0, 1, 2]); got {value!r}")
    if isinstance(value, int):
        if not 1 <= value <= MAX_SEEDS:
            raise ValueError(f"a count of {what} must be between 1 and {MAX_SEEDS} (got {value})")
        return value
    if not value:
        raise ValueError(f"needs at least one {what[:-1]}")
    if len(value) > MAX_SEEDS:
        raise ValueError(f"at most {MAX_SEEDS} {what} (got {len(value)})")
    for i, seed in enumerate(value):
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
            raise ValueError(f"[{i}]: {seed!r} is not a seed (an integer from 0 to {MAX_SEED})")
    if len(set(value)) != len(value):
        dup = sorted({s for s in value if value.count(s) > 1})
        raise ValueError(f"repeats {', '.join(map(str, dup))}; each seed once")
    return list(value)


Scalar = str | bool | int | float


def _choices_short_form(value: Any) -> Any:
    return {"choices": value} if isinstance(value, list) else value


class TuneParam(Strict):
    """One dimension of a search space: a range (float or int, optionally log) or a list of choices."""

    low: float | None = Field(None, description="lower bound (inclusive)")
    high: float | None = Field(None, description="upper bound (inclusive)")
    log: bool = Field(False, description="sample on a log scale (low > 0)")
    step: float | None = Field(None, gt=0, description="quantisation step (not with log)")
    type: Literal["float", "int"] | None = Field(
        None, description="float or int; default: the type of the baseline value at this path")
    choices: list[Scalar] | None = Field(None, min_length=1, description="categorical: the values to choose from")

    @model_validator(mode="after")
    def _shape(self) -> TuneParam:
        if self.choices is not None:
            if self.low is not None or self.high is not None or self.log or self.step is not None:
                raise ValueError("give either choices or low/high, not both")
            if len({repr(c) for c in self.choices}) != len(self.choices):
                raise ValueError("choices repeat a value")
            return self
        if self.low is None or self.high is None:
            raise ValueError("needs low and high (a range) or choices (a list)")
        if self.low > self.high:
            raise ValueError(f"low ({self.low:g}) must not exceed high ({self.high:g})")
        if self.log and self.low <= 0:
            raise ValueError(f"log needs low > 0 (got {self.low:g})")
        if self.log and self.step is not None:
            raise ValueError("log and step cannot be combined")
        return self


TuneDim = Annotated[TuneParam, BeforeValidator(_choices_short_form, json_schema_input_type=TuneParam | list[Scalar])]

OBJECTIVE_METRICS = ("val_accuracy", "val_loss", "val_bpc")


class Objective(Strict):
    """What tuning optimises: a validation metric (never a test metric) and its direction."""

    metric: _choice(OBJECTIVE_METRICS) = Field("val_accuracy", description="validation metric of a tuning trial")
    direction: Literal["maximize", "minimize"] | None = Field(
        None, description="default: maximize for accuracy, minimize for loss and bpc")

    @property
    def resolved_direction(self) -> str:
        return self.direction or ("maximize" if self.metric.endswith("accuracy") else "minimize")


class TuneSpec(Strict):
    """Per cell: ``trials`` settings sampled from ``space`` on the tuning seeds; the best is then
    replicated on the spec's ``seeds``."""

    trials: int = Field(ge=1, le=MAX_TUNE_TRIALS, description="tuning trials per cell")
    space: dict[str, TuneDim] = Field(min_length=1, description="dotted path → range or choices")
    sampler: Literal["tpe", "random", "gp"] = Field("tpe", description="Optuna sampler")
    startup_trials: int | None = Field(
        None, ge=0, description="tpe/gp: random trials before modelling; default min(10, max(2, trials // 3))")
    seeds: int | list[int] = Field(
        1, description=f"tuning seeds: a count k (seeds {TUNE_SEED_BASE} … {TUNE_SEED_BASE}+k−1) or a list; "
                       "must be disjoint from the replicate seeds; trial i uses seed i mod k")
    objective: Objective = Field(default_factory=Objective)

    @field_validator("seeds", mode="plain", json_schema_input_type=int | list[int])
    @classmethod
    def _seeds(cls, v: Any) -> int | list[int]:
        return _check_seeds(v, "tuning seeds")

    @property
    def seed_list(self) -> list[int]:
        return [TUNE_SEED_BASE + i for i in range(self.seeds)] if isinstance(self.seeds, int) else list(self.seeds)

    @property
    def resolved_startup_trials(self) -> int:
        return self.startup_trials if self.startup_trials is not None else min(10, max(2, self.trials // 3))


REFERENCE_METRICS = ("test_accuracy", "val_accuracy", "test_loss", "val_loss", "test_bpc", "val_bpc")


class Reference(Strict):
    """A published number to set the study's results against (the accuracy report's table)."""

    metric: _choice(REFERENCE_METRICS) = Field("test_accuracy", description="the study's metric it compares with")
    value: float = Field(description="the published value")
    source: str = Field(min_length=1, description="where it was published, e.g. 'LRU paper, Table 1, ListOps'")
    confirmed: bool = Field(False, description="whether the value has been checked against the source")
    cell: Match = Field(
        default_factory=dict,
        description="the cell it corresponds to: factor or dotted path → level label or value; {} = the "
        "baseline. Checked like exclude/include: an unknown factor, path or level is an error")
    note: str = Field("", description="anything a reader should know (different setup, seeds, …)")


NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class Spec(Strict):
    """A study: a baseline, the factors that move it, which cells to run, seeds, tuning, reports."""

    name: str = Field(description="the study's name: its Optuna study and MLflow experiment")
    description: str = Field("", description="what the study asks")
    extends: str | list[str] | None = Field(
        None, exclude=True,
        description="base spec file(s), relative to this file; mappings merge key by key, this file wins")
    task: dict[str, Any] = Field(description="the task: `name` and that task's parameters")
    model: ModelSpec = Field(default_factory=ModelSpec, description="the baseline model")
    train: TrainSpec = Field(default_factory=TrainSpec, description="the baseline training")
    probes: ProbeSpec = Field(default_factory=ProbeSpec)
    factors: dict[str, Factor] = Field(
        default_factory=dict,
        description="factor name → levels. A dotted name (model.heads) moves that path; a plain name "
                    "(variant) is a named factor whose levels set several paths")
    design: Literal["full", "one_at_a_time", "cells"] = Field(
        "full", description="full factorial, each factor moved alone from the baseline, or the listed cells")
    cells: list[Match] = Field(
        default_factory=list, description="design: cells — one mapping factor → level (label or value) per cell")
    exclude: list[Match] = Field(default_factory=list, description="drop cells matching any entry")
    include: list[Match] = Field(
        default_factory=list, description="if given, keep only cells matching at least one entry")
    seeds: int | list[int] = Field(1, description="replicate seeds: a count k (0 … k−1) or a list")
    tune: TuneSpec | None = Field(None, description="per-cell tuning before replication")
    references: list[Reference] = Field(
        default_factory=list, description="published values to compare with in the accuracy report")
    reports: list[_choice(choices.REPORTS)] = Field(default_factory=lambda: list(choices.REPORTS))

    @model_validator(mode="before")
    @classmethod
    def _cells_imply_design(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("cells") and "design" not in data:
            data = {**data, "design": "cells"}
        return data

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not NAME.match(v):
            raise ValueError("use letters, digits, '_', '.', '-' and start with a letter or digit")
        return v

    @field_validator("seeds", mode="plain", json_schema_input_type=int | list[int])
    @classmethod
    def _seeds(cls, v: Any) -> int | list[int]:
        return _check_seeds(v, "seeds")

    @field_validator("factors", mode="before")
    @classmethod
    def _factor_names(cls, v: Any) -> Any:
        if isinstance(v, dict):
            for key in v:
                if not isinstance(key, str) or not key:
                    raise ValueError(f"factor names are text; got {key!r}")
        return v

    @property
    def seed_list(self) -> list[int]:
        return list(range(self.seeds)) if isinstance(self.seeds, int) else list(self.seeds)

    def baseline(self) -> dict[str, Any]:
        """The resolved baseline configuration (defaults filled) as plain data."""
        return self.model_dump(include={"task", "model", "train"})


# --- errors -----------------------------------------------------------------------------------

_QUOTED = re.compile(r"'([^']*)'")
_UNION_TAGS = ("ring", "rotrnn")


def _loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for i, part in enumerate(loc):
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in _UNION_TAGS and i and loc[i - 1] == "init":
            continue  # the discriminated union adds the tag to the path; the user never wrote it
        elif isinstance(part, str) and (part.startswith(("function-", "list[", "dict[")) or part in ("int", "str")):
            continue  # pydantic names a union member or validator; the user never wrote it
        else:
            out += ("." if out else "") + str(part)
    return out


def _message(err: dict[str, Any]) -> str:
    kind, ctx, value = err["type"], err.get("ctx") or {}, err.get("input")
    if kind == "literal_error":
        names = ", ".join(_QUOTED.findall(str(ctx.get("expected", ""))))
        return f"{_short(value)} is not one of: {names}"
    if kind == "union_tag_invalid":
        names = ", ".join(_QUOTED.findall(str(ctx.get("expected_tags", ""))))
        return f"{_short(ctx.get('tag'))} is not one of: {names}"
    if kind == "union_tag_not_found":
        return f"needs a '{ctx.get('discriminator', 'scheme').strip(chr(39))}' key"
    if kind == "extra_forbidden":
        return "unknown key"
    if kind == "missing":
        return "required key is missing"
    if kind == "finite_number":
        return "must be a finite number"
    msg = err["msg"]
    return msg.removeprefix("Value error, ")


def _short(value: Any, n: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= n else text[: n - 1] + "…"


def _problems(exc: ValidationError, model: type[BaseModel] | None = None) -> list[tuple[str, str]]:
    out = []
    for err in exc.errors():
        path = _loc(err["loc"])
        if err["type"] in ("union_tag_invalid", "union_tag_not_found"):
            path += ".scheme" if err["type"] == "union_tag_invalid" else ""
        if err["type"] == "extra_forbidden":
            msg = _unknown_key_message(err["loc"], model or Spec)
        else:
            msg = _message(err)
        if (path, msg) not in out:
            out.append((path, msg))
    return out


def _models_in(ann: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation may hold (through Optional, unions, Annotated)."""
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return [ann]
    origin = typing.get_origin(ann)
    if origin is Annotated:
        return _models_in(typing.get_args(ann)[0])
    if origin in (typing.Union, types.UnionType):
        return [m for arg in typing.get_args(ann) for m in _models_in(arg)]
    return []


def _unknown_key_message(loc: tuple[Any, ...], root: type[BaseModel]) -> str:
    """'unknown key' with the valid keys of the mapping it is in, and the closest one."""
    *parents, key = loc
    candidates: list[type[BaseModel]] = [root]
    i = 0
    while i < len(parents):
        part = parents[i]
        nxt: list[type[BaseModel]] = []
        for model in candidates:
            field = model.model_fields.get(part) if isinstance(part, str) else None
            if field is None:
                continue
            ann = field.annotation
            origin = typing.get_origin(ann)
            if origin in (dict, list):  # step over the key/index of a mapping/list of models
                ann = typing.get_args(ann)[-1]
                i += 1
            nxt += _models_in(ann)
        if len(nxt) > 1 and i + 1 < len(parents):  # a discriminated union: the next part is the tag
            tagged = [m for m in nxt if getattr(m.model_fields.get("scheme"), "default", None) == parents[i + 1]]
            if tagged:
                nxt, i = tagged, i + 1
        candidates = nxt
        i += 1
        if not candidates:
            return "unknown key"
    if len(candidates) != 1:
        return "unknown key"
    valid = list(candidates[0].model_fields)
    close = difflib.get_close_matches(str(key), valid, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"unknown key{hint} (valid: {', '.join(valid)})"


# --- YAML -------------------------------------------------------------------------------------

_ALLOWED_TAGS = {f"tag:yaml.org,2002:{t}" for t in ("str", "int", "float", "bool", "null", "map", "seq", "merge")}


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # libyaml's parser where built
    """Safe loading, stricter: duplicate keys and non-text keys are errors; dates stay text;
    only plain-data tags (str, int, float, bool, null, map, seq) are accepted."""

    yaml_implicit_resolvers = {
        first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[str, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, str):
                raise yaml.constructor.ConstructorError(
                    None, None, f"mapping keys must be text; {getattr(key_node, 'value', key)!r} reads as {key!r} "
                             "(quote it)", key_node.start_mark)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first at line {seen[key] + 1})", key_node.start_mark)
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)

    def construct_undefined(self, node: yaml.Node) -> Any:
        tag = node.tag.replace("tag:yaml.org,2002:", "!!")
        raise yaml.constructor.ConstructorError(
            None, None, f"tag {tag} is not allowed: a spec holds plain data (text, numbers, true/false, "
                        "lists, mappings)", node.start_mark)


for _tag in ("binary", "set", "omap", "pairs", "timestamp"):
    _Loader.add_constructor(f"tag:yaml.org,2002:{_tag}", _Loader.construct_undefined)
_Loader.add_constructor(None, _Loader.construct_undefined)


def _check_tree(node: yaml.Node, source: str) -> None:
    """Refuse deep nesting, recursive aliases and alias expansion past MAX_NODES (billion laughs)."""
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def size(n: yaml.Node, depth: int) -> int:
        key = id(n)
        if key in sizes:
            return sizes[key]
        if depth > MAX_DEPTH:
            raise SpecError([("", f"{source}: nesting deeper than {MAX_DEPTH} levels (line {n.start_mark.line + 1})")])
        if key in active:
            raise SpecError([("", f"{source}: an alias refers to itself (line {n.start_mark.line + 1})")])
        active.add(key)
        total = 1
        if isinstance(n, yaml.SequenceNode):
            total += sum(size(c, depth + 1) for c in n.value)
        elif isinstance(n, yaml.MappingNode):
            total += sum(size(k, depth + 1) + size(v, depth + 1) for k, v in n.value)
        active.discard(key)
        sizes[key] = total
        if total > MAX_NODES:
            raise SpecError([("", f"{source}: too large after expanding aliases (over {MAX_NODES:,} values); "
                                  "anchors and aliases must not multiply the spec")])
        return total

    size(node, 0)


def _line_map(node: yaml.Node | None) -> dict[str, int]:
    """Key path (as errors write it: a.b[0].c, dotted keys kept) → 1-based line."""
    lines: dict[str, int] = {}
    if node is None:
        return lines
    stack: list[tuple[yaml.Node, str]] = [(node, "")]
    while stack and len(lines) < MAX_NODES:
        n, path = stack.pop()
        if isinstance(n, yaml.MappingNode):
            for k, v in n.value:
                if not isinstance(k, yaml.ScalarNode) or k.tag == "tag:yaml.org,2002:merge":
                    continue
                sub = f"{path}.{k.value}" if path else str(k.value)
                lines.setdefault(sub, k.start_mark.line + 1)
                stack.append((v, sub))
        elif isinstance(n, yaml.SequenceNode):
            for i, v in enumerate(n.value):
                sub = f"{path}[{i}]"
                lines.setdefault(sub, v.start_mark.line + 1)
                stack.append((v, sub))
    return lines


def parse_yaml_lines(text: str | bytes, source: str = "<spec>") -> tuple[Any, dict[str, int]]:
    """Safe YAML → (plain data, key path → line). Errors are SpecError with the line."""
    if len(text) > MAX_BYTES:
        raise SpecError([("", f"{source} is {len(text):,} bytes; a spec is at most {MAX_BYTES:,}")])
    try:
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        depth = 0  # a cheap, non-recursive look at the nesting first: composing recurses
        for event in yaml.parse(text, Loader=_Loader):
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    raise SpecError([("", f"{source}: nesting deeper than {MAX_DEPTH} levels "
                                          f"(line {event.start_mark.line + 1})")])
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
        loader = _Loader(text)
        try:
            node = loader.get_single_node()
            if node is None:
                return None, {}
            _check_tree(node, source)
            data = loader.construct_document(node)
        finally:
            loader.dispose()
    except UnicodeDecodeError as exc:
        raise SpecError([("", f"{source} is not UTF-8 text ({exc.reason} at byte {exc.start})")]) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise SpecError([("", f"{source} is not valid YAML{where}: {problem}")]) from None
    except RecursionError:
        raise SpecError([("", f"{source}: nesting too deep")]) from None
    except SpecError:
        raise
    except Exception as exc:  # PyYAML's constructors fail on some odd scalars (e.g. an empty !!int)
        raise SpecError([("", f"{source} is not valid YAML: {type(exc).__name__} reading a value")]) from None
    return data, _line_map(node)


def parse_yaml(text: str | bytes, source: str = "<spec>") -> Any:
    """Safe YAML: plain data only; a tag that would construct Python objects is an error."""
    return parse_yaml_lines(text, source)[0]


# --- paths, overrides, extends ----------------------------------------------------------------


def set_path(data: dict[str, Any], path: str, value: Any) -> None:
    """Set a dotted path in nested dicts, creating nothing: every parent must exist."""
    *parents, key = path.split(".")
    node = data
    for part in parents:
        node = node[part]
        if not isinstance(node, dict):
            raise KeyError(part)
    node[key] = value


def get_path(data: dict[str, Any], path: str) -> Any:
    node: Any = data
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            raise KeyError(part)
        node = node[part]
    return node


# Mappings whose keys are themselves dotted (factor names, search-space paths), with the keys
# their values may hold, so that `--set factors.model.heads.when=...` finds the factor.
_DOTTED_KEY_MAPS = {("factors",): {"levels", "when"}, ("tune", "space"): set(TuneParam.model_fields)}


def _split_override(raw: dict[str, Any], path: str) -> list[str]:
    parts = path.split(".")
    for prefix, subkeys in _DOTTED_KEY_MAPS.items():
        n = len(prefix)
        if tuple(parts[:n]) != prefix or len(parts) <= n:
            continue
        rest = parts[n:]
        try:
            existing = get_path(raw, ".".join(prefix))
        except KeyError:
            existing = {}
        existing = existing if isinstance(existing, dict) else {}
        for cut in range(len(rest), 0, -1):  # the longest existing key
            if ".".join(rest[:cut]) in existing:
                return [*prefix, ".".join(rest[:cut]), *rest[cut:]]
        if len(rest) > 1 and rest[-1] in subkeys:
            return [*prefix, ".".join(rest[:-1]), rest[-1]]
        return [*prefix, ".".join(rest)]
    return parts


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """``path=value`` overrides from the command line; the value is parsed as YAML.

    Factor names and search-space paths are dotted themselves: ``factors.model.layers=[1, 2]``
    sets the factor ``model.layers``; ``tune.space.train.lr.high=0.1`` its ``high``."""
    raw = copy.deepcopy(raw)
    for item in overrides:
        path, sep, text = item.partition("=")
        path = path.strip()
        if not sep or not path:
            raise SpecError([("--set", f"{item!r} is not of the form path=value")])
        value = parse_yaml(text, f"--set {path}")
        *parents, key = _split_override(raw, path)
        node = raw
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise SpecError([(path, f"--set cannot set inside {part!r}: it is not a mapping")])
        node[key] = value
    return raw


def merge(base: Any, child: Any, key: str = "") -> Any:
    """``extends``: mappings merge key by key (the child wins), ``null`` removes an inherited key,
    lists and scalars replace; a mapping whose ``scheme`` (an init) or ``name`` (the task) differs
    from the inherited one replaces it whole."""
    if not isinstance(base, dict) or not isinstance(child, dict):
        return copy.deepcopy(child)
    tag = "name" if key == "task" else "scheme" if key.endswith("init") else None
    if tag and tag in child and tag in base and child[tag] != base[tag]:
        return {k: copy.deepcopy(v) for k, v in child.items() if v is not None}
    out = copy.deepcopy(base)
    for sub, value in child.items():
        if value is None:
            out.pop(sub, None)
        elif sub in out:
            out[sub] = merge(out[sub], value, sub)
        else:
            out[sub] = copy.deepcopy(value)
    return out


Origins = dict[str, str]  # key path → "file:line"


def _parse(data: str | bytes, display: str, parent: Path, identity: Path | None,
           chain: tuple[Path, ...]) -> tuple[dict[str, Any], Origins]:
    """Spec text with its ``extends`` chain merged in; and where each key path was written."""
    raw, lines = parse_yaml_lines(data, display)
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise SpecError([("", f"{display} must be a mapping of keys (name, task, model, ...)")])
    origins: Origins = {p: f"{display}:{line}" for p, line in lines.items()}
    ext = raw.pop("extends", None)
    if ext is None:
        return raw, origins
    where = [origins.get("extends")]
    if isinstance(ext, str):
        ext = [ext]
    if not isinstance(ext, list) or not ext or not all(isinstance(e, str) and e for e in ext):
        raise SpecError([("extends", "must be a file name or a list of file names")], where)
    here = (*chain, identity) if identity is not None else chain
    merged: dict[str, Any] = {}
    base_origins: Origins = {}
    for name in ext:
        base = (parent / name).resolve()
        if base in here:
            cycle = " → ".join(p.name for p in (*here, base))
            raise SpecError([("extends", f"a cycle: {cycle}")], where)
        if len(here) >= MAX_EXTENDS:
            raise SpecError([("extends", f"more than {MAX_EXTENDS} files deep")], where)
        if not base.is_file():
            raise SpecError([("extends", f"cannot read {name!r} (looked for {base})")], where)
        sub, sub_origins = _read(base, here)
        merged = merge(merged, sub)
        base_origins.update(sub_origins)
    return merge(merged, raw), {**base_origins, **origins}


def _read(path: Path, chain: tuple[Path, ...]) -> tuple[dict[str, Any], Origins]:
    try:
        if path.stat().st_size > MAX_BYTES:
            raise SpecError([("", f"{path} is {path.stat().st_size:,} bytes; a spec is at most {MAX_BYTES:,}")])
        data = path.read_bytes()
    except OSError as exc:
        raise SpecError([("", f"cannot read {path}: {exc.strerror or exc}")]) from None
    return _parse(data, str(path), path.parent, path.resolve(), chain)


# --- validation -------------------------------------------------------------------------------


def _validate_config(raw: dict[str, Any]) -> Spec:
    task, problems = resolve_task(raw.get("task")) if "task" in raw else ({}, [("task", "required key is missing")])
    spec = None
    try:
        spec = Spec.model_validate({**raw, "task": task} if not problems else {**raw, "task": {"name": "?"}})
    except ValidationError as exc:
        problems += [(p, m) for p, m in _problems(exc) if not p.startswith("task")]
    except (RecursionError, OverflowError, ValueError, TypeError) as exc:  # pathological input
        problems.append(("", f"cannot read this spec: {type(exc).__name__}"))
    if problems or spec is None:
        raise SpecError(problems)
    return spec


def validate(raw: Any, source: str = "<spec>") -> Spec:
    """Validate plain data as a spec: its shape, every factor level, every cell of the design,
    the search space. Raises SpecError (and nothing else) naming key paths."""
    if not isinstance(raw, dict):
        raise SpecError([("", f"{source} must be a mapping of keys (name, task, model, ...)")])
    if raw.get("extends") is not None:
        raise SpecError([("extends", "only a spec file can extend another (use ablate.spec.load)")])
    spec = _validate_config(raw)
    from ablate import design

    design.check(spec)
    return spec


def locate(exc: SpecError, origins: Origins) -> SpecError:
    """The same errors, each with the file:line of the longest key path prefix written somewhere."""
    where = []
    for (path, _), old in zip(exc.problems, exc.where, strict=True):
        found = old
        probe = path
        while probe and found is None:
            found = origins.get(probe)
            cut = max(probe.rfind("."), probe.rfind("["))
            probe = probe[:cut] if cut > 0 else ""
        where.append(found)
    return SpecError(exc.problems, where)


def loads(text: str | bytes, source: str = "<spec>", overrides: list[str] | None = None,
          base_dir: str | Path | None = None) -> Spec:
    """Parse and validate spec text (``extends`` resolved against ``base_dir``, default cwd)."""
    try:
        raw, origins = _parse(text, source, Path(base_dir or "."), None, ())
    except RecursionError:
        raise SpecError([("", f"{source}: nesting too deep")]) from None
    return _finish(raw, origins, source, overrides)


def _finish(raw: Any, origins: Origins, source: str, overrides: list[str] | None) -> Spec:
    if overrides:
        if not isinstance(raw, dict):
            raise SpecError([("", f"{source} must be a mapping")])
        raw = apply_overrides(raw, overrides)
        for item in overrides:
            path = ".".join(_split_override(raw, item.partition("=")[0].strip()))
            origins = {k: v for k, v in origins.items() if not (k == path or k.startswith(path + "."))}
            origins[path] = f"--set {path}"
    try:
        return validate(raw, source)
    except SpecError as exc:
        raise locate(exc, origins) from None


def load(path: str | Path, overrides: list[str] | None = None) -> Spec:
    """Read, merge (``extends``), override (``--set``) and validate a spec file. Raises SpecError
    with key paths and file:line locations; nothing else."""
    path = Path(path)
    try:
        raw, origins = _read(path, ())
    except RecursionError:
        raise SpecError([("", f"{path}: nesting too deep")]) from None
    return _finish(raw, origins, str(path), overrides)
