"""Tune-then-replicate, the parts the runner and results share (neither Optuna nor torch).

The protocol (``ablate.design.tune_protocol``) travels with every item of a tuned study. A worker
that claims a tuning item samples a setting (``ablate.runner.phases``, seeded by
``sampler_seed``) and trains ``apply(config, params)``; a worker that claims a replicate item of
a cell whose tuning is over trains ``apply(config, best(...))``.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import math
import random
from typing import Any, NamedTuple

from ablate.spec import set_path
from ablate.terminal import count


def apply(config: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """``config`` with each dotted path of ``params`` set (the config is not modified)."""
    out = copy.deepcopy(config)
    for path, value in params.items():
        set_path(out, path, value)
    return out


def at_edge(value: float, choices: list[Any] | None = None, low: float | None = None, high: float | None = None,
            log: bool = False) -> str | None:
    """"largest" / "smallest" when ``value`` is a search space's largest or smallest numeric choice,
    or lies in the outer 5% of its range [low, high] (on the log scale when the range is); else None."""
    if choices is not None:
        numbers = [c for c in choices if isinstance(c, int | float) and not isinstance(c, bool)]
        if len(numbers) < 2:
            return None
        return "largest" if value == max(numbers) else "smallest" if value == min(numbers) else None
    if low is None or high is None:
        return None
    lo, hi, v = float(low), float(high), float(value)
    if log:
        lo, hi, v = math.log(lo), math.log(hi), math.log(v)
    if hi <= lo:
        return None
    return "largest" if v >= hi - 0.05 * (hi - lo) else "smallest" if v <= lo + 0.05 * (hi - lo) else None


def edge_note(params: dict[str, Any], space: dict[str, dict[str, Any]]) -> str:
    """What a cell's replicates are told when its tuning's best setting lies at the edge of the
    protocol's ``space`` (``design.tune_protocol``): "its tuning's best train.lr, 0.02, is at the
    largest end of its search space: the best may lie beyond it" — the report says so too, once every replicate
    trained; said at their start, a wider space can be tried before they do. "" when none is."""
    parts = [f"its tuning's best {path}, {value:.3g}, is at the {edge} end of its search space"
             for path, value, edge in edges(params, space)]
    return "; ".join(parts) + ": the best may lie beyond it (a wider tune.space would tell)" if parts else ""


def edges(params: dict[str, Any], space: dict[str, dict[str, Any]]) -> list[tuple[str, Any, str]]:
    """(path, value, "largest" / "smallest") for each numeric parameter of ``params`` at an edge of ``space``."""
    out = []
    for path, value in params.items():
        dim = space.get(path) or {}
        if not isinstance(value, int | float) or isinstance(value, bool):
            continue
        edge = at_edge(value, dim.get("choices"), dim.get("low"), dim.get("high"), bool(dim.get("log")))
        if edge is not None:
            out.append((path, value, edge))
    return out


def setting_of(attrs: dict[str, Any]) -> dict[str, Any]:
    """A trial's tuned setting from its attributes (``params``, set when its item was claimed);
    {} for an untuned one or one not claimed yet."""
    params = attrs.get("params")
    return dict(params) if isinstance(params, dict) else {}


def setting_words(settings: list[dict[str, Any]], most: int = 3) -> str:
    """Tuned settings in a few words for a terminal line: each path's last part and its values over
    ``settings`` (one item's, or those of the items a worker trains as one model): "lr=0.005",
    "lr=0.0025,0.005,0.01"; "" when there are none. A tuning trial's seed does not tell it from
    the cell's other trials on that seed: its setting does."""
    values: dict[str, list[Any]] = {}
    for setting in settings:
        for path, value in setting.items():
            seen = values.setdefault(str(path).rsplit(".", 1)[-1], [])
            if value not in seen:
                seen.append(value)
    parts = []
    for key, seen in values.items():
        if all(isinstance(v, int | float) and not isinstance(v, bool) for v in seen):
            seen = sorted(seen)
        shown = ",".join(f"{v:.3g}" if isinstance(v, float) else str(v) for v in seen[:most])
        parts.append(f"{key}={shown}" + (",…" if len(seen) > most else ""))
    return " ".join(parts)


def phase_words(phase: str, settings: list[dict[str, Any]]) -> str:
    """A phase with the tuned settings of its item, or of the items a worker trains as one model:
    "tune lr=0.0025,0.01" (``setting_words``), "replicate lr=0.01", "replicate"."""
    words = setting_words(settings)
    return f"{phase} {words}" if words else phase


def grid_point(space: dict[str, dict[str, Any]], index: int) -> dict[str, Any]:
    """The ``index``-th combination of the space's choices (the first dimension varies slowest),
    the setting of tuning trial ``index`` under the grid sampler. By index rather than Optuna's
    GridSampler, which picks an unvisited point at random from the history it sees: two workers
    sampling one cell at once see the same history, and a point could run twice, another never."""
    choices = [dim["choices"] for dim in space.values()]
    combos = list(itertools.product(*choices))
    if not 0 <= index < len(combos):
        raise IndexError(f"grid trial {index} of {len(combos)} combinations")
    return dict(zip(space, combos[index], strict=True))


#: A finite space with more settings than this is left to the sampler alone: its draws rarely repeat.
MAX_COMBINATIONS = 10_000


def combinations(space: dict[str, dict[str, Any]]) -> list[dict[str, Any]] | None:
    """Every setting of a finite ``space`` (each dimension a list of choices or an int range), the
    first dimension varying slowest; None when a dimension is a float range (a stepped one too:
    its values are floats a sampler may round otherwise) or there are over ``MAX_COMBINATIONS``."""
    values: list[list[Any]] = []
    for dim in space.values():
        if dim.get("type") == "categorical":
            values.append(list(dim["choices"]))
        elif dim.get("type") == "int":
            step = 1 if dim.get("log") else int(dim.get("step") or 1)
            values.append(list(range(int(dim["low"]), int(dim["high"]) + 1, step)))
        else:
            return None
        if math.prod(len(v) for v in values) > MAX_COMBINATIONS:
            return None
    return [dict(zip(space, combo, strict=True)) for combo in itertools.product(*values)]


def shuffled(combos: list[dict[str, Any]], cell_id: str) -> list[dict[str, Any]]:
    """The cell's own random order of a finite space's settings (seeded by the cell: reproducible)."""
    order = list(range(len(combos)))
    random.Random(sampler_seed(cell_id, -1)).shuffle(order)
    return [combos[i] for i in order]


def unrepeated(combos: list[dict[str, Any]], cell_id: str, index: int, seeds: int) -> dict[str, Any]:
    """Tuning trial ``index``'s setting drawn from a finite space without repeats, by its index alone
    (so fused trials sampled at once differ): trial i runs on tuning seed s = i mod k and takes the
    ((i // k + s) mod n)-th setting of the cell's shuffled order. No setting runs twice on a seed
    before each of the n ran on it once, and the seeds' first trials take different settings.
    Optuna's random draws repeat: its samplers allow for noisy objectives, and a trial here is a
    deterministic function of its setting and seed, so a repeat on one seed is a trial wasted (2
    choices, 2 trials: one cell in two never tried its second choice)."""
    k = max(1, seeds)
    return dict(shuffled(combos, cell_id)[(index // k + index % k) % len(combos)])


def sampler_seed(cell_id: str, index: int) -> int:
    """A stable seed per (cell, tuning trial): reproducible samples, different across trials."""
    return int(hashlib.sha256(f"{cell_id}/{index}".encode()).hexdigest()[:8], 16)


def best(results: list[tuple[int, dict[str, Any], float | None]], direction: str) -> Score | None:
    """The best tuning setting of ``results`` (index, params, value; ``None`` or non-finite: the
    trial did not finish with a number), judged by its mean over the trials that ran it — the same
    setting on several tuning seeds (a grid on ``tune.seeds``) by its mean, not by its luckiest seed.
    A setting some of whose trials did not finish with a number ranks after every setting all of
    whose trials did (a learning rate that diverged on one seed is not chosen for a lucky other);
    ties go to the lowest index."""
    scored = scores(results)
    if not scored:
        return None
    sign = -1.0 if direction == "maximize" else 1.0
    return min(scored, key=lambda s: (s.finished < s.trials, sign * s.mean, s.index))


class Score(NamedTuple):
    """One tuning setting's standing: its first trial's index, the setting, the mean of its trials'
    finite values, how many of its trials have one, how many ran it, and the indices of those with
    one (trial i ran on tuning seed i mod k)."""

    index: int
    params: dict[str, Any]
    mean: float
    finished: int
    trials: int
    indices: tuple[int, ...] = ()

    def over(self, seeds: int) -> str:
        """", the mean over 3 tuning seeds" (of ``seeds`` tuning seeds in all), ", the mean over 4
        trials on 2 tuning seeds" where some seed ran the setting twice (its space exhausted there);
        "" for one trial."""
        return mean_words(self.finished, len({i % max(1, seeds) for i in self.indices}))


def mean_words(trials: int, seeds: int) -> str:
    """``Score.over``'s words for a mean over ``trials`` trials on ``seeds`` tuning seeds."""
    if trials < 2:
        return ""
    return f", the mean over {seeds} tuning seeds" if seeds == trials else \
        f", the mean over {trials} trials on {count(seeds, 'tuning seed')}"


def scores(results: list[tuple[int, dict[str, Any], float | None]]) -> list[Score]:
    """Each setting of ``results`` with at least one finite value, in the order of its first trial.
    A trial index listed more than once (a killed or retried item's attempts, each an Optuna trial)
    is one trial of the design: it counts once, with a finite value if some attempt has one."""
    by_index: dict[int, tuple[dict[str, Any], float | None]] = {}
    for i, params, v in sorted(results, key=lambda r: r[0]):
        value = float(v) if isinstance(v, int | float) and math.isfinite(v) else None
        if by_index.get(i, (None, None))[1] is None:
            by_index[i] = (params, value)
    groups: dict[str, list[tuple[int, dict[str, Any], float | None]]] = {}
    for i, (params, value) in by_index.items():
        groups.setdefault(json.dumps(params, sort_keys=True, default=str), []).append((i, params, value))
    out = []
    for group in groups.values():
        values = [v for _, _, v in group if v is not None]
        if values:
            out.append(Score(group[0][0], group[0][1], math.fsum(values) / len(values), len(values), len(group),
                             tuple(i for i, _, v in group if v is not None)))
    return out
