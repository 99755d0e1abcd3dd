"""The analysis behind the ``norm_stability`` report: tidy curve frames in, numeric frames out.

Input is ``Results.curves`` (``ablate.probes.CURVE_SCHEMA`` plus ``cell_id``, ``cell_label``,
``seed`` and the factor columns) as pandas. A *variant* is a cell of the study. Nothing here
formats, draws, reads storage or imports torch; every function is deterministic. How the numbers
are shown — tables, sentences, figures — is ``ablate.report.norm_stability``.

The norm of a run at a probe step and layer is the probe batch's ‖x_t^h‖² averaged over t and heads
(``norm_sq_mean`` rows of kind ``probe``). **The seed is the unit of replication**: the probe steps
and layers of one run share that run's initialisation, data order and drift, so they are never
resampled or tested as if independent. Each run is reduced to one value per measure, on the log
scale (norms and CVs are close to log-normal), and variants are compared on those values with
the accuracy report's machinery (``stats.compare_to_reference``: exact permutation tests, paired
on shared seeds, never below three seeds, Holm within each measure's family):

    training   the run's CV of ‖x‖² across its probe steps, per layer, averaged over layers
    depth      the run's CV across layers at each probe step, averaged over probe steps
    final      the run's whole-state ‖x‖² (summed over heads) at its last probe step (geometric
               mean over layers)
    seeds      how far the run's log ‖x‖² lies from its variant's mean over seeds, as the root mean
               square over (layer, step) with the n/(n − 1) correction — a Levene-type deviation
               whose mean square over seeds is the unbiased seed variance of log ‖x‖², so a
               variant's value does not depend on how many seeds it has

A variant's value over training and at the end is the geometric mean over its seeds (``exp`` of the
mean log) with a t interval on the logs; over layers it is the mean over seeds on the square-root
scale, (mean √CV)², with a t interval on √CV, squared (``value_interval``: a CV of a few layers is
a spread of a few values, skewed even on the log scale, and the t interval of its mean log covered
0.92–0.93 at 3–8 seeds on the calibration benchmark; √CV is close to symmetric there and in the
committed studies); over seeds, ``sd_seeds`` = sqrt(mean over (layer, step) of the seed variance of
log ‖x‖²) (≈ the CV across seeds for small spreads) with a chi-square interval on n − 1 degrees of
freedom (conservative: the (layer, step) units of one seed are not independent). A comparison's
ratio is exp(mean log difference) with the t interval of that difference; over seeds both sides
use the same seeds (the first common ones, else the first k of each) and the ratio of their
``sd_seeds`` has an F interval on (k − 1, k − 1) degrees of freedom. Factor effects are ANOVAs of
the per-seed log values with seeds as replicates (``stats.anova``), Holm-corrected across every
term and measure of the report.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as sps
from statsmodels.stats.multitest import multipletests

from ablate.stats.comparisons import (
    COMPARISON_COLUMNS,
    MIN_N_TEST,
    PERMUTATIONS,
    compare_to_reference,
    power_line,
)
from ablate.stats.estimators import Estimate, mark_for, t_interval
from ablate.stats.factorial import AnovaNotApplicable, anova, anova_applicable, anova_on_finished_levels
from ablate.stats.factorial import main_effects as factor_means
from ablate.stats.selection import STANDARD_COLUMNS, infer_factors

__all__ = [
    "ANOVA_COLUMNS",
    "COLUMN",
    "COMPARE_COLUMNS",
    "MEASURES",
    "RAW",
    "VALUE",
    "compare",
    "edge_steps",
    "factor_anova",
    "layer_norms",
    "main_effects",
    "per_seed",
    "prepare",
    "probe_batch_check",
    "sd_over_seeds",
    "spectrum_drift",
    "stability",
    "theory_check",
    "time_curves",
    "value_interval",
    "variance_permutation",
    "variants",
]

#: The measures, in the order every table and sentence gives them.
MEASURES = ("training", "depth", "seeds", "final")
#: The per-seed column each measure is analysed on (log scale).
COLUMN = {"training": "log_cv_training", "depth": "log_cv_depth", "seeds": "log_dev_seeds",
          "final": "log_final_norm"}
#: The column of ``stability`` holding each measure's value per variant (its interval: the same
#: name with ``_low`` and ``_high``): geometric means, (mean √CV)² over layers, the sd over seeds.
VALUE = {"training": "gm_training", "depth": "sqm_depth", "seeds": "sd_seeds", "final": "gm_final"}

Order = Sequence[tuple[str, str]]  # (cell_id, cell_label) of the variants, in the plan's order


def _pandas(frame: Any) -> pd.DataFrame:
    return frame.to_pandas() if hasattr(frame, "to_pandas") else pd.DataFrame(frame)


# --- frames ---------------------------------------------------------------------------------------


def prepare(curves: Any, trials: Any = None) -> pd.DataFrame:
    """Curves as pandas, replicate runs only (when ``trials`` tells the phase), old rows completed
    (no ``quantity`` column: every row was a probe ``norm_sq``)."""
    df = _pandas(curves)
    if df.empty:
        return df
    if "quantity" not in df.columns:
        df["quantity"] = "norm_sq"
    df["quantity"] = df["quantity"].fillna("norm_sq")
    if trials is not None:
        tr = _pandas(trials)
        if "phase" in tr.columns:
            keep = tr.loc[tr["phase"] == "replicate", ["cell_id", "seed"]].drop_duplicates()
            df = df.merge(keep, on=["cell_id", "seed"], how="inner")
    if not (df["quantity"] == "norm_sq_mean").any():  # derive the summaries from an old dense curve
        dense = df[df["quantity"] == "norm_sq"]
        keys = ["cell_id", "cell_label", "seed", "kind", "step", "layer", "head"]
        mean = dense.groupby(keys, as_index=False, sort=False)["value"].mean().assign(quantity="norm_sq_mean", t=-1)
        df = pd.concat([df, mean], ignore_index=True)
    return df


def variants(df: pd.DataFrame, trials: Any = None) -> list[tuple[str, str]]:
    """(cell_id, cell_label) in the plan's order (the trials frame's), those with curves only."""
    have = set(df["cell_id"]) if not df.empty else set()
    order = _pandas(trials) if trials is not None else df
    order = order[["cell_id", "cell_label"]].drop_duplicates("cell_id")
    return [(c, lbl) for c, lbl in order.itertuples(index=False, name=None) if c in have]


def layer_norms(df: pd.DataFrame, kind: str = "probe", quantity: str = "norm_sq_mean") -> pd.DataFrame:
    """One row per (cell, seed, layer, step): the head mean of ``quantity`` rows of ``kind``
    (``value``; per head, so that head counts compare) and the number of heads (``heads``)."""
    sub = df[(df["kind"] == kind) & (df["quantity"] == quantity)]
    cols = ["cell_id", "cell_label", "seed", "layer", "step"]
    return sub.groupby(cols, as_index=False, sort=False).agg(value=("value", "mean"), heads=("value", "size"))


def time_curves(df: pd.DataFrame, kind: str) -> pd.DataFrame:
    """One row per (cell, seed, layer, step, t): the head mean of the dense ``norm_sq`` curve."""
    sub = df[(df["kind"] == kind) & (df["quantity"] == "norm_sq") & (df["t"] >= 0)]
    cols = ["cell_id", "cell_label", "seed", "layer", "step", "t"]
    return sub.groupby(cols, as_index=False, sort=False)["value"].mean()


def probe_batch_check(metrics: Any) -> tuple[int, bool] | None:
    """From ``Results.metrics``: (runs that logged a probe-batch fingerprint, whether all logged the
    same one), or None when none did. Norms of different runs compare only on one batch."""
    m = _pandas(metrics) if metrics is not None and len(metrics) else None
    if m is None or "name" not in m.columns:
        return None
    fp = m[m["name"] == "probe/batch_fingerprint"]
    if not len(fp):
        return None
    return int(fp[["cell_id", "seed"]].drop_duplicates().shape[0]), bool(fp["value"].nunique() == 1)


def edge_steps(df: pd.DataFrame) -> tuple[int, int]:
    """The first and the last probe step of ``df`` (what "initialisation" and "end" mean here)."""
    steps = df["step"].to_numpy()
    return int(steps.min()), int(steps.max())


# --- the seed as the unit ---------------------------------------------------------------------------


def _log(x: Any) -> np.ndarray:
    a = np.asarray(x, dtype=float)
    with np.errstate(all="ignore"):
        return np.where(a > 0, np.log(np.where(a > 0, a, 1.0)), np.nan)


def _deviations(norms: pd.DataFrame) -> pd.Series:
    """(cell_id, seed) → the run's Levene-type deviation over its cell's seeds (module docstring):
    sqrt of the mean over (layer, step) of n/(n − 1) · (log ‖x‖² − its mean over the cell's seeds)²,
    over the units two or more seeds measured; NaN for a cell with one seed."""
    logs = norms.assign(log=_log(norms["value"]))
    logs = logs[np.isfinite(logs["log"])]
    unit = logs.groupby(["cell_id", "layer", "step"], sort=False)["log"]
    n = unit.transform("count")
    with np.errstate(all="ignore"):
        sq = ((logs["log"] - unit.transform("mean")) ** 2 * n / (n - 1)).where(n >= 2)
    dev = np.sqrt(sq.groupby([logs["cell_id"], logs["seed"]], sort=False).mean())
    return dev.rename("dev_seeds")


def _cv_over(norms: pd.DataFrame, within: list[str]) -> pd.Series:
    """``stats.cv`` of ``value`` within each group of ``within``: sd (ddof 1) over |mean|, NaN
    below two values."""
    g = norms.groupby(within, sort=False)["value"].agg(["std", "mean", "count"])
    with np.errstate(all="ignore"):
        return (g["std"] / g["mean"].abs()).where(g["count"] >= 2)


def per_seed(norms: pd.DataFrame, trials: Any = None, factors: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per run (cell, seed) with its value of every measure (module docstring) — the frame
    every test, interval and ANOVA of the norm report is computed from, and what a notebook fits
    its own model to (``ablate.results`` exposes it as ``Results.stability()``).

    ``norms`` is ``layer_norms`` (one row per cell, seed, layer, step). Columns: ``cell_id``,
    ``cell_label``, ``seed``, ``phase`` ("replicate"), ``status`` ("complete"), ``layers``,
    ``steps`` (probe steps of the run), ``cv_training``, ``cv_depth`` (NaN with one layer),
    ``final_norm``, ``dev_seeds`` (NaN for a cell with one seed), their logs ``log_cv_training``,
    ``log_cv_depth``, ``log_final_norm``, ``log_dev_seeds``, and the columns ``factors`` of
    ``trials`` (when given; default its dotted-path columns — a named factor has no dot: name it)."""
    cols = ["cell_id", "cell_label", "seed", "layers", "steps", "cv_training", "cv_depth", "final_norm", "dev_seeds"]
    norms = norms[np.isfinite(norms["value"].to_numpy(float))]
    if norms.empty:
        out = pd.DataFrame(columns=cols)
    else:
        run = ["cell_id", "seed"]
        base = norms.groupby(run, sort=False).agg(cell_label=("cell_label", "first"), layers=("layer", "nunique"),
                                                  steps=("step", "nunique"))
        training = _cv_over(norms, [*run, "layer"]).groupby(level=[0, 1], sort=False).mean()
        depth = _cv_over(norms, [*run, "step"]).groupby(level=[0, 1], sort=False).mean()
        last = norms[norms["step"] == norms.groupby(run, sort=False)["step"].transform("max")]
        # The whole state's ‖x‖² (the head mean times the heads): a per-head norm of the same state
        # shrinks as its heads get smaller, which would make the head count look like an effect.
        whole = last["value"] * (last["heads"] if "heads" in last.columns else 1)
        final = np.exp(last.assign(log=_log(whole)).groupby(run, sort=False)["log"].mean())
        out = base.assign(cv_training=training, cv_depth=depth.where(base["layers"] > 1), final_norm=final,
                          dev_seeds=_deviations(norms)).reset_index()[cols]
    for name in ("cv_training", "cv_depth", "final_norm", "dev_seeds"):
        out[f"log_{name}"] = _log(out[name].to_numpy(float))
    out.insert(3, "phase", "replicate")
    out.insert(4, "status", "complete")
    if trials is not None and len(out):
        tr = _pandas(trials)
        factors = infer_factors(tr) if factors is None else list(factors)
        factors = [c for c in factors if c in tr.columns and c not in out.columns and c not in STANDARD_COLUMNS]
        if factors:
            levels = tr[["cell_id", *factors]].drop_duplicates("cell_id")
            out = out.merge(levels, on="cell_id", how="left")
    return out


def sd_over_seeds(norms: pd.DataFrame, seeds: Sequence[Any] | None = None) -> tuple[float, int]:
    """(sd of log ‖x‖² across seeds, seeds used) of one cell's ``layer_norms``: the square root of
    the mean over (layer, step) of the unbiased seed variance (``ddof = 1``), so it does not depend on
    the number of seeds; only ``seeds`` when given. NaN below two seeds."""
    if seeds is not None:
        norms = norms[norms["seed"].isin(list(seeds))]
    dev = _deviations(norms) if len(norms) else pd.Series(dtype=float)
    n = int(norms["seed"].nunique()) if len(norms) else 0
    if n < 2 or not np.isfinite(dev).any():
        return np.nan, n
    return float(np.sqrt(np.nanmean(dev.to_numpy(float) ** 2))), n


def _chi2_interval(sd: float, n: int, confidence: float) -> tuple[float, float]:
    """The interval of an sd on n − 1 degrees of freedom (normal theory; conservative when the
    averaged units are correlated, which they are within a seed)."""
    if not (np.isfinite(sd) and n >= 2):
        return np.nan, np.nan
    q = (1 - confidence) / 2
    df = n - 1
    return float(sd * np.sqrt(df / sps.chi2.ppf(1 - q, df))), float(sd * np.sqrt(df / sps.chi2.ppf(q, df)))


def value_interval(values: Sequence[float] | np.ndarray, measure: str, confidence: float = 0.95) -> Estimate:
    """A variant's value of ``measure`` (``training``, ``depth`` or ``final``) from its runs' values
    (``per_seed``'s ``cv_training``, ``cv_depth``, ``final_norm``; not their logs), with its interval.

    Over training and at the end: the geometric mean, ``exp`` of the t interval of the mean log.
    Over layers: (mean √v)², the t interval of the mean √v squared, its lower end at 0 where the
    interval on √v reaches below it — the estimand is (E √CV)², the power mean of order ½. A run's
    CV over layers is a spread of a few values (of two layers, |x₁ − x₂| / (√2 x̄)): its log is
    skewed to the left by the runs whose layers happen to be close, and the t interval of the
    mean log covered 0.92–0.93 at 3, 5 and 8 seeds on ``benchmarks/bench_norm_calibration.py``;
    on √CV, nearly symmetric there (skew −0.25 against −0.80 on the log), it covers 0.94–0.95
    (the benchmark's ``--parts depth`` prints every candidate tried). Non-positive and non-finite
    values are left out; NaN bounds below two values."""
    if measure not in ("training", "depth", "final"):
        raise ValueError(f"value_interval takes a per-run measure (training, depth or final), not {measure!r}")
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v) & (v > 0)]
    if measure != "depth":
        est = t_interval(np.log(v), confidence)
        return Estimate(float(np.exp(est.value)), float(np.exp(est.ci_low)), float(np.exp(est.ci_high)), est.n)
    est = t_interval(np.sqrt(v), confidence)
    low = max(est.ci_low, 0.0) if np.isfinite(est.ci_low) else est.ci_low
    return Estimate(est.value**2, low**2, est.ci_high**2, est.n)


