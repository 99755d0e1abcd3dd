"""How the state matrix is built: rotation, complex diagonal, real diagonal, dense.

Every parameterisation hands the layer a ``System`` for one forward pass, in its *scan basis*:
diagonal eigenvalues ``lam`` plus real input/output matrices. Complex modes are stored as
interleaved real coordinates (re, im) — the bridge of docs/science.md §1.3 — so a rotation head of size n is
n/2 conjugate-pair complex modes with a shared magnitude γ_h in the basis Pᵀ, and the rotation and
the complex-diagonal parameterisations share one scan path.

Normalisation acts through "units": the things one input scale applies to (a complex mode, a real
mode, or a dense head). A parameterisation tells the normalisations each unit's head and eigenvalue
magnitude, and each head's stationary state power under white unit-variance input (for ξ). For the
probes (through ``LinearRecurrence.dynamics``) it also gives its modes with their heads and each
head's decay.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ablate.models.inits import InitScheme
from ablate.ops.expm import skew_expm
from ablate.ops.scan import widened
from ablate.ops.serial import serial


@dataclass
class System:
    """The linear system x_t = A x_{t-1} + B u_t, y_t = C x_t + D ⊙ u_t of one forward pass.

    ``lam``: scan eigenvalues, (K,) complex for N = 2K interleaved (re, im) coordinates, or (N,) real.
    ``B`` (N, d), ``C`` (d, N): real, in the scan basis, normalisation already applied to B.
    ``P`` (H, n, n): the natural state of head h is x^h = P_h z^h; None when the bases coincide.
    ``A`` (N, N): natural-basis matrix, set only by parameterisations that have no scan (dense).
    ``log_mag``: log |λ| per entry of ``lam`` from the stored parameters (log γ_h, −exp(ν)), for
    the closed forms near |λ| = 1, where |λ| read back from a complex64 λ is off by ~1e-7.
    """

    lam: torch.Tensor | None
    B: torch.Tensor
    C: torch.Tensor
    D: torch.Tensor
    P: torch.Tensor | None = None
    A: torch.Tensor | None = None
    log_mag: torch.Tensor | None = None

    @property
    def complex_modes(self) -> bool:
        return self.lam is not None and self.lam.is_complex()

    def natural(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(A, B, C) as real matrices in the natural basis: what a sequential loop iterates.

        A is in the dtype the recurrence is carried in (``widened``: float32 for a half-precision
        layer, whose bf16 A would round γ = 0.999 to 1), B and C in the layer's dtype."""
        wide = widened(self.B.dtype)
        if self.A is not None:
            return self.A.to(wide), self.B, self.C
        assert self.lam is not None
        if self.complex_modes:
            re, im = self.lam.real, self.lam.imag
            blocks = torch.stack([torch.stack([re, -im], -1), torch.stack([im, re], -1)], -2)  # r·R(θ)
            A = torch.block_diag(*blocks.unbind(0)).to(wide)
        else:
            A = torch.diag(self.lam.to(wide))
        B, C = self.B, self.C
        if self.P is not None:
            P = torch.block_diag(*self.P.unbind(0))
            Pw = P.to(wide)
            A, B, C = Pw @ A @ Pw.T, P @ B, C @ P.T
        return A, B, C


def _check_heads(name: str, units: int, heads: int, what: str) -> int:
    if heads < 1 or units % heads:
        valid = [h for h in range(1, units + 1) if units % h == 0]
        raise ValueError(f"{name}: heads={heads} must divide the {units} {what}; valid heads: {valid}")
    return units // heads


