"""Trials per hour of K replicates trained fused (``ablate.training_fused``) against one at a time.

    python benchmarks/bench_fused.py [--shape quickstart|l784|both] [--fuse 1,4,8] [--repeats 2]
                                     [--steps N] [--threads 1] [--tiny] [--resume]

Shapes (whole trials: set-up, steps, validation and convergence passes, probes, final evaluation):
    quickstart  studies/quickstart.yaml's baseline cell: RotRNN (rotation + ξ), d 32, state 32,
                4 heads, 2 layers, ListOps up to L 64, batch 32, 300 steps, probes every 50
    l784        studies/lru_ablations.yaml's baseline cell (LRU: complex diagonal + γ, d 32, state 64,
                2 layers, batch 32, patience 8) on sequential Fashion-MNIST's shape: 784 steps of one
                pixel, 10 classes, the study's 1,000 validation and 2,000 test sequences. The pixels
                are synthetic (standard normal): a step's time does not depend on them, and nothing
                is downloaded. Its 4,000 steps are cut to ``--steps`` (default 100).
    tiny        (``--tiny``) d 8, one layer, L 16, 6 steps, K = 1, 2: the test's smoke run

Rows: ``apart`` is one ``run_trial`` (today's worker trains one item at a time); ``fused K`` trains
K replicates (seeds 0 … K − 1) in one ``run_fused``. Every row runs with glibc's malloc keeping
freed blocks (``keep_freed_memory``), as a worker's trials do, fused or apart (runner/preload.py). Rows run interleaved over the repeats, so a
drift in the shared machine's load hits every row alike; each row prints its median wall time,
trials per hour (K · 3600 / median) and the ratio to ``apart``'s trials per hour, and the same from
the process's CPU time (steadier than wall time where other processes share the cores).

``--resume``: K replicates killed half-way (their checkpoints at half the steps, written by one fused
run) and resumed by a worker: ``resumed apart`` is K ``run_trial`` calls one after another (how a
worker resumed a killed fused group before), ``resumed fused`` one ``run_fused`` given their
checkpoints (``saved``), for the largest ``--fuse`` K; interleaved, each run from the same files;
the ratio is to ``resumed apart``. Every resumed replicate must end as the uninterrupted run did.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch

from ablate import design
from ablate.spec import ProbeSpec
from ablate.tasks import TaskData, load_task
from ablate.tasks.data import TaskInfo
from ablate.training import read_checkpoint, run_trial
from ablate.training_fused import keep_freed_memory, run_fused

STUDIES = Path(__file__).resolve().parents[1] / "studies"


def _synthetic(info: TaskInfo, sizes: tuple[int, int, int], seed: int = 0) -> TaskData:
    g = torch.Generator().manual_seed(seed)

    def split(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randn(n, info.seq_len, info.input_dim, generator=g)
        return x, torch.randint(0, info.num_classes, (n,), generator=g)

    return TaskData(info, *(split(n) for n in sizes))


def shape(name: str, steps: int | None) -> tuple[dict, TaskData, ProbeSpec]:
    """(config, data, probes) of a benchmark shape."""
    if name == "quickstart":
        spec = design.load(STUDIES / "quickstart.yaml", [f"train.steps={steps}"] if steps else [])
        config = spec.baseline()
        return config, load_task(config["task"]), spec.probes
    if name == "l784":
        spec = design.load(STUDIES / "lru_ablations.yaml", [f"train.steps={steps or 100}"])
        config = spec.baseline()
        task = config["task"]
        info = TaskInfo("fashion_mnist_shape", "continuous", None, 1, 10, "classification", "accuracy", 0.1, 784,
                        "synthetic")
        return config, _synthetic(info, (2000, task["val_size"], task["test_size"])), spec.probes
    if name == "tiny":
        info = TaskInfo("tiny", "continuous", None, 2, 3, "classification", "accuracy", 1 / 3, 16, "synthetic")
        config = {"task": {"name": "tiny"},
                  "model": {"family": "linear_rnn", "d_model": 8, "state_dim": 8, "layers": 1, "heads": 2,
                            "parameterisation": "rotation", "normalisation": "xi",
                            "init": {"scheme": "rotrnn", "gamma_min": 0.5, "gamma_max": 0.95}},
                  "train": {"steps": steps or 6, "batch_size": 4, "eval_every": 3, "log_every": 2}}
        return config, _synthetic(info, (32, 8, 8)), ProbeSpec(every=3, batch=4, white_noise_batch=2)
    raise ValueError(f"unknown shape {name!r}; valid: quickstart, l784, tiny")


def measure(name: str, fuse: list[int], repeats: int, steps: int | None) -> list[dict]:
    """Rows of one shape: apart and each fused K, median wall over ``repeats`` interleaved runs."""
    config, data, probes = shape(name, steps)
    # glibc keeping freed blocks, as run_fused sets it: for every row, apart too (process-wide; at
    # L 784 it made a trial apart 1.2x as fast as well)
    keep_freed_memory()
    run_fused([config] * 2, [0, 1], probes, data=data)  # compiled kernels and first code paths, untimed
    rows = [("apart", 1)] + [("fused", k) for k in fuse]
    walls: dict[tuple[str, int], list[float]] = {row: [] for row in rows}
    cpus: dict[tuple[str, int], list[float]] = {row: [] for row in rows}
    for r in range(repeats):
        for kind, k in rows if r % 2 == 0 else rows[::-1]:
            start, cpu = time.perf_counter(), time.process_time()
            if kind == "apart":
                result = run_trial(config, 0, probes, data=data)
                statuses = [result.status]
            else:
                statuses = [getattr(x, "status", repr(x)) for x in run_fused([config] * k, list(range(k)), probes,
                                                                               data=data)]
            walls[(kind, k)].append(time.perf_counter() - start)
            cpus[(kind, k)].append(time.process_time() - cpu)
            print(f"  {name} {kind} K={k} run {r}: {walls[(kind, k)][-1]:.2f} s wall {cpus[(kind, k)][-1]:.2f} s CPU "
                  f"{statuses}", flush=True)
    return _summary(name, {row: (walls[row], cpus[row]) for row in rows})


def _summary(name: str, samples: dict[tuple[str, int], tuple[list[float], list[float]]]) -> list[dict]:
    """A row per (kind, K) of its wall and CPU seconds: medians, trials per hour, and the ratios to
    the first row's."""
    out = []
    for (kind, k), (walls, cpus) in samples.items():
        wall, cpu = statistics.median(walls), statistics.median(cpus)
        out.append({"shape": name, "row": kind, "K": k, "wall": wall, "per_hour": k * 3600 / wall, "cpu": cpu,
                    "per_cpu_hour": k * 3600 / cpu})
    for row in out:
        row["ratio"] = row["per_hour"] / out[0]["per_hour"]
        row["cpu_ratio"] = row["per_cpu_hour"] / out[0]["per_cpu_hour"]
    return out


