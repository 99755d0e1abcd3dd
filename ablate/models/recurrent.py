"""The composable linear recurrent layer: any parameterisation × normalisation × heads × nonlinearity.

    x_t = σ(A x_{t-1} + B̃ u_t),   y_t = C x_t + D ⊙ u_t      (σ = identity for the linear layer)

Modes (``layer.mode``), which must agree (tests/test_models_modes.py):
    scan        diagonal modes through ``ablate.ops.scan.linear_scan`` (the training default)
    conv        the same states by FFT convolution with the kernel λ^k (time-invariant layers)
    sequential  a loop over t of the real natural-basis system; forced for tanh/relu and dense
and ``step(u_t, state)`` carries a natural-basis real state for streaming inference.

``RecurrentLayer`` is the interface every family implements (also minGRU/minLSTM and torch's
GRU/LSTM): ``forward(u, return_states, return_norms, h0)``, ``step``, ``initial_state``,
``eigenvalues``, ``recurrent_parameters``, ``heads``, ``state_dim``, ``d_model``; and for the probes
(``ablate.probes`` only turns these into rows) ``state_norms(u)`` and ``dynamics(length, spectrum)``,
a ``Dynamics`` of the modes, per-head decay, input scale and the white-input theory of one pass.
The base class reports no fixed dynamics (input-dependent recurrences: minGRU/minLSTM, GRU/LSTM);
``LinearRecurrence`` reports them all, the theory only without a nonlinearity.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from ablate.models import catalogue
from ablate.models.inits import make_init
from ablate.models.parameterisations import System, one_minus_mag_sq
from ablate.ops.scan import linear_scan, widened

if TYPE_CHECKING:
    from ablate.spec import InitSpec

MODES = ("scan", "conv", "sequential")  # every mode any layer has; each layer declares its own


def _no_modes() -> torch.Tensor:
    return torch.zeros(0, dtype=torch.complex64)


def _no_heads() -> torch.Tensor:
    return torch.zeros(0, dtype=torch.long)


@dataclass(frozen=True)
class Dynamics:
    """A layer's state dynamics in one pass, detached: what the probes record about it.

    ``modes`` (K,) eigenvalues of the state matrix, one per conjugate pair, and ``mode_head`` (K,)
    the head of each; empty for an input-dependent recurrence. ``head_decay`` (H,) γ_h for a
    rotation, else the head's slowest |λ|. ``input_scale`` (units,) what multiplies each
    normalisation unit's rows of B (ξ_h per mode, the LRU's γ_j, ...; None: no normalisation), and
    ``unit_head`` (units,) the head of each unit. ``expected_norms`` (length, H): E‖x_t^h‖² for
    t = 1..length from x_0 = 0 under white unit-variance input, and ``stationary_norms`` (H,) its
    limit (inf past |λ| = 1); None where there is no closed form (nonlinear layers) or none was asked.
    """

    modes: torch.Tensor = field(default_factory=_no_modes)
    mode_head: torch.Tensor = field(default_factory=_no_heads)
    head_decay: torch.Tensor | None = None
    input_scale: torch.Tensor | None = None
    unit_head: torch.Tensor | None = None
    expected_norms: torch.Tensor | None = None
    stationary_norms: torch.Tensor | None = None


class RecurrentLayer(nn.Module):
    """Interface of a recurrent layer: (B, L, d_model) → (B, L, d_model), with a carried state.

    ``modes``: the ways this layer can compute its forward pass, the first being the default;
    setting ``mode`` to anything else raises. Empty for a layer with one fixed computation.
    """

    heads: int = 1
    state_dim: int
    d_model: int
    modes: tuple[str, ...] = ()

    @property
    def mode(self) -> str:
        return self.__dict__.get("_mode") or (self.modes[0] if self.modes else "")

    @mode.setter
    def mode(self, mode: str) -> None:
        if mode not in self.modes:
            valid = ", ".join(self.modes) if self.modes else "none (one fixed computation)"
            raise ValueError(f"{type(self).__name__} has no mode {mode!r}; its modes: {valid}")
        self.__dict__["_mode"] = mode

    def forward(
        self,
        u: torch.Tensor,
        return_states: bool = False,
        return_norms: bool = False,
        h0: Any = None,
    ) -> torch.Tensor | tuple[torch.Tensor, ...]:
        """y, then (if asked) states (B, L, N) real, then norms (B, L, heads) of ‖x_t^h‖²."""
        raise NotImplementedError

    def step(self, u_t: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]:
        raise NotImplementedError

    def initial_state(self, batch: int) -> Any:
        """The zero state for ``batch`` sequences, in the layer's dtype and on its device."""
        raise NotImplementedError

    def eigenvalues(self) -> torch.Tensor:
        """The state matrix spectrum; empty for input-dependent recurrences."""
        return torch.zeros(0, dtype=torch.complex64)

    def recurrent_parameters(self) -> list[nn.Parameter]:
        return []

    def state_norms(self, u: torch.Tensor) -> torch.Tensor:
        """(B, L, heads) ‖x_t^h‖² of the states that ``u`` (B, L, d_model) drives from the zero state."""
        return self(u, return_norms=True)[-1]

    def dynamics(self, length: int | None = None, spectrum: bool = True) -> Dynamics:
        """This pass's ``Dynamics``: the theory curve over ``length`` steps (None: no theory) and,
        with ``spectrum``, the modes, decays and input scales. Here: none (input-dependent)."""
        return Dynamics()


