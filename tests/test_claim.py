"""Claiming a queued item is atomic: concurrent processes never take the same trial."""

from __future__ import annotations

import multiprocessing as mp

import optuna

from ablate.runner.queue import claim
from ablate.runner.study import storage


def _claim_all(url: str, queue) -> None:
    study = optuna.load_study(study_name="race", storage=storage(url))
    got = []
    while (trial := claim(study)) is not None:
        got.append(trial.number)
    queue.put(got)


def test_concurrent_claims_on_sqlite_take_each_trial_once(tmp_path):
    # Without BEGIN IMMEDIATE, pysqlite lets two processes flip the same WAITING trial (seen:
    # 53 claims of 40 trials with 4 processes).
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    study = optuna.create_study(study_name="race", storage=storage(url))
    for i in range(40):
        study.enqueue_trial({}, user_attrs={"item": str(i)})
    queue = mp.get_context("fork").Queue()
    procs = [mp.get_context("fork").Process(target=_claim_all, args=(url, queue)) for _ in range(4)]
    for p in procs:
        p.start()
    claims = [n for _ in procs for n in queue.get(timeout=120)]
    for p in procs:
        p.join()
    assert sorted(claims) == list(range(40))
