"""Group-sequential comparisons: seeds added look by look until a comparison is decided, with
error rates that hold under that data-dependent stopping.

A comparison of a cell with its reference is looked at after n₁ < n₂ < … < n_K seeds (the spec's
``seeds: {min, max, step}``); its information fraction at look k is t_k = n_k / n_K. Three ways a
look can decide it, and one way it can end undecided:

    significant   |t| of the paired (or Welch) t statistic at or past the look's efficacy boundary
    equivalent    both one-sided tests of |effect| ≥ min_effect reject at the look's equivalence
                  boundary: the effect is smaller than min_effect either way
    futile        before the last look, the one-sided tests of an effect of ±min_effect (toward the
                  estimate's side and the other) reject at the look's futility boundary: an effect
                  as large as min_effect has become unlikely, so more seeds would rarely make it
                  significant (non-binding β-spending futility)
    undecided     the last look (n_K seeds) with none of the above: the seeds ran out; nothing says
                  the effect is absent (its interval may still hold min_effect and more)

``decide`` records the last two alike, as ``futile`` (the runner stops either way); what it stores
with them tells them apart — a futility stop has the finite ``futility_bound`` it fell under, the
last look's futility boundary is infinite — and ``runner.sequential_looks.outcome`` says which, for
every report and status line.

**Boundaries** come from Lan–DeMets α-spending (Lan & DeMets 1983): the efficacy test spends its
two-sided α along α(t) — O'Brien–Fleming shape ``2 − 2Φ(z_{α/2}/√t)`` (little early, close to the
fixed test at the end) or Pocock shape ``α log(1 + (e − 1)t)`` — and the boundary at each look is
the z whose crossing probability, given no earlier crossing, is what the look spends (computed
exactly for Brownian motion by recursive numerical integration, Armitage, McPherson & Rowe 1969;
Jennison & Turnbull 2000 ch. 19). The equivalence tests spend ``beta`` (default 0.02) the same
way, one-sided per side, with the Pocock shape so that they can stop early: declaring equivalence
when the effect is min_effect has probability at most ``beta``, so it costs the efficacy test at
most that much power. No look on fewer than ``EQUIVALENCE_MIN_SEEDS`` (6) seeds declares
equivalence (its boundary is infinite there; what it would have spent is left unspent, which only
lowers the rate): a claim that nothing happens needs seeds enough to have seen a rare failure.

**Futility** (Jennison & Turnbull 2000 §7.2; gsDesign's non-binding β-spending bounds): the
futility boundary spends ``futility_beta`` (default 0.03) of the power against an effect of
min_effect along the power2 shape (β t²): at look k the comparison stops as futile when the
statistic is below the boundary under that alternative, ``|estimate| + f_k × se < min_effect``,
f_k the one-sided boundary of the β spending (the drift under min_effect is min_effect / se at the
look's own standard error, so no planning variance is needed). It is the equivalence test's shape
at a weaker level, and claims less: not that the effect is within ±min_effect, only that the power
to find one of min_effect is spent. Stopping with an effect of min_effect happens at most with
probability ``futility_beta``; since most such paths would not have become significant either,
it costs less power than that (about 0.006 at a paired sd of 0.85 min_effect, where it cuts the
seeds a null study uses from 77% to 71% of the last look's: ``benchmarks/bench_sequential_frontier.py``).
The power2 shape spends little at the first looks, where the t boundaries at 2–6 degrees of
freedom are wide, and more from the middle on, where it saves most seeds under no effect. The
efficacy boundaries ignore it (non-binding): whether or not a study stops at the futility
boundary, its false-positive rate is what the α-spending gives, so a study that started without
it (or ignores it) keeps its error rate.

**On the t scale.** The looks test with the paired t statistic, whose sd is estimated from the
same few seeds, so the Brownian-motion boundaries above (known sd) do not hold its rate: turned
into t boundaries by matching each look's tail probability, they let 0.0185 (power3) and 0.0190
(O'Brien–Fleming) through per comparison at α/m = 0.0167 with looks at 3, 5, …, 16 seeds. The
boundaries used are therefore computed for the t statistics themselves (``t_boundaries``): the joint
law of the paired t statistics T_1, …, T_K on the first n_1 < … < n_K of n_K independent normal
differences under no effect does not depend on their sd, so ``PATHS`` (2²⁰) such sequences are
simulated once per set of looks with a fixed seed (``t_paths``, kept in memory), and look k's
boundary is the value that exactly the share of the simulated paths the look spends crosses there
for the first time. The first look's is the exact t quantile; a later look that spends fewer than
``MIN_PATHS`` paths' worth gets the t quantile of what it spends, ignoring the earlier looks
(conservative). The crossing probabilities are then off by Monte Carlo error alone, about
√(α/PATHS) (1.3·10⁻⁴ at α = 0.0167); ``benchmarks/bench_sequential.py`` measures the rate. A look
analysed on another number of seeds (runs that failed) or with Welch's df takes its boundary's
tail probability to its own degrees of freedom (an approximation there).

**Valid inference after a data-dependent stop.** A look's repeated confidence interval, estimate ±
boundary × se, covers the effect at every look at once with probability 1 − α (Jennison & Turnbull
1989); the p-value of a decided comparison is the stage-wise one (the probability under no effect
of crossing earlier, or at the decision look beyond the observed statistic). A fixed-design p or
interval is never reported after a sequential stop.

Several comparisons share α by Bonferroni: each runs its own sequential test at α/m, so the family
errs with probability at most α however the comparisons' looks and stops interleave.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np
from scipy.special import ndtr, ndtri, stdtr, stdtrit

from ablate.stats.rules import EQUIVALENCE_MIN_SEEDS

__all__ = [
    "FUTILITY_BETA",
    "FUTILITY_SHAPE",
    "SHAPES",
    "SequentialDesign",
    "boundaries",
    "decide",
    "spent",
    "stagewise_p",
    "t_bound",
    "t_boundaries",
    "t_paths",
    "t_stagewise_p",
]

#: The α-spending shapes: name → α(t) for total α.
SHAPES = ("obrien_fleming", "pocock")
#: The futility boundary's default spending: β = 0.03 of the power against min_effect along β t²
#: (chosen on benchmarks/bench_sequential.py, where with the t boundaries every band holds at a
#: paired sd of 0.6 min_effect and, at 0.85, power holds and null seeds miss theirs narrowly:
#: docs/calibration.md).
FUTILITY_BETA = 0.03
FUTILITY_SHAPE = "power2"
GRID = 801  # points of the numerical integration per look (error ≪ 1e-5 on the boundaries)


def spent(t: float, alpha: float, shape: str) -> float:
    """The α spent by information fraction ``t`` (0 ≤ t ≤ 1) of a two-sided total ``alpha``."""
    if t <= 0:
        return 0.0
    t = min(1.0, t)
    if shape == "obrien_fleming":
        return float(2.0 - 2.0 * ndtr(ndtri(1.0 - alpha / 2.0) / math.sqrt(t)))
    if shape == "pocock":
        return float(alpha * math.log(1.0 + (math.e - 1.0) * t))
    if shape.startswith("power"):  # power2: α t² (Kim & DeMets' power family; between the two above)
        return float(alpha * t ** float(shape[5:] or 2))
    raise ValueError(f"spending shape {shape!r} is not one of: {', '.join(SHAPES)}")


def _norm_pdf(x: np.ndarray) -> np.ndarray:
    return np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)


class _Process:
    """The density of the Brownian score W(t_k) = Z_k √t_k on the continuation region, look by look."""

    def __init__(self) -> None:
        self.t = 0.0
        self.grid: np.ndarray | None = None  # points of W
        self.weight: np.ndarray | None = None  # density × quadrature weight

    def exit(self, t: float, upper: float, lower: float) -> float:
        """Probability of ending at the look at fraction ``t`` above ``upper`` or below ``lower``
        (on the z scale), given it continued at every look so far."""
        s = math.sqrt(t)
        if self.grid is None:
            return float(1.0 - ndtr(upper) + ndtr(lower))
        sd = math.sqrt(t - self.t)
        hi = (upper * s - self.grid) / sd
        lo = (lower * s - self.grid) / sd
        return float(np.sum(self.weight * (1.0 - ndtr(hi) + ndtr(lo))))

    def advance(self, t: float, upper: float, lower: float) -> None:
        """Move to the look at ``t`` and keep the paths that continued (lower < Z < upper)."""
        s = math.sqrt(t)
        lo, hi = max(lower, -12.0) * s, min(upper, 12.0) * s
        grid = np.linspace(lo, hi, GRID)
        quad = np.full(GRID, (hi - lo) / (GRID - 1))
        quad[[0, -1]] *= 0.5
        if self.grid is None:
            density = _norm_pdf(grid / s) / s
        else:
            sd = math.sqrt(t - self.t)
            density = (_norm_pdf((grid[:, None] - self.grid[None, :]) / sd) / sd) @ self.weight
        self.t, self.grid, self.weight = t, grid, density * quad


@lru_cache(maxsize=256)
def boundaries(fractions: tuple[float, ...], alpha: float, shape: str = "obrien_fleming",
               sides: int = 2) -> tuple[float, ...]:
    """The z boundaries of a group-sequential test at information ``fractions`` (increasing, the
    last 1) spending ``alpha`` along ``shape``: two-sided (|Z_k| ≥ c_k) or one-sided (Z_k ≥ c_k).
    A look that would spend nothing gets an infinite boundary."""
    if not fractions or any(b <= a for a, b in zip(fractions, fractions[1:], strict=False)):
        raise ValueError(f"information fractions must increase: {fractions}")
    proc, out, before = _Process(), [], 0.0
    for t in fractions:
        target = spent(t, alpha, shape) - before
        before += target
        if target <= 1e-15:
            out.append(math.inf)
            proc.advance(t, math.inf, -math.inf if sides == 2 else -math.inf)
            continue

        def excess(c: float, t: float = t, target: float = target) -> float:
            return proc.exit(t, c, -c if sides == 2 else -math.inf) - target

        from scipy import optimize  # here: status, plan and run import this module, boundaries are rare

        c = optimize.brentq(excess, 0.0, 40.0, xtol=1e-10)
        out.append(float(c))
        proc.advance(t, c, -c if sides == 2 else -math.inf)
    return tuple(out)


@lru_cache(maxsize=256)
def _continued(fractions: tuple[float, ...], bounds: tuple[float, ...]) -> tuple[_Process, ...]:
    """The process kept on the continuation region after each look (a fresh one first), so that
    a look's stage-wise p costs one integration instead of all the looks' again."""
    procs = [_Process()]
    for t, c in zip(fractions, bounds, strict=False):
        nxt = _Process()
        nxt.t, nxt.grid, nxt.weight = procs[-1].t, procs[-1].grid, procs[-1].weight
        nxt.advance(t, c, -c)
        procs.append(nxt)
    return tuple(procs)


def stagewise_p(fractions: Sequence[float], bounds: Sequence[float], k: int, z: float) -> float:
    """The two-sided stage-wise p-value of stopping at look ``k`` (0-based) with statistic ``z``:
    under no effect, the probability of crossing a boundary at an earlier look, or at look ``k``
    with |Z| ≥ |z| (Jennison & Turnbull 2000 §8.4)."""
    procs = _continued(tuple(fractions[:k]), tuple(bounds[:k]))
    p = sum(procs[j].exit(fractions[j], bounds[j], -bounds[j]) for j in range(k) if math.isfinite(bounds[j]))
    p += procs[k].exit(fractions[k], abs(z), -abs(z))
    return float(min(1.0, p))


def t_bound(z: float, df: float) -> float:
    """The t boundary with the tail probability of the z boundary ``z`` at ``df`` degrees of freedom."""
    if not math.isfinite(z):
        return math.inf
    tail = float(ndtr(-z))
    if tail <= 1e-300:
        return math.inf
    return float(-stdtrit(df, tail))


#: Simulated t paths per set of looks, their generator's seed, and the fewest crossings a look's
#: boundary is read from (below it the look's own t quantile, conservative); see the docstring.
PATHS = 1 << 20
PATH_SEED = 20_260_105
MIN_PATHS = 100


def at_df(c: float, df_from: float, df_to: float) -> float:
    """The t boundary at ``df_to`` degrees of freedom with the tail probability that ``c`` has at
    ``df_from``."""
    if not math.isfinite(c) or df_from == df_to:
        return c
    tail = float(stdtr(df_from, -c))
    return math.inf if tail <= 1e-300 else float(-stdtrit(df_to, tail))


def _check_looks(looks: tuple[int, ...]) -> None:
    if not looks or looks[0] < 2 or any(b <= a for a, b in zip(looks, looks[1:], strict=False)):
        raise ValueError(f"looks must be increasing seed counts from 2 on: {looks}")


@lru_cache(maxsize=4)
def t_paths(looks: tuple[int, ...]) -> np.ndarray:
    """The paired t statistics of ``PATHS`` simulated studies under no effect at each look (rows;
    float32): the first n_k of n_K independent N(0, 1) differences. Their law is that of any sd,
    so these serve every design with these looks. Seeded: the same numbers on every call."""
    _check_looks(looks)
    rng = np.random.default_rng([PATH_SEED, *looks])
    out = np.empty((len(looks), PATHS), np.float32)
    n, mean, ss = 0, np.zeros(PATHS), np.zeros(PATHS)
    for k, nk in enumerate(looks):
        # the new seeds enter through their mean and their own sum of squares (Chan et al.'s update)
        m = nk - n
        block = rng.standard_normal(PATHS) / math.sqrt(m)
        within = rng.chisquare(m - 1, PATHS) if m > 1 else 0.0
        ss = ss + within + (n * m / nk) * (mean - block) ** 2
        mean = (n * mean + m * block) / nk
        n = nk
        out[k] = mean / np.sqrt(ss / ((nk - 1) * nk))
    return out


@lru_cache(maxsize=64)
def _t_design(looks: tuple[int, ...], alpha: float, shape: str, sides: int
              ) -> tuple[tuple[float, ...], tuple[np.ndarray, ...], tuple[float, ...]]:
    """The t boundaries, and per look the sorted |T_k| of the paths that crossed earlier with
    their share (for the stage-wise p; two-sided only)."""
    paths = t_paths(looks)
    if sides == 1:  # T and −T are equally likely: both halves of the sample count
        paths = np.concatenate([paths, -paths], axis=1)
    else:
        paths = np.abs(paths)
    size = paths.shape[1]
    alive = np.ones(size, bool)
    bounds: list[float] = []
    earlier: list[np.ndarray] = []
    shares: list[float] = []
    before = 0.0
    for k, n in enumerate(looks):
        stat = paths[k]
        earlier.append(np.sort(stat[~alive]) if sides == 2 else np.empty(0, np.float32))
        shares.append(float(1.0 - alive.mean()))
        now = spent(n / looks[-1], alpha, shape)
        target, before = now - before, now
        count = int(round(target * size))
        if target <= 1e-15:
            c = math.inf
        elif k == 0 or count < MIN_PATHS:
            c = float(stdtrit(n - 1, 1.0 - target / sides))
        else:
            cand = stat[alive]
            cut = cand.size - count
            part = np.partition(cand, [cut - 1, cut])
            c = float(0.5 * (float(part[cut - 1]) + float(part[cut])))
        bounds.append(c)
        alive &= stat < c
    return tuple(bounds), tuple(earlier), tuple(shares)


def t_boundaries(looks: tuple[int, ...], alpha: float, shape: str = "obrien_fleming", sides: int = 2
                 ) -> tuple[float, ...]:
    """The boundaries on the scale of the paired t statistic at each look's n_k − 1 degrees of
    freedom (looks: seed counts) spending ``alpha`` along ``shape``: two-sided (|T_k| ≥ c_k) or
    one-sided (T_k ≥ c_k). A look that would spend nothing gets an infinite boundary."""
    return _t_design(tuple(int(n) for n in looks), float(alpha), shape, int(sides))[0]


def t_stagewise_p(looks: tuple[int, ...], alpha: float, shape: str, k: int, t: float, df: float | None = None
                  ) -> float:
    """The two-sided stage-wise p of stopping at look ``k`` (0-based) with t statistic ``t`` (at
    ``df`` degrees of freedom, default the look's n_k − 1): under no effect, the chance of crossing a
    boundary earlier, or at look ``k`` with |T_k| ≥ |t| — the latter as the t tail less the
    simulated paths that crossed before and are there as well (exact at the first look)."""
    _, earlier, shares = _t_design(tuple(int(n) for n in looks), float(alpha), shape, 2)
    n = looks[k]
    a = abs(at_df(abs(t), df, n - 1)) if df is not None else abs(t)
    tail = 2.0 * float(stdtr(n - 1, -a))
    both = (earlier[k].size - np.searchsorted(earlier[k], a, side="left")) / PATHS
    return float(min(1.0, max(shares[k] + tail - both, 0.0)))


@dataclass(frozen=True)
class SequentialDesign:
    """The looks (seeds per cell at each), the comparisons' family, and the spending.

    ``alpha`` is the family's; each of the ``comparisons`` spends ``alpha / comparisons``
    (Bonferroni). ``beta`` is what each equivalence test spends (one-sided, per side);
    ``futility_beta`` what the non-binding futility boundary spends of the power against
    ``min_effect`` (0: no futility stop before the last look); no look on fewer than
    ``equivalence_min_seeds`` seeds declares equivalence."""

    looks: tuple[int, ...]
    alpha: float = 0.05
    comparisons: int = 1
    shape: str = "obrien_fleming"
    beta: float = 0.02
    beta_shape: str = "pocock"
    min_effect: float = 0.01
    futility_beta: float = FUTILITY_BETA
    futility_shape: str = FUTILITY_SHAPE
    equivalence_min_seeds: int = EQUIVALENCE_MIN_SEEDS
    fractions: tuple[float, ...] = field(init=False)

    def __post_init__(self) -> None:
        looks = tuple(int(n) for n in self.looks)
        if not looks or any(b <= a for a, b in zip(looks, looks[1:], strict=False)) or looks[0] < 2:
            raise ValueError(f"looks must be increasing seed counts from 2 on: {self.looks}")
        object.__setattr__(self, "looks", looks)
        object.__setattr__(self, "fractions", tuple(n / looks[-1] for n in looks))

    @classmethod
    def of(cls, min_seeds: int, max_seeds: int, step: int, **kw: Any) -> SequentialDesign:
        """Looks at min, min + step, …, and max (the last look is always at max)."""
        looks = list(range(min_seeds, max_seeds, step)) + [max_seeds]
        return cls(tuple(dict.fromkeys(looks)), **kw)

    @property
    def level(self) -> float:
        return self.alpha / max(1, self.comparisons)

    def efficacy_z(self) -> tuple[float, ...]:
        return boundaries(self.fractions, self.level, self.shape, 2)

    def _before_min(self, bounds: tuple[float, ...]) -> tuple[float, ...]:
        """``bounds`` with an infinite boundary at every look on fewer than ``equivalence_min_seeds``."""
        return tuple(math.inf if n < self.equivalence_min_seeds else b for n, b in zip(self.looks, bounds, strict=True))

    def equivalence_z(self) -> tuple[float, ...]:
        return self._before_min(boundaries(self.fractions, self.beta, self.beta_shape, 1))

    def futility_z(self) -> tuple[float, ...]:
        """The futility boundaries (z scale, one-sided against ±min_effect); infinite at the last
        look (where an undecided comparison ends undecided, not futile) and everywhere when
        ``futility_beta`` is 0."""
        if self.futility_beta <= 0:
            return (math.inf,) * len(self.looks)
        return (*boundaries(self.fractions, self.futility_beta, self.futility_shape, 1)[:-1], math.inf)

    def efficacy_t(self) -> tuple[float, ...]:
        """The efficacy boundaries on the paired t scale, each at its look's n_k − 1 df (the ones
        the looks use)."""
        return t_boundaries(self.looks, self.level, self.shape, 2)

    def equivalence_t(self) -> tuple[float, ...]:
        return self._before_min(t_boundaries(self.looks, self.beta, self.beta_shape, 1))

    def futility_t(self) -> tuple[float, ...]:
        """As ``futility_z``, on the t scale."""
        if self.futility_beta <= 0:
            return (math.inf,) * len(self.looks)
        return (*t_boundaries(self.looks, self.futility_beta, self.futility_shape, 1)[:-1], math.inf)

    def look_index(self, n: int) -> int:
        """The look a comparison on ``n`` seeds is at: the last look whose count it reaches."""
        k = max((i for i, m in enumerate(self.looks) if m <= n), default=-1)
        if k < 0:
            raise ValueError(f"{n} seeds is before the first look ({self.looks[0]})")
        return k


def decide(design: SequentialDesign, diffs: Sequence[float] | None = None,
           cell: Sequence[float] | None = None, ref: Sequence[float] | None = None, p_value: bool = True
           ) -> dict[str, Any]:
    """The state of one comparison at its current look: paired on ``diffs`` (cell − reference,
    one per shared seed), else Welch on ``cell`` and ``ref``.

    Returns ``look`` (1-based), ``n``, ``estimate``, ``se``, ``df``, ``t``, ``bound`` (the efficacy
    boundary on the t scale), ``equivalence_bound``, ``futility_bound`` (t scale; futile before the
    last look when ``|estimate| + futility_bound × se < min_effect``), ``rci_low`` / ``rci_high`` (the repeated
    confidence interval at 1 − α/m), ``decision`` (``significant``, ``equivalent``, ``futile`` or
    ``open``; ``futile`` at the last look is the seeds running out, undecided: ``runner.sequential_looks.outcome``
    reads it so), ``p`` (stage-wise, when significant; else the probability of an efficacy crossing at
    some look of the design, 1 − … is not a p and is left NaN). The boundaries are the design's t
    boundaries (``efficacy_t`` …) taken to the look's own df when it differs from n_k − 1.
    A look needs at least two values with some spread; with none it is ``open`` (no variance: no
    test)."""
    if diffs is not None:
        x = np.asarray(diffs, dtype=float)
        x = x[np.isfinite(x)]
        n = int(x.size)
        est = float(x.mean()) if n else math.nan
        se = float(x.std(ddof=1) / math.sqrt(n)) if n >= 2 else math.nan
        df = float(n - 1)
    else:
        a = np.asarray(cell, dtype=float)
        b = np.asarray(ref, dtype=float)
        a, b = a[np.isfinite(a)], b[np.isfinite(b)]
        n = int(min(a.size, b.size))
        est = float(a.mean() - b.mean()) if a.size and b.size else math.nan
        va, vb = (a.var(ddof=1) / a.size if a.size >= 2 else math.nan), (b.var(ddof=1) / b.size if b.size >= 2 else math.nan)
        se = float(math.sqrt(va + vb)) if math.isfinite(va + vb) else math.nan
        df = float((va + vb) ** 2 / (va**2 / (a.size - 1) + vb**2 / (b.size - 1))) if se > 0 else math.nan
    out: dict[str, Any] = {"look": 0, "n": n, "estimate": est, "se": se, "df": df, "t": math.nan, "bound": math.nan,
                           "equivalence_bound": math.nan, "futility_bound": math.nan, "rci_low": math.nan, "rci_high": math.nan,
                           "decision": "open", "p": math.nan}
    if n < design.looks[0]:
        return out
    k = design.look_index(n)
    last = k == len(design.looks) - 1
    out["look"] = k + 1
    if not (math.isfinite(se) and se > 0):
        out["decision"] = "futile" if last else "open"
        return out
    own = design.looks[k] - 1  # the df the look's boundaries are computed for
    bound, eq, fut = (at_df(b[k], own, df) for b in (design.efficacy_t(), design.equivalence_t(), design.futility_t()))
    t = est / se
    out.update(t=t, bound=bound, equivalence_bound=eq, futility_bound=fut, rci_low=est - bound * se, rci_high=est + bound * se)
    if abs(t) >= bound:
        out.update(decision="significant",
                   p=t_stagewise_p(design.looks, design.level, design.shape, k, t, df) if p_value else math.nan)
    elif est + eq * se < design.min_effect and est - eq * se > -design.min_effect:
        out["decision"] = "equivalent"
    elif last or abs(est) + fut * se < design.min_effect:
        out["decision"] = "futile"
    return out
