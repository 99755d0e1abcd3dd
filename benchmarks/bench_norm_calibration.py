"""Calibration of the norm-stability report's statistics on null norm studies (no effect anywhere).

    python benchmarks/bench_norm_calibration.py [--studies 100] [--alpha 0.05] [--seed 7]
        [--nulls gaussian "lognormal 0.5" "lognormal 1" "late run"] [--tiny]
        [--estimate STUDY [--home DIR | --data EXPORT]] ...

Each null study has four identical variants (a reference and three others, as a 2 × 2 of two
factors with no effect) whose probe norms come from one generating process with seed-level random
effects, analysed by exactly the functions the report calls (``ablate.stats.norms``: ``per_seed``,
``stability``, ``compare``, ``sensitivity``, ``factor_anova``). Per null and setting (5 unpaired
seeds, 8 paired) it prints, per measure:

- the false-positive rate per comparison (uncorrected p < α) and family-wise (any comparison of
  the measure significant after Holm), against their 99.9 % bands;
- the share of studies with any verdict on any measure, and the ANOVA screen's family-wise rate
  (any term of any measure significant after Holm across them);
- the coverage of every interval the report labels 95 %: each variant's value interval (Table 1:
  training, depth, final, seeds; against the process's true values, by a large Monte Carlo) and
  each ratio's interval (Table 2; true ratio 1);
- the runs flagged (``per_seed``'s ``flag``) and, where a run was flagged for late growth, the
  share of studies with any verdict once it is put back (``sensitivity``).

``--parts seeds`` runs the over-seeds test alone (``norm_seeds.spread_test`` on the runs and units
the report gives it), fast enough for 1,000+ tests per null and setting (``--seeds-studies``, 3
tests a study), and a "level" null besides: the gaussian one with two variants' log ‖x‖² shifted
unit by unit (equal spread, different levels), which it must not call a difference.

The process, on the log scale, for variant v, seed s, layer l, probe step k of K:

    log ‖x‖² = μ(l, k) + a(s) + b(s)·k/K + c(s, l) + e(s, l, k)

with seed offset a, seed drift b (each of sd σ_a, σ_b: normal, or a standardised log-normal of
shape σ for the heavy-tailed nulls — skewed, with rare large seeds), seed × layer offset
c ~ N(0, σ_c²) and noise e ~ N(0, σ_e²); "paired" settings share a fraction ρ of a and b between the
variants of one seed (a shared data order), "unpaired" ones give every variant its own seeds. The
"late run" null adds to one run of each study (a random variant and seed) a growth of ‖x‖² by 10⁴×
over the second half of its probe steps, finite throughout (a run that blew up without failing).
The σ come from the committed replications' per-seed values (``--estimate STUDY``: the variance
components of a stored study, or an export's); the defaults are those of rotrnn_norm_stability at
8,000 steps. ``--tiny`` runs one study per null and setting (seconds; tests/ runs it).
"""

from __future__ import annotations

import argparse
import math
import time
import warnings
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as sps

from ablate.stats import family, norm_seeds
from ablate.stats import norms as sn

CELLS = ("ref", "a", "b", "c")


@dataclass(frozen=True)
class Process:
    """The generating process of one variant's probe norms (module docstring)."""

    sigma_a: float = 0.35
    sigma_b: float = 0.45
    sigma_c: float = 0.15
    sigma_e: float = 0.08
    rho: float = 0.5
    layers: int = 2
    steps: int = 21
    tail: float = 0.0  # the log-normal shape σ of the seed effects a and b; 0: normal
    late: bool = False  # one run per study grows 10⁴× over the second half of its probe steps

    def profile(self) -> np.ndarray:
        """μ(l, k): the norm grows over training and with depth, as trained models' norms do."""
        k = np.linspace(0, 1, self.steps)
        return np.log(1 + 3 * k)[None, :] + 0.4 * np.arange(self.layers)[:, None]


LATE_FACTOR = 1e4


def _effects(rng: np.random.Generator, size: Any, sd: float, tail: float) -> np.ndarray:
    """Seed effects of sd ``sd``: normal, or a log-normal of shape ``tail`` standardised to mean 0."""
    if tail <= 0:
        return rng.normal(0, sd, size)
    z = np.exp(tail * rng.standard_normal(size))
    mean, var = math.exp(tail**2 / 2), (math.exp(tail**2) - 1) * math.exp(tail**2)
    return sd * (z - mean) / math.sqrt(var)


