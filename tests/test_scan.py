"""Every compiled scan backend equals the torch reference: outputs and gradients, within 1e-5
relative to the largest magnitude involved (so a state that grows to 1e3 is held to 1e-2)."""

from __future__ import annotations

import math

import pytest
import torch

from ablate.ops import scan as scan_mod
from ablate.ops.scan import (
    available_backends,
    linear_scan,
    linear_scan_reference,
    log_scan,
    log_scan_reference,
    resolve_backend,
)

TOL = 1e-5


def _cuda_triton() -> bool:
    return torch.cuda.is_available() and scan_mod._kernels("triton") is not None


BACKENDS = [
    pytest.param(("numba", "cpu"), id="numba"),
    pytest.param(
        ("triton", "cuda"),
        id="triton",
        marks=pytest.mark.skipif(not _cuda_triton(), reason="needs CUDA and triton"),
    ),
]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> tuple[str, str]:
    name, device = request.param
    if name == "numba" and "numba" not in available_backends("cpu"):
        pytest.skip("numba not importable")
    return name, device


@pytest.fixture(params=[pytest.param(("torch", "cpu"), id="torch"), *BACKENDS])
def any_backend(request: pytest.FixtureRequest) -> tuple[str, str]:
    """The compiled backends and the torch reference: what every backend promises alike."""
    name, device = request.param
    if name == "numba" and "numba" not in available_backends("cpu"):
        pytest.skip("numba not importable")
    return name, device


def assert_close(got: torch.Tensor, want: torch.Tensor, tol: float = TOL) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype
    scale = max(1.0, want.abs().max().item())
    err = (got - want).abs().max().item()
    assert err <= tol * scale, f"max error {err:.3g} > {tol:g} x {scale:.3g}"


def decay(shape: tuple[int, ...], dtype: torch.dtype, device: str, r_min: float = 0.5) -> torch.Tensor:
    """|a| in [r_min, 1): a stable recurrence, with random phases when complex."""
    r = r_min + (1 - r_min) * torch.rand(shape, dtype=torch.float64)
    if dtype.is_complex:
        a = torch.polar(r, 2 * math.pi * torch.rand(shape, dtype=torch.float64))
    else:
        a = r
    return a.to(device=device, dtype=dtype)


def compare_linear(
    name: str, a: torch.Tensor, b: torch.Tensor, h0: torch.Tensor | None = None, tol: float = TOL
) -> None:
    leaves = [t.detach().requires_grad_() for t in (a, b) + ((h0,) if h0 is not None else ())]
    got = linear_scan(*leaves[:2], leaves[2] if h0 is not None else None, backend=name)
    want = linear_scan_reference(*leaves[:2], leaves[2] if h0 is not None else None)
    assert_close(got, want, tol)
    g = torch.randn_like(want)
    for gg, gw in zip(torch.autograd.grad(got, leaves, g), torch.autograd.grad(want, leaves, g), strict=True):
        assert_close(gg, gw, tol)


# --- backend choice ----------------------------------------------------------------------------


def test_cpu_default_is_numba_and_env_forces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(scan_mod.ENV_VAR, raising=False)
    assert available_backends("cpu")[-1] == "torch"
    assert resolve_backend("cpu") == available_backends("cpu")[0]
    monkeypatch.setenv(scan_mod.ENV_VAR, "torch")
    assert resolve_backend("cpu") == "torch"
    assert resolve_backend("cpu", "numba") == "numba"  # the argument beats the environment
    monkeypatch.setenv(scan_mod.ENV_VAR, "fortran")
    with pytest.raises(ValueError, match="unknown scan backend"):
        resolve_backend("cpu")


def test_forced_backend_must_match_device() -> None:
    with pytest.raises(ValueError, match="runs on cpu"):
        resolve_backend("cuda", "numba")
    with pytest.raises(ValueError, match="runs on cuda"):
        resolve_backend("cpu", "triton")


