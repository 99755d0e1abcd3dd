"""A study spec: its shape, its YAML, its errors, and dotted paths into it. Torch-free.

    models.py   the pydantic shapes (baseline, factors, tuning, references) and ``parse``
    loader.py   the safe, bounded YAML loader and its limits
    errors.py   SpecError; pydantic errors as key-path messages with suggestions
    paths.py    get_path / set_path, settable-path and overlap checks
    files.py    reading files, ``extends``, ``--set``, errors located at file:line

Which to call: ``ablate.design.load`` / ``loads`` / ``validate`` check a spec whole (shape,
factors, cells, constraints, search space) — what the CLI, the runner and results use.
``parse`` / ``read`` / ``reads`` here check the shape only.
"""

from ablate.spec.errors import Problems, SpecError, validation_problems
from ablate.spec.files import (
    MAX_EXTENDS,
    Origins,
    apply_overrides,
    locate,
    located,
    merge,
    read,
    read_raw,
    reads,
    reads_raw,
    split_override,
)
from ablate.spec.init_params import InitSpec, PluginInit, RingInit, RotrnnInit
from ablate.spec.loader import MAX_BYTES, MAX_DEPTH, MAX_NODES, parse_yaml, parse_yaml_lines
from ablate.spec.models import (
    BUDGET_KEYS,
    MAX_CELLS,
    MAX_ITEMS,
    MAX_NAME,
    MAX_SEED,
    MAX_SEEDS,
    MAX_TUNE_TRIALS,
    NAME,
    NAME_RULE,
    OBJECTIVE_METRICS,
    REFERENCE_METRICS,
    TUNE_SEED_BASE,
    WSD_WARMUP_STEPS,
    CompareEntry,
    FactorSpec,
    LabelledLevel,
    ModelSpec,
    Objective,
    ProbeSpec,
    Reference,
    Spec,
    StatsSpec,
    TrainSpec,
    TuneParam,
    TuneSpec,
    UntilConverged,
    name_problem,
    parse,
    resolve_task,
    wsd_warmup,
)
from ablate.spec.paths import ROOTS, get_path, leaf_paths, overlap, path_problem, set_path

__all__ = [
    "BUDGET_KEYS", "MAX_BYTES", "MAX_CELLS", "MAX_DEPTH", "MAX_EXTENDS", "MAX_ITEMS", "MAX_NAME", "MAX_NODES", "MAX_SEED", "MAX_SEEDS",
    "MAX_TUNE_TRIALS", "NAME", "NAME_RULE", "name_problem", "OBJECTIVE_METRICS", "REFERENCE_METRICS", "ROOTS", "TUNE_SEED_BASE",
    "WSD_WARMUP_STEPS", "CompareEntry", "FactorSpec", "InitSpec", "LabelledLevel", "ModelSpec", "Objective", "Origins", "PluginInit", "Problems",
    "ProbeSpec", "Reference", "RingInit", "RotrnnInit", "Spec", "SpecError", "StatsSpec", "TrainSpec", "TuneParam",
    "TuneSpec", "UntilConverged",
    "apply_overrides", "get_path", "leaf_paths", "locate", "located", "merge", "overlap", "parse", "parse_yaml",
    "parse_yaml_lines", "path_problem", "read", "read_raw", "reads", "reads_raw", "resolve_task", "set_path",
    "split_override", "validation_problems", "wsd_warmup",
]
