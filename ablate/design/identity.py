"""Content addresses: a cell's id, a task's data version, a spec's hash.

A cell's id hashes its resolved configuration (defaults filled), the task's data version
(generator version and parameters) and ``CODE_VERSION`` — plus the tuning protocol (search
space, sampler, objective, tuning seeds; not the trial budget) when the spec tunes. It does not
depend on key order, YAML formatting, labels, the design or the study that asked for it.

Two rules keep the ids of cells run by earlier versions valid while the code grows:

- A setting added to the spec later is left out of the id while it holds the value that
  reproduces the behaviour before it existed (``NEUTRAL``); any other value makes a new cell.
- A factor level whose implementation changed so that its old results are not comparable gets a
  ``version`` in ``ablate.models.catalogue``; versions above 1 enter the id of the cells using it
  (so only those cells become new), version 1 stays out. ``CODE_VERSION`` is for changes that
  touch every cell.

A cell's *config key* is its id without the code: the same hash of config, data version [and
tuning protocol] but not ``CODE_VERSION`` or the level versions. Two cells with one config key
and different ids are the same experiment run by different code: results of the older one are
*stale* for the newer (``ablate plan`` says so; ``--reuse-stale`` reuses them on purpose).
``code_version`` is the code part as text, recorded with every trial. Trials stored before
config keys were recorded were all written at code version ``"1"`` with no level versions, so
their cell id is ``original_cell_id`` of their config: that is how they are found as stale.

A level or task from a plug-in (``ablate.plugins``) enters the id as the level versions do, by
its identity — target, distribution and version, a hash of its module's source — and stays out of
the config key: a cell run with an edited plug-in is a new cell, and its old results are stale.
A task plug-in's source also enters its data version, so its cached data are regenerated.
"""

from __future__ import annotations

import hashlib
import json
import re
from functools import lru_cache
from typing import Any

from ablate import metrics, plugins
from ablate.models.catalogue import MODEL_FACTORS
from ablate.spec import BUDGET_KEYS, Spec, TrainSpec, get_path

# Bump when a change to models or training makes old results incomparable (task generators
# carry their own version, which enters the id through the data version).
CODE_VERSION = "1"

#: Settings added after cells were first stored: dotted path → the value that reproduces the
#: behaviour from before the setting existed. At that value a setting is not part of a cell's id.
NEUTRAL: dict[str, Any] = {
    # issue 18: schedules, early stopping, the convergence flag (cosine, all steps: as before)
    "train.schedule": "cosine",
    "train.warmup_steps": None,
    "train.step_milestones": [0.5, 0.75],
    "train.step_gamma": 0.1,
    "train.patience": None,
    "train.min_delta": 0.0,
    "train.converged_tol": 0.005,
    # issue 28: warmup-stable-decay (used only by schedule: wsd)
    "train.decay": 0.2,
    "train.decay_steps": None,
    "train.decay_shape": "1-sqrt",
    # issue 28: training until converged (absent: the budget is train.steps, as before)
    "train.until_converged": None,
    # issue 46: metric plug-ins (none: the built-in metrics only)
    "train.metrics": [],
}


def canonical_json(data: Any) -> str:
    """JSON with sorted keys and no spaces: equal data, equal text (what ids hash)."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str)


@lru_cache(maxsize=256)
def task_data_version(task_json: str, source: str | None = None) -> str:
    """The data version of a task given as canonical JSON (cached: cells share their task);
    ``source``: a task plug-in's source hash, part of the cache's key (the plug-in's entry
    carries it in its version, ``ablate.tasks.registry.task_entry``)."""
    from ablate.tasks.cache import data_version as version_of
    from ablate.tasks.registry import task_entry

    task = json.loads(task_json)
    entry = task_entry(task["name"])
    params = entry.params.model_validate({k: v for k, v in task.items() if k != "name"}).model_dump(mode="json")
    return version_of(task["name"], params, entry.version)


def task_source(name: str) -> str | None:
    """The source hash of the plug-in providing task ``name``; None for a built-in task."""
    from ablate.tasks.registry import plugin_of

    plugin = plugin_of(name)
    return None if plugin is None else plugins.source_hash(plugin)


def data_version(task: dict[str, Any]) -> str:
    """The task's data version: a hash of its name, parameters and generator version (and a task
    plug-in's source hash)."""
    return task_data_version(canonical_json(task), task_source(task["name"]))


