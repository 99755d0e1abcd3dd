"""Metric plug-ins: a number computed on the test set after training, beside ``test_accuracy``.

A metric is a function ``metric(logits, targets) -> float`` from an installed distribution's
entry-point group ``ablate.metrics`` (its entry's name is what a spec writes) or named by path,
``package.module:function``. It receives the scored positions of the whole test set: ``logits``
(M, num_classes) float32 and ``targets`` (M,) int64 — one row per example for a classification
task, one per scored step for a per-step task (padding and ignored steps left out). A spec
chooses metrics in ``train.metrics``; each becomes ``test_<name>`` in the trial's metrics (MLflow,
the trials frame), which the accuracy report takes as its ``metric``. A metric named by path is
recorded under its attribute's name (``my_lab.metrics:macro_f1`` → ``test_macro_f1``).

This module imports no torch at import time (the spec validates names through it).
"""

from __future__ import annotations

import math
import re
from typing import Any

from ablate import plugins

#: at most this many metrics per trial (a spec's train.metrics)
MAX_METRICS = 16
_COLUMN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def installed_names() -> tuple[str, ...]:
    """The installed metric plug-ins' names (read on first need)."""
    return tuple(p.name for p in plugins.installed_of("metric"))


def plugin(name: str) -> plugins.Plugin:
    """The metric plug-in ``name`` (an installed one's name, or ``module:function``); ValueError
    (the spec's validation says which names are valid) otherwise."""
    for p in plugins.installed_of("metric"):
        if p.name == name:
            return p
    if plugins.is_target(name):
        return plugins.by_path("metric", name)
    raise ValueError(f"{name!r} is not an installed metric plug-in")


def column(name: str) -> str:
    """The trials frame's column of metric ``name``: ``test_<name>`` (a path's attribute)."""
    short = name.rpartition(":")[2].rpartition(".")[2] if plugins.is_target(name) else name
    return f"test_{short}"


def compute(logits: Any, targets: Any, names: list[str]) -> dict[str, float]:
    """``test_<name>`` → value of each metric on these scored positions (``logits`` (M, C),
    ``targets`` (M,)); a metric that fails raises ``PluginError`` naming it (never a silent NaN)."""
    out = {}
    for name in names:
        p = plugin(name)
        fn = p.load()
        try:
            value = float(fn(logits, targets))
        except Exception as exc:  # the plug-in's own failure, whatever its type
            raise plugins.PluginError(f"metric plug-in {name!r} ({p.target}): {type(exc).__name__}: {exc}") from exc
        out[column(name)] = value
    return out


def scored(logits: Any, y: Any) -> tuple[Any, Any]:
    """(logits (M, C), targets (M,)) of the scored positions of a batch's output."""
    from ablate.tasks.data import IGNORE

    flat_logits, flat_y = logits.reshape(-1, logits.shape[-1]), y.reshape(-1)
    keep = flat_y != IGNORE
    return flat_logits[keep].float(), flat_y[keep].long()


def check(name: str) -> None:
    """The contract on a tiny batch: a finite number from 8 rows of 3 classes, a plug-in's failure
    as ``PluginError`` naming it."""
    import torch

    gen = torch.Generator().manual_seed(0)
    logits, targets = torch.randn(8, 3, generator=gen), torch.arange(8) % 3
    value = compute(logits, targets, [name])[column(name)]
    if not math.isfinite(value):
        p = plugin(name)
        raise plugins.PluginError(f"metric plug-in {name!r} ({p.target}): gives {value} on a batch of 8 rows "
                                  "of 3 classes (a finite number wanted)")


#: Metrics where smaller is better (a trials-frame column test_/val_ + one of these).
LOWER_IS_BETTER = ("loss", "bpc")


def higher_is_better(metric: str) -> bool:
    """Whether a larger value of the trials-frame column ``metric`` is better: not for a loss or
    bits per character; a metric plug-in says so with a ``higher_is_better`` attribute on its
    function (default True), so the accuracy report words its directions right."""
    base = metric.split("_", 1)[1] if metric.startswith(("test_", "val_")) else metric
    if base in LOWER_IS_BETTER:
        return False
    for p in plugins.installed_of("metric"):
        if column(p.name) == f"test_{base}":
            return bool(getattr(p.load(), "higher_is_better", True))
    return True
