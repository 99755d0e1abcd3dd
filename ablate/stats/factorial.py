"""The factorial structure of a study: marginal means, main effects, interaction tables and the
factorial ANOVA with seeds as replicates."""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as sps

from ablate.stats.estimators import ROUNDOFF, mark_for, metric_range, no_spread, robust_level
from ablate.stats.selection import completed_runs, infer_factors, ordered_unique, phase_rows

__all__ = [
    "AnovaNotApplicable",
    "anova",
    "anova_applicable",
    "anova_on_finished_levels",
    "factor_combinations",
    "interaction_table",
    "is_full_factorial",
    "main_effects",
    "marginal_means",
]


class AnovaNotApplicable(ValueError):
    """The design does not support the requested ANOVA; the message says why."""


def _check_factors(trials: pd.DataFrame, factors: str | Sequence[str]) -> list[str]:
    factors = [factors] if isinstance(factors, str) else list(factors)
    missing = [f for f in factors if f not in trials.columns]
    if missing:
        raise KeyError(
            f"factor column{'s' if len(missing) != 1 else ''} {missing} not in the trials frame; factors: "
            f"{infer_factors(trials)}"
        )
    return factors


def is_full_factorial(
    trials: pd.DataFrame,
    factors: Sequence[str],
    metric: str | None = None,
    phase: str | None = "replicate",
) -> bool:
    """Whether every combination of the factors' levels is a cell of ``trials``.

    Levels are those appearing in ``trials``. With ``metric`` given, every combination must also
    have at least one completed run (what an ANOVA on a partial study needs). False for no factors.
    """
    factors = _check_factors(trials, factors)
    if not factors:
        return False
    rows = phase_rows(trials, phase)
    levels = [ordered_unique(rows[f]) for f in factors]
    have = rows if metric is None else completed_runs(trials, metric, phase)
    present = set(map(tuple, have[factors].drop_duplicates().itertuples(index=False)))
    return all(combo in present for combo in itertools.product(*levels))


def factor_combinations(trials: pd.DataFrame, factors: Sequence[str],
                        phase: str | None = "replicate") -> tuple[int, int]:
    """How many combinations of the factors' levels are cells of ``trials``, and how many a full
    factorial has (the product of the level counts): equal when, and only when, it is one."""
    rows = phase_rows(trials, phase)
    factors = list(factors)
    return len(rows[factors].drop_duplicates()), math.prod(len(ordered_unique(rows[f])) for f in factors)


def _cell_stats(done: pd.DataFrame, metric: str, by: list[str]) -> pd.DataFrame:
    """Per cell with completed runs: the ``by`` levels, n, mean, sum of squared deviations."""
    g = done.groupby("cell_id", sort=False)[metric]
    cells = done.drop_duplicates("cell_id").set_index("cell_id")[by]
    out = cells.assign(
        n=g.size(),
        mean=g.mean(),
        ss=g.apply(lambda s: float(((s - s.mean()) ** 2).sum())),
    )
    return out.reset_index()


def _seed_means(runs: pd.DataFrame, metric: str) -> pd.Series | None:
    """Seed → the mean of ``metric`` over the cells of ``runs``, when every cell there ran the
    same two or more seeds once each (a seed-blocked design); else None."""
    seeds = runs.groupby("cell_id", sort=False)["seed"].agg(lambda s: tuple(sorted(s)))
    if seeds.empty or seeds.nunique() != 1 or len(seeds.iloc[0]) < 2 or len(set(seeds.iloc[0])) != len(seeds.iloc[0]):
        return None
    return runs.groupby("seed", sort=True)[metric].mean()


