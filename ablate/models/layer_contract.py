"""What a linear_rnn layer promises, checked on a tiny batch (``contract.check_model`` calls these):
the parameterisation's shapes before the forward pass (docs/plugins.md §2), which tensor turned a
non-finite output non-finite first, and that the layer's dynamics computes and its scan, sequential
loop and step agree. Each broken promise raises ``Broken`` with its words.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from ablate import plugins, terminal

BATCH, STEPS = 2, 8
#: scan against the sequential loop and the step, relative to the output's scale (float32)
AGREE = 1e-3


class Broken(Exception):
    """One broken promise (the message says which)."""


@contextlib.contextmanager
def promise(what: str) -> Iterator[None]:
    """Whatever the plug-in's code raises inside is the promise ``what`` broken (``Broken``), its cause kept."""
    try:
        yield
    except Broken:
        raise
    except plugins.PluginError as exc:  # names the plug-in already; what follows its name is the news
        raise Broken(f"{what} failed: {str(exc).split(': ', 1)[-1]}") from exc
    except Exception as exc:  # a plug-in's own failure, whatever its type, is the broken promise
        raise Broken(f"{what} failed: {type(exc).__name__}: {terminal.one_line(exc)}") from exc


def finite(t: Any, what: str) -> None:
    import torch

    if not torch.isfinite(t).all():
        raise Broken(f"{what} is not finite")


@contextlib.contextmanager
def in_layer(k: int, layers: int) -> Iterator[None]:
    """A broken promise of the k-th of several recurrent layers says which."""
    try:
        yield
    except Broken as exc:
        if layers < 2:
            raise
        raise Broken(f"recurrent layer {k}: {exc}") from exc.__cause__


def _shape_of(t: Any) -> str:
    return str(tuple(t.shape)) if hasattr(t, "shape") else f"no shape (a {type(t).__name__})"


def _expect(t: Any, want: tuple[int, ...], what: str, rule: str, hint: str = "") -> None:
    """``t`` is a tensor of shape ``want``: else 'WHAT has shape (..); expected RULE = WANT'."""
    import torch

    if not isinstance(t, torch.Tensor) or tuple(t.shape) != want:
        raise Broken(f"{what} has shape {_shape_of(t)}; expected {rule} = {want}{hint}")


def _entries(mask: Any, noun: tuple[str, str] = ("entry", "entries"), limit: int = 4) -> str:
    """Where a mask holds: 'entries 0, 3 of 8' (``noun``: singular and plural)."""
    idx = [int(i) for i in mask.flatten().nonzero().flatten()[:limit]]
    more = ", …" if int(mask.sum()) > limit else ""
    return f"{noun[0] if len(idx) == 1 and not more else noun[1]} {', '.join(map(str, idx))}{more} of {mask.numel()}"


def _non_finite(t: Any, what: str) -> None:
    import torch

    if not bool(torch.isfinite(t).all()):
        raise Broken(f"{what} is not finite ({_entries(~torch.isfinite(t.detach()).flatten())})")


#: What a parameterisation's declared recurrent parameters are for: said where none is declared.
RECURRENT_RULE = ("train.recurrent_lr_factor and the no-weight-decay rule apply to these (as to the built-ins' "
                  "ν, θ, γ, M and B); with none declared, λ and B train at the full learning rate with weight decay, "
                  "and the plug-in is not compared with the built-ins on equal terms")


def _scale_name(layer: Any) -> str:
    from ablate.models.normalisations import Xi

    return ("ξ's scale (head_xi() per unit)" if isinstance(layer.norm, Xi)
            else f"the normalisation's scale ({type(layer.norm).__name__})")