#: The per-run value ``value_interval`` takes for each measure (``per_seed``'s columns).
RAW = {"training": "cv_training", "depth": "cv_depth", "final": "final_norm"}


def stability(seeds: pd.DataFrame, norms: pd.DataFrame, order: Order, confidence: float = 0.95) -> pd.DataFrame:
    """Per variant: counts, the mean norm, and per measure its value with its interval.

    ``seeds`` is ``per_seed``. Columns: ``cell_id``, ``variant``, ``seeds``, ``layers``, ``steps``,
    ``mean_norm``; for ``training`` and ``final``: ``gm_m`` (geometric mean over seeds), ``gm_m_low``,
    ``gm_m_high`` (t interval of the mean log, exponentiated; from two seeds); for ``depth``:
    ``sqm_depth`` ((mean √CV over seeds)²), ``sqm_depth_low``, ``sqm_depth_high`` (t interval on
    √CV, squared: ``value_interval``); ``n_m`` (seeds with a value) for the three; for ``seeds``:
    ``sd_seeds``, ``sd_seeds_low``, ``sd_seeds_high`` (chi-square, from two seeds) and ``n_seeds``.
    ``VALUE`` names each measure's value column."""
    rows = []
    for cid, label in order:
        sub = norms[norms["cell_id"] == cid]
        runs = seeds[seeds["cell_id"] == cid]
        row: dict[str, Any] = {
            "cell_id": cid, "variant": label, "seeds": sub["seed"].nunique(), "layers": sub["layer"].nunique(),
            "steps": sub["step"].nunique(), "mean_norm": float(sub["value"].mean()) if len(sub) else np.nan,
        }
        for m in ("training", "depth", "final"):
            est = value_interval(runs[RAW[m]].to_numpy(float), m, confidence)
            col = VALUE[m]
            row.update({col: est.value, f"{col}_low": est.ci_low, f"{col}_high": est.ci_high, f"n_{m}": est.n})
        sd, n = sd_over_seeds(sub)
        low, high = _chi2_interval(sd, n, confidence)
        row.update({"sd_seeds": sd, "sd_seeds_low": low, "sd_seeds_high": high, "n_seeds": n})
        rows.append(row)
    return pd.DataFrame(rows)


