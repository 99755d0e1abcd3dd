"""K replicates of one cell trained as one model: the same results as K ``run_trial`` calls.

    run_fused(configs, seeds, ...) -> [TrialResult | BaseException]   one per replicate, in order
    fusable(configs) -> None, or why these configurations cannot train together
    default_fuse(device, config) -> K a worker fuses when not told (``--fuse`` 0): measured here

The replicates are a cell's seeds, or tuning trials that differ only in ``train.lr``,
``train.weight_decay``, ``train.recurrent_lr_factor``, ``train.grad_clip`` or
``train.divergence_norm`` (``FREE``): every step of every replicate then has the same shapes and the
same schedule of logging, validation and probes. Each replicate is an ``ablate.training.Trial``,
built exactly as ``run_trial`` builds it (its seed, its initialisation, its data order, its
optimiser and learning-rate schedule, its probes and reports), and after each step makes the
steps of ``update`` (divergence check, gradient probes, clipping, optimiser, schedule) and runs
the same ``after_step`` (logging, validation, early stopping, probes, final evaluation).
``ablate.models.stacked.stacked_forward`` computes every live replicate's batch at once, and one
backward of the sum of their losses gives each its own gradients; the clipping norms of all the
live replicates are one pass, their AdamW steps one call per parameter group (each replicate's
own state, bound and learning rate; the same elementwise arithmetic as its own step), and their
validation passes one stacked pass a chunk.

A replicate that diverges (non-finite loss, a state norm past the bound) is recorded ``diverged``
at that step and leaves the fused pass, untouched by the others and touching none; one that stops
early (``train.patience``) stops; one whose ``on_eval`` raises (a pruned tuning trial) ends with
that exception in its place of the result list, and the others go on.

Dropout masks are drawn from each replicate's own copy of the global random stream, in the order
its trial alone draws them, so fused equals apart with dropout too (on the CPU; CUDA's dropout
kernel draws differently). Each replicate given a ``checkpoints`` path writes its resume
checkpoint there every ``checkpoint_every`` steps, as ``run_trial`` writes it (``Trial.keep``, its
own dropout stream as the checkpoint's random state); ``saved`` resumes replicates from such
checkpoints (read with ``ablate.training.read_checkpoint``, all of one step): a killed fused
worker's items resume fused, or apart with ``run_trial``, to the same result. WSD branches and
fault injection are ``run_trial``'s only: a worker that claims K items at once (``--fuse K``,
runner/fused.py) trains those apart.
"""

from __future__ import annotations

import copy
import ctypes
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ablate.models import Network
from ablate.models.stacked import stacked_forward
from ablate.optim import AdamW, adamw_
from ablate.probes import train_summary
from ablate.spec import ProbeSpec
from ablate.tasks import TaskData, load_task
from ablate.training import (
    IGNORE,
    Reporter,
    StepResult,
    Trial,
    TrialResult,
    add_batch,
    checked,
    layer_means,
    split_metrics,
)

#: train settings that may differ between fused replicates: none changes a shape or a schedule step
FREE = ("lr", "weight_decay", "recurrent_lr_factor", "grad_clip", "divergence_norm")

