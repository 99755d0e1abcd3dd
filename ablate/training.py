"""One trial: train a resolved configuration on one seed, evaluate, probe hidden-state norms.

The loop knows nothing of Optuna or MLflow: it reports through a ``Reporter`` and returns a
``TrialResult``. Divergence (non-finite loss, a state norm past the bound) is a result.

    make_optimiser(model, train)  AdamW over the model's parameter groups + the schedule (``schedule``)
    train_step(...)               one step: forward, backward (accumulated), then ``update``;
                                  ``run_trial`` and ``ablate plan --estimate``
                                  (``ablate.runner.estimate.measure``) both train through it
    update(...)                   divergence check (``checked``), gradient probes, clip, optimiser
                                  and scheduler step: the fused trainer's the same for all at once
    Trial                         one trial's state and what follows each step (logging, validation,
                                  early stopping, probes, final evaluation): ``run_trial`` holds one,
                                  ``ablate.training_fused`` one per replicate
    evaluate(model, x, y)         loss, accuracy and bits per character on a split
    Plateau                       the monitored validation metric: best value and step, early
                                  stopping (``train.patience``), the passes the convergence flag
                                  reads (``ablate.stats.convergence.last_fifth``)

When each of those happens is ``ablate.schedule.Schedule``'s, which ``ablate plan --estimate``
prices with the same counts.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.nn.functional as F

from ablate import faults
from ablate.models import Network, build_model
from ablate.optim import AdamW, LRSchedule
from ablate.probes import Prober, train_summary
from ablate.schedule import Schedule, stable_end, warmup_steps
from ablate.spec import BUDGET_KEYS, ModelSpec, ProbeSpec, TrainSpec
from ablate.stats.convergence import last_fifth
from ablate.tasks import TaskData, load_task

IGNORE = -100


class Reporter(Protocol):
    def log_metrics(self, step: int, values: dict[str, float]) -> None: ...

    def log_curves(self, rows: Any) -> None: ...  # a polars frame of ablate.probes.CURVE_SCHEMA


class NullReporter:
    def log_metrics(self, step: int, values: dict[str, float]) -> None:
        pass

    def log_curves(self, rows: list[dict[str, Any]]) -> None:
        pass


@dataclass
class TrialResult:
    status: str  # "complete" or "diverged"
    metrics: dict[str, float] = field(default_factory=dict)
    steps: int = 0
    seconds: float = 0.0
    reason: str = ""
    #: ``converged`` (bool, None when unknown), ``val_gain_last`` and ``val_gain_se`` (metric
    #: units), ``steps`` (run), ``stopped_early`` (bool), ``best_step`` (int): see
    #: ``ablate.stats.convergence.last_fifth`` and ``Plateau``
    convergence: dict[str, Any] = field(default_factory=dict)
    #: the step of the checkpoint this training resumed from (an earlier, killed attempt's); 0: none
    resumed_at: int = 0


def loss_and_correct(logits: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, int, int]:
    """Mean cross-entropy and (correct, counted) for class or per-step targets."""
    flat_logits = logits.reshape(-1, logits.shape[-1])
    flat_y = y.reshape(-1)
    loss = F.cross_entropy(flat_logits, flat_y, ignore_index=IGNORE)
    scored = flat_y != IGNORE
    correct = (flat_logits.argmax(-1)[scored] == flat_y[scored]).sum().item()
    return loss, int(correct), int(scored.sum().item())


@torch.no_grad()
def evaluate(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, batch: int = 256) -> dict[str, float]:
    model.eval()
    totals = [0.0, 0, 0]
    for i in range(0, len(x), batch):
        add_batch(totals, model(x[i : i + batch]), y[i : i + batch])
    model.train()
    return split_metrics(totals)


@torch.no_grad()
def plugin_metrics(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, names: list[str],
                   batch: int = 256) -> dict[str, float]:
    """``test_<name>`` → each metric plug-in's value on the scored positions of (x, y)
    (``ablate.metrics``)."""
    from ablate import metrics

    model.eval()
    parts = [metrics.scored(model(x[i : i + batch]), y[i : i + batch]) for i in range(0, len(x), batch)]
    model.train()
    return metrics.compute(torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts]), names)


def add_batch(totals: list, logits: torch.Tensor, y: torch.Tensor) -> None:
    """Add one evaluation batch to ``totals`` = [loss sum, correct, counted] (``evaluate``'s, and
    the fused trainer's per replicate)."""
    loss, c, n = loss_and_correct(logits, y)
    if n:  # a batch with every target ignored has a 0/0 = NaN mean loss and weighs nothing
        totals[0] += loss.item() * n
    totals[1] += c
    totals[2] += n


def split_metrics(totals: list) -> dict[str, float]:
    """Loss, accuracy and bits per character from ``add_batch``'s totals."""
    loss = totals[0] / max(totals[2], 1)
    return {"loss": loss, "accuracy": totals[1] / max(totals[2], 1), "bpc": loss / math.log(2)}


def layer_means(norms: list[torch.Tensor]) -> list[float]:
    # Mean over batch, time and heads: per-head norms are comparable across head counts.
    return [sq.detach().float().mean().item() for sq in norms]


def schedule(train: TrainSpec) -> Callable[[int], float]:
    """The learning-rate factor of scheduler step ``k``: (k + 1) / W during the W warm-up steps,
    then with p = (k − W) / (steps − W) capped at 1:

        cosine    ½ (1 + cos π p)              (to 0 at ``steps``; the default)
        linear    1 − p                        (to 0 at ``steps``)
        constant  1
        step      step_gamma ** #{m ∈ step_milestones : k ≥ m · steps}
        wsd       1 up to S = ``stable_end``, then with q = (k − S) / (steps − S) the decay shape:
                  1-sqrt 1 − √q, linear 1 − q, cosine ½ (1 + cos π q)
    """
    warm = warmup_steps(train)
    kind, milestones = train.schedule, [m * train.steps for m in train.step_milestones]
    stable = stable_end(train)

    def factor(step: int) -> float:
        if step < warm:
            return (step + 1) / warm
        if stable is not None:
            q = max(0.0, (step - stable) / (train.steps - stable))
            if train.decay_shape == "1-sqrt":
                return 1.0 - math.sqrt(q)
            return 1.0 - q if train.decay_shape == "linear" else 0.5 * (1.0 + math.cos(math.pi * q))
        progress = min(1.0, (step - warm) / max(1, train.steps - warm))
        if kind == "linear":
            return 1.0 - progress
        if kind == "constant":
            return 1.0
        if kind == "step":
            return train.step_gamma ** sum(step >= m for m in milestones)
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    return factor


def monitored(metric: str) -> tuple[str, bool]:
    """(validation key, maximise) of the metric early stopping and convergence watch: accuracy
    for accuracy tasks, the loss for bits-per-character tasks (bpc is the loss over ln 2)."""
    return ("accuracy", True) if metric == "accuracy" else ("loss", False)


@dataclass
class Plateau:
    """The monitored validation metric through a trial: every periodic pass, the best value and
    its step, the passes since an improvement of more than ``min_delta`` (early stopping's
    counter), when ``keep`` (patience set) a copy of the best weights to restore, and the passes
    made for the convergence flag only (``checks``: they move neither the best nor the counter)."""

    maximize: bool
    min_delta: float = 0.0
    keep: bool = False
    history: list[tuple[int, float]] = field(default_factory=list)
    best_value: float | None = None
    best_step: int = 0
    bad: int = 0
    best_state: dict[str, torch.Tensor] | None = None
    checks: list[tuple[int, float]] = field(default_factory=list)

    def passes(self) -> list[tuple[int, float]]:
        """Every validation pass, periodic and convergence-only, in step order."""
        return sorted(self.history + self.checks)

    def update(self, step: int, value: float, model: torch.nn.Module) -> None:
        self.history.append((step, value))
        better = self.best_value is None or (
            value > self.best_value + self.min_delta if self.maximize else value < self.best_value - self.min_delta)
        if better and math.isfinite(value):
            self.best_value, self.best_step, self.bad = value, step, 0
            if self.keep:
                self.best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        else:
            self.bad += 1

    def state(self) -> dict[str, Any]:
        return {"history": self.history, "best_value": self.best_value, "best_step": self.best_step,
                "bad": self.bad, "best_state": self.best_state, "checks": self.checks}

    def restore(self, saved: dict[str, Any]) -> None:
        self.history, self.best_value = list(saved["history"]), saved["best_value"]
        self.best_step, self.bad, self.best_state = saved["best_step"], saved["bad"], saved["best_state"]
        self.checks = list(saved.get("checks", []))  # a checkpoint written before the checks: none


def make_optimiser(model: Network, train: TrainSpec, foreach: bool | None = None) -> tuple[AdamW, LRSchedule]:
    """AdamW over ``Network.param_groups`` (recurrent lr factor, no decay on vectors) and its schedule
    (``ablate.optim``: torch.optim's arithmetic). ``foreach``: the multi-tensor update (the same
    arithmetic, one call per group instead of a few per parameter; None: torch's default, per
    parameter on the CPU)."""
    groups = model.param_groups(train.lr, train.recurrent_lr_factor, train.weight_decay)
    optimiser = AdamW(groups, foreach=foreach)
    return optimiser, LRSchedule(optimiser, schedule(train))


@dataclass
class StepResult:
    """What one training step tells the loop (the batch as it was before the update)."""

    loss: float  # mean cross-entropy over the batch's scored targets
    correct: int
    counted: int  # scored targets
    layer_norms: list[float]  # per recurrent layer: mean ‖x_t^h‖² over batch, time and heads
    summary: torch.Tensor | None  # ``ablate.probes.train_summary`` of the batch, on the device
    diverged: str = ""  # why the update was not made (non-finite loss, a norm past the bound); "" if made


def train_step(
    model: Network,
    optimiser: AdamW,
    scheduler: LRSchedule,
    x: torch.Tensor,
    y: torch.Tensor,
    train: TrainSpec,
    accumulate: int = 1,
    before_clip: Callable[[], None] | None = None,
) -> StepResult:
    """One training step on the batch (x, y): gradients over ``accumulate`` micro-batches (the
    full-batch mean), then ``update``."""
    optimiser.zero_grad()
    result = StepResult(*_forward_backward(model, x, y, accumulate))
    return update(model, optimiser, scheduler, result, train, before_clip)


def update(
    model: Network,
    optimiser: AdamW,
    scheduler: LRSchedule,
    result: StepResult,
    train: TrainSpec,
    before_clip: Callable[[], None] | None = None,
) -> StepResult:
    """The rest of a step once the gradients are in: unless the batch diverged, ``before_clip``
    (the gradient probes read the raw gradients there), clipping to ``train.grad_clip``, the
    optimiser and the scheduler step. The fused trainer (``ablate.training_fused``) makes the same
    steps for all its replicates at once (``checked`` each, then one clipping pass and one
    optimiser call over them all)."""
    result = checked(result, train)
    if result.diverged:
        return result
    if before_clip is not None:
        before_clip()
    if train.grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), train.grad_clip)
    optimiser.step()
    scheduler.step()
    return result


