"""The analysis behind the ``norm_stability`` report: tidy curve frames in, numeric frames out.

Input is ``Results.curves`` (``ablate.probes.CURVE_SCHEMA`` plus ``cell_id``, ``cell_label``,
``seed`` and the factor columns) as pandas. A *variant* is a cell of the study. Nothing here
formats, draws, reads storage or imports torch; every function is deterministic. How the numbers
are shown — tables, sentences, figures — is ``ablate.report.norm_tables``.

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
    seeds      how far the run's log ‖x‖² lies from the median of its variant's other runs, as the
               mean absolute deviation over (layer, step), scaled to be the sd across seeds for normal
               log norms at any number of seeds (``stats.norm_seeds``: a Brown–Forsythe-type
               deviation; one odd run moves a median little, so it does not move the other runs')

Runs that diverged are never dropped in silence (``norm_seeds.flags``): a run with a non-finite or
zero ‖x‖² has no value of any measure and is counted and named; a run whose ‖x‖² grew late far more
than its variant's other runs is flagged, shown, left out of the primary analysis (``stability``,
``compare``, ``factor_anova``, ``main_effects``) and put back in by ``sensitivity``. ``per_seed``'s
``flag`` column says which runs and why ("" for the others).

A variant's value over training and at the end is the geometric mean over its seeds (``exp`` of the
mean log) with a t interval on the logs; over layers it is the mean over seeds on the square-root
scale, (mean √CV)², with a t interval on √CV, squared (``value_interval``: a CV of a few layers is
a spread of a few values, skewed even on the log scale, and the t interval of its mean log covered
0.92–0.93 at 3–8 seeds on the calibration benchmark; √CV is close to symmetric there and in the
committed studies); over seeds, ``sd_seeds`` is the mean of its runs' deviations with the interval
of that spread for normal runs (``seeds_interval``). A comparison's ratio is exp(mean log difference) with the t interval
of that difference; over seeds both sides use the same seeds (the shared ones, else the first k of
each) and the (layer, step) units all of them measured, the test permutes whole runs (or swaps each
shared seed's pair) and recomputes the spreads, and the ratio's interval inverts that test
(``norm_seeds.spread_test``, ``norm_seeds.ratio_interval``). Factor effects are ANOVAs of the per-seed
log values with seeds as replicates (``stats.anova``), Holm-corrected across every term and measure
of the report; a level's marginal mean is on its variants' scale (``mean_scale``). No spread beyond
round-off (``estimators.no_spread``) gives no interval, test or F, and a note that says so.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from ablate.stats import norm_seeds
from ablate.stats.comparisons import COMPARISON_COLUMNS, MIN_N_TEST, compare_to_reference
from ablate.stats.estimators import Estimate, no_spread, robust_level, t_interval
from ablate.stats.factorial import AnovaNotApplicable, anova, anova_applicable, anova_on_finished_levels
from ablate.stats.factorial import main_effects as factor_means
from ablate.stats.selection import STANDARD_COLUMNS, infer_factors

__all__ = [
    "ANOVA_COLUMNS",
    "COLUMN",
    "COMPARE_COLUMNS",
    "MEASURES",
    "NO_SEEDS_ANOVA",
    "OWN_MEASURES",
    "RAW",
    "VALUE",
    "compare",
    "edge_steps",
    "factor_anova",
    "layer_norms",
    "main_effects",
    "mean_scale",
    "per_seed",
    "prepare",
    "primary",
    "probe_batch_check",
    "sd_over_seeds",
    "seeds_interval",
    "sensitivity",
    "stability",
    "time_curves",
    "value_interval",
    "variants",
]

#: The measures, in the order every table and sentence gives them.
MEASURES = ("training", "depth", "seeds", "final")
#: The measures each run has on its own: over seeds is a run's deviation from its variant's other runs,
#: so its runs are no independent replicates for an ANOVA, a marginal mean or its interval.
OWN_MEASURES = tuple(m for m in MEASURES if m != "seeds")
#: The per-seed column each measure is analysed on (log scale).
COLUMN = {"training": "log_cv_training", "depth": "log_cv_depth", "seeds": "log_dev_seeds",
          "final": "log_final_norm"}
#: The column of ``stability`` holding each measure's value per variant (its interval: the same
#: name with ``_low`` and ``_high``): geometric means, (mean √CV)² over layers, the sd over seeds.
VALUE = {"training": "gm_training", "depth": "sqm_depth", "seeds": "sd_seeds", "final": "gm_final"}
#: The per-seed column a measure's means over seeds are taken on, where it is not ``COLUMN``'s log:
#: over layers √CV (``value_interval``), for a variant's value and a factor level's alike.
SQRT_DEPTH = "sqrt_cv_depth"

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
    (``value``; per head, so that head counts compare; NaN when a head's is NaN, inf when one
    overflowed), the number of heads (``heads``) and of heads whose value is non-finite or not
    positive (``bad``: a diverged or dead state, which ``per_seed`` flags)."""
    sub = df[(df["kind"] == kind) & (df["quantity"] == quantity)]
    v = sub["value"].to_numpy(float)
    with np.errstate(invalid="ignore"):
        sub = sub.assign(nan=np.isnan(v), bad=~np.isfinite(v) | (v <= 0))
    cols = ["cell_id", "cell_label", "seed", "layer", "step"]
    out = sub.groupby(cols, as_index=False, sort=False).agg(value=("value", "mean"), heads=("value", "size"),
                                                            nan=("nan", "any"), bad=("bad", "sum"))
    out.loc[out["nan"], "value"] = np.nan  # pandas' mean skips NaN: a head that is NaN would vanish
    return out.drop(columns="nan").astype({"bad": int})