def simulate(p: Process, seeds: int, paired: bool, rng: np.random.Generator, cells: tuple[str, ...] = CELLS
             ) -> pd.DataFrame:
    """``layer_norms`` rows of one null study: every variant from the same process."""
    mu = p.profile()
    k = np.linspace(0, 1, p.steps)
    shared_a = _effects(rng, seeds, p.sigma_a, p.tail) * math.sqrt(p.rho)
    shared_b = _effects(rng, seeds, p.sigma_b, p.tail) * math.sqrt(p.rho)
    own = math.sqrt(1 - p.rho) if paired else 1.0
    logs = []
    for _ in cells:
        a = (shared_a if paired else 0) + _effects(rng, seeds, p.sigma_a * own, p.tail)
        b = (shared_b if paired else 0) + _effects(rng, seeds, p.sigma_b * own, p.tail)
        c = rng.normal(0, p.sigma_c, (seeds, p.layers))
        e = rng.normal(0, p.sigma_e, (seeds, p.layers, p.steps))
        logs.append(mu[None] + a[:, None, None] + b[:, None, None] * k[None, None, :] + c[:, :, None] + e)
    if p.late:  # drawn last: the study is the same as without the late run but for that run
        cell, seed = int(rng.integers(len(cells))), int(rng.integers(seeds))
        logs[cell][seed] += math.log(LATE_FACTOR) * np.clip((k - 0.5) / 0.5, 0, 1)[None, :]
    parts = []
    for i, (cell, x) in enumerate(zip(cells, logs, strict=True)):
        s_idx, l_idx, k_idx = np.indices(x.shape)
        parts.append(pd.DataFrame({
            "cell_id": cell, "cell_label": cell,
            "seed": (s_idx if paired else s_idx + 1000 * i).ravel(),
            "layer": l_idx.ravel(), "step": (100 * k_idx).ravel(), "value": np.exp(x).ravel()}))
    return pd.concat(parts, ignore_index=True)


def runs_of(p: Process, runs: int, rng: np.random.Generator) -> pd.DataFrame:
    """``per_seed`` of ``runs`` independent runs of the process (in batches of 2,000)."""
    parts = [sn.per_seed(simulate(replace(p, rho=0.0, late=False), min(2000, runs - done), True, rng, cells=("x",)))
             for done in range(0, runs, 2000)]
    return pd.concat(parts, ignore_index=True)


def seeds_truth(p: Process, n: int, rng: np.random.Generator, variants: int = 20000) -> float:
    """The expected spread over seeds of a variant of ``n`` runs (``norm_seeds.spread``): for normal
    seed effects the mean over units of the sd of log ‖x‖² at any n (closed form); for heavy-tailed
    ones a robust spread whose value depends a little on n (Monte Carlo over ``variants``)."""
    k = np.linspace(0, 1, p.steps)
    if p.tail <= 0:
        return float(np.mean(np.sqrt(p.sigma_a**2 + p.sigma_b**2 * k**2 + p.sigma_c**2 + p.sigma_e**2)))
    out = []
    for done in range(0, variants, 2000):
        v = min(2000, variants - done)
        a = _effects(rng, (v, n, 1, 1), p.sigma_a, p.tail)
        b = _effects(rng, (v, n, 1, 1), p.sigma_b, p.tail)
        logs = (p.profile()[None, None] + a + b * k + rng.normal(0, p.sigma_c, (v, n, p.layers, 1))
                + rng.normal(0, p.sigma_e, (v, n, p.layers, p.steps)))
        out.append(norm_seeds.spread(logs.reshape(v, n, -1)))
    return float(np.mean(np.concatenate(out)))


def truth(p: Process, rng: np.random.Generator, runs: int = 20000) -> dict[str, float]:
    """The process's true values of what the report estimates (``stats.norms.value_interval``): the
    geometric mean of the per-run CV over training and final norm and (E √CV)² of the CV over layers
    (Monte Carlo over ``runs`` runs); the spread over seeds is ``seeds_truth`` (per n)."""
    ps = runs_of(p, runs, rng)
    out = {m: float(np.exp(np.nanmean(ps[sn.COLUMN[m]].to_numpy(float)))) for m in ("training", "final")}
    out["depth"] = float(np.nanmean(np.sqrt(ps["cv_depth"].to_numpy(float))) ** 2)
    return out


def factorial_labels() -> pd.DataFrame:
    """The four cells as a 2 × 2 of two factors with no effect (for the ANOVA screen)."""
    grid = {"ref": ("p0", "q0"), "a": ("p0", "q1"), "b": ("p1", "q0"), "c": ("p1", "q1")}
    return pd.DataFrame([{"cell_id": c, "f.p": v[0], "f.q": v[1]} for c, v in grid.items()])


