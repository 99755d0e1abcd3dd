"""What several test files share: a small design base and its helpers; a tuned spec and a made-up
objective for the tune-then-replicate tests (no torch, no MLflow)."""

from __future__ import annotations

import copy
import json
import math
import sys
from pathlib import Path

import optuna
import pytest

from ablate import design, spec
from ablate.stores import Stores

#: The installed console script (``pyproject.toml``'s ``[project.scripts]``), run as users run it.
ABLATE = [str(Path(sys.executable).with_name("ablate"))]

DESIGN_BASE = {
    "name": "d",
    "task": {"name": "listops", "max_length": 40, "train_size": 100, "val_size": 50, "test_size": 50},
    "model": {"d_model": 16, "state_dim": 16, "layers": 1, "heads": 1},
    "train": {"steps": 5},
}
VARIANT = {
    "RotRNN": {"model.parameterisation": "rotation", "model.normalisation": "xi"},
    "LRU": {"model.parameterisation": "complex_diagonal", "model.normalisation": "gamma"},
}


def make(**parts) -> spec.Spec:
    """DESIGN_BASE with ``parts`` set at the top level, validated whole."""
    raw = copy.deepcopy(DESIGN_BASE)
    raw.update(copy.deepcopy(parts))
    return design.validate(raw)


def errors(**parts) -> str:
    """The SpecError text of DESIGN_BASE with ``parts`` set at the top level."""
    raw = copy.deepcopy(DESIGN_BASE)
    raw.update(copy.deepcopy(parts))
    with pytest.raises(spec.SpecError) as info:
        design.validate(raw)
    return str(info.value)


RAW = {
    "name": "tuned",
    "task": {"name": "listops", "max_length": 40, "train_size": 100, "val_size": 50, "test_size": 50},
    "model": {"d_model": 16, "state_dim": 8, "layers": 1, "heads": 1},
    "train": {"steps": 5},
    "factors": {"variant": {"RotRNN": {"model.parameterisation": "rotation", "model.normalisation": "xi"},
                            "LRU": {"model.parameterisation": "complex_diagonal", "model.normalisation": "gamma"}}},
    "seeds": 2,
    "tune": {"trials": 4, "space": {"train.lr": {"low": 1e-4, "high": 1e-1, "log": True},
                                    "train.batch_size": [8, 16]}},
}
BEST_LR = 10**-2.5


def score(config: dict) -> float:
    """A made-up objective: best at lr = 10^-2.5, better with batch 16, worse for LRU."""
    lr, batch = config["train"]["lr"], config["train"]["batch_size"]
    return -abs(math.log10(lr) - math.log10(BEST_LR)) + 0.1 * (batch == 16) - 0.01 * (
        config["model"]["parameterisation"] != "rotation")


def stores(tmp_path: Path) -> Stores:
    return Stores(f"sqlite:///{tmp_path / 'optuna.db'}", f"sqlite:///{tmp_path / 'mlflow.db'}", None)


def finish(study: optuna.Study, trial: optuna.Trial, attrs: dict) -> None:
    value = score(attrs["config"])
    trial.set_user_attr("val_accuracy", value)
    trial.set_user_attr("status", "complete")
    study.tell(trial, value)


def tune_trials(study: optuna.Study, cell_id: str) -> list:
    return [t for t in study.get_trials() if t.user_attrs["cell_id"] == cell_id and t.user_attrs["phase"] == "tune"]


class FakeRun:
    """A stand-in for ``tracking.TrialRun`` (no MLflow) with the worker's whole protocol: the
    results written before the Optuna record, the run ended after it."""

    run_id, last_step = "fake", 0

    def __init__(self, *args, **kwargs) -> None:
        pass

    def progress(self) -> dict:
        return {"step": self.last_step}

    def finish(self, *args, **kwargs) -> None:
        pass

    write = end = log_params = finish


def kept_checkpoint(root: Path, cell_id: str, seed: int = 0, steps: int = 20, size: int = 1000) -> Path:
    """A kept stable-phase checkpoint of ``cell_id`` under the checkpoint root ``root``, laid out as
    the worker keeps one (``<root>/stable/lineage-<cell>/replicate-seed<seed>/<steps>.pt`` + .json)."""
    folder = root / "stable" / f"lineage-{cell_id}" / f"replicate-seed{seed}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{steps}.pt").write_bytes(b"x" * size)
    (folder / f"{steps}.json").write_text(json.dumps({"cell_id": cell_id, "cell_label": f"cell {cell_id}",
                                                      "seed": seed, "train": {"steps": steps}}))
    return folder / f"{steps}.pt"