def time_curves(df: pd.DataFrame, kind: str) -> pd.DataFrame:
    """One row per (cell, seed, layer, step, t): the head mean of the dense ``norm_sq`` curve."""
    sub = df[(df["kind"] == kind) & (df["quantity"] == "norm_sq") & (df["t"] >= 0)]
    cols = ["cell_id", "cell_label", "seed", "layer", "step", "t"]
    return sub.groupby(cols, as_index=False, sort=False)["value"].mean()


def probe_batch_check(metrics: Any) -> tuple[int, bool] | None:
    """From ``Results.metrics``: (runs that logged a probe-batch fingerprint, whether all logged the
    same one), or None when none did. Norms of different runs compare only on one batch. A run is a
    cell's seed, or a tuning trial: a cell's tuning trials share their seeds (each logs one row)."""
    m = _pandas(metrics) if metrics is not None and len(metrics) else None
    if m is None or "name" not in m.columns:
        return None
    fp = m[m["name"] == "probe/batch_fingerprint"]
    if not len(fp):
        return None
    tune = fp["phase"] == "tune" if "phase" in fp else np.zeros(len(fp), dtype=bool)
    runs = fp[~tune][["cell_id", "seed"]].drop_duplicates().shape[0] + int(tune.sum())
    return int(runs), bool(fp["value"].nunique() == 1)


def edge_steps(df: pd.DataFrame) -> tuple[int, int]:
    """The first and the last probe step of ``df`` (what "initialisation" and "end" mean here)."""
    steps = df["step"].to_numpy()
    return int(steps.min()), int(steps.max())


# --- the seed as the unit ---------------------------------------------------------------------------


def _log(x: Any) -> np.ndarray:
    a = np.asarray(x, dtype=float)
    with np.errstate(all="ignore"):
        return np.where(a > 0, np.log(np.where(a > 0, a, 1.0)), np.nan)


def _deviations(norms: pd.DataFrame, flag: pd.Series) -> pd.Series:
    """(cell_id, seed) → the run's deviation over seeds (``norm_seeds.loo_deviations``) among its
    variant's unflagged runs, on the (layer, step) units they all measured; a run flagged for late
    growth: its deviation from the median of all of them (how far it lies from the others). NaN
    for a variant with one unflagged run and for a run with non-finite or zero norms."""
    out = {}
    for cid, sub in norms.groupby("cell_id", sort=False):
        late = [s for s in pd.unique(sub["seed"]) if flag.get((cid, s), "").startswith("late")]
        seeds, x, _ = norm_seeds.profiles(sub)
        keep = ~np.isin(seeds, late)
        if keep.sum() < 2 or x.shape[1] == 0:
            continue
        dev = norm_seeds.loo_deviations(x[keep])
        if no_spread((x[keep] - np.median(x[keep], axis=0)).ravel(), max(1.0, float(np.max(np.abs(x[keep]))))):
            dev = np.zeros_like(dev)  # runs equal to round-off: no deviation, not one of 1e-16
        out.update({(cid, s): float(d) for s, d in zip(seeds[keep], dev, strict=True)})
        centre = np.median(x[keep], axis=0)
        for s, row in zip(seeds[~keep], x[~keep], strict=True):
            out[(cid, s)] = float(np.mean(np.abs(row - centre)) / norm_seeds.kappa(int(keep.sum()) + 1))
    return pd.Series(out, dtype=float, name="dev_seeds")


