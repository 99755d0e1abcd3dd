"""benchmarks/bench_fused.py: its --tiny mode runs every row and reports what it measured."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_fused.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_fused", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_tiny_mode_prints_a_row_per_k_with_consistent_rates(capsys):
    rows = _bench().main(["--tiny"])
    assert [(r["row"], r["K"]) for r in rows] == [("apart", 1), ("fused", 1), ("fused", 2)]
    for row in rows:
        assert row["wall"] > 0
        assert math.isclose(row["per_hour"], row["K"] * 3600 / row["wall"])
        assert math.isclose(row["ratio"], row["per_hour"] / rows[0]["per_hour"])
        assert row["cpu"] > 0 and math.isclose(row["per_cpu_hour"], row["K"] * 3600 / row["cpu"])
    out = capsys.readouterr().out
    assert "trials/h" in out and "['complete', 'complete']" in out


def test_tiny_resume_mode_resumes_apart_and_fused_to_the_uninterrupted_result(capsys):
    rows = _bench().main(["--tiny", "--resume"])
    assert [(r["row"], r["K"]) for r in rows] == [("resumed apart", 2), ("resumed fused", 2)]
    for row in rows:
        assert row["wall"] > 0 and math.isclose(row["per_hour"], 2 * 3600 / row["wall"])
        assert math.isclose(row["ratio"], row["per_hour"] / rows[0]["per_hour"])
    assert "from step 3" in capsys.readouterr().out  # half of the tiny shape's 6 steps


def test_bad_arguments_are_refused():
    with pytest.raises(SystemExit):
        _bench().main(["--fuse", "0,2", "--repeats", "1", "--shape", "quickstart"])
    with pytest.raises(ValueError, match="unknown shape"):
        _bench().shape("nope", None)
