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
