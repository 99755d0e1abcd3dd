"""Scan entry points: one function per scan kind, autograd-aware, with a backend per device.

    linear_scan(a, b, h0)            h_t = a_t * h_{t-1} + b_t        real or complex, (B, L, D)
    log_scan(log_a, log_b, log_h0)   log h_t for h_t = a_t h_{t-1} + b_t with a, b, h > 0

Time is dimension 1. ``a`` may broadcast against ``b`` (a time-invariant decay of shape (D,), a
per-sequence decay (B, 1, D), ...); the compiled backends read it in place without expanding it.

Backends (see ``resolve_backend``):
    numba   compiled CPU kernels (ops/scan_numba.py), the default for CPU tensors
    triton  GPU kernels (ops/scan_triton.py), the default for CUDA tensors when triton imports
    torch   the reference below: a per-step loop (linear) and Heinsen's cumsum form (log);
            the fallback everywhere, and the yardstick the tests compare the others against
``ABLATE_SCAN_BACKEND=torch|numba|triton`` forces one; ``backend=`` forces one per call.

Half precision (bf16, fp16) is computed in float32 on every backend and returned in the caller's
dtype; ``widened`` says which dtype a recurrence in a given dtype is carried in.
"""

from __future__ import annotations

import importlib
import os
from functools import cache
from types import ModuleType
from typing import Any

import torch

ENV_VAR = "ABLATE_SCAN_BACKEND"
BACKENDS = ("torch", "numba", "triton")
_DEVICE_OF = {"numba": "cpu", "triton": "cuda"}
# Every backend, the torch reference included, computes half precision in these dtypes and
# returns the caller's dtype: a bf16 recurrence drifts (log h off by ~4 at L = 2048, the linear
# scan by 5%) because each step rounds the state to 8 bits of mantissa.
_COMPUTE = {
    torch.float16: torch.float32,
    torch.bfloat16: torch.float32,
    torch.complex32: torch.complex64,
}
_KERNEL_DTYPES = (torch.float32, torch.float64, torch.complex64, torch.complex128)


def widened(dtype: torch.dtype) -> torch.dtype:
    """The dtype a recurrence in ``dtype`` is carried in: float32 (complex64) for half precision,
    else ``dtype`` itself. The layers use it for everything the scans do not cover (eigenvalues,
    the sequential loop), so every mode of a half-precision layer computes the same recurrence."""
    return _COMPUTE.get(dtype, dtype)


# --- references ------------------------------------------------------------------------------


def linear_scan_reference(a: torch.Tensor, b: torch.Tensor, h0: torch.Tensor | None = None) -> torch.Tensor:
    """h_t = a_t * h_{t-1} + b_t along dim 1, as a per-step torch loop (autograd does the rest)."""
    a = a.expand_as(b)
    h = torch.zeros_like(b[:, 0]) if h0 is None else h0
    out = []
    # unbind, not b[:, t]: indexing inside autograd makes the backward O(L^2).
    for a_t, b_t in zip(a.unbind(1), b.unbind(1), strict=True):
        h = a_t * h + b_t
        out.append(h)
    return torch.stack(out, dim=1)


def log_scan_reference(
    log_a: torch.Tensor, log_b: torch.Tensor, log_h0: torch.Tensor | None = None
) -> torch.Tensor:
    """log h_t for the positive recurrence h_t = a_t h_{t-1} + b_t (Heinsen's log-space scan)."""
    log_a = log_a.expand_as(log_b)
    if log_h0 is not None:
        log_a = torch.cat([torch.zeros_like(log_a[:, :1]), log_a], dim=1)
        log_b = torch.cat([log_h0.expand_as(log_b[:, 0]).unsqueeze(1), log_b], dim=1)
    a_star = torch.cumsum(log_a, dim=1)
    log_h = a_star + torch.logcumsumexp(log_b - a_star, dim=1)
    return log_h if log_h0 is None else log_h[:, 1:]


# --- backend choice --------------------------------------------------------------------------


