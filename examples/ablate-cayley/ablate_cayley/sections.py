"""A report section: test accuracy per cell against the parity task's chance, as a table and a
figure (the section's contract: ``ablate/report/sections.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import polars as pl
from matplotlib.figure import Figure


def accuracy_by_cell(results: Any) -> Iterator[Any]:
    """Yield a sentence, a table of test accuracy per cell (mean, min, max, seeds) and a figure."""
    done = results.trials.filter(pl.col("status") == "complete", pl.col("phase") == "replicate")
    table = (done.group_by("cell_label", maintain_order=True)
             .agg(pl.col("test_accuracy").mean().round(3).alias("mean"), pl.col("test_accuracy").min().round(3).alias("min"),
                  pl.col("test_accuracy").max().round(3).alias("max"), pl.len().alias("seeds"))
             .rename({"cell_label": "cell"}))
    chance = results.chance
    yield (f"Test accuracy of each cell over its {done.height} finished runs; chance is "
           f"**{chance:.3f}**." if chance is not None else "Test accuracy of each cell.")
    yield "test accuracy per cell", table
    fig = Figure(figsize=(4.5, 0.35 * table.height + 0.9))
    ax = fig.add_subplot()
    ax.barh(table["cell"].to_list()[::-1], table["mean"].to_list()[::-1], color="#4477aa")
    if chance is not None:
        ax.axvline(chance, color="black", linestyle="--", linewidth=0.8)
    ax.set_xlabel("test accuracy (mean over seeds)")
    ax.set_xlim(0, 1)
    fig.tight_layout()
    yield "test accuracy against chance", fig
