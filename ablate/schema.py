"""The JSON Schema of a study spec and its Markdown reference, both from the pydantic models of
``ablate.spec`` and the registries (model levels, tasks, reports), so neither can drift from what
validation accepts. Installed plug-ins (``ablate.plugins``) are in what ``ablate schema`` prints
or writes for an editor; the files in docs/ list the built-ins only, the same on every machine.

``ablate schema --docs docs/spec.md`` writes both (``outputs``: where, and which files are stale
for ``--check``); tests/test_schema.py fails when either file in docs/ is stale.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from rich.markup import escape

from ablate import plugins, spec
from ablate.models.catalogue import MODEL_FACTORS
from ablate.report import REPORTS
from ablate.spec.models import SequentialSeeds
from ablate.spec.reports import ReportOptions
from ablate.tasks.registry import BUILTIN_TASK_NAMES, task_names, task_params_model
from ablate.terminal import Refused

SCHEMA_ID = "https://ablate.dev/spec.schema.json"
MODELINE = "# yaml-language-server: $schema=../docs/spec.schema.json"


def _task_schemas(defs: dict[str, Any], installed: bool) -> list[dict[str, Any]]:
    out = []
    for name in task_names() if installed else BUILTIN_TASK_NAMES:
        model = task_params_model(name)
        sch = model.model_json_schema(ref_template="#/$defs/{model}")
        defs.update(sch.pop("$defs", {}))
        props = {"name": {"const": name, "description": f"the {name} task"}, **sch.get("properties", {})}
        out.append({
            "title": f"task: {name}",
            "description": (model.__doc__ or "").strip().split("\n")[0],
            "type": "object",
            "properties": props,
            "required": ["name", *sch.get("required", [])],
            "additionalProperties": False,
        })
    out.append({"title": "task: a plug-in by path", "description": "a builder registered with register_task, "
                "named as package.module:build, and its parameters", "type": "object",
                "properties": {"name": {"type": "string", "pattern": plugins.TARGET.pattern}}, "required": ["name"]})
    return out


def _plugin_levels(defs: dict[str, Any], installed: bool) -> None:
    """The model factors that take plug-ins: their names (built-in, and installed plug-ins' when
    ``installed``) or a plug-in by path."""
    for key, levels in MODEL_FACTORS.items():
        if levels.kind is None:
            continue
        target = {"type": "string", "pattern": plugins.TARGET.pattern, "title": "a plug-in by path"}
        if key == "model.init.scheme":  # the init union's last branch is the plug-ins' (spec.PluginInit)
            names = [n for n in levels.names if n not in levels.builtin_names] if installed else []
            branch = defs["ModelSpec"]["properties"]["init"]["oneOf"][-1]
            branch["properties"]["scheme"] = {"anyOf": [{"enum": names}, target] if names else [target]}
            continue
        prop = defs["ModelSpec"]["properties"][key.removeprefix("model.")]
        names = levels.names if installed else levels.builtin_names
        prop["anyOf"] = [{"enum": list(names)},
                         {"type": "string", "pattern": plugins.TARGET.pattern, "title": "a plug-in by path"}]


def json_schema(installed: bool = True) -> dict[str, Any]:
    """The spec's JSON Schema (draft 2020-12) for editors: completion, hover text, checks.
    ``installed``: with the names of the installed plug-ins (else the built-ins only)."""
    sch = spec.Spec.model_json_schema(ref_template="#/$defs/{model}")
    defs = sch.setdefault("$defs", {})
    _plugin_levels(defs, installed)
    props = sch["properties"]
    sections = [p.name for p in plugins.installed_of("section") if p.name not in REPORTS] if installed else []
    props["reports"]["items"] = {"anyOf": [{"enum": [*REPORTS, *sections]}, {
        "type": "string", "pattern": plugins.TARGET.pattern, "title": "a plug-in by path"}]}
    props["task"] = {"description": props["task"].get("description", ""), "oneOf": _task_schemas(defs, installed)}
    props["factors"]["propertyNames"] = {
        "pattern": r"^((task|model|train)(\.[A-Za-z0-9_]+)+|[A-Za-z_][A-Za-z0-9_-]*)$",
        "description": "a dotted path into the baseline, or a plain name for a named factor",
    }
    fixed = [
        {"type": "integer", "minimum": 1, "maximum": spec.MAX_SEEDS},
        {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": spec.MAX_SEED},
         "minItems": 1, "maxItems": spec.MAX_SEEDS, "uniqueItems": True},
    ]
    props["seeds"]["anyOf"] = [*fixed, {"$ref": "#/$defs/SequentialSeeds"}]
    defs["TuneSpec"]["properties"]["seeds"]["anyOf"] = fixed
    sch.pop("required", None)  # a spec that extends another may leave name and task to its base
    sch["anyOf"] = [{"required": ["extends"]}, {"required": ["name", "task"]}]
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": SCHEMA_ID, **sch}


def schema_text(installed: bool = True) -> str:
    return json.dumps(json_schema(installed), indent=2, ensure_ascii=False) + "\n"


# --- the Markdown reference ---------------------------------------------------------------------

GUIDE = """\
A study is one YAML file (`studies/*.yaml`). It names a **baseline** (`task`, `model`, `train`),
the **factors** that move it, which **cells** to run, the **seeds**, optional per-cell
**tuning**, and the **reports**. `ablate validate FILE` checks it; `ablate plan FILE` lists the
cells (done / partial / new) and, with `--estimate`, times a dry run. Editors validate and
complete spec files that start with

    # yaml-language-server: $schema=../docs/spec.schema.json