def measure_resume(name: str, k: int, repeats: int, steps: int | None) -> list[dict]:
    """Rows of ``--resume``: K replicates resumed from their half-way checkpoints, apart then fused."""
    config, data, probes = shape(name, steps)
    keep_freed_memory()
    total = int(config["train"]["steps"])
    configs, seeds = [config] * k, list(range(k))
    with tempfile.TemporaryDirectory() as folder:
        paths = [Path(folder) / f"{seed}.pt" for seed in seeds]
        whole = run_fused(configs, seeds, probes, data=data, checkpoints=paths, checkpoint_every=total // 2)
        files = {path: path.read_bytes() for path in paths}
        times: dict[str, tuple[list[float], list[float]]] = {"resumed apart": ([], []), "resumed fused": ([], [])}
        for r in range(repeats):
            for kind in list(times) if r % 2 == 0 else list(times)[::-1]:
                for path, content in files.items():  # the killed attempt's, as it left them
                    path.write_bytes(content)
                start, cpu = time.perf_counter(), time.process_time()
                if kind == "resumed apart":
                    results = [run_trial(config, seed, probes, data=data, checkpoint=path)
                               for seed, path in zip(seeds, paths, strict=True)]
                else:
                    results = run_fused(configs, seeds, probes, data=data, saved=[read_checkpoint(p) for p in paths])
                times[kind][0].append(time.perf_counter() - start)
                times[kind][1].append(time.process_time() - cpu)
                for x, w in zip(results, whole, strict=True):
                    if x.resumed_at != total // 2 or x.steps != w.steps or not math.isclose(
                            x.metrics["test_loss"], w.metrics["test_loss"], rel_tol=1e-3, abs_tol=1e-6):
                        raise AssertionError(f"{kind}: a resumed replicate did not reach the uninterrupted result")
                print(f"  {name} {kind} K={k} run {r}: {times[kind][0][-1]:.2f} s wall {times[kind][1][-1]:.2f} s CPU "
                      f"from step {total // 2}", flush=True)
    return _summary(name, {(kind, k): samples for kind, samples in times.items()})


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shape", choices=("quickstart", "l784", "both"), default="both")
    parser.add_argument("--fuse", default="1,4,8", help="replicate counts K to fuse, comma-separated")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--steps", type=int, default=None, help="training steps (default: the shape's)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0: torch's default)")
    parser.add_argument("--tiny", action="store_true", help="the smoke shape only, K = 1, 2, one repeat")
    parser.add_argument("--resume", action="store_true", help="killed replicates resumed apart and fused instead")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.tiny:
        names, fuse, repeats = ["tiny"], [1, 2], 1
    else:
        names = ["quickstart", "l784"] if args.shape == "both" else [args.shape]
        fuse, repeats = [int(k) for k in args.fuse.split(",")], args.repeats
    if any(k < 1 for k in fuse) or repeats < 1:
        parser.error("--fuse takes counts of at least 1 and --repeats at least 1")
    if args.resume:
        rows = [row for name in names for row in measure_resume(name, max(2, *fuse), repeats, args.steps)]
    else:
        rows = [row for name in names for row in measure(name, fuse, repeats, args.steps)]
    print(f"\n{torch.get_num_threads()} torch threads, {repeats} repeats, load average {os.getloadavg()[0]:.1f}")
    width = max(len(row["row"]) for row in rows) + 1
    print(f"{'shape':<11}{'row':<{width}}{'K':>3}{'median s':>10}{'trials/h':>10}{'vs apart':>10}{'CPU s':>8}"
          f"{'per CPU-h':>11}{'vs apart':>10}")
    for row in rows:
        print(f"{row['shape']:<11}{row['row']:<{width}}{row['K']:>3}{row['wall']:>10.2f}{row['per_hour']:>10.0f}"
              f"{row['ratio']:>9.2f}x{row['cpu']:>8.2f}{row['per_cpu_hour']:>11.0f}{row['cpu_ratio']:>9.2f}x")
    return rows


if __name__ == "__main__":
    main()