#: Columns of ``compare``: the measure, ``stats.compare_to_reference``'s, and the ratio on the
#: measure's own scale with its interval.
COMPARE_COLUMNS = ["measure", *COMPARISON_COLUMNS, "ratio", "ratio_low", "ratio_high"]


def _common_seeds(a: pd.Series, b: pd.Series) -> tuple[list[Any], list[Any]]:
    """The seeds both sides of an over-seeds comparison use, as many on each side: the shared ones
    when two or more are shared, else the first k of each (k the smaller count)."""
    sa, sb = sorted(pd.unique(a)), sorted(pd.unique(b))
    shared = sorted(set(sa) & set(sb))
    if len(shared) >= 2:
        return shared, shared
    k = min(len(sa), len(sb))
    return sa[:k], sb[:k]


def _residuals(norms: pd.DataFrame, units: pd.MultiIndex) -> np.ndarray:
    """One cell's (seed × unit) matrix of log ‖x‖² minus the unit's mean over the cell's seeds,
    times sqrt(n/(n − 1)) — each row has the expected square of the seed variance."""
    logs = norms.assign(log=_log(norms["value"])).pivot_table(index="seed", columns=["layer", "step"],
                                                                values="log", aggfunc="mean")
    x = logs.reindex(columns=units).to_numpy(float)
    n = x.shape[0]
    return (x - x.mean(axis=0)) * np.sqrt(n / (n - 1))


