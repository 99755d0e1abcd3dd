"""One schedule for the training loop, the probes and the estimate (ablate.schedule): what a real
trial does at each step is what ``Schedule`` says and what ``ablate plan --estimate`` prices."""

from __future__ import annotations

import polars as pl
import pytest
import torch

from ablate import training
from ablate.runner import estimate
from ablate.schedule import CONVERGENCE_PASSES, Schedule, window_start
from ablate.spec import ProbeSpec, TrainSpec
from ablate.tasks.data import TaskData, TaskInfo

INFO = TaskInfo("toy", "tokens", 12, 1, 3, "classification", "accuracy", 1 / 3, 10, "v0")
MODEL = {"d_model": 8, "state_dim": 8, "layers": 1, "heads": 2}


class Counting:
    def __init__(self) -> None:
        self.metrics: list[tuple[int, dict]] = []
        self.curves: list[pl.DataFrame] = []

    def log_metrics(self, step: int, values: dict[str, float]) -> None:
        self.metrics.append((step, values))

    def log_curves(self, rows: pl.DataFrame) -> None:
        self.curves.append(rows)


def data() -> TaskData:
    g = torch.Generator().manual_seed(0)

    def split(k: int) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.randint(1, 12, (k, 10), generator=g), torch.randint(0, 3, (k,), generator=g)

    return TaskData(INFO, split(32), split(8), split(8))


@pytest.mark.parametrize(("steps", "eval_every", "probe_every"), [(37, 7, 4), (40, 5, 10), (9, 50, 3)])
def test_a_real_trial_validates_logs_and_probes_where_the_schedule_says(steps, eval_every, probe_every):
    train = {"steps": steps, "batch_size": 4, "eval_every": eval_every, "log_every": 3, "lr": 1e-3}
    probes = ProbeSpec(every=probe_every, batch=4, white_noise=False)
    log = Counting()
    training.run_trial({"task": {}, "model": MODEL, "train": train}, 0, probes, log, data=data())
    when = Schedule.of(train, probes)
    val = sorted(s for s, v in log.metrics if "val/accuracy" in v)
    assert val == [s for s in range(1, steps + 1) if when.validates(s) or when.checks(s) or s == steps]
    logged = sorted(s for s, v in log.metrics if "train/loss" in v)
    assert logged == [s for s in range(1, steps + 1) if when.logs(s)]
    curves = pl.concat([c for c in log.curves if c.height])
    assert sorted(curves.filter(pl.col("kind") == "probe")["step"].unique()) == [
        s for s in range(steps + 1) if when.probes(s)]
    assert sorted(curves.filter(pl.col("kind") == "grad")["step"].unique()) == [
        s for s in range(steps + 1) if when.measures_grads(s)]
    # The estimate prices exactly those counts: a validation, a probe and a gradient pass at 1 s each.
    t = estimate.ShapeTiming(setup=0.0, step=0.0, val=1.0, test=0.0, probe=10.0, grads=100.0)
    priced = estimate.trial_seconds({"train": train}, probes, t, overhead=0.0)
    grad_steps = len([s for s in range(steps + 1) if when.measures_grads(s)])
    probe_steps = len([s for s in range(steps + 1) if when.probes(s)])
    assert priced == pytest.approx(len(val) + 10.0 * probe_steps + 100.0 * grad_steps)


@pytest.mark.parametrize(("steps", "eval_every"), [(300, 50), (8000, 100), (1000, 300), (100, 7), (4000, 200)])
def test_the_last_fifth_starts_with_a_pass_and_holds_enough_of_them(steps, eval_every):
    when = Schedule(steps, eval_every, 25)
    start = window_start(steps)
    assert start == steps - steps // 5
    passes = [s for s in range(start, steps + 1) if when.validates(s) or when.checks(s) or s == steps]
    assert passes[0] == start and passes[-1] == steps
    assert len(passes) >= CONVERGENCE_PASSES
    periodic = [s for s in range(1, steps) if s % eval_every == 0]
    assert [s for s in range(1, steps) if when.validates(s)] == periodic  # early stopping sees these only