## Factors

A factor's **name** is either a dotted path into the baseline, which it moves, or a plain name
(a *named factor*, e.g. `variant`) whose levels each set several paths at once.

```yaml
factors:
  model.layers: [1, 2, 4]                  # levels are values of the path
  model.init:                              # levels may be mappings (defaults fill in)
    - {scheme: ring, r_min: 0.9}
    - {label: RotRNN-init, value: {scheme: rotrnn}}   # a labelled level
  model.normalisation: {ξ: xi, γ: gamma}   # a mapping label → level labels every level
  variant:                                 # a named factor: label → {dotted path: value}
    RotRNN: {model.parameterisation: rotation, model.normalisation: xi}
    LRU: {model.parameterisation: complex_diagonal, model.normalisation: gamma}
  model.heads:                             # the long form: levels + a condition
    levels: [1, 2, 4]
    when: {model.parameterisation: rotation}
```

Labels are what cell labels, plans and result frames show (one column per factor, named by the
factor, holding the label). Unlabelled levels are labelled by their value (`4`, `xi`,
`scheme=ring,r_min=0.9`). A cell's label lists its levels: a labelled level or a named factor's
level by its label (`RotRNN`), a path factor's unlabelled level as `heads=4`. A mapping
`{label: …, value: …}` with exactly those two keys is a labelled level. A path belongs to one
factor, and is either a factor or tuned, not both.

**Conditions.** `when:` (factor name or dotted path → value, or list of values) makes a factor
vary only in cells that match; elsewhere it stays at the baseline and combinations that then
coincide are one cell. Conditions are checked after the unconditional factors are applied, in
declaration order, and may name factors declared before them or dotted paths of the config.

## Designs and constraints

- `design: full` (default) — every combination of levels.
- `design: one_at_a_time` — the baseline, and each level of each factor moved alone from it.
- `design: cells` — exactly the cells listed under `cells:` (given `cells:`, the design
  defaults to `cells`); each entry maps factor names to a level (label or value); factors not
  named stay at the baseline.

```yaml
exclude: [{variant: LRU, model.layers: 4}]       # drop cells matching any entry
include: [{model.layers: [1, 2]}]                # if given, keep only cells matching one entry
cells: [{variant: RotRNN}, {variant: LRU, model.layers: 4}]
```

An entry matches a cell when every key matches: a factor by its level's label or value, a
dotted path by the cell's resolved value (a list means any of; a mapping matches the keys it
names). Every cell left must be a valid model; an invalid one is an error that names it (exclude
it, or make a factor conditional). A design with no cell left, a condition that never holds,
and grids over the limits below are errors.

