"""Scan benchmark: compiled kernels vs the torch loop vs the memory-bandwidth bound, then whole
layers and training steps with their scan share and speed-up over the torch reference.

    python benchmarks/bench_scan.py                 # L=1024, a 2-layer model at L=512 (under a minute)
    python benchmarks/bench_scan.py --full          # four lengths, 5 rounds, a 4-layer model at L=1024
    python benchmarks/bench_scan.py --lengths 1024 4096 --no-layers --json out.json
    python benchmarks/bench_scan.py --tiny          # seconds: every table at toy sizes (the test suite's)

Threads: numba and torch use all cores unless NUMBA_NUM_THREADS / OMP_NUM_THREADS say otherwise.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from harness.models import run_bench

# Every kind, backend, model and table at toy sizes: a check that the benchmark runs, not a timing.
TINY: dict[str, Any] = {
    "lengths": (32,), "batch": 2, "channels": 8, "repeats": 1, "copy_bytes": 1 << 20,
    "layer_config": {"seq_len": 16, "batch": 2, "d_model": 8, "state": 64, "layers": 1},
}  # fmt: skip


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lengths", type=int, nargs="+", help="sequence lengths [1024; --full: 256 1024 4096 16384]")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--channels", type=int, default=256)
    p.add_argument(
        "--kinds", nargs="+", default=["real", "complex", "log"], choices=["real", "complex", "log"]
    )
    p.add_argument("--repeats", type=int, help="timed rounds [up to 3 within a 30-s budget; --full: 5]")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:k")
    p.add_argument("--full", action="store_true", help="the long sweep (minutes)")
    p.add_argument("--tiny", action="store_true", help="toy sizes, one round: seconds")
    p.add_argument("--no-layers", action="store_true", help="skip the layer and training-step tables")
    p.add_argument("--no-tune-alloc", action="store_true", help="keep glibc's default large-block mmap")
    p.add_argument("--json", help="also write the rows here")
    args = p.parse_args(argv)
    if args.repeats is not None and args.repeats < 1:
        p.error("--repeats: at least 1")
    if args.tiny and args.full:
        p.error("--tiny and --full: choose one")
    sizes: dict[str, Any] = dict(TINY) if args.tiny else {"batch": args.batch, "channels": args.channels}
    if args.lengths:
        sizes["lengths"] = tuple(args.lengths)
    if args.repeats:
        sizes["repeats"] = args.repeats
    result = run_bench(
        kinds=tuple(args.kinds),
        layers=not args.no_layers,
        device=args.device,
        tune_alloc=not args.no_tune_alloc,
        full=args.full,
        **sizes,
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return result


if __name__ == "__main__":
    main()