def _seed_jackknife(runs: pd.DataFrame, metric: str) -> tuple[float, int, np.ndarray, float] | None:
    """(se, seeds, the leave-one-seed-out estimates, df) of the unweighted mean of the cells' means
    over ``runs``: the delete-one-seed jackknife over every seed a cell ran, when the cells share two
    or more seeds and none would be left empty by deleting one; else None.

    Seeds are the independent units (a seed's effect is shared by the cells that ran it), so
    leaving one out at a time measures the spread a shared seed effect gives the marginal mean.
    With every cell on the same seeds it is exactly the t interval's se of the per-seed means.

    The df are Satterthwaite's over the groups of seeds that the same cells ran (a seed alone in its
    group counted with the largest), each group's share of the variance on its seeds − 1 df, at most
    seeds − 1 in all. Where a cell stopped at 3 seeds while the others ran 16, its share rests on 3
    seeds: 15 df made the level's interval too narrow (docs/calibration.md, "Seed sets that overlap
    in part")."""
    at = runs.groupby(["cell_id", "seed"], sort=False)[metric].agg(["sum", "size"])
    cells = at.index.get_level_values("cell_id")
    seeds = at.index.get_level_values("seed")
    per_cell = at.groupby(level="cell_id", sort=False)[["sum", "size"]].sum()
    common = set.intersection(*(set(g.index.get_level_values("seed")) for _, g in at.groupby(level="cell_id")))
    if len(common) < 2 or (per_cell["size"] < 2).any():
        return None
    k = len(per_cell)
    cell_means = per_cell["sum"] / per_cell["size"]
    total = float(cell_means.sum())
    # Leaving seed s out changes only the means of the cells that ran it.
    left = (per_cell["sum"].reindex(cells).to_numpy() - at["sum"].to_numpy()) / (
        per_cell["size"].reindex(cells).to_numpy() - at["size"].to_numpy())
    shift = pd.Series(left - cell_means.reindex(cells).to_numpy()).groupby(np.asarray(seeds)).sum()
    loo = (total + shift.to_numpy(float)) / k
    m = len(loo)
    parts = (m - 1) / m * (loo - loo.mean()) ** 2
    ran = pd.Series(list(cells), index=np.asarray(seeds)).groupby(level=0).agg(lambda c: tuple(sorted(c)))
    group = pd.factorize(ran.reindex(shift.index))[0]
    # A seed alone in its group (a run lost there) has no spread of its own to weigh: it counts with
    # the largest group, so a study that lost single runs keeps seeds − 1 df.
    sizes = np.bincount(group)
    group = np.where(sizes[group] == 1, int(np.argmax(sizes)), group)
    by_group = pd.Series(parts, index=shift.index).groupby(group)
    shares, counts = by_group.sum().to_numpy(float), by_group.size().to_numpy(float)
    var = float(parts.sum())
    # A group's seeds − 1: a cell that ran only them has shifts summing to zero over them.
    df = float(var**2 / (shares**2 / (counts - 1)).sum()) if var > 0 and len(shares) > 1 else m - 1.0
    return float(np.sqrt(var)), m, loo, min(float(m - 1), df)


def _welch(sub: pd.DataFrame) -> tuple[float, float, float]:
    """(se, Satterthwaite df, largest within-cell sd) of the unweighted mean of the means of the
    cells of ``sub`` (every one with two or more runs), each with its own variance."""
    var = sub["ss"].to_numpy(float) / (sub["n"].to_numpy(float) - 1)
    v = var / sub["n"].to_numpy(float)
    k = len(sub)
    se = float(np.sqrt(v.sum()) / k)
    terms = v**2 / (sub["n"].to_numpy(float) - 1)
    df = float(v.sum() ** 2 / terms.sum()) if terms.sum() > 0 else float(sub["n"].min() - 1)
    return se, df, float(np.sqrt(var.max()))


