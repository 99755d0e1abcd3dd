"""Studies of any size for the report scale tests, with no training: an export's runs
(tests/data/scale_source: real probes, metrics and trials of 6 cells × 4 seeds, the first norm_heads
study's, kept here so that re-running an example study moves no page budget) dealt out to the
cells of a larger grid, each cell's norms scaled by its own factor and its accuracies moved by its
own offset, so that cells differ and figures and tables have something to show.

``scaled(factors, seeds)`` gives an ``ablate.results.Results`` whose spec validates and whose
cells are that spec's design (ids, labels, factor columns), as ``ablate report --data`` would
read it.
"""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from ablate import design, results

SOURCE = Path(__file__).resolve().parent / "data" / "scale_source"

#: Grids of 4, 12, 18, 32 and 48 cells over the factors the issue's users vary.
GRIDS: dict[int, dict[str, list[Any]]] = {
    4: {"model.parameterisation": ["rotation", "complex_diagonal"], "model.normalisation": ["xi", "gamma"]},
    12: {"model.parameterisation": ["rotation", "complex_diagonal"], "model.normalisation": ["xi", "gamma"],
         "model.layers": [1, 2, 4]},
    18: {"model.parameterisation": ["rotation", "complex_diagonal"], "model.normalisation": ["xi", "gamma", "none"],
         "model.layers": [1, 2, 4]},
    32: {"model.parameterisation": ["rotation", "complex_diagonal"], "model.normalisation": ["xi", "gamma"],
         "model.layers": [1, 2, 4, 8], "model.heads": [2, 4]},
    48: {"model.parameterisation": ["rotation", "complex_diagonal"], "model.normalisation": ["xi", "gamma", "none"],
         "model.layers": [1, 2, 4, 8], "model.heads": [2, 4]},
}


def _source() -> results.Results:
    return results.read_export(SOURCE)


def scaled(factors: dict[str, list[Any]], seeds: int = 4, name: str | None = None) -> results.Results:
    """A study of the grid ``factors`` (a full factorial), ``seeds`` replicates per cell (at most
    the source's 4), made from the source export's runs."""
    src = _source()
    data = copy.deepcopy(src.spec_data)
    data["name"] = name or f"scale{int(np.prod([len(v) for v in factors.values()]))}"
    data["factors"] = copy.deepcopy(factors)
    data["seeds"] = seeds
    data.pop("exclude", None)
    data.pop("include", None)
    data["description"] = f"A synthetic {data['name']} study for the report scale tests."
    spec = design.validate(data, "synthetic study")
    cells = design.cells(spec)
    names = list(factors)
    old = src.trials.filter(pl.col("phase") == "replicate")
    old_cells = old["cell_id"].unique(maintain_order=True).to_list()
    rng = np.random.default_rng(len(cells))
    trial_parts, curve_parts, metric_parts = [], [], []
    enums = {f: pl.Enum([str(lbl) for lbl in dict.fromkeys(c.labels[f] for c in cells)]) for f in names}
    drop = [c for c in src.factors]

    def relabel(frame: pl.DataFrame, cell: design.Cell, extra: list[pl.Expr]) -> pl.DataFrame:
        out = frame.drop([c for c in drop if c in frame.columns]).with_columns(
            pl.lit(cell.id).alias("cell_id"), pl.lit(cell.label).alias("cell_label"), *extra,
            *[pl.lit(cell.labels[f]).cast(enums[f]).alias(f) for f in names])
        return out

    for i, cell in enumerate(cells):
        source = old_cells[i % len(old_cells)]
        scale = float(np.exp(rng.normal(0.0, 0.6)))
        shift = float(rng.normal(0.0, 0.01))
        keep = pl.col("seed") < seeds
        t = old.filter((pl.col("cell_id") == source) & keep)
        acc = [pl.col(c) + shift for c in ("val_accuracy", "test_accuracy") if c in t.columns]
        trial_parts.append(relabel(t, cell, acc))
        c = src.curves.filter((pl.col("cell_id") == source) & keep)
        if c.height:
            curve_parts.append(relabel(c, cell, [pl.col("value") * scale]))
        m = src.metrics.filter((pl.col("cell_id") == source) & keep) if src.metrics.height else src.metrics
        if m.height:
            metric_parts.append(relabel(m, cell, []))
    order = [*[c for c in src.trials.columns if c not in drop], *names]

    def stack(parts: list[pl.DataFrame]) -> pl.DataFrame:
        if not parts:
            return pl.DataFrame()
        frame = pl.concat(parts, how="vertical_relaxed")
        return frame.select([c for c in [*[c for c in parts[0].columns if c not in names], *names]
                             if c in frame.columns])

    trials = stack(trial_parts).select([c for c in order if c in stack(trial_parts).columns])
    return dataclasses.replace(src, study=spec.name, spec=spec, spec_hash=f"synthetic{len(cells)}",
                               factors=names, trials=trials, curves=stack(curve_parts),
                               metrics=stack(metric_parts), trial_provenance={}, spec_data=data, missing=[])
