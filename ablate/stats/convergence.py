"""Whether trials converged: the rule a trial applies to its validation passes (``last_fifth``), and
the per-cell table of the reports from what each trial recorded (``cell_convergence``).

A run is *still improving* when its validation metric rose over the last fifth of its steps by
more than its own pass-to-pass noise explains and by more than a tolerance worth a longer run:

    window    the passes at steps in [s − ⌊s/5⌋, s] of a run of s steps (``ablate.schedule``
              puts one at the boundary and at least ``CONVERGENCE_PASSES`` in the window); on
              a WSD schedule s is its stable end, since the decay raises the metric whether or
              not a longer run would (``last_fifth`` is given that s)
    gain      the least-squares slope of value against step over the window's passes, times the
              window's length: what the metric gained across the last fifth, in metric units (a
              loss: its decrease, relative to the fitted value at the boundary)
    noise     the slope's standard error from the residuals of that fit (n − 2 degrees of freedom)
    flag      gain > tol and gain / se > t₍₁₋α, n−2₎ (one-sided, α = ``ALPHA``)

A flat run with independent noise is flagged with probability at most α whatever its noise; a
rising one is flagged once its rise stands out of its noise (``benchmarks/bench_stats_calibration.py``
measures both). The earlier rule — the running best against the best at 0.8 · steps — rose on a
noisy plateau by the noise alone and read a window that began at the last pass before 0.8 · steps.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from scipy.special import stdtrit

from ablate.stats.selection import cell_rows, phase_rows

__all__ = [
    "ALPHA",
    "CONVERGENCE_COLUMNS",
    "last_fifth",
    "cell_convergence",
    "step_budget",
]


#: What a trial records of its convergence (null where a trial predates them): whether it
#: converged, the gain of the validation metric over the last fifth of the steps it ran and that
#: gain's standard error, the steps it ran, whether it stopped early, and the step of its best
#: validation value.
CONVERGENCE_COLUMNS = ("converged", "val_gain_last", "val_gain_se", "steps", "stopped_early", "best_step")
#: The one-sided level of the trend test: a flat run is flagged "still improving" this often at most.
ALPHA = 0.05


def last_fifth(history: Sequence[tuple[int, float]], steps: int, maximize: bool, tol: float,
               stopped: bool = False, alpha: float = ALPHA) -> dict[str, Any]:
    """The convergence record of one run from its validation passes ``history`` ((step, value))
    over the ``steps`` it ran: ``converged`` (None when the window holds fewer than three finite
    passes and the run did not stop early), ``val_gain_last`` and ``val_gain_se`` (the gain over
    the last fifth and its standard error, None where not measured). ``tol`` is in metric units,
    for a loss a relative decrease. A run ``stopped`` early converged whatever its gain: patience
    ended it, not the budget. The rule is the module's."""
    start = steps - steps // 5
    window = sorted((s, v) for s, v in history if start <= s <= steps and math.isfinite(v))
    out: dict[str, Any] = {"converged": True if stopped else None, "val_gain_last": None, "val_gain_se": None}
    if len(window) < 3 or window[-1][0] == window[0][0]:
        return out
    x = np.array([s for s, _ in window], dtype=float)
    y = np.array([v for _, v in window], dtype=float)
    x_c = x - x.mean()
    sxx = float((x_c**2).sum())
    slope = float((x_c * y).sum() / sxx)
    resid = y - (y.mean() + slope * x_c)
    df = len(window) - 2
    se_slope = math.sqrt(max(float((resid**2).sum()), 0.0) / df / sxx) if df > 0 else math.inf
    span = float(steps - start)
    gain, se = slope * span, se_slope * span
    if not maximize:  # a loss falls when it improves, and its tolerance is relative to its level
        level = abs(float(y.mean() + slope * (start - x.mean()))) or 1.0
        gain, se = -gain / level, se / level
    beyond_noise = gain > 0 if se == 0 else gain / se > float(stdtrit(df, 1.0 - alpha))
    improving = gain > tol and beyond_noise
    out.update(converged=bool(stopped or not improving), val_gain_last=gain, val_gain_se=se)
    return out


