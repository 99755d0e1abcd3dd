"""What one claim costs as the queue grows (not a test).

    python benchmarks/bench_claim.py [--queued 100 1000 4000] [--storage sqlite:///...]

Enqueues a study of ``--queued`` items the way ``ablate run`` does (each WAITING trial carries its
cell config in user attributes), then times, side by side in one process: ``claim`` (reads the
WAITING ids, then loads only the trial it takes), and loading every WAITING trial with its
attributes (what a claim cost before it read ids first). Each figure is the median of 20 claims.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from optuna.trial import TrialState

from ablate import design
from ablate.runner.study import claim, prepare
from ablate.stores import Stores

SPEC = {
    "task": {"name": "listops", "max_depth": 3, "max_length": 64, "train_size": 200},
    "model": {"d_model": 16, "state_dim": 16, "layers": 2, "heads": 2},
    "train": {"steps": 10},
}


def measure(queued: int, storage: str | None) -> tuple[float, float]:
    root = Path(tempfile.mkdtemp())
    stores = Stores(storage or f"sqlite:///{root}/optuna.db", f"sqlite:///{root}/mlflow.db", (root / "a").as_uri())
    cells = -(-queued // 1000)  # at most 1,000 seeds per cell: spread larger queues over lr levels
    lrs = [1e-3 * (i + 1) for i in range(cells)]
    spec = design.validate({**SPEC, "name": f"claim-{queued}", "seeds": queued // cells,
                            **({"factors": {"train.lr": lrs}} if cells > 1 else {})})
    study, _ = prepare(spec, design.items(spec), stores)
    claims, loads = [], []
    for _ in range(20):
        start = time.perf_counter()
        study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
        loads.append(time.perf_counter() - start)
        start = time.perf_counter()
        assert claim(study) is not None
        claims.append(time.perf_counter() - start)
    return statistics.median(claims), statistics.median(loads)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queued", type=int, nargs="+", default=[100, 1000, 4000])
    parser.add_argument("--storage", help="an Optuna storage URL (default: a fresh SQLite file)")
    args = parser.parse_args()
    print(f"{'queued':>7s} {'claim ms':>9s} {'load all waiting ms':>20s} {'ratio':>6s}")
    for queued in args.queued:
        claim_s, load_s = measure(queued, args.storage)
        print(f"{queued:7d} {1e3 * claim_s:9.1f} {1e3 * load_s:20.1f} {load_s / claim_s:6.1f}")


if __name__ == "__main__":
    main()
