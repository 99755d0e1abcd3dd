"""Whether the sequential looks keep their promises on the data training gives, not only on normal
noise: skewed, heavy-tailed and tied runs, and runs that blew up.

    python benchmarks/bench_sequential_robust.py [--sims 100000] [--noise 0.85] [--seed 5] [--tiny]

Each simulated comparison pairs a cell with the reference over seeds; each run's noise is drawn from
one of the distributions below (standardised: mean 0, sd 1), in the cell and in the reference alike,
so one paired difference (cell − reference) has sd ``noise`` × δ (δ = ``min_effect``; a seed effect
shared by both cancels in it) and mean θ, the true effect. The look rule of
``ablate.stats.group_sequential.decide`` (vectorised in ``looks``, tested against it) runs on them at
each design the runner builds (``runner.sequential_looks.designs``: power3 spending, equivalence
β 0.02, futility β 0.03):

- looks at 3, 5, …, 15, 16 seeds, 3 comparisons (α/m = 0.0167; the calibration benchmark's design);
- looks at 3, 6, 9, 4 comparisons (lru_ablations'; α/m = 0.0125);
- looks at 6, 12, one comparison (α = 0.05).

Per design and distribution it prints:

- **null FP**: at θ = 0, how often the comparison is called significant, against α/m (the top of a
  99.9 % Monte Carlo band: the rate may lie below it, never above);
- **RCI cover**: the smallest, over θ ∈ {0, ±δ/2, ±δ, ±2δ}, of how often the repeated confidence interval
  printed with the decision (at the look that stopped it, or the last) holds θ, against 1 − α/m;
- **EqI cover**: the same for the equivalence interval (estimate ± the equivalence boundary × se),
  against 1 − 2β;
- **equiv at ±δ**: how often a true effect of δ or −δ (the larger) is declared equivalent (within
  ±δ), against β (no look on fewer than 6 seeds may: ``stats.rules.EQUIVALENCE_MIN_SEEDS``);
- **futile at ±δ**: how often it is stopped as futile before the last look, against the futility
  boundary's β (0.03);
- **fixed exact**: for comparison, the fixed design's exact sign-flip test at the last look's seeds
  under θ = 0 (2,048 random sign patterns, on the first 4,000 comparisons), against α/m; and
  **fixed 95% CI cover**, the smallest over θ of how often its 95% interval of the difference (a t
  interval at 99%, ``stats.robust_level``) at those seeds holds θ, against 0.95; and **fixed equiv at
  ±δ**, how often that interval lies within ±δ (the fixed design's *equivalent*) when the effect is
  ±δ, against the 0.005 its 99% interval leaves on either side.

A line ends ``holds`` when every rate of the sequential design is on its side of its target (the
Monte Carlo error allowed for), else names what misses. Rates only; no time is measured.

The run distributions (each standardised), in every cell alike:

- ``normal``;
- ``t3``: Student's t with 3 df (heavy tails on both sides; infinite kurtosis);
- ``blow-up``: one run in seven loses Exp(6 sd) (runs that blew up and ended low);
- ``log-normal``: −exp(N(0, 1)) (skewness −6: a ceiling the runs mostly sit near, some far below);
- ``ties``: the normal rounded to half an sd (a test set's granularity: seeds tie).

Then the same two skewed ones in the cell only (``… cell only``: the reference's runs normal and
steady, sd ``STEADY`` of the cell's), where the paired difference itself is skewed and its mean, not
its median, is θ: no test of a mean on 3–16 seeds can hold its rate for every such distribution (the
fixed design's exact test does not either); those rows say how far each misses, and
docs/calibration.md what that means for a reader.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence

import numpy as np
from scipy import stats as sps

from ablate.stats.estimators import robust_level
from ablate.stats.group_sequential import FUTILITY_BETA, SequentialDesign

MIN_EFFECT = 1.0  # δ: the unit the noise and the effects are given in
BETA = 0.02  # the spec's default equivalence_beta
THETAS = (-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0)  # true effects, in δ (a skewed difference is not symmetric)

#: (label, looks, comparisons)
DESIGNS: list[tuple[str, tuple[int, ...], int]] = [
    ("3, 5, …, 16 · m 3", (3, 5, 7, 9, 11, 13, 15, 16), 3),
    ("3, 6, 9 · m 4", (3, 6, 9), 4),
    ("6, 12 · m 1", (6, 12), 1),
]


def _blow_up(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    p, loss = 1 / 7, 6.0
    x = rng.normal(0.0, 1.0, shape) - (rng.random(shape) < p) * rng.exponential(loss, shape)
    mean, var = -p * loss, 1.0 + p * 2 * loss**2 - (p * loss) ** 2
    return (x - mean) / math.sqrt(var)


def _lognormal(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    mean, var = math.exp(0.5), (math.e - 1) * math.e
    return -(np.exp(rng.normal(0.0, 1.0, shape)) - mean) / math.sqrt(var)


def _ties(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    x = np.round(rng.normal(0.0, 1.0, shape) * 2) / 2
    return x / math.sqrt(1.0 + 1 / 48)  # rounding to a grid of h adds h²/12 of variance


Draw = Callable[[np.random.Generator, tuple[int, ...]], np.ndarray]


def _normal(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.normal(0.0, 1.0, shape)


RUNS: dict[str, Draw] = {
    "normal": _normal,
    "t3": lambda rng, shape: rng.standard_t(3, shape) / math.sqrt(3.0),
    "blow-up": _blow_up,
    "log-normal": _lognormal,
    "ties": _ties,
}


def _both(draw: Draw) -> Draw:
    """A paired difference (standardised) of two runs whose noise is ``draw``'s."""
    return lambda rng, shape: (draw(rng, shape) - draw(rng, shape)) / math.sqrt(2.0)


