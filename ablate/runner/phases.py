"""Tune-then-replicate on the study queue, with Optuna.

Every item of a tuned spec is enqueued up front (``study.prepare``): the tuning items of each
cell, then its replicate items. Claiming stays the one atomic WAITING → RUNNING flip of
``queue.claim`` (``claim`` here adds the rule below); what changes is *when* an item's setting
is decided:

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

``record_params`` records a claimed item's factor levels (categorical, study.PARAM_DISTRIBUTIONS)
and its tuned values (the search space's distributions) as the trial's Optuna parameters, for
optuna-dashboard; the setting the worker runs is the one in the user attributes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import FrozenTrial, TrialState

from ablate import tuning
from ablate.runner import queue
from ablate.runner import study as st

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
    return st.cell_trials(study, cell_id, "tune")


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


def record_params(study: optuna.Study, trial: optuna.Trial, attrs: Mapping[str, Any]) -> None:
    """The item's factor levels and tuned values as Optuna parameters of its running trial.
    Display only: a distribution the study's history does not accept (a search space that
    changed type) is left out rather than failing the trial."""
    known = study.user_attrs.get(st.PARAM_DISTRIBUTIONS) or {}
    params: dict[str, tuple[Any, BaseDistribution]] = {}
    for name, label in (attrs.get("settings") or {}).items():
        if name in known:
            dist = optuna.distributions.json_to_distribution(known[name])
            if isinstance(dist, CategoricalDistribution) and label in dist.choices:
                params[name] = (label, dist)
    tuned = attrs.get("params")
    if attrs.get("tune") and isinstance(tuned, dict):
        dists = distributions(attrs["tune"]["space"])
        for name, value in tuned.items():
            if name in dists:
                params[name] = (value, dists[name])
    try:
        queue.set_params(study, trial.number, params)
    except ValueError:  # some distribution differs from the study's under its name: the others
        for name, entry in params.items():
            try:
                queue.set_params(study, trial.number, {name: entry})
            except ValueError:
                continue


class _TuningGate:
    """Holds back the replicates of a tuned cell while some tuning item of theirs is not
    finished (queue.Gate): one lookup of the cell's tuning items per cell and claim."""

    keys = ("cell_id", "after_tune")

    def __init__(self, study: optuna.Study) -> None:
        self._study = study
        self._tuning: dict[str, bool] = {}  # cell id -> some tuning item unfinished

    def hold(self, attrs: Mapping[str, Any]) -> Mapping[str, Any] | None:
        if not attrs.get("after_tune"):
            return None
        cell = attrs.get("cell_id")
        if cell not in self._tuning:
            states = st.states_by_item(self._study, {"cell_id": cell, "phase": "tune"})
            self._tuning[cell] = any(s in UNFINISHED for s in states.values())
        return {"cell_id": cell, "after_tune": True} if self._tuning[cell] else None


def claim(study: optuna.Study) -> optuna.Trial | None:
    """Atomically take the oldest claimable WAITING item (RUNNING from now on), or None: a
    replicate of a tuned cell is claimable once every tuning item of its cell is finished."""
    return queue.claim(study, _TuningGate(study))
