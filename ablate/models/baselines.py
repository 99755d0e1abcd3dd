"""torch's GRU and LSTM as nonlinear baselines, behind the ``RecurrentLayer`` interface.

Their hidden states h_t are torch's per-step outputs, so the norm probes cost nothing extra (for the
LSTM the probe sees h_t, not the cell c_t). They have no recurrent parameter group: a baseline is
trained the standard way, every weight under AdamW.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ablate.models.recurrent import RecurrentLayer, head_norms, pack


class TorchRNN(RecurrentLayer):
    rnn_class: type[nn.RNNBase] = nn.GRU

    def __init__(self, d_model: int, state_dim: int):
        super().__init__()
        self.d_model, self.state_dim, self.heads = d_model, state_dim, 1
        self.rnn = self.rnn_class(d_model, state_dim, batch_first=True)
        self.out = nn.Linear(state_dim, d_model, bias=False)

    def forward(
        self,
        u: torch.Tensor,
        return_states: bool = False,
        return_norms: bool = False,
        h0: Any = None,
    ) -> torch.Tensor | tuple[torch.Tensor, ...]:
        h, _ = self.rnn(u, h0)
        return pack(self.out(h), h if return_states else None, head_norms(h, 1) if return_norms else None)

    def step(self, u_t: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]:
        h, state = self.rnn(u_t[:, None], state)
        return self.out(h[:, 0]), state

    def initial_state(self, batch: int) -> Any:
        W = self.out.weight
        return torch.zeros(1, batch, self.state_dim, dtype=W.dtype, device=W.device)


class TorchGRU(TorchRNN):
    rnn_class = nn.GRU


class TorchLSTM(TorchRNN):
    rnn_class = nn.LSTM

    def initial_state(self, batch: int) -> Any:
        h = super().initial_state(batch)
        return h, torch.zeros_like(h)