#: In the rows where only the cell's runs are skewed, the reference's normal noise has this sd against
#: the cell's: a steady reference, so the paired difference is nearly the cell's own skewed noise.
STEADY = 0.25


def _cell_only(draw: Draw) -> Draw:
    """A paired difference (standardised) of a cell run whose noise is ``draw``'s and a steady normal one."""
    return lambda rng, shape: (draw(rng, shape) - STEADY * _normal(rng, shape)) / math.sqrt(1 + STEADY**2)


DISTRIBUTIONS: dict[str, Draw] = {
    **{name: _both(draw) for name, draw in RUNS.items()},
    **{f"{name}, cell only": _cell_only(RUNS[name]) for name in ("blow-up", "log-normal")},
}


def design(looks: tuple[int, ...], comparisons: int) -> SequentialDesign:
    """As ``runner.sequential_looks.designs`` builds it for an accuracy measure at the defaults."""
    return SequentialDesign(looks, alpha=0.05, comparisons=comparisons, shape="power3", beta=BETA,
                            min_effect=MIN_EFFECT, futility_beta=FUTILITY_BETA)


def looks(d: SequentialDesign, diffs: np.ndarray) -> dict[str, np.ndarray]:
    """``decide``'s rule look by look on ``diffs`` (the last axis runs over seeds): per comparison its
    ``decision`` (significant, equivalent, or futile — at the last look: undecided, also without
    spread), the ``n`` it stopped at, and there ``est``, ``se``, the efficacy ``bound`` and
    the ``equivalence_bound`` (NaN where it had no spread)."""
    shape = diffs.shape[:-1]
    out = {"decision": np.full(shape, "open", dtype=object), "n": np.full(shape, d.looks[-1])}
    for key in ("est", "se", "bound", "equivalence_bound"):
        out[key] = np.full(shape, np.nan)
    open_ = np.ones(shape, bool)
    bounds = zip(d.efficacy_t(), d.equivalence_t(), d.futility_t(), strict=True)
    for k, (n, (b, q, f)) in enumerate(zip(d.looks, bounds, strict=True)):
        x = diffs[..., :n]
        est, se = x.mean(-1), x.std(-1, ddof=1) / math.sqrt(n)
        last = k == len(d.looks) - 1
        spread = se > 0  # no spread: no test (open; at the last look undecided, with no interval)
        with np.errstate(divide="ignore", invalid="ignore"):
            sig = open_ & spread & (np.abs(est / se) >= b)
            eqv = open_ & spread & ~sig & (est + q * se < d.min_effect) & (est - q * se > -d.min_effect)
            fut = open_ & ~sig & ~eqv & (last | (spread & (np.abs(est) + f * se < d.min_effect)))
        for mask, word in ((sig, "significant"), (eqv, "equivalent"), (fut, "futile")):
            out["decision"][mask] = word
            out["n"][mask] = n
            tested = mask & spread
            for key, value in (("est", est), ("se", se), ("bound", b), ("equivalence_bound", q)):
                out[key][tested] = value[tested] if isinstance(value, np.ndarray) else value
        open_ &= ~(sig | eqv | fut)
    return out


def _covers(r: dict[str, np.ndarray], width: str, theta: float) -> float:
    """Share of comparisons whose interval (est ± ``width`` × se, at their stop) holds ``theta``;
    one without an interval (no spread at the last look) counts as a miss."""
    half = r[width] * r["se"]
    return float(np.mean(np.abs(r["est"] - theta) <= half))


def _short(rate: float, target: float, n: int) -> bool:
    """Whether a coverage ``rate`` lies below ``target`` beyond its Monte Carlo error (99.9 %)."""
    return rate < target - 3.29 * math.sqrt(target * (1 - target) / n)


