"""Calibration and power of sequential seeds (``seeds: {min, max, step, until: decided}``).

    python benchmarks/bench_sequential.py [--sims 2000] [--noise 0.6 0.85 1.0] [--seed 3]
        [--min 3 --max 16 --step 2] [--comparisons 3] [--spending power3 obrien_fleming]
        [--futility 0.03]

Each simulated study has a reference and ``--comparisons`` other cells; every cell has a seed
effect shared by all cells of a seed (a data order; it cancels in the paired differences) and its
own run-to-run noise, sized so that one paired difference has sd ``noise`` × δ, δ being
``stats.min_effect``. The looks are run by exactly the rule of the runner
(``ablate.runner.sequential.step`` on a real spec: analyse the open comparisons on the first n_k
seeds, record decisions, add ``step`` seeds to the cells of open comparisons and the reference).

``--futility`` is what the non-binding futility boundary spends of the power against δ (default:
the design's, ``ablate.stats.sequential.FUTILITY_BETA``; 0 switches it off, the rule before it
existed, so those rows compare with earlier tables).

Per spending shape it first runs the null with the efficacy boundaries alone (equivalence and
futility spending nothing, so nothing stops early for them): their per-comparison false-positive rate must be
α/m within its 99.9% band — the check that the boundaries and their t-scale conversion are right.
Then per noise level, against the issue's bands:

- **null** (no effect anywhere): the family-wise false-positive rate (any comparison significant)
  with its 99.9% Monte Carlo band around α, the per-comparison rate against α/m, and the average
  seeds used (over every cell, the reference included) as a fraction of ``max``;
- **δ** (every comparison's true effect min_effect): the power (significant, right sign), the
  fixed design's at ``max`` seeds on the same draws (paired t at α/m), the loss, how often
  "equivalent" was declared (wrongly: the effect is δ), and the seeds used;
- **2δ**: the power and the seeds used.

Rates only; no time is measured.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from collections.abc import Callable

import numpy as np
from scipy import stats as sps

from ablate import spec as spec_mod
from ablate.runner import sequential
from ablate.stats.sequential import FUTILITY_BETA

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


RUNNER = {name: getattr(sequential, name) for name in ("reference_cell", "comparisons", "designs")}


def use_runner(futility: float) -> None:
    """The runner's look rule as it is, its pure functions of the spec memoised; the designs'
    futility spending ``futility`` (the runner takes the design's default)."""
    sequential.reference_cell = _per_spec(RUNNER["reference_cell"])
    sequential.comparisons = _per_spec(RUNNER["comparisons"])
    sequential.designs = _per_spec(RUNNER["designs"], futility)


def make_spec(args: argparse.Namespace, shape: str, beta: float | None = None) -> spec_mod.Spec:
    raw = dict(BASE)
    raw["factors"] = {"model.heads": [1, 2, 4, 8, 16][: args.comparisons + 1]}
    raw["seeds"] = {"min": args.min, "max": args.max, "step": args.step, "spending": shape,
                    "alpha": args.alpha, "equivalence_beta": args.beta if beta is None else beta}
    return spec_mod.parse(raw)


def simulate(spec: spec_mod.Spec, effect: float, sd_diff: float, rng: np.random.Generator
             ) -> tuple[sequential.State, dict[str, np.ndarray]]:
    """One study run to its end by the runner's rule: its final state and the values drawn."""
    seq = spec.sequential
    ref = sequential.reference_cell(spec)
    cells = [c.id for c in sequential.design.cells(spec)]
    n, sd_run = seq.max, sd_diff / math.sqrt(2.0)
    seed_effect = rng.normal(0.0, 0.02, n)
    drawn = {c: 0.6 + seed_effect + rng.normal(0.0, sd_run, n) + (0.0 if c == ref else effect) for c in cells}
    values = {"test_accuracy": {c: dict(zip(spec.seed_list, v.tolist(), strict=True)) for c, v in drawn.items()}}
    st = sequential.State(planned={c: seq.looks[0] for c in cells})
    while not st.finished:
        sequential.step(spec, st, values)
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
    ref = sequential.reference_cell(spec)
    m = len(sequential.comparisons(spec))
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


def main() -> None:
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
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
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
        # The efficacy boundaries alone (equivalence spends next to nothing and futility nothing, so
        # no comparison stops early for them): their per-comparison rate must be α/m, whatever the noise.
        use_runner(0.0)
        bare = make_spec(args, shape, beta=1e-9)
        alone = run_setting(bare, 0.0, bare.stats.min_effect, args.sims, rng)
        lo, hi = band(alone["level"], args.sims * len(sequential.comparisons(bare)))
        print(f"{shape:<15}{'alone':>6} │ {alone['fwer']:>12.4f} {alone['per']:>8.4f} {alone['level']:>7.4f} "
              f"{alone['used']:>6.2f} │ efficacy boundaries only: per-comparison rate in [{lo:.4f}, {hi:.4f}]: "
              f"{'yes' if lo <= alone['per'] <= hi else 'NO'}", flush=True)
        use_runner(args.futility)
        spec = make_spec(args, shape)
        delta = spec.stats.min_effect
        m = len(sequential.comparisons(spec))
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
    print(f"\nbands: per comparison α/m ± {BAND}·se over {args.sims} × m comparisons (with the efficacy boundaries "
          f"alone); family α + {BAND}·se over {args.sims} studies. Stopping for equivalence or futility only "
          "lowers the false-positive rate (the efficacy boundaries do not count on them: non-binding), and Bonferroni over "
          "comparisons that share a reference is conservative: below the band is the price, not a miss.")


if __name__ == "__main__":
    main()
