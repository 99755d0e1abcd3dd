"""Every mode of every layer equals a plain float64 reference loop written here from the raw parameters,
in every dtype the layers accept (float32, float64, bfloat16, float16).

The reference does not use ``System`` or the scan basis: rotation builds A_h = γ_h P_h Θ_h P_hᵀ,
the complex diagonal runs a complex loop, dense ξ sums its state power over the horizon by a loop
(its stationary form is checked against scipy's Lyapunov solver). Outputs and gradients must agree
to ``TOLS[dtype]`` relative to the size of the compared tensor (floored at 1): 1e-5 in float32;
in half precision the layer's inputs, weights and matrix products are rounded to 8 (bf16) or 11
(fp16) bits, while the recurrences are carried in float32 as the scans carry them.
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
DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
# (outputs and states, gradients). float64: the reference's arithmetic in another order (5e-14
# seen). Half: in units u of the format's rounding (2^-8 bf16, 2^-11 fp16), 8u for outputs (3.4u
# seen) and 16u for gradients, whose backward matmuls round again (12u seen, at a relu's kinks).
TOLS = {torch.float32: (TOL, TOL), torch.float64: (1e-12, 1e-12), torch.bfloat16: (8 * 2**-8, 16 * 2**-8),
        torch.float16: (8 * 2**-11, 16 * 2**-11)}


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
        if norm == "Xi":  # E‖x_L‖² = 1 at the horizon L: (tr Σ_{t<L} A^t B Bᵀ A^tᵀ)^(−1/2), a loop
            scale = []
            for h in range(heads):
                Ah, Bh = p.A[h].double(), Bm[h * n : (h + 1) * n]
                S, Ak = torch.zeros(n, n, dtype=torch.float64), torch.eye(n, dtype=torch.float64)
                for _ in range(layer.horizon):
                    S, Ak = S + Ak @ Bh @ Bh.T @ Ak.T, Ak @ Ah
                scale.append(S.trace().rsqrt())
            Bm = torch.stack(scale).repeat_interleave(n)[:, None] * Bm
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


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("param,norm,nonlin", CASES)
def test_modes_match_reference(param: str, norm: str, nonlin: str, dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    tol, gtol = TOLS[dtype]
    layer = LinearRecurrence(D, N, H, param, norm, nonlin, RING, horizon=L).to(dtype)
    u, h0, w = (t.to(dtype) for t in (torch.randn(B, L, D), 0.5 * torch.randn(B, N), torch.randn(B, L, D)))
    y_ref, x_ref = reference(layer, u, h0)
    g_ref = _grads(layer, y_ref, w.double())
    modes = ("scan", "conv", "sequential") if layer.parallel else ("sequential",)
    for mode in modes:
        layer.mode = mode
        y, x = layer(u, return_states=True, h0=h0)
        assert y.dtype == x.dtype == dtype
        assert close(y, y_ref) < tol, (mode, close(y, y_ref))
        assert close(x, x_ref) < tol, (mode, close(x, x_ref))
        for g, gr in zip(_grads(layer, y, w), g_ref, strict=True):
            assert g.dtype == dtype
            assert close(g, gr) < gtol, (mode, close(g, gr))
    # streaming: step() from the layer's own zero state and from a given one, and forward() in
    # two chunks handing the state over
    zero = layer.initial_state(B)
    assert zero.dtype == dtype and zero.device == u.device and not zero.any()
    for start, want in ((zero, reference(layer, u, None)[0]), (h0, y_ref)):
        state, ys = start, []
        for t in range(L):
            y_t, state = layer.step(u[:, t], state)
            ys.append(y_t)
        assert state.dtype == y_t.dtype == dtype
        assert close(torch.stack(ys, 1), want) < tol, close(torch.stack(ys, 1), want)
    layer.mode = "scan"
    y1, x1 = layer(u[:, : L // 2], return_states=True, h0=h0)
    y2 = layer(u[:, L // 2 :], h0=x1[:, -1])
    assert close(torch.cat([y1, y2], 1), y_ref) < tol


def test_dense_stationary_gain_matches_lyapunov() -> None:
    """The doubling sum behind a dense head's stationary power equals scipy's Lyapunov solution."""
    torch.manual_seed(1)
    layer = LinearRecurrence(D, N, H, "dense", "xi", "none", RING, horizon=L)
    gain = layer.param.head_gain().double()
    n = N // H
    for h in range(H):
        Ah, Bh = (
            layer.param.A[h].detach().double().numpy(),
            layer.param.B[h * n : (h + 1) * n].detach().double().numpy(),
        )
        S = scipy.linalg.solve_discrete_lyapunov(Ah, Bh @ Bh.T)
        assert abs(gain[h].item() - np.trace(S)) < 1e-4 * np.trace(S)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("cls", [MinGRU, MinLSTM])
def test_minrnn_log_space_equals_sequential_reference(cls: type, dtype: torch.dtype) -> None:
    """Log-space scan, sequential mode and step() all equal a float64 loop of the paper's equations."""
    torch.manual_seed(0)
    tol, gtol = TOLS[dtype]
    layer = cls(D, N).to(dtype)
    u, w = torch.randn(B, L, D).to(dtype), torch.randn(B, L, D).to(dtype)
    h0 = (torch.rand(B, N) + 0.1).to(dtype)  # states of this recurrence are positive

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
        return layer.out(torch.stack(out, 1).to(dtype)) if N != D else torch.stack(out, 1)

    for start in (None, h0):
        y_ref = ref(start)
        g_ref = _grads(layer, y_ref, w)
        for mode in ("scan", "sequential"):
            layer.mode = mode
            y = layer(u, h0=start)
            assert y.dtype == dtype
            assert close(y, y_ref) < tol, (mode, close(y, y_ref))
            # The torch backend's Heinsen form subtracts cumulative sums |Σ log a| ≈ 30 here, so its
            # float32 gradients carry ~30·eps more error than a direct loop (1.4e-5 seen): 3e-5.
            for g, gr in zip(_grads(layer, y, w), g_ref, strict=True):
                assert close(g, gr) < (gtol if mode == "sequential" else 3 * gtol)
        state = layer.initial_state(B) if start is None else start
        assert state.dtype == dtype
        ys = []
        for t in range(L):
            y_t, state = layer.step(u[:, t], state)
            ys.append(y_t)
        assert state.dtype == y_t.dtype == dtype
        assert close(torch.stack(ys, 1), y_ref) < tol