def marginal_means(
    trials: pd.DataFrame,
    metric: str,
    by: str | Sequence[str],
    confidence: float = 0.95,
    phase: str | None = "replicate",
) -> pd.DataFrame:
    """Marginal means of ``metric`` for each combination of the ``by`` factors' levels.

    A marginal mean is the *unweighted* mean of the means of the cells at that combination (the
    estimated marginal mean of the full-interaction cell-means model), so an unbalanced or partial
    study does not tilt it towards the cells that happen to have more runs. Its interval is t-based
    and depends on whether the cells averaged share their seeds (``interval`` says which):

    - **seed-blocked** (``"seed-blocked t"``) when two or more cells are averaged and they all ran
      the same two or more seeds: the t interval of the per-seed means over those cells, on seeds − 1
      degrees of freedom. A seed's effect common to every cell (one data order) does not average out
      of a marginal mean, and only the spread of the per-seed means counts it. When the cells share
      two or more seeds but not all of them (a paired study that lost a run: a seed flagged out, a
      failed trial; a sequential design's cells that stopped at different looks), the se is the
      delete-one-seed jackknife's over the m seeds any of them ran (``"seed-blocked t, jackknifed
      over 8 seeds (not every cell ran each)"``) — the same se as the per-seed means' when every
      cell runs every seed — on Satterthwaite's df over the groups of seeds the same cells ran, at
      most m − 1 (``_seed_jackknife``: a cell stopped at 3 seeds brings them near 2). The t on the
      seeds every cell ran had one degree of freedom fewer per lost seed: at 4 seeds with one lost,
      intervals three times as wide as the level's whose cells ran all four;
    - **Welch** (``"Welch t"``) otherwise, when every cell averaged has two or more runs: each cell
      its own variance, ``se = sqrt(Σ s_i²/n_i) / k`` over the ``k`` cells averaged, on
      Welch–Satterthwaite degrees of freedom — a level whose runs vary more gets the wider interval
      (a variance pooled over all cells would give it the study's common spread);
    - **pooled** (``"pooled t: a cell has one run"``) where a cell averaged has a single run (no
      variance of its own): the within-cell variance pooled over all cells (the model's residual
      mean square), ``se = sqrt(MSE · Σ 1/n_i) / k``, with ``N − C`` degrees of freedom (N runs,
      C cells) — it assumes the cells' spreads equal.

    Cells with no completed run are left out (``n_cells`` says how many went in, ``n_cells_total``
    how many exist). The interval is the t interval at ``estimators.robust_level(confidence)``
    (wider than exact under normality, so that it holds on skewed and ceiling accuracies), clipped
    to the metric's range (``metric_range``); NaN when its spread is round-off relative to the
    values (``estimators.no_spread``: per-seed means that all agree, or a residual sd ≤
    ``ROUNDOFF`` × the largest value), with ``ci_note`` saying why (``''`` when there is one).

    Columns: the ``by`` columns, ``n_cells``, ``n_cells_total``, ``n`` (runs), ``mean``, ``se``,
    ``ci_low``, ``ci_high``, ``ci_note``, ``df``, ``mean_runs`` (plain mean over the runs, for
    reference), ``interval`` (which of the two).
    """
    by = _check_factors(trials, by)
    done = completed_runs(trials, metric, phase)
    all_cells = phase_rows(trials, phase).drop_duplicates("cell_id")
    cols = [*by, "n_cells", "n_cells_total", "n", "mean", "se", "ci_low", "ci_high", "ci_note", "df", "mean_runs",
            "interval"]
    if done.empty:
        return pd.DataFrame(columns=cols)
    level = robust_level(confidence)
    low_bound, high_bound = metric_range(metric)
    scale = float(done[metric].abs().max())
    cs = _cell_stats(done, metric, by)
    df_resid = int(cs["n"].sum() - len(cs))
    mse = float(cs["ss"].sum() / df_resid) if df_resid > 0 else np.nan
    pooled_note = "no replicated cell" if df_resid <= 0 else ""
    if df_resid > 0 and not np.sqrt(mse) > ROUNDOFF * scale:
        mse, pooled_note = np.nan, "no spread: each cell's runs equal"
    levels = [ordered_unique(phase_rows(trials, phase)[f]) for f in by]
    rows = []
    for combo in itertools.product(*levels):
        mask = np.logical_and.reduce([cs[f] == lv for f, lv in zip(by, combo, strict=True)])
        sub = cs[mask]
        total = int(
            np.logical_and.reduce([all_cells[f] == lv for f, lv in zip(by, combo, strict=True)]).sum()
        )
        if total == 0:
            continue  # a combination that is not a cell of this design
        k = len(sub)
        mean = float(sub["mean"].mean()) if k else np.nan
        runs = done[np.logical_and.reduce([done[f] == lv for f, lv in zip(by, combo, strict=True)])]
        blocked = _seed_means(runs, metric) if k >= 2 else None
        jack = _seed_jackknife(runs, metric) if k >= 2 and blocked is None else None
        if blocked is not None:
            n_s = len(blocked)
            mean, se = float(blocked.mean()), float(blocked.std(ddof=1) / np.sqrt(n_s))
            df, kind, note = n_s - 1, "seed-blocked t", ""
            if no_spread(blocked.to_numpy(float), scale):
                se, note = np.nan, f"no spread: {n_s} seeds' means equal"
        elif jack is not None:
            se, df, note = jack[0], jack[3], ""
            kind = f"seed-blocked t, jackknifed over {jack[1]} seeds (not every cell ran each)"
            if no_spread(jack[2], scale):
                se, note = np.nan, f"no spread: {jack[1]} seeds' leave-one-out means equal"
        elif k and (sub["n"] >= 2).all():
            se, df, sd_max = _welch(sub)
            kind, note = "Welch t", ""
            if not sd_max > ROUNDOFF * scale:
                se, note = np.nan, "no spread: each cell's runs equal"
        else:
            se = float(np.sqrt(mse * (1.0 / sub["n"]).sum()) / k) if k else np.nan
            df, kind, note = (df_resid if df_resid > 0 else np.nan), ("pooled t: a cell has one run" if k else ""), pooled_note
        q = float(sps.t.ppf(0.5 + level / 2, df)) if np.isfinite(df) else np.nan
        rows.append(
            {
                **dict(zip(by, combo, strict=True)),
                "n_cells": k,
                "n_cells_total": total,
                "n": int(sub["n"].sum()) if k else 0,
                "mean": mean,
                "se": se,
                "ci_low": float(np.clip(mean - q * se, low_bound, high_bound)),
                "ci_high": float(np.clip(mean + q * se, low_bound, high_bound)),
                "ci_note": note if k else "no runs",
                "df": df,
                "mean_runs": float(runs[metric].mean()) if len(runs) else np.nan,
                "interval": kind,
            }
        )
    return pd.DataFrame(rows, columns=cols)


