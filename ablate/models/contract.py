"""The contract a plug-in promises, checked on a tiny batch before anything runs (``ablate
validate``, ``ablate run``): each cell that uses a plug-in level is built and run once.

A model plug-in (parameterisation, normalisation, nonlinearity, activation, init scheme) must give, in every
cell that uses it, a network that builds (a parameterisation or normalisation plug-in subclasses its
base class), whose parameterisation keeps the shapes docs/plugins.md §2 gives (``unit_head``,
``unit_log_magnitude()``, ``head_gain()``, the normalisation's scale and each tensor of ``system()``,
checked before the forward pass, which would otherwise fail on a bare torch message or, for a
``head_gain()`` per unit instead of per head, run with ξ silently wrong) and declares some
recurrent parameters, whose forward pass on a batch of 2 × 8 steps returns
the network's shapes and dtype with finite values, whose backward gives finite gradients (and
some to the recurrent parameters it declares, which must be its own), whose layer's ``dynamics``
(what the probes read) computes, and — where it claims both a parallel scan and a step — whose
scan, sequential loop and step-by-step outputs agree; an init scheme must also give magnitudes in
(0, 1), phases of the shape asked and finite, and positive scales of B and C. A task plug-in must generate three splits
whose inputs and targets fit what it declares (``ablate.tasks.data``); a metric plug-in
(``ablate.metrics``) a finite number on a tiny batch. Each broken promise is one
problem naming the plug-in (its spec name, target and origin) and what it broke; where the
plug-in's own code raised, ``ABLATE_TRACEBACK=1`` prints its traceback.

A passed check is remembered (``ablate.cache``) and not run again while nothing it depends on
changes; each plug-in checked gets one line saying what was checked, and ``(cached)`` where a
remembered pass answered (``problems``' ``say``).
"""

from __future__ import annotations

import contextlib
import functools
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ablate import cache, metrics, plugins, terminal
from ablate.models import catalogue

BATCH, STEPS = 2, 8
#: scan against the sequential loop and the step, relative to the output's scale (float32)
AGREE = 1e-3

Problems = list[tuple[str, str]]
INIT_PATH = "model.init.scheme"
ACTIVATION_PATH = "model.activation"
ALONE = (ACTIVATION_PATH, "model.nonlinearity")  # checked alone before the networks


@dataclass(frozen=True)
class _Tokens:
    """A stand-in task for the model check: small token inputs, three classes."""

    input_kind: str = "tokens"
    vocab_size: int = 12
    input_dim: int = 1
    num_classes: int = 3
    output_kind: str = "classification"
    seq_len: int = STEPS


class Broken(Exception):
    """One broken promise (the message says which)."""


def _setting(model: dict[str, Any], path: str) -> Any:
    """The value of a ``model.…`` path (``model.init.scheme``) in a model mapping; None if absent."""
    node: Any = model
    for part in path.split(".")[1:]:
        node = node.get(part) if isinstance(node, dict) else getattr(node, part, None)
    return node


def _plugin_levels(model: dict[str, Any]) -> list[tuple[str, catalogue.Level]]:
    out = []
    for path, levels in catalogue.MODEL_FACTORS.items():
        name = _setting(model, path)
        if levels.kind is not None and levels.accepts(name):
            level = levels.level(name)
            if level.plugin is not None:
                out.append((path, level))
    return out


def _who(plugin: plugins.Plugin) -> str:
    """The plug-in, for a problem whose key path already says which setting names it."""
    target = f"{plugin.target}, " if plugin.target != plugin.name else ""
    return f"{plugin.kind} plug-in {plugin.name!r} ({target}{plugin.origin})"


def _as_written(config: dict[str, Any], path: str) -> str:
    return path


@contextlib.contextmanager
def _promise(what: str) -> Iterator[None]:
    try:
        yield
    except Broken:
        raise
    except plugins.PluginError as exc:  # names the plug-in already; what follows its name is the news
        raise Broken(f"{what} failed: {str(exc).split(': ', 1)[-1]}") from exc
    except Exception as exc:  # a plug-in's own failure, whatever its type, is the broken promise
        raise Broken(f"{what} failed: {type(exc).__name__}: {terminal.one_line(exc)}") from exc