def _cv_over(norms: pd.DataFrame, within: list[str]) -> pd.Series:
    """``stats.cv`` of ``value`` within each group of ``within``: sd (ddof 1) over |mean|, NaN
    below two values."""
    g = norms.groupby(within, sort=False)["value"].agg(["std", "mean", "count"])
    with np.errstate(all="ignore"):
        return (g["std"] / g["mean"].abs()).where(g["count"] >= 2)


def per_seed(norms: pd.DataFrame, trials: Any = None, factors: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per run (cell, seed) with its value of every measure (module docstring) — the frame
    every test, interval and ANOVA of the norm report is computed from (its unflagged runs:
    ``primary``), and what a notebook fits its own model to (``Results.stability()``).

    ``norms`` is ``layer_norms`` (one row per cell, seed, layer, step). Columns: ``cell_id``,
    ``cell_label``, ``seed``, ``phase`` ("replicate"), ``status`` ("complete"), ``layers``,
    ``steps`` (probe steps of the run), ``bad_norms``, ``nonfinite`` (``bad_norms`` > 0, or
    training diverged), ``diverged`` (``trials`` says its training diverged: ``norm_seeds.diverged_runs``),
    ``late_growth``, ``flag`` (``norm_seeds.flags``: "" for a run analysed as usual, else why it is
    not), ``flagged`` (``flag`` non-empty: the column figures mark runs by),
    ``cv_training``, ``cv_depth`` (NaN with one layer), ``final_norm``, ``dev_seeds`` (NaN for a
    variant with one unflagged run), their logs ``log_cv_training``, ``log_cv_depth``,
    ``log_final_norm``, ``log_dev_seeds``, and the columns ``factors`` of ``trials`` (when given;
    default its dotted-path columns — a named factor has no dot: name it). A run with a non-finite
    or zero ‖x‖² anywhere has NaN measures: a final norm computed from the layers that stayed
    finite would look like a normal run's; so has one whose training diverged."""
    head = ["cell_id", "cell_label", "seed", "layers", "steps", "bad_norms", "nonfinite", "diverged", "late_growth", "flag",
            "flagged"]
    cols = [*head, "cv_training", "cv_depth", "final_norm", "dev_seeds"]
    if norms.empty:
        out = pd.DataFrame(columns=cols)
    else:
        run = ["cell_id", "seed"]
        flags = norm_seeds.flags(norms, norm_seeds.diverged_runs(_pandas(trials) if trials is not None else None))
        base = norms.groupby(run, sort=False).agg(cell_label=("cell_label", "first"), layers=("layer", "nunique"),
                                                  steps=("step", "nunique")).join(flags.set_index(run))
        base = base.assign(nonfinite=(base["bad_norms"] > 0) | base["diverged"], flagged=base["flag"] != "")
        ok_runs = base.index[~base["nonfinite"]]
        good = norms[pd.MultiIndex.from_frame(norms[run]).isin(ok_runs)]
        training = _cv_over(good, [*run, "layer"]).groupby(level=[0, 1], sort=False).mean()
        depth = _cv_over(good, [*run, "step"]).groupby(level=[0, 1], sort=False).mean()
        last = good[good["step"] == good.groupby(run, sort=False)["step"].transform("max")]
        # The whole state's ‖x‖² (the head mean times the heads): a per-head norm of the same state
        # shrinks as its heads get smaller, which would make the head count look like an effect.
        whole = last["value"] * (last["heads"] if "heads" in last.columns else 1)
        final = np.exp(last.assign(log=_log(whole)).groupby(run, sort=False)["log"].mean())
        out = base.assign(cv_training=training, cv_depth=depth.where(base["layers"] > 1), final_norm=final,
                          dev_seeds=_deviations(good, flags["flag"])).reset_index()[cols]
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


def primary(seeds: pd.DataFrame, include_flagged: bool = False) -> pd.DataFrame:
    """The runs the primary analysis uses: those ``per_seed`` did not flag (with
    ``include_flagged``, the late-growing ones too — the sensitivity analysis; a run with
    non-finite or zero norms has no values either way)."""
    if "flag" not in seeds.columns:
        return seeds
    keep = seeds["flag"].eq("") | (include_flagged & seeds["flag"].str.startswith("late"))
    return seeds[keep]


def _primary_norms(norms: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """The ``layer_norms`` rows of ``runs`` (a ``primary`` frame) only."""
    keys = pd.MultiIndex.from_frame(runs[["cell_id", "seed"]])
    return norms[pd.MultiIndex.from_frame(norms[["cell_id", "seed"]]).isin(keys)]


def sd_over_seeds(norms: pd.DataFrame, seeds: Sequence[Any] | None = None) -> tuple[float, int]:
    """(spread of log ‖x‖² over seeds, seeds used) of one cell's ``layer_norms``: the mean of its
    runs' ``norm_seeds.loo_deviations`` on the units every run measured (the sd across seeds for
    normal log norms, at any number of seeds); only ``seeds`` when given. NaN below two seeds."""
    used, x, _ = norm_seeds.profiles(norms, seeds) if len(norms) else (np.array([]), np.zeros((0, 0)), None)
    if len(used) < 2 or x.shape[1] == 0:
        return np.nan, len(used)
    return float(norm_seeds.spread(x)), len(used)


def seeds_interval(deviations: Sequence[float] | np.ndarray, confidence: float = 0.95) -> tuple[Estimate, str]:
    """A variant's spread over seeds (the mean of its runs' deviations, ``per_seed``'s
    ``dev_seeds``) with its interval (``norm_seeds.spread_interval``), and why it has none: at two
    seeds both runs' deviations are the same number (each is the other's distance), so a spread of
    them is one degree of freedom; without spread beyond round-off, nothing."""
    d = np.asarray(deviations, dtype=float)
    d = d[np.isfinite(d)]
    value = float(d.mean()) if d.size else np.nan
    if d.size < 2:
        return Estimate(value, np.nan, np.nan, int(d.size)), ("one seed" if d.size else "no seeds")
    if d.size == 2:
        return Estimate(value, np.nan, np.nan, 2), "2 seeds: one distance between them"
    if value <= 0:  # per_seed gives 0 to runs that differ by round-off only
        return Estimate(value, np.nan, np.nan, int(d.size)), "no spread beyond round-off"
    low, high = norm_seeds.spread_interval(value, int(d.size), confidence)
    return Estimate(value, low, high, int(d.size)), ""


def value_interval(values: Sequence[float] | np.ndarray, measure: str, confidence: float = 0.95) -> Estimate:
    """A variant's value of ``measure`` (``training``, ``depth`` or ``final``) from its runs' values
    (``per_seed``'s ``cv_training``, ``cv_depth``, ``final_norm``; not their logs), with its interval.

    The t intervals are at ``estimators.robust_level(confidence)`` (99 % for the 95 % printed), as
    every t interval of the reports: at 95 % they covered 0.90–0.93 at 5 and 8 seeds when the seed
    effects are log-normal rather than normal (``benchmarks/bench_norm_calibration.py``, tables in
    docs/calibration.md). Over training and at the end: the geometric mean, ``exp`` of the t interval
    of the mean log.
    Over layers: (mean √v)², the t interval of the mean √v squared, its lower end at 0 where the
    interval on √v reaches below it — the estimand is (E √CV)², the power mean of order ½. A run's
    CV over layers is a spread of a few values (of two layers, |x₁ − x₂| / (√2 x̄)): its log is
    skewed to the left by the runs whose layers happen to be close, and the t interval of the
    mean log covered 0.92–0.93 at 3, 5 and 8 seeds on ``benchmarks/bench_norm_calibration.py``;
    on √CV, nearly symmetric there (skew −0.25 against −0.80 on the log), it covers 0.94–0.95
    (the benchmark's ``--parts depth`` prints every candidate tried). Non-positive and non-finite
    values are left out; NaN bounds below two values and where they have no spread beyond
    round-off (``value_note`` says why)."""
    if measure not in ("training", "depth", "final"):
        raise ValueError(f"value_interval takes a per-run measure (training, depth or final), not {measure!r}")
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v) & (v > 0)]
    confidence = robust_level(confidence)
    if measure != "depth":
        est = t_interval(np.log(v), confidence)
        return Estimate(float(np.exp(est.value)), float(np.exp(est.ci_low)), float(np.exp(est.ci_high)), est.n)
    est = t_interval(np.sqrt(v), confidence)
    low = max(est.ci_low, 0.0) if np.isfinite(est.ci_low) else est.ci_low
    return Estimate(est.value**2, low**2, est.ci_high**2, est.n)


