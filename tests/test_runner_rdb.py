"""Opening the study's storage (ablate.runner.rdb): ablate's indexes added to a store Optuna made
alone, which plain Optuna still reads; Optuna's schema check skipped (no alembic) only for a store
the running Optuna stamped, and a schema it does not know refused."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from ablate.runner import queue
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


def test_the_studies_of_a_storage_are_opened_listed_and_deleted_through_the_seam(tmp_path):
    from ablate.runner import study as st

    store = st.storage(f"sqlite:///{tmp_path / 'optuna.db'}")
    assert st.names(store) == []
    made = st.create(store, "a")
    made.set_user_attr("tracking_uri", "file:///x")
    assert st.create(store, "a").study_name == "a"  # created once, loaded after
    st.create(store, "b")
    assert sorted(st.names(store)) == ["a", "b"]
    assert {s.study_name: s.user_attrs.get("tracking_uri") for s in st.summaries(store)} == {"a": "file:///x", "b": None}
    assert st.load(store, "a").user_attrs["tracking_uri"] == "file:///x"
    st.delete(store, "a")
    assert st.names(store) == ["b"]
    with pytest.raises(KeyError):
        st.load(store, "a")


def test_optunas_exceptions_are_caught_under_ablates_names(tmp_path):
    from ablate.runner import study as st

    made = st.create(st.storage(f"sqlite:///{tmp_path / 'optuna.db'}"), "a")
    trial = made.ask()
    made.tell(trial, 1.0)
    with pytest.raises(st.TrialFinished):  # another process finished it first
        queue.set_running_attrs(made, trial, {"status": "running"})
    assert issubclass(st.Pruned, Exception) and issubclass(st.StorageInternal, Exception)
    dist = optuna.distributions.CategoricalDistribution(["x", "y"])
    assert queue.stored_distribution(optuna.distributions.distribution_to_json(dist)) == dist


def _tables(path: Path) -> tuple[list, tuple]:
    with sqlite3.connect(path) as con:
        schema = sorted(con.execute("SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'"))
        return schema, con.execute("SELECT schema_version, library_version FROM version_info").fetchone()


def test_a_fresh_study_storage_is_a_copy_of_the_first_one_optuna_built(tmp_path, monkeypatch):
    """Optuna's table creation and Alembic stamp run once per Optuna version; a later fresh store
    is a copy of that first build (its schema and version stamp, ablate's indexes), and a damaged
    copy is dropped and built again by Optuna."""
    from ablate.runner import rdb

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    template = rdb.store_template()
    assert not template.exists()
    first, second = tmp_path / "a.db", tmp_path / "b.db"
    optuna.create_study(storage=storage(f"sqlite:///{first}"), study_name="one")
    assert template.is_file()
    schema, stamp = _tables(template)
    assert stamp == (optuna.storages._rdb.models.SCHEMA_VERSION, optuna.__version__)
    assert not sqlite3.connect(template).execute("SELECT * FROM studies").fetchall()  # built before any study
    study = optuna.create_study(storage=storage(f"sqlite:///{second}"), study_name="two")
    assert _tables(second) == (schema, stamp) == _tables(first)
    queue.enqueue_many(study, [{"cell_id": "c", "seed": 0}])
    assert claim(study).number == 0
    template.write_bytes(b"SQLite format 3\x00" + b"\x00" * 100)  # a truncated file
    third = tmp_path / "c.db"
    optuna.create_study(storage=storage(f"sqlite:///{third}"), study_name="three")
    assert _tables(third) == (schema, stamp) and _tables(template) == (schema, stamp)  # rebuilt from it


def damaged(path: Path, table: str) -> None:
    """Garbage over the root page of ``table``: SQLite says "malformed" when a query reads it."""
    with sqlite3.connect(path) as db:
        page_size = db.execute("PRAGMA page_size").fetchone()[0]
        (root,) = db.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()
    with open(path, "r+b") as f:
        f.seek((root - 1) * page_size)
        f.write(b"\xab" * page_size)


def test_a_damaged_store_is_a_store_error_saying_what_the_database_said_not_optunas_guess(tmp_path):
    from ablate.runner import study as st

    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    st.create(st.storage(url), "a")
    damaged(tmp_path / "optuna.db", "studies")  # opening reads other tables: the study's first read fails
    for read_only in (True, False):
        store = st.storage(url, read_only=read_only)
        for call, args in ((st.load, (store, "a")), (st.names, (store,)), (st.summaries, (store,)),
                           (st.delete, (store, "a"))):
            with pytest.raises(StorageError) as info:
                call(*args)
            # the URL the user gave, not the file: URI a read-only store is opened through
            assert str(info.value) == f"cannot open storage {url}: database disk image is malformed"