def variance_permutation(cell: np.ndarray, ref: np.ndarray, n_resamples: int = PERMUTATIONS,
                         seed: int | None = 0) -> tuple[float, bool, float]:
    """(p, exact, p_min) of the two-sided test that two variants with different seeds
    vary as much across seeds, on their residual matrices (``_residuals``, the same units).

    Under the null a seed's whole residual vector is as likely to have come from either variant, so
    the vectors are permuted between the sides (every split of the 2k seeds into two of k, Monte
    Carlo beyond ``n_resamples``); the statistic is |log(V_cell / V_ref)| with V a side's seed
    variance per unit (recentred, ddof 1) averaged over units. Relabelling the per-seed deviations
    instead ignores that they share their variant's mean, and rejects too often (0.073–0.08 at 5
    seeds and α = 0.05 in the calibration benchmark; this test: 0.035 at 5, 0.042 at 8)."""
    r = np.vstack([cell, ref])
    k, big = cell.shape[0], r.shape[0]
    arrangements = math.comb(big, k)
    exact = arrangements <= n_resamples
    if exact:
        picks = np.array(list(itertools.combinations(range(big), k)))
    else:
        rng = np.random.default_rng(seed)
        picks = np.vstack([np.arange(k), np.argsort(rng.random((n_resamples, big)), axis=1)[:, :k]])
    mask = np.zeros((len(picks), big), dtype=float)
    mask[np.arange(len(picks))[:, None], picks] = 1.0

    def spread(m: np.ndarray) -> np.ndarray:
        s1, s2, n = m @ r, m @ r**2, m.sum(axis=1, keepdims=True)
        return ((s2 - s1**2 / n) / (n - 1)).mean(axis=1)

    with np.errstate(all="ignore"):
        stat = np.abs(np.log(spread(mask) / spread(1.0 - mask)))
    observed = stat[0]  # the first split is the observed one (seeds 0..k−1 are the cell's)
    if not np.isfinite(observed):
        return np.nan, exact, np.nan
    # The observed split is one of the splits counted (exact) or drawn (Monte Carlo: (h + 1)/(B + 1)).
    hits = int(np.count_nonzero(stat >= observed - 1e-12 * max(1.0, abs(observed))))
    p_min = 2.0 / arrangements if exact else 2.0 / (n_resamples + 1)
    return float(min(1.0, hits / len(stat))), exact, float(p_min)


