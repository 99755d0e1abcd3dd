"""The shape of a study spec: pydantic models of the baseline, factors, tuning and references.

The baseline (``task``, ``model``, ``train``, ``probes``) is one complete configuration;
``factors`` move dotted paths of it through levels; ``design``, ``exclude``/``include`` and
``when`` choose the cells; ``tune`` searches some paths per cell before replicating the best.
This module holds their shape and every default; what factors, designs and constraints mean is
``ablate.design``'s. The level names come from the registries (``ablate.models.catalogue``, the
task registry, the report notebooks), none of which imports torch.

``parse`` checks plain data against these shapes only. To run, plan or report a study, validate
it whole with ``ablate.design.validate`` / ``load``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Discriminator,
    Field,
    PlainValidator,
    PrivateAttr,
    Tag,
    ValidationError,
    ValidationInfo,
    field_serializer,
    field_validator,
    model_validator,
)
from pydantic.json_schema import WithJsonSchema

from ablate import metrics, plugins, stores
from ablate.models import catalogue
from ablate.report import REPORTS
from ablate.spec.basemodel import DEFER_COMBINATIONS, Strict
from ablate.spec.basemodel import deferred as _deferred
from ablate.spec.errors import REPORT_TAGS, Problems, SpecError, not_a_plugin, short, validation_problems
from ablate.spec.init_params import Init, RotrnnInit
from ablate.spec.reports import ReportOptions
from ablate.spec.seeds import (  # noqa: F401 - re-exported: ablate.spec and older callers
    MAX_SEED,
    MAX_SEEDS,
    MAX_TUNE_TRIALS,
    TUNE_SEED_BASE,
    Scalar,
    check_seeds,
)
from ablate.spec.seeds import choice as _choice
from ablate.spec.tune import (  # noqa: F401 - re-exported
    OBJECTIVE_METRICS,
    PRUNERS,
    Objective,
    TuneDim,
    TuneParam,
    TuneSpec,
)
from ablate.tasks.registry import task_params_model

# --- limits: a spec is refused, with a message, past these --------------------------------------

MAX_CELLS = 10_000  # cells a design may enumerate (before exclude/include)
MAX_ITEMS = 200_000  # trials of a study: cells × (tuning trials + seeds)
MAX_WHITE_NOISE_BATCH = 100_000  # probes.white_noise_batch (ProbeSpec says why)
# The study names an Optuna study, an MLflow experiment and its parent run, and files (checked by
# ablate.design.check_limits with the other limits of the stores).
MAX_NAME = min(stores.MAX_STUDY_NAME, stores.MAX_EXPERIMENT_NAME, stores.MAX_RUN_NAME,
               stores.MAX_FILE_NAME - stores.FILE_SUFFIX)


def _level(levels: catalogue.Registry) -> Any:
    """A level of a factor that takes plug-ins: a registered name (built-in or an installed
    plug-in's) or ``module:attribute``; the JSON Schema's names are filled in by ``ablate.schema``."""

    def check(value: str) -> str:
        if not levels.accepts(value):
            raise ValueError(not_a_plugin(value, levels.builtin_names, levels.plugins()))
        return value

    return Annotated[str, AfterValidator(check), WithJsonSchema({"type": "string"})]


def _once(what: str, name: Callable[[Any], Any] = lambda x: x) -> AfterValidator:
    """A list's check that it names each value once (by ``name``): a measure twice counted its
    comparisons twice in m, a metric twice was logged under one key in a list that made new cells."""

    def check(values: list[Any]) -> list[Any]:
        names = [name(x) for x in values]
        if twice := sorted({str(x) for x in names if names.count(x) > 1}):
            raise ValueError(f"{', '.join(twice)} named twice; each {what} once")
        return values

    return AfterValidator(check)


def _metric_name() -> Any:
    """A metric plug-in (``ablate.metrics``): an installed one's name, or ``module:function``."""

    def check(value: str) -> str:
        if plugins.is_target(value):
            return value
        names = metrics.installed_names()
        if value not in names:
            raise ValueError(not_a_plugin(value, (), plugins.installed_of("metric")) if names else
                             f"{short(value)} is not an installed metric plug-in (`ablate plugins` lists them); "
                             "or a plug-in as package.module:attribute")
        return value

    return Annotated[str, AfterValidator(check), WithJsonSchema({"type": "string"})]


def _report_name() -> Any:
    """A built-in report, an installed report-section plug-in, or a section by path."""

    def check(value: str) -> str:
        if value in REPORTS or plugins.is_target(value):
            return value
        sections = tuple(p for p in plugins.installed_of("section") if p.name not in REPORTS)
        if value not in {p.name for p in sections}:
            raise ValueError(not_a_plugin(value, REPORTS, sections))
        return value

    return Annotated[str, AfterValidator(check), WithJsonSchema({"type": "string"})]


def _report_entry() -> Any:
    """A ``reports:`` entry: a report's name, or a mapping with its options (``ReportOptions``);
    told apart by their type, so an error is the one form's, never both."""
    name_tag, options_tag = REPORT_TAGS

    def which(v: Any) -> str:
        return options_tag if isinstance(v, dict | ReportOptions) else name_tag

    return Annotated[Annotated[_report_name(), Tag(name_tag)] | Annotated[ReportOptions, Tag(options_tag)],
                     Discriminator(which)]


# --- the baseline -------------------------------------------------------------------------------


class ModelSpec(Strict):
    """The network: an encoder, ``layers`` residual blocks around a recurrence, a head."""

    family: _choice(catalogue.FAMILIES.names) = Field("linear_rnn", description="model family")
    d_model: int = Field(64, ge=1, le=65_536, description="width of the residual stream")
    state_dim: int = Field(64, ge=2, le=65_536, description="N: real state size per layer (complex modes count twice)")
    layers: int = Field(2, ge=1, le=1_024, description="residual blocks")
    parameterisation: _level(catalogue.PARAMETERISATIONS) = Field("rotation", description="how the state matrix is built")
    normalisation: _level(catalogue.NORMALISATIONS) = Field("xi", description="input scaling of the recurrence")
    heads: int = Field(1, ge=1, le=65_536, description="groups of state sharing a decay (rotation) / a ξ")
    nonlinearity: _level(catalogue.NONLINEARITIES) = Field("none", description="inside the recurrence; none = linear scan")
    activation: _level(catalogue.ACTIVATIONS) = Field("gelu", description="between layers")
    norm: _choice(catalogue.NORMS.names) = Field("layer", description="pre-norm of each block")
    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    bidirectional: bool = False
    pooling: _choice(catalogue.POOLINGS.names) = Field("mean", description="sequence pooling before a classification head")
    init: Init = Field(default_factory=RotrnnInit, description="initialisation scheme and its parameters (a "
                       "plug-in scheme: its own, docs/plugins.md)")

    @model_validator(mode="after")
    def _state_shape(self, info: ValidationInfo) -> ModelSpec:
        if self.family != "linear_rnn" or _deferred(info):  # the only family with a parameterisation and heads
            return self
        modes = catalogue.PARAMETERISATIONS.level(self.parameterisation).modes
        if modes in ("rotation", "complex") and self.state_dim % 2:
            raise ValueError(f"state_dim must be even for {self.parameterisation} (got {self.state_dim})")
        units = self.state_dim // 2 if modes == "complex" else self.state_dim
        if units % self.heads:
            what = "complex modes (state_dim/2)" if modes == "complex" else "state_dim"
            valid = [h for h in range(1, min(units, 4096) + 1) if units % h == 0]
            raise ValueError(f"heads ({self.heads}) must divide the {units} {what} for {self.parameterisation}; "
                             f"valid heads: {', '.join(map(str, valid))}")
        if modes == "rotation" and (self.state_dim // self.heads) % 2:
            raise ValueError(
                f"rotation heads need an even size: state_dim/heads = {self.state_dim}/{self.heads} "
                f"is odd; valid heads here are 1 … {self.state_dim // 2} dividing {self.state_dim // 2}"
            )
        return self


SCHEDULES = ("cosine", "constant", "linear", "step", "wsd")
#: Shapes of a WSD schedule's decay (p: 0 → 1 over the decay): 1-sqrt is 1 − √p, the shape
#: Hägele et al. (2024) found best; linear 1 − p; cosine ½ (1 + cos π p).
DECAY_SHAPES = ("1-sqrt", "linear", "cosine")


#: The train settings that set only a run's budget: runs that differ only in them are one lineage
#: (``ablate.design.identity.lineage_key``), and a longer one can continue a shorter one.
BUDGET_KEYS = ("steps", "decay", "decay_steps", "until_converged")


#: A WSD schedule's default warm-up in steps (``wsd_warmup``): fixed, so that a longer budget of the
#: same cell keeps it and continues from the shorter run's stable phase (a fraction would grow with it).
WSD_WARMUP_STEPS = 20


class UntilConverged(Strict):
    """Training a WSD cell on past its budget while it is still improving (``ablate.runner.study``: training until converged):
    a replicate that ends flagged "still improving" is continued from its stable-phase checkpoint
    by ``extend_by`` more steps, until it converges or reaches ``max_steps``."""

    max_steps: int = Field(..., ge=2, le=100_000_000,
                           description="the most steps a replicate is trained to (above train.steps)")
    extend_by: int = Field(..., ge=1, le=100_000_000,
                           description="steps added each time a replicate ends still improving")


class TrainSpec(Strict):
    """The optimisation of one trial: AdamW, linear warm-up, then a decay schedule; optionally
    stopped early on a plateau of the validation metric (``ablate.training``)."""

    steps: int = Field(300, ge=1, le=100_000_000, description="optimiser steps")
    batch_size: int = Field(32, ge=1, le=1_000_000)
    lr: float = Field(3e-3, ge=1e-10, le=10.0, description="peak learning rate")
    recurrent_lr_factor: float = Field(0.5, gt=0.0, le=100.0, description="learning-rate factor for ν, θ, γ, M, B")
    weight_decay: float = Field(0.05, ge=0.0, le=10.0)
    warmup: float = Field(0.1, ge=0.0, lt=1.0, description=f"fraction of steps of linear warm-up (schedule: wsd — at "
                           f"this default, {WSD_WARMUP_STEPS} steps, at most a fifth of the steps: a longer budget keeps it)")
    warmup_steps: int | None = Field(
        None, ge=0, description="linear warm-up in steps (must be below `steps`); replaces `warmup` when set")
    schedule: _choice(SCHEDULES) = Field(
        "cosine", description="after the warm-up: cosine (half cosine to 0), linear (to 0), constant, step "
        "(× step_gamma at each of step_milestones), or wsd (warmup-stable-decay: constant, then a decay over "
        "the last `decay` of the steps; a longer run of the same cell continues from its stable phase)")
    decay: float = Field(0.2, gt=0.0, lt=1.0, description="schedule: wsd — fraction of steps of the final decay")
    decay_steps: int | None = Field(
        None, ge=1, description="schedule: wsd — the final decay in steps; replaces `decay` when set")
    decay_shape: _choice(DECAY_SHAPES) = Field(
        "1-sqrt", description="schedule: wsd — the decay's shape: 1-sqrt (1 − √p), linear or cosine")
    step_milestones: list[float] = Field(
        default_factory=lambda: [0.5, 0.75],
        description="schedule: step — fractions of `steps` at which the learning rate is multiplied by step_gamma")
    step_gamma: float = Field(0.1, gt=0.0, le=1.0, description="schedule: step — the factor at each milestone")
    patience: int | None = Field(
        None, ge=1,
        description="stop after this many validation passes (every eval_every steps) without an improvement "
        "of more than min_delta, and restore the best weights before the final evaluation; none: train all steps")
    min_delta: float = Field(0.0, ge=0.0, description="patience: the smallest change that counts as an improvement "
                                                     "(metric units: accuracy, or loss for bpc tasks)")
    converged_tol: float = Field(
        0.005, ge=0.0,
        description="a trial counts as still improving unless it stopped early (patience) when its validation "
        "metric rose over the last fifth of the steps run (of a wsd schedule's stable phase: its decay raises the "
        "metric anyway) by more than this and by more than its pass-to-pass "
        "noise explains (a one-sided trend test at 5%): accuracy points as a fraction (0.005 = 0.5 points), or "
        "for bpc tasks the loss's relative decrease (0.005 = 0.5%)")
    grad_clip: float = Field(1.0, ge=0.0, description="0 disables clipping")
    eval_every: int = Field(50, ge=1, description="steps between validation passes")
    log_every: int = Field(
        25, ge=1,
        description="steps between logged training metrics (five per log; each costs about 0.2 ms in a "
        "SQLite MLflow store: every 25 keeps logging under 1% of a small model's trial)",
    )
    divergence_norm: float = Field(1e6, gt=0.0, description="a state norm past this marks the run diverged")
    metrics: Annotated[list[_metric_name()], _once("metric")] = Field(
        default_factory=list, max_length=metrics.MAX_METRICS,
        description="metric plug-ins computed on the test set after training (docs/plugins.md): each is a "
        "test_<name> column of the trials frame and a metric the accuracy report can take")
    until_converged: UntilConverged | None = Field(
        None,
        description="schedule: wsd — a replicate that ends still improving is trained on, extend_by steps at a "
        "time from its stable-phase checkpoint, until it converges or reaches max_steps; none: train.steps only")

    @field_validator("step_milestones")
    @classmethod
    def _milestones(cls, v: list[float]) -> list[float]:
        if any(not 0.0 < m < 1.0 for m in v):
            raise ValueError(f"milestones are fractions of the steps, each between 0 and 1 (got {v})")
        if sorted(v) != v or len(set(v)) != len(v):
            raise ValueError(f"milestones must increase (got {v})")
        return v

    @model_validator(mode="after")
    def _warmup_fits(self) -> TrainSpec:
        if self.warmup_steps is not None and self.warmup_steps >= self.steps:
            raise ValueError(f"warmup_steps ({self.warmup_steps}) must be below steps ({self.steps})")
        if self.schedule == "wsd":  # the same counts as ablate.schedule.warmup_steps and stable_end
            decay = self.decay_steps if self.decay_steps is not None else max(1, int(self.decay * self.steps))
            warm = max(1, self.warmup_steps if self.warmup_steps is not None else int(self.warmup * self.steps))
            if decay >= self.steps or warm > self.steps - decay:
                raise ValueError(f"train.decay_steps/decay: the warm-up ({warm} steps) and the decay ({decay} "
                                 f"steps) of a wsd schedule must fit in steps ({self.steps})")
        return self


#: Tuned paths a WSD default warm-up would override or depend on: a spec tuning one keeps the fraction.
WARMUP_TUNED = ("train.warmup", "train.warmup_steps", "train.steps", "train.schedule", "train.decay", "train.decay_steps")


def wsd_warmup(train: dict[str, Any]) -> dict[str, Any]:
    """A resolved cell's train settings with a WSD schedule's default warm-up fixed in steps: where
    ``warmup`` is at its default and ``warmup_steps`` unset, ``WSD_WARMUP_STEPS``, at most a fifth of
    the steps and the stable phase (tiny runs), written as ``warmup_steps`` only where it differs from
    the fraction's count (so cells it does not change keep their id). Other schedules, a ``warmup``
    other than its default or a ``warmup_steps``: unchanged. ``ablate.design`` applies it to every cell
    (not to stored configs: those ran with what they say)."""
    if train.get("schedule") != "wsd" or train.get("warmup_steps") is not None \
            or train.get("warmup", TrainSpec.model_fields["warmup"].default) != TrainSpec.model_fields["warmup"].default:
        return train
    steps = int(train["steps"])  # the stable end as ablate.schedule.stable_end counts it (a layer above)
    decay = train.get("decay_steps") or max(1, int(float(train.get("decay", TrainSpec.model_fields["decay"].default))
                                                    * steps))
    warm = max(1, min(WSD_WARMUP_STEPS, steps // 5, steps - decay))
    if warm == max(1, int(TrainSpec.model_fields["warmup"].default * steps)):
        return train
    return {**train, "warmup_steps": warm}


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
    # Unlike ``batch`` (a slice of the validation set) this allocates batch × length × d_model
    # floats of its own, so an absurd value fails every item out of memory: bounded. The probe's
    # mean norm has a standard error falling as 1/√batch; at the bound it is 56 times smaller than
    # at the default 32, more precision than a norm curve is read with.
    white_noise_batch: int = Field(32, ge=1, le=MAX_WHITE_NOISE_BATCH,
                                   description="sequences in the white-noise probe")
    white_noise_seed: int = Field(0, ge=0, description="seed of the white-noise input (the same in every trial)")
    theory: bool = Field(True, description="record the white-input theory E‖x_t‖² of each linear layer")
    spectrum: bool = Field(True, description="record |λ|, phase, per-head decay and input scale per layer")
    grads: bool = Field(True, description="record gradient norms per parameter group at probe steps")


class StatsSpec(Strict):
    """How the reports judge the results (not a training setting: never part of a cell's identity)."""

    min_effect: float = Field(
        0.01, gt=0.0,
        description="the smallest difference in the report's metric worth detecting (0.01 = one accuracy "
        "point): each comparison's power line says how many seeds would detect it")
    power: float = Field(0.8, gt=0.0, lt=1.0, description="the power the seed counts of the power line aim at")
    min_ratio: float = Field(
        1.25, gt=1.0,
        description="the smallest ratio of a norm measure (a CV, the seed spread, the final norm) worth detecting "
        "in the norm-stability report (1.25 = a quarter larger): each comparison's power line says how many seeds "
        "would detect it")


def resolve_task(raw: Any) -> tuple[dict[str, Any], Problems]:
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
        return {}, [(f"task.{p}" if p else "task", m) for p, m in validation_problems(exc, params_model)]
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





#: What a sequential study decides its comparisons on: a metric of the trials frame, or a norm
#: measure of the norm-stability report (``ablate.stats.norms``).
SEQUENTIAL_MEASURES = ("test_accuracy", "val_accuracy", "test_loss", "val_loss", "test_bpc", "val_bpc",
                       "norm.training", "norm.depth", "norm.seeds", "norm.final")
SPENDING_SHAPES = ("power3", "obrien_fleming", "pocock")


#: The most looks a sequential design may have: at 100 looks each look's analysis took 5 s here, and
#: the design analyses every look (min 3, max 1000, step 1 would have spent hours on boundaries).
MAX_LOOKS = 64


class SequentialSeeds(Strict):
    """Seeds added look by look until each comparison with the reference is decided: `min` seeds per
    cell first, then `step` more to the cells of comparisons still open, up to `max`. Decided means
    significant at the look's group-sequential boundary, equivalent within `stats.min_effect` (or
    `stats.min_ratio` for a norm measure; from 6 seeds on), or futile — an effect of that size unlikely at the futility
    boundary; a comparison none of these decide by `max` ends undecided at the last look (docs/science.md §14)."""

    min: int = Field(3, ge=3, le=MAX_SEEDS, description="seeds per cell at the first look (3 at least: nothing is "
                                                         "tested on fewer)")
    max: int = Field(16, ge=3, le=MAX_SEEDS, description="the most seeds a cell can get (the last look)")
    step: int = Field(2, ge=1, le=MAX_SEEDS, description="seeds added per look to the cells of open comparisons "
                                                         f"(at most {MAX_LOOKS} looks from min to max)")
    until: Literal["decided"] = Field("decided", description="when to stop adding seeds")
    measures: Annotated[list[_choice(SEQUENTIAL_MEASURES)], _once("measure")] = Field(
        default_factory=lambda: ["test_accuracy"],
        description="the measures each comparison is decided on: metrics, or norm measures (norm.training, "
                    "norm.depth, norm.seeds, norm.final); the family of comparisons shares α")
    alpha: float = Field(0.05, gt=0.0, lt=0.5, description="the family-wise error rate of the whole sequential "
                                                          "design (Bonferroni over its comparisons)")
    spending: _choice(SPENDING_SHAPES) = Field(
        "power3", description="the α-spending function of the efficacy boundaries (Lan–DeMets): power3 (α t³, "
        "between the two), obrien_fleming (little early), pocock (even)")
    equivalence_beta: float = Field(0.02, gt=0.0, lt=0.5, description="what each equivalence test spends (one-sided "
                                                                       "per side, Pocock shape): the power it may cost")

    @model_validator(mode="after")
    def _order(self) -> SequentialSeeds:
        if self.max <= self.min:
            raise ValueError(f"max ({self.max}) must be above min ({self.min})")
        if not self.measures:
            raise ValueError("`measures` names at least one")
        if len(self.looks) > MAX_LOOKS:  # each look's boundaries take longer the more looks there are
            raise ValueError(f"{len(self.looks)} looks ({self.min} to {self.max} seeds by {self.step}); at most "
                             f"{MAX_LOOKS}: a larger step")
        return self

    @property
    def looks(self) -> list[int]:
        """Seeds per cell at each look: min, min + step, …, and max."""
        return list(dict.fromkeys([*range(self.min, self.max, self.step), self.max]))




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
NAME_RULE = "use letters, digits, '_', '.', '-' and start with a letter or digit"


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a new study or a comparison (its stores' records, its folders), or
    None: what ``ablate keep`` and ``ablate compare --name`` check before they write anything."""
    if len(name) > MAX_NAME:
        return f"{len(name):,} characters; at most {MAX_NAME}"
    return None if NAME.match(name) else f"{name!r}: {NAME_RULE}"


def _study_name(v: str) -> str:
    if not NAME.match(v):
        raise ValueError(NAME_RULE)
    return v


def _entry_short_form(value: Any) -> Any:
    return {"study": value} if isinstance(value, str) else value


class CompareEntry(Strict):
    """One study of a comparison report, and which of its cells to show."""

    study: str = Field(description="the study's name")
    cells: Match | list[Match] = Field(
        default_factory=list,
        description="selectors of the cells to show (factor or dotted path → level label or value; a list "
                    "means any of them); none: every cell. Checked against the study's spec when rendering")

    @field_validator("study")
    @classmethod
    def _name(cls, v: str) -> str:
        return _study_name(v)

    @property
    def selectors(self) -> list[Match]:
        return [self.cells] if isinstance(self.cells, dict) else list(self.cells)


CompareItem = Annotated[CompareEntry, BeforeValidator(_entry_short_form, json_schema_input_type=CompareEntry | str)]


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
    seeds: int | list[int] | SequentialSeeds = Field(
        1, description="replicate seeds: a count k (0 … k−1), a list, or {min, max, step, until: decided}: seeds "
                       "added look by look until the comparisons are decided")
    tune: TuneSpec | None = Field(None, description="per-cell tuning before replication")
    references: list[Reference] = Field(
        default_factory=list, description="published values to compare with in the accuracy report")
    reports: Annotated[list[_report_entry()], _once("report", lambda r: getattr(r, "name", r))] = Field(
        default_factory=lambda: list(REPORTS),
        description="the reports to render: built-in reports, and report sections of plug-ins (by name, or "
                    "package.module:attribute), each a page of its own (docs/plugins.md); a built-in report "
                    "may be a mapping {name, sections, cells, order, reference} choosing what it shows")
    stats: StatsSpec = Field(default_factory=StatsSpec, description="how the reports judge the results")
    compare: list[CompareItem] = Field(
        default_factory=list,
        description="a comparison report over several studies (`ablate compare --spec FILE`): study names, "
                    "or {study:, cells:} to show only some cells of a study")

    _origins: dict[str, str] = PrivateAttr(default_factory=dict)

    @property
    def origins(self) -> dict[str, str]:
        """Where each key path was written (``file:line``, ``--set PATH``, ``-m PATH``) for a spec
        read by ``ablate.design.load``; empty otherwise. Problems found after validation (the
        plug-in contract) are located with it (``ablate.spec.locate``)."""
        return self._origins

    def written_at(self, origins: dict[str, str]) -> Spec:
        """This spec, remembering where its keys were written (``origins``)."""
        self._origins = dict(origins)
        return self

    @model_validator(mode="before")
    @classmethod
    def _cells_imply_design(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("cells") and "design" not in data:
            data = {**data, "design": "cells"}
        return data

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return _study_name(v)

    @field_validator("seeds", mode="plain", json_schema_input_type=int | list[int] | SequentialSeeds)
    @classmethod
    def _seeds(cls, v: Any) -> int | list[int] | SequentialSeeds:
        if isinstance(v, SequentialSeeds):
            return v
        if isinstance(v, dict):
            return SequentialSeeds.model_validate(v)
        return check_seeds(v, "seeds")

    @field_serializer("seeds")
    def _dump_seeds(self, v: Any) -> Any:
        # A union behind a plain validator: pydantic cannot pick the member to serialise by itself.
        return v.model_dump() if isinstance(v, SequentialSeeds) else v

    @field_validator("factors", mode="before")
    @classmethod
    def _factor_names(cls, v: Any) -> Any:
        if isinstance(v, dict):
            for key in v:
                if not isinstance(key, str) or not key:
                    raise ValueError(f"factor names are text; got {key!r}")
        return v

    @property
    def report_names(self) -> list[str]:
        """The reports to render, by name (an entry with options: its ``name``)."""
        return [r.name if isinstance(r, ReportOptions) else r for r in self.reports]

    def report_options(self, report: str) -> ReportOptions:
        """The options of ``report`` (none given: the whole report, every cell)."""
        for r in self.reports:
            if isinstance(r, ReportOptions) and r.name == report:
                return r
        return ReportOptions(name=report) if report in REPORTS else ReportOptions.model_construct(name=report)

    @property
    def sequential(self) -> SequentialSeeds | None:
        """The sequential design of the seeds, or None for a fixed count or list."""
        return self.seeds if isinstance(self.seeds, SequentialSeeds) else None

    @property
    def seed_list(self) -> list[int]:
        """Every replicate seed the study may run (a sequential study: up to its max)."""
        if isinstance(self.seeds, SequentialSeeds):
            return list(range(self.seeds.max))
        return list(range(self.seeds)) if isinstance(self.seeds, int) else list(self.seeds)

    def baseline(self, declared: bool = False) -> dict[str, Any]:
        """The resolved baseline configuration (defaults filled) as plain data, as its cell has it (a
        WSD schedule's default warm-up fixed in steps, ``wsd_warmup``); ``declared``: without that
        (what the design moves factors from, so that a level of steps or warm-up gets its own)."""
        data = self.model_dump(include={"task", "model", "train"})
        return data if declared or self.tunes_warmup else {**data, "train": wsd_warmup(data["train"])}

    @property
    def tunes_warmup(self) -> bool:
        """Whether tuning moves a setting the WSD default warm-up depends on (then it stays a fraction)."""
        return self.tune is not None and any(path in self.tune.space for path in WARMUP_TUNED)


# --- shape-only validation --------------------------------------------------------------------


def parse(raw: Any, source: str = "<spec>", combinations: bool = True) -> Spec:
    """Plain data checked against the shapes above (and the task's registered parameters), with
    every default filled. Nothing the design implies is checked here — not the factor levels, the
    cells, the constraints or the search space: ``ablate.design.validate`` checks all of it.
    ``combinations=False`` leaves out the checks of how the baseline's values fit together
    (``DEFER_COMBINATIONS``), which ``ablate.design`` makes on each resolved cell instead.
    Raises SpecError (and nothing else) naming key paths."""
    if not isinstance(raw, dict):
        raise SpecError([("", f"{source} must be a mapping of keys (name, task, model, ...)")])
    if raw.get("extends") is not None:
        raise SpecError([("extends", "only a spec file can extend another (use ablate.design.load)")])
    task, problems = resolve_task(raw.get("task")) if "task" in raw else ({}, [("task", "required key is missing")])
    spec = None
    try:
        spec = Spec.model_validate({**raw, "task": task} if not problems else {**raw, "task": {"name": "?"}},
                                   context=None if combinations else {DEFER_COMBINATIONS: True})
    except ValidationError as exc:
        problems += [(p, m) for p, m in validation_problems(exc, Spec) if not p.startswith("task")]
    except (RecursionError, OverflowError, ValueError, TypeError) as exc:  # pathological input
        problems.append(("", f"cannot read this spec: {type(exc).__name__}"))
    if problems or spec is None:
        raise SpecError(problems)
    return spec
