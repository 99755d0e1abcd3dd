"""K replicates of one network run as one: a forward pass over a leading replicate axis.

    stacked_forward(models, x, masks, return_norms) -> logits (K, ...), norms [(K, B, L, H)]
    per_replicate(models) -> the modules that run replicate by replicate (not fused)

The K ``Network``s keep their own parameters (each its own initialisation, optimiser, clipping,
probes and checkpoints, exactly as a trial alone); every forward stacks them and runs the
batch-sized work once for all: matrices as batched products, norms and activations elementwise,
and one scan for every replicate. The compiled scans are custom autograd Functions, which
``torch.func.vmap`` cannot batch; they need no batching rule, because their decays are per channel
and may be per sequence: replicate k's sequences are rows k·B … k·B + B − 1 of one scan whose
decay ``a`` (K·B, 1, D) repeats each replicate's λ over its rows (the conv mode, whose kernel is per
channel only, puts the replicates side by side in the channels instead). What depends on the
parameters alone (a layer's ``system()``: λ, B, C, a rotation's basis) is computed by the layer's
own code: for a parameterisation whose heads are independent (``_WIDE``) once, on the K
replicates' parameters joined along the head axis (K·H heads: one batched basis for all), else per
replicate and stacked; either way the fused pass computes what each replicate would alone, to
rounding. In an evaluation (no gradients) the joined system is kept while no parameter changes.

A module of a kind this file does not know (torch's GRU/LSTM, the batch norm, a plug-in) runs
replicate by replicate on its slice: still exact, only not faster. ``per_replicate`` lists them.
On the CPU the layer norm runs so on purpose: torch's kernel applies each replicate's affine
weights in its own pass.

Dropout takes the masks the caller drew from each replicate's own random stream (``masks``, one
(K, B, L, d) tensor per block), so replicate k's masks are the ones its trial alone would draw.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ablate.models.minrnn import MinGRU, MinLSTM, log_g
from ablate.models.network import GLU, PAD, Block, Gelu, HalfGLU, Network, NoNorm, RMSNorm
from ablate.models.normalisations import Gamma, GammaRecomputed, NoNormalisation, Xi
from ablate.models.parameterisations import ComplexDiagonal, Parameterisation, RealDiagonal, Rotation
from ablate.models.recurrent import LinearRecurrence, conv_scan
from ablate.ops.scan import linear_scan, log_scan, widened

_NORMS = (NoNorm, RMSNorm, nn.LayerNorm)
_ACTIVATIONS = (Gelu, GLU, HalfGLU)
_LAYERS = (LinearRecurrence, MinGRU, MinLSTM)


def _stack(modules: Sequence[nn.Module], name: str) -> torch.Tensor:
    return torch.stack([getattr(m, name) for m in modules])


def _rows(x: torch.Tensor, W: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x (K, ..., i) times W (K, o, i) transposed, plus bias (K, o): replicate k's ``F.linear``."""
    K, i = x.shape[0], x.shape[-1]
    flat = x.reshape(K, -1, i)
    Wt = W.mT.contiguous()  # torch's CPU bmm takes twice as long with the transposed view (L 784)
    out = torch.bmm(flat, Wt) if bias is None else torch.baddbmm(bias[:, None], flat, Wt)
    return out.reshape(*x.shape[:-1], W.shape[1])


def _linear(mods: Sequence[nn.Linear], x: torch.Tensor) -> torch.Tensor:
    bias = None if mods[0].bias is None else _stack(mods, "bias")
    return _rows(x, _stack(mods, "weight"), bias)


def _one_by_one(mods: Sequence[nn.Module], x: torch.Tensor, *args: Any) -> torch.Tensor:
    # unbind, not x[k]: the backward of K indexings adds K full-size zero-padded gradients
    return torch.stack([m(part, *args) for m, part in zip(mods, x.unbind(0), strict=True)])