# The K a worker fuses without ``--fuse`` (``default_fuse``). Measured here, whole trials, 1 torch
# thread, the 2 shared cores (issue 47), the rows interleaved (ratios to ``apart`` in one run):
#   python benchmarks/bench_fused.py --shape quickstart --fuse 1,4,8 --repeats 2 --threads 1
#     (batch 32 × L 64 × d 32 = 65,536 values a replicate's layer carries), trials/h against apart
#     by wall time, by CPU time: K = 4 1.89×, 1.95×; K = 8 2.17×, 2.27× (load average 4.2; two
#     earlier runs, load 3.3 and 4.4: K = 4 1.81–1.98×, 1.84–1.90×; K = 8 1.91–2.06×, 2.08–2.22×).
#     Before the shared system, clipping, optimiser, loss and validation passes: K = 4 1.18×,
#     1.23×; K = 8 1.13×, 1.22×.
#   python benchmarks/bench_fused.py --shape l784 --fuse 1,4,8 --repeats 1 --steps 30 --threads 1
#     (32 × 784 × 32 = 802,816): K = 4 0.92×, 0.93×; K = 8 0.98×, 0.94× (load 4.4; at 2.3 K = 4
#     0.97×, 0.98×; K = 8 0.94×, 0.96×). Before: K = 4 0.67×, 0.57×; K = 8 0.87×, 0.56×. At this
#     size a step is memory-bound work that fusing cannot share, and some ops on K = 8 replicates'
#     51 MB tensors ran up to twice as slow per value as on one replicate's 6 MB (the norms' square).
# So on the CPU: K = 8 up to twice the quickstart's size, where it was measured to win (and more
# than K = 4); apart above, or when the length is not known before the data are loaded (a fixed
# data set's, such as Fashion-MNIST's 784 pixels).
CPU_FUSE, CPU_FUSE_MAX_VALUES = 8, 2 * 32 * 64 * 32
# On CUDA, where the fused pass's larger products fill the device: NOT measured on a GPU yet
# (benchmarks/gpu_check.py's fused rows, issue 47 point 6, will say).
CUDA_FUSE = 8


def default_fuse(device: str, config: dict[str, Any]) -> int:
    """How many items of a cell a worker trains fused when ``--fuse`` is not given (0) on
    ``device``, for an item of resolved configuration ``config``: where it was measured to win (the
    comment above); 1: apart. The claim takes up to this many: fewer when fewer items are waiting."""
    if device.startswith("cuda"):
        return CUDA_FUSE
    length = _length(config["task"])
    size = (length or 0) * int(config["model"]["d_model"]) * int(config["train"]["batch_size"])
    return CPU_FUSE if length and size <= CPU_FUSE_MAX_VALUES else 1


def _length(task: dict[str, Any]) -> int | None:
    """The sequence length a task's parameters declare (``sequence_length``, else the time steps
    of ``data_shape``); None when only its data say (a fixed data set)."""
    from ablate.tasks.registry import task_params_model

    try:
        params = task_params_model(task["name"]).model_validate({k: v for k, v in task.items() if k != "name"})
    except Exception:  # noqa: BLE001 - a task this worker cannot read: not fused rather than failed
        return None
    if hasattr(params, "sequence_length"):
        return int(params.sequence_length())
    shape = params.data_shape()
    return int(shape[1]) if shape else None


def fusable(configs: Sequence[dict[str, Any]]) -> str | None:
    """None when ``configs`` can train fused, else the reason they cannot (a sentence)."""
    if not configs:
        return "no replicates to fuse"
    first = configs[0]
    if first["train"].get("metrics"):  # computed by the trial's own loop (ablate.training.plugin_metrics)
        return "plug-in metrics (train.metrics) are computed by unfused trials only"
    for i, config in enumerate(configs[1:], 1):
        for part in ("task", "model"):
            if config.get(part) != first.get(part):
                return f"replicate {i} has another {part} than replicate 0: only the seed and train.{{{', '.join(FREE)}}} may differ"
        fixed = {k: v for k, v in config["train"].items() if k not in FREE}
        if fixed != {k: v for k, v in first["train"].items() if k not in FREE}:
            differ = sorted(k for k in set(fixed) | set(first["train"]) - set(FREE)
                            if config["train"].get(k) != first["train"].get(k))
            return f"replicate {i} differs from replicate 0 in train.{', train.'.join(differ)}: only train.{{{', '.join(FREE)}}} may"
    return None


