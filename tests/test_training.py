"""One trial's training (ablate.training): the schedule, the step (accumulation, divergence,
clipping order), evaluation on a case worked out by hand, and checkpoint/resume of a tiny model."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import polars as pl
import pytest
import torch
from torch import nn

from ablate import training
from ablate.models import build_model
from ablate.spec import ModelSpec, ProbeSpec, TrainSpec
from ablate.tasks.data import TaskData, TaskInfo

CLASSES = TaskInfo("toy", "tokens", 12, 1, 3, "classification", "accuracy", 1 / 3, 10, "v0")
PER_STEP = TaskInfo("toy", "tokens", 12, 1, 12, "per_step", "bpc", 3.0, 10, "v0")
MODEL = {"d_model": 8, "state_dim": 8, "layers": 2, "heads": 2}


def network(info: TaskInfo = CLASSES, seed: int = 0, **over) -> training.Network:
    torch.manual_seed(seed)
    return build_model(ModelSpec.model_validate({**MODEL, **over}), info)


def grads(model: nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def test_schedule_warms_up_linearly_then_decays_by_half_cosine():
    train = TrainSpec(steps=40, warmup=0.25, lr=0.2, recurrent_lr_factor=0.5)
    model = network()
    optimiser, scheduler = training.make_optimiser(model, train)
    by_group = {g["name"]: g for g in optimiser.param_groups}
    assert set(by_group) == {"recurrent", "decay", "no_decay"}
    seen = []
    for _ in range(train.steps + 1):
        seen.append({name: g["lr"] for name, g in by_group.items()})
        optimiser.step()
        scheduler.step()
    for k, lrs in enumerate(seen):  # k = scheduler steps taken so far
        factor = (k + 1) / 10 if k < 10 else 0.5 * (1 + math.cos(math.pi * (k - 10) / 30))
        assert lrs["decay"] == pytest.approx(0.2 * factor, abs=1e-12), k
        assert lrs["recurrent"] == pytest.approx(0.1 * factor, abs=1e-12), k
    assert seen[9]["decay"] == pytest.approx(0.2)  # the peak at the end of the warm-up
    assert seen[40]["decay"] == pytest.approx(0.0, abs=1e-15)
    assert all(a["decay"] < b["decay"] for a, b in zip(seen[:9], seen[1:10], strict=True))
    assert all(a["decay"] > b["decay"] for a, b in zip(seen[10:40], seen[11:41], strict=True))


def test_accumulated_step_equals_the_full_batch():
    """Micro-batches weighted by their scored targets give the full-batch gradient, loss and
    counts, also when they score different numbers of targets or none at all."""
    g = torch.Generator().manual_seed(0)
    x = torch.randint(1, 12, (8, 10), generator=g)
    y = torch.randint(0, 12, (8, 10), generator=g)
    y[:2] = training.IGNORE  # the first micro-batch scores nothing (its own mean loss is 0/0)
    y[2, 3:] = training.IGNORE  # the second scores fewer targets than the others
    train = TrainSpec(steps=10, grad_clip=0.5)
    results, raw, after = [], [], []
    for accumulate in (1, 4):
        model = network(PER_STEP)
        optimiser, scheduler = training.make_optimiser(model, train)
        results.append(training.train_step(model, optimiser, scheduler, x, y, train, accumulate,
                                           before_clip=lambda m=model: raw.append(grads(m))))
        after.append(copy.deepcopy(model.state_dict()))
    full, acc = results
    assert not full.diverged and not acc.diverged
    assert (full.correct, full.counted) == (acc.correct, acc.counted) == (full.correct, 80 - 2 * 10 - 7)
    assert acc.loss == pytest.approx(full.loss, rel=1e-6)
    assert acc.layer_norms == pytest.approx(full.layer_norms, rel=1e-6)
    assert torch.allclose(acc.summary, full.summary, rtol=1e-5)
    assert raw[0].keys() == raw[1].keys() and len(raw[0]) > 10
    for name in raw[0]:
        assert torch.allclose(raw[1][name], raw[0][name], rtol=1e-4, atol=1e-7), name
    # ... so the update (clipped, then AdamW) is the same too.
    for name in after[0]:
        assert torch.allclose(after[1][name], after[0][name], rtol=1e-4, atol=1e-6), name


def test_step_clips_after_the_gradient_probe_and_steps_the_scheduler():
    x, y = torch.randint(1, 12, (4, 10)), torch.randint(0, 3, (4,))
    train = TrainSpec(steps=10, grad_clip=1e-3)
    model = network()
    optimiser, scheduler = training.make_optimiser(model, train)
    seen = []
    training.train_step(model, optimiser, scheduler, x, y, train, before_clip=lambda: seen.append(grads(model)))
    raw = math.sqrt(sum(float(g.square().sum()) for g in seen[0].values()))
    clipped = math.sqrt(sum(float(g.square().sum()) for g in grads(model).values()))
    assert raw > 1e-2 and clipped == pytest.approx(1e-3, rel=1e-4)
    assert scheduler.last_epoch == 1


def test_divergence_is_a_result_and_no_update():
    x, y = torch.randint(1, 12, (4, 10)), torch.randint(0, 3, (4,))
    called = []
    for reason, train, spoil in [
        ("non-finite loss", TrainSpec(steps=10), True),
        ("past bound", TrainSpec(steps=10, divergence_norm=1e-9), False),
    ]:
        model = network()
        if spoil:
            with torch.no_grad():
                model.decoder.bias.fill_(float("nan"))
        optimiser, scheduler = training.make_optimiser(model, train)
        before = copy.deepcopy(model.state_dict())
        result = training.train_step(model, optimiser, scheduler, x, y, train, before_clip=lambda: called.append(1))
        assert reason in result.diverged
        # A NaN past the recurrence (the decoder here; a plug-in's bug) is told from a state blow-up.
        assert ("with finite state norms (largest " in result.diverged) is spoil
        assert scheduler.last_epoch == 0 and not optimiser.state  # nothing was stepped
        for name, value in model.state_dict().items():
            assert torch.equal(value, before[name]) or (value.isnan() == before[name].isnan()).all(), name
    assert not called
    # The same through a trial: a result, with the step and the reason.
    data = toy_data()
    config = {"task": {}, "model": MODEL, "train": {"steps": 5, "batch_size": 4, "divergence_norm": 1e-9}}
    result = training.run_trial(config, 0, ProbeSpec(enabled=False), data=data)
    assert (result.status, result.steps) == ("diverged", 1)
    assert result.reason.startswith("state norm ") and result.reason.endswith("past bound at step 1")


def test_evaluate_on_a_case_worked_out_by_hand():
    class Logits(nn.Module):  # the input is the logits
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x

    p = torch.tensor([0.25, 0.75])
    logits = p.log().repeat(5, 1)  # every example predicts class 1 with probability 3/4
    y = torch.tensor([1, 0, 1, 1, 0])
    out = training.evaluate(Logits(), logits, y, batch=2)  # batches of 2, 2, 1
    loss = -(3 * math.log(0.75) + 2 * math.log(0.25)) / 5
    assert out["loss"] == pytest.approx(loss, rel=1e-6)
    assert out["accuracy"] == pytest.approx(3 / 5)
    assert out["bpc"] == pytest.approx(loss / math.log(2), rel=1e-6)
    # Per-step targets: ignored positions count for nothing, in any batch.
    steps = p.log().repeat(3, 4, 1)
    ys = torch.tensor([[1, 1, training.IGNORE, training.IGNORE], [0, training.IGNORE] * 2, [training.IGNORE] * 4])
    out = training.evaluate(Logits(), steps, ys, batch=1)
    assert out["loss"] == pytest.approx(-(2 * math.log(0.75) + 2 * math.log(0.25)) / 4, rel=1e-6)
    assert out["accuracy"] == pytest.approx(2 / 4)


def toy_data(n: int = 48) -> TaskData:
    g = torch.Generator().manual_seed(0)

    def split(k: int) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.randint(1, 12, (k, 10), generator=g), torch.randint(0, 3, (k,), generator=g)

    return TaskData(CLASSES, split(n), split(16), split(16))


class Recording:
    def __init__(self, stop_at: int | None = None) -> None:
        self.metrics: list = []
        self.curves: list[pl.DataFrame] = []
        self.stop_at = stop_at

    def log_metrics(self, step: int, values: dict[str, float]) -> None:
        if self.stop_at is not None and step >= self.stop_at:
            raise KeyboardInterrupt  # the worker dies here
        self.metrics.append((step, values))

    def log_curves(self, rows: pl.DataFrame) -> None:
        self.curves.append(rows)


def test_checkpoint_resume_equals_the_uninterrupted_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Killed after its step-6 checkpoint, a trial resumes there (it trains only the missing steps)
    and reaches the uninterrupted run's metrics and curves exactly: dropout and batch sampling
    draw the same random numbers."""
    data = toy_data()
    config = {"task": {}, "model": {**MODEL, "dropout": 0.2},
              "train": {"steps": 10, "batch_size": 4, "eval_every": 4, "log_every": 2}}
    probes = ProbeSpec(every=3, batch=4, white_noise_batch=2)
    whole = Recording()
    expected = training.run_trial(config, 3, probes, whole, data=data)
    ckpt = tmp_path / "ckpt.pt"
    with pytest.raises(KeyboardInterrupt):
        training.run_trial(config, 3, probes, Recording(stop_at=8), data=data, checkpoint=ckpt, checkpoint_every=3)
    assert torch.load(ckpt, weights_only=False)["step"] == 6

    steps = []
    real_step = training.train_step

    def counting(*args, **kwargs):
        steps.append(1)
        return real_step(*args, **kwargs)

    monkeypatch.setattr(training, "train_step", counting)
    resumed_log = Recording()
    resumed = training.run_trial(config, 3, probes, resumed_log, data=data, checkpoint=ckpt, checkpoint_every=3)
    assert len(steps) == 4  # steps 7..10
    assert resumed.status == expected.status == "complete"
    assert resumed.metrics == expected.metrics
    assert resumed_log.metrics == whole.metrics  # the history before the kill is replayed
    assert len(resumed_log.curves) == len(whole.curves)
    for got, want in zip(resumed_log.curves, whole.curves, strict=True):
        assert got.equals(want)


