"""minGRU and minLSTM (Feng et al. 2024; docs/science.md §5): gates see only the input, not h_{t-1}.

    minGRU   h_t = (1 − z_t) ⊙ h_{t−1} + z_t ⊙ g(h̃_t),        z = σ(W_z u), h̃ = W_h u
    minLSTM  h_t = f'_t ⊙ h_{t−1} + i'_t ⊙ g(h̃_t),            f' = f/(f+i), i' = i/(f+i)

with g(x) = x + 0.5 (x ≥ 0), σ(x) (x < 0) keeping h > 0, so training runs Heinsen's log-space scan
(``ablate.ops.scan.log_scan``) and inference steps the recurrence directly (``mode='sequential'``
or ``step``). The hidden size is ``state_dim``; a projection returns to d_model when they differ.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ablate.models.recurrent import RecurrentLayer, head_norms, pack
from ablate.ops.scan import log_scan, widened


def g(x: torch.Tensor) -> torch.Tensor:
    return torch.where(x >= 0, x + 0.5, torch.sigmoid(x))


def log_g(x: torch.Tensor) -> torch.Tensor:
    # clamp keeps the unused branch finite, so torch.where passes no NaN gradient; log σ(x) is
    # logsigmoid, exact for very negative x where σ(x) itself would underflow.
    return torch.where(x >= 0, torch.log(x.clamp_min(0) + 0.5), F.logsigmoid(x))


class MinRNN(RecurrentLayer):
    """Shared body: subclasses give the log-space and the direct gates (a_t, b_t-weight)."""

    n_gates = 1
    modes = ("scan", "sequential")  # the log-space scan, or the recurrence stepped directly

    def __init__(self, d_model: int, state_dim: int):
        super().__init__()
        self.d_model, self.state_dim, self.heads = d_model, state_dim, 1
        # One matmul for the gates and the candidate: [k_1 … k_g, h̃].
        self.proj = nn.Linear(d_model, (self.n_gates + 1) * state_dim)
        self.out = nn.Identity() if state_dim == d_model else nn.Linear(state_dim, d_model, bias=False)

    def log_coefficients(self, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(log a, log of the candidate's weight) from the gate pre-activations k (..., gates, N)."""
        raise NotImplementedError

    def coefficients(self, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(a, candidate weight) computed directly, as the sequential recurrence does."""
        raise NotImplementedError

    def _split(self, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        p = self.proj(u).unflatten(-1, (self.n_gates + 1, self.state_dim))
        return p[..., :-1, :], p[..., -1, :]

    def forward(
        self,
        u: torch.Tensor,
        return_states: bool = False,
        return_norms: bool = False,
        h0: torch.Tensor | None = None,
    ) -> torch.Tensor | tuple[torch.Tensor, ...]:
        """h0, if given, must be positive (as every state of this recurrence is)."""
        k, cand = self._split(u)
        if self.mode == "sequential":
            # carried in float32 for half precision, as the log scan computes (``widened``)
            wide = widened(cand.dtype)
            a, w = (c.to(wide) for c in self.coefficients(k))
            h = torch.zeros_like(cand[:, 0], dtype=wide) if h0 is None else h0.to(wide)
            out = []
            for a_t, w_t, c_t in zip(a.unbind(1), w.unbind(1), g(cand).to(wide).unbind(1), strict=True):
                h = a_t * h + w_t * c_t
                out.append(h)
            h = torch.stack(out, 1).to(cand.dtype)
        else:
            log_a, log_w = self.log_coefficients(k)
            # A zero h0 (initial_state) contributes exp(−69) ≈ 0: the clamp keeps log and grad finite.
            log_h0 = None if h0 is None else torch.log(h0.clamp_min(1e-30))
            h = torch.exp(log_scan(log_a, log_w + log_g(cand), log_h0))
        y = self.out(h)
        return pack(y, h if return_states else None, head_norms(h, 1) if return_norms else None)

    def step(self, u_t: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        k, cand = self._split(u_t)
        wide = widened(state.dtype)
        a, w = self.coefficients(k)
        h = (a.to(wide) * state.to(wide) + w.to(wide) * g(cand).to(wide)).to(state.dtype)
        return self.out(h.to(cand.dtype)), h

    def initial_state(self, batch: int) -> torch.Tensor:
        W = self.proj.weight
        return torch.zeros(batch, self.state_dim, dtype=W.dtype, device=W.device)


class MinGRU(MinRNN):
    n_gates = 1

    def log_coefficients(self, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        k = k[..., 0, :]
        log_a = -F.softplus(k)  # log(1 − z)
        return log_a, log_a + k  # log z = −softplus(−k) = k − softplus(k): one softplus, not two

    def coefficients(self, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        z = torch.sigmoid(k[..., 0, :])
        return 1 - z, z


class MinLSTM(MinRNN):
    n_gates = 2

    def log_coefficients(self, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        delta = F.softplus(-k[..., 0, :]) - F.softplus(-k[..., 1, :])
        log_f = -F.softplus(delta)
        return log_f, log_f + delta  # log i' = −softplus(−Δ) = Δ − softplus(Δ)

    def coefficients(self, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        f, i = torch.sigmoid(k[..., 0, :]), torch.sigmoid(k[..., 1, :])
        return f / (f + i), i / (f + i)

    def gates(self, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(f', i') from the log-space form, for probes and the f' + i' = 1 check."""
        log_f, log_i = self.log_coefficients(self._split(u)[0])
        return log_f.exp(), log_i.exp()
