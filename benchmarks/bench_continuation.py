"""A WSD budget doubled: the longer study continues the shorter one's stable-phase checkpoints.

    python benchmarks/bench_continuation.py [--steps 300] [--workers 1] [--seeds 2]
    python benchmarks/bench_continuation.py --tiny     # one cell, one seed, 20 → 40 steps, a 200-example ListOps

The quickstart's grid on a WSD schedule (``warmup_steps`` 15, decay over the last fifth), in a
fresh ``ABLATE_HOME`` (a temporary folder) and the task cache you already have:

1. ``ablate run`` of the ``--steps`` study (timed: what the longer one continues from);
2. ``ablate plan`` of the same grid at twice the steps, in the same stores: its "continues … from
   step …" lines (printed);
3. ``ablate run`` of the doubled study in the same stores (timed: it trains only the rest);
4. ``ablate run`` of the doubled study in a second fresh ``ABLATE_HOME`` (timed: from step 0).

It prints the three wall times, the ratio continued / from scratch beside the ratio of the steps
trained, and checks that both doubled studies report the same test accuracy per run (the
continuation equals training from scratch). Wall times are of the whole commands (interpreter,
stores, evaluation, reports excluded); measured side by side in one run, on whatever else the
machine is doing, so the ratio is what to read.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
ABLATE = [sys.executable, "-m", "ablate.cli"]


def spec(steps: int, seeds: int, warmup_steps: int = 15, tiny: bool = False) -> dict:
    raw = yaml.safe_load((ROOT / "studies" / "quickstart.yaml").read_text())
    raw.pop("reports", None)
    raw["name"] = f"wsd-{steps}"
    raw["seeds"] = seeds
    raw["train"] = {**raw["train"], "steps": steps, "schedule": "wsd", "warmup_steps": warmup_steps,
                    "decay": 0.2}
    if tiny:  # the baseline cell alone on a small ListOps: the same commands, seconds of training
        raw.pop("factors", None)
        raw["task"] = {**raw["task"], "train_size": 200}
    return raw


def ablate(args: list[str], cwd: Path, home: Path) -> tuple[float, str]:
    env = {**os.environ, "ABLATE_HOME": str(home), "PYTHONWARNINGS": "ignore"}
    start = time.perf_counter()
    proc = subprocess.run([*ABLATE, *args], cwd=cwd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode:
        sys.exit(f"`ablate {' '.join(args)}` exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return seconds, proc.stdout


def test_accuracies(study: str, cwd: Path, home: Path) -> dict[tuple[str, int], float]:
    _, out = ablate(["status", study, "--json"], cwd, home)  # proves the study finished
    if not json.loads(out):
        sys.exit(f"study {study} has no status")
    env = {**os.environ, "ABLATE_HOME": str(home)}
    code = ("import json, sys; from ablate import results; r = results.load(sys.argv[1]); "
            "t = r.trials.filter(r.trials['phase'] == 'replicate'); "
            "print(json.dumps([[a, b, c] for a, b, c in zip(t['cell_id'], t['seed'], t['test_accuracy'])]))")
    proc = subprocess.run([sys.executable, "-c", code, study], cwd=cwd, env=env, capture_output=True, text=True,
                          check=True)
    return {(c, int(s)): float(a) for c, s, a in json.loads(proc.stdout.strip().splitlines()[-1])}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=300, help="the shorter budget (the longer is twice it)")
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--tiny", action="store_true",
                   help="the baseline cell alone, 1 seed, 20 → 40 steps, 200 training examples (a check that it runs)")
    args = p.parse_args()
    if args.tiny:
        args.steps, args.seeds = 20, 1
    if args.steps < 5 or min(args.seeds, args.workers) < 1:
        p.error("--steps: at least 5 (the decay is the last fifth); --seeds, --workers: at least 1")
    warmup = min(15, args.steps // 4)  # the same in both: a different warm-up is a different lineage
    short, long = (spec(steps, args.seeds, warmup, args.tiny) for steps in (args.steps, 2 * args.steps))
    long["name"] = short["name"].replace(str(args.steps), str(2 * args.steps))
    with tempfile.TemporaryDirectory(prefix="bench-continuation-") as tmp:
        root = Path(tmp)
        for raw in (short, long):
            (root / f"{raw['name']}.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
        run = ["--workers", str(args.workers)]
        shared, fresh = root / "shared" / ".ablate", root / "fresh" / ".ablate"
        t_short, _ = ablate(["run", f"{short['name']}.yaml", *run], root, shared)
        _, plan = ablate(["plan", f"{long['name']}.yaml"], root, shared)
        t_continued, _ = ablate(["run", f"{long['name']}.yaml", *run], root, shared)
        t_scratch, _ = ablate(["run", f"{long['name']}.yaml", *run], root, fresh)
        continued = test_accuracies(long["name"], root, shared)
        scratch = test_accuracies(long["name"], root, fresh)
    lines = [line for line in plan.splitlines() if "continues" in line]
    cells = len(continued)
    stable_end = args.steps - args.steps // 5
    trained = 2 * args.steps - stable_end
    print(f"quickstart grid on WSD, {args.steps} → {2 * args.steps} steps, {args.seeds} seeds, {args.workers} "
          f"worker(s), {os.cpu_count()} CPU cores, load average {os.getloadavg()[0]:.1f} at the end\n")
    print("`ablate plan` of the doubled study, in the shorter one's stores:")
    print("\n".join(f"  {line.strip()}" for line in lines[:4]) + (f"\n  … ({len(lines)} lines)" if len(lines) > 4 else ""))
    print()
    print("| run | wall (s) |")
    print("|---|---|")
    print(f"| {args.steps} steps, fresh stores | {t_short:.1f} |")
    print(f"| {2 * args.steps} steps, continuing the {args.steps}-step runs | {t_continued:.1f} |")
    print(f"| {2 * args.steps} steps, from scratch in fresh stores | {t_scratch:.1f} |")
    print()
    print(f"continued / from scratch: {t_continued / t_scratch:.2f} (steps trained: {trained} of {2 * args.steps} "
          f"per run, {trained / (2 * args.steps):.2f}; the rest is per-trial start-up, evaluation and bookkeeping)")
    if not lines:  # every figure above would then compare two runs from step 0
        sys.exit("the doubled study's plan continues nothing: no stable-phase checkpoint was found or it was refused")
    same = continued == scratch
    print(f"test accuracy per run, continued vs from scratch: {'equal' if same else 'DIFFERENT'} "
          f"({cells} runs)")
    if not same:
        for key in sorted(continued):
            if continued[key] != scratch.get(key):
                print(f"  {key}: {continued[key]} vs {scratch.get(key)}")
        sys.exit(1)


if __name__ == "__main__":
    main()
