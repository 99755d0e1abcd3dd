"""Tune-then-replicate on the study queue, with Optuna; and read-only progress for ``ablate plan``.

Every item of a tuned spec is enqueued up front (``study.prepare``): the tuning items of each
cell, then its replicate items. Claiming stays the one atomic WAITING → RUNNING flip of
``study.claim``; what changes is *when* an item's setting is decided:

- a tuning item (``phase="tune"``) gets its setting when claimed: a sampler (TPE by default)
  is built in memory from the cell's finished tuning trials in the study (and its running ones,
  as constant liars), seeded per (cell, index), and asked once. The setting is stored on the
  trial (``params``, ``config``), so a retried item re-runs the same setting;
- a replicate item of a tuned cell is not claimable until every tuning item of its cell is
  finished (complete, or failed for good); when claimed it takes the best finished setting
  (objective and direction of ``tune.objective``; ties to the lowest index; the baseline if
  none finished, recorded in ``tuned_from``).

No per-cell Optuna study is stored: the main study's trials are the history, so both phases
resume with the queue, and nothing here can disagree with what the results API reads.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import FrozenTrial, TrialState

from ablate import tuning

UNFINISHED = ("waiting", "running", "new")


def distributions(space: dict[str, dict[str, Any]]) -> dict[str, BaseDistribution]:
    out: dict[str, BaseDistribution] = {}
    for path, dim in space.items():
        if dim["type"] == "categorical":
            out[path] = CategoricalDistribution(dim["choices"])
        elif dim["type"] == "int":
            out[path] = IntDistribution(dim["low"], dim["high"], log=dim["log"], step=1 if dim["log"] else dim["step"])
        else:
            out[path] = FloatDistribution(dim["low"], dim["high"], log=dim["log"], step=dim.get("step"))
    return out


def make_sampler(protocol: dict[str, Any], startup: int, seed: int) -> optuna.samplers.BaseSampler:
    name = protocol.get("sampler", "tpe")
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "gp":
        return optuna.samplers.GPSampler(seed=seed, n_startup_trials=startup)
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup, constant_liar=True)


def _tune_trials(study: optuna.Study, cell_id: str) -> list[FrozenTrial]:
    return [t for t in study.get_trials(deepcopy=False)
            if t.user_attrs.get("cell_id") == cell_id and t.user_attrs.get("phase") == "tune"]


def _value(trial: FrozenTrial, metric: str) -> float | None:
    v = trial.user_attrs.get(metric)
    return float(v) if isinstance(v, int | float) and math.isfinite(v) else None


def sample(study: optuna.Study, number: int, attrs: dict[str, Any]) -> dict[str, Any]:
    """A setting for tuning item ``attrs`` (trial ``number``) given its cell's history."""
    protocol = attrs["tune"]
    dists = distributions(protocol["space"])
    objective = protocol["objective"]
    startup = int(protocol.get("startup_trials", 10))
    memory = optuna.create_study(direction=objective["direction"],
                                 sampler=make_sampler(protocol, startup, tuning.sampler_seed(attrs["cell_id"],
                                                                                             attrs["index"])))
    for t in _tune_trials(study, attrs["cell_id"]):
        params = t.user_attrs.get("params")
        if t.number == number or not isinstance(params, dict):
            continue
        value = _value(t, objective["metric"])
        try:
            if t.state == TrialState.COMPLETE and value is not None:
                memory.add_trial(optuna.create_trial(params=params, distributions=dists, value=value))
            elif t.state == TrialState.RUNNING:
                memory.add_trial(optuna.create_trial(state=TrialState.RUNNING, params=params, distributions=dists))
        except ValueError:  # a setting outside today's space: not this protocol's history
            continue
    return dict(memory.ask(dists).params)


def best(study: optuna.Study, attrs: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The best finished tuning setting of the item's cell, and where it came from."""
    objective = attrs["tune"]["objective"]
    results = []
    for t in _tune_trials(study, attrs["cell_id"]):
        value = _value(t, objective["metric"])
        if t.state == TrialState.COMPLETE and value is not None and isinstance(t.user_attrs.get("params"), dict):
            results.append((int(t.user_attrs.get("index", t.number)), t.user_attrs["params"], value))
    chosen = tuning.best(results, objective["direction"])
    if chosen is None:
        return {}, "baseline: no tuning trial of this cell finished"
    index, params = chosen
    value = next(v for i, _, v in results if i == index)
    return dict(params), f"{attrs['cell_id']}/tune/{index} ({objective['metric']} {value:.4g})"


def prepare_item(study: optuna.Study, trial: optuna.Trial) -> dict[str, Any]:
    """The claimed item's attributes with its setting decided (tuning: sampled; replicate after
    tuning: the best). Untuned items come back unchanged. Raises on a broken protocol."""
    attrs = dict(trial.user_attrs)
    if not attrs.get("tune"):
        return attrs
    params = attrs.get("params")
    if not isinstance(params, dict):
        if attrs.get("phase") == "tune":
            params = sample(study, trial.number, attrs)
        else:
            params, source = best(study, attrs)
            trial.set_user_attr("tuned_from", source)
            attrs["tuned_from"] = source
        trial.set_user_attr("params", params)
    config = tuning.apply(attrs["config"], params)
    trial.set_user_attr("config", config)
    attrs.update(params=params, config=config)
    return attrs


def blocked_cells(study: optuna.Study, waiting: list[FrozenTrial]) -> set[str]:
    """Cells whose replicate items must wait: some tuning item of theirs is not finished."""
    cells = {t.user_attrs.get("cell_id") for t in waiting if t.user_attrs.get("after_tune")}
    if not cells:
        return set()
    from ablate.runner.study import item_state, trials_by_item

    blocked = set()
    for key, trials in trials_by_item(study).items():
        cell, _, phase = key.partition("/")
        if cell in cells and phase.startswith("tune/") and item_state(trials) in UNFINISHED:
            blocked.add(cell)
    return blocked


# --- read-only progress, for `ablate plan` ---------------------------------------------------


def existing_storage(storage: str | None) -> str | None:
    """The storage URL to read, or None when there is no store yet (nothing is created)."""
    from ablate import stores

    url = storage or os.environ.get("ABLATE_STORAGE")
    if url is None:  # the default of ablate.stores.resolve, without its mkdir
        path = stores.home().resolve() / "optuna.db"
        return f"sqlite:///{path}" if path.is_file() else None
    if url.startswith("sqlite:///"):
        return url if Path(url.removeprefix("sqlite:///")).is_file() else None
    return url


def item_states(study_name: str, keys: list[str], storage: str | None) -> dict[str, str] | None:
    """State per item key (done, failed, running, waiting, new), or None when the study has no
    store or no study of that name. Opens an existing store only; raises StorageError."""
    from ablate.runner import study as st

    url = existing_storage(storage)
    if url is None:
        return None
    try:
        opt = optuna.load_study(study_name=study_name, storage=st.storage(url))
    except KeyError:
        return None
    by_item = st.trials_by_item(opt)
    return {k: st.item_state(by_item.get(k, [])) for k in keys}
