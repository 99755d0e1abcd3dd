"""From a spec to the work it implies, and the whole validation of a spec.

    factors.py    factors → levels with labels and the paths they set
    selectors.py  the one matcher of when / exclude / include / references, and its checks
    space.py      the search space a tuned spec implies; the tuning protocol
    cells.py      designs → cells (resolved configs) → items (cell × phase × seed)
    identity.py   cell ids, task data versions, spec hashes
    family.py     the confirmatory family a design implies, counted as its reports test it

``load`` / ``loads`` / ``validate`` check everything a spec implies (its shape, every factor
level, every condition and constraint, every cell of the design, the search space, the seeds,
the study's size) — what the CLI, the runner and results call; ``load`` / ``loads`` (a spec
about to run) also what the stores and this machine can hold (``check_limits``). ``ablate.spec``
checks the shape only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ablate import stores
from ablate.design.cells import (
    Cell,
    Item,
    cells,
    cells_and_problems,
    comparison_problems,
    items,
    level_twins,
    report_problems,
    select,
    selection_problems,
)
from ablate.design.factors import Factor, Level, level_label, parse_factors
from ablate.design.identity import (
    CODE_VERSION,
    ORIGINAL_CODE_VERSION,
    canonical_json,
    cell_id,
    code_version,
    config_key,
    data_version,
    original_cell_id,
    spec_hash,
)
from ablate.design.selectors import matches, parse_selector
from ablate.design.space import resolve_space, space_problems, tune_protocol
from ablate.spec import MAX_ITEMS, MAX_NAME, Problems, Spec, SpecError, located, parse, read_raw, reads_raw
from ablate.spec.errors import short
from ablate.tasks.registry import memory_problem

__all__ = [
    "CODE_VERSION", "ORIGINAL_CODE_VERSION", "Cell", "Factor", "Item", "Level", "canonical_json", "cell_id",
    "cells", "check", "check_limits", "code_version", "comparison_problems", "config_key", "data_version", "items", "level_label", "load",
    "loads", "matches", "original_cell_id", "parse_factors", "parse_selector", "resolve_space", "select",
    "selection_problems", "space_problems", "spec_hash", "tune_protocol", "until_converged_problems", "validate",
]


def check(spec: Spec) -> None:
    """Everything the spec implies is valid: factors, conditions, constraints, every cell, the
    search space, the seeds, and the study's size. Raises SpecError naming key paths."""
    problems: Problems = []
    if spec.design == "cells" and not spec.cells:
        problems.append(("cells", "design: cells needs a non-empty `cells:` list"))
    if spec.cells and spec.design != "cells":
        problems.append(("cells", f"lists cells for design: cells, but design is {spec.design}"))
    if spec.tune is not None:
        both = sorted(set(spec.tune.seed_list) & set(spec.seed_list))
        if both:
            problems.append(("tune.seeds", f"shares seeds {', '.join(map(str, both[:5]))} with seeds: tuning "
                                           "seeds must be disjoint from the replicate seeds"))
        problems += space_problems(spec)
    if problems:
        raise SpecError(problems)
    grid, problems = cells_and_problems(spec)
    if problems:
        raise SpecError(problems)
    problems = until_converged_problems(grid) + report_problems(spec, grid) + sequential_problems(spec, grid)
    if problems:
        raise SpecError(problems)
    per_cell = len(spec.seed_list) + (spec.tune.trials if spec.tune else 0)
    if len(grid) * per_cell > MAX_ITEMS:
        raise SpecError([("seeds", f"{len(grid):,} cells × {per_cell:,} trials each = {len(grid) * per_cell:,} "
                                   f"trials; a study has at most {MAX_ITEMS:,}")])


def sequential_problems(spec: Spec, grid: list[Cell]) -> Problems:
    """A sequential design's measure that some compared cell cannot have: the CV over layers
    (``norm.depth``) of a one-layer cell. Its comparison would stay open at every look, and each look
    would add it seeds up to ``max`` for a decision that cannot come."""
    if spec.sequential is None or "norm.depth" not in spec.sequential.measures:
        return []
    single = [c.label for c in grid if int(c.config["model"].get("layers", 1)) < 2]
    if not single:
        return []
    shown = "; ".join(single[:4]) + (f"; and {len(single) - 4} more" if len(single) > 4 else "")
    return [("seeds.measures", f"norm.depth (‖x‖² CV over layers) needs two layers, and {len(single)} cell"
                               f"{'s have' if len(single) != 1 else ' has'} one ({shown}): a comparison on it could "
                               "never be decided, and each look would add its cells seeds up to max; drop norm.depth, "
                               "or give every cell two layers or more")]


