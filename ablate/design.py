"""From a validated spec to the work it implies: cells (resolved configs) × seeds.

A cell's id is a hash of its resolved configuration and the model code version, so it does not
depend on key order, YAML formatting or which study asked for it: re-running a spec resumes,
and extending a grid reuses finished cells.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
from dataclasses import dataclass
from typing import Any

from ablate.spec import Spec, set_path

# Bump when a change to models, tasks or training makes old results incomparable.
CODE_VERSION = "1"


def canonical_json(data: Any) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str)


def config_hash(config: dict[str, Any], n: int = 12) -> str:
    blob = canonical_json({"config": config, "code": CODE_VERSION})
    return hashlib.sha256(blob.encode()).hexdigest()[:n]


def level_label(value: Any) -> str:
    """A short readable label for a factor level (mappings become key=value lists)."""
    if isinstance(value, dict):
        return ",".join(f"{k}={level_label(v)}" for k, v in value.items())
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


@dataclass(frozen=True)
class Cell:
    id: str
    settings: dict[str, Any]  # factor path -> level value
    config: dict[str, Any]  # resolved {task, model, train}

    @property
    def label(self) -> str:
        if not self.settings:
            return "baseline"
        return ", ".join(f"{path.split('.')[-1]}={level_label(v)}" for path, v in self.settings.items())

    @property
    def labels(self) -> dict[str, str]:
        return {path: level_label(v) for path, v in self.settings.items()}


@dataclass(frozen=True)
class Item:
    """One unit of work: a cell trained once on one seed in one phase."""

    cell: Cell
    seed: int
    phase: str = "replicate"

    @property
    def key(self) -> str:
        return f"{self.cell.id}/{self.phase}/{self.seed}"


def cells(spec: Spec) -> list[Cell]:
    """The full factorial of the spec's factors, applied to the baseline, in spec order."""
    base = spec.baseline()
    paths = list(spec.factors)
    out: list[Cell] = []
    seen: set[str] = set()
    for levels in itertools.product(*(spec.factors[p] for p in paths)):
        config = copy.deepcopy(base)
        for path, level in zip(paths, levels, strict=True):
            set_path(config, path, copy.deepcopy(level))
        # Re-validate so defaults fill in for mapping levels (e.g. a new init scheme).
        from ablate.spec import _validate_config

        resolved = _validate_config({"name": spec.name, **config}).baseline()
        cid = config_hash(resolved)
        if cid in seen:  # two level combinations that resolve to the same model
            continue
        seen.add(cid)
        out.append(Cell(cid, dict(zip(paths, levels, strict=True)), resolved))
    return out


def items(spec: Spec) -> list[Item]:
    return [Item(cell, seed) for cell in cells(spec) for seed in spec.seed_list]


def spec_hash(spec: Spec) -> str:
    return hashlib.sha256(canonical_json(spec.model_dump()).encode()).hexdigest()[:12]
