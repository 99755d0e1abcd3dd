"""Calibration of the norm-stability report's statistics on null norm studies (no effect anywhere).

    python benchmarks/bench_norm_calibration.py [--studies 400] [--alpha 0.05] [--seed 7]
        [--estimate STUDY [--home DIR | --data EXPORT]] ...

Each null study has four identical variants (a reference and three others, or a 2 × 2 of two
factors with no effect) whose probe norms come from one generating process with seed-level random
effects, analysed by exactly the functions the report calls (``ablate.stats.norms``: ``per_seed``,
``stability``, ``compare``, ``factor_anova``). Per setting it prints, per measure:

- the false-positive rate per comparison (uncorrected p < α) and family-wise (any comparison of
  the measure significant after Holm), with the smallest p the exact test can give;
- the ANOVA screen's family-wise rate (any term of any measure significant after Holm across them);
- the coverage of every interval the report labels 95%: each variant's geometric-mean interval
  (training, depth, final) and its over-seeds sd interval (against the process's true values, by
  a large Monte Carlo or in closed form), and each ratio's interval (true ratio 1).

The process, on the log scale, for variant v, seed s, layer l, probe step k of K:

    log ‖x‖² = μ(l, k) + a(s) + b(s)·k/K + c(s, l) + e(s, l, k)

with seed offset a ~ N(0, σ_a²), seed drift b ~ N(0, σ_b²), seed × layer offset c ~ N(0, σ_c²)
and noise e ~ N(0, σ_e²); "paired" settings share a fraction ρ of a and b between the variants of
one seed (a shared data order), "unpaired" ones give every variant its own seeds. The σ come from
the committed replications' per-seed values (``--estimate STUDY``: the variance components of a
stored study, or an export's); the defaults are those of rotrnn_norm_stability at 8,000 steps.
"""

from __future__ import annotations

import argparse
import gc
import math
import time
import warnings
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
from scipy import stats as sps

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

    def profile(self) -> np.ndarray:
        """μ(l, k): the norm grows over training and with depth, as trained models' norms do."""
        k = np.linspace(0, 1, self.steps)
        return np.log(1 + 3 * k)[None, :] + 0.4 * np.arange(self.layers)[:, None]


def simulate(p: Process, seeds: int, paired: bool, rng: np.random.Generator, cells: tuple[str, ...] = CELLS
             ) -> pd.DataFrame:
    """``layer_norms`` rows of one null study: every variant from the same process."""
    mu = p.profile()
    k = np.linspace(0, 1, p.steps)
    shared_a = rng.normal(0, p.sigma_a, seeds) * math.sqrt(p.rho)
    shared_b = rng.normal(0, p.sigma_b, seeds) * math.sqrt(p.rho)
    own = math.sqrt(1 - p.rho) if paired else 1.0
    parts = []
    for i, cell in enumerate(cells):
        a = (shared_a if paired else 0) + rng.normal(0, p.sigma_a * own, seeds)
        b = (shared_b if paired else 0) + rng.normal(0, p.sigma_b * own, seeds)
        c = rng.normal(0, p.sigma_c, (seeds, p.layers))
        e = rng.normal(0, p.sigma_e, (seeds, p.layers, p.steps))
        logs = mu[None] + a[:, None, None] + b[:, None, None] * k[None, None, :] + c[:, :, None] + e
        s_idx, l_idx, k_idx = np.indices(logs.shape)
        parts.append(pd.DataFrame({
            "cell_id": cell, "cell_label": cell,
            "seed": (s_idx if paired else s_idx + 1000 * i).ravel(),
            "layer": l_idx.ravel(), "step": (100 * k_idx).ravel(), "value": np.exp(logs).ravel()}))
    return pd.concat(parts, ignore_index=True)


def runs_of(p: Process, runs: int, rng: np.random.Generator) -> pd.DataFrame:
    """``per_seed`` of ``runs`` independent runs of the process (in batches of 2,000)."""
    parts = [sn.per_seed(simulate(replace(p, rho=0.0), min(2000, runs - done), True, rng, cells=("x",)))
             for done in range(0, runs, 2000)]
    return pd.concat(parts, ignore_index=True)


def truth(p: Process, rng: np.random.Generator, runs: int = 20000) -> dict[str, float]:
    """The process's true values of what the report estimates (``stats.norms.value_interval``): the
    geometric mean of the per-run CV over training and final norm, (E √CV)² of the CV over layers
    (Monte Carlo over ``runs`` runs), and the over-seeds sd (closed form)."""
    ps = runs_of(p, runs, rng)
    out = {m: float(np.exp(np.nanmean(ps[sn.COLUMN[m]].to_numpy(float)))) for m in ("training", "final")}
    out["depth"] = float(np.nanmean(np.sqrt(ps["cv_depth"].to_numpy(float))) ** 2)
    k = np.linspace(0, 1, p.steps)
    var = p.sigma_a**2 + p.sigma_b**2 * k**2 + p.sigma_c**2 + p.sigma_e**2  # per (layer, step) unit
    out["seeds"] = float(np.sqrt(var.mean()))
    return out


