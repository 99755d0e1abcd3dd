"""One prepared check of the kernels on a CUDA machine; on a machine without CUDA it runs the CPU
half and says what it skipped.

    python3 benchmarks/gpu_check.py              # from the repository root; within 10 minutes on one GPU
    python3 benchmarks/gpu_check.py --tiny       # tiny sizes, on CPU in seconds (also --quick)
    python3 benchmarks/gpu_check.py --parts cde  # some parts only (a rerun of what a first call missed)

On the device machine (torch, Triton and numba there; no optuna, mlflow, polars or papermill,
which ``ablate.ops`` does not need; (d) and (e) need them: carry ``.whl`` and install it as
benchmarks/gpu_workers.py's docstring says, else they are listed as skipped):

    cd <repo> && PYTHONUNBUFFERED=1 timeout 590 python3 benchmarks/gpu_check.py 2>&1 | tee $OUT/gpu_check.txt

(a) Every scan backend on the device (triton and torch on CUDA; numba and torch on CPU) against
    the float64 reference loop: outputs and gradients of a, b and h0, float32 (to 1e-5 of the
    largest magnitude) and bfloat16 (6e-3), real / complex64 / log, several shapes, broadcast a.
(b) ``skew_expm`` on the device against ``torch.linalg.matrix_exp`` in float64: P, its gradient,
    PᵀP - I in float32, and the forward+backward time ratio, (H, n) = (1, 128), (4, 32), (32, 4).
(c) CUDA only (``--cpu-timings`` runs it on CPU, untargeted): every scan (real, complex, log;
    complex also under a time-invariant decay, its own kernel path) forward+backward at L = 4096,
    B x D large enough to fill the GPU, against the HBM copy bandwidth measured in the same process
    (target: <= 1.5x the bound); the complex kernels also at other tiles (info rows).
(d) One recurrent layer forward+backward, RotRNN (heads 1, 4, 32) against the LRU at the same
    width (harness.models' FULL_LAYER_CONFIG: L 1024, B 32, d 128, N 128), timed in turn within each
    round (target: <= 1.3x); a 4-layer training step of each, untargeted.
(e) Trials per hour: K seeds fused in one process (``run_fused``, K = 1, 8, 32) against 1, 2 and 4
    worker processes sharing the device (``run_trial`` one after another, each process warmed up
    before the clock starts), at the quickstart's shape and at studies/gpu/rotation_heads.yaml's
    (paper scale, cut to a few steps, synthetic tokens); every rate over the one-process rate of
    the same run (target: the best fused >= 8x). A K that runs out of memory is reported as such.

(d) and (e) run on CPU only at --tiny, untargeted. No timed round or row of (d) and (e) starts
after --budget-s (540 s); those not run say so. Not yet timed on a GPU: estimated 3-4 minutes for
(a)-(d) and 5-6 for (e), so two calls (``--parts abcd``, then ``--parts e``) leave room to rerun. Prints one table; exits 1 if any check fails
("info" rows are measurements without a target here). Parts (a)-(c) import only torch, triton,
numba, numpy and ablate.ops (tests/test_ops.py runs it with the rest of ablate's dependencies
made unimportable); (d) and (e) import the rest of ablate lazily.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a bare checkout

from harness.ops import BYTES_PER_ELEM  # noqa: E402

from ablate.ops import available_backends, linear_scan, linear_scan_reference, log_scan, skew_expm  # noqa: E402

TOL = {torch.float32: 1e-5, torch.bfloat16: 6e-3}


def inputs(kind: str, B: int, L: int, D: int, dtype: torch.dtype, dev: str, a_shape: str = "full") -> list:
    g = torch.Generator().manual_seed(B * 1000 + L + D)
    shape = {"full": (B, L, D), "channels": (D,), "batch": (B, 1, D)}[a_shape]
    if kind == "log":
        a = torch.nn.functional.logsigmoid(torch.randn(shape, generator=g) + 2)
        b, h0 = torch.randn(B, L, D, generator=g) - 1, torch.randn(B, D, generator=g)
    else:
        a = 0.5 + 0.5 * torch.rand(shape, generator=g)
        b, h0 = torch.randn(B, L, D, generator=g), torch.randn(B, D, generator=g)
        if kind == "complex":
            a = torch.polar(a, 6.283 * torch.rand(shape, generator=g))
            b = torch.complex(b, torch.randn(B, L, D, generator=g))
            h0 = torch.complex(h0, torch.randn(B, D, generator=g))
    if kind == "complex":  # no complex bf16 in torch: complex64 (the modes' dtype) in both rows
        dtype = torch.complex64
    return [x.to(device=dev, dtype=dtype) for x in (a, b, h0)]


def reference(kind: str, a: torch.Tensor, b: torch.Tensor, h0: torch.Tensor) -> torch.Tensor:
    """The per-step loop in float64 (the log scan through h = exp(log h), all positive)."""
    if kind == "log":
        return linear_scan_reference(a.exp(), b.exp(), h0.exp()).log()
    return linear_scan_reference(a, b, h0)


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    return (got.to(want.dtype) - want).abs().max().item() / max(1.0, want.abs().max().item())


def check_scan(
    kind: str, backend: str, shape: tuple[int, int, int], dtype: torch.dtype, dev: str, a_shape: str
):
    """max relative error over the output and the three gradients."""
    xs = [x.requires_grad_() for x in inputs(kind, *shape, dtype, dev, a_shape)]
    wide = torch.complex128 if xs[1].is_complex() else torch.float64
    refs = [x.detach().to(wide).requires_grad_() for x in xs]
    scan = log_scan if kind == "log" else linear_scan
    got, want = scan(*xs, backend=backend), reference(kind, *refs)
    g = torch.randn(got.shape, dtype=want.dtype, device=dev).to(got.dtype)  # the same rounded g for both
    errs = [rel_err(got, want)]
    grads = torch.autograd.grad(got, xs, g)
    for x, gg, gw in zip(xs, grads, torch.autograd.grad(want, refs, g.to(want.dtype)), strict=True):
        assert gg.dtype == x.dtype and gg.shape == x.shape
        errs.append(rel_err(gg, gw))
    return max(errs)


def run_checks(dev: str, quick: bool) -> list[tuple[str, str, bool]]:
    rows = []
    shapes = [(2, 37, 5)] if quick else [(2, 97, 37), (3, 1024, 64), (1, 4096, 8)]
    for backend in available_backends(dev):
        for kind in ("real", "complex", "log"):
            for dtype in (torch.float32, torch.bfloat16):
                for shape in shapes:
                    for a_shape in ("full", "channels", "batch") if shape == shapes[0] else ("full",):
                        err = check_scan(kind, backend, shape, dtype, dev, a_shape)
                        tol = TOL[dtype]
                        if backend == "torch" and kind == "log" and dtype == torch.float32:
                            # Heinsen's cumsum form: sum log a grows like L and cancels at the end,
                            # so float32 drifts ~1e-7 L (3e-4 at L = 4096); the kernels scan
                            # step by step to avoid it. Held to that, not to 1e-5.
                            tol = max(tol, 2e-7 * shape[1])
                        what = f"scan {backend:6s} {kind:7s} {str(dtype)[6:]:8s} {shape} a={a_shape}"
                        rows.append((what, f"max rel err {err:.1e} (tol {tol:g})", err <= tol))
    return rows


def sync(dev: str) -> None:
    if dev == "cuda":
        torch.cuda.synchronize()


def time_ms(fn: Callable[[], Any], dev: str, repeats: int) -> float:
    fn()
    sync(dev)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync(dev)
        times.append(1e3 * (time.perf_counter() - t0))
    return statistics.median(times)


def expm_workloads(M: torch.Tensor, G: torch.Tensor) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """Forward+backward of P = expm(M - Mᵀ) from float32 M: skew_expm, and matrix_exp in float64
    as Rotation.basis called it before skew_expm."""

    def ours() -> Any:
        return torch.autograd.grad(skew_expm(M - M.mT), M, G)

    def theirs() -> Any:
        return torch.autograd.grad(torch.linalg.matrix_exp((M - M.mT).double()).float(), M, G)

    return ours, theirs


def scan_workloads(kind: str, backend: str, a: torch.Tensor, b: torch.Tensor) -> tuple[Callable, Callable]:
    """(forward without autograd, forward+backward) of one scan."""
    scan = log_scan if kind == "log" else linear_scan
    leaves = [a.detach().requires_grad_(), b.detach().requires_grad_()]
    grad = torch.ones_like(b)

    def fwd() -> Any:
        with torch.no_grad():
            return scan(a, b, backend=backend)

    def fb() -> Any:
        return torch.autograd.grad(scan(*leaves, backend=backend), leaves, grad)

    return fwd, fb


def run_expm(dev: str, quick: bool) -> list[tuple[str, str, bool]]:
    rows = []
    for H, n in [(2, 4)] if quick else [(1, 128), (4, 32), (32, 4)]:
        g = torch.Generator().manual_seed(n)
        M = torch.randn(H, n, n, generator=g, dtype=torch.float64).to(dev).requires_grad_()
        G = torch.randn(H, n, n, generator=g, dtype=torch.float64).to(dev)
        P, Q = skew_expm(M - M.mT), torch.linalg.matrix_exp(M - M.mT)
        gP, gQ = torch.autograd.grad(P, M, G)[0], torch.autograd.grad(Q, M, G)[0]
        M32 = M.detach().float()
        P32 = skew_expm(M32 - M32.mT)
        orth = (P32.mT @ P32 - torch.eye(n, device=dev)).abs().max().item()
        errs = ((P - Q).abs().max().item(), rel_err(gP, gQ))
        ok = errs[0] <= 1e-11 and errs[1] <= 1e-10 and orth <= 1e-6
        ours, theirs = expm_workloads(M32.requires_grad_(), G.float())
        t_ours, t_theirs = time_ms(ours, dev, 5), time_ms(theirs, dev, 5)
        rows.append(
            (
                f"skew_expm H={H} n={n}",
                f"|P - matrix_exp| {errs[0]:.1e}, grad rel {errs[1]:.1e}, float32 |PᵀP - I| {orth:.1e}; "
                f"f+b {t_ours:.2f} ms vs matrix_exp float64 {t_theirs:.2f} ms ({t_theirs / t_ours:.1f}x)",
                ok,
            )
        )
    return rows


def run_timings(dev: str, quick: bool) -> list[tuple[str, str, bool]]:
    """Forward+backward at L = 4096 against the copy bandwidth (HBM on CUDA) of this process."""
    B, L, D = (4, 512, 256) if quick else (32, 4096, 1024)  # on CUDA: 2048 programs of 32 channels
    rows = []
    src = torch.ones(B * L * D * 2, device=dev)  # as large as one complex input
    dst = torch.empty_like(src)
    # The complex scan twice: a per-step decay, and a time-invariant one (the LRU's; its own kernel
    # path), whose bound leaves out a and grad_a: 4 of the 6 and 10 of the 16 units.
    for kind, a_shape in (("real", "full"), ("complex", "full"), ("complex", "channels"), ("log", "full")):
        a, b, _ = inputs(kind, B, L, D, torch.float32, dev, a_shape)
        elems, unit = B * L * D, 4
        units = BYTES_PER_ELEM[kind] if a_shape == "full" else (4, 10)
        f_bytes, fb_bytes = (unit * k * elems for k in units)
        for backend in available_backends(dev):
            if backend == "torch" and (kind != "log" and not quick or a_shape != "full"):
                continue  # the per-step loop: 4096 launches each way, minutes, nothing to learn
            fwd, fb = scan_workloads(kind, backend, a, b)
            bw = [2 * src.numel() * 4 / time_ms(lambda: dst.copy_(src), dev, 10) / 1e6]
            f_ms, fb_ms = time_ms(fwd, dev, 10), time_ms(fb, dev, 10)
            bw.append(2 * src.numel() * 4 / time_ms(lambda: dst.copy_(src), dev, 10) / 1e6)
            gbs = statistics.median(bw)
            xf, xfb = f_ms / (f_bytes / gbs / 1e6), fb_ms / (fb_bytes / gbs / 1e6)
            rows.append(
                (
                    f"time {backend:6s} {kind:7s} B={B} L={L} D={D}"
                    + ("" if a_shape == "full" else " a=(D,)"),
                    f"fwd {f_ms:.3f} ms {xf:.2f}x bound, f+b {fb_ms:.3f} ms {xfb:.2f}x bound "
                    f"(copy {gbs:.0f} GB/s; target f+b <= 1.5x)",
                    backend == "torch" or dev == "cpu" or xfb <= 1.5,  # the target is the GPU's
                )
            )
            if kind == "complex" and backend == "triton":
                rows += complex_tiles(a, b, fb_ms, fb_bytes / gbs / 1e6, dev)
    return rows


# Other tiles of the complex kernels (ablate.ops.scan_triton.COMPLEX_BLOCK_T/_D: 64 x 8, chosen by
# register counts and accuracy without a GPU), timed the same way: which one the device prefers.
# Fewer than 64 rows cost accuracy under a time-invariant decay (see scan_triton).
COMPLEX_TILES = ((64, 16), (64, 32), (32, 16), (128, 8))


def complex_tiles(
    a: torch.Tensor, b: torch.Tensor, default_ms: float, bound_ms: float, dev: str
) -> list[tuple[str, str, bool | None]]:
    from ablate.ops import scan_triton

    default = scan_triton.COMPLEX_BLOCK_T, scan_triton.COMPLEX_BLOCK_D
    rows: list[tuple[str, str, bool | None]] = []
    try:
        for bt, bd in COMPLEX_TILES:
            scan_triton.COMPLEX_BLOCK_T, scan_triton.COMPLEX_BLOCK_D = bt, bd
            fb_ms = time_ms(scan_workloads("complex", "triton", a, b)[1], dev, 10)
            rows.append(
                (
                    f"  tile {bt:3d} x {bd:2d} (default {default[0]} x {default[1]})",
                    f"f+b {fb_ms:.3f} ms {fb_ms / bound_ms:.2f}x bound = {fb_ms / default_ms:.2f}x the default's",
                    None,
                )
            )
    finally:
        scan_triton.COMPLEX_BLOCK_T, scan_triton.COMPLEX_BLOCK_D = default
    return rows


# --- (d) a RotRNN layer against an LRU layer ------------------------------------------------------
# Parts (d) and (e) need the rest of ablate (ablate.spec's pydantic, the tasks, the trainers): they
# import it lazily and are listed as skipped, with the import error, where it is missing.

LAYER_MODELS = ("LRU", "RotRNN", "RotRNN h=4", "RotRNN h=32")


def run_layers(dev: str, quick: bool, deadline: float) -> list[tuple[str, str, bool | None]]:
    """One recurrent layer forward+backward (and a training step of the whole model, untargeted),
    each RotRNN against the LRU at the same width, timed in turn within every round."""
    from harness.models import FULL_LAYER_CONFIG, bench_layers

    cfg = ({"seq_len": 16, "batch": 2, "d_model": 32, "state": 64, "layers": 1} if quick
           else FULL_LAYER_CONFIG)  # fmt: skip
    device = torch.device(dev)
    rows = bench_layers(**cfg, device=device, repeats=1 if quick else 7, log=lambda _: None,
                        models=LAYER_MODELS, deadline=deadline)  # fmt: skip
    backend = available_backends(dev)[0]
    shape = f"L={cfg['seq_len']} B={cfg['batch']} d={cfg['d_model']} N={cfg['state']}"
    out: list[tuple[str, str, bool | None]] = []
    for row in rows:
        if row.backend != backend or row.model == "LRU":
            continue
        targeted = row.what == "layer" and dev == "cuda"
        what = f"{row.what} {row.model:11s} vs LRU {backend} {shape}" + (
            "" if row.what == "layer" else f" x{cfg['layers']} layers"
        )
        detail = (
            f"{row.ms:.3f} ms = {row.vs_lru:.2f}x the LRU's (scan share {row.scan_share:.0%}, "
            f"{row.rounds} rounds)" + ("; target <= 1.3x" if targeted else "")
        )
        out.append((what, detail, row.vs_lru <= 1.3 if targeted else None))
    return out


# --- (e) trials per hour: K seeds fused in one process against N worker processes ----------------
# One trial is ``ablate.training.run_trial`` (set-up, steps, evaluations, probes, final test); fused
# K is one ``ablate.training_fused.run_fused`` of K seeds. A worker process builds its data and
# warms up before the clock starts, as a long-running worker has, then runs its trials one after
# another; N of them share the device, started together. Every rate is over this run's one-process
# rate (N = 1), measured in the same run.

FUSE = {"quick": (1, 2), "full": (1, 8, 32)}
WORKERS = {"quick": (1, 2), "full": (1, 2, 4)}
PAPER_STEPS = 10  # the paper shape's steps: its 76,800 would take hours; the rates compare like with like
STUDIES = Path(__file__).resolve().parents[1] / "studies"


def trial_shape(name: str) -> tuple[dict, Any, Any]:
    """(config, data, probes) of a shape: ``quickstart`` and ``tiny`` as benchmarks/bench_fused.py
    builds them; ``paper`` is studies/gpu/rotation_heads.yaml's baseline cell (RotRNN, d 128, N 128,
    8 bidirectional layers, batch 50) cut to PAPER_STEPS steps, on synthetic ListOps-shaped tokens at
    its longest length (2,000) with 200 validation and test sequences."""
    from bench_fused import shape

    if name != "paper":
        return shape(name, None)
    from ablate import design
    from ablate.tasks.data import TaskData, TaskInfo
    from ablate.tasks.listops import VOCAB

    spec = design.load(STUDIES / "gpu" / "rotation_heads.yaml", [f"train.steps={PAPER_STEPS}"])
    config = spec.baseline()
    L = config["task"]["max_length"]
    info = TaskInfo(
        "listops_shape", "tokens", len(VOCAB), 1, 10, "classification", "accuracy", 0.1, L, "synthetic"
    )
    g = torch.Generator().manual_seed(0)

    def split(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.randint(1, len(VOCAB), (n, L), generator=g), torch.randint(0, 10, (n,), generator=g)

    return config, TaskData(info, split(2000), split(200), split(200)), spec.probes


def _statuses(results: list) -> list[str]:
    return [type(r).__name__ if isinstance(r, BaseException) else r.status for r in results]


def trials_child(arg: str) -> None:
    """A worker process of (e): build, warm up, say ready, wait for the go, run the trials."""
    job = json.loads(arg)
    torch.set_num_threads(job["threads"])
    from ablate.training import run_trial

    config, data, probes = trial_shape(job["shape"])
    run_trial(config, job["seed"], probes, device=job["device"], data=data)  # a whole trial: every code path
    Path(job["ready"]).touch()
    while not Path(job["go"]).exists():
        time.sleep(0.005)
    statuses = [run_trial(config, job["seed"] + i, probes, device=job["device"], data=data).status
                for i in range(job["trials"])]  # fmt: skip
    Path(job["done"]).write_text(json.dumps({"end": time.time(), "statuses": statuses}))


def _workers(shape: str, n: int, trials: int, dev: str, tmp: Path) -> tuple[float, list[str]]:
    """Seconds from the go to the last of ``n`` worker processes' ``trials`` trials, and statuses."""
    jobs = [{"shape": shape, "device": dev, "trials": trials, "seed": 100 * i,
             "threads": max(1, (os.cpu_count() or 1) // n), "ready": str(tmp / f"{n}-{i}.ready"),
             "go": str(tmp / f"{n}.go"), "done": str(tmp / f"{n}-{i}.done")} for i in range(n)]  # fmt: skip
    procs = [subprocess.Popen([sys.executable, __file__, "--trials-child", json.dumps(job)]) for job in jobs]
    try:
        while not all(Path(j["ready"]).exists() for j in jobs):
            if any(p.poll() not in (None, 0) for p in procs):
                raise RuntimeError(
                    f"a worker process exited with {[p.poll() for p in procs]} before its trials"
                )
            time.sleep(0.01)
        start = time.time()
        Path(jobs[0]["go"]).touch()
        for p in procs:
            if p.wait() != 0:
                raise RuntimeError(f"a worker process exited with {p.returncode}")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    done = [json.loads(Path(j["done"]).read_text()) for j in jobs]
    return max(d["end"] for d in done) - start, [s for d in done for s in d["statuses"]]


def _fused(config: dict, data: Any, probes: Any, k: int, dev: str) -> tuple[float, list[str]]:
    from ablate.training_fused import run_fused

    sync(dev)
    t0 = time.perf_counter()
    results = run_fused([config] * k, list(range(k)), probes, device=dev, data=data)
    sync(dev)
    return time.perf_counter() - t0, _statuses(results)


def _out_of_memory(exc: BaseException) -> bool:
    return isinstance(exc, torch.cuda.OutOfMemoryError) or "out of memory" in str(exc)


def run_trials_per_hour(dev: str, quick: bool, deadline: float) -> list[tuple[str, str, bool | None]]:
    import ablate.training_fused  # noqa: F401  (fails here, not in a worker process, where ablate's deps are missing)

    size = "quick" if quick else "full"
    rows: list[tuple[str, str, bool | None]] = []
    for shape in ("tiny",) if quick else ("quickstart", "paper"):
        config, data, probes = trial_shape(shape)
        try:
            _fused(config, data, probes, 2, dev)  # kernels compiled, every code path and cache warm
        except RuntimeError as exc:
            if not _out_of_memory(exc):
                raise
        gc.collect()
        torch.cuda.empty_cache()  # the worker processes get the device's memory, not this one's cache
        rates: dict[str, float] = {}
        notes: dict[str, str] = {}
        with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
            for n in WORKERS[size]:
                what = f"{n} worker process{'es' if n > 1 else ''}"
                if time.perf_counter() > deadline:
                    notes[what] = "not run: past the time budget"
                    continue
                trials = 1 if shape == "paper" else 2
                try:
                    seconds, statuses = _workers(shape, n, trials, dev, Path(tmp))
                except RuntimeError as exc:  # its output (out of memory?) is above the table
                    notes[what] = f"failed: {exc}"
                    continue
                rates[what] = n * trials * 3600 / seconds
                notes[what] = f"{n * trials} trials in {seconds:.1f} s {sorted(set(statuses))}"
                print(f"  (e) {shape} {what}: {notes[what]}", flush=True)
        for k in FUSE[size]:
            what = f"fused K={k}"
            if time.perf_counter() > deadline:
                notes[what] = "not run: past the time budget"
                continue
            if any(n.startswith("out of memory") for n in notes.values()):
                notes[what] = "not run: a smaller K ran out of memory"
                continue
            try:
                seconds, statuses = _fused(config, data, probes, k, dev)
            except RuntimeError as exc:
                if not _out_of_memory(exc):
                    raise
                notes[what] = f"out of memory ({str(exc).splitlines()[0][:80]})"
            if what in notes:  # the exception's frames are gone here, and with them its tensors
                gc.collect()
                torch.cuda.empty_cache()
                continue
            rates[what] = k * 3600 / seconds
            notes[what] = f"{k} trials in {seconds:.1f} s {sorted(set(statuses))}"
            print(f"  (e) {shape} {what}: {notes[what]}", flush=True)
        one = rates.get("1 worker process")
        best = max((r for w, r in rates.items() if w.startswith("fused")), default=None)
        for what, note in notes.items():
            rate = rates.get(what)
            ratio = f" = {rate / one:.2f}x one process" if rate is not None and one else ""
            head = f"{rate:.0f} trials/h{ratio}; " if rate is not None else ""
            rows.append((f"trials/h {shape:10s} {what}", head + note, None))
        if one and best is not None:
            met = best / one >= 8
            rows.append(
                (
                    f"trials/h {shape:10s} best fused vs one process",
                    f"{best / one:.2f}x" + ("; target >= 8x" if dev == "cuda" else ""),
                    met if dev == "cuda" else None,
                )
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tiny", "--quick", dest="quick", action="store_true", help="tiny sizes")
    p.add_argument("--cpu-timings", action="store_true", help="run (c) on CPU too (exercises its code)")
    p.add_argument("--parts", default="abcde", help="which parts to run (default: all), e.g. --parts cd")
    p.add_argument(
        "--budget-s",
        type=float,
        default=540.0,
        help="no timed round or row of (d) and (e) starts after this many seconds",
    )
    p.add_argument("--trials-child", help=argparse.SUPPRESS)  # (e)'s worker processes
    args = p.parse_args(argv)
    if args.trials_child:
        trials_child(args.trials_child)
        return 0
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    t0 = time.perf_counter()
    deadline = t0 + args.budget_s
    backends = available_backends(dev)
    header = f"gpu_check on {dev}"
    rows: list[tuple[str, str, bool | None]] = []
    if dev == "cuda":
        header += f" ({torch.cuda.get_device_name()}, torch {torch.__version__}, CUDA {torch.version.cuda})"
        rows.append(
            (
                "triton backend",
                "importable" if "triton" in backends else "NOT importable",
                "triton" in backends,
            )
        )
        skipped = []
    else:
        skipped = ["Triton kernels (no CUDA)", "skew_expm on CUDA", "HBM-bound timings"]
    print(header + f"; scan backends here: {', '.join(backends)}", flush=True)
    parts: list[tuple[str, Callable[[], list]]] = [
        ("a", lambda: run_checks(dev, args.quick)),
        ("b", lambda: run_expm(dev, args.quick)),
    ]
    if dev == "cuda" or args.cpu_timings:
        parts.append(("c", lambda: run_timings(dev, args.quick)))
    if dev == "cuda" or args.quick:  # on CPU only at --tiny: a check that they run, no targets
        parts.append(("d", lambda: run_layers(dev, args.quick, deadline)))
        parts.append(("e", lambda: run_trials_per_hour(dev, args.quick, deadline)))
    for part, fn in parts:
        if part not in args.parts:
            continue
        try:
            new = fn()
        except ImportError as exc:  # (d), (e) on the device image without the rest of ablate's dependencies
            skipped.append(f"({part}) needs the rest of ablate ({exc})")
            continue
        rows += new
        # as it comes, so that a run cut off by a time limit keeps what it measured
        print(f"({part}) done at {time.perf_counter() - t0:.0f} s: {len(new)} rows", flush=True)
        for what, detail, ok in new:
            print(f"  {'info' if ok is None else 'ok  ' if ok else 'FAIL'} {what}  {detail}", flush=True)
    width = max(len(r[0]) for r in rows)
    print()
    for what, detail, ok in rows:
        print(f"{'info' if ok is None else 'ok  ' if ok else 'FAIL'} {what:{width}s}  {detail}")
    failed = sum(ok is False for *_, ok in rows)
    checked = sum(ok is not None for *_, ok in rows)
    if skipped:
        print(f"\nskipped ({'CPU only here' if dev == 'cpu' else 'here'}): {'; '.join(skipped)}")
    print(f"\n{checked - failed} passed, {failed} failed in {time.perf_counter() - t0:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