def test_env_torch_gives_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(scan_mod.ENV_VAR, "torch")
    a, b = decay((2, 5, 3), torch.float32, "cpu"), torch.randn(2, 5, 3)
    assert torch.equal(linear_scan(a, b), linear_scan_reference(a, b))


# --- linear scan -------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64])
def test_linear_matches_reference(backend: tuple[str, str], dtype: torch.dtype) -> None:
    name, dev = backend
    B, L, D = 3, 97, 37  # odd sizes: partial channel blocks, partial time chunks
    compare_linear(name, decay((B, L, D), dtype, dev), torch.randn(B, L, D, dtype=dtype, device=dev))


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64])
def test_linear_carried_state_and_chunking(backend: tuple[str, str], dtype: torch.dtype) -> None:
    name, dev = backend
    a, b = decay((2, 64, 8), dtype, dev), torch.randn(2, 64, 8, dtype=dtype, device=dev)
    h0 = torch.randn(2, 8, dtype=dtype, device=dev)
    compare_linear(name, a, b, h0)
    # Scanning two halves with the state carried equals one scan.
    whole = linear_scan(a, b, h0, backend=name)
    first = linear_scan(a[:, :32], b[:, :32], h0, backend=name)
    second = linear_scan(a[:, 32:], b[:, 32:], first[:, -1], backend=name)
    assert_close(torch.cat([first, second], 1), whole)


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64])
def test_linear_long_and_near_unit_decay(backend: tuple[str, str], dtype: torch.dtype) -> None:
    name, dev = backend
    B, L, D = 1, 16384, 4
    a = decay((B, L, D), dtype, dev, r_min=0.999)
    compare_linear(name, a, torch.randn(B, L, D, dtype=dtype, device=dev))


def test_linear_exact_unit_decay_is_cumsum(backend: tuple[str, str]) -> None:
    name, dev = backend
    b = torch.randn(2, 300, 5, device=dev, dtype=torch.float64)
    got = linear_scan(torch.ones(5, device=dev, dtype=torch.float64), b, backend=name)
    assert_close(got, b.cumsum(1), 1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64])
@pytest.mark.parametrize(
    "a_shape", [(16,), (1, 1, 16), (2, 1, 16), (1, 40, 16), (40, 16), (2, 40, 1), ()], ids=str
)
def test_linear_broadcast_a(backend: tuple[str, str], dtype: torch.dtype, a_shape: tuple) -> None:
    name, dev = backend
    compare_linear(name, decay(a_shape, dtype, dev), torch.randn(2, 40, 16, dtype=dtype, device=dev))


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64])
def test_linear_non_contiguous(backend: tuple[str, str], dtype: torch.dtype) -> None:
    name, dev = backend
    b = torch.randn(3, 12, 2 * 50, dtype=dtype, device=dev)[:, :, ::2]  # strided channels
    a = decay((3, 12, 50), dtype, dev).transpose(0, 1).contiguous().transpose(0, 1)  # permuted
    h0 = torch.randn(50, 3, dtype=dtype, device=dev).t()  # (3, 50) transposed view
    assert not (a.is_contiguous() or b.is_contiguous() or h0.is_contiguous())
    compare_linear(name, a, b, h0)


def test_linear_mixed_dtypes_and_partial_grads(backend: tuple[str, str]) -> None:
    name, dev = backend
    a = decay((8,), torch.float32, dev).requires_grad_()  # real decay, complex input
    b = torch.randn(2, 30, 8, dtype=torch.complex64, device=dev)  # no grad wanted
    got, want = linear_scan(a, b, backend=name), linear_scan_reference(a, b)
    assert_close(got, want)
    g = torch.randn_like(want)
    assert_close(torch.autograd.grad(got, a, g)[0], torch.autograd.grad(want, a, g)[0])
    with torch.no_grad():
        assert not linear_scan(a, b, backend=name).requires_grad