def until_converged_problems(grid: list[Cell]) -> Problems:
    """``train.until_converged`` where some cell cannot use it: it continues from a WSD run's
    stable-phase checkpoint, so the cell's schedule must be wsd, and it extends the cell's
    ``train.steps``, so ``max_steps`` must be above them. Checked on the cells: a factor may set
    either. The first cell's problem per key."""
    found: dict[str, str] = {}
    for cell in grid:
        train = cell.config["train"]
        extend = train.get("until_converged")
        if not extend:
            continue
        where = "" if cell.label == "baseline" else f" (cell {cell.label})"
        if train.get("schedule") != "wsd":
            found.setdefault("train.until_converged", f"needs train.schedule: wsd{where}, not {train.get('schedule')}: "
                                                      "a run is extended from its stable-phase checkpoint")
        if extend["max_steps"] <= train["steps"]:
            found.setdefault("train.until_converged.max_steps",
                             f"{extend['max_steps']} must be above train.steps ({train['steps']}){where}")
    return list(found.items())


def _keys(prefix: str, value: Any) -> list[str]:
    """The MLflow param keys a value becomes (mappings are flattened with dots, as tracking does)."""
    if isinstance(value, dict):
        return [k for sub, v in value.items() for k in _keys(f"{prefix}.{sub}", v)]
    return [prefix]


def check_limits(spec: Spec) -> None:
    """What the stores and this machine can hold, checked before a spec read from a file runs:
    the lengths the stores impose on names and keys (``ablate.stores``), the task's data in
    this machine's memory, and no two cells training one model for their levels (``level_twins``).
    A study's stored spec is not checked again: its results are read whatever the machine. Raises SpecError naming key paths, with each limit."""
    problems: Problems = []
    if len(spec.name) > MAX_NAME:
        problems.append(("name", f"{len(spec.name):,} characters; at most {MAX_NAME}: the study names an MLflow "
                                 f"run (at most {stores.MAX_RUN_NAME} characters) and files (at most "
                                 f"{stores.MAX_FILE_NAME} bytes, with what ablate appends)"))
    grid = cells(spec)
    most = stores.MAX_RUN_NAME - stores.RUN_NAME_SUFFIX
    for cell in grid:
        if len(cell.label) > most:
            problems.append(("factors", f"the cell label {short(cell.label)} has {len(cell.label):,} characters; at "
                                        f"most {most}: MLflow names a trial's run '<cell label> · seed N' in at most "
                                        f"{stores.MAX_RUN_NAME} (shorten the level labels: {{label: ..., value: ...}})"))
            break
    for cell in grid:
        long_keys = [k for k in _keys("settings", cell.settings) if len(k) > stores.MAX_PARAM_KEY]
        if long_keys:
            problems.append(("factors", f"the MLflow param {short(long_keys[0])} has {len(long_keys[0]):,} characters; "
                                        f"MLflow keys hold at most {stores.MAX_PARAM_KEY} (shorten the factor's name)"))
            break
    base = spec.baseline()["task"]
    for cell in {canonical_json(c.config["task"]): c for c in grid}.values():
        found = memory_problem(cell.config["task"])
        if found is not None:
            key, message = found
            if cell.config["task"] == base:
                problems.append((f"task.{key}" if key else "task", message))
            else:
                problems.append(("factors", f"the cell {cell.label}: task {message}"))
            break
    problems += level_twins(grid)
    if problems:
        raise SpecError(problems)


def validate(raw: Any, source: str = "<spec>") -> Spec:
    """Validate plain data as a spec: its shape, every factor level, every cell of the design,
    the search space. Raises SpecError (and nothing else) naming key paths.

    How the baseline's values fit together (``heads`` dividing ``state_dim``, …) is checked on
    the resolved cells, not on the baseline alone: a baseline value every cell replaces is never
    used. When some cell keeps an invalid baseline combination, the error is the baseline's own."""
    spec = parse(raw, source, combinations=False)
    check(spec)
    return spec


def load(path: str | Path, overrides: list[str] | None = None) -> Spec:
    """Read, merge (``extends``), override (``--set``) and validate a spec file. Raises SpecError
    with key paths and file:line locations; nothing else."""
    raw, origins = read_raw(path, overrides)
    with located(origins):
        spec = validate(raw, str(path)).written_at(origins)
        check_limits(spec)
        return spec


def loads(text: str | bytes, source: str = "<spec>", overrides: list[str] | None = None,
          base_dir: str | Path | None = None) -> Spec:
    """Parse and validate spec text (``extends`` resolved against ``base_dir``, default cwd)."""
    raw, origins = reads_raw(text, source, overrides, base_dir)
    with located(origins):
        spec = validate(raw, source).written_at(origins)
        check_limits(spec)
        return spec