def _log_magnitude(mats: System) -> torch.Tensor:
    """log |λ| of the system's scan modes: from the stored parameters where the parameterisation
    gives them (exact near |λ| = 1), else read back from λ."""
    assert mats.lam is not None
    return mats.log_mag if mats.log_mag is not None else mats.lam.abs().log()


def pack(y: torch.Tensor, states: torch.Tensor | None, norms: torch.Tensor | None) -> Any:
    """The forward return convention: y alone, or y followed by what was asked for."""
    extra = [t for t in (states, norms) if t is not None]
    return (y, *extra) if extra else y


def head_norms(states: torch.Tensor, heads: int) -> torch.Tensor:
    """(B, L, N) real states → (B, L, heads) squared norms; heads are contiguous coordinate groups."""
    B, L, N = states.shape
    return states.view(B, L, heads, N // heads).square().sum(-1)


def powers(lam: torch.Tensor, length: int) -> torch.Tensor:
    """(length, K) table of lam^k, k = 0 … length−1, built by doubling products.

    docs/science.md §9.2: never exp(i·k·θ) with a growing angle — in float32 the angle k·θ carries an
    absolute error ~k·θ·2^-24 (1e-3 rad at k = 16k). Products are composed instead, in double
    precision: repeated squaring amplifies rounding like k·eps, negligible at 2^-53, and the table
    is rounded once to the input's precision at the end.
    """
    wide = torch.complex128 if lam.is_complex() else torch.float64
    step = lam.to(wide)
    out = torch.ones((1, *lam.shape), dtype=wide, device=lam.device)
    while out.shape[0] < length:
        out = torch.cat([out, out * step], 0)  # out[m:2m] = out[:m] · lam^m
        step = step * step
    return out[:length].to(lam.dtype)


def conv_scan(lam: torch.Tensor, b: torch.Tensor, h0: torch.Tensor | None = None) -> torch.Tensor:
    """Same result as ``linear_scan(lam, b, h0)`` for a time-invariant lam: FFT convolution
    (half precision computed in float32 and returned in b's dtype, as the scans do)."""
    dtype = b.dtype
    if widened(dtype) != dtype:
        lam, b = lam.to(widened(lam.dtype)), b.to(widened(dtype))
        h0 = None if h0 is None else h0.to(b.dtype)
        return conv_scan(lam, b, h0).to(dtype)
    L = b.shape[1]
    kernel = powers(lam, L + 1)  # (L+1, K)
    n = 1 << (2 * L - 1).bit_length()
    if b.is_complex():
        z = torch.fft.ifft(torch.fft.fft(b, n=n, dim=1) * torch.fft.fft(kernel[:L], n=n, dim=0), dim=1)[:, :L]
    else:
        z = torch.fft.irfft(
            torch.fft.rfft(b, n=n, dim=1) * torch.fft.rfft(kernel[:L], n=n, dim=0), n=n, dim=1
        )[:, :L]
    if h0 is not None:
        z = z + kernel[1:] * h0[:, None]
    return z


def sequential_loop(
    bu: torch.Tensor, A: torch.Tensor, h0: torch.Tensor | None, act: Callable | None
) -> torch.Tensor:
    """x_t = act(A x_{t-1} + bu_t) for t = 1..L; bu (B, L, N) already holds B̃ u.

    The state is carried in A's dtype (``System.natural`` gives half-precision layers a float32
    A, as the scans compute) and returned in bu's."""
    dtype = bu.dtype
    bu = bu.to(A.dtype)
    x = torch.zeros_like(bu[:, 0]) if h0 is None else h0.to(A.dtype)
    out = []
    for bu_t in bu.unbind(1):  # unbind keeps the backward linear in L
        x = x @ A.T + bu_t
        if act is not None:
            x = act(x)
        out.append(x)
    return torch.stack(out, 1).to(dtype)


class LinearRecurrence(RecurrentLayer):
    """The composed layer: parameterisation × normalisation × heads × nonlinearity, each a level of
    ``ablate.models.catalogue``; ``init`` is the scheme's spec (``ablate.spec.RingInit`` / ``RotrnnInit``).
    ``horizon``: the sequence length it is built for (``TaskInfo.seq_len``), over which ξ normalises
    a dense head's state power (docs/science.md §3.1)."""

    def __init__(
        self,
        d_model: int,
        state_dim: int,
        heads: int,
        parameterisation: str,
        normalisation: str,
        nonlinearity: str,
        init: InitSpec,
        horizon: int,
    ):
        super().__init__()
        param_class = catalogue.PARAMETERISATIONS.load(parameterisation)
        norm_class = catalogue.NORMALISATIONS.load(normalisation)
        act: Callable[[torch.Tensor], torch.Tensor] | None = catalogue.NONLINEARITIES.load(nonlinearity)
        self.param = param_class(d_model, state_dim, heads, make_init(init))
        self.norm = norm_class(self.param, horizon)
        self.horizon = horizon
        self.act = act
        self.d_model, self.state_dim, self.heads = d_model, state_dim, heads

    modes = MODES  # dense and nonlinear layers run every mode by the sequential loop (``parallel``)

    @property
    def parallel(self) -> bool:
        """Linear and diagonalisable: the scan and conv modes apply."""
        return self.act is None and not self.param.sequential_only

    def system(self) -> System:
        """This pass's system, normalisation included (ξ and γ_recomputed from live parameters)."""
        return self.param.system(self.norm(self.param))

    def forward(
        self,
        u: torch.Tensor,
        return_states: bool = False,
        return_norms: bool = False,
        h0: torch.Tensor | None = None,
    ) -> torch.Tensor | tuple[torch.Tensor, ...]:
        mats = self.system()
        if self.mode == "sequential" or not self.parallel:
            A, B, C = mats.natural()
            s = sequential_loop(u @ B.T, A, h0, self.act)  # natural basis
            natural = s
        else:
            s = self._scan(mats, u, h0)  # scan basis: the norms are the same, C already includes P
            natural = None
            C = mats.C
        y = torch.addcmul(s @ C.T, u, mats.D)  # C x + D ⊙ u in one pass
        if return_states and natural is None:
            natural = self._to_natural(s, mats.P)
        return pack(
            y, natural if return_states else None, head_norms(s, self.heads) if return_norms else None
        )

    def _scan(self, mats: System, u: torch.Tensor, h0: torch.Tensor | None) -> torch.Tensor:
        """Real scan-basis states (B, L, N); complex modes as interleaved (re, im)."""
        Bn, L, _ = u.shape
        N = self.state_dim
        scan = conv_scan if self.mode == "conv" else linear_scan
        v = u @ mats.B.T
        z0 = None if h0 is None else self._to_scan(h0, mats.P)
        assert mats.lam is not None
        if not mats.complex_modes:
            return scan(mats.lam, v, z0)
        # half precision has no complex dtype here: complex modes run in complex64 (as the scans
        # would compute them anyway) and the states return in the input's dtype
        wide = widened(v.dtype)
        b = torch.view_as_complex(v.to(wide).view(Bn, L, N // 2, 2))
        c0 = None if z0 is None else torch.view_as_complex(z0.to(wide).contiguous().view(Bn, N // 2, 2))
        return torch.view_as_real(scan(mats.lam, b, c0)).reshape(Bn, L, N).to(v.dtype)

    def _to_scan(self, x: torch.Tensor, P: torch.Tensor | None) -> torch.Tensor:
        """z = Pᵀ x per head, for x (..., N)."""
        if P is None:
            return x
        H, n = P.shape[0], P.shape[1]
        return torch.einsum("hij,...hi->...hj", P, x.unflatten(-1, (H, n))).flatten(-2)

    def _to_natural(self, z: torch.Tensor, P: torch.Tensor | None) -> torch.Tensor:
        """x = P z per head, for z (..., N)."""
        if P is None:
            return z
        H, n = P.shape[0], P.shape[1]
        return torch.einsum("hij,...hj->...hi", P, z.unflatten(-1, (H, n))).flatten(-2)

    def step(self, u_t: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One step of streaming inference; ``state`` is the natural-basis real state (B, N)."""
        mats = self.system()
        A, B, C = mats.natural()
        x = state.to(A.dtype) @ A.T + (u_t @ B.T).to(A.dtype)  # carried as the loop carries it
        if self.act is not None:
            x = self.act(x)
        x = x.to(state.dtype)
        return x.to(C.dtype) @ C.T + u_t * mats.D, x

    def initial_state(self, batch: int) -> torch.Tensor:
        D = self.param.D
        return torch.zeros(batch, self.state_dim, dtype=D.dtype, device=D.device)

    def eigenvalues(self) -> torch.Tensor:
        return self.param.eigenvalues()

    def head_decay(self) -> torch.Tensor:
        """(H,) largest |eigenvalue| per head: γ_h for rotation, the slowest mode elsewhere."""
        return self.param.head_decay()

    @torch.no_grad()
    def dynamics(self, length: int | None = None, spectrum: bool = True) -> Dynamics:
        """One ``system()`` (a rotation's costs a matrix exponential) serves everything reported."""
        scale = self.norm(self.param)
        mats = self.param.system(scale)
        expected = stationary = None
        if length is not None and self.act is None:
            expected = self.expected_state_norms(length, mats)
            stationary = self._stationary_norms(mats, scale)
        if not spectrum:
            return Dynamics(expected_norms=expected, stationary_norms=stationary)
        modes, mode_head = self.param.modes(mats)
        return Dynamics(
            modes, mode_head, self.head_decay(), None if scale is None else scale.detach(),
            self.param.unit_head.detach(), expected, stationary,
        )  # fmt: skip

    @torch.no_grad()
    def expected_state_norms(self, length: int, mats: System | None = None) -> torch.Tensor:
        """(length, H) theory for E‖x_t^h‖², t = 1..length, from x_0 = 0 under white unit input.

        For a ξ rotation layer this is 1 − γ_h^{2t}; generally Σ_j ‖b̃_j‖² (1 − |λ_j|^{2t})/(1 − |λ_j|²).
        Exact for linear layers only (a tanh/relu recurrence has no closed form). ``mats``: this
        pass's ``system()`` when the caller has it already (the probes reuse one per layer).
        """
        if self.act is not None:
            raise ValueError("expected_state_norms: only linear recurrences have a closed form")
        mats = mats if mats is not None else self.system()
        if mats.lam is None:  # dense: iterate the covariance S_t = A S_{t-1} Aᵀ + B̃B̃ᵀ
            A, B, _ = mats.natural()
            S, Q, out = torch.zeros_like(A), B @ B.T, []
            for _ in range(length):
                S = A @ S @ A.T + Q
                out.append(torch.diagonal(S))
            return torch.stack(out).view(length, self.heads, -1).sum(-1)
        power = mats.B.square().sum(1)
        if mats.complex_modes:
            power = power.view(-1, 2).sum(1)
        log_mag = _log_magnitude(mats).to(power.dtype)
        t = torch.arange(1, length + 1, dtype=power.dtype, device=power.device)[:, None]
        e = power * torch.expm1(2 * t * log_mag) / torch.expm1(2 * log_mag)
        return e.view(length, self.heads, -1).sum(-1)

    @torch.no_grad()
    def stationary_state_norms(self, mats: System | None = None) -> torch.Tensor:
        """(H,) E‖x_∞^h‖² under white unit-variance input, normalisation applied (inf past |λ| = 1):
        Σ_j ‖b̃_j‖²/(1 − |λ_j|²); 1 for ξ. Linear layers only, as ``expected_state_norms``."""
        if self.act is not None:
            raise ValueError("stationary_state_norms: only linear recurrences have a closed form")
        scale = self.norm(self.param)
        return self._stationary_norms(mats if mats is not None else self.param.system(scale), scale)

    def _stationary_norms(self, mats: System, scale: torch.Tensor | None) -> torch.Tensor:
        if mats.lam is None:  # dense: the parameterisation's Lyapunov sum, scaled per head
            gain = self.param.head_gain()
            if scale is None:
                return gain
            return torch.where(gain.isinf(), gain, gain * scale.square())  # inf, not inf·0 = NaN
        power = mats.B.double().square().sum(1)
        if mats.complex_modes:
            power = power.view(-1, 2).sum(1)
        log_mag = _log_magnitude(mats).double()
        per_unit = torch.where(log_mag < 0, power / one_minus_mag_sq(log_mag), torch.full_like(power, float("inf")))
        return per_unit.view(self.heads, -1).sum(1)

    def recurrent_parameters(self) -> list[nn.Parameter]:
        return self.param.recurrent_parameters() + self.norm.recurrent_parameters()