def check_shapes(layer: Any) -> None:
    """Before the forward pass: the parameterisation's declared recurrent parameters, ``unit_head``,
    ``unit_log_magnitude()``, ``head_gain()``, the normalisation's scale and ``system()``'s
    tensors against docs/plugins.md §2, each reported by its name with what was expected."""
    import torch

    param, heads = layer.param, layer.heads
    with promise("recurrent_parameters()"):
        declared = list(param.recurrent_parameters())
    if not declared:
        raise Broken(f"recurrent_parameters() is empty; a linear_rnn parameterisation returns the parameters "
                     f"its λ and B are made of: {RECURRENT_RULE}")
    unit_head = param.unit_head
    if not isinstance(unit_head, torch.Tensor) or unit_head.dim() != 1 or unit_head.is_floating_point() \
            or unit_head.is_complex() or not len(unit_head):
        raise Broken(f"unit_head is {_shape_of(unit_head)}, {getattr(unit_head, 'dtype', '')}; expected a "
                     "non-empty 1-D integer tensor: the head of each normalisation unit (a complex mode, a real "
                     "mode or a dense head)")
    units = len(unit_head)
    outside = (unit_head < 0) | (unit_head >= heads)
    if bool(outside.any()):
        raise Broken(f"unit_head has values outside [0, heads) = [0, {heads}) at {_entries(outside)} "
                     f"(values {sorted({int(v) for v in unit_head[outside]})[:4]})")
    with torch.no_grad():
        with promise("unit_log_magnitude()"):
            log_mag = param.unit_log_magnitude()
        _expect(log_mag, (units,), "unit_log_magnitude()", "(len(unit_head),)", " (log |λ| per unit)")
        _non_finite(log_mag, "unit_log_magnitude()")
        with promise("head_gain()"):
            gain = param.head_gain()
        per_unit = " (one per unit, not per head: ξ indexes it by each unit's head)" \
            if hasattr(gain, "shape") and tuple(gain.shape) == (units,) else ""
        _expect(gain, (heads,), "head_gain()", "(heads,)", per_unit)
        _non_finite(gain, "head_gain()")
        if not bool((gain > 0).all()):
            raise Broken(f"head_gain() is not > 0 at {_entries(~(gain > 0), ('head', 'heads'))} (smallest {float(gain.min()):.3g}): "
                         "it is each head's stationary state power Σ ‖b_j‖² / (1 − |λ_j|²), positive where every "
                         "|λ| < 1 (is unit_log_magnitude() below 0?)")
        scale_name = _scale_name(layer)
        with promise(scale_name):
            scale = layer.norm(param)
        if scale is not None:
            _expect(scale, (units,), scale_name, "(len(unit_head),)")
            _non_finite(scale, scale_name)
        with promise("system()"):
            system = param.system(scale)
        _check_system(system, layer, units)


