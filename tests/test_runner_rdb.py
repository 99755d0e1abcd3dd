"""Opening the study's storage (ablate.runner.rdb): ablate's indexes added to a store Optuna made
alone, which plain Optuna still reads; Optuna's schema check skipped (no alembic) only for a store
the running Optuna stamped, and a schema it does not know refused."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from ablate.runner.queue import claim
from ablate.runner.study import storage
from ablate.stores import StorageError


@pytest.fixture
def tmp_path(shm_tmp_path: Path) -> Path:
    return shm_tmp_path


def test_an_earlier_store_gets_the_indexes_and_stays_readable_by_plain_optuna(tmp_path):
    path = tmp_path / "optuna.db"
    url = f"sqlite:///{path}"
    plain = optuna.create_study(study_name="old", storage=url)  # Optuna's own schema, no ablate index
    plain.enqueue_trial({}, user_attrs={"item": "0", "cell_id": "c"})
    index_names = "SELECT name FROM sqlite_master WHERE type = 'index' AND name LIKE 'ablate_%'"
    with sqlite3.connect(path) as db:
        assert db.execute(index_names).fetchall() == []
    study = optuna.load_study(study_name="old", storage=storage(url))
    with sqlite3.connect(path) as db:
        assert sorted(r[0] for r in db.execute(index_names)) == ["ablate_attr_cell_id", "ablate_attr_config_key",
                                                                  "ablate_trials_queue"]
    assert claim(study).user_attrs["item"] == "0"
    assert [t.state for t in optuna.load_study(study_name="old", storage=url).trials] == [TrialState.RUNNING]


def test_a_store_stamped_by_this_optuna_opens_without_alembic_and_any_other_takes_optunas_check(
        tmp_path, monkeypatch):
    from optuna.storages._rdb import storage as rdb

    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    optuna.create_study(study_name="s", storage=storage(url))  # created and stamped by Optuna's own path
    optunas = rdb._VersionManager.__mro__[1]
    calls: list[str] = []
    monkeypatch.setattr(optunas, "_init_alembic", lambda self: calls.append("init"))
    monkeypatch.setattr(optunas, "check_table_schema_compatibility", lambda self: calls.append("check"))
    for read_only in (False, True):
        optuna.load_study(study_name="s", storage=storage(url, read_only=read_only))
    assert calls == []
    with sqlite3.connect(tmp_path / "optuna.db") as db:  # as a store an older Optuna left
        db.execute("UPDATE version_info SET library_version = '4.0.0'")
    storage(url)
    assert calls == ["init", "check"]
    monkeypatch.undo()
    with sqlite3.connect(tmp_path / "optuna.db") as db:  # a schema this Optuna does not know
        db.execute("UPDATE alembic_version SET version_num = 'v9.9.9'")
    with pytest.raises(StorageError, match="no longer compatible"):
        storage(url)
