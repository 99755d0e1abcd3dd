"""What the tests of one cell store (tests/test_runner_reuse.py, test_runner_housekeeping.py,
test_runner_study.py) share: a plain two-cell spec, stores in a folder, and finishing items by hand
(no torch: a made-up objective, as tests/support.py does) on real Optuna stores."""

from __future__ import annotations

import copy
from pathlib import Path

import optuna
from optuna.trial import TrialState
from support import RAW, score

from ablate import design
from ablate.runner import phases, queue
from ablate.runner import study as st
from ablate.stores import Stores

PLAIN = {k: v for k, v in copy.deepcopy(RAW).items() if k != "tune"}  # 2 cells (RotRNN, LRU) × 2 seeds


def where(tmp_path: Path) -> Stores:
    return Stores(f"sqlite:///{tmp_path / 'optuna.db'}", f"sqlite:///{tmp_path / 'mlflow.db'}", None)


def spec(name: str, **changes) -> design.Spec:
    raw = copy.deepcopy(PLAIN)
    raw.update(copy.deepcopy(changes))
    raw["name"] = name
    return design.validate(raw)


def finish_all(study: optuna.Study, outcome=None, stores: Stores | None = None) -> list[str]:
    """Claim and finish every claimable item: complete with a made-up score (with a real MLflow run
    when given ``stores``), or as ``outcome(attrs)`` says ("diverged", "error")."""
    done = []
    while (trial := phases.claim(study)) is not None:
        attrs = phases.prepare_item(study, trial)
        kind = outcome(attrs) if outcome else None
        if stores is not None:
            from ablate.runner import tracking

            run = tracking.TrialRun(stores, study.study_name, study.user_attrs.get("mlflow_parent_run_id"),
                                    attrs["item"], attrs["config"], {"ablate.cell_id": attrs["cell_id"]})
            run.log_metrics(1, {"val/accuracy": 0.5})
            run.finish("FINISHED" if kind is None else "FAILED", {"test_accuracy": 0.5})
            trial.set_user_attr("mlflow_run_id", run.run_id)
        if kind is None:
            value = score(attrs["config"])
            queue.finish(study, trial, TrialState.COMPLETE, {"val_accuracy": value, "test_accuracy": value,
                                                             "status": "complete"}, value)
        else:
            queue.finish(study, trial, TrialState.FAIL, {"status": "diverged" if kind == "diverged" else "failed",
                                                         "failure_kind": kind, "failure_message": kind})
        done.append(attrs["item"])
    return done


def trials_of(stores: Stores, name: str) -> list:
    return optuna.load_study(study_name=name, storage=st.storage(stores.storage)).get_trials(deepcopy=False)
