"""Plug-ins (ablate.plugins, the registries, ablate.models.contract): the example package
(examples/ablate-cayley, installed by scripts/setup.sh) adds a parameterisation and a task that a
spec names beside the built-ins; a plug-in by path works the same; a broken plug-in is refused by
``validate`` with a message naming it; an edited plug-in makes new cells and its old ones stale;
one that a worker cannot import fails its item as an error with the import's message."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml

from ablate import design, metrics, plugins
from ablate.design import identity
from ablate.models import catalogue, contract
from ablate.spec import SpecError
from ablate.spec.files import multirun_overrides
from ablate.tasks.registry import TASK_NAMES, task_entry
from tests.support import ABLATE

SMALL = {"d_model": 8, "state_dim": 8, "heads": 2, "layers": 1}
PARITY = {"name": "parity", "seq_len": 8, "train_size": 64, "val_size": 16, "test_size": 16}


def spec_text(**over) -> str:
    data = {"name": "plug", "task": PARITY, "model": SMALL, "train": {"steps": 4, "batch_size": 8}, "seeds": 1,
            "factors": {"model.parameterisation": ["rotation", "cayley"]}}
    data.update(over)
    return yaml.safe_dump(data, sort_keys=False)


def test_the_example_package_is_installed_by_entry_point() -> None:
    kinds = {(p.kind, p.name): p for p in plugins.installed()}
    cayley, parity = kinds[("parameterisation", "cayley")], kinds[("task", "parity")]
    assert (cayley.target, cayley.distribution) == ("ablate_cayley.cayley:CayleyRotation", "ablate-cayley")
    assert parity.target == "ablate_cayley.parity:build"
    assert "cayley" in catalogue.PARAMETERISATIONS.names and "cayley" not in catalogue.PARAMETERISATIONS.builtin_names
    assert "parity" in TASK_NAMES and task_entry("parity").plugin == parity


def test_ablate_plugins_lists_them_and_where_they_come_from() -> None:
    done = subprocess.run([*ABLATE, "plugins"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = {line.split()[1]: line for line in done.stdout.splitlines()[2:]}
    assert "ablate_cayley.cayley:CayleyRotation" in lines["cayley"] and "ablate-cayley 0.1.0" in lines["cayley"]
    assert lines["cayley"].rstrip().endswith("ok") and lines["parity"].rstrip().endswith("ok")
    assert plugins.source_hash(task_entry("parity").plugin) in lines["parity"]


def test_a_spec_uses_plugins_by_name_beside_the_builtins_and_they_keep_their_contract() -> None:
    spec = design.loads(spec_text())
    grid = design.cells(spec)
    assert [c.config["model"]["parameterisation"] for c in grid] == ["rotation", "cayley"]
    assert contract.spec_problems(spec) == []
    # the plug-in level composes with the built-in factors, as the built-ins do
    spec = design.loads(spec_text(factors={"model.parameterisation": ["cayley"],
                                           "model.normalisation": list(catalogue.NORMALISATIONS.builtin_names),
                                           "model.nonlinearity": ["none", "tanh"]}))
    assert len(design.cells(spec)) == 8 and contract.spec_problems(spec) == []


def test_unknown_names_say_the_closest_plugin_or_builtin() -> None:
    with pytest.raises(SpecError, match="'cayly' is not one of: .*cayley; or a plug-in .*did you mean 'cayley'"):
        design.loads(spec_text(factors={"model.parameterisation": ["rotation", "cayly"]}))
    with pytest.raises(SpecError, match="'party' is not one of: .*parity.*did you mean 'parity'"):
        design.loads(spec_text(task={**PARITY, "name": "party"}))


BROKEN = '''
import dataclasses

from ablate.models.parameterisations import RealDiagonal, Rotation, System


class NaNs(RealDiagonal):
    """Promises a real diagonal; its input matrix is NaN."""

    def system(self, scale):
        s = super().system(scale)
        s.B = s.B * float("nan")
        return s


class Transposed(System):
    def natural(self):
        A, B, C = super().natural()
        return A.T, B, C


class LoopsBackwards(Rotation):
    """Its sequential form iterates Aᵀ where its scan iterates A: the two disagree."""

    def system(self, scale):
        return Transposed(**{f.name: getattr(s, f.name) for s in [super().system(scale)]
                             for f in dataclasses.fields(s)})


def not_a_class(*args):
    raise RuntimeError("I am no parameterisation")
'''


@pytest.fixture
def plugin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder on sys.path for plug-in modules by path (removed from sys.modules after)."""
    from ablate.tasks.registration import REGISTERED

    tasks = dict(REGISTERED)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in [m for m in sys.modules if m.startswith("my_plugin")]:
        del sys.modules[name]
    REGISTERED.clear()  # the tasks its modules registered would stay in every later test's task names
    REGISTERED.update(tasks)


