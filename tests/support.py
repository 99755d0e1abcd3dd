"""What several test files share: a small design base and its helpers; a tuned spec and a made-up
objective for the tune-then-replicate tests (no torch, no MLflow)."""

from __future__ import annotations

import copy
import json
import math
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import optuna
import pytest

from ablate import design, spec
from ablate.stores import Stores

#: The installed console script (``pyproject.toml``'s ``[project.scripts]``), run as users run it.
ABLATE = [str(Path(sys.executable).with_name("ablate"))]

#: The base spec the tests start from: a tiny listops model, a 2 × 2 design (parameterisation ×
#: normalisation), 3 seeds. Derive a variant with ``spec_dict``, never a copy of the literal.
BASE = {
    "name": "t",
    "task": {"name": "listops", "max_length": 40, "train_size": 100, "val_size": 50, "test_size": 50},
    "model": {"d_model": 16, "state_dim": 8, "layers": 1, "heads": 2},
    "train": {"steps": 5},
    "factors": {"model.parameterisation": ["rotation", "complex_diagonal"], "model.normalisation": ["xi", "gamma"]},
    "seeds": 3,
}


def spec_dict(base: Mapping[str, Any] = BASE, /, sets: Mapping[str, Any] | None = None, **parts: Any) -> dict[str, Any]:
    """A fresh copy of ``base`` (default BASE) with top-level ``parts`` replaced (None removes
    the key) and ``sets`` values put at dotted paths (``{"model.heads": 1}``). Every call is a
    deep copy: a test may change what it gets without touching another test's base."""
    raw = copy.deepcopy(dict(base))
    for key, value in parts.items():
        if value is None:
            raw.pop(key, None)
        else:
            raw[key] = copy.deepcopy(value)
    for path, value in (sets or {}).items():
        *heads, last = path.split(".")
        node = raw
        for head in heads:
            node = node.setdefault(head, {})
        node[last] = copy.deepcopy(value)
    return raw


VARIANT = {
    "RotRNN": {"model.parameterisation": "rotation", "model.normalisation": "xi"},
    "LRU": {"model.parameterisation": "complex_diagonal", "model.normalisation": "gamma"},
}
#: BASE without a design: the cells are what ``make`` gives it (a one-head model).
DESIGN_BASE = spec_dict(name="d", factors=None, seeds=None, sets={"model.state_dim": 16, "model.heads": 1})


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


#: A spec whose trials really train, in a second or so on one CPU core (workers, faults, signals): a
#: smaller model on shorter sequences, a validation pass and probes every 3 steps, one seed, no factor.
TRAINABLE = spec_dict(
    name="exec", factors=None, seeds=1,
    task={"name": "listops", "max_depth": 3, "max_length": 30, "train_size": 200, "val_size": 32, "test_size": 32},
    model={"d_model": 8, "state_dim": 8, "layers": 1, "heads": 2},
    train={"steps": 6, "batch_size": 8, "eval_every": 3, "log_every": 3},
    probes={"every": 3, "batch": 8})
#: BASE tuned: RotRNN against LRU, 2 seeds, 4 tuning trials of the learning rate and batch size.
RAW = spec_dict(name="tuned", factors={"variant": VARIANT}, seeds=2, sets={"model.heads": 1},
                tune={"trials": 4, "space": {"train.lr": {"low": 1e-4, "high": 1e-1, "log": True},
                                             "train.batch_size": [8, 16]}})
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

    write = end = finish


def kept_checkpoint(root: Path, cell_id: str, seed: int = 0, steps: int = 20, size: int = 1000) -> Path:
    """A kept stable-phase checkpoint of ``cell_id`` under the checkpoint root ``root``, laid out as
    the worker keeps one (``<root>/stable/lineage-<cell>/replicate-seed<seed>/<steps>.pt`` + .json)."""
    folder = root / "stable" / f"lineage-{cell_id}" / f"replicate-seed{seed}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{steps}.pt").write_bytes(b"x" * size)
    (folder / f"{steps}.json").write_text(json.dumps({"cell_id": cell_id, "cell_label": f"cell {cell_id}",
                                                      "seed": seed, "train": {"steps": steps}}))
    return folder / f"{steps}.pt"


def dashboard_api(storage_url: str):
    """GET a path of optuna-dashboard's JSON API (what its pages render), as its browser app does."""
    from wsgiref.util import setup_testing_defaults

    from optuna_dashboard import wsgi

    app = wsgi(storage_url)

    def get(path: str) -> dict:
        environ: dict = {"PATH_INFO": path}
        setup_testing_defaults(environ)
        status: list[str] = []
        body = b"".join(app(environ, lambda code, headers, exc=None: status.append(code)))
        assert status == ["200 OK"], (path, status, body[:500])
        return json.loads(body)

    return get
