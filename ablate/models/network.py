"""The network: encoder → blocks → pooling and decoder (or a per-step decoder).

    block(x) = x + dropout(activation(recurrence(norm(x))))       (pre-norm residual, as the LRU)

Every name in a ``ModelSpec`` is looked up in ``ablate.models.catalogue``, which says where each
level is implemented (the activations, norms and poolings are here), so a new level is one
implementation and one registry line. The spec is read as typed: its defaults live in
``ablate.spec`` only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import nn

from ablate.models import catalogue
from ablate.models.recurrent import LinearRecurrence, RecurrentLayer

if TYPE_CHECKING:
    from ablate.spec import ModelSpec
    from ablate.tasks.data import TaskInfo

PAD = 0  # token id reserved for padding (ablate.tasks.data.PAD); pooling skips it


# --- activations: between the recurrence and the residual (S5/LRU names) ---------------------


class Gelu(nn.Module):
    def __init__(self, d: int):
        super().__init__()

    def forward(self, y: torch.Tensor) -> torch.Tensor:
        return F.gelu(y)


class GLU(nn.Module):
    """GELU then W1 x ⊙ σ(W2 x): the LRU block's "full GLU"."""

    def __init__(self, d: int):
        super().__init__()
        self.w1, self.w2 = nn.Linear(d, d), nn.Linear(d, d)

    def forward(self, y: torch.Tensor) -> torch.Tensor:
        x = F.gelu(y)
        return self.w1(x) * torch.sigmoid(self.w2(x))


class HalfGLU(nn.Module):
    """GELU then x ⊙ σ(W x): one matrix instead of two."""

    def __init__(self, d: int):
        super().__init__()
        self.w = nn.Linear(d, d)

    def forward(self, y: torch.Tensor) -> torch.Tensor:
        x = F.gelu(y)
        return x * torch.sigmoid(self.w(x))


# --- norms over the feature dimension of (B, L, d) ---------------------------------------------


class RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float = 1e-6):
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.ones(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + self.eps) * self.weight