@pytest.mark.parametrize("cls", [MinGRU, MinLSTM])
def test_minrnn_refuses_modes_it_does_not_have(cls: type) -> None:
    """conv has no meaning for an input-dependent recurrence: an error naming the layer's modes,
    not a silent log-space scan; the same through Network.set_mode."""
    from types import SimpleNamespace as NS

    from ablate.models import build_model

    layer = cls(D, N)
    assert layer.modes == ("scan", "sequential") and layer.mode == "scan"
    with pytest.raises(ValueError, match=f"{cls.__name__} has no mode 'conv'; its modes: scan, sequential"):
        layer.mode = "conv"
    assert layer.mode == "scan"
    task = NS(input_kind="tokens", vocab_size=5, input_dim=1, num_classes=2, output_kind="classification", seq_len=L)
    spec = NS(family=cls.__name__.lower(), d_model=D, state_dim=N, layers=1, norm="layer", activation="gelu",
              dropout=0.0, bidirectional=False, pooling="mean")
    net = build_model(spec, task)
    net.set_mode("sequential")
    assert all(layer.mode == "sequential" for layer in net.recurrent_layers())
    with pytest.raises(ValueError, match="has no mode 'conv'"):
        net.set_mode("conv")


def test_every_recurrent_layer_declares_its_modes() -> None:
    """The composed layer has all three modes; torch's GRU/LSTM have one fixed computation and
    refuse any; an unknown mode names the valid ones."""
    from ablate.models.baselines import TorchGRU, TorchLSTM

    layer = LinearRecurrence(D, N, H, "rotation", "xi", "none", RING, horizon=L)
    assert layer.modes == ("scan", "conv", "sequential") and layer.mode == "scan"
    with pytest.raises(ValueError, match="LinearRecurrence has no mode 'fft'; its modes: scan, conv, sequential"):
        layer.mode = "fft"
    for cls in (TorchGRU, TorchLSTM):
        base = cls(D, N)
        assert base.modes == ()
        with pytest.raises(ValueError, match="one fixed computation"):
            base.mode = "scan"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", ["gru", "lstm"])
def test_torch_baselines_step_in_their_dtype(name: str, dtype: torch.dtype) -> None:
    """initial_state follows the layer's dtype, and stepping from it reproduces the forward pass."""
    from ablate.models.baselines import TorchGRU, TorchLSTM

    torch.manual_seed(0)
    layer = {"gru": TorchGRU, "lstm": TorchLSTM}[name](D, N).to(dtype)
    u = torch.randn(B, L, D).to(dtype)
    state = layer.initial_state(B)
    for s in state if isinstance(state, tuple) else (state,):
        assert s.dtype == dtype and not s.any()
    ys = []
    for t in range(L):
        y_t, state = layer.step(u[:, t], state)
        ys.append(y_t)
    assert close(torch.stack(ys, 1), layer(u)) < TOLS[dtype][0]


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
    layer = LinearRecurrence(D, N, H, "rotation", "xi", "none", RING, horizon=L)
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
        d, N, K, "complex_diagonal", norm, "none", RingInit(r_min=0.5, r_max=0.99, max_phase=3.0), horizon=L
    )
    rot = LinearRecurrence(d, N, K, "rotation", norm, "none", RotrnnInit(identity_basis=True), horizon=L)
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
