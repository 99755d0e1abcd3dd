"""The norm report's spread over seeds, its test and interval, and the runs it must not hide
(``ablate.stats.norms`` uses it; ``seeds_comparisons`` is that report's over-seeds family).

**Per run.** A run's deviation over seeds is the mean over the (layer, probe step) units every run
of its variant measured of |log ‖x‖²_s − the median of the *other* runs' log ‖x‖²| (a leave-one-out
median: Brown & Forsythe's centre, with the run itself left out so that no run sits at exactly zero),
divided by κ(n), the value of that mean absolute deviation for standard normal log norms at n runs
(``kappa``): it is then the sd of log ‖x‖² across seeds for normal log norms at every n, and about the
CV across seeds when small. One odd run moves a median little, so it moves the other runs' values
little — a shared mean (the earlier Levene-type deviation) moved every run of the variant.

**A variant's value** is the mean of its runs' deviations (``spread``).

**The test** (``spread_test``) compares two variants on the same number k of seeds: each variant's
log profiles are first aligned on their own median over seeds (unit by unit: a difference in level
is not a difference in spread), then whole runs are permuted between the two — all C(2k, k) splits,
or within each shared seed's pair (2ᵏ flips) when the seeds are shared — and the statistic
|log(spread₁ / spread₂)| is recomputed from the permuted profiles, medians included. Unaligned runs of
identical variants are exchangeable (an exact test, but one that calls a difference in level a
difference in spread); the aligned ones nearly are — each variant's median is shared by its runs —
so the level is what the alignment buys, and the price is measured, not assumed: on 1,020 null tests
per setting (``bench_norm_calibration.py --parts seeds``) it rejects 0.035–0.053 at 8 paired seeds
and 0.007–0.031 at 5 unpaired (Gaussian, log-normal σ 0.5 and 1, late-run and level nulls). The
per-run deviations themselves are not exchangeable (they share their variant's centre), which is why
they are never relabelled: a sign-flip of each seed's difference of log deviations rejected
0.11–0.12 at 8 paired seeds.
**Its interval** (``ratio_interval``) inverts that test: the ratios ρ at which the cell's aligned
profiles divided by ρ are not rejected at 1 − confidence (each run's deviation scales by exactly 1/ρ).

**Flags** (``flags``): a run with a non-finite or non-positive ‖x‖² at any (layer, step) diverged:
its measures are not numbers, it is counted and named, never dropped in silence. A run whose log ‖x‖²
grows over the second half of its probe steps by more than ``LATE_GROWTH`` times what the other runs
of its variant grow (their median, per layer) diverged late without failing: it is flagged, shown,
left out of the primary analysis and put back in for the sensitivity analysis.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd
from scipy import integrate
from scipy.special import gammaln, ndtr

from ablate.stats.comparisons import (
    COMPARISON_COLUMNS,
    MIN_N_TEST,
    PERMUTATIONS,
    compare_to_reference,
    power_line,
)
from ablate.stats.estimators import ROUNDOFF, mark_for, no_spread
from ablate.stats.multiplicity import adjusted
from ablate.stats.words import p_text

__all__ = [
    "LATE_GROWTH",
    "flags",
    "holm",
    "kappa",
    "loo_deviations",
    "power_lines",
    "profiles",
    "ratio_interval",
    "seeds_comparisons",
    "spread",
    "spread_interval",
    "spread_test",
]

#: A run whose ‖x‖² grows over the second half of its probe steps by more than this factor times
#: the growth of the other runs of its variant (their median, per layer) is flagged as diverging
#: late. Heavy-tailed seed drifts in the calibration benchmark (log-normal σ = 1) stay under 10×;
#: a run that blows up grows 10³–10⁴× or more.
LATE_GROWTH = 100.0

#: Resamples of a Monte Carlo interval (test inversion evaluates the test some 40 times).
INTERVAL_PERMUTATIONS = 999


@lru_cache(maxsize=256)
def kappa(n: int) -> float:
    """E|Z − median(Z₁ … Z_{n−1})| for independent standard normals: what a run's deviation from
    the median of the other n − 1 runs averages to when log ‖x‖² is normal with sd 1 (2/√π at
    n = 2). Exact by quadrature over the median's distribution."""
    if n < 2:
        raise ValueError(f"kappa needs two or more runs, not {n}")
    m = n - 1
    if m > 200:  # the median of m normals is normal with variance π/(2m) to O(1/m²)
        return math.sqrt(2 / math.pi) * math.sqrt(1 + math.pi / (2 * m))
    if m % 2:  # the middle order statistic of m
        j = (m + 1) // 2
        const = math.exp(gammaln(m + 1) - gammaln(j) - gammaln(m - j + 1))

        def f(t: float) -> float:
            c = float(ndtr(t))
            return float(_mean_abs(np.asarray(t))) * const * c ** (j - 1) * (1 - c) ** (m - j) * float(_pdf(np.asarray(t)))

        return float(integrate.quad(f, -12, 12, limit=200)[0])
    # The mean of order statistics j and j + 1 of m: their joint density in (u, w) = (the j-th, the
    # gap to the next), a rectangle on which Simpson's rule is accurate to ~1e-9.
    j = m // 2
    const = math.exp(gammaln(m + 1) - gammaln(j) - gammaln(m - j))
    u = np.linspace(-9, 9, 1441)[:, None]
    w = np.linspace(0, min(12.0, 80.0 / m), 961)[None, :]  # the gap is about 1/(m φ(0)) in size
    v = u + w
    dens = const * ndtr(u) ** (j - 1) * _pdf(u) * _pdf(v) * ndtr(-v) ** (m - j - 1)
    inner = integrate.simpson(_mean_abs(u + w / 2) * dens, x=w.ravel(), axis=1)
    return float(integrate.simpson(inner, x=u.ravel()))