def test_linear_half_input_keeps_dtype(backend: tuple[str, str]) -> None:
    name, dev = backend
    b = torch.randn(2, 20, 8, device=dev, dtype=torch.bfloat16)
    out = linear_scan(torch.full((8,), 0.9, device=dev), b, backend=name)
    assert out.dtype == torch.float32  # promoted as the reference promotes a float32 a
    assert linear_scan(b, b, backend=name).dtype == torch.bfloat16


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128])
@pytest.mark.parametrize("a_shape", [(2, 7, 3), (3,)], ids=str)
def test_linear_gradcheck(backend: tuple[str, str], dtype: torch.dtype, a_shape: tuple) -> None:
    name, dev = backend
    a = decay(a_shape, dtype, dev).requires_grad_()
    b = torch.randn(2, 7, 3, dtype=dtype, device=dev, requires_grad=True)
    h0 = torch.randn(2, 3, dtype=dtype, device=dev, requires_grad=True)
    fn = lambda a, b, h0: linear_scan(a, b, h0, backend=name)  # noqa: E731
    assert torch.autograd.gradcheck(fn, (a, b, h0), fast_mode=True)


# --- log-space scan ----------------------------------------------------------------------------
# The reference here runs in float64: Heinsen's cumsum form drifts in float32 at long L, which is
# why the compiled kernels scan sequentially instead.


def log_inputs(B: int, L: int, D: int, dev: str, dtype: torch.dtype = torch.float32) -> tuple:
    log_a = torch.nn.functional.logsigmoid(torch.randn(B, L, D, dtype=dtype, device=dev) + 2)
    log_b = torch.randn(B, L, D, dtype=dtype, device=dev) - 1
    return log_a, log_b


def compare_log(
    name: str, log_a: torch.Tensor, log_b: torch.Tensor, log_h0: torch.Tensor | None = None, tol: float = TOL
) -> None:
    args = [t for t in (log_a, log_b, log_h0) if t is not None]
    leaves = [t.detach().requires_grad_() for t in args]
    leaves64 = [t.detach().double().requires_grad_() for t in args]
    pad = [None] * (3 - len(args))
    got = log_scan(*leaves, *pad, backend=name)
    want = log_scan_reference(*leaves64, *pad)
    assert_close(got, want.to(got.dtype), tol)
    g = torch.randn_like(got)
    for gg, gw in zip(
        torch.autograd.grad(got, leaves, g),
        torch.autograd.grad(want, leaves64, g.double()),
        strict=True,
    ):
        assert_close(gg, gw.to(gg.dtype), tol)


def test_log_matches_reference(backend: tuple[str, str]) -> None:
    name, dev = backend
    compare_log(name, *log_inputs(3, 97, 37, dev))


def test_log_carried_state_and_broadcast(backend: tuple[str, str]) -> None:
    name, dev = backend
    log_a, log_b = log_inputs(2, 50, 16, dev)
    compare_log(name, log_a, log_b, torch.randn(2, 16, device=dev))
    compare_log(name, log_a[:1, :1, :].squeeze(0), log_b, torch.randn(16, device=dev))


def test_log_long_sequence(backend: tuple[str, str]) -> None:
    name, dev = backend
    log_a, log_b = log_inputs(1, 16384, 4, dev)
    compare_log(name, log_a, log_b)


def test_log_non_contiguous(backend: tuple[str, str]) -> None:
    name, dev = backend
    log_a, log_b = log_inputs(3, 20, 2 * 10, dev)
    compare_log(name, log_a[:, :, ::2], log_b.transpose(0, 1).contiguous().transpose(0, 1)[:, :, 1::2])


def test_log_matches_linear_scan(backend: tuple[str, str]) -> None:
    name, dev = backend
    log_a, log_b = log_inputs(2, 64, 8, dev, torch.float64)
    want = linear_scan_reference(log_a.exp(), log_b.exp()).log()
    assert_close(log_scan(log_a, log_b, backend=name), want, 1e-12)


