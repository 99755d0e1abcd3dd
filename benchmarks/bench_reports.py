"""Seconds to render a study's reports (issue 43: both reports of the quickstart in ≤ 10 s, of a
12-cell study in ≤ 20 s, on 2 idle cores), through the command a user types.

    python benchmarks/bench_reports.py [--repeats 2] [--cells 4 12] [--seeds 3] [--study NAME ...]
    python benchmarks/bench_reports.py --tiny      # 4 cells × 2 seeds, the norm report's HTML alone, once

Each ``--cells`` size is a study exported from ``tests/synthetic_study.py`` (a committed export's
real runs dealt out to the cells of a larger grid: real probes, metrics and trials, no training),
rendered with ``ablate report --data DIR`` (HTML and PDF, every report the spec names); each
``--study`` is a study in the stores of ``$ABLATE_HOME`` (or ``--storage`` / ``--tracking-uri``),
rendered with ``ablate report NAME`` — read from its stores, as after ``ablate run``. Printed per
study: the median wall and CPU seconds (the command and its kernel) of ``--repeats`` renders, the
load, and the target. Times on a shared machine vary from run to run: say the load with them.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # synthetic_study: the report scale tests' studies

TARGETS = {4: 10.0, 12: 20.0}  # seconds, by cells (issue 43)


def _children_cpu() -> float:
    usage = os.times()
    return usage.children_user + usage.children_system


def _timed(args: list[str], env: dict[str, str]) -> tuple[float, float]:
    cpu, start = _children_cpu(), time.perf_counter()
    subprocess.run([sys.executable, "-m", "ablate.cli", *args], check=True, env=env, cwd=ROOT,
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - start, _children_cpu() - cpu


def synthetic_export(cells: int, seeds: int, folder: Path) -> Path:
    import synthetic_study

    from ablate import results

    res = synthetic_study.scaled(synthetic_study.GRIDS[cells], seeds=seeds, name=f"bench-{cells}cells")
    path = folder / f"{cells}cells"
    results.export(res, path)
    return path


def measure(label: str, args: list[str], repeats: int, env: dict[str, str]) -> dict[str, float]:
    runs = []
    for k in range(repeats):
        with tempfile.TemporaryDirectory() as out:
            runs.append(_timed([*args, "--out", out], env))
        print(f"  {label}: render {k + 1} of {repeats}: {runs[-1][0]:.2f} s", file=sys.stderr, flush=True)
    return {"wall": statistics.median(w for w, _ in runs), "cpu": statistics.median(c for _, c in runs),
            "load": os.getloadavg()[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, nargs="*", default=[4, 12], choices=sorted(TARGETS))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--study", nargs="*", default=[], help="studies in the stores to render as well")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--tiny", action="store_true")
    args = parser.parse_args()
    if args.tiny:
        args.cells, args.seeds, args.repeats, args.study = [4], 2, 1, []
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for cells in args.cells:
            data = synthetic_export(cells, args.seeds, Path(tmp))
            only = ["--reports", "norm_stability", "--format", "html"] if args.tiny else []
            got = measure(f"{cells} cells", ["report", "--data", str(data), *only], args.repeats, env)
            rows.append((f"{cells} cells × {args.seeds} seeds (synthetic export)", got, TARGETS[cells]))
        for study in args.study:
            got = measure(study, ["report", study], args.repeats, env)
            rows.append((f"{study} (from its stores)", got, None))
    print("| study | wall (s) | CPU (s) | load | target | met |\n|---|---|---|---|---|---|")
    for label, got, target in rows:
        met = "" if target is None or args.tiny else ("yes" if got["wall"] <= target else "no")
        print(f"| {label} | {got['wall']:.2f} | {got['cpu']:.2f} | {got['load']:.1f} | "
              f"{'' if target is None else f'≤ {target:.0f} s'} | {met} |")


if __name__ == "__main__":
    main()