def _seeds_comparisons(norms: pd.DataFrame, ref: str, order: Order, alpha: float, confidence: float,
                       min_ratio: float, power: float) -> pd.DataFrame:
    """The over-seeds family: per variant, both sides on the same seeds (``_common_seeds``) and the
    (layer, step) units both measured; shared seeds: the sign-flip test of the per-seed log
    deviations (``compare_to_reference``); different seeds: ``variance_permutation``. The ratio of
    the sds on those seeds and units, with its F interval on (k − 1, k − 1) degrees of freedom."""
    labels = dict(order)
    ref_norms = norms[norms["cell_id"] == ref]
    rows = []
    for cid, _ in order:
        if cid == ref:
            continue
        cell_norms = norms[norms["cell_id"] == cid]
        use_cell, use_ref = _common_seeds(cell_norms["seed"], ref_norms["seed"])
        sides = [sub[sub["seed"].isin(use)] for sub, use in ((cell_norms, use_cell), (ref_norms, use_ref))]
        # The units every used seed of both sides measured: a seed's residual vector is then one
        # observation on the same coordinates whichever side it is put on.
        seen = [s.groupby(["layer", "step"])["seed"].nunique() for s in sides]
        full = [set(n.index[n == len(use)]) for n, use in zip(seen, (use_cell, use_ref), strict=True)]
        units = pd.MultiIndex.from_tuples(sorted(full[0] & full[1]), names=["layer", "step"])
        parts = []
        for c, sub in zip((cid, ref), sides, strict=True):
            keep = sub.set_index(["layer", "step"]).index.isin(units)
            dev = _deviations(sub[keep]) if keep.any() else pd.Series(dtype=float)
            parts += [{"cell_id": c, "cell_label": labels[c], "seed": s, "phase": "replicate", "status": "complete",
                       "log_dev_seeds": float(_log(v))} for (_, s), v in dev.items()]
        frame = pd.DataFrame(parts, columns=["cell_id", "cell_label", "seed", "phase", "status", "log_dev_seeds"])
        if frame.empty or not (frame["cell_id"] == ref).any():
            frame = pd.concat([frame, pd.DataFrame([{"cell_id": ref, "cell_label": labels[ref], "seed": -1,
                                                     "phase": "replicate", "status": "failed"}])])
        one = compare_to_reference(frame, "log_dev_seeds", ref, alpha, confidence=confidence,
                                   min_effect=float(np.log(min_ratio)), power=power)
        one = one[one["cell_id"] == cid].copy()
        k = min(len(use_cell), len(use_ref)) if len(units) else 0
        ratio = low = high = np.nan
        if k >= 2:
            rc, rr = _residuals(sides[0], units), _residuals(sides[1], units)
            with np.errstate(all="ignore"):
                vc, vr = np.mean(rc**2), np.mean(rr**2)  # the seed variances (ddof 1), averaged over units
                ratio = float(np.sqrt(vc / vr)) if vr > 0 else np.nan
            if np.isfinite(ratio):
                f = float(sps.f.ppf(1 - (1 - confidence) / 2, k - 1, k - 1))
                low, high = ratio / np.sqrt(f), ratio * np.sqrt(f)
            if not bool(one["paired"].iloc[0]) and bool(one["testable"].iloc[0]):
                p, exact, p_min = variance_permutation(rc, rr)
                one["p"], one["exact"], one["p_min"] = p, exact, p_min
                one["test"] = f"{'exact' if exact else 'Monte Carlo'} residual permutation"
        rows.append(one.assign(ratio=ratio, ratio_low=low, ratio_high=high))
    if not rows:
        return pd.DataFrame(columns=COMPARE_COLUMNS)
    out = _holm(pd.concat(rows, ignore_index=True), alpha)
    # Each row was tested alone: the power line's α is Holm's first threshold over the family's tests.
    out["power_alpha"] = alpha / max(1, int(out["p"].notna().sum()))
    lines = [power_line(r.sd_diff, int(r.n), float(np.log(min_ratio)), r.power_alpha, power, bool(r.paired))
             for r in out.itertuples()]
    out["power_now"] = [now for now, _ in lines]
    out["seeds_needed"] = [need for _, need in lines]
    return out


