"""The numba kernels' own exp and log1p: accurate to 1-2 ulp in float32 over the ranges the log
scan feeds them, exact libm in float64, special values kept, and compiled without libm calls
(which is what lets LLVM vectorise the loops around them)."""

from __future__ import annotations

import re

import numpy as np
import pytest

numba = pytest.importorskip("numba")
scan_numba = pytest.importorskip("ablate.ops.scan_numba")


@numba.njit(error_model="numpy")
def _apply_exp(x, out):
    for j in range(x.size):
        out[j] = scan_numba.fast_exp(x[j])


@numba.njit(error_model="numpy")
def _apply_log1p(x, out):
    for j in range(x.size):
        out[j] = scan_numba.fast_log1p(x[j])


def ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    return np.abs(got.astype(np.float64) - want) / np.spacing(want.astype(np.float32)).astype(np.float64)


def test_exp_float32_within_one_ulp() -> None:
    x = np.concatenate([np.linspace(-87.3, 0.5, 2_000_001), -np.logspace(-30, 1.9, 10_001)]).astype(
        np.float32
    )
    got = np.empty_like(x)
    _apply_exp(x, got)
    want = np.exp(x.astype(np.float64))
    assert ulps(got, want).max() <= 1.0


def test_exp_float32_special_values() -> None:
    x = np.array([-np.inf, -1e4, -88.0, 0.0, np.nan], dtype=np.float32)
    got = np.empty_like(x)
    _apply_exp(x, got)
    assert got[0] == 0 and got[1] == 0 and got[2] == 0  # below exp(-87.3) = FLT_MIN: 0
    assert got[3] == 1 and np.isnan(got[4])


def test_log1p_float32_within_two_ulp_on_the_unit_interval() -> None:
    e = np.concatenate([np.linspace(0, 1, 2_000_001), np.logspace(-37, 0, 10_001)]).astype(np.float32)
    got = np.empty_like(e)
    _apply_log1p(e, got)
    want = np.log1p(e.astype(np.float64))
    nonzero = want > 0
    assert got[~nonzero].tolist() == [0.0] * int((~nonzero).sum())
    assert ulps(got[nonzero], want[nonzero]).max() <= 2.0
    assert np.abs(got[nonzero] / want[nonzero] - 1).max() <= 2.5e-7  # relative, also for tiny e


def test_float64_is_libm() -> None:
    x = np.linspace(-700, 1, 10_001)
    got = np.empty_like(x)
    _apply_exp(x, got)
    assert np.abs(got / np.exp(x) - 1).max() <= 4.5e-16  # libm's, not numpy's own SIMD exp: 1 ulp
    e = np.linspace(0, 1, 10_001)
    _apply_log1p(e, got)
    assert np.abs(got[1:] / np.log1p(e[1:]) - 1).max() <= 4.5e-16


def _libm_calls(fn, dtype: type) -> set[str]:
    x = np.linspace(0, 1, 64).astype(dtype)
    fn(x, np.empty_like(x))
    sig = next(s for s in fn.signatures if str(s[0].dtype) == np.dtype(dtype).name)
    calls = set(re.findall(r"call [^@]*@([\w.]+)", fn.inspect_llvm(sig)))
    return {c for c in calls if re.fullmatch(r"(llvm\.)?(exp|log1p|log)(f|\.f32|\.f64|\.v\d+f(32|64))?", c)}


@pytest.mark.parametrize("fn", [_apply_exp, _apply_log1p])
def test_float32_loops_call_no_libm(fn) -> None:
    assert _libm_calls(fn, np.float64)  # the float64 path calls libm: the check can see calls
    assert not _libm_calls(fn, np.float32)


FORKED = r"""
import os, sys
os.environ["NUMBA_NUM_THREADS"] = "2"
import torch
from ablate.ops import scan, scan_numba
scan_numba.load_kernels()
loaded = {k.__name__: len(k.signatures) for k in (scan_numba._linear_fwd, scan_numba._linear_bwd,
                                                  scan_numba._log_fwd, scan_numba._log_bwd)}
assert loaded == {"_linear_fwd": 2, "_linear_bwd": 2, "_log_fwd": 1, "_log_bwd": 1}, loaded
import numba.np.ufunc.parallel as layer
assert layer._is_initialized  # the premise: loading started the threading layer before the fork
pid = os.fork()
if pid == 0:
    code = 1
    try:
        g = torch.Generator().manual_seed(0)
        a = (0.5 + 0.5 * torch.rand(4, 64, 1024, generator=g)).requires_grad_()
        b = torch.randn(4, 64, 1024, generator=g).requires_grad_()
        y = scan.linear_scan(a, b)  # 262,144 elements: two threads of the layer the parent launched
        y.square().sum().backward()
        ad, bd = a.detach().double().requires_grad_(), b.detach().double().requires_grad_()
        h, ref = torch.zeros(4, 1024, dtype=torch.float64), []
        for t in range(64):
            h = ad[:, t] * h + bd[:, t]
            ref.append(h)
        ref = torch.stack(ref, 1)
        ref.square().sum().backward()
        assert torch.allclose(y.double(), ref, rtol=1e-5, atol=1e-5)
        assert torch.allclose(a.grad.double(), ad.grad, rtol=1e-4, atol=1e-3)
        code = 0
    finally:
        os._exit(code)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
"""


def test_kernels_loaded_before_a_fork_run_in_the_child_on_threads_of_its_own() -> None:
    """What ablate/zygote.py does: load the kernels (starting numba's workqueue threads) without
    running one, fork; the child's multi-threaded scan and its gradients match the float64 loop."""
    import subprocess
    import sys

    res = subprocess.run([sys.executable, "-c", FORKED], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
