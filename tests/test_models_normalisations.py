"""Normalisations (ablate.models.normalisations) where they need more than the modes' reference:
ξ of a dense head over the task's horizon (finite for every A, equal to the stationary ξ where
that exists) and the Lyapunov sum behind it, and a dense × ξ grid that trains instead of diverging."""

from __future__ import annotations

import pytest
import torch

from ablate import training
from ablate.models.parameterisations import log_state_power
from ablate.models.recurrent import LinearRecurrence
from ablate.spec import ProbeSpec, RotrnnInit
from ablate.tasks.data import TaskData, TaskInfo

INIT = RotrnnInit(gamma_min=0.5, gamma_max=0.9, max_phase=0.5)


def plain_sum(A: torch.Tensor, Q: torch.Tensor, horizon: int) -> torch.Tensor:
    """log tr Σ_{t<L} A^t Q A^tᵀ per head by the loop the name says, in float64."""
    S, Ak = torch.zeros_like(Q), torch.eye(A.shape[-1], dtype=A.dtype).expand_as(A)
    for _ in range(horizon):
        S, Ak = S + Ak @ Q @ Ak.mT, Ak @ A
    return torch.diagonal(S, dim1=-2, dim2=-1).sum(-1).log()


def with_radius(rho: float, H: int = 3, n: int = 6, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(H, n, n, generator=g, dtype=torch.float64)
    A = rho * A / torch.linalg.eigvals(A).abs().amax(-1)[:, None, None]
    Bm = torch.randn(H, n, 4, generator=g, dtype=torch.float64)
    return A, Bm @ Bm.mT


@pytest.mark.parametrize("rho", [0.5, 0.99, 1.0, 1.05, 1.5])
@pytest.mark.parametrize("horizon", [1, 2, 3, 7, 64, 100, 1000])
def test_log_state_power_equals_the_plain_sum(rho: float, horizon: int) -> None:
    """Binary powering = the loop, in float64 to rounding and in float32 to 2e-4 in the log (the
    power to 0.02%: non-normal A amplify float32 rounding, 6e-5 seen), inside and outside the unit
    circle; where the sum itself overflows float64 the log stays finite."""
    A, Q = with_radius(rho)
    want = plain_sum(A, Q, horizon)
    got = log_state_power(A, Q, horizon)
    if torch.isfinite(want).all():
        assert (got - want).abs().max() < 1e-12 * want.abs().max().clamp_min(1)
        got32 = log_state_power(A.float(), Q.float(), horizon).double()
        assert (got32 - want).abs().max() < 2e-4
    assert torch.isfinite(got).all()
    A32, Q32 = (t.float().requires_grad_() for t in (A, Q))
    log_state_power(A32, Q32, 1 << 16).sum().backward()  # ρ^(2^17) is far beyond float32
    assert torch.isfinite(A32.grad).all() and torch.isfinite(Q32.grad).all()


def test_log_state_power_gradient() -> None:
    g = torch.Generator().manual_seed(1)
    A = (0.4 * torch.randn(2, 4, 4, generator=g, dtype=torch.float64)).requires_grad_()
    Bm = torch.randn(2, 4, 3, generator=g, dtype=torch.float64).requires_grad_()
    assert torch.autograd.gradcheck(lambda A, Bm: log_state_power(A, Bm @ Bm.mT, 37), (A, Bm))
    with pytest.raises(ValueError, match="horizon must be at least 1"):
        log_state_power(A, Bm @ Bm.mT, 0)


def test_dense_xi_at_the_horizon_is_the_stationary_xi_up_to_gamma_power() -> None:
    """A dense head in the rotation family (identity basis: A_h = γ_h Θ_h) has state power
    ‖B_h‖²(1 − γ_h^{2t})/(1 − γ_h²) at every step t, so the horizon-L ξ is the stationary ξ
    divided by sqrt(1 − γ_h^{2L}); at a long horizon the two agree to 1e-6."""
    torch.manual_seed(0)
    init = RotrnnInit(gamma_min=0.5, gamma_max=0.9, max_phase=0.5, identity_basis=True)
    for horizon in (5, 20, 2000):
        layer = LinearRecurrence(3, 8, 2, "dense", "xi", "none", init, horizon=horizon)
        p = layer.param
        gamma = torch.linalg.eigvals(p.A.detach().double()).abs().amax(-1)
        stationary = torch.rsqrt(p.head_gain().double())
        xi = layer.norm(p).double()  # per unit: a dense unit is a head
        want = stationary / torch.sqrt(1 - gamma ** (2 * horizon))
        assert ((xi - want).abs() / want).max() < 2e-6, horizon
        if horizon == 2000:
            assert ((xi - stationary).abs() / stationary).max() < 1e-6


@pytest.mark.parametrize("heads", [1, 2])
def test_dense_xi_past_the_unit_circle_is_finite_with_unit_power_at_the_horizon(heads: int) -> None:
    """ρ(A) = 1.2: the stationary power is infinite (reported as inf, not NaN) while ξ at the horizon
    is finite and makes the expected state power exactly 1 at t = L."""
    torch.manual_seed(0)
    L = 48
    layer = LinearRecurrence(3, 8, heads, "dense", "xi", "none", INIT, horizon=L)
    with torch.no_grad():
        A = layer.param.A
        A.mul_(1.2 / torch.linalg.eigvals(A).abs().amax(-1)[:, None, None])
    scale = layer.norm(layer.param)
    assert torch.isfinite(scale).all() and (scale > 0).all()
    report = layer.dynamics(L)
    assert report.stationary_norms is not None and report.expected_norms is not None
    assert torch.isinf(report.stationary_norms).all()
    assert torch.allclose(report.expected_norms[-1].double(), torch.ones(heads, dtype=torch.float64), rtol=1e-4)
    y = layer(torch.randn(2, L, 3))
    assert torch.isfinite(y).all()


def dense_xi_data(L: int = 32, n: int = 256) -> TaskData:
    """Tokens whose class is the count of token 1 mod 3: the recurrence has to carry it to the end."""
    g = torch.Generator().manual_seed(0)
    info = TaskInfo("toy", "tokens", 8, 1, 3, "classification", "accuracy", 1 / 3, L, "v0")

    def split(k: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randint(1, 8, (k, L), generator=g)
        return x, (x == 1).sum(1) % 3

    return TaskData(info, split(n), split(32), split(32))


@pytest.fixture
def one_thread():
    """Tiny matrices in a sequential loop: torch's thread pool only adds waits (10x on a busy machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("nonlinearity", ["none", "tanh", "relu"])
@pytest.mark.parametrize("heads", [1, 4])
def test_dense_xi_trains_200_steps_without_diverging(nonlinearity: str, heads: int) -> None:
    """The dense × ξ cells of a grid over every parameterisation × normalisation × nonlinearity at
    lr 1e-3 (each of these diverged between steps 22 and 74 with the stationary ξ: its Lyapunov sum
    became infinite once a head left the unit disc, and ξ → 0·∞) train their 200 steps, probed."""
    config = {
        "task": {},
        "model": {"d_model": 8, "state_dim": 8, "layers": 1, "parameterisation": "dense", "normalisation": "xi",
                  "nonlinearity": nonlinearity, "heads": heads,
                  "init": {"scheme": "rotrnn", "gamma_min": 0.5, "gamma_max": 0.999, "max_phase": 0.0314}},
        "train": {"steps": 200, "batch_size": 8, "lr": 1e-3, "eval_every": 200},
    }
    result = training.run_trial(config, 0, ProbeSpec(every=100, batch=8, white_noise_batch=4), data=dense_xi_data())
    assert (result.status, result.steps) == ("complete", 200), result.reason
    assert all(torch.isfinite(torch.tensor(v)) for v in result.metrics.values() if isinstance(v, float))