def _holm(out: pd.DataFrame, alpha: float) -> pd.DataFrame:
    """Holm across the family ``out`` (its tested rows), with the marks and power's α from it."""
    tested = out["p"].notna()
    out["p_adj"] = np.nan
    if tested.any():
        out.loc[tested, "p_adj"] = multipletests(out.loc[tested, "p"].to_numpy(float), method="holm")[1]
    out["mark"] = [mark_for(p, alpha) for p in out["p_adj"]]
    out["significant"] = (out["p_adj"] < alpha).astype(bool)
    return out


def compare(seeds: pd.DataFrame, norms: pd.DataFrame, reference: str, order: Order, alpha: float = 0.05,
            confidence: float = 0.95, min_ratio: float = 1.25, power: float = 0.8) -> pd.DataFrame:
    """Every variant against the declared ``reference`` cell, per measure (module docstring): the
    rows of ``stats.compare_to_reference`` on the per-seed log values (one family per measure,
    Holm within it; nothing tested below three seeds), with ``measure`` and ``ratio`` (exp of the
    mean log difference; over seeds, the ratio of the sds on common seeds), ``ratio_low``,
    ``ratio_high``. The power line asks for a ratio of ``min_ratio``. Columns ``COMPARE_COLUMNS``;
    a measure no variant has a value of is left out."""
    parts = []
    for m in ("training", "depth", "final"):
        if not np.isfinite(seeds[COLUMN[m]].to_numpy(float)).any():
            continue
        comp = compare_to_reference(seeds, COLUMN[m], reference, alpha, confidence=confidence,
                                    min_effect=float(np.log(min_ratio)), power=power)
        with np.errstate(all="ignore"):
            comp = comp.assign(ratio=np.exp(comp["mean_diff"].astype(float)),
                               ratio_low=np.exp(comp["diff_ci_low"].astype(float)),
                               ratio_high=np.exp(comp["diff_ci_high"].astype(float)))
        parts.append(comp.assign(measure=m))
    if seeds["seed"].nunique() >= 2 and np.isfinite(seeds["log_dev_seeds"].to_numpy(float)).any():
        parts.append(_seeds_comparisons(norms, reference, order, alpha, confidence, min_ratio, power)
                     .assign(measure="seeds"))
    if not parts:
        return pd.DataFrame(columns=COMPARE_COLUMNS)
    out = pd.concat(parts, ignore_index=True)
    names = dict(order)  # the variants' labels as the caller names them (a report's short ones)
    out["cell_label"] = [names.get(c, lbl) for c, lbl in zip(out["cell_id"], out["cell_label"], strict=True)]
    out["reference_label"] = names.get(reference, out["reference_label"].iloc[0] if len(out) else reference)
    out["measure"] = pd.Categorical(out["measure"], categories=list(MEASURES))
    out = out.sort_values("measure", kind="stable").reset_index(drop=True)
    out["measure"] = out["measure"].astype(str)
    return out[COMPARE_COLUMNS]


