"""ablate.ops stands alone: it imports with the rest of ablate's dependencies made unimportable
(the GPU machine has torch, Triton and numba but no optuna, mlflow, polars or papermill), and
the scripts built on it run: benchmarks/gpu_check.py on CPU, benchmarks/bench_ops.py --quick."""

from __future__ import annotations

import importlib.util
import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import ablate.ops

ROOT = Path(__file__).resolve().parents[1]
# Everything ablate depends on beyond torch, numpy and numba (pyproject.toml), and llvmlite's
# and numba's own needs aside.
BLOCKED = (
    "optuna", "mlflow", "polars", "papermill", "pandas", "pyarrow", "sqlalchemy", "pydantic", "typer",
    "rich", "yaml", "scipy", "statsmodels", "matplotlib", "seaborn", "sklearn", "nbformat", "nbconvert",
    "jupytext", "weasyprint", "ipykernel", "psycopg",
)  # fmt: skip


@pytest.fixture
def blocked_env(tmp_path: Path) -> dict[str, str]:
    """An environment in which importing any of BLOCKED raises ImportError."""
    for name in BLOCKED:
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(
            f"raise ImportError('blocked by tests/test_ops.py: ablate.ops must not need {name}')\n"
        )
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}


def run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )


def test_ops_imports_without_the_rest_of_ablates_dependencies(blocked_env: dict[str, str]) -> None:
    modules = [f"ablate.ops.{m.name}" for m in pkgutil.iter_modules(ablate.ops.__path__)]
    if importlib.util.find_spec("triton") is None:
        modules.remove("ablate.ops.scan_triton")  # needs triton itself, which the GPU machine has
    assert {"ablate.ops.scan", "ablate.ops.expm", "ablate.ops.scan_numba"} <= set(modules)
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {BLOCKED!r})\n"
        "assert not bad, bad\n"
        "from ablate.ops import linear_scan, skew_expm\n"
        "import torch\n"
        "assert linear_scan(torch.ones(3), torch.ones(1, 4, 3)).shape == (1, 4, 3)\n"
        "print('isolated ok')\n"
    )
    res = run(["-c", code], blocked_env)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "isolated ok" in res.stdout
    # The blocking itself works: something that needs one of them fails.
    assert run(["-c", "import ablate.spec"], blocked_env).returncode != 0


@pytest.mark.slow
def test_gpu_check_runs_on_cpu_and_says_what_it_skipped(blocked_env: dict[str, str]) -> None:
    res = run(["benchmarks/gpu_check.py", "--quick", "--cpu-timings"], blocked_env)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    out = res.stdout
    assert "skipped (CPU only here): Triton kernels (no CUDA); skew_expm on CUDA" in out
    assert " 0 failed" in out and "FAIL" not in out
    for what in ("scan numba  real", "scan torch  log", "skew_expm H=2 n=4", "time numba  complex"):
        assert what in out


def _bench_ops_baseline() -> str:
    if str(ROOT / "benchmarks") not in sys.path:  # the script imports its folder's harness, as when run
        sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("bench_ops", ROOT / "benchmarks" / "bench_ops.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.BASELINE


@pytest.mark.slow
def test_bench_ops_quick_prints_its_tables() -> None:
    baseline = _bench_ops_baseline()
    have = subprocess.run(["git", "cat-file", "-e", f"{baseline}^{{commit}}"], cwd=ROOT, capture_output=True)
    if have.returncode != 0:
        pytest.skip(f"the old kernels' commit {baseline[:12]} is not in this clone")
    res = run(["benchmarks/bench_ops.py", "--quick"], {**os.environ, "PYTHONPATH": str(ROOT)})
    assert res.returncode == 0, res.stderr[-3000:]
    out = res.stdout
    for kind in ("real", "complex", "log"):
        for version in ("torch", "old", "new"):
            assert any(line.split()[:3] == [kind, "64", version] for line in out.splitlines()), (
                kind,
                version,
            )
    assert "float32 log scan accuracy" in out and "new numba" in out
    assert "skew_expm" in out and "matrix_exp float64" in out
