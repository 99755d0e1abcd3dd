"""Optuna's samplers and pruners, asked in memory (runner/phases.py's tuning): a protocol's search
space as Optuna distributions, its sampler and pruner, and the in-memory study of a cell's tuning
history they are asked in. With runner/rdb.py, runner/queue.py and runner/study.py, one of the
modules that call Optuna (tests/test_architecture.py): no per-cell study is ever stored, so the
whole tuning history is rebuilt here from the main study's trials at each question.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState


def distributions(space: dict[str, dict[str, Any]]) -> dict[str, BaseDistribution]:
    """A search space (``tune.space``) as Optuna distributions, by parameter path."""
    out: dict[str, BaseDistribution] = {}
    for path, dim in space.items():
        if dim["type"] == "categorical":
            out[path] = CategoricalDistribution(dim["choices"])
        elif dim["type"] == "int":
            out[path] = IntDistribution(dim["low"], dim["high"], log=dim["log"], step=1 if dim["log"] else dim["step"])
        else:
            out[path] = FloatDistribution(dim["low"], dim["high"], log=dim["log"], step=dim.get("step"))
    return out


def make_sampler(protocol: dict[str, Any], startup: int, seed: int) -> optuna.samplers.BaseSampler:
    name = protocol.get("sampler", "tpe")
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "gp":
        return optuna.samplers.GPSampler(seed=seed, n_startup_trials=startup)
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup, constant_liar=True)


def make_pruner(name: str, steps: int, eval_every: int) -> optuna.pruners.BasePruner:
    """The pruner of a protocol, sized to the trial's budget (tune.pruner documents the settings):
    median waits for 2 finished trials and a quarter of the steps, so an early noisy pass cannot
    stop a trial; successive halving keeps the best third at steps/9 and steps/3."""
    if name == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=steps // 4)
    if name == "successive_halving":
        return optuna.pruners.SuccessiveHalvingPruner(min_resource=max(eval_every, steps // 9), reduction_factor=3)
    raise ValueError(f"unknown pruner {name!r}; valid: median, successive_halving")


def memory(direction: str, sampler: optuna.samplers.BaseSampler | None = None) -> optuna.Study:
    """An empty in-memory study (nothing stored) to rebuild a cell's tuning history in."""
    return optuna.create_study(direction=direction, sampler=sampler)


def remember(study: optuna.Study, state: TrialState, params: Mapping[str, Any],
             dists: Mapping[str, BaseDistribution], values: Mapping[int, float] | None = None,
             value: float | None = None, system_attrs: Any = None) -> bool:
    """Add a finished or running trial of the history to the in-memory ``study``: its setting,
    its reported values by step and its objective ``value`` (COMPLETE only), and the pruner's
    bookkeeping (``system_attrs``). False, adding nothing, for a setting outside ``dists`` (a
    search space that changed since: not this protocol's history)."""
    try:
        study.add_trial(optuna.create_trial(
            state=state, params=dict(params), distributions=dict(dists), intermediate_values=dict(values or {}),
            value=value, system_attrs=dict(system_attrs) if isinstance(system_attrs, dict) else {}))
    except ValueError:
        return False
    return True
