"""What opening a SQLite connection per operation costs a worker (not a test).

    python benchmarks/bench_sqlite_pool.py [--items 40] [--rounds 3] [--dir /tmp]
    python benchmarks/bench_sqlite_pool.py --tiny     # 3 items, 2 rounds: a check that it runs

``runner/queue.connect`` gives SQLite storages a NullPool: no connection outlives an operation, so
that a file or filesystem turning read-only gives an error instead of SIGBUS in a process whose
open connection has the WAL index mapped. This times a worker's storage operations on one file,
side by side in one process, alternating rounds: ``pooled`` (SQLAlchemy's default pool, as before)
and ``nullpool`` (as now). Each round enqueues ``--items`` items, then claims each (queue.claim),
sets five user attributes and tells it COMPLETE; the figure is the median time per operation.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import optuna
from sqlalchemy.pool import NullPool

from ablate.runner import queue

optuna.logging.set_verbosity(optuna.logging.WARNING)
warnings.filterwarnings("ignore")


def _serialise(engine) -> None:
    """What queue.connect sets on a SQLite engine: BEGIN IMMEDIATE and WAL."""
    from sqlalchemy import event

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection, record) -> None:
        dbapi_connection.isolation_level = None
        dbapi_connection.execute("PRAGMA journal_mode=WAL")

    @event.listens_for(engine, "begin")
    def _begin(conn) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    engine.dispose()


def one_round(url: str, nullpool: bool, items: int) -> float:
    """Seconds per storage operation over one round."""
    kwargs = {"connect_args": {"timeout": 60}}
    if nullpool:
        kwargs["poolclass"] = NullPool
    store = optuna.storages.RDBStorage(url, engine_kwargs=kwargs)
    _serialise(store.engine)
    study = optuna.create_study(storage=store, study_name=f"s{time.monotonic_ns()}")
    for i in range(items):
        study.enqueue_trial({}, user_attrs={"i": i})
    ops, start = 0, time.perf_counter()
    while (trial := queue.claim(study)) is not None:
        for k in range(5):
            trial.set_user_attr(f"k{k}", k)
        study.tell(trial, 1.0)
        ops += 7
    seconds = (time.perf_counter() - start) / ops
    store.engine.dispose()
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", default=tempfile.gettempdir())
    parser.add_argument("--tiny", action="store_true", help="3 items, 2 rounds (a check that it runs)")
    args = parser.parse_args()
    if args.tiny:
        args.items, args.rounds = 3, 2
    if min(args.items, args.rounds) < 1:
        parser.error("--items and --rounds: at least 1")
    times: dict[str, list[float]] = {"pooled": [], "nullpool": []}
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for r in range(args.rounds):
            for kind in ("pooled", "nullpool") if r % 2 == 0 else ("nullpool", "pooled"):
                url = f"sqlite:///{Path(tmp) / f'{kind}.db'}"
                times[kind].append(one_round(url, kind == "nullpool", args.items))
    pooled, null = statistics.median(times["pooled"]), statistics.median(times["nullpool"])
    print(f"per storage operation (median of {args.rounds} rounds of {args.items} items): pooled "
          f"{pooled * 1e3:.2f} ms, nullpool {null * 1e3:.2f} ms, ratio {null / pooled:.2f}")


if __name__ == "__main__":
    main()
