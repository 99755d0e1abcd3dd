"""Scan benchmarks, measured side by side in one process on the same inputs.

    bench_scans(...)   ms and effective GB/s per backend for the real, complex and log-space scans at
                       several lengths; the ratio to the bandwidth bound (minimum bytes / the copy
                       bandwidth measured in this process, interleaved with the timings); the
                       speedup over the per-step torch loop
    print_scans(...)   their table

and the timing tools the layer and training-step benchmarks (``harness.models``, which
``benchmarks/bench_scan.py`` runs) share: ``time_ms``, ``time_interleaved``, ``forced_backend``,
``ScanClock`` / ``scans_timed`` (the compiled scan kernels' own time inside a step: every forward
and backward kernel call timed where it runs, by CUDA events on a GPU, so nothing is synchronised
that the step would not) and ``scans_stubbed`` (every scan replaced by ``b + 0*a``: same shapes,
same graph, so scan time = step time − stubbed time where no compiled kernel can be timed; the
stub's own elementwise passes make that an underestimate).

Allocator: tensors of 32 MB and more are mmap'ed fresh by glibc and pay a page fault per 4 KB
page on first touch, every call (a 64 MB clone took 64 ms instead of 11 ms here). ``tune_allocator``
therefore calls ``mallopt(M_MMAP_MAX=0, M_TRIM_THRESHOLD=1 TiB)`` in-process, which makes glibc
serve large blocks from the heap and keep freed ones, so the outputs and gradients each scan
allocates reuse warm pages. The same effect from the shell: MALLOC_MMAP_MAX_=0
MALLOC_TRIM_THRESHOLD_=1099511627776. The copy used for the bandwidth reuses its two buffers.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import os
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

import torch

from ablate.ops import scan as scan_mod

# Minimum bytes per element: forward reads a, b and writes h; backward reads grad_h, a, h and
# writes grad_a, grad_b. The log scan's backward also reads log_b. Complex elements are twice
# the size of real ones.
BYTES_PER_ELEM = {  # (forward, forward + backward) in units of the real element size
    "real": (3, 8),
    "complex": (6, 16),
    "log": (3, 9),
}

_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4  # from glibc's malloc.h


def tune_allocator() -> str:
    """Keep large freed blocks in glibc's heap (see module docstring); returns what was done."""
    if os.environ.get("MALLOC_MMAP_MAX_") == "0":
        return "MALLOC_MMAP_MAX_=0 from the environment"
    try:
        libc = ctypes.CDLL("libc.so.6")
        ok = libc.mallopt(_M_MMAP_MAX, 0) == 1 and libc.mallopt(_M_TRIM_THRESHOLD, 1 << 40) == 1
    except (OSError, AttributeError):
        ok = False
    if ok:
        return "glibc mallopt(M_MMAP_MAX=0, M_TRIM_THRESHOLD=1 TiB) set in-process"
    return "default allocator (mallopt unavailable): large allocations may pay page faults"


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_ms(fn: Callable[[], Any], repeats: int, device: torch.device, warmup: int = 1) -> float:
    """Median wall time of ``fn`` in ms (median: other processes share this machine)."""
    for _ in range(warmup):
        fn()
    _sync(device)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


