"""``ablate bench`` (ablate.models.bench) runs end to end on tiny inputs: the scan table, then one
layer and one training step per model and backend, split into scan and rest."""

from __future__ import annotations

import math

import pytest
from typer.testing import CliRunner

from ablate.cli import app
from ablate.models.bench import LAYER_SPECS, run_bench
from ablate.ops import scan as scan_mod

TINY = {"seq_len": 16, "batch": 2, "d_model": 8, "state": 64, "layers": 1}  # 32 heads of 2


@pytest.mark.parametrize("full", [False, True])
def test_run_bench_smoke(capsys: pytest.CaptureFixture[str], full: bool) -> None:
    result = run_bench(lengths=(32,), batch=2, channels=8, repeats=1, layer_config=TINY, tune_alloc=False,
                       copy_bytes=1 << 20, verbose=False, full=full)
    assert {r["kind"] for r in result["scans"]} == {"real", "complex", "log"}
    assert "layers_error" not in result, result.get("layers_error")
    rows = result["layers"]
    compiled = set(scan_mod.available_backends("cpu")) - {"torch"}
    backends = compiled | ({"torch"} if full or not compiled else set())
    assert {(r["what"], r["model"], r["backend"]) for r in rows} == {
        (w, m, b) for w in ("layer", "step") for m in LAYER_SPECS for b in backends}
    for r in rows:
        assert r["ms"] > 0 and r["rest_ms"] > 0 and 0 <= r["scan_share"] < 1
        assert r["scan_ms"] + r["rest_ms"] == pytest.approx(r["ms"]) if r["backend"] in compiled else True
        if r["backend"] in compiled:
            assert r["scan_ms"] > 0  # the kernels were timed inside the step, not estimated
        assert (r["vs_lru"] == 1.0) == (r["model"] == "LRU")
        assert math.isnan(r["speedup"]) != ("torch" in backends)
    out = capsys.readouterr().out
    assert "copy bandwidth" in out and "×bound" in out and "×loop" in out and "GB/s" in out
    assert "scan share" in out and "RotRNN step / LRU step" in out and "minGRU layer scan share" in out


def test_bench_command_without_layers_prints_the_scan_table_only() -> None:
    res = CliRunner().invoke(app, ["bench", "--lengths", "16", "--repeats", "1", "--no-layers"])
    assert res.exit_code == 0, res.output
    assert "copy bandwidth" in res.output and "Layers" not in res.output
