"""Overhead of tracking and probes on a trial: the same trial with both on and both off.

    python benchmarks/bench_overhead.py [--steps 600] [--repeats 2]

Runs alternate (off, on, off, on, …) in one process so drift on a shared machine hits both
alike; prints each wall time and the overhead ratio of the medians. "On" is what a study does:
MLflow child run on a local SQLite store with batched metrics, probes every 25 steps, Parquet
curves at the end. "Off" is a reporter that drops everything and probes only at start and end.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from ablate import spec as spec_mod
from ablate.runner.tracking import TrialRun
from ablate.spec import ProbeSpec
from ablate.stores import Stores
from ablate.tasks import load_task
from ablate.training import NullReporter, run_trial


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=600, help="training steps (600 ≈ 60 s here)")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()

    spec = spec_mod.load(Path(__file__).resolve().parents[1] / "studies" / "quickstart.yaml",
                         [f"train.steps={args.steps}", "train.eval_every=100"])
    config = spec.baseline()
    data = load_task(config["task"])
    root = Path(tempfile.mkdtemp())
    stores = Stores(f"sqlite:///{root}/o.db", f"sqlite:///{root}/mlflow.db", (root / "art").as_uri())
    times: dict[str, list[float]] = {"off": [], "on": []}
    for i in range(args.repeats):
        for mode in ("off", "on"):
            if mode == "on":
                reporter = TrialRun(stores, "bench", None, f"run{i}", config, {})
                probes = ProbeSpec(every=25, batch=64)
            else:
                reporter, probes = NullReporter(), ProbeSpec(every=10**9, batch=64)
            start = time.perf_counter()
            run_trial(config, seed=0, probes=probes, reporter=reporter, data=data)
            if mode == "on":
                reporter.finish("FINISHED", {})
            times[mode].append(time.perf_counter() - start)
            print(f"{mode:>3}  run {i}: {times[mode][-1]:7.2f} s", flush=True)
    off, on = statistics.median(times["off"]), statistics.median(times["on"])
    print(f"\nmedian off {off:.2f} s · on {on:.2f} s · overhead {100 * (on / off - 1):+.1f}%")


if __name__ == "__main__":
    main()