def test_a_wsd_schedule_reads_the_last_fifth_of_its_stable_phase():
    # Its decay raises the metric whether or not a longer run would: the flag reads the constant phase.
    train = TrainSpec(steps=1000, schedule="wsd", decay=0.2, eval_every=300)
    when = Schedule.of(train)
    assert when.window == (640, 800)
    passes = [s for s in range(1001) if when.validates(s) or when.checks(s)]
    inside = [s for s in passes if 640 <= s <= 800]
    assert inside[0] == 640 and inside[-1] == 800 and len(inside) >= CONVERGENCE_PASSES
    assert [s for s in range(1, 1000) if when.validates(s)] == [300, 600, 900]
    assert not any(when.checks(s) for s in range(801, 1001))  # none in the decay
    cosine = Schedule.of(train.model_copy(update={"schedule": "cosine"}))
    assert cosine.window == (800, 1000)
    tiny = Schedule.of(TrainSpec(steps=24, schedule="wsd", warmup_steps=2, decay_steps=3, eval_every=2))
    assert tiny.window == (17, 21)  # every step of a short window, its stable end included
    assert [s for s in range(17, 22) if tiny.validates(s) or tiny.checks(s)] == [17, 18, 19, 20, 21]


def test_a_longer_wsd_run_continues_only_where_its_window_has_the_shorter_runs_passes():
    short = TrainSpec(steps=1000, schedule="wsd", decay=0.2, eval_every=300, warmup_steps=50)
    assert training.continuable(short, short.model_copy(update={"steps": 2000})) == 800
    # 1,100 steps: its window [704, 880] starts before the checkpoint at 800, at passes 1,000 never made.
    assert training.continuable(short, short.model_copy(update={"steps": 1100})) is None


def test_a_continuation_blocker_names_the_setting_continuable_refuses_on():
    from ablate.schedule import continuation_blocker

    short = TrainSpec(steps=1000, schedule="wsd", decay=0.2, eval_every=300, warmup_steps=50)
    for update in ({"steps": 2000}, {"steps": 4000, "decay_steps": 100}):
        long = short.model_copy(update=update)
        assert training.continuable(short, long) is not None and continuation_blocker(short, long) is None
    cases = {"train.eval_every": {"steps": 1100}, "train.steps": {"steps": 900},
             "train.warmup_steps": {"steps": 2000, "warmup_steps": 60},
             "train.warmup:": {"steps": 2000, "warmup_steps": None, "warmup": 0.1},
             "train.decay": {"steps": 2000, "decay_steps": 1500},
             "train.schedule": {"steps": 2000, "schedule": "cosine"}}
    for setting, update in cases.items():
        long = short.model_copy(update=update)
        assert training.continuable(short, long) is None, setting
        assert continuation_blocker(short, long).startswith(setting), (setting, continuation_blocker(short, long))


def test_a_doubled_wsd_budget_with_default_settings_continues():
    # Issue 43: the natural edit (steps 120 → 240) keeps the default warm-up, fixed in steps on wsd.
    from ablate import design
    from ablate.spec import WSD_WARMUP_STEPS, parse

    def cell(train: dict, **extra: object) -> dict:
        raw = {"name": "w", "task": {"name": "adding"}, "train": {"eval_every": 50, **train}, **extra}
        return design.cells(parse(raw))

    short, long = (cell({"schedule": "wsd", "steps": n})[0].config["train"] for n in (120, 240))
    assert short["warmup_steps"] == long["warmup_steps"] == WSD_WARMUP_STEPS
    assert training.continuable(TrainSpec.model_validate(short), TrainSpec.model_validate(long)) == 96
    # A cosine schedule, a declared fraction or count: as before (no warmup_steps written: ids unchanged).
    assert cell({"steps": 120})[0].config["train"]["warmup_steps"] is None
    assert cell({"schedule": "wsd", "steps": 120, "warmup": 0.2})[0].config["train"]["warmup_steps"] is None
    assert cell({"schedule": "wsd", "steps": 120, "warmup_steps": 7})[0].config["train"]["warmup_steps"] == 7
    # Where the fixed count equals the fraction's (200 steps: 20) nothing is written either.
    assert cell({"schedule": "wsd", "steps": 200})[0].config["train"]["warmup_steps"] is None
    # Tiny runs: at most a fifth of the steps; a factor's levels get their own warm-up.
    assert cell({"schedule": "wsd", "steps": 30})[0].config["train"]["warmup_steps"] == 6
    levels = cell({"schedule": "wsd", "steps": 120}, factors={"train.warmup": [0.1, 0.25]})
    assert [c.config["train"]["warmup_steps"] for c in levels] == [WSD_WARMUP_STEPS, None]
    # Tuning a setting the warm-up depends on keeps the fraction.
    tuned = cell({"schedule": "wsd", "steps": 120},
                 tune={"trials": 2, "space": {"train.warmup": {"low": 0.05, "high": 0.2}}})
    assert tuned[0].config["train"]["warmup_steps"] is None
