"""The package's layering (docs/architecture.md): every import — lazy, relative or by
``importlib`` string — goes to the same layer or a lower one, no import circle (across or inside
a layer), and no private name is imported or reached across files. Each check is also run on a
planted violation, so that a check that could not fail would fail here."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "ablate"

# Lowest first. A module belongs to the layer of the longest prefix that names it. Within the runner
# the order is the flow of one item: rdb, samplers ← queue ← tracking ← items ← reuse ← study ← housekeeping ← standing ←
# sequential_looks ← locate ← phases ← costs, eta, countdown, progress, plan ← cleanup, views ← heartbeat, signals, preload, fused, forking,
# failures ←
# worker ← pool, estimate ← launch.
LAYERS: list[tuple[str, ...]] = [
    # leaves: they import nothing of ablate above them (registries name implementations by string)
    ("ablate.stores", "ablate.cache", "ablate.faults", "ablate.provenance", "ablate.plugins", "ablate.metrics", "ablate.ops", "ablate.optim", "ablate.tasks", "ablate.models.catalogue",
     "ablate.report.__init__", "ablate.runner.__init__", "ablate.stats", "ablate.__init__", "ablate.terminal"),
    ("ablate.spec",),
    ("ablate.design", "ablate.tuning", "ablate.models", "ablate.schema", "ablate.schedule"),
    ("ablate.probes",),
    ("ablate.training", "ablate.training_fused"),
    ("ablate.runner.rdb", "ablate.runner.samplers"),  # samplers: Optuna's, asked in memory by phases
    ("ablate.runner.queue",),
    ("ablate.runner.tracking",),
    ("ablate.runner.items",),
    ("ablate.runner.reuse",),
    ("ablate.runner.dashboard",),
    ("ablate.runner.study",),
    ("ablate.runner.housekeeping",),
    ("ablate.runner.standing",),
    ("ablate.runner.sequential_looks",),
    ("ablate.runner.locate",),
    ("ablate.runner.phases",),
    ("ablate.runner.timings",),  # what plan --estimate measured, kept: the plan and the ETA price with it
    ("ablate.runner.costs", "ablate.runner.eta", "ablate.runner.countdown", "ablate.runner.progress",
     "ablate.runner.plan"),  # plan reads phases, standing
    ("ablate.runner.cleanup", "ablate.runner.views"),  # rm, keep, gc; status, ls: as library calls
    ("ablate.runner.heartbeat", "ablate.runner.signals", "ablate.runner.preload", "ablate.runner.fused",
     "ablate.runner.forking", "ablate.runner.failures"),
    ("ablate.runner.worker",),
    ("ablate.runner.pool", "ablate.runner.estimate"),  # the estimate times a trial through the worker
    ("ablate.runner.launch", "ablate.runner.plan_checks"),
    ("ablate.results",),
    ("ablate.report",),
    ("ablate.serve", "ablate.cli", "ablate.cli_options", "ablate.zygote"),  # the zygote forks workers that run the cli
]


def module_name(path: Path, root: Path = PACKAGE) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts)


def layer_of(module: str) -> int:
    best, layer = -1, None
    for i, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, layer = len(prefix), i
    assert layer is not None, f"{module} is in no layer of docs/architecture.md"
    return layer


def _absolute(here: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The module a (possibly relative) ``from … import`` names."""
    if not node.level:
        return node.module or ""
    parts = here.split(".")
    parts = parts if is_package else parts[:-1]
    parts = parts[: len(parts) - (node.level - 1)]
    return ".".join(parts + ([node.module] if node.module else []))


def _string_imports(node: ast.Call, root: Path) -> list[str]:
    """``importlib.import_module("ablate.x")`` / ``__import__("ablate.x")``: the module; for an
    f-string, every module of the package its constant prefix can name (``f"ablate.ops.scan_{k}"``
    → ``ablate.ops.scan_numba``, ``ablate.ops.scan_triton``, …)."""
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    if name not in ("import_module", "__import__") or not node.args:
        return []
    arg = node.args[0]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return [arg.value]
    if isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.Constant):
        prefix = str(arg.values[0].value)
        named = [m.removesuffix(".__init__") for m in map(lambda p: module_name(p, root), sources(root))]
        return [m for m in named if m.startswith(prefix) and m != prefix.rstrip(".")] or [prefix.rpartition(".")[0]]
    return []