def value_note(values: Sequence[float] | np.ndarray) -> str:
    """Why ``value_interval`` of these runs' values has no interval ("" when it has one)."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v) & (v > 0)]
    if v.size < 2:
        return "one seed" if v.size else "no seeds"
    return "no spread beyond round-off" if no_spread(np.log(v), max(1.0, float(np.max(np.abs(np.log(v)))))) else ""


#: The per-run value ``value_interval`` takes for each measure (``per_seed``'s columns).
RAW = {"training": "cv_training", "depth": "cv_depth", "final": "final_norm"}


def _flag_text(runs: pd.DataFrame) -> str:
    """The flagged runs of one variant, for a table cell: "seed 3: late growth …; seed 4: …"."""
    bad = runs[runs["flag"].ne("")] if "flag" in runs.columns else runs.iloc[0:0]
    return "; ".join(f"seed {r.seed}: {r.flag}" for r in bad.itertuples())


def stability(seeds: pd.DataFrame, norms: pd.DataFrame, order: Order, confidence: float = 0.95,
              include_flagged: bool = False) -> pd.DataFrame:
    """Per variant: counts, the mean norm, the flagged runs, and per measure its value with its
    interval, on the ``primary`` runs.

    ``seeds`` is ``per_seed``. Columns: ``cell_id``, ``variant``, ``seeds`` (runs with probe data,
    flagged ones included), ``layers``, ``steps``, ``mean_norm`` (of the primary runs), ``flagged``
    (runs left out), ``flags`` (which and why, ``_flag_text``); for ``training`` and ``final``:
    ``gm_m`` (geometric mean over seeds), ``gm_m_low``, ``gm_m_high`` (t interval of the mean log,
    exponentiated; from two seeds); for ``depth``: ``sqm_depth`` ((mean √CV over seeds)²),
    ``sqm_depth_low``, ``sqm_depth_high`` (t interval on √CV, squared: ``value_interval``); ``n_m``
    (seeds with a value) for the three; for ``seeds``: ``sd_seeds`` (the mean deviation),
    ``sd_seeds_low``, ``sd_seeds_high`` (``seeds_interval``) and ``n_seeds``; per measure
    ``{value column}_note``, why there is no interval ("" when there is). ``VALUE`` names each
    measure's value column."""
    runs_all = seeds
    seeds = primary(seeds, include_flagged)
    norms = _primary_norms(norms, seeds) if len(seeds) else norms.iloc[0:0]
    rows = []
    for cid, label in order:
        sub = norms[norms["cell_id"] == cid]
        runs = seeds[seeds["cell_id"] == cid]
        every = runs_all[runs_all["cell_id"] == cid]
        v = sub["value"].to_numpy(float)
        row: dict[str, Any] = {
            "cell_id": cid, "variant": label, "seeds": int(every["seed"].nunique()),
            "layers": sub["layer"].nunique(), "steps": sub["step"].nunique(),
            "mean_norm": float(v[np.isfinite(v)].mean()) if np.isfinite(v).any() else np.nan,
            "flagged": int(len(every) - len(runs)), "flags": _flag_text(every),
        }
        for m in ("training", "depth", "final"):
            values = runs[RAW[m]].to_numpy(float)
            est = value_interval(values, m, confidence)
            col = VALUE[m]
            row.update({col: est.value, f"{col}_low": est.ci_low, f"{col}_high": est.ci_high, f"n_{m}": est.n,
                        f"{col}_note": value_note(values)})
        est, note = seeds_interval(runs["dev_seeds"].to_numpy(float), confidence)
        row.update({"sd_seeds": est.value, "sd_seeds_low": est.ci_low, "sd_seeds_high": est.ci_high,
                    "n_seeds": est.n, "sd_seeds_note": note})
        rows.append(row)
    return pd.DataFrame(rows)


