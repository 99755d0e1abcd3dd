"""What one claim costs as the queue grows, the way before runner/queue.py and now (not a test).

    python benchmarks/bench_claim.py                       # SQLite, and PostgreSQL at $ABLATE_TEST_POSTGRES
    python benchmarks/bench_claim.py --start-postgres      # ... on a throwaway server started here
    python benchmarks/bench_claim.py --tiny                # 10 waiting, 2 claims: a check that it runs
    python benchmarks/bench_claim.py --queued 100 1000 10000 --backends sqlite postgresql \\
        --postgres postgresql+psycopg://postgres@127.0.0.1:5433/postgres

For each backend, study kind and queue size, a fresh store gets ``--queued`` WAITING items the way
``ablate run`` enqueues them (each carries its cell config in user attributes), then claims are
timed side by side in one process, alternating: ``old`` is the claim of before (read the ids of
every WAITING trial, load each candidate whole; for a replicate of a tuned cell, load every
waiting trial and every trial of the study to find the blocked cells), ``new`` is
``phases.claim`` (the oldest WAITING ids a page at a time, the gate's attributes only, one
lookup of the replicate's cell). Figures are medians over the claims.

- ``plain``: an untuned study, ``--queued`` replicate items over ceil(queued / 1000) cells;
- ``tuned``: a tuned study (2 tuning items per cell) in its replicate phase: every tuning item
  finished but one of the first cell, which is still running, so the first cell's replicates
  (at the head of the queue) are blocked and every claim must pass them; ``--queued`` waiting
  replicates over max(2, ceil(queued / 1000)) cells.

SQLite stores are files in the system temp directory (on disk here); PostgreSQL gets a scratch
database per measurement, created and dropped through the admin URL.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import optuna
from optuna.trial import TrialState

from ablate import design
from ablate.runner import items as its
from ablate.runner import phases
from ablate.runner import study as st
from ablate.stores import Stores

SPEC = {
    "task": {"name": "listops", "max_depth": 3, "max_length": 64, "train_size": 200},
    "model": {"d_model": 16, "state_dim": 16, "layers": 2, "heads": 2},
    "train": {"steps": 10},
}
TUNE = {"trials": 2, "space": {"train.lr": {"low": 1e-4, "high": 1e-1, "log": True}}}


# --- the claim of before (commit 97edae8), kept here to be measured against ---------------------


def old_claim(study: optuna.Study) -> optuna.Trial | None:
    store = study._storage
    blocked: set[str] | None = None
    for trial_id in _old_waiting_ids(study):
        trial = store.get_trial(trial_id)
        if trial.state != TrialState.WAITING:
            continue
        if trial.user_attrs.get("after_tune"):
            if blocked is None:
                blocked = _old_blocked_cells(study, study.get_trials(deepcopy=False, states=(TrialState.WAITING,)))
            if trial.user_attrs.get("cell_id") in blocked:
                continue
        if store.set_trial_state_values(trial_id, state=TrialState.RUNNING):
            store.record_heartbeat(trial_id)
            return optuna.Trial(study, trial_id)
    return None


def _old_waiting_ids(study: optuna.Study) -> list[int]:
    from optuna.storages._rdb.models import TrialModel
    from sqlalchemy import select

    query = (select(TrialModel.trial_id)
             .where(TrialModel.study_id == study._study_id, TrialModel.state == TrialState.WAITING)
             .order_by(TrialModel.trial_id))
    store = study._storage
    with getattr(store, "_backend", store).engine.connect() as conn:
        return list(conn.execute(query).scalars())


def _old_blocked_cells(study: optuna.Study, waiting: list) -> set[str]:
    cells = {t.user_attrs.get("cell_id") for t in waiting if t.user_attrs.get("after_tune")}
    if not cells:
        return set()
    by_item: dict[str, list] = {}
    for trial in study.get_trials(deepcopy=False):
        if trial.user_attrs.get("item"):
            by_item.setdefault(trial.user_attrs["item"], []).append(trial)
    blocked = set()
    for key, trials in by_item.items():
        cell, _, phase = key.partition("/")
        if cell in cells and phase.startswith("tune/") and its.item_state(trials) in phases.UNFINISHED:
            blocked.add(cell)
    return blocked


# --- stores ---------------------------------------------------------------------------------------


def _admin(url: str, sql: str) -> None:
    import psycopg
    from sqlalchemy.engine import make_url

    with psycopg.connect(make_url(url).set(drivername="postgresql").render_as_string(hide_password=False),
                         autocommit=True) as conn:
        conn.execute(sql)


@contextmanager
def scratch_storage(backend: str, admin: str | None) -> Iterator[str]:
    if backend == "sqlite":
        root = Path(tempfile.mkdtemp(prefix="bench-claim-"))
        try:
            yield f"sqlite:///{root / 'optuna.db'}"
        finally:
            shutil.rmtree(root, ignore_errors=True)
        return
    from sqlalchemy.engine import make_url

    assert admin is not None
    db = f"ablate_bench_{uuid.uuid4().hex[:8]}"
    _admin(admin, f'CREATE DATABASE "{db}"')
    try:
        yield make_url(admin).set(database=db).render_as_string(hide_password=False)
    finally:
        _admin(admin, f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')


@contextmanager
def throwaway_postgres() -> Iterator[str]:
    """A PostgreSQL server on a free loopback port, as scripts/test.sh starts one."""
    bins = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: [int(x) for x in p.parent.name.split(".")])
    if not bins:
        sys.exit("no PostgreSQL under /usr/lib/postgresql (apt-get install -y postgresql)")
    pgbin = bins[-1]
    runas = ["runuser", "-u", "postgres", "--"] if os.getuid() == 0 else []
    root = Path(tempfile.mkdtemp(prefix="bench-claim-pg-"))
    root.chmod(0o755)
    data = root / "data"
    data.mkdir(mode=0o700)
    if runas:
        shutil.chown(root, "postgres", "postgres")
        shutil.chown(data, "postgres", "postgres")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    subprocess.run([*runas, str(pgbin / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust",
                    "--no-instructions"], check=True, capture_output=True)
    subprocess.run([*runas, str(pgbin / "pg_ctl"), "-D", str(data), "-l", str(root / "log"), "-w", "-o",
                    f"-c listen_addresses=127.0.0.1 -p {port} -c unix_socket_directories={root}", "start"],
                   check=True, capture_output=True)
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*runas, str(pgbin / "pg_ctl"), "-D", str(data), "-m", "fast", "stop"], capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


# --- one measurement --------------------------------------------------------------------------


def queue_study(kind: str, queued: int, storage: str) -> tuple[optuna.Study, str | None]:
    """A study with ``queued`` claimable-or-blocked WAITING items; the blocked cell, if any."""
    stores = Stores(storage, "sqlite:///unused-mlflow.db", None)
    cells = -(-queued // 1000) if kind == "plain" else max(2, -(-queued // 1000))
    raw = {**SPEC, "name": f"claim-{kind}-{queued}", "seeds": queued // cells}
    if cells > 1:
        raw["factors"] = {"train.weight_decay": [0.01 * i for i in range(cells)]}
    if kind == "tuned":
        raw["tune"] = TUNE
    spec = design.validate(raw)
    study, _ = st.prepare(spec, design.items(spec), stores)
    if kind == "plain":
        return study, None
    first = design.cells(spec)[0].id
    for i in range(cells * TUNE["trials"]):  # the tuning items come first
        trial = phases.claim(study)
        assert trial is not None and trial.user_attrs["phase"] == "tune"
        if i > 0:  # the first stays RUNNING: its cell's replicates wait
            trial.set_user_attr("val_accuracy", 0.5)
            study.tell(trial, 0.5)
    return study, first


def measure(kind: str, queued: int, storage: str, claims: int, old_claims: int) -> tuple[float, float]:
    study, blocked = queue_study(kind, queued, storage)
    timings: dict[str, list[float]] = {"old": [], "new": []}
    ways: dict[str, Callable[[optuna.Study], optuna.Trial | None]] = {"old": old_claim, "new": phases.claim}
    for i in range(claims):
        for way in ("old", "new") if i < old_claims else ("new",):
            start = time.perf_counter()
            trial = ways[way](study)
            timings[way].append(time.perf_counter() - start)
            assert trial is not None and trial.user_attrs["cell_id"] != blocked, way
    return statistics.median(timings["old"]), statistics.median(timings["new"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queued", type=int, nargs="+", default=[100, 1000, 10000])
    parser.add_argument("--backends", nargs="+", default=["sqlite", "postgresql"], choices=["sqlite", "postgresql"])
    parser.add_argument("--kinds", nargs="+", default=["plain", "tuned"], choices=["plain", "tuned"])
    parser.add_argument("--postgres", default=os.environ.get("ABLATE_TEST_POSTGRES"),
                        help="admin URL of a PostgreSQL server [$ABLATE_TEST_POSTGRES]")
    parser.add_argument("--start-postgres", action="store_true", help="start a throwaway PostgreSQL server")
    parser.add_argument("--claims", type=int, default=20, help="new-way claims per measurement")
    parser.add_argument("--old-claims", type=int, default=5, help="old-way claims per measurement (they are slow)")
    parser.add_argument("--tiny", action="store_true",
                        help="10 waiting items, 2 claims (1 old), on the backends given (a check that it runs)")
    args = parser.parse_args()
    if args.tiny:
        args.queued, args.claims, args.old_claims = [10], 2, 1  # tuned: 5 claimable, 3 claimed
    if min(*args.queued, args.claims, args.old_claims) < 1:
        parser.error("--queued, --claims and --old-claims: at least 1")
    with throwaway_postgres() if args.start_postgres else _given(args.postgres) as admin:
        backends = [b for b in args.backends if b == "sqlite" or admin]
        if len(backends) < len(args.backends):
            print("no PostgreSQL (--postgres, $ABLATE_TEST_POSTGRES or --start-postgres): SQLite only\n",
                  file=sys.stderr)
        rows = []
        for backend in backends:
            for kind in args.kinds:
                for queued in args.queued:
                    with scratch_storage(backend, admin) as storage:
                        old, new = measure(kind, queued, storage, args.claims, min(args.old_claims, args.claims))
                    rows.append((backend, kind, queued, old, new))
                    print(f"  {backend} {kind} {queued}: old {1e3 * old:.1f} ms, new {1e3 * new:.1f} ms",
                          file=sys.stderr)
    print(f"\nmedian ms per claim ({args.claims} new, {min(args.old_claims, args.claims)} old claims each), "
          f"{os.cpu_count()} CPU cores\n")
    print("| backend | study | waiting | old ms | new ms | old / new |")
    print("|---------|-------|--------:|-------:|-------:|----------:|")
    for backend, kind, queued, old, new in rows:
        print(f"| {backend} | {kind} | {queued:,} | {1e3 * old:.1f} | {1e3 * new:.1f} | {old / new:.0f}× |")


@contextmanager
def _given(url: str | None) -> Iterator[str | None]:
    yield url


if __name__ == "__main__":
    main()
