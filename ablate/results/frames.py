"""The frames a study's results are read into: ``Results``, one study's (its trials, metrics and
curves as tidy polars frames, with the spec and provenance beside them, and what is computed from
one study: provenance, tuning, references, the norm measures per run), and ``Studies``, several
studies' stacked with a ``study`` column (``select`` by selectors, ``variants``, ``frames`` with each
cell once). Every column and dtype is in ``ablate.results``' docstring and docs/results.md; how they
are read is ``loading`` (the stores) and ``exports`` (files)."""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from ablate import design
from ablate.models import catalogue
from ablate.results.labels import readable, renamed
from ablate.spec import Spec, SpecError, get_path
from ablate.stores import redact

# The value the curve artifacts store where a coordinate does not apply (ablate.probes.SUMMARY:
# probes imports torch, which reading results does not need).
SUMMARY_SENTINEL = -1
SUMMARY = ("val_accuracy", "val_loss", "val_bpc", "test_accuracy", "test_loss", "test_bpc", "chance")
# Columns every trials frame has, typed, even before any trial ran.
TEXT_AND_COUNTS = {
    "tune_index": pl.Int64, "trial_number": pl.Int64, "failure_kind": pl.Utf8, "failure_message": pl.Utf8,
    "traceback": pl.Utf8,
    "seconds": pl.Float64, "steps": pl.Int64, "mlflow_run_id": pl.Utf8, "git_commit": pl.Utf8, "device": pl.Utf8,
    "host": pl.Utf8, "params": pl.Utf8, "tuned_from": pl.Utf8, "reused_from": pl.Utf8,
    "converged": pl.Boolean, "val_gain_last": pl.Float64, "val_gain_se": pl.Float64, "stopped_early": pl.Boolean,
    "best_step": pl.Int64, "budget": pl.Int64, "extended_from": pl.Int64, "continued_from": pl.Utf8,
}
CONVERGENCE = ("converged", "val_gain_last", "val_gain_se", "stopped_early", "best_step")


def label_frames(res: Results) -> None:
    """Give ``res``' metrics and curves its trials' label of each cell: ``results.load`` reads them
    after the trials (lru_ablations' export had written "normalisation=none" in its trials and
    "none" in its metrics and curves), and an export so written reads right."""
    if {"cell_id", "cell_label"} <= set(res.trials.columns):
        labels = {str(i): str(label) for i, label in res.trials.select("cell_id", "cell_label").unique().iter_rows()}
        res.metrics, res.curves = (readable(labels, f) for f in (res.metrics, res.curves))


