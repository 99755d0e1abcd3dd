"""The scan benchmark of ``harness.ops``, then whole layers and training steps (benchmarks/bench_scan.py).

    run_bench()               prints the tables and returns their rows (under a minute on a busy
                              2-core machine: L=1024, a 2-layer model at L=512, rounds within a budget)
    run_bench(full=True)      the longer sweep: four lengths, 5 rounds, a 4-layer model at L=1024
    python benchmarks/bench_scan.py [--full]

1. Scans (``harness.ops``): kernels vs the per-step loop and the memory-bandwidth bound.
2. One recurrent layer, forward+backward, per model (minGRU, LRU, RotRNN at heads 1, 4 and 32).
3. A training step of a 4-layer model of each.

The scan time of a layer or step is the compiled kernels' own time inside it
(``harness.ops.scans_timed``: every forward and backward kernel call timed), so scan share =
kernel time / step time and rest = step − kernel time, with no profiler. The torch reference
(the per-step loop; the cumsum form for minGRU's log scan) is timed too, for the speed-up column;
its scan time is its step time minus that rest. Without a compiled backend the rest is the step
with the scans stubbed (``b + 0*a``). Every model and variant is timed in turn within each round,
so machine load hits them alike and the ×LRU ratios are side by side.

Time: the default run is sized for ~15 s of CPU and stops adding timed rounds (at least one,
at most ``repeats``) once ``DEFAULT_BUDGET_S`` have passed since it started, so that a machine
whose cores other processes share still finishes it within a minute; more rounds only steady
the medians. An explicit ``repeats`` or ``full`` runs every round.
"""

from __future__ import annotations

import contextlib
import math
import os
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F

from ablate.models.network import Network, build_model
from ablate.ops import scan as scan_mod
from ablate.spec import ModelSpec
from ablate.tasks.data import TaskInfo
from harness.ops import (
    ScanClock,
    console,
    forced_backend,
    print_scans,
    run_scans,
    scans_stubbed,
    scans_timed,
)

ROTRNN = {"family": "linear_rnn", "parameterisation": "rotation"}
LAYER_SPECS: dict[str, dict[str, Any]] = {
    "minGRU": {"family": "mingru"},
    "LRU": {
        "family": "linear_rnn",
        "parameterisation": "complex_diagonal",
        "normalisation": "gamma",
        "init": {"scheme": "ring"},
    },
    "RotRNN": ROTRNN,  # heads = 1: one 128 × 128 basis per layer
    "RotRNN h=4": {**ROTRNN, "heads": 4},
    "RotRNN h=32": {**ROTRNN, "heads": 32},
}
DEFAULT_LENGTHS = (1024,)
FULL_LENGTHS = (256, 1024, 4096, 16384)
DEFAULT_LAYER_CONFIG = {"seq_len": 512, "batch": 8, "d_model": 128, "state": 128, "layers": 2}
FULL_LAYER_CONFIG = {"seq_len": 1024, "batch": 32, "d_model": 128, "state": 128, "layers": 4}
DEFAULT_BUDGET_S = 30.0  # seconds from the start after which the default run times no further round


@dataclass
class StepRow:
    what: str  # "layer" (one recurrent layer fwd+bwd) or "step" (a training step of the model)
    model: str
    backend: str
    ms: float
    scan_ms: float
    rest_ms: float
    scan_share: float
    speedup: float  # over the torch reference backend; nan where it was not run
    vs_lru: float  # ms / the LRU's ms for the same what and backend
    rounds: int  # timed rounds the medians are over


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


@contextlib.contextmanager
def _timed_backend(name: str, clock: ScanClock) -> Iterator[None]:
    with forced_backend(name), scans_timed(clock):
        yield


