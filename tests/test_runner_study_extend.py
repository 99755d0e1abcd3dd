"""Training until converged (ablate.runner.study, its last section) — which finished runs are extended and to what
budget, queued exactly once (repeated calls, two processes at once, a resume after a kill left
it unqueued), what the item's state and result are meanwhile, and the spec's checks and ids.

Trials are finished by hand on real SQLite Optuna stores (no torch); tests/test_runner_worker.py
trains a real study until converged."""

from __future__ import annotations

import copy
import multiprocessing
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState
from support import DESIGN_BASE

from ablate import design
from ablate.runner import items as its
from ablate.runner import phases, queue
from ablate.runner import study as st
from ablate.spec import SpecError
from ablate.stores import Stores

WSD = {"steps": 10, "schedule": "wsd", "warmup_steps": 2, "decay_steps": 2,
       "until_converged": {"max_steps": 25, "extend_by": 10}}


@pytest.fixture
def tmp_path(shm_tmp_path: Path) -> Path:
    return shm_tmp_path


def where(tmp_path: Path) -> Stores:
    return Stores(f"sqlite:///{tmp_path / 'optuna.db'}", f"sqlite:///{tmp_path / 'mlflow.db'}", None)


def make(name: str = "uc", seeds: int = 2, **train) -> design.Spec:
    raw = copy.deepcopy(DESIGN_BASE)
    raw.update(name=name, seeds=seeds, train={**WSD, **train})
    return design.validate(raw)


def finish_claimed(study: optuna.Study, converged: dict[int, bool]) -> list[tuple[int, int]]:
    """Claim and complete every claimable item, flagged converged as ``converged[seed]`` says;
    (seed, budget) of each, in order."""
    done = []
    while (trial := phases.claim(study)) is not None:
        attrs = phases.prepare_item(study, trial)
        trial.set_user_attr("converged", converged[attrs["seed"]])
        trial.set_user_attr("val_accuracy", 0.5)
        study.tell(trial, 0.5)
        done.append((attrs["seed"], int(attrs["config"]["train"]["steps"])))
    return done


def budgets(study: optuna.Study) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for t in study.get_trials(deepcopy=False):
        out.setdefault(t.user_attrs["seed"], []).append(st.run_budget(t.user_attrs))
    return out


def test_an_improving_run_is_extended_by_extend_by_until_max_steps_and_a_converged_one_is_not(tmp_path):
    spec = make()
    study, queued = st.prepare(spec, design.items(spec), where(tmp_path))
    assert queued == 2
    assert finish_claimed(study, {0: False, 1: True}) == [(0, 10), (1, 10)]
    assert st.extend_runs(study) == 1  # seed 0 only: seed 1 converged
    (ext,) = [t for t in study.get_trials() if t.state == TrialState.WAITING]
    assert ext.user_attrs["item"] == study.trials[0].user_attrs["item"]  # the same item, the same cell
    assert ext.user_attrs["budget"] == 20 and ext.user_attrs["config"]["train"]["steps"] == 20
    assert ext.user_attrs["extended_from"] == {"number": 0, "steps": 10}
    assert its.states_by_item(study)[ext.user_attrs["item"]] == "waiting"  # a longer run is to come
    assert finish_claimed(study, {0: False, 1: True}) == [(0, 20)]
    assert st.extend_runs(study) == 1
    assert finish_claimed(study, {0: False, 1: True}) == [(0, 25)]  # 20 + 10 capped at max_steps
    assert st.extend_runs(study) == 0  # at max_steps, still improving: that is where it stops
    assert budgets(study) == {0: [10, 20, 25], 1: [10]}
    assert set(its.states_by_item(study).values()) == {"done"}
    lines = st.extension_lines(study.get_trials())
    assert lines[0] == f"extended: {design.cells(spec)[0].label} · seed 0: 10 → 25 of max 25 " \
                       "steps (still improving at the most)"
    assert len(lines) == 1  # nothing may train any more