def checked(result: StepResult, train: TrainSpec) -> StepResult:
    """``result``, marked diverged if its loss is not finite or a state norm is past the bound:
    ``update``'s check (the fused trainer's, replicate by replicate)."""
    norms = result.layer_norms
    if not math.isfinite(result.loss):
        # With every state norm finite and under the bound, the recurrence did not blow up: say so, so
        # that a reader tells a bug (a plug-in's, say) from an instability of the model.
        calm = bool(norms) and all(math.isfinite(v) and v <= train.divergence_norm for v in norms)
        return replace(result, diverged="non-finite loss" + (
            f" with finite state norms (largest {max(norms):.3g}): not a state blow-up" if calm else ""))
    if any(not math.isfinite(v) or v > train.divergence_norm for v in norms):
        return replace(result, diverged=f"state norm {max(norms):.3g} past bound")
    return result


class Recorder:
    """Passes reports on and keeps them, so a checkpoint can replay them into a resumed run."""

    def __init__(self, inner: Reporter, history: list[tuple[str, Any]] | None = None) -> None:
        self.inner, self.history = inner, []
        for kind, payload in history or []:  # replay what the interrupted attempt reported
            self._emit(kind, payload)

    def _emit(self, kind: str, payload: Any) -> None:
        self.history.append((kind, payload))
        if kind == "metrics":
            self.inner.log_metrics(*payload)
        else:
            self.inner.log_curves(payload)

    def log_metrics(self, step: int, values: dict[str, float]) -> None:
        self._emit("metrics", (step, values))

    def log_curves(self, rows: list[dict[str, Any]]) -> None:
        self._emit("curves", rows)