class Parameterisation(nn.Module):
    """Base: holds D and the shapes; subclasses hold the recurrent parameters.

    The shapes every method keeps (docs/plugins.md §2 tabulates them; ``ablate.models.contract``
    checks a plug-in's against them): with N = state_dim and H = heads, a *unit* is one entry of the
    system's ``lam`` (a complex mode: two interleaved rows of B; or a real mode), or a whole head
    where there is no ``lam`` (dense); ``unit_head`` (units,) holds each unit's head, in [0, H),
    each head's units consecutive."""

    sequential_only = False  # True: no diagonal form, the layer must loop over time

    def __init__(self, d_model: int, state_dim: int, heads: int, init: InitScheme):
        super().__init__()
        self.d_model, self.state_dim, self.heads = d_model, state_dim, heads
        self.D = nn.Parameter(torch.randn(d_model))
        self.register_buffer("unit_head", torch.zeros(0, dtype=torch.long), persistent=False)

    def recurrent_parameters(self) -> list[nn.Parameter]:
        """Parameters that take the recurrent learning-rate factor and no weight decay: those λ and
        B are made of (never empty for a linear recurrence, or they would train as the rest)."""
        raise NotImplementedError

    def unit_log_magnitude(self) -> torch.Tensor:
        """(units,) = (len(unit_head),) log |λ| per normalisation unit, from the live parameters."""
        raise NotImplementedError

    def head_gain(self) -> torch.Tensor:
        """(H,) stationary E‖x^h‖² under white unit-variance input with no normalisation: one per
        head (not per unit), Σ ‖b_j‖² / (1 − |λ_j|²) over the head's units; finite and > 0."""
        raise NotImplementedError

    def head_xi(self, horizon: int) -> torch.Tensor:
        """(H,) ξ_h: the input scale that makes head h's state power under white unit-variance
        input 1 (docs/science.md §3.1). Here the stationary power's −1/2: for a rotation head
        the power is then 1 at every step from a stationary start, whatever the horizon."""
        return torch.rsqrt(self.head_gain())

    def system(self, scale: torch.Tensor | None) -> System:
        """The system of this pass; ``scale`` (units,) multiplies each unit's rows of B (a complex
        mode's two: ``scale.repeat_interleave(2)``)."""
        raise NotImplementedError

    def eigenvalues(self) -> torch.Tensor:
        """The spectrum, complex, with or without conjugates (``Rotation``: 2K, ``ComplexDiagonal``:
        K); only the default ``head_decay`` reads it, per head as consecutive equal groups."""
        raise NotImplementedError

    def modes(self, system: System) -> tuple[torch.Tensor, torch.Tensor]:
        """(eigenvalues, head of each) of ``system``: the scan's modes, one per conjugate pair."""
        assert system.lam is not None
        return system.lam.detach(), self.unit_head.detach()

    def head_decay(self) -> torch.Tensor:
        """(H,) largest |eigenvalue| per head: the slowest mode's decay."""
        return self.eigenvalues().detach().abs().view(self.heads, -1).amax(1)


def polar_modes(log_mag: torch.Tensor, phase: torch.Tensor) -> torch.Tensor:
    """λ = exp(log|λ| + i·phase); from half-precision parameters in complex64 (torch has no
    bf16 complex dtype, and no exp for complex32)."""
    return torch.exp(torch.complex(log_mag.to(widened(log_mag.dtype)), phase.to(widened(phase.dtype))))


def one_minus_mag_sq(log_mag: torch.Tensor) -> torch.Tensor:
    """1 − |λ|² from log |λ| without the cancellation of 1 − exp(·) near the unit circle."""
    return -torch.expm1(2 * log_mag)


