"""The plug-in contract (ablate.models.contract) on the shapes docs/plugins.md §2 gives: a
parameterisation whose ``head_gain()``, ``unit_log_magnitude()``, ``unit_head`` or ``system()``
tensors are off is refused before its forward pass, by the method's name and the shape expected
(a per-unit ``head_gain()`` used to pass, and ξ then scaled inputs 6–14× wrong); one that
declares no recurrent parameters is refused naming the rule they are for; a target that is not a
Parameterisation subclass is said to be one; a non-finite output names the first non-finite
tensor; a plug-in's own exception is one line, its traceback printed with ABLATE_TRACEBACK=1; a
report section by path is resolved."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from ablate.models import contract

MODULE = "my_contract_plugin"

PLUGINS = textwrap.dedent('''
    import torch

    from ablate.models.parameterisations import ComplexDiagonal, one_minus_mag_sq


    class PerUnitGain(ComplexDiagonal):
        """head_gain() per mode (4) instead of per head (2)."""

        def head_gain(self):
            power = (self.B_re.square() + self.B_im.square()).sum(1)
            return power / one_minus_mag_sq(self.unit_log_magnitude())


    class NoRecurrent(ComplexDiagonal):
        def recurrent_parameters(self):
            return []


    class ShortB(ComplexDiagonal):
        def system(self, scale):
            s = super().system(scale)
            s.B = s.B[:-2]
            return s


    class ShortLogMagnitude(ComplexDiagonal):
        def unit_log_magnitude(self):
            return super().unit_log_magnitude()[:-1]


    class HeadOutOfRange(ComplexDiagonal):
        def __init__(self, *args):
            super().__init__(*args)
            self.unit_head = self.unit_head + 1


    class Unstable(ComplexDiagonal):
        """|λ| > 1: 1 − |λ|² < 0, so head_gain() is negative and ξ = rsqrt of it is NaN."""

        def unit_log_magnitude(self):
            return super().unit_log_magnitude() + 0.5


    class NaNInput(ComplexDiagonal):
        def system(self, scale):
            s = super().system(scale)
            s.B = s.B * float("nan")
            return s


    class Raises(ComplexDiagonal):
        def system(self, scale):
            raise RuntimeError("first line\\nsecond line")


    def build(params, ctx):
        """A task builder, given where a parameterisation goes."""


    def section(results):
        yield "a paragraph"
''')


@pytest.fixture
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    (tmp_path / f"{MODULE}.py").write_text(PLUGINS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("ABLATE_TRACEBACK", raising=False)
    yield MODULE
    sys.modules.pop(MODULE, None)


def problem(attribute: str, **model: object) -> str:
    """The one problem of a small ξ model (d_model = state_dim = 8, 2 heads, 4 complex modes)
    whose parameterisation is ``my_contract_plugin:<attribute>``."""
    config = {"model": {"d_model": 8, "state_dim": 8, "heads": 2, "layers": 1, "normalisation": "xi",
                        "parameterisation": f"{MODULE}:{attribute}", **model}, "task": {"name": "listops"}}
    (where, message), = contract.problems([config])
    assert where == "model.parameterisation"
    prefix = f"parameterisation plug-in '{MODULE}:{attribute}' (path (no distribution)): "  # the path says the setting
    assert message.startswith(prefix)
    return message.removeprefix(prefix)


@pytest.mark.parametrize("attribute,expected", [
    ("PerUnitGain", "head_gain() has shape (4,); expected (heads,) = (2,) (one per unit, not per head"),
    ("ShortB", "system().B has shape (6, 8); expected (state_dim, d_model) = (8, 8)"),
    ("ShortLogMagnitude", "unit_log_magnitude() has shape (3,); expected (len(unit_head),) = (4,)"),
    ("HeadOutOfRange", "unit_head has values outside [0, heads) = [0, 2) at entries 2, 3 of 4 (values [2])"),
    ("Unstable", "head_gain() is not > 0 at head"),
])
def test_a_shape_off_the_documented_one_is_named_with_what_was_expected(plugin: str, attribute: str,
                                                                         expected: str) -> None:
    assert problem(attribute).startswith(expected)


def test_a_parameterisation_that_declares_no_recurrent_parameters_is_refused_naming_the_rule(plugin: str) -> None:
    message = problem("NoRecurrent")
    assert message.startswith("recurrent_parameters() is empty")
    assert "train.recurrent_lr_factor and the no-weight-decay rule apply to these" in message


def test_a_target_that_is_no_parameterisation_class_is_said_to_be_one(plugin: str) -> None:
    assert problem("build").startswith(f"{MODULE}:build is a function, not a class: a parameterisation plug-in is "
                                       "a subclass of ablate.models.parameterisations.Parameterisation")


def test_a_non_finite_output_names_what_was_non_finite_first(plugin: str) -> None:
    assert problem("NaNInput") == ("the forward pass's output is not finite: system().B is non-finite first "
                                   "(entries 0, 1, 2, 3, … of 64)")


def test_the_plugins_own_failure_is_one_line_and_its_traceback_is_shown_when_asked(
        plugin: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    assert problem("Raises") == ("system() failed: RuntimeError: first line; second line; "
                                 "ABLATE_TRACEBACK=1 shows its traceback")
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("ABLATE_TRACEBACK", "1")
    assert problem("Raises") == "system() failed: RuntimeError: first line; second line"
    shown = capsys.readouterr().err
    assert shown.startswith(f"traceback of parameterisation plug-in '{MODULE}:Raises'")
    assert f"{MODULE}.py" in shown and 'raise RuntimeError("first line' in shown


def test_each_layer_of_several_says_which(plugin: str) -> None:
    assert problem("ShortB", layers=2).startswith("recurrent layer 0: system().B has shape (6, 8)")


def test_the_builtins_keep_the_contract_a_plugin_is_held_to() -> None:
    # each built-in named by path, so that it is checked as a plug-in is, under every normalisation
    configs = [{"model": {"d_model": 8, "state_dim": 8, "heads": 2, "layers": 1, "normalisation": norm,
                          "parameterisation": f"ablate.models.parameterisations:{param}"}, "task": {"name": "listops"}}
               for param in ("Rotation", "ComplexDiagonal", "RealDiagonal", "Dense")
               for norm in ("xi", "gamma", "gamma_recomputed", "none")]
    assert contract.problems(configs) == []


def test_a_report_section_by_path_is_resolved_not_run(plugin: str) -> None:
    assert contract.section_problems(["accuracy", f"{MODULE}:section"]) == []
    (where, message), = contract.section_problems(["accuracy", f"{MODULE}:nope"])
    assert where == "reports[1]" and message == f"section plug-in '{MODULE}:nope': module '{MODULE}' has no attribute 'nope'"


def test_plugin_statuses_that_fail_to_load_are_told_apart() -> None:
    assert contract.loads("ok") and contract.loads("ignored: 'rotation' is a built-in parameterisation")
    assert not contract.loads("parameterisation plug-in 'x': cannot import 'x': SyntaxError: invalid syntax")
