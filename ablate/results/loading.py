"""Reading a study's results from its stores (``load``: the Optuna queue for the trials, MLflow
for the metrics and curves, found as ``ablate.runner.locate`` says) and keeping them as one file
(``save`` / ``read``: what the report renderer hands its notebooks)."""

from __future__ import annotations

import json
import pickle
from collections.abc import Sequence
from pathlib import Path
from typing import Any, overload

import polars as pl

from ablate import design
from ablate.metrics import column as metric_column
from ablate.results.frames import (
    CONVERGENCE,
    SUMMARY,
    SUMMARY_SENTINEL,
    TEXT_AND_COUNTS,
    Results,
    Studies,
    label_frames,
)
from ablate.runner import sequential_looks, tracking
from ablate.runner.dashboard import factor_distributions
from ablate.runner.items import trials_by_item
from ablate.runner.locate import locate
from ablate.runner.standing import representative
from ablate.runner.study import open_study, run_budget
from ablate.stores import Stores, redact, sqlite_path
from ablate.terminal import count


@overload
def load(study: str, storage: str | None = None, tracking_uri: str | None = None, curves: bool = True,
         metrics: bool | None = None, home: str | Path | None = None) -> Results: ...


@overload
def load(study: Sequence[str], storage: str | None = None, tracking_uri: str | None = None, curves: bool = True,
         metrics: bool | None = None, home: str | Path | None = None) -> Studies: ...


def load(
    study: str | Sequence[str],
    storage: str | None = None,
    tracking_uri: str | None = None,
    curves: bool = True,
    metrics: bool | None = None,
    home: str | Path | None = None,
) -> Results | Studies:
    """Read a study (a name) or several (a list of names: ``Studies``, one frame each with a
    ``study`` column) from its Optuna storage and MLflow tracking store, found as ``locate`` says
    (``home``: the folder holding ``optuna.db`` and ``mlflow.db``, as ``$ABLATE_HOME``).

    ``curves`` reads the dense hidden-state curves, ``metrics`` the logged scalars (default: as
    ``curves``); both come from MLflow artifacts and cost a download per run."""
    if not isinstance(study, str):
        names = list(dict.fromkeys(study))
        if not names:
            raise ValueError("load() needs at least one study name")
        cache: dict[tuple[str, str], Any] = {}  # a run two studies share is downloaded once
        return Studies.of([_load_one(n, storage, tracking_uri, curves, metrics, cache, home) for n in names])
    return _load_one(study, storage, tracking_uri, curves, metrics, None, home)


def save(res: Results | Studies, path: str | Path) -> None:
    """``res`` as one file that ``read`` returns as it was (frames, spec, what could not be read):
    the report renderer reads the stores once, in its own process while the notebook kernel starts,
    and every report of the render reads this file instead of the stores."""
    Path(path).write_bytes(pickle.dumps(res, protocol=pickle.HIGHEST_PROTOCOL))


def read(path: str | Path) -> Results | Studies:
    """What ``save`` wrote. A pickle: only for files this package wrote itself."""
    res = pickle.loads(Path(path).read_bytes())
    if not isinstance(res, (Results, Studies)):
        raise TypeError(f"{path} holds a {type(res).__name__}, not results saved by ablate.results.save")
    return res