#: Columns of ``compare``: the measure, ``stats.compare_to_reference``'s, the ratio on the
#: measure's own scale with its interval, and ``note``: why a row has no test or interval.
COMPARE_COLUMNS = ["measure", *[c for c in COMPARISON_COLUMNS if c != "ci_note"], "ratio", "ratio_low", "ratio_high",
                   "note"]


def _untested_flat(comp: pd.DataFrame) -> pd.DataFrame:
    """Rows whose per-seed values (paired: their differences) have no spread beyond round-off:
    no p and no interval, and a note (a ratio of exactly 1.1 on every seed is not evidence of a
    test, and a sign-flip p of 0.125 on differences of 2e-16 is about the arithmetic)."""
    comp = comp.copy()
    comp["note"] = comp["ci_note"].fillna("") if "ci_note" in comp.columns else ""
    for i, r in comp.iterrows():
        if r["paired"] and r["diffs"]:
            values = np.asarray(r["diffs"], dtype=float)
            scale = max(1.0, *np.abs(r["values_cell"] or [0.0]), *np.abs(r["values_ref"] or [0.0]))
            flat = no_spread(values, scale)
        else:
            cell, ref = np.asarray(r["values_cell"] or [], float), np.asarray(r["values_ref"] or [], float)
            scale = max(1.0, *np.abs(cell), *np.abs(ref)) if cell.size + ref.size else 1.0
            flat = cell.size + ref.size > 0 and no_spread(cell, scale) and no_spread(ref, scale)
        if flat and (cell_n := int(r["n"])) >= 2:
            comp.loc[i, ["p", "diff_ci_low", "diff_ci_high", "t_p"]] = np.nan
            comp.at[i, "testable"] = False
            comp.at[i, "note"] = (f"no spread beyond round-off: every seed's difference the same ({cell_n} seeds)"
                                  if r["paired"] else f"no spread beyond round-off within either variant ({cell_n} seeds)")
    return comp


