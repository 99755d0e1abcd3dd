"""Input normalisations: the scale applied to each unit's rows of B (docs/science.md §3).

xi                ξ_h = (stationary E‖x^h‖² without scaling)^(−1/2), from the live parameters
                  every pass; for a rotation head this is sqrt(1 − γ_h²) / ‖B_h‖_F; for a dense
                  head the power at the horizon (the task's sequence length) instead
gamma             the LRU's learned γ per unit, initialised to sqrt(1 − |λ|²) and then free
gamma_recomputed  sqrt(1 − |λ|²) from the live λ every pass
none              no scaling
"""

from __future__ import annotations

import torch
from torch import nn

from ablate.models.parameterisations import Parameterisation, one_minus_mag_sq


class Normalisation(nn.Module):
    """Maps a parameterisation to its per-unit input scale for this pass (None: no scaling).

    ``horizon``: the sequence length the layer is built for (the task's), for normalisations
    defined over a finite horizon (ξ of a dense head)."""

    def __init__(self, param: Parameterisation, horizon: int):
        super().__init__()

    def forward(self, param: Parameterisation) -> torch.Tensor | None:
        raise NotImplementedError

    def recurrent_parameters(self) -> list[nn.Parameter]:
        return []


class Xi(Normalisation):
    """RotRNN's ξ: stationary E‖x^h‖² = 1 per head under white unit-variance input, at every step
    (a dense head: E‖x_L^h‖² = 1 at the horizon L, see ``Parameterisation.head_xi``)."""

    def __init__(self, param: Parameterisation, horizon: int):
        super().__init__(param, horizon)
        self.horizon = horizon

    def forward(self, param: Parameterisation) -> torch.Tensor:
        return param.head_xi(self.horizon)[param.unit_head]


class Gamma(Normalisation):
    """LRU's γ: a separate trainable parameter, set to log sqrt(1 − |λ|²) only at initialisation."""

    def __init__(self, param: Parameterisation, horizon: int):
        super().__init__(param, horizon)
        with torch.no_grad():
            init = torch.sqrt(one_minus_mag_sq(param.unit_log_magnitude()).clamp_min(1e-12))
        self.gamma_log = nn.Parameter(torch.log(init))

    def forward(self, param: Parameterisation) -> torch.Tensor:
        return torch.exp(self.gamma_log)

    def recurrent_parameters(self) -> list[nn.Parameter]:
        return [self.gamma_log]


class GammaRecomputed(Normalisation):
    """sqrt(1 − |λ|²) from the live λ every pass (what some LRU ports do)."""

    def forward(self, param: Parameterisation) -> torch.Tensor:
        # clamp: a dense head may grow past the unit circle; its scale then goes to ~0, not NaN.
        return torch.sqrt(one_minus_mag_sq(param.unit_log_magnitude()).clamp_min(1e-12))


class NoNormalisation(Normalisation):
    def forward(self, param: Parameterisation) -> None:
        return None