def _own_failure(exc: BaseException) -> BaseException | None:
    """The exception the plug-in's own code raised under a broken promise (None: it raised none,
    a check found the promise broken)."""
    cause = exc.__cause__
    while isinstance(cause, (Broken, plugins.PluginError)):
        cause = cause.__cause__
    return cause


#: How a PluginError names its plug-in (``ablate.plugins``): said once, by ``_who``.
_NAMED = re.compile(r"^\w+ plug-in '[^']*': ")


def _report(who: str, exc: BaseException) -> str:
    """``who: exc``, with its traceback printed (ABLATE_TRACEBACK=1) or a hint how to see it."""
    said = _NAMED.sub("", str(exc)) if isinstance(exc, plugins.PluginError) else str(exc)
    return f"{who}: {said}{terminal.plugin_traceback(_own_failure(exc), who)}"


def _finite(t: Any, what: str) -> None:
    import torch

    if not torch.isfinite(t).all():
        raise Broken(f"{what} is not finite")


def check_model(model: dict[str, Any]) -> list[str]:
    """Build the network of ``model`` (a resolved ``ModelSpec`` as a mapping) and exercise it:
    what was checked, in order (``shapes``, ``forward``, …, ``scan = loop = step`` where a layer
    claims a scan, else ``loop = step``); ``Broken`` on the first broken promise."""
    import torch

    from ablate.models.network import build_model
    from ablate.models.recurrent import LinearRecurrence
    from ablate.spec import ModelSpec

    torch.manual_seed(0)
    with _promise("validating the model"):
        spec = ModelSpec.model_validate(model)
    _check_bases(model)
    with _promise("building the network"):
        net = build_model(spec, _Tokens())
    layers = [layer for layer in net.recurrent_layers() if isinstance(layer, LinearRecurrence)]
    for k, layer in enumerate(layers):
        with _in_layer(k, len(layers)):
            _check_shapes(layer)
    done = ["shapes"] if layers else []
    x = torch.randint(1, _Tokens.vocab_size, (BATCH, STEPS))
    with _promise("the forward pass"):
        logits = net(x)
    if not isinstance(logits, torch.Tensor) or logits.shape != (BATCH, _Tokens.num_classes):
        raise Broken(f"the network's output has shape {tuple(getattr(logits, 'shape', ()))}, "
                     f"not {(BATCH, _Tokens.num_classes)}")
    if logits.dtype != torch.float32:
        raise Broken(f"the network's output is {logits.dtype}, not torch.float32")
    if not torch.isfinite(logits).all():
        raise Broken(f"the forward pass's output is not finite: {_first_non_finite(layers)}")
    with _promise("the backward pass"):
        logits.square().mean().backward()
    for name, p in net.named_parameters():
        if p.grad is not None:
            _finite(p.grad, f"the gradient of {name}")
    done += ["forward", "backward"]
    for k, layer in enumerate(layers):
        with _in_layer(k, len(layers)):
            done += [d for d in _check_layer(layer) if d not in done]
    return done


def check_alone(model: dict[str, Any], path: str) -> list[str]:
    """The activation or nonlinearity of ``model`` alone, on what a network gives it: built as
    ``Activation(d_model)``, on (B, L, d); the nonlinearity on the state, (B, N). Each keeps the
    shape, finite. Checked before the networks, whose forward would otherwise fail on a bare torch
    message, once per network and blamed on the other plug-ins too."""
    import torch

    from ablate.spec import ModelSpec

    with _promise("validating the model"):
        spec = ModelSpec.model_validate(model)
    if path == ACTIVATION_PATH:
        call, want, named = "Activation(d_model)(x)", (BATCH, STEPS, spec.d_model), "(batch, steps, d_model)"
        with _promise("building Activation(d_model)"):
            fn = catalogue.ACTIVATIONS.load(spec.activation)(spec.d_model)
    else:
        call, want, named = "nonlinearity(x)", (BATCH, spec.state_dim), "(batch, state_dim)"
        with _promise("loading it"):
            fn = catalogue.NONLINEARITIES.load(spec.nonlinearity)
    with _promise(call):
        y = fn(torch.randn(want))
    if not isinstance(y, torch.Tensor) or tuple(y.shape) != want:
        raise Broken(f"{call} has shape {tuple(getattr(y, 'shape', ()))}; expected {named} = {want}, the shape of x")
    _finite(y, call)
    return [f"{named} kept"]