def run_trial(
    config: dict[str, Any],
    seed: int,
    probes: ProbeSpec | None = None,
    reporter: Reporter | None = None,
    device: str = "cpu",
    data: TaskData | None = None,
    checkpoint: Path | None = None,
    checkpoint_every: int = 0,
    accumulate: int = 1,
    on_eval: Callable[[int, dict[str, float]], None] | None = None,
    stable_checkpoint: Path | None = None,
    branch: Path | None = None,
) -> TrialResult:
    """Train ``config`` ({task, model, train}) on ``seed``; report curves; return final metrics.

    With ``checkpoint``, state is saved every ``checkpoint_every`` steps and a run that finds a
    checkpoint resumes from it, reaching the result of an uninterrupted run. ``accumulate``
    splits each batch into that many micro-batches (same effective batch: used after an OOM).
    ``on_eval(step, val)`` is called after each intermediate validation pass; it may raise to
    stop the trial (the runner prunes tuning trials that way). With ``train.patience``, training
    stops once that many passes in a row have not improved the monitored metric (``monitored``)
    and the best weights are restored before the final validation and test evaluation.

    On a WSD schedule, ``stable_checkpoint`` is where the state at the end of the stable phase
    (``stable_end``) is saved, to be kept. ``branch`` is such a checkpoint of a shorter run of the
    same cell and seed (``continuable`` says when one fits): a run without a resume checkpoint of
    its own starts there and trains only the remaining steps, reaching what training from step 0
    would (the same weights, optimiser state, data order and random numbers up to there)."""
    trial = Trial(config, seed, probes, device, data, on_eval)
    when, train = trial.when, trial.train
    saved = read_checkpoint(checkpoint) if checkpoint and checkpoint.exists() else None
    resumed_at = saved["step"] if saved is not None else 0
    if saved is None and branch is not None:
        saved = _branched(read_checkpoint(branch), when)
    first = trial.begin(reporter, saved)
    for step in range(first, train.steps + 1):
        faults.inject(step, accumulate)  # ABLATE_FAULT: recovery tests end to end
        idx = trial.batch()
        done = train_step(trial.model, trial.optimiser, trial.scheduler, trial.x_train[idx], trial.y_train[idx],
                          train, accumulate, trial.grad_probe(step))
        ended = trial.after_step(step, done)
        if ended is not None:
            return replace(ended, resumed_at=resumed_at)
        if stable_checkpoint and step == stable_end(train) and not stable_checkpoint.exists():
            trial.save(stable_checkpoint, step)
        trial.keep(checkpoint, checkpoint_every, step)
    return replace(trial.finish("complete", train.steps), resumed_at=resumed_at)