def factorial_labels(norms: pd.DataFrame) -> pd.DataFrame:
    """The four cells as a 2 × 2 of two factors with no effect (for the ANOVA screen)."""
    grid = {"ref": ("p0", "q0"), "a": ("p0", "q1"), "b": ("p1", "q0"), "c": ("p1", "q1")}
    return pd.DataFrame([{"cell_id": c, "f.p": v[0], "f.q": v[1]} for c, v in grid.items()])


def calibrate(p: Process, studies: int, seeds: int, paired: bool, alpha: float, rng: np.random.Generator,
              true: dict[str, float]) -> dict[str, dict[str, float]]:
    counts: dict[str, dict[str, float]] = {m: {"per": 0, "family": 0, "ratio_cover": 0, "ratio_n": 0, "value_cover": 0,
                                              "value_n": 0, "tested": 0, "p_min": np.nan} for m in sn.MEASURES}
    anova_any = anova_runs = 0
    order = [(c, c) for c in CELLS]
    levels = None
    for _ in range(studies):
        gc.freeze()  # statsmodels' Holm runs gc.collect() on each call: keep what is already alive out of it
        norms = simulate(p, seeds, paired, rng)
        if levels is None:
            levels = factorial_labels(norms)
        ps = sn.per_seed(norms, levels)
        table = sn.stability(ps, norms, order)
        comp = sn.compare(ps, norms, "ref", order, alpha)
        anova, _ = sn.factor_anova(ps, ["f.p", "f.q"], alpha)
        if len(anova):
            anova_runs += 1
            anova_any += bool(anova["significant"].any())
        for m in sn.MEASURES:
            rows = comp[comp["measure"] == m]
            c = counts[m]
            tested = rows[rows["testable"]]
            c["tested"] += len(tested)
            c["per"] += int((tested["p"] < alpha).sum())
            c["family"] += bool(rows["significant"].any())
            if len(tested):
                c["p_min"] = np.nanmin([c["p_min"], *tested["p_min"]])
            ok = rows[np.isfinite(rows["ratio_low"].to_numpy(float))]
            c["ratio_cover"] += int(((ok["ratio_low"] <= 1) & (ok["ratio_high"] >= 1)).sum())
            c["ratio_n"] += len(ok)
            lo, hi = f"{sn.VALUE[m]}_low", f"{sn.VALUE[m]}_high"
            ok = table[np.isfinite(table[lo].to_numpy(float))]
            c["value_cover"] += int(((ok[lo] <= true[m]) & (ok[hi] >= true[m])).sum())
            c["value_n"] += len(ok)
    out = {}
    for m, c in counts.items():
        out[m] = {"per": c["per"] / c["tested"] if c["tested"] else np.nan, "family": c["family"] / studies,
                  "p_min": c["p_min"], "ratio": c["ratio_cover"] / c["ratio_n"] if c["ratio_n"] else np.nan,
                  "value": c["value_cover"] / c["value_n"] if c["value_n"] else np.nan}
    out["anova"] = {"family": anova_any / anova_runs if anova_runs else np.nan}
    return out


def coverage(p: Process, draws: int, seeds: int, paired: bool, rng: np.random.Generator, true: dict[str, float],
             cells: int = 50) -> dict[str, float]:
    """The coverage of each variant's value interval (training, depth, final: ``per_seed`` and
    ``value_interval``, what ``stability`` prints) over about ``draws`` intervals: null studies of
    ``cells`` identical variants, no tests (the ``tests`` part's studies, cheaper)."""
    hit = {m: 0 for m in ("training", "depth", "final")}
    n = 0
    names = tuple(f"v{i}" for i in range(cells))
    for _ in range(max(1, math.ceil(draws / cells))):
        ps = sn.per_seed(simulate(p, seeds, paired, rng, cells=names))
        for _, runs in ps.groupby("cell_id", sort=False):
            for m in hit:
                est = sn.value_interval(runs[sn.RAW[m]].to_numpy(float), m)
                hit[m] += bool(est.ci_low <= true[m] <= est.ci_high)
            n += 1
    return {m: h / n for m, h in hit.items()} | {"n": n}


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


SETTINGS = [(True, 3), (True, 5), (True, 8), (False, 3), (False, 5), (False, 8)]
PARTS = ("tests", "coverage", "depth")