def imports(path: Path, root: Path = PACKAGE) -> list[tuple[int, str, list[str]]]:
    """(line, module imported, names) for every import of the package in the file, at any depth:
    absolute, relative, and by ``importlib`` string."""
    here = module_name(path, root)
    pkg = root.name
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            module = _absolute(here.removesuffix(".__init__"), path.name == "__init__.py", node)
            if module.split(".")[0] == pkg:
                out.append((node.lineno, module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            out += [(node.lineno, a.name, []) for a in node.names if a.name.split(".")[0] == pkg]
        elif isinstance(node, ast.Call):
            out += [(node.lineno, m, []) for m in _string_imports(node, root) if m.split(".")[0] == pkg]
    return out


def target(module: str, name: str, root: Path = PACKAGE) -> str:
    """``from module import name``: the submodule when ``name`` is one, else the module."""
    sub = root.parent / (module + "." + name).replace(".", "/")
    return f"{module}.{name}" if sub.with_suffix(".py").is_file() or sub.is_dir() else module


def sources(root: Path = PACKAGE) -> list[Path]:
    return [p for p in sorted(root.rglob("*.py")) if "notebooks" not in p.parts]


def _resolve(dest: str, root: Path) -> str:
    """A module or package as a file's module name (a package is its ``__init__``)."""
    return f"{dest}.__init__" if (root.parent / dest.replace(".", "/")).is_dir() else dest


def upward_imports(root: Path = PACKAGE) -> list[str]:
    wrong = []
    for path in sources(root):
        mine = layer_of(module_name(path, root))
        for line, module, names in imports(path, root):
            for dest in {target(module, n, root) for n in names} or {module}:
                if layer_of(_resolve(dest, root)) > mine:
                    wrong.append(f"{path.relative_to(root.parent)}:{line} imports {dest} (a higher layer)")
    return wrong


def circles(root: Path = PACKAGE) -> list[list[str]]:
    """The import circles among the package's modules (strongly connected components of more than
    one module, Tarjan), wherever they lie — inside one layer too."""
    mods = {module_name(p, root).removesuffix(".__init__"): p for p in sources(root)}
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for m, path in mods.items():
        for _, module, names in imports(path, root):
            for dest in {target(module, n, root) for n in names} or {module}:
                while dest and dest not in mods:
                    dest = dest.rpartition(".")[0]
                if dest and dest != m and dest != root.name:
                    edges[m].add(dest)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def private_uses(root: Path = PACKAGE, extra: list[Path] | None = None) -> list[str]:
    """Private names imported from another file, or reached as ``module._name`` on a module of the
    package imported under a name."""
    wrong = []
    for path in sources(root) + (extra or []):
        where = path.relative_to(root.parent) if path.is_relative_to(root.parent) else path
        aliases: set[str] = set()
        for line, module, names in imports(path, root):
            wrong += [f"{where}:{line} imports {module}.{n}" for n in names
                      if n.startswith("_") and not n.startswith("__")]
            wrong += [f"{where}:{line} imports {module}" for part in module.split(".")
                      if part.startswith("_") and not part.startswith("__")]
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == root.name:
                aliases |= {a.asname or a.name for a in node.names
                            if (root.parent / f"{node.module}.{a.name}".replace(".", "/")).with_suffix(".py").is_file()
                            or (root.parent / f"{node.module}.{a.name}".replace(".", "/")).is_dir()}
            elif isinstance(node, ast.Import):
                aliases |= {a.asname for a in node.names if a.asname and a.name.split(".")[0] == root.name}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                    and node.attr.startswith("_") and not node.attr.startswith("__")):
                wrong.append(f"{where}:{node.lineno} reaches {node.value.id}.{node.attr}")
    return wrong


# The modules that call Optuna (docs/architecture.md, "Optuna through the seam"): every other module
# opens, lists and deletes studies and catches Optuna's exceptions through them, and uses Optuna's
# names only as types (``optuna.Study``, ``FrozenTrial``, a distribution in ``isinstance``) and
# ``TrialState``.
OPTUNA_SEAM = ("ablate.runner.rdb", "ablate.runner.queue", "ablate.runner.study", "ablate.runner.dashboard",
               "ablate.runner.samplers")
# Calls of an Optuna name allowed anywhere: reading a trial state is not reaching the storage.
OPTUNA_ANYWHERE = ("optuna.trial.TrialState",)
# Calls still to convert (module → the Optuna names it calls), in files another change owns;
# an entry that is no longer needed fails the test below, so the list only shrinks.
OPTUNA_NOT_YET: dict[str, set[str]] = {}


def _optuna_bindings(tree: ast.AST) -> dict[str, str]:
    """Local name → the Optuna name it is bound to, for every import of Optuna at any depth."""
    out: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "optuna":
                    out[a.asname or "optuna"] = a.name if a.asname else "optuna"
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "optuna":
            out |= {a.asname or a.name: f"{node.module}.{a.name}" for a in node.names}
    return out


def _dotted(node: ast.AST, bound: dict[str, str]) -> str | None:
    """The Optuna name an expression (``optuna.x.y``, a name imported from Optuna) stands for."""
    if isinstance(node, ast.Name):
        return bound.get(node.id)
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value, bound)
        return f"{head}.{node.attr}" if head else None
    return None