def run_fused(
    configs: Sequence[dict[str, Any]],
    seeds: Sequence[int],
    probes: ProbeSpec | None = None,
    reporters: Sequence[Reporter | None] | None = None,
    device: str = "cpu",
    data: TaskData | None = None,
    accumulate: int = 1,
    on_evals: Sequence[Callable[[int, dict[str, float]], None] | None] | None = None,
    checkpoints: Sequence[Path | None] | None = None,
    checkpoint_every: int = 0,
    saved: Sequence[dict[str, Any] | None] | None = None,
) -> list[TrialResult | BaseException]:
    """Train ``configs[k]`` on ``seeds[k]`` for every k as one model; what ``run_trial(configs[k],
    seeds[k], probes, reporters[k], device, data, accumulate=accumulate, on_eval=on_evals[k],
    checkpoint=checkpoints[k], checkpoint_every=checkpoint_every)`` would report, write and
    return, replicate by replicate (an exception ``on_eval`` raised is returned in its replicate's
    place). ``saved[k]``, if given, is the checkpoint replicate k resumes from, as ``run_trial``
    resumes the one it finds at ``checkpoint``: every replicate's of one step (None: each from
    step 0); the checkpoint files are only written here. Sets the process's malloc to keep freed
    blocks (``keep_freed_memory``)."""
    K = len(configs)
    if len(seeds) != K:
        raise ValueError(f"run_fused: {K} configs but {len(seeds)} seeds")
    reason = fusable(configs)
    if reason is not None:
        raise ValueError(f"run_fused: these replicates cannot train fused: {reason}")
    reporters = list(reporters) if reporters is not None else [None] * K
    on_evals = list(on_evals) if on_evals is not None else [None] * K
    checkpoints = list(checkpoints) if checkpoints is not None else [None] * K
    saved = list(saved) if saved is not None else [None] * K
    if len(reporters) != K or len(on_evals) != K or len(checkpoints) != K or len(saved) != K:
        raise ValueError(f"run_fused: {K} replicates need {K} reporters, on_evals, checkpoints and saved")
    resumed_at = {s["step"] if s is not None else 0 for s in saved}
    if len(resumed_at) != 1:
        raise ValueError(f"run_fused: the replicates resume from different steps ({sorted(resumed_at)}): "
                         "a fused pass trains every replicate's same step")
    first = resumed_at.pop() + 1
    data = data or load_task(configs[0]["task"])
    keep_freed_memory()
    trials, streams = [], []
    for config, seed, on_eval in zip(configs, seeds, on_evals, strict=True):
        # foreach: the optimiser's multi-tensor step, over all replicates at once (``_adamw``; the
        # same arithmetic as per tensor)
        trials.append(Trial(config, seed, probes, device, data, on_eval, foreach=True))
        streams.append(torch.get_rng_state())  # what the trial alone draws its dropout masks from
    for k, (trial, reporter) in enumerate(zip(trials, reporters, strict=True)):
        trial.begin(reporter, saved[k])
        if saved[k] is not None:  # the stream as the killed attempt left it (``begin`` set the global one)
            streams[k] = saved[k]["rng"]
    params = [list(trial.model.parameters()) for trial in trials]
    results: list[TrialResult | BaseException | None] = [None] * K
    steps = trials[0].train.steps
    twin: Network | None = None  # a copy the last live replicate trains beside (``_twinned``)
    for step in range(first, steps + 1):
        live = [k for k in range(K) if results[k] is None]
        if not live:
            break
        batches = [trials[k].batch() for k in live]
        x = torch.stack([trials[k].x_train[i] for k, i in zip(live, batches, strict=True)])
        y = torch.stack([trials[k].y_train[i] for k, i in zip(live, batches, strict=True)])
        for k in live:
            trials[k].optimiser.zero_grad()
        drawn = [streams[k] for k in live]
        masks = _masks([trials[k] for k in live], drawn, x, accumulate)
        for k, state in zip(live, drawn, strict=True):
            streams[k] = state
        models = [trials[k].model for k in live]
        if len(live) == 1:
            if twin is None:
                twin = copy.deepcopy(models[0])
            models, x, y, masks = _twinned(models[0], twin, x, y, masks)
        per = _forward_backward(models, x, y, accumulate, masks)[: len(live)]
        if len(models) > len(live):  # the twin's gradients are never applied
            twin.zero_grad(set_to_none=True)  # type: ignore[union-attr]
        dones: dict[int, StepResult] = {}
        for k, parts in zip(live, per, strict=True):
            try:  # ``update``'s steps up to the clipping, replicate by replicate
                dones[k] = checked(StepResult(*parts), trials[k].train)
                probe = None if dones[k].diverged else trials[k].grad_probe(step)
                if probe is not None:
                    probe()
            except Exception as exc:  # noqa: BLE001 - a replicate's failure ends it alone; the caller re-raises it
                results[k] = exc
                dones.pop(k, None)
        going = [k for k, done in dones.items() if not done.diverged]
        _update([trials[k] for k in going], [params[k] for k in going])
        when = trials[0].when  # the same for every replicate (``fusable``)
        if when.checks(step) or when.validates(step) or step == steps:  # the final pass is ``finish``'s
            valid = [k for k, done in dones.items() if not done.diverged]
            if valid:
                vals = evaluate_fused([trials[k].model for k in valid], trials[0].x_val, trials[0].y_val)
                for k, val in zip(valid, vals, strict=True):
                    trials[k].val_ahead = val
        for k, done in dones.items():
            try:
                results[k] = trials[k].after_step(step, done)
            except Exception as exc:  # noqa: BLE001 - a pruned replicate ends alone; the caller re-raises it
                results[k] = exc
            if results[k] is None:  # its own stream: what torch's global one is when it trains alone
                trials[k].keep(checkpoints[k], checkpoint_every, step, streams[k])
    for k in range(K):
        if results[k] is None:
            results[k] = trials[k].finish("complete", steps)
    return [replace(r, resumed_at=first - 1) if isinstance(r, TrialResult) else r for r in results if r is not None]


