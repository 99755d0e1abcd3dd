"""Report parameters set when rendering, as page one says them.

A verdict depends on ``alpha``, its intervals on ``confidence``, its equivalence bound on
``min_effect``, a never-learned flag on ``margin``; each can be set with ``ablate report -p`` after
the results are in. Set to other than its default, it must be said where the verdicts are — an α
chosen after seeing the p-values can flip them — with the default it replaced: the notebooks'
declared value (``parameters.declared_parameters``), or the spec's ``stats.min_effect``.
"""

from __future__ import annotations

import numpy as np

from ablate.report import format as fmt

__all__ = ["alpha_words", "changed", "other_words"]


def changed(alpha: float, confidence: float, margin: float, min_effect: float,
            spec_min_effect: float) -> dict[str, tuple[float, float]]:
    """Name → (value, default) of each of these parameters that differs from its default: the
    accuracy report's declared ``alpha``, ``confidence`` and ``margin`` (the norm report declares
    the same ``alpha`` and ``confidence``), the spec's ``stats.min_effect``."""
    from ablate.report.parameters import declared_parameters

    declared = declared_parameters("accuracy")
    pairs = {"alpha": (alpha, declared["alpha"]), "confidence": (confidence, declared["confidence"]),
             "margin": (margin, declared["margin"]), "min_effect": (min_effect, spec_min_effect)}
    out = {}
    for name, (value, default) in pairs.items():
        if not np.isclose(float(value), float(default)):  # type: ignore[arg-type]
            out[name] = (float(value), float(default))  # type: ignore[arg-type]
    return out


def alpha_words(alpha: float, rendered: dict[str, tuple[float, float]]) -> str:
    """``α = 0.05``; an α set when rendering says so, and the default it replaced."""
    if "alpha" not in rendered:
        return f"α = {alpha:g}"
    return (f"**α = {alpha:g}, set when rendering** (`-p alpha`), not the reports' default "
            f"{rendered['alpha'][1]:g} at which `ablate plan` sized the seeds")


def other_words(rendered: dict[str, tuple[float, float]]) -> str:
    """`` Set when rendering: …`` for the parameters of ``rendered`` other than α, each with its
    default (``Also set`` after an α that was); ``""`` when none."""
    words = {"confidence": lambda x, d: f"{fmt.level(x)} intervals (`-p confidence`; default {fmt.level(d)})",
             "min_effect": lambda x, d: f"min_effect ±{fmt.num(x)} (`-p min_effect`; the spec's `stats.min_effect` "
                                        f"is {fmt.num(d)})",
             "margin": lambda x, d: f"never learned at ≤ chance + {x:g} (`-p margin`; default {d:g})"}
    said = [say(*rendered[k]) for k, say in words.items() if k in rendered]
    if not said:
        return ""
    listed = said[0] if len(said) == 1 else ", ".join(said[:-1]) + " and " + said[-1]
    return (f" **{'Also set' if 'alpha' in rendered else 'Set'} when rendering**, not the defaults: {listed}; "
            "the verdicts and flags below use them.")