def identity_config(config: dict[str, Any]) -> dict[str, Any]:
    """The resolved config as the id sees it: ``NEUTRAL`` settings at their neutral value removed, and
    a ``train.warmup_steps`` equal to the count its ``warmup`` fraction gives (the same warm-up: a spec
    pinning the count a cell was trained with keeps its cells)."""
    out = json.loads(canonical_json(config))
    train = out.get("train")
    if isinstance(train, dict) and train.get("warmup_steps") is not None and \
            train["warmup_steps"] == max(1, int(float(train.get("warmup", TrainSpec.model_fields["warmup"].default))
                                                  * int(train.get("steps", 0)))):
        train["warmup_steps"] = None
    for path, neutral in NEUTRAL.items():
        *parents, key = path.split(".")
        node = out
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict) and key in node and canonical_json(node[key]) == canonical_json(neutral):
            del node[key]
    return out


def level_versions(config: dict[str, Any]) -> dict[str, int]:
    """``factor path`` → version of the level the config uses, for versions above 1."""
    out = {}
    for path, levels in MODEL_FACTORS.items():
        try:
            name = get_path(config, path)
        except KeyError:
            continue
        if name in levels and levels.level(name).version > 1:
            out[path] = levels.level(name).version
    return out


def plugin_identities(config: dict[str, Any]) -> dict[str, dict[str, str]]:
    """``factor path`` (or ``task.name``) → identity (``ablate.plugins.identity``) of each plug-in
    the config uses; empty for a config of built-ins only."""
    from ablate.tasks.registry import plugin_of

    out = {}
    for path, levels in MODEL_FACTORS.items():
        if levels.kind is None:
            continue
        try:
            name = get_path(config, path)
        except KeyError:
            continue
        if levels.accepts(name) and (plugin := levels.level(name).plugin) is not None:
            out[path] = plugins.identity(plugin)
    task = plugin_of(config["task"]["name"])
    if task is not None:
        out["task.name"] = plugins.identity(task)
    for name in config.get("train", {}).get("metrics") or ():
        out[f"train.metrics.{name}"] = plugins.identity(metrics.plugin(name))
    return out


def _hash(config: dict[str, Any], tune: dict[str, Any] | None, code: str | None, levels: dict[str, int],
          n: int, plugin_ids: dict[str, dict[str, str]] | None = None) -> str:
    key: dict[str, Any] = {"config": identity_config(config), "data": data_version(config["task"])}
    if code is not None:
        key["code"] = code
    if levels:
        key["levels"] = levels
    if plugin_ids:
        key["plugins"] = plugin_ids
    if tune:
        key["tune"] = tune
    return hashlib.sha256(canonical_json(key).encode()).hexdigest()[:n]


def cell_id(config: dict[str, Any], tune: dict[str, Any] | None = None, n: int = 12) -> str:
    """hash(resolved config + task data version + code version [+ level versions] [+ plug-in
    identities] [+ tuning protocol])."""
    return _hash(config, tune, CODE_VERSION, level_versions(config), n, plugin_identities(config))


def config_key(config: dict[str, Any], tune: dict[str, Any] | None = None, n: int = 12) -> str:
    """The cell id without the code: hash(resolved config + data version [+ tuning protocol]).
    Equal keys, different ids: the same experiment run by different code (stale results)."""
    return _hash(config, tune, None, {}, n)


def lineage_key(config: dict[str, Any], n: int = 12) -> str:
    """The cell id with ``train.steps``, ``train.decay``, ``train.decay_steps`` and
    ``train.until_converged`` left out: the cells that differ only in their budget share it, so a
    longer WSD run finds the stable-phase checkpoints of shorter ones under it
    (``training.continuable`` says which fit). The warm-up is left out too: a fraction and its
    count in steps are the same warm-up (an until-converged extension pins the count), and
    ``continuable`` compares it in steps."""
    train = {k: v for k, v in config.get("train", {}).items() if k not in BUDGET_KEYS and k not in ("warmup", "warmup_steps")}
    return _hash({**config, "train": train}, None, CODE_VERSION, level_versions(config), n, plugin_identities(config))


