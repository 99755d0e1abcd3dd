"""Stores written by an earlier ablate resume under this one without re-running anything.

``fixtures/compat_v1/stores.tar.gz`` holds the ``.ablate`` folder of two studies run with the code
of commit 3fb4a76 (before the one-way restructuring): ``compat_plain`` (4 cells × 2 seeds, 3 trials
finished, 5 queued) and ``compat_tuned`` (2 cells, 2 tuning trials + 1 seed each, 3 finished).
``items.json`` lists the item keys (cell ids) that code computed for the two specs.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import tarfile
from pathlib import Path

import optuna
import pytest
from support import ABLATE

FIXTURE = Path(__file__).parent / "fixtures" / "compat_v1"
WRITTEN_AT = "/tmp/compat"  # where the fixture's stores were written (absolute paths inside them)


def _move_stores(root: Path) -> None:
    """Point the absolute paths recorded in the stores at their new place, as moving a folder of
    stores by hand would require."""
    new = str(root)
    with sqlite3.connect(root / ".ablate" / "mlflow.db") as db:
        db.execute("UPDATE experiments SET artifact_location = replace(artifact_location, ?, ?)", (WRITTEN_AT, new))
        db.execute("UPDATE runs SET artifact_uri = replace(artifact_uri, ?, ?)", (WRITTEN_AT, new))
    with sqlite3.connect(root / ".ablate" / "optuna.db") as db:
        db.execute("UPDATE study_user_attributes SET value_json = replace(value_json, ?, ?)", (WRITTEN_AT, new))


@pytest.fixture
def old_stores(tmp_path: Path) -> Path:
    with tarfile.open(FIXTURE / "stores.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    _move_stores(tmp_path)
    for name in ("plain.yaml", "tuned.yaml"):
        (tmp_path / name).write_text((FIXTURE / name).read_text())
    return tmp_path


def _ablate(root: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "ABLATE_HOME": str(root / ".ablate"), "ABLATE_CACHE_DIR": str(root / "cache")}
    env.pop("ABLATE_STORAGE", None)
    env.pop("ABLATE_TRACKING_URI", None)
    res = subprocess.run([*ABLATE, *args], capture_output=True, text=True, cwd=root,
                         env=env, timeout=600)
    assert res.returncode == 0, f"{args}: {res.stdout}\n{res.stderr}"
    return res


def _trials(root: Path, study: str) -> list[tuple[int, str, str | None]]:
    """(number, state, datetime_complete) of every trial of ``study``."""
    with sqlite3.connect(root / ".ablate" / "optuna.db") as db:
        return db.execute(
            "SELECT t.number, t.state, t.datetime_complete FROM trials t JOIN studies s USING (study_id) "
            "WHERE s.study_name = ? ORDER BY t.number", (study,)).fetchall()


def test_cell_ids_are_those_the_earlier_code_computed() -> None:
    from ablate import design
    from ablate.design import load

    expected = json.loads((FIXTURE / "items.json").read_text())
    for name in ("plain", "tuned"):
        spec = load(FIXTURE / f"{name}.yaml")
        assert [i.key for i in design.items(spec)] == expected[spec.name]


@pytest.mark.slow
def test_a_study_run_before_resumes_without_rerunning_anything(old_stores: Path) -> None:
    root = old_stores
    plan = _ablate(root, "plan", "plain.yaml").stdout
    assert "done 3, failed 0, running 0, pending 5" in plan
    before = {study: _trials(root, study) for study in ("compat_plain", "compat_tuned")}
    finished_before = {study: {(n, when) for n, state, when in rows if state == "COMPLETE"}
                       for study, rows in before.items()}
    assert {s: len(v) for s, v in finished_before.items()} == {"compat_plain": 3, "compat_tuned": 3}

    _ablate(root, "run", "plain.yaml")
    _ablate(root, "run", "tuned.yaml")

    for study, items in (("compat_plain", 8), ("compat_tuned", 6)):
        after = _trials(root, study)
        assert len(after) == items, f"{study}: an item was queued again"
        assert all(state == "COMPLETE" for _, state, _ in after)
        # The trials finished before are untouched: same numbers, same completion times.
        assert finished_before[study] <= {(n, when) for n, _, when in after}

    from mlflow.tracking import MlflowClient

    from ablate import results

    mlc = MlflowClient(f"sqlite:///{root / '.ablate' / 'mlflow.db'}")
    for study, items in (("compat_plain", 8), ("compat_tuned", 6)):
        exp = mlc.get_experiment_by_name(study)
        runs = mlc.search_runs([exp.experiment_id], "tags.`ablate.role` = 'trial'")
        assert sorted(r.info.status for r in runs) == ["FINISHED"] * items
        res = results.load(study, storage=f"sqlite:///{root / '.ablate' / 'optuna.db'}",
                           tracking_uri=f"sqlite:///{root / '.ablate' / 'mlflow.db'}")
        assert res.trials["status"].to_list() == ["complete"] * items
        # Convergence columns: null for the trials of before (they did not record it), set for the new.
        old = {n for n, _ in finished_before[study]}
        for row in res.trials.iter_rows(named=True):
            recorded = [row[k] is not None for k in ("stopped_early", "best_step")]
            assert recorded == [row["trial_number"] not in old] * 2, row
        # optuna-dashboard reads the trials of before as the new ones: their levels are parameters now.
        frozen = optuna.load_study(study_name=study, storage=f"sqlite:///{root / '.ablate' / 'optuna.db'}").trials
        assert all(t.params and set(t.params) >= set(t.user_attrs["settings"]) for t in frozen), study
        # Curves of the runs finished before the change are read as well as the new ones.
        keys = ["cell_id", "seed", "phase"]
        assert set(res.curves.select(keys).unique().iter_rows()) == set(res.trials.select(keys).iter_rows())


def test_results_stored_before_config_keys_are_reused_and_found_stale_after_a_code_change(old_stores, monkeypatch):
    """The earlier trials carry no config key or code version: a new study of the same cells
    links them at code version 1, and after a code change finds them (by the id their configs had
    at version 1) as stale: not reused unless asked."""
    from ablate import design
    from ablate.design import identity
    from ablate.runner import plan as planning
    from ablate.runner import study as st
    from ablate.stores import Stores

    root = old_stores
    stores = Stores(f"sqlite:///{root / '.ablate' / 'optuna.db'}", f"sqlite:///{root / '.ablate' / 'mlflow.db'}", None)
    monkeypatch.chdir(root)
    raw = design.load(root / "plain.yaml").model_dump(mode="json")
    copy_ = design.validate({**raw, "name": "compat_copy"})
    prepared = st.prepare(copy_, design.items(copy_), stores, enqueue_new=False)
    assert prepared.linked == {"compat_plain": 3}  # the 3 trials that had finished, linked as they are
    monkeypatch.setattr(identity, "CODE_VERSION", "2")
    later = design.validate({**raw, "name": "compat_later"})
    plan = planning.build(later, stores.storage, stores.tracking)
    stale = [c for c in plan.cells if c.stale]
    assert sum(len(c.stale) for c in stale) == 3 and not plan.reused
    assert all("code version 1 → 2" in c.source for c in stale)
    assert sum(len(c.reusable) for c in planning.build(later, stores.storage, stores.tracking,
                                                         reuse_stale=True).cells) == 3
