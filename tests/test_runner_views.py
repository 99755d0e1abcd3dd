"""``ablate status`` and ``ablate ls`` as library calls (``ablate.runner.views``): each reads the
stores once and returns an object that prints the command's tables and lines."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from cell_store import PLAIN, finish_all, spec
from optuna.trial import TrialState
from rich.console import Console

from ablate import design
from ablate.runner import housekeeping as hk
from ablate.runner import items as its
from ablate.runner import locate, phases, plan, queue, views
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


def _finish_one(study, outcome: str | None = None) -> None:
    """Claim one item and complete it, or fail it as ``outcome`` ("diverged", "error")."""
    trial = phases.claim(study)
    phases.prepare_item(study, trial)
    if outcome is None:
        queue.finish(study, trial, TrialState.COMPLETE, {"test_accuracy": 0.5, "status": "complete"}, 0.5)
    else:
        queue.finish(study, trial, TrialState.FAIL, {"status": "diverged" if outcome == "diverged" else "failed",
                                                     "failure_kind": outcome, "failure_message": outcome})


def _ls_row(shown: str, name: str) -> dict[str, str]:
    """A study's row of ls's plain table (piped): column → value, up to the last activity."""
    lines = shown.splitlines()
    header = [h.strip() for h in lines[1].split("  ") if h.strip()][:-1]  # "last activity": two words
    row = next(x for x in lines[2:] if x.split()[0] == name).split()
    return dict(zip(header, row[:len(header)], strict=True))


def test_ls_counts_the_current_spec_s_items_as_status_does_and_the_orphans_apart(tmp_path, monkeypatch):
    # `ablate run --set train.steps=…` after a run with the default left the first spec's items in the
    # study: ls counted them as the study's own ("cells 8, done 16" where status said 8/8).
    monkeypatch.setenv("ABLATE_HOME", str(tmp_path))
    monkeypatch.delenv("ABLATE_STORAGE", raising=False)
    monkeypatch.delenv("ABLATE_TRACKING_URI", raising=False)
    stores = resolve()
    first = spec("s")
    st.prepare(first, design.items(first), stores)
    finish_all(st.open_study("s", stores))
    changed = spec("s", train={**PLAIN["train"], "steps": PLAIN["train"]["steps"] + 1})
    st.prepare(changed, design.items(changed), stores)
    study = st.open_study("s", stores)
    _finish_one(study)
    _finish_one(study, "diverged")
    _finish_one(study, "error")
    assert its.retry_failed(study)  # `ablate run --retry-failed`: the failed attempt stays, the item waits again
    st.prepare(changed, design.items(changed), stores)
    found = locate.status("s")
    orphaned = hk.orphans(study, design.items(changed))
    assert orphaned.trials == len(design.items(first))  # the first spec's items are orphans now
    row = next(r for r in views.studies().rows if r.name == "s")
    counts = found.counts()
    assert (row.cells, row.done, row.failed, row.running, row.waiting) == \
        (len(found.cells), counts["done"], counts["failed"], counts["running"], counts["waiting"])
    assert row.done + row.failed + row.running + row.waiting == counts["total"] == len(design.items(changed))
    assert row.orphaned == len(orphaned.finished) + len(orphaned.unfinished) and not row.unread
    shown = _ls_row(printed(views.studies()), "s")
    assert shown["cells"] == str(len(found.cells)) and shown["done"] == "1" and shown["failed"] == "1"
    assert shown["orphaned"] == str(row.orphaned) and shown["dropped"] == "0"
    # Orphans unfinished too: the second spec's items, queued, once the spec changes again.
    again = spec("s", train={**PLAIN["train"], "steps": PLAIN["train"]["steps"] + 2})
    st.prepare(again, design.items(again), stores)
    orphaned = hk.orphans(st.open_study("s", stores), design.items(again))
    row = next(r for r in views.studies().rows if r.name == "s")
    assert orphaned.unfinished and row.orphaned == len(orphaned.finished) + len(orphaned.unfinished)
    assert (row.done, row.waiting) == (0, locate.status("s").counts()["waiting"])


def test_ls_shows_a_study_whose_stored_spec_is_no_longer_accepted_counted_whole(tmp_path, monkeypatch):
    monkeypatch.setenv("ABLATE_HOME", str(tmp_path))
    monkeypatch.delenv("ABLATE_STORAGE", raising=False)
    monkeypatch.delenv("ABLATE_TRACKING_URI", raising=False)
    stores = resolve()
    for name in ("old", "fine"):
        first = spec(name)
        st.prepare(first, design.items(first), stores)
        finish_all(st.open_study(name, stores))
    changed = spec("old", train={**PLAIN["train"], "steps": PLAIN["train"]["steps"] + 1})
    st.prepare(changed, design.items(changed), stores)
    study = st.open_study("old", stores)
    study.set_user_attr("spec", {**study.user_attrs["spec"], "retired": True})  # a key an earlier version knew
    rows = {r.name: r for r in views.studies().rows}
    every = len(design.items(first)) + len(design.items(changed))
    assert rows["old"].orphaned is None and "retired: unknown key" in rows["old"].unread
    assert (rows["old"].done, rows["old"].waiting) == (len(design.items(first)), every - len(design.items(first)))
    assert (rows["fine"].done, rows["fine"].orphaned) == (len(design.items(first)), 0)
    shown = printed(views.studies())
    assert _ls_row(shown, "old")["orphaned"] == "?" and _ls_row(shown, "fine")["orphaned"] == "0"
    note = shown.splitlines()[-1]
    assert note.startswith("? old: its stored spec is one this version of ablate does not accept (retired: unknown")
    assert note.endswith("; its row counts every item it holds, orphans of an earlier spec included")


def test_status_gives_each_cell_s_tuned_setting_once_its_tuning_is_over_and_says_an_edge_pick(
        tmp_path, monkeypatch):
    """Only ``ablate run``'s view said an edge pick, as the replicates started, and nothing said the
    pick itself until the report: workers started by hand or by SLURM, watched with ``ablate
    status``, told neither (lru_ablations' first cell waited 1.5 hours for its replicates, a tuned
    study's tuning running first). A wider space is a new protocol: the narrower one's trials,
    orphans now, say nothing of the current picks."""
    monkeypatch.setenv("ABLATE_HOME", str(tmp_path))
    monkeypatch.delenv("ABLATE_STORAGE", raising=False)
    monkeypatch.delenv("ABLATE_TRACKING_URI", raising=False)
    stores = resolve()
    narrow = {"sampler": "grid", "trials": 3, "space": {"train.lr": [1e-3, 2e-3, 3e-3]}}  # the score peaks at 10^-2.5
    s = spec("s", tune=narrow)
    st.prepare(s, design.items(s), stores)
    opt = st.open_study("s", stores)
    first = phases.claim(opt)  # one tuning item running: no cell's tuning is over
    assert "tuned " not in printed(views.status("s"))
    queue.finish(opt, first, TrialState.FAIL, {"status": "failed", "failure_kind": "error", "failure_message": "x"})
    while (trial := phases.claim(opt)) is not None and trial.user_attrs["phase"] == "tune":
        attrs = phases.prepare_item(opt, trial)
        value = float(-abs(attrs["params"]["train.lr"] - 3e-3))
        queue.finish(opt, trial, TrialState.COMPLETE, {"val_accuracy": value, "status": "complete"}, value)
    # Every tuning item finished (the first failed), no replicate trained yet: each cell's pick.
    shown = printed(views.status("s")).splitlines()
    labels = [c.label for c in design.cells(s)]
    assert [line for line in shown if line.startswith(("tuned ", "note: "))] == [
        *(f"tuned {label}: lr=0.003 (val_accuracy 0.000) · train.lr at the largest end of its space" for label in labels),
        phases.EDGE_NOTE]  # one note for every edge pick: a 32-cell study's picks had read 64 lines
    data = json.loads(printed(views.status("s", as_json=True)))["tuned"]
    assert set(data) == set(labels) and all(
        d["params"] == {"train.lr": 3e-3} and d["tuning_seeds"] == d["tuning_trials"] == 1
        and d["metric"] == "val_accuracy" and "largest" in d["edge_note"] for d in data.values())
    wide = spec("s", tune={**narrow, "space": {"train.lr": [1e-3, 3e-3, 1e-2]}})
    st.prepare(wide, design.items(wide), stores)
    assert "tuned " not in printed(views.status("s")) and "note: " not in printed(views.status("s"))
    finish_all(st.open_study("s", stores))
    picked = [line for line in printed(views.status("s")).splitlines() if line.startswith(("tuned ", "note: "))]
    assert len(picked) == 2 and all(line.startswith("tuned ") for line in picked)  # 3e-3: inside the wider grid
