"""What ``--param`` may set (``ablate.report.parameters``): names the notebooks declare, values of
their defaults' kinds in their ranges, never what the command sets itself, and metrics and cells
the study has — each refusal one line naming the parameter and what is valid."""

from __future__ import annotations

from pathlib import Path

import pytest

from ablate import results
from ablate.report import COMPARISONS, REPORTS
from ablate.report import parameters as P

EXPORT = Path(__file__).resolve().parents[1] / "reports" / "null_task_seed" / "data"


def test_parse_parameters_types_values_by_the_notebooks_defaults():
    got = P.parse_parameters(["alpha=0.01", "max_interactions=3", "reference=layers=2", "metric="], ["accuracy"])
    assert got == {"alpha": 0.01, "max_interactions": 3, "reference": "layers=2"}  # empty: the default
    assert P.parse_parameters(["alpha=1e-3"], ["accuracy"]) == {"alpha": 0.001}  # not YAML 1.1's text
    with pytest.raises(P.ParameterError, match=r"^--param alpha=yes: not a number; give a number with 0 < alpha < 1 "
                                               r"\(default: 0.05\)$"):
        P.parse_parameters(["alpha=yes"], ["accuracy"])
    with pytest.raises(P.ParameterError, match=r"--param cells_per_figure=true: not a whole number"):
        P.parse_parameters(["cells_per_figure=true"], ["accuracy"])  # a switch is not a number
    with pytest.raises(P.ParameterError, match=r"--param 'nope=1': expected KEY=VALUE with KEY one of: alpha, "):
        P.parse_parameters(["nope=1"], ["norm_stability"])
    with pytest.raises(P.ParameterError, match="KEY one of: alpha"):  # a report's own only where that report renders
        P.parse_parameters(["cells_per_figure=4"], ["norm_stability"])
    assert P.parse_parameters(["cells_per_figure=4"], ["norm_stability", "accuracy"]) == {"cells_per_figure": 4}


@pytest.mark.parametrize(("pair", "rule"), [
    ("alpha=-1", "0 < alpha < 1"), ("alpha=1", "0 < alpha < 1"), ("alpha=nan", "0 < alpha < 1"),
    ("confidence=5", "0 < confidence < 1"), ("margin=-0.1", "0 <= margin <= 1"),
    ("min_effect=-1", "min_effect >= 0 (default: the spec's stats.min_effect)"), ("min_effect=inf", "min_effect >= 0"),
    ("max_interactions=-3", "max_interactions >= 0"), ("cells_per_figure=0", "cells_per_figure >= 1 (default: 64)"),
])
def test_a_number_out_of_its_range_is_refused_with_the_range(pair: str, rule: str):
    with pytest.raises(P.ParameterError) as caught:
        P.parse_parameters([pair], ["accuracy"])
    assert str(caught.value).startswith(f"--param {pair}: out of range; give ") and rule in str(caught.value)


@pytest.mark.parametrize("pair", ["results_file=/etc/passwd", "study=x", "export_dir=/tmp", "storage=sqlite://",
                                  "studies=x", "title=x"])
def test_what_the_command_sets_cannot_be_set(pair: str):
    report = "comparison" if pair.split("=")[0] in ("studies", "title") else "accuracy"
    with pytest.raises(P.ParameterError, match=rf"^--param {pair.split('=')[0]}: set by the command itself"):
        P.parse_parameters([pair], [report])


def test_every_declared_parameter_is_checked_somehow():
    """A new notebook parameter must say how it is checked: the command's, a range, or the study's."""
    for report in (*REPORTS, *COMPARISONS):
        for name, default in P.declared_parameters(report).items():
            if name in P.COMMAND_PARAMETERS:
                continue
            if isinstance(default, bool | int | float):
                assert name in P.RANGES, (report, name)
            else:
                assert name in P.STUDY_PARAMETERS, (report, name)


def test_metric_and_reference_are_checked_against_the_study():
    res = results.read_export(EXPORT)
    P.check_study(res, {"metric": "val_loss", "reference": "seed=0", "curve_metric": "val/loss", "alpha": 0.1})
    cases = {
        "metric": ("nosuch", "--param metric: 'nosuch' is not a metric of study null_task_seed; one of: val_accuracy, "),
        "reference": ("nosuch=1", "--param reference: no cell with id or label 'nosuch=1'; as a selector: 'nosuch' is "
                                  "neither a factor nor a dotted path (factors: task.seed); cells are: 'seed=0', "),
        "curve_metric": ("val_accuracy", "--param curve_metric: no run of study null_task_seed logged 'val_accuracy'; "
                                         "logged: chance, "),
    }
    for key, (value, message) in cases.items():
        with pytest.raises(P.ParameterError) as caught:
            P.check_study(res, {key: value})
        assert str(caught.value).startswith(message), str(caught.value)


def test_a_comparisons_metric_and_reference_are_checked_against_its_variants():
    both = results.read_export(EXPORT).as_studies()
    P.check_studies(both, [], {"metric": "test_loss", "reference": "seed=1"})
    with pytest.raises(P.ParameterError, match=r"^--param reference: no variant with id or label 'x'; variants are: "):
        P.check_studies(both, [], {"reference": "x"})
    with pytest.raises(P.ParameterError, match=r"^--param metric: 'x' is not a metric of these studies; one of: "):
        P.check_studies(both, [], {"metric": "x"})