def test_log_gradcheck(backend: tuple[str, str]) -> None:
    name, dev = backend
    log_a, log_b = (t.requires_grad_() for t in log_inputs(2, 7, 3, dev, torch.float64))
    log_h0 = torch.randn(2, 3, dtype=torch.float64, device=dev, requires_grad=True)
    fn = lambda x, y, z: log_scan(x, y, z, backend=name)  # noqa: E731
    assert torch.autograd.gradcheck(fn, (log_a, log_b, log_h0), fast_mode=True)


# --- half precision ----------------------------------------------------------------------------
# Every backend computes bf16/fp16 in float32 and rounds only the result (and the gradients): a
# recurrence run in bf16 rounds its state to 8 bits every step (at L = 2048 the log scan was off
# by ~4 in log h, the linear scan by 5%). Held against a float64 reference on the same rounded
# inputs, to a few roundings of the half dtype.

# 3 and 4 unit roundoffs (bf16 2^-9, fp16 2^-12): measured <= 3.2e-3 and 4.5e-4 here; the old
# torch path in half precision was off by 1e-2..10 (bf16) and 2e-3..1.3 (fp16).
HALF_TOL = {torch.bfloat16: 6e-3, torch.float16: 1e-3}


def _half_inputs(kind: str, dtype: torch.dtype, dev: str, L: int = 2048) -> list[torch.Tensor]:
    B, D = 2, 8
    if kind == "log":
        log_a, log_b = log_inputs(B, L, D, dev)
        return [log_a.to(dtype), log_b.to(dtype), torch.randn(B, D, device=dev).to(dtype)]
    a = decay((B, L, D), torch.float32, dev, r_min=0.9)  # long memory: rounding would pile up
    return [a.to(dtype), torch.randn(B, L, D, device=dev).to(dtype), torch.randn(B, D, device=dev).to(dtype)]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("kind", ["linear", "log"])
def test_half_precision_long_sequence(any_backend: tuple[str, str], kind: str, dtype: torch.dtype) -> None:
    name, dev = any_backend
    scan = log_scan if kind == "log" else linear_scan
    reference = log_scan_reference if kind == "log" else linear_scan_reference
    leaves = [t.requires_grad_() for t in _half_inputs(kind, dtype, dev)]
    leaves64 = [t.detach().double().requires_grad_() for t in leaves]
    got, want = scan(*leaves, backend=name), reference(*leaves64)
    assert got.dtype == dtype
    assert_close(got.double(), want, HALF_TOL[dtype])
    g = torch.randn_like(got)
    grads = torch.autograd.grad(got, leaves, g)
    for gg, gw in zip(grads, torch.autograd.grad(want, leaves64, g.double()), strict=True):
        assert gg.dtype == dtype
        assert_close(gg.double(), gw, HALF_TOL[dtype])


def test_half_precision_time_invariant_decay(any_backend: tuple[str, str]) -> None:
    """A bf16 decay shared by all steps and sequences: its gradient sums L x B terms in float32."""
    name, dev = any_backend
    a = decay((8,), torch.float32, dev, r_min=0.9).to(torch.bfloat16).requires_grad_()
    b = torch.randn(2, 2048, 8, device=dev).to(torch.bfloat16).requires_grad_()
    a64, b64 = (t.detach().double().requires_grad_() for t in (a, b))
    got, want = linear_scan(a, b, backend=name), linear_scan_reference(a64, b64)
    assert_close(got.double(), want, HALF_TOL[torch.bfloat16])
    g = torch.randn_like(got)
    for gg, gw in zip(
        torch.autograd.grad(got, (a, b), g), torch.autograd.grad(want, (a64, b64), g.double()), strict=True
    ):
        assert_close(gg.double(), gw, HALF_TOL[torch.bfloat16])