def lrs_over(train: TrainSpec) -> list[float]:
    """The decay group's learning rate before each of the ``steps`` + 1 scheduler steps."""
    optimiser, scheduler = training.make_optimiser(network(), train)
    group = next(g for g in optimiser.param_groups if g["name"] == "decay")
    seen = []
    for _ in range(train.steps + 1):
        seen.append(group["lr"])
        optimiser.step()
        scheduler.step()
    return seen


@pytest.mark.parametrize("kind", ["cosine", "linear", "constant", "step"])
def test_each_schedule_follows_its_closed_form_after_a_warm_up_in_steps(kind: str):
    train = TrainSpec(steps=50, warmup_steps=5, lr=0.2, schedule=kind, step_milestones=[0.4, 0.8], step_gamma=0.5)
    for k, lr in enumerate(lrs_over(train)):
        p = min(1.0, (k - 5) / 45)
        factor = (k + 1) / 5 if k < 5 else {
            "cosine": 0.5 * (1 + math.cos(math.pi * p)),
            "linear": 1 - p,
            "constant": 1.0,
            "step": 1.0 if k < 20 else 0.5 if k < 40 else 0.25,
        }[kind]
        assert lr == pytest.approx(0.2 * factor, abs=1e-12), (kind, k)


def test_the_default_schedule_is_the_warm_up_fraction_and_cosine_of_before():
    default = TrainSpec(steps=40, warmup=0.25, lr=0.2)
    assert (default.schedule, default.warmup_steps) == ("cosine", None)
    assert lrs_over(default) == lrs_over(TrainSpec(steps=40, warmup_steps=10, lr=0.2, schedule="cosine"))


