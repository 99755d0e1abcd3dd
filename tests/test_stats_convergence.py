"""The convergence flag a trial records (ablate.stats.convergence.last_fifth): exactly the last
fifth of the steps, a gain beyond the passes' own noise, early stops converged."""

from __future__ import annotations

import numpy as np
import pytest

from ablate.stats.convergence import last_fifth


def test_a_rising_line_is_flagged_with_its_gain_over_the_last_fifth():
    rising = [(s, 0.3 + 0.0005 * s) for s in range(10, 101, 2)]  # +0.5 points per 10 steps
    flag = last_fifth(rising, 100, maximize=True, tol=0.005)
    assert flag["converged"] is False
    assert flag["val_gain_last"] == pytest.approx(0.01)  # 20 steps × 0.0005: the window is [80, 100]
    assert flag["val_gain_se"] == pytest.approx(0.0, abs=1e-12)


def test_the_window_is_exactly_the_last_fifth_whatever_came_before():
    # A steep climb up to step 79, then flat from the boundary on: nothing of the climb counts.
    history = [(s, 0.2 + 0.01 * s) for s in range(0, 80, 10)] + [(s, 0.9) for s in range(80, 101, 4)]
    flag = last_fifth(history, 100, True, 0.005)
    assert flag["converged"] is True and flag["val_gain_last"] == pytest.approx(0.0, abs=1e-12)


def test_a_noisy_plateau_is_not_improving_where_a_running_best_would_rise():
    rng = np.random.default_rng(3)
    flagged = 0
    for _ in range(400):
        flat = [(s, 0.6 + rng.normal(0, 0.01)) for s in range(800, 1001, 25)]
        flagged += last_fifth(flat, 1000, True, 0.005)["converged"] is False
    assert flagged / 400 <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / 400)  # the one-sided 5% test, within noise


def test_a_gain_within_the_noise_or_below_the_tolerance_is_not_flagged():
    noisy = [(80, 0.50), (84, 0.53), (88, 0.49), (92, 0.52), (96, 0.50), (100, 0.52)]  # +0.7 pt trend, ±2 pt noise
    assert last_fifth(noisy, 100, True, 0.005)["converged"] is True
    small = [(s, 0.5 + 0.0001 * s) for s in range(80, 101, 4)]  # a clean +0.2 points: below tol 0.5 points
    assert last_fifth(small, 100, True, 0.005)["converged"] is True


def test_a_loss_improves_when_it_falls_relative_to_its_level():
    loss = [(s, 2.0 - 0.001 * (s - 80)) for s in range(80, 101, 4)]  # 2.0 → 1.98: a 1% decrease
    flag = last_fifth(loss, 100, False, 0.005)
    assert flag["converged"] is False and flag["val_gain_last"] == pytest.approx(0.01)
    assert last_fifth(loss, 100, False, 0.02)["converged"] is True


def test_too_few_passes_is_unknown_and_an_early_stop_converged():
    assert last_fifth([(80, 0.5), (100, 0.6)], 100, True, 0.005) == {
        "converged": None, "val_gain_last": None, "val_gain_se": None}
    # A run that patience ended at 5,800 steps converged, whatever its last fifth's trend says.
    history = [(s, 0.30 + s * 0.2 / 5800) for s in range(100, 5801, 100)]
    assert last_fifth(history, 5800, True, 0.005)["converged"] is False  # the trend alone
    stopped = last_fifth(history, 5800, True, 0.005, stopped=True)
    assert stopped["converged"] is True and stopped["val_gain_last"] > 0
    assert last_fifth([(100, 0.5)], 100, True, 0.005, stopped=True)["converged"] is True