class SeqBatchNorm(nn.BatchNorm1d):
    """BatchNorm over batch and time for (B, L, d) inputs."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.transpose(1, 2)).transpose(1, 2)


class NoNorm(nn.Identity):
    def __init__(self, d: int):
        super().__init__()


# --- pooling over time for sequence classification --------------------------------------------


def mean_pool(h: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    if mask is None:
        return h.mean(1)
    m = mask.unsqueeze(-1).to(h.dtype)
    return (h * m).sum(1) / m.sum(1).clamp_min(1.0)


def last_pool(h: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    if mask is None:
        return h[:, -1]
    t = torch.arange(h.shape[1], device=h.device)
    last = torch.where(mask, t, 0).amax(1)  # the last non-pad position
    return h[torch.arange(h.shape[0], device=h.device), last]


# --- families: a spec → one recurrent layer ------------------------------------------------------


def recurrent_layer(spec: ModelSpec, horizon: int) -> RecurrentLayer:
    """One recurrent layer of the spec's family: the composed linear recurrence takes the layer
    factors and the ``horizon`` (the task's sequence length); every other family
    (catalogue.FAMILIES) is built from the sizes alone."""
    layer = catalogue.FAMILIES.load(spec.family)
    if issubclass(layer, LinearRecurrence):
        return layer(spec.d_model, spec.state_dim, spec.heads, spec.parameterisation, spec.normalisation,
                     spec.nonlinearity, spec.init, horizon)
    return layer(spec.d_model, spec.state_dim)


class Block(nn.Module):
    """Pre-norm residual block; bidirectional runs a second layer on the reversed sequence and sums."""

    def __init__(self, spec: ModelSpec, horizon: int):
        super().__init__()
        d = spec.d_model
        self.norm = catalogue.NORMS.load(spec.norm)(d)
        self.forward_layer: RecurrentLayer = recurrent_layer(spec, horizon)
        self.backward_layer: RecurrentLayer | None = recurrent_layer(spec, horizon) if spec.bidirectional else None
        self.activation = catalogue.ACTIVATIONS.load(spec.activation)(d)
        self.dropout = nn.Dropout(spec.dropout) if spec.dropout > 0 else nn.Identity()  # p = 0 still copies

    def layers(self) -> list[RecurrentLayer]:
        return [self.forward_layer] + ([self.backward_layer] if self.backward_layer is not None else [])

    def forward(self, x: torch.Tensor, return_norms: bool = False) -> tuple[torch.Tensor, list[torch.Tensor]]:
        h = self.norm(x)
        norms = []
        if return_norms:
            y, n = self.forward_layer(h, return_norms=True)
            norms.append(n)
        else:
            y = self.forward_layer(h)
        if self.backward_layer is not None:
            # Norms of the backward layer stay in its own time order: index t = t steps since its start.
            if return_norms:
                yb, nb = self.backward_layer(h.flip(1), return_norms=True)
                norms.append(nb)
            else:
                yb = self.backward_layer(h.flip(1))
            y = y + yb.flip(1)
        return x + self.dropout(self.activation(y)), norms


class Network(nn.Module):
    """Encoder → ``layers`` blocks → pooled (classification) or per-step decoder."""

    def __init__(self, spec: ModelSpec, task: TaskInfo):
        super().__init__()
        d = spec.d_model
        self.input_kind = task.input_kind
        self.output_kind = task.output_kind
        if self.input_kind == "tokens":
            self.encoder: nn.Module = nn.Embedding(task.vocab_size, d)
        elif self.input_kind == "continuous":
            self.encoder = nn.Linear(task.input_dim, d)
        else:
            raise ValueError(f"unknown input_kind {task.input_kind!r}; valid: tokens, continuous")
        if self.output_kind not in ("classification", "per_step"):
            raise ValueError(f"unknown output_kind {task.output_kind!r}; valid: classification, per_step")
        self.blocks = nn.ModuleList(Block(spec, task.seq_len) for _ in range(spec.layers))
        self.pool = catalogue.POOLINGS.load(spec.pooling)
        self.decoder = nn.Linear(d, task.num_classes)

    def forward(self, x: torch.Tensor, return_norms: bool = False) -> Any:
        """Logits (B, C) or (B, L, C); with ``return_norms`` also a list of (B, L, H) per layer."""
        mask = (x != PAD) if self.input_kind == "tokens" else None
        h = self.encoder(x)
        norms: list[torch.Tensor] = []
        for block in self.blocks:
            h, n = block(h, return_norms)
            norms += n
        if self.output_kind == "classification":
            h = self.pool(h, mask)
        logits = self.decoder(h)
        return (logits, norms) if return_norms else logits

    def recurrent_layers(self) -> list[RecurrentLayer]:
        """In forward order; the order of the ``norms`` list."""
        return [layer for block in self.blocks for layer in block.layers()]

    def set_mode(self, mode: str) -> None:
        """'scan' (default), 'conv' or 'sequential' for every recurrent layer that has modes; a
        layer with modes but not this one raises (ValueError naming its modes)."""
        for layer in self.recurrent_layers():
            if layer.modes:
                layer.mode = mode

    def param_groups(self, lr: float, recurrent_lr_factor: float, weight_decay: float) -> list[dict]:
        """AdamW groups: recurrent (lr·factor, no decay), matrices (decay), vectors (no decay)."""
        recurrent = {id(p) for layer in self.recurrent_layers() for p in layer.recurrent_parameters()}
        groups: dict[str, list[nn.Parameter]] = {"recurrent": [], "decay": [], "no_decay": []}
        for p in self.parameters():
            if not p.requires_grad:
                continue
            key = "recurrent" if id(p) in recurrent else "decay" if p.ndim >= 2 else "no_decay"
            groups[key].append(p)
        settings = {
            "recurrent": {"lr": lr * recurrent_lr_factor, "weight_decay": 0.0},
            "decay": {"lr": lr, "weight_decay": weight_decay},
            "no_decay": {"lr": lr, "weight_decay": 0.0},
        }
        return [{"name": k, "params": v, **settings[k]} for k, v in groups.items() if v]


def build_model(model: ModelSpec, task: TaskInfo) -> Network:
    """A ``Network`` for ``model`` (an ``ablate.spec.ModelSpec``, or anything with all its fields)
    and ``task`` (an ``ablate.tasks.data.TaskInfo``, or anything with the fields the network reads:
    input_kind, vocab_size, input_dim, num_classes, output_kind, seq_len)."""
    return Network(model, task)
