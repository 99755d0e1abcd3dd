"""What a trial of each cell will take (``ablate.runner.costs``)."""

from __future__ import annotations

import pytest

from ablate.runner.costs import PACE_RECENT, cell_costs


def test_timed_cells_are_priced_at_the_machine_s_pace_now_not_at_their_own_past_trials():
    """lru_ablations: its tanh cell's tuning trials ran beside a test suite at about 2.5× their quiet
    wall; an hour after the suite ended the ETA still priced its replicates so (1h29m with 51 minutes
    left). Where ``plan --estimate`` timed every cell (``seconds``), the cells' ratios are known and
    the latest finished trials give the pace."""
    units = {"tanh": 530.0, "linear": 190.0}  # seconds a trial, as the plan timed them here
    busy = [("tanh", 2.5 * 530.0, 1.0)] * 3 + [("linear", 2.5 * 190.0, 1.0)] * 3  # beside the suite
    quiet = [("linear", 190.0 * f, 1.0) for f in (1.02, 0.98, 1.0, 1.01, 0.99, 1.0)]  # since it ended
    now = cell_costs(units, busy + quiet, seconds=True)
    assert now["tanh"] == pytest.approx(530.0, rel=0.02) and now["linear"] == pytest.approx(190.0, rel=0.02)
    # Without timings (the shapes' formula: its ratios are rough) a cell keeps its own trials' time.
    assert cell_costs(units, busy + quiet)["tanh"] == pytest.approx(2.5 * 530.0)
    # A load that came shows as soon as the latest trials are slower, for every cell.
    loaded = cell_costs(units, quiet + [("linear", 2.0 * 190.0, 1.0)] * PACE_RECENT, seconds=True)
    assert loaded["tanh"] == pytest.approx(2.0 * 530.0)


def test_a_trial_stopped_early_measures_the_pace_by_the_steps_it_ran():
    units = {"a": 100.0, "b": 300.0}
    half = cell_costs(units, [("a", 50.0, 0.5)] * 3, seconds=True)  # half its steps in half its time: pace 1
    assert half == pytest.approx({"a": 100.0, "b": 300.0})
    assert cell_costs(units, [], seconds=True) == {}  # nothing measured, nothing running: no price


def test_a_recurrence_that_loops_is_priced_above_a_scan_of_its_shape():
    """recall (linear_rnn, mingru, gru at one shape): the GRU cell's trials took twice the others'
    while its ETA priced them as a scan's until one had finished."""
    from ablate.runner.costs import SEQUENTIAL, TORCH_LOOP, trial_cost

    base = {"model": {"family": "linear_rnn", "d_model": 32, "state_dim": 32, "layers": 2},
            "task": {"name": "listops", "max_length": 64}, "train": {"steps": 100, "batch_size": 32}}

    def cost(**model: object) -> float:
        return trial_cost({**base, "model": {**base["model"], **model}})

    scan = cost()
    assert cost(family="mingru") == pytest.approx(scan)  # a log-space scan, as the linear one
    assert cost(family="gru") == pytest.approx(TORCH_LOOP["gru"] * scan)
    assert cost(family="lstm") == pytest.approx(TORCH_LOOP["lstm"] * scan)
    assert cost(nonlinearity="tanh") == pytest.approx(SEQUENTIAL * scan)
    assert cost(parameterisation="dense") == pytest.approx(SEQUENTIAL * scan)