def _pdf(t: np.ndarray) -> np.ndarray:
    return np.exp(-0.5 * t**2) / math.sqrt(2 * math.pi)


def _mean_abs(t: np.ndarray) -> np.ndarray:
    """E|Z − t| for Z standard normal."""
    return 2 * _pdf(t) + t * (2 * ndtr(t) - 1)


def _loo_median(x: np.ndarray) -> np.ndarray:
    """The median over axis −2 (runs) of every run's others, for every run: (…, n, U) → (…, n, U).
    From the sorted middle of all n alone: which of its values are the others' middle depends only
    on whether the run lies below, at or above the middle (ties give equal candidates)."""
    n = x.shape[-2]
    j = (n - 1) // 2
    kth = sorted({max(j - 1, 0), j, min(j + 1, n - 1)})
    s = np.partition(x, kth, axis=-2)

    def at(i: int) -> np.ndarray:
        return s[..., [i], :]

    if n % 2 == 0:  # the others are odd in number: one middle, the lower or upper middle of all n
        return np.where(x <= at(j), at(j + 1), at(j))
    if n == 1:
        return np.full_like(x, np.nan)
    mid = at(j)
    return np.where(x < mid, (mid + at(j + 1)) / 2, np.where(x > mid, (at(j - 1) + mid) / 2, (at(j - 1) + at(j + 1)) / 2))


def loo_deviations(x: np.ndarray) -> np.ndarray:
    """Each run's deviation over seeds (module docstring) from a (…, runs, units) array of log
    ‖x‖² with no missing value: (…, runs). NaN with fewer than two runs."""
    n = x.shape[-2]
    if n < 2:
        return np.full(x.shape[:-1], np.nan)
    return np.mean(np.abs(x - _loo_median(x)), axis=-1) / kappa(n)


def spread(x: np.ndarray) -> np.ndarray:
    """A variant's spread over seeds: the mean of its runs' ``loo_deviations``, (…, runs, units) → (…)."""
    return loo_deviations(x).mean(axis=-1)


#: Draws of the Monte Carlo behind ``spread_interval``'s quantiles (seeded: the same every call).
SPREAD_DRAWS = 200_000


@lru_cache(maxsize=64)
def _spread_quantiles(n: int, confidence: float) -> tuple[float, float]:
    """The (1 − c)/2 and (1 + c)/2 quantiles of ``spread`` of n standard normal runs on one unit."""
    z = np.random.default_rng(0).standard_normal((SPREAD_DRAWS, n, 1))
    q = (1 - confidence) / 2
    lo, hi = np.quantile(spread(z), [q, 1 - q])
    return float(lo), float(hi)