def compare(seeds: pd.DataFrame, norms: pd.DataFrame, reference: str, order: Order, alpha: float = 0.05,
            confidence: float = 0.95, min_ratio: float = 1.25, power: float = 0.8,
            include_flagged: bool = False, ratio_intervals: bool = True) -> pd.DataFrame:
    """Every variant against the declared ``reference`` cell, per measure (module docstring), on the
    ``primary`` runs: the rows of ``stats.compare_to_reference`` on the per-seed log values (one
    family per measure, Holm within it; nothing tested below three seeds nor without spread beyond
    round-off), with ``measure`` and ``ratio`` (exp of the mean log difference; over seeds, the
    ratio of the spreads on common seeds), ``ratio_low``, ``ratio_high``, ``note``. The power
    line asks for a ratio of ``min_ratio``. Columns ``COMPARE_COLUMNS``; a measure no variant has
    a value of is left out. ``ratio_intervals`` False skips the over-seeds ratio's interval (it
    inverts the test, some 20 tests a bound: the calibration benchmark times it apart)."""
    seeds = primary(seeds, include_flagged)
    norms = _primary_norms(norms, seeds) if len(seeds) else norms.iloc[0:0]
    parts = []
    for m in ("training", "depth", "final"):
        if not np.isfinite(seeds[COLUMN[m]].to_numpy(float)).any():
            continue
        comp = _untested_flat(compare_to_reference(seeds, COLUMN[m], reference, alpha, confidence=confidence,
                                                   min_effect=float(np.log(min_ratio)), power=power))
        if comp["note"].str.startswith("no spread beyond").any():  # tests taken away: Holm and power anew
            comp = norm_seeds.power_lines(norm_seeds.holm(comp, alpha), alpha, min_ratio, power)
        with np.errstate(all="ignore"):
            comp = comp.assign(ratio=np.exp(comp["mean_diff"].astype(float)),
                               ratio_low=np.exp(comp["diff_ci_low"].astype(float)),
                               ratio_high=np.exp(comp["diff_ci_high"].astype(float)))
        parts.append(comp.assign(measure=m))
    if seeds["seed"].nunique() >= 2 and np.isfinite(seeds["log_dev_seeds"].to_numpy(float)).any():
        parts.append(norm_seeds.seeds_comparisons(norms, reference, order, alpha, confidence, min_ratio, power,
                                        ratio_intervals).assign(measure="seeds"))
    if not parts:
        return pd.DataFrame(columns=COMPARE_COLUMNS)
    out = pd.concat(parts, ignore_index=True)
    names = dict(order)  # the variants' labels as the caller names them (a report's short ones)
    out["cell_label"] = [names.get(c, lbl) for c, lbl in zip(out["cell_id"], out["cell_label"], strict=True)]
    out["reference_label"] = names.get(reference, out["reference_label"].iloc[0] if len(out) else reference)
    out["measure"] = pd.Categorical(out["measure"], categories=list(MEASURES))
    out = out.sort_values("measure", kind="stable").reset_index(drop=True)
    out["measure"] = out["measure"].astype(str)
    out["note"] = out["note"].fillna("")
    return out[COMPARE_COLUMNS]


