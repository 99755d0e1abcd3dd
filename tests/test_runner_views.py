"""``ablate status`` and ``ablate ls`` as library calls (``ablate.runner.views``): each reads the
stores once and returns an object that prints the command's tables and lines."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from cell_store import finish_all, spec
from rich.console import Console

from ablate import design
from ablate.runner import plan, views
from ablate.runner import study as st
from ablate.stores import resolve


@pytest.fixture
def tmp_path(shm_tmp_path: Path) -> Path:
    return shm_tmp_path


def printed(view) -> str:
    buffer = io.StringIO()
    view.print(Console(file=buffer, width=10_000))
    return buffer.getvalue()


def test_ls_with_no_stores_creates_none(tmp_path, monkeypatch):
    monkeypatch.setenv("ABLATE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("ABLATE_STORAGE", raising=False)
    listed = views.studies()
    assert listed.url is None and printed(listed) == "no stores yet: no study has run here (see --storage, ABLATE_HOME)\n"
    assert not (tmp_path / "home").exists()


def test_status_and_ls_print_a_study_as_the_commands_do(tmp_path, monkeypatch):
    monkeypatch.setenv("ABLATE_HOME", str(tmp_path))
    monkeypatch.delenv("ABLATE_STORAGE", raising=False)
    monkeypatch.delenv("ABLATE_TRACKING_URI", raising=False)
    stores = resolve()
    s = spec("s")
    st.prepare(s, design.items(s), stores)
    finish_all(st.open_study("s", stores))
    shown = printed(views.status("s"))
    assert shown.startswith("s: status per cell\n")
    assert "s: 4 done · 0 running · 0 waiting · 0 failed (0 diverged)" in shown
    assert {c.label for c in design.cells(s)} <= {line.split("│")[1].strip() for line in shown.splitlines()
                                                   if line.startswith("│")}
    data = json.loads(printed(views.status("s", as_json=True)))
    assert data["counts"]["done"] == 4 and len(data["cells"]) == 2
    listed = printed(views.studies()).splitlines()
    assert listed[0].startswith("studies on sqlite:///") and listed[1].split()[:3] == ["study", "cells", "done"]
    assert listed[2].split()[:4] == ["s", "2", "4", "0"]


def test_status_of_many_cells_is_plain_lines(tmp_path, monkeypatch):
    monkeypatch.setattr(plan, "PLAIN_ROWS", 1)
    monkeypatch.setattr(views, "PLAIN_ROWS", 1)
    monkeypatch.setenv("ABLATE_HOME", str(tmp_path))
    monkeypatch.delenv("ABLATE_STORAGE", raising=False)
    stores = resolve()
    s = spec("s")
    st.prepare(s, design.items(s), stores)
    shown = printed(views.status("s"))
    assert "│" not in shown and "┃" not in shown and shown.startswith("s: status per cell")