class Trial:
    """One trial's state from its set-up to its result: model, optimiser and schedule, data order,
    probes, the monitored metric and the reports. ``run_trial`` holds one; the fused trainer
    (``ablate.training_fused``) one per replicate, so that what happens after a step (logging,
    validation, early stopping, probes, the final evaluation) is the same code in both."""

    def __init__(self, config: dict[str, Any], seed: int, probes: ProbeSpec | None, device: str,
                 data: TaskData | None, on_eval: Callable[[int, dict[str, float]], None] | None,
                 foreach: bool | None = None) -> None:
        self.probes = probes = probes or ProbeSpec()
        self.train = train = TrainSpec.model_validate(config["train"])
        self.when = Schedule.of(train, probes)
        self.start = time.perf_counter()
        self.data = data = data or load_task(config["task"])
        self.device, self.on_eval, self.seed = device, on_eval, seed
        torch.manual_seed(seed)
        self.model = build_model(ModelSpec.model_validate(config["model"]), data.info).to(device)
        self.optimiser, self.scheduler = make_optimiser(self.model, train, foreach)
        self.x_train, self.y_train = (t.to(device) for t in data.train)
        self.x_val, self.y_val = (t.to(device) for t in data.val)
        x_probe = self.x_val[: probes.batch]  # the same inputs for every cell and seed of a task
        self.sampler = torch.Generator().manual_seed(seed)
        # ablate.probes: what is measured
        self.prober = Prober(self.model, probes, x_probe, self.optimiser.param_groups)
        self.key, self.maximize = monitored(data.info.metric)
        self.plateau = Plateau(self.maximize, train.min_delta, keep=train.patience is not None)
        self.reporter = Recorder(NullReporter())
        #: a validation pass already made for this step (the fused trainer makes every replicate's at once)
        self.val_ahead: dict[str, float] | None = None

    def begin(self, reporter: Reporter | None, saved: dict[str, Any] | None = None) -> int:
        """Resume from ``saved`` (a checkpoint) if given, else report step 0; the first step to train."""
        first = 1
        if saved is not None:
            self.model.load_state_dict(saved["model"])
            self.optimiser.load_state_dict(saved["optimiser"])
            self.scheduler.load_state_dict(saved["scheduler"])
            self.sampler.set_state(saved["sampler"])
            torch.set_rng_state(saved["rng"])
            first = saved["step"] + 1
            self.prober.pending_train = saved.get("pending_train", [])
            if saved.get("plateau") is not None:
                self.plateau.restore(saved["plateau"])
        self.reporter = Recorder(reporter or NullReporter(), saved["history"] if saved else None)
        if saved is None:
            self.reporter.log_metrics(0, self.prober.fingerprints())
            self.reporter.log_curves(self.prober.probe(0))
        return first

    def batch(self) -> torch.Tensor:
        """The indices of the next training batch, from this trial's own data order."""
        return torch.randint(len(self.x_train), (self.train.batch_size,), generator=self.sampler)

    def grad_probe(self, step: int) -> Callable[[], None] | None:
        """Gradient norms at probe steps only, before clipping: ``update`` calls this between the two."""
        if not self.when.measures_grads(step):
            return None
        return lambda: self.reporter.log_curves(self.prober.grad_rows(step))

    def after_step(self, step: int, done: StepResult) -> TrialResult | None:
        """Logging, validation, early stopping and probes after ``step``; the result if the trial ended."""
        when, train, reporter, plateau = self.when, self.train, self.reporter, self.plateau
        if done.diverged:
            return self.finish("diverged", step, f"{done.diverged} at step {step}")
        if when.logs(step):
            values = {"train/loss": done.loss, "train/accuracy": done.correct / max(done.counted, 1)}
            values["train/lr"] = self.scheduler.get_last_lr()[0]
            values.update({f"train_state_norm/layer{i}": v for i, v in enumerate(done.layer_norms)})
            reporter.log_metrics(step, values)
            self.prober.keep_train(done.summary, step)
        if when.checks(step):  # for the convergence flag only: early stopping and pruning do not see it
            val = self.validate()
            reporter.log_metrics(step, {f"val/{k}": v for k, v in val.items()})
            plateau.checks.append((step, val[self.key]))
        if when.validates(step):
            val = self.validate()
            reporter.log_metrics(step, {f"val/{k}": v for k, v in val.items()})
            plateau.update(step, val[self.key], self.model)
            if self.on_eval is not None:
                self.on_eval(step, val)
            if train.patience is not None and plateau.bad >= train.patience:
                return self.finish("complete", step, stopped=True)
        if when.probes(step) and step != train.steps:
            reporter.log_curves(self.prober.probe(step))
            reporter.log_curves(self.prober.train_rows())
        return None

    def validate(self) -> dict[str, float]:
        """This step's validation metrics: ``val_ahead`` if made already, else a pass now."""
        val, self.val_ahead = self.val_ahead, None
        return val if val is not None else evaluate(self.model, self.x_val, self.y_val)

    def finish(self, status: str, step: int, reason: str = "", stopped: bool = False) -> TrialResult:
        reporter, plateau, model, data = self.reporter, self.plateau, self.model, self.data
        reporter.log_curves(self.prober.train_rows())  # also for a diverged trial: its norms show why
        metrics: dict[str, float] = {"chance": data.info.chance}
        done: dict[str, Any] = {"converged": None, "val_gain_last": None, "val_gain_se": None}
        if status == "complete":
            val = None
            if not stopped:  # the last step's validation pass (an early stop's was made in the loop)
                val = self.validate()
                plateau.update(step, val[self.key], model)
            # The window ends at the last step, or a WSD schedule's stable end (``ablate.schedule``).
            end = self.when.window[1] if step == self.train.steps else step
            done = last_fifth(plateau.passes(), end, self.maximize, self.train.converged_tol, stopped)
            if plateau.best_state is not None and plateau.best_step != step:
                model.load_state_dict(plateau.best_state)  # patience: the final metrics are the best step's
                val = None
            splits = (("val", (self.x_val, self.y_val)), ("test", data.test))
            for split, (x, y) in splits:
                measured = (val if split == "val" and val is not None
                            else evaluate(model, x.to(self.device), y.to(self.device)))
                for name, value in measured.items():
                    metrics[f"{split}_{name}"] = value
            if self.train.metrics:  # plug-in metrics (ablate.metrics), on the test set only
                metrics.update(plugin_metrics(model, *(t.to(self.device) for t in data.test), self.train.metrics))
            reporter.log_metrics(step, {k.replace("_", "/", 1): v for k, v in metrics.items()})
            reporter.log_curves(self.prober.probe(step))
        done.update(steps=step, stopped_early=stopped, best_step=plateau.best_step)
        return TrialResult(status, metrics, step, time.perf_counter() - self.start, reason, done)

    def keep(self, path: Path | None, every: int, step: int, rng: torch.Tensor | None = None) -> None:
        """The resume checkpoint at ``path`` every ``every`` steps but the last: ``run_trial``'s, and
        each fused replicate's (``ablate.training_fused``), in one format and place."""
        if path and every and step % every == 0 and step != self.train.steps:
            faults.inject("checkpoint")
            self.save(path, step, rng)

    def save(self, path: Path, step: int, rng: torch.Tensor | None = None) -> None:
        """``rng``: the random stream the trial's dropout draws from (None: torch's global one; a
        fused replicate keeps its own copy of it)."""
        _save(path, step, self.model, self.optimiser, self.scheduler, self.sampler, self.reporter.history,
              self.prober.pending_train, self.plateau.state(), rng)


