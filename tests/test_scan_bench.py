"""The scan benchmark runs end to end on tiny inputs and reports what it promises."""

from __future__ import annotations

import pytest

from ablate.bench import run_bench


def test_run_bench_smoke(capsys: pytest.CaptureFixture[str]) -> None:
    result = run_bench(
        lengths=(32,),
        batch=2,
        channels=8,
        repeats=1,
        layer_config={"seq_len": 16, "batch": 2, "d_model": 8, "state": 8, "layers": 1},
        tune_alloc=False,
        copy_bytes=1 << 20,
        verbose=False,
    )
    rows = result["scans"]
    assert {r["kind"] for r in rows} == {"real", "complex", "log"}
    assert {r["backend"] for r in rows} >= {"torch loop", "torch cumsum"}
    assert all(r["fwd_ms"] > 0 and r["fb_x_bound"] > 0 for r in rows)
    assert result["bandwidth_gbs"]["median"] > 0
    if "layers" in result:  # the model zoo imported
        assert {r["model"] for r in result["layers"]} == {"minGRU", "LRU", "RotRNN"}
    out = capsys.readouterr().out
    assert "copy bandwidth" in out and "×bound" in out
