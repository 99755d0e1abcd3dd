"""Which runs count: the factor columns of a trials frame, the replicate runs that completed with a
finite metric, cells in order, a cell by id or label (the conventions of ``ablate.stats``)."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd

__all__ = [
    "STANDARD_COLUMNS",
    "UNFINISHED",
    "cell_rows",
    "completed_runs",
    "infer_factors",
    "ordered_unique",
    "phase_rows",
    "resolve_cell",
]


#: Columns of the trials frame that are not factors.
STANDARD_COLUMNS = frozenset(
    {"cell_id", "cell_label", "seed", "phase", "status", "failure_kind", "failure_message"}
)


#: Statuses of runs that have not finished yet.
UNFINISHED = ("pending", "running")


def infer_factors(trials: pd.DataFrame) -> list[str]:
    """The factor columns of ``trials``: those named by a dotted path, in column order."""
    return [c for c in trials.columns if "." in str(c) and c not in STANDARD_COLUMNS]


def phase_rows(trials: pd.DataFrame, phase: str | None) -> pd.DataFrame:
    if phase is None or "phase" not in trials.columns:
        return trials
    return trials[trials["phase"] == phase]


def completed_runs(trials: pd.DataFrame, metric: str, phase: str | None = "replicate") -> pd.DataFrame:
    """Rows of ``phase`` that completed with a finite ``metric`` (the runs every estimate uses)."""
    if metric not in trials.columns:
        raise KeyError(f"metric {metric!r} is not a column of the trials frame")
    rows = phase_rows(trials, phase)
    values = pd.to_numeric(rows[metric], errors="coerce")
    keep = (rows["status"] == "complete") & np.isfinite(values.to_numpy(dtype=float, na_value=np.nan))
    out = rows[keep].copy()
    out[metric] = values[keep].astype(float)
    return out


def ordered_unique(series: pd.Series) -> list[Any]:
    if isinstance(series.dtype, pd.CategoricalDtype):
        present = set(series.dropna())
        return [c for c in series.cat.categories if c in present]
    return list(pd.unique(series.dropna()))


def cell_rows(trials: pd.DataFrame) -> pd.DataFrame:
    """One row per cell (id, label, factor levels) in order of first appearance."""
    cols = ["cell_id", "cell_label", *infer_factors(trials)]
    cols = [c for c in cols if c in trials.columns]
    return trials[cols].drop_duplicates("cell_id").reset_index(drop=True)


def resolve_cell(trials: pd.DataFrame, cell: str) -> str:
    """The id of ``cell`` (an id or a label) in ``trials``. A cell id (as the design makes them)
    with no rows here is returned as it is: a cell whose runs hold no data for this measure (its
    comparisons then have no reference values, which a report says); other text raises KeyError."""
    ids = trials["cell_id"].to_numpy()
    if cell in set(ids) or re.fullmatch(r"[0-9a-f]{12}", str(cell)):
        return cell
    cells = trials[["cell_id", "cell_label"]].drop_duplicates("cell_id")
    by_label = cells.loc[cells["cell_label"] == cell, "cell_id"]
    if len(by_label) == 1:
        return str(by_label.iloc[0])
    known = ", ".join(map(repr, cells["cell_label"])) or "none"
    raise KeyError(f"no cell with id or label {cell!r}; cells are: {known}")