# --- factor effects ------------------------------------------------------------------------------------

ANOVA_COLUMNS = ["measure", "term", "df", "df_resid", "F", "p", "p_adj", "eta_sq_partial", "mark", "significant"]


def factor_anova(seeds: pd.DataFrame, factors: Sequence[str], alpha: float = 0.05
                 ) -> tuple[pd.DataFrame, dict[str, str]]:
    """Main effects and two-way interactions of ``factors`` on every measure's per-seed log value:
    ``stats.anova`` (type II, seeds as replicates) per measure, the p-values Holm-corrected across
    every term of every measure (the report's factor screen is one family). A measure some levels
    cannot have (over layers, at one layer) is analysed on the levels that have it. Returns the
    terms (``ANOVA_COLUMNS``, residual rows left out) and, per measure analysed partly or not at
    all, a sentence saying so."""
    varied = [f for f in factors if f in seeds.columns and seeds[f].nunique() > 1]
    rows, why = [], {}
    for m in MEASURES:
        col = COLUMN[m]
        if not varied:
            why[m] = "no ANOVA: no factor was varied"
            continue
        data, terms = seeds, varied
        ok, reason = anova_applicable(seeds, col, varied)
        if not ok:  # a measure some levels cannot have (over layers at one layer): the levels that have it
            subset, dropped = anova_on_finished_levels(seeds, col, varied)
            rest = [f for f in varied if subset[f].nunique() > 1]
            if dropped and rest and anova_applicable(subset, col, rest)[0]:
                data, terms, ok = subset, rest, True
                kept = "; ".join(f"{f} = {', '.join(map(str, pd.unique(subset[f])))}" for f in varied if f not in rest)
                why[m] = f"ANOVA on the cells that have the measure only ({kept})"
        counts = data[np.isfinite(data[col].to_numpy(float))].groupby("cell_id").size()
        if ok and (counts.empty or int(counts.min()) < MIN_N_TEST):
            ok, reason = False, (f"too few seeds to test (a cell has {int(counts.min()) if len(counts) else 0}; "
                                 f"at least {MIN_N_TEST} are needed)")
        if not ok:
            why[m] = f"no ANOVA: {reason}"
            continue
        try:
            table = anova(data, col, terms, max_order=2)
        except AnovaNotApplicable as exc:  # pragma: no cover - anova_applicable said yes
            why[m] = str(exc)
            continue
        resid = float(table.loc[table["term"] == "Residual", "df"].iloc[0])
        for r in table[table["term"] != "Residual"].itertuples():
            rows.append({"measure": m, "term": r.term, "df": float(r.df), "df_resid": resid, "F": float(r.F),
                         "p": float(r.p), "eta_sq_partial": float(r.eta_sq_partial)})
    out = pd.DataFrame(rows, columns=[c for c in ANOVA_COLUMNS if c not in ("p_adj", "mark", "significant")])
    out = _holm(out, alpha) if len(out) else out.assign(p_adj=np.nan, mark="", significant=False)
    return out[ANOVA_COLUMNS], why