def step_budget(trials: pd.DataFrame, default: int | None) -> dict[Any, float]:
    """Cell id → its step budget: the ``train.steps`` factor's level where a factor moves it, else
    ``default`` (the spec's ``train.steps``)."""
    out: dict[Any, float] = {}
    for _, cell in cell_rows(trials).iterrows():
        level = cell.get("train.steps") if "train.steps" in trials.columns else None
        value = pd.to_numeric(pd.Series([level]), errors="coerce").iloc[0] if level is not None else np.nan
        out[cell["cell_id"]] = float(value) if np.isfinite(value) else (float(default) if default else np.nan)
    return out


def _flag(value: Any) -> bool | None:
    """A recorded yes/no (bool, 0/1, "true"/"false"), or None where nothing was recorded."""
    if value is None or (isinstance(value, float) and np.isnan(value)) or value is pd.NA:
        return None
    if isinstance(value, str):
        return {"true": True, "false": False, "1": True, "0": False}.get(value.strip().lower())
    return bool(value)


def _cell_still_improving(gain: np.ndarray, se: np.ndarray, stopped: np.ndarray, unconverged: np.ndarray,
                          alpha: float = ALPHA) -> bool:
    """Whether a cell as a whole was still improving: over its runs that used their whole budget
    and recorded the trend test (``val_gain_se``), a one-sided t-test of their gains at ``alpha``
    with at least one of them flagged by its own rule (its tolerance); one such run: its flag.
    Runs recorded before the trend test: any run flagged, as they were. A cell is one question:
    "any of its 8 runs flagged" would mark a flat 8-run cell a third of the time at one point of
    noise."""
    full = ~stopped & np.isfinite(gain) & np.isfinite(se)
    if not full.any():
        return bool(unconverged.any())
    g = gain[full]
    if g.size == 1:
        return bool(unconverged[full][0])
    sd = float(g.std(ddof=1))
    mean = float(g.mean())
    significant = mean > 0 if sd == 0 else mean / (sd / math.sqrt(g.size)) > float(stdtrit(g.size - 1, 1.0 - alpha))
    return bool(significant and unconverged[full].any())


