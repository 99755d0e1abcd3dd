"""The timings ``ablate plan --estimate`` keeps (ablate.runner.timings): what the plan priced is what a
running study's ETA reads back, for a context that holds every cell's shape and no other."""

from __future__ import annotations

import copy
import json
import sqlite3
from pathlib import Path

import pytest
from optuna.trial import TrialState
from support import RAW, stores

from ablate import design
from ablate.runner import estimate, phases, progress, queue, timings
from ablate.runner import plan as planning
from ablate.runner import study as st
from ablate.runner.costs import trial_cost

LINEAR = estimate.ShapeTiming(setup=0.5, step=0.01, val=0.2, test=0.1, probe=0.05, grads=0.02)
TANH = estimate.ShapeTiming(setup=0.5, step=0.06, val=0.9, test=0.45, probe=0.2, grads=0.02)  # a loop over steps


@pytest.fixture
def tmp_path(shm_tmp_path: Path) -> Path:
    return shm_tmp_path


pytestmark = pytest.mark.usefixtures("own_timings_cache")


def recurrences() -> design.Spec:
    """Two cells, a scan (linear) and a sequential loop (tanh), 2 seeds each, 400 steps."""
    raw = copy.deepcopy(RAW)
    del raw["tune"]
    raw.update(factors={"model.nonlinearity": ["none", "tanh"]})
    raw["train"] = {**raw["train"], "steps": 400}
    return design.validate(raw)


def estimated(spec: design.Spec, monkeypatch: pytest.MonkeyPatch) -> dict[str, float]:
    """``ablate plan --estimate`` of ``spec`` with each shape's timing given (LINEAR, TANH): what
    it keeps; returns each cell's trial seconds as the plan priced them."""
    def measure(config, probes, device, steps):
        return TANH if config["model"]["nonlinearity"] == "tanh" else LINEAR
    monkeypatch.setattr(estimate, "measure", measure)
    estimate.estimate(planning.build(spec, storage="sqlite:////nonexistent/optuna.db"), "cpu", workers=2,
                      overheads=estimate.Overheads(queue=1.0, imports=3.0, trial=0.25))
    return {c.id: timings.trial_seconds(c.config, spec.probes, measure(c.config, None, "cpu", 5))
            for c in design.cells(spec)}


def test_the_kept_timings_give_each_cell_the_seconds_the_plan_priced_it_at(monkeypatch):
    spec = recurrences()
    priced = estimated(spec, monkeypatch)
    configs = {c.id: c.config for c in design.cells(spec)}
    assert timings.kept_trial_seconds(configs) == pytest.approx(priced)
    assert priced[next(c.id for c in design.cells(spec) if c.config["model"]["nonlinearity"] == "tanh")] > 4 * min(
        priced.values())
    # A cell whose shape was not timed: no context holds every cell, so none is priced so.
    wider = {**configs, "other": {**configs[next(iter(configs))],
                                  "model": {**configs[next(iter(configs))]["model"], "d_model": 128}}}
    assert timings.kept_trial_seconds(wider) == {}
    # Another machine's timings (or another version's) are not this one's.
    kept = json.loads(timings.timings_file().read_text())
    timings.save({key.replace(json.dumps(timings._versions()["host"]), '"elsewhere"'): value
                  for key, value in kept.items()})
    assert timings.kept_trial_seconds(configs) == {}


def test_the_eta_prices_a_cell_not_seen_finish_by_the_kept_timings_not_the_shape_formula(tmp_path, monkeypatch):
    """lru_ablations: the shape formula priced a tanh recurrence at 2× a scan, while at L 784 its
    trials took 2.8× the linear ones (`ablate plan --estimate` had timed so): the ETA read 2h03m
    after the first linear trials where 2h35m were left, and rose when the tanh cells began."""
    spec = recurrences()
    opt, _ = st.prepare(spec, design.items(spec), stores(tmp_path))
    items = design.items(spec)
    trial = phases.claim(opt)
    queue.finish(opt, trial, TrialState.COMPLETE, {"status": "complete", "val_accuracy": 0.5, "steps": 400}, 0.5)
    with sqlite3.connect(tmp_path / "optuna.db") as db:
        db.execute("UPDATE trials SET datetime_start = ?, datetime_complete = ? WHERE number = ?",
                   ("2026-12-07 04:00:00.000000", "2026-12-07 04:03:00.000000", trial.number))
    done = trial.user_attrs["cell_id"]
    unseen = next(c.id for c in design.cells(spec) if c.id != done)
    config = {c.id: c.config for c in design.cells(spec)}
    formula = progress.snapshot(opt, items).cell_costs  # no kept timings: the shapes' formula
    assert formula[unseen] / formula[done] == pytest.approx(trial_cost(config[unseen]) / trial_cost(config[done]),
                                                            rel=0.01)
    priced = estimated(spec, monkeypatch)
    costs = progress.snapshot(opt, items).cell_costs
    assert costs[done] == pytest.approx(180.0)  # its own finished trial's wall
    assert costs[unseen] / costs[done] == pytest.approx(priced[unseen] / priced[done], rel=0.01)
    assert abs(costs[unseen] / costs[done] - formula[unseen] / formula[done]) > 0.5  # not the formula's ratio
    assert progress.snapshot(opt).cell_costs == pytest.approx(costs)  # ablate status: the trials' own configs