# --- special values ----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_log_zero_inputs_and_resets(backend: tuple[str, str], dtype: torch.dtype) -> None:
    """log b = -inf (no input that step), log a = -inf (the state forgotten) and both at once
    (h = 0 again, log h = -inf): the kernels agree with h_t = a_t h_{t-1} + b_t in float64."""
    name, dev = backend
    tol = TOL if dtype == torch.float32 else 1e-12
    log_a, log_b = log_inputs(2, 40, 8, dev, dtype)
    log_h0 = torch.randn(2, 8, dtype=dtype, device=dev)
    log_b[:, 10:13] = -math.inf
    log_a[:, 20] = -math.inf
    empty_a, empty_b = log_a.clone(), log_b.clone()
    empty_a[0, 30, :4] = empty_b[0, 30, :4] = -math.inf  # h_30 = 0 in four channels
    leaves = [t.requires_grad_() for t in (empty_a, empty_b)]
    got = log_scan(*leaves, log_h0, backend=name)
    want = linear_scan_reference(empty_a.double().exp(), empty_b.double().exp(), log_h0.double().exp()).log()
    assert torch.equal(got.isinf(), want.isinf()) and got[0, 30, :4].eq(-math.inf).all()
    finite = want.isfinite()
    assert_close(got[finite], want[finite].to(dtype), tol)
    g = torch.randn_like(got)
    assert all(x.isfinite().all() for x in torch.autograd.grad(got, leaves, g))
    # Gradients where h stays positive: those of the linear-space recurrence, by the chain rule
    # through exp (a -inf input gets 0).
    leaves = [t.detach().requires_grad_() for t in (log_a, log_b, log_h0)]
    leaves64 = [t.detach().double().requires_grad_() for t in leaves]
    got = log_scan(*leaves, backend=name)
    want = linear_scan_reference(*(t.exp() for t in leaves64)).log()
    assert_close(got, want.detach().to(dtype), tol)
    grads = torch.autograd.grad(got, leaves, g)
    for gg, gw in zip(grads, torch.autograd.grad(want, leaves64, g.double()), strict=True):
        assert_close(gg, gw.to(dtype), tol)
    assert grads[1][:, 10:13].eq(0).all() and grads[0][:, 20].eq(0).all()


@pytest.mark.parametrize("kind", ["linear", "log"])
def test_nan_propagates_forward(any_backend: tuple[str, str], kind: str) -> None:
    """A NaN input poisons its channel from that step on (so divergence is seen), nothing else."""
    name, dev = any_backend
    if kind == "log":
        a, b = log_inputs(2, 30, 6, dev)
    else:
        a, b = decay((2, 30, 6), torch.float32, dev), torch.randn(2, 30, 6, device=dev)
    b[1, 7, 2] = math.nan
    out = (log_scan if kind == "log" else linear_scan)(a, b, backend=name)
    poisoned = torch.zeros_like(out, dtype=torch.bool)
    poisoned[1, 7:, 2] = True
    assert torch.equal(out.isnan(), poisoned)


def test_warm_up_loads_the_kernels_a_first_training_step_would():
    # In a fresh process (this one has run the kernels already): before warm_up no kernel has a
    # compiled signature; after it, the float32 and complex64 forward and backward kernels do, and
    # a scan of the shapes a model uses adds none (it was loaded, not compiled on first use).
    import json
    import subprocess
    import sys

    if "numba" not in available_backends("cpu"):
        pytest.skip("numba not importable")
    code = """
import json
import torch
from ablate.ops import scan, scan_numba as k
names = ("_linear_fwd", "_linear_bwd", "_log_fwd", "_log_bwd")
count = lambda: {n: len(getattr(k, n).signatures) for n in names}
before = count()
scan.warm_up()
warm = count()
a = torch.rand(32, 64, 16, dtype=torch.complex64, requires_grad=True)
scan.linear_scan(a, torch.rand(32, 64, 16, dtype=torch.complex64, requires_grad=True)).abs().sum().backward()
print(json.dumps([before, warm, count()]))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    before, warm, after = json.loads(out)
    assert set(before.values()) == {0}
    assert warm == {"_linear_fwd": 2, "_linear_bwd": 2, "_log_fwd": 1, "_log_bwd": 1}
    assert after == warm