def main_effects(seeds: pd.DataFrame, factors: Sequence[str], confidence: float = 0.95) -> pd.DataFrame:
    """Per measure, factor and level: the geometric marginal mean over the cells at that level
    (``stats.main_effects`` of the per-seed log values, exponentiated) with its interval.

    Columns: ``measure``, ``factor``, ``level``, ``n_cells``, ``n``, ``value``, ``low``, ``high``."""
    varied = [f for f in factors if f in seeds.columns and seeds[f].nunique() > 1]
    parts = []
    for m in MEASURES:
        col = COLUMN[m]
        if not varied or not np.isfinite(seeds[col].to_numpy(float)).any():
            continue
        eff = factor_means(seeds, col, varied, confidence)
        with np.errstate(all="ignore"):
            parts.append(pd.DataFrame({"measure": m, "factor": eff["factor"], "level": eff["level"].astype(str),
                                       "n_cells": eff["n_cells"], "n": eff["n"],
                                       "value": np.exp(eff["mean"].astype(float)),
                                       "low": np.exp(eff["ci_low"].astype(float)),
                                       "high": np.exp(eff["ci_high"].astype(float))}))
    cols = ["measure", "factor", "level", "n_cells", "n", "value", "low", "high"]
    return pd.concat(parts, ignore_index=True)[cols] if parts else pd.DataFrame(columns=cols)

# --- theory check and spectrum drift ----------------------------------------------------------------


def theory_check(df: pd.DataFrame, order: Order) -> pd.DataFrame:
    """Per variant, at the first and last probe step: ‖x_t‖² at the last t on white-noise input,
    on the probe batch, the theory, and the stationary theory (means over seeds, layers, heads).

    Columns: ``cell_id``, ``variant``, ``when`` (``init`` / ``end``), ``step``, ``probe_last``,
    ``noise_last``, ``theory_last``, ``noise_over_theory``, ``stationary``."""
    rows = []
    for cid, label in order:
        sub = df[df["cell_id"] == cid]
        if sub.empty:
            continue
        for when, step in zip(("init", "end"), edge_steps(sub), strict=True):
            at = sub[sub["step"] == step]

            def mean(kind: str, quantity: str, at: pd.DataFrame = at) -> float:
                v = at.loc[(at["kind"] == kind) & (at["quantity"] == quantity), "value"].to_numpy(float)
                return float(v.mean()) if v.size else np.nan

            noise, theory = mean("white_noise", "norm_sq_last"), mean("theory", "norm_sq_last")
            rows.append({"cell_id": cid, "variant": label, "when": when, "step": step,
                         "probe_last": mean("probe", "norm_sq_last"), "noise_last": noise, "theory_last": theory,
                         "noise_over_theory": noise / theory if theory and np.isfinite(theory) else np.nan,
                         "stationary": mean("theory", "norm_sq_stationary")})
    return pd.DataFrame(rows)


def _paired(sub: pd.DataFrame, quantity: str, first: int, last: int) -> pd.DataFrame:
    """``quantity`` per (seed, layer, t) at two steps: columns init, end."""
    q = sub[sub["quantity"] == quantity]
    keys = ["seed", "layer", "t"]
    a = q[q["step"] == first].set_index(keys)["value"]
    b = q[q["step"] == last].set_index(keys)["value"]
    return pd.DataFrame({"init": a, "end": b}).dropna()


def spectrum_drift(df: pd.DataFrame, order: Order) -> pd.DataFrame:
    """Per variant: median |λ| at the first and last probe step, median and largest |Δ|λ|| per mode,
    median |Δ phase|, and the median relative change of the input scale (ξ or γ).

    Columns: ``cell_id``, ``variant``, ``first``, ``last``, ``abs_init``, ``abs_end``,
    ``abs_change_median``, ``abs_change_max``, ``phase_change_median``, ``scale_change_median``."""
    spec = df[df["kind"] == "spectrum"]
    rows = []
    for cid, label in order:
        sub = spec[spec["cell_id"] == cid]
        if sub.empty:
            continue
        first, last = edge_steps(sub)
        mag, phase, scale = (_paired(sub, q, first, last) for q in ("abs", "phase", "input_scale"))
        d_mag = (mag["end"] - mag["init"]).abs()
        with np.errstate(all="ignore"):
            rel_scale = ((scale["end"] - scale["init"]).abs() / scale["init"].abs()).replace(np.inf, np.nan)
        rows.append({
            "cell_id": cid, "variant": label, "first": first, "last": last,
            "abs_init": float(mag["init"].median()) if len(mag) else np.nan,
            "abs_end": float(mag["end"].median()) if len(mag) else np.nan,
            "abs_change_median": float(d_mag.median()) if len(d_mag) else np.nan,
            "abs_change_max": float(d_mag.max()) if len(d_mag) else np.nan,
            "phase_change_median": float((phase["end"] - phase["init"]).abs().median()) if len(phase) else np.nan,
            "scale_change_median": float(rel_scale.median()) if rel_scale.notna().any() else np.nan,
        })
    return pd.DataFrame(rows)