@dataclass
class Results:
    study: str
    spec: Spec
    spec_hash: str
    stores: dict[str, str]  # redacted
    factors: list[str]
    trials: pl.DataFrame
    metrics: pl.DataFrame = field(default_factory=pl.DataFrame)
    curves: pl.DataFrame = field(default_factory=pl.DataFrame)
    #: item key → the trial's provenance tags (``ablate.git_commit``, ``ablate.version.*``, …)
    trial_provenance: dict[str, dict[str, str]] = field(default_factory=dict)
    #: what could not be read (a lost tracking store, runs it no longer has), one sentence each;
    #: the frames hold what remains
    missing: list[str] = field(default_factory=list)
    #: the spec as the study stored it (plain data): ``spec`` is it validated by this code, which
    #: may add settings of its own; an export keeps this one, what the study ran
    spec_data: dict[str, Any] = field(default_factory=dict)
    #: a sequential study's state (``ablate.runner.sequential_looks.State`` as plain data: its looks'
    #: analyses and decisions), else None
    sequential: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        # Here, not in the design: the stores keep the label the study ran with (a spec may name its
        # reference by it), older exports too, and every reader (both reports, their shared answer
        # page) gets the same readable one from either.
        names = renamed(self.trials, self.factors)
        if names:
            self.trials = readable(names, self.trials)
        label_frames(self)

    @property
    def chance(self) -> float | None:
        values = self.trials["chance"].drop_nulls().drop_nans() if "chance" in self.trials.columns else []
        return float(values[0]) if len(values) else None

    @property
    def baseline_cell(self) -> str:
        """The cell whose settings equal the baseline's, else the first cell."""
        base = self.spec.baseline()
        for cell in design.cells(self.spec):
            if cell.config == base:
                return cell.id
        return design.cells(self.spec)[0].id

    def reference_cell(self, reference: str | None = None) -> tuple[str, str]:
        """(cell id, why) of the cell comparisons are made against: ``reference`` (an id, a label,
        or a selector matching one cell: ``arch=LRU``, ``model.heads=8, variant=RotRNN``) when
        given, else the baseline cell. KeyError names the known cells."""
        cells = self.trials.select("cell_id", "cell_label").unique("cell_id", maintain_order=True)
        if reference:
            for cid, label in cells.iter_rows():
                if reference in (cid, label):
                    return cid, "chosen with the report parameter `reference`"
            known = ", ".join(repr(lbl) for lbl in cells["cell_label"])
            if "=" in reference or reference.lstrip().startswith("{"):
                return self._selected(reference, dict(cells.iter_rows()), known)
            raise KeyError(f"no cell with id or label {reference!r}; cells are: {known}")
        base = self.spec.baseline()
        grid = design.cells(self.spec)
        if any(c.config == base for c in grid):
            return self.baseline_cell, "the spec's baseline"
        return self.baseline_cell, "the first cell (the spec's baseline is not a cell of this design)"

    def _selected(self, text: str, ran: dict[str, str], known: str) -> tuple[str, str]:
        """The one cell with runs that the selector ``text`` matches (``ablate.design.selectors``:
        as ``--cells`` reads it), else KeyError saying what it matched."""
        try:
            selector = design.parse_selector(text, "reference")
            problems = design.selection_problems(self.spec, selector, "reference")
        except SpecError as exc:
            problems = exc.problems
        found = [] if problems else [c for c in design.select(self.spec, selector) if c.id in ran]
        if len(found) != 1:
            said = "; ".join(msg for _, msg in problems) if problems else (
                f"it matches {', '.join(repr(ran[c.id]) for c in found) or 'no cell'}, not one")
            raise KeyError(f"no cell with id or label {text!r}; as a selector: {said}; cells are: {known}")
        return found[0].id, "chosen with the report parameter `reference`"

    def provenance(self) -> dict[str, Any]:
        """What produced these results, for a report or a paper's appendix; no credentials.

        Keys: ``study``, ``spec_hash``, ``spec`` (as run, plain data), ``stores`` (redacted URLs),
        ``counts`` (trials per status, over every item of the spec), ``cells``, ``seeds``,
        ``git_commits`` / ``devices`` / ``hosts`` (value → trials), ``versions`` (package →
        {version: trials}), ``first_started`` / ``last_finished`` (datetimes or None),
        ``reused_from`` (study → items this study linked from it instead of training them),
        ``continued`` (items whose run continued a kept WSD stable-phase checkpoint) and
        ``extended`` (cell label → [(seed, declared steps, budget reached)] of the runs trained
        until converged, ``train.until_converged``).
        """
        ran = list(self.trial_provenance.values())

        def tally(key: str) -> dict[str, int]:
            return dict(Counter(str(p[key]) for p in ran if p.get(key)).most_common())

        versions: dict[str, dict[str, int]] = {}
        for p in ran:
            for key, value in p.items():
                if key.startswith("ablate.version."):
                    versions.setdefault(key.removeprefix("ablate.version."), Counter())[str(value)] += 1
        t = self.trials
        started = t["started"].drop_nulls() if "started" in t.columns else pl.Series([])
        finished = t["finished"].drop_nulls() if "finished" in t.columns else pl.Series([])
        return {
            "study": self.study,
            "spec_hash": self.spec_hash,
            "spec": self.spec.model_dump(mode="json", exclude_defaults=False),
            "stores": {k: redact(v) for k, v in self.stores.items()},
            "counts": dict(Counter(t["status"].to_list()).most_common()),
            "items": t.height,
            "cells": t["cell_id"].n_unique(),
            "seeds": self.spec.seed_list,
            "git_commits": tally("ablate.git_commit"),
            "devices": tally("ablate.device"),
            "hosts": tally("ablate.host"),
            "versions": {k: dict(v.most_common()) for k, v in sorted(versions.items())},
            "first_started": started.min() if len(started) else None,
            "last_finished": finished.max() if len(finished) else None,
            "reused_from": dict(Counter(x for x in t["reused_from"].to_list() if x).most_common())
            if "reused_from" in t.columns else {},
            **_lineage(t),
        }

    # A study is a one-element collection: what ``Studies`` answers, one study answers too, so that
    # ``load("a")`` and ``load(["a"])`` can be used alike.
    @property
    def names(self) -> list[str]:
        return [self.study]

    @property
    def results(self) -> list[Results]:
        return [self]

    def as_studies(self) -> Studies:
        """This study as a one-study ``Studies`` (its frames with a ``study`` column)."""
        return Studies.of([self])

    def __getitem__(self, name: str) -> Results:
        if name != self.study:
            raise KeyError(f"no study {name!r} here; studies: {self.study}")
        return self

    def summaries(self) -> list[dict[str, Any]]:
        return self.as_studies().summaries()

    def select(self, selectors: Selectors) -> Studies:
        return self.as_studies().select(selectors)

    @property
    def selectors(self) -> dict[str, list[dict[str, Any]]]:
        """The selectors applied, as ``Studies.selectors``: none (a loaded study shows every cell)."""
        return {}

    def variants(self) -> pl.DataFrame:
        return self.as_studies().variants()

    def frames(self) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
        return self.as_studies().frames()

    def stability(self) -> pl.DataFrame:
        """One row per replicate run with probe data: its hidden-state norm measures, the unit of
        every test of the norm-stability report (``ablate.stats.norms.per_seed``: the CV over
        training steps and over layers, the final whole-state ‖x‖², the deviation over seeds, and
        their logs), with the factor columns — to fit a model of one's own, e.g.
        ``smf.ols("log_cv_training ~ C(Q('model.heads')) * C(variant)", res.stability().to_pandas())``."""
        from ablate.stats import norms

        df = norms.prepare(self.curves, self.trials)
        if df.empty:
            return pl.DataFrame()
        seeds = norms.per_seed(norms.layer_norms(df, "probe"), self.trials.to_pandas(), self.factors)
        return pl.from_pandas(seeds)

    def tuning(self) -> pl.DataFrame:
        """Per cell of a tuned study: tuning trials planned / complete / failed / unfinished, the
        best setting (``tuning.best``: its first trial's index, its objective value — the mean over
        the tuning seeds that ran it —, the setting) — the one its replicates take — and what the
        replicates record they ran (``tuned_from``). Empty when the study did not tune.

        Columns: ``cell_id``, ``cell_label``, ``planned``, ``complete``, ``pruned``, ``failed``, ``unfinished``,
        ``best_index``, ``best_value``, ``best_params`` (JSON), ``tuned_from``.
        """
        from ablate import tuning

        cols = {"cell_id": pl.Utf8, "cell_label": pl.Utf8, "planned": pl.Int64, "complete": pl.Int64,
                "pruned": pl.Int64, "failed": pl.Int64, "unfinished": pl.Int64, "best_index": pl.Int64, "best_value": pl.Float64,
                "best_params": pl.Utf8, "tuned_from": pl.Utf8}
        if self.spec.tune is None or "phase" not in self.trials.columns:
            return pl.DataFrame(schema=cols)
        objective = self.spec.tune.objective
        rows = []
        for (cid, label), group in self.trials.group_by(["cell_id", "cell_label"], maintain_order=True):
            tune = group.filter(pl.col("phase") == "tune")
            states = tune["status"].to_list()
            ran = []  # every trial with a setting; a value where it finished with one (tuning.best averages)
            for r in tune.iter_rows(named=True):
                value = r.get(objective.metric)
                if r.get("params"):
                    ran.append((int(r["tune_index"]), json.loads(r["params"]),
                                float(value) if r["status"] == "complete" and _finite(value) else None))
            best = tuning.best(ran, objective.resolved_direction)
            reps = group.filter(pl.col("phase") == "replicate")
            sources = sorted({s for s in reps["tuned_from"].to_list() if s}) if "tuned_from" in reps.columns else []
            rows.append({
                "cell_id": cid, "cell_label": label, "planned": tune.height,
                "complete": states.count("complete"), "pruned": states.count("pruned"),
                "failed": sum(s in ("failed", "diverged", "killed") for s in states),
                "unfinished": sum(s in ("pending", "running") for s in states),
                "best_index": best.index if best else None,
                "best_value": best.mean if best else None,
                "best_params": json.dumps(best.params, sort_keys=True) if best else None,
                "tuned_from": "; ".join(sources) or None,
            })
        return pl.DataFrame(rows, schema=cols)

    def references(self) -> pl.DataFrame:
        """The spec's published reference values, each with the cells it matches.

        Columns: ``metric``, ``value``, ``source``, ``confirmed``, ``note``, ``cell`` (the
        reference's cell selector as text), ``cell_ids`` / ``cell_labels`` (matched cells, a
        list; a selector ``{}`` means the baseline cell).
        """
        rows = []
        for ref in self.spec.references:
            if ref.cell:
                matched = design.select(self.spec, ref.cell)
            else:
                matched = [c for c in design.cells(self.spec) if c.id == self.baseline_cell]
            rows.append({
                "metric": ref.metric, "value": ref.value, "source": ref.source, "confirmed": ref.confirmed,
                "note": ref.note,
                "cell": ", ".join(f"{k}={v}" for k, v in ref.cell.items()) or "baseline",
                "cell_ids": [c.id for c in matched], "cell_labels": [c.label for c in matched],
            })
        schema = {"metric": pl.Utf8, "value": pl.Float64, "source": pl.Utf8, "confirmed": pl.Boolean,
                  "note": pl.Utf8, "cell": pl.Utf8, "cell_ids": pl.List(pl.Utf8), "cell_labels": pl.List(pl.Utf8)}
        return pl.DataFrame(rows, schema=schema)