@cache
def _kernels(name: str) -> ModuleType | None:
    """The backend's kernel module, or None when it (or its compiler) does not import."""
    try:
        return importlib.import_module(f"ablate.ops.scan_{name}")
    except ImportError:
        return None


def available_backends(device: torch.device | str = "cpu") -> list[str]:
    """Backends usable for tensors on ``device``, fastest first; "torch" is always last."""
    dev = torch.device(device).type
    return [n for n in ("numba", "triton") if _DEVICE_OF[n] == dev and _kernels(n) is not None] + ["torch"]


def resolve_backend(device: torch.device | str, backend: str | None = None) -> str:
    """The backend a call on ``device`` uses: ``backend``, else $ABLATE_SCAN_BACKEND, else the
    fastest available. A forced backend that cannot serve the device is an error, not a silent
    fallback, so a benchmark never measures something other than what it names."""
    name = backend or os.environ.get(ENV_VAR) or None
    if name is None:
        return available_backends(device)[0]
    if name not in BACKENDS:
        raise ValueError(f"unknown scan backend {name!r}; choose one of {', '.join(BACKENDS)}")
    if name == "torch":
        return name
    dev = torch.device(device).type
    if _DEVICE_OF[name] != dev:
        raise ValueError(f"scan backend {name!r} runs on {_DEVICE_OF[name]} tensors, got {dev}")
    if _kernels(name) is None:
        raise ImportError(f"scan backend {name!r} is not importable here (is {name} installed?)")
    return name


# --- autograd Functions ------------------------------------------------------------------------
# One Function per scan kind. Real and complex share LinearScan: the recurrence and its adjoint
# are the same formulas (conj is the identity on reals), and each backend picks its real or
# complex kernel from the dtype. The backward is a reverse scan in the same backend.


class LinearScan(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any, a: torch.Tensor, b: torch.Tensor, h0: torch.Tensor | None, kernels: ModuleType
    ) -> torch.Tensor:
        h = kernels.linear_forward(a, b, h0)
        ctx.save_for_backward(a, h, h0)
        ctx.kernels = kernels
        return h

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad_h: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        a, h, h0 = ctx.saved_tensors
        need_a, need_b, need_h0 = ctx.needs_input_grad[:3]
        ga, gb, gh0 = ctx.kernels.linear_backward(a, h, h0, grad_h.contiguous(), need_a)
        return ga, gb if need_b else None, gh0 if need_h0 else None, None


class LogScan(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any, log_a: torch.Tensor, log_b: torch.Tensor, log_h0: torch.Tensor | None, kernels: ModuleType
    ) -> torch.Tensor:
        s = kernels.log_forward(log_a, log_b, log_h0)
        ctx.save_for_backward(log_a, log_b, s, log_h0)
        ctx.kernels = kernels
        return s

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad_s: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        log_a, log_b, s, log_h0 = ctx.saved_tensors
        need_a, need_b, need_h0 = ctx.needs_input_grad[:3]
        ga, gb, gh0 = ctx.kernels.log_backward(log_a, log_b, s, log_h0, grad_s.contiguous(), need_a)
        return ga, gb if need_b else None, gh0 if need_h0 else None, None


# --- input normalisation -----------------------------------------------------------------------


def _compute_dtype(*tensors: torch.Tensor | None) -> tuple[torch.dtype, torch.dtype]:
    """(dtype the result has, dtype the kernel runs in)."""
    dtype = tensors[0].dtype
    for t in tensors[1:]:
        if t is not None:
            dtype = torch.promote_types(dtype, t.dtype)
    compute = _COMPUTE.get(dtype, dtype)
    if compute not in _KERNEL_DTYPES:
        raise TypeError(f"scan kernels take float32/64 or complex64/128, got {dtype}")
    return dtype, compute


def _widen(*tensors: torch.Tensor | None) -> list[torch.Tensor | None]:
    """Half-precision tensors cast to their compute dtype, each on its own (the reference's own
    promotion then mixes them as before); autograd casts their gradients back."""
    return [t if t is None else t.to(_COMPUTE.get(t.dtype, t.dtype)) for t in tensors]


