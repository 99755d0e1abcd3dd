"""Every script in benchmarks/ runs: its ``--tiny`` mode (the real code path at toy sizes) in a
subprocess, as a user runs it, so that a changed spec or API fails here rather than in the
benchmark a user tries. The GPU-only scripts refuse cleanly without CUDA; the ones that need
PostgreSQL run against $ABLATE_TEST_POSTGRES (scripts/test.sh starts one) and skip without it.

Scripts with tests of their own (``TESTED_ELSEWHERE``) are run there; ``test_every_script_is_run``
fails when a new script is in neither list."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"
POSTGRES = os.environ.get("ABLATE_TEST_POSTGRES")
try:
    import torch

    CUDA = torch.cuda.is_available()
except ImportError:  # pragma: no cover
    CUDA = False

# script → (its tiny arguments, what its output must contain). Timeouts are generous: the
# machine the suite runs on may be busy, and a hang should fail rather than block the suite.
CASES: dict[str, tuple[list[str], list[str]]] = {
    "bench_models.py": (["--tiny"], ["mingru (log-space scan)", "lstm (torch)", "/RotRNN"]),
    "bench_scan.py": (["--tiny"], ["copy bandwidth", "×loop", "RotRNN step / LRU step", "scan share"]),
    "bench_probes.py": (["--tiny"], ["RotRNN", "LRU", "est. overhead"]),
    "bench_overhead.py": (["--tiny"], ["overhead", "inside probe and tracking calls"]),
    "bench_tasks.py": (["--tiny"], ["adding", "delayed_copy", "metric"]),
    "bench_sqlite_pool.py": (["--tiny"], ["pooled", "nullpool", "ratio"]),
    "bench_claim.py": (["--tiny"], ["| sqlite | plain | 10 |", "| sqlite | tuned | 10 |"]),
    "bench_estimate.py": (["--tiny"], ["tuned", "ratio"]),
    "bench_continuation.py": (["--tiny"], ["continues", "continued / from scratch", ": equal"]),
    "bench_idle.py": (["--tiny"], ["`ablate status`, 4 cells", "seconds between trainings", "fresh stores",
                                  "timings reused"]),
    "bench_workers.py": (["--tiny"], ["2 workers vs 1", "trials/hour"]),
    "bench_fused_worker.py": (["--tiny"], ["2 seeds x 4 steps", "per CPU-h"]),
    "bench_eta_replay.py": (["--tiny"], ["4 items, run in", "replayed every 1 s", "median ETA / time left"]),
    "bench_scheduling.py": (["--tiny"], ["| 1 | 2 |", "| 2 | 4 |", "items/s"]),
    "bench_reports.py": (["--tiny"], ["| 4 cells × 2 seeds (synthetic export) |", "| study | wall (s) |"]),
    "gpu_workers.py": (["--tiny"], ["bench_scan.py --device cuda", "trials/hour"]),
}
TESTED_ELSEWHERE = {  # script → the test file that runs its tiny mode
    "bench_fused.py": "test_bench_fused.py",
    "bench_sequential.py": "test_bench_sequential.py",
    "bench_sequential_frontier.py": "test_bench_sequential_frontier.py",
    "bench_sequential_robust.py": "test_bench_sequential_robust.py",
    "bench_norm_calibration.py": "test_bench_norm_calibration.py",
    "bench_level_calibration.py": "test_bench_level_calibration.py",
    "bench_stats_calibration.py": "test_bench_stats_calibration.py",
    "bench_ops.py": "test_ops.py",  # --tiny (--quick) against the old kernels' commit, when the clone has it
    "gpu_check.py": "test_ops.py",  # --tiny on CPU with only torch installed
}
NEEDS_POSTGRES = {"bench_scheduling.py"}
NEEDS_CUDA = {"gpu_workers.py"}


def run(script: str, args: list[str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "PYTHONUNBUFFERED": "1"}
    return subprocess.run([sys.executable, str(BENCHMARKS / script), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_every_script_is_run() -> None:
    scripts = {p.name for p in BENCHMARKS.glob("*.py")}
    assert scripts - set(TESTED_ELSEWHERE) == set(CASES), "a benchmark without a tiny-mode test"
    for script, test in TESTED_ELSEWHERE.items():
        assert script not in scripts or f"benchmarks/{script}" in (ROOT / "tests" / test).read_text(), script


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(CASES))
def test_tiny_mode_runs(script: str) -> None:
    args, expected = CASES[script]
    if script in NEEDS_POSTGRES and not POSTGRES:
        pytest.skip("needs a PostgreSQL server: set ABLATE_TEST_POSTGRES (scripts/test.sh starts one)")
    if script in NEEDS_CUDA and not CUDA:
        res = run(script, args, timeout=120)
        assert res.returncode == 1 and "no CUDA device" in res.stderr, res.stderr[-2000:]
        return
    res = run(script, args)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-4000:]
    missing = [text for text in expected if text not in out]
    assert not missing, f"{missing} not in the output:\n{out[-4000:]}"


@pytest.mark.parametrize("script, args", [
    ("bench_models.py", ["--repeats", "0"]),
    ("bench_fused_worker.py", ["--fuse", "1"]),
    ("bench_scan.py", ["--tiny", "--full"]),
    ("bench_tasks.py", ["no_such_task"]),
    ("bench_sqlite_pool.py", ["--items", "0"]),
    ("bench_estimate.py", ["--only", "nope"]),
    ("bench_reports.py", ["--cells", "5"]),
])
def test_bad_arguments_are_refused(script: str, args: list[str]) -> None:
    res = run(script, args, timeout=300)
    assert res.returncode == 2 and "error:" in res.stderr, res.stderr[-2000:]
