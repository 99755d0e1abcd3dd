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

import functools
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ablate import cache, metrics, plugins, terminal
from ablate.models import catalogue
from ablate.models.layer_contract import (
    BATCH,
    STEPS,
    Broken,
    check_layer,
    check_shapes,
    finite,
    first_non_finite,
    in_layer,
    promise,
)

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


def check_model(model: dict[str, Any]) -> list[str]:
    """Build the network of ``model`` (a resolved ``ModelSpec`` as a mapping) and exercise it:
    what was checked, in order (``shapes``, ``forward``, …, ``scan = loop = step`` where a layer
    claims a scan, else ``loop = step``); ``Broken`` on the first broken promise."""
    import torch

    from ablate.models.network import build_model
    from ablate.models.recurrent import LinearRecurrence
    from ablate.spec import ModelSpec

    torch.manual_seed(0)
    with promise("validating the model"):
        spec = ModelSpec.model_validate(model)
    _check_bases(model)
    with promise("building the network"):
        net = build_model(spec, _Tokens())
    layers = [layer for layer in net.recurrent_layers() if isinstance(layer, LinearRecurrence)]
    for k, layer in enumerate(layers):
        with in_layer(k, len(layers)):
            check_shapes(layer)
    done = ["shapes"] if layers else []
    x = torch.randint(1, _Tokens.vocab_size, (BATCH, STEPS))
    with promise("the forward pass"):
        logits = net(x)
    if not isinstance(logits, torch.Tensor) or logits.shape != (BATCH, _Tokens.num_classes):
        raise Broken(f"the network's output has shape {tuple(getattr(logits, 'shape', ()))}, "
                     f"not {(BATCH, _Tokens.num_classes)}")
    if logits.dtype != torch.float32:
        raise Broken(f"the network's output is {logits.dtype}, not torch.float32")
    if not torch.isfinite(logits).all():
        raise Broken(f"the forward pass's output is not finite: {first_non_finite(layers)}")
    with promise("the backward pass"):
        logits.square().mean().backward()
    for name, p in net.named_parameters():
        if p.grad is not None:
            finite(p.grad, f"the gradient of {name}")
    done += ["forward", "backward"]
    for k, layer in enumerate(layers):
        with in_layer(k, len(layers)):
            done += [d for d in check_layer(layer) if d not in done]
    return done


def check_alone(model: dict[str, Any], path: str) -> list[str]:
    """The activation or nonlinearity of ``model`` alone, on what a network gives it: built as
    ``Activation(d_model)``, on (B, L, d); the nonlinearity on the state, (B, N). Each keeps the
    shape, finite. Checked before the networks, whose forward would otherwise fail on a bare torch
    message, once per network and blamed on the other plug-ins too."""
    import torch

    from ablate.spec import ModelSpec

    with promise("validating the model"):
        spec = ModelSpec.model_validate(model)
    if path == ACTIVATION_PATH:
        call, want, named = "Activation(d_model)(x)", (BATCH, STEPS, spec.d_model), "(batch, steps, d_model)"
        with promise("building Activation(d_model)"):
            fn = catalogue.ACTIVATIONS.load(spec.activation)(spec.d_model)
    else:
        call, want, named = "nonlinearity(x)", (BATCH, spec.state_dim), "(batch, state_dim)"
        with promise("loading it"):
            fn = catalogue.NONLINEARITIES.load(spec.nonlinearity)
    with promise(call):
        y = fn(torch.randn(want))
    if not isinstance(y, torch.Tensor) or tuple(y.shape) != want:
        raise Broken(f"{call} has shape {tuple(getattr(y, 'shape', ()))}; expected {named} = {want}, the shape of x")
    finite(y, call)
    return [f"{named} kept"]


def check_init(model: dict[str, Any]) -> list[str]:
    """The init scheme of ``model`` (``ablate.models.inits.InitScheme``) built from its spec:
    magnitudes in (0, 1) — every parameterisation takes log(−log |λ|) — phases of the asked shape,
    finite, and two positive standard deviations for B and C. ``Broken`` on the first broken promise."""
    import torch

    from ablate.models.inits import make_init
    from ablate.spec import ModelSpec

    with promise("building the init scheme"):
        spec = ModelSpec.model_validate(model)
        scheme = make_init(spec.init)
    d_model, state_dim = spec.d_model, spec.state_dim
    n = max(state_dim // 2, 1)
    with promise("magnitudes(n)"):
        mags = scheme.magnitudes(n)
    if not isinstance(mags, torch.Tensor) or mags.shape != (n,):
        raise Broken(f"magnitudes({n}) has shape {tuple(getattr(mags, 'shape', ()))}, not {(n,)}")
    finite(mags, "magnitudes()")
    if not bool(((mags > 0) & (mags < 1)).all()):
        raise Broken(f"magnitudes() are not all in (0, 1) (from {float(mags.min()):.3g} to {float(mags.max()):.3g})")
    shape = (2, n)
    with promise("phases(shape)"):
        phases = scheme.phases(shape)
    if not isinstance(phases, torch.Tensor) or phases.shape != shape:
        raise Broken(f"phases({shape}) has shape {tuple(getattr(phases, 'shape', ()))}, not {shape}")
    finite(phases, "phases()")
    with promise("io_std(d_model, state_dim)"):
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


def check_task(task: dict[str, Any]) -> list[str]:
    """Generate the task (``ablate.tasks.load_task``: cached) and check what it yields: what was
    checked (each split's inputs and targets)."""
    from ablate.tasks import load_task
    from ablate.tasks.data import IGNORE

    with promise("generating the data"):
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
            raise Broken(f"split {split!r}: {info.output_kind} targets must have {want} dimension{'s' if want != 1 else ''}, not {y.dim()}")
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