def optuna_uses(root: Path = PACKAGE, seam: tuple[str, ...] = OPTUNA_SEAM) -> dict[str, dict[str, list[int]]]:
    """Outside the seam modules, per module: each Optuna name called, raised, caught, or each
    private Optuna module imported, with its lines."""
    found: dict[str, dict[str, list[int]]] = {}
    for path in sources(root):
        module = module_name(path, root)
        if module in seam:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        bound = _optuna_bindings(tree)
        if not bound:
            continue
        uses: list[tuple[str, int]] = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                uses.append((_dotted(node.func, bound) or "", node.lineno))
            elif isinstance(node, ast.Raise) and node.exc is not None:
                exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
                uses.append((_dotted(exc, bound) or "", node.lineno))
            elif isinstance(node, ast.ExceptHandler) and node.type is not None:
                caught = node.type.elts if isinstance(node.type, ast.Tuple) else [node.type]
                uses += [(_dotted(c, bound) or "", node.lineno) for c in caught]
            elif isinstance(node, ast.Import | ast.ImportFrom):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                uses += [(n, node.lineno) for n in names
                         if n.split(".")[0] == "optuna" and any(p.startswith("_") for p in n.split("."))]
        for name, line in uses:
            if name and not any(name == ok or name.startswith(ok + ".") for ok in OPTUNA_ANYWHERE):
                found.setdefault(module, {}).setdefault(name, []).append(line)
    return found


def test_only_the_seam_calls_optuna() -> None:
    found = optuna_uses()
    wrong = [f"{module}:{lines[0]} uses {name}" for module, names in sorted(found.items())
             for name, lines in sorted(names.items()) if name not in OPTUNA_NOT_YET.get(module, set())]
    assert not wrong, "call Optuna through runner/study.py, queue.py or rdb.py instead:\n" + "\n".join(wrong)
    stale = [f"{module}: {name}" for module, names in OPTUNA_NOT_YET.items() for name in names
             if name not in found.get(module, {})]
    assert not stale, "converted: delete from OPTUNA_NOT_YET in tests/test_architecture.py:\n" + "\n".join(stale)


def test_every_import_goes_to_the_same_layer_or_below() -> None:
    wrong = upward_imports()
    assert not wrong, "\n".join(wrong)


def test_no_import_circle_even_inside_a_layer() -> None:
    found = circles()
    assert not found, "\n".join(" <-> ".join(c) for c in found)


def test_notebooks_read_through_the_results_api_and_the_report_modules() -> None:
    for path in sorted((PACKAGE / "report" / "notebooks").glob("*.py")):
        for line, module, names in imports(path):
            dests = {target(module, n) for n in names} or {module}
            for dest in dests:
                assert dest.startswith(("ablate.results", "ablate.report", "ablate.stats")), (
                    f"{path.name}:{line} imports {dest}: notebooks read results only through ablate.results")


def test_no_private_name_is_imported_or_reached_across_files() -> None:
    wrong = private_uses(extra=sorted((PACKAGE / "report" / "notebooks").glob("*.py")))
    assert not wrong, "\n".join(wrong)


def test_every_module_is_in_a_layer() -> None:
    for path in sources():
        layer_of(module_name(path))


# --- the checks fail on planted violations ------------------------------------------------------------


def plant(tmp_path: Path, files: dict[str, str]) -> Path:
    """A throwaway package named ``ablate`` (so the layers apply) holding ``files``."""
    root = tmp_path / "ablate"
    for rel, text in {"__init__.py": "", **files}.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


