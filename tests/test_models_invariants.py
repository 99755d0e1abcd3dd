"""The mathematical invariants of docs/science.md (§10 lists them), each as a test that a wrong model would fail."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.optimize
import torch

from ablate.models.minrnn import MinLSTM
from ablate.models.recurrent import LinearRecurrence, conv_scan, powers
from ablate.ops.scan import linear_scan
from ablate.spec import RingInit, RotrnnInit

ROTRNN = RotrnnInit(gamma_min=0.5, gamma_max=0.99, max_phase=0.5)
HORIZON = 64  # the sequence length a layer is built for: enters only a dense head's ξ


def test_rotation_stays_orthogonal_through_training() -> None:
    """P_h orthogonal with det +1 and A_hᵀA_h = γ_h² I, at init and after AdamW steps that move M."""
    torch.manual_seed(0)
    layer = LinearRecurrence(6, 12, 2, "rotation", "xi", "none", ROTRNN, horizon=HORIZON)
    M0 = layer.param.M.detach().clone()
    opt = torch.optim.AdamW(layer.parameters(), lr=0.05)
    u, target = torch.randn(4, 20, 6), torch.randn(4, 20, 6)
    for step in range(6):
        if step:
            opt.zero_grad()
            torch.nn.functional.mse_loss(layer(u), target).backward()
            opt.step()
        P, A, g = (
            layer.param.basis().detach(),
            layer.param.state_matrices().detach(),
            layer.param.gamma().detach(),
        )
        eye = torch.eye(6).expand(2, 6, 6)
        assert (P.transpose(1, 2) @ P - eye).abs().max() < 1e-6
        assert (torch.linalg.det(P) - 1).abs().max() < 1e-5
        assert (A.transpose(1, 2) @ A - g[:, None, None] ** 2 * eye).abs().max() < 1e-6
        ev = torch.linalg.eigvals(A.double())  # the spectrum is γ_h e^{±iθ}
        assert (ev.abs() - g[:, None].double()).abs().max() < 1e-5
    assert (layer.param.M.detach() - M0).abs().max() > 0.1  # the basis really trained


def _white(n_seq: int, length: int, d: int, seed: int) -> torch.Tensor:
    return torch.randn(n_seq, length, d, generator=torch.Generator().manual_seed(seed))


def _within(mean: torch.Tensor, target: torch.Tensor, se: torch.Tensor, z: float = 5.0) -> bool:
    """|mean − target| < z standard errors everywhere (z = 5 covers the L×H comparisons)."""
    return bool(((mean - target).abs() < z * se).all())


S_SEQ, L_XI = 3000, 32


@torch.no_grad()
def test_xi_keeps_unit_state_norm_from_a_stationary_start() -> None:
    """White input, E‖x_0^h‖² = 1: E‖x_t^h‖² stays 1 at every t — also after the parameters move
    (ξ is recomputed from the live γ and B) — and the same check rejects the unnormalised layer."""
    torch.manual_seed(0)
    d, N, H = 4, 16, 4
    layer = LinearRecurrence(d, N, H, "rotation", "xi", "none", ROTRNN, horizon=HORIZON)
    u = _white(S_SEQ, L_XI, d, seed=1)
    x0 = torch.randn(S_SEQ, N, generator=torch.Generator().manual_seed(2)) / math.sqrt(N // H)

    def check(lyr: LinearRecurrence) -> bool:
        _, norms = lyr(u, return_norms=True, h0=x0)
        return _within(norms.mean(0), torch.ones(L_XI, H), norms.std(0) / math.sqrt(S_SEQ))

    assert check(layer)
    layer.param.B.mul_(3.0)  # a cached ξ would now give E‖x‖² → 9
    layer.param.gamma_log.sub_(1.0)  # and longer memories
    assert check(layer)
    assert not check(LinearRecurrence(d, N, H, "rotation", "none", "none", ROTRNN, horizon=HORIZON))


@torch.no_grad()
def test_xi_groups_of_complex_modes_keep_unit_norm() -> None:
    """complex_diagonal + ξ: modes of a group have their own |λ|; started at each mode's stationary
    variance (computed here from ν_log, B), the group's E‖x_t‖² is 1 at every t."""
    torch.manual_seed(0)
    d, N, H = 4, 16, 2
    layer = LinearRecurrence(d, N, H, "complex_diagonal", "xi", "none", ROTRNN, horizon=HORIZON)
    p = layer.param
    mag_sq = torch.exp(-2 * torch.exp(p.nu_log))
    v = (p.B_re.square() + p.B_im.square()).sum(1) / (1 - mag_sq)  # unnormalised stationary power
    v = (v.view(H, -1) / v.view(H, -1).sum(1, keepdim=True)).flatten()  # each group sums to 1
    gen = torch.Generator().manual_seed(3)
    x0 = (torch.randn(S_SEQ, N // 2, 2, generator=gen) * (v[:, None] / 2).sqrt()).flatten(1)
    u = _white(S_SEQ, L_XI, d, seed=4)
    _, norms = layer(u, return_norms=True, h0=x0)
    assert _within(norms.mean(0), torch.ones(L_XI, H), norms.std(0) / math.sqrt(S_SEQ))


@torch.no_grad()
@pytest.mark.parametrize("param", ["rotation", "complex_diagonal", "dense"])
def test_xi_from_zero_start_follows_theory(param: str) -> None:
    """From x_0 = 0 the mean state norm follows the theory curve (1 − γ_h^{2t} for rotation)."""
    torch.manual_seed(0)
    d, N, H = 4, 16, 4
    layer = LinearRecurrence(d, N, H, param, "xi", "none", ROTRNN, horizon=HORIZON)
    theory = layer.expected_state_norms(L_XI)
    if param == "rotation":
        t = torch.arange(1, L_XI + 1)[:, None]
        assert (theory - (1 - layer.param.gamma()[None] ** (2 * t))).abs().max() < 1e-5
    assert (theory[-1] <= 1 + 1e-5).all() and (theory[0] > 0).all()
    u = _white(S_SEQ, L_XI, d, seed=5)
    _, norms = layer(u, return_norms=True)
    assert _within(norms.mean(0), theory, norms.std(0) / math.sqrt(S_SEQ))


def test_minlstm_gates_sum_to_one() -> None:
    torch.manual_seed(0)
    layer = MinLSTM(6, 10)
    u = 4 * torch.randn(3, 30, 6)
    f, i = layer.gates(u)
    assert (f + i - 1).abs().max() < 1e-6
    f_direct, i_direct = layer.coefficients(layer._split(u)[0])
    assert (f_direct + i_direct - 1).abs().max() < 1e-6
    assert (f - f_direct).abs().max() < 1e-6


def test_powers_compose_by_products_not_growing_angles() -> None:
    """docs/science.md §9.2: at k ~ 16k the kernel table is exact to float32 rounding; a float32 growing
    angle exp(i·k·θ) is off by ~1e-3."""
    L = 16384
    lam = torch.exp(torch.complex(torch.full((3,), -1e-5), torch.tensor([2.9, 1.3, 0.0314])))
    lam64 = lam.to(torch.complex128)  # exact powers of the float32 eigenvalue itself
    exact = lam64[None] ** torch.arange(L, dtype=torch.float64)[:, None]
    table = powers(lam, L)
    assert table.dtype == torch.complex64
    assert (table.to(torch.complex128) - exact).abs().max() < 1e-6
    k = torch.arange(L, dtype=torch.float32)[:, None]
    angle = torch.exp(
        torch.complex(k * lam.abs().log()[None], k * lam.angle()[None])
    )  # the growing-angle way
    assert (angle.to(torch.complex128) - exact).abs().max() > 1e-4


@torch.no_grad()
@pytest.mark.parametrize("param", ["rotation", "complex_diagonal"])
@pytest.mark.parametrize("norm", ["xi", "none"])
def test_long_sequences_stay_real_and_finite(param: str, norm: str) -> None:
    """L = 16k, |λ| within 1e-4 of the unit circle: outputs real float32, finite; scan == conv."""
    torch.manual_seed(0)
    L = 16384
    layer = LinearRecurrence(
        2, 4, 1, param, norm, "none", RingInit(r_min=0.9999, r_max=0.99999, max_phase=0.0314), horizon=L
    )
    assert (layer.eigenvalues().abs() > 0.9999).all()
    u = torch.randn(1, L, 2)
    y, x = layer(u, return_states=True)
    assert y.dtype == torch.float32 and not y.is_complex() and torch.isfinite(y).all()
    layer.mode = "conv"
    y_conv = layer(u)
    assert ((y - y_conv).abs().max() / y.abs().max()) < 1e-4


def test_linear_scan_and_conv_scan_agree_with_initial_state() -> None:
    torch.manual_seed(0)
    lam = torch.exp(torch.complex(-torch.rand(6) * 0.1, torch.rand(6) * 3))
    b = torch.randn(2, 100, 6, dtype=torch.complex64)
    h0 = torch.randn(2, 6, dtype=torch.complex64)
    assert (linear_scan(lam, b, h0) - conv_scan(lam, b, h0)).abs().max() < 1e-4


# --- the dynamics a layer reports to the probes ------------------------------------------------------

PARAMS = ["rotation", "complex_diagonal", "real_diagonal", "dense"]


@torch.no_grad()
@pytest.mark.parametrize("param", PARAMS)
@pytest.mark.parametrize("norm", ["xi", "gamma", "none"])
def test_stationary_norms_are_the_limit_of_the_theory_curve(param: str, norm: str) -> None:
    """E‖x_t^h‖² from x_0 = 0 rises to the stationary value; ξ puts it at 1 in every head (a dense
    head's ξ at its horizon, here the curve's 3000 steps: 1 + O(γ^6000) of the stationary one)."""
    torch.manual_seed(0)
    layer = LinearRecurrence(4, 16, 4, param, norm, "none", ROTRNN, horizon=3000)
    report = layer.dynamics(3000)
    assert report.expected_norms is not None and report.stationary_norms is not None
    assert torch.equal(report.expected_norms, layer.expected_state_norms(3000))
    assert torch.equal(report.stationary_norms, layer.stationary_state_norms())
    curve, stationary = report.expected_norms.double(), report.stationary_norms.double()
    assert (curve.diff(dim=0) >= -1e-6 * stationary).all()  # white input only adds energy from zero
    assert torch.allclose(curve[-1], stationary, rtol=1e-4)
    if norm == "xi":
        assert torch.allclose(stationary, torch.ones(4, dtype=torch.float64), rtol=1e-5)


@torch.no_grad()
@pytest.mark.parametrize("param", PARAMS)
def test_reported_modes_are_the_spectrum_of_each_heads_state_matrix(param: str) -> None:
    """With conjugates added (complex modes), each head's modes are the eigenvalues of that head's
    n×n block of the natural-basis A; its decay is its largest |λ|."""
    torch.manual_seed(0)
    heads, n = 2, 4
    layer = LinearRecurrence(3, heads * n, heads, param, "xi", "none", ROTRNN, horizon=HORIZON)
    report = layer.dynamics()
    A = layer.system().natural()[0].double()
    assert report.head_decay is not None and report.head_decay.shape == (heads,)
    for h in range(heads):
        want = torch.linalg.eigvals(A[h * n:(h + 1) * n, h * n:(h + 1) * n]).numpy()
        mine = report.modes[report.mode_head == h].to(torch.complex128)
        got = (torch.cat([mine, mine.conj()]) if param in ("rotation", "complex_diagonal") else mine).numpy()
        assert got.shape == want.shape
        rows, cols = scipy.optimize.linear_sum_assignment(np.abs(got[:, None] - want[None]))
        assert np.abs(got[rows] - want[cols]).max() < 1e-5
        assert abs(float(report.head_decay[h]) - np.abs(want).max()) < 1e-5


@torch.no_grad()
def test_input_scale_is_what_multiplies_each_units_rows_of_b() -> None:
    """For ξ on a rotation head: ξ_h = sqrt(1 − γ_h²)/‖B_h‖_F for each of its n/2 complex modes."""
    torch.manual_seed(0)
    layer = LinearRecurrence(3, 8, 2, "rotation", "xi", "none", ROTRNN, horizon=HORIZON)
    report = layer.dynamics()
    p = layer.param
    xi = torch.sqrt(1 - p.gamma() ** 2) / p.B.view(2, -1).norm(dim=1)
    assert report.input_scale is not None and report.unit_head is not None
    assert torch.allclose(report.input_scale, xi[report.unit_head], rtol=1e-5)
    assert report.unit_head.tolist() == [0, 0, 1, 1]
    plain = LinearRecurrence(3, 8, 2, "rotation", "none", "none", ROTRNN, horizon=HORIZON)
    assert plain.dynamics().input_scale is None


@torch.no_grad()
def test_layers_without_fixed_dynamics_report_none() -> None:
    """Input-dependent recurrences report no spectrum and no theory; a nonlinear one a spectrum only."""
    from ablate.models.baselines import TorchGRU, TorchLSTM
    from ablate.models.minrnn import MinGRU

    for layer in (MinGRU(4, 6), MinLSTM(4, 6), TorchGRU(4, 6), TorchLSTM(4, 6)):
        report = layer.dynamics(10)
        assert report.modes.numel() == 0 and report.mode_head.numel() == 0
        assert report.head_decay is report.input_scale is report.expected_norms is report.stationary_norms is None
        u = torch.randn(2, 5, 4)
        assert torch.equal(layer.state_norms(u), layer(u, return_norms=True)[-1])
    tanh = LinearRecurrence(4, 8, 2, "rotation", "xi", "tanh", ROTRNN, horizon=HORIZON)
    report = tanh.dynamics(10)
    assert report.modes.numel() == 4 and report.expected_norms is None and report.stationary_norms is None
    with pytest.raises(ValueError, match="only linear recurrences"):
        tanh.stationary_state_norms()
