"""The contract a plug-in promises, checked on a tiny batch before anything runs (``ablate
validate``, ``ablate run``): each cell that uses a plug-in level is built and run once.

A model plug-in (parameterisation, normalisation, nonlinearity, activation, init scheme) must give, in every
cell that uses it, a network that builds, whose forward pass on a batch of 2 × 8 steps returns
the network's shapes and dtype with finite values, whose backward gives finite gradients (and
some to the recurrent parameters it declares, which must be its own), whose layer's ``dynamics``
(what the probes read) computes, and — where it claims both a parallel scan and a step — whose
scan, sequential loop and step-by-step outputs agree; an init scheme must also give magnitudes in
(0, 1), phases of the shape asked and finite, and positive scales of B and C. A task plug-in must generate three splits
whose inputs and targets fit what it declares (``ablate.tasks.data``); a metric plug-in
(``ablate.metrics``) a finite number on a tiny batch. Each broken promise is one
problem naming the plug-in (its spec name, target and origin) and what it broke.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from ablate import metrics, plugins
from ablate.models import catalogue

BATCH, STEPS = 2, 8
#: scan against the sequential loop and the step, relative to the output's scale (float32)
AGREE = 1e-3

Problems = list[tuple[str, str]]
INIT_PATH = "model.init.scheme"


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


def _who(path: str, plugin: plugins.Plugin) -> str:
    return f"{path} plug-in {plugin.name!r} ({plugin.target}, {plugin.origin})"


@contextlib.contextmanager
def _promise(what: str) -> Iterator[None]:
    try:
        yield
    except Broken:
        raise
    except plugins.PluginError as exc:  # names the plug-in already; what follows its name is the news
        raise Broken(f"{what} failed: {str(exc).split(': ', 1)[-1]}") from exc
    except Exception as exc:  # a plug-in's own failure, whatever its type, is the broken promise
        first = (str(exc).strip().splitlines() or [""])[0]
        raise Broken(f"{what} failed: {type(exc).__name__}: {first}") from exc


def _finite(t: Any, what: str) -> None:
    import torch

    if not torch.isfinite(t).all():
        raise Broken(f"{what} is not finite")


def check_model(model: dict[str, Any]) -> None:
    """Build the network of ``model`` (a resolved ``ModelSpec`` as a mapping) and exercise it;
    ``Broken`` on the first broken promise."""
    import torch

    from ablate.models.network import build_model
    from ablate.models.recurrent import LinearRecurrence
    from ablate.spec import ModelSpec

    torch.manual_seed(0)
    with _promise("validating the model"):
        spec = ModelSpec.model_validate(model)
    with _promise("building the network"):
        net = build_model(spec, _Tokens())
    x = torch.randint(1, _Tokens.vocab_size, (BATCH, STEPS))
    with _promise("the forward pass"):
        logits = net(x)
    if not isinstance(logits, torch.Tensor) or logits.shape != (BATCH, _Tokens.num_classes):
        raise Broken(f"the network's output has shape {tuple(getattr(logits, 'shape', ()))}, "
                     f"not {(BATCH, _Tokens.num_classes)}")
    if logits.dtype != torch.float32:
        raise Broken(f"the network's output is {logits.dtype}, not torch.float32")
    _finite(logits, "the forward pass's output")
    with _promise("the backward pass"):
        logits.square().mean().backward()
    for name, p in net.named_parameters():
        if p.grad is not None:
            _finite(p.grad, f"the gradient of {name}")
    for layer in net.recurrent_layers():
        if isinstance(layer, LinearRecurrence):
            _check_layer(layer)


def check_init(model: dict[str, Any]) -> None:
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


def _check_layer(layer: Any) -> None:
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


def check_task(task: dict[str, Any]) -> None:
    """Generate the task (``ablate.tasks.load_task``: cached) and check what it yields."""
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
            raise Broken(f"split {split!r} has token ids outside [0, vocab_size={info.vocab_size})")
        scored = y[y != IGNORE]
        if len(scored) and (scored.min() < 0 or scored.max() >= info.num_classes):
            raise Broken(f"split {split!r} has targets outside [0, num_classes={info.num_classes})")
        want = 1 if info.output_kind == "classification" else 2
        if y.dim() != want:
            raise Broken(f"split {split!r}: {info.output_kind} targets must have {want} dimension(s), not {y.dim()}")


def problems(configs: Iterable[dict[str, Any]]) -> Problems:
    """(where, message) for every broken promise of a plug-in in these resolved cell configs,
    each distinct model and task checked once; empty when no config uses a plug-in."""
    from ablate.tasks.registry import plugin_of

    out: Problems = []
    seen: set[str] = set()
    broken_inits: set[str] = set()
    for config in configs:
        model, task = config["model"], config["task"]
        levels = _plugin_levels(model)
        key = repr(sorted(model.items(), key=lambda kv: kv[0]))
        if levels and key not in seen:
            seen.add(key)
            # an init scheme is checked once per scheme and size, and a broken one is reported
            # as its own (not as the failure of every network built from it)
            init = next((lvl.plugin for path, lvl in levels if path == INIT_PATH), None)
            ikey = repr((sorted((model.get("init") or {}).items()), model.get("d_model"), model.get("state_dim")))
            if init is not None and ikey not in seen:
                seen.add(ikey)
                try:
                    check_init(model)
                except (Broken, plugins.PluginError) as exc:
                    out.append((INIT_PATH, f"{_who(INIT_PATH, init)}: {exc}"))
                    broken_inits.add(ikey)
            if init is None or ikey not in broken_inits:
                try:
                    check_model(model)
                except (Broken, plugins.PluginError) as exc:
                    who = " with ".join(_who(p, lvl.plugin) for p, lvl in levels if lvl.plugin is not None)
                    out.append((levels[0][0], f"{who}: {exc}"))
        for name in config.get("train", {}).get("metrics") or ():
            if f"metric:{name}" not in seen:
                seen.add(f"metric:{name}")
                try:
                    metrics.check(name)
                except (plugins.PluginError, ValueError) as exc:
                    out.append(("train.metrics", str(exc)))
        tkey = repr(sorted(task.items()))
        task_plugin = plugin_of(task["name"])
        if task_plugin is not None and tkey not in seen:
            seen.add(tkey)
            try:
                check_task(task)
            except (Broken, plugins.PluginError) as exc:
                out.append(("task.name", f"{_who('task', task_plugin)}: {exc}"))
    return out


def spec_problems(spec: Any) -> Problems:
    """``problems`` of every cell of a validated spec (``ablate.spec.Spec``)."""
    from ablate.design import cells

    return problems(cell.config for cell in cells(spec))


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
            status = f"ignored: {p.name!r} is a built-in {p.kind}"
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