@pytest.mark.parametrize("how", [
    "from ablate import results\n",                          # absolute
    "def f():\n    from ablate.results import load\n",       # lazy
    "from .. import results\n",                               # relative, two levels up
    "import importlib\nimportlib.import_module('ablate.results')\n",  # by string
    "import importlib\ndef f(m):\n    return importlib.import_module(f'ablate.results.{m}')\n",
])
def test_an_upward_import_is_caught_however_it_is_written(tmp_path: Path, how: str) -> None:
    root = plant(tmp_path, {"stats/__init__.py": "", "stats/x.py": how, "results/__init__.py": ""})
    assert upward_imports(root), how


@pytest.mark.parametrize(("module", "how"), [
    ("runner/plan.py", "def f():\n    from ablate.runner import estimate\n"),  # the plan prices nothing
    ("runner/plan.py", "from ablate.runner import launch\n"),
    ("runner/estimate.py", "from ablate.runner import plan_checks\n"),
    ("runner/launch.py", "from ablate import cli\n"),
])
def test_an_arrow_back_up_inside_the_runner_is_caught(tmp_path: Path, module: str, how: str) -> None:
    root = plant(tmp_path, {"runner/__init__.py": "", module: how, "runner/estimate.py": "", "runner/launch.py": "",
                            "runner/plan_checks.py": "", "cli.py": "", **{module: how}})
    assert upward_imports(root), (module, how)


def test_a_circle_inside_one_layer_is_caught(tmp_path: Path) -> None:
    root = plant(tmp_path, {"design/__init__.py": "", "design/a.py": "from ablate.design import b\n",
                            "design/b.py": "def f():\n    from ablate.design import a\n"})
    assert circles(root) == [["ablate.design.a", "ablate.design.b"]]
    assert not upward_imports(root)  # the layers alone do not see it


def test_a_private_name_reached_through_a_module_is_caught(tmp_path: Path) -> None:
    root = plant(tmp_path, {"stats/__init__.py": "", "stats/a.py": "def _helper():\n    pass\n",
                            "stats/b.py": "from ablate.stats import a\n\ndef f():\n    return a._helper()\n",
                            "stats/c.py": "from ablate.stats.a import _helper\n"})
    found = private_uses(root)
    assert any("reaches a._helper" in w for w in found) and any("imports ablate.stats.a._helper" in w for w in found)


@pytest.mark.parametrize("how", [
    "import optuna\n\ndef f(s):\n    return optuna.load_study(study_name='a', storage=s)\n",
    "from optuna import get_all_study_names\n\ndef f(s):\n    return get_all_study_names(s)\n",
    "def f(s):\n    import optuna.storages as st\n    st.fail_stale_trials(s)\n",  # lazy, under an alias
    "import optuna\n\ndef f(t):\n    try:\n        t.tell(1)\n    except (KeyError, optuna.exceptions.UpdateFinishedTrialError):\n        pass\n",
    "import optuna\n\ndef f():\n    raise optuna.TrialPruned\n",
    "from optuna.storages._rdb import models\n",
])
def test_an_optuna_call_outside_the_seam_is_caught(tmp_path: Path, how: str) -> None:
    root = plant(tmp_path, {"runner/__init__.py": "", "runner/items.py": how, "runner/study.py": how})
    assert list(optuna_uses(root)) == ["ablate.runner.items"], how  # the seam's own copy is allowed


def test_optuna_types_and_trial_states_are_allowed_outside_the_seam(tmp_path: Path) -> None:
    root = plant(tmp_path, {"runner/__init__.py": "", "runner/items.py": (
        "import optuna\nfrom optuna.distributions import CategoricalDistribution\nfrom optuna.trial import TrialState\n\n"
        "def f(s: optuna.Study, d: object) -> list[optuna.trial.FrozenTrial]:\n"
        "    assert isinstance(d, CategoricalDistribution)\n"
        "    return s.get_trials(states=(TrialState.COMPLETE, optuna.trial.TrialState(1)))\n")})
    assert optuna_uses(root) == {}


def test_every_room_is_under_700_lines_and_the_cli_under_450() -> None:
    """Issue 45: a module past 700 lines holds several jobs; the CLI only parses, calls one library
    function and maps its result to an exit status."""
    sizes = {p.relative_to(PACKAGE.parent).as_posix(): len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")}
    assert not {f: n for f, n in sizes.items() if n > 700}
    assert sizes["ablate/cli.py"] <= 450