def test_the_extension_is_queued_once_however_often_it_is_asked_for(tmp_path):
    spec = make(seeds=1)
    study, _ = st.prepare(spec, design.items(spec), where(tmp_path))
    finish_claimed(study, {0: False})
    cell = design.cells(spec)[0].id
    assert [st.extend_runs(study, [cell]), st.extend_runs(study), st.extend_runs(study, [cell])] == [1, 0, 0]
    # ablate run on resume (study.prepare) finds it queued already, and a killed extension is the
    # retry machinery's: not queued again here
    assert st.prepare(spec, design.items(spec), where(tmp_path)).queued == 0
    trial = phases.claim(study)
    assert trial.user_attrs["budget"] == 20
    st.declare_dead(study, trial.number, tracking=None)  # kill -9: failed, re-queued by the retry bound
    assert st.extend_runs(study) == 0
    assert [t.state for t in study.get_trials() if t.user_attrs.get("budget") == 20] == [TrialState.FAIL,
                                                                                        TrialState.WAITING]


def test_ablate_run_on_resume_queues_an_extension_a_kill_left_unqueued(tmp_path):
    spec = make(seeds=1)
    study, _ = st.prepare(spec, design.items(spec), where(tmp_path))
    finish_claimed(study, {0: False})  # recorded COMPLETE, then killed before queueing its extension
    again = st.prepare(spec, design.items(spec), where(tmp_path))
    assert again.queued == 1
    assert st.prepare(spec, design.items(spec), where(tmp_path)).queued == 0
    assert budgets(again.study) == {0: [10, 20]}


def _extend_in_process(url: str, name: str, barrier: Any, out: Any) -> None:
    study = optuna.load_study(study_name=name, storage=st.storage(url))
    barrier.wait()
    out.put(st.extend_runs(study))


def test_two_processes_finishing_at_once_queue_the_extension_once(tmp_path):
    spec = make(seeds=1)
    stores = where(tmp_path)
    study, _ = st.prepare(spec, design.items(spec), stores)
    finish_claimed(study, {0: False})
    ctx = multiprocessing.get_context("spawn")
    barrier, out = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_extend_in_process, args=(stores.storage, spec.name, barrier, out)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert sorted(out.get(timeout=5) for _ in procs) == [0, 1]
    assert budgets(study) == {0: [10, 20]}


def test_the_result_is_the_longest_finished_run_also_while_a_longer_one_waits(tmp_path):
    from ablate import results

    spec = make(seeds=1)
    stores = where(tmp_path)
    study, _ = st.prepare(spec, design.items(spec), stores)
    finish_claimed(study, {0: False})
    st.extend_runs(study)
    row = results.load(spec.name, stores.storage, stores.tracking, curves=False).trials.row(0, named=True)
    assert (row["status"], row["trial_number"], row["budget"], row["extended_from"]) == ("complete", 0, 10, None)
    finish_claimed(study, {0: True})
    row = results.load(spec.name, stores.storage, stores.tracking, curves=False).trials.row(0, named=True)
    assert (row["status"], row["trial_number"], row["budget"], row["extended_from"]) == ("complete", 1, 20, 10)


def test_a_spec_without_until_converged_keeps_its_cell_ids_and_one_with_it_is_another_cell():
    raw = copy.deepcopy(DESIGN_BASE)
    raw["train"] = {k: v for k, v in WSD.items() if k != "until_converged"}
    plain = design.cells(design.validate(raw))[0]
    assert "until_converged" in plain.config["train"] and plain.config["train"]["until_converged"] is None
    raw_null = copy.deepcopy(raw)
    raw_null["train"]["until_converged"] = None
    assert design.cells(design.validate(raw_null))[0].id == plain.id
    assert design.spec_hash(design.validate(raw_null)) == design.spec_hash(design.validate(raw))
    extended = design.cells(make(seeds=1))[0]
    assert extended.id != plain.id
    # one lineage: the kept checkpoints of either continue the other's longer runs
    assert design.identity.lineage_key(extended.config) == design.identity.lineage_key(plain.config)


