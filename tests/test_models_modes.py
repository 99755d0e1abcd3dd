"""Every mode of every layer equals a plain float64 reference loop written here from the raw parameters.

The reference does not use ``System`` or the scan basis: rotation builds A_h = γ_h P_h Θ_h P_hᵀ,
the complex diagonal runs a complex loop, dense solves its Lyapunov equation with scipy. Outputs and
gradients of the float32 modes must agree to 1e-5 (relative to the size of the compared tensor,
floored at 1).
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
import torch

from ablate.models.minrnn import MinGRU, MinLSTM
from ablate.models.recurrent import LinearRecurrence
from ablate.spec import RingInit, RotrnnInit

TOL = 1e-5
B, L, D, N, H = 3, 40, 5, 8, 2
RING = RingInit(r_min=0.7, r_max=0.95, max_phase=3.0)


def close(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a − b| relative to max(1, max |b|)."""
    a, b = a.detach().double(), b.detach().double()
    return ((a - b).abs().max() / b.abs().max().clamp_min(1.0)).item()


def _rot(theta: torch.Tensor) -> torch.Tensor:
    c, s = torch.cos(theta), torch.sin(theta)
    return torch.block_diag(
        *[torch.stack([torch.stack([ci, -si]), torch.stack([si, ci])]) for ci, si in zip(c, s, strict=True)]
    )


