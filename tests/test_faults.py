"""What a kill or a bad file leaves is settled or recovered by the next command, and said: real
``ablate`` processes on real stores with faults injected (``ABLATE_FAULT``, ablate/faults.py)."""

from __future__ import annotations

import signal
import sqlite3
from pathlib import Path

import processes as procs
import pytest


def parent_statuses(root: Path) -> list[str]:
    with sqlite3.connect(f"file:{root / '.ablate' / 'mlflow.db'}?mode=ro", uri=True, timeout=30) as conn:
        return [s for (s,) in conn.execute("SELECT r.status FROM runs r JOIN tags t ON t.run_uuid = r.run_uuid "
                                           "WHERE t.key = 'ablate.role' AND t.value = 'study'")]


# Each point of the end-of-study sequence, and the command run next: any of them settles.
END_OF_STUDY = [("committed", ("status", "faults")), ("settle", ("run", "spec.yaml")),
                ("settled", ("worker", "faults"))]


@pytest.mark.parametrize(("point", "then"), END_OF_STUDY)
def test_a_kill_in_the_end_of_study_sequence_is_settled_by_the_next_command(tmp_path, point, then):
    """kill -9 once the last item is recorded: before its run is ended (committed), before the
    parent run is ended (settle), after it but before that is marked (settled). The next command,
    whichever it is, leaves no run RUNNING and the parent FINISHED, as an undisturbed run does."""
    procs.write_spec(tmp_path, seeds=1)
    proc = procs.spawn(tmp_path, "run", "spec.yaml", ABLATE_FAULT=f"kill@{point}")
    proc.communicate(timeout=300)
    assert proc.returncode == -signal.SIGKILL
    if point != "settled":
        assert parent_statuses(tmp_path) == ["RUNNING"]
    res = procs.ablate(tmp_path, *then)
    assert res.returncode == 0, res.stderr
    assert procs.assert_consistent(tmp_path) == {procs.trials(tmp_path)[0]["item"]: "done"}
    assert parent_statuses(tmp_path) == ["FINISHED"]
    assert [t["state"] for t in procs.trials(tmp_path)] == ["COMPLETE"]  # nothing re-ran


def test_two_workers_killed_with_their_run_once_all_is_recorded_leave_nothing_running(tmp_path):
    """The issue's reproduction: 2 seeds, ``--workers 2``, the whole process group SIGKILLed at the
    parent's end; a later ``ablate run`` finds 0 to run, starts no worker, and still ends it."""
    procs.write_spec(tmp_path)
    proc = procs.spawn(tmp_path, "run", "spec.yaml", "--workers", "2", group=True, ABLATE_FAULT="pause@settle",
                       ABLATE_FAULT_PAUSE_S="300")
    procs.wait_for(lambda: (tmp_path / "fault.mark").exists(), "the parent's end", proc)
    procs.stop(proc, signal.SIGKILL, group=True)
    assert parent_statuses(tmp_path) == ["RUNNING"]
    res = procs.ablate(tmp_path, "run", "spec.yaml")
    assert res.returncode == 0 and "0 to run" in res.stdout, res.stdout + res.stderr
    assert set(procs.assert_consistent(tmp_path).values()) == {"done"}
    assert parent_statuses(tmp_path) == ["FINISHED"]


WSD = {**procs.SPEC["train"], "schedule": "wsd", "steps": 12, "warmup_steps": 2, "decay_steps": 3}


@pytest.fixture(scope="module")
def short_wsd(tmp_path_factory) -> Path:
    """A 12-step WSD study run to the end: its seed's stable-phase checkpoint kept and sealed."""
    root = tmp_path_factory.mktemp("short")
    procs.write_spec(root, name="wsd", train=WSD, seeds=1)
    res = procs.ablate(root, "run", "spec.yaml")
    assert res.returncode == 0, res.stderr
    return root


def kept(root: Path) -> Path:
    (path,) = (root / ".ablate" / "checkpoints" / "stable").glob("*/replicate-seed0/*.pt")
    return path


