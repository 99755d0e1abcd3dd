"""The exponential of real skew-symmetric matrices, exact and cheap: RotRNN's basis P = expm(A).

    skew_expm(A) -> P      A (..., n, n) real with A = -Aᵀ; P orthogonal with det +1, A's dtype

For a real skew A the matrix iA is Hermitian, so one eigendecomposition iA = V diag(ω) V^H
(``torch.linalg.eigh``, V unitary, ω real) gives everything: A = V diag(-iω) V^H and

    P = expm(A) = V diag(e^{-iω}) V^H                                   (real up to rounding)

The backward is the Daleckii-Krein formula. The Fréchet derivative of exp at A = V Λ V^H is
L(E) = ∫₀¹ e^{sA} E e^{(1-s)A} ds = V (F ∘ (V^H E V)) V^H with the divided differences
F_jk = (e^{λ_j} - e^{λ_k}) / (λ_j - λ_k) (e^{λ_j} where λ_j = λ_k), for any E, skew or not; its
adjoint gives the gradient of a real loss with dL/dP = G:

    dL/dA = Re V (conj(F) ∘ (V^H G V)) V^H

which is what ``torch.linalg.matrix_exp``'s backward returns, for every upstream G. With
λ = -iω the divided differences are, with no division by ω_j - ω_k (so no cancellation at the
repeated eigenvalues every skew matrix has: ±ω pairs, 0 at odd n, all of them at A = 0):

    F_jk = e^{-i(ω_j + ω_k)/2} · sin(δ)/δ,   δ = (ω_j - ω_k)/2

Cost: one Hermitian eigendecomposition forward and four n×n complex products in all, against
matrix_exp's Padé-and-squaring forward and a 2n×2n exponential backward. Everything runs in
complex128 whatever A's dtype: a float32 basis is then orthogonal to rounding (~1e-7), where a
float32 matrix_exp of a skew matrix with N(0,1) entries reaches only ~2e-6. Device-agnostic
torch ops only (on CUDA, eigh synchronises anyway, so the skewness check costs no extra wait).
On CPU, matrices up to n = 256 are computed on one thread (see ``_one_cpu_thread``).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

import torch

from ablate.ops.serial import one_cpu_thread

# A = M - Mᵀ is exactly skew in floating point; this leaves room for an A built another way.
_SKEW_ULPS = 64
# Up to this n, CPU work runs on one thread (see _one_cpu_thread).
_SERIAL_MAX_N = 256


@contextlib.contextmanager
def _one_cpu_thread(A: torch.Tensor) -> Iterator[None]:
    """torch's intra-op threads set to 1 for the block, for small CPU matrices.

    MKL's threaded Hermitian eigensolver gains nothing at these sizes (1.1 vs 1.3 ms at n = 128
    here) and, when the cores are busy (other workers, numba's scan threads), its threads wait at
    barriers for descheduled peers: 4-30 ms medians in isolation and 870 ms a call inside a
    RotRNN training step on this 2-core machine, where one thread took 1.3 ms every time. The
    setting is process-wide while the block runs (two Python threads computing at once would
    share it); it costs well under a microsecond.
    """
    if A.device.type != "cpu" or A.shape[-1] > _SERIAL_MAX_N:
        yield
        return
    with one_cpu_thread():
        yield


def _check_skew(A: torch.Tensor) -> None:
    if A.dim() < 2 or A.shape[-1] != A.shape[-2]:
        raise ValueError(f"skew_expm takes (..., n, n) matrices, got shape {tuple(A.shape)}")
    if A.is_complex() or not A.is_floating_point():
        raise TypeError(f"skew_expm takes real floating-point matrices, got {A.dtype}")
    if A.numel() == 0:
        return
    asym = (A + A.mT).abs().amax().item()
    scale = max(1.0, A.abs().amax().item())
    tol = _SKEW_ULPS * torch.finfo(A.dtype).eps * scale
    if not asym <= tol:  # also catches NaN
        raise ValueError(
            f"skew_expm: A is not skew-symmetric: max |A + Aᵀ| = {asym:.3g} > {tol:.3g}; pass A = M - Mᵀ"
        )


def _divided_differences(w: torch.Tensor) -> torch.Tensor:
    """F_jk = (e^{-iω_j} - e^{-iω_k}) / (-i(ω_j - ω_k)), stably: e^{-i(ω_j+ω_k)/2} sin(δ)/δ."""
    mean = 0.5 * (w.unsqueeze(-1) + w.unsqueeze(-2))
    half_diff = 0.5 * (w.unsqueeze(-1) - w.unsqueeze(-2))
    sinc = torch.sinc(half_diff / math.pi)  # torch's sinc is sin(πx)/(πx), 1 at 0
    return torch.polar(sinc, -mean)


class SkewExpm(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, A: torch.Tensor) -> torch.Tensor:
        with _one_cpu_thread(A):
            w, V = torch.linalg.eigh(A.to(torch.complex128) * 1j)
            P = (V * torch.polar(torch.ones_like(w), -w).unsqueeze(-2)) @ V.mH
        ctx.save_for_backward(w, V)
        return P.real.to(A.dtype)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad_P: torch.Tensor) -> torch.Tensor:
        w, V = ctx.saved_tensors
        with _one_cpu_thread(V):
            X = V.mH @ grad_P.to(V.dtype) @ V
            grad = (V @ (_divided_differences(w).conj() * X) @ V.mH).real
        return grad.to(grad_P.dtype)


def skew_expm(A: torch.Tensor) -> torch.Tensor:
    """expm(A) for real skew-symmetric A of shape (..., n, n), with an exact backward.

    Equal to ``torch.linalg.matrix_exp(A)`` (values and gradients, for any upstream gradient)
    while much cheaper at n ≳ 16; computed in complex128 and returned in A's dtype. Raises
    ValueError when A is not skew-symmetric (to 64 ulps of its largest entry).
    """
    _check_skew(A)
    return SkewExpm.apply(A)