def calibrate(p: Process, studies: int, seeds: int, paired: bool, alpha: float, rng: np.random.Generator,
              true: dict[str, float], interval_studies: int) -> dict[str, Any]:
    """Every test's false-positive rates and every interval's coverage over ``studies`` null
    studies; the over-seeds ratio's interval (test inversion, slow) on the first ``interval_studies``."""
    counts: dict[str, dict[str, float]] = {m: {"per": 0, "family": 0, "ratio_cover": 0, "ratio_n": 0, "value_cover": 0,
                                              "value_n": 0, "tested": 0} for m in sn.MEASURES}
    tally = {"anova_any": 0, "anova_runs": 0, "any": 0, "one_family": 0, "flagged_studies": 0, "late_caught": 0, "late_runs": 0,
             "sens_any": 0, "sens_runs": 0, "other_flagged": 0, "runs": 0}
    order = [(c, c) for c in CELLS]
    levels = factorial_labels()
    seeds_true = {n: seeds_truth(p, n, rng) for n in range(2, seeds + 1)}
    for study in range(studies):
        norms = simulate(p, seeds, paired, rng)
        ps = sn.per_seed(norms, levels)
        table = sn.stability(ps, norms, order)
        comp = sn.compare(ps, norms, "ref", order, alpha, ratio_intervals=study < interval_studies)
        anova, _ = sn.factor_anova(ps, ["f.p", "f.q"], alpha)
        if len(anova):
            tally["anova_runs"] += 1
            tally["anova_any"] += bool(anova["significant"].any())
        # The policy as the reports ship it (report.verdicts): every comparison and every ANOVA term of every
        # measure in one Holm family.
        one = family.adjust(family.members([("norm", comp)], [("norm", anova)]), alpha)
        tally["one_family"] += bool(one["significant"].any())
        tally["any"] += bool(comp["significant"].any())
        flagged = ps[ps["flag"] != ""]
        tally["flagged_studies"] += bool(len(flagged))
        tally["runs"] += len(ps)
        if p.late:  # the late run is the one whose last probe grew most against its own middle
            growth = ps["late_growth"].to_numpy(float)
            late_idx = int(np.nanargmax(growth)) if np.isfinite(growth).any() else -1
            tally["late_runs"] += 1
            tally["late_caught"] += bool(late_idx >= 0 and ps["flag"].iloc[late_idx] != "")
            tally["other_flagged"] += int(len(flagged) - (late_idx >= 0 and ps["flag"].iloc[late_idx] != ""))
        else:
            tally["other_flagged"] += len(flagged)
        sens = sn.sensitivity(ps, norms, "ref", order, alpha) if p.late else None
        if sens is not None:
            tally["sens_runs"] += 1
            tally["sens_any"] += bool(sens["significant"].any())
        for m in sn.MEASURES:
            rows = comp[comp["measure"] == m]
            c = counts[m]
            tested = rows[rows["testable"] & rows["p"].notna()]
            c["tested"] += len(tested)
            c["per"] += int((tested["p"] < alpha).sum())
            c["family"] += bool(rows["significant"].any())
            ok = rows[np.isfinite(rows["ratio_low"].to_numpy(float))]
            c["ratio_cover"] += int(((ok["ratio_low"] <= 1) & (ok["ratio_high"] >= 1)).sum())
            c["ratio_n"] += len(ok)
            lo, hi = f"{sn.VALUE[m]}_low", f"{sn.VALUE[m]}_high"
            ok = table[np.isfinite(table[lo].to_numpy(float))]
            target = (ok["n_seeds"].map(seeds_true) if m == "seeds" else pd.Series(true[m], index=ok.index))
            c["value_cover"] += int(((ok[lo] <= target) & (ok[hi] >= target)).sum())
            c["value_n"] += len(ok)
    out: dict[str, Any] = {}
    for m, c in counts.items():
        out[m] = {"per": c["per"] / c["tested"] if c["tested"] else np.nan, "family": c["family"] / studies,
                  "ratio": c["ratio_cover"] / c["ratio_n"] if c["ratio_n"] else np.nan, "ratio_n": c["ratio_n"],
                  "value": c["value_cover"] / c["value_n"] if c["value_n"] else np.nan, "value_n": c["value_n"]}
    out["anova"] = tally["anova_any"] / tally["anova_runs"] if tally["anova_runs"] else np.nan
    out["any"] = tally["any"] / studies
    out["one_family"] = tally["one_family"] / studies
    out["late_caught"] = tally["late_caught"] / tally["late_runs"] if tally["late_runs"] else np.nan
    out["other_flagged"] = tally["other_flagged"] / tally["runs"]
    out["sensitivity"] = tally["sens_any"] / tally["sens_runs"] if tally["sens_runs"] else np.nan
    return out


