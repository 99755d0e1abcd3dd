"""The ``ablate.stats`` package as a whole: its lazy re-exports, no torch, and the per-cell convergence
table of the reports (its trial-level rule is ``tests/test_stats_convergence.py``'s)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from frames import make_trials

from ablate import stats


def test_no_torch_needed():
    code = ("import sys, ablate.stats, ablate.stats.norms, ablate.report.accuracy, ablate.report.norm_tables; "
            "assert 'torch' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[1])


def test_convergence_from_constructed_frames_and_without_the_columns():
    trials = make_trials({"short": 0.7, "done": 0.8, "old": 0.8}, seeds=3)
    assert not stats.cell_convergence(trials, 300)["still_improving"].any()  # columns absent: unknown, not flagged
    trials["converged"] = [False, True, True, True, True, True, None, None, None]
    trials["val_gain_last"] = [0.041, 0.002, 0.01, 0.0, 0.001, 0.0, 0.03, np.nan, np.nan]
    trials["steps"] = [300, 300, 300, 180, 300, 300, np.nan, np.nan, np.nan]
    trials["stopped_early"] = [False, False, False, True, False, False, None, None, None]
    trials["best_step"] = [300, 290, 300, 150, 250, 300, None, None, None]
    conv = stats.cell_convergence(trials, {"short": 300, "done": 300, "old": 300}, min_gain=0.01).set_index("cell_id")
    assert conv.loc["short", "still_improving"] and conv.loc["short", "n_unconverged"] == 1
    assert conv.loc["short", "gain_max"] == pytest.approx(0.041)
    assert not conv.loc["done", "still_improving"] and conv.loc["done", "steps_differ"]
    assert conv.loc["done", "steps_min"] == 180 and conv.loc["done", "n_stopped_early"] == 1
    # No converged flag, but a gain of 3 points over the last 20%: still improving.
    assert conv.loc["old", "still_improving"] and conv.loc["old", "n_known"] == 1
    assert stats.step_budget(trials.assign(**{"train.steps": "600"}), 300) == {c: 600.0 for c in conv.index}
    # A run stopped early ended on its plateau: not still improving, even where a record from
    # before that rule says converged False.
    trials.loc[0, "stopped_early"] = True
    again = stats.cell_convergence(trials, {"short": 300, "done": 300, "old": 300}, min_gain=0.01).set_index("cell_id")
    assert not again.loc["short", "still_improving"] and again.loc["short", "n_stopped_early"] == 1
    assert again.loc["short", "gain_max"] == pytest.approx(0.01)  # the runs that used the budget, not the stop's


def test_a_cell_is_still_improving_when_its_runs_gains_rise_together_not_when_one_run_is_flagged():
    """Eight runs with the trend test recorded: one flagged alone (as a flat cell's noise flags one
    in twenty) does not mark the cell; three that all rose beyond their spread do."""
    flat = make_trials({"flat": 0.7}, seeds=8)
    flat["val_gain_last"] = [0.002, -0.001, 0.0, 0.011, -0.003, 0.001, -0.002, 0.0]
    flat["val_gain_se"] = 0.002
    flat["converged"] = [True, True, True, False, True, True, True, True]
    flat["stopped_early"] = False
    conv = stats.cell_convergence(flat, 300).iloc[0]
    assert conv["n_unconverged"] == 1 and not conv["still_improving"]
    rising = make_trials({"rising": 0.7}, seeds=3)
    rising["val_gain_last"] = [0.012, 0.009, 0.011]
    rising["val_gain_se"] = 0.002
    rising["converged"] = False
    rising["stopped_early"] = False
    assert stats.cell_convergence(rising, 300).iloc[0]["still_improving"]
    rising["stopped_early"] = [True, True, False]  # one run used the budget: its own flag decides
    assert stats.cell_convergence(rising, 300).iloc[0]["still_improving"]