#: What one study has and a collection of several does not (``Studies.__getattr__``).
_ONE_STUDY = frozenset({"study", "spec", "spec_hash", "stores", "trial_provenance", "missing", "spec_data",
                        "sequential", "chance", "baseline_cell", "reference_cell", "provenance", "stability",
                        "tuning", "references"})


def _lineage(t: pl.DataFrame) -> dict[str, Any]:
    """``Results.provenance``'s ``continued`` and ``extended`` from the trials frame (frames read
    from exports written before the columns existed: none)."""
    continued = int(t["continued_from"].drop_nulls().len()) if "continued_from" in t.columns else 0
    extended: dict[str, list[tuple[int, int, int]]] = {}
    if "extended_from" in t.columns and "budget" in t.columns:
        for r in t.filter(pl.col("extended_from").is_not_null()).select("cell_label", "seed", "extended_from",
                                                                        "budget").iter_rows():
            extended.setdefault(str(r[0]), []).append((int(r[1]), int(r[2]), int(r[3])))
    return {"continued": continued, "extended": extended}


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


# --- several studies ---------------------------------------------------------------------------------

Selector = Mapping[str, Any] | str  # a mapping, or text as `--cells` takes it: "model.heads=8, variant=RotRNN"
Selectors = Selector | Sequence[Selector] | Mapping[str, Sequence[Selector]]