def reference(
    layer: LinearRecurrence, u: torch.Tensor, h0: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(y, natural states) by a float64 loop over t; differentiable w.r.t. the layer's parameters."""
    p, norm = layer.param, type(layer.norm).__name__
    kind = type(p).__name__
    d, n_state, heads = layer.d_model, layer.state_dim, layer.heads
    act = {None: lambda x: x, torch.tanh: torch.tanh, torch.relu: torch.relu}[layer.act]
    u = u.double()
    x = torch.zeros(u.shape[0], n_state, dtype=torch.float64) if h0 is None else h0.double()
    if kind == "ComplexDiagonal":  # complex arithmetic throughout; the real form is only read at the end
        lam = torch.exp(-torch.exp(p.nu_log.double()) + 1j * torch.exp(p.theta_log.double()))
        Bc = p.B_re.double() + 1j * p.B_im.double()
        Cc = p.C_re.double() + 1j * p.C_im.double()
        one_minus = 1 - lam.abs() ** 2
        if norm == "Xi":
            gain = ((Bc.abs() ** 2).sum(1) / one_minus).view(heads, -1).sum(1)
            scale = gain.rsqrt().repeat_interleave(n_state // 2 // heads)
        elif norm == "Gamma":
            scale = torch.exp(layer.norm.gamma_log.double())
        elif norm == "GammaRecomputed":
            scale = one_minus.sqrt()
        else:
            scale = torch.ones_like(one_minus)
        Bc = scale[:, None] * Bc
        xc = x[:, 0::2] + 1j * x[:, 1::2]
        ys, xs = [], []
        for t in range(u.shape[1]):
            xc = lam * xc + u[:, t].to(Bc.dtype) @ Bc.T
            if layer.act is not None:
                xc = act(xc.real) + 1j * act(xc.imag)
            ys.append((xc @ Cc.T).real + p.D.double() * u[:, t])
            xs.append(torch.stack([xc.real, xc.imag], -1).flatten(-2))
        return torch.stack(ys, 1), torch.stack(xs, 1)
    Bm, C = p.B.double(), p.C.double()
    if kind == "Rotation":
        n = n_state // heads
        P = torch.linalg.matrix_exp(p.M.double() - p.M.double().transpose(1, 2))
        gamma = torch.exp(-torch.exp(p.gamma_log.double()))
        A_h = [gamma[h] * P[h] @ _rot(p.theta[h].double()) @ P[h].T for h in range(heads)]
        A = torch.block_diag(*A_h)
        if norm == "Xi":  # ξ_h = sqrt(1 − γ_h²)/‖B_h‖_F, literally
            xi = torch.sqrt(1 - gamma**2) / Bm.view(heads, n, d).square().sum((1, 2)).sqrt()
            Bm = xi.repeat_interleave(n)[:, None] * Bm
        elif norm in ("Gamma", "GammaRecomputed"):  # per complex mode of the Pᵀ basis
            g = (
                torch.exp(layer.norm.gamma_log.double())
                if norm == "Gamma"
                else torch.sqrt(1 - gamma**2).repeat_interleave(n // 2)
            )
            Pbd = torch.block_diag(*P)
            Bm = Pbd @ torch.diag(g.repeat_interleave(2)) @ Pbd.T @ Bm
    elif kind == "RealDiagonal":
        lam = torch.exp(-torch.exp(p.nu_log.double()))
        A = torch.diag(lam)
        if norm == "Xi":
            gain = (Bm.square().sum(1) / (1 - lam**2)).view(heads, -1).sum(1)
            Bm = gain.rsqrt().repeat_interleave(n_state // heads)[:, None] * Bm
        elif norm == "Gamma":
            Bm = torch.exp(layer.norm.gamma_log.double())[:, None] * Bm
        elif norm == "GammaRecomputed":
            Bm = torch.sqrt(1 - lam**2)[:, None] * Bm
    elif kind == "Dense":
        n = n_state // heads
        A = torch.block_diag(*p.A.double())
        if norm == "Xi":  # stationary covariance from scipy's Lyapunov solver (no grad: checked by value)
            scale = []
            for h in range(heads):
                Ah, Bh = p.A[h].detach().double().numpy(), Bm[h * n : (h + 1) * n].detach().numpy()
                S = scipy.linalg.solve_discrete_lyapunov(Ah, Bh @ Bh.T)
                scale.append(1 / np.sqrt(np.trace(S)))
            Bm = torch.tensor(scale, dtype=torch.float64).repeat_interleave(n)[:, None] * Bm
        elif norm in ("Gamma", "GammaRecomputed"):
            g = (
                torch.exp(layer.norm.gamma_log.double())
                if norm == "Gamma"
                else torch.sqrt(1 - p.A.double().square().sum((1, 2)) / n)
            )
            Bm = g.repeat_interleave(n)[:, None] * Bm
    ys, xs = [], []
    for t in range(u.shape[1]):
        x = act(x @ A.T + u[:, t] @ Bm.T)
        ys.append(x @ C.T + p.D.double() * u[:, t])
        xs.append(x)
    return torch.stack(ys, 1), torch.stack(xs, 1)


def _grads(layer: torch.nn.Module, y: torch.Tensor, w: torch.Tensor) -> list[torch.Tensor]:
    params = [q for q in layer.parameters() if q.requires_grad]
    return list(torch.autograd.grad((y * w).sum(), params))


CASES = [
    (p, n, "none")
    for p in ("rotation", "complex_diagonal", "real_diagonal", "dense")
    for n in ("xi", "gamma", "gamma_recomputed", "none")
]
CASES += [(p, "xi", a) for p in ("rotation", "complex_diagonal") for a in ("tanh", "relu")]


@pytest.mark.parametrize("param,norm,nonlin", CASES)
def test_modes_match_reference(param: str, norm: str, nonlin: str) -> None:
    torch.manual_seed(0)
    layer = LinearRecurrence(D, N, H, param, norm, nonlin, RING)
    u, h0, w = torch.randn(B, L, D), 0.5 * torch.randn(B, N), torch.randn(B, L, D)
    y_ref, x_ref = reference(layer, u, h0)
    # dense + ξ: the reference scale comes from scipy (no gradient), so compare its gradient by value
    # only through the other parameters; every other case checks every parameter's gradient.
    g_ref = None if (param == "dense" and norm == "xi") else _grads(layer, y_ref, w.double())
    modes = ("scan", "conv", "sequential") if layer.parallel else ("sequential",)
    for mode in modes:
        layer.mode = mode
        y, x = layer(u, return_states=True, h0=h0)
        assert y.dtype == torch.float32
        assert close(y, y_ref) < TOL, (mode, close(y, y_ref))
        assert close(x, x_ref) < TOL, (mode, close(x, x_ref))
        if g_ref is not None:
            for g, gr in zip(_grads(layer, y, w), g_ref, strict=True):
                assert close(g, gr) < TOL, (mode, close(g, gr))
    # streaming: step() with a carried state, and forward() in two chunks handing the state over
    state, ys = h0, []
    for t in range(L):
        y_t, state = layer.step(u[:, t], state)
        ys.append(y_t)
    assert close(torch.stack(ys, 1), y_ref) < TOL
    layer.mode = "scan"
    y1, x1 = layer(u[:, : L // 2], return_states=True, h0=h0)
    y2 = layer(u[:, L // 2 :], h0=x1[:, -1])
    assert close(torch.cat([y1, y2], 1), y_ref) < TOL


def test_dense_xi_scale_matches_lyapunov() -> None:
    """The doubling sum behind dense ξ equals scipy's Lyapunov solution (the gradient case above skips it)."""
    torch.manual_seed(1)
    layer = LinearRecurrence(D, N, H, "dense", "xi", "none", RING)
    gain = layer.param.head_gain().double()
    n = N // H
    for h in range(H):
        Ah, Bh = (
            layer.param.A[h].detach().double().numpy(),
            layer.param.B[h * n : (h + 1) * n].detach().double().numpy(),
        )
        S = scipy.linalg.solve_discrete_lyapunov(Ah, Bh @ Bh.T)
        assert abs(gain[h].item() - np.trace(S)) < 1e-4 * np.trace(S)


@pytest.mark.parametrize("cls", [MinGRU, MinLSTM])
def test_minrnn_log_space_equals_sequential_reference(cls: type) -> None:
    """Log-space scan, sequential mode and step() all equal a float64 loop of the paper's equations."""
    torch.manual_seed(0)
    layer = cls(D, N)
    u, w = torch.randn(B, L, D), torch.randn(B, L, D)
    h0 = torch.rand(B, N) + 0.1  # states of this recurrence are positive

    def ref(h0: torch.Tensor | None) -> torch.Tensor:
        Wt, bias = layer.proj.weight.double(), layer.proj.bias.double()
        h = torch.zeros(B, N, dtype=torch.float64) if h0 is None else h0.double()
        out = []
        for t in range(L):
            k = (u[:, t].double() @ Wt.T + bias).view(B, -1, N)
            cand = k[:, -1]
            gc = torch.where(cand >= 0, cand + 0.5, torch.sigmoid(cand))
            if cls is MinGRU:
                z = torch.sigmoid(k[:, 0])
                h = (1 - z) * h + z * gc
            else:
                f, i = torch.sigmoid(k[:, 0]), torch.sigmoid(k[:, 1])
                h = f / (f + i) * h + i / (f + i) * gc
            out.append(h)
        return layer.out(torch.stack(out, 1).float()) if N != D else torch.stack(out, 1)

    for start in (None, h0):
        y_ref = ref(start)
        g_ref = _grads(layer, y_ref, w)
        for mode in ("scan", "sequential"):
            layer.mode = mode
            y = layer(u, h0=start)
            assert close(y, y_ref) < TOL, (mode, close(y, y_ref))
            # The torch backend's Heinsen form subtracts cumulative sums |Σ log a| ≈ 30 here, so its
            # float32 gradients carry ~30·eps more error than a direct loop (1.4e-5 seen): 3e-5.
            for g, gr in zip(_grads(layer, y, w), g_ref, strict=True):
                assert close(g, gr) < (TOL if mode == "sequential" else 3 * TOL)
        state = layer.initial_state(B) if start is None else start
        ys = []
        for t in range(L):
            y_t, state = layer.step(u[:, t], state)
            ys.append(y_t)
        assert close(torch.stack(ys, 1), y_ref) < TOL


def test_applying_p_twice_is_caught() -> None:
    """The public-listing mistake (P B on the way in and P on the way out, docs/science.md §2.1) fails the
    comparison with the reference that the correct layer passes."""
    from ablate.models.parameterisations import Rotation, System

    class PTwice(Rotation):
        def system(self, scale: torch.Tensor | None) -> System:
            right = super().system(scale)
            H, n, d = self.heads, self.n, self.d_model
            wrong_B = torch.einsum("hij,hjd->hid", right.P, self.B.view(H, n, d)).reshape(self.state_dim, d)
            if scale is not None:
                wrong_B = wrong_B * scale.repeat_interleave(2)[:, None]
            return System(right.lam, wrong_B, right.C, right.D, right.P)

    torch.manual_seed(0)
    layer = LinearRecurrence(D, N, H, "rotation", "xi", "none", RING)
    u = torch.randn(B, L, D)
    y_ref, _ = reference(layer, u, None)
    assert close(layer(u), y_ref) < TOL
    layer.param.__class__ = PTwice
    assert close(layer(u), y_ref) > 1e-2


@pytest.mark.parametrize("norm", ["none", "gamma", "gamma_recomputed", "xi"])
def test_lru_with_conjugate_pairs_equals_rotation_with_heads_of_two(norm: str) -> None:
    """docs/science.md §2.5: LRU with K modes == rotation with K heads of size 2, P = I, γ_h = |λ_h|."""
    torch.manual_seed(0)
    d, N = 5, 8
    K = N // 2
    lru = LinearRecurrence(
        d, N, K, "complex_diagonal", norm, "none", RingInit(r_min=0.5, r_max=0.99, max_phase=3.0)
    )
    rot = LinearRecurrence(d, N, K, "rotation", norm, "none", RotrnnInit(identity_basis=True))
    with torch.no_grad():
        a, b = lru.param, rot.param
        b.gamma_log.copy_(a.nu_log)  # γ = exp(−exp(γ_log)) and |λ| = exp(−exp(ν_log))
        b.theta.copy_(torch.exp(a.theta_log)[:, None])
        b.B.copy_(torch.stack([a.B_re, a.B_im], 1).reshape(N, d))
        b.C.copy_(torch.stack([a.C_re, -a.C_im], -1).reshape(d, N))  # Re(c·x) = [Re c, −Im c]·(Re x, Im x)
        b.D.copy_(a.D)
        if norm == "gamma":
            rot.norm.gamma_log.copy_(lru.norm.gamma_log)
    assert not isinstance(rot.param.M, torch.nn.Parameter) and (rot.param.basis() == torch.eye(2)).all()
    u = torch.randn(3, 50, d)
    y_lru, x_lru = lru(u, return_states=True)
    y_rot, x_rot = rot(u, return_states=True)
    assert (y_lru - y_rot).abs().max() < 1e-5
    assert (x_lru - x_rot).abs().max() < 1e-5
    ev_lru, ev_rot = lru.eigenvalues(), rot.eigenvalues()[:K]
    assert (ev_lru - ev_rot).abs().max() < 1e-6
    # and against the independent complex-arithmetic loop, not only the shared scan path
    y_ref, _ = reference(lru, u, None)
    assert close(y_rot, y_ref) < TOL
