"""Cell labels a sentence can quote: a cell whose label is one bare level that reads as an ordinary
word or a number ("none", "true", "off", "0.5") is named ``factor=level`` instead.

A named factor's level keeps the label its spec gave it (``design.factors.Factor.part``), so a
one-at-a-time study's cell that only turns normalisation off is labelled "none"; a report then reads
"Highest mean test accuracy: none". The stores keep the label the study ran with (a spec may name its
reference by it) and so do exports written before this rule; the frames a reader gets (``Results``,
from either) carry the readable one."""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

__all__ = ["WORDS", "readable", "reads_as_word", "renamed"]

#: Levels that read as a word of the sentence rather than as a cell's name.
WORDS = frozenset({"none", "null", "true", "false", "yes", "no", "on", "off", "default", "all", "any", "both",
                   "neither", "other", "same", "auto"})


def reads_as_word(label: str) -> bool:
    """True when ``label`` reads as an ordinary word or a number: one of ``WORDS`` (any case) or
    anything ``float`` parses ("4", "1e-3", "inf")."""
    text = label.strip()
    if text.lower() in WORDS:
        return True
    try:
        float(text)
    except ValueError:
        return False
    return True


def renamed(trials: pl.DataFrame, factors: Sequence[str]) -> dict[str, str]:
    """Cell id → its readable label, for the cells whose label is one bare level that reads as a
    word (``reads_as_word``) and is the level of exactly one of ``factors`` there; ``factor=level``
    with the factor's last path part, as unlabelled levels are shown. A name another cell already
    has is not taken (that cell keeps its label)."""
    if not len(trials) or "cell_label" not in trials.columns or "cell_id" not in trials.columns:
        return {}
    cols = [f for f in factors if f in trials.columns]
    cells = trials.select(["cell_id", "cell_label", *cols]).unique("cell_id", maintain_order=True)
    taken = {str(v) for v in cells["cell_label"]}
    out: dict[str, str] = {}
    for row in cells.iter_rows(named=True):
        label = row["cell_label"]
        if not isinstance(label, str) or "=" in label or "," in label or not reads_as_word(label):
            continue
        which = [f for f in cols if row[f] is not None and str(row[f]) == label]
        if len(which) != 1:
            continue
        name = f"{which[0].split('.')[-1]}={label}"
        if name not in taken:
            out[str(row["cell_id"])] = name
            taken.add(name)
    return out


def readable(names: dict[str, str], frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` with the ``cell_label`` of each cell in ``names`` (``renamed``) replaced."""
    if not names or "cell_label" not in frame.columns or "cell_id" not in frame.columns:
        return frame
    ids = pl.col("cell_id").cast(pl.Utf8)
    return frame.with_columns(
        pl.when(ids.is_in(list(names))).then(ids.replace(names)).otherwise(pl.col("cell_label"))
        .cast(frame.schema["cell_label"]).alias("cell_label"))
