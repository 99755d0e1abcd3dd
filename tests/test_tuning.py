"""Tune-then-replicate's shared parts (``ablate.tuning``): applying a setting, seeding the sampler,
choosing the best finished trial."""

from __future__ import annotations

import copy
import math

import pytest

from ablate import tuning

CONFIG = {"model": {"layers": 1, "init": {"scheme": "ring", "r_min": 0.9}}, "train": {"lr": 1e-3, "steps": 5}}


def test_apply_sets_dotted_paths_on_a_copy():
    before = copy.deepcopy(CONFIG)
    out = tuning.apply(CONFIG, {"train.lr": 0.01, "model.init.r_min": 0.5, "model.layers": 3})
    assert out == {"model": {"layers": 3, "init": {"scheme": "ring", "r_min": 0.5}},
                   "train": {"lr": 0.01, "steps": 5}}
    assert CONFIG == before  # the config a cell carries is not touched
    assert tuning.apply(CONFIG, {}) == CONFIG and tuning.apply(CONFIG, {}) is not CONFIG


def test_apply_creates_no_paths():
    with pytest.raises(KeyError):
        tuning.apply(CONFIG, {"optim.beta": 0.9})  # "optim" is not a mapping of the config
    with pytest.raises(KeyError):
        tuning.apply(CONFIG, {"train.lr.value": 0.9})  # lr is a leaf


def test_sampler_seed_is_stable_and_differs_across_trials_and_cells():
    # The seed of a tuning trial must not change between versions: a resumed study re-samples
    # its unfinished tuning trials and must draw the settings it drew before.
    assert tuning.sampler_seed("0123456789ab", 0) == 3890799955
    assert tuning.sampler_seed("0123456789ab", 1) == 515268711
    assert tuning.sampler_seed("ba9876543210", 0) == 1247754304
    seeds = {tuning.sampler_seed(cell, i) for cell in ("a", "b", "c") for i in range(50)}
    assert len(seeds) == 150 and all(0 <= s < 2**32 for s in seeds)


def test_best_follows_the_direction_and_breaks_ties_by_index():
    results = [(0, {"lr": 1}, 0.5), (1, {"lr": 2}, 0.7), (2, {"lr": 3}, 0.2), (3, {"lr": 4}, 0.7)]
    assert tuning.best(results, "maximize")[:2] == (1, {"lr": 2})  # 1 and 3 tie: the lower index
    assert tuning.best(results, "minimize")[:2] == (2, {"lr": 3})
    assert tuning.best(list(reversed(results)), "maximize")[:2] == (1, {"lr": 2})  # order does not matter


def test_best_ignores_what_did_not_finish_with_a_number():
    results = [(0, {"a": 0}, math.nan), (1, {"a": 1}, 0.1), (2, {"a": 2}, math.inf), (3, {"a": 3}, None)]
    assert tuning.best(results, "maximize")[:2] == (1, {"a": 1})
    assert tuning.best(results, "minimize")[:2] == (1, {"a": 1})
    assert tuning.best([(0, {}, math.nan)], "maximize") is None
    assert tuning.best([], "minimize") is None


def test_grid_point_enumerates_the_product_first_dimension_slowest():
    space = {"a": {"type": "categorical", "choices": [1, 2]}, "b": {"type": "categorical", "choices": ["x", "y", "z"]}}
    points = [tuning.grid_point(space, i) for i in range(6)]
    assert points[0] == {"a": 1, "b": "x"} and points[1] == {"a": 1, "b": "y"} and points[3] == {"a": 2, "b": "x"}
    assert len({tuple(p.values()) for p in points}) == 6
    with pytest.raises(IndexError, match="grid trial 6 of 6"):
        tuning.grid_point(space, 6)


def test_best_judges_a_setting_by_its_mean_over_the_trials_that_ran_it():
    # lr 2 has the luckiest single trial (0.9) but the worse mean; lr 1 is steadier and better on average.
    results = [(0, {"lr": 1}, 0.70), (1, {"lr": 1}, 0.72), (2, {"lr": 2}, 0.90), (3, {"lr": 2}, 0.40)]
    assert tuning.best(results, "maximize")[:2] == (0, {"lr": 1})
    assert tuning.best(results, "minimize")[:2] == (2, {"lr": 2})  # the index is the setting's first trial's
    assert [(s.index, s.mean, s.finished, s.trials) for s in tuning.scores(results)] == [
        (0, pytest.approx(0.71), 2, 2), (2, pytest.approx(0.65), 2, 2)]


def test_a_setting_that_did_not_finish_on_every_seed_ranks_after_those_that_did():
    # lr 3 diverged on its second seed: its one finished value (0.95) does not make it the pick.
    results = [(0, {"lr": 1}, 0.60), (1, {"lr": 1}, 0.62), (2, {"lr": 3}, 0.95), (3, {"lr": 3}, None)]
    assert tuning.best(results, "maximize")[:2] == (0, {"lr": 1})
    assert tuning.scores(results)[1][:5] == (2, {"lr": 3}, 0.95, 1, 2)
    # With no setting finished everywhere, the partial ones are still ranked, by their means.
    partial = [(0, {"lr": 1}, 0.60), (1, {"lr": 1}, math.nan), (2, {"lr": 3}, 0.95), (3, {"lr": 3}, None)]
    assert tuning.best(partial, "maximize")[:2] == (2, {"lr": 3})


