"""Calibration of the accuracy report's comparisons on null studies (no effect anywhere).

    python benchmarks/bench_stats_calibration.py [--studies 400] [--alpha 0.05] [--seed 2024]

Each null study is a reference and three other cells with the same true accuracy, compared by
``ablate.stats.compare_to_reference`` exactly as the report does. Per setting it prints the
false-positive rate per comparison (uncorrected p < α, over 3 × studies comparisons) and
family-wise (any comparison significant after Holm, over the studies), for the report's test
(the exact permutation test), for the t-test it prints beside it, and for the t-test the report
used before (from two seeds on, zero spread giving p = 0), with the share of comparisons that
were not tested (too few seeds), and a 99.9% binomial band around α for the reader.

Settings: paired seeds (each seed shifts every cell alike, as a shared data order does) with 2, 3,
5 and 8 seeds; unpaired 5 vs 5 runs; and *discrete* accuracies — each run's accuracy is the share
of a 200-example test set it gets right, so ties between runs are common — with 2 and 5 seeds,
where the t-test's zero-variance p of 0 used to appear. A valid test stays at or below α; one
that is far below α at a setting cannot detect anything there (its smallest p is above α).
"""

from __future__ import annotations

import argparse
import gc
import time
import warnings

import numpy as np
import pandas as pd
from scipy import stats as sps

from ablate import stats

CELLS = ("base", "a", "b", "c")
METRIC = "test_accuracy"


def null_trials(rng: np.random.Generator, seeds: int, paired: bool, test_size: int | None) -> pd.DataFrame:
    """One null study: every cell at accuracy 0.8; seed-to-seed sd 0.01 (+0.01 shared by a seed when
    paired); with ``test_size``, each accuracy is a binomial share of that many examples."""
    shared = rng.normal(0, 0.01, seeds) if paired else np.zeros(seeds)
    rows = []
    for i, cell in enumerate(CELLS):
        for s in range(seeds):
            p = 0.8 + shared[s] + rng.normal(0, 0.01)
            if test_size:
                p = rng.binomial(test_size, min(max(p, 0.0), 1.0)) / test_size
            rows.append({"cell_id": cell, "cell_label": cell, "seed": s if paired else 100 * i + s,
                         "phase": "replicate", "status": "complete", METRIC: p})
    return pd.DataFrame(rows)


def t_test_as_before(cmp: pd.DataFrame) -> np.ndarray:
    """The t-test p of every comparison with two values a side, as the report computed it before
    (paired t on the differences, else Welch): a zero spread gives p = 0 there."""
    out = []
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")  # scipy's precision warning for nearly equal values: the point here
        for r in cmp.itertuples():
            if r.paired:
                out.append(sps.ttest_1samp(np.asarray(r.diffs), 0.0).pvalue if len(r.diffs) >= 2 else np.nan)
            elif min(len(r.values_cell), len(r.values_ref)) >= 2:
                out.append(sps.ttest_ind(r.values_cell, r.values_ref, equal_var=False).pvalue)
            else:
                out.append(np.nan)
    return np.nan_to_num(np.asarray(out, dtype=float), nan=1.0)  # 0/0 (no difference at all): not a finding


def calibrate(studies: int, seeds: int, paired: bool, test_size: int | None, alpha: float,
              rng: np.random.Generator) -> dict[str, float]:
    from statsmodels.stats.multitest import multipletests

    per = per_t = family = family_t = per_old = family_old = untested = 0
    p_min = np.nan
    for _ in range(studies):
        cmp = stats.compare_to_reference(null_trials(rng, seeds, paired, test_size), METRIC, "base", alpha=alpha,
                                         n_resamples=0)
        per += int((cmp["p"] < alpha).sum())
        per_t += int((cmp["t_p"] < alpha).sum())
        family += bool(cmp["significant"].any())
        family_t += bool((cmp["t_p_adj"] < alpha).any())
        untested += int((~cmp["testable"]).sum())
        old = t_test_as_before(cmp)
        per_old += int((old < alpha).sum())
        family_old += bool(multipletests(old, method="holm")[1].min() < alpha)
        p_min = np.nanmin([p_min, *cmp["p_min"]]) if cmp["p_min"].notna().any() else p_min
    k = len(CELLS) - 1
    return {"per": per / (k * studies), "per_t": per_t / (k * studies), "family": family / studies,
            "family_t": family_t / studies, "per_old": per_old / (k * studies), "family_old": family_old / studies,
            "untested": untested / (k * studies), "p_min": p_min}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--studies", type=int, default=400)
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=2024)
    args = parser.parse_args()
    settings = [("paired", 2, None), ("paired", 3, None), ("paired", 5, None), ("paired", 8, None),
                ("unpaired", 5, None), ("paired, 200-example test set", 2, 200),
                ("paired, 200-example test set", 5, 200), ("paired, 200-example test set", 8, 200)]
    k = len(CELLS) - 1
    lo, hi = sps.binom.interval(0.999, k * args.studies, args.alpha)
    flo, fhi = sps.binom.interval(0.999, args.studies, args.alpha)
    print(f"{args.studies} null studies per setting (reference + {k} cells, no effect), α = {args.alpha:g}; "
          f"99.9% band around α: per comparison [{lo / (k * args.studies):.3f}, {hi / (k * args.studies):.3f}], "
          f"family-wise [{flo / args.studies:.3f}, {fhi / args.studies:.3f}]")
    print()
    header = (f"{'setting':<32}{'seeds':>6}{'untested':>10}{'smallest p':>12}{'exact: per':>12}{'family':>8}"
              f"{'t beside: per':>15}{'family':>8}{'t before: per':>15}{'family':>8}{'s':>6}")
    print(header)
    print("-" * len(header))
    rng = np.random.default_rng(args.seed)
    gc.freeze()  # statsmodels' Holm runs gc.collect() on each call: keep the long-lived heap out of it
    for name, seeds, test_size in settings:
        start = time.perf_counter()
        r = calibrate(args.studies, seeds, name.startswith("paired"), test_size, args.alpha, rng)
        p_min = "—" if np.isnan(r["p_min"]) else f"{r['p_min']:.4f}"
        print(f"{name:<32}{seeds:>6}{r['untested']:>10.0%}{p_min:>12}{r['per']:>12.3f}{r['family']:>8.3f}"
              f"{r['per_t']:>15.3f}{r['family_t']:>8.3f}{r['per_old']:>15.3f}{r['family_old']:>8.3f}"
              f"{time.perf_counter() - start:>6.1f}")
    print()
    print("per: share of comparisons with uncorrected p < α; family: share of studies with any comparison "
          "significant after Holm. exact: the report's test; t beside: the t-test the report prints beside it "
          "(from 3 seeds); t before: the t-test the report used before, from 2 seeds, a zero spread giving p = 0. "
          "Untested comparisons (fewer than 3 seeds) count as not significant.")


if __name__ == "__main__":
    main()
