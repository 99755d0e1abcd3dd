"""``ablate rm``, ``keep`` and ``gc`` as library calls (``ablate.runner.cleanup``): the question asked
through the ``confirm`` handed in, nothing removed when it refuses, the whole message returned;
refusals with their exit status."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from cell_store import PLAIN, finish_all, spec, where
from rich.console import Console
from support import kept_checkpoint

from ablate import design
from ablate.runner import cleanup, phases
from ablate.runner import study as st
from ablate.stores import StorageError
from ablate.terminal import Refused


@pytest.fixture
def tmp_path(shm_tmp_path: Path) -> Path:
    return shm_tmp_path


def text(said) -> str:
    buffer = io.StringIO()
    said.print(Console(file=buffer, width=10_000))
    return buffer.getvalue()


def no(question: str) -> None:
    raise Refused("nothing removed", 1, marked=False)


def test_rm_asks_then_removes_or_removes_nothing(tmp_path):
    stores = where(tmp_path)
    first = spec("s")
    st.prepare(first, design.items(first), stores)
    asked: list[str] = []
    with pytest.raises(Refused):
        cleanup.rm("s", stores, no)
    assert st.open_study("s", stores)  # still there
    said = cleanup.rm("s", stores, asked.append)
    assert asked == ["remove study 's': 4 trials, 0 MLflow runs?"]
    assert text(said) == "removed s: 4 trials, 0 MLflow runs (deleted: `mlflow gc` purges them and their artifacts)\n"
    with pytest.raises(StorageError, match="no study named 's'"):
        cleanup.rm("s", stores, asked.append)


def test_rm_orphans_drops_only_the_orphans_and_keep_refuses_a_bad_name(tmp_path):
    stores = where(tmp_path)
    first = spec("s")
    st.prepare(first, design.items(first), stores)
    finish_all(st.open_study("s", stores))
    assert text(cleanup.rm("s", stores, no, orphans=True)) == "s: no orphaned trials\n"
    changed = spec("s", train={**PLAIN["train"], "lr": 0.001})
    st.prepare(changed, design.items(changed), stores)
    with pytest.raises(Refused) as bad:
        cleanup.keep("s", "s/old", stores)
    assert bad.value.code == 2 and "NEW: 's/old'" in bad.value.lines[0]
    asked: list[str] = []
    said = text(cleanup.rm("s", stores, asked.append, orphans=True))
    assert asked == ["drop 4 finished trials (4 items) and 0 queued items of 's' that belong to no cell of its spec?"]
    assert said.startswith("s: dropped 4 trials; deleted ")
    assert text(cleanup.keep("s", "s-old", stores)) == "s: no finished orphaned trials to keep\n"


def test_gc_asks_before_it_removes_the_checkpoints_no_study_has(tmp_path, monkeypatch):
    monkeypatch.setenv("ABLATE_HOME", str(tmp_path))
    monkeypatch.delenv("ABLATE_CHECKPOINT_DIR", raising=False)
    root = tmp_path / "checkpoints"
    assert text(cleanup.gc(None, no, every=True)) == f"no kept checkpoints under {root / 'stable'}\n"
    kept_checkpoint(root, "deadbeef0000", size=2**20)
    with pytest.raises(Refused) as no_store:
        cleanup.gc(None, no)
    assert no_store.value.code == 1
    with pytest.raises(Refused):
        cleanup.gc(None, no, every=True)
    assert len(phases.kept_checkpoints(root)) == 1
    asked: list[str] = []
    said = cleanup.gc(None, asked.append, every=True)
    assert asked == ["remove 1 kept checkpoint (1.0 MiB) of 1 cell: cell deadbeef0000 (deadbeef0000)?"]
    assert text(said) == "removed 1 kept checkpoint, 1.0 MiB; kept 0\n" and phases.kept_checkpoints(root) == []
