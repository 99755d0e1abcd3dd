"""A study's results as tidy polars frames: the one way notebooks (and users) read results.

    res = ablate.results.load("quickstart")
    res.trials      one row per (cell, phase, seed) of the spec, pending ones included
    res.metrics     every scalar logged: cell, seed, step, name, value
    res.curves      hidden-state norm curves: cell, seed, step, layer, head, t, value, kind

Factor settings are columns named by their dotted path, holding the level's label.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl
from optuna.trial import FrozenTrial, TrialState

from ablate import design
from ablate.runner import tracking
from ablate.runner.study import open_study, trials_by_item
from ablate.spec import Spec, validate
from ablate.stores import Stores, resolve

SUMMARY = ("val_accuracy", "val_loss", "val_bpc", "test_accuracy", "test_loss", "test_bpc", "chance")


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
    order = {"complete": 0, "diverged": 1, "failed": 2, "running": 3, "pending": 4}
    return min(trials, key=lambda t: (order.get(_status(t), 5), -t.number))


def load(study: str, storage: str | None = None, tracking_uri: str | None = None, curves: bool = True) -> Results:
    """Read a study from its Optuna storage and MLflow tracking store."""
    stores: Stores = resolve(storage, tracking_uri)
    opt = open_study(study, stores)
    spec = validate(opt.user_attrs["spec"], f"study {study}")
    by_item = trials_by_item(opt)
    rows: list[dict[str, Any]] = []
    run_ids: dict[str, tuple[str, int]] = {}
    for item in design.items(spec):
        row: dict[str, Any] = {
            "cell_id": item.cell.id,
            "cell_label": item.cell.label,
            "seed": item.seed,
            "phase": item.phase,
            **item.cell.labels,
            "status": "pending",
            "attempts": 0,
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
            if attrs.get("mlflow_run_id") and row["status"] in ("complete", "diverged"):
                run_ids[attrs["mlflow_run_id"]] = (item.cell.id, item.seed)
        rows.append(row)
    frame = pl.DataFrame(rows, infer_schema_length=None)
    for col in SUMMARY:
        if col not in frame.columns:
            frame = frame.with_columns(pl.lit(None, dtype=pl.Float64).alias(col))
    res = Results(
        study=study,
        spec=spec,
        spec_hash=str(opt.user_attrs.get("spec_hash", "")),
        stores=stores.describe(),
        factors=list(spec.factors),
        trials=frame,
    )
    if curves:
        res.metrics = _artifacts(stores, run_ids, tracking.METRICS_ARTIFACT, frame)
        res.curves = _artifacts(stores, run_ids, tracking.CURVES_ARTIFACT, frame)
    return res


def _artifacts(stores: Stores, run_ids: dict[str, tuple[str, int]], name: str, trials: pl.DataFrame) -> pl.DataFrame:
    parts = []
    for run_id, (cell_id, seed) in run_ids.items():
        part = tracking.read_parquet_artifact(stores.tracking, run_id, name)
        if part is not None:
            parts.append(part.with_columns(pl.lit(cell_id).alias("cell_id"), pl.lit(seed).alias("seed")))
    if not parts:
        return pl.DataFrame()
    labels = trials.select(["cell_id", "cell_label", *[c for c in trials.columns if "." in c]]).unique("cell_id")
    return pl.concat(parts, how="diagonal_relaxed").join(labels, on="cell_id", how="left")