def _twinned(model: Network, twin: Network, x: torch.Tensor, y: torch.Tensor,
             masks: list[list[torch.Tensor]] | None) -> tuple[list[Network], torch.Tensor, torch.Tensor,
                                                              list[list[torch.Tensor]] | None]:
    """One live replicate's pass as two: with a twin (its copy, whose gradients are thrown away)
    on the same batch. A pass of one replicate sums some parameters' gradients in another order
    than a pass of two or more (autograd's graph differs), while two or more give each replicate
    the same bits whatever K; without the twin a seed's run would depend on whether its worker
    happened to claim it alone, or on when the others of its group stopped early."""
    masks = None if masks is None else [[torch.cat([m, m]) for m in chunk] for chunk in masks]
    return [model, twin], torch.cat([x, x]), torch.cat([y, y]), masks


def keep_freed_memory() -> None:
    """Have glibc's malloc keep freed blocks of any size for reuse instead of handing them back
    to the system (process-wide, once; nothing where the C library is not glibc's).

    A fused pass's activations are K times one model's: at L 784 with K = 8, 51 MB a tensor,
    past glibc's largest mmap threshold (32 MB), so each was mapped fresh and every page faulted
    in again: a (8, 25088, 32) × (32, 64) product took 26 ms, against 9 ms with the blocks kept
    (and 9 ms for the eight products apart, whose 6 MB blocks glibc already keeps)."""
    global _MEMORY_KEPT
    if _MEMORY_KEPT:
        return
    _MEMORY_KEPT = True
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(_M_MMAP_THRESHOLD, 1 << 30)  # blocks up to 1 GiB from the heap, reused
        libc.mallopt(_M_TRIM_THRESHOLD, (1 << 31) - 1)  # and the heap not trimmed back
    except (OSError, AttributeError):  # not glibc: its allocator, as it is
        pass


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h
#: Sequences a fused validation pass takes at once on the CPU (``evaluate_fused``).
EVAL_CHUNK_CPU = 64
_MEMORY_KEPT = False


@torch.no_grad()
def evaluate_fused(models: Sequence[Network], x: torch.Tensor, y: torch.Tensor,
                   batch: int = 256) -> list[dict[str, float]]:
    """``ablate.training.evaluate`` of every model on the same split, in one stacked pass a chunk:
    on the CPU of ``EVAL_CHUNK_CPU`` sequences whatever K (K times one model's batch is out of the
    CPU's cache: at the quickstart's size with K = 8 a validation pass of 256 took 1.3× as long as
    eight passes apart, where chunks of 64 sequences take ~0.9×); elsewhere of ``batch``."""
    for model in models:
        model.eval()
    totals = [[0.0, 0, 0] for _ in models]
    # One chunk size whatever K: the loss is summed chunk by chunk, so a K-dependent chunk made a
    # replicate's validation loss depend on how many trained beside it.
    chunk = max(1, min(batch, EVAL_CHUNK_CPU)) if x.device.type == "cpu" else batch
    for i in range(0, len(x), chunk):
        xs = x[i : i + chunk]
        logits, _ = stacked_forward(models, xs.expand(len(models), *xs.shape), return_norms=False)
        for k, total in enumerate(totals):
            add_batch(total, logits[k], y[i : i + chunk])
    for model in models:
        model.train()
    return [split_metrics(total) for total in totals]


