"""Probe overhead: training-step time with the norm probes on and off, side by side in one process.

    python benchmarks/bench_probes.py [--length 256] [--steps 50] [--every 25] [--repeats 3] [--device cpu]

A trial (``ablate.training.run_trial``) of a 4-layer RotRNN (d_model 64, state 64, 8 heads) and of an
LRU is trained ``--repeats`` times with probes off (``probes.enabled: false``) and on (the defaults:
probe batch 64 and white-noise batch 64, theory, spectrum and gradient norms every ``--every`` steps,
training-batch rows every ``log_every``), alternating on/off so that machine load hits both alike.
Reported per variant: the fastest trial of each (the least disturbed), the overhead per training
step, and the cost of one full probe (``Prober.probe``) measured alone. Curves are kept in memory
as polars frames, as the MLflow reporter does, so their assembly is in the figure; the upload at
the end of a run is not.
"""

from __future__ import annotations

import argparse
import os
import time

import torch

from ablate.models import build_model
from ablate.probes import Prober
from ablate.spec import ModelSpec, ProbeSpec
from ablate.tasks.base import TaskData, TaskInfo
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


def probe_seconds(config, probes: ProbeSpec, task: TaskData, device: str, repeats: int) -> float:
    torch.manual_seed(0)
    model = build_model(ModelSpec.model_validate(config["model"]), task.info).to(device)
    prober = Prober(model, probes, task.val[0][: probes.batch].to(device))
    best = float("inf")
    for _ in range(repeats + 1):  # the first is a warm-up
        start = time.perf_counter()
        prober.probe(0)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--length", type=int, default=256)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--every", type=int, default=25)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    task = data(args.length)
    on = ProbeSpec(every=args.every)
    off = ProbeSpec(every=args.every, enabled=False)
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; torch threads {torch.get_num_threads()}; "
          f"device {args.device}; L={args.length}, batch {args.batch}, {args.steps} steps, probes every {args.every} "
          f"(probe batch {on.batch}, white noise {on.white_noise_batch})")
    print(f"{'variant':28s} {'off s/step':>11s} {'on s/step':>10s} {'overhead':>9s} {'one probe s':>12s}")
    for name, variant in VARIANTS.items():
        config = {
            "task": {"name": "bench"},
            "model": {"d_model": 64, "state_dim": 64, "layers": 4, **variant},
            "train": {"steps": args.steps, "batch_size": args.batch, "eval_every": 10 * args.steps,
                      "log_every": 10},
        }
        trial_seconds(config, off, task, args.device)  # warm-up: imports, kernels, allocator
        times = {"off": [], "on": []}
        for _ in range(args.repeats):
            for key, spec in (("off", off), ("on", on)):
                times[key].append(trial_seconds(config, spec, task, args.device))
        t_off, t_on = min(times["off"]) / args.steps, min(times["on"]) / args.steps
        one = probe_seconds(config, on, task, args.device, args.repeats)
        print(f"{name:28s} {t_off:11.4f} {t_on:10.4f} {t_on / t_off - 1:9.1%} {one:12.4f}")


if __name__ == "__main__":
    main()
