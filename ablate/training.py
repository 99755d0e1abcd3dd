"""One trial: train a resolved configuration on one seed, evaluate, probe hidden-state norms.

The loop knows nothing of Optuna or MLflow: it reports through a ``Reporter`` and returns a
``TrialResult``. Divergence (non-finite loss, a state norm past the bound) is a result.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
import torch.nn.functional as F

from ablate.models import build_model
from ablate.spec import ModelSpec, ProbeSpec, TrainSpec
from ablate.tasks import TaskData, load_task

IGNORE = -100


class Reporter(Protocol):
    def log_metrics(self, step: int, values: dict[str, float]) -> None: ...

    def log_curves(self, rows: list[dict[str, Any]]) -> None: ...


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


def _loss_and_correct(logits: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, int, int]:
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
    total_loss, correct, counted = 0.0, 0, 0
    for i in range(0, len(x), batch):
        logits = model(x[i : i + batch])
        loss, c, n = _loss_and_correct(logits, y[i : i + batch])
        total_loss += loss.item() * n
        correct += c
        counted += n
    model.train()
    loss = total_loss / max(counted, 1)
    return {"loss": loss, "accuracy": correct / max(counted, 1), "bpc": loss / math.log(2)}


@torch.no_grad()
def probe_norms(model: torch.nn.Module, x: torch.Tensor, step: int) -> list[dict[str, Any]]:
    """Batch mean of ‖x_t^h‖² per layer, head and time step on a fixed probe batch (eval mode)."""
    model.eval()
    _, norms = model(x, return_norms=True)
    model.train()
    rows = []
    for layer, sq in enumerate(norms):
        curve = sq.float().mean(0)  # (L, H)
        for head in range(curve.shape[1]):
            for t, value in enumerate(curve[:, head].tolist()):
                rows.append({"step": step, "layer": layer, "head": head, "t": t, "value": value, "kind": "probe"})
    return rows


def _layer_means(norms: list[torch.Tensor]) -> list[float]:
    # Mean over batch, time and heads: per-head norms are comparable across head counts.
    return [sq.detach().float().mean().item() for sq in norms]


def _schedule(train: TrainSpec):
    warm = max(1, int(train.warmup * train.steps))

    def factor(step: int) -> float:
        if step < warm:
            return (step + 1) / warm
        progress = (step - warm) / max(1, train.steps - warm)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))

    return factor


def run_trial(
    config: dict[str, Any],
    seed: int,
    probes: ProbeSpec | None = None,
    reporter: Reporter | None = None,
    device: str = "cpu",
    data: TaskData | None = None,
) -> TrialResult:
    """Train ``config`` ({task, model, train}) on ``seed``; report curves; return final metrics."""
    reporter = reporter or NullReporter()
    probes = probes or ProbeSpec()
    train = TrainSpec.model_validate(config["train"])
    start = time.perf_counter()

    data = data or load_task(config["task"])
    torch.manual_seed(seed)
    model = build_model(ModelSpec.model_validate(config["model"]), data.info).to(device)
    groups = model.param_groups(train.lr, train.recurrent_lr_factor, train.weight_decay)
    optimiser = torch.optim.AdamW(groups)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimiser, _schedule(train))

    x_train, y_train = (t.to(device) for t in data.train)
    x_val, y_val = (t.to(device) for t in data.val)
    x_probe = x_val[: probes.batch]  # the same inputs for every cell and seed of a task
    sampler = torch.Generator().manual_seed(seed)

    def finish(status: str, step: int, reason: str = "") -> TrialResult:
        metrics: dict[str, float] = {"chance": data.info.chance}
        if status == "complete":
            for split, (x, y) in (("val", (x_val, y_val)), ("test", data.test)):
                for name, value in evaluate(model, x.to(device), y.to(device)).items():
                    metrics[f"{split}_{name}"] = value
            reporter.log_metrics(step, {k.replace("_", "/", 1): v for k, v in metrics.items()})
            reporter.log_curves(probe_norms(model, x_probe, step))
        return TrialResult(status, metrics, step, time.perf_counter() - start, reason)

    reporter.log_curves(probe_norms(model, x_probe, 0))
    for step in range(1, train.steps + 1):
        idx = torch.randint(len(x_train), (train.batch_size,), generator=sampler)
        logits, norms = model(x_train[idx], return_norms=True)
        loss, correct, counted = _loss_and_correct(logits, y_train[idx])
        layer_norms = _layer_means(norms)
        if not math.isfinite(loss.item()):
            return finish("diverged", step, f"non-finite loss at step {step}")
        if any(not math.isfinite(v) or v > train.divergence_norm for v in layer_norms):
            return finish("diverged", step, f"state norm {max(layer_norms):.3g} past bound at step {step}")
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        if train.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), train.grad_clip)
        optimiser.step()
        scheduler.step()

        if step % train.log_every == 0 or step == train.steps:
            values = {"train/loss": loss.item(), "train/accuracy": correct / max(counted, 1)}
            values["train/lr"] = scheduler.get_last_lr()[0]
            values.update({f"train_state_norm/layer{i}": v for i, v in enumerate(layer_norms)})
            reporter.log_metrics(step, values)
        if step % train.eval_every == 0 and step != train.steps:
            val = evaluate(model, x_val, y_val)
            reporter.log_metrics(step, {f"val/{k}": v for k, v in val.items()})
        if step % probes.every == 0 and step != train.steps:
            reporter.log_curves(probe_norms(model, x_probe, step))
    return finish("complete", train.steps)