def sensitivity(seeds: pd.DataFrame, norms: pd.DataFrame, reference: str, order: Order, alpha: float = 0.05,
                confidence: float = 0.95, min_ratio: float = 1.25, power: float = 0.8) -> pd.DataFrame | None:
    """What the late-growing runs change: every comparison of ``compare`` without them and with
    them put back (``include_flagged``), each with Holm within its measure; None when no run was
    flagged for late growth. Columns: ``measure``, ``cell_id``, ``cell_label``, ``n_cell``,
    ``n_ref``, ``p_adj``, ``significant`` (without), ``n_cell_back``, ``n_ref_back``, ``p_adj_back``,
    ``significant_back`` (with). A verdict that differs rests on those runs."""
    if "flag" not in seeds.columns or not seeds["flag"].str.startswith("late").any():
        return None
    cols = ["measure", "cell_id", "cell_label", "n_cell", "n_ref", "p_adj", "significant"]
    without = compare(seeds, norms, reference, order, alpha, confidence, min_ratio, power, ratio_intervals=False)
    back = compare(seeds, norms, reference, order, alpha, confidence, min_ratio, power, include_flagged=True,
                   ratio_intervals=False)
    return without[cols].merge(back[cols].drop(columns="cell_label"), on=["measure", "cell_id"], how="outer",
                               suffixes=("", "_back"))


# --- factor effects ------------------------------------------------------------------------------------

ANOVA_COLUMNS = ["measure", "term", "df", "df_resid", "F", "p", "p_adj", "eta_sq_partial", "mark", "significant"]
#: Why the factor analysis leaves out the spread over seeds (``factor_anova``, ``main_effects``).
NO_SEEDS_ANOVA = ("no ANOVA: a run's deviation over seeds is measured from its variant's other runs, so the runs "
                  "are not independent replicates; the comparisons with the reference compare the variants' spreads by "
                  "permuting whole runs")


def factor_anova(seeds: pd.DataFrame, factors: Sequence[str], alpha: float = 0.05
                 ) -> tuple[pd.DataFrame, dict[str, str]]:
    """Main effects and two-way interactions of ``factors`` on every measure's per-seed log value:
    ``stats.anova`` (type II, seeds as replicates) per measure, the p-values Holm-corrected across
    every term of every measure (the report's factor screen is one family). A measure some levels
    cannot have (over layers, at one layer) is analysed on the levels that have it. Returns the
    terms (``ANOVA_COLUMNS``, residual rows left out) and, per measure analysed partly or not at
    all, a sentence saying so. On the ``primary`` runs; a measure whose runs vary within their cells
    by round-off only has no ANOVA (its F would be a ratio of round-offs). Over seeds has none
    (``NO_SEEDS_ANOVA``): its per-run deviations share their variant's median, so they are not
    independent replicates, and with log-normal seed effects the F test of them rejected a null
    factor in 0.13 of studies (``benchmarks/bench_norm_calibration.py``)."""
    seeds = primary(seeds)
    varied = [f for f in factors if f in seeds.columns and seeds[f].nunique() > 1]
    rows, why = [], {}
    for m in MEASURES:
        col = COLUMN[m]
        if not varied:
            why[m] = "no ANOVA: no factor was varied"
            continue
        if m == "seeds":
            why[m] = NO_SEEDS_ANOVA
            continue
        have = seeds[np.isfinite(seeds[col].to_numpy(float))].groupby("cell_id").size()
        if len(have) and int(have.min()) < MIN_N_TEST:  # said first: at two seeds nothing else matters
            why[m] = (f"no ANOVA: too few seeds to test (a cell has {int(have.min())}; at least {MIN_N_TEST} "
                      "are needed)")
            continue
        data, terms = seeds, varied
        ok, reason = anova_applicable(seeds, col, varied)
        if not ok:  # a measure some levels cannot have (over layers at one layer): the levels that have it
            subset, dropped = anova_on_finished_levels(seeds, col, varied)
            rest = [f for f in varied if subset[f].nunique() > 1]
            if dropped and rest and anova_applicable(subset, col, rest)[0]:
                data, terms, ok = subset, rest, True
                gone = "; ".join(f"{f} = {', '.join(map(str, lv))}" for f, lv in dropped.items())
                why[m] = f"ANOVA on the cells that have the measure only (left out: {gone})"
        counts = data[np.isfinite(data[col].to_numpy(float))].groupby("cell_id").size()
        if ok and (counts.empty or int(counts.min()) < MIN_N_TEST):
            ok, reason = False, (f"too few seeds to test (a cell has {int(counts.min()) if len(counts) else 0}; "
                                 f"at least {MIN_N_TEST} are needed)")
        if ok:
            v = data[col].to_numpy(float)
            fin = np.isfinite(v)
            resid = v[fin] - data.loc[fin, col].groupby(data.loc[fin, "cell_id"]).transform("mean").to_numpy(float)
            if no_spread(resid, max(1.0, float(np.max(np.abs(v[fin]))))):
                ok, reason = False, "the runs of every cell are equal to round-off (no spread to test against)"
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
    out = norm_seeds.holm(out, alpha) if len(out) else out.assign(p_adj=np.nan, mark="", significant=False)
    return out[ANOVA_COLUMNS], why


