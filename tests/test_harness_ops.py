"""The scan benchmark (benchmarks/harness/ops.py) runs end to end on tiny inputs and reports what it promises;
its stub really replaces the scans."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

import pytest
import torch

from ablate.ops import scan as scan_mod

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))  # the scripts' own path
bench = importlib.import_module("harness.ops")


def test_run_scans_times_every_kind_against_the_loop_and_the_bound(capsys: pytest.CaptureFixture[str]) -> None:
    result = bench.run_scans(lengths=(32,), batch=2, channels=8, repeats=1, tune_alloc=False, copy_bytes=1 << 20,
                             log=lambda msg: None)
    rows = result["scans"]
    assert {r["kind"] for r in rows} == {"real", "complex", "log"}
    backends = {r["backend"] for r in rows}
    assert backends >= {"torch loop", "torch cumsum"}
    assert backends - {"torch loop", "torch cumsum"} == set(scan_mod.available_backends("cpu")) - {"torch"}
    assert all(r["fwd_ms"] > 0 and r["fb_ms"] > 0 and r["fb_x_bound"] > 0 for r in rows)
    # The reference is its own baseline: speedup 1 exactly.
    assert all(r["fwd_speedup"] == 1.0 for r in rows if r["backend"].startswith("torch"))
    assert result["bandwidth_gbs"]["min"] <= result["bandwidth_gbs"]["median"] <= result["bandwidth_gbs"]["max"]
    bench.print_scans(result, bench.console())
    out = capsys.readouterr().out
    assert "copy bandwidth" in out and "×bound" in out and "torch cumsum" in out


def test_stubbed_scans_are_b_plus_zero_a_and_come_back() -> None:
    a, b = torch.rand(2, 16, 4), torch.randn(2, 16, 4)
    real = scan_mod.linear_scan(a, b)
    with bench.scans_stubbed():
        assert torch.equal(scan_mod.linear_scan(a, b), b)
        assert torch.equal(scan_mod.log_scan(a.log(), b), b)
    assert torch.equal(scan_mod.linear_scan(a, b), real) and not torch.equal(real, b)


def test_scans_timed_clocks_every_kernel_call_and_restores_them() -> None:
    """The clock sees the forward and the backward kernel of each compiled scan in the block and
    nothing outside it; the modules get their own functions back."""
    compiled = [n for n in scan_mod.available_backends("cpu") if n != "torch"]
    if not compiled:
        pytest.skip("no compiled CPU backend (numba) here")
    module = __import__(f"ablate.ops.scan_{compiled[0]}", fromlist=["x"])
    originals = {e: getattr(module, e) for e in bench.KERNEL_ENTRIES}
    a, b = torch.rand(4, 512, 64, requires_grad=True), torch.randn(4, 512, 64, requires_grad=True)
    clock = bench.ScanClock(torch.device("cpu"))
    with bench.forced_backend(compiled[0]), bench.scans_timed(clock):
        h = scan_mod.linear_scan(a, b)
        forward = clock.take_ms()
        h.sum().backward()
        backward = clock.take_ms()
        torch.randn(256, 256) @ torch.randn(256, 256)  # not a scan: not counted
        assert clock.take_ms() == 0.0
    assert forward > 0 and backward > 0
    assert {e: getattr(module, e) for e in bench.KERNEL_ENTRIES} == originals


def test_forced_backend_is_restored() -> None:
    before = os.environ.get(scan_mod.ENV_VAR)
    with bench.forced_backend("torch"):
        assert os.environ[scan_mod.ENV_VAR] == "torch"
    assert os.environ.get(scan_mod.ENV_VAR) == before