def _broadcast(v: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """(K, d) → (K, 1, …, 1, d) against x (K, …, d)."""
    return v.reshape(v.shape[0], *([1] * (x.dim() - 2)), v.shape[-1])


def _fold(b: torch.Tensor) -> torch.Tensor:
    """(K, B, L, D) → (B, L, K·D): the replicate axis folded into the scan's channels."""
    K, B, L, D = b.shape
    return b.permute(1, 2, 0, 3).reshape(B, L, K * D)


def _unfold(h: torch.Tensor, K: int) -> torch.Tensor:
    B, L, KD = h.shape
    return h.reshape(B, L, K, KD // K).permute(2, 0, 1, 3)


# --- pieces of a block ---------------------------------------------------------------------------


def _norm(mods: Sequence[nn.Module], x: torch.Tensor) -> torch.Tensor:
    kind = type(mods[0])
    if kind is NoNorm:
        return x
    if kind is RMSNorm:
        eps = mods[0].eps
        return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + eps) * _broadcast(_stack(mods, "weight"), x)
    if kind is nn.LayerNorm and x.device.type != "cpu" and mods[0].elementwise_affine and mods[0].bias is not None:
        ln = mods[0]  # on a GPU, one stacked norm and one stacked affine: 2 kernels, not K
        h = F.layer_norm(x, ln.normalized_shape, None, None, ln.eps)
        return torch.addcmul(_broadcast(_stack(mods, "bias"), x), h, _broadcast(_stack(mods, "weight"), x))
    # On the CPU the layer norm replicate by replicate: torch's kernel applies the affine weights in
    # the same pass (forward and backward), where a stacked norm then a stacked affine took 1.6× as
    # long (and its CPU kernel without weights twice as long as with them)
    return _one_by_one(mods, x)


def _activation(mods: Sequence[nn.Module], y: torch.Tensor) -> torch.Tensor:
    kind = type(mods[0])
    if kind is Gelu:
        return F.gelu(y)
    if kind is GLU:
        x = F.gelu(y)
        return _linear([m.w1 for m in mods], x) * torch.sigmoid(_linear([m.w2 for m in mods], x))
    if kind is HalfGLU:
        x = F.gelu(y)
        return x * torch.sigmoid(_linear([m.w for m in mods], x))
    return _one_by_one(mods, y)


# Parameterisations whose heads are independent: K replicates' parameters joined along the head
# axis (the axis each tensor is joined on) are one parameterisation of K·H heads, whose own
# ``system`` computes every replicate's at once (a RotRNN basis: one batched eigendecomposition
# and one ``serial`` call instead of K). Attributes counting heads, state or modes grow K-fold.
_WIDE: dict[type, tuple[dict[str, int], tuple[str, ...]]] = {
    Rotation: ({"M": 0, "gamma_log": 0, "theta": 0, "B": 0, "C": 1}, ("heads", "state_dim")),
    ComplexDiagonal: ({"nu_log": 0, "theta_log": 0, "B_re": 0, "B_im": 0, "C_re": 1, "C_im": 1},
                      ("heads", "state_dim", "K")),
    RealDiagonal: ({"nu_log": 0, "B": 0, "C": 1}, ("heads", "state_dim")),
}
# Normalisations that read only the parameterisation they are given, or per-unit parameters
_WIDE_NORMS: dict[type, dict[str, int]] = {Xi: {}, GammaRecomputed: {}, NoNormalisation: {}, Gamma: {"gamma_log": 0}}


def _joined(mods: Sequence[nn.Module], axes: dict[str, int], counts: Sequence[str] = ()) -> nn.Module:
    """One module of ``mods[0]``'s class whose tensors named in ``axes`` are the replicates'
    joined on that axis (a graph to each replicate's own), the ``counts`` K-fold; not registered
    anywhere, made anew each pass."""
    first = mods[0]
    wide = object.__new__(type(first))
    wide.__dict__.update(first.__dict__)
    for store in ("_parameters", "_buffers"):
        own = first.__dict__[store]
        wide.__dict__[store] = {**own, **{name: torch.cat([m.__dict__[store][name] for m in mods], axes[name])
                                          for name in axes if name in own}}
    for name in counts:
        wide.__dict__[name] = getattr(first, name) * len(mods)
    if "unit_head" in first.__dict__["_buffers"]:  # each unit's head, among the K·H
        wide.__dict__["_buffers"]["unit_head"] = torch.cat(
            [m.unit_head + k * m.heads for k, m in enumerate(mods)])  # type: ignore[operator]
    wide.__dict__.pop("_basis_cache", None)  # a rotation's cached basis belongs to replicate 0
    return wide


def _joint_system(layers: Sequence[LinearRecurrence]) -> tuple[torch.Tensor, ...] | None:
    """(λ (K, modes), B (K, N, d), C (K, d, N), D (K, d)) of every replicate from one ``system``
    call of the joined parameterisation; None where the layers' kinds do not join (``_WIDE``)."""
    first = layers[0]
    spec, norm_axes = _WIDE.get(type(first.param)), _WIDE_NORMS.get(type(first.norm))
    if spec is None or norm_axes is None:
        return None
    tensors: list[torch.Tensor] = []
    versions: list[int] = []
    if not torch.is_grad_enabled():  # an evaluation's batches: one system while no parameter changes
        tensors = [t for layer in layers for t in layer.parameters()]
        versions = [t._version for t in tensors]
        cached = first.__dict__.get("_joint_cache")
        if (cached is not None and len(cached[0]) == len(tensors) and cached[1] == versions
                and all(a is b for a, b in zip(cached[0], tensors, strict=True))):
            return cached[2]
    joint = _compute_joint(layers, spec, norm_axes)
    if tensors:
        first.__dict__["_joint_cache"] = (tensors, versions, joint)
    return joint


def _compute_joint(layers: Sequence[LinearRecurrence], spec: tuple[dict[str, int], tuple[str, ...]],
                   norm_axes: dict[str, int]) -> tuple[torch.Tensor, ...]:
    first, K = layers[0], len(layers)
    param: Parameterisation = _joined([layer.param for layer in layers], *spec)  # type: ignore[assignment]
    norm = _joined([layer.norm for layer in layers], norm_axes) if norm_axes else first.norm
    system = param.system(norm(param))
    assert system.lam is not None
    N, d = first.state_dim, first.d_model
    C = system.C.reshape(d, K, N).transpose(0, 1)
    return system.lam.reshape(K, -1), system.B.reshape(K, N, d), C, _stack([layer.param for layer in layers], "D")


def _linear_recurrence(layers: Sequence[LinearRecurrence], u: torch.Tensor,
                       norms: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``LinearRecurrence.forward(u, return_norms=True)`` of each replicate, at once."""
    first = layers[0]
    K, Bn, L, _ = u.shape
    joint = None if first.mode == "sequential" or not first.parallel else _joint_system(layers)
    if joint is not None:
        lam, Bs, C, D = joint
        complex_modes = lam.is_complex()
    else:
        systems = [layer.system() for layer in layers]  # parameters only: each replicate's own code
        complex_modes = systems[0].complex_modes
    if first.mode == "sequential" or not first.parallel:
        natural = [m.natural() for m in systems]
        A = torch.stack([n[0] for n in natural])
        B = torch.stack([n[1] for n in natural])
        C = torch.stack([n[2] for n in natural])
        D = torch.stack([m.D for m in systems])
        projected = _rows(u, B)
        bu = projected.to(A.dtype)
        x = bu.new_zeros(K, Bn, bu.shape[-1])
        out = []
        for bu_t in bu.unbind(2):  # as ``sequential_loop``, one bmm for every replicate
            x = torch.bmm(x, A.mT) + bu_t
            if first.act is not None:
                x = first.act(x)
            out.append(x)
        s = torch.stack(out, 2).to(projected.dtype)
    else:
        if joint is None:
            Bs, lam = torch.stack([m.B for m in systems]), torch.stack([m.lam for m in systems])  # λ (K, modes)
            C, D = torch.stack([m.C for m in systems]), torch.stack([m.D for m in systems])
        v = _rows(u, Bs)
        b = v.to(widened(v.dtype)).reshape(K, Bn, L, -1, 2) if complex_modes else v
        b = torch.view_as_complex(b) if complex_modes else b
        if first.mode == "conv":  # a time-invariant kernel per channel: replicates side by side in channels
            z = _unfold(conv_scan(lam.reshape(-1), _fold(b)), K)
        else:  # replicates stacked in the batch, each sequence with its replicate's decays: no copies
            a = lam[:, None].expand(K, Bn, lam.shape[-1]).reshape(K * Bn, 1, -1)
            z = linear_scan(a, b.reshape(K * Bn, L, -1)).reshape(b.shape)
        s = torch.view_as_real(z).reshape(K, Bn, L, -1).to(v.dtype) if complex_modes else z
    y = torch.addcmul(_rows(s, C), u, _broadcast(D, u))  # C x + D ⊙ u, as the layer computes it
    if not norms:
        return y, None
    N = s.shape[-1]
    return y, s.reshape(K, Bn, L, first.heads, N // first.heads).square().sum(-1)


def _min_rnn(layers: Sequence[MinGRU | MinLSTM], u: torch.Tensor,
             norms: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``MinRNN.forward(u, return_norms=True)`` (the log-space scan) of each replicate, at once."""
    first = layers[0]
    p = _linear([layer.proj for layer in layers], u).unflatten(-1, (first.n_gates + 1, first.state_dim))
    log_a, log_w = first.log_coefficients(p[..., :-1, :])  # elementwise in the gates: no parameters
    flat = (-1, *log_a.shape[2:])  # replicates stacked in the batch: the gates are per sequence anyway
    h = torch.exp(log_scan(log_a.reshape(flat), (log_w + log_g(p[..., -1, :])).reshape(flat))).reshape(log_a.shape)
    y = h if isinstance(first.out, nn.Identity) else _linear([layer.out for layer in layers], h)
    return y, h.square().sum(-1, keepdim=True) if norms else None


def _recurrence(layers: Sequence[nn.Module], u: torch.Tensor,
                norms: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
    kind = type(layers[0])
    if kind is LinearRecurrence:
        return _linear_recurrence(layers, u, norms)  # type: ignore[arg-type]
    if kind in (MinGRU, MinLSTM) and layers[0].mode == "scan":
        return _min_rnn(layers, u, norms)  # type: ignore[arg-type]
    pairs = [layer(part, return_norms=True) for layer, part in zip(layers, u.unbind(0), strict=True)]
    return torch.stack([p[0] for p in pairs]), torch.stack([p[1] for p in pairs]) if norms else None


def _block(blocks: Sequence[Block], x: torch.Tensor, mask: torch.Tensor | None,
           norms: bool = True) -> tuple[torch.Tensor, list]:
    h = _norm([b.norm for b in blocks], x)
    y, n = _recurrence([b.forward_layer for b in blocks], h, norms)
    found = [n]
    if blocks[0].backward_layer is not None:
        yb, nb = _recurrence([b.backward_layer for b in blocks], h.flip(2), norms)
        found.append(nb)
        y = y + yb.flip(2)
    a = _activation([b.activation for b in blocks], y)
    return x + (a if mask is None else a * mask), found if norms else []


def stacked_forward(
    models: Sequence[Network], x: torch.Tensor, masks: Sequence[torch.Tensor] | None = None,
    return_norms: bool = True,
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Logits (K, B, C) or (K, B, L, C) and per recurrent layer norms (K, B, L, H) of replicate k's
    ``models[k](x[k], return_norms=True)``, in one pass. ``masks``: per block the dropout mask
    (K, B, L, d) the replicates' own streams drew (already divided by 1 − p), or None without dropout;
    the models must be in training mode for them to apply (eval: pass None). Without
    ``return_norms`` (an evaluation) the norms are not computed and the list is empty."""
    first, K = models[0], len(models)
    if x.shape[0] != K:
        raise ValueError(f"stacked_forward: x has {x.shape[0]} replicates, there are {K} models")
    pad_mask = (x != PAD) if first.input_kind == "tokens" else None
    encoder = type(first.encoder)
    if encoder is nn.Embedding and first.encoder.padding_idx is None and first.encoder.max_norm is None:
        W = _stack([m.encoder for m in models], "weight")  # (K, V, d): row k·V + i is replicate k's token i
        offset = torch.arange(K, device=x.device).view(K, *([1] * (x.dim() - 1))) * W.shape[1]
        h = F.embedding(x + offset, W.reshape(-1, W.shape[-1]))
    elif encoder is nn.Linear:
        h = _linear([m.encoder for m in models], x)
    else:
        h = _one_by_one([m.encoder for m in models], x)
    norms: list[torch.Tensor] = []
    for i in range(len(first.blocks)):
        active = masks[i] if masks is not None and first.training else None
        h, n = _block([m.blocks[i] for m in models], h, active, return_norms)
        norms += n
    if first.output_kind == "classification":
        flat_mask = None if pad_mask is None else pad_mask.flatten(0, 1)
        h = first.pool(h.flatten(0, 1), flat_mask).unflatten(0, (K, x.shape[1]))
    return _linear([m.decoder for m in models], h), norms


def per_replicate(model: Network) -> list[str]:
    """The modules of ``model`` a fused pass runs replicate by replicate (correct, not faster):
    empty where every part fuses."""
    out: list[str] = []
    if not (type(model.encoder) is nn.Linear or type(model.encoder) is nn.Embedding):
        out.append(f"encoder {type(model.encoder).__name__}")
    block = model.blocks[0] if len(model.blocks) else None
    if block is not None:
        if type(block.norm) not in _NORMS:
            out.append(f"norm {type(block.norm).__name__}")
        if type(block.activation) not in _ACTIVATIONS:
            out.append(f"activation {type(block.activation).__name__}")
        layer = block.forward_layer
        if type(layer) not in _LAYERS or (type(layer) in (MinGRU, MinLSTM) and layer.mode != "scan"):
            out.append(f"recurrent layer {type(layer).__name__}")
    return out
