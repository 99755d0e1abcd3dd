"""Hidden-state norm stability probes: what a trial measures about its recurrent states (issue 8).

At step 0, every ``probes.every`` steps and at the end, ``Prober.probe`` runs in eval mode and
returns tidy rows (``CURVE_SCHEMA``: step, layer, head, t, value, kind, quantity):

    kind         quantity                         t        value
    probe        norm_sq                          0..L-1   batch mean of ‖x_t^h‖² on the fixed probe batch
                 norm_sq_mean / norm_sq_last      -1       its mean over t / its value at the last t
    white_noise  (as probe)                                unit-variance Gaussian input straight into
                                                           each recurrent layer (fixed seed)
    theory       (as probe) + norm_sq_stationary  -1       E‖x_t^h‖² from x_0 = 0 under white unit input:
                                                           1 − γ_h^{2t} for ξ; Σ_j |γ_j|²‖B_j‖²(1−|λ_j|^{2t})/(1−|λ_j|²)
    spectrum     abs / phase                      mode j   |λ_j| and arg λ_j (one per conjugate pair)
                 head_decay                       -1       γ_h (rotation) or the head's slowest |λ|
                 input_scale                      unit     what multiplies B: ξ_h, the LRU's γ_j, ...
    grad         <group> (layer -1),              -1       gradient norm before clipping, at probe steps
                 <parameter name> (layer i)

The layers report, this module only turns reports into rows: the norms come from the model's
forward pass (``return_norms``) and ``RecurrentLayer.state_norms``, theory and spectrum from one
``RecurrentLayer.dynamics()`` per layer and probe (the closed forms live in ``ablate.models``).
Layers without fixed dynamics (minGRU/minLSTM, GRU/LSTM) report none, nonlinear ones no theory.

``t`` counts from 0 = the state after the first input (x_1); a backward layer's t counts from its
own start. ``head`` is -1 where a row is not per head. During training ``Prober.keep_train`` keeps
the training batch's own norms (from the forward pass that computes the loss, no extra pass) at
logging steps; ``Prober.train_rows`` turns them into ``kind = "train"`` rows (norm_sq_mean,
norm_sq_last per layer and head).

The probe batch is the first ``probes.batch`` validation examples, identical for every cell and seed
of a study whose cells share the task; ``fingerprint`` hashes it so that a study can check this.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import polars as pl
import torch

from ablate.models import Network
from ablate.models.recurrent import Dynamics, RecurrentLayer
from ablate.spec import ProbeSpec

CURVE_SCHEMA: dict[str, Any] = {
    "step": pl.Int64,
    "layer": pl.Int32,
    "head": pl.Int32,
    "t": pl.Int32,
    "value": pl.Float64,
    "kind": pl.Utf8,
    "quantity": pl.Utf8,
}
CURVE_KINDS = ("probe", "white_noise", "theory", "train")
SUMMARY = -1  # the t of a row that is not a time step


def empty() -> pl.DataFrame:
    return pl.DataFrame(schema=CURVE_SCHEMA)


_DTYPES = {"step": np.int64, "layer": np.int32, "head": np.int32, "t": np.int32, "value": np.float64,
           "kind": object, "quantity": object}


Columns = dict[str, np.ndarray]  # one block of rows, column by column: cheap to build and stack


def _columns(step: Any, layer: Any, head: Any, t: Any, value: Any, kind: Any, quantity: Any) -> Columns:
    value = np.asarray(value, dtype=np.float64).reshape(-1)
    given = {"step": step, "layer": layer, "head": head, "t": t, "kind": kind, "quantity": quantity}
    out = {k: np.broadcast_to(np.asarray(v, dtype=_DTYPES[k]), value.shape) for k, v in given.items()}
    return {**out, "value": value}


def _to_frame(blocks: Sequence[Columns]) -> pl.DataFrame:
    """One frame from many blocks: a probe makes dozens, and a polars frame each would cost more
    than the probe's forward passes on a small model."""
    if not blocks:
        return empty()
    cols = {k: np.concatenate([b[k] for b in blocks]) for k in CURVE_SCHEMA}
    data = {k: (cols[k].tolist() if _DTYPES[k] is object else cols[k]) for k in CURVE_SCHEMA}
    return pl.DataFrame(data, schema=CURVE_SCHEMA)