def test_bad_schedule_settings_are_refused_with_their_key():
    from pydantic import ValidationError

    for bad in ({"warmup_steps": 40}, {"step_milestones": [0.8, 0.4]}, {"step_milestones": [1.5]},
                {"schedule": "exponential"}, {"patience": 0}):
        with pytest.raises(ValidationError):
            TrainSpec(steps=40, **bad)


def test_patience_stops_on_a_plateau_and_restores_the_best_weights(monkeypatch: pytest.MonkeyPatch):
    """Validation accuracies scripted to peak at the second pass (step 4) and then stay below:
    with patience 3 the trial stops at the fifth pass (step 10), and its final metrics are those
    of the weights at step 4 — not of the weights it had when it stopped."""
    data = toy_data()
    real = training.evaluate
    calls: list[tuple[dict, dict]] = []
    script = iter([0.40, 0.60, 0.55, 0.58, 0.59])

    def scripted(model, x, y, batch=256):
        out = real(model, x, y, batch)
        calls.append((copy.deepcopy(model.state_dict()), out))
        value = next(script, None)
        return out if value is None else {**out, "accuracy": value}

    monkeypatch.setattr(training, "evaluate", scripted)
    config = {"task": {}, "model": MODEL,
              "train": {"steps": 30, "batch_size": 8, "eval_every": 2, "log_every": 2, "lr": 1e-2, "patience": 3}}
    log = Recording()
    result = training.run_trial(config, 0, ProbeSpec(enabled=False), log, data=data)
    assert result.status == "complete" and result.steps == 10
    assert result.convergence == {"converged": True, "val_gain_last": None, "val_gain_se": None, "steps": 10,
                                  "stopped_early": True, "best_step": 4}  # two passes in [8, 10]: no trend
    best_weights, at_best = calls[1]  # the pass at step 4 (real metrics)
    stopped_weights = calls[4][0]
    assert any(not torch.equal(best_weights[k], stopped_weights[k]) for k in best_weights)  # it did move on
    assert result.metrics["val_loss"] == at_best["loss"]
    model = network()
    model.load_state_dict(best_weights)
    test = real(model, *data.test)
    assert (result.metrics["test_loss"], result.metrics["test_accuracy"]) == (test["loss"], test["accuracy"])
    assert max(step for step, _ in log.metrics) == 10  # nothing trained or logged past the stop