def _update(trials: list[Trial], params: list[list[torch.Tensor]]) -> None:
    """The rest of ``ablate.training.update`` for every replicate whose step did not diverge:
    clipping each to its own ``train.grad_clip`` (one norm pass over all their gradients), one
    AdamW update over all their parameters where the replicates' groups agree on every setting
    (the elementwise arithmetic of each replicate's own foreach step), and each one's schedule."""
    clipped = [(t, ps) for t, ps in zip(trials, params, strict=True) if t.train.grad_clip > 0]
    if clipped:
        _clip([[p.grad for p in ps if p.grad is not None] for _, ps in clipped], [t.train.grad_clip for t, _ in clipped])
    _adamw([t.optimiser for t in trials])
    for trial in trials:
        trial.scheduler.step()


@torch.no_grad()
def _clip(grads: list[list[torch.Tensor]], limits: list[float]) -> None:
    """``torch.nn.utils.clip_grad_norm_(grads[k], limits[k])`` for every k: the total 2-norm of
    each list's norms, and each list scaled by min(1, limit / (norm + 1e-6)), in a few calls."""
    flat = [g for gs in grads for g in gs]
    if not flat:
        return
    norms = torch.stack(torch._foreach_norm(flat, 2.0))
    sizes = [len(gs) for gs in grads]
    if len(set(sizes)) == 1:  # the same model each: a (K, parameters) matrix
        totals = torch.linalg.vector_norm(norms.view(len(grads), -1), 2.0, dim=1)
    else:
        totals = torch.stack([torch.linalg.vector_norm(part, 2.0) for part in norms.split(sizes)])
    limit = torch.tensor(limits, dtype=totals.dtype, device=totals.device)
    coefs = torch.clamp(limit / (totals + 1e-6), max=1.0)
    for gs, coef in zip(grads, coefs.unbind(0), strict=True):  # no sync: as clip_grad_norm_ scales
        torch._foreach_mul_(gs, coef)


#: an AdamW group's settings: groups that agree on all of them update in one call
_SETTINGS = ("lr", "betas", "eps", "weight_decay")


def _adamw(optimisers: list[AdamW]) -> None:
    """``optimiser.step()`` of every one of ``optimisers`` (the same groups each, as
    ``make_optimiser`` builds them): the groups in one position update in one ``adamw_`` call over
    all their parameters, each parameter's state in its own optimiser, unless their settings differ
    (tuned learning rates, a schedule of another length): then group by group."""
    for position in range(len(optimisers[0].param_groups) if optimisers else 0):
        groups = [o.param_groups[position] for o in optimisers]
        first = groups[0]
        same = all(all(g[key] == first[key] for key in _SETTINGS) for g in groups[1:])
        for batch in ([list(zip(optimisers, groups, strict=True))] if same
                      else [[(o, g)] for o, g in zip(optimisers, groups, strict=True)]):
            params = [(o, p) for o, g in batch for p in g["params"] if p.grad is not None]
            group = batch[0][1]
            adamw_([p for _, p in params], [p.grad for _, p in params], [o.state_of(p) for o, p in params],
                   lr=group["lr"], weight_decay=group["weight_decay"], betas=group["betas"], eps=group["eps"],
                   foreach=batch[0][0].foreach(group))