## Seeds and tuning

`seeds: 3` means seeds 0, 1, 2; `seeds: [7, 11]` lists them. `seeds: {min: 3, max: 16, step: 2, until:
decided}` adds seeds where the verdict needs them: every cell runs `min` seeds, each comparison with
the reference is tested at that look by a group-sequential test, and the cells of comparisons still
open get `step` more, look after look, until each is significant, equivalent within
`stats.min_effect`, or futile (at the futility boundary), or it reaches `max` undecided (its error rates hold under this
stopping: docs/science.md §14; `measures:` names what it decides on, `test_accuracy` by default). With `tune`, each cell first runs
`tune.trials` tuning trials, each on one tuning seed (trial i on `tune.seeds[i mod k]`; a count
k means seeds 10000 … 10000+k−1; they must be disjoint from `seeds`), sampling `tune.space`
with the sampler; the best finished setting by `tune.objective` (a validation metric) is then
trained on every replicate seed. In a finite space (lists of choices, int ranges) no setting runs
twice on a tuning seed before each has run there: Optuna's random draws (`sampler: random`, and
the startup trials of `tpe` and `gp`) are replaced by the cell's settings in a shuffled order, and a
model's ask for a setting the seed already ran is asked again, since a tuning trial is a
deterministic function of its setting and seed and a repeat would only replay it (a 2-choice,
2-trial study under TPE had 10 of 32 cells try one learning rate twice). `sampler: grid` runs every combination of the space's choices on
every tuning seed (`trials` = combinations × k) and picks the combination with the best mean over
the seeds: with one tuning seed a pick among learning rates 0.01–0.05 apart in validation accuracy
is a draw of that seed's noise, and the cells' accuracies follow the rate they got
(docs/replications.md, History 2026-12-07). Both phases resume; raising `trials` later adds tuning
trials but does not redo finished replicates.

```yaml
tune:
  trials: 16
  sampler: tpe                       # tpe | random | gp
  objective: {metric: val_accuracy}  # direction: maximize for accuracy, minimize for loss/bpc
  space:
    train.lr: {low: 1.0e-4, high: 1.0e-2, log: true}
    train.weight_decay: {low: 0.0, high: 0.1}
    model.layers: {low: 1, high: 4}          # int: the baseline value is an int
    train.batch_size: [16, 32, 64]           # a list is a set of choices
```

## Cell identity

A cell's id is the first 12 hex digits of SHA-256 over the canonical JSON (sorted keys) of
`{config, data, code[, tune]}`: `config` is the resolved `task`/`model`/`train` (defaults
filled in, so writing a default explicitly changes nothing), `data` the task's data version (a
hash of its name, parameters and generator version), `code` `ablate.design.CODE_VERSION`, and
`tune` the tuning protocol (space, sampler, objective, tuning seeds; not the budget). Key order,
YAML formatting, labels, `probes`, `stats`, the design and the study's name do not enter it. So
re-running a spec resumes, adding levels or seeds runs only the new trials, and changing a fixed
setting makes new cells. A trial is keyed `<cell id>/replicate/<seed>` or
`<cell id>/tune/<index>`.

Results are shared by every study on the same stores: an item another study has finished (same
key) is linked, not trained again, and `ablate plan` says `reused from study X`; a tuned cell is
reused only whole (its tuning trials exactly as this spec asks for them, with its replicates).
A cell's *config key* is its id without `code`: results of the same config under another code
version are *stale*, listed by `ablate plan` (`stale (code version 1 → 2)`) and reused only with
`--reuse-stale`. Trials of a study that belong to no cell of its current spec (after
`--set train.lr=…`, say) are *orphans*: `plan` and `run` list them, `ablate keep STUDY NEW` makes
them a study of their own, `ablate rm STUDY --orphans` drops them.

## Comparisons: `compare`

