"""Scheduling throughput: ``ablate worker`` processes on one PostgreSQL-backed study, 1-second items.

    python benchmarks/bench_scheduling.py --postgres postgresql+psycopg://postgres@127.0.0.1:5433/postgres
    python benchmarks/bench_scheduling.py --workers 1 2 4 --per-worker 5 --tracking-uri http://127.0.0.1:5000
    python benchmarks/bench_scheduling.py --tiny    # 1 and 2 workers, 2 items each of 0.1 s (still PostgreSQL)

Each item is a dummy that sleeps ``--item-s`` seconds instead of training (the benchmark's workers
replace ``ablate.training.run_trial``; nothing in ablate changes), so the table measures what the
queue costs per item: claim (row-locked WAITING → RUNNING flip), heartbeat, MLflow run create and
finish through the tracking server, and tell. Workers import everything, then start together;
the clock runs from the start signal to the last completed item. Ideal: N workers finish N items/s.

``--postgres`` is an admin URL (default ``$ABLATE_TEST_POSTGRES``): a scratch database is created
and dropped. Without ``--tracking-uri`` an ``ablate serve`` server (SQLite) is started for the run.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path

import yaml

SPEC = {
    "task": {"name": "listops", "max_depth": 3, "max_args": 4, "min_length": 5, "max_length": 40,
             "train_size": 200, "val_size": 64, "test_size": 64},
    "model": {"d_model": 16, "state_dim": 8, "layers": 1, "heads": 2},
    "train": {"steps": 4, "batch_size": 16},
}


def sleep_trial_worker(study: str, storage: str, tracking: str, item_s: float, ready: Path, go: Path) -> None:
    """A real ``work()`` loop whose items sleep: runs in a benchmark worker process."""
    import ablate.training as training
    from ablate.runner.worker import work
    from ablate.stores import resolve

    def sleep_trial(*args: object, **kwargs: object) -> training.TrialResult:
        time.sleep(item_s)
        return training.TrialResult("complete", {"val_accuracy": 0.5, "test_accuracy": 0.5}, 1, item_s)

    training.run_trial = sleep_trial
    stores = resolve(storage, tracking)
    # Pay the one-off costs (imports of mlflow and sqlalchemy's dialect, a connection) before the clock starts.
    from mlflow.tracking import MlflowClient

    from ablate.runner.study import open_study

    MlflowClient(tracking).search_experiments(max_results=1)
    open_study(study, stores)
    ready.touch()
    while not go.exists():
        time.sleep(0.01)
    work(study, stores)


def admin(url: str, sql: str) -> None:
    import psycopg
    from sqlalchemy.engine import make_url

    with psycopg.connect(make_url(url).set(drivername="postgresql").render_as_string(hide_password=False),
                         autocommit=True) as conn:
        conn.execute(sql)


def run_config(n: int, items: int, storage: str, tracking: str, item_s: float, root: Path) -> dict[str, float]:
    from optuna.trial import TrialState

    from ablate.runner.study import open_study
    from ablate.stores import resolve

    name = f"bench-{n}w-{uuid.uuid4().hex[:6]}"
    work_dir = root / name
    work_dir.mkdir()
    (work_dir / "spec.yaml").write_text(yaml.safe_dump({"name": name, **SPEC, "seeds": items}))
    env = {**os.environ, "ABLATE_HOME": str(work_dir / ".ablate"), "OMP_NUM_THREADS": "1",
           "PYTHONWARNINGS": "ignore"}
    subprocess.run([sys.executable, "-m", "ablate.cli", "run", "spec.yaml", "--workers", "0", "--storage", storage,
                    "--tracking-uri", tracking], cwd=work_dir, env=env, check=True, capture_output=True)
    go = work_dir / "go"
    procs = []
    for i in range(n):
        code = (f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import bench_scheduling as b; "
                f"b.sleep_trial_worker({name!r}, {storage!r}, {tracking!r}, {item_s}, "
                f"b.Path({str(work_dir / f'ready{i}')!r}), b.Path({str(go)!r}))")
        procs.append(subprocess.Popen([sys.executable, "-c", code], cwd=work_dir, env=env,
                                      stdout=subprocess.DEVNULL, stderr=open(work_dir / f"worker{i}.log", "w")))
    while sum((work_dir / f"ready{i}").exists() for i in range(n)) < n:
        if any(p.poll() not in (None, 0) for p in procs):
            sys.exit(f"a worker failed: see {work_dir}/worker*.log")
        time.sleep(0.05)
    start = datetime.now()
    go.touch()
    for p in procs:
        p.wait()
    trials = open_study(name, resolve(storage, tracking)).get_trials(deepcopy=False)
    done = [t for t in trials if t.state == TrialState.COMPLETE]
    wall = (max(t.datetime_complete for t in done) - start).total_seconds()
    rate = len(done) / wall
    return {"workers": n, "items": len(done), "trials": len(trials), "wall_s": wall, "items_per_s": rate,
            "ideal_per_s": n / item_s, "efficiency": rate * item_s / n}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--postgres", default=os.environ.get("ABLATE_TEST_POSTGRES"), help="admin URL of a server")
    p.add_argument("--tracking-uri", help="an MLflow tracking server [start one]")
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4, 8])
    p.add_argument("--per-worker", type=int, default=8, help="items per worker in each configuration")
    p.add_argument("--item-s", type=float, default=1.0, help="seconds each dummy item sleeps")
    p.add_argument("--tiny", action="store_true", help="1 and 2 workers, 2 items each of 0.1 s (a check that it runs)")
    args = p.parse_args()
    if args.tiny:
        args.workers, args.per_worker, args.item_s = [1, 2], 2, 0.1
    if min(args.per_worker, *args.workers) < 1 or args.item_s <= 0:
        p.error("--workers and --per-worker: at least 1; --item-s: positive")
    if not args.postgres:
        p.error("--postgres (or $ABLATE_TEST_POSTGRES) is required")

    from sqlalchemy.engine import make_url

    from ablate.serve import ServerConfig, start, stop, wait_healthy

    db = f"ablate_bench_{uuid.uuid4().hex[:8]}"
    admin(args.postgres, f'CREATE DATABASE "{db}"')
    storage = make_url(args.postgres).set(database=db).render_as_string(hide_password=False)
    server = None
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        try:
            tracking = args.tracking_uri
            if tracking is None:
                import socket

                with socket.socket() as s:
                    s.bind(("127.0.0.1", 0))
                    port = s.getsockname()[1]
                cfg = ServerConfig(f"sqlite:///{root / 'mlflow.db'}", str(root / "artifacts"), port=port)
                server = start(cfg, open(root / "server.log", "w"))
                wait_healthy(cfg.url, server, timeout=300)
                tracking = cfg.url
            rows = []
            for n in args.workers:
                rows.append(run_config(n, n * args.per_worker, storage, tracking, args.item_s, root))
                print(f"  {n} workers done", file=sys.stderr)
        finally:
            if server is not None:
                stop(server)
            admin(args.postgres, f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
    print(f"\n{args.item_s:g}-second items, PostgreSQL storage, MLflow server tracking, {os.cpu_count()} CPU cores\n")
    print("| workers | items | wall s | items/s | ideal items/s | efficiency |")
    print("|--------:|------:|-------:|--------:|--------------:|-----------:|")
    for r in rows:
        print(f"| {r['workers']} | {r['items']} | {r['wall_s']:.1f} | {r['items_per_s']:.2f} | "
              f"{r['ideal_per_s']:.0f} | {r['efficiency']:.0%} |")


if __name__ == "__main__":
    main()