def main_effects(
    trials: pd.DataFrame,
    metric: str,
    factors: Sequence[str] | None = None,
    confidence: float = 0.95,
    phase: str | None = "replicate",
) -> pd.DataFrame:
    """Marginal mean of ``metric`` at each level of each factor, with its CI.

    See ``marginal_means`` for the estimator. ``factors`` defaults to ``infer_factors(trials)``.
    Columns: ``factor``, ``level``, ``n_cells``, ``n_cells_total``, ``n``, ``mean``, ``se``,
    ``ci_low``, ``ci_high``, ``ci_note``, ``df``, ``mean_runs``, ``interval``; factors in the order
    given, levels in order.
    """
    factors = infer_factors(trials) if factors is None else _check_factors(trials, factors)
    parts = []
    for f in factors:
        mm = marginal_means(trials, metric, [f], confidence, phase)
        parts.append(mm.rename(columns={f: "level"}).assign(factor=f))
    cols = [
        "factor",
        "level",
        "n_cells",
        "n_cells_total",
        "n",
        "mean",
        "se",
        "ci_low",
        "ci_high",
        "ci_note",
        "df",
        "mean_runs",
        "interval",
    ]
    if not parts:
        return pd.DataFrame(columns=cols)
    return pd.concat(parts, ignore_index=True)[cols]


def interaction_table(
    trials: pd.DataFrame,
    metric: str,
    f1: str,
    f2: str,
    confidence: float = 0.95,
    wide: bool = False,
    phase: str | None = "replicate",
) -> pd.DataFrame:
    """Two-factor marginal means (``marginal_means(by=[f1, f2])``).

    Long form (default) has the columns of ``marginal_means``; ``wide=True`` returns the means
    pivoted to ``f1`` levels × ``f2`` levels (for a table in a report).
    """
    if f1 == f2:
        raise ValueError("an interaction needs two different factors")
    long = marginal_means(trials, metric, [f1, f2], confidence, phase)
    if not wide:
        return long
    table = long.pivot(index=f1, columns=f2, values="mean")
    order1 = [lv for lv in ordered_unique(trials[f1]) if lv in table.index]
    order2 = [lv for lv in ordered_unique(trials[f2]) if lv in table.columns]
    return table.loc[order1, order2]


def anova_applicable(
    trials: pd.DataFrame, metric: str, factors: Sequence[str], phase: str | None = "replicate"
) -> tuple[bool, str]:
    """Whether ``anova`` applies, and if not, why (a sentence for the report)."""
    try:
        factors = _check_factors(trials, factors)
    except KeyError as exc:
        return False, str(exc.args[0])
    if not factors:
        return False, "no factors were varied"
    done = completed_runs(trials, metric, phase)
    if done.empty:
        return False, "no completed runs yet"
    single = [f for f in factors if done[f].nunique() < 2]
    if single:
        return False, (f"factor{'s' if len(single) != 1 else ''} {', '.join(single)} "
                       f"{'have' if len(single) != 1 else 'has'} fewer than two levels with completed runs")
    have, total = factor_combinations(trials, factors, phase)
    if have < total:
        return False, (f"the design is not a full factorial: it has {have} of the {total} combinations "
                       "of the factors' levels")
    if not is_full_factorial(trials, factors, metric, phase):
        return False, "the design is full factorial, but not every cell has a completed run with a value"
    n_cells = done.groupby(factors, observed=True).ngroups
    if len(done) <= n_cells:
        return False, "no replication: a cell needs at least two completed seeds"
    if _roundoff_residual(done[metric].to_numpy(float), done.groupby(factors, observed=True)[metric].transform("mean")):
        return False, ("no spread within the cells: every cell's runs are equal (to round-off), so there is no "
                       "residual variance to test the factors against")
    return True, ""


def _roundoff_residual(y: np.ndarray, fitted: Any) -> bool:
    """Whether the residual sd of ``y`` around ``fitted`` is round-off relative to the values' scale
    (``estimators.ROUNDOFF``): an F over it is a ratio of floating-point noise."""
    resid = y - np.asarray(fitted, dtype=float)
    return bool(np.sqrt(np.mean(resid**2)) <= ROUNDOFF * float(np.max(np.abs(y))))