def _selector(sel: Selector) -> dict[str, Any]:
    if not isinstance(sel, str):
        return dict(sel)
    try:
        return design.parse_selector(sel, "select")
    except SpecError as exc:
        raise ValueError(str(exc)) from None


def _with_study(frame: pl.DataFrame, res: Results, levels: dict[str, list[str]]) -> pl.DataFrame:
    if frame.is_empty() and not frame.columns:
        return frame
    cols = [pl.lit(res.study).alias("study")]
    for f, names in levels.items():
        if f in frame.columns:
            value = pl.col(f).cast(pl.Utf8)
        else:  # each cell's own setting (a named factor of this study may set it), else null
            own = _cell_labels(res, f)
            value = pl.col("cell_id").replace_strict(own, default=None, return_dtype=pl.Utf8) if own else \
                pl.lit(None, dtype=pl.Utf8)
        cols.append(value.cast(pl.Enum(names)).alias(f))
    out = frame.with_columns(cols)
    return out.select(["study", *[c for c in out.columns if c != "study"]])


def _cell_labels(res: Results, factor: str) -> dict[str, str]:
    """Cell id → the label of the cell's value at the dotted path ``factor`` (none for a named factor)."""
    if "." not in factor:
        return {}
    out = {}
    for cell in design.cells(res.spec):
        try:
            out[cell.id] = design.level_label(get_path(cell.config, factor))
        except KeyError:
            continue
    return out