def test_without_patience_the_last_weights_are_kept_and_every_step_runs():
    data = toy_data()
    config = {"task": {}, "model": MODEL, "train": {"steps": 12, "batch_size": 8, "eval_every": 3, "log_every": 3}}
    result = training.run_trial(config, 0, ProbeSpec(enabled=False), data=data)
    assert result.steps == 12 and result.convergence["stopped_early"] is False
    assert result.convergence["converged"] in (True, False)  # passes at 10, 11 (the window's) and 12
    assert 3 <= result.convergence["best_step"] <= 12


def test_convergence_passes_start_at_the_boundary_and_leave_training_as_it_was(monkeypatch: pytest.MonkeyPatch):
    """The last fifth of 30 steps is [24, 30]: validation passes at 24 and enough after it for
    the trend, whatever eval_every (10) is — and the trial trains, stops and scores exactly as
    without them (they move neither the best weights nor early stopping)."""
    data = toy_data()
    config = {"task": {}, "model": MODEL,
              "train": {"steps": 30, "batch_size": 8, "eval_every": 10, "log_every": 5, "lr": 1e-2, "patience": 5}}
    log = Recording()
    with_checks = training.run_trial(config, 0, ProbeSpec(enabled=False), log, data=data)
    val_steps = sorted({step for step, values in log.metrics if "val/accuracy" in values})
    assert [s for s in val_steps if s >= 24] == [24, 25, 26, 28, 29, 30]  # 10, 20, then the window's six
    assert with_checks.convergence["val_gain_se"] is not None
    monkeypatch.setattr(training.Schedule, "checks", lambda self, step: False)
    without = training.run_trial(config, 0, ProbeSpec(enabled=False), Recording(), data=data)
    assert without.metrics == with_checks.metrics and without.steps == with_checks.steps
    assert without.convergence["best_step"] == with_checks.convergence["best_step"]


def test_checkpoint_resume_with_patience_equals_the_uninterrupted_run(tmp_path: Path):
    """The plateau counter, the best value and weights go into the checkpoint: a trial killed
    while on a plateau stops at the same step with the same restored metrics after resuming."""
    data = toy_data()
    config = {"task": {}, "model": MODEL,
              "train": {"steps": 200, "batch_size": 8, "eval_every": 2, "log_every": 2, "lr": 3e-2, "patience": 4}}
    probes = ProbeSpec(enabled=False)
    expected = training.run_trial(config, 1, probes, Recording(), data=data)
    assert expected.convergence["stopped_early"] and expected.steps < 200
    assert expected.steps - expected.convergence["best_step"] >= 8  # 4 passes of 2 steps
    kill = expected.steps - 1  # on the plateau, after the checkpoint of the step before
    ckpt = tmp_path / "ckpt.pt"
    with pytest.raises(KeyboardInterrupt):
        training.run_trial(config, 1, probes, Recording(stop_at=kill), data=data, checkpoint=ckpt, checkpoint_every=1)
    saved = torch.load(ckpt, weights_only=False)
    assert saved["plateau"]["bad"] > 0 and saved["plateau"]["best_state"] is not None
    resumed = training.run_trial(config, 1, probes, Recording(), data=data, checkpoint=ckpt, checkpoint_every=1)
    assert (resumed.steps, resumed.metrics, resumed.convergence) == (expected.steps, expected.metrics,
                                                                     expected.convergence)


