"""The rest of issue 19's device list, for a session lent a GPU: ``benchmarks/bench_scan.py --device cuda``,
a 2-worker study on one GPU through ``ablate run --workers 2 --device cuda:0``, and trials/hour
with 1, 2 and 4 workers sharing that GPU (``benchmarks/bench_workers.py --device cuda:0``).

Run ``benchmarks/gpu_check.py`` first (it needs nothing beyond the device image). This script
needs what the image lacks (optuna, MLflow, polars, pydantic, SQLAlchemy and their dependencies):

Here, once, in the repository root (about 54 MB, polars' 54 MB runtime wheel travelling
xz-compressed, 31 MB). A call carries 64 MiB: the tree without the committed reports is about 9 MB,
but reports/ is about 96 MB, so move its folders out of the checkout for the call (all but
reports/null_task_seed, which tests/test_report_render.py reads) and back after:

    echo /.whl/ >> .git/info/exclude && mkdir -p .whl/xz
    PLAT="--platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
          --platform manylinux2014_x86_64"
    python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $PLAT -d .whl \
        optuna==5.0.0 SQLAlchemy==2.1.9 alembic==1.20.1 Mako==1.4.3 colorlog==6.12.0 pydantic==2.14.4 \
        pydantic_core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 polars==2.1.0 \
        mlflow-skinny==3.17.2 mlflow-tracing==3.17.2 cachetools==7.3.3 cffi==2.1.1 cryptography==50.0.2 \
        databricks-sdk==0.167.0 fastapi==0.165.0 google-auth==2.63.0 importlib_metadata==9.1.0 \
        pycparser==3.12 sqlparse==0.6.1 starlette==1.10.0 opentelemetry-api==1.45.2 \
        opentelemetry-proto==1.45.2 opentelemetry-sdk==1.45.2 opentelemetry-semantic-conventions==0.66b2
    python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $PLAT -d /tmp \
        polars-runtime-32==2.1.0
    (mkdir -p /tmp/prt && cd /tmp/prt && unzip -q -o /tmp/polars_runtime_32-2.1.0-*.whl && \
        tar cf - . | xz -9 -T0 > "$OLDPWD/.whl/xz/polars_runtime_32.tar.xz")

(the versions are this project's venv's; mlflow-skinny is MLflow without its web UI, which the
workers do not need). On the device machine, carrying ``.whl``:

    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        .whl/*.whl && tar xJf .whl/xz/polars_runtime_32.tar.xz -C /tmp/site && export PYTHONPATH=/tmp/site || exit
    PYTHONUNBUFFERED=1 python3 benchmarks/gpu_check.py 2>&1 | tee $OUT/gpu_check.txt
    PYTHONUNBUFFERED=1 python3 benchmarks/gpu_workers.py 2>&1 | tee $OUT/gpu_workers.txt

About 6 minutes on an H200 (bench under 1; the 2-worker study 1; calibration and 8 trials of
about 8 s at 1, 2 and 4 workers 4), and gpu_check.py 2-3: two calls back to back (the machine
stays warm 30 s) keep each under the 10-minute limit of one command, with time to rerun one.
Prints each part's output and exits 1 if a part failed.
"""

from __future__ import annotations

import argparse
import importlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
NEEDED = ("optuna", "mlflow", "polars", "pydantic", "sqlalchemy", "alembic", "typer", "rich", "yaml", "numba")


def missing() -> list[str]:
    out = []
    for name in NEEDED:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            out.append(f"{name} ({exc})")
    return out


def part(title: str, cmd: list[str], cwd: Path, env: dict[str, str], timeout: float) -> bool:
    print(f"\n=== {title}: {' '.join(cmd)}", flush=True)
    t0 = time.perf_counter()
    try:
        res = subprocess.run(cmd, cwd=cwd, env=env, timeout=timeout, text=True, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT)
    except subprocess.TimeoutExpired as exc:
        print((exc.stdout or "") if isinstance(exc.stdout, str) else "", f"\n[timed out after {timeout:.0f} s]")
        return False
    print(res.stdout, flush=True)
    print(f"=== {title}: exit {res.returncode} after {time.perf_counter() - t0:.0f} s", flush=True)
    return res.returncode == 0


def two_workers_on_one_gpu(env: dict[str, str], timeout: float, steps: int = 200) -> bool:
    """``ablate run --workers 2 --device cuda:0`` on a 4-trial study: every trial completes."""
    with tempfile.TemporaryDirectory(prefix="gpu-workers-") as tmp:
        spec = {"name": "gpu_two_workers",
                "task": {"name": "listops", "max_depth": 3, "max_args": 5, "min_length": 10, "max_length": 64,
                         "train_size": 2000, "val_size": 256, "test_size": 256},
                "model": {"d_model": 64, "state_dim": 64, "layers": 2, "heads": 4},
                "train": {"steps": steps, "batch_size": 32, "eval_every": max(steps // 2, 1)}, "seeds": 4}
        Path(tmp, "spec.yaml").write_text(yaml.safe_dump(spec))
        run_env = {**env, "ABLATE_HOME": str(Path(tmp, ".ablate"))}
        ok = part("ablate run --workers 2 --device cuda:0",
                  [sys.executable, "-m", "ablate.cli", "run", "spec.yaml", "--workers", "2", "--device", "cuda:0"],
                  Path(tmp), run_env, timeout)
        ok = part("ablate status", [sys.executable, "-m", "ablate.cli", "status", "gpu_two_workers"], Path(tmp),
                  run_env, 60) and ok
        return ok


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=8)
    p.add_argument("--trial-s", type=float, default=8.0)
    p.add_argument("--tiny", action="store_true", help="every part at its tiny size (a check that it runs)")
    args = p.parse_args()
    import torch

    if not torch.cuda.is_available():
        sys.exit("no CUDA device: this script is for the device machine (benchmarks/gpu_check.py runs on CPU too)")
    gaps = missing()
    if gaps:
        sys.exit("missing packages (carry them as this script's docstring says): " + "; ".join(gaps))
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}, {os.cpu_count()} CPU cores", flush=True)
    tiny = ["--tiny"] if args.tiny else []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "PYTHONWARNINGS": "ignore"}
    results = {
        "bench": part("bench_scan.py --device cuda",
                      [sys.executable, str(ROOT / "benchmarks" / "bench_scan.py"), "--device", "cuda", *tiny], ROOT, env, 150),
        "two workers": two_workers_on_one_gpu(env, 120, 10 if args.tiny else 200),
        "trials/hour": part(
            "workers sharing cuda:0",
            [sys.executable, str(ROOT / "benchmarks" / "bench_workers.py"), "--device", "cuda:0", "--workers", "1", "2",
             "4", "--trials", str(args.trials), "--trial-s", str(args.trial_s), *tiny], ROOT, env, 330),
    }
    print("\n" + "; ".join(f"{k}: {'ok' if v else 'FAILED'}" for k, v in results.items()))
    sys.exit(0 if all(results.values()) else 1)


if __name__ == "__main__":
    main()
