"""skew_expm equals torch.linalg.matrix_exp on skew-symmetric matrices, values and gradients,
and is orthogonal with det +1 to rounding, including at the repeated eigenvalues every skew
matrix has (±ω pairs, 0 at odd n, all of them equal at A = 0)."""

from __future__ import annotations

import pytest
import torch

from ablate.ops.expm import skew_expm

DEVICES = [
    "cpu",
    pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")),
]
SIZES = [2, 4, 16, 64, 128]
HEADS = [1, 4, 32]


def skew(
    H: int, n: int, dtype: torch.dtype = torch.float64, device: str = "cpu", seed: int = 0
) -> torch.Tensor:
    """A = M - Mᵀ with M ~ N(0, 1): RotRNN's parameterisation at initialisation."""
    g = torch.Generator().manual_seed(seed)
    M = torch.randn(H, n, n, generator=g, dtype=torch.float64)
    return (M - M.mT).to(device=device, dtype=dtype)


def degenerate(n: int) -> dict[str, torch.Tensor]:
    """Skew matrices whose eigenvalues repeat or nearly do (n even)."""
    g = torch.Generator().manual_seed(1)
    theta = 0.7
    block = torch.tensor([[0.0, theta], [-theta, 0.0]], dtype=torch.float64)
    same = torch.block_diag(*[block] * (n // 2))  # ±0.7, each n/2 times
    Q = torch.linalg.qr(torch.randn(n, n, generator=g, dtype=torch.float64))[0]
    E = torch.randn(n, n, generator=g, dtype=torch.float64)
    u, v = torch.randn(2, n, 1, generator=g, dtype=torch.float64)
    return {
        "zero": torch.zeros(n, n, dtype=torch.float64),
        "repeated": same,
        "repeated_rotated": Q @ same @ Q.T,  # the same spectrum in a random basis
        "nearly_repeated": same + 1e-9 * (E - E.T),
        "rank_two": u @ v.T - v @ u.T,  # n - 2 zero eigenvalues
    }


def grads(fn, A: torch.Tensor, G: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    A = A.detach().requires_grad_()
    P = fn(A)
    return P.detach(), torch.autograd.grad(P, A, G)[0]


# --- the matrix it returns ---------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("H", HEADS)
@pytest.mark.parametrize("n", SIZES)
def test_float32_orthogonal_with_det_one(n: int, H: int, device: str) -> None:
    P = skew_expm(skew(H, n, torch.float32, device))
    assert P.dtype == torch.float32 and P.shape == (H, n, n) and P.device.type == device
    eye = torch.eye(n, device=device)
    assert (P.mT @ P - eye).abs().max().item() <= 1e-6
    assert (P @ P.mT - eye).abs().max().item() <= 1e-6
    det = torch.linalg.det(P.double())
    assert (det - 1).abs().max().item() <= 1e-5  # +1: a rotation, never a reflection


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("H", HEADS)
@pytest.mark.parametrize("n", SIZES)
def test_equals_matrix_exp(n: int, H: int, dtype: torch.dtype, device: str) -> None:
    A = skew(H, n, dtype, device)
    want = torch.linalg.matrix_exp(A.double())  # float64 matrix_exp: the yardstick
    got = skew_expm(A)
    assert got.dtype == dtype
    tol = 1e-6 if dtype == torch.float32 else 1e-11
    assert (got.double() - want).abs().max().item() <= tol


@pytest.mark.parametrize("name", ["zero", "repeated", "repeated_rotated", "nearly_repeated", "rank_two"])
@pytest.mark.parametrize("n", [2, 4, 16, 64])
def test_degenerate_spectra_values_and_gradients(name: str, n: int) -> None:
    A = degenerate(n)[name]
    G = torch.randn(n, n, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    P, gP = grads(skew_expm, A, G)
    Q, gQ = grads(torch.linalg.matrix_exp, A, G)
    assert (P - Q).abs().max().item() <= 1e-12
    assert (gP - gQ).abs().max().item() <= 1e-11 * max(1.0, gQ.abs().max().item())
    if name == "zero":  # expm(0) = I and its derivative is the identity map
        assert torch.equal(P, torch.eye(n, dtype=torch.float64))
        assert (gP - G).abs().max().item() <= 1e-14


# --- gradients ---------------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize(("H", "n"), [(1, 2), (4, 4), (32, 4), (4, 16), (1, 64), (1, 128)])
def test_gradient_equals_matrix_exp(H: int, n: int, dtype: torch.dtype, device: str) -> None:
    """For any upstream gradient, skew or not: the Fréchet adjoint, not its skew projection."""
    A = skew(H, n, dtype, device)
    G = torch.randn(H, n, n, generator=torch.Generator().manual_seed(3), dtype=torch.float64).to(device)
    _, got = grads(skew_expm, A, G.to(dtype))
    _, want = grads(torch.linalg.matrix_exp, A.double(), G)
    assert got.dtype == dtype
    tol = 1e-6 if dtype == torch.float32 else 1e-11
    assert (got.double() - want).abs().max().item() <= tol * max(1.0, want.abs().max().item())


def test_gradient_through_the_parameterisation_matches() -> None:
    """P = expm(M - Mᵀ) as Rotation.basis builds it: the gradient reaching M."""
    M = torch.randn(4, 8, 8, dtype=torch.float64, requires_grad=True)
    G = torch.randn(4, 8, 8, dtype=torch.float64)
    got = torch.autograd.grad(skew_expm(M - M.mT), M, G)[0]
    want = torch.autograd.grad(torch.linalg.matrix_exp(M - M.mT), M, G)[0]
    assert (got - want).abs().max().item() <= 1e-12 * max(1.0, want.abs().max().item())


@pytest.mark.parametrize("n", [2, 3, 5, 6])
def test_gradcheck(n: int) -> None:
    M = torch.randn(2, n, n, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda M: skew_expm(M - M.mT), (M,))


def test_gradcheck_at_zero_and_repeated_eigenvalues() -> None:
    """Finite differences around A = 0 (all eigenvalues equal) and ±0.7 each repeated."""
    for A in (degenerate(4)["zero"], degenerate(4)["repeated"]):
        M = (A / 2).clone().requires_grad_()  # M - Mᵀ = A for this skew A/2
        assert torch.autograd.gradcheck(lambda M: skew_expm(M - M.mT), (M,))


# --- input checks ------------------------------------------------------------------------------


def test_rejects_what_is_not_a_real_skew_matrix() -> None:
    with pytest.raises(ValueError, match="not skew-symmetric"):
        skew_expm(torch.randn(2, 4, 4))
    with pytest.raises(ValueError, match=r"\(\.\.\., n, n\)"):
        skew_expm(torch.zeros(3, 4))
    with pytest.raises(TypeError, match="real floating-point"):
        skew_expm(torch.zeros(2, 2, dtype=torch.complex64))
    bad = skew(1, 4)
    bad[0, 0, 1] = float("nan")
    with pytest.raises(ValueError, match="not skew-symmetric"):
        skew_expm(bad)


def test_batch_shapes_and_rounding_level_asymmetry() -> None:
    A = skew(6, 8).view(2, 3, 8, 8)
    assert skew_expm(A).shape == (2, 3, 8, 8)
    assert skew_expm(torch.zeros(0, 4, 4)).shape == (0, 4, 4)
    nudged = A + 1e-15 * torch.randn_like(A)  # not exactly skew, within rounding: accepted
    assert (skew_expm(nudged) - skew_expm(A)).abs().max().item() <= 1e-12


def test_cpu_thread_count_restored() -> None:
    """Small CPU matrices run on one thread (see ablate.ops.expm); the caller's count comes back,
    also when the backward raises."""
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        M = torch.randn(2, 8, 8, requires_grad=True)
        P = skew_expm(M - M.mT)
        assert torch.get_num_threads() == 2
        torch.autograd.grad(P, M, torch.ones_like(P))
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