def fingerprint(x: torch.Tensor) -> float:
    """A float in [0, 1) that identifies a tensor's shape, dtype and contents (52 bits of SHA-256).

    Logged as a metric, so runs of one study can be checked to have probed identical inputs."""
    h = hashlib.sha256(f"{tuple(x.shape)}{x.dtype}".encode())
    h.update(x.detach().cpu().contiguous().numpy().tobytes())
    return int.from_bytes(h.digest()[:8], "big") % (1 << 52) / float(1 << 52)


def white_noise(batch: int, length: int, d_model: int, seed: int) -> torch.Tensor:
    """(batch, length, d_model) i.i.d. N(0, 1) from its own generator: the same for every trial."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(batch, length, d_model, generator=gen)


# --- state norms ------------------------------------------------------------------------------


def curve_rows(norms: Sequence[torch.Tensor], step: int, kind: str) -> pl.DataFrame:
    """Per layer (B, L, H) squared norms → the batch-mean curve over t and its two summaries."""
    return _to_frame(_curve_blocks(norms, step, kind))


def _curve_blocks(norms: Sequence[torch.Tensor], step: int, kind: str) -> list[Columns]:
    blocks: list[Columns] = []
    for layer, sq in enumerate(norms):
        blocks += _curve_columns(sq.detach().double().mean(0).cpu().numpy(), step, layer, kind)  # (L, H)
    return blocks


def _curve_columns(curve: np.ndarray, step: int, layer: int, kind: str) -> list[Columns]:
    """(L, H) curve of one layer → norm_sq rows per (head, t) plus norm_sq_mean / norm_sq_last."""
    L, H = curve.shape
    heads = np.arange(H)
    return [
        _columns(step, layer, np.repeat(heads, L), np.tile(np.arange(L), H), curve.T.reshape(-1), kind, "norm_sq"),
        _columns(step, layer, heads, SUMMARY, curve.mean(0), kind, "norm_sq_mean"),
        _columns(step, layer, heads, SUMMARY, curve[-1], kind, "norm_sq_last"),
    ]


@torch.no_grad()
def probe_norms(model: Network, x: torch.Tensor, step: int) -> pl.DataFrame:
    """``kind = "probe"`` rows: batch mean of ‖x_t^h‖² per layer, head and t on ``x``, in eval mode."""
    was_training = model.training
    model.eval()
    try:
        _, norms = model(x, return_norms=True)
    finally:
        model.train(was_training)
    return curve_rows(norms, step, "probe")


def train_summary(norms: Sequence[torch.Tensor]) -> torch.Tensor:
    """(layers, H, 2) on the device, no sync: per layer and head the batch mean of ‖x_t^h‖² over t,
    and at the last t. From the norms the training forward pass returns anyway."""
    return torch.stack([torch.stack([sq.detach().mean((0, 1)), sq.detach()[:, -1].mean(0)], -1) for sq in norms])


def train_rows(summary: torch.Tensor, step: int) -> pl.DataFrame:
    """``kind = "train"`` rows from ``train_summary`` (possibly averaged over micro-batches)."""
    return _to_frame(_train_blocks(summary.double().cpu().numpy(), step))


def _train_blocks(values: np.ndarray, step: int) -> list[Columns]:
    layers, heads = values.shape[:2]  # (layers, H, 2)
    layer, head = np.repeat(np.arange(layers), heads), np.tile(np.arange(heads), layers)
    return [_columns(step, layer, head, SUMMARY, values[..., i].reshape(-1), "train", quantity)
            for i, quantity in enumerate(("norm_sq_mean", "norm_sq_last"))]


# --- theory and spectra: what each layer reports as its ``dynamics`` ------------------------------


def dynamics(layers: Sequence[RecurrentLayer], length: int | None, spectrum: bool = True) -> list[Dynamics]:
    """Each layer's ``Dynamics`` of this pass, computed once per probe (theory over ``length``)."""
    with torch.no_grad():
        return [layer.dynamics(length, spectrum) for layer in layers]


