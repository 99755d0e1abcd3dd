"""Calibration and power of sequential seeds (``seeds: {min, max, step, until: decided}``).

    python benchmarks/bench_sequential.py [--parts calibration runner] [--studies 100000] [--sims 2000]
        [--noise 0.6 0.85 1.0] [--seed 3] [--min 3 --max 16 --step 2] [--comparisons 3]
        [--spending power3 obrien_fleming] [--futility 0.03] [--tiny]

Each simulated study has a reference and ``--comparisons`` other cells; every cell has its own
run-to-run noise, sized so that one paired difference has sd ``noise`` × δ, δ being
``stats.min_effect`` (the runner part adds a seed effect shared by all cells of a seed, which
cancels in the paired differences).

**calibration** (vectorised, ``--studies`` null studies per row; ``bench_sequential_frontier.stops``,
the look rule of ``ablate.stats.group_sequential.decide`` tested against it, on the runner's designs):

- *efficacy alone* (equivalence and futility spending nothing, so nothing stops early for them):
  the per-comparison false-positive rate with its 99.9% band around α/m — it must lie inside: the
  check that the t boundaries hold their rate — and the family-wise rate (any comparison
  significant) with its band around α (Bonferroni over comparisons that share a reference: at
  most α). The *z→t* row crosses the same draws at the Brownian-motion boundaries turned into t by
  their tail probability (the boundaries before issue 41), for comparison.
- *procedure* at each noise (equivalence and futility stops as the runner makes them): both rates,
  which may only lie below their bands' tops (non-binding stops only lower them).

**runner** (``--sims`` studies per setting): the looks run by exactly the rule of the runner
(``ablate.runner.sequential_looks.step`` on a real spec: analyse the open comparisons on the first n_k
seeds, record decisions, add ``step`` seeds to the cells of open comparisons and the reference).
Per noise level, against the issue's bands:

- **null** (no effect anywhere): the family-wise false-positive rate with its 99.9% Monte Carlo
  band around α, the per-comparison rate against α/m, and the average seeds used (over every cell,
  the reference included) as a fraction of ``max``;
- **δ** (every comparison's true effect min_effect): the power (significant, right sign), the
  fixed design's at ``max`` seeds on the same draws (paired t at α/m), the loss, how often
  "equivalent" was declared (wrongly: the effect is δ), and the seeds used;
- **2δ**: the power and the seeds used.

``--futility`` is what the non-binding futility boundary spends of the power against δ (default:
the design's, ``ablate.stats.group_sequential.FUTILITY_BETA``; 0 switches it off, the rule before it
existed, so those rows compare with earlier tables). ``--tiny``: a few thousand studies, one noise
level, a handful through the runner — seconds, for the tests.

Rates only; no time is measured.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from scipy import stats as sps

from ablate import spec as spec_mod
from ablate.runner import sequential_looks
from ablate.stats.group_sequential import FUTILITY_BETA, SequentialDesign, t_bound

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_sequential_frontier import stops  # noqa: E402  (the vectorised look rule, tested against decide)

BASE = {
    "name": "seqcal",
    "task": {"name": "listops", "max_depth": 3, "max_args": 5, "min_length": 10, "max_length": 64,
             "train_size": 4000, "seed": 0},
    "model": {"family": "linear_rnn", "d_model": 32, "state_dim": 32, "layers": 2},
    "train": {"steps": 300, "batch_size": 32, "lr": 3.0e-3, "eval_every": 50},
}
BAND = 3.29  # the two-sided 99.9% normal quantile


def _per_spec(fn: Callable, futility: float | None = None) -> Callable:
    """``fn`` of the runner memoised per spec (the runner recomputes the cells at every look; a
    benchmark's spec never changes), with the designs' futility spending set when given."""
    memo: dict[int, tuple[spec_mod.Spec, object]] = {}

    def wrapped(spec: spec_mod.Spec) -> object:
        if id(spec) not in memo:  # the spec is kept with its value so that its id stays its own
            value = fn(spec)
            if futility is not None:
                value = {m: dataclasses.replace(d, futility_beta=futility) for m, d in value.items()}
            memo[id(spec)] = (spec, value)
        return memo[id(spec)][1]

    return wrapped


RUNNER = {name: getattr(sequential_looks, name) for name in ("reference_cell", "comparisons", "designs")}


def use_runner(futility: float) -> None:
    """The runner's look rule as it is, its pure functions of the spec memoised; the designs'
    futility spending ``futility`` (the runner takes the design's default)."""
    sequential_looks.reference_cell = _per_spec(RUNNER["reference_cell"])
    sequential_looks.comparisons = _per_spec(RUNNER["comparisons"])
    sequential_looks.designs = _per_spec(RUNNER["designs"], futility)


def make_spec(args: argparse.Namespace, shape: str, beta: float | None = None) -> spec_mod.Spec:
    raw = dict(BASE)
    raw["factors"] = {"model.heads": [1, 2, 4, 8, 16][: args.comparisons + 1]}
    raw["seeds"] = {"min": args.min, "max": args.max, "step": args.step, "spending": shape,
                    "alpha": args.alpha, "equivalence_beta": args.beta if beta is None else beta}
    return spec_mod.parse(raw)


def simulate(spec: spec_mod.Spec, effect: float, sd_diff: float, rng: np.random.Generator
             ) -> tuple[sequential_looks.State, dict[str, np.ndarray]]:
    """One study run to its end by the runner's rule: its final state and the values drawn."""
    seq = spec.sequential
    ref = sequential_looks.reference_cell(spec)
    cells = [c.id for c in sequential_looks.design.cells(spec)]
    n, sd_run = seq.max, sd_diff / math.sqrt(2.0)
    seed_effect = rng.normal(0.0, 0.02, n)
    drawn = {c: 0.6 + seed_effect + rng.normal(0.0, sd_run, n) + (0.0 if c == ref else effect) for c in cells}
    values = {"test_accuracy": {c: dict(zip(spec.seed_list, v.tolist(), strict=True)) for c, v in drawn.items()}}
    st = sequential_looks.State(planned={c: seq.looks[0] for c in cells})
    while not st.finished:
        sequential_looks.step(spec, st, values)
    return st, drawn


def fixed_rejects(drawn: dict[str, np.ndarray], ref: str, level: float, effect: float) -> list[bool]:
    """The fixed design at ``max`` seeds: paired t at ``level``, rejecting in the effect's direction."""
    d = np.array([v - drawn[ref] for c, v in drawn.items() if c != ref])
    n = d.shape[1]
    t = d.mean(axis=1) / (d.std(axis=1, ddof=1) / math.sqrt(n))
    p = 2.0 * sps.t.sf(np.abs(t), n - 1)
    return [bool(pi < level and (effect == 0 or np.sign(ti) == np.sign(effect))) for ti, pi in zip(t, p, strict=True)]


def run_setting(spec: spec_mod.Spec, effect: float, sd_diff: float, sims: int, rng: np.random.Generator
                ) -> dict[str, float]:
    seq = spec.sequential
    ref = sequential_looks.reference_cell(spec)
    m = len(sequential_looks.comparisons(spec))
    level = seq.alpha / m
    any_sig, sig, right, wrong_eq, fixed, used = 0, 0, 0, 0, 0, []
    for _ in range(sims):
        st, drawn = simulate(spec, effect, sd_diff, rng)
        rows = list(st.decided.values())
        significant = [r for r in rows if r["decision"] == "significant"]
        any_sig += bool(significant)
        sig += len(significant)
        right += sum(1 for r in significant if effect and np.sign(r["estimate"]) == np.sign(effect))
        wrong_eq += sum(1 for r in rows if r["decision"] == "equivalent")
        fixed += sum(fixed_rejects(drawn, ref, level, effect))
        used.append(np.mean(list(st.planned.values())) / seq.max)
    k = sims * m
    return {"fwer": any_sig / sims, "per": sig / k, "power": right / k, "fixed": fixed / k,
            "equivalent": wrong_eq / k, "used": float(np.mean(used)), "level": level}


def band(p: float, n: int) -> tuple[float, float]:
    half = BAND * math.sqrt(p * (1 - p) / n)
    return p - half, p + half


def null_diffs(studies: int, comparisons: int, n: int, sd: float, rng: np.random.Generator) -> np.ndarray:
    """Paired differences of ``comparisons`` cells with one reference under no effect
    (studies × comparisons × seeds): they share the reference's noise, as in a study."""
    run = sd / math.sqrt(2.0)
    return rng.normal(0.0, run, (studies, comparisons, n)) - rng.normal(0.0, run, (studies, 1, n))


def rates(significant: np.ndarray) -> dict[str, float]:
    """Per comparison and family-wise (any of a study's comparisons) rates of a studies ×
    comparisons array of significant decisions."""
    return {"per": float(significant.mean()), "fwer": float(significant.any(axis=1).mean())}


def z_to_t_significant(design: SequentialDesign, diffs: np.ndarray) -> np.ndarray:
    """Efficacy alone at the Brownian-motion boundaries turned into t by their tail probability
    (``t_bound``): the boundaries before issue 41."""
    hit = np.zeros(diffs.shape[:-1], bool)
    for n, z in zip(design.looks, design.efficacy_z(), strict=True):
        x = diffs[..., :n]
        hit |= np.abs(x.mean(-1) / (x.std(-1, ddof=1) / math.sqrt(n))) >= t_bound(z, n - 1)
    return hit


def calibrate(args: argparse.Namespace, shape: str, rng: np.random.Generator) -> list[str]:
    """The vectorised calibration rows of one spending shape (see the module's docstring)."""
    spec = make_spec(args, shape)
    design = dataclasses.replace(RUNNER["designs"](spec)["test_accuracy"], min_effect=1.0,
                                 futility_beta=args.futility)
    bare = dataclasses.replace(design, beta=1e-9, futility_beta=0.0)
    m, studies = design.comparisons, args.studies
    per_lo, per_hi = band(design.level, studies * m)
    fam_lo, fam_hi = band(args.alpha, studies)
    out = []

    def row(label: str, r: dict[str, float], inside: bool) -> str:
        per_ok = per_lo <= r["per"] <= per_hi if inside else r["per"] <= per_hi
        fam_ok = r["fwer"] <= fam_hi
        verdict = "holds" if per_ok and fam_ok else "MISSES " + ", ".join(
            k for k, v in (("per comparison", per_ok), ("family", fam_ok)) if not v)
        return (f"{shape:<15}{label:<18} │ {r['per']:>8.4f} [{per_lo:.4f}, {per_hi:.4f}] │ "
                f"{r['fwer']:>7.4f} [{fam_lo:.4f}, {fam_hi:.4f}] │ {verdict}")

    diffs = null_diffs(studies, m, design.looks[-1], 1.0, rng)
    _, sign = stops(bare, diffs)
    out.append(row("efficacy alone", rates(sign != 0), inside=True))
    old = rates(z_to_t_significant(bare, diffs))
    out.append(f"{shape:<15}{'  z→t (before)':<18} │ {old['per']:>8.4f} {'inside' if per_lo <= old['per'] <= per_hi else 'outside':>16} │ "
               f"{old['fwer']:>7.4f} {'':>16} │ the same draws at the tail-matched z boundaries")
    for noise in args.noise:
        _, sign = stops(design, null_diffs(studies, m, design.looks[-1], noise, rng))
        out.append(row(f"procedure {noise:g} δ", rates(sign != 0), inside=False))
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sims", type=int, default=2000, help="null studies per setting (half as many with an effect)")
    parser.add_argument("--noise", type=float, nargs="+", default=[0.6, 0.85, 1.0],
                        help="sd of one paired difference, in units of min_effect")
    parser.add_argument("--spending", nargs="+", default=["power3", "obrien_fleming"])
    parser.add_argument("--min", type=int, default=3)
    parser.add_argument("--max", type=int, default=16)
    parser.add_argument("--step", type=int, default=2)
    parser.add_argument("--comparisons", type=int, default=3)
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--beta", type=float, default=0.02)
    parser.add_argument("--futility", type=float, default=FUTILITY_BETA,
                        help="what the non-binding futility boundary spends of the power against δ (0: none)")
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--parts", nargs="+", choices=["calibration", "runner"], default=["calibration", "runner"])
    parser.add_argument("--studies", type=int, default=100_000,
                        help="null studies per calibration row (vectorised; 100,000 × 3 comparisons: the "
                             "per-comparison band is α/m ± 0.0008)")
    parser.add_argument("--tiny", action="store_true", help="a few thousand studies, one noise, seconds")
    args = parser.parse_args(argv)
    if args.tiny:
        args.studies, args.sims, args.noise = min(args.studies, 3000), min(args.sims, 8), args.noise[1:2] or args.noise
    rng = np.random.default_rng(args.seed)
    if "calibration" in args.parts:
        print(f"calibration: {args.studies} null studies per row, each a reference and {args.comparisons} cells, "
              f"looks {make_spec(args, 'power3').sequential.looks}, family α {args.alpha}; 99.9% bands\n")
        head = (f"{'spending':<15}{'rule':<18} │ {'per cmp':>8} {'[band around α/m]':>17} │ {'family':>7} "
                f"{'[band around α]':>16} │ verdict")
        print(head)
        print("─" * len(head))
        for shape in args.spending:
            for line in calibrate(args, shape, rng):
                print(line, flush=True)
        print("\nefficacy alone: the per-comparison rate must lie inside its band; the procedure's (equivalence "
              "and futility stops, non-binding) and every family rate at most its top (Bonferroni over comparisons "
              "that share a reference is conservative)\n")
    if "runner" not in args.parts:
        return
    print(f"sequential seeds: looks {make_spec(args, 'power3').sequential.looks}, {args.comparisons} comparisons "
          f"with a reference, family α {args.alpha}, equivalence β {args.beta}, futility β {args.futility:g}; {args.sims} null studies, "
          f"{args.sims // 2} per effect; bands: family rate in the 99.9% band around α (Bonferroni: at most α), "
          "power within 0.03 of the fixed design at max, seeds used ≤ 80% of max at δ, ≤ 50% at 2δ, ≤ 70% under "
          "the null\n")
    head = (f"{'spending':<15}{'noise':>6} │ {'null: family':>12} {'per cmp':>8} {'(α/m)':>7} {'seeds':>6} │ "
            f"{'δ: power':>9} {'fixed':>6} {'loss':>6} {'equiv':>6} {'seeds':>6} │ {'2δ: power':>9} {'seeds':>6} │ bands")
    print(head)
    print("─" * len(head))
    for shape in args.spending:
        use_runner(args.futility)
        spec = make_spec(args, shape)
        delta = spec.stats.min_effect
        m = len(sequential_looks.comparisons(spec))
        for noise in args.noise:
            null = run_setting(spec, 0.0, noise * delta, args.sims, rng)
            one = run_setting(spec, delta, noise * delta, args.sims // 2, rng)
            two = run_setting(spec, 2 * delta, noise * delta, args.sims // 2, rng)
            per_lo, per_hi = band(null["level"], args.sims * m)
            _, fam_hi = band(args.alpha, args.sims)
            checks = {
                "family≤α": null["fwer"] <= fam_hi,
                "per-cmp≤α/m": null["per"] <= per_hi,
                "power": one["fixed"] - one["power"] <= 0.03,
                "δ≤.8": one["used"] <= 0.8,
                "2δ≤.5": two["used"] <= 0.5,
                "null≤.7": null["used"] <= 0.7,
            }
            verdict = "all" if all(checks.values()) else "misses " + ", ".join(k for k, v in checks.items() if not v)
            print(f"{shape:<15}{noise:>6.2f} │ {null['fwer']:>12.4f} {null['per']:>8.4f} {null['level']:>7.4f} "
                  f"{null['used']:>6.2f} │ {one['power']:>9.3f} {one['fixed']:>6.3f} {one['fixed'] - one['power']:>6.3f} "
                  f"{one['equivalent']:>6.3f} {one['used']:>6.2f} │ {two['power']:>9.3f} {two['used']:>6.2f} │ {verdict}",
                  flush=True)
    print(f"\nbands: per comparison α/m + {BAND}·se over {args.sims} × m comparisons; family α + {BAND}·se over "
          f"{args.sims} studies (the calibration part measures the efficacy boundaries alone). Stopping for equivalence or futility only "
          "lowers the false-positive rate (the efficacy boundaries do not count on them: non-binding), and Bonferroni over "
          "comparisons that share a reference is conservative: below the band is the price, not a miss.")


if __name__ == "__main__":
    main()