`compare: [studyA, {study: studyB, cells: {model.heads: 8}}]` names a comparison report over
several studies (each study's cells matching its selectors, every cell without): `ablate compare
--spec FILE` (or `ablate report FILE`, with the spec's own reports) renders it into
`reports/compare-<name>/comparison.{html,pdf}`. The same from the command line:
`ablate compare studyA studyB --cells 'model.heads=8'`. Selectors are those of `exclude` and
`include`: factor names or dotted paths, level labels or values, lists for any of.

## Composition: `extends` and `--set`

`extends: base.yaml` (or a list, merged in order) reads other specs relative to this file,
chained; a cycle is an error. Mappings merge key by key with this file winning, `null` removes an
inherited key, lists and scalars replace, and a mapping whose `scheme` (an init) or `name` (the
task) differs from the inherited one replaces it whole. On the command line
`--set path=value` (the value is YAML) overrides after merging:
`--set train.steps=50`, `--set 'factors.model.layers=[1, 2]'`, `--set tune.space.train.lr.high=0.1`.
`-m path=level,level,…` (Hydra's habit; `validate`, `plan`, `run`) makes `path` a factor with
those levels, added or replacing one of that path: `ablate run study.yaml -m model.layers=1,2,4 -m
train.lr=1e-3,3e-3`. Each level is YAML; commas inside brackets or quotes do not split. The study
stored by `run` holds the grid, so `ablate status NAME` and the reports see it; `plan FILE` sees it
when given the same `-m`.

## Plug-ins

`model.parameterisation`, `model.normalisation`, `model.init.scheme`, `model.nonlinearity`,
`model.activation`, `task.name`, `train.metrics` and `reports` (report sections) also take the
names of installed plug-in packages (`ablate plugins` lists them) and `package.module:attribute`
for code on the Python path. `validate` and `run` exercise each model, task and metric plug-in a
cell uses on a tiny batch first, checking a parameterisation's shapes against docs/plugins.md's
`System` table, and resolve (import, not run) each report section; a cell's id holds the identity
of its plug-ins (distribution, version, code hash). See docs/plugins.md.

## Errors

Every error names its key path and where that value was written: `file:line` when the spec came
from a file, `--set PATH` or `-m PATH` when the command line set it (a list or mapping the command
line replaced is its own, items included) — also for the plug-in checks `validate` and `run` make
after reading the spec, which name the factor level that chose the plug-in
(`factors.model.parameterisation[1]`); choices list the valid names (an installed plug-in that
fails to import is named apart, not offered); unknown keys suggest the closest valid one. `ablate validate` and every command that
reads a spec exit with code 2 on an invalid spec and write nothing to any store. The loader is
YAML's safe loader, stricter: duplicate keys, non-text keys (`no:` reads as false), tags other
than plain data (Python objects, `!!binary`, `!!set`, `!!timestamp`, custom), nesting deeper than
@MAX_DEPTH@, aliases that expand past @MAX_NODES@ values, files over @MAX_BYTES@ bytes and
non-UTF-8 text are refused.
"""


def _fmt(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return f"`{text}`"


def _type(prop: dict[str, Any]) -> str:
    if prop.get("title") == "a plug-in by path":
        return "`package.module:attribute` (a plug-in, docs/plugins.md)"
    if "enum" in prop:
        return " \\| ".join(f"`{v}`" for v in prop["enum"])
    if "const" in prop:
        return f"`{prop['const']}`"
    if "$ref" in prop:
        name = prop["$ref"].split("/")[-1]
        return f"[{name}](#{name.lower()})"
    if "anyOf" in prop or "oneOf" in prop:
        parts = [_type(p) for p in prop.get("anyOf", prop.get("oneOf", [])) if p.get("type") != "null"]
        return " \\| ".join(dict.fromkeys(p for p in parts if p)) or "any"
    kind = prop.get("type")
    if kind == "array":
        inner = _type(prop.get("items", {}))
        if inner == "any":
            return "list"
        return f"list of ({inner})" if "\\|" in inner else f"list of {inner}"
    if kind == "object":
        extra = prop.get("additionalProperties")
        if isinstance(extra, dict) and extra:
            return f"mapping → {_type(extra)}"
        return "mapping"
    return {"integer": "int", "number": "float", "string": "text", "boolean": "bool"}.get(kind, "any")


def _bounds(prop: dict[str, Any]) -> str:
    marks = {"minimum": "≥", "exclusiveMinimum": ">", "maximum": "≤", "exclusiveMaximum": "<",
             "minItems": "items ≥", "minLength": "length ≥"}
    return ", ".join(f"{sym} {prop[k]:g}" if isinstance(prop[k], float) else f"{sym} {prop[k]}"
                     for k, sym in marks.items() if k in prop)


def _default(model: type[BaseModel], name: str) -> str:
    field = model.model_fields[name]
    if field.is_required():
        return "required"
    value = field.get_default(call_default_factory=True)
    if isinstance(value, BaseModel):
        return f"{type(value).__name__} defaults"
    return _fmt(value)


def _table(model: type[BaseModel], prop_schemas: dict[str, Any]) -> list[str]:
    lines = ["| key | type | default | constraints | meaning |", "|---|---|---|---|---|"]
    for name in model.model_fields:
        prop = prop_schemas.get(name, {})
        desc = (prop.get("description") or "").replace("|", "\\|").replace("\n", " ")
        lines.append(f"| `{name}` | {_type(prop)} | {_default(model, name)} | {_bounds(prop)} | {desc} |")
    return lines


SECTIONS: list[tuple[str, type[BaseModel]]] = [
    ("Spec", spec.Spec),
    ("ModelSpec", spec.ModelSpec),
    ("RotrnnInit", spec.RotrnnInit),
    ("RingInit", spec.RingInit),
    ("TrainSpec", spec.TrainSpec),
    ("UntilConverged", spec.UntilConverged),
    ("ProbeSpec", spec.ProbeSpec),
    ("FactorSpec", spec.FactorSpec),
    ("LabelledLevel", spec.LabelledLevel),
    ("SequentialSeeds", SequentialSeeds),
    ("TuneSpec", spec.TuneSpec),
    ("TuneParam", spec.TuneParam),
    ("Objective", spec.Objective),
    ("Reference", spec.Reference),
    ("StatsSpec", spec.StatsSpec),
    ("CompareEntry", spec.CompareEntry),
    ("ReportOptions", ReportOptions),
]

WHERE = {
    "Spec": "the top level of a spec file",
    "ModelSpec": "`model:`",
    "RotrnnInit": "`model.init` with `scheme: rotrnn`",
    "RingInit": "`model.init` with `scheme: ring`",
    "TrainSpec": "`train:`",
    "UntilConverged": "`train.until_converged` (with `train.schedule: wsd`; `max_steps` above `train.steps`)",
    "ProbeSpec": "`probes:`",
    "FactorSpec": "the long form of a factor under `factors:`",
    "LabelledLevel": "a labelled level in a factor's list",
    "SequentialSeeds": "`seeds:` as a mapping: sequential seeds (docs/science.md §14)",
    "TuneSpec": "`tune:`",
    "TuneParam": "each entry of `tune.space` (a list is short for `{choices: [...]}`)",
    "Objective": "`tune.objective`",
    "Reference": "each entry of `references:`",
    "StatsSpec": "`stats:`",
    "CompareEntry": "each entry of `compare:` (a study's name alone is short for `{study: NAME}`)",
    "ReportOptions": "an entry of `reports:` as a mapping (a report's name alone shows all of it; "
                     "docs/reports.md)",
}


def reference_markdown() -> str:
    """docs/spec.md: the guide above, then one table per model and per task, and the limits."""
    sch = json_schema(installed=False)
    defs = sch["$defs"]
    out = [
        "# Study spec reference",
        "",
        "<!-- Generated by `ablate schema --docs docs/spec.md` from ablate/spec/, ablate/schema.py and the "
        "registries. Do not edit by hand. -->",
        "",
        GUIDE.replace("@MAX_DEPTH@", str(spec.MAX_DEPTH)).replace("@MAX_NODES@", f"{spec.MAX_NODES:,}")
        .replace("@MAX_BYTES@", f"{spec.MAX_BYTES:,}").rstrip(),
        "",
        "# Field reference",
        "",
    ]
    for name, model in SECTIONS:
        props = sch["properties"] if model is spec.Spec else defs[name]["properties"]
        doc = " ".join((model.__doc__ or "").split())
        out += [f"## {name}", "", f"{WHERE[name]}. {doc}".strip(), "", *_table(model, props), ""]
    out += ["## Tasks", "", "`task:` is `name:` and that task's parameters (all optional).", ""]
    for entry in sch["properties"]["task"]["oneOf"]:
        if "const" not in entry["properties"]["name"]:  # a plug-in by path: docs/plugins.md
            continue
        task = entry["properties"]["name"]["const"]
        model = task_params_model(task)
        params = {k: v for k, v in entry["properties"].items() if k != "name"}
        out += [f"### task: {task}", "", *([entry["description"], ""] if entry["description"] else []),
                *_table(model, params), ""]
    out += ["## Valid names", "", "The levels of each model factor (`ablate/models/catalogue.py`):", "",
            "| key | level | meaning |", "|---|---|---|"]
    for key, levels in MODEL_FACTORS.items():
        for lvl in levels:
            if lvl.plugin is not None:
                continue
            meaning = lvl.description.replace("|", "\\|")
            out.append(f"| `{key}` | `{lvl.name}` | {meaning} |")
    out += ["", "| key | names |", "|---|---|"]
    for key, names in (("task.name", BUILTIN_TASK_NAMES), ("reports", REPORTS),
                       ("tune.objective.metric", spec.OBJECTIVE_METRICS)):
        out.append(f"| `{key}` | {', '.join(f'`{n}`' for n in names)} |")
    out += ["", "## Limits", "", "| limit | value |", "|---|---|"]
    for key in ("MAX_CELLS", "MAX_SEEDS", "MAX_TUNE_TRIALS", "MAX_ITEMS", "MAX_EXTENDS", "MAX_DEPTH", "MAX_NODES",
                "MAX_BYTES"):
        out.append(f"| `{key}` | {getattr(spec, key):,} |")
    return "\n".join(out).rstrip() + "\n"


# --- where `ablate schema` writes ---------------------------------------------------------------

SCHEMA_FILE = "docs/spec.schema.json"


class DestinationError(ValueError):
    """``ablate schema``'s arguments name no one place to write the schema; the message says why."""


@dataclass
class Outputs:
    """What ``ablate schema`` writes: the schema's text to standard output (``stdout``; None when
    it goes to a file) and ``files``, path → text (the schema's file, the reference's)."""

    stdout: str | None
    files: dict[Path, str]

    def stale(self) -> list[Path]:
        """The files that are missing or differ from their text (what ``--check`` reports)."""
        return [p for p, text in self.files.items() if _read(p) != text.encode("utf-8")]

    def write(self) -> Iterator[Path]:
        """Write every file (its folder created) or none, then yield their paths. A file is
        replaced whole, so a failed write leaves the old one; a device or pipe (``/dev/stdout``)
        is written where it is, before any file is replaced. Refused (exit 2) naming the file
        that could not be written and why."""
        staged: dict[Path, Path] = {}  # file -> its new text beside it
        try:
            for p, text in self.files.items():
                if not p.exists() or p.is_file():
                    _attempt(p, lambda p=p, text=text: _stage(p, text, staged))
            for p, text in self.files.items():
                if p not in staged:
                    _attempt(p, lambda p=p, text=text: p.write_text(text, encoding="utf-8"))
            for p in list(staged):
                _attempt(p, lambda p=p: os.replace(staged[p], p.resolve()))
                del staged[p]
        finally:
            for tmp in staged.values():
                tmp.unlink(missing_ok=True)
        yield from self.files


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes() if path.is_file() else None
    except OSError as exc:
        raise Refused(f"cannot read {escape(str(path))}: {exc.strerror or exc}") from None


def _attempt(path: Path, write: Callable[[], object]) -> None:
    try:
        write()
    except OSError as exc:
        raise Refused(f"cannot write {escape(str(path))}: {exc.strerror or exc}") from None


def _stage(path: Path, text: str, staged: dict[Path, Path]) -> None:
    """``text`` in a new file beside ``path`` (the target of a link), with the mode of the file it
    replaces; recorded in ``staged`` as soon as it exists, so that a failed write removes it."""
    dest = path.resolve()
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)  # the umask applies, as to a new file
    staged[path] = tmp
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    if dest.exists():
        os.chmod(tmp, stat.S_IMODE(dest.stat().st_mode))


#: What a file ``ablate schema`` wrote holds near its top: the schema's id, the reference's note.
WRITTEN_MARKS = (f'"$id": "{SCHEMA_ID}"', "Generated by `ablate schema")


def _destination_problem(path: Path, check: bool) -> str | None:
    """Why ``path`` can be no file to write (or, with ``check``, to compare), or None. A file
    that holds something else than what this command writes is not replaced: every other command
    takes a spec as its file argument, and ``ablate schema study.yaml`` had overwritten one."""
    if path.is_dir():
        return "it is a folder; give a file's path"
    above = next(p for p in path.parents if p.exists())  # "/" or "." exists
    if not above.is_dir():
        return f"{above} is not a folder"
    if check:
        return None
    if path.exists():
        if not os.access(path, os.W_OK):
            return "it is not writable"
        return None if _ours(path) else ("it holds something ablate schema did not write, which would be lost; "
                                         "give a new file's path (e.g. spec.schema.json), or '-' for standard output")
    return None if os.access(above, os.W_OK | os.X_OK) else f"{above} is not writable"


def _ours(path: Path) -> bool:
    """An empty file, or one ``ablate schema`` wrote (a device such as /dev/null is no file to keep)."""
    if not path.is_file():
        return True
    try:
        with path.open("rb") as f:
            head = f.read(4096).decode("utf-8", "replace")
    except OSError:
        return True  # the write itself then says why it cannot
    return not head.strip() or any(mark in head for mark in WRITTEN_MARKS)


def outputs(target: str | None = None, out: Path | None = None, docs: Path | None = None, check: bool = False,
            terminal: bool = True) -> Outputs:
    """Where ``ablate schema [TARGET] [--out FILE] [--docs FILE] [--check]`` writes: TARGET or
    ``out`` ('-': standard output); neither, docs/spec.schema.json on a ``terminal`` or with
    ``docs`` or ``check``, else standard output (the Unix habit: redirected, it goes where it is
    sent). With ``docs`` the reference goes to that file. DestinationError on both TARGET and
    ``out``, or ``check`` of standard output; Refused (exit 2) on a file that cannot be written
    (a folder, under a file, not writable), before anything is written."""
    if target is not None and out is not None:
        raise DestinationError("give the schema's destination once: TARGET or --out")
    dest = target if target is not None else (str(out) if out is not None else None)
    if dest is None:
        dest = SCHEMA_FILE if terminal or docs is not None or check else "-"
    if dest == "-" and check:
        raise DestinationError("--check compares files: give a file, not standard output")
    for path in (Path(dest) if dest != "-" else None, docs):
        problem = None if path is None else _destination_problem(path, check)
        if problem is not None:
            raise Refused(f"cannot {'check' if check else 'write'} {escape(str(path))}: {problem}")
    if dest == "-":
        return Outputs(schema_text(), {docs: reference_markdown()} if docs is not None else {})
    # docs/: the built-ins only, the same on every machine; elsewhere what is installed here. The
    # source tree's docs/ however it is named (from another folder, by its absolute path)
    ours = {Path(SCHEMA_FILE).resolve(), Path(__file__).resolve().parents[1] / SCHEMA_FILE}
    files = {Path(dest): schema_text(installed=Path(dest).resolve() not in ours)}
    if docs is not None:
        files[docs] = reference_markdown()
    return Outputs(None, files)
