"""The package's layering (docs/architecture.md): every import, lazy ones included, goes to the
same layer or a lower one, and no private name is imported across files."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "ablate"

# Lowest first. A module belongs to the layer of the longest prefix that names it. Within the runner
# the order is the flow of one item: queue ← tracking ← study ← phases ← progress ← worker ← pool.
LAYERS: list[tuple[str, ...]] = [
    # leaves: they import nothing of ablate above them (registries name implementations by string)
    ("ablate.stores", "ablate.faults", "ablate.provenance", "ablate.ops", "ablate.tasks", "ablate.models.registry",
     "ablate.report.__init__", "ablate.runner.__init__", "ablate.stats", "ablate.__init__"),
    ("ablate.spec",),
    ("ablate.design", "ablate.tuning", "ablate.models", "ablate.schema", "ablate.schedule"),
    ("ablate.probes",),
    ("ablate.training",),
    ("ablate.runner.queue",),
    ("ablate.runner.tracking",),
    ("ablate.runner.study",),
    ("ablate.runner.phases", "ablate.planning"),
    ("ablate.runner.progress",),
    ("ablate.runner.worker",),
    ("ablate.runner.pool",),
    ("ablate.results",),
    ("ablate.report",),
    ("ablate.serve", "ablate.cli"),
]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts)


def layer_of(module: str) -> int:
    best, layer = -1, None
    for i, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, layer = len(prefix), i
    assert layer is not None, f"{module} is in no layer of docs/architecture.md"
    return layer


def imports(path: Path) -> list[tuple[int, str, list[str]]]:
    """(line, module imported, names) for every ``ablate`` import in the file, at any depth."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and node.module.split(".")[0] == "ablate":
            out.append((node.lineno, node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            out += [(node.lineno, a.name, []) for a in node.names if a.name.split(".")[0] == "ablate"]
    return out


def target(module: str, name: str) -> str:
    """``from module import name``: the submodule when ``name`` is one, else the module."""
    sub = PACKAGE.parent / (module + "." + name).replace(".", "/")
    return f"{module}.{name}" if sub.with_suffix(".py").is_file() or sub.is_dir() else module


def sources() -> list[Path]:
    return [p for p in sorted(PACKAGE.rglob("*.py")) if "notebooks" not in p.parts]


def test_every_import_goes_to_the_same_layer_or_below() -> None:
    wrong = []
    for path in sources():
        here = module_name(path)
        mine = layer_of(here)
        for line, module, names in imports(path):
            for dest in {target(module, n) for n in names} or {module}:
                package = (PACKAGE.parent / dest.replace(".", "/")).is_dir()
                if layer_of(f"{dest}.__init__" if package else dest) > mine:
                    wrong.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {dest} (a higher layer)")
    assert not wrong, "\n".join(wrong)


def test_notebooks_read_through_the_results_api_and_the_report_modules() -> None:
    for path in sorted((PACKAGE / "report" / "notebooks").glob("*.py")):
        for line, module, names in imports(path):
            dests = {target(module, n) for n in names} or {module}
            for dest in dests:
                assert dest.startswith(("ablate.results", "ablate.report", "ablate.stats")), (
                    f"{path.name}:{line} imports {dest}: notebooks read results only through ablate.results")


def test_no_private_name_is_imported_across_files() -> None:
    wrong = []
    for path in sources() + sorted((PACKAGE / "report" / "notebooks").glob("*.py")):
        for line, module, names in imports(path):
            wrong += [f"{path.relative_to(PACKAGE.parent)}:{line} imports {module}.{n}" for n in names
                      if n.startswith("_") and not n.startswith("__")]
            wrong += [f"{path.relative_to(PACKAGE.parent)}:{line} imports {module}" for part in module.split(".")
                      if part.startswith("_") and not part.startswith("__")]
    assert not wrong, "\n".join(wrong)


def test_every_module_is_in_a_layer() -> None:
    for path in sources():
        layer_of(module_name(path))
