"""A study spec: pydantic models, YAML loading, and errors that name the key path.

The baseline (``task``, ``model``, ``train``, ``probes``) is one complete configuration;
``factors`` move dotted paths of it through lists of levels. Everything here is torch-free so
``ablate validate`` and ``ablate plan`` answer fast.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ablate import choices
from ablate.tasks.registry import task_params_model


class SpecError(Exception):
    """A spec is invalid. ``problems`` holds (key path, message) pairs, one line each."""

    def __init__(self, problems: list[tuple[str, str]]):
        self.problems = problems
        super().__init__("\n".join(f"{path}: {msg}" if path else msg for path, msg in problems))


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


def _choice(names: tuple[str, ...]) -> Any:
    return Literal[names]  # type: ignore[valid-type]


class RingInit(Strict):
    """LRU ring initialisation: |λ|² ~ U[r_min², r_max²], phase ~ U[0, max_phase]."""

    scheme: Literal["ring"] = "ring"
    r_min: float = Field(0.9, ge=0.0, lt=1.0)
    r_max: float = Field(0.999, gt=0.0, lt=1.0)
    max_phase: float = Field(6.283, ge=0.0)
    identity_basis: bool = Field(False, description="rotation only: fix P = I instead of learning it")

    @model_validator(mode="after")
    def _ordered(self) -> RingInit:
        if self.r_min > self.r_max:
            raise ValueError(f"r_min ({self.r_min}) must not exceed r_max ({self.r_max})")
        return self


class RotrnnInit(Strict):
    """RotRNN initialisation: −log γ log-uniform between −log γ_max and −log γ_min, θ ~ U[0, max_phase]."""

    scheme: Literal["rotrnn"] = "rotrnn"
    gamma_min: float = Field(0.5, gt=0.0, lt=1.0)
    gamma_max: float = Field(0.999, gt=0.0, lt=1.0)
    max_phase: float = Field(0.0314, ge=0.0)
    identity_basis: bool = Field(False, description="fix P = I instead of learning it")

    @model_validator(mode="after")
    def _ordered(self) -> RotrnnInit:
        if self.gamma_min > self.gamma_max:
            raise ValueError(f"gamma_min ({self.gamma_min}) must not exceed gamma_max ({self.gamma_max})")
        return self


Init = Annotated[RingInit | RotrnnInit, Field(discriminator="scheme")]


class ModelSpec(Strict):
    """The network: an encoder, ``layers`` residual blocks around a recurrence, a head."""

    family: _choice(choices.FAMILIES) = "linear_rnn"
    d_model: int = Field(64, ge=1)
    state_dim: int = Field(64, ge=2, description="N: real state size per layer (complex modes count twice)")
    layers: int = Field(2, ge=1)
    parameterisation: _choice(choices.PARAMETERISATIONS) = "rotation"
    normalisation: _choice(choices.NORMALISATIONS) = "xi"
    heads: int = Field(1, ge=1)
    nonlinearity: _choice(choices.NONLINEARITIES) = "none"
    activation: _choice(choices.ACTIVATIONS) = "gelu"
    norm: _choice(choices.NORMS) = "layer"
    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    bidirectional: bool = False
    pooling: _choice(choices.POOLINGS) = "mean"
    init: Init = Field(default_factory=RotrnnInit)

    @model_validator(mode="after")
    def _state_shape(self) -> ModelSpec:
        if self.family != "linear_rnn":
            return self
        if self.parameterisation in ("rotation", "complex_diagonal") and self.state_dim % 2:
            raise ValueError(f"state_dim must be even for {self.parameterisation} (got {self.state_dim})")
        if self.state_dim % self.heads:
            raise ValueError(f"heads ({self.heads}) must divide state_dim ({self.state_dim})")
        if self.parameterisation == "rotation" and (self.state_dim // self.heads) % 2:
            raise ValueError(
                f"rotation heads need an even size: state_dim/heads = {self.state_dim}/{self.heads} "
                f"is odd; valid heads here are 1 … {self.state_dim // 2} dividing {self.state_dim // 2}"
            )
        return self


class TrainSpec(Strict):
    steps: int = Field(300, ge=1)
    batch_size: int = Field(32, ge=1)
    lr: float = Field(3e-3, gt=0.0)
    recurrent_lr_factor: float = Field(0.5, gt=0.0, description="learning-rate factor for ν, θ, γ, M, B")
    weight_decay: float = Field(0.05, ge=0.0)
    warmup: float = Field(0.1, ge=0.0, lt=1.0, description="fraction of steps of linear warm-up")
    grad_clip: float = Field(1.0, ge=0.0, description="0 disables clipping")
    eval_every: int = Field(50, ge=1)
    log_every: int = Field(10, ge=1)
    divergence_norm: float = Field(1e6, gt=0.0, description="a state norm past this marks the run diverged")


class ProbeSpec(Strict):
    every: int = Field(25, ge=1, description="steps between hidden-state norm probes")
    batch: int = Field(64, ge=1, description="size of the fixed probe batch")


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
    try:
        params = params_model.model_validate({k: v for k, v in raw.items() if k != "name"})
    except ValidationError as exc:
        return {}, [(f"task.{p}" if p else "task", m) for p, m in _problems(exc, model=params_model)]
    return {"name": raw["name"], **params.model_dump()}, []


NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class Spec(Strict):
    name: str
    description: str = ""
    task: dict[str, Any]
    model: ModelSpec = Field(default_factory=ModelSpec)
    train: TrainSpec = Field(default_factory=TrainSpec)
    probes: ProbeSpec = Field(default_factory=ProbeSpec)
    factors: dict[str, list[Any]] = Field(default_factory=dict)
    seeds: int | list[int] = 1
    reports: list[_choice(choices.REPORTS)] = Field(default_factory=lambda: list(choices.REPORTS))

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not NAME.match(v):
            raise ValueError("use letters, digits, '_', '.', '-' and start with a letter or digit")
        return v

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, v: int | list[int]) -> int | list[int]:
        if isinstance(v, int) and v < 1:
            raise ValueError("need at least one seed")
        if isinstance(v, list) and (not v or len(set(v)) != len(v)):
            raise ValueError("seeds must be a non-empty list without repeats")
        return v

    @property
    def seed_list(self) -> list[int]:
        return list(range(self.seeds)) if isinstance(self.seeds, int) else list(self.seeds)

    def baseline(self) -> dict[str, Any]:
        """The resolved baseline configuration (defaults filled) as plain data."""
        return self.model_dump(include={"task", "model", "train"})


# --- errors -----------------------------------------------------------------------------------

_QUOTED = re.compile(r"'([^']*)'")


def _loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in ("ring", "rotrnn") and out.endswith("init"):
            continue  # the discriminated union adds the tag to the path; the user never wrote it
        else:
            out += ("." if out else "") + str(part)
    return out


def _message(err: dict[str, Any]) -> str:
    kind, ctx, value = err["type"], err.get("ctx") or {}, err.get("input")
    if kind == "literal_error":
        names = ", ".join(_QUOTED.findall(str(ctx.get("expected", ""))))
        return f"{value!r} is not one of: {names}"
    if kind == "union_tag_invalid":
        names = ", ".join(_QUOTED.findall(str(ctx.get("expected_tags", ""))))
        return f"{ctx.get('tag')!r} is not one of: {names}"
    if kind == "extra_forbidden":
        return "unknown key"
    if kind == "missing":
        return "required key is missing"
    msg = err["msg"]
    return msg.removeprefix("Value error, ")


def _problems(exc: ValidationError, model: type[BaseModel] | None = None) -> list[tuple[str, str]]:
    out = []
    for err in exc.errors():
        path = _loc(err["loc"])
        if err["type"] == "union_tag_invalid":
            path += ".scheme"
        if err["type"] == "extra_forbidden":
            msg = _unknown_key_message(path, model or Spec)
        else:
            msg = _message(err)
        out.append((path, msg))
    return out


def _unknown_key_message(path: str, root: type[BaseModel]) -> str:
    import difflib

    *parents, key = path.split(".")
    model: Any = root
    for part in parents:
        field = getattr(model, "model_fields", {}).get(part)
        if field is None:
            return "unknown key"
        ann = field.annotation
        model = ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None
        if model is None:
            return "unknown key"
    valid = list(model.model_fields)
    close = difflib.get_close_matches(key, valid, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"unknown key{hint} (valid: {', '.join(valid)})"


# --- loading ----------------------------------------------------------------------------------


def parse_yaml(text: str | bytes, source: str = "<spec>") -> Any:
    """Safe YAML: plain data only; a tag that would construct Python objects is an error."""
    try:
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        return yaml.safe_load(text)
    except UnicodeDecodeError as exc:
        raise SpecError([("", f"{source} is not UTF-8 text ({exc.reason} at byte {exc.start})")]) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise SpecError([("", f"{source} is not valid YAML{where}: {problem}")]) from None


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


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """``path=value`` overrides from the command line; the value is parsed as YAML."""
    raw = copy.deepcopy(raw)
    for item in overrides:
        path, sep, text = item.partition("=")
        if not sep or not path:
            raise SpecError([("--set", f"{item!r} is not of the form path=value")])
        value = parse_yaml(text, f"--set {path}")
        *parents, key = path.split(".")
        node = raw
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise SpecError([(path, f"cannot set inside {part!r}: it is not a mapping")])
        node[key] = value
    return raw


def _validate_config(raw: dict[str, Any]) -> Spec:
    task, problems = resolve_task(raw.get("task")) if "task" in raw else ({}, [("task", "required key is missing")])
    try:
        spec = Spec.model_validate({**raw, "task": task} if not problems else {**raw, "task": {"name": "?"}})
    except ValidationError as exc:
        problems += [(p, m) for p, m in _problems(exc) if not p.startswith("task")]
    if problems:
        raise SpecError(problems)
    return spec


def validate(raw: Any, source: str = "<spec>") -> Spec:
    """Validate plain data as a spec, including every factor level applied to the baseline."""
    if not isinstance(raw, dict):
        raise SpecError([("", f"{source} must be a mapping of keys (name, task, model, ...)")])
    spec = _validate_config(raw)
    problems = _factor_problems(spec)
    if problems:
        raise SpecError(problems)
    return spec


def _factor_problems(spec: Spec) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    base = spec.baseline()
    for path, levels in spec.factors.items():
        where = f"factors.{path}"
        root = path.split(".")[0]
        if root not in ("task", "model", "train"):
            problems.append((where, "a factor path starts with task., model. or train."))
            continue
        if not levels:
            problems.append((where, "needs at least one level"))
            continue
        try:
            get_path(base, path)
        except KeyError as exc:
            problems.append((where, f"{exc.args[0]!r} is not a key of the baseline"))
            continue
        for i, level in enumerate(levels):
            resolved = copy.deepcopy(base)
            set_path(resolved, path, level)
            try:
                _validate_config({"name": spec.name, **resolved})
            except SpecError as exc:
                for err_path, msg in exc.problems:
                    problems.append((f"{where}[{i}]", msg if err_path == path else f"{err_path}: {msg}"))
    return problems


def load(path: str | Path, overrides: list[str] | None = None) -> Spec:
    """Read, parse and validate a spec file. Raises SpecError with key paths."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SpecError([("", f"cannot read {path}: {exc.strerror}")]) from None
    raw = parse_yaml(data, str(path))
    if overrides:
        if not isinstance(raw, dict):
            raise SpecError([("", f"{path} must be a mapping")])
        raw = apply_overrides(raw, overrides)
    return validate(raw, str(path))
