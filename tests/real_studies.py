"""The two small real studies the results, statistics and report tests share (fixtures in conftest).

``ACCURACY``: a 2 × 2 grid (normalisation × layers) that tunes the learning rate (one trial per
cell) and replicates on two seeds, with one replicate failing by an injected fault; then the spec
grows a third normalisation level whose cells stay pending. ``NORM``: RotRNN vs LRU, two seeds,
with probes (curves, spectra, white noise, gradients) at steps 0, 4 and 8.

Each is built once per test session, whichever test file asks first; under xdist the session's
workers share one copy (a file lock guards the build).
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

ACCURACY_NAME = "accrep"
ACCURACY = {
    "name": ACCURACY_NAME,
    "description": "accuracy report test study",
    "task": {"name": "listops", "max_depth": 3, "max_length": 20, "train_size": 64, "val_size": 32,
             "test_size": 32, "seed": 0},
    "model": {"d_model": 8, "state_dim": 4, "layers": 1, "heads": 1},
    "train": {"steps": 4, "batch_size": 8, "eval_every": 2, "log_every": 2},
    "probes": {"enabled": False},  # the accuracy report reads no norm curves
    "factors": {"model.normalisation": ["xi", "gamma", "none"], "model.layers": [1, 2]},
    "seeds": 2,
    "tune": {"trials": 1, "space": {"train.lr": {"low": 1e-3, "high": 1e-2, "log": True}}},
    "references": [
        {"value": 0.5, "source": "Made-up et al. 2024, Table 2", "confirmed": True},
        {"value": 0.3, "source": "Other paper", "cell": {"model.normalisation": "gamma", "model.layers": 2},
         "note": "longer training"},
        {"value": 0.4, "source": "Pending paper", "cell": {"model.normalisation": "none"}},
    ],
}
FAILING = {"model.normalisation": "gamma", "model.layers": "2"}  # its replicate on seed 1 fails

NORM = {
    "name": "norm-e2e",
    "task": {"name": "listops", "max_depth": 3, "max_length": 24, "train_size": 120, "val_size": 32,
             "test_size": 32, "seed": 0},
    "model": {"d_model": 8, "state_dim": 8, "layers": 2, "heads": 2},
    "train": {"steps": 8, "batch_size": 8, "eval_every": 100, "log_every": 2},
    "probes": {"every": 4, "batch": 8, "white_noise_batch": 8},
    "factors": {"variant": {
        "RotRNN": {"model.parameterisation": "rotation", "model.normalisation": "xi"},
        "LRU": {"model.parameterisation": "complex_diagonal", "model.normalisation": "gamma",
                "model.init": {"scheme": "ring"}},
    }},
    "seeds": 2,
}
NORM_STEPS = [0, 4, 8]


def study_env(mp: pytest.MonkeyPatch, root: Path) -> None:
    """Point the default stores and the data cache under ``root``."""
    mp.setenv("ABLATE_HOME", str(root / ".ablate"))
    mp.setenv("ABLATE_CACHE_DIR", str(root / "cache"))
    mp.delenv("ABLATE_STORAGE", raising=False)
    mp.delenv("ABLATE_TRACKING_URI", raising=False)
    mp.delenv("ABLATE_FAULT", raising=False)


def shared_root(tmp_path_factory: pytest.TempPathFactory, config: pytest.Config, name: str,
                build: Callable[[Path], None]) -> Path:
    """The directory of a study built once by ``build(root)`` (with ``study_env`` set), shared by
    the session's xdist workers."""
    from filelock import FileLock

    shared = hasattr(config, "workerinput")  # an xdist worker: the session's workers share it
    root = tmp_path_factory.getbasetemp().parent / name if shared else tmp_path_factory.getbasetemp() / name
    with FileLock(f"{root}.lock"):
        if not (root / "done").exists():
            root.mkdir(exist_ok=True)
            with pytest.MonkeyPatch.context() as mp:
                study_env(mp, root)
                build(root)
            (root / "done").touch()
    return root