def check_init(model: dict[str, Any]) -> list[str]:
    """The init scheme of ``model`` (``ablate.models.inits.InitScheme``) built from its spec:
    magnitudes in (0, 1) — every parameterisation takes log(−log |λ|) — phases of the asked shape,
    finite, and two positive standard deviations for B and C. ``Broken`` on the first broken promise."""
    import torch

    from ablate.models.inits import make_init
    from ablate.spec import ModelSpec

    with _promise("building the init scheme"):
        spec = ModelSpec.model_validate(model)
        scheme = make_init(spec.init)
    d_model, state_dim = spec.d_model, spec.state_dim
    n = max(state_dim // 2, 1)
    with _promise("magnitudes(n)"):
        mags = scheme.magnitudes(n)
    if not isinstance(mags, torch.Tensor) or mags.shape != (n,):
        raise Broken(f"magnitudes({n}) has shape {tuple(getattr(mags, 'shape', ()))}, not {(n,)}")
    _finite(mags, "magnitudes()")
    if not bool(((mags > 0) & (mags < 1)).all()):
        raise Broken(f"magnitudes() are not all in (0, 1) (from {float(mags.min()):.3g} to {float(mags.max()):.3g})")
    shape = (2, n)
    with _promise("phases(shape)"):
        phases = scheme.phases(shape)
    if not isinstance(phases, torch.Tensor) or phases.shape != shape:
        raise Broken(f"phases({shape}) has shape {tuple(getattr(phases, 'shape', ()))}, not {shape}")
    _finite(phases, "phases()")
    with _promise("io_std(d_model, state_dim)"):
        stds = tuple(float(v) for v in scheme.io_std(d_model, state_dim))
    if len(stds) != 2 or not all(0 < v < float("inf") for v in stds):
        raise Broken(f"io_std() gives {stds}, not two positive finite standard deviations (of B and C)")
    return ["magnitudes in (0, 1)", "phases", "io_std"]


def _check_bases(model: dict[str, Any]) -> None:
    """Each parameterisation or normalisation plug-in of ``model`` is a subclass of its base
    (docs/plugins.md §2), checked before it is built: a task builder given as a parameterisation
    was called with the layer's four arguments and failed as a bare TypeError."""
    from ablate.models.normalisations import Normalisation
    from ablate.models.parameterisations import Parameterisation

    bases: dict[str, type] = {"model.parameterisation": Parameterisation, "model.normalisation": Normalisation}
    for path, level in _plugin_levels(model):
        base = bases.get(path)
        if base is None or level.plugin is None:
            continue
        obj = level.plugin.load()
        if isinstance(obj, type) and issubclass(obj, base):
            continue
        what = (f"the class {obj.__qualname__}, which does not subclass it" if isinstance(obj, type)
                else f"a {type(obj).__name__}, not a class")
        raise Broken(f"{level.plugin.target} is {what}: a {path.split('.')[-1]} plug-in is a subclass of "
                     f"{base.__module__}.{base.__name__} (docs/plugins.md §2); does the target name the right object?")


@contextlib.contextmanager
def _in_layer(k: int, layers: int) -> Iterator[None]:
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


def _check_shapes(layer: Any) -> None:
    """Before the forward pass: the parameterisation's declared recurrent parameters, ``unit_head``,
    ``unit_log_magnitude()``, ``head_gain()``, the normalisation's scale and ``system()``'s
    tensors against docs/plugins.md §2, each reported by its name with what was expected."""
    import torch

    param, heads = layer.param, layer.heads
    with _promise("recurrent_parameters()"):
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
        with _promise("unit_log_magnitude()"):
            log_mag = param.unit_log_magnitude()
        _expect(log_mag, (units,), "unit_log_magnitude()", "(len(unit_head),)", " (log |λ| per unit)")
        _non_finite(log_mag, "unit_log_magnitude()")
        with _promise("head_gain()"):
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
        with _promise(scale_name):
            scale = layer.norm(param)
        if scale is not None:
            _expect(scale, (units,), scale_name, "(len(unit_head),)")
            _non_finite(scale, scale_name)
        with _promise("system()"):
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


def _first_non_finite(layers: list[Any]) -> str:
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


def _check_layer(layer: Any) -> list[str]:
    """``dynamics`` and which outputs agree (``scan = loop = step`` or ``loop = step``)."""
    import torch

    own = {id(p) for p in layer.parameters()}
    with _promise("recurrent_parameters()"):
        recurrent = layer.recurrent_parameters()
    if any(id(p) not in own for p in recurrent):
        raise Broken("recurrent_parameters() returns a tensor that is not a parameter of the layer")
    if recurrent and all(p.grad is None for p in recurrent):
        raise Broken("no recurrent parameter receives a gradient")
    with _promise("dynamics() (what the probes read)"):
        layer.dynamics(length=STEPS)
    u = torch.randn(BATCH, STEPS, layer.d_model)
    with torch.no_grad():
        with _promise("the sequential loop"):
            layer.mode = "sequential"
            seq = layer(u)
        _finite(seq, "the sequential loop's output")
        if seq.shape != u.shape:
            raise Broken(f"the layer's output has shape {tuple(seq.shape)}, not {tuple(u.shape)}")
        scale = seq.abs().max().clamp_min(1.0)
        if layer.parallel:  # it claims a diagonal form: the scan must compute the same recurrence
            with _promise("the parallel scan"):
                layer.mode = "scan"
                scan = layer(u)
            gap = float((scan - seq).abs().max() / scale)
            if not gap <= AGREE:
                raise Broken(f"the parallel scan and the sequential loop disagree (largest difference "
                             f"{gap:.2g} of the output's scale; at most {AGREE:g})")
        with _promise("step()"):
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


def check_task(task: dict[str, Any]) -> list[str]:
    """Generate the task (``ablate.tasks.load_task``: cached) and check what it yields: what was
    checked (each split's inputs and targets)."""
    from ablate.tasks import load_task
    from ablate.tasks.data import IGNORE

    with _promise("generating the data"):
        data = load_task(task, progress=False)
    info = data.info
    for split in ("train", "val", "test"):
        x, y = getattr(data, split)
        if len(x) == 0 or len(x) != len(y):
            raise Broken(f"split {split!r} has {len(x)} inputs and {len(y)} targets (equal and above 0 wanted)")
        if info.input_kind == "tokens" and info.vocab_size is not None and (x.min() < 0 or x.max() >= info.vocab_size):
            lo, hi = int(x.min()), int(x.max())  # the usual slip: vocab_size counting the data tokens, not padding 0
            fix = f"; vocab_size counts every id, padding 0 included: at least {hi + 1}" if lo >= 0 else ""
            raise Broken(f"split {split!r} has token ids outside [0, vocab_size={info.vocab_size}) "
                         f"(from {lo} to {hi}){fix}")
        scored = y[y != IGNORE]
        if len(scored) and (scored.min() < 0 or scored.max() >= info.num_classes):
            raise Broken(f"split {split!r} has targets outside [0, num_classes={info.num_classes}) "
                         f"(from {int(scored.min())} to {int(scored.max())})")
        want = 1 if info.output_kind == "classification" else 2
        if y.dim() != want:
            raise Broken(f"split {split!r}: {info.output_kind} targets must have {want} dimension(s), not {y.dim()}")
    return ["train, val and test splits fit what it declares"]


@dataclass
class _Tally:
    """What was checked of one plug-in across the configs: how many distinct ``noun``s (models,
    task settings), which checks, how many of those a remembered pass answered, what it checked."""

    plugin: plugins.Plugin
    noun: str
    count: int = 0
    checks: int = 0
    cached: int = 0
    done: list[str] = field(default_factory=list)
    failed: bool = False

    def line(self) -> str:
        """``checked NAME (distribution version, code HASH): N models — forward, …`` (cached)."""
        try:
            ident = plugins.identity(self.plugin)
            origin = f"{ident.get('distribution', 'path')}, code {ident['code']}"
        except plugins.PluginError:
            origin = self.plugin.origin
        counted = f"{self.count} {self.noun}{'' if self.count == 1 else 's'} — " if self.count else ""
        cached = ("" if not self.cached else " (cached)" if self.cached == self.checks
                  else f" ({self.cached} of {self.checks} checks cached)")
        return f"checked {self.plugin.name} ({origin}): {counted}{', '.join(self.done)}{cached}"


def _checked(check: Callable[[], list[str]], what: str, config: Any, used: list[plugins.Plugin],
             tallies: dict[tuple[str, str], _Tally], noun: str = "") -> None:
    """Run ``check`` unless an identical check passed before (``ablate.cache``: keyed by the
    plug-ins' identities, ``config`` and ablate's and torch's versions) and tally it for each plug-in
    of ``used``; a failure (``Broken``, ``PluginError``) marks them failed, propagates and is not kept."""
    from ablate.design.identity import CODE_VERSION

    tally = [tallies.setdefault((p.kind, p.name), _Tally(p, noun)) for p in used]
    try:
        entry: str | None = cache.key({"check": what, "config": config, "code_version": CODE_VERSION,
                                       "plugins": [plugins.identity(p) for p in used]})
    except plugins.PluginError:  # no source file to hash: checked every time, and the check says why
        entry = None
    record = cache.recall(entry) if entry is not None else None
    done = record.get("checked") if record is not None else None
    hit = isinstance(done, list) and all(isinstance(d, str) for d in done)
    if not hit:
        try:
            done = check()
        except (Broken, plugins.PluginError, ValueError):
            for t in tally:
                t.failed = True
            raise
        if entry is not None:
            cache.remember(entry, {"check": what, "checked": done})
    for t in tally:
        t.noun = noun or t.noun  # an init plug-in's scheme check counts no model; its networks' checks do
        t.checks, t.cached, t.count = t.checks + 1, t.cached + hit, t.count + bool(noun)
        t.done += [d for d in done or () if d not in t.done]


def problems(configs: Iterable[dict[str, Any]],
             where: Callable[[dict[str, Any], str], str] = _as_written,
             say: Callable[[str], None] | None = None) -> Problems:
    """(key path, message) for every broken promise of a plug-in in these resolved cell configs,
    each distinct model and task checked once (or not at all where an identical check passed
    before: ``ablate.cache``); empty when no config uses a plug-in. ``where``: the key path in the
    spec that set a config's setting (default: the setting's own path). ``say``: given one line
    per plug-in whose checks all passed, saying what was checked (``_Tally.line``)."""
    from ablate.tasks.registry import plugin_of

    out: Problems = []
    seen: set[str] = set()
    broken_parts: set[str] = set()  # init schemes, activations, nonlinearities: checked alone, reported alone
    tallies: dict[tuple[str, str], _Tally] = {}
    for config in configs:
        model, task = config["model"], config["task"]
        levels = _plugin_levels(model)
        used = [lvl.plugin for _, lvl in levels if lvl.plugin is not None]
        key = repr(sorted(model.items(), key=lambda kv: kv[0]))
        if levels and key not in seen:
            seen.add(key)
            # an init scheme is checked once per scheme and size, and a broken one is reported
            # as its own (not as the failure of every network built from it)
            init = next((lvl.plugin for path, lvl in levels if path == INIT_PATH), None)
            init_config = {"init": model.get("init") or {}, "d_model": model.get("d_model"),
                           "state_dim": model.get("state_dim")}
            ikey = repr((sorted(init_config["init"].items()), model.get("d_model"), model.get("state_dim")))
            if init is not None and ikey not in seen:
                seen.add(ikey)
                try:
                    _checked(functools.partial(check_init, model), "init", init_config, [init], tallies)
                except (Broken, plugins.PluginError) as exc:
                    out.append((where(config, INIT_PATH), _report(_who(init), exc)))
                    broken_parts.add(ikey)
            alone = []  # an activation or nonlinearity: checked once per size, a broken one reported as its own
            for path, lvl in levels:
                if path in ALONE and lvl.plugin is not None:
                    part = {"path": path, "level": _setting(model, path), "d_model": model.get("d_model"),
                            "state_dim": model.get("state_dim")}
                    alone.append(akey := repr(sorted(part.items())))
                    if akey not in seen:
                        seen.add(akey)
                        try:
                            _checked(functools.partial(check_alone, model, path), path, part, [lvl.plugin], tallies)
                        except (Broken, plugins.PluginError) as exc:
                            out.append((where(config, path), _report(_who(lvl.plugin), exc)))
                            broken_parts.add(akey)
            if (init is None or ikey not in broken_parts) and not broken_parts.intersection(alone):
                try:
                    _checked(functools.partial(check_model, model), "model", model, used, tallies, "model")
                except (Broken, plugins.PluginError) as exc:
                    who = " with ".join(_who(p) for p in used)
                    out.append((where(config, levels[0][0]), _report(who, exc)))
        for name in config.get("train", {}).get("metrics") or ():
            if f"metric:{name}" not in seen:
                seen.add(f"metric:{name}")
                try:
                    metric = [metrics.plugin(name)]
                except ValueError:  # a built-in metric: checked, not a plug-in to tally or remember
                    metric = []
                try:
                    if metric:
                        _checked(functools.partial(_check_metric, name), "metric", name, metric, tallies)
                    else:
                        metrics.check(name)
                except (plugins.PluginError, ValueError) as exc:
                    out.append((where(config, "train.metrics"), str(exc)))
        tkey = repr(sorted(task.items()))
        task_plugin = plugin_of(task["name"])
        if task_plugin is not None and tkey not in seen:
            seen.add(tkey)
            try:
                _checked(functools.partial(check_task, task), "task", task, [task_plugin], tallies, "task setting")
            except (Broken, plugins.PluginError) as exc:
                out.append((where(config, "task.name"), _report(_who(task_plugin), exc)))
    if say is not None:
        for tally in tallies.values():
            if not tally.failed:
                say(tally.line())
    return out


def _check_metric(name: str) -> list[str]:
    metrics.check(name)
    return ["a finite value on 8 rows of 3 classes"]


def spec_problems(spec: Any, say: Callable[[str], None] | None = None) -> Problems:
    """``problems`` of every cell of a validated spec (``ablate.spec.Spec``), then of its report
    sections: each resolved (imported, its attribute found) but not run, as it needs the study's
    results — so a misspelt ``pkg.mod:nope`` is found here, not after the other reports render."""
    from ablate.design import cells, parse_factors
    from ablate.design.factors import setting_where

    grid = cells(spec)
    factors, _ = parse_factors(spec)
    labels = {id(cell.config): cell.labels for cell in grid}

    def where(config: dict[str, Any], path: str) -> str:  # the level that set it, else the baseline's key
        return setting_where(factors, labels.get(id(config), {}), path) or path

    return problems((cell.config for cell in grid), where, say) + section_problems(spec.report_names)


def section_problems(names: Iterable[str]) -> Problems:
    """(``reports[i]``, why) for each report-section plug-in of ``names`` that cannot be loaded."""
    from ablate.report import COMPARISONS, REPORTS

    out: Problems = []
    for i, name in enumerate(names):
        if name in REPORTS or name in COMPARISONS:
            continue
        try:
            plugins.find("section", name).load()
        except plugins.PluginError as exc:
            out.append((f"reports[{i}]", f"{exc}{terminal.plugin_traceback(exc.__cause__, f'report section {name!r}')}"))
    return out


def loads(status: str) -> bool:
    """Whether an ``installed_rows`` status is a plug-in that loads (``ok``) or is ignored by design
    (named like a built-in), not one that fails."""
    return status == "ok" or status.startswith(IGNORED)


IGNORED = "ignored: "


def installed_rows() -> list[list[str]]:
    """One row per installed plug-in for ``ablate plugins``: kind, name, target, distribution,
    source hash, and whether it loads (``ok``, or why not: its import's message, a built-in name)."""
    from ablate.tasks.registry import BUILTIN_TASK_NAMES, PLUGIN_ERRORS

    builtin = {levels.kind: levels.builtin_names for levels in catalogue.MODEL_FACTORS.values() if levels.kind}
    builtin["task"] = BUILTIN_TASK_NAMES
    rows = []
    for p in plugins.installed():
        try:
            source = plugins.source_hash(p)
        except plugins.PluginError:
            source = "-"
        if p.name in builtin.get(p.kind, ()):
            status = f"{IGNORED}{p.name!r} is a built-in {p.kind}"
        elif p.kind == "task" and p.name in PLUGIN_ERRORS:
            status = PLUGIN_ERRORS[p.name]
        else:
            try:
                p.load()
                status = "ok"
            except plugins.PluginError as exc:
                status = str(exc)
        rows.append([p.kind, p.name, p.target, p.origin, source, status])
    return rows
