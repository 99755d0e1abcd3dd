"""Constructed frames for the statistics, formatting and figure tests (no study, no storage).

``make_trials`` / ``factorial`` / ``set_status`` build trials frames as the results API writes them;
``curve_frame`` builds probe norm rows as ``Results.curves`` holds them.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

METRIC = "test_accuracy"
CHANCE = 0.5
A, B = "model.parameterisation", "model.normalisation"


def make_trials(
    cells: dict[str, float],
    seeds: int | dict[str, list[int]] = 5,
    sd: float = 0.01,
    seed_sd: float = 0.0,
    rng: np.random.Generator | None = None,
    factors: dict[str, dict[str, str]] | None = None,
) -> pd.DataFrame:
    """A trials frame: cell id -> true mean; noise sd; a shared per-seed offset of ``seed_sd``."""
    rng = rng or np.random.default_rng(0)
    per_cell = seeds if isinstance(seeds, dict) else {c: list(range(seeds)) for c in cells}
    all_seeds = sorted({s for v in per_cell.values() for s in v})
    seed_effect = dict(zip(all_seeds, rng.normal(0, seed_sd, len(all_seeds)), strict=True))
    rows = []
    for cid, mu in cells.items():
        levels = (factors or {}).get(cid, {})
        label = ", ".join(f"{k.split('.')[-1]}={v}" for k, v in levels.items()) or cid
        for s in per_cell[cid]:
            rows.append(
                {
                    "cell_id": cid,
                    "cell_label": label,
                    "seed": s,
                    "phase": "replicate",
                    "status": "complete",
                    "failure_kind": None,
                    "failure_message": None,
                    METRIC: mu + seed_effect[s] + rng.normal(0, sd),
                    **levels,
                }
            )
    return pd.DataFrame(rows)


def factorial(
    effect_a: float = 0.0,
    effect_b: float = 0.0,
    interaction: float = 0.0,
    seeds: int = 4,
    sd: float = 0.01,
    rng: np.random.Generator | None = None,
) -> pd.DataFrame:
    """A 2 × 3 full factorial (A: rotation/diagonal, B: xi/none/layer)."""
    a_levels, b_levels = ["rotation", "diagonal"], ["xi", "none", "layer"]
    cells, factors = {}, {}
    for i, a in enumerate(a_levels):
        for j, b in enumerate(b_levels):
            cid = f"{a}-{b}"
            cells[cid] = 0.8 + effect_a * i + effect_b * j + interaction * i * j
            factors[cid] = {A: a, B: b}
    return make_trials(cells, seeds, sd=sd, rng=rng, factors=factors)


def set_status(trials: pd.DataFrame, cell: str, seeds: list[int], status: str) -> pd.DataFrame:
    out = trials.copy()
    mask = (out["cell_id"] == cell) & out["seed"].isin(seeds)
    out.loc[mask, "status"] = status
    out.loc[mask, METRIC] = np.nan
    return out


def curve_frame(values: dict[str, np.ndarray]) -> pd.DataFrame:
    """Probe norm_sq_mean rows: values[label] has shape (seeds, layers, steps)."""
    rows = []
    for i, (label, v) in enumerate(values.items()):
        for s, l_, k in np.ndindex(v.shape):
            rows.append({"cell_id": f"c{i}", "cell_label": label, "seed": s, "layer": l_, "step": 10 * k, "head": 0,
                         "t": -1, "value": v[s, l_, k], "kind": "probe", "quantity": "norm_sq_mean"})
    return pd.DataFrame(rows)


def steady_and_wild(seed: int = 0) -> tuple[pd.DataFrame, np.ndarray]:
    """Probe norms of two variants, 4 seeds × 3 layers × 6 steps: "steady" (1% noise; its values
    returned too) and "wild" (log-normal)."""
    rng = np.random.default_rng(seed)
    steady = 1 + 0.01 * rng.standard_normal((4, 3, 6))
    wild = np.exp(rng.standard_normal((4, 3, 6)))
    return curve_frame({"steady": steady, "wild": wild}), steady


def answer_res(trials: pd.DataFrame, min_effect: float = 0.01, chance: float | None = None) -> object:
    """The least of a results object ``verdicts.study_verdicts`` reads: a spec's stats and budget, the factors."""
    from types import SimpleNamespace

    spec = SimpleNamespace(stats=SimpleNamespace(min_effect=min_effect, power=0.8, min_ratio=1.25), sequential=None,
                           train=SimpleNamespace(steps=100))
    return SimpleNamespace(spec=spec, factors=[A, B], chance=chance)


def answer_verdicts(trials: pd.DataFrame, **kw: object) -> object:
    """``study_verdicts`` of a constructed frame, its first cell the reference."""
    from ablate.report import verdicts

    ref = trials["cell_id"].iloc[0], trials["cell_label"].iloc[0]
    return verdicts.study_verdicts(answer_res(trials, **kw), trials, METRIC, ref)