class Bandwidth:
    """Copy bandwidth of this process, sampled between timings; buffers allocated once."""

    def __init__(self, nbytes: int, device: torch.device):
        self.src = torch.ones(nbytes // 4, device=device)
        self.dst = torch.empty_like(self.src)
        self.device = device
        self.samples: list[float] = []

    def sample(self, repeats: int = 5) -> float:
        ms = time_ms(lambda: self.dst.copy_(self.src), repeats, self.device)
        gbs = 2 * self.src.numel() * 4 / ms / 1e6  # read + write
        self.samples.append(gbs)
        return gbs

    @property
    def gbs(self) -> float:
        return statistics.median(self.samples)


# --- scans ---------------------------------------------------------------------------------------


@dataclass
class ScanRow:
    kind: str
    length: int
    backend: str
    fwd_ms: float
    fb_ms: float
    fwd_gbs: float
    fb_gbs: float
    fwd_x_bound: float  # time / (min bytes / bandwidth): 1.0 is the memory-bandwidth limit
    fb_x_bound: float
    fwd_speedup: float  # over the per-step loop (log scan: over torch's cumsum form)
    fb_speedup: float


def _scan_inputs(kind: str, B: int, L: int, D: int, device: torch.device) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(0)
    if kind == "log":
        log_a = torch.nn.functional.logsigmoid(torch.randn(B, L, D, generator=g) + 2)
        return log_a.to(device), (torch.randn(B, L, D, generator=g) - 1).to(device)
    r = 0.5 + 0.5 * torch.rand(B, L, D, generator=g)
    if kind == "complex":
        a = torch.polar(r, 6.283 * torch.rand(B, L, D, generator=g))
        return a.to(device), torch.randn(B, L, D, dtype=torch.complex64, generator=g).to(device)
    return r.to(device), torch.randn(B, L, D, generator=g).to(device)


def _scan_fns(
    kind: str, backend: str, a: torch.Tensor, b: torch.Tensor
) -> tuple[Callable[[], Any], Callable[[], Any]]:
    scan = scan_mod.log_scan if kind == "log" else scan_mod.linear_scan
    leaves = (a.detach().requires_grad_(), b.detach().requires_grad_())
    grad = torch.ones_like(b)

    def fwd() -> Any:
        with torch.no_grad():
            return scan(a, b, backend=backend)

    def fwd_bwd() -> Any:
        return torch.autograd.grad(scan(*leaves, backend=backend), leaves, grad)

    return fwd, fwd_bwd


def bench_scans(
    lengths: tuple[int, ...],
    batch: int,
    channels: int,
    kinds: tuple[str, ...],
    device: torch.device,
    bandwidth: Bandwidth,
    repeats: int,
    log: Callable[[str], None],
    reference_repeats: int | None = None,
) -> list[ScanRow]:
    """Rows per kind, length and backend. ``reference_repeats``: timings of the torch reference
    (no warm-up call: it has no compiled code to load); None: ``repeats`` after a warm-up, fewer
    at L ≥ 4096 where the loop is slow."""
    backends = [n for n in scan_mod.available_backends(device) if n != "torch"]
    rows = []
    for kind in kinds:
        for L in lengths:
            a, b = _scan_inputs(kind, batch, L, channels, device)
            elems = batch * L * channels
            unit = 4  # fp32 bytes; complex counts double in BYTES_PER_ELEM
            timings: dict[str, tuple[float, float]] = {}
            for name in ["torch", *backends]:
                log(f"  {kind:7s} L={L:<6d} {name}")
                fwd, fwd_bwd = _scan_fns(kind, name, a, b)
                n, warmup = repeats, 1
                if name == "torch" and reference_repeats is not None:
                    n, warmup = reference_repeats, 0
                elif name == "torch" and L >= 4096:  # the reference loop is slow at long L
                    n = max(2, repeats // 2)
                bandwidth.sample()
                timings[name] = (time_ms(fwd, n, device, warmup), time_ms(fwd_bwd, n, device, warmup))
            bandwidth.sample()
            for name, (f_ms, fb_ms) in timings.items():
                f_bytes, fb_bytes = (unit * k * elems for k in BYTES_PER_ELEM[kind])
                bound_f, bound_fb = (x / bandwidth.gbs / 1e6 for x in (f_bytes, fb_bytes))
                ref_f, ref_fb = timings["torch"]
                rows.append(
                    ScanRow(
                        kind, L, _label(kind, name), f_ms, fb_ms,
                        f_bytes / f_ms / 1e6, fb_bytes / fb_ms / 1e6,
                        f_ms / bound_f, fb_ms / bound_fb, ref_f / f_ms, ref_fb / fb_ms,
                    )
                )  # fmt: skip
            del a, b
    return rows


def _label(kind: str, backend: str) -> str:
    if backend == "torch":
        return "torch cumsum" if kind == "log" else "torch loop"
    return backend


# --- timing the layers and training steps with and without the scans ---------------------------


@contextlib.contextmanager
def forced_backend(name: str) -> Iterator[None]:
    """Every scan in the block runs on ``name`` (the models call the scans without a backend)."""
    old = os.environ.get(scan_mod.ENV_VAR)
    os.environ[scan_mod.ENV_VAR] = name
    try:
        yield
    finally:
        if old is None:
            del os.environ[scan_mod.ENV_VAR]
        else:
            os.environ[scan_mod.ENV_VAR] = old


KERNEL_ENTRIES = ("linear_forward", "linear_backward", "log_forward", "log_backward")


class ScanClock:
    """Accumulates the time of the compiled scan kernel calls made while ``scans_timed`` is on."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._seconds = 0.0
        self._events: list[tuple[Any, Any]] = []

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            if self.device.type == "cuda":
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                out = fn(*args, **kwargs)
                end.record()
                self._events.append((start, end))
                return out
            t0 = time.perf_counter()
            out = fn(*args, **kwargs)
            self._seconds += time.perf_counter() - t0
            return out

        return timed

    def take_ms(self) -> float:
        """Milliseconds in scan kernels since the last call (waits for the device's events)."""
        _sync(self.device)
        ms = 1e3 * self._seconds + sum(s.elapsed_time(e) for s, e in self._events)
        self._seconds, self._events = 0.0, []
        return ms


@contextlib.contextmanager
def scans_timed(clock: ScanClock) -> Iterator[ScanClock]:
    """Every compiled backend's kernel entries (forward and backward, linear and log) timed into
    ``clock`` for the block; the autograd Functions call them through their module, so wrapping
    the module's attributes reaches every call, and the originals come back afterwards."""
    saved: list[tuple[Any, str, Any]] = []
    for name in scan_mod.available_backends(clock.device):
        if name == "torch":
            continue
        module = importlib.import_module(f"ablate.ops.scan_{name}")
        for entry in KERNEL_ENTRIES:
            saved.append((module, entry, getattr(module, entry)))
            setattr(module, entry, clock.wrap(getattr(module, entry)))
    try:
        yield clock
    finally:
        for module, entry, fn in saved:
            setattr(module, entry, fn)


@contextlib.contextmanager
def scans_stubbed() -> Iterator[None]:
    """Scans replaced by ``b + 0*a``: the cost of everything but the scan, graph intact."""
    saved = scan_mod.linear_scan_reference, scan_mod.log_scan_reference
    scan_mod.linear_scan_reference = lambda a, b, h0=None: b + 0 * a
    scan_mod.log_scan_reference = lambda la, lb, lh0=None: lb + 0 * la
    try:
        with forced_backend("torch"):
            yield
    finally:
        scan_mod.linear_scan_reference, scan_mod.log_scan_reference = saved


def time_interleaved(
    fn: Callable[[], Any],
    variants: dict[str, Callable[[], contextlib.AbstractContextManager]],
    repeats: int,
    device: torch.device,
) -> dict[str, float]:
    """Median ms of ``fn`` under each variant's context, the variants taking turns each round so
    that a change in machine load hits them all alike."""
    times: dict[str, list[float]] = {k: [] for k in variants}
    for r in range(repeats + 1):  # round 0 warms up
        for name, ctx in variants.items():
            with ctx():
                t0 = time.perf_counter()
                fn()
                _sync(device)
                if r:
                    times[name].append(1e3 * (time.perf_counter() - t0))
    return {k: statistics.median(v) for k, v in times.items()}


# --- printing ------------------------------------------------------------------------------------


def console() -> Any:
    """A rich console; 170 columns when piped or captured (rich would wrap at 80)."""
    from rich.console import Console

    out = Console()
    return out if out.is_terminal else Console(width=170)


def print_scans(result: dict[str, Any], out: Any) -> None:
    """The scan table of ``run_bench``'s result (keys: device, threads, load_average, allocator,
    batch, channels, bandwidth_gbs, scans)."""
    from rich.table import Table

    bw = result["bandwidth_gbs"]
    t = Table(
        title=(
            f"Scans, B={result['batch']} D={result['channels']}, {result['device']}, "
            f"{result['threads']} threads, load average {result['load_average']:.1f}; copy bandwidth "
            f"{bw['median']:.1f} GB/s (min {bw['min']:.1f}, max {bw['max']:.1f}); {result['allocator']}"
        ),
        title_justify="left",
    )
    for col in ("kind", "L", "backend", "fwd ms", "fwd GB/s", "fwd ×bound", "f+b ms", "f+b GB/s",
                "f+b ×bound", "fwd ×loop", "f+b ×loop"):  # fmt: skip
        t.add_column(col, justify="left" if col in ("kind", "backend") else "right")
    for r in result["scans"]:
        t.add_row(
            r["kind"], str(r["length"]), r["backend"],
            f"{r['fwd_ms']:.1f}", f"{r['fwd_gbs']:.1f}", f"{r['fwd_x_bound']:.2f}",
            f"{r['fb_ms']:.1f}", f"{r['fb_gbs']:.1f}", f"{r['fb_x_bound']:.2f}",
            f"{r['fwd_speedup']:.1f}×", f"{r['fb_speedup']:.1f}×",
        )  # fmt: skip
    out.print(t)
    out.print(
        "×bound = time / (minimum bytes / copy bandwidth); minimum bytes per element: "
        "real 12 fwd, 32 fwd+bwd; complex64 24, 64; log 12, 36. ×loop = the torch reference's time / "
        "this backend's (the per-step loop; the cumsum form for the log scan)."
    )


def run_scans(
    lengths: tuple[int, ...] = (256, 1024, 4096, 16384),
    batch: int = 16,
    channels: int = 256,
    kinds: tuple[str, ...] = ("real", "complex", "log"),
    repeats: int = 5,
    device: str = "cpu",
    tune_alloc: bool = True,
    copy_bytes: int | None = None,
    log: Callable[[str], None] = print,
    reference_repeats: int | None = None,
) -> dict[str, Any]:
    """The scan benchmark with its conditions (device, threads, load, allocator, copy bandwidth),
    as ``print_scans`` reads it. ``copy_bytes`` sizes the bandwidth probe (default: one scan input
    at L=4096, at least 64 MB); ``reference_repeats`` as in ``bench_scans``."""
    dev = torch.device(device)
    allocator = tune_allocator() if tune_alloc else "default allocator"
    threads = torch.get_num_threads()
    with contextlib.suppress(ImportError):
        import numba

        threads = numba.get_num_threads()
    # Bandwidth buffers as large as one scan input at L=4096: far beyond the caches.
    bandwidth = Bandwidth(copy_bytes or max(batch * 4096 * channels * 4, 64 << 20), dev)
    bandwidth.sample()
    log(f"scan benchmark on {dev} ({allocator})")
    load_before = os.getloadavg()[0]
    scans = bench_scans(lengths, batch, channels, kinds, dev, bandwidth, repeats, log, reference_repeats)
    return {
        "device": str(dev),
        # Other processes on this machine skew every timing; the load says how much to trust them.
        "load_average": max(load_before, os.getloadavg()[0]),
        "threads": threads,
        "allocator": allocator,
        "batch": batch,
        "channels": channels,
        "bandwidth_gbs": {
            "median": bandwidth.gbs,
            "min": min(bandwidth.samples),
            "max": max(bandwidth.samples),
        },
        "scans": [asdict(r) for r in scans],
    }