def sign_flip_rejects(diffs: np.ndarray, level: float, flips: int, rng: np.random.Generator) -> float:
    """The share of rows of ``diffs`` the fixed design's exact paired test (sign flips of the mean,
    Monte Carlo over ``flips`` patterns) rejects at ``level``."""
    signs = rng.choice((-1.0, 1.0), size=(flips, diffs.shape[-1]))
    observed = np.abs(diffs.sum(-1))
    beyond = (np.abs(diffs @ signs.T) >= observed[:, None] - 1e-12).sum(-1)
    return float(np.mean((1 + beyond) / (1 + flips) <= level))


def measure(label: str, d: SequentialDesign, dist: str, noise: float, sims: int, rng: np.random.Generator
            ) -> tuple[str, bool]:
    n_max = d.looks[-1]
    draw = DISTRIBUTIONS[dist]
    rci, eqi, equiv_at_delta, null_fp, fixed_fp, fixed_ci = 1.0, 1.0, math.nan, math.nan, math.nan, 1.0
    futile_at_delta, fixed_eq = 0.0, 0.0
    # The fixed design's interval at max seeds: its 95% is a t interval at robust_level(0.95) = 99%.
    q = float(sps.t.ppf(0.5 + robust_level(0.95) / 2, n_max - 1))
    for theta in THETAS:
        diffs = theta * d.min_effect + noise * d.min_effect * draw(rng, (sims, n_max))
        r = looks(d, diffs)
        half = q * diffs.std(-1, ddof=1) / math.sqrt(n_max)
        fixed_ci = min(fixed_ci, float(np.mean(np.abs(diffs.mean(-1) - theta * d.min_effect) <= half)))
        if abs(theta) == 1.0:  # its "equivalent": that interval within ±δ
            fixed_eq = max(fixed_eq, float(np.mean(np.abs(diffs.mean(-1)) + half < d.min_effect)))
        rci = min(rci, _covers(r, "bound", theta * d.min_effect))
        eqi = min(eqi, _covers(r, "equivalence_bound", theta * d.min_effect))
        if theta == 0.0:
            null_fp = float(np.mean(r["decision"] == "significant"))
            fixed_fp = sign_flip_rejects(diffs[:4000], d.level, 2048, rng)
        if abs(theta) == 1.0:
            equiv_at_delta = max(float(np.mean(r["decision"] == "equivalent")), np.nan_to_num(equiv_at_delta))
            futile_at_delta = max(futile_at_delta, float(np.mean((r["decision"] == "futile") & (r["n"] < n_max))))
    level = d.level
    top = level + 3.29 * math.sqrt(level * (1 - level) / sims)
    beta_top = BETA + 3.29 * math.sqrt(BETA * (1 - BETA) / sims)
    futility_top = FUTILITY_BETA + 3.29 * math.sqrt(FUTILITY_BETA * (1 - FUTILITY_BETA) / sims)
    misses = [what for what, bad in (("null FP", null_fp > top), ("RCI", _short(rci, 1 - level, sims)),
                                     ("EqI", _short(eqi, 1 - 2 * BETA, sims)), ("equiv at ±δ", equiv_at_delta > beta_top),
                                     ("futile at ±δ", futile_at_delta > futility_top))
              if bad]
    line = (f"| {label} | {dist} | {null_fp:.4f} (≤ {level:.4f}) | {rci:.4f} (≥ {1 - level:.4f}) | "
            f"{eqi:.4f} (≥ {1 - 2 * BETA:.2f}) | {equiv_at_delta:.4f} (≤ {BETA}) | "
            f"{futile_at_delta:.4f} (≤ {FUTILITY_BETA:g}) | {fixed_fp:.4f} | {fixed_ci:.4f} | {fixed_eq:.4f} | "
            + ("holds" if not misses else "misses " + ", ".join(misses)) + " |")
    return line, not misses


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sims", type=int, default=100_000, help="comparisons simulated per design, distribution and θ")
    ap.add_argument("--noise", type=float, default=0.85, help="sd of one paired difference, in units of δ")
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--tiny", action="store_true", help="2,000 comparisons, two designs (seconds, for the tests)")
    args = ap.parse_args(argv)
    sims, designs = (2_000, DESIGNS[1:]) if args.tiny else (args.sims, DESIGNS)
    rng = np.random.default_rng(args.seed)
    print(f"paired sd {args.noise:g} δ; {sims:,} comparisons per design, distribution and θ ∈ "
          f"{{{', '.join(f'{t:g}δ' for t in THETAS)}}}; the coverages are the smallest over θ")
    print("| design | differences | null FP (≤ α/m) | RCI cover (≥ 1 − α/m) | EqI cover (≥ 1 − 2β) | "
          "equiv at ±δ (≤ β) | futile at ±δ | fixed exact, null FP (≤ α/m) | fixed 95% CI cover | "
          "fixed equiv at ±δ (≤ 0.005) | |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for label, looks_at, m in designs:
        d = design(looks_at, m)
        for dist in DISTRIBUTIONS:
            print(measure(label, d, dist, args.noise, sims, rng)[0], flush=True)


if __name__ == "__main__":
    main()
