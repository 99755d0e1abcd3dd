"""A cell labelled by one bare level that reads as a word is named factor=level (review item 21)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from ablate.results import labels
from ablate.results.exports import read_export

REPORTS = Path(__file__).resolve().parents[1] / "reports"


def _trials(rows: list[tuple[str, str, str, str]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=["cell_id", "cell_label", "recurrence", "normalisation"], orient="row")


@pytest.mark.parametrize("label", ["none", "None", "true", "off", "4", "0.5", "1e-3"])
def test_reads_as_word(label: str) -> None:
    assert labels.reads_as_word(label)


@pytest.mark.parametrize("label", ["tanh", "γ", "wide [0, 0.99]", "baseline", "xi"])
def test_a_name_is_not_a_word(label: str) -> None:
    assert not labels.reads_as_word(label)


def test_one_at_a_time_cell_named_by_its_factor() -> None:
    trials = _trials([("a", "baseline", "linear", "γ"), ("b", "tanh", "tanh", "γ"), ("c", "none", "linear", "none"),
                      ("c", "none", "linear", "none")])
    names = labels.renamed(trials, ["recurrence", "normalisation"])
    assert names == {"c": "normalisation=none"}  # tanh reads as a name: kept
    out = labels.readable(names, trials)
    assert out["cell_label"].to_list() == ["baseline", "tanh", "normalisation=none", "normalisation=none"]


def test_ambiguous_or_taken_names_are_kept() -> None:
    # "none" is the level of both factors: which one the cell varies is not known
    both = _trials([("a", "none", "none", "none")])
    assert labels.renamed(both, ["recurrence", "normalisation"]) == {}
    # another cell already has the name
    taken = _trials([("a", "normalisation=none", "x", "y"), ("b", "none", "linear", "none")])
    assert labels.renamed(taken, ["recurrence", "normalisation"]) == {}
    # a label of several levels, or one with "=", is left as it is
    many = _trials([("a", "recurrence=none, normalisation=off", "none", "off")])
    assert labels.renamed(many, ["recurrence", "normalisation"]) == {}


def test_dotted_factor_uses_its_last_part() -> None:
    trials = pl.DataFrame({"cell_id": ["a"], "cell_label": ["true"], "model.bidirectional": ["true"]})
    assert labels.renamed(trials, ["model.bidirectional"]) == {"a": "bidirectional=true"}


@pytest.mark.skipif(not (REPORTS / "lru_ablations" / "data").is_dir(), reason="committed export not present")
def test_export_read_with_readable_labels() -> None:
    res = read_export(REPORTS / "lru_ablations" / "data")
    cells = set(res.trials["cell_label"].to_list())
    assert "normalisation=none" in cells and "none" not in cells
    assert {"baseline", "tanh", "relu"} <= cells  # the other labels unchanged
    for frame in (res.metrics, res.curves):
        if len(frame):
            assert "none" not in set(frame["cell_label"].to_list())
    # the reference parameter takes the label the reader sees
    assert res.reference_cell("normalisation=none")[0] == res.trials.filter(
        pl.col("cell_label") == "normalisation=none")["cell_id"][0]


def test_frames_read_after_the_trials_take_their_labels() -> None:
    """``results.load`` reads the metrics and curves after the trials: lru_ablations' export (written
    from a load) had "normalisation=none" in its trials and "none" in its metrics and curves."""
    from ablate.results.frames import label_frames

    data = REPORTS / "lru_ablations" / "data"
    res = read_export(data)
    res.metrics = pl.read_parquet(data / "metrics.parquet").with_columns(
        pl.when(pl.col("cell_label") == "normalisation=none").then(pl.lit("none"))
        .otherwise(pl.col("cell_label")).alias("cell_label"))  # as a load assigns them, raw
    assert "none" in set(res.metrics["cell_label"].to_list())
    label_frames(res)
    assert set(res.metrics["cell_label"].to_list()) == set(res.trials["cell_label"].to_list())