def coverage(p: Process, draws: int, seeds: int, paired: bool, rng: np.random.Generator, true: dict[str, float],
             cells: int = 50) -> dict[str, float]:
    """The coverage of each variant's value interval (training, depth, final: ``per_seed`` and
    ``value_interval``; seeds: ``seeds_interval``; what ``stability`` prints) over about ``draws``
    intervals: null studies of ``cells`` identical variants, no tests (cheaper than the tests part)."""
    hit = {m: 0 for m in sn.MEASURES}
    shown = {m: 0 for m in sn.MEASURES}
    names = tuple(f"v{i}" for i in range(cells))
    target = seeds_truth(p, seeds, rng)
    for _ in range(max(1, math.ceil(draws / cells))):
        ps = sn.per_seed(simulate(replace(p, late=False), seeds, paired, rng, cells=names))
        for _, runs in ps.groupby("cell_id", sort=False):
            for m in ("training", "depth", "final"):
                est = sn.value_interval(runs[sn.RAW[m]].to_numpy(float), m)
                if np.isfinite(est.ci_low):
                    shown[m] += 1
                    hit[m] += bool(est.ci_low <= true[m] <= est.ci_high)
            est, _ = sn.seeds_interval(runs["dev_seeds"].to_numpy(float))
            if np.isfinite(est.ci_low):
                shown["seeds"] += 1
                hit["seeds"] += bool(est.ci_low <= target <= est.ci_high)
    return {m: hit[m] / shown[m] if shown[m] else np.nan for m in sn.MEASURES} | {"n": shown["training"]}


