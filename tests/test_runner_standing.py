"""What a storage holds for a spec, read without writing (``ablate.runner.standing``): each item's
status as the results API reports it (``statuses``, what ``ablate status`` counts), checked
against ``ablate.results`` on a study whose items stand in every state a queue can leave them in.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from optuna.trial import TrialState
from support import spec_dict
from typer.testing import CliRunner

from ablate import design
from ablate.runner import items as its
from ablate.runner import phases, queue
from ablate.runner import standing as sd
from ablate.runner import study as st

BASE = spec_dict(name="mixed", seeds=4)


@pytest.fixture
def tmp_path(shm_tmp_path: Path) -> Path:
    return shm_tmp_path


class _Only:
    """A claim's gate that lets one item through."""

    keys = ("item",)

    def __init__(self, item: str) -> None:
        self.item = item

    def hold(self, attrs):
        return None if attrs.get("item") == self.item else {"item": attrs.get("item")}


def _mixed_study(tmp_path, monkeypatch):
    """BASE queued, its items left in every state: complete, pruned, diverged, failed with an error,
    killed and re-queued, killed past the retry bound, running, failed for a reason re-running may
    fix (new again), a result whose longer run is queued, a dropped result, and waiting."""
    from ablate.stores import resolve

    monkeypatch.setenv("ABLATE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("ABLATE_STORAGE", raising=False)
    monkeypatch.delenv("ABLATE_TRACKING_URI", raising=False)
    spec = design.validate(copy.deepcopy(BASE))
    study, _ = st.prepare(spec, design.items(spec), resolve())

    def finish(state, attrs, value=None):
        trial = phases.claim(study)
        queue.finish(study, trial, state, {"steps": 5, **attrs}, value)
        return trial

    finish(TrialState.COMPLETE, {"status": "complete", "val_accuracy": 0.5, "test_accuracy": 0.25, "seconds": 1.5}, 0.5)
    finish(TrialState.PRUNED, {"status": "pruned", "seconds": 0.5})
    finish(TrialState.FAIL, {"status": "diverged", "failure_kind": "diverged", "seconds": 0.25})
    finish(TrialState.FAIL, {"status": "failed", "failure_kind": "error", "failure_message": "boom"})
    killed = phases.claim(study)
    assert st.declare_dead(study, killed.number)  # failed as killed, its item re-queued (behind the others)
    finish(TrialState.FAIL, {"status": "failed", "failure_kind": "oom"})  # not re-queued: new again
    # a result whose longer run is queued: the longest finished run stands for it
    base = finish(TrialState.COMPLETE, {"status": "complete", "val_accuracy": 0.6, "test_accuracy": 0.5, "seconds": 2.0,
                                        "continued_from": {"cell": "c", "label": "l", "seed": 0, "step": 3}}, 0.6)
    longer = queue.trial(study, base.number).user_attrs
    queue.enqueue(study, {**{k: longer[k] for k in ("item", "cell_id", "cell_label", "seed", "phase", "config")},
                          its.BUDGET: 10, its.EXTENDED_FROM: {"number": base.number, "steps": 5}})
    dropped = finish(TrialState.COMPLETE, {"status": "complete", "val_accuracy": 0.7, "seconds": 3.0}, 0.7)
    queue.set_finished_attrs(study, [dropped.number], {its.DROPPED: {"why": "test"}})
    again = phases.claim(study)  # killed past the retry bound: failed for good
    for _ in range(its.MAX_RETRIES):
        assert st.declare_dead(study, again.number)
        again = queue.claim(study, _Only(again.user_attrs["item"]))  # its re-queued copy
    assert st.declare_dead(study, again.number)
    running = phases.claim(study)
    queue.beat(study, running.number, {"step": 2, "worker": "host:1"})
    return spec


def _results_rows(name: str) -> list[dict]:
    from ablate import results

    return results.load(name, curves=False).trials.select("cell_id", "cell_label", "status", "seconds",
                                                         "continued_from", "phase", "test_accuracy").to_dicts()


def test_statuses_are_the_results_apis(tmp_path, monkeypatch):
    spec = _mixed_study(tmp_path, monkeypatch)
    from ablate.stores import resolve

    found = sd.statuses(st.open_study(spec.name, resolve(), read_only=True), design.items(spec))
    rows = _results_rows(spec.name)
    assert [(s.status, s.seconds, s.continued) for s in found] == \
        [(r["status"], r["seconds"], r["continued_from"] is not None) for r in rows]
    seen = {s.status for s in found}
    assert seen == {"complete", "pruned", "running", "pending", "diverged", "failed", "killed"}, seen
    assert any(s.continued for s in found)


def test_status_counts_each_cell_as_the_results_api(tmp_path, monkeypatch):
    """``ablate status`` reads the statuses without the results API's frames: the same counts."""
    from ablate.cli import app
    from ablate.runner.standing import STATUSES

    spec = _mixed_study(tmp_path, monkeypatch)
    res = CliRunner().invoke(app, ["status", spec.name, "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    expected: dict[tuple[str, str], dict] = {}
    for r in _results_rows(spec.name):
        cell = expected.setdefault((r["cell_id"], r["cell_label"]), {"cell_id": r["cell_id"], "cell_label": r["cell_label"],
                                                                     "trials": 0, **dict.fromkeys(STATUSES, 0)})
        cell["trials"] += 1
        cell[r["status"]] += 1
        if r["status"] == "complete" and r["phase"] == "replicate" and r["test_accuracy"] is not None:
            cell.setdefault("values", []).append(r["test_accuracy"])
    for cell in expected.values():  # status's first look: the finished replicates' mean test accuracy
        values = cell.pop("values", [])
        cell.update(test_accuracy=sum(values) / len(values) if values else None, test_accuracy_n=len(values))
    assert any(c["test_accuracy_n"] for c in expected.values())
    assert data["cells"] == list(expected.values())
    shown = CliRunner().invoke(app, ["status", spec.name]).output
    mean = next(c for c in expected.values() if c["test_accuracy_n"])
    assert "test acc (mean, descriptive)" in shown and f"{mean['test_accuracy']:.3f} (n={mean['test_accuracy_n']})" in shown
    total = len(design.items(spec))
    assert data["counts"]["total"] == total and sum(c["trials"] for c in data["cells"]) == total
    text = CliRunner().invoke(app, ["status", spec.name])
    assert text.exit_code == 0, text.output
    c = data["counts"]
    assert (f"{spec.name}: {c['done']} done · {c['running']} running · {c['waiting']} waiting · {c['failed']} failed "
            f"({c['diverged']} diverged)") in text.output
    assert "continued: " in text.output  # the continued result's line (WSD continuations)


def test_study_status_counts_cells_and_totals_in_process(tmp_path, monkeypatch):
    """``study_status``, what ``ablate status`` prints, driven without the command: the counts per
    cell and in total, the ``--json`` counts, the summary line, the seconds per item and the
    continued result's line."""
    from ablate.stores import resolve

    spec = _mixed_study(tmp_path, monkeypatch)
    items = design.items(spec)
    opt = st.open_study(spec.name, resolve(), read_only=True)
    got = sd.study_status(spec.name, opt, items)
    found = sd.statuses(opt, items)
    assert got.found == found and got.study is opt
    assert [c["cell_label"] for c in got.cells] == list(dict.fromkeys(i.cell.label for i in items))
    assert sum(c["trials"] for c in got.cells) == len(items)
    for s in sd.STATUSES:
        assert got.totals[s] == sum(f.status == s for f in found) == sum(c[s] for c in got.cells)
    t = got.totals
    assert t["complete"] == 2 and t["pruned"] == 1 and t["diverged"] == 1 and t["running"] == 1
    assert got.counts() == {"done": 3, "running": 1, "waiting": t["pending"], "failed": 1 + t["failed"] + t["killed"],
                            "diverged": 1, "total": len(items)}
    assert got.summary("5s") == (f"mixed: 3 done · 1 running · {t['pending']} waiting · {got.failed} failed "
                                 "(1 diverged) · ETA 5s")
    snapshot = {"study": "mixed", "counts": {"done": 0}, "eta_seconds": None}
    as_json = got.to_json(snapshot)
    assert list(as_json) == ["study", "counts", "eta_seconds", "cells"] and as_json["counts"] == got.counts()
    assert got.seconds_per_item() == (1.5 + 2.0) / 2  # the complete items' representatives (not the dropped run)
    assert got.sequential == [] and any(line.startswith("continued: ") for line in got.extension_lines())


def test_plan_reads_the_store_without_writing_beside_it(tmp_path, monkeypatch):
    """``standing`` (what ``ablate plan`` reads) opened the store for writing: it left a lock file
    beside it, and on a read-only filesystem it could not open it at all, so the plan showed every
    finished item as new."""
    import os
    import shutil
    import subprocess

    from ablate.stores import resolve

    spec = _mixed_study(tmp_path, monkeypatch)
    home = tmp_path / "home"
    for lock in home.glob("*.lock"):
        lock.unlink()
    found = sd.standing(spec.name, design.items(spec), None, resolve().tracking)
    assert found is not None and found.stored
    assert "done" in found.states.values() and "running" in found.states.values()
    assert not list(home.glob("*.lock"))  # SQLite's own -wal/-shm of a reader aside, nothing is written
    mount = tmp_path / "ro"
    mount.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=50m", "tmpfs", str(mount)]).returncode:
        pytest.skip("mounting a tmpfs read-only needs root")
    try:
        shutil.copytree(home, mount / "home", ignore=shutil.ignore_patterns("*-wal", "*-shm"))
        subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
        monkeypatch.setenv("ABLATE_HOME", str(mount / "home"))
        assert sd.standing(spec.name, design.items(spec), None, resolve().tracking).states == found.states
    finally:
        subprocess.run(["umount", "--lazy", str(mount)])