def anova(
    trials: pd.DataFrame,
    metric: str,
    factors: Sequence[str] | None = None,
    typ: int = 2,
    max_order: int | None = None,
    phase: str | None = "replicate",
) -> pd.DataFrame:
    """Factorial ANOVA table (statsmodels ``ols`` + ``anova_lm``, type II by default).

    The model has every main effect and every interaction up to ``max_order`` factors (default:
    all). Raises ``AnovaNotApplicable`` unless the design is full factorial with ≥ 2 levels per
    factor, every cell has a completed run, and some cell is replicated (see
    ``anova_applicable``). Columns: ``term`` (``a``, ``a × b``, …, ``Residual``), ``df``,
    ``sum_sq``, ``mean_sq``, ``F``, ``p``, ``eta_sq_partial`` (SS_term / (SS_term + SS_resid)),
    ``mark`` (on the uncorrected p, alpha 0.05). Also raises when the model's residual sd is
    round-off relative to the values (``estimators.ROUNDOFF``): two cells whose runs are all 1.0
    would otherwise give an F of a few and a partial η² of 0.5 from 1e-16 residuals.
    """
    from statsmodels.formula.api import ols
    from statsmodels.stats.anova import anova_lm

    factors = infer_factors(trials) if factors is None else _check_factors(trials, factors)
    ok, why = anova_applicable(trials, metric, factors, phase)
    if not ok:
        raise AnovaNotApplicable(f"ANOVA not applicable: {why}")
    done = completed_runs(trials, metric, phase)
    # Formula-safe names: dotted paths are not valid identifiers.
    alias = {f: f"f{i}" for i, f in enumerate(factors)}
    data = pd.DataFrame({alias[f]: done[f].astype(str).to_numpy() for f in factors})
    data["y"] = done[metric].to_numpy(float)
    order = len(factors) if max_order is None else max(1, min(max_order, len(factors)))
    terms = [
        ":".join(f"C({alias[f]})" for f in combo)
        for k in range(1, order + 1)
        for combo in itertools.combinations(factors, k)
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = ols("y ~ " + " + ".join(terms), data=data).fit()
        if _roundoff_residual(data["y"].to_numpy(float), fit.fittedvalues):
            raise AnovaNotApplicable("ANOVA not applicable: the model leaves no residual spread beyond round-off, "
                                     "so there is nothing to test the terms against")
        table = anova_lm(fit, typ=typ)
    back = {f"C({a})": f for f, a in alias.items()}
    names = [
        "Residual" if t == "Residual" else " × ".join(back.get(p, p) for p in t.split(":"))
        for t in table.index
    ]
    ss_resid = float(table.loc["Residual", "sum_sq"])
    out = pd.DataFrame(
        {
            "term": names,
            "df": table["df"].to_numpy(float),
            "sum_sq": table["sum_sq"].to_numpy(float),
        }
    )
    out["mean_sq"] = out["sum_sq"] / out["df"]
    out["F"] = table["F"].to_numpy(float)
    out["p"] = table["PR(>F)"].to_numpy(float)
    is_resid = out["term"] == "Residual"
    out["eta_sq_partial"] = np.where(is_resid, np.nan, out["sum_sq"] / (out["sum_sq"] + ss_resid))
    out["mark"] = [mark_for(p) for p in out["p"]]
    return out


def anova_on_finished_levels(
    trials: pd.DataFrame, metric: str, factors: Sequence[str], phase: str | None = "replicate"
) -> tuple[pd.DataFrame, dict[str, list[Any]]]:
    """For a partial study: ``trials`` without the factor levels that have no completed run yet.

    Returns ``(subset, dropped)`` where ``dropped`` maps each factor to the levels left out. When
    the design is full factorial over the remaining levels, ``anova(subset, ...)`` is the ANOVA
    of the study *so far*; a report must say which levels it leaves out. ``dropped`` is empty
    when every level has a completed run (then ``subset`` is ``trials``).
    """
    factors = _check_factors(trials, factors)
    done = completed_runs(trials, metric, phase)
    rows = phase_rows(trials, phase)
    dropped: dict[str, list[Any]] = {}
    keep = np.ones(len(trials), dtype=bool)
    for f in factors:
        have = set(done[f].dropna())
        gone = [lv for lv in ordered_unique(rows[f]) if lv not in have]
        if gone:
            dropped[f] = gone
            keep &= ~trials[f].isin(gone).to_numpy()
    return (trials[keep] if dropped else trials), dropped
