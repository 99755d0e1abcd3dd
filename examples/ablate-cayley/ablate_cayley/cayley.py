"""Rotation heads with a Cayley basis: A_h = γ_h P_h Θ_h P_hᵀ with P_h = (I − S_h)(I + S_h)⁻¹,
S_h = M_h − M_hᵀ, where RotRNN takes P_h = expm(S_h).

Both maps send a skew matrix to an orthogonal one; the Cayley transform needs one linear solve
instead of an eigendecomposition, and cannot reach rotations with eigenvalue −1. Everything
else — the decays, the angles, ξ, the scan in the basis Pᵀ — is RotRNN's, inherited from
``ablate.models.parameterisations.Rotation``: the plug-in changes one thing, as an ablation should.
"""

from __future__ import annotations

import torch

from ablate.models.parameterisations import Rotation, System, polar_modes


def cayley(M: torch.Tensor) -> torch.Tensor:
    """(H, n, n) P = (I − S)(I + S)⁻¹ for S = M − Mᵀ: orthogonal with det +1."""
    S = M - M.transpose(-1, -2)
    eye = torch.eye(M.shape[-1], dtype=M.dtype, device=M.device).expand_as(S)
    # (I − S) and (I + S)⁻¹ commute, so P = (I + S)⁻¹ (I − S): one solve
    return torch.linalg.solve(eye + S, eye - S)


class CayleyRotation(Rotation):
    """RotRNN's rotation heads, the basis P_h from the Cayley transform (see the module)."""

    def basis(self) -> torch.Tensor:
        return cayley(self.M)

    def system(self, scale: torch.Tensor | None) -> System:
        P = self.basis()
        Bz, Cz = self._rotate(self.B, self.C, P)
        if scale is not None:
            Bz = Bz * scale.repeat_interleave(2)[:, None]
        log_mag = self.unit_log_magnitude()
        return System(polar_modes(log_mag, self.theta.flatten()), Bz, Cz, self.D, P, log_mag=log_mag)
