"""Kernel benchmark: the numba scans before and after issue 19, and skew_expm vs matrix_exp.

    python benchmarks/bench_ops.py                       # ~3-5 minutes on a 2-core machine
    python benchmarks/bench_ops.py --lengths 1024 4096 --rounds 9 --no-expm
    python benchmarks/bench_ops.py --tiny                # tiny sizes: checks that it runs (also --quick)

1. Scans (real, complex64, log; float32 on CPU): ms, GB/s, x the copy-bandwidth bound and the
   speed-up over the torch backend (the per-step loop; Heinsen's cumsum form for the log scan),
   forward and forward+backward, for the kernels as they were (read from git at --baseline, run
   through today's autograd Functions, so only the kernels differ) and as they are. Old and new
   take turns within each round and each round measures the copy bandwidth again, so ×bound is
   computed per round against the bandwidth of that moment; the table gives medians over rounds
   and "new/old", the median of the per-round ratios. The machine is shared: read ratios, not
   absolute times.
2. Accuracy of the float32 log scan at long L against float64: old kernel, new kernel, torch.
3. skew_expm vs torch.linalg.matrix_exp (float64, as Rotation.basis called it before skew_expm, also on one
   thread as skew_expm runs on CPU, and float32), forward+backward, for (heads, n) = (1, 128),
   (4, 32), (32, 4); interleaved the same way. On a busy machine threaded LAPACK/BLAS calls at
   these sizes wait on descheduled threads: the load average printed says how busy it was.

Bytes per element (the bound): ``harness.ops.BYTES_PER_ELEM`` (real 12 fwd, 32 f+b; complex 24,
64; log 12, 36). The allocator is tuned as in ``bench_scan.py`` so 64 MB outputs reuse warm pages.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from harness.ops import BYTES_PER_ELEM, tune_allocator

from ablate.ops import scan as scan_mod
from ablate.ops import scan_numba
from ablate.ops.expm import skew_expm

ROOT = Path(__file__).resolve().parents[1]
BASELINE = "97edae898b580aa83c95e6b91fdb77f5b0230875"  # main before issue 19's kernel work


def load_baseline(ref: str) -> ModuleType:
    """ablate/ops/scan_numba.py as of ``ref``, imported as a module of its own."""
    src = subprocess.run(
        ["git", "show", f"{ref}:ablate/ops/scan_numba.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    # A stable path, so numba's on-disk cache serves the old kernels from the second run on.
    path = Path(os.environ.get("TMPDIR", "/tmp")) / "ablate-bench-ops" / f"scan_numba_{ref[:12]}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != src:
        path.write_text(src)
    spec = importlib.util.spec_from_file_location(f"scan_numba_{ref[:12]}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # numba's cache finds the kernels' module by name
    spec.loader.exec_module(module)
    return module


def scan_inputs(kind: str, B: int, L: int, D: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    if kind == "log":
        log_a = torch.nn.functional.logsigmoid(torch.randn(B, L, D, generator=g) + 2)
        return log_a, torch.randn(B, L, D, generator=g) - 1
    r = 0.5 + 0.5 * torch.rand(B, L, D, generator=g)
    if kind == "complex":
        a = torch.polar(r, 6.283 * torch.rand(B, L, D, generator=g))
        return a, torch.randn(B, L, D, dtype=torch.complex64, generator=g)
    return r, torch.randn(B, L, D, generator=g)


def scan_fns(kind: str, kernels: ModuleType | None, a: torch.Tensor, b: torch.Tensor) -> dict[str, Callable]:
    """{"fwd", "fb"} for one implementation; kernels=None is the torch backend."""
    leaves = (a.detach().requires_grad_(), b.detach().requires_grad_())
    grad = torch.ones_like(b)
    if kernels is None:
        fn = scan_mod.log_scan if kind == "log" else scan_mod.linear_scan

        def run(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return fn(x, y, backend="torch")
    else:
        function = scan_mod.LogScan if kind == "log" else scan_mod.LinearScan

        def run(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return function.apply(x, y, None, kernels)

    def fwd() -> Any:
        with torch.no_grad():
            return run(a, b)

    def fb() -> Any:
        return torch.autograd.grad(run(*leaves), leaves, grad)

    return {"fwd": fwd, "fb": fb}


def timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return 1e3 * (time.perf_counter() - t0)


class Copy:
    """The copy bandwidth, from a copy as large as one scan input (read + write counted)."""

    def __init__(self, numel: int):
        self.src = torch.ones(max(numel, 1 << 22))
        self.dst = torch.empty_like(self.src)
        self.dst.copy_(self.src)

    def gbs(self) -> float:
        ms = min(timed(lambda: self.dst.copy_(self.src)) for _ in range(3))
        return 2 * self.src.numel() * 4 / ms / 1e6


def bench_scans(
    lengths: list[int], B: int, D: int, rounds: int, torch_repeats: int, old: ModuleType
) -> list[dict]:
    rows = []
    versions = {"old": old, "new": scan_numba}
    for kind in ("real", "complex", "log"):
        unit = 4  # float32 bytes; complex counts double in BYTES_PER_ELEM
        for L in lengths:
            a, b = scan_inputs(kind, B, L, D)
            elems = B * L * D
            nbytes = {m: unit * k * elems for m, k in zip(("fwd", "fb"), BYTES_PER_ELEM[kind], strict=True)}
            copy = Copy(elems * (2 if kind == "complex" else 1))
            fns = {v: scan_fns(kind, k, a, b) for v, k in versions.items()}
            for f in fns.values():  # compile, warm the pages
                f["fwd"](), f["fb"]()
            ms: dict[tuple[str, str], list[float]] = {(v, m): [] for v in fns for m in nbytes}
            xb: dict[tuple[str, str], list[float]] = {(v, m): [] for v in fns for m in nbytes}
            ratio: dict[str, list[float]] = {m: [] for m in nbytes}
            bws = []
            for r in range(rounds):
                bw = copy.gbs()
                order = ("old", "new") if r % 2 else ("new", "old")
                got = {(v, m): timed(fns[v][m]) for m in nbytes for v in order}
                bw = statistics.median([bw, copy.gbs()])
                bws.append(bw)
                for (v, m), t in got.items():
                    ms[(v, m)].append(t)
                    xb[(v, m)].append(t / (nbytes[m] / bw / 1e6))
                for m in nbytes:
                    ratio[m].append(got[("old", m)] / got[("new", m)])
            ref = scan_fns(kind, None, a, b)
            ref_ms = {m: statistics.median(timed(ref[m]) for _ in range(torch_repeats)) for m in nbytes}
            bw = statistics.median(bws)
            for v in ("torch", *fns):
                row: dict[str, Any] = {"kind": kind, "L": L, "version": v, "gbs_copy": bw}
                for m in nbytes:
                    t = ref_ms[m] if v == "torch" else statistics.median(ms[(v, m)])
                    row[f"{m}_ms"] = t
                    row[f"{m}_gbs"] = nbytes[m] / t / 1e6
                    row[f"{m}_xbound"] = (
                        t / (nbytes[m] / bw / 1e6) if v == "torch" else statistics.median(xb[(v, m)])
                    )
                    # the least disturbed run against the best copy: what the kernel can do here
                    best = min(ms[(v, m)]) if v != "torch" else t
                    row[f"{m}_xbound_best"] = best / (nbytes[m] / max(bws) / 1e6)
                    row[f"{m}_xtorch"] = ref_ms[m] / t
                    row[f"{m}_new_over_old"] = statistics.median(ratio[m]) if v == "new" else None
                rows.append(row)
            print(f"  {kind:7s} L={L:<6d} copy {bw:.1f} GB/s", flush=True)
            del a, b, copy, fns
    return rows


def bench_accuracy(lengths: list[int], old: ModuleType) -> list[dict]:
    """max |log h - log h (float64)| of the float32 log scans, and of the float32 linear scan."""
    rows = []
    for L in lengths:
        log_a, log_b = scan_inputs("log", 4, L, 64)
        want = scan_mod.log_scan_reference(log_a.double(), log_b.double())
        got = {
            "old numba": scan_mod.LogScan.apply(log_a, log_b, None, old),
            "new numba": scan_mod.LogScan.apply(log_a, log_b, None, scan_numba),
            "torch (cumsum)": scan_mod.log_scan(log_a, log_b, backend="torch"),
        }
        for name, s in got.items():
            rows.append({"L": L, "impl": name, "max_abs_err": (s.double() - want).abs().max().item()})
    return rows


def expm_fns(M: torch.Tensor, G: torch.Tensor) -> dict[str, Callable[[], Any]]:
    """Forward+backward of P = expm(M - Mᵀ) from float32 M, three ways."""

    def matrix_exp64() -> Any:  # Rotation.basis before skew_expm
        P = torch.linalg.matrix_exp((M - M.mT).double()).float()
        return torch.autograd.grad(P, M, G)

    def matrix_exp64_serial() -> Any:  # as skew_expm runs on CPU: is threading the difference?
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return matrix_exp64()
        finally:
            torch.set_num_threads(threads)

    def matrix_exp32() -> Any:
        return torch.autograd.grad(torch.linalg.matrix_exp(M - M.mT), M, G)

    def skew() -> Any:
        return torch.autograd.grad(skew_expm(M - M.mT), M, G)

    return {
        "matrix_exp float64": matrix_exp64,
        "matrix_exp f64 1 thr": matrix_exp64_serial,
        "matrix_exp float32": matrix_exp32,
        "skew_expm": skew,
    }


def bench_expm(shapes: list[tuple[int, int]], rounds: int) -> list[dict]:
    rows = []
    for H, n in shapes:
        g = torch.Generator().manual_seed(0)
        M = torch.randn(H, n, n, generator=g).requires_grad_()
        G = torch.randn(H, n, n, generator=g)
        fns = expm_fns(M, G)
        for f in fns.values():
            f()
        ms: dict[str, list[float]] = {k: [] for k in fns}
        ratios: dict[str, list[float]] = {k: [] for k in fns}
        for r in range(rounds):
            names = list(fns) if r % 2 else list(reversed(fns))
            got = {k: timed(fns[k]) for k in names}
            for k, t in got.items():
                ms[k].append(t)
                ratios[k].append(t / got["skew_expm"])
        for k in fns:
            rows.append(
                {
                    "H": H,
                    "n": n,
                    "impl": k,
                    "ms": statistics.median(ms[k]),
                    "x_skew": statistics.median(ratios[k]),
                }
            )
        print(f"  expm H={H} n={n}", flush=True)
    return rows


def print_tables(scans: list[dict], accuracy: list[dict], expm: list[dict], header: str) -> None:
    print(f"\n{header}")
    if scans:
        print(
            "\nScans, float32, forward (fwd) and forward+backward (f+b); ×bound = time / (min bytes / copy "
            "bandwidth of the same round), median over rounds; best = fastest round / (min bytes / fastest "
            "copy); ×torch = speed-up over the torch backend; new/old = median of per-round time ratios"
        )
        head = (
            f"{'kind':8s}{'L':>6s}  {'version':8s}{'fwd ms':>9s}{'GB/s':>7s}{'×bound':>8s}{'×torch':>8s}"
            f"{'f+b ms':>10s}{'GB/s':>7s}{'×bound':>8s}{'×torch':>8s}{'best fwd':>9s}{'f+b':>6s}"
            f"{'new/old fwd':>13s}{'f+b':>6s}"
        )
        print(head)
        print("-" * len(head))
        for r in scans:
            ratio = (
                f"{r['fwd_new_over_old']:>12.2f}×{r['fb_new_over_old']:>5.2f}×"
                if r["version"] == "new"
                else ""
            )
            print(
                f"{r['kind']:8s}{r['L']:>6d}  {r['version']:8s}{r['fwd_ms']:>9.1f}{r['fwd_gbs']:>7.1f}"
                f"{r['fwd_xbound']:>8.2f}{r['fwd_xtorch']:>7.1f}×{r['fb_ms']:>10.1f}{r['fb_gbs']:>7.1f}"
                f"{r['fb_xbound']:>8.2f}{r['fb_xtorch']:>7.1f}×{r['fwd_xbound_best']:>9.2f}"
                f"{r['fb_xbound_best']:>6.2f}{ratio}"
            )
        bws = [r["gbs_copy"] for r in scans if r["version"] == "new"]
        print(f"copy bandwidth per (kind, L), median over rounds: {', '.join(f'{x:.1f}' for x in bws)} GB/s")
    if accuracy:
        print("\nfloat32 log scan accuracy: max |log h - log h(float64)|")
        for r in accuracy:
            print(f"  L={r['L']:<6d} {r['impl']:16s} {r['max_abs_err']:.2e}")
    if expm:
        print(
            "\nRotRNN basis P = expm(M - Mᵀ), forward+backward from float32 M (median ms; ×skew = time / skew_expm's)"
        )
        print(f"{'H':>4s}{'n':>5s}  {'impl':20s}{'ms':>10s}{'×skew':>8s}")
        for r in expm:
            print(f"{r['H']:>4d}{r['n']:>5d}  {r['impl']:20s}{r['ms']:>10.2f}{r['x_skew']:>7.1f}×")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096])
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--channels", type=int, default=256)
    p.add_argument("--rounds", type=int, default=7, help="interleaved old/new rounds per (kind, L)")
    p.add_argument("--torch-repeats", type=int, default=2, help="repeats of the slow torch backend")
    p.add_argument("--baseline", default=BASELINE, help="git ref of the old kernels")
    p.add_argument("--no-scans", action="store_true")
    p.add_argument("--no-expm", action="store_true")
    p.add_argument("--tiny", "--quick", dest="quick", action="store_true", help="tiny sizes, one round: a smoke run")
    args = p.parse_args(argv)
    if args.quick:
        args.lengths, args.batch, args.channels, args.rounds, args.torch_repeats = [64], 2, 16, 1, 1
    allocator = tune_allocator()
    import numba

    header = (
        f"bench_ops: {numba.get_num_threads()} numba threads, {torch.get_num_threads()} torch threads, "
        f"B={args.batch} D={args.channels}, baseline {args.baseline[:12]}, {allocator}, "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    print(header, flush=True)
    old = load_baseline(args.baseline)
    scans = (
        []
        if args.no_scans
        else bench_scans(args.lengths, args.batch, args.channels, args.rounds, args.torch_repeats, old)
    )
    accuracy = [] if args.no_scans else bench_accuracy([256] if args.quick else [4096, 16384], old)
    shapes = [(2, 4)] if args.quick else [(1, 128), (4, 32), (32, 4)]
    expm = [] if args.no_expm else bench_expm(shapes, 1 if args.quick else max(15, args.rounds))
    print_tables(scans, accuracy, expm, header + f" (at the end {os.getloadavg()[0]:.1f})")
    return {"scans": scans, "accuracy": accuracy, "expm": expm}


if __name__ == "__main__":
    main(sys.argv[1:])