def test_a_retried_trial_s_attempts_count_once():
    # Trial 2 was killed (its attempt has no value) and retried to 0.95: lr 3 finished on both its
    # seeds, so it is not ranked after lr 1 as a setting that failed on one.
    results = [(0, {"lr": 1}, 0.60), (1, {"lr": 1}, 0.62), (2, {"lr": 3}, None), (2, {"lr": 3}, 0.95),
               (3, {"lr": 3}, 0.93)]
    assert tuning.best(results, "maximize") == (2, {"lr": 3}, pytest.approx(0.94), 2, 2, (2, 3))
    # One tuning seed: a setting whose one trial was killed then finished is as if never killed.
    assert tuning.best([(0, {"lr": 1}, 0.5), (1, {"lr": 2}, None), (1, {"lr": 2}, 0.7)], "maximize")[:2] == (
        1, {"lr": 2})


def test_a_setting_at_the_edge_of_its_space_is_named_inside_it_is_not():
    grid = {"type": "categorical", "choices": [5e-3, 1e-2, 2e-2]}
    assert tuning.at_edge(2e-2, grid["choices"]) == "largest" and tuning.at_edge(5e-3, grid["choices"]) == "smallest"
    assert tuning.at_edge(1e-2, grid["choices"]) is None
    assert tuning.at_edge(1.0, ["a", 1.0]) is None  # one numeric choice has no edge
    # A log range: its outer 5% on the log scale (1e-4..1e-1: within a factor 10**0.15 of an end).
    assert tuning.at_edge(0.08, low=1e-4, high=1e-1, log=True) == "largest"
    assert tuning.at_edge(0.05, low=1e-4, high=1e-1, log=True) is None
    assert tuning.at_edge(0.097, low=1e-4, high=1e-1) == "largest"  # a linear range: its outer 5% of the width
    assert tuning.at_edge(0.07, low=1e-4, high=1e-1) is None
    space = {"train.lr": grid, "model.init.scheme": {"type": "categorical", "choices": ["ring", "rotrnn"]}}
    assert tuning.edge_note({"train.lr": 1e-2, "model.init.scheme": "ring"}, space) == ""
    assert tuning.edge_note({"train.lr": 2e-2}, space) == (
        "its tuning's best train.lr, 0.02, is at the largest end of its search space: the best may lie beyond it "
        "(a wider tune.space would tell)")


def test_a_finite_space_lists_every_setting_and_a_float_range_makes_it_infinite():
    space = {"train.lr": {"type": "categorical", "choices": [1e-3, 3e-3]},
             "model.heads": {"type": "int", "low": 1, "high": 5, "log": False, "step": 2}}
    assert tuning.combinations(space) == [{"train.lr": lr, "model.heads": h} for lr in (1e-3, 3e-3) for h in (1, 3, 5)]
    assert len(tuning.combinations({"x": {"type": "int", "low": 1, "high": 8, "log": True, "step": 1}})) == 8
    assert tuning.combinations({**space, "wd": {"type": "float", "low": 0.0, "high": 0.1, "log": False,
                                                "step": 0.05}}) is None
    huge = {f"d{i}": {"type": "int", "low": 0, "high": 9, "log": False, "step": 1} for i in range(5)}
    assert tuning.combinations(huge) is None  # 100,000 settings: left to the sampler


def test_unrepeated_draws_cover_each_seed_before_repeating_and_start_the_seeds_apart():
    combos = [{"lr": v} for v in (1, 2, 3)]
    for k in (1, 2, 3, 4):
        draws = [tuning.unrepeated(combos, "cell", i, k)["lr"] for i in range(6 * k)]
        for s in range(k):
            on_seed = draws[s::k]
            assert sorted(on_seed[:3]) == [1, 2, 3] and sorted(on_seed[3:6]) == [1, 2, 3]
        assert len(set(draws[:min(k, 3)])) == min(k, 3)  # the seeds' first trials differ
    orders = {tuple(c["lr"] for c in tuning.shuffled(combos, f"cell{i}")) for i in range(20)}
    assert len(orders) > 1  # each cell its own order


def test_a_setting_s_mean_says_over_how_many_seeds_and_trials():
    score = tuning.best([(0, {"lr": 1}, 0.8), (1, {"lr": 1}, 0.9), (2, {"lr": 2}, 0.1)], "maximize")
    assert score.over(1) == ", the mean over 2 trials on 1 tuning seed"  # a space exhausted on its one seed
    assert score.over(2) == ", the mean over 2 tuning seeds"
    one = tuning.best([(0, {"lr": 1}, 0.8), (1, {"lr": 2}, 0.1)], "maximize")
    assert one.over(1) == ""