class Rotation(Parameterisation):
    """RotRNN: per head A_h = γ_h P_h Θ_h P_hᵀ, P_h = expm(M_h − M_hᵀ), γ_h = exp(−exp(γ_log_h)).

    The scan runs on z = Pᵀ x: block-diagonal rotations are conjugate-pair complex modes
    λ = γ_h e^{iθ}. The input enters as Pᵀ B u and the state leaves as x = P z (C P on the way
    out) — P on one side, Pᵀ on the other, never P twice (docs/science.md §2.1).
    """

    def __init__(self, d_model: int, state_dim: int, heads: int, init: InitScheme):
        super().__init__(d_model, state_dim, heads, init)
        n = _check_heads("rotation", state_dim, heads, "state coordinates")
        if n % 2:
            raise ValueError(f"rotation: head size state_dim/heads = {n} must be even")
        self.n = n
        skew = torch.zeros(heads, n, n) if init.identity_basis else torch.randn(heads, n, n)
        if init.identity_basis:  # P = I fixed: a buffer, so it neither trains nor decays
            self.register_buffer("M", skew)
        else:
            self.M = nn.Parameter(skew)
        self.gamma_log = nn.Parameter(torch.log(-torch.log(init.magnitudes(heads))))
        self.theta = nn.Parameter(init.phases((heads, n // 2)))
        b_std, c_std = init.io_std(d_model, state_dim)
        self.B = nn.Parameter(torch.randn(state_dim, d_model) * b_std)
        self.C = nn.Parameter(torch.randn(d_model, state_dim) * c_std)
        self.unit_head = torch.arange(state_dim // 2) // (n // 2)

    def recurrent_parameters(self) -> list[nn.Parameter]:
        return [p for p in (self.M, self.gamma_log, self.theta, self.B) if isinstance(p, nn.Parameter)]

    def log_gamma(self) -> torch.Tensor:
        return -torch.exp(self.gamma_log)

    def gamma(self) -> torch.Tensor:
        """(H,) per-head decay γ_h ∈ (0, 1)."""
        return torch.exp(self.log_gamma())

    def head_decay(self) -> torch.Tensor:
        return self.gamma().detach()  # every mode of a head decays by γ_h

    def basis(self) -> torch.Tensor:
        """(H, n, n) P_h = expm(M_h − M_hᵀ): orthogonal with det +1.

        ``skew_expm`` computes it in complex128 from one Hermitian eigendecomposition, with the
        exact Daleckii–Krein backward: orthogonal to float32 rounding, where a float32 matrix_exp
        of a skew matrix with N(0,1) entries reaches only ~2e-6 (the modes' 1e-5 agreement cannot
        afford that), and at a fraction of a float64 matrix_exp's cost.

        Where no graph is recorded (probes, evaluation, ``step``, a fixed identity basis) P is
        computed once for as long as M is unchanged and shared by every call; with autograd on,
        each forward builds its own, once, in ``system``.
        """
        M = self.M
        if torch.is_grad_enabled() and M.requires_grad:
            return skew_expm(_skew(M))
        # Same tensor object, same storage, not modified in place since (optimiser steps,
        # load_state_dict and copy_ all bump _version): the cached P is still this M's.
        key = (M.data_ptr(), M._version, M.dtype, M.device, M.shape)
        cached = self.__dict__.get("_basis_cache")
        if cached is None or cached[0] is not M or cached[1] != key:
            with torch.no_grad():
                cached = (M, key, skew_expm(_skew(M)))
            self.__dict__["_basis_cache"] = cached
        return cached[2]

    def state_matrices(self) -> torch.Tensor:
        """(H, n, n) A_h = γ_h P_h Θ_h P_hᵀ (without the ξ input scale)."""
        c, s = torch.cos(self.theta), torch.sin(self.theta)
        rot = torch.stack([torch.stack([c, -s], -1), torch.stack([s, c], -1)], -2)  # (H, n/2, 2, 2)
        theta = torch.stack([torch.block_diag(*r.unbind(0)) for r in rot.unbind(0)])
        P = self.basis()
        return self.gamma()[:, None, None] * P @ theta @ P.transpose(-1, -2)

    def unit_log_magnitude(self) -> torch.Tensor:
        return self.log_gamma().repeat_interleave(self.n // 2)

    def head_gain(self) -> torch.Tensor:
        # ξ_h = sqrt(1 − γ_h²) / ‖B_h‖_F is this gain to the power −1/2.
        b_sq = self.B.view(self.heads, self.n, self.d_model).square().sum((1, 2))
        return b_sq / one_minus_mag_sq(self.log_gamma())

    def _rotate(self, B: torch.Tensor, C: torch.Tensor, P: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(Pᵀ B, C P) in the scan basis, head by head."""
        H, n, d = self.heads, self.n, self.d_model
        Bz = torch.einsum("hij,hid->hjd", P, B.view(H, n, d)).reshape(self.state_dim, d)
        Cz = torch.einsum("ehi,hij->ehj", C.view(d, H, n), P).reshape(d, self.state_dim)
        return Bz, Cz

    def system(self, scale: torch.Tensor | None) -> System:
        # P, Pᵀ B and C P are a few small products: on one CPU thread, backward included
        # (ops.serial), where a busy machine made torch's thread pool wait 18 ms a product.
        if torch.is_grad_enabled() and self.M.requires_grad:
            def basis_io(M: torch.Tensor, B: torch.Tensor, C: torch.Tensor) -> tuple[torch.Tensor, ...]:
                P = skew_expm(_skew(M))
                return (P, *self._rotate(B, C, P))

            P, Bz, Cz = serial(basis_io, self.M, self.B, self.C)
        else:
            P = self.basis()
            Bz, Cz = serial(lambda B, C: self._rotate(B, C, P), self.B, self.C)
        if scale is not None:
            Bz = Bz * scale.repeat_interleave(2)[:, None]
        log_mag = self.unit_log_magnitude()
        return System(polar_modes(log_mag, self.theta.flatten()), Bz, Cz, self.D, P, log_mag=log_mag)

    def eigenvalues(self) -> torch.Tensor:
        lam = polar_modes(self.unit_log_magnitude(), self.theta.flatten())
        return torch.cat([lam, lam.conj()])


class ComplexDiagonal(Parameterisation):
    """LRU: λ_j = exp(−exp(ν_log_j) + i·exp(θ_log_j)), complex B and C, y = Re(C x) + D ⊙ u.

    The real form of mode j is the pair (Re x_j, Im x_j); Re(c·x) = [Re c, −Im c]·(Re x, Im x).
    Heads are consecutive groups of modes (used by ξ and by the norm probes).
    """

    def __init__(self, d_model: int, state_dim: int, heads: int, init: InitScheme):
        super().__init__(d_model, state_dim, heads, init)
        K = state_dim // 2
        _check_heads("complex_diagonal", K, heads, "complex modes (state_dim/2)")
        self.K = K
        self.nu_log = nn.Parameter(torch.log(-torch.log(init.magnitudes(K))))
        self.theta_log = nn.Parameter(torch.log(init.phases((K,)).clamp_min(1e-12)))
        b_std, c_std = init.io_std(d_model, state_dim)
        self.B_re = nn.Parameter(torch.randn(K, d_model) * b_std)
        self.B_im = nn.Parameter(torch.randn(K, d_model) * b_std)
        self.C_re = nn.Parameter(torch.randn(d_model, K) * c_std)
        self.C_im = nn.Parameter(torch.randn(d_model, K) * c_std)
        self.unit_head = torch.arange(K) // (K // heads)

    def recurrent_parameters(self) -> list[nn.Parameter]:
        return [self.nu_log, self.theta_log, self.B_re, self.B_im]

    def unit_log_magnitude(self) -> torch.Tensor:
        return -torch.exp(self.nu_log)

    def lam(self) -> torch.Tensor:
        return polar_modes(self.unit_log_magnitude(), torch.exp(self.theta_log))

    def head_gain(self) -> torch.Tensor:
        # Modes of a group have their own |λ|: sum each mode's stationary power
        # ‖b_j‖² / (1 − |λ_j|²); for one shared |λ| this is the rotation's ‖B_h‖²/(1 − γ²).
        power = (self.B_re.square() + self.B_im.square()).sum(1) / one_minus_mag_sq(self.unit_log_magnitude())
        return power.view(self.heads, -1).sum(1)

    def system(self, scale: torch.Tensor | None) -> System:
        B = torch.stack([self.B_re, self.B_im], 1).reshape(self.state_dim, self.d_model)
        if scale is not None:
            B = B * scale.repeat_interleave(2)[:, None]
        C = torch.stack([self.C_re, -self.C_im], -1).reshape(self.d_model, self.state_dim)
        log_mag = self.unit_log_magnitude()
        return System(polar_modes(log_mag, torch.exp(self.theta_log)), B, C, self.D, log_mag=log_mag)

    def eigenvalues(self) -> torch.Tensor:
        return self.lam()


class RealDiagonal(Parameterisation):
    """Real diagonal: λ_j = exp(−exp(ν_log_j)) ∈ (0, 1); the phase of the init is ignored."""

    def __init__(self, d_model: int, state_dim: int, heads: int, init: InitScheme):
        super().__init__(d_model, state_dim, heads, init)
        _check_heads("real_diagonal", state_dim, heads, "state coordinates")
        self.nu_log = nn.Parameter(torch.log(-torch.log(init.magnitudes(state_dim))))
        b_std, c_std = init.io_std(d_model, state_dim)
        self.B = nn.Parameter(torch.randn(state_dim, d_model) * b_std)
        self.C = nn.Parameter(torch.randn(d_model, state_dim) * c_std)
        self.unit_head = torch.arange(state_dim) // (state_dim // heads)

    def recurrent_parameters(self) -> list[nn.Parameter]:
        return [self.nu_log, self.B]

    def unit_log_magnitude(self) -> torch.Tensor:
        return -torch.exp(self.nu_log)

    def head_gain(self) -> torch.Tensor:
        power = self.B.square().sum(1) / one_minus_mag_sq(self.unit_log_magnitude())
        return power.view(self.heads, -1).sum(1)

    def system(self, scale: torch.Tensor | None) -> System:
        B = self.B if scale is None else self.B * scale[:, None]
        log_mag = self.unit_log_magnitude()
        return System(torch.exp(log_mag), B, self.C, self.D, log_mag=log_mag)

    def eigenvalues(self) -> torch.Tensor:
        mag = torch.exp(self.unit_log_magnitude())
        mag = mag.to(widened(mag.dtype))
        return torch.complex(mag, torch.zeros_like(mag))


class Dense(Parameterisation):
    """Unconstrained block-diagonal A (one n×n block per head; heads=1 is fully dense); sequential.

    Initialised like a rotation layer in a random basis (A_h = γ_h Q Θ Qᵀ), then free to leave the
    orthogonal family. A normalisation unit is a head: its "magnitude" is the RMS singular value
    ‖A_h‖_F/√n (γ_h at init). ξ normalises the state power at the task's sequence length (the
    horizon), which stays finite when A_h leaves the unit disc; the stationary power (probes) is
    the discrete Lyapunov sum, infinite past spectral radius 1.
    """

    sequential_only = True
    lyapunov_doublings = 16  # the stationary sum over 2^16 steps: γ^(2^17) is negligible for γ ≤ 0.9999

    def __init__(self, d_model: int, state_dim: int, heads: int, init: InitScheme):
        super().__init__(d_model, state_dim, heads, init)
        n = _check_heads("dense", state_dim, heads, "state coordinates")
        self.n = n
        gamma, theta = init.magnitudes(heads), init.phases((heads, n // 2))
        blocks = []
        for h in range(heads):
            c, s = torch.cos(theta[h]), torch.sin(theta[h])
            rot = [
                torch.stack([torch.stack([ci, -si]), torch.stack([si, ci])])
                for ci, si in zip(c, s, strict=True)
            ]
            block = torch.block_diag(*rot, *([torch.ones(1, 1)] if n % 2 else []))
            q = torch.eye(n) if init.identity_basis else skew_expm(_skew(torch.randn(n, n)))
            blocks.append(gamma[h] * q @ block @ q.T)
        self.A = nn.Parameter(torch.stack(blocks))
        b_std, c_std = init.io_std(d_model, state_dim)
        self.B = nn.Parameter(torch.randn(state_dim, d_model) * b_std)
        self.C = nn.Parameter(torch.randn(d_model, state_dim) * c_std)
        self.unit_head = torch.arange(heads)

    def recurrent_parameters(self) -> list[nn.Parameter]:
        return [self.A, self.B]

    def unit_log_magnitude(self) -> torch.Tensor:
        return 0.5 * torch.log(self.A.square().sum((1, 2)) / self.n)

    def _input_covariance(self) -> torch.Tensor:
        Bh = self.B.view(self.heads, self.n, self.d_model)
        return Bh @ Bh.transpose(1, 2)

    def head_gain(self) -> torch.Tensor:
        """Σ_{t<2^16} tr A^t BBᵀ A^tᵀ per head where the spectral radius is below 1, else inf."""
        gain = torch.exp(log_state_power(self.A, self._input_covariance(), 1 << self.lyapunov_doublings))
        radius = torch.linalg.eigvals(self.A.detach().double()).abs().amax(-1)
        return torch.where(radius.to(gain.device) < 1, gain, torch.full_like(gain, float("inf")))

    def head_xi(self, horizon: int) -> torch.Tensor:
        """(E‖x_L^h‖² from x_0 = 0 at L = horizon)^(−1/2): finite for every A. It equals the
        stationary ξ up to a factor 1 + O(ρ^{2L}) where that exists (docs/science.md §3.1)."""
        return torch.exp(-0.5 * log_state_power(self.A, self._input_covariance(), horizon))

    def system(self, scale: torch.Tensor | None) -> System:
        B = self.B if scale is None else self.B * scale.repeat_interleave(self.n)[:, None]
        return System(None, B, self.C, self.D, A=torch.block_diag(*self.A.unbind(0)))

    def eigenvalues(self) -> torch.Tensor:
        return torch.linalg.eigvals(self.A.detach().to(widened(self.A.dtype))).flatten()

    def modes(self, system: System) -> tuple[torch.Tensor, torch.Tensor]:
        """All n eigenvalues of each head's block (no diagonal form to read them from), in float64."""
        lam = torch.linalg.eigvals(self.A.detach().double())  # (H, n)
        return lam.flatten(), torch.arange(lam.shape[0]).repeat_interleave(lam.shape[1])


def _skew(m: torch.Tensor) -> torch.Tensor:
    return m - m.transpose(-1, -2)


def log_state_power(A: torch.Tensor, Q: torch.Tensor, horizon: int) -> torch.Tensor:
    """(H,) log tr Σ_{t<horizon} A_h^t Q_h A_h^tᵀ for A, Q (H, n, n), Q symmetric PSD: E‖x_L‖²
    at L = horizon from x_0 = 0 when x_t = A x_{t−1} + w_t, Cov w_t = Q (a Lyapunov sum).

    Binary powering: ⌈log₂ L⌉ rounds of a few n×n products. Every matrix is held as
    exp(scale) · (a matrix of largest entry 1) with its log scale apart, so a head past the unit
    circle, whose sum grows like ρ^{2L}, gives a large finite log and never inf or NaN. The scales
    are constants to autograd (the value represented is the same function), so gradients are exact.
    """
    if horizon < 1:
        raise ValueError(f"log_state_power: horizon must be at least 1, got {horizon}")
    tiny = torch.finfo(A.dtype).tiny

    def unit(X: torch.Tensor, scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        m = X.detach().abs().amax((-2, -1)).clamp_min(tiny)
        return X / m[:, None, None], scale + m.log()

    def add(X: torch.Tensor, x: torch.Tensor, Y: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        c = torch.maximum(x, y)  # exp(x) X + exp(y) Y = exp(c) (X e^{x−c} + Y e^{y−c})
        return unit(X * (x - c).exp()[:, None, None] + Y * (y - c).exp()[:, None, None], c)

    zero = A.new_zeros(A.shape[0])
    S, s = unit(Q, zero)  # Σ_{t<m} A^t Q A^tᵀ for m = 2^k
    Am, a = unit(A, zero)  # A^m
    total: tuple[torch.Tensor, torch.Tensor] | None = None
    offset: tuple[torch.Tensor, torch.Tensor] | None = None  # A^(the lower set bits of L)
    k = horizon
    while True:
        if k & 1:  # the block of terms [offset, offset + m): A^offset S_m A^offsetᵀ
            term = (S, s) if offset is None else unit(offset[0] @ S @ offset[0].mT, s + 2 * offset[1])
            total = term if total is None else add(*total, *term)
            offset = (Am, a) if offset is None else unit(offset[0] @ Am, offset[1] + a)
        k >>= 1
        if not k:
            break
        S, s = add(S, s, *unit(Am @ S @ Am.mT, s + 2 * a))
        Am, a = unit(Am @ Am, 2 * a)
    assert total is not None
    T, t = total
    return t + torch.diagonal(T, dim1=-2, dim2=-1).sum(-1).log()
