"""``ablate bench``: the scan benchmark of ``ablate.ops.bench``, then whole layers and training steps.

    run_bench()               prints the tables and returns their rows
    python -m ablate.models.bench

1. Scans (``ablate.ops.bench``): kernels vs the per-step loop and the memory-bandwidth bound.
2. One recurrent layer, forward+backward, compiled vs reference scan (minGRU, LRU, RotRNN).
3. A training step of a 4-layer model: the step time split into scan and rest, per backend.

"Rest" is the same step with the scan replaced by ``b + 0*a`` (``ablate.ops.bench.scans_stubbed``),
so scan time = step time - rest; it needs no profiler and is the same for every backend. Every
variant of a workload is timed in turn within each round, so machine load hits them alike.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F

from ablate.models.network import Network, build_model
from ablate.ops import scan as scan_mod
from ablate.ops.bench import console, forced_backend, print_scans, run_scans, scans_stubbed, time_interleaved
from ablate.spec import ModelSpec
from ablate.tasks.base import TaskInfo

LAYER_SPECS: dict[str, dict[str, Any]] = {
    "minGRU": {"family": "mingru"},
    "LRU": {
        "family": "linear_rnn",
        "parameterisation": "complex_diagonal",
        "normalisation": "gamma",
        "init": {"scheme": "ring"},
    },
    "RotRNN": {"family": "linear_rnn", "parameterisation": "rotation"},
}


@dataclass
class StepRow:
    what: str  # "layer" (one recurrent layer fwd+bwd) or "step" (a training step of the model)
    model: str
    backend: str
    ms: float
    scan_ms: float
    rest_ms: float
    scan_share: float
    speedup: float  # over the reference backend


def _build(model: str, d_model: int, state: int, layers: int, L: int, device: torch.device) -> Network:
    task = TaskInfo(
        name="bench", input_kind="tokens", vocab_size=64, input_dim=1, num_classes=64,
        output_kind="per_step", metric="bpc", chance=6.0, seq_len=L, data_version="bench",
    )  # fmt: skip
    spec = ModelSpec(d_model=d_model, state_dim=state, layers=layers, **LAYER_SPECS[model])
    torch.manual_seed(0)
    return build_model(spec, task).to(device)


def _model_workloads(
    model_name: str, seq_len: int, batch: int, d_model: int, state: int, layers: int, device: torch.device
) -> dict[str, Callable[[], None]]:
    """{"layer": one recurrent layer fwd+bwd, "step": a training step of the whole model}."""
    net = _build(model_name, d_model, state, layers, seq_len, device)
    layer = net.recurrent_layers()[0]
    u = torch.randn(batch, seq_len, d_model, device=device, requires_grad=True)
    gy = torch.randn(batch, seq_len, d_model, device=device)
    x = torch.randint(1, 64, (batch, seq_len), device=device)
    y = torch.randint(1, 64, (batch, seq_len), device=device)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)

    def layer_fwd_bwd() -> None:
        layer(u).backward(gy)

    def train_step() -> None:
        opt.zero_grad(set_to_none=True)
        logits = net(x)
        F.cross_entropy(logits.flatten(0, 1), y.flatten()).backward()
        opt.step()

    return {"layer": layer_fwd_bwd, "step": train_step}


def bench_layers(
    seq_len: int,
    batch: int,
    d_model: int,
    state: int,
    layers: int,
    device: torch.device,
    repeats: int,
    log: Callable[[str], None],
) -> list[StepRow]:
    compiled = [n for n in scan_mod.available_backends(device) if n != "torch"]
    variants: dict[str, Callable[[], contextlib.AbstractContextManager]] = {"rest": scans_stubbed}
    for name in [*compiled, "torch"]:
        variants[name] = lambda name=name: forced_backend(name)
    rows = []
    for model_name in LAYER_SPECS:
        workloads = _model_workloads(model_name, seq_len, batch, d_model, state, layers, device)
        for what, fn in workloads.items():
            log(f"  {what:5s} {model_name}")
            ms = time_interleaved(fn, variants, repeats, device)
            rest = ms.pop("rest")
            for name, t in ms.items():
                scan_t = max(t - rest, 0.0)
                rows.append(StepRow(what, model_name, name, t, scan_t, rest, scan_t / t, ms["torch"] / t))
    return rows


def print_layers(result: dict[str, Any], out: Any) -> None:
    """The layer and training-step table of ``run_bench``'s result (or why it was skipped)."""
    from rich.table import Table

    if result.get("layers"):
        lc = result["layer_config"]
        t = Table(
            title=(
                f"Layers (one recurrent layer fwd+bwd) and training steps of a {lc['layers']}-layer "
                f"model, d_model {lc['d_model']}, state {lc['state']}, L={lc['seq_len']}, "
                f"batch {lc['batch']}"
            ),
            title_justify="left",
        )
        for col in ("what", "model", "backend", "ms", "scan ms", "rest ms", "scan share", "speedup"):
            t.add_column(col, justify="left" if col in ("what", "model", "backend") else "right")
        for r in result["layers"]:
            t.add_row(
                r["what"], r["model"], r["backend"], f"{r['ms']:.1f}", f"{r['scan_ms']:.1f}",
                f"{r['rest_ms']:.1f}", f"{100 * r['scan_share']:.0f}%", f"{r['speedup']:.1f}×",
            )  # fmt: skip
        out.print(t)
        out.print("scan ms = step ms − rest ms, rest = the same step with the scan replaced by b + 0·a.")
    elif result.get("layers_error"):
        out.print(f"[yellow]layer benchmark skipped: {result['layers_error']}[/yellow]")


def run_bench(
    lengths: tuple[int, ...] = (256, 1024, 4096, 16384),
    batch: int = 16,
    channels: int = 256,
    kinds: tuple[str, ...] = ("real", "complex", "log"),
    repeats: int = 5,
    layers: bool = True,
    layer_config: dict[str, int] | None = None,
    device: str = "cpu",
    tune_alloc: bool = True,
    copy_bytes: int | None = None,
    verbose: bool = True,
    print_tables: bool = True,
) -> dict[str, Any]:
    """Run the scan, layer and step benchmarks; print and return.

    ``layer_config`` overrides seq_len=1024, batch=32, d_model=128, state=128, layers=4.
    ``copy_bytes`` sizes the bandwidth probe (default: one scan input at L=4096, at least 64 MB).
    """
    dev = torch.device(device)

    def log(msg: str) -> None:
        if verbose:
            print(msg, flush=True)

    result = run_scans(lengths, batch, channels, kinds, repeats, device, tune_alloc, copy_bytes, log)
    if layers:
        lc = {"seq_len": 1024, "batch": 32, "d_model": 128, "state": 128, "layers": 4}
        lc.update(layer_config or {})
        result["layer_config"] = lc
        try:
            rows = bench_layers(device=dev, repeats=repeats, log=log, **lc)
            result["layers"] = [asdict(r) for r in rows]
        except Exception as exc:  # a layer that fails to build or run: keep the scan table
            result["layers_error"] = f"{type(exc).__name__}: {exc}"
        result["load_average"] = max(result["load_average"], os.getloadavg()[0])
    if print_tables:
        out = console()
        print_scans(result, out)
        print_layers(result, out)
    return result


if __name__ == "__main__":
    run_bench()