def _forward_backward(
    model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, accumulate: int
) -> tuple[float, int, int, list[float], torch.Tensor | None]:
    """Loss, accuracy counts and per-layer state norms of one batch, gradients accumulated over
    ``accumulate`` micro-batches weighted by their scored targets (the full-batch mean); last, the
    per-layer and head norm summary of ``ablate.probes.train_summary`` (on the device)."""
    total = int((y != IGNORE).sum().item())
    loss_sum, correct, counted, norm_sums, summary = 0.0, 0, 0, None, None
    for xs, ys in zip(x.chunk(accumulate), y.chunk(accumulate), strict=True):
        logits, norms = model(xs, return_norms=True)
        loss, c, n = loss_and_correct(logits, ys)
        if n:  # a micro-batch with every target ignored has a NaN mean loss and adds no gradient
            (loss * (n / max(total, 1))).backward()
            loss_sum += loss.item() * n
        correct, counted = correct + c, counted + n
        means = [m * len(xs) for m in layer_means(norms)]
        if norms:
            part = train_summary(norms) * (len(xs) / len(x))
            summary = part if summary is None else summary + part
        norm_sums = means if norm_sums is None else [a + b for a, b in zip(norm_sums, means, strict=True)]
    return loss_sum / max(counted, 1), correct, counted, [v / len(x) for v in norm_sums or []], summary


