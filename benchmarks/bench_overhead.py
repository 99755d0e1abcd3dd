"""Overhead of tracking and probes on a trial: the same trial with both on and both off.

    python benchmarks/bench_overhead.py [--study studies/quickstart.yaml] [--steps 7000] [--repeats 2]
    python benchmarks/bench_overhead.py --tiny     # 10 steps, probes every 5, one pair: seconds

Runs alternate (off, on, on, off, …) in one process so a steady drift on a shared machine hits
both alike; prints each wall and CPU time and the overhead ratio of the medians. Whole-trial times on a
shared machine vary by several percent between identical runs, so the "on" runs also account
for their own time spent inside the probe and tracking calls: that share is the overhead measured
without the noise of the difference of two long runs. "On" is what a study does:
an MLflow child run on a local SQLite store with batched metrics, probes at the spec's default
``every`` (or ``--every``), Parquet curves at the end. "Off" drops every report and probes nothing.
The study's baseline cell is trained; the default steps make a ~60-s quickstart trial on a quiet
2-core machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch

from ablate import design
from ablate.probes import Prober
from ablate.runner.tracking import TrialRun
from ablate.spec import ProbeSpec
from ablate.stores import Stores
from ablate.tasks import load_task
from ablate.training import NullReporter, run_trial


class Accounting:
    """Seconds spent inside the probe and tracking calls of a trial (wraps them in place)."""

    def __init__(self) -> None:
        self.seconds, self.depth = 0.0, 0  # only outermost calls count (log_metrics may flush, ...)
        for owner, names in ((Prober, ("probe", "grad_rows", "keep_train", "train_rows", "fingerprints")),
                             (TrialRun, ("__init__", "log_metrics", "log_curves", "finish"))):
            for name in names:
                setattr(owner, name, self._timed(getattr(owner, name)))

    def _timed(self, fn):
        def timed(*args, **kwargs):
            start = time.perf_counter()
            self.depth += 1
            try:
                return fn(*args, **kwargs)
            finally:
                self.depth -= 1
                if not self.depth:
                    self.seconds += time.perf_counter() - start
        return timed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--study", type=Path, default=Path(__file__).resolve().parents[1] / "studies" / "quickstart.yaml")
    parser.add_argument("--steps", type=int, default=7000, help="training steps (7000 ≈ 60 s of the quickstart)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--every", type=int, default=ProbeSpec().every, help="steps between probes")
    parser.add_argument("--threads", type=int, default=0,
                        help="torch threads (0: torch's default); 1 is steadier on a shared machine")
    parser.add_argument("--tiny", action="store_true", help="10 steps, probes every 5, one off/on pair")
    args = parser.parse_args()
    if args.tiny:
        args.steps, args.every, args.repeats = 10, 5, 1
    if min(args.steps, args.every, args.repeats) < 1:
        parser.error("--steps, --every and --repeats: at least 1")
    if args.threads:
        torch.set_num_threads(args.threads)

    spec = design.load(args.study, [f"train.steps={args.steps}"])
    config = spec.baseline()
    data = load_task(config["task"])
    root = Path(tempfile.mkdtemp())
    stores = Stores(f"sqlite:///{root}/o.db", f"sqlite:///{root}/mlflow.db", (root / "art").as_uri())
    probes_on = spec.probes.model_copy(update={"every": args.every, "enabled": True})
    # One-off costs paid once per study or worker process, not per trial, come before timing:
    # creating the MLflow tables, loading the compiled kernels, the first probe's code paths.
    warm = TrialRun(stores, "bench", None, "warm-up", config, {})
    run_trial({**config, "train": {**config["train"], "steps": 20}}, seed=0, probes=probes_on,
              reporter=warm, data=data)
    warm.finish("FINISHED", {})
    times: dict[str, list[float]] = {"off": [], "on": []}
    cpu: dict[str, list[float]] = {"off": [], "on": []}
    inside: list[float] = []
    accounting = Accounting()
    for i in range(args.repeats):
        for mode in ("off", "on") if i % 2 == 0 else ("on", "off"):  # ABBA: a steady drift cancels
            accounting.seconds = 0.0
            start, cpu0 = time.perf_counter(), time.process_time()  # run creation counts as overhead
            if mode == "on":
                reporter = TrialRun(stores, "bench", None, f"run{i}", config, {})
                probes = probes_on
            else:
                reporter, probes = NullReporter(), ProbeSpec(enabled=False)
            run_trial(config, seed=0, probes=probes, reporter=reporter, data=data)
            if mode == "on":
                reporter.finish("FINISHED", {})
            times[mode].append(time.perf_counter() - start)
            cpu[mode].append(time.process_time() - cpu0)
            note = ""
            if mode == "on":
                inside.append(accounting.seconds / times[mode][-1])
                note = f"  ({accounting.seconds:.2f} s inside probe and tracking calls: {100 * inside[-1]:.1f}%)"
            print(f"{mode:>3}  run {i}: {times[mode][-1]:7.2f} s wall {cpu[mode][-1]:7.2f} s CPU{note}", flush=True)
    off, on = statistics.median(times["off"]), statistics.median(times["on"])
    off_cpu, on_cpu = statistics.median(cpu["off"]), statistics.median(cpu["on"])
    print(f"\n{args.study.name}, {args.steps} steps, probes every {args.every}, {torch.get_num_threads()} torch "
          f"threads, load average {os.getloadavg()[0]:.1f}")
    print(f"median wall off {off:.2f} s · on {on:.2f} s · overhead {100 * (on / off - 1):+.1f}%")
    print(f"median CPU  off {off_cpu:.2f} s · on {on_cpu:.2f} s · overhead {100 * (on_cpu / off_cpu - 1):+.1f}%")
    print(f"time inside probe and tracking calls: {100 * statistics.median(inside):.1f}% of the 'on' trial")


if __name__ == "__main__":
    main()