def damage(path: Path, how: str) -> Path:
    """Damage the kept checkpoint ``path`` (or its description) as ``how`` says; the file damaged."""
    target = path.with_suffix(".json") if how == "truncated json" else path
    if how == "missing checkpoint":
        path.unlink()
    else:
        data = target.read_bytes()
        target.write_bytes(data[: len(data) // 2])
    return target


@pytest.mark.parametrize("how", ["truncated checkpoint", "missing checkpoint", "truncated json"])
def test_an_unsound_kept_checkpoint_trains_from_step_zero_and_says_so(short_wsd, tmp_path, how):
    """The doubled budget would continue the kept checkpoint; damaged, deleted, or with its
    description cut short, the item trains from step 0 instead (the result is the same), never
    fails: ``plan`` says so before, ``run`` prints a warning naming the file, the trial and its
    MLflow run carry the warning."""
    import json
    import shutil

    root = tmp_path / "root"
    shutil.copytree(short_wsd, root)
    assert json.loads(kept(root).with_suffix(".json").read_text())["sha256"]  # sealed when its run ended
    damaged = damage(kept(root), how)
    procs.write_spec(root, name="wsd_long", train={**WSD, "steps": 24}, seeds=1)
    plan = " ".join(procs.ablate(root, "plan", "spec.yaml").stdout.split())
    assert "seed 0: kept checkpoint" in plan and "— trains from step 0" in plan and "continues" not in plan, plan
    pool = ("--workers", "2") if how == "missing checkpoint" else ()  # workers of their own: run prints it too
    res = procs.ablate(root, "run", "spec.yaml", *pool)
    assert res.returncode == 0, res.stderr
    warning = [line for line in res.stderr.splitlines() if line.startswith("warning")]
    assert len(warning) == 1 and damaged.name in warning[0] and "trains from step 0" in warning[0], res.stderr
    (trial,) = [t for t in procs.trials(root) if t["state"] == "COMPLETE" and t.get("steps") == 24]
    assert trial["continued_from"] is None and trial["steps_trained"] == 24
    assert "trains from step 0" in trial["checkpoint_warning"]
    assert [r.get("ablate.checkpoint_warning") for r in procs.runs(root)
            if r["run_id"] == trial["mlflow_run_id"]] == [trial["checkpoint_warning"]]



def test_an_errored_item_is_rerun_by_retry_failed_after_a_fix_keeping_its_failed_attempt(tmp_path):
    """A bug at step 1 fails the item with an error (not retried: the run exits 1, and runs again
    find 0 to run); ``plan`` lists it; after the fix ``run --retry-failed`` re-runs it, its failed
    attempt stays in the record, the run exits 0 and the parent run ends FINISHED (FAILED before)."""
    procs.write_spec(tmp_path, seeds=1)
    res = procs.ablate(tmp_path, "run", "spec.yaml", ABLATE_FAULT="error@1")
    assert res.returncode == 1 and "--retry-failed" in res.stderr, res.stderr
    assert parent_statuses(tmp_path) == ["FAILED"]
    again = procs.ablate(tmp_path, "run", "spec.yaml")
    assert again.returncode == 1 and "0 to run" in again.stdout, again.stdout
    # status says why, and where the traceback is; the results carry it
    status = procs.ablate(tmp_path, "status", "faults").stdout
    assert "failed (1): why" in status and "seed 0: error: " in status and "injected fault at step 1" in status
    assert "trials['traceback']" in status, status
    from ablate import results

    (tb,) = results.load("faults", home=tmp_path / ".ablate", curves=False).trials["traceback"].to_list()
    assert tb.startswith("Traceback (most recent call last)") and "injected fault at step 1" in tb
    plan = " ".join(procs.ablate(tmp_path, "plan", "spec.yaml").stdout.split())
    assert "failed with an error: 1 item;" in plan and "--retry-failed" in plan and "seed 0: error:" in plan, plan
    assert "injected fault at step 1" in plan
    # Under a changed spec (a fix that made new cells) the failure belongs to no cell: an orphan,
    # not an item --retry-failed would re-run (plan listed it, and run said it retried it).
    changed = " ".join(procs.ablate(tmp_path, "plan", "spec.yaml", "--set", "train.lr=0.002").stdout.split())
    assert "failed with an error" not in changed and "orphaned: 1 finished trial of" in changed, changed
    res = procs.ablate(tmp_path, "run", "spec.yaml", "--retry-failed")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "retrying 1 failed item," in res.stdout and "1 to run" in res.stdout, res.stdout
    found = procs.trials(tmp_path)
    assert [(t["state"], t.get("failure_kind"), bool(t.get("retried"))) for t in found] == [
        ("FAIL", "error", True), ("COMPLETE", None, False)]
    assert procs.assert_consistent(tmp_path) == {found[0]["item"]: "done"}
    assert parent_statuses(tmp_path) == ["FINISHED"]
    assert "failed with an error" not in procs.ablate(tmp_path, "plan", "spec.yaml").stdout


def test_both_reports_render_what_remains_when_the_reference_lost_its_runs_with_the_tracking_store(tmp_path):
    """The reference cell (the baseline, trained first) recorded, then mlflow.db removed, the study
    finished into a fresh one: the reference's runs (its curves, its norm data) are gone. Both
    reports render (exit 0), the norm report saying the reference has nothing to compare with."""
    procs.write_spec(tmp_path, seeds=1, factors={"model.layers": [1, 2]})
    assert procs.ablate(tmp_path, "run", "spec.yaml", "--workers", "0").returncode == 0
    assert procs.ablate(tmp_path, "worker", "faults", "--max-items", "1").returncode == 0
    (tmp_path / ".ablate" / "mlflow.db").unlink()
    res = procs.ablate(tmp_path, "run", "spec.yaml")
    assert res.returncode == 0, res.stdout + res.stderr
    res = procs.ablate(tmp_path, "report", "faults", "--format", "html", "--out", "out")
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stdout + res.stderr
    assert sorted(p.name for p in (tmp_path / "out").glob("*.html")) == ["accuracy.html", "norm_stability.html"]
    page = (tmp_path / "out" / "norm_stability.html").read_text()
    assert "no value there, so nothing is compared" in page or "has no value" in page
