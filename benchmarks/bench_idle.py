"""Seconds spent doing nothing (issue 29): commands with nothing to do and the time a worker is not training.

    python benchmarks/bench_idle.py [--cells 100] [--trials 6] [--steps 150] [--repeats 3] [--conditions idle busy]
    python benchmarks/bench_idle.py --tiny     # idle only, 4 cells, 4 trials of 5 steps, one timing each

In a fresh ``ABLATE_HOME`` (a temporary folder), under each condition in turn — "idle" (whatever
else the machine runs) and "busy" (one busy-loop process per core, started here) — it measures:

- ``ablate run`` of a finished study with ``--workers 2`` (nothing to do: target ≤ 3 s);
- ``ablate status``, ``ablate ls`` and ``ablate plan`` of a study of ``--cells`` cells queued with
  ``ablate run --workers 0`` (not trained; target ≤ 1.5 s each);
- from a study of ``--trials`` small trials run by ``ablate run --workers 2``, read back from its
  Optuna store: each worker's first trial against its later ones (claim to completion, Optuna's
  ``datetime_start`` to ``datetime_complete``; target ≤ 20 % slower), the seconds between
  trainings on one worker (from one trial's completion to the next's, less the next's own
  ``run_trial`` seconds: claiming, recording, MLflow, the next model's build; target ≤ 0.5 s), and
  the per-trial training time (the trials' ``seconds``) those are set against;
- the first trial against the later ones again with one worker alone (``--workers 1``, with the
  threads each of the two had: one per core's share), whether the first trial's extra depends on a
  second worker starting beside it;
- start-up on fresh stores (issue 43): ``ablate run --workers 2`` of the ``--trials`` study in a new
  ``ABLATE_HOME``, its wall against its trials' span (first claim to last completion; target: the
  span + 8 s), and ``ablate run --workers 0`` of the ``--cells`` study in a new ``ABLATE_HOME`` each
  time (target ≤ 3 s). Fresh stores, not a fresh machine: MLflow's migrations run once per MLflow
  version and user (a template in ``~/.cache/ablate/stores``, made by the untimed call);
- ``ablate plan --estimate`` of the small study: its first call (every shape timed, the
  bookkeeping measured) and a second one, which reuses those timings (target ≤ 5 s).

Commands are timed as a user meets them (a subprocess, wall clock, interpreter start included);
the median of ``--repeats`` is shown, after one untimed call, with the CPU seconds of its
processes in brackets (which other load hardly changes: wall ≫ CPU means the command waited for
the cores). Where ``PYTHONDONTWRITEBYTECODE`` is set (a development session), every command gets a
bytecode cache under the temporary folder (``PYTHONPYCACHEPREFIX``, filled by untimed calls), as an
installed package has its ``.pyc`` files: otherwise every command would compile ablate's modules
again (~0.05-0.1 s of CPU; ~0.4 s in a run's zygote, which imports the trainer, models and
runner) — ``--no-bytecode`` keeps the environment as it is.
No time is asserted: each row says whether its target is met, on the wall time.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import yaml

from ablate.runner.forking import thread_env, threads_per_worker

ABLATE = [sys.executable, "-m", "ablate.cli"]
TASK = {"name": "listops", "max_depth": 3, "max_args": 5, "min_length": 10, "max_length": 64,
        "train_size": 2000, "val_size": 256, "test_size": 256}
MODEL = {"family": "linear_rnn", "d_model": 32, "state_dim": 32, "layers": 2, "parameterisation": "rotation",
         "normalisation": "xi", "heads": 4}
TARGETS = {"run_finished": 3.0, "status": 1.5, "ls": 1.5, "plan": 1.5, "first_vs_later": 1.2, "gap": 0.5,
           "fresh_overhead": 8.0, "fresh_queue": 3.0, "estimate_again": 5.0}


@contextlib.contextmanager
def busy_cores(on: bool) -> Iterator[None]:
    """One busy-loop process per core for the block (when ``on``)."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)] \
        if on else []
    try:
        time.sleep(1.0 if procs else 0.0)  # let the scheduler spread them
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def ablate(args: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds of one ``ablate`` command (CPU: its processes', which other load on
    the machine hardly changes); its output is checked, not shown."""
    t0, c0 = time.perf_counter(), _children_cpu()
    proc = subprocess.run([*ABLATE, *args], cwd=cwd, env=env, capture_output=True, text=True)
    seconds, cpu = time.perf_counter() - t0, _children_cpu() - c0
    if proc.returncode:
        sys.exit(f"`ablate {' '.join(args)}` exited {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return seconds, cpu


def median_of(repeats: int, args: list[str], cwd: Path, env: dict[str, str], out: dict[str, float],
              key: str) -> None:
    """``out[key]``, ``out[key + "_cpu"]``: the medians of ``repeats`` runs, after an untimed one."""
    ablate(args, cwd, env)
    runs = [ablate(args, cwd, env) for _ in range(repeats)]
    out[key] = statistics.median(w for w, _ in runs)
    out[key + "_cpu"] = statistics.median(c for _, c in runs)


def write_spec(folder: Path, name: str, factors: dict[str, list], seeds: int, steps: int) -> Path:
    spec = {"name": name, "task": TASK, "model": MODEL, "factors": factors, "seeds": seeds,
            "train": {"steps": steps, "batch_size": 32, "eval_every": steps}, "probes": {"every": max(steps // 3, 1)}}
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def fresh_queue(repeats: int, spec: Path, folder: Path, env: dict[str, str], out: dict[str, float]) -> None:
    """``ablate run --workers 0`` in a new ``ABLATE_HOME`` each time (the median of ``repeats``,
    after one untimed call that builds the user's MLflow store template if it is missing)."""
    runs = []
    for k in range(repeats + 1):
        runs.append(ablate(["run", spec.name, "--workers", "0"], folder,
                           {**env, "ABLATE_HOME": str(folder / f".ablate-fresh-{k}")}))
    out["fresh_queue"] = statistics.median(w for w, _ in runs[1:])
    out["fresh_queue_cpu"] = statistics.median(c for _, c in runs[1:])


def span(study: str, home: Path) -> float:
    """Seconds from the study's first claim to its last completion (Optuna's own timestamps)."""
    os.environ["ABLATE_HOME"] = str(home)
    from ablate.runner.study import open_study
    from ablate.stores import resolve

    trials = [t for t in open_study(study, resolve(None, None)).get_trials(deepcopy=False) if t.datetime_complete]
    return (max(t.datetime_complete for t in trials) - min(t.datetime_start for t in trials)).total_seconds()


def worker_times(study: str, home: Path) -> dict[str, float]:
    """First trial vs later ones, seconds between trainings and training seconds, per worker, from
    the study's Optuna store."""
    os.environ["ABLATE_HOME"] = str(home)
    from optuna.trial import TrialState

    from ablate.runner.study import open_study
    from ablate.stores import resolve

    trials = [t for t in open_study(study, resolve(None, None)).get_trials(deepcopy=False)
              if t.state == TrialState.COMPLETE and t.datetime_start and t.datetime_complete]
    by_worker: dict[str, list] = {}
    for t in sorted(trials, key=lambda t: t.datetime_start):
        by_worker.setdefault(str(t.user_attrs.get("worker")), []).append(t)
    first, later, gaps, first_s, later_s = [], [], [], [], []
    for own in by_worker.values():
        walls = [(t.datetime_complete - t.datetime_start).total_seconds() for t in own]
        seconds = [float(t.user_attrs.get("seconds", 0.0)) for t in own]
        first.append(walls[0])
        later.extend(walls[1:])
        first_s.append(seconds[0])
        later_s.extend(seconds[1:])
        for prev, nxt, s in zip(own, own[1:], seconds[1:], strict=False):
            gaps.append((nxt.datetime_complete - prev.datetime_complete).total_seconds() - s)

    def med(xs: list[float]) -> float:
        return statistics.median(xs) if xs else float("nan")

    return {"first": med(first), "later": med(later), "gap": med(gaps), "gap_max": max(gaps, default=float("nan")),
            "first_s": med(first_s), "trial_s": med(later_s), "workers": len(by_worker), "trials": len(trials)}


def measure(condition: str, root: Path, args: argparse.Namespace) -> dict[str, float]:
    folder = root / condition
    folder.mkdir()
    home = folder / ".ablate"
    env = {**os.environ, "ABLATE_HOME": str(home), "PYTHONWARNINGS": "ignore"}
    cached = args.bytecode and bool(env.get("PYTHONDONTWRITEBYTECODE"))
    if cached:  # every command's .pyc files, as installed
        env = {**env, "PYTHONDONTWRITEBYTECODE": "", "PYTHONPYCACHEPREFIX": str(root / "pycache")}
        # Untimed: what a worker imports (ablate.zygote's list), compiled into that cache once
        subprocess.run([sys.executable, "-c", "from ablate.runner import preload; preload.import_modules(True); "
                        "from ablate.ops import scan_numba; scan_numba.load_kernels(); "
                        "import ablate.runner.launch, ablate.cli, ablate.zygote"], check=True, env=env)
    half = max(args.trials // 2, 1)
    small = write_spec(folder, f"idle-small-{condition}", {"train.lr": [1e-3, 3e-3]}, half, args.steps)
    side = max(int(round(args.cells ** 0.5)), 1)
    large = write_spec(folder, f"idle-large-{condition}",
                       {"train.lr": [round(1e-3 * (1 + i), 6) for i in range(side)],
                        "train.weight_decay": [round(0.01 * (1 + i), 6) for i in range(args.cells // side)]},
                       1, args.steps)
    out: dict[str, float] = {}
    # Untimed: the task's data (generated once per machine, then read from the task cache) and the
    # user's MLflow store template (made once per MLflow version) — start-up, not first use.
    subprocess.run([sys.executable, "-c", f"from ablate.tasks import load_task; load_task({TASK!r}, progress=False)"],
                   check=True, env=env)
    ablate(["run", small.name, "--workers", "0"], folder, {**env, "ABLATE_HOME": str(folder / ".ablate-warm")})
    with busy_cores(condition == "busy"):
        print(f"[{condition}] training {small.stem} ({2 * half} trials, 2 workers)", file=sys.stderr, flush=True)
        # One item at a time (--fuse 1): the first-trial, gap and training rows are per item; a fused
        # group's trials overlap (benchmarks/bench_fused_worker.py measures fusing).
        out["run_study"], out["run_study_cpu"] = ablate(["run", small.name, "--workers", "2", "--fuse", "1"], folder,
                                                        env)
        out.update(worker_times(small.stem, home))
        out["span"] = span(small.stem, home)
        out["fresh_overhead"] = out["run_study"] - out["span"]
        # The same study with one worker, in stores of its own as the first study had (fresh: not
        # behind another study's runs): whether a first trial's extra depends on a second worker.
        # With the threads each of the two workers had: a lone worker's default is every core, and
        # with both cores busy its threads wait on each other (trials of 4-20 s against 2 s on one
        # thread, measured here), which would drown the first trial's extra this row looks for.
        lone = write_spec(folder, f"idle-lone-{condition}", {"train.lr": [1e-3, 3e-3]}, half, args.steps)
        print(f"[{condition}] training {lone.stem} ({2 * half} trials, 1 worker)", file=sys.stderr, flush=True)
        lone_home = folder / ".ablate-lone"
        ablate(["run", lone.name, "--workers", "1", "--fuse", "1"], folder,
               {**env, **thread_env(threads_per_worker(2)), "ABLATE_HOME": str(lone_home)})
        times = worker_times(lone.stem, lone_home)
        out["lone_first"], out["lone_later"] = times["first"], times["later"]
        median_of(args.repeats, ["run", small.name, "--workers", "2"], folder, env, out, "run_finished")
        print(f"[{condition}] queueing {large.stem} ({args.cells} cells)", file=sys.stderr, flush=True)
        ablate(["run", large.name, "--workers", "0"], folder, env)
        median_of(args.repeats, ["status", large.stem], folder, env, out, "status")
        median_of(args.repeats, ["ls"], folder, env, out, "ls")
        median_of(args.repeats, ["plan", large.name], folder, env, out, "plan")
        fresh_queue(args.repeats, large, folder, env, out)
        print(f"[{condition}] estimating {small.stem} twice", file=sys.stderr, flush=True)
        # A study not yet run (all its trials pending), and no timings kept from earlier calls.
        unrun = write_spec(folder, f"idle-unrun-{condition}", {"train.lr": [1e-3, 3e-3]}, half, args.steps)
        cache = {**env, "XDG_CACHE_HOME": str(folder / "user-cache"), "ABLATE_HOME": str(folder / ".ablate-unrun")}
        out["estimate_first"], out["estimate_first_cpu"] = ablate(["plan", unrun.name, "--estimate"], folder, cache)
        out["estimate_again"], out["estimate_again_cpu"] = ablate(["plan", unrun.name, "--estimate"], folder, cache)
        out["load"] = os.getloadavg()[0]
        out["bytecode_cached"] = float(cached)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cells", type=int, default=100, help="cells of the study status, ls and plan read")
    p.add_argument("--trials", type=int, default=6, help="trials of the study two workers train")
    p.add_argument("--steps", type=int, default=150, help="training steps per trial")
    p.add_argument("--repeats", type=int, default=3, help="timings of each command (median shown)")
    p.add_argument("--conditions", nargs="+", default=["idle", "busy"], choices=["idle", "busy"])
    p.add_argument("--no-bytecode", dest="bytecode", action="store_false",
                   help="time every command in this environment as it is, PYTHONDONTWRITEBYTECODE included")
    p.add_argument("--tiny", action="store_true",
                   help="idle only, 4 cells, 4 trials of 5 steps, one timing each (a check that it runs)")
    args = p.parse_args()
    if args.tiny:
        args.cells, args.trials, args.steps, args.repeats, args.conditions = 4, 4, 5, 1, ["idle"]
    if min(args.cells, args.trials, args.steps, args.repeats) < 1:
        p.error("--cells, --trials, --steps and --repeats: at least 1")
    results = {}
    with tempfile.TemporaryDirectory(prefix="bench-idle-") as tmp:
        for condition in args.conditions:
            results[condition] = measure(condition, Path(tmp), args)
    conds = list(results)
    rows = [  # (what, key or ratio, target text, met)
        ("`ablate run` of a finished study, --workers 2 (s)", "run_finished", "≤ 3 s"),
        (f"`ablate status`, {args.cells} cells (s)", "status", "≤ 1.5 s"),
        ("`ablate ls` (s)", "ls", "≤ 1.5 s"),
        (f"`ablate plan`, {args.cells} cells (s)", "plan", "≤ 1.5 s"),
        ("a worker's first trial / its later ones (claim to completion)", "first_vs_later", "≤ 1.20×"),
        ("the same, one worker alone", "lone_first_vs_later", "≤ 1.20×"),
        ("seconds between trainings on a worker (median)", "gap", "≤ 0.5 s"),
        ("seconds between trainings on a worker (max)", "gap_max", "≤ 0.5 s"),
        ("first trial, claim to completion (s)", "first", ""),
        ("later trials, claim to completion (s, median)", "later", ""),
        ("first trial, run_trial (s)", "first_s", ""),
        ("per-trial training time: later trials, run_trial (s, median)", "trial_s", ""),
        (f"`ablate run` of the {args.trials}-trial study, --workers 2, fresh stores (s)", "run_study", ""),
        ("  its trials' span, first claim to last completion (s)", "span", ""),
        ("  its wall less that span: start-up and wind-down (s)", "fresh_overhead", "≤ 8 s"),
        (f"`ablate run --workers 0`, {args.cells} cells, fresh stores (s)", "fresh_queue", "≤ 3 s"),
        ("`ablate plan --estimate`, first call: every shape timed (s)", "estimate_first", ""),
        ("`ablate plan --estimate` again: timings reused (s)", "estimate_again", "≤ 5 s"),
    ]
    for r in results.values():
        r["first_vs_later"] = r["first"] / r["later"]
        r["lone_first_vs_later"] = r["lone_first"] / r["lone_later"]
    limits = {**TARGETS, "gap_max": TARGETS["gap"], "lone_first_vs_later": TARGETS["first_vs_later"]}
    header = "| measure | " + " | ".join(f"{c} | met" for c in conds) + " | target |"
    print(f"\n{args.trials} trials of {args.steps} steps (2 workers), {args.cells}-cell study for status/ls/plan, "
          f"{os.cpu_count()} CPU cores; load average at the end: "
          + ", ".join(f"{c} {results[c]['load']:.1f}" for c in conds)
          + ("; every command with a bytecode cache (PYTHONDONTWRITEBYTECODE was set)"
             if any(results[c]["bytecode_cached"] for c in conds) else "") + "\n")
    print(header)
    print("|" + "---|" * (2 + 2 * len(conds)))
    for what, key, target in rows:
        cells = []
        for c in conds:
            value = results[c][key]
            text = f"{value:.2f}×" if key.endswith("first_vs_later") else f"{value:.2f}"
            if f"{key}_cpu" in results[c]:
                text += f" ({results[c][key + '_cpu']:.2f} CPU)"
            met = ("yes" if value <= limits[key] else "no") if key in limits else ""
            cells.append(f"{text} | {met}")
        print(f"| {what} | " + " | ".join(cells) + f" | {target} |")


if __name__ == "__main__":
    main()
