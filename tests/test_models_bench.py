"""``ablate bench`` (ablate.models.bench) runs end to end on tiny inputs: the scan table, then one
layer and one training step per model and backend, split into scan and rest."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from ablate.cli import app
from ablate.models.bench import LAYER_SPECS, run_bench
from ablate.ops import scan as scan_mod

TINY = {"seq_len": 16, "batch": 2, "d_model": 8, "state": 8, "layers": 1}


def test_run_bench_smoke(capsys: pytest.CaptureFixture[str]) -> None:
    result = run_bench(lengths=(32,), batch=2, channels=8, repeats=1, layer_config=TINY, tune_alloc=False,
                       copy_bytes=1 << 20, verbose=False)
    assert {r["kind"] for r in result["scans"]} == {"real", "complex", "log"}
    assert "layers_error" not in result, result.get("layers_error")
    rows = result["layers"]
    backends = {"torch", *scan_mod.available_backends("cpu")}
    assert {(r["what"], r["model"], r["backend"]) for r in rows} == {
        (w, m, b) for w in ("layer", "step") for m in LAYER_SPECS for b in backends}
    for r in rows:
        assert r["ms"] > 0 and r["rest_ms"] > 0 and r["scan_ms"] == pytest.approx(max(r["ms"] - r["rest_ms"], 0))
    out = capsys.readouterr().out
    assert "copy bandwidth" in out and "×bound" in out and "scan ms = step ms − rest ms" in out


def test_bench_command_without_layers_prints_the_scan_table_only() -> None:
    res = CliRunner().invoke(app, ["bench", "--lengths", "16", "--repeats", "1", "--no-layers"])
    assert res.exit_code == 0, res.output
    assert "copy bandwidth" in res.output and "Layers" not in res.output