def bench_layers(
    seq_len: int,
    batch: int,
    d_model: int,
    state: int,
    layers: int,
    device: torch.device,
    repeats: int,
    log: Callable[[str], None],
    reference: bool = False,
    models: tuple[str, ...] = tuple(LAYER_SPECS),
    deadline: float | None = None,
) -> list[StepRow]:
    """Layer and step rows for every model; ``reference`` adds the torch backend (slow on CPU).
    ``deadline`` (a ``time.perf_counter`` value): no timed round starts after it, though the
    first always runs."""
    compiled = [n for n in scan_mod.available_backends(device) if n != "torch"]
    clock = ScanClock(device)
    variants: dict[str, Callable[[], contextlib.AbstractContextManager]] = {}
    for name in compiled:
        variants[name] = lambda name=name: _timed_backend(name, clock)
    if reference or not compiled:
        variants["torch"] = lambda: forced_backend("torch")
    if not compiled:  # nothing to time the kernels of: the rest is the stubbed step
        variants["rest"] = scans_stubbed
    log(f"  building {len(models)} models")
    workloads = {(what, m): fn for m in models
                 for what, fn in _model_workloads(m, seq_len, batch, d_model, state, layers, device).items()}
    totals: dict[tuple[str, str, str], list[float]] = {}
    scans: dict[tuple[str, str, str], list[float]] = {}
    rounds = 0
    for r in range(repeats + 1):  # round 0 warms up (numba dispatch, allocator, caches)
        if r > 1 and deadline is not None and time.perf_counter() > deadline:
            break
        log(f"  round {r}/{repeats}" + (" (warm-up)" if r == 0 else ""))
        for (what, model), fn in workloads.items():
            for name, ctx in variants.items():
                if r == 0 and name == "torch" and compiled:
                    # The reference loads no compiled code, and the compiled variants' warm-up
                    # of the same shapes has warmed the allocator: its warm-up would only cost.
                    continue
                with ctx():
                    clock.take_ms()
                    t0 = time.perf_counter()
                    fn()
                    if device.type == "cuda":
                        torch.cuda.synchronize(device)
                    ms = 1e3 * (time.perf_counter() - t0)
                    kernel = clock.take_ms()
                if r:
                    totals.setdefault((what, model, name), []).append(ms)
                    scans.setdefault((what, model, name), []).append(kernel)
        rounds = r
    rows = []
    for (what, model) in workloads:
        med = {name: statistics.median(totals[(what, model, name)]) for name in variants}
        if compiled:
            first = compiled[0]
            rest = statistics.median(t - k for t, k in zip(totals[(what, model, first)],
                                                            scans[(what, model, first)], strict=True))
        else:
            rest = med.pop("rest")
        for name, t in med.items():
            scan_t = statistics.median(scans[(what, model, name)]) if name in compiled else max(t - rest, 0.0)
            row_rest = t - scan_t if name in compiled else rest
            speedup = med["torch"] / t if "torch" in med else math.nan
            rows.append(StepRow(what, model, name, t, scan_t, row_rest, scan_t / t, speedup, math.nan, rounds))
    lru = {(r.what, r.backend): r.ms for r in rows if r.model == "LRU"}
    for row in rows:
        row.vs_lru = row.ms / lru[(row.what, row.backend)] if (row.what, row.backend) in lru else math.nan
    return rows


def _fmt(x: float, spec: str, unit: str = "") -> str:
    return "–" if math.isnan(x) else f"{x:{spec}}{unit}"


def print_layers(result: dict[str, Any], out: Any) -> None:
    """The layer and training-step table of ``run_bench``'s result (or why it was skipped)."""
    from rich.table import Table

    if result.get("layers"):
        lc = result["layer_config"]
        t = Table(
            title=(
                f"Layers (one recurrent layer fwd+bwd) and training steps of a {lc['layers']}-layer "
                f"model, d_model {lc['d_model']}, state {lc['state']}, L={lc['seq_len']}, "
                f"batch {lc['batch']}; {result['layers'][0]['rounds']} timed rounds; load average "
                f"{result['load_average']:.1f}"
            ),
            title_justify="left",
        )
        for col in ("what", "model", "backend", "ms", "scan ms", "rest ms", "scan share", "×LRU", "speedup"):
            t.add_column(col, justify="left" if col in ("what", "model", "backend") else "right")
        for r in result["layers"]:
            t.add_row(
                r["what"], r["model"], r["backend"], f"{r['ms']:.1f}", f"{r['scan_ms']:.1f}",
                f"{r['rest_ms']:.1f}", f"{100 * r['scan_share']:.0f}%", _fmt(r["vs_lru"], ".2f", "×"),
                _fmt(r["speedup"], ".1f", "×"),
            )  # fmt: skip
        out.print(t)
        out.print(
            "scan ms = the scan kernels' own time inside the layer or step (every forward and backward "
            "call timed); rest ms = ms − scan ms; ×LRU = ms / the LRU's, measured in the same rounds; "
            "speedup = the torch reference backend's ms / this backend's (the per-step loop; the "
            "cumsum form for minGRU)."
        )
        for line in _targets(result["layers"]):
            out.print(line)
    elif result.get("layers_error"):
        out.print(f"[yellow]layer benchmark skipped: {result['layers_error']}[/yellow]")