def theory_rows(layers: Sequence[RecurrentLayer], length: int, step: int) -> pl.DataFrame:
    """``kind = "theory"`` rows for every layer with a closed form: the white-input expectation from x_0 = 0."""
    return _to_frame(_theory_blocks(dynamics(layers, length, spectrum=False), step))


def _theory_blocks(reports: Sequence[Dynamics], step: int) -> list[Columns]:
    blocks: list[Columns] = []
    for i, d in enumerate(reports):
        if d.expected_norms is None or d.stationary_norms is None:
            continue  # no closed form (nonlinear or input-dependent recurrences)
        blocks += _curve_columns(d.expected_norms.double().cpu().numpy(), step, i, "theory")  # (L, H), t = 1..L
        stat = d.stationary_norms.cpu().numpy()
        blocks.append(_columns(step, i, np.arange(stat.size), SUMMARY, stat, "theory", "norm_sq_stationary"))
    return blocks


def spectrum_rows(layers: Sequence[RecurrentLayer], step: int) -> pl.DataFrame:
    """``kind = "spectrum"`` rows: |λ|, phase per mode; γ_h per head; the input scale per unit."""
    return _to_frame(_spectrum_blocks(dynamics(layers, None), step))


def _spectrum_blocks(reports: Sequence[Dynamics], step: int) -> list[Columns]:
    blocks: list[Columns] = []
    for i, d in enumerate(reports):
        if d.modes.numel() == 0:
            continue  # input-dependent recurrences (minGRU, GRU, ...) have no fixed spectrum
        lam = d.modes.to(torch.complex128) if d.modes.is_complex() else d.modes.double()
        head = d.mode_head.cpu().numpy()
        j = np.arange(lam.numel())
        blocks.append(_columns(step, i, head, j, lam.abs().cpu().numpy(), "spectrum", "abs"))
        phase = lam.angle() if lam.is_complex() else torch.where(lam < 0, torch.pi, 0.0)
        blocks.append(_columns(step, i, head, j, phase.double().cpu().numpy(), "spectrum", "phase"))
        if d.head_decay is not None:
            decay = d.head_decay.double().cpu().numpy()
            blocks.append(_columns(step, i, np.arange(decay.size), SUMMARY, decay, "spectrum", "head_decay"))
        if d.input_scale is not None and d.unit_head is not None:
            scale = d.input_scale.double().cpu().numpy()
            blocks.append(_columns(step, i, d.unit_head.cpu().numpy(), np.arange(scale.size), scale, "spectrum",
                                   "input_scale"))
    return blocks


# --- gradients -----------------------------------------------------------------------------------


def grad_rows(model: Network, groups: Sequence[dict[str, Any]], step: int) -> pl.DataFrame:
    """``kind = "grad"`` rows: ‖∇‖ per optimiser group and in total (layer -1), and per named
    parameter of each recurrent layer (layer i). One device sync. Call before clipping."""
    named: list[tuple[int, str, torch.Tensor]] = []
    for i, layer in enumerate(model.recurrent_layers()):
        for name, p in layer.named_parameters():
            if p.grad is not None:
                named.append((i, name, p))
    grouped: list[tuple[str, torch.Tensor]] = []
    for g, group in enumerate(groups):
        for p in group["params"]:
            if p.grad is not None:
                grouped.append((str(group.get("name", g)), p))
    tensors = [p.grad.detach() for _, p in grouped] + [p.grad.detach() for _, _, p in named]
    if not tensors:
        return empty()
    norms = torch.stack(torch._foreach_norm([g.float() for g in tensors])).double().cpu().numpy()  # one kernel
    sq: dict[str, float] = {}
    for (name, _), n in zip(grouped, norms[: len(grouped)], strict=True):
        sq[name] = sq.get(name, 0.0) + float(n) ** 2
    names = [*sq, "total"]
    values = [*(np.sqrt(v) for v in sq.values()), np.sqrt(sum(sq.values()))]
    rows = [_columns(step, -1, -1, SUMMARY, values, "grad", names)]
    if named:
        rows.append(_columns(step, [i for i, _, _ in named], -1, SUMMARY, norms[len(grouped):], "grad",
                             [n for _, n, _ in named]))
    return _to_frame(rows)


