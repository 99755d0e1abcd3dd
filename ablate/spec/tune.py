"""``tune:`` — per-cell tuning before replication: its search space, objective and sampler."""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, field_validator, model_validator

from ablate.spec.basemodel import Strict
from ablate.spec.seeds import MAX_TUNE_TRIALS, TUNE_SEED_BASE, Scalar, check_seeds, choice

__all__ = ["OBJECTIVE_METRICS", "PRUNERS", "Objective", "TuneDim", "TuneParam", "TuneSpec"]


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
PRUNERS = ("none", "median", "successive_halving")


class Objective(Strict):
    """What tuning optimises: a validation metric (never a test metric) and its direction."""

    metric: choice(OBJECTIVE_METRICS) = Field("val_accuracy", description="validation metric of a tuning trial")
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
    sampler: Literal["tpe", "random", "gp", "grid"] = Field(
        "tpe", description="Optuna sampler (in a finite space, lists and int ranges, its random draws and a model's "
        "startup trials take the cell's settings in a shuffled order, none twice on a tuning seed before each ran "
        "there, and a model's ask for a setting its seed ran is asked again), or grid: every combination of the "
        "space's choices once on every tuning "
        "seed, the same for every cell (trial i takes combination i // k on tuning seed i mod k, k the number of "
        "tuning seeds; trials must equal combinations × k), the best combination chosen by its mean over the seeds")
    startup_trials: int | None = Field(
        None, ge=0, description="tpe/gp: random trials before modelling; default min(10, max(2, trials // 3))")
    seeds: int | list[int] = Field(
        1, description=f"tuning seeds: a count k (seeds {TUNE_SEED_BASE} … {TUNE_SEED_BASE}+k−1) or a list; "
                       "must be disjoint from the replicate seeds; trial i uses seed i mod k. A setting several "
                       "trials ran (a grid's, on every seed) is judged by its mean over them")
    objective: Objective = Field(default_factory=Objective)
    pruner: choice(PRUNERS) = Field(
        "none", description="stop unpromising tuning trials on their intermediate validation values, compared "
        "with the tuning trials of their cell only: median (below the median of finished trials at the same "
        "step, after 2 finished trials and a quarter of the steps) or successive_halving (rungs at steps/9, "
        "steps/3; reduction factor 3). Replicates are never pruned. Trials fused into one model (`--fuse`) start "
        "together, so they are not pruned against each other. Not with a grid on several tuning seeds, whose pick "
        "is a mean over the seeds")

    @field_validator("seeds", mode="plain", json_schema_input_type=int | list[int])
    @classmethod
    def _seeds(cls, v: Any) -> int | list[int]:
        return check_seeds(v, "tuning seeds")

    @model_validator(mode="after")
    def _grid(self) -> TuneSpec:
        if self.sampler != "grid":
            return self
        ranges = [path for path, dim in self.space.items() if dim.choices is None]
        if ranges:
            raise ValueError(f"sampler grid needs choices (a list) for every dimension; tune.space.{ranges[0]} is "
                             "a range")
        combinations = math.prod(len(dim.choices or ()) for dim in self.space.values())
        k = len(self.seed_list)
        if self.trials != combinations * k:
            on = f" on each of the {k} tuning seeds" if k > 1 else ""
            times = f" × {k} seeds" if k > 1 else ""
            raise ValueError(f"sampler grid runs every combination once{on}: tune.trials must be {combinations * k} "
                             f"(the product of the choices' lengths{times}), not {self.trials}")
        if k > 1 and self.pruner != "none":
            # The pick is a setting's mean over the seeds; a pruned trial has no final value to average
            # (rotation_heads: the median pruner stopped one of 2e-2's three seeds at step 7,400 of 8,000).
            raise ValueError(f"a grid on {k} tuning seeds picks the combination with the best mean over them, and a "
                             f"pruned trial has no final value to average: tune.pruner must be none, not "
                             f"{self.pruner}")
        return self

    @property
    def seed_list(self) -> list[int]:
        return [TUNE_SEED_BASE + i for i in range(self.seeds)] if isinstance(self.seeds, int) else list(self.seeds)

    @property
    def resolved_startup_trials(self) -> int:
        return self.startup_trials if self.startup_trials is not None else min(10, max(2, self.trials // 3))
