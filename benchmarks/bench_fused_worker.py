"""Trials per hour of a whole worker (``ablate.runner.worker.work``) with ``--fuse K`` against one
item at a time: the queue, the MLflow runs and the records included, not only the training.

    python benchmarks/bench_fused_worker.py [--steps 300] [--seeds 8] [--fuse 8] [--repeats 2]
                                            [--threads 1]
    python benchmarks/bench_fused_worker.py --tiny   # 2 seeds of 4 steps, fuse 2, once: a check that it runs

The study is studies/quickstart.yaml's baseline cell (RotRNN, d 32, 2 layers, ListOps up to L 64,
batch 32) with ``--seeds`` seeds and ``--steps`` steps, prepared afresh in a temporary folder for
every run (SQLite study, SQLite MLflow store). One untimed run with fuse 1 first (imports, the task's
cache); then the rows run interleaved over the repeats, so a drift in the shared machine's load hits
both alike. Each row prints its median wall time, trials per hour and the ratio to fuse 1, and the
same by the process's CPU time (the worker's threads included).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import yaml

STUDY = Path(__file__).resolve().parents[1] / "studies" / "quickstart.yaml"


def once(raw: dict, fuse: int, folder: Path) -> tuple[float, float, dict[str, int]]:
    """(wall s, CPU s, outcomes) of one worker running the whole study."""
    from ablate import design
    from ablate.runner import study as st
    from ablate.runner import worker
    from ablate.stores import Stores

    root = Path(tempfile.mkdtemp(dir=folder))
    os.environ["ABLATE_HOME"] = str(root / ".ablate")
    spec = design.validate(dict(raw))
    where = Stores(f"sqlite:///{root / 'optuna.db'}", f"sqlite:///{root / 'mlflow.db'}", None)
    st.prepare(spec, design.items(spec), where)
    wall, cpu = time.perf_counter(), time.process_time()
    outcomes = worker.work(spec.name, where, fuse=fuse, wait_for_running=False)
    return time.perf_counter() - wall, time.process_time() - cpu, outcomes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--fuse", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--tiny", action="store_true", help="2 seeds of 4 steps, fuse 2, one repeat")
    args = parser.parse_args()
    if args.tiny:
        args.steps, args.seeds, args.fuse, args.repeats = 4, 2, 2, 1
    if min(args.steps, args.seeds, args.repeats, args.threads) < 1 or args.fuse < 2:
        parser.error("--steps, --seeds, --repeats and --threads: at least 1; --fuse: at least 2")
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    import torch

    torch.set_num_threads(args.threads)
    raw = yaml.safe_load(STUDY.read_text())
    for key in ("factors", "description", "reports"):
        raw.pop(key, None)
    raw.update(name="bench_fused_worker", seeds=args.seeds)
    raw["train"]["steps"] = args.steps
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        once(raw, 1, folder)  # untimed: imports, the task's cache
        rows: dict[int, list[tuple[float, float]]] = {1: [], args.fuse: []}
        for repeat in range(args.repeats):
            for fuse in rows:
                wall, cpu, outcomes = once(raw, fuse, folder)
                rows[fuse].append((wall, cpu))
                print(f"  fuse {fuse} run {repeat}: {wall:.2f} s wall {cpu:.2f} s CPU {outcomes}", flush=True)
    load = os.getloadavg()[0]
    print(f"\n{args.seeds} seeds x {args.steps} steps, {args.threads} torch threads, {args.repeats} repeats, "
          f"load average {load:.1f}")
    print(f"{'fuse':>4}  {'median s':>8}  {'trials/h':>8}  {'vs 1':>6}  {'CPU s':>6}  {'per CPU-h':>9}  {'vs 1':>6}")
    base_wall = statistics.median(w for w, _ in rows[1])
    base_cpu = statistics.median(c for _, c in rows[1])
    for fuse, samples in rows.items():
        wall = statistics.median(w for w, _ in samples)
        cpu = statistics.median(c for _, c in samples)
        print(f"{fuse:>4}  {wall:>8.2f}  {args.seeds * 3600 / wall:>8.0f}  {base_wall / wall:>5.2f}x  {cpu:>6.2f}  "
              f"{args.seeds * 3600 / cpu:>9.0f}  {base_cpu / cpu:>5.2f}x")


if __name__ == "__main__":
    main()