@pytest.mark.parametrize("attribute,broken", [
    ("NaNs", "the forward pass's output is not finite"),
    ("LoopsBackwards", "the parallel scan and the sequential loop disagree"),
    ("not_a_class", "my_plugin_broken:not_a_class is a function, not a class: a parameterisation plug-in is a "
                    "subclass of ablate.models.parameterisations.Parameterisation"),
    ("Missing", "module 'my_plugin_broken' has no attribute 'Missing'"),
])
def test_validate_rejects_a_plugin_that_breaks_its_contract_naming_it(plugin_dir: Path, attribute: str,
                                                                      broken: str) -> None:
    (plugin_dir / "my_plugin_broken.py").write_text(BROKEN)
    target = f"my_plugin_broken:{attribute}"
    spec = design.loads(spec_text(factors={"model.parameterisation": ["rotation", target]}))
    (where, message), = contract.spec_problems(spec)
    assert where == "factors.model.parameterisation[1]"  # the level that named it, not the baseline's key
    assert message.startswith(f"parameterisation plug-in '{target}' (path (no distribution)): ")
    assert broken in message


def test_validate_command_exits_2_naming_the_broken_plugin(tmp_path: Path) -> None:
    (tmp_path / "my_plugin_cli.py").write_text(BROKEN)
    path = tmp_path / "s.yaml"
    path.write_text(spec_text(factors={"model.parameterisation": ["rotation", "my_plugin_cli:NaNs"]}))
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    done = subprocess.run([*ABLATE, "validate", str(path)], capture_output=True, text=True, timeout=300, env=env,
                          cwd=tmp_path)
    assert done.returncode == 2
    line = 1 + path.read_text().splitlines().index("  - my_plugin_cli:NaNs")
    assert f"error {path}:{line}: factors.model.parameterisation[1]: parameterisation plug-in 'my_plugin_cli:NaNs' " \
        "(path (no distribution)):" in done.stderr and "not finite" in done.stderr
    done = subprocess.run([*ABLATE, "validate", str(path), "-m", "model.parameterisation=my_plugin_cli:NaNs"],
                          capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert "error -m model.parameterisation: factors.model.parameterisation[0]: parameterisation plug-in" \
        in done.stderr, done.stderr  # a level from the command line is not blamed on the file


def test_validate_says_what_it_checked_of_each_plugin_and_checks_it_once(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(spec_text())
    env = {**os.environ, "ABLATE_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("ABLATE_NO_CACHE", None)
    cayley, parity = plugins.find("parameterisation", "cayley"), task_entry("parity").plugin
    said = [f"checked cayley (ablate-cayley 0.1.0, code {plugins.source_hash(cayley)}): 1 model — shapes, forward, "
            "backward, dynamics, scan = loop = step",
            f"checked parity (ablate-cayley 0.1.0, code {plugins.source_hash(parity)}): 1 task setting — train, val "
            "and test splits fit what it declares"]
    for suffix in ("", " (cached)"):  # the second validate finds both checks passed before
        done = subprocess.run([*ABLATE, "validate", str(path)], capture_output=True, text=True, timeout=300,
                              env=env, cwd=tmp_path)
        assert done.returncode == 0 and done.stdout == "OK plug: 2 cells × 1 seed\n", done.stderr
        assert sorted(done.stderr.splitlines()) == [line + suffix for line in said]
    assert len(list((tmp_path / "cache" / "checks").glob("*.json"))) == 2


def test_a_plugin_whose_module_is_not_found_asks_for_its_package_or_its_folder_on_pythonpath(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", "/somewhere/else")
    with pytest.raises(plugins.PluginError, match=r"no source file for module 'my_plugin_nowhere' \(is its package "
                                                  r"installed in this environment, or its folder on PYTHONPATH\? "
                                                  r"PYTHONPATH is /somewhere/else\)"):
        plugins.source_hash(plugins.by_path("parameterisation", "my_plugin_nowhere:Givens"))
    with pytest.raises(plugins.PluginError, match=r"No module named 'my_plugin_nowhere' \(is its package installed"):
        plugins.by_path("parameterisation", "my_plugin_nowhere:Givens").load()
    with pytest.raises(SpecError) as info:  # said at the level that named it, not at the baseline's key
        design.loads(spec_text(factors={"model.parameterisation": ["rotation", "my_plugin_nowhere:Givens"]}))
    (where, message), = info.value.problems
    assert where == "factors.model.parameterisation[1]" and "no source file for module 'my_plugin_nowhere'" in message


def test_a_plugin_that_exits_on_import_is_a_clean_error_not_the_end_of_validate(plugin_dir: Path) -> None:
    """A module (or its parent package) calling sys.exit on import ended `ablate validate` with
    that status and no message: it is the plug-in's error, said at the level that named it."""
    (plugin_dir / "my_plugin_exits.py").write_text("import sys\nsys.exit(3)\n")
    (plugin_dir / "my_plugin_exitpkg").mkdir()
    (plugin_dir / "my_plugin_exitpkg" / "__init__.py").write_text("import sys\nsys.exit(4)\n")
    (plugin_dir / "my_plugin_exitpkg" / "mod.py").write_text("X = 1\n")
    with pytest.raises(SpecError) as info:  # finding its source imports the parent package
        design.loads(spec_text(factors={"model.parameterisation": ["rotation", "my_plugin_exitpkg.mod:Givens"]}))
    (where, message), = info.value.problems
    assert where == "factors.model.parameterisation[1]"
    assert "cannot find 'my_plugin_exitpkg.mod': SystemExit: 4" in message, message
    spec = design.loads(spec_text(factors={"model.parameterisation": ["rotation", "my_plugin_exits:Givens"]}))
    (where, message), = contract.spec_problems(spec)  # what validate checks: the module is imported
    assert where == "factors.model.parameterisation[1]"
    assert "cannot import 'my_plugin_exits': SystemExit: 3" in message, message
    path = plugin_dir / "s.yaml"
    path.write_text(spec_text(factors={"model.parameterisation": ["rotation", "my_plugin_exits:Givens"]}))
    done = subprocess.run([*ABLATE, "validate", str(path)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(plugin_dir)}, cwd=plugin_dir)
    assert done.returncode == 2 and "SystemExit: 3" in done.stderr and "Traceback" not in done.stderr, done.stderr
    # os._exit skips every handler: it ended validate with exit 0 and no word; now the same error
    (plugin_dir / "my_plugin_hard_exit.py").write_text("import os\nos._exit(0)\n")
    path.write_text(spec_text(factors={"model.parameterisation": ["rotation", "my_plugin_hard_exit:Givens"]}))
    done = subprocess.run([*ABLATE, "validate", str(path)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(plugin_dir)}, cwd=plugin_dir)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "cannot import 'my_plugin_hard_exit': HardExit: os._exit(0) called on import" in done.stderr, done.stderr
    assert os._exit is plugins._REAL_EXIT  # restored after the import


def test_ablate_plugins_exits_1_when_one_fails_to_load(tmp_path: Path) -> None:
    """A distribution on PYTHONPATH (its metadata found as an installed one's) whose plug-in does
    not import: listed with its import's message, and the command fails."""
    (tmp_path / "my_plugin_syntax.py").write_text("class Broken(:\n    pass\n")
    meta = tmp_path / "my_plugin_dist-0.1.dist-info"
    meta.mkdir()
    (meta / "METADATA").write_text("Metadata-Version: 2.1\nName: my-plugin-dist\nVersion: 0.1\n")
    (meta / "entry_points.txt").write_text("[ablate.parameterisations]\nbroken_param = my_plugin_syntax:Broken\n")
    done = subprocess.run([*ABLATE, "plugins"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert done.returncode == 1, done.stdout + done.stderr
    assert "cannot import 'my_plugin_syntax': SyntaxError" in done.stdout
    assert "error 1 plug-in fails to load: parameterisation 'broken_param'; their status says why" in done.stderr


def test_a_task_plugin_that_yields_bad_data_is_refused(plugin_dir: Path) -> None:
    (plugin_dir / "my_plugin_task.py").write_text(textwrap.dedent('''
        import numpy as np
        from ablate.tasks.data import Generated
        from ablate.tasks.registration import TaskParams, register_task

        @register_task("my_plugin_bad_labels", TaskParams, version=1)
        def build(p, ctx):
            x = np.ones((4, 5), np.uint8)
            y = np.full(4, 7, np.int16)  # class 7 of 2
            return Generated(splits={s: (x, y) for s in ("train", "val", "test")}, input_kind="tokens",
                             vocab_size=3, num_classes=2, output_kind="classification")
    '''))
    spec = design.loads(spec_text(task={"name": "my_plugin_task:build"}, factors={}))
    (where, message), = contract.spec_problems(spec)
    assert where == "task.name" and "task plug-in 'my_plugin_task:build'" in message
    assert "targets outside [0, num_classes=2)" in message


def test_editing_a_plugin_makes_new_cells_and_the_old_ones_stale(plugin_dir: Path) -> None:
    module = plugin_dir / "my_plugin_edit.py"
    module.write_text("from ablate.models.parameterisations import Rotation as Mine\n")
    spec = design.loads(spec_text(factors={"model.parameterisation": ["rotation", "my_plugin_edit:Mine"]}))
    builtin, mine = design.cells(spec)
    before = identity.cell_id(mine.config), identity.config_key(mine.config), identity.cell_id(builtin.config)
    assert "my_plugin_edit:Mine" in identity.code_version(mine.config)
    version = identity.code_version(mine.config)
    # a comment, a docstring, blank lines and formatting are not code: the same cell
    module.write_text('"""My parameterisation."""\n\n# a comment\nfrom ablate.models.parameterisations import (\n'
                      '    Rotation as Mine,  # edited\n)\n')
    assert identity.cell_id(mine.config) == before[0] and identity.code_version(mine.config) == version
    module.write_text("from ablate.models.parameterisations import ComplexDiagonal as Mine\n")
    after = identity.cell_id(mine.config), identity.config_key(mine.config), identity.cell_id(builtin.config)
    # plan says what changed, not both identities whole (a line of 220 characters)
    old_source, new_source = (re.search(r"my_plugin_edit:Mine code (\w+)", v)[1]
                              for v in (version, identity.code_version(mine.config)))
    assert identity.version_change(version, identity.code_version(mine.config)) == \
        f"model.parameterisation my_plugin_edit:Mine code {old_source} → {new_source}"
    assert after[0] != before[0]  # a new cell
    assert after[1] == before[1]  # the same experiment: the old results are stale, not lost
    assert after[2] == before[2]  # cells of built-ins only are untouched


def test_a_plugins_code_hash_ignores_comments_docstrings_and_formatting() -> None:
    code = b'def f(x):\n    return x + 1\n'
    same = (b'"""Module doc."""\n# a comment\n\n\ndef f( x ):  # why\n    """What f does."""\n    return (x +\n            1)\n',
            b'def f(x):\r\n    return x + 1  \r\n\r\n')
    assert all(plugins.code_hash(other) == plugins.code_hash(code) for other in same)
    for edit in (b'def f(x):\n    return x + 2\n', b'def f(y):\n    return y + 1\n', b'def f(x):\n    return x + 1.0\n',
                 b'def f(x):\n    return x + 1\nclass C:\n    """only a docstring"""\n'):
        assert plugins.code_hash(edit) != plugins.code_hash(code), edit
    # only a docstring is left out: a string after the first statement is code, as Python reads it
    assert plugins.code_hash(b'def f(x):\n    x = 1\n    "a string"\n    return x\n') != \
        plugins.code_hash(b'def f(x):\n    x = 1\n    return x\n')
    # not Python: every byte counts
    assert plugins.code_hash(b"def (:") != plugins.code_hash(b"def (:  ")


def test_a_cell_stored_under_the_files_hash_says_whether_only_the_hash_changed(plugin_dir: Path) -> None:
    """Before code hashes, a plug-in's identity was the hash of its file's bytes (``source``): every
    plug-in cell is new once, and plan says whether the file itself changed since."""
    module = plugin_dir / "my_plugin_rehash.py"
    module.write_text("from ablate.models.parameterisations import Rotation as Mine\n")
    plugin = plugins.by_path("parameterisation", "my_plugin_rehash:Mine")
    now = f"1, model.parameterisation my_plugin_rehash:Mine code {plugins.source_hash(plugin)}"
    stored = f"1, model.parameterisation my_plugin_rehash:Mine source {plugins.file_hash(plugin)}"
    assert identity.version_change(stored, now).endswith("(ablate hashes code now, not files; this file is "
                                                         "unchanged: the same plug-in)")
    assert identity.version_change(stored.replace(plugins.file_hash(plugin), "0" * 12), now).endswith(
        "this file changed since)")


def test_a_choice_list_leaves_out_a_plugin_that_fails_to_load(plugin_dir: Path) -> None:
    from ablate.spec.errors import not_a_plugin

    (plugin_dir / "my_plugin_syntax2.py").write_text("class Broken(:\n    pass\n")
    (plugin_dir / "my_plugin_fine.py").write_text("class Fine:\n    pass\n")
    found = (plugins.Plugin("parameterisation", "broken_one", "my_plugin_syntax2:Broken"),
             plugins.Plugin("parameterisation", "fine_one", "my_plugin_fine:Fine"))
    said = not_a_plugin("broken_on", ("rotation",), found)
    assert said.startswith("'broken_on' is not one of: rotation, fine_one (not listed, as they fail to load: "
                           "broken_one; see `ablate plugins`); or a plug-in as package.module:attribute"), said
    assert "did you mean" not in said  # not offered, though it is the closest name


def test_a_task_plugins_source_enters_its_data_version(plugin_dir: Path) -> None:
    source = "from ablate_cayley.parity import ParityParams, build\nVERSION = {}\n"
    module = plugin_dir / "my_plugin_data.py"
    module.write_text(source.format(1))
    task = {"name": "my_plugin_data:build", **{k: v for k, v in PARITY.items() if k != "name"}}
    first = identity.data_version(task)
    module.write_text(source.format(2))
    assert identity.data_version(task) != first


def test_multirun_overrides_make_factors() -> None:
    assert multirun_overrides(["model.layers=1,2,4", "train.lr=1e-3, 3e-3", "model.init={scheme: ring},[1, 2]"]) == [
        "factors.model.layers=[1, 2, 4]", "factors.train.lr=[1e-3, 3e-3]",
        "factors.model.init=[{scheme: ring}, [1, 2]]"]
    for bad, why in (("model.layers", "path=level"), ("model.layers=1,,2", "an empty level"),
                     ("factors.model.layers=1", "not factors")):
        with pytest.raises(SpecError, match=why):
            multirun_overrides([bad])
    spec = design.loads(spec_text(), overrides=multirun_overrides(["model.layers=1,2", "train.lr=1e-3,3e-3"]))
    assert len(design.cells(spec)) == 8 and spec.factors["train.lr"] == [1e-3, 3e-3]


def test_the_example_study_runs_with_a_grid_from_the_command_line(tmp_path: Path) -> None:
    """The example's study (examples/ablate-cayley/parity.yaml), shortened, with -m: run, then
    status reads the stored spec's grid (the factor -m added included)."""
    example = Path(__file__).resolve().parent.parent / "examples" / "ablate-cayley" / "parity.yaml"
    run = subprocess.run([*ABLATE, "run", str(example), "--set", "train.steps=5", "--set", "task.train_size=200",
                          "--set", "seeds=1", "-m", "model.layers=1,2", "--workers", "1"],
                         capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "cayley_parity: 6 done, 0 failed, 0 unfinished" in run.stdout
    status = subprocess.run([*ABLATE, "status", "cayley_parity"], capture_output=True, text=True, timeout=300,
                            cwd=tmp_path)
    assert status.returncode == 0, status.stderr
    for cell in ("Cayley, layers=1", "Cayley, layers=2", "RotRNN, layers=2", "LRU, layers=1"):
        assert cell in status.stdout
    # the package's metric (train.metrics: [macro_f1]) is a column of the trials frame
    code = ("from ablate import results\nt = results.load('cayley_parity', curves=False).trials\n"
            "print(t['test_macro_f1'].to_list(), t['test_accuracy'].to_list())\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    f1, accuracy = (yaml.safe_load(part + "]") for part in done.stdout.strip()[:-1].split("] "))
    assert len(f1) == 6 and all(0.0 <= v <= 1.0 for v in f1) and f1 != accuracy


def test_a_plugin_a_worker_cannot_import_fails_its_item_as_an_error(tmp_path: Path) -> None:
    (tmp_path / "plug").mkdir()
    (tmp_path / "plug" / "my_plugin_gone.py").write_text("from ablate.models.parameterisations import Rotation as R\n")
    path = tmp_path / "s.yaml"
    path.write_text(spec_text(name="gone", task={**PARITY, "name": "parity"},
                              factors={"model.parameterisation": ["my_plugin_gone:R"]}))
    with_plugin = {**os.environ, "PYTHONPATH": str(tmp_path / "plug")}
    queued = subprocess.run([*ABLATE, "run", str(path), "--workers", "0"], capture_output=True, text=True,
                            timeout=300, cwd=tmp_path, env=with_plugin)
    assert queued.returncode == 0, queued.stderr[-2000:]
    work = subprocess.run([*ABLATE, "worker", "gone", "-v"], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    text = work.stdout + work.stderr
    assert "worker finished: {'error': 1}" in text, text[-3000:]
    assert "error parameterisation=my_plugin_gone:R · seed 0 PluginError: parameterisation plug-in 'my_plugin_gone:R':" \
           " cannot import 'my_plugin_gone': ModuleNotFoundError: No module named 'my_plugin_gone'" in text


def test_a_spec_of_builtins_never_looks_for_plugins() -> None:
    """Entry points are read on first need (a name that is not a built-in's): `ablate validate`
    and `plan` of a study of built-ins pay nothing for plug-ins."""
    code = ("from ablate import design, plugins\n"
            "spec = design.load('studies/rotrnn_vs_lru.yaml')\n"
            "assert design.cells(spec) and design.items(spec)\n"
            "assert plugins.installed.cache_info().currsize == 0, 'entry points were read'\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          cwd=Path(__file__).resolve().parent.parent)
    assert done.returncode == 0, done.stderr[-2000:]


# --- initialisation schemes ----------------------------------------------------------------------

BROKEN_INITS = '''
import torch

from ablate.models.inits import RotrnnInit
from ablate.spec import PluginInit


class Mine(RotrnnInit):
    """RotRNN's scheme under another name, with RotRNN's parameters (its Params)."""

    class Params(PluginInit):
        gamma_min: float = 0.5
        gamma_max: float = 0.9


class Unstable(Mine):
    """Magnitudes past the unit circle: log(−log |λ|) is NaN for them."""

    def magnitudes(self, n):
        return torch.full((n,), 1.5)


class BadPhases(Mine):
    def phases(self, shape):
        return torch.zeros(3)


class NoParams:
    Params = dict
'''


def init_spec_text(*inits: dict) -> str:
    return spec_text(factors={"model.init": list(inits),
                              "model.parameterisation": list(catalogue.PARAMETERISATIONS.names)})


def test_an_init_plugin_is_a_scheme_with_its_own_parameters_beside_the_builtins() -> None:
    s4d = next(p for p in plugins.installed() if (p.kind, p.name) == ("initialisation", "s4d_lin"))
    assert s4d.target == "ablate_cayley.inits:S4DLin" and "s4d_lin" in catalogue.INIT_SCHEMES.names
    spec = design.loads(init_spec_text({"scheme": "ring"}, {"scheme": "s4d_lin", "dt": 0.1}))
    grid = design.cells(spec)
    # it composes with every parameterisation, built-in and plug-in, and keeps its contract in each
    assert len(grid) == 2 * len(catalogue.PARAMETERISATIONS.names) and contract.spec_problems(spec) == []
    mine = [c for c in grid if c.config["model"]["init"]["scheme"] == "s4d_lin"]
    assert {c.config["model"]["init"]["dt"] for c in mine} == {0.1}
    assert {c.config["model"]["init"]["real"] for c in mine} == {0.5}  # its default, filled in
    for cell in grid:
        ids = identity.plugin_identities(cell.config)
        assert ("model.init.scheme" in ids) == (cell in mine)
    assert identity.plugin_identities(mine[0].config)["model.init.scheme"]["distribution"] == "ablate-cayley 0.1.0"


@pytest.mark.parametrize("init,where,message", [
    ({"scheme": "s4d_lni"}, "model.init.scheme", "'s4d_lni' is not one of: ring, rotrnn, s4d_lin; or a plug-in as "
                                                 "package.module:attribute; did you mean 's4d_lin'?"),
    ({"scheme": "s4d_lin", "dt": 0.0}, "model.init.dt", "must be > 0; got 0.0"),
    ({"scheme": "s4d_lin", "dt": "0.1"}, "model.init.dt", "must be a number, not text"),
    ({"scheme": "s4d_lin", "dtt": 0.1}, "model.init.dtt", "unknown key"),
    ({"dt": 0.1}, "model.init", "needs a 'scheme' key"),
])
def test_an_init_plugins_parameters_are_validated_like_a_builtins(init: dict, where: str, message: str) -> None:
    with pytest.raises(SpecError) as info:
        design.loads(spec_text(model={**SMALL, "init": init}, factors={}))
    (path, text), = info.value.problems
    assert path == where and message in text


@pytest.mark.parametrize("attribute,broken", [
    ("Unstable", "magnitudes() are not all in (0, 1)"),
    ("BadPhases", "phases((2, 4)) has shape (3,), not (2, 4)"),
])
def test_validate_rejects_an_init_plugin_that_breaks_its_contract_naming_it(plugin_dir: Path, attribute: str,
                                                                            broken: str) -> None:
    (plugin_dir / "my_plugin_inits.py").write_text(BROKEN_INITS)
    target = f"my_plugin_inits:{attribute}"
    spec = design.loads(init_spec_text({"scheme": "my_plugin_inits:Mine"}, {"scheme": target, "gamma_max": 0.8}))
    (where, message), = contract.spec_problems(spec)  # once, not once per parameterisation
    assert where == "factors.model.init[1].scheme"
    assert message.startswith(f"initialisation plug-in '{target}' (path (no distribution)): ")
    assert broken in message


def test_an_init_plugin_without_a_parameter_model_is_refused(plugin_dir: Path) -> None:
    (plugin_dir / "my_plugin_inits.py").write_text(BROKEN_INITS)
    with pytest.raises(SpecError, match=r"model.init.scheme: initialisation plug-in 'my_plugin_inits:NoParams': "
                                        r"its Params is not a subclass of ablate.spec.PluginInit"):
        design.loads(spec_text(model={**SMALL, "init": {"scheme": "my_plugin_inits:NoParams"}}, factors={}))


def test_editing_an_init_plugin_makes_new_cells(plugin_dir: Path) -> None:
    module = plugin_dir / "my_plugin_init_edit.py"
    module.write_text("from ablate.models.inits import RotrnnInit as Mine\n")
    spec = design.loads(spec_text(model={**SMALL, "init": {"scheme": "my_plugin_init_edit:Mine"}}, factors={}))
    cell, = design.cells(spec)
    before = identity.cell_id(cell.config), identity.config_key(cell.config)
    module.write_text("from ablate.models.inits import RingInit as Mine\n")
    assert identity.cell_id(cell.config) != before[0] and identity.config_key(cell.config) == before[1]


# --- metrics -------------------------------------------------------------------------------------

BROKEN_METRICS = '''
def nan(logits, targets):
    return float("nan")


def raises(logits, targets):
    raise RuntimeError("no metric today")


def mean_target(logits, targets):
    return targets.float().mean()
'''


def test_a_metric_plugin_is_chosen_in_train_metrics_and_enters_the_cell_id(plugin_dir: Path) -> None:
    (plugin_dir / "my_plugin_metrics.py").write_text(BROKEN_METRICS)
    plain = design.cells(design.loads(spec_text(factors={})))[0]
    spec = design.loads(spec_text(train={"steps": 4, "batch_size": 8, "metrics": ["macro_f1"]}, factors={}))
    cell, = design.cells(spec)
    assert contract.spec_problems(spec) == []
    ident = identity.plugin_identities(cell.config)["train.metrics.macro_f1"]
    assert ident["target"] == "ablate_cayley.metrics:macro_f1" and ident["distribution"] == "ablate-cayley 0.1.0"
    assert cell.id != plain.id and "train.metrics" not in identity.plugin_identities(plain.config)
    # no metrics is the neutral setting: the cells of a spec without them keep their ids
    assert "metrics" not in identity.identity_config(plain.config)["train"]
    assert metrics.column("macro_f1") == "test_macro_f1"
    assert metrics.column("my_plugin_metrics:mean_target") == "test_mean_target"
    import torch

    logits, targets = torch.tensor([[2.0, 0.0], [0.0, 1.0], [3.0, 0.0]]), torch.tensor([0, 1, 1])
    assert metrics.compute(logits, targets, ["macro_f1", "my_plugin_metrics:mean_target"]) == pytest.approx(
        {"test_macro_f1": 2 / 3, "test_mean_target": 2 / 3})  # F1 of each class: 2/3 (P 1/2, R 1; P 1, R 1/2)


def test_unknown_metrics_say_the_closest(plugin_dir: Path) -> None:
    with pytest.raises(SpecError, match=r"train.metrics\[0\]: .macro_f2. is not one of: macro_f1; or a plug-in .*"
                                        "did you mean 'macro_f1'"):
        design.loads(spec_text(train={"steps": 4, "metrics": ["macro_f2"]}, factors={}))


@pytest.mark.parametrize("attribute,broken", [
    ("nan", "gives nan on a batch of 8 rows of 3 classes"),
    ("raises", "RuntimeError: no metric today"),
    ("missing", "has no attribute 'missing'"),
])
def test_validate_rejects_a_metric_plugin_that_breaks_its_contract(plugin_dir: Path, attribute: str,
                                                                   broken: str) -> None:
    (plugin_dir / "my_plugin_metrics.py").write_text(BROKEN_METRICS)
    target = f"my_plugin_metrics:{attribute}"
    spec = design.loads(spec_text(train={"steps": 4, "metrics": [target]}, factors={}))
    (where, message), = contract.spec_problems(spec)
    assert where == "train.metrics" and target in message and broken in message


def test_a_plugin_interrupted_while_it_imports_is_a_refusal_naming_it(tmp_path, monkeypatch) -> None:
    # A module that loops on import hangs a command until Ctrl-C, which then exited 130 saying nothing.
    from ablate.terminal import Refused

    (tmp_path / "ctrl_c_on_import.py").write_text("raise KeyboardInterrupt\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(Refused) as info:
        plugins.load_target("ctrl_c_on_import:x", "normalisation plug-in 'ctrl_c_on_import:x'")
    assert info.value.code == 130
    assert info.value.lines == ["normalisation plug-in 'ctrl_c_on_import:x': interrupted while importing "
                                "'ctrl_c_on_import' (its import did not finish)"]


def test_a_plugin_whose_import_does_not_finish_says_so_while_it_hangs(tmp_path, monkeypatch, capfd) -> None:
    # A module that loops on import hung validate (and every worker) without a word until Ctrl-C.
    (tmp_path / "slow_on_import.py").write_text("import time\ntime.sleep(1.0)\nx = 1\n")
    (tmp_path / "quick_on_import.py").write_text("x = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(plugins, "SLOW_IMPORT_S", 0.2)
    assert plugins.load_target("slow_on_import:x", "normalisation plug-in 'slow_on_import:x'") == 1
    assert capfd.readouterr().err == ("normalisation plug-in 'slow_on_import:x': still importing 'slow_on_import' "
                                      "after 0.2 s (Ctrl-C stops it and names it)\n")
    assert plugins.load_target("quick_on_import:x", "normalisation plug-in 'quick_on_import:x'") == 1
    time.sleep(0.4)  # past the deadline: an import that finished cancelled its watch
    assert capfd.readouterr().err == ""


def test_an_entry_point_with_a_misspelt_target_says_the_closest_and_where_to_fix_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    typo = plugins.Plugin("parameterisation", "my_real", "ablate.models.parameterisations:Realdiagonal",
                          "my-dist", "0.1.0")
    with pytest.raises(plugins.PluginError) as caught:
        typo.load()
    assert str(caught.value) == (
        "parameterisation plug-in 'my_real': module 'ablate.models.parameterisations' has no attribute "
        "'Realdiagonal'; did you mean 'RealDiagonal'? (entry point 'my_real' in 'ablate.parameterisations' of "
        "my-dist 0.1.0: fix its target in that package's pyproject.toml, then reinstall it)")
    by_path = plugins.Plugin("parameterisation", "ablate.models.parameterisations:Rotatoin",
                             "ablate.models.parameterisations:Rotatoin")
    with pytest.raises(plugins.PluginError, match=r"no attribute 'Rotatoin'; did you mean 'Rotation'\?$"):
        by_path.load()
    # a module that fails in its own code is fixed there, not in the entry point
    broken = plugins.Plugin("parameterisation", "my_broken", "ablate.no_such_module_here:X", "my-dist", "0.1.0")
    with pytest.raises(plugins.PluginError, match="entry point 'my_broken'"):
        broken.load()
    (tmp_path / "my_plugin_missing_dep.py").write_text("import my_dependency_nowhere\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    inner = plugins.Plugin("parameterisation", "my_inner", "my_plugin_missing_dep:X", "my-dist", "0.1.0")
    with pytest.raises(plugins.PluginError) as caught:
        inner.load()
    assert "No module named 'my_dependency_nowhere'" in str(caught.value) and "entry point" not in str(caught.value)
    sys.modules.pop("my_plugin_missing_dep", None)
