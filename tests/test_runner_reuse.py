"""One cell store (``ablate.runner.reuse``): items finished in one study are linked, not re-run, by
any other study on the same stores; stale results (another code version) only when asked; tuned
cells whole or not at all; an item finished elsewhere after it was queued is linked when claimed.
The follow-up test at the end runs ``ablate`` itself, twice, and counts trials and MLflow runs.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import optuna
import pytest
import yaml
from cell_store import PLAIN, finish_all, spec, trials_of, where
from optuna.trial import TrialState
from support import ABLATE, RAW, score
from typer.testing import CliRunner

from ablate import design
from ablate.cli import app
from ablate.design import identity
from ablate.runner import housekeeping as hk
from ablate.runner import items as its
from ablate.runner import phases, queue
from ablate.runner import plan as planning
from ablate.runner import study as st
from ablate.stores import Stores


@pytest.fixture
def tmp_path(shm_tmp_path: Path) -> Path:
    return shm_tmp_path


def test_a_follow_up_links_exactly_the_finished_items_it_shares_and_seeds_extend(tmp_path):
    stores = where(tmp_path)
    first = spec("first")
    st.prepare(first, design.items(first), stores)
    ran = finish_all(st.open_study("first", stores))
    assert len(ran) == 4
    # A follow-up: one more factor (its baseline level is the first study's), one more seed.
    follow = spec("follow", factors={**PLAIN["factors"], "model.layers": [1, 2]}, seeds=3)
    shared = {i.key for i in design.items(follow)} & set(ran)
    assert len(shared) == 4
    plan = planning.build(follow, stores.storage, stores.tracking)
    assert [c.status for c in plan.cells] == ["partial", "new", "partial", "new"]
    assert all("reused from study first (2 of 3)" in c.source for c in plan.cells if c.status == "partial")
    assert len(plan.pending()) == 12 - 4 and sum(plan.reused.values()) == 4
    assert "reused 4 (4 from first), pending 8" in planning.counts_line(plan)

    prepared = st.prepare(follow, design.items(follow), stores)
    assert prepared.linked == {"first": 4} and prepared.queued == 8 and prepared.stale == 0
    study, queued = prepared  # unpacks as before
    assert queued == 8
    trials = trials_of(stores, "follow")
    linked = [t for t in trials if t.user_attrs.get("reused_from")]
    assert {t.user_attrs["item"] for t in linked} == shared  # exactly those, each once
    assert all(t.state == TrialState.COMPLETE for t in linked)
    # optuna-dashboard reads a linked trial's levels as it reads a trained one's: as parameters.
    for t in linked:
        assert t.params == t.user_attrs["settings"] and set(t.params) == {*PLAIN["factors"], "model.layers"}, t.params
    source = {t.user_attrs["item"]: t for t in trials_of(stores, "first")}
    labels = {c.id: c.label for c in design.cells(follow)}
    for t in linked:
        origin = source[t.user_attrs["item"]]
        assert t.user_attrs["reused_from"] == {"study": "first", "number": origin.number, "item": origin.user_attrs["item"],
                                               "code_version": "1", "stale": False}
        assert t.value == origin.value and t.user_attrs["test_accuracy"] == origin.user_attrs["test_accuracy"]
        assert t.datetime_complete == origin.datetime_complete  # when it was trained, not linked
        assert t.user_attrs["cell_label"] == labels[t.user_attrs["cell_id"]]  # this study's label, not the source's
    assert its.Progress.of(study, design.items(follow)).done == 4
    # Preparing again links and queues nothing; a third study takes the original, not the link.
    again = st.prepare(follow, design.items(follow), stores)
    assert again.queued == 0 and not again.linked
    third = st.prepare(spec("third"), design.items(spec("third")), stores)
    assert third.linked == {"first": 4}
    assert {t.user_attrs["reused_from"]["study"] for t in trials_of(stores, "third")} == {"first"}
    # Asking for more seeds in the same study runs only the new ones.
    more = spec("first", seeds=4)
    assert st.prepare(more, design.items(more), stores).queued == 4


def test_reuse_can_be_turned_off_and_needs_the_same_tracking_store(tmp_path):
    stores = where(tmp_path)
    first = spec("first")
    st.prepare(first, design.items(first), stores)
    finish_all(st.open_study("first", stores))
    fresh = spec("fresh")
    assert st.prepare(fresh, design.items(fresh), stores, reuse=False).queued == 4
    elsewhere = Stores(stores.storage, f"sqlite:///{tmp_path / 'other-mlflow.db'}", None)
    other = spec("other")
    assert st.prepare(other, design.items(other), elsewhere).queued == 4  # its runs could not be read there


def test_a_divergence_is_reused_an_error_is_not(tmp_path):
    stores = where(tmp_path)
    first = spec("first")
    st.prepare(first, design.items(first), stores)

    def outcome(attrs):
        return {0: "diverged", 1: "error"}[attrs["seed"]] if attrs["cell_label"] == "LRU" else None

    finish_all(st.open_study("first", stores), outcome)
    follow = spec("follow")
    prepared = st.prepare(follow, design.items(follow), stores)
    assert prepared.linked == {"first": 3} and prepared.queued == 1
    states = its.states_by_item(prepared.study)
    lru = [i for i in design.items(follow) if i.cell.label == "LRU"]
    assert states[lru[0].key] == "failed" and states[lru[1].key] == "waiting"
    diverged = [t for t in trials_of(stores, "follow") if t.user_attrs.get("failure_kind") == "diverged"]
    assert len(diverged) == 1 and diverged[0].state == TrialState.FAIL and diverged[0].user_attrs["reused_from"]


def test_stale_results_are_found_by_config_key_and_reused_only_when_asked(tmp_path, monkeypatch):
    stores = where(tmp_path)
    first = spec("first")
    st.prepare(first, design.items(first), stores)
    finish_all(st.open_study("first", stores))
    old_keys = {i.key for i in design.items(first)}
    monkeypatch.setattr(identity, "CODE_VERSION", "2")  # the models changed: every cell id with them
    again = spec("again")
    assert not {i.key for i in design.items(again)} & old_keys
    assert [c.config_key for c in design.cells(again)] == [c.config_key for c in design.cells(first)]
    plan = planning.build(again, stores.storage, stores.tracking)
    assert [c.status for c in plan.cells] == ["stale", "stale"]
    assert all(c.source.startswith("stale (code version 1 → 2): 2 in study first") for c in plan.cells)
    assert len(plan.pending()) == 4 and "--reuse-stale reuses them" in planning.stale_lines(plan)[0]
    chosen = planning.build(again, stores.storage, stores.tracking, reuse_stale=True)
    assert [c.status for c in chosen.cells] == ["reused", "reused"] and not chosen.pending()
    assert "(stale: code version 1 → 2)" in chosen.cells[0].source

    prepared = st.prepare(again, design.items(again), stores)
    assert prepared.queued == 4 and not prepared.linked and len(prepared.reuse.stale) == 4
    explicit = spec("explicit")
    prepared = st.prepare(explicit, design.items(explicit), stores, reuse_stale=True)
    assert prepared.linked == {"first": 4} and prepared.stale == 4 and prepared.queued == 0
    for t in trials_of(stores, "explicit"):
        assert t.user_attrs["code_version"] == "1" and t.user_attrs["reused_from"]["stale"] is True
        assert t.user_attrs["cell_id"] in {c.id for c in design.cells(explicit)}
    # A stale link is no exact source for a later study at the new code version.
    later = spec("later")
    assert st.prepare(later, design.items(later), stores).queued == 4
    # The first study re-planned under the new code: its old trials are orphans, and stale.
    plan = planning.build(first, stores.storage, stores.tracking)
    assert plan.orphans.trials == 4 and {c.status for c in plan.cells} == {"stale"}


def test_a_tuned_cell_is_reused_whole_or_not_at_all(tmp_path):
    stores = where(tmp_path)
    tuned = design.validate({**RAW, "name": "t1"})
    st.prepare(tuned, design.items(tuned), stores)
    finish_all(st.open_study("t1", stores))
    same = design.validate({**RAW, "name": "t2"})
    prepared = st.prepare(same, design.items(same), stores)
    assert prepared.linked == {"t1": 2 * (4 + 2)} and prepared.queued == 0
    # Another budget (not part of the cell id): neither tuning nor replicates are reused.
    budget = design.validate({**RAW, "name": "t3", "tune": {**RAW["tune"], "trials": 5}})
    assert {c.id for c in design.cells(budget)} == {c.id for c in design.cells(tuned)}
    prepared = st.prepare(budget, design.items(budget), stores)
    assert not prepared.linked and prepared.queued == 2 * (5 + 2)
    assert all("tuned in t1 with 4 trials, this spec asks for 5" in why for why in prepared.reuse.held.values())
    assert len(prepared.reuse.held) == 2
    # One more seed: the tuning and the two replicates are linked, the new seed runs on the same best.
    seeds = design.validate({**RAW, "name": "t4", "seeds": 3})
    prepared = st.prepare(seeds, design.items(seeds), stores)
    assert prepared.linked == {"t1": 2 * (4 + 2)} and prepared.queued == 2
    best = {t.user_attrs["cell_id"]: t.user_attrs["params"] for t in trials_of(stores, "t1")
            if t.user_attrs["phase"] == "replicate"}
    study = prepared.study
    trial = phases.claim(study)
    attrs = phases.prepare_item(study, trial)
    assert attrs["phase"] == "replicate" and attrs["seed"] == 2 and attrs["params"] == best[attrs["cell_id"]]


def finish_but_one_tuning_trial(study: optuna.Study, index: int, state: TrialState, attrs: dict) -> None:
    """Finish every claimable item with a made-up score, except each cell's tuning trial ``index``:
    ``state`` with ``attrs`` (every time it is claimed again)."""
    while (trial := phases.claim(study)) is not None:
        item = phases.prepare_item(study, trial)
        if item["phase"] == "tune" and item["index"] == index:
            queue.finish(study, trial, state, attrs)
        else:
            value = score(item["config"])
            queue.finish(study, trial, TrialState.COMPLETE, {"val_accuracy": value, "status": "complete"}, value)


def test_a_tuned_cell_with_a_pruned_tuning_trial_is_reused_whole_and_kept(tmp_path, monkeypatch):
    """A pruner's stop is a tuning result: before, one pruned tuning trial made a cell look
    "failed with an error", so neither another study nor `ablate keep` could take it."""
    monkeypatch.setenv("ABLATE_HOME", str(tmp_path))
    monkeypatch.delenv("ABLATE_STORAGE", raising=False)
    monkeypatch.delenv("ABLATE_TRACKING_URI", raising=False)
    from ablate.stores import resolve

    stores = resolve()
    tuned = design.validate({**RAW, "name": "p1"})
    st.prepare(tuned, design.items(tuned), stores)
    finish_but_one_tuning_trial(st.open_study("p1", stores), 3, TrialState.PRUNED, {"status": "pruned"})
    assert sum(t.state == TrialState.PRUNED for t in trials_of(stores, "p1")) == 2  # one per cell
    same = design.validate({**RAW, "name": "p2"})
    prepared = st.prepare(same, design.items(same), stores)
    assert prepared.linked == {"p1": 2 * (4 + 2)} and prepared.queued == 0 and not prepared.reuse.held
    assert sum(t.state == TrialState.PRUNED for t in trials_of(stores, "p2")) == 2
    # The same cells orphaned by a change, then kept as a study of their own: all of them.
    changed = design.validate({**RAW, "name": "p1", "train": {**RAW["train"], "lr": 0.001}})
    st.prepare(changed, design.items(changed), stores)
    res = CliRunner().invoke(app, ["keep", "p1", "p1-old"])
    assert res.exit_code == 0, res.output
    assert "kept 12 orphaned items of p1 as study p1-old" in res.output and "stay" not in res.output
    # Orphans no study can take whole (a tuning trial that failed with an error): a clear error,
    # and no empty study left under the name. Other stores: p1 and p2 hold these cells whole.
    monkeypatch.setenv("ABLATE_HOME", str(tmp_path / "other"))
    stores = resolve()
    again = design.validate({**RAW, "name": "p3"})
    st.prepare(again, design.items(again), stores)
    finish_but_one_tuning_trial(st.open_study("p3", stores), 0, TrialState.FAIL,
                                {"status": "failed", "failure_kind": "error"})
    changed = design.validate({**RAW, "name": "p3", "train": {**RAW["train"], "lr": 0.001}})
    st.prepare(changed, design.items(changed), stores)
    res = CliRunner().invoke(app, ["keep", "p3", "p3-old"])
    assert res.exit_code == 1 and "could be kept as p3-old" in res.output and "failed with an error" in res.output
    assert "p3-old" not in {r.name for r in hk.overview(stores)}


def test_an_item_finished_elsewhere_after_it_was_queued_is_linked_when_claimed(tmp_path):
    from ablate.runner.worker import run_item

    stores = where(tmp_path)
    first, follow = spec("first"), spec("follow")
    st.prepare(first, design.items(first), stores)
    assert st.prepare(follow, design.items(follow), stores).queued == 4  # nothing finished yet
    finish_all(st.open_study("first", stores))
    study = st.open_study("follow", stores)
    events = []
    trial = phases.claim(study)
    assert run_item(study, trial, stores, "cpu", lambda e, info: events.append((e, info))) == "reused"
    assert events[0][0] == "reused" and "first" in events[0][1]["message"]
    done = queue.trial(study, trial.number)
    assert done.state == TrialState.COMPLETE and done.user_attrs["reused_from"]["study"] == "first"
    assert done.user_attrs["test_accuracy"] is not None and done.user_attrs["item"] == trial.user_attrs["item"]


# --- the commands, in processes of their own ----------------------------------------------------------

TINY = {
    "name": "fa",
    "task": {"name": "listops", "max_depth": 3, "max_length": 24, "train_size": 120, "val_size": 32,
             "test_size": 32, "seed": 0},
    "model": {"d_model": 8, "state_dim": 8, "layers": 1, "heads": 2},
    "train": {"steps": 6, "batch_size": 8, "eval_every": 3, "log_every": 2},
    "probes": {"every": 3, "batch": 8, "white_noise_batch": 8},
    "factors": {"model.normalisation": ["xi", "gamma"]},
    "seeds": 2,
}


def ablate(root: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "ABLATE_HOME": str(root / ".ablate"), "ABLATE_CACHE_DIR": str(root / "cache"),
           "COLUMNS": "200"}
    env.pop("ABLATE_STORAGE", None)
    env.pop("ABLATE_TRACKING_URI", None)
    res = subprocess.run([*ABLATE, *args], capture_output=True, text=True, cwd=root,
                         env=env, timeout=600)
    assert res.returncode == 0, f"{args}: {res.stdout}\n{res.stderr}"
    return res


@pytest.mark.slow
def test_a_follow_up_study_run_by_the_command_trains_only_what_is_new(tmp_path):
    """`ablate run` of a study that `extends:` a finished one: its shared items are linked (no new
    Optuna trial is trained, no new MLflow run), a third level and a third seed run."""
    from mlflow.tracking import MlflowClient

    from ablate import results

    (tmp_path / "a.yaml").write_text(yaml.safe_dump(TINY))
    (tmp_path / "b.yaml").write_text(yaml.safe_dump({"extends": "a.yaml", "name": "fb", "seeds": 3,
                                                     "factors": {"model.normalisation": ["xi", "gamma", "none"]}}))
    ablate(tmp_path, "run", "a.yaml")
    plan = ablate(tmp_path, "plan", "b.yaml").stdout
    assert plan.count("reused from study fa (2 of 3)") == 2 and "reused 4 (4 from fa), pending 5" in plan
    out = ablate(tmp_path, "run", "b.yaml").stdout
    assert "fb: 9 trials, 4 done, 0 failed, 5 to run (5 newly queued, 4 reused from fa)" in out
    mlc = MlflowClient(f"sqlite:///{tmp_path / '.ablate' / 'mlflow.db'}")

    def trial_runs(name):
        return mlc.search_runs([mlc.get_experiment_by_name(name).experiment_id], "tags.`ablate.role` = 'trial'")

    assert len(trial_runs("fa")) == 4 and len(trial_runs("fb")) == 5  # no new run for a reused item
    storage = f"sqlite:///{tmp_path / '.ablate' / 'optuna.db'}"
    trials = optuna.load_study(study_name="fb", storage=storage).get_trials()
    assert len(trials) == 9 and sum(bool(t.user_attrs.get("reused_from")) for t in trials) == 4
    res = results.load("fb", storage, f"sqlite:///{tmp_path / '.ablate' / 'mlflow.db'}")
    assert res.trials["status"].to_list() == ["complete"] * 9
    keys = ["cell_id", "seed"]
    assert set(res.curves.select(keys).unique().iter_rows()) == set(res.trials.select(keys).iter_rows())
    # A changed baseline under the same name orphans the finished trials, and says so.
    out = ablate(tmp_path, "plan", "a.yaml", "--set", "train.lr=0.001").stdout
    assert "orphaned: 4 finished trials of study 'fa'" in out and "ablate rm fa --orphans" in out
