"""Probe overhead: training-step time with the norm probes on and off, side by side in one process.

    python benchmarks/bench_probes.py [--length 128] [--steps 50] [--every 25] [--repeats 3] [--device cpu]
    python benchmarks/bench_probes.py --tiny     # L=16, batch 4, 4 steps, probes every 2, once: seconds

A trial (``ablate.training.run_trial``) of a 4-layer RotRNN (d_model 64, state 64, 8 heads) and of an
LRU is trained ``--repeats`` times with probes off (``probes.enabled: false``) and on (the defaults:
probe batch 64, white-noise batch 32, theory, spectrum and gradient norms every ``--every`` steps,
training-batch rows every ``log_every``), alternating on/off so that machine load hits both alike.
Reported per variant, each the fastest of ``--repeats`` (the least disturbed by other processes):
one training step (forward + backward + AdamW), one full probe (``Prober.probe``), one gradient-norm
read, one conversion of training-batch norms to rows; the overhead per training step they imply
(probe + gradients every ``--every`` steps, rows every 10); and, end to end, whole trials with
probes off and on (fastest of each) and the measured overhead (median over adjacent off/on pairs).
On a loaded machine whole trials swing by several times between runs, so the component estimate is
the steadier figure. Curves stay in memory as polars frames, as the MLflow reporter keeps them; the
upload at the end of a run is not timed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from ablate.models import build_model
from ablate.probes import Prober
from ablate.spec import ModelSpec, ProbeSpec
from ablate.tasks.data import TaskData, TaskInfo
from ablate.training import run_trial

VARIANTS = {
    "RotRNN (rotation, ξ)": {"parameterisation": "rotation", "normalisation": "xi", "heads": 8,
                             "init": {"scheme": "rotrnn"}},
    "LRU (complex diagonal, γ)": {"parameterisation": "complex_diagonal", "normalisation": "gamma", "heads": 8,
                                  "init": {"scheme": "ring"}},
}


class Keep:
    """A reporter that keeps what it is given, like ``TrialRun`` before its upload."""

    def __init__(self) -> None:
        self.frames: list = []
        self.metrics: list = []

    def log_metrics(self, step, values) -> None:
        self.metrics.append((step, values))

    def log_curves(self, rows) -> None:
        self.frames.append(rows)


def data(length: int, n: int = 512, vocab: int = 20) -> TaskData:
    info = TaskInfo("bench", "tokens", vocab, 1, 10, "classification", "accuracy", 0.1, length, "bench")
    g = torch.Generator().manual_seed(0)

    def split(k: int):
        return torch.randint(1, vocab, (k, length), generator=g), torch.randint(0, 10, (k,), generator=g)

    return TaskData(info, split(n), split(128), split(64))


def trial_seconds(config, probes: ProbeSpec, task: TaskData, device: str) -> float:
    start = time.perf_counter()
    run_trial(config, 0, probes, Keep(), device=device, data=task)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - start


def _best(f, repeats: int, device: str) -> float:
    """Fastest of ``repeats`` calls after one warm-up (the least disturbed by other processes)."""
    best = float("inf")
    for _ in range(repeats + 1):
        start = time.perf_counter()
        f()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return best


def components(config, probes: ProbeSpec, task: TaskData, device: str, repeats: int) -> dict[str, float]:
    """Seconds of one training step and of each probe part, timed alone, side by side."""
    from ablate.probes import train_rows, train_summary
    from ablate.training import loss_and_correct

    torch.manual_seed(0)
    model = build_model(ModelSpec.model_validate(config["model"]), task.info).to(device)
    opt = torch.optim.AdamW(model.param_groups(3e-3, 0.5, 0.05))
    x, y = (t[: config["train"]["batch_size"]].to(device) for t in task.train)
    prober = Prober(model, probes, task.val[0][: probes.batch].to(device), opt.param_groups)
    state: dict = {}

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        logits, norms = model(x, return_norms=True)
        loss_and_correct(logits, y)[0].backward()
        opt.step()
        state["norms"] = norms

    out = {"step": _best(step, repeats, device)}
    out["probe"] = _best(lambda: prober.probe(0), repeats, device)
    out["grads"] = _best(lambda: prober.grad_rows(1), repeats, device)
    out["train_summary"] = _best(lambda: train_summary(state["norms"]), repeats, device)
    out["train_rows"] = _best(lambda: train_rows(train_summary(state["norms"]), 1), repeats, device)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--length", type=int, default=128)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--every", type=int, default=25)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--tiny", action="store_true", help="L=16, batch 4, 4 steps, probes every 2, once")
    args = ap.parse_args()
    if args.tiny:
        args.length, args.batch, args.steps, args.every, args.repeats = 16, 4, 4, 2, 1
    if min(args.length, args.batch, args.steps, args.every, args.repeats) < 1:
        ap.error("--length, --batch, --steps, --every and --repeats: at least 1")
    task = data(args.length)
    on = ProbeSpec(every=args.every)
    off = ProbeSpec(every=args.every, enabled=False)
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; torch threads {torch.get_num_threads()}; "
          f"device {args.device}; L={args.length}, batch {args.batch}, {args.steps} steps, probes every {args.every} "
          f"(probe batch {on.batch}, white noise {on.white_noise_batch})")
    print(f"{'variant':28s} {'step s':>8s} {'probe s':>8s} {'grads s':>8s} {'rows s':>8s} {'est. overhead':>13s} "
          f"{'trial off s/step':>16s} {'on s/step':>10s} {'measured':>9s}")
    for name, variant in VARIANTS.items():
        config = {
            "task": {"name": "bench"},
            "model": {"d_model": 64, "state_dim": 64, "layers": 4, **variant},
            "train": {"steps": args.steps, "batch_size": args.batch, "eval_every": 10 * args.steps,
                      "log_every": 10},
        }
        c = components(config, on, task, args.device, args.repeats)
        # Per training step: a probe and a gradient read every `every` steps, training-batch rows every
        # log_every (10) steps, the on-device training summary every step.
        extra = (c["probe"] + c["grads"]) / args.every + c["train_rows"] / 10 + c["train_summary"]
        trial_seconds(config, off, task, args.device)  # warm-up: imports, kernels, allocator
        times: dict[str, list[float]] = {"off": [], "on": []}
        for _ in range(args.repeats):  # adjacent off/on pairs see about the same machine load
            for key, spec in (("off", off), ("on", on)):
                times[key].append(trial_seconds(config, spec, task, args.device))
        t_off, t_on = min(times["off"]) / args.steps, min(times["on"]) / args.steps
        paired = statistics.median(b / a for a, b in zip(times["off"], times["on"], strict=True)) - 1
        print(f"{name:28s} {c['step']:8.4f} {c['probe']:8.4f} {c['grads']:8.4f} {c['train_rows']:8.4f} "
              f"{extra / c['step']:13.1%} {t_off:16.4f} {t_on:10.4f} {paired:9.1%}")

if __name__ == "__main__":
    main()
