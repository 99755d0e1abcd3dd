"""ablate.runner.pool (and the worker's start-up): devices and thread counts per local worker,
several workers on one GPU, and a worker process that opens its study before loading torch."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ablate.runner import pool
from ablate.stores import Stores


def test_several_workers_share_one_named_gpu() -> None:
    assert pool.devices("cuda:0", 2) == ["cuda:0", "cuda:0"]
    assert pool.devices("cuda:1", 4) == ["cuda:1"] * 4
    assert pool.devices("cpu", 3) == ["cpu"] * 3


def test_start_passes_each_worker_its_device_and_thread_count(tmp_path: Path, monkeypatch) -> None:
    """What ``ablate run --workers 2 --device cuda:0`` starts: two ``ablate worker`` processes on
    cuda:0, each told its share of the cores by flag and by the variables torch, MKL and numba
    read when they load; no CUDA_VISIBLE_DEVICES (the worker selects its GPU itself)."""
    started: list[tuple[list[str], dict[str, str]]] = []

    class FakePopen:
        def __init__(self, cmd, env, stdout, stderr):  # noqa: ANN001
            started.append((cmd, env))

    monkeypatch.setenv("ABLATE_HOME", str(tmp_path))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(pool.subprocess, "Popen", FakePopen)
    monkeypatch.setattr(pool.os, "cpu_count", lambda: 16)
    stores = Stores("sqlite:///x.db", "sqlite:///y.db", None)
    pool.start("study", stores, pool.devices("cuda:0", 2), checkpoint_every=50)
    assert len(started) == 2
    for cmd, env in started:
        assert cmd[cmd.index("--device") + 1] == "cuda:0" and cmd[cmd.index("--threads") + 1] == "8"
        assert {k: env[k] for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")} == pool.thread_env(8)
        assert "CUDA_VISIBLE_DEVICES" not in env
        assert env["ABLATE_STORAGE"] == "sqlite:///x.db"


def test_select_device_makes_the_workers_gpu_current(monkeypatch) -> None:
    import torch

    from ablate.runner.worker import select_device

    chosen: list[int] = []
    monkeypatch.setattr(torch.cuda, "set_device", chosen.append)
    for device in ("cpu", "cuda", "cuda:0", "cuda:3"):
        select_device(device)
    assert chosen == [0, 3]  # bare "cuda" is whatever is current already


def test_a_worker_opens_its_study_before_loading_torch(tmp_path: Path) -> None:
    """``ablate worker --threads 1`` on a study that is not there fails at the study, having loaded
    neither torch nor MLflow (they load in the background only once the study is open), and
    leaves the thread count in the environment for when they do."""
    code = textwrap.dedent(f"""
        import os, sys
        from typer.testing import CliRunner
        from ablate.cli import app
        res = CliRunner().invoke(app, ["worker", "missing", "--storage", "sqlite:///{tmp_path / 'o.db'}",
                                       "--tracking-uri", "sqlite:///{tmp_path / 'm.db'}", "--threads", "1"])
        print(res.exit_code, "torch" in sys.modules, "mlflow" in sys.modules, os.environ["OMP_NUM_THREADS"],
              os.environ["NUMBA_NUM_THREADS"])
    """)
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "NUMBA_NUM_THREADS")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1", "False", "False", "1", "1"], out.stdout + out.stderr


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_threads_share_the_cores(workers: int, monkeypatch) -> None:
    monkeypatch.setattr(pool.os, "cpu_count", lambda: 2)
    assert pool.threads_per_worker(workers) == max(1, 2 // workers)