def cell_convergence(
    trials: pd.DataFrame,
    budget: dict[Any, float] | float | None = None,
    min_gain: float = 0.01,
    phase: str | None = "replicate",
) -> pd.DataFrame:
    """Per cell, over its completed runs: which were still improving when their budget ran out,
    and how many steps they used.

    A run is *still improving* when it records ``converged`` False, or — where ``converged`` is
    null but ``val_gain_last`` is known — when its validation metric gained at least
    ``min_gain`` over the last 20% of its steps; never when it stopped early (its plateau ended
    it, not the budget; trials recorded before ``last_fifth`` said so hold False
    there). Columns missing from ``trials`` (studies that predate them) count as unknown, never
    as converged. ``budget`` is a cell id → steps mapping (``step_budget``) or one number.

    Columns: ``cell_id``, ``cell_label``, ``n`` (completed runs), ``n_known`` (runs with any
    convergence record), ``n_unconverged`` (runs flagged by their own rule), ``still_improving``
    (the cell as a whole: the gains of its runs that used their whole budget rise beyond their
    spread, ``_cell_still_improving``),
    ``gain_max`` / ``gain_median`` (``val_gain_last`` over the still-improving runs, else over the
    runs that did not stop early; NaN when every run stopped early), ``budget``, ``steps_min``,
    ``steps_max``, ``steps_differ`` (some run used a number of steps other than the budget),
    ``n_stopped_early``, ``best_step_median``, ``n_extended`` (runs trained past the budget by
    ``train.until_converged``: a ``budget`` column above it, ``extended_from`` set), ``n_continued``
    (of those, the runs that started from a shorter run's stable-phase checkpoint: ``continued_from`` set) and
    ``budget_reached`` (the largest budget a run of the cell reached; ``budget`` without
    extensions), ``budget_extended_min`` (the smallest budget an extended run reached; NaN without
    one: with ``budget_reached``, the range the extended runs span). ``steps_differ`` compares each run's steps with its own budget."""
    rows_all = phase_rows(trials, phase)
    done = rows_all[rows_all["status"] == "complete"]

    def column(frame: pd.DataFrame, name: str) -> pd.Series:
        if name in frame.columns:
            return frame[name]
        return pd.Series([None] * len(frame), index=frame.index, dtype=object)

    cols = ["cell_id", "cell_label", "n", "n_known", "n_unconverged", "still_improving", "gain_max", "gain_median",
            "budget", "steps_min", "steps_max", "steps_differ", "n_stopped_early", "best_step_median", "n_extended",
            "n_continued", "budget_reached", "budget_extended_min"]
    rows = []
    for _, cell in cell_rows(trials).iterrows():
        runs = done[done["cell_id"] == cell["cell_id"]]
        conv = column(runs, "converged")
        gain = pd.to_numeric(column(runs, "val_gain_last"), errors="coerce").to_numpy(float)
        steps = pd.to_numeric(column(runs, "steps"), errors="coerce").to_numpy(float)
        early = column(runs, "stopped_early")
        best = pd.to_numeric(column(runs, "best_step"), errors="coerce").to_numpy(float)
        flags = [_flag(v) for v in conv]
        conv_known = np.array([f is not None for f in flags], dtype=bool)
        conv_false = np.array([f is False for f in flags], dtype=bool)
        by_gain = ~conv_known & np.isfinite(gain) & (gain >= min_gain)
        stopped = np.array([_flag(v) is True for v in early], dtype=bool)
        unconverged = (conv_false | by_gain) & ~stopped
        known = conv_known | np.isfinite(gain)
        # The gains of the runs still improving, else of those that ran their whole budget: an early
        # stop's gain over its last fifth came before its plateau and says nothing about the budget.
        g = gain[(unconverged if unconverged.any() else ~stopped) & np.isfinite(gain)]
        cap = budget.get(cell["cell_id"], np.nan) if isinstance(budget, dict) else (
            float(budget) if budget is not None else np.nan)
        # A run trained until converged (``train.until_converged``) ran to its own budget, past the cell's.
        own = pd.to_numeric(column(runs, "budget"), errors="coerce").to_numpy(float)
        extended = np.isfinite(pd.to_numeric(column(runs, "extended_from"), errors="coerce").to_numpy(float))
        continued = np.array([v is not None and v is not pd.NA and not (isinstance(v, float) and np.isnan(v))
                              and v != "" for v in column(runs, "continued_from")], dtype=bool)
        budgets = np.where(np.isfinite(own), own, cap)
        s = steps[np.isfinite(steps)]
        differ = np.isfinite(steps) & np.isfinite(budgets) & (steps != budgets)
        se = pd.to_numeric(column(runs, "val_gain_se"), errors="coerce").to_numpy(float)
        rows.append({
            "cell_id": cell["cell_id"], "cell_label": cell["cell_label"], "n": int(len(runs)),
            "n_known": int(known.sum()), "n_unconverged": int(unconverged.sum()),
            "still_improving": _cell_still_improving(gain, se, stopped, unconverged),
            "gain_max": float(g.max()) if g.size else np.nan, "gain_median": float(np.median(g)) if g.size else np.nan,
            "budget": cap, "steps_min": float(s.min()) if s.size else np.nan,
            "steps_max": float(s.max()) if s.size else np.nan,
            "steps_differ": bool(differ.any()),
            "n_stopped_early": int(stopped.sum()),
            "best_step_median": float(np.median(best[np.isfinite(best)])) if np.isfinite(best).any() else np.nan,
            "n_extended": int(extended.sum()),
            "n_continued": int((extended & continued).sum()),
            "budget_reached": float(np.nanmax(budgets)) if np.isfinite(budgets).any() else cap,
            "budget_extended_min": float(np.nanmin(budgets[extended])) if np.isfinite(budgets[extended]).any()
            else np.nan,
        })
    return pd.DataFrame(rows, columns=cols)
