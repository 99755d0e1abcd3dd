"""A study's results as tidy polars frames: the one way notebooks (and users) read results.

    res = ablate.results.load("quickstart")
    res.trials      one row per (cell, phase, seed) of the spec, pending ones included
    res.metrics     every scalar logged: cell, seed, step, name, value
    res.curves      hidden-state probes (ablate.probes): cell, seed, step, layer, head, t, value, kind, quantity
    res.provenance()  what produced the results: spec, hash, commits, versions, devices, dates, stores
    res.tuning()      per tuned cell: the best setting, its objective value, trials used

Factor settings are columns named by their dotted path, holding the level's label. Tuning items
(``phase == "tune"``) carry ``tune_index``, ``params`` (the sampled setting, JSON) and, for a
replicate of a tuned cell, ``tuned_from`` (which tuning trial it took its setting from).

Convergence (``ablate.training.convergence``; null for trials recorded before it): ``steps``
(steps actually run), ``converged`` (the best validation metric gained at most
``train.converged_tol`` over the last fifth of them), ``val_gain_last`` (that gain, in metric
units), ``stopped_early`` (patience, or a pruned tuning trial), ``best_step``. A tuning trial its
pruner stopped has status ``pruned``.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import polars as pl
from optuna.trial import FrozenTrial, TrialState

from ablate import design
from ablate.runner import tracking
from ablate.runner.study import open_study, trials_by_item
from ablate.spec import Spec
from ablate.stores import Stores, redact, resolve

SUMMARY = ("val_accuracy", "val_loss", "val_bpc", "test_accuracy", "test_loss", "test_bpc", "chance")
# Columns every trials frame has, typed, even before any trial ran.
TEXT_AND_COUNTS = {
    "tune_index": pl.Int64, "trial_number": pl.Int64, "failure_kind": pl.Utf8, "failure_message": pl.Utf8,
    "seconds": pl.Float64, "steps": pl.Int64, "mlflow_run_id": pl.Utf8, "git_commit": pl.Utf8, "device": pl.Utf8,
    "host": pl.Utf8, "params": pl.Utf8, "tuned_from": pl.Utf8,
    "converged": pl.Boolean, "val_gain_last": pl.Float64, "stopped_early": pl.Boolean, "best_step": pl.Int64,
}
CONVERGENCE = ("converged", "val_gain_last", "stopped_early", "best_step")


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
        """(cell id, why) of the cell comparisons are made against: ``reference`` (an id or a
        label) when given, else the baseline cell. KeyError names the known cells."""
        cells = self.trials.select("cell_id", "cell_label").unique("cell_id", maintain_order=True)
        if reference:
            for cid, label in cells.iter_rows():
                if reference in (cid, label):
                    return cid, "chosen with the report parameter `reference`"
            known = ", ".join(repr(lbl) for lbl in cells["cell_label"])
            raise KeyError(f"no cell with id or label {reference!r}; cells are: {known}")
        base = self.spec.baseline()
        grid = design.cells(self.spec)
        if any(c.config == base for c in grid):
            return self.baseline_cell, "the spec's baseline"
        return self.baseline_cell, "the first cell (the spec's baseline is not a cell of this design)"

    def provenance(self) -> dict[str, Any]:
        """What produced these results, for a report or a paper's appendix; no credentials.

        Keys: ``study``, ``spec_hash``, ``spec`` (as run, plain data), ``stores`` (redacted URLs),
        ``counts`` (trials per status, over every item of the spec), ``cells``, ``seeds``,
        ``git_commits`` / ``devices`` / ``hosts`` (value → trials), ``versions`` (package →
        {version: trials}), ``first_started`` / ``last_finished`` (datetimes or None).
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
        }

    def tuning(self) -> pl.DataFrame:
        """Per cell of a tuned study: tuning trials planned / complete / failed / unfinished, the
        best finished trial (index, objective value, setting) — the one its replicates take —
        and what the replicates record they ran (``tuned_from``). Empty when the study did not tune.

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
            status = tune["status"].to_list()
            finished = []
            for r in tune.iter_rows(named=True):
                value = r.get(objective.metric)
                if r["status"] == "complete" and r.get("params") and _finite(value):
                    finished.append((int(r["tune_index"]), json.loads(r["params"]), float(value)))
            best = tuning.best(finished, objective.resolved_direction)
            reps = group.filter(pl.col("phase") == "replicate")
            sources = sorted({s for s in reps["tuned_from"].to_list() if s}) if "tuned_from" in reps.columns else []
            rows.append({
                "cell_id": cid, "cell_label": label, "planned": tune.height,
                "complete": status.count("complete"), "pruned": status.count("pruned"),
                "failed": sum(s in ("failed", "diverged", "killed") for s in status),
                "unfinished": sum(s in ("pending", "running") for s in status),
                "best_index": best[0] if best else None,
                "best_value": next(v for i, _, v in finished if i == best[0]) if best else None,
                "best_params": json.dumps(best[1], sort_keys=True) if best else None,
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


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _status(trial: FrozenTrial) -> str:
    if trial.state == TrialState.COMPLETE:
        return "complete"
    if trial.state == TrialState.RUNNING:
        return "running"
    if trial.state == TrialState.WAITING:
        return "pending"
    return str(trial.user_attrs.get("status", "failed"))


def _representative(trials: list[FrozenTrial]) -> FrozenTrial:
    """The trial that stands for an item: its completion, else its terminal failure, else the latest."""
    order = {"complete": 0, "pruned": 0, "diverged": 1, "failed": 2, "running": 3, "pending": 4}
    return min(trials, key=lambda t: (order.get(_status(t), 5), -t.number))


def load(
    study: str,
    storage: str | None = None,
    tracking_uri: str | None = None,
    curves: bool = True,
    metrics: bool | None = None,
) -> Results:
    """Read a study from its Optuna storage and MLflow tracking store.

    ``curves`` reads the dense hidden-state curves, ``metrics`` the logged scalars (default: as
    ``curves``); both come from MLflow artifacts and cost a download per run."""
    metrics = curves if metrics is None else metrics
    stores: Stores = resolve(storage, tracking_uri)
    opt = open_study(study, stores)
    spec = design.validate(opt.user_attrs["spec"], f"study {study}")
    by_item = trials_by_item(opt)
    rows: list[dict[str, Any]] = []
    run_ids: dict[str, tuple[str, int, str]] = {}
    provenance: dict[str, dict[str, str]] = {}
    for item in design.items(spec):
        row: dict[str, Any] = {
            "cell_id": item.cell.id,
            "cell_label": item.cell.label,
            "seed": item.seed,
            "phase": item.phase,
            **item.cell.labels,
            "status": "pending",
            "attempts": 0,
            "tune_index": item.index,
        }
        trials = by_item.get(item.key, [])
        if trials:
            trial = _representative(trials)
            attrs = trial.user_attrs
            row.update(
                status=_status(trial),
                attempts=len(trials),
                trial_number=trial.number,
                failure_kind=attrs.get("failure_kind"),
                failure_message=attrs.get("failure_message"),
                seconds=attrs.get("seconds"),
                steps=attrs.get("steps"),
                mlflow_run_id=attrs.get("mlflow_run_id"),
                started=trial.datetime_start,
                finished=trial.datetime_complete,
            )
            row.update({k: attrs.get(k) for k in SUMMARY})
            row.update({k: attrs.get(k) for k in CONVERGENCE})
            prov = attrs.get("provenance") or {}
            row.update(git_commit=prov.get("ablate.git_commit"), device=prov.get("ablate.device"),
                       host=prov.get("ablate.host"))
            if prov:
                provenance[item.key] = {str(k): str(v) for k, v in prov.items()}
            params = attrs.get("params")
            row.update(params=json.dumps(params, sort_keys=True) if isinstance(params, dict) else None,
                       tuned_from=attrs.get("tuned_from"))
            if attrs.get("mlflow_run_id") and row["status"] in ("complete", "diverged"):
                run_ids[attrs["mlflow_run_id"]] = (item.cell.id, item.seed, item.phase)
        rows.append(row)
    frame = pl.DataFrame(rows, infer_schema_length=None)
    for col in SUMMARY:
        if col not in frame.columns:
            frame = frame.with_columns(pl.lit(None, dtype=pl.Float64).alias(col))
    for col, dtype in TEXT_AND_COUNTS.items():
        if col not in frame.columns or frame[col].dtype == pl.Null:
            frame = frame.with_columns(pl.col(col).cast(dtype) if col in frame.columns
                                       else pl.lit(None, dtype=dtype).alias(col))
    res = Results(
        study=study,
        spec=spec,
        spec_hash=str(opt.user_attrs.get("spec_hash", "")),
        stores=stores.describe(),
        factors=list(spec.factors),
        trials=frame,
        trial_provenance=provenance,
    )
    if metrics:
        res.metrics = _artifacts(stores, run_ids, tracking.METRICS_ARTIFACT, frame, res.factors)
    if curves:
        res.curves = _artifacts(stores, run_ids, tracking.CURVES_ARTIFACT, frame, res.factors)
    return res


def _artifacts(stores: Stores, run_ids: dict[str, tuple[str, int, str]], name: str,
               trials: pl.DataFrame, factors: list[str] | tuple[str, ...] = ()) -> pl.DataFrame:
    parts = []
    for run_id, (cell_id, seed, phase) in run_ids.items():
        part = tracking.read_parquet_artifact(stores.tracking, run_id, name)
        if part is not None:
            parts.append(part.with_columns(pl.lit(cell_id).alias("cell_id"), pl.lit(seed).alias("seed"),
                                           pl.lit(phase).alias("phase")))
    if not parts:
        return pl.DataFrame()
    factor_cols = [c for c in trials.columns if "." in c or c in factors]  # named factors have no dot
    labels = trials.select(["cell_id", "cell_label", *factor_cols]).unique("cell_id")
    return pl.concat(parts, how="diagonal_relaxed").join(labels, on="cell_id", how="left")
