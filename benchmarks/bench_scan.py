"""Scan benchmark: compiled kernels vs the torch loop vs the memory-bandwidth bound.

    python benchmarks/bench_scan.py                      # the full run (about a minute or two)
    python benchmarks/bench_scan.py --lengths 1024 4096 --no-layers --json out.json

Threads: numba and torch use all cores unless NUMBA_NUM_THREADS / OMP_NUM_THREADS say otherwise.
"""

from __future__ import annotations

import argparse
import json

from ablate.models.bench import run_bench


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lengths", type=int, nargs="+", default=[256, 1024, 4096, 16384])
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--channels", type=int, default=256)
    p.add_argument(
        "--kinds", nargs="+", default=["real", "complex", "log"], choices=["real", "complex", "log"]
    )
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--device", default="cpu")
    p.add_argument("--no-layers", action="store_true", help="skip the layer and training-step tables")
    p.add_argument("--no-tune-alloc", action="store_true", help="keep glibc's default large-block mmap")
    p.add_argument("--json", help="also write the rows here")
    args = p.parse_args()
    result = run_bench(
        lengths=tuple(args.lengths),
        batch=args.batch,
        channels=args.channels,
        kinds=tuple(args.kinds),
        repeats=args.repeats,
        layers=not args.no_layers,
        device=args.device,
        tune_alloc=not args.no_tune_alloc,
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
