"""Initialisation schemes: where the eigenvalues start, and the scale of B and C (docs/science.md §4).

A scheme draws eigenvalue magnitudes in (0, 1) and phases; each parameterisation converts them into
its own parameters (ν_log, γ_log, θ, ...). One scheme therefore serves every parameterisation, so
"RotRNN with the LRU's ring initialisation" is a valid cell of a study.

A scheme is built from its spec (``ablate.spec.RingInit`` / ``RotrnnInit``), where its
parameters and their defaults are declared. A scheme from a plug-in (entry-point group
``ablate.initialisations``, or ``model.init.scheme: package.module:Class``; docs/plugins.md)
subclasses ``InitScheme`` and declares its parameters as ``Params``, a subclass of
``ablate.spec.PluginInit``, which the spec validates under ``model.init``. Draws use torch's
global generator: the training loop seeds it once per trial.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch

from ablate.models import catalogue

if TYPE_CHECKING:
    from ablate.spec import InitSpec
    from ablate.spec import RingInit as RingInitSpec
    from ablate.spec import RotrnnInit as RotrnnInitSpec


class InitScheme:
    """Base: eigenvalue magnitudes, phases, and the standard deviations of B and C entries.

    The contract (``ablate.models.contract.check_init``): ``magnitudes(n)`` n values in (0, 1),
    ``phases(shape)`` finite, of that shape, ``io_std`` two positive numbers."""

    Params: type | None = None
    """A plug-in scheme's parameter model (a subclass of ``ablate.spec.PluginInit``); the built-in
    schemes' are in ``ablate.spec`` (``RingInit``, ``RotrnnInit``)."""

    def __init__(self, spec: InitSpec):
        self.max_phase = float(spec.max_phase)
        self.identity_basis = bool(spec.identity_basis)

    def magnitudes(self, n: int) -> torch.Tensor:
        raise NotImplementedError

    def phases(self, shape: tuple[int, ...]) -> torch.Tensor:
        """θ ~ U[0, max_phase] (the LRU's θ_log = log(max_phase·u) is the same law)."""
        return torch.rand(shape) * self.max_phase

    def io_std(self, d_model: int, state_dim: int) -> tuple[float, float]:
        """Standard deviation of each real entry of B (state_dim × d) and C (d × state_dim)."""
        raise NotImplementedError


class RingInit(InitScheme):
    """LRU ring: |λ|² ~ U[r_min², r_max²]; B_re, B_im ~ N(0, 1/(2d)); C_re, C_im ~ N(0, 1/K).

    K = state_dim / 2 is the LRU's complex state size; real-state parameterisations use the same
    per-entry variances (the real form of a complex mode has two coordinates).
    """

    def __init__(self, spec: RingInitSpec):
        super().__init__(spec)
        self.r_min = float(spec.r_min)
        self.r_max = float(spec.r_max)

    def magnitudes(self, n: int) -> torch.Tensor:
        u = torch.rand(n)
        return torch.sqrt(u * (self.r_max**2 - self.r_min**2) + self.r_min**2)

    def io_std(self, d_model: int, state_dim: int) -> tuple[float, float]:
        return math.sqrt(1.0 / (2 * d_model)), math.sqrt(2.0 / state_dim)


class RotrnnInit(InitScheme):
    """RotRNN: −log γ log-uniform on [−log γ_max, −log γ_min]; B, C ~ N(0, 1/(d + N))."""

    def __init__(self, spec: RotrnnInitSpec):
        super().__init__(spec)
        self.gamma_min = float(spec.gamma_min)
        self.gamma_max = float(spec.gamma_max)

    def magnitudes(self, n: int) -> torch.Tensor:
        lo, hi = math.log(-math.log(self.gamma_max)), math.log(-math.log(self.gamma_min))
        neg_log_gamma = torch.exp(lo + torch.rand(n) * (hi - lo))
        return torch.exp(-neg_log_gamma)

    def io_std(self, d_model: int, state_dim: int) -> tuple[float, float]:
        std = math.sqrt(1.0 / (d_model + state_dim))
        return std, std


def make_init(spec: InitSpec) -> InitScheme:
    """The scheme named by ``spec.scheme`` (``catalogue.INIT_SCHEMES``: built-in or plug-in) with
    the spec's parameters."""
    return catalogue.INIT_SCHEMES.load(spec.scheme)(spec)