def _square(x: Any) -> np.ndarray:
    """Back from √CV: the square, a lower end below 0 at 0 (as ``value_interval``'s)."""
    a = np.asarray(x, dtype=float)
    return np.where(np.isnan(a), np.nan, np.maximum(a, 0.0) ** 2)


def mean_scale(seeds: pd.DataFrame, measure: str) -> tuple[pd.DataFrame, str, Callable[[Any], np.ndarray]]:
    """Where ``measure``'s means over seeds are taken, the one estimator of each measure for a
    variant's value (``value_interval``) and a factor level's (``main_effects``, the interaction
    figures): ``seeds`` (``per_seed``) with the column to average, its name, and the map back.
    Logs and ``exp`` (geometric means), but over layers √CV and its square, (mean √CV)² — the log
    interval under-covered there (module docstring). The ANOVA and the comparisons stay on the logs
    (``COLUMN``): a comparison's ratio over layers is one of geometric means. A value ``value_interval``
    leaves out (not positive) is NaN here too."""
    if measure != "depth":
        return seeds, COLUMN[measure], np.exp
    cv = seeds["cv_depth"].to_numpy(float)
    with np.errstate(invalid="ignore"):
        root = np.where(cv > 0, np.sqrt(np.where(cv > 0, cv, 1.0)), np.nan)
    return seeds.assign(**{SQRT_DEPTH: root}), SQRT_DEPTH, _square


def main_effects(seeds: pd.DataFrame, factors: Sequence[str], confidence: float = 0.95) -> pd.DataFrame:
    """Per measure, factor and level: the marginal mean over the cells at that level on the
    measure's scale of ``mean_scale`` (``stats.main_effects`` of the ``primary`` runs' values there,
    mapped back: geometric means, over layers (mean √CV)², as the norm report's stability table) with its interval;
    none, and ``note`` saying why, where it would have no width beyond round-off. Not over seeds
    (``NO_SEEDS_ANOVA``: the runs' deviations are not independent replicates).

    Columns: ``measure``, ``factor``, ``level``, ``n_cells``, ``n``, ``value``, ``low``, ``high``, ``note``."""
    seeds = primary(seeds)
    varied = [f for f in factors if f in seeds.columns and seeds[f].nunique() > 1]
    parts = []
    for m in OWN_MEASURES:
        data, col, back = mean_scale(seeds, m)
        if not varied or not np.isfinite(data[col].to_numpy(float)).any():
            continue
        eff = factor_means(data, col, varied, confidence)
        mean, low, high = (eff[c].to_numpy(float) for c in ("mean", "ci_low", "ci_high"))
        with np.errstate(all="ignore"):  # flat on the scale the interval was computed on
            flat = np.isfinite(high - low) & (high - low <= 1e-9 * np.maximum(1.0, np.abs(mean)))
            parts.append(pd.DataFrame({"measure": m, "factor": eff["factor"], "level": eff["level"].astype(str),
                                       "n_cells": eff["n_cells"], "n": eff["n"], "value": back(mean),
                                       "low": np.where(flat, np.nan, back(low)),
                                       "high": np.where(flat, np.nan, back(high)),
                                       "note": np.where(flat, "no spread beyond round-off", "")}))
    cols = ["measure", "factor", "level", "n_cells", "n", "value", "low", "high", "note"]
    if not parts:
        return pd.DataFrame(columns=cols)
    return pd.concat(parts, ignore_index=True)[cols]