def _losses(logits: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, list[int], list[int]]:
    """``loss_and_correct`` of every replicate from one cross-entropy call: (K,) mean losses (0
    where no target is scored), correct and counted per replicate."""
    K, classes = logits.shape[0], logits.shape[-1]
    flat, targets = logits.reshape(K, -1, classes), y.reshape(K, -1)
    scored = targets != IGNORE
    each = F.cross_entropy(flat.reshape(-1, classes), targets.reshape(-1), ignore_index=IGNORE,
                           reduction="none").view(K, -1)
    counted = scored.sum(1)
    right = ((flat.detach().argmax(-1) == targets) & scored).sum(1)
    counts = torch.stack([right, counted]).tolist()
    return each.sum(1) / counted.clamp_min(1), counts[0], counts[1]


def _masks(trials: list[Trial], streams: list[torch.Tensor], x: torch.Tensor,
           accumulate: int) -> list[list[torch.Tensor]] | None:
    """Per micro-batch, per block, the (K, b, L, d) dropout masks each replicate's own stream draws
    in the order its trial alone draws them (``streams`` advance in place); None without dropout."""
    if not any(isinstance(block.dropout, nn.Dropout) for block in trials[0].model.blocks):
        return None
    chunks = [len(c) for c in x[0].chunk(accumulate)]
    drawn = []  # [replicate][micro-batch][block]
    for j, trial in enumerate(trials):
        torch.set_rng_state(streams[j])
        model = trial.model
        shape, dtype = (x.shape[2], model.decoder.in_features), model.decoder.weight.dtype
        drawn.append([[_keep((b, *shape), block.dropout.p, dtype) for block in model.blocks
                       if isinstance(block.dropout, nn.Dropout)] for b in chunks])
        streams[j] = torch.get_rng_state()
    return [[torch.stack([d[c][i] for d in drawn]).to(x.device) for i in range(len(drawn[0][c]))]
            for c in range(len(chunks))]


def _keep(shape: tuple[int, ...], p: float, dtype: torch.dtype) -> torch.Tensor:
    """The mask ``F.dropout`` draws on the CPU: Bernoulli(1 − p), divided by 1 − p."""
    return torch.empty(shape, dtype=dtype).bernoulli_(1 - p).div_(1 - p)


def _forward_backward(models: list, x: torch.Tensor, y: torch.Tensor, accumulate: int,
                      masks: list[list[torch.Tensor]] | None) -> list[tuple]:
    """``ablate.training._forward_backward`` of every replicate in one pass: per replicate its
    (loss, correct, counted, layer norms, train summary), gradients in each model's own ``.grad``."""
    K = len(models)
    totals = [int((y[k] != IGNORE).sum().item()) for k in range(K)]
    loss_sum, correct, counted = [0.0] * K, [0] * K, [0] * K
    norm_sums: list[list[float] | None] = [None] * K
    summary: list[torch.Tensor | None] = [None] * K
    for c, (xs, ys) in enumerate(zip(x.chunk(accumulate, 1), y.chunk(accumulate, 1), strict=True)):
        logits, norms = stacked_forward(models, xs, None if masks is None else masks[c])
        losses, rights, ns = _losses(logits, ys)
        # a micro-batch with every target ignored adds no gradient (its mean loss alone would be NaN)
        weights = torch.tensor([n / max(total, 1) for n, total in zip(ns, totals, strict=True)],
                               dtype=losses.dtype, device=losses.device)
        objective = (losses * weights).sum() if any(ns) else None
        values = losses.detach().tolist()
        for k in range(K):
            if ns[k]:
                loss_sum[k] += values[k] * ns[k]
            correct[k], counted[k] = correct[k] + rights[k], counted[k] + ns[k]
            mine = [sq[k] for sq in norms]
            means = [m * xs.shape[1] for m in layer_means(mine)]
            if mine:
                part = train_summary(mine) * (xs.shape[1] / x.shape[1])
                summary[k] = part if summary[k] is None else summary[k] + part
            prev = norm_sums[k]
            norm_sums[k] = means if prev is None else [a + b for a, b in zip(prev, means, strict=True)]
        if objective is not None:
            objective.backward()
    return [(loss_sum[k] / max(counted[k], 1), correct[k], counted[k],
             [v / x.shape[1] for v in norm_sums[k] or []], summary[k]) for k in range(K)]