@pytest.mark.parametrize("shape", ["1-sqrt", "linear", "cosine"])
def test_wsd_is_constant_after_the_warm_up_then_decays_over_the_last_steps(shape: str):
    train = TrainSpec(steps=50, warmup_steps=5, lr=0.2, schedule="wsd", decay=0.2, decay_shape=shape)
    assert training.stable_end(train) == 40
    for k, lr in enumerate(lrs_over(train)):
        q = max(0.0, (k - 40) / 10)
        factor = (k + 1) / 5 if k < 5 else {
            "1-sqrt": 1 - math.sqrt(q), "linear": 1 - q, "cosine": 0.5 * (1 + math.cos(math.pi * q))}[shape]
        assert lr == pytest.approx(0.2 * factor, abs=1e-12), (shape, k)
    assert training.stable_end(train.model_copy(update={"decay_steps": 7})) == 43
    assert training.stable_end(TrainSpec(steps=50)) is None


def test_bad_wsd_settings_are_refused_with_their_key():
    from pydantic import ValidationError

    for bad in ({"decay_steps": 40}, {"decay_steps": 38, "warmup_steps": 5}, {"decay_shape": "exp"}, {"decay": 1.0}):
        with pytest.raises(ValidationError, match="decay"):
            TrainSpec(steps=40, schedule="wsd", **bad)
    TrainSpec(steps=40, decay_steps=100)  # not wsd: the decay is not used


def test_continuable_only_where_the_learning_rate_agrees_up_to_the_branch():
    short = TrainSpec(steps=30, warmup_steps=3, schedule="wsd", decay=0.2)
    assert training.continuable(short, short.model_copy(update={"steps": 60})) == 24
    assert training.continuable(short, short.model_copy(update={"steps": 30})) is None
    assert training.continuable(short, short.model_copy(update={"steps": 60, "lr": 1e-3})) is None
    assert training.continuable(short, TrainSpec(steps=60, warmup=0.1, schedule="wsd")) is None  # warm-up 3 vs 6
    assert training.continuable(TrainSpec(steps=30, warmup_steps=3), TrainSpec(steps=60, warmup_steps=3)) is None
    # A long decay in steps ends the longer run's stable phase before the shorter one's.
    assert training.continuable(short, short.model_copy(update={"steps": 40, "decay_steps": 20})) is None


def test_continuing_from_the_stable_checkpoint_equals_training_from_scratch(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch):
    """A WSD run of 20 steps keeps its step-16 stable checkpoint (after a convergence-only pass there
    that the longer run does not make); the 40-step run of the same cell
    continued from there trains steps 17..40 and ends where training 40 steps from scratch ends:
    metrics, curves and weights bit for bit (dropout and batch order draw the same numbers)."""
    data = toy_data()
    train = {"batch_size": 4, "eval_every": 5, "log_every": 2, "schedule": "wsd", "decay": 0.2, "warmup_steps": 3}
    long = {"task": {}, "model": {**MODEL, "dropout": 0.2}, "train": {**train, "steps": 40}}
    short = {**long, "train": {**train, "steps": 20}}
    probes = ProbeSpec(every=3, batch=4, white_noise_batch=2)
    weights: list[dict[str, torch.Tensor]] = []
    real_finish = training.evaluate

    def capture(model, *args, **kwargs):  # the last weights are those of the final evaluation
        weights.append({k: v.clone() for k, v in model.state_dict().items()})
        return real_finish(model, *args, **kwargs)

    monkeypatch.setattr(training, "evaluate", capture)
    scratch_log = Recording()
    scratch = training.run_trial(long, 5, probes, scratch_log, data=data)
    scratch_weights = weights[-1]

    stable = tmp_path / "stable.pt"
    training.run_trial(short, 5, probes, Recording(), data=data, stable_checkpoint=stable)
    assert torch.load(stable, weights_only=False)["step"] == 16
    assert training.continuable(TrainSpec(**short["train"]), TrainSpec(**long["train"])) == 16

    steps = []
    real_step = training.train_step
    monkeypatch.setattr(training, "train_step", lambda *a, **k: steps.append(1) or real_step(*a, **k))
    continued_log = Recording()
    continued = training.run_trial(long, 5, probes, continued_log, data=data, branch=stable)
    assert len(steps) == 24  # steps 17..40 only
    assert continued.status == scratch.status == "complete"
    assert continued.metrics == scratch.metrics
    assert continued.convergence == scratch.convergence
    assert continued_log.metrics == scratch_log.metrics
    assert len(continued_log.curves) == len(scratch_log.curves)
    for got, want in zip(continued_log.curves, scratch_log.curves, strict=True):
        assert got.equals(want)
    assert weights[-1].keys() == scratch_weights.keys()
    assert all(torch.equal(weights[-1][k], scratch_weights[k]) for k in scratch_weights)