def spread_interval(value: float, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """The interval of a variant's spread ``value`` over ``n`` runs: [value / q_high, value / q_low]
    with q the quantiles of the spread of n normal runs of sd 1 on a single (layer, step) unit. A
    variant's units are correlated (they share each run's offset and drift); taking them as one
    makes the interval exact when they move together and conservative when they do not. NaN bounds
    below three runs."""
    if n < 3 or not np.isfinite(value):
        return np.nan, np.nan
    lo, hi = _spread_quantiles(int(n), float(confidence))
    return float(value / hi), float(value / lo)


def profiles(norms: pd.DataFrame, seeds: Any = None) -> tuple[np.ndarray, np.ndarray, pd.MultiIndex]:
    """(seeds, runs × units matrix of log ‖x‖², units) of one variant's ``layer_norms``: the units
    (layer, step) every run measured with a positive finite value; only ``seeds`` when given."""
    if seeds is not None:
        norms = norms[norms["seed"].isin(list(seeds))]
    v = norms["value"].to_numpy(float)
    with np.errstate(all="ignore"):
        logs = norms.assign(log=np.where(np.isfinite(v) & (v > 0), np.log(np.where(v > 0, v, 1.0)), np.nan))
    wide = logs.pivot_table(index="seed", columns=["layer", "step"], values="log", aggfunc="mean", dropna=False)
    wide = wide.loc[:, wide.notna().all(axis=0)]
    return wide.index.to_numpy(), wide.to_numpy(float), pd.MultiIndex.from_tuples(list(wide.columns),
                                                                                 names=["layer", "step"])


def _align(x: np.ndarray) -> np.ndarray:
    """A variant's log profiles minus their median over runs, unit by unit."""
    return x - np.median(x, axis=0, keepdims=True)


def _arrangements(k: int, paired: bool, n_resamples: int, seed: int | None) -> tuple[np.ndarray, bool, float]:
    """(which run goes to the cell's side in each arrangement, exact, the test's smallest p). Paired:
    a (B, k) mask of swapped pairs; unpaired: (B, k) indices into the 2k pooled runs. The first
    arrangement is the observed one."""
    count = 2.0**k if paired else float(math.comb(2 * k, k))
    exact = count <= n_resamples
    rng = np.random.default_rng(seed)
    if paired:
        if exact:
            picks = np.array(list(itertools.product((False, True), repeat=k)), dtype=bool)
        else:
            picks = np.vstack([np.zeros((1, k), dtype=bool), rng.random((n_resamples, k)) < 0.5])
    elif exact:
        picks = np.array(list(itertools.combinations(range(2 * k), k)))
    else:
        picks = np.vstack([np.arange(k), np.sort(np.argsort(rng.random((n_resamples, 2 * k)), axis=1)[:, :k], axis=1)])
    return picks, exact, (2.0 / count if exact else 2.0 / (n_resamples + 1))


def _statistics(cell: np.ndarray, ref: np.ndarray, picks: np.ndarray, paired: bool, chunk: int = 512) -> np.ndarray:
    """log(spread of the cell's side / spread of the reference's side) in every arrangement."""
    k = cell.shape[0]
    out = []
    pool = np.vstack([cell, ref])
    for start in range(0, len(picks), chunk):
        p = picks[start:start + chunk]
        if paired:
            swap = p[:, :, None]
            a, b = np.where(swap, ref[None], cell[None]), np.where(swap, cell[None], ref[None])
        else:
            mask = np.zeros((len(p), 2 * k), dtype=bool)
            mask[np.arange(len(p))[:, None], p] = True
            rest = np.argsort(mask, axis=1, kind="stable")[:, :k]  # the unpicked runs, in order
            a, b = pool[p], pool[rest]
        with np.errstate(all="ignore"):
            out.append(np.log(spread(a)) - np.log(spread(b)))
    return np.concatenate(out)


def _p(stat: np.ndarray) -> float:
    observed = abs(stat[0])
    tol = ROUNDOFF * max(1.0, observed)
    return float(np.count_nonzero(np.abs(stat) >= observed - tol) / len(stat))


def spread_test(cell: np.ndarray, ref: np.ndarray, paired: bool, n_resamples: int = PERMUTATIONS,
                seed: int | None = 0) -> tuple[float, bool, float]:
    """(p, exact, p_min) of the two-sided test that two variants spread as much over seeds (module
    docstring), from their (k × units) log profiles on the same units — row i of both the same seed
    when ``paired``. NaN p when a side has no spread."""
    a, b = _align(cell), _align(ref)
    picks, exact, p_min = _arrangements(cell.shape[0], paired, n_resamples, seed)
    stat = _statistics(a, b, picks, paired)
    if not np.isfinite(stat[0]):
        return np.nan, exact, p_min
    return _p(stat), exact, p_min


def ratio_interval(cell: np.ndarray, ref: np.ndarray, paired: bool, confidence: float = 0.95,
                   n_resamples: int = PERMUTATIONS, seed: int | None = 0) -> tuple[float, float, str]:
    """(low, high, why not) of the ratio spread(cell) / spread(ref): every ρ at which the test on
    the cell's aligned profiles divided by ρ has p > 1 − confidence (found by bisection on log ρ to
    0.2 %). NaN bounds and a reason where the test cannot reach that level at these seeds."""
    a, b = _align(cell), _align(ref)
    alpha = 1 - confidence
    resamples = n_resamples if _arrangements(cell.shape[0], paired, n_resamples, seed)[1] else INTERVAL_PERMUTATIONS
    picks, exact, p_min = _arrangements(cell.shape[0], paired, resamples, seed)
    if p_min > alpha:
        what = f"{cell.shape[0]} {'paired ' if paired else ''}seeds"
        return np.nan, np.nan, (f"{what}: the test's smallest p is {p_text(p_min, bound=True, against=(alpha,))}, "
                                f"above {alpha:.2g}")
    with np.errstate(all="ignore"):
        centre = float(np.log(spread(a) / spread(b)))
    if not np.isfinite(centre):
        return np.nan, np.nan, "a side has no spread"

    def p_at(log_rho: float) -> float:
        return _p(_statistics(a / math.exp(log_rho), b, picks, paired))

    bounds = []
    for direction in (-1.0, 1.0):
        inside, step = centre, 0.5
        outside = centre + direction * step
        while p_at(outside) > alpha:
            inside, step = outside, step * 2
            outside = centre + direction * step
            if step > 64:
                return np.nan, np.nan, "the test rejects no ratio"
        while abs(outside - inside) > 2e-3:
            mid = (inside + outside) / 2
            inside, outside = (mid, outside) if p_at(mid) > alpha else (inside, mid)
        bounds.append(math.exp(inside))
    return bounds[0], bounds[1], ""


def diverged_runs(trials: pd.DataFrame | None) -> dict[tuple[Any, Any], float]:
    """(cell_id, seed) → the step at which training stopped, of the runs ``trials`` records as
    ``diverged``: a loss that turned non-finite between probes leaves every probe finite, and the
    run's last probe (at step 0 if it diverged before the first) would pass for its end."""
    if trials is None or "status" not in trials.columns:
        return {}
    div = trials[trials["status"] == "diverged"]
    steps = div["steps"] if "steps" in div.columns else pd.Series(np.nan, index=div.index)
    return {(c, s): float(n) for c, s, n in zip(div["cell_id"], div["seed"], steps, strict=True)}


def flags(norms: pd.DataFrame, diverged: dict[tuple[Any, Any], float] | None = None) -> pd.DataFrame:
    """Per run (cell, seed) of ``layer_norms``: ``bad_norms`` (units with a non-finite or
    non-positive ‖x‖² in any head), ``late_growth`` (the run's growth of ‖x‖² over the second half
    of its probe steps over the median growth of its variant's other runs, largest over layers; NaN
    without another run or two steps), ``diverged`` (training diverged: ``diverged_runs``; like a
    non-finite run, it has no value of any measure) and ``flag`` ("" or why the run is flagged)."""
    diverged = diverged or {}
    run = ["cell_id", "seed"]
    v = norms["value"].to_numpy(float)
    bad_heads = norms["bad"].to_numpy(float) if "bad" in norms.columns else np.zeros(len(norms))
    with np.errstate(invalid="ignore"):
        bad = pd.Series(~np.isfinite(v) | (v <= 0) | (bad_heads > 0), index=norms.index)
    out = bad.groupby([norms["cell_id"], norms["seed"]], sort=False).sum().rename("bad_norms").to_frame()
    ok = norms[~bad]
    # Per run and layer: log ‖x‖² at the last probe step minus at the middle one (of the run's steps).
    at = ok.groupby([*run, "layer", "step"], sort=True)["value"].mean()
    steps = at.reset_index().groupby([*run, "layer"], sort=False)["step"]
    ends = steps.agg(last="max", mid=lambda x: np.sort(x.to_numpy())[(len(x) - 1) // 2], count="size")
    ends = ends[ends["count"] >= 2]
    g = pd.Series(np.log(at.reindex(pd.MultiIndex.from_arrays([*(ends.index.get_level_values(i) for i in range(3)),
                                                                ends["last"]])).to_numpy(float))
                  - np.log(at.reindex(pd.MultiIndex.from_arrays([*(ends.index.get_level_values(i) for i in range(3)),
                                                                  ends["mid"]])).to_numpy(float)), index=ends.index)
    growth: dict[tuple[Any, Any], float] = {}
    for _, sub in g.groupby(level=["cell_id", "layer"], sort=False):
        vals = sub.to_numpy(float)
        for i, key in enumerate(sub.index):
            if len(vals) > 1:
                others = float(np.median(np.delete(vals, i)))
                growth[key[:2]] = max(growth.get(key[:2], -np.inf), vals[i] - others)
    out["late_growth"] = [growth.get(key, np.nan) for key in out.index]
    limit = math.log(LATE_GROWTH)
    out["diverged"] = [key in diverged for key in out.index]
    out["flag"] = [
        (f"training diverged at step {diverged[key]:,.0f}" if np.isfinite(diverged[key]) else "training diverged")
        + " (its last probe is not its end)" if key in diverged else
        f"non-finite or zero ‖x‖² at {int(b)} (layer, step)" if b else
        f"late growth: ‖x‖² grew {math.exp(lg):.2g}× more than its variant's other runs"
        if np.isfinite(lg) and lg > limit else ""
        for key, b, lg in zip(out.index, out["bad_norms"], out["late_growth"], strict=True)]
    out["bad_norms"] = out["bad_norms"].astype(int)
    return out.reset_index()


# --- the over-seeds family of the norm report's comparisons ---------------------------------------------

Order = Sequence[tuple[str, str]]  # (cell_id, cell_label) of the variants, in the plan's order


def _common_seeds(a: pd.Series, b: pd.Series) -> tuple[list[Any], list[Any]]:
    """The seeds both sides of an over-seeds comparison use, as many on each side: the shared ones
    when two or more are shared, else the first k of each (k the smaller count)."""
    sa, sb = sorted(pd.unique(a)), sorted(pd.unique(b))
    shared = sorted(set(sa) & set(sb))
    if len(shared) >= 2:
        return shared, shared
    k = min(len(sa), len(sb))
    return sa[:k], sb[:k]


def seeds_comparisons(norms: pd.DataFrame, ref: str, order: Order, alpha: float, confidence: float,
                      min_ratio: float, power: float, interval: bool = True) -> pd.DataFrame:
    """The over-seeds family: per variant, both sides on the same seeds (``_common_seeds``) and the
    (layer, step) units every one of them measured; the ratio of the two spreads, the whole-run
    permutation test (``spread_test``: pairs swapped on shared seeds) and the interval
    that inverts it (``ratio_interval``). The frame's other columns are
    ``compare_to_reference``'s of the runs' log deviations on those seeds and units."""
    labels = dict(order)
    ref_norms = norms[norms["cell_id"] == ref]
    rows = []
    for cid, _ in order:
        if cid == ref:
            continue
        cell_norms = norms[norms["cell_id"] == cid]
        use_cell, use_ref = _common_seeds(cell_norms["seed"], ref_norms["seed"])
        (sc, xc, uc), (sr, xr, ur) = (profiles(cell_norms, use_cell), profiles(ref_norms, use_ref))
        units = uc.intersection(ur) if len(sc) and len(sr) else pd.MultiIndex.from_tuples([], names=["layer", "step"])
        xc, xr = xc[:, uc.get_indexer(units)], xr[:, ur.get_indexer(units)]
        k = min(len(sc), len(sr)) if len(units) else 0
        parts = []
        for c, s, x in ((cid, sc, xc), (ref, sr, xr)):
            dev = loo_deviations(x) if len(s) >= 2 and len(units) else np.full(len(s), np.nan)
            parts += [{"cell_id": c, "cell_label": labels[c], "seed": si, "phase": "replicate", "status": "complete",
                       "log_dev_seeds": float(np.log(d)) if d > 0 else np.nan} for si, d in zip(s, dev, strict=True)]
        frame = pd.DataFrame(parts, columns=["cell_id", "cell_label", "seed", "phase", "status", "log_dev_seeds"])
        for c in (cid, ref):  # a side with no run left (all flagged) is a row with n = 0, not a missing one
            if not (frame["cell_id"] == c).any():
                frame = pd.concat([frame, pd.DataFrame([{"cell_id": c, "cell_label": labels[c], "seed": -1,
                                                         "phase": "replicate", "status": "failed"}])])
        one = compare_to_reference(frame, "log_dev_seeds", ref, alpha, confidence=confidence,
                                   min_effect=float(np.log(min_ratio)), power=power)
        one = one[one["cell_id"] == cid].copy()
        ratio = low = high = np.nan
        note = "" if k >= MIN_N_TEST else f"{k} seed{'s' if k != 1 else ''} a side: not tested"
        one["p"], one["exact"], one["p_min"] = np.nan, False, np.nan
        if k >= 2:
            with np.errstate(all="ignore"):
                spread_c, spread_r = spread(xc), spread(xr)
                ratio = float(spread_c / spread_r) if spread_r > 0 else np.nan
            scale = max(1.0, float(np.max(np.abs(np.concatenate([xc.ravel(), xr.ravel()])))))
            flat = [no_spread(x - np.median(x, axis=0), scale) for x in (xc, xr)]
            if all(flat):
                ratio, note = np.nan, "no spread over seeds on either side beyond round-off"
            elif any(flat):
                ratio, note = np.nan, f"{'the reference' if flat[1] else 'the variant'} has no spread beyond round-off"
            elif k >= MIN_N_TEST:
                paired = bool(one["paired"].iloc[0])
                p, exact, p_min = spread_test(xc, xr, paired)
                if interval:
                    low, high, note = ratio_interval(xc, xr, paired, confidence)
                one["p"], one["exact"], one["p_min"] = p, exact, p_min
                kind = "pair-swap" if paired else "whole-run permutation"
                one["test"] = f"{'exact' if exact else 'Monte Carlo'} {kind}"
        if not np.isfinite(one["p"].iloc[0]):
            one["testable"] = False
        rows.append(one.assign(ratio=ratio, ratio_low=low, ratio_high=high, note=note))
    if not rows:
        return pd.DataFrame(columns=["measure", *COMPARISON_COLUMNS, "ratio", "ratio_low", "ratio_high", "note"])
    out = holm(pd.concat(rows, ignore_index=True), alpha)
    return power_lines(out, alpha, min_ratio, power)


def power_lines(out: pd.DataFrame, alpha: float, min_ratio: float, power: float) -> pd.DataFrame:
    """The power line of each row of one family, at Holm's first threshold over its tested rows."""
    out["power_alpha"] = alpha / max(1, int(out["p"].notna().sum()))
    lines = [power_line(r.sd_diff, int(r.n), float(np.log(min_ratio)), r.power_alpha, power, bool(r.paired))
             for r in out.itertuples()]
    out["power_now"] = [now for now, _ in lines]
    out["seeds_needed"] = [need for _, need in lines]
    return out


def holm(out: pd.DataFrame, alpha: float) -> pd.DataFrame:
    """Holm across the family ``out`` (its tested rows), with the marks and power's α from it."""
    tested = out["p"].notna()
    out["p_adj"] = np.nan
    if tested.any():
        out.loc[tested, "p_adj"] = adjusted(out.loc[tested, "p"].to_numpy(float))
    out["mark"] = [mark_for(p, alpha) for p in out["p_adj"]]
    out["significant"] = (out["p_adj"] < alpha).astype(bool)
    return out
