"""Local worker scaling: ``ablate worker`` processes on one SQLite study, real ~10-second trials.

    python benchmarks/bench_workers.py [--trials 8] [--trial-s 10] [--workers 1 2] [--rounds 1]
    python benchmarks/bench_workers.py --device cuda:0 --workers 1 2 4    # workers sharing one GPU
    python benchmarks/bench_workers.py --tiny     # 2 trials of 20 steps at 1 and 2 workers: a check that it runs

One cell of a small ListOps model with ``--trials`` seeds; its training steps are calibrated (in
this process, on one thread) so that a trial takes about ``--trial-s`` seconds. For each worker
count the items are queued (``ablate run --workers 0``, not timed), then that many workers are
started as ``ablate run --workers K`` starts them (``ablate.runner.pool.start``: devices, thread
counts). The clock runs from the start of the worker processes to the last completed trial; a
worker's time to first claim runs from its process start to its first trial's start (Optuna's
``datetime_start``, set at the claim). With ``--rounds 2`` the worker counts alternate (1, 2, 1,
2) so a change in machine load hits both. The load average before and after is printed: on a
shared machine the ratio means little when other processes use the cores.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path

import yaml

TASK = {"name": "listops", "max_depth": 3, "max_args": 5, "min_length": 10, "max_length": 64,
        "train_size": 2000, "val_size": 256, "test_size": 256}
MODEL = {"d_model": 32, "state_dim": 32, "layers": 2, "heads": 4}


def calibrate(trial_s: float, device: str) -> int:
    """Training steps for a trial of about ``trial_s`` seconds alone on ``device`` (one CPU
    thread on a CPU; setup excluded)."""
    import torch

    from ablate.spec import ProbeSpec
    from ablate.training import run_trial

    torch.set_num_threads(1)
    config = {"task": TASK, "model": MODEL, "train": {"steps": 10, "batch_size": 32, "eval_every": 1000}}
    run_trial(config, 0, ProbeSpec(enabled=False), device=device)  # builds and caches the task, warms up
    times = {}
    for steps in (10, 60):
        config["train"]["steps"] = steps
        t0 = time.perf_counter()
        run_trial(config, 0, ProbeSpec(enabled=False), device=device)
        times[steps] = time.perf_counter() - t0
    per_step = (times[60] - times[10]) / 50
    setup = max(0.0, times[10] - 10 * per_step)
    return max(20, round((trial_s - setup) / per_step))


def run_config(workers: int, trials: int, steps: int, root: Path, device: str = "cpu") -> dict[str, float]:
    from optuna.trial import TrialState

    from ablate.runner import pool
    from ablate.runner.study import open_study
    from ablate.stores import resolve

    name = f"bench-{workers}w-{uuid.uuid4().hex[:6]}"
    work_dir = root / name
    work_dir.mkdir()
    spec = {"name": name, "task": TASK, "model": MODEL,
            "train": {"steps": steps, "batch_size": 32, "eval_every": max(steps // 2, 1)}, "seeds": trials}
    (work_dir / "spec.yaml").write_text(yaml.safe_dump(spec))
    home = work_dir / ".ablate"
    os.environ["ABLATE_HOME"] = str(home)  # pool.start's logs and the workers' default stores
    stores = resolve(None, None)
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    subprocess.run([sys.executable, "-m", "ablate.cli", "run", "spec.yaml", "--workers", "0"], cwd=work_dir,
                   env=env, check=True, capture_output=True)
    start = datetime.now()
    t0 = time.perf_counter()
    cwd = os.getcwd()
    os.chdir(work_dir)
    try:
        procs = pool.start(name, stores, pool.devices(device, workers), checkpoint_every=0)
        started = {p.pid: start for p in procs}
        codes = [p.wait() for p in procs]
    finally:
        os.chdir(cwd)
    exited = time.perf_counter() - t0
    if any(codes):
        sys.exit(f"a worker exited with {codes}: see {home / 'logs'}")
    trials_done = [t for t in open_study(name, stores).get_trials(deepcopy=False) if t.state == TrialState.COMPLETE]
    first: dict[int, float] = {}
    for t in trials_done:
        pid = int(str(t.user_attrs.get("worker", ":0")).rsplit(":", 1)[1])
        claim = (t.datetime_start - started.get(pid, start)).total_seconds()
        first[pid] = min(first.get(pid, claim), claim)
    wall = (max(t.datetime_complete for t in trials_done) - start).total_seconds()
    seconds = [float(t.user_attrs.get("seconds", 0.0)) for t in trials_done]
    return {"workers": workers, "items": len(trials_done), "wall_s": wall, "exit_s": exited,
            "first_claim_s": max(first.values()) if first else float("nan"),
            "trials_per_hour": 3600 * len(trials_done) / wall,
            "trial_s": statistics.median(seconds) if seconds else float("nan"),
            "threads": pool.threads_per_worker(workers)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trials", type=int, default=8)
    p.add_argument("--trial-s", type=float, default=10.0, help="target seconds per trial (calibrated)")
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    p.add_argument("--rounds", type=int, default=1, help="repeat the worker counts, alternating")
    p.add_argument("--steps", type=int, default=0, help="training steps per trial (0: calibrate)")
    p.add_argument("--device", default="cpu", help="cpu, or cuda:k: every worker on that GPU")
    p.add_argument("--tiny", action="store_true",
                   help="2 trials, calibrated to the fewest steps (20), at 1 and 2 workers (a check that it runs)")
    args = p.parse_args()
    if args.tiny:
        args.trials, args.trial_s, args.workers, args.rounds = 2, 0.1, [1, 2], 1
    if min(args.trials, args.rounds, *args.workers) < 1 or args.trial_s <= 0 or args.steps < 0:
        p.error("--trials, --rounds and --workers: at least 1; --trial-s: positive; --steps: 0 or more")
    load0 = os.getloadavg()
    steps = args.steps or calibrate(args.trial_s, args.device)
    print(f"{steps} training steps per trial (about {args.trial_s:g} s alone on {args.device})", file=sys.stderr)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-workers-") as tmp:
        for r in range(args.rounds):
            for k in args.workers:
                rows.append(run_config(k, args.trials, steps, Path(tmp), args.device))
                print(f"  round {r + 1}: {k} workers {rows[-1]['wall_s']:.1f} s", file=sys.stderr)
    load1 = os.getloadavg()
    print(f"\n{args.trials} trials of {steps} steps on {args.device}, SQLite stores, {os.cpu_count()} CPU cores; "
          f"load average "
          f"{load0[0]:.1f} / {load0[1]:.1f} / {load0[2]:.1f} before, {load1[0]:.1f} / {load1[1]:.1f} / "
          f"{load1[2]:.1f} after\n")
    print("| workers | threads each | trials | median trial s | wall s | trials/hour | exit s | first claim s (slowest) |")
    print("|--------:|-------------:|-------:|---------------:|-------:|------------:|-------:|------------------------:|")
    for r in rows:
        print(f"| {r['workers']} | {r['threads']} | {r['items']} | {r['trial_s']:.1f} | {r['wall_s']:.1f} | "
              f"{r['trials_per_hour']:.0f} | {r['exit_s']:.1f} | {r['first_claim_s']:.2f} |")
    by_k: dict[int, list[float]] = {}
    for r in rows:
        by_k.setdefault(r["workers"], []).append(r["wall_s"])
    base = statistics.median(by_k[min(by_k)])
    for k, walls in sorted(by_k.items()):
        if k != min(by_k):
            print(f"\n{k} workers vs {min(by_k)}: {base / statistics.median(walls):.2f}× faster "
                  f"(median wall {statistics.median(walls):.1f} s vs {base:.1f} s)")


if __name__ == "__main__":
    main()
