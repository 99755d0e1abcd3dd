"""The ETA a finished study would have shown, replayed from its Optuna store: at every few minutes
of its run, the estimate ``ablate run`` prints (``progress.snapshot`` → ``Snapshot.eta_seconds``)
set against the time that was in fact left.

    python benchmarks/bench_eta_replay.py STORE.db STUDY.yaml [--every 120] [--workers 2]
    python benchmarks/bench_eta_replay.py .ablate/optuna.db studies/rotrnn_norm_stability.yaml
    python benchmarks/bench_eta_replay.py --tiny   # the quickstart's 2 cells, 2 seeds of 20 steps, run here first

At each moment T a copy of the store is rolled back to T: trials that had not started are waiting
again, those that had started and not finished are running, at the step their share of their
wall gives (the heartbeat's step, which the store keeps only for the latest moment), with
``worker`` and the start time they had. The clock the snapshot reads is T. The table prints
each T's counts, the estimate, the truth and their ratio; the last line the median and the
largest |ratio − 1| once a tenth of the trials has finished (before that the estimate is priced
on running paces alone). Read-only on STORE (a copy is rolled back, in a temporary folder).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sqlite3
import statistics
import tempfile
from pathlib import Path

import yaml

# The attributes a trial gets from its claim on: a trial rolled back to waiting has none of them.
CLAIMED = ("worker", "step", "steps", "steps_trained", "status", "attempt", "last_val", "seconds")


def _when(text: str | None) -> dt.datetime | None:
    return dt.datetime.fromisoformat(text) if text else None


def rolled_back(source: Path, at: dt.datetime, folder: Path) -> Path:
    """A copy of the Optuna store ``source`` as it stood at ``at`` (module docstring)."""
    path = folder / f"at-{at.timestamp():.0f}.db"
    with sqlite3.connect(source) as src, sqlite3.connect(path) as dst:
        src.backup(dst)
        for tid, start, end in dst.execute("SELECT trial_id, datetime_start, datetime_complete FROM trials").fetchall():
            began, ended = _when(start), _when(end)
            if began is None or began > at:
                dst.execute("UPDATE trials SET state = 'WAITING', datetime_start = NULL, datetime_complete = NULL "
                            "WHERE trial_id = ?", (tid,))
                dst.execute(f"DELETE FROM trial_user_attributes WHERE trial_id = ? AND key IN "
                            f"({','.join('?' * len(CLAIMED))})", (tid, *CLAIMED))
                dst.execute("DELETE FROM trial_values WHERE trial_id = ?", (tid,))
            elif ended is None or ended > at:
                row = dst.execute("SELECT value_json FROM trial_user_attributes WHERE trial_id = ? AND key = 'steps'",
                                  (tid,)).fetchone()
                steps = int(json.loads(row[0])) if row else 0
                share = (at - began) / (ended - began) if ended else 0.0
                dst.execute("UPDATE trials SET state = 'RUNNING', datetime_complete = NULL WHERE trial_id = ?", (tid,))
                dst.execute("DELETE FROM trial_values WHERE trial_id = ?", (tid,))
                dst.execute("DELETE FROM trial_user_attributes WHERE trial_id = ? AND key IN ('step', 'steps')", (tid,))
                dst.execute("INSERT INTO trial_user_attributes (trial_id, key, value_json) VALUES (?, 'step', ?)",
                            (tid, json.dumps(int(share * steps))))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("store", type=Path, nargs="?", help="the study's Optuna SQLite store (.ablate/optuna.db)")
    parser.add_argument("spec", type=Path, nargs="?", help="the study's YAML")
    parser.add_argument("--every", type=float, default=120.0, help="seconds between replayed moments")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--tiny", action="store_true", help="run a tiny study here, then replay it every second")
    args = parser.parse_args()
    if not args.tiny and (args.store is None or args.spec is None):
        parser.error("give STORE and SPEC, or --tiny")

    with tempfile.TemporaryDirectory() as home:
        if args.tiny:
            args.store, args.spec, args.every, args.workers = tiny(Path(home)) + (1.0, 1)
        replay(args.store, args.spec, args.every, args.workers)


def tiny(home: Path) -> tuple[Path, Path]:
    """The quickstart's baseline and one more cell, 2 seeds of 20 steps, run by one worker in ``home``."""
    import os

    from ablate import design
    from ablate.runner import study as st
    from ablate.runner import worker
    from ablate.stores import Stores

    raw = yaml.safe_load((Path(__file__).resolve().parents[1] / "studies" / "quickstart.yaml").read_text())
    raw.update(name="bench_eta_replay", seeds=2, factors={"model.layers": [1, 2]})
    raw["train"].update(steps=20, eval_every=10)
    raw["probes"] = {"every": 10, "batch": 8}
    path = home / "tiny.yaml"
    path.write_text(yaml.safe_dump(raw))
    os.environ["ABLATE_HOME"] = str(home / ".ablate")
    spec = design.validate(raw)
    where = Stores(f"sqlite:///{home / 'optuna.db'}", f"sqlite:///{home / 'mlflow.db'}", None)
    st.prepare(spec, design.items(spec), where)
    worker.work(spec.name, where, wait_for_running=False)
    return home / "optuna.db", path


def replay(store: Path, spec_path: Path, every: float, workers: int) -> None:
    """Print the table of the module's docstring."""
    import optuna

    from ablate import design
    from ablate.runner import countdown, eta, progress

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    spec = design.validate(yaml.safe_load(spec_path.read_text()), str(spec_path))
    items = design.items(spec)
    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as db:
        spans = db.execute("SELECT datetime_start, datetime_complete FROM trials WHERE datetime_start IS NOT NULL "
                           "AND datetime_complete IS NOT NULL").fetchall()
    first, last = min(_when(s) for s, _ in spans), max(_when(e) for _, e in spans)
    print(f"{spec.name}: {len(items)} items, run in {countdown.duration((last - first).total_seconds())}, "
          f"{workers} workers; replayed every {every:g} s")
    print(f"{'at':>8} {'done':>5} {'run':>4} {'wait':>5} {'ETA':>8} {'left':>8} {'ratio':>6}")
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        at = first + dt.timedelta(seconds=min(30.0, every))
        while at < last:
            path = rolled_back(store, at, Path(tmp))
            study = optuna.load_study(study_name=spec.name, storage=f"sqlite:///{path}")

            class Clock(dt.datetime):  # the snapshot's now: the replayed moment
                moment = at

                @classmethod
                def now(cls, tz: dt.tzinfo | None = None) -> dt.datetime:
                    return cls.moment

            progress.datetime, eta.datetime = Clock, Clock
            snap = progress.snapshot(study, items)
            snap.taken = at
            estimate, left = snap.eta_seconds(workers), (last - at).total_seconds()
            ratio = estimate / left if estimate is not None else float("nan")
            if estimate is not None and 10 * snap.done >= len(items):
                ratios.append(ratio)
            shown = countdown.duration(estimate) if estimate is not None else "?"
            print(f"{countdown.duration((at - first).total_seconds()):>8} {snap.done:5d} {snap.running:4d} "
                  f"{snap.waiting + snap.new:5d} {shown:>8} {countdown.duration(left):>8} {ratio:6.2f}", flush=True)
            path.unlink()
            at += dt.timedelta(seconds=every)
    if ratios:
        print(f"from a tenth done on: median ETA / time left {statistics.median(ratios):.2f}, "
              f"largest |ratio - 1| {max(abs(r - 1) for r in ratios):.2f} over {len(ratios)} moments")


if __name__ == "__main__":
    main()
