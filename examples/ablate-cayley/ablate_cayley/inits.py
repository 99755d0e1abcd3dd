"""An initialisation scheme: S4D-Lin's eigenvalues, λ_n = exp(Δ·(−a + iπn)) (Gu et al., 2022).

Every mode starts with the same magnitude exp(−aΔ) and the phases are evenly spaced, πΔn, where
the ring and RotRNN schemes draw both at random: one fixed, spread-out spectrum. Its parameters
(``Params``) are validated in the spec as the built-in schemes' are (``model.init.dt``, ...).
"""

from __future__ import annotations

import math

import torch
from pydantic import Field

from ablate.models.inits import InitScheme
from ablate.spec import PluginInit


class S4DLinParams(PluginInit):
    """S4D-Lin: λ_n = exp(Δ·(−a + iπn)), the same magnitude for every mode, evenly spaced phases."""

    dt: float = Field(0.01, gt=0.0, le=1.0, description="the step Δ")
    real: float = Field(0.5, gt=0.0, le=100.0, description="a: every magnitude is exp(−aΔ)")


class S4DLin(InitScheme):
    """S4D-Lin's spectrum (see the module); B and C as RotRNN's, N(0, 1/(d + N))."""

    Params = S4DLinParams

    def __init__(self, spec: S4DLinParams):
        super().__init__(spec)
        self.dt, self.real = float(spec.dt), float(spec.real)

    def magnitudes(self, n: int) -> torch.Tensor:
        return torch.full((n,), math.exp(-self.real * self.dt))

    def phases(self, shape: tuple[int, ...]) -> torch.Tensor:
        k = math.prod(shape)
        return (math.pi * self.dt * torch.arange(k, dtype=torch.float32)).remainder(2 * math.pi).reshape(shape)

    def io_std(self, d_model: int, state_dim: int) -> tuple[float, float]:
        std = math.sqrt(1.0 / (d_model + state_dim))
        return std, std
