"""Content addresses: a cell's id, a task's data version, a spec's hash.

A cell's id hashes its resolved configuration (defaults filled), the task's data version
(generator version and parameters) and ``CODE_VERSION`` — plus the tuning protocol (search
space, sampler, objective, tuning seeds; not the trial budget) when the spec tunes. It does not
depend on key order, YAML formatting, labels, the design or the study that asked for it.
"""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from typing import Any

from ablate.spec import Spec

# Bump when a change to models or training makes old results incomparable (task generators
# carry their own version, which enters the id through the data version).
CODE_VERSION = "1"


def canonical_json(data: Any) -> str:
    """JSON with sorted keys and no spaces: equal data, equal text (what ids hash)."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str)


@lru_cache(maxsize=256)
def task_data_version(task_json: str) -> str:
    """The data version of a task given as canonical JSON (cached: cells share their task)."""
    from ablate.tasks.cache import data_version as version_of
    from ablate.tasks.registry import task_entry

    task = json.loads(task_json)
    entry = task_entry(task["name"])
    params = entry.params.model_validate({k: v for k, v in task.items() if k != "name"}).model_dump(mode="json")
    return version_of(task["name"], params, entry.version)


def data_version(task: dict[str, Any]) -> str:
    """The task's data version: a hash of its name, parameters and generator version."""
    return task_data_version(canonical_json(task))


def cell_id(config: dict[str, Any], tune: dict[str, Any] | None = None, n: int = 12) -> str:
    """hash(resolved config + task data version + code version [+ tuning protocol])."""
    key: dict[str, Any] = {"config": config, "data": data_version(config["task"]), "code": CODE_VERSION}
    if tune:
        key["tune"] = tune
    return hashlib.sha256(canonical_json(key).encode()).hexdigest()[:n]


def spec_hash(spec: Spec) -> str:
    """A hash of the whole validated spec (every key, defaults filled): recorded with each run."""
    return hashlib.sha256(canonical_json(spec.model_dump()).encode()).hexdigest()[:12]


def spec_key(spec: Spec) -> str:
    """The spec as text, factor order kept: what the design's caches are keyed by."""
    return canonical_json([spec.model_dump(mode="json"), list(spec.factors)])
