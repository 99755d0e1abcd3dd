"""Why the sequential benchmark's bands cannot all hold at a paired sd of 1.0 δ: the trade-offs of
the design's choices, measured fast enough to sweep.

    python benchmarks/bench_sequential_frontier.py [--sims 10000] [--noise 0.85 1.0] [--tiny]

The look rule of ``ablate.stats.group_sequential.decide``, vectorised (``bench_sequential_robust.looks``) (paired t; significant,
equivalent, futile, on the design's own boundaries) over simulated studies shaped as in
``bench_sequential.py`` (a reference and three cells, looks at 3, 5, …, 15, 16 seeds; seeds counted
over every cell, the reference at its latest comparison's stop). It agrees with that benchmark,
which runs the runner itself, within Monte Carlo error; use it to explore, that one for the table.
Rows: the efficacy spending shapes alone (no equivalence or futility stop), then the default
design with the futility spending raised, then the fixed design's power by seeds. ``--tiny``: 400
studies per setting at one noise level (seconds, for the tests).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from scipy import stats as sps

from ablate.stats.group_sequential import SequentialDesign

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_sequential_robust import looks  # noqa: E402  (the vectorised look rule, tested against decide)

COMPARISONS = 3


def stops(design: SequentialDesign, diffs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per comparison (the last axis of ``diffs`` runs over seeds): the seeds at which it was
    decided, and its estimate's sign where significant (0 elsewhere): ``bench_sequential_robust.looks``,
    the one vectorised copy of the look rule."""
    r = looks(design, diffs)
    significant = r["decision"] == "significant"
    return r["n"], np.where(significant, np.sign(np.nan_to_num(r["est"])), 0.0)


def simulate(design: SequentialDesign, effect: float, sd: float, sims: int, rng: np.random.Generator
             ) -> dict[str, float]:
    """Power (right sign), the fixed design's at the last look, and the seeds used (share of max)."""
    n_max = design.looks[-1]
    run = sd / math.sqrt(2.0)  # one cell's run-to-run noise: a paired difference has sd ``sd``
    diffs = rng.normal(effect, run, (sims, COMPARISONS, n_max)) - rng.normal(0.0, run, (sims, 1, n_max))
    stop, sign = stops(design, diffs)
    right = sign == np.sign(effect)
    t = diffs.mean(-1) / (diffs.std(-1, ddof=1) / math.sqrt(n_max))
    fixed = (2 * sps.t.sf(np.abs(t), n_max - 1) < design.level) & (np.sign(t) == np.sign(effect))
    used = (stop.sum(1) + stop.max(1)) / (COMPARISONS + 1) / n_max
    return {"power": float(right.mean()), "fixed": float(fixed.mean()), "used": float(used.mean())}


def line(label: str, design: SequentialDesign, sd: float, sims: int, seed: int) -> str:
    rng = np.random.default_rng(seed)
    null, one, two = (simulate(design, e, sd, n, rng) for e, n in ((0.0, sims), (1.0, sims), (2.0, sims)))
    loss = one["fixed"] - one["power"]
    ok = {"power": loss <= 0.03, "δ≤.8": one["used"] <= 0.8, "2δ≤.5": two["used"] <= 0.5, "null≤.7": null["used"] <= 0.7}
    verdict = "all" if all(ok.values()) else "misses " + ", ".join(k for k, v in ok.items() if not v)
    return (f"{label:<38}{sd:>5.2f} │ null seeds {null['used']:.3f} │ δ: power {one['power']:.3f} fixed "
            f"{one['fixed']:.3f} loss {loss:.3f} seeds {one['used']:.3f} │ 2δ seeds {two['used']:.3f} │ {verdict}")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sims", type=int, default=10000, help="studies per setting")
    parser.add_argument("--noise", type=float, nargs="+", default=[0.85, 1.0], help="paired sd in units of δ")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--tiny", action="store_true", help="400 studies per setting, one noise level")
    args = parser.parse_args(argv)
    if args.tiny:
        args.sims, args.noise = min(args.sims, 400), args.noise[:1]
    # the spec's default efficacy spending (ablate.spec: seeds.spending)
    base = SequentialDesign.of(3, 16, 2, comparisons=COMPARISONS, min_effect=1.0, shape="power3")
    for sd in args.noise:
        for shape in ("power2", "power2.5", "power3", "power4", "obrien_fleming"):
            bare = dataclasses.replace(base, shape=shape, beta=1e-9, futility_beta=0.0)
            print(line(f"{shape}, efficacy alone", bare, sd, args.sims, args.seed), flush=True)
        for fut in (0.0, base.futility_beta, 0.05, 0.08, 0.12):
            print(line(f"power3, equivalence, futility β {fut:g}", dataclasses.replace(base, futility_beta=fut),
                       sd, args.sims, args.seed), flush=True)
        crit = [(n, sps.nct.sf(sps.t.isf(base.level / 2, n - 1), n - 1, math.sqrt(n) / sd)) for n in range(8, 17)]
        print(f"fixed design at α/m, paired sd {sd:g} δ: power at δ by seeds: "
              + ", ".join(f"{n}: {p:.3f}" for n, p in crit), flush=True)


if __name__ == "__main__":
    main()
