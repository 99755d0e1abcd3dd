"""``ablate plan --estimate`` against the measured wall time of ``ablate run``, side by side.

    python benchmarks/bench_estimate.py [--workers 1] [--only quickstart,steps1500,tuned]
    python benchmarks/bench_estimate.py --tiny     # the tuned study alone at 10 steps on a 200-example ListOps

Three studies, each in a fresh ``ABLATE_HOME`` (the task cache is shared and warmed first, as a
second run of a study would find it): the quickstart (4 cells × 2 seeds × 300 steps), the
quickstart at 1,500 steps (4 cells × 1 seed: evaluations and probes 30× per trial), and a tuned
study (2 cells × (3 tuning trials + 1 replicate), learning rate tuned). For each, the estimate
is computed (what ``ablate plan --estimate --workers K`` prints), then ``ablate run --workers K``
runs in a subprocess and its wall time is measured; the estimate comes right before its run so
that both see the same machine. Printed: estimate, actual, their ratio, and where the actual
time went (until the first claim, the trials' own seconds, the rest), to see which part an
estimate misses. Times on a shared machine vary from run to run; the ratio is the figure.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "studies" / "quickstart.yaml"
STUDIES = {
    "quickstart": [],
    "steps1500": ["train.steps=1500", "seeds=1"],
    "tuned": ["factors.model.normalisation=[xi]", "seeds=1",
              "tune={trials: 3, space: {train.lr: {low: 1.0e-3, high: 1.0e-2, log: true}}}"],
}


TINY = ["train.steps=10", "train.eval_every=10", "probes.every=5", "task.train_size=200"]


def estimate(key: str, home: Path, workers: int) -> dict:
    """The estimate, computed in a fresh process as `ablate plan --estimate` would be (what a
    first build imports lazily is then measured, not already imported by this one)."""
    tiny = ["--tiny"] if TINY[0] in STUDIES[key] else []  # the child process builds the same overrides
    res = subprocess.run([sys.executable, __file__, "--estimate-only", key, "--workers", str(workers),
                          "--home", str(home), *tiny], capture_output=True, text=True, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def _estimate_here(key: str, home: Path, workers: int) -> None:
    from ablate import design
    from ablate.runner import estimate, plan
    from ablate.runner.pool import threads_per_worker

    spec = design.load(QUICKSTART, STUDIES[key])
    the_plan = plan.build(spec, f"sqlite:///{home / 'optuna.db'}")
    threads = threads_per_worker(workers) if workers > 1 else None
    est = estimate.estimate(the_plan, "cpu", workers=workers, threads=threads)
    print(json.dumps({"name": spec.name, **dataclasses.asdict(est)}))


def run(overrides: list[str], home: Path, workers: int) -> tuple[float, datetime, subprocess.CompletedProcess]:
    env = {**os.environ, "ABLATE_HOME": str(home)}
    args = [sys.executable, "-m", "ablate.cli", "run", str(QUICKSTART), "--workers", str(workers)]
    for o in overrides:
        args += ["--set", o]
    started = datetime.now()
    t0 = time.perf_counter()
    res = subprocess.run(args, env=env, capture_output=True, text=True, cwd=home.parent)
    return time.perf_counter() - t0, started, res


def breakdown(name: str, home: Path, started: datetime) -> tuple[float, float, float]:
    """(seconds until the first claim, the trials' wall seconds summed, their run_trial seconds)."""
    import optuna

    from ablate.runner.study import storage

    trials = optuna.load_study(study_name=name, storage=storage(f"sqlite:///{home / 'optuna.db'}")).trials
    ran = [t for t in trials if t.datetime_start and t.datetime_complete]
    first = min(t.datetime_start for t in ran)
    walls = sum((t.datetime_complete - t.datetime_start).total_seconds() for t in ran)
    inner = sum(float(t.user_attrs.get("seconds") or 0.0) for t in ran)
    return (first - started).total_seconds(), walls, inner


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--only", default=",".join(STUDIES))
    parser.add_argument("--estimate-only", help=argparse.SUPPRESS)
    parser.add_argument("--home", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--tiny", action="store_true",
                        help="the tuned study alone (both phases) at 10 steps, 200 examples (a check that it runs)")
    args = parser.parse_args()
    if args.tiny:
        args.only = "tuned"
        STUDIES["tuned"] = [*STUDIES["tuned"], *TINY]
    unknown = sorted(set(args.only.split(",")) - set(STUDIES))
    if unknown:
        parser.error(f"--only: unknown studies {unknown}; known: {', '.join(STUDIES)}")
    if args.estimate_only:
        _estimate_here(args.estimate_only, args.home, args.workers)
        return
    from ablate import design
    from ablate.runner.estimate import duration
    from ablate.tasks import load_task

    for key in args.only.split(","):  # the data, generated once: not what either side measures
        for cell in design.cells(design.load(QUICKSTART, STUDIES[key])):
            load_task(cell.config["task"], progress=False)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-estimate-") as tmp:
        for key in args.only.split(","):
            overrides = STUDIES[key]
            home = Path(tmp) / key / ".ablate"
            home.mkdir(parents=True)
            est = estimate(key, home, args.workers)
            actual, started, res = run(overrides, home, args.workers)
            if res.returncode:
                sys.exit(f"{key}: ablate run failed\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}")
            first, walls, inner = breakdown(est["name"], home, started)
            rows.append((key, est, actual))
            print(f"{key}: {est['trials']} trials, {args.workers} worker(s): estimate {duration(est['seconds'])} "
                  f"(trials {est['trial_seconds']:.1f} s, start {est['start_seconds']:.1f} s; dry run "
                  f"{est['measured']:.1f} s), actual {duration(actual)} (first claim at {first:.1f} s, trials "
                  f"{walls:.1f} s of which training {inner:.1f} s); ratio {est['seconds'] / actual:.2f}", flush=True)
    print()
    print(f"{'study':<12} {'trials':>6} {'workers':>7} {'estimate':>10} {'actual':>10} {'ratio':>6}")
    for key, est, actual in rows:
        print(f"{key:<12} {est['trials']:>6} {args.workers:>7} {duration(est['seconds']):>10} {duration(actual):>10} "
              f"{est['seconds'] / actual:>6.2f}")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"(load average at the end {load:.1f} on {os.cpu_count()} cores)")


if __name__ == "__main__":
    main()
