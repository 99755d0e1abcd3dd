"""The layer benchmark (benchmarks/harness/models.py, run by benchmarks/bench_scan.py) runs end to end on tiny inputs: the scan table, then one
layer and one training step per model and backend, split into scan and rest."""

from __future__ import annotations

import importlib
import math
import re
import sys
from pathlib import Path

import pytest

from ablate.ops import scan as scan_mod

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))  # the scripts' own path
models_bench = importlib.import_module("harness.models")
LAYER_SPECS, run_bench = models_bench.LAYER_SPECS, models_bench.run_bench

TINY = {"seq_len": 16, "batch": 2, "d_model": 8, "state": 64, "layers": 1}  # 32 heads of 2


@pytest.mark.parametrize("full", [False, True])
def test_run_bench_smoke(capsys: pytest.CaptureFixture[str], full: bool) -> None:
    result = run_bench(lengths=(32,), batch=2, channels=8, repeats=1, layer_config=TINY, tune_alloc=False,
                       copy_bytes=1 << 20, verbose=False, full=full)
    assert {r["kind"] for r in result["scans"]} == {"real", "complex", "log"}
    assert "layers_error" not in result, result.get("layers_error")
    rows = result["layers"]
    compiled = set(scan_mod.available_backends("cpu")) - {"torch"}
    backends = compiled | {"torch"}  # the reference is timed by default too: the speed-up column
    assert {(r["what"], r["model"], r["backend"]) for r in rows} == {
        (w, m, b) for w in ("layer", "step") for m in LAYER_SPECS for b in backends}
    for r in rows:
        assert r["ms"] > 0 and r["rest_ms"] > 0 and 0 <= r["scan_share"] < 1
        assert r["scan_ms"] + r["rest_ms"] == pytest.approx(r["ms"]) if r["backend"] in compiled else True
        if r["backend"] in compiled:
            assert r["scan_ms"] > 0  # the kernels were timed inside the step, not estimated
        assert (r["vs_lru"] == 1.0) == (r["model"] == "LRU")
        assert not math.isnan(r["speedup"]) and r["speedup"] > 0
        assert r["rounds"] == 1
    out = capsys.readouterr().out
    assert "copy bandwidth" in out and "×bound" in out and "×loop" in out and "GB/s" in out
    assert "scan share" in out and "RotRNN step / LRU step" in out and "minGRU layer scan share" in out


def test_default_run_fills_the_speedup_column_and_keeps_to_its_budget(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """No ``repeats``, no ``full``: the printed speed-up column has a number in every row, and a
    spent budget stops the timed rounds after the first."""
    monkeypatch.setattr(models_bench, "DEFAULT_BUDGET_S", 0.0)
    result = run_bench(lengths=(32,), batch=2, channels=8, layer_config=TINY, tune_alloc=False,
                       copy_bytes=1 << 20, verbose=False)
    assert {r["rounds"] for r in result["layers"]} == {1}
    out = capsys.readouterr().out
    table = out[out.index("Layers"):out.index("scan ms =")]
    rows = [line for line in table.splitlines() if line.startswith("│")]
    assert len(rows) == len(result["layers"]) > 0
    assert all(re.search(r"\d\.\d×\s*│$", line.rstrip()) for line in rows), table


def test_a_budget_left_runs_every_round(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(models_bench, "DEFAULT_BUDGET_S", 1e6)
    result = run_bench(lengths=(32,), batch=2, channels=8, layer_config=TINY, tune_alloc=False,
                       copy_bytes=1 << 20, verbose=False, print_tables=False)
    assert {r["rounds"] for r in result["layers"]} == {3}