def code_version(config: dict[str, Any]) -> str:
    """The code part of the config's cell id as text: ``CODE_VERSION``, then each level version
    above 1 it uses, e.g. ``"2"`` or ``"1, model.parameterisation v2"``, then each plug-in's
    identity (``, model.parameterisation my_pkg.givens:Givens (ablate-givens 0.1.0) code 1a2b…``;
    ``source 1a2b…`` where it was stored before ablate hashed a plug-in's code, not its file)."""
    text = CODE_VERSION + "".join(f", {path} v{v}" for path, v in sorted(level_versions(config).items()))
    for path, ident in sorted(plugin_identities(config).items()):
        dist = f" ({ident['distribution']})" if "distribution" in ident else ""
        text += f", {path} {ident['target']}{dist} code {ident['code']}"
    return text


def _version_parts(text: str) -> dict[str, str]:
    """``code_version`` text by part: "code" → ablate's version, "PATH vN" and "PATH" (a plug-in's
    identity) → the rest."""
    first, *rest = text.split(", ")
    parts = {"code": first}
    for part in rest:
        path, _, what = part.partition(" ")
        parts[f"{path} v" if what[:1] == "v" and what[1:].isdigit() else path] = what
    return parts


#: A plug-in's part of a code version: who (target and distribution), how its source was hashed
#: (``code``: its syntax tree; ``source``: its file's bytes, before), the hash.
_PLUGIN = re.compile(r"^(?P<who>.*) (?P<how>source|code) (?P<hash>\w+)$")


def _rehashed(path: str, target: str, old: str, new: str) -> str:
    """A plug-in part stored as the hash of its file's bytes (``source``) against the hash of its
    code now: ablate's change of hash, which changes the id of every plug-in cell once. Whether the
    plug-in changed too is told by hashing its file's bytes again."""
    head = f"source {old} → code {new} (ablate hashes code now, not files"
    try:
        same = plugins.file_hash(plugins.by_path(path, target)) == old
    except plugins.PluginError:  # gone, or not importable here: nothing to compare
        return head + ")"
    return head + ("; this file is unchanged: the same plug-in)" if same else "; this file changed since)")


def version_change(old: str, new: str) -> str:
    """What differs between two ``code_version`` texts, e.g. ``code version 1 → 2`` or
    ``model.parameterisation my.mod:Givens source 1a2b… → 3c4d…``: only the parts that changed
    (a plug-in's whole identity repeated on both sides made a line of 220 characters)."""
    a, b = _version_parts(old), _version_parts(new)
    said = []
    for key in dict.fromkeys([*a, *b]):
        was, now = a.get(key), b.get(key)
        if was == now:
            continue
        if key == "code":
            said.append(f"code version {was} → {now}")
        elif key.endswith(" v"):
            said.append(f"{key[:-2]} {was or 'v1'} → {now or 'v1'}")
        elif was and now and (a_id := _PLUGIN.match(was)) and (b_id := _PLUGIN.match(now)) \
                and a_id["who"] == b_id["who"]:
            target = a_id["who"].split(" (")[0]
            if a_id["how"] == b_id["how"]:
                said.append(f"{key} {target} {b_id['how']} {a_id['hash']} → {b_id['hash']}")
            else:
                said.append(f"{key} {target} {_rehashed(key, target, a_id['hash'], b_id['hash'])}")
        else:
            said.append(f"{key} {was or 'built-in'} → {now or 'built-in'}")
    return "; ".join(said) or f"code version {old} → {new}"


#: The code version of every trial stored before trials recorded theirs.#: The code version of every trial stored before trials recorded theirs.
ORIGINAL_CODE_VERSION = "1"


def original_cell_id(config: dict[str, Any], tune: dict[str, Any] | None = None, n: int = 12) -> str:
    """The id the config had at code version 1 with no level versions: what trials stored
    before config keys were recorded carry."""
    return _hash(config, tune, ORIGINAL_CODE_VERSION, {}, n)


def spec_hash(spec: Spec) -> str:
    """A hash of the whole validated spec (every key, defaults filled): recorded with each run.
    ``compare`` (which studies a report sets side by side) enters only when given, so specs
    written before it existed keep their hash (and ``train.until_converged``, when unset)."""
    data = spec.model_dump()
    if not data.get("compare"):
        data.pop("compare", None)
    if data.get("train", {}).get("until_converged", 0) is None:  # likewise train.until_converged
        data["train"].pop("until_converged")
    return hashlib.sha256(canonical_json(data).encode()).hexdigest()[:12]


def spec_key(spec: Spec) -> str:
    """The spec as text, factor order kept, and the code version: what the design's caches are
    keyed by (cells carry ids that depend on the code version)."""
    return canonical_json([spec.model_dump(mode="json"), list(spec.factors), CODE_VERSION])
