"""What ``--param`` may set: the report parameters, checked before anything is rendered.

A report's parameters and their defaults are the assignments of its notebook's ``parameters``
cell (``declared_parameters``: the one place for each default). This module adds what a default
cannot say: which of them the commands set themselves (``COMMAND_PARAMETERS``), the valid range of
each number (``RANGES``) and, once the study is read, which metrics and cells it has
(``check_study``, ``check_studies``). A bad value is a ``ParameterError`` naming the parameter and
what is valid, so that a command refuses it (exit 2) rather than a notebook cell failing on it.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ablate.report import notebook_path, sections

if TYPE_CHECKING:
    from ablate.results import Results, Studies


class ParameterError(ValueError):
    """A ``--param`` that no report of the render declares, that the command sets itself, or whose
    value is not of its type, out of its range, or not in the study."""


#: What the commands set themselves (the study, the stores, where the snapshot of the results is,
#: where exports go): a ``--param`` cannot name them. ``results_file`` in particular is unpickled by
#: the notebook, so a user's value would run whatever that file holds.
COMMAND_PARAMETERS = ("study", "studies", "cells", "title", "storage", "tracking_uri", "export_dir", "results_file")

#: Parameters whose valid values are the study's own (its metrics, its cells): checked once it is read.
STUDY_PARAMETERS = ("metric", "curve_metric", "reference")


@dataclass(frozen=True)
class Range:
    """The values a number parameter may take: ``low`` / ``high`` (None: no bound), each bound
    included unless ``open``; ``unset`` says what leaving the parameter out means when its
    default is a sentinel outside the range."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    unset: str = ""

    def holds(self, value: float) -> bool:
        if not math.isfinite(value):
            return False
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return self.high is None or (value < self.high if self.high_open else value <= self.high)

    def words(self, name: str) -> str:
        """``0 < alpha < 1``, ``cells_per_figure >= 1``."""
        low = f"{self.low:g} {'<' if self.low_open else '<='} " if self.low is not None else ""
        high = f" {'<' if self.high_open else '<='} {self.high:g}" if self.high is not None else ""
        if self.low is not None and self.high is None:
            return f"{name} {'>' if self.low_open else '>='} {self.low:g}"
        return f"{low}{name}{high}"


#: The valid range of each number parameter any report declares (their defaults are the notebooks').
RANGES: dict[str, Range] = {
    "alpha": Range(0, 1, low_open=True, high_open=True),
    "confidence": Range(0, 1, low_open=True, high_open=True),
    "margin": Range(0, 1),
    "min_effect": Range(0, unset="the spec's stats.min_effect"),
    "max_interactions": Range(0),
    "cells_per_figure": Range(1),
}


def declared_parameters(report: str) -> dict[str, object]:
    """Name → default of each assignment in the report notebook's ``parameters`` cell."""
    text = notebook_path(report).read_text(encoding="utf-8")
    match = re.search(r'^# %% tags=\["parameters"\]\n(.*?)(?=^# %%)', text, re.M | re.S)
    if not match:
        return {}
    out: dict[str, object] = {}
    for node in ast.parse(match.group(1)).body:
        if isinstance(node, ast.Assign):
            try:
                default = ast.literal_eval(node.value)
            except ValueError:
                default = None
            out.update({t.id: default for t in node.targets if isinstance(t, ast.Name)})
    return out


def only_declared(report: str, parameters: Mapping[str, Any]) -> dict[str, Any]:
    """``parameters`` less those ``report`` does not declare (papermill would add them as new names)."""
    names = declared_parameters(report)
    return {k: v for k, v in parameters.items() if k in names}


def _rule(key: str, default: object) -> str:
    """What a value of ``key`` must be, and its default: the second half of every refusal."""
    bounds = RANGES.get(key, Range())
    kind = "a whole number" if isinstance(default, int) else "a number"
    within = f" with {bounds.words(key)}" if bounds.low is not None or bounds.high is not None else ""
    return f"give {kind}{within} (default: {bounds.unset or repr(default)})"