def _targets(rows: list[dict[str, Any]]) -> list[str]:
    """Issue 19's targets, read off the rows of the first compiled backend."""
    backend = rows[0]["backend"]
    mine = [r for r in rows if r["backend"] == backend]
    steps = [f"{r['model'].removeprefix('RotRNN').strip() or 'h=1'} {r['vs_lru']:.2f}×"
             for r in mine if r["what"] == "step" and r["model"].startswith("RotRNN")]
    share = [f"{100 * r['scan_share']:.0f}%" for r in mine if r["what"] == "layer" and r["model"] == "minGRU"]
    lines = []
    if steps:
        lines.append(f"RotRNN step / LRU step ({backend}; target ≤ 1.3×): " + ", ".join(steps))
    if share:
        lines.append(f"minGRU layer scan share ({backend}; target ≤ 20%): {share[0]}")
    return lines


def run_bench(
    lengths: tuple[int, ...] | None = None,
    batch: int = 16,
    channels: int = 256,
    kinds: tuple[str, ...] = ("real", "complex", "log"),
    repeats: int | None = None,
    layers: bool = True,
    layer_config: dict[str, int] | None = None,
    device: str = "cpu",
    tune_alloc: bool = True,
    copy_bytes: int | None = None,
    verbose: bool = True,
    print_tables: bool = True,
    full: bool = False,
) -> dict[str, Any]:
    """Run the scan, layer and step benchmarks; print and return.

    Default: length 1024, one timing of the scans' torch reference, the layer table at
    ``DEFAULT_LAYER_CONFIG`` with up to 3 timed rounds within ``DEFAULT_BUDGET_S`` (under a minute
    on 2 busy CPU cores). ``full``: lengths 256 … 16384, 5 rounds, ``FULL_LAYER_CONFIG``.
    ``layer_config`` overrides the layer table's sizes. ``copy_bytes`` sizes the bandwidth probe
    (default: one scan input at L=4096, at least 64 MB). The torch reference is in the layer
    table either way, so its speed-up column is filled.
    """
    dev = torch.device(device)
    lengths = lengths or (FULL_LENGTHS if full else DEFAULT_LENGTHS)
    budgeted = repeats is None and not full  # a count the caller asked for is run in full
    repeats = repeats or (5 if full else 3)

    def log(msg: str) -> None:
        if verbose:
            print(msg, flush=True)

    started = time.perf_counter()
    result = run_scans(lengths, batch, channels, kinds, repeats, device, tune_alloc, copy_bytes, log,
                       reference_repeats=1 if budgeted else None)
    if layers:
        lc = {**(FULL_LAYER_CONFIG if full else DEFAULT_LAYER_CONFIG), **(layer_config or {})}
        result["layer_config"] = lc
        deadline = started + DEFAULT_BUDGET_S if budgeted else None
        try:
            rows = bench_layers(device=dev, repeats=repeats, log=log, reference=True, deadline=deadline, **lc)
            result["layers"] = [asdict(r) for r in rows]
        except Exception as exc:  # a layer that fails to build or run: keep the scan table
            result["layers_error"] = f"{type(exc).__name__}: {exc}"
        result["load_average"] = max(result["load_average"], os.getloadavg()[0])
    result["seconds"] = time.perf_counter() - started
    if print_tables:
        out = console()
        print_scans(result, out)
        print_layers(result, out)
        out.print(f"the benchmark took {result['seconds']:.0f} s" + ("" if full else " (--full: the longer sweep)"))
    return result