def _run_with_fault(spec, stores, fail_key: str | None) -> None:
    """What `ablate run` does, in process, with a fault injected into one item."""
    from ablate.design import items, spec_hash
    from ablate.runner import phases, tracking
    from ablate.runner import study as st
    from ablate.runner.worker import run_item

    study, _ = st.prepare(spec, items(spec), stores)
    parent = tracking.start_parent_run(stores, spec.name, json.dumps(spec.model_dump()), spec_hash(spec))
    study.set_user_attr("mlflow_parent_run_id", parent)
    while (trial := phases.claim(study)) is not None:
        fault = trial.user_attrs.get("item") == fail_key
        if fault:
            os.environ["ABLATE_FAULT"] = "error@1"
        try:
            run_item(study, trial, stores, "cpu", lambda event, info: None)
        finally:
            os.environ.pop("ABLATE_FAULT", None)


def build_accuracy(root: Path) -> None:
    """The partial accuracy study under ``root`` (and its full spec as ``root/spec.yaml``)."""
    from ablate.design import items, validate
    from ablate.runner import study as st
    from ablate.stores import resolve

    stores = resolve()
    first = copy.deepcopy(ACCURACY)
    first["factors"]["model.normalisation"] = ["xi", "gamma"]
    first["references"] = first["references"][:2]  # the third names a level this subset lacks
    first_spec = validate(first)
    failing = next(i for i in items(first_spec)
                   if i.phase == "replicate" and i.seed == 1 and i.cell.labels == FAILING)
    _run_with_fault(first_spec, stores, failing.key)
    full = validate(ACCURACY)
    st.prepare(full, items(full), stores)  # the third level's cells: queued, never run
    (root / "spec.yaml").write_text(yaml.safe_dump(ACCURACY, sort_keys=False))


def build_norm(root: Path) -> None:
    """The norm study under ``root``, run in-process as ``ablate run`` does."""
    from ablate.design import items, spec_hash, validate
    from ablate.runner import study as st
    from ablate.runner import tracking
    from ablate.runner.worker import work
    from ablate.stores import resolve

    spec = validate(NORM)
    stores = resolve()
    opt, _ = st.prepare(spec, items(spec), stores)
    opt.set_user_attr("mlflow_parent_run_id", tracking.start_parent_run(
        stores, spec.name, json.dumps(spec.model_dump()), spec_hash(spec)))
    outcomes = work(spec.name, stores)
    assert outcomes == {"complete": 4}, outcomes


def load(root: Path, name: str, **kwargs):
    """``results.load(name)`` from the stores under ``root``."""
    from ablate import results

    with pytest.MonkeyPatch.context() as mp:
        study_env(mp, root)
        return results.load(name, **kwargs)


# --- several studies on one store: a first grid, a follow-up sharing half its cells, another task ---

FIRST = {
    "name": "cmp-a",
    "task": {"name": "listops", "max_depth": 3, "max_length": 24, "train_size": 120, "val_size": 32,
             "test_size": 32, "seed": 0},
    "model": {"d_model": 8, "state_dim": 8, "layers": 2, "heads": 2},
    "train": {"steps": 8, "batch_size": 8, "eval_every": 4, "log_every": 2},
    "probes": {"every": 4, "batch": 8, "white_noise_batch": 8},
    "factors": {"model.normalisation": ["xi", "gamma"]},
    "seeds": 2,
}
FOLLOW_UP = {**FIRST, "name": "cmp-b", "factors": {"model.normalisation": ["xi", "gamma"], "model.heads": [2, 4]}}
OTHER_DATA = {**FIRST, "name": "cmp-c", "task": {**FIRST["task"], "max_length": 20},
              "factors": {"model.normalisation": ["xi"]}}


def build_studies(root: Path) -> None:
    """``cmp-a``, then ``cmp-b`` (reuses cmp-a's 4 items, runs 4), then ``cmp-c`` (other data, 2
    items), in-process as ``ablate run`` does; their outcomes in ``root/outcomes.json``."""
    from ablate.design import items, validate
    from ablate.runner import study as st
    from ablate.runner.worker import work
    from ablate.stores import resolve

    stores = resolve()
    outcomes = {}
    for raw in (FIRST, FOLLOW_UP, OTHER_DATA):
        spec = validate(raw)
        prepared = st.prepare(spec, items(spec), stores)
        outcomes[spec.name] = {"queued": prepared.queued, "linked": dict(prepared.linked),
                               "ran": work(spec.name, stores)}
    (root / "outcomes.json").write_text(json.dumps(outcomes))