@pytest.mark.parametrize(("train", "key", "words"), [
    ({"schedule": "cosine"}, "train.until_converged", "needs train.schedule: wsd"),
    ({"until_converged": {"max_steps": 10, "extend_by": 5}}, "train.until_converged.max_steps",
     "must be above train.steps (10)"),
    ({"until_converged": {"max_steps": 30, "extend_by": 0}}, "train.until_converged.extend_by", "must be ≥ 1; got 0"),
    ({"until_converged": {"max_steps": 30}}, "train.until_converged.extend_by", "missing"),
])
def test_a_bad_until_converged_names_its_key_path(train, key, words):
    with pytest.raises(SpecError) as info:
        make(**train)
    assert f"{key}: " in str(info.value) and words in str(info.value), str(info.value)


def test_a_factor_may_set_it_and_each_cell_is_checked():
    raw = copy.deepcopy(DESIGN_BASE)
    raw.update(train={k: v for k, v in WSD.items() if k != "until_converged"},
               factors={"train.until_converged": [None, {"max_steps": 8, "extend_by": 4}]})
    with pytest.raises(SpecError, match=r"train.until_converged.max_steps: 8 must be above train.steps \(10\)"):
        design.validate(raw)
    raw["factors"] = {"train.until_converged": [None, {"max_steps": 30, "extend_by": 4}]}
    assert st.extends_runs(design.validate(raw).model_dump(mode="json"))
    assert not st.extends_runs(make(until_converged=None).model_dump(mode="json"))


def test_extend_reads_the_trials_fresh_from_the_storage(tmp_path):
    """``extend`` reads the trials fresh from the storage under the queue lock: a trial finished
    by another process (not in this process's cache) is seen."""
    spec = make(seeds=1)
    stores = where(tmp_path)
    study, _ = st.prepare(spec, design.items(spec), stores)
    other = optuna.load_study(study_name=spec.name, storage=st.storage(stores.storage))
    finish_claimed(other, {0: False})
    assert st.extend_runs(study) == 1
    assert queue.count(study, (TrialState.WAITING,)) == 1


def test_an_extension_keeps_the_declared_warm_up_in_steps_so_it_can_continue():
    # A fractional warm-up (10 % of 4,000 steps) would be 800 steps at 8,000: a different learning
    # rate from step 400 on, so the extension could not start from the stable phase's checkpoint.
    from ablate.spec import TrainSpec
    from ablate.training import continuable

    train = {"steps": 4000, "schedule": "wsd", "warmup": 0.1, "decay": 0.2, "eval_every": 100,
             "until_converged": {"max_steps": 16000, "extend_by": 4000}}
    config = {**copy.deepcopy(design.cells(make())[0].config), "train": train}
    attrs = {"item": "c/replicate/0", "cell_id": "c", "cell_label": "c", "seed": 0, "phase": "replicate",
             "config": config, "converged": False}
    assert st.next_budget(attrs) == 8000
    longer = st.extension_attrs(attrs, 0, 8000)
    assert longer["config"]["train"]["warmup_steps"] == 400 and longer["config"]["train"]["steps"] == 8000
    assert attrs["config"]["train"].get("warmup_steps") is None  # the declared run's attributes untouched
    short, long = TrainSpec.model_validate(train), TrainSpec.model_validate(longer["config"]["train"])
    assert continuable(short, long) == 3200
    # ... and keeps its stable checkpoints where the declared run's are: one lineage.
    assert design.identity.lineage_key(longer["config"]) == design.identity.lineage_key(attrs["config"])
    again = st.extension_attrs({**longer, "converged": False}, 1, 12000)
    assert continuable(long, TrainSpec.model_validate(again["config"]["train"])) == 6400