def continuable(short: TrainSpec, long: TrainSpec) -> int | None:
    """The step a run of ``long`` can continue from a run of ``short`` (the same cell but for
    ``steps``) at: ``short``'s stable end, when both are WSD, ``long`` is longer, the warm-ups are
    equal in steps and the stable end is within ``long``'s stable phase, so the learning rate of
    every step up to it is the same; else None."""
    end, long_end = stable_end(short), stable_end(long)
    if end is None or long_end is None or long.steps <= short.steps:
        return None
    # until_converged only decides how far a run goes, not its steps; the warm-up is compared in steps
    budget = set(BUDGET_KEYS) | {"warmup", "warmup_steps"}
    same = short.model_dump(exclude=budget) == long.model_dump(exclude=budget)
    if not same or warmup_steps(short) != warmup_steps(long) or not warmup_steps(short) <= end <= long_end:
        return None
    # The longer run's convergence window may begin before the checkpoint: every pass it makes there
    # must be one the shorter run made too, or its flag would read passes it never had.
    short_when, long_when = Schedule.of(short), Schedule.of(long)
    if any(long_when.checks(s) and not (short_when.validates(s) or short_when.checks(s)) for s in range(end + 1)):
        return None
    return end


def _branched(saved: dict[str, Any], when: Schedule) -> dict[str, Any]:
    """A shorter run's stable-phase checkpoint as the longer run would have saved it: without the
    validation passes the shorter run made for its convergence flag only (its last fifth starts
    earlier) and that the longer run does not make."""
    step = saved["step"]
    kept = {s for s in range(step + 1) if when.validates(s) or when.checks(s)}
    plateau = saved.get("plateau")
    if plateau is not None:
        plateau = {**plateau, "checks": [(s, v) for s, v in plateau.get("checks", []) if s in kept]}
    history = [(kind, payload) for kind, payload in saved["history"]
               if not (kind == "metrics" and payload[0] not in kept and payload[0] > 0
                       and all(k.startswith("val/") for k in payload[1]))]
    return {**saved, "plateau": plateau, "history": history}


def read_checkpoint(path: Path) -> dict[str, Any]:
    """A checkpoint ``Trial.save`` wrote; an unreadable one raises an error that names its file
    (torch's does not)."""
    try:
        return torch.load(path, weights_only=False)
    except Exception as exc:
        raise RuntimeError(f"checkpoint {path} cannot be read: {type(exc).__name__}: {exc}") from exc


def _save(path: Path, step: int, model, optimiser, scheduler, sampler, history, pending_train, plateau,
          rng: torch.Tensor | None = None) -> None:
    state = {
        "plateau": plateau,  # the passes so far, the best value, step and weights, the plateau counter
        "pending_train": pending_train,
        "step": step,
        "model": model.state_dict(),
        "optimiser": optimiser.state_dict(),
        "scheduler": scheduler.state_dict(),
        "sampler": sampler.get_state(),
        "rng": torch.get_rng_state() if rng is None else rng,
        "history": history,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    tmp.replace(path)  # atomic: a kill mid-write leaves the previous checkpoint intact