def _factor_levels(results: list[Results]) -> dict[str, list[str]]:
    """Factor → its levels over every study (each study's order, then first appearance), so the
    stacked columns stay an Enum that sorts as the specs list their levels."""
    factors = list(dict.fromkeys(f for r in results for f in r.factors))
    out: dict[str, list[str]] = {f: [] for f in factors}
    for f in factors:
        for r in results:
            col = r.trials[f] if f in r.trials.columns else None
            if col is not None and isinstance(col.dtype, pl.Enum):
                names = list(col.dtype.categories)
            elif col is not None:
                names = [str(x) for x in col.unique(maintain_order=True).to_list() if x is not None]
            else:
                names = list(dict.fromkeys(_cell_labels(r, f).values()))
            out[f] += [x for x in names if x not in out[f]]
    return out


def _concat(frames: list[pl.DataFrame]) -> pl.DataFrame:
    frames = [f for f in frames if f.columns]
    return pl.concat(frames, how="diagonal_relaxed") if frames else pl.DataFrame()


def leaves(data: Any, prefix: str = "") -> dict[str, Any]:
    """A nested config as dotted path → value (``model.init.r_min`` → 0.9)."""
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        for key, value in data.items():
            out.update(leaves(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: data}


def difference_labels(configs: Sequence[dict[str, Any]]) -> list[str]:
    """A label per config naming its values at the paths where the configs differ
    (``parameterisation=rotation, heads=8``); a path is shortened to its last key unless two
    differing paths share it. One config, or none differing: ``baseline``."""
    flat = [leaves(c) for c in configs]
    paths = list(dict.fromkeys(p for f in flat for p in f))
    differ = [p for p in paths if len({design.canonical_json(f.get(p)) for f in flat}) > 1]
    last = Counter(p.rsplit(".", 1)[-1] for p in differ)
    short = {p: p.rsplit(".", 1)[-1] if last[p.rsplit(".", 1)[-1]] == 1 else p for p in differ}
    return [", ".join(f"{short[p]}={design.level_label(f.get(p)) if p in f else '-'}" for p in differ) or "baseline"
            for f in flat]


def _read_settings(config: dict[str, Any]) -> dict[str, Any]:
    """The config without the model settings its family does not read (a minGRU cell's
    parameterisation is a default nothing uses: ``catalogue.unread_settings``)."""
    model = config.get("model")
    return {**config, "model": catalogue.read_model(model)} if isinstance(model, dict) else config


def _path_level_names(results: list[Results]) -> dict[str, dict[str, str]]:
    """Path factor → value (canonical JSON) → the label the first study that labels it gives it,
    so a value reads the same in every study's cells ("RotRNN-rot" for rotation in both, not
    "RotRNN-rot" in one and "rotation" in the other)."""
    out: dict[str, dict[str, str]] = {}
    for res in results:
        for factor in design.parse_factors(res.spec)[0]:
            if factor.named:
                continue
            for level in factor.levels:
                if level.labelled:
                    out.setdefault(factor.name, {}).setdefault(design.canonical_json(level.value), level.label)
    return out


def _path_level(config: dict[str, Any], path: str, names: dict[str, str], own: str) -> str | None:
    """How a variant's label names its value at a path factor: None where the cell's family does
    not read the setting, else the label some study gives the value, else the value (``own``, the
    study's level, where the config lacks the path)."""
    parts = path.split(".")
    model = config.get("model")
    if parts[0] == "model" and len(parts) > 1 and isinstance(model, dict) and "family" in model \
            and parts[1] in catalogue.unread_settings(model["family"]):
        return None
    try:
        value = get_path(config, path)
    except KeyError:
        return own
    return names.get(design.canonical_json(value), design.level_label(value))


@dataclass
class Studies:
    """Several studies' results: each one's ``Results`` and their frames stacked with a ``study``
    column (see the module's docstring)."""

    results: list[Results]
    trials: pl.DataFrame
    metrics: pl.DataFrame = field(default_factory=pl.DataFrame)
    curves: pl.DataFrame = field(default_factory=pl.DataFrame)
    selectors: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # study → applied (none: every cell)

    @classmethod
    def of(cls, results: list[Results], selectors: dict[str, list[dict[str, Any]]] | None = None) -> Studies:
        levels = _factor_levels(results)
        return cls(results, _concat([_with_study(r.trials, r, levels) for r in results]),
                   _concat([_with_study(r.metrics, r, levels) for r in results]),
                   _concat([_with_study(r.curves, r, levels) for r in results]), dict(selectors or {}))

    @property
    def names(self) -> list[str]:
        return [r.study for r in self.results]

    @property
    def factors(self) -> list[str]:
        """Every study's factors, in order of first appearance."""
        return list(dict.fromkeys(f for r in self.results for f in r.factors))

    def __getitem__(self, name: str) -> Results:
        for r in self.results:
            if r.study == name:
                return r
        raise KeyError(f"no study {name!r} here; studies: {', '.join(self.names)}")

    def __dir__(self) -> list[str]:  # a collection of one lists the one study's members it answers
        return sorted(set(super().__dir__()) | (_ONE_STUDY if len(self.results) == 1 else set()))

    def __getattr__(self, name: str) -> Any:
        # One study's members (spec, chance, stability(), …) on a collection of one answer as that
        # study's; on several, the error says how to pick one.
        if name.startswith("_") or name not in _ONE_STUDY:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        if len(self.results) == 1:
            return getattr(self.results[0], name)
        raise AttributeError(f"{name!r} belongs to one study and these are {len(self.results)} "
                             f"({', '.join(self.names)}): take one, e.g. studies[{self.names[0]!r}].{name}")

    def summaries(self) -> list[dict[str, Any]]:
        """Per study: ``study``, ``spec_hash``, ``cells`` (of its spec), ``shown`` (selected),
        ``selectors`` (applied; none: every cell), ``complete`` (completed replicate items shown)
        and ``reused`` (source study → how many of those it linked from there)."""
        out = []
        for res in self.results:
            t = self.trials.filter(pl.col("study") == res.study) if self.trials.height else self.trials
            done = t.filter((pl.col("status") == "complete") & (pl.col("phase") == "replicate")) if t.height else t
            reused = Counter(x for x in done["reused_from"].to_list() if x) if done.height else Counter()
            out.append({"study": res.study, "spec_hash": res.spec_hash, "cells": len(design.cells(res.spec)),
                        "shown": t["cell_id"].n_unique() if t.height else 0,
                        "selectors": self.selectors.get(res.study, []), "complete": done.height,
                        "reused": dict(reused)})
        return out

    def select(self, selectors: Selectors) -> Studies:
        """Only the cells matching any of the selectors (the design's syntax: factor or dotted
        path → level label or value, lists meaning any of): the same for every study, or per
        study (name → selectors; a study not named keeps every cell). A selector is a mapping or
        text as ``--cells`` takes it (``"model.heads=8"``). ValueError when a selector names what no
        study knows."""
        if isinstance(selectors, str) or (isinstance(selectors, Mapping) and not set(selectors) & set(self.names)):
            selectors = [selectors]  # one selector (a mapping that names no study), not several or per study
        per = ({name: [_selector(s) for s in sels] for name, sels in selectors.items()}
               if isinstance(selectors, Mapping) else {name: [_selector(s) for s in selectors] for name in self.names})
        unknown = [n for n in per if n not in self.names]
        if unknown:
            raise ValueError(f"selectors for {', '.join(map(repr, unknown))}, which are not among the studies "
                             f"({', '.join(self.names)})")
        applied: dict[str, list[str]] = {}  # selector (as text) → studies it applies to
        problems: dict[str, list[str]] = {}  # selector → its problems, by study
        for name, sels in per.items():
            for sel in sels:
                text = design.canonical_json(sel)
                applied.setdefault(text, []).append(name)
                found = design.selection_problems(self[name].spec, sel, "cells")
                if found:
                    problems.setdefault(text, []).append(f"in {name}: " + "; ".join(f"{p}: {m}" for p, m in found))
        for text, studies in applied.items():
            if len(problems.get(text, [])) == len(studies):  # a typo: no study knows what it names
                raise ValueError(f"selector {text} names what no study knows: " + " | ".join(problems[text]))
        keep: dict[str, set[str]] = {}
        for res in self.results:
            sels = per.get(res.study)
            if not sels:
                keep[res.study] = set(res.trials["cell_id"].to_list())
                continue
            keep[res.study] = {c.id for sel in sels for c in design.select(res.spec, sel)}
        picked = [pl.struct(pl.col("study"), pl.col("cell_id")).is_in(
            [{"study": s, "cell_id": c} for s, ids in keep.items() for c in ids])]

        def cut(frame: pl.DataFrame) -> pl.DataFrame:
            return frame.filter(*picked) if "cell_id" in frame.columns and frame.height else frame

        return Studies(self.results, cut(self.trials), cut(self.metrics), cut(self.curves),
                       {**self.selectors, **{k: v for k, v in per.items() if v}})

    def variants(self) -> pl.DataFrame:
        """One row per distinct cell of the selection (a cell several studies hold is one), in
        study then design order: ``cell_id``, ``study`` (the first holding it), ``studies``
        (all, comma-separated), ``cell_label`` (the first study's), ``label`` (the factor levels
        that differ between the selected cells — a path factor's value by the label the first
        study labelling it gives, else the value; a model setting the cell's family does not read
        left out — then any other setting that tells two of them apart), ``task`` (JSON), ``data_version``, ``code_version``, ``config`` (JSON)."""
        configs: dict[str, dict[str, Any]] = {}
        for res in self.results:
            for cell in design.cells(res.spec):
                configs.setdefault(cell.id, cell.config)
        factors = [f for f in self.factors if f in self.trials.columns]
        rows: dict[str, dict[str, Any]] = {}
        for row in self.trials.select("study", "cell_id", "cell_label", *factors).unique(maintain_order=True).iter_rows(named=True):
            cid, study = row["cell_id"], row["study"]
            if cid in rows:
                if study not in rows[cid]["studies"]:
                    rows[cid]["studies"].append(study)
                continue
            config = configs.get(cid, {})
            task = config.get("task", {})
            rows[cid] = {"cell_id": cid, "study": study, "studies": [study], "cell_label": row["cell_label"],
                         "config": config, "levels": {f: row[f] for f in factors},
                         "task": design.canonical_json(task), "data_version": design.data_version(task) if task else None,
                         "code_version": design.code_version(config) if config else None}
        names = _path_level_names(self.results)
        for r in rows.values():
            for f in factors:
                if "." in f and r["levels"][f] is not None:
                    r["levels"][f] = _path_level(r["config"], f, names.get(f, {}), r["levels"][f])
        # A path factor varies when two cells read different values; a named factor also when some
        # cells are another study's (no level of it).
        varied = [f for f in factors if len({r["levels"][f] for r in rows.values()
                                              if r["levels"][f] is not None or "." not in f}) > 1]
        for r in rows.values():
            r["label"] = ", ".join(f"{f.rsplit('.', 1)[-1]}={r['levels'][f]}" for f in varied
                                   if r["levels"][f] is not None)  # another study's named factor, or unread
        by_label: dict[str, list[dict[str, Any]]] = {}
        for r in rows.values():
            by_label.setdefault(r["label"], []).append(r)
        for same in by_label.values():  # cells the factors do not tell apart: say what does
            if len(same) > 1:
                extras = difference_labels([_read_settings(x["config"]) for x in same])
                if len(set(extras)) < len(extras):  # they differ only in settings their family ignores
                    extras = difference_labels([x["config"] for x in same])
                for r, extra in zip(same, extras, strict=True):
                    r["label"] = ", ".join(x for x in (r["label"], extra) if x and x != "baseline")
        # Cells whose configurations are equal differ where no setting shows (their tuning protocol,
        # their code): the study that holds each tells them apart.
        counts = Counter(r["label"] for r in rows.values())
        for r in rows.values():
            if counts[r["label"]] > 1:
                r["label"] = f"{r['label'] or 'baseline'} [{r['study']}]"
        schema = {"cell_id": pl.Utf8, "study": pl.Utf8, "studies": pl.Utf8, "cell_label": pl.Utf8, "label": pl.Utf8,
                  "task": pl.Utf8, "data_version": pl.Utf8, "code_version": pl.Utf8, "config": pl.Utf8}
        return pl.DataFrame([{**{k: v for k, v in r.items() if k != "levels"}, "studies": ", ".join(r["studies"]),
                              "label": r["label"] or "baseline", "config": design.canonical_json(r["config"])}
                             for r in rows.values()], schema=schema)

    def frames(self) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
        """(trials, metrics, curves) with each item once — a finished row before an unfinished
        one, then the first study's — ``cell_label`` the variant's ``label`` and ``study`` the
        studies holding the cell."""
        v = self.variants().select("cell_id", "studies", "label")
        order = {name: i for i, name in enumerate(self.names)}
        item = ["cell_id", "phase", "seed", "tune_index"]
        trials = (self.trials.with_row_index("_row")
                  .with_columns(pl.col("study").replace_strict(order, return_dtype=pl.Int64).alias("_order"),
                                (pl.col("status") == "pending").alias("_pending"),
                                pl.col("_row").min().over(item).alias("_first"))
                  .sort("_pending", "_order").unique(item, keep="first").sort("_first")
                  .drop("_row", "_order", "_pending", "_first"))
        # Curves and metrics come from the run of the row kept for (cell, phase, seed).
        chosen = trials.select("cell_id", "phase", "seed", pl.col("study").alias("_from")).unique(
            ["cell_id", "phase", "seed"], keep="first")

        def relabel(frame: pl.DataFrame) -> pl.DataFrame:
            out = frame.join(v, on="cell_id", how="inner")
            return out.with_columns(pl.col("label").alias("cell_label"), pl.col("studies").alias("study")).drop(
                "studies", "label")

        def one(frame: pl.DataFrame) -> pl.DataFrame:
            if "cell_id" not in frame.columns or not frame.height:
                return frame
            kept = frame.join(chosen, on=["cell_id", "phase", "seed"], how="inner").filter(pl.col("study") == pl.col("_from"))
            return relabel(kept.drop("_from"))

        original = self.trials.columns
        return relabel(trials).select(original), one(self.metrics), one(self.curves)