def _t_bounds(y: np.ndarray, confidence: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Row-wise t interval of the mean of ``y`` (samples × n)."""
    n = y.shape[1]
    m, se = y.mean(1), y.std(1, ddof=1) / math.sqrt(n)
    t = sps.t.ppf(0.5 + confidence / 2, n - 1)
    return m - t * se, m + t * se


def _johnson_bounds(y: np.ndarray, confidence: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Johnson's (1978) skew-corrected t interval of the mean, row-wise: the statistic
    (x̄ − μ + μ₃/(6s²n) + μ₃/(3s⁴)(x̄ − μ)²)/(s/√n) inverted (the root nearer the plain t's)."""
    n = y.shape[1]
    m, s2 = y.mean(1), y.var(1, ddof=1)
    mu3 = ((y - m[:, None]) ** 3).mean(1)
    a, b = mu3 / (6 * s2 * n), mu3 / (3 * s2**2)
    c = sps.t.ppf(0.5 + confidence / 2, n - 1) * np.sqrt(s2 / n)
    out = []
    for sign in (1, -1):  # D = x̄ − μ solves b·D² + D + a = ±c
        k = a - sign * c
        with np.errstate(all="ignore"):
            disc = np.sqrt(np.maximum(1 - 4 * b * k, 0))
            d = np.where(np.abs(b) > 1e-12, (-1 + disc) / (2 * b), -k)
        out.append(m - d)
    return np.minimum(*out), np.maximum(*out)


def _bootstrap_bounds(y: np.ndarray, rng: np.random.Generator, resamples: int = 999, confidence: float = 0.95
                      ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Row-wise bootstrap intervals of the mean of ``y``: bootstrap-t, BCa and percentile."""
    n = y.shape[1]
    q = (1 - confidence) / 2
    out: dict[str, list[np.ndarray]] = {"bootstrap-t": [], "BCa bootstrap": [], "percentile bootstrap": []}
    for start in range(0, len(y), 250):
        x = y[start:start + 250]
        xb = np.take_along_axis(x[:, None, :], rng.integers(0, n, (len(x), resamples, n)), axis=2)
        m, sd = x.mean(1), x.std(1, ddof=1)
        mb, sdb = xb.mean(2), xb.std(2, ddof=1)
        with np.errstate(all="ignore"):
            tb = np.where(sdb > 0, (mb - m[:, None]) / (sdb / math.sqrt(n)), np.nan)
        out["bootstrap-t"].append(np.stack([m - np.nanquantile(tb, 1 - q, axis=1) * sd / math.sqrt(n),
                                            m - np.nanquantile(tb, q, axis=1) * sd / math.sqrt(n)]))
        out["percentile bootstrap"].append(np.quantile(mb, [q, 1 - q], axis=1))
        z0 = sps.norm.ppf(np.clip((mb < m[:, None]).mean(1), 1e-6, 1 - 1e-6))
        jack = (x.sum(1)[:, None] - x) / (n - 1)
        d = jack.mean(1)[:, None] - jack
        with np.errstate(all="ignore"):
            acc = np.nan_to_num((d**3).sum(1) / (6 * (d**2).sum(1) ** 1.5))
        z = sps.norm.ppf([q, 1 - q])[None, :]
        levels = sps.norm.cdf(z0[:, None] + (z0[:, None] + z) / (1 - acc[:, None] * (z0[:, None] + z)))
        out["BCa bootstrap"].append(np.array([[np.quantile(mb[i], levels[i, j]) for i in range(len(x))] for j in (0, 1)]))
    return {k: tuple(np.concatenate(v, axis=1)) for k, v in out.items()}


def depth_candidates(p: Process, draws: int, rng: np.random.Generator, seed_counts: tuple[int, ...] = (3, 5, 8),
                     pool: int = 100000) -> pd.DataFrame:
    """Coverage of every candidate interval for a variant's CV over layers, each against its own
    estimand, on ``draws`` samples of n runs of the process at each n of ``seed_counts``.

    A run's CV over layers does not depend on its seed offset or drift (a CV is scale-free and they
    scale every layer alike), so paired and unpaired studies give the same per-run values and one
    table serves both. The estimands' true values come from ``pool`` further runs."""
    big = runs_of(p, pool, rng)["cv_depth"].to_numpy(float)
    true = {"gm": np.exp(np.mean(np.log(big))), "am": big.mean(), "rms": np.sqrt(np.mean(big**2))}
    power = {"t on √CV → (E √CV)² (the report's now)": 0.5, "t on CV^(1/3) → (E CV^(1/3))³": 1 / 3,
             "t on CV^(2/3), Wilson–Hilferty → (E CV^(2/3))^(3/2)": 2 / 3}
    for name, k in power.items():
        true[name] = np.mean(big**k) ** (1 / k)
    rows = []
    for n in seed_counts:
        cv = runs_of(p, draws * n, rng)["cv_depth"].to_numpy(float).reshape(draws, n)
        lg = np.log(cv)

        def cover(lo: np.ndarray, hi: np.ndarray, t: float) -> float:
            return float(np.mean((lo <= t) & (hi >= t)))

        got = {}
        lo, hi = _t_bounds(lg)
        got["t on log CV → geometric mean (the report's before)"] = cover(np.exp(lo), np.exp(hi), true["gm"])
        lo, hi = _johnson_bounds(lg)
        got["Johnson's skew-corrected t on log CV → geometric mean"] = cover(np.exp(lo), np.exp(hi), true["gm"])
        for name, b in _bootstrap_bounds(lg, rng).items():
            got[f"{name} on log CV → geometric mean"] = cover(np.exp(b[0]), np.exp(b[1]), true["gm"])
        lo, hi = _t_bounds(cv)
        got["t on CV → arithmetic mean"] = cover(lo, hi, true["am"])
        for name, k in power.items():
            lo, hi = _t_bounds(cv**k)
            got[name] = cover(np.maximum(lo, 0) ** (1 / k), hi ** (1 / k), true[name])
        lo, hi = _t_bounds(cv**2)
        got["t on CV² → root mean square"] = cover(np.sqrt(np.maximum(lo, 0)), np.sqrt(hi), true["rms"])
        df = n * (p.layers - 1)
        ms = np.mean(cv**2, axis=1)
        lo, hi = np.sqrt(ms * df / sps.chi2.ppf(0.975, df)), np.sqrt(ms * df / sps.chi2.ppf(0.025, df))
        got["central χ² on mean CV², n·(layers − 1) df → root mean square"] = cover(lo, hi, true["rms"])
        rows += [{"interval": k, "seeds": n, "coverage": v} for k, v in got.items()]
    table = pd.DataFrame(rows).pivot(index="interval", columns="seeds", values="coverage")
    order = list(dict.fromkeys(r["interval"] for r in rows))
    skew = {"log": sps.skew(np.log(big)), "√": sps.skew(np.sqrt(big)), "raw": sps.skew(big)}
    table.attrs["skew"] = skew
    return table.loc[order]


def estimate(study: str, home: str | None, data: str | None) -> Process:
    """The variance components of a stored study (or an export), pooled over its cells (medians)."""
    from ablate import results

    if data:
        res = results.read_export(data)
    else:
        res = results.load(study, home=home)
    df = sn.prepare(res.curves, res.trials)
    norms = sn.layer_norms(df)
    comps = {"a": [], "b": [], "c": [], "e": []}
    layers = steps = []
    for _, cell in norms.groupby("cell_id"):
        cell = cell.assign(log=np.log(cell["value"].clip(lower=1e-300)))
        steps_all = np.sort(cell["step"].unique())
        if cell["seed"].nunique() < 3 or len(steps_all) < 3:
            continue
        k = {s: i / (len(steps_all) - 1) for i, s in enumerate(steps_all)}
        cell["k"] = cell["step"].map(k)
        mu = cell.groupby(["layer", "step"])["log"].transform("mean")
        resid = cell["log"] - mu
        run_mean = resid.groupby(cell["seed"]).transform("mean")
        slopes = cell.assign(r=resid).groupby("seed").apply(
            lambda g: np.polyfit(g["k"], g["r"], 1)[0] if g["k"].nunique() > 1 else np.nan, include_groups=False)
        after = resid - run_mean - (cell["seed"].map(slopes) * (cell["k"] - cell["k"].mean()))
        layer_off = after.groupby([cell["seed"], cell["layer"]]).transform("mean")
        comps["a"].append(resid.groupby(cell["seed"]).mean().std(ddof=1))
        comps["b"].append(np.nanstd(slopes.to_numpy(float), ddof=1))
        comps["c"].append(layer_off.groupby([cell["seed"], cell["layer"]]).first().std(ddof=1))
        comps["e"].append((after - layer_off).std(ddof=1))
        layers, steps = [cell["layer"].nunique()], [len(steps_all)]
    med = {k: float(np.nanmedian(v)) if v else np.nan for k, v in comps.items()}
    base = Process()
    fill = {k: (v if np.isfinite(v) else getattr(base, f"sigma_{k}")) for k, v in med.items()}
    return replace(base, sigma_a=fill["a"], sigma_b=fill["b"], sigma_c=fill["c"] if fill["c"] > 0 else 1e-6,
                   sigma_e=fill["e"], layers=int(layers[0]) if layers else base.layers,
                   steps=int(steps[0]) if steps else base.steps)


#: (paired, seeds) of the tests part: the issue's 5 unpaired and 8 paired seeds.
SETTINGS = [(False, 5), (True, 8)]
#: The coverage and depth parts' settings.
COVERAGE_SETTINGS = [(True, 3), (True, 5), (True, 8), (False, 3), (False, 5), (False, 8)]
PARTS = ("tests", "seeds", "coverage", "depth")
#: The null studies of the tests part: (log-normal shape of the seed effects, one late run).
NULLS = {"gaussian": (0.0, False), "lognormal 0.5": (0.5, False), "lognormal 1": (1.0, False),
         "late run": (0.0, True)}


def _band(rate_n: int, alpha: float) -> tuple[float, float]:
    lo, hi = sps.binom.interval(0.999, rate_n, alpha)
    return lo / rate_n, hi / rate_n


def print_tests(process: Process, args: argparse.Namespace, rng: np.random.Generator) -> None:
    """The full calibration: every test's false-positive rates and every interval's coverage, per null."""
    k = len(CELLS) - 1
    flo, fhi = _band(args.studies, args.alpha)
    plo, phi = _band(k * args.studies, args.alpha)
    print(f"{args.studies} null studies per null and setting (reference + {k} variants, no effect), α = "
          f"{args.alpha:g}; 99.9% band around α: per comparison [{plo:.3f}, {phi:.3f}], family-wise [{flo:.3f}, "
          f"{fhi:.3f}]. 95% intervals: target coverage ≥ 0.93; the over-seeds ratio interval (test inversion) on "
          f"the first {args.interval_studies} studies of each setting.")
    print()
    header = (f"{'null':<14}{'setting':<11}{'measure':>9}{'per':>7}{'family':>8}{'ratio CI':>10}{'n':>5}"
              f"{'value CI':>10}{'n':>6}")
    for name in args.nulls:
        tail, late = NULLS[name]
        p = replace(process, tail=tail, late=late)
        true = truth(p, rng, args.truth_runs)
        print(f"{name}: true values " + ", ".join(f"{m} {v:.4g}" for m, v in true.items()))
        print(header)
        print("-" * len(header))
        for paired, seeds in SETTINGS:
            start = time.perf_counter()
            r = calibrate(p, args.studies, seeds, paired, args.alpha, rng, true, args.interval_studies)
            took = time.perf_counter() - start
            setting = f"{seeds} {'paired' if paired else 'unpaired'}"
            for i, m in enumerate(sn.MEASURES):
                c = r[m]
                print(f"{name if i == 0 else '':<14}{setting if i == 0 else '':<11}{m:>9}{c['per']:>7.3f}"
                      f"{c['family']:>8.3f}{c['ratio']:>10.3f}{c['ratio_n']:>5}{c['value']:>10.3f}{c['value_n']:>6}")
            extra = (f"; late run flagged in {r['late_caught']:.3f} of studies, any verdict with it put back "
                     f"{r['sensitivity']:.3f}" if late else "")
            print(f"{'':<14}{'':<11} any verdict {r['any']:.3f}, ANOVA family {r['anova']:.3f}, one family (as "
                  f"shipped) {r['one_family']:.3f}, other runs flagged "
                  f"{r['other_flagged']:.4f}{extra} ({took:.0f} s)")
        print()
    print("per: share of tested comparisons with uncorrected p < α; family: share of studies with any comparison of "
          "the measure significant after Holm (the report's family); any verdict: any measure; ratio CI / value CI: "
          "coverage of the ratio's and of the variant's value's 95% interval, n: intervals printed (a paired sign-flip "
          "at 8 seeds and a whole-run permutation at 5 unpaired reach α; '—' intervals are not counted); ANOVA family: "
          "share of studies with any term of any measure significant after Holm across them (2 × 2 of two null "
          "factors); one family: share of studies with anything significant when every comparison and term of every "
          "measure is one Holm family, as the reports adjust them (ablate.stats.family; its band is family-wise's); "
          "flagged: runs per_seed flags (non-finite norms or late growth).")


#: The seeds part's level null: log ‖x‖² of two variants shifted, unit by unit, by a constant over seeds (their
#: levels differ, their spreads over seeds do not): the over-seeds test must not call it a difference.
LEVEL_SHIFT = {"a": 1.0, "c": -0.7}


def seeds_rates(p: Process, studies: int, seeds: int, paired: bool, alpha: float, rng: np.random.Generator,
                level: bool = False) -> tuple[int, int, int]:
    """(rejections, tests, studies with a flagged run) of the over-seeds test alone over ``studies``
    null studies, on the runs and units ``seeds_comparisons`` gives it (``flags``' unflagged runs,
    ``_common_seeds``, the units both sides measured) but without the rest of that family (its
    t rows and power lines cost ten times the test); ``level``: with ``LEVEL_SHIFT``."""
    rejected = tested = flagged = 0
    for _ in range(studies):
        norms = simulate(p, seeds, paired, rng)
        if level:
            k = norms["step"].to_numpy(float) / norms["step"].max()
            shift = norms["cell_id"].map(LEVEL_SHIFT).fillna(0.0).to_numpy(float) * (1 + k + 0.5 * norms["layer"])
            norms = norms.assign(value=norms["value"] * np.exp(shift))
        fl = norm_seeds.flags(norms)
        bad = fl[fl["flag"] != ""]
        flagged += bool(len(bad))
        keep = ~pd.MultiIndex.from_frame(norms[["cell_id", "seed"]]).isin(pd.MultiIndex.from_frame(bad[["cell_id", "seed"]]))
        norms = norms[keep]
        ref = norms[norms["cell_id"] == "ref"]
        for cell in CELLS[1:]:
            mine = norms[norms["cell_id"] == cell]
            use_c, use_r = norm_seeds._common_seeds(mine["seed"], ref["seed"])
            (_, xc, uc), (_, xr, ur) = norm_seeds.profiles(mine, use_c), norm_seeds.profiles(ref, use_r)
            units = uc.intersection(ur)
            pv = norm_seeds.spread_test(xc[:, uc.get_indexer(units)], xr[:, ur.get_indexer(units)],
                                        paired and len(set(use_c) & set(use_r)) >= 2)[0]
            if np.isfinite(pv):
                rejected += int(pv < alpha)
                tested += 1
    return rejected, tested, flagged


def print_seeds(process: Process, args: argparse.Namespace, rng: np.random.Generator) -> None:
    """The over-seeds test alone, at ``--seeds-studies`` null studies per null and setting (3 tests a
    study), and on the level null (gaussian, two variants' levels shifted)."""
    k = len(CELLS) - 1
    lo, hi = _band(k * args.seeds_studies, args.alpha)
    print(f"The over-seeds test alone (norm_seeds.spread_test via seeds_comparisons, flagged runs left out): "
          f"{args.seeds_studies} null studies per null and setting, {k * args.seeds_studies} tests; 99.9% band "
          f"around α = {args.alpha:g}: [{lo:.3f}, {hi:.3f}]")
    print(f"{'null':<16}{'setting':<12}{'rejects':>9}{'tests':>7}{'flagged':>9}{'s':>6}")
    nulls = [*args.nulls, "level"] if "gaussian" in args.nulls else list(args.nulls)
    for name in nulls:
        tail, late = NULLS.get(name, (0.0, False))
        p = replace(process, tail=tail, late=late)
        for paired, seeds in SETTINGS:
            start = time.perf_counter()
            r, n, f = seeds_rates(p, args.seeds_studies, seeds, paired, args.alpha, rng, level=name == "level")
            setting = f"{seeds} {'paired' if paired else 'unpaired'}"
            print(f"{name:<16}{setting:<12}{r / n if n else np.nan:>9.3f}{n:>7}{f / args.seeds_studies:>9.3f}"
                  f"{time.perf_counter() - start:>6.0f}", flush=True)
    print("rejects: share of the tests with p < α; flagged: share of studies with a flagged run (left out); level: "
          f"the gaussian null with variants a and c shifted by {LEVEL_SHIFT} × (1 + k/K + layer/2) on log ‖x‖².")


def print_coverage(process: Process, args: argparse.Namespace, rng: np.random.Generator) -> None:
    """The value intervals' coverage alone, at ``--draws`` intervals per null and setting (no tests: fast)."""
    band = 3.29 * math.sqrt(0.05 * 0.95 / args.draws)
    print(f"Coverage of each variant's 95% value interval (Table 1: stats.norms.value_interval, seeds_interval), "
          f"about {args.draws:,} intervals per setting (99.9% band ±{band:.3f}); null studies of 50 identical "
          "variants, no tests (no late run: the tests part shows that null):")
    header = (f"{'null':<14}{'setting':<12}{'training':>10}{'depth':>8}{'seeds':>8}{'final':>8}{'intervals':>11}"
              f"{'s':>6}")
    print(header)
    print("-" * len(header))
    for name in [n for n in args.nulls if not NULLS[n][1]]:
        p = replace(process, tail=NULLS[name][0])
        true = truth(p, rng, args.truth_runs)
        for paired, seeds in (COVERAGE_SETTINGS if args.all_settings else SETTINGS):
            start = time.perf_counter()
            c = coverage(p, args.draws, seeds, paired, rng, true)
            setting = f"{seeds} {'paired' if paired else 'unpaired'}"
            print(f"{name:<14}{setting:<12}{c['training']:>10.3f}{c['depth']:>8.3f}{c['seeds']:>8.3f}{c['final']:>8.3f}"
                  f"{c['n']:>11,}{time.perf_counter() - start:>6.0f}")
    print()
    print("training and final: geometric mean over seeds, t interval on the logs; depth: (mean √CV over seeds)², t "
          "interval on √CV, squared; seeds: the mean of the runs' deviations, t interval on them (from 3 seeds), "
          "against its expected value at that number of seeds.")


def print_depth(process: Process, args: argparse.Namespace, rng: np.random.Generator) -> None:
    """Every candidate interval for the CV over layers, each against its own estimand."""
    start = time.perf_counter()
    table = depth_candidates(process, args.draws, rng)
    skew = table.attrs["skew"]
    band = 3.29 * math.sqrt(0.05 * 0.95 / args.draws)
    print(f"Candidate 95% intervals for a variant's CV over layers: coverage on {args.draws:,} samples of n runs "
          f"each (99.9% band ±{band:.3f}), against each interval's own estimand. Per-run skew: log CV "
          f"{skew['log']:.2f}, √CV {skew['√']:.2f}, CV {skew['raw']:.2f}. Paired and unpaired alike (a run's CV over "
          f"layers is free of its seed's offset and drift). {time.perf_counter() - start:.0f} s.")
    width = max(len(i) for i in table.index) + 2
    print(f"{'interval':<{width}}" + "".join(f"{f'{n} seeds':>10}" for n in table.columns))
    print("-" * (width + 10 * len(table.columns)))
    for name, row in table.iterrows():
        print(f"{name:<{width}}" + "".join(f"{v:>10.3f}" for v in row))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=["tests"],
                        help="tests: the full calibration per null (slow: every test, about 1.5 s a study); coverage: "
                             "the value intervals alone; depth: every candidate interval for the CV over layers")
    parser.add_argument("--studies", type=int, default=100)
    parser.add_argument("--interval-studies", type=int, default=40,
                        help="studies per setting on which the over-seeds ratio's interval (test inversion) is computed")
    parser.add_argument("--seeds-studies", type=int, default=400,
                        help="null studies per null and setting of the seeds part (the over-seeds test alone, 3 a study)")
    parser.add_argument("--nulls", nargs="+", choices=list(NULLS), default=list(NULLS))
    parser.add_argument("--truth-runs", type=int, default=20000, help="runs of the Monte Carlo for the true values")
    parser.add_argument("--tiny", action="store_true", help="one study per null and setting, small Monte Carlos: "
                        "a smoke run of seconds")
    parser.add_argument("--all-settings", action="store_true",
                        help="the coverage part at 3, 5 and 8 seeds, paired and unpaired (default: 5 unpaired, 8 paired)")
    parser.add_argument("--draws", type=int, default=4000, help="intervals per setting of the coverage and depth parts")
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--estimate", help="a study whose variance components the null studies take")
    parser.add_argument("--home", help="the stores' folder of --estimate (ablate.results.locate's home)")
    parser.add_argument("--data", help="an `ablate export` folder to estimate from instead of stores")
    args = parser.parse_args(argv)
    if args.tiny:
        args.studies, args.interval_studies, args.truth_runs, args.draws, args.seeds_studies = 1, 1, 500, 100, 1
    warnings.simplefilter("ignore")
    process = estimate(args.estimate, args.home, args.data) if args.estimate or args.data else Process()
    src = f"estimated from {args.estimate or args.data}" if args.estimate or args.data else "defaults"
    print(f"process ({src}): σ_a {process.sigma_a:.3g} (seed offset), σ_b {process.sigma_b:.3g} (seed drift over "
          f"training), σ_c {process.sigma_c:.3g} (seed × layer), σ_e {process.sigma_e:.3g} (noise), shared ρ "
          f"{process.rho:g}; {process.layers} layers, {process.steps} probe steps")
    rng = np.random.default_rng(args.seed)
    print()
    for part in PARTS:
        if part not in args.parts:
            continue
        if part == "tests":
            print_tests(process, args, rng)
        elif part == "seeds":
            print_seeds(process, args, rng)
        else:
            if part == "coverage":
                print_coverage(process, args, rng)
            else:
                print_depth(process, args, rng)
        print()


if __name__ == "__main__":
    main()