# --- the per-trial driver --------------------------------------------------------------------------


class Prober:
    """Everything a trial probes, configured by a ``ProbeSpec``; returns frames to ``log_curves``.

    ``x_probe`` is the fixed probe batch (already on the model's device). The white-noise input has
    the probe's length, ``d_model`` features and ``spec.white_noise_seed``: the same in every trial
    of a study with one ``d_model``.
    """

    def __init__(self, model: Network, spec: ProbeSpec, x_probe: torch.Tensor,
                 groups: Sequence[dict[str, Any]] = ()) -> None:
        self.model, self.spec, self.x = model, spec, x_probe
        self.groups = list(groups)
        self.length = int(x_probe.shape[1])
        self.layers = model.recurrent_layers()
        self.noise: torch.Tensor | None = None
        self.pending_train: list[tuple[int, np.ndarray]] = []  # kept summaries (a checkpoint saves them)
        if spec.enabled and spec.white_noise and self.layers:
            d_model = self.layers[0].d_model
            self.noise = white_noise(spec.white_noise_batch, self.length, d_model, spec.white_noise_seed)
            self.noise = self.noise.to(x_probe.device)

    def fingerprints(self) -> dict[str, float]:
        """Metrics identifying the probe inputs (the same in every trial that shares them)."""
        if not self.spec.enabled:
            return {}
        out = {"probe/batch_fingerprint": fingerprint(self.x)}
        if self.noise is not None:
            out["probe/white_noise_fingerprint"] = fingerprint(self.noise)
        return out

    @torch.no_grad()
    def probe(self, step: int) -> pl.DataFrame:
        """Real-data probe, white-noise probe, theory and spectrum at ``step`` (eval mode)."""
        if not self.spec.enabled:
            return empty()
        model = self.model
        was_training = model.training
        model.eval()
        try:
            _, norms = model(self.x, return_norms=True)
            blocks = _curve_blocks(norms, step, "probe")
            if self.noise is not None:
                noise_norms = [layer.state_norms(self.noise) for layer in self.layers]
                blocks += _curve_blocks(noise_norms, step, "white_noise")
            if self.spec.theory or self.spec.spectrum:
                reports = dynamics(self.layers, self.length if self.spec.theory else None, self.spec.spectrum)
                if self.spec.theory:
                    blocks += _theory_blocks(reports, step)
                if self.spec.spectrum:
                    blocks += _spectrum_blocks(reports, step)
        finally:
            model.train(was_training)
        return _to_frame(blocks)

    def keep_train(self, summary: torch.Tensor | None, step: int) -> None:
        """Keep a logging step's ``train_summary``; ``train_rows`` hands them over in one frame."""
        if self.spec.enabled and summary is not None:
            self.pending_train.append((step, summary.double().cpu().numpy()))

    def train_rows(self) -> pl.DataFrame:
        """The ``kind = "train"`` rows kept since the last call (one frame: cheaper than one per step)."""
        blocks = [b for step, values in self.pending_train for b in _train_blocks(values, step)]
        self.pending_train = []
        return _to_frame(blocks)

    def grad_rows(self, step: int) -> pl.DataFrame:
        if not (self.spec.enabled and self.spec.grads):
            return empty()
        return grad_rows(self.model, self.groups, step)

