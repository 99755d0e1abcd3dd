"""Optuna's samplers and pruners asked in memory (ablate.runner.samplers): a search space as
distributions, a history rebuilt in an in-memory study, settings outside today's space left out."""

from __future__ import annotations

import pytest
from optuna.trial import TrialState

from ablate.runner.samplers import distributions, make_pruner, make_sampler, memory, remember

SPACE = {"train.lr": {"type": "float", "low": 1e-4, "high": 1e-2, "log": True},
         "model.d_state": {"type": "int", "low": 4, "high": 16, "log": False, "step": 4},
         "train.optimiser": {"type": "categorical", "choices": ["adamw", "sgd"]}}


def test_a_history_is_remembered_and_a_setting_outside_the_space_left_out():
    dists = distributions(SPACE)
    history = memory("maximize", make_sampler({"sampler": "random"}, startup=0, seed=3))
    inside = {"train.lr": 1e-3, "model.d_state": 8, "train.optimiser": "sgd"}
    assert remember(history, TrialState.COMPLETE, inside, dists, value=0.5)
    assert remember(history, TrialState.PRUNED, inside, dists, {10: 0.2})
    assert remember(history, TrialState.RUNNING, inside, dists, {10: 0.3}, system_attrs={"rung": 1})
    assert not remember(history, TrialState.COMPLETE, {**inside, "model.d_state": 32}, dists, value=0.9)
    trials = history.get_trials(deepcopy=False)
    assert [t.state for t in trials] == [TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING]
    assert trials[1].intermediate_values == {10: 0.2} and trials[2].system_attrs == {"rung": 1}
    asked = history.ask(dists).params
    assert 1e-4 <= asked["train.lr"] <= 1e-2 and asked["model.d_state"] in (4, 8, 12, 16)
    assert asked["train.optimiser"] in ("adamw", "sgd")


def test_the_samplers_and_pruners_of_a_protocol():
    assert type(make_sampler({}, 10, 0)).__name__ == "TPESampler"
    assert type(make_sampler({"sampler": "random"}, 10, 0)).__name__ == "RandomSampler"
    assert type(make_pruner("median", 90, 10)).__name__ == "MedianPruner"
    assert type(make_pruner("successive_halving", 90, 10)).__name__ == "SuccessiveHalvingPruner"
    with pytest.raises(ValueError, match="unknown pruner"):
        make_pruner("hyperband", 90, 10)
