"""The plug-in contract (ablate.models.contract) on the shapes docs/plugins.md §2 gives: a
parameterisation whose ``head_gain()``, ``unit_log_magnitude()``, ``unit_head`` or ``system()``
tensors are off is refused before its forward pass, by the method's name and the shape expected
(a per-unit ``head_gain()`` used to pass, and ξ then scaled inputs 6–14× wrong); one that
declares no recurrent parameters is refused naming the rule they are for; a target that is not a
Parameterisation subclass is said to be one; a non-finite output names the first non-finite
tensor; a plug-in's own exception is one line naming its line of code, its traceback printed with
ABLATE_TRACEBACK=1; an activation or nonlinearity that changes the shape is one problem at its own
setting; a task's out-of-range token ids say the vocab_size they need; a report section by path is
resolved."""

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


    class Fine(ComplexDiagonal):
        """Keeps the contract."""


    class Halves(torch.nn.Module):
        """An activation whose output has half the features: (B, L, d) → (B, L, d/2)."""

        def __init__(self, d_model):
            super().__init__()
            self.lin = torch.nn.Linear(d_model, d_model // 2)

        def forward(self, x):
            return self.lin(x)


    def halve(x):
        """A nonlinearity that drops half the state."""
        return torch.tanh(x)[..., : x.shape[-1] // 2]


    def build(params, ctx):
        """A task builder, given where a parameterisation goes."""


    def bits(params, ctx):
        """Ids 1 and 2 with padding 0 need vocab_size 3; it declares the 2 data tokens."""
        import numpy as np

        from ablate.tasks.data import Generated

        x, y = np.array([[1, 2, 2, 1]] * 4, np.uint8), np.arange(4, dtype=np.int16)
        return Generated(splits={s: (x, y) for s in ("train", "val", "test")}, input_kind="tokens",
                         vocab_size=2, num_classes=4, output_kind="classification")


    def section(results):
        yield "a paragraph"
''')


#: Where Raises raises: the one-line error names the plug-in's file and line, not ablate's
RAISES_LINE = next(n for n, line in enumerate(PLUGINS.splitlines(), 1) if 'raise RuntimeError("first' in line)


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
        plugin: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert problem("Raises") == ("system() failed: RuntimeError: first line; second line; "
                                 f"at {tmp_path / MODULE}.py:{RAISES_LINE} in system; "
                                 "ABLATE_TRACEBACK=1 shows its traceback")
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("ABLATE_TRACEBACK", "1")
    assert problem("Raises") == "system() failed: RuntimeError: first line; second line"
    shown = capsys.readouterr().err
    assert shown.startswith(f"traceback of parameterisation plug-in '{MODULE}:Raises'")
    assert f"{MODULE}.py" in shown and 'raise RuntimeError("first line' in shown


@pytest.mark.parametrize("setting,target,said", [
    ("activation", "Halves", "Activation(d_model)(x) has shape (2, 8, 4); expected (batch, steps, d_model) = (2, 8, 8), "
                             "the shape of x"),
    ("nonlinearity", "halve", "nonlinearity(x) has shape (2, 4); expected (batch, state_dim) = (2, 8), the shape of x"),
])
def test_a_plugin_that_changes_the_shape_is_one_problem_at_its_own_setting(plugin: str, setting: str, target: str,
                                                                           said: str) -> None:
    # before, each network failed on torch's message (broadcasting; mat1 and mat2 shapes), once blamed
    # on the parameterisation too
    model = {"d_model": 8, "state_dim": 8, "heads": 2, "layers": 1, "normalisation": "xi",
             setting: f"{MODULE}:{target}"}
    configs = [{"model": {**model, "parameterisation": p}, "task": {"name": "listops"}}
               for p in ("rotation", f"{MODULE}:Fine")]
    (where, message), = contract.problems(configs)
    assert where == f"model.{setting}"
    assert message == f"{setting} plug-in '{MODULE}:{target}' (path (no distribution)): {said}"


def test_a_task_whose_ids_reach_its_vocab_size_says_the_size_it_needs(plugin: str) -> None:
    from ablate.tasks.registration import REGISTERED, TaskParams, register_task

    register_task("my_contract_bits", TaskParams, version=1)(__import__(MODULE).bits)
    config = {"model": {"parameterisation": "rotation"}, "task": {"name": f"{MODULE}:bits"}}
    try:
        (where, message), = contract.problems([config])
    finally:
        REGISTERED.pop("my_contract_bits")
    assert where == "task.name"
    assert message.endswith("split 'train' has token ids outside [0, vocab_size=2) (from 1 to 2); "
                            "vocab_size counts every id, padding 0 included: at least 3")


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


COUNTING = textwrap.dedent('''
    from ablate.models.parameterisations import ComplexDiagonal

    CALLS = 0


    class Counting(ComplexDiagonal):
        """Counts its system() calls: a check that ran calls it, a remembered one does not."""

        def system(self, scale):
            global CALLS
            CALLS += 1
            return super().system(scale)
''')
COUNTER = "my_counting_plugin"
SMALL = {"d_model": 8, "state_dim": 8, "heads": 2, "layers": 1, "normalisation": "xi"}


@pytest.fixture
def cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The check cache on, under tmp_path, and the counting plug-in importable; its folder."""
    monkeypatch.setenv("ABLATE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("ABLATE_NO_CACHE", raising=False)
    (tmp_path / f"{COUNTER}.py").write_text(COUNTING)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path / "cache" / "checks"
    sys.modules.pop(COUNTER, None)


def checked(parameterisation: str, **model: object) -> tuple[contract.Problems, list[str], int]:
    """The problems, the lines said and how often the counting plug-in's system() ran (fresh
    module when the file changed: the test edits it as a researcher would, then imports anew)."""
    import importlib

    config = {"model": {**SMALL, "parameterisation": parameterisation, **model}, "task": {"name": "listops"}}
    lines: list[str] = []
    module = importlib.import_module(COUNTER)
    before = module.CALLS
    found = contract.problems([config], say=lines.append)
    return found, lines, importlib.import_module(COUNTER).CALLS - before


def test_a_passed_check_says_what_it_checked_and_is_not_run_again(cached: Path) -> None:
    from ablate import plugins

    code = plugins.source_hash(plugins.by_path("parameterisation", f"{COUNTER}:Counting"))
    found, lines, calls = checked(f"{COUNTER}:Counting")
    assert found == [] and calls > 0
    assert lines == [f"checked {COUNTER}:Counting (path, code {code}): 1 model — shapes, forward, backward, "
                     "dynamics, scan = loop = step"]
    assert len(list(cached.glob("*.json"))) == 1
    found, lines, calls = checked(f"{COUNTER}:Counting")
    assert found == [] and calls == 0  # the check did not build the plug-in: system() was never called
    assert lines == [f"checked {COUNTER}:Counting (path, code {code}): 1 model — shapes, forward, backward, "
                     "dynamics, scan = loop = step (cached)"]
    # another model config is another check: the first is still remembered
    found, lines, calls = checked(f"{COUNTER}:Counting", d_model=16, state_dim=16)
    assert found == [] and calls > 0 and not lines[0].endswith("(cached)")


def test_the_line_says_what_the_check_did(cached: Path) -> None:
    # Dense has no diagonal form: its check compares the loop with the step, and runs no scan
    found, lines, _ = checked("ablate.models.parameterisations:Dense")
    assert found == [] and lines[0].endswith("1 model — shapes, forward, backward, dynamics, loop = step")


def test_an_edited_plugin_is_checked_again_and_a_comment_is_no_edit(cached: Path) -> None:
    assert checked(f"{COUNTER}:Counting")[2] > 0
    path = cached.parent.parent / f"{COUNTER}.py"
    path.write_text(COUNTING + "\n# a comment\n")
    sys.modules.pop(COUNTER)
    found, lines, calls = checked(f"{COUNTER}:Counting")
    assert calls == 0 and lines[0].endswith("(cached)")  # the code hash skips comments (ablate.plugins)
    path.write_text(COUNTING.replace("CALLS += 1", "CALLS += 1\n        CALLS += 0"))
    sys.modules.pop(COUNTER)
    found, lines, calls = checked(f"{COUNTER}:Counting")
    assert found == [] and calls > 0 and not lines[0].endswith("(cached)")
    assert len(list(cached.glob("*.json"))) == 2


def test_a_failed_check_is_never_remembered(cached: Path, plugin: str, tmp_path: Path) -> None:
    for _ in range(2):
        found, lines, _ = checked(f"{MODULE}:Raises")
        assert [message for _, message in found] == [
            f"parameterisation plug-in '{MODULE}:Raises' (path (no distribution)): system() failed: RuntimeError: "
            f"first line; second line; at {tmp_path / MODULE}.py:{RAISES_LINE} in system; "
            "ABLATE_TRACEBACK=1 shows its traceback"]
        assert lines == []  # a plug-in that failed is not said to be checked
    assert not cached.exists() or list(cached.iterdir()) == []


def test_an_unreadable_entry_is_ignored_and_overwritten(cached: Path) -> None:
    checked(f"{COUNTER}:Counting")
    (entry,) = cached.glob("*.json")
    for corrupt in ("{not json", '["a", "list"]', '{"checked": "forward"}'):
        entry.write_text(corrupt)
        found, lines, calls = checked(f"{COUNTER}:Counting")
        assert found == [] and calls > 0 and not lines[0].endswith("(cached)")
        assert entry.read_text() != corrupt
        assert checked(f"{COUNTER}:Counting")[2] == 0


def test_no_cache_checks_every_time_and_keeps_nothing(cached: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ABLATE_NO_CACHE", "1")
    assert checked(f"{COUNTER}:Counting")[2] > 0 and checked(f"{COUNTER}:Counting")[2] > 0
    assert not cached.exists()


def test_the_cache_follows_xdg_without_its_own_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ablate import cache

    monkeypatch.delenv("ABLATE_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.checks_dir() == tmp_path / "xdg" / "ablate" / "checks"
    monkeypatch.setenv("ABLATE_CACHE_DIR", str(tmp_path / "mine"))
    assert cache.checks_dir() == tmp_path / "mine" / "checks"


def test_the_minimal_parameterisation_of_docs_plugins_keeps_the_contract(tmp_path: Path, monkeypatch) -> None:
    """docs/plugins.md §2 gives a whole parameterisation (SigmoidPolar) for a reader to copy: it
    keeps every promise under ξ, γ and a nonlinearity, as the page says, or the page is wrong."""
    page = (Path(__file__).resolve().parents[1] / "docs" / "plugins.md").read_text()
    lines = page.split("A minimal parameterisation", 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("    import torch"))
    block = []
    for line in lines[start:]:
        if line and not line.startswith("    "):
            break
        block.append(line)
    (tmp_path / "docs_sigmoid_polar.py").write_text(textwrap.dedent("\n".join(block)))
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        for model in ({"normalisation": "xi"}, {"normalisation": "gamma"}, {"normalisation": "xi", "nonlinearity": "tanh"}):
            config = {"model": {"d_model": 8, "state_dim": 8, "heads": 2, "layers": 1,
                                "parameterisation": "docs_sigmoid_polar:SigmoidPolar", **model},
                      "task": {"name": "listops"}}
            assert contract.problems([config]) == [], model
    finally:
        sys.modules.pop("docs_sigmoid_polar", None)