def _prepare(
    a: torch.Tensor, b: torch.Tensor, h0: torch.Tensor | None, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Contiguous kernel inputs: b (B, L, D), a (Ba, La, D) with Ba in {1, B}, La in {1, L},
    h0 (B, D) or None. Casts and expands happen here, in torch, so autograd reduces and casts
    the gradients back to the caller's shapes and dtypes."""
    if b.dim() != 3:
        raise ValueError(f"b must be (batch, length, channels), got shape {tuple(b.shape)}")
    B, L, D = b.shape
    if a.dim() > 3:
        raise ValueError(f"a must broadcast to {tuple(b.shape)}, got shape {tuple(a.shape)}")
    a = a.reshape((1,) * (3 - a.dim()) + tuple(a.shape))
    if any(n not in (1, m) for n, m in zip(a.shape, b.shape, strict=True)):
        raise ValueError(f"a of shape {tuple(a.shape)} does not broadcast to {tuple(b.shape)}")
    if a.shape[2] != D:  # one decay shared across channels: rare, so just materialise it
        a = a.expand(a.shape[0], a.shape[1], D)
    a = a.to(dtype).contiguous()
    b = b.to(dtype).contiguous()
    if h0 is not None:
        h0 = h0.to(dtype).expand(B, D).contiguous()
    return a, b, h0


def linear_scan(
    a: torch.Tensor,
    b: torch.Tensor,
    h0: torch.Tensor | None = None,
    *,
    backend: str | None = None,
) -> torch.Tensor:
    """h_t = a_t * h_{t-1} + b_t along dim 1; returns all h_t with the shape of ``b``.

    ``a`` broadcasts against ``b`` (B, L, D); ``h0`` against (B, D). Real or complex; gradients
    flow to all three. ``backend`` overrides the automatic choice (see module docstring).
    """
    name = resolve_backend(b.device, backend)
    dtype, compute = _compute_dtype(a, b, h0)
    if name == "torch":
        return linear_scan_reference(*_widen(a, b, h0)).to(dtype)
    a3, b3, h03 = _prepare(a, b, h0, compute)
    return LinearScan.apply(a3, b3, h03, _kernels(name)).to(dtype)


def log_scan(
    log_a: torch.Tensor,
    log_b: torch.Tensor,
    log_h0: torch.Tensor | None = None,
    *,
    backend: str | None = None,
) -> torch.Tensor:
    """log h_t for the positive recurrence h_t = a_t h_{t-1} + b_t (Heinsen's log-space scan).

    The compiled backends run log h_t = logaddexp(log a_t + log h_{t-1}, log b_t) step by step,
    which stays accurate at long L where the cumsum form drifts in float32.
    """
    name = resolve_backend(log_b.device, backend)
    dtype, compute = _compute_dtype(log_a, log_b, log_h0)
    if compute.is_complex:
        raise TypeError("log_scan takes real log-magnitudes")
    if name == "torch":
        return log_scan_reference(*_widen(log_a, log_b, log_h0)).to(dtype)
    la, lb, lh0 = _prepare(log_a, log_b, log_h0, compute)
    return LogScan.apply(la, lb, lh0, _kernels(name)).to(dtype)


def warm_up(dtypes: tuple[torch.dtype, ...] = (torch.float32, torch.complex64)) -> None:
    """Run each CPU scan once, forward and backward, on a tiny input of each dtype.

    The first call of a compiled kernel in a process loads it from numba's disk cache (or
    compiles it): about 0.1 s a kernel, half a second for a model's first training steps. A worker
    calls this while it waits for work, so that its first trial runs as fast as its later ones.
    """
    for dtype in dtypes:
        a = torch.rand(2, 4, 8, dtype=dtype, requires_grad=True)
        b = torch.rand(2, 4, 8, dtype=dtype, requires_grad=True)
        linear_scan(a, b, torch.zeros(2, 8, dtype=dtype, requires_grad=True)).abs().sum().backward()
        if not dtype.is_complex:
            log_scan(a.detach().log().requires_grad_(), b.detach().log().requires_grad_()).sum().backward()