def _check_system(system: Any, layer: Any, units: int) -> None:
    """``system()``'s tensors against their documented shapes (``System``, docs/plugins.md §2)."""
    from ablate.models.parameterisations import System

    N, d, H = layer.state_dim, layer.d_model, layer.heads
    if not isinstance(system, System):
        raise Broken(f"system() returned a {type(system).__name__}, not an ablate.models.parameterisations.System")
    lam = system.lam
    if lam is None:
        if system.A is None:
            raise Broken("system() has neither lam (the diagonal form a scan runs) nor A (the matrix a loop runs)")
        if not layer.param.sequential_only:
            raise Broken("system().lam is None (no diagonal form) but the parameterisation does not set "
                         "sequential_only = True, so the layer would scan it")
    else:
        if lam.is_complex():
            _expect(lam, (N // 2,), "system().lam", "(state_dim/2,) for complex modes")
        else:
            _expect(lam, (N,), "system().lam", "(state_dim,) for real modes")
        if system.log_mag is not None:
            _expect(system.log_mag, tuple(lam.shape), "system().log_mag", "the shape of lam")
        if len(lam) != units:
            raise Broken(f"system().lam has {len(lam)} modes and unit_head {units} entries: a unit is a mode of lam "
                         "(a complex one: an interleaved (re, im) pair of B's rows; or a real one), and the scale "
                         "has one entry per unit")
    _expect(system.B, (N, d), "system().B", "(state_dim, d_model)")
    _expect(system.C, (d, N), "system().C", "(d_model, state_dim)")
    _expect(system.D, (d,), "system().D", "(d_model,)")
    if system.P is not None:
        n = N // H
        _expect(system.P, (H, n, n), "system().P", "(heads, state_dim/heads, state_dim/heads)")
    if system.A is not None:
        _expect(system.A, (N, N), "system().A", "(state_dim, state_dim)")


def first_non_finite(layers: list[Any]) -> str:
    """Which of head_gain(), the normalisation's scale and system()'s tensors is non-finite first
    (in the order the forward pass computes them), for a non-finite output; what is left if none."""
    import torch

    for k, layer in enumerate(layers):
        where = f"recurrent layer {k}'s " if len(layers) > 1 else ""
        try:
            with torch.no_grad():
                steps: list[tuple[str, Callable[[], Any]]] = [("head_gain()", layer.param.head_gain)]
                scale = layer.norm(layer.param)
                system = layer.param.system(scale)
        except Exception:  # computed before the pass without failing; now the pass's own message stands
            continue
        steps += [(_scale_name(layer), lambda s=scale: s)]
        steps += [(f"system().{f}", lambda f=f, s=system: getattr(s, f)) for f in ("lam", "log_mag", "B", "C", "D", "P", "A")]
        for what, get in steps:
            try:
                t = get()
            except Exception:
                continue
            if isinstance(t, torch.Tensor) and not bool(torch.isfinite(t).all()):
                return f"{where}{what} is non-finite first ({_entries(~torch.isfinite(t.detach()).flatten())})"
    return ("head_gain(), the normalisation's scale and system()'s tensors are finite: the recurrence or a later "
            "part of the network made it non-finite")


def check_layer(layer: Any) -> list[str]:
    """``dynamics`` and which outputs agree (``scan = loop = step`` or ``loop = step``)."""
    import torch

    own = {id(p) for p in layer.parameters()}
    with promise("recurrent_parameters()"):
        recurrent = layer.recurrent_parameters()
    if any(id(p) not in own for p in recurrent):
        raise Broken("recurrent_parameters() returns a tensor that is not a parameter of the layer")
    if recurrent and all(p.grad is None for p in recurrent):
        raise Broken("no recurrent parameter receives a gradient")
    with promise("dynamics() (what the probes read)"):
        layer.dynamics(length=STEPS)
    u = torch.randn(BATCH, STEPS, layer.d_model)
    with torch.no_grad():
        with promise("the sequential loop"):
            layer.mode = "sequential"
            seq = layer(u)
        finite(seq, "the sequential loop's output")
        if seq.shape != u.shape:
            raise Broken(f"the layer's output has shape {tuple(seq.shape)}, not {tuple(u.shape)}")
        scale = seq.abs().max().clamp_min(1.0)
        if layer.parallel:  # it claims a diagonal form: the scan must compute the same recurrence
            with promise("the parallel scan"):
                layer.mode = "scan"
                scan = layer(u)
            gap = float((scan - seq).abs().max() / scale)
            if not gap <= AGREE:
                raise Broken(f"the parallel scan and the sequential loop disagree (largest difference "
                             f"{gap:.2g} of the output's scale; at most {AGREE:g})")
        with promise("step()"):
            state, outs = layer.initial_state(BATCH), []
            for t in range(STEPS):
                y, state = layer.step(u[:, t], state)
                outs.append(y)
        gap = float((torch.stack(outs, 1) - seq).abs().max() / scale)
        if not gap <= AGREE:
            raise Broken(f"step() and the sequential loop disagree (largest difference {gap:.2g} of the "
                         f"output's scale; at most {AGREE:g})")
    layer.mode = layer.modes[0]
    return ["dynamics", "scan = loop = step" if layer.parallel else "loop = step"]