def print_tests(process: Process, args: argparse.Namespace, rng: np.random.Generator, true: dict[str, float]) -> None:
    """The full calibration: every test's false-positive rates and every interval's coverage."""
    k = len(CELLS) - 1
    lo, hi = sps.binom.interval(0.999, k * args.studies, args.alpha)
    flo, fhi = sps.binom.interval(0.999, args.studies, args.alpha)
    print(f"{args.studies} null studies per setting (reference + {k} variants, no effect), α = {args.alpha:g}; 99.9% "
          f"band around α: per comparison [{lo / (k * args.studies):.3f}, {hi / (k * args.studies):.3f}], family-wise "
          f"[{flo / args.studies:.3f}, {fhi / args.studies:.3f}]. Coverage of 95% intervals: 99.9% band at 1,200 "
          f"intervals ±{3.29 * math.sqrt(0.05 * 0.95 / (k * args.studies)):.3f}.")
    print()
    header = (f"{'setting':<10}{'seeds':>6}{'measure':>10}{'smallest p':>12}{'per':>8}{'family':>8}"
              f"{'ratio CI':>10}{'value CI':>10}{'ANOVA family':>14}{'s':>6}")
    print(header)
    print("-" * len(header))
    gc.freeze()
    for paired, seeds in SETTINGS:
        start = time.perf_counter()
        r = calibrate(process, args.studies, seeds, paired, args.alpha, rng, true)
        took = time.perf_counter() - start
        for i, m in enumerate(sn.MEASURES):
            c = r[m]
            p_min = "—" if np.isnan(c["p_min"]) else f"{c['p_min']:.4f}"
            anova = f"{r['anova']['family']:.3f}" if i == 0 else ""
            print(f"{('paired' if paired else 'unpaired') if i == 0 else '':<10}{seeds if i == 0 else '':>6}"
                  f"{m:>10}{p_min:>12}{c['per']:>8.3f}{c['family']:>8.3f}{c['ratio']:>10.3f}{c['value']:>10.3f}"
                  f"{anova:>14}{f'{took:.0f}' if i == 0 else '':>6}")
    print()
    print("per: share of tested comparisons with uncorrected p < α; family: share of studies with any comparison of "
          "the measure significant after Holm (the report's family); ratio CI / value CI: coverage of the ratio's and "
          "of the variant's value's 95% interval; ANOVA family: share of studies with any term of any measure "
          "significant after Holm across them (2 × 2 of two null factors, main effects and interaction). A paired "
          "exact sign-flip test at 3 or 5 seeds cannot give p below 0.25 or 0.0625: it cannot reach α there.")


def print_coverage(process: Process, args: argparse.Namespace, rng: np.random.Generator, true: dict[str, float]
                   ) -> None:
    """The value intervals' coverage alone, at ``--draws`` intervals per setting (no tests: fast)."""
    band = 3.29 * math.sqrt(0.05 * 0.95 / args.draws)
    print(f"Coverage of each variant's 95% value interval (stats.norms.value_interval, as Table 1 prints it), "
          f"about {args.draws:,} intervals per setting (99.9% band ±{band:.3f}); null studies of 50 identical "
          "variants, no tests:")
    header = f"{'setting':<10}{'seeds':>6}{'training':>10}{'depth':>8}{'final':>8}{'intervals':>11}{'s':>6}"
    print(header)
    print("-" * len(header))
    for paired, seeds in SETTINGS:
        start = time.perf_counter()
        c = coverage(process, args.draws, seeds, paired, rng, true)
        print(f"{'paired' if paired else 'unpaired':<10}{seeds:>6}{c['training']:>10.3f}{c['depth']:>8.3f}"
              f"{c['final']:>8.3f}{c['n']:>11,}{time.perf_counter() - start:>6.0f}")
    print()
    print("training and final: geometric mean over seeds, t interval on the logs; depth: (mean √CV over seeds)², t "
          "interval on √CV, squared. The over-seeds sd's interval is measured by the tests part.")


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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=["tests"],
                        help="tests: the full calibration (slow: every test, about 2.5 s a study); coverage: the "
                             "value intervals alone; depth: every candidate interval for the CV over layers")
    parser.add_argument("--studies", type=int, default=400)
    parser.add_argument("--draws", type=int, default=4000, help="intervals per setting of the coverage and depth parts")
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--estimate", help="a study whose variance components the null studies take")
    parser.add_argument("--home", help="the stores' folder of --estimate (ablate.results.locate's home)")
    parser.add_argument("--data", help="an `ablate export` folder to estimate from instead of stores")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    process = estimate(args.estimate, args.home, args.data) if args.estimate or args.data else Process()
    src = f"estimated from {args.estimate or args.data}" if args.estimate or args.data else "defaults"
    print(f"process ({src}): σ_a {process.sigma_a:.3g} (seed offset), σ_b {process.sigma_b:.3g} (seed drift over "
          f"training), σ_c {process.sigma_c:.3g} (seed × layer), σ_e {process.sigma_e:.3g} (noise), shared ρ "
          f"{process.rho:g}; {process.layers} layers, {process.steps} probe steps")
    rng = np.random.default_rng(args.seed)
    true = truth(process, rng)
    print("true values: " + ", ".join(f"{m} {v:.4g}" for m, v in true.items()))
    print()
    for part in PARTS:
        if part in args.parts:
            {"tests": lambda: print_tests(process, args, rng, true),
             "coverage": lambda: print_coverage(process, args, rng, true),
             "depth": lambda: print_depth(process, args, rng)}[part]()
            print()


if __name__ == "__main__":
    main()
