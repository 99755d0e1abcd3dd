"""Housekeeping of a storage's studies (``ablate.runner.housekeeping``): orphans listed, dropped
or kept as a study of their own; ``ls`` / ``rm`` on SQLite and PostgreSQL (with an MLflow server),
keeping what another study references; ``rm`` refusing while workers run.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from cell_store import PLAIN, finish_all, spec, trials_of, where
from typer.testing import CliRunner

from ablate import design
from ablate.cli import app
from ablate.runner import housekeeping as hk
from ablate.runner import items as its
from ablate.runner import phases, sequential_looks
from ablate.runner import plan as planning
from ablate.runner import study as st
from ablate.stores import Stores


@pytest.fixture
def tmp_path(shm_tmp_path: Path) -> Path:
    return shm_tmp_path


# --- orphans -------------------------------------------------------------------------------------------


def test_orphans_are_listed_then_kept_as_a_study_or_dropped(tmp_path, monkeypatch):
    monkeypatch.setenv("ABLATE_HOME", str(tmp_path))
    monkeypatch.delenv("ABLATE_STORAGE", raising=False)
    monkeypatch.delenv("ABLATE_TRACKING_URI", raising=False)
    from ablate.stores import resolve

    stores = resolve()
    first = spec("s")
    st.prepare(first, design.items(first), stores)
    finish_all(st.open_study("s", stores))
    changed = spec("s", train={**PLAIN["train"], "lr": 0.001})  # what `--set train.lr=0.001` makes
    plan = planning.build(changed, stores.storage, stores.tracking)
    lines = planning.orphan_lines(plan.orphans, "s")
    assert plan.orphans.trials == 4 and "orphaned: 4 finished trials of study 's'" in lines[0]
    assert "ablate keep s s-old" in lines[1] and "ablate rm s --orphans" in lines[2]
    st.prepare(changed, design.items(changed), stores)
    assert hk.orphans(st.open_study("s", stores), design.items(changed)).trials == 4
    # Keep them: a study of their own, with the spec they were queued under.
    res = CliRunner().invoke(app, ["keep", "s", "s-old"])
    assert res.exit_code == 0, res.output
    assert "kept 4 orphaned items of s as study s-old" in res.output and "s dropped 4 trials" in res.output
    old = st.open_study("s-old", stores)
    assert old.user_attrs["spec"]["train"]["lr"] == 0.003  # the default, as first run
    assert its.Progress.of(old, design.items(design.validate(old.user_attrs["spec"]))).done == 4
    assert not hk.orphans(st.open_study("s", stores), design.items(changed))
    # Orphans of another change, dropped; the name suggested for keeping them is one not taken.
    again = spec("s", train={**PLAIN["train"], "lr": 0.002})
    st.prepare(again, design.items(again), stores)  # the lr=0.001 items, queued, are orphans now
    found = hk.orphans(st.open_study("s", stores), design.items(again))
    assert len(found.unfinished) == 4 and not found.finished
    assert found.keep_as == "s-old2" and "ablate keep s s-old2" in planning.orphan_lines(found, "s")[1]
    res = CliRunner().invoke(app, ["rm", "s", "--orphans", "--yes"])
    assert res.exit_code == 0 and "dropped 4 trials" in res.output, res.output
    study = st.open_study("s", stores)
    assert not hk.orphans(study, design.items(again))
    assert phases.claim(study).user_attrs["config"]["train"]["lr"] == 0.002  # no dropped item is claimed
    rows = {r.name: r for r in hk.overview(stores)}
    assert rows["s"].dropped == 8 and rows["s-old"].done == 4 and rows["s-old"].reused == 4


def test_ls_counts_a_sequential_study_s_items_as_its_looks_planned_them(tmp_path):
    stores = where(tmp_path)
    seq = spec("q", seeds={"min": 3, "max": 6, "step": 3, "measures": ["test_accuracy"]})
    first_look = design.items(seq)
    st.prepare(seq, first_look, stores)
    study = st.open_study("q", stores)
    finish_all(study)
    planned = {c.id: seq.sequential.max for c in design.cells(seq)}  # a look asked for more seeds
    study.set_user_attr(sequential_looks.STATE, sequential_looks.State(1, planned).dump())
    looks = sequential_looks.items(seq, study)
    st.prepare(seq, looks, stores)
    (row,) = hk.overview(stores, sequential_looks.items)
    # Counted against the first look's items alone, the seeds queued since would be orphans.
    assert len(looks) > len(first_look)
    assert (row.done, row.waiting, row.orphaned) == (len(first_look), len(looks) - len(first_look), 0)


# --- ls / rm on SQLite and PostgreSQL --------------------------------------------------------------


def _ls_rm(stores: Stores, a: str, b: str) -> None:
    """Two studies on ``stores`` (b reuses half of a), then ``ls`` and ``rm a``: b keeps its runs."""
    from mlflow.tracking import MlflowClient

    from ablate import results

    first = spec(a)
    st.ensure_parent_run(st.prepare(first, design.items(first), stores).study, stores)
    finish_all(st.open_study(a, stores), stores=stores)
    follow = spec(b, factors={"variant": {"RotRNN": PLAIN["factors"]["variant"]["RotRNN"]}}, seeds=3)
    prepared = st.prepare(follow, design.items(follow), stores)
    assert prepared.linked == {a: 2} and prepared.queued == 1
    finish_all(st.open_study(b, stores), stores=stores)
    rows = {r.name: r for r in hk.overview(stores)}
    assert (rows[a].cells, rows[a].done, rows[a].reused) == (2, 4, 0)
    assert (rows[b].cells, rows[b].done, rows[b].reused, rows[b].waiting) == (1, 3, 2, 0)
    env = {"ABLATE_STORAGE": stores.storage, "ABLATE_TRACKING_URI": stores.tracking}
    listing = CliRunner().invoke(app, ["ls"], env=env)
    assert listing.exit_code == 0, listing.output
    line = next(x for x in listing.output.splitlines() if x.startswith(b + " "))
    assert line.split()[:4] == [b, "1", "3", "2"]  # piped: plain columns, nothing truncated

    mlc = MlflowClient(stores.tracking)
    runs_a = {r.info.run_id: r for r in mlc.search_runs([mlc.get_experiment_by_name(a).experiment_id])}
    used = {t.user_attrs["mlflow_run_id"] for t in trials_of(stores, b) if t.user_attrs.get("reused_from")}
    assert len(runs_a) == 5 and len(used) == 2 and used <= set(runs_a)  # 4 trials + the parent; 2 reused
    plan = hk.removal(a, stores)
    parent = next(r for r, run in runs_a.items() if run.data.tags.get("ablate.role") == "study")
    assert set(plan.kept) == used | {parent} and set(plan.runs) == set(runs_a) - used - {parent}
    refused = CliRunner().invoke(app, ["rm", a], env=env, input="")
    assert refused.exit_code == 1 and a in {r.name for r in hk.overview(stores)}  # not a terminal: asks for --yes
    res = CliRunner().invoke(app, ["rm", a, "--yes"], env=env)
    assert res.exit_code == 0, res.output
    assert f"removed {a}: 4 trials, 2 MLflow runs" in res.output and f"kept 3 runs in experiment '{a}.removed-" in res.output
    assert a not in {r.name for r in hk.overview(stores)}
    assert mlc.get_experiment_by_name(a) is None  # the name is free for a new study
    for run_id in used | {parent}:
        assert mlc.get_run(run_id).info.lifecycle_stage == "active"
    for run_id in plan.runs:
        assert mlc.get_run(run_id).info.lifecycle_stage == "deleted"
    res_b = results.load(b, stores.storage, stores.tracking, curves=False, metrics=True)
    assert res_b.trials["status"].to_list() == ["complete"] * 3 and res_b.trials["reused_from"].to_list()[:2] == [a, a]
    assert res_b.metrics.select("seed").unique().height == 3  # the reused runs' metrics are still read
    # Removing b now deletes its own run and the experiment; a's kept runs are not b's to delete.
    hk.remove(hk.removal(b, stores), stores)
    assert mlc.get_run(next(iter(used))).info.lifecycle_stage == "active"


def test_ls_and_rm_on_sqlite(tmp_path):
    _ls_rm(where(tmp_path), "a", "b")


def test_ls_and_rm_on_postgresql_and_an_mlflow_server(postgres_db, mlflow_server):
    tag = uuid.uuid4().hex[:6]
    _ls_rm(Stores(postgres_db, mlflow_server, None), f"a-{tag}", f"b-{tag}")


def test_rm_refuses_while_workers_run_and_names_unknown_studies(tmp_path):
    stores = where(tmp_path)
    first = spec("busy")
    st.prepare(first, design.items(first), stores)
    phases.claim(st.open_study("busy", stores))  # a worker at work
    env = {"ABLATE_STORAGE": stores.storage, "ABLATE_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    res = CliRunner().invoke(app, ["rm", "busy", "--yes"], env=env)
    assert res.exit_code == 1 and "1 running trial (workers at work)" in res.output
    res = CliRunner().invoke(app, ["rm", "nope", "--yes"], env=env)
    assert res.exit_code == 1 and "no study named 'nope'" in res.output


# --- the workflows of ``rm --orphans``, ``keep`` and ``rm``, in process -----------------------------


def _changed(stores: Stores, name: str, outcome=None, **changes) -> design.Spec:
    """Study ``name`` run (``changes`` to the plain spec; its items finished as ``outcome`` says),
    then its spec changed (train.lr) and prepared: its first items are finished orphans; returns
    the changed spec."""
    first = spec(name, **changes)
    st.prepare(first, design.items(first), stores)
    finish_all(st.open_study(name, stores), outcome)
    changed = spec(name, **changes, train={**PLAIN["train"], "lr": 0.001})
    st.prepare(changed, design.items(changed), stores)
    return changed


def test_study_orphans_opens_validates_and_drop_drops_them(tmp_path):
    stores = where(tmp_path)
    changed = _changed(stores, "s")
    asked = []

    def items_of(s, study):
        asked.append((s.name, study.study_name))
        return design.items(s)

    found = hk.study_orphans("s", stores, items_of)
    assert asked == [("s", "s")] and len(found.found.finished) == 4 and found.found.trials == 4
    assert {i.key for i in found.items} == {i.key for i in design.items(changed)}
    assert hk.orphans(st.open_study("s", stores), design.items(changed)).trials == 4  # nothing written yet
    dropped = hk.drop(found)
    assert (dropped.trials, dropped.running) == (4, 0)
    assert not hk.study_orphans("s", stores, items_of).found
    with pytest.raises(st.StorageError, match="no study named 'nope'"):
        hk.study_orphans("nope", stores, items_of)


def test_keep_links_the_finished_orphans_as_a_new_study_and_drops_them(tmp_path):
    stores = where(tmp_path)
    changed = _changed(stores, "s")
    done = hk.keep("s", "s-old", stores, lambda s, study: design.items(s))
    assert (done.study, done.new, done.finished, len(done.kept), done.covered, done.left) == ("s", "s-old", 4, 4, 4, 0)
    assert done.dropped is not None and done.dropped.trials == 4
    old = st.open_study("s-old", stores)
    assert done.spec_hash == design.spec_hash(design.validate(old.user_attrs["spec"]))
    assert its.Progress.of(old, design.items(design.validate(old.user_attrs["spec"]))).done == 4
    assert not hk.orphans(st.open_study("s", stores), design.items(changed))
    nothing = hk.keep("s", "s-older", stores, lambda s, study: design.items(s))  # none left to keep
    assert (nothing.finished, nothing.kept, nothing.dropped) == (0, set(), None)
    assert "s-older" not in {r.name for r in hk.overview(stores)}


def test_keep_refuses_a_taken_name_an_unrecorded_spec_and_orphans_it_cannot_link(tmp_path):
    stores = where(tmp_path)
    _changed(stores, "s")
    items_of = lambda s, study: design.items(s)  # noqa: E731
    with pytest.raises(hk.NameTaken, match="a study named 's' exists already: choose another name"):
        hk.keep("s", "s", stores, items_of)
    with pytest.raises(st.StorageError, match="no study named 'nope'"):
        hk.keep("nope", "x", stores, items_of)
    study = st.open_study("s", stores)
    recorded = study.user_attrs["specs"]
    study.set_user_attr("specs", {})  # stores from before ablate recorded spec history
    with pytest.raises(hk.SpecNotRecorded, match="--set name=s-old --workers 0` links them"):
        hk.keep("s", "s-old", stores, items_of)
    study.set_user_attr("specs", recorded)
    assert {r.name for r in hk.overview(stores)} == {"s"}
    # Orphans that failed with an error are no result to link: the new study is not left behind.
    other = {"model": {**PLAIN["model"], "d_model": 8}}  # not the cells of s, whose results it would link
    changed = _changed(stores, "e", outcome=lambda attrs: "error", **other)
    with pytest.raises(hk.NoneKept, match="none of the 4 orphaned items of e could be kept as e-old: none of them "
                                          "is a finished result"):
        hk.keep("e", "e-old", stores, items_of)
    assert isinstance(hk.NoneKept("x"), hk.KeepRefused)
    assert "e-old" not in {r.name for r in hk.overview(stores)}
    assert hk.orphans(st.open_study("e", stores), design.items(changed)).trials == 4


def test_removal_refuses_a_running_study_unless_forced_and_remove_takes_its_checkpoints(tmp_path, monkeypatch):
    monkeypatch.setenv("ABLATE_CHECKPOINT_DIR", str(tmp_path / "ckpt"))
    stores = where(tmp_path)
    first = spec("busy")
    st.prepare(first, design.items(first), stores)
    phases.claim(st.open_study("busy", stores))
    with pytest.raises(hk.StudyRunning, match=r"^busy has 1 running trial \(workers at work\): stop them first, "
                                              "or pass --force$"):
        hk.removal("busy", stores)
    plan = hk.removal("busy", stores, force=True)
    assert (plan.trials, plan.running, plan.users) == (4, 1, [])
    assert plan.checkpoints == tmp_path / "ckpt" / "busy"
    (plan.checkpoints / "x").mkdir(parents=True)
    hk.remove(plan, stores)
    assert not plan.checkpoints.exists() and "busy" not in {r.name for r in hk.overview(stores)}
    assert hk.Removal("a", 1, 0, None, kept={"r1": ["c", "b"], "r2": ["b"], "parent": []}).users == ["b", "c"]


def test_studied_cells_are_those_of_trials_not_dropped(tmp_path):
    stores = where(tmp_path)
    changed = _changed(stores, "s")
    first_cells = {c.id for c in design.cells(spec("s"))}
    now = {c.id for c in design.cells(changed)}
    assert first_cells.isdisjoint(now) and hk.studied_cells(stores.storage) == first_cells | now
    hk.drop(hk.study_orphans("s", stores, lambda s, study: design.items(s)))
    assert hk.studied_cells(stores.storage) == now


def test_rm_asks_plainly_what_it_removes_and_what_stays_reusable():
    # Issue 43: "48 trials, 0 MLflow runs; keep 49 runs that norm_depth reuse?" said neither that the
    # runs stay reusable nor that plan keeps naming the removed study.
    from ablate.runner.housekeeping import removal_question

    every = hk.Removal("old", 48, 0, None, runs=[], kept={f"r{k}": ["norm_depth"] for k in range(49)})
    removed, question = removal_question(every)
    assert removed == "48 trials"
    assert question == ("remove study 'old': 48 trials; 49 MLflow runs (the parent run's included) stay, since "
                        "norm_depth reuses them: their results stay reusable, and plan still names 'old' as where "
                        "they were trained?")
    some = hk.Removal("a", 4, 0, None, runs=["x", "y"], kept={"p": ["b", "c"], "q": ["b"]})
    assert removal_question(some)[0] == "4 trials, 2 MLflow runs"
    assert "2 MLflow runs (the parent run's included) stay, since b, c reuse them" in removal_question(some)[1]
    alone = hk.Removal("z", 1, 0, None, runs=["x"])
    assert removal_question(alone) == ("1 trial, 1 MLflow run", "remove study 'z': 1 trial, 1 MLflow run?")
