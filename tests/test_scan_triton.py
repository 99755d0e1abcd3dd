"""The Triton kernels, checked without a GPU: TRITON_INTERPRET=1 runs them on CPU tensors.

Skipped where triton is not installed (CPU-only installs, CI). On a CUDA machine, test_scan.py
runs the same kernels compiled, against the reference, through the public API.
The interpreter must be chosen before triton is imported, hence the subprocess.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton not installed")

SCRIPT = textwrap.dedent(
    """
    import math
    import torch
    from ablate.ops import scan as S, scan_triton as T

    CT, CD = T.COMPLEX_BLOCK_T, T.COMPLEX_BLOCK_D
    T.BLOCK_T, T.BLOCK_D = 8, 4  # small tiles: many chunks and channel blocks on tiny inputs
    T.COMPLEX_BLOCK_T, T.COMPLEX_BLOCK_D = 8, 4
    torch.manual_seed(0)

    def run(kind, *args):
        dtype, compute = S._compute_dtype(*args)
        prepared = S._prepare(*args, compute)
        fn = S.LinearScan if kind == "linear" else S.LogScan
        return fn.apply(*prepared, T).to(dtype)

    def check(kind, *args, tol=1e-5):
        leaves = [x.requires_grad_() for x in args if x is not None]
        ref = [x.detach().double().requires_grad_() if not x.is_complex() else
               x.detach().to(torch.complex128).requires_grad_() for x in leaves]
        pad = [None] * (len(args) - len(leaves))
        got = run(kind, *leaves, *pad)
        want = (S.linear_scan_reference if kind == "linear" else S.log_scan_reference)(*ref, *pad)
        g = torch.randn_like(got)
        pairs = [(got, want)] + list(zip(torch.autograd.grad(got, leaves, g),
                                         torch.autograd.grad(want, ref, g.to(want.dtype))))
        for x, y in pairs:
            assert x.dtype == leaves[0].dtype or x is got
            err = (x.to(y.dtype) - y).abs().max().item() / max(1.0, y.abs().max().item())
            assert err < tol, (kind, [(tuple(a.shape), a.dtype) for a in leaves], err)

    B, L, D = 2, 21, 5
    for dt in (torch.float32, torch.complex64):
        r = lambda *s: (0.5 + 0.5 * torch.rand(*s)).to(dt) * (
            torch.exp(1j * torch.rand(*s)).to(dt) if dt.is_complex else 1)
        for a in (r(B, L, D), r(D), r(B, 1, D)):
            check("linear", a, torch.randn(B, L, D, dtype=dt), torch.randn(B, D, dtype=dt))
        check("linear", r(L, D), torch.randn(B, L, D, dtype=dt), None)

    # complex64 runs the real-decay scan under a fixed-point phase: stress it over 25 chunks with
    # r near 1 (an error in the phase repeats at every step), angles at and around the quadrant
    # boundaries (±π, ±π/2) and the reductions' (π/4, π/8), and a = 0 (no phase at all).
    def hard(*s, dt=torch.complex64):
        edges = torch.tensor([math.pi, -math.pi, math.pi / 2, -math.pi / 2, math.pi / 4, -3 * math.pi / 4,
                              math.pi / 8, 0.0], dtype=torch.float64)
        th = edges[torch.randint(len(edges), s)] + 1e-3 * (2 * torch.rand(*s, dtype=torch.float64) - 1)
        th.view(-1)[::5] = edges[torch.arange(th.numel())[::5] % len(edges)]  # exactly on them too
        a = torch.polar(1 - 0.01 * torch.rand(*s, dtype=torch.float64), th)
        a.view(-1)[3::7] = 0
        return a.to(dt)

    Lc = 203  # 25 chunks and a partial one
    cz = lambda *s, dt=torch.complex64: torch.randn(*s, dtype=dt)
    for a in (hard(B, Lc, D), hard(D), hard(B, 1, D)):
        for h0 in (cz(B, D), None):
            check("linear", a, cz(B, Lc, D), h0)
    check("linear", hard(B, Lc, D, dt=torch.complex128), cz(B, Lc, D, dt=torch.complex128),
          cz(B, D, dt=torch.complex128), tol=1e-12)  # complex128: the exact complex product
    la = torch.nn.functional.logsigmoid(torch.randn(B, L, D) + 2)
    check("log", la, torch.randn(B, L, D), torch.randn(B, D))
    check("log", la[0, 0], torch.randn(B, L, D), None)
    # -inf inputs (b = 0, a = 0, both: h = 0) and a NaN, against the linear-space recurrence.
    la, lb = la.clone(), torch.randn(B, L, D) - 1
    lb[:, 3:5] = float("-inf")
    la[:, 9] = float("-inf")
    la[0, 12, :2] = lb[0, 12, :2] = float("-inf")
    lb[1, 15, 3] = float("nan")
    leaves = [la.requires_grad_(), lb.requires_grad_()]
    got = run("log", *leaves, None)
    want = S.linear_scan_reference(la.double().exp(), lb.double().exp()).log()
    assert torch.equal(got.isnan(), want.isnan()) and torch.equal(got.isinf(), want.isinf())
    ok = want.isfinite()
    assert (got[ok].double() - want[ok]).abs().max().item() < 1e-5
    for x in torch.autograd.grad(got, leaves, torch.randn_like(got)):
        x[1, :, 3] = 0  # the NaN's channel
        assert x.isfinite().all()
    # Half precision over 4 chunks of the kernels' own tiles: widened to float32 as on every
    # backend (test_scan.py holds numba and torch to the same tolerances at L = 2048; the
    # interpreter takes ~30 s a check there).
    T.BLOCK_T, T.BLOCK_D = 64, 32
    L = 256
    T.COMPLEX_BLOCK_T, T.COMPLEX_BLOCK_D = CT, CD
    check("linear", hard(B, L, D), cz(B, L, D), cz(B, D))  # the complex kernels' own tile (64 rows)
    # A time-invariant decay near r = 1 repeats its rounding at every step: the complex product
    # measured 1.0e-5 here (the tolerance), the per-channel parameters (_decay_params) 3.5e-6.
    a = torch.polar(0.999 + 0.001 * torch.rand(4, dtype=torch.float64), 6.283 * torch.rand(4, dtype=torch.float64))
    T.COMPLEX_BLOCK_D = 4
    check("linear", a.to(torch.complex64), cz(1, 4096, 4), cz(1, 4))
    for dt, tol in ((torch.bfloat16, 6e-3), (torch.float16, 1e-3)):
        a = (0.9 + 0.1 * torch.rand(B, L, D)).to(dt)
        check("linear", a, torch.randn(B, L, D).to(dt), torch.randn(B, D).to(dt), tol=tol)
        if dt == torch.bfloat16:  # a time-invariant decay's gradient sums B L terms: past fp16's range
            check("linear", a[0, 0], torch.randn(B, L, D).to(dt), None, tol=tol)
        la = torch.nn.functional.logsigmoid(torch.randn(B, L, D) + 2).to(dt)
        check("log", la, (torch.randn(B, L, D) - 1).to(dt), torch.randn(B, D).to(dt), tol=tol)
    print("triton interpreter ok")
    """
)


def _interpreter_runs_on_this_numpy() -> bool:
    """Triton's interpreter turns 1-element arrays into loop bounds with ``int()``, which numpy
    2.4 and later refuse ("only 0-dimensional arrays can be converted"): seen with triton 3.6.0
    and numpy 2.5.2 on an H200 (2026-12-04), where the compiled kernels passed test_scan.py, and
    with numpy 2.4.6 here. numpy 2.3 beside triton (``pip install --target DIR triton numpy<2.4``,
    then ``PYTHONPATH=DIR``) runs it."""
    import numpy as np

    try:
        int(np.array([3]))
    except TypeError:
        return False
    return True


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("triton") is not None and not _interpreter_runs_on_this_numpy(),
                    reason="Triton's interpreter calls int() on 1-element arrays, which this numpy refuses")
def test_triton_kernels_in_interpreter() -> None:
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    res = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, cwd=root, capture_output=True, text=True, timeout=600
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert "triton interpreter ok" in res.stdout


COMPILE = textwrap.dedent(
    """
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from ablate.ops import scan_triton as T

    ptr = lambda *names: {n: "*fp32" for n in names}
    i32 = {"L": "i32", "D": "i32", "sa_b": "i32", "sa_t": "i32"}
    fwd = {**ptr("a_ptr", "b_ptr", "h0_ptr", "out_ptr"), **i32}
    bwd = {**ptr("a_ptr", "h_ptr", "h0_ptr", "gh_ptr", "ga_ptr", "gb_ptr", "gh0_ptr"), **i32}
    log_bwd = {**ptr("la_ptr", "lb_ptr", "s_ptr", "lh0_ptr", "gs_ptr", "ga_ptr", "gb_ptr", "gh0_ptr"), **i32}
    log_fwd = {**ptr("la_ptr", "lb_ptr", "lh0_ptr", "out_ptr"), **i32}
    real = {"BT": T.BLOCK_T, "BD": T.BLOCK_D}
    cplx = {"BT": T.COMPLEX_BLOCK_T, "BD": T.COMPLEX_BLOCK_D}
    cases = [(T._linear_fwd, fwd, {"HAS_H0": True, **real}), (T._linear_bwd, bwd, {"HAS_H0": True, "GA_MODE": 1, **real}),
             (T._log_fwd, log_fwd, {"HAS_H0": True, **real}), (T._log_bwd, log_bwd, {"HAS_H0": True, "GA_MODE": 2, **real})]
    for phase in (0, 1, 2):
        cases += [(T._complex_fwd, fwd, {"HAS_H0": True, "PHASE": phase, **cplx}),
                  (T._complex_bwd, bwd, {"HAS_H0": True, "GA_MODE": 2 if phase == 2 else 1, "PHASE": phase, **cplx})]
    for fn, sig, consts in cases:
        sig = {**sig, **{k: "constexpr" for k in consts}}
        triton.compile(ASTSource(fn=fn, signature=sig, constexprs=consts), target=GPUTarget("cuda", 90, 32))
    print("compiled", len(cases))
    """
)


@pytest.mark.slow
def test_triton_kernels_compile_for_a_gpu_without_one() -> None:
    """Every kernel compiled to sm_90 machine code (Triton's own LLVM and ptxas; no GPU needed):
    the interpreter runs the kernels as Python, so it misses what only the compiler rejects."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    res = subprocess.run(
        [sys.executable, "-c", COMPILE], env=env, cwd=root, capture_output=True, text=True, timeout=600
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert "compiled 10" in res.stdout