def _load_one(study: str, storage: str | None, tracking_uri: str | None, curves: bool, metrics: bool | None,
              cache: dict[tuple[str, str], Any] | None, home: str | Path | None = None) -> Results:
    metrics = curves if metrics is None else metrics
    stores: Stores = locate(study, storage, tracking_uri, home)
    opt = open_study(study, stores, read_only=True)
    spec = design.validate(opt.user_attrs["spec"], f"study {study}")
    by_item = trials_by_item(opt)
    rows: list[dict[str, Any]] = []
    run_ids: dict[str, tuple[str, int, str]] = {}
    provenance: dict[str, dict[str, str]] = {}
    for item in sequential_looks.items(spec, opt):  # a sequential study: the seeds its looks planned
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
            trial, status = representative(trials)
            attrs = trial.user_attrs
            row.update(
                status=status,
                attempts=len(trials),
                trial_number=trial.number,
                failure_kind=attrs.get("failure_kind"),
                failure_message=attrs.get("failure_message"),
                traceback=attrs.get("traceback"),
                seconds=attrs.get("seconds"),
                steps=attrs.get("steps"),
                mlflow_run_id=attrs.get("mlflow_run_id"),
                started=trial.datetime_start,
                finished=trial.datetime_complete,
            )
            row.update({k: attrs.get(k) for k in SUMMARY})
            # metric plug-ins the cell chose (train.metrics): a test_<name> column each
            row.update({k: attrs.get(k) for k in map(metric_column, item.cell.config["train"].get("metrics") or ())})
            row.update({k: attrs.get(k) for k in CONVERGENCE})
            prov = attrs.get("provenance") or {}
            row.update(git_commit=prov.get("ablate.git_commit"), device=prov.get("ablate.device"),
                       host=prov.get("ablate.host"))
            if prov:
                provenance[item.key] = {str(k): str(v) for k, v in prov.items()}
            params = attrs.get("params")
            origin = attrs.get("reused_from")
            branch = attrs.get("continued_from")
            reached = run_budget(attrs) or None
            declared = int(item.cell.config["train"]["steps"])
            row.update(budget=reached, extended_from=declared if reached and reached > declared else None,
                       continued_from=f"{branch.get('label')} ({branch.get('cell')}) · seed {branch.get('seed')} · "
                                      f"step {branch.get('step')}" if isinstance(branch, dict) else None)
            row.update(params=json.dumps(params, sort_keys=True) if isinstance(params, dict) else None,
                       tuned_from=attrs.get("tuned_from"),
                       reused_from=str(origin.get("study")) if isinstance(origin, dict) else None)
            if attrs.get("mlflow_run_id") and row["status"] in ("complete", "diverged"):
                run_ids[attrs["mlflow_run_id"]] = (item.cell.id, item.seed, item.phase)
        rows.append(row)
    frame = pl.DataFrame(rows, infer_schema_length=None)
    # The columns a reader looks for first: the cell, then its factors in the spec's order.
    first = ["cell_id", "cell_label", *[f for f in spec.factors if f in frame.columns]]
    frame = frame.select([*first, *[c for c in frame.columns if c not in first]]) if frame.height else frame
    for col in SUMMARY:
        if col not in frame.columns:
            frame = frame.with_columns(pl.lit(None, dtype=pl.Float64).alias(col))
    for col, dtype in TEXT_AND_COUNTS.items():
        if col not in frame.columns or frame[col].dtype == pl.Null:
            frame = frame.with_columns(pl.col(col).cast(dtype) if col in frame.columns
                                       else pl.lit(None, dtype=dtype).alias(col))
    # Factor columns sort as the spec lists their levels (a polars Enum, pandas Categorical).
    frame = frame.with_columns(pl.col(name).cast(pl.Enum(list(dist.choices)))
                               for name, dist in factor_distributions(spec).items() if name in frame.columns)
    res = Results(
        study=study,
        spec=spec,
        spec_hash=str(opt.user_attrs.get("spec_hash", "")),
        stores=stores.describe(),
        factors=list(spec.factors),
        trials=frame,
        trial_provenance=provenance,
        spec_data=dict(opt.user_attrs["spec"]),
        sequential=_sequential_state(opt),
    )
    lost = _lost_tracking(stores)
    if lost and (metrics or curves) and run_ids:
        res.missing.append(f"{lost}: the metrics and curves of {count(len(run_ids), 'finished trial')} are not available; "
                           "the trials' outcomes (from the Optuna storage) are")
    elif metrics or curves:
        unread: dict[str, str] = {}
        if metrics:
            res.metrics = _artifacts(stores, run_ids, tracking.METRICS_ARTIFACT, frame, res.factors, cache, unread)
        if curves:
            res.curves = _artifacts(stores, run_ids, tracking.CURVES_ARTIFACT, frame, res.factors, cache, unread)
        label_frames(res)
        if unread:
            first = next(iter(unread.values()))
            res.missing.append(f"{len(unread)} of {count(len(run_ids), 'MLflow run')} could not be read from "
                               f"{redact(stores.tracking)} ({first}): their metrics and curves are missing")
    return res


def _sequential_state(opt: Any) -> dict[str, Any] | None:
    st = sequential_looks.load_state(opt)
    return None if st is None else json.loads(st.dump())


def _lost_tracking(stores: Stores) -> str | None:
    """Why the tracking store cannot be read at all (a SQLite file that is gone), else None."""
    path = sqlite_path(stores.tracking)
    if path is not None and not path.is_file():
        return f"the MLflow tracking store {path} is missing"
    return None


def _artifacts(stores: Stores, run_ids: dict[str, tuple[str, int, str]], name: str,
               trials: pl.DataFrame, factors: list[str] | tuple[str, ...] = (),
               cache: dict[tuple[str, str], Any] | None = None,
               unread: dict[str, str] | None = None) -> pl.DataFrame:
    """One artifact of every run as one frame (``cache``: frames already read, by run and name);
    runs that cannot be read go to ``unread`` (run id → why) instead: a report renders what remains."""
    parts = []
    unread = unread if unread is not None else {}
    todo = [r for r in run_ids if r not in unread and (cache is None or (r, name) not in cache)]
    frames = tracking.read_parquet_artifacts(stores.tracking, todo, name)
    for run_id, (cell_id, seed, phase) in run_ids.items():
        if run_id in unread:
            continue
        part = cache[(run_id, name)] if cache is not None and (run_id, name) in cache else frames[run_id]
        if isinstance(part, Exception):  # the run, its artifacts or the whole store is gone or unreachable
            unread[run_id] = redact(f"{type(part).__name__}: {(str(part).strip().splitlines() or [''])[0]}")[:300]
            continue
        if cache is not None:
            cache[(run_id, name)] = part
        if part is not None:
            parts.append(part.with_columns(pl.lit(cell_id).alias("cell_id"), pl.lit(seed, dtype=pl.Int64).alias("seed"),
                                           pl.lit(phase).alias("phase")))
    if not parts:
        return pl.DataFrame()
    factor_cols = [c for c in trials.columns if "." in c or c in factors]  # named factors have no dot
    labels = trials.select(["cell_id", "cell_label", *factor_cols]).unique("cell_id")
    frame = pl.concat(parts, how="diagonal_relaxed")
    # The artifacts write SUMMARY (-1) where a coordinate does not apply; a frame says null.
    sentinels = [c for c in ("layer", "head", "t") if c in frame.columns]
    frame = frame.with_columns(pl.when(pl.col(c) == SUMMARY_SENTINEL).then(None).otherwise(pl.col(c)).alias(c)
                               for c in sentinels)
    return frame.join(labels, on="cell_id", how="left", maintain_order="left")