def _number(key: str, value: str, default: bool | int | float) -> bool | int | float:
    """``value`` as ``default``'s kind, in ``key``'s range; ParameterError otherwise."""
    import yaml

    text = value.strip()
    parsed: Any = None
    if isinstance(default, bool):
        try:
            parsed = yaml.safe_load(text)
        except yaml.YAMLError:
            parsed = None
        if not isinstance(parsed, bool):
            raise ParameterError(f"--param {key}={value}: not a switch; give true or false (default: {default})")
        return parsed
    if isinstance(default, int):
        parsed = int(text) if re.fullmatch(r"[+-]?\d{1,18}", text) else None
    else:
        try:  # Python's float, not YAML's: YAML 1.1 reads 1e-3 as text
            parsed = float(text)
        except ValueError:
            parsed = None
    if parsed is None:
        raise ParameterError(f"--param {key}={value}: not {'a whole number' if isinstance(default, int) else 'a number'}"
                             f"; {_rule(key, default)}")
    if not RANGES.get(key, Range()).holds(parsed):
        raise ParameterError(f"--param {key}={value}: out of range; {_rule(key, default)}")
    return parsed


def parse_parameters(pairs: list[str], reports: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs that some of ``reports`` declares, as that report's parameters: a
    number or a switch where the default is one (of the default's kind, in ``RANGES``), else
    text. An empty value means the default (left out). ``ParameterError`` says what is wrong; what
    only the study can say (its metrics and cells) is ``check_study``'s."""
    known: dict[str, object] = {}
    for r in reports:
        if not sections.is_section(r):  # a section plug-in takes no parameters
            known.update(declared_parameters(r))
    settable = {k: v for k, v in known.items() if k not in COMMAND_PARAMETERS}
    choices = ", ".join(sorted(settable)) or "none"
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if sep and key in COMMAND_PARAMETERS:
            raise ParameterError(f"--param {key}: set by the command itself, not by --param; KEY is one of: {choices}")
        if not sep or key not in settable:
            raise ParameterError(f"--param {pair!r}: expected KEY=VALUE with KEY one of: {choices}")
        default = settable[key]
        if not value.strip():
            out.pop(key, None)
        elif isinstance(default, bool | int | float):
            out[key] = _number(key, value, default)
        else:
            out[key] = value
    return out


def metric_choices(trials: Any) -> list[str]:
    """The trials-frame columns a report can take as its ``metric``: the summary metrics and the
    plug-ins' ``test_<name>`` (``ablate.results``), those with a value in some trial."""
    from ablate.results import SUMMARY

    numeric = [c for c, t in trials.schema.items() if t.is_numeric()]
    wanted = [c for c in numeric if (c in SUMMARY and c != "chance") or c.startswith("test_")]
    return [c for c in wanted if trials[c].drop_nulls().drop_nans().len()]


def _check_metrics(what: str, trials: Any, metrics: Any, parameters: Mapping[str, Any]) -> None:
    metric = parameters.get("metric")
    if metric is not None and metric not in (choices := metric_choices(trials)):
        raise ParameterError(f"--param metric: {metric!r} is not a metric of {what}; one of: "
                             f"{', '.join(choices) or 'none (no trial has finished)'}")
    curve = parameters.get("curve_metric")
    # Without logged metrics the report says there are no curves yet: nothing to check against.
    if curve is not None and len(metrics) and "name" in metrics.columns:
        logged = sorted(metrics["name"].unique().to_list())
        if curve not in logged:
            raise ParameterError(f"--param curve_metric: no run of {what} logged {curve!r}; logged: "
                                 f"{', '.join(logged)}")


#: The parameters whose valid values depend on the study read (``check_study``).
STUDY_SPECIFIC = frozenset({"metric", "curve_metric", "reference"})


def check_study(res: Results, parameters: Mapping[str, Any]) -> None:
    """``parameters`` against the study as read: ``metric`` one of its metrics, ``curve_metric``
    one it logged, ``reference`` one of its cells (``Results.reference_cell``)."""
    _check_metrics(f"study {res.study}", res.trials, res.metrics, parameters)
    reference = parameters.get("reference")
    if reference is not None:
        try:
            res.reference_cell(reference)
        except KeyError as exc:
            raise ParameterError(f"--param reference: {exc.args[0]}") from None


def check_studies(both: Studies, cells: Any, parameters: Mapping[str, Any]) -> None:
    """``parameters`` against the studies a comparison shows (``cells`` of them): ``metric`` one
    of their metrics, ``reference`` one of the variants (``comparison_tables.reference_variant``)."""
    _check_metrics("these studies", both.trials, both.metrics, parameters)
    reference = parameters.get("reference")
    if reference is not None:
        from ablate.report import comparison_tables

        shown = both.select(cells) if cells else both
        try:
            comparison_tables.reference_variant(shown.variants().to_pandas(), reference)
        except KeyError as exc:
            raise ParameterError(f"--param reference: {exc.args[0]}") from None
