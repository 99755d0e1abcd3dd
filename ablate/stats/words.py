"""How a study's family is said — its size, the thresholds Holm tests it at, and what the exact
test's floor leaves within reach — in the reports and by ``ablate plan`` before a run; and how a
p-value, a floor or a threshold prints (``p_text``, which ``ablate.report.format.pval`` is). Imports
the standard library only: plan loads neither SciPy nor pandas.

**What the floor leaves within reach** (``Reach``). Every comparison with the reference is an exact
permutation test whose smallest possible p, its *floor*, is set by its seeds (2/2ⁿ for n paired
seeds). The family also holds ANOVA terms, F tests with no floor. Holm is step-down: the test of
rank r is rejected when it and every test before it has p below α/(m − r + 1), so tests rejected
ahead of a comparison raise the threshold it meets. A comparison can be significant only if the
tests before it in Holm's order are rejected first, and only the ANOVA terms — or comparisons with a
lower floor, themselves rejected — can come before it. With the C comparisons' floors sorted,
f₍₁₎ ≤ … ≤ f₍C₎, the comparisons that can be significant are the longest run from the lowest with
(C − i + 1)·f₍ᵢ₎ < α for every i (every ANOVA term rejected first, each comparison at its floor):
none when C·f₍₁₎ ≥ α, so "no comparison can be significant" is true exactly then, not whenever the
floor is above Holm's *first* threshold α/m. Between α/m and α/C a comparison at floor f is
significant only behind the k tests Holm rejects first, k the fewest with (m − k)·f < α. Ties at
the floor change nothing: Holm gives tied p's the adjusted p of the first of them. A design without
ANOVA terms has C = m: the first threshold is the best a comparison can get.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal

#: The thresholds a printed p is read against: α as the reports use it by default and the marks'
#: (``stats.MARKS``: ``**`` below 0.01, ``***`` below 0.001). ``p_text`` never rounds across one.
P_THRESHOLDS = (0.05, 0.01, 0.001)
#: What a missing value prints as (``ablate.report.format.DASH``).
DASH = "—"


def family_words(comparisons: int, terms: int, measures: int) -> str:
    """"15 comparisons with the reference and 12 ANOVA terms on 5 measures": how a family is made
    up, as the reports say it and ``ablate plan`` counts it before a run (``ablate.design.family``)."""
    parts = [f"{comparisons} comparison{'s' if comparisons != 1 else ''} with the reference"] if comparisons else []
    if terms:
        parts.append(f"{terms} ANOVA term{'s' if terms != 1 else ''}")
    return f"{' and '.join(parts)} on {measures} measure{'s' if measures != 1 else ''}"


def _half_up(p: float, decimals: int) -> Decimal:
    # Half up on the shortest decimal that reads back as p (0.0625 → 0.063), not on its binary
    # expansion with Python's half-to-even (0.062): what a reader rounding by hand would write.
    return Decimal(repr(p)).quantize(Decimal(1).scaleb(-decimals), rounding=ROUND_HALF_UP)


def p_text(p: object, alpha: float | None = None, *, bound: bool = False, against: Iterable[float] = ()) -> str:
    """A p-value: ``<0.001``; else three decimals below 0.1 and two above (rounded half up), with
    as many more as it takes for the printed value to sit on the same side of every threshold as
    p itself — ``alpha`` (default 0.05) and the marks' 0.01 and 0.001: 0.0499 is ``0.0499``, not
    ``0.050`` beside a star, and 0.0501 is ``0.0501``, not ``0.050``. ``—`` when missing.

    ``bound``: a floor or a threshold, a number a p is compared with rather than an observed p —
    printed the same way, so one number prints one way in every sentence and table, except that
    below 0.001 it prints its value (two significant digits), not ``<0.001``. ``against``: the
    numbers a sentence sets it beside ("a p below 0.008, above 0.006"): digits are added until it
    prints apart from each of them rounded as far, on its own side (0.0039 beside 0.0038, which
    both print 0.004 at three decimals)."""
    try:
        p = float(p)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return DASH
    if not math.isfinite(p):
        return DASH
    if p < P_THRESHOLDS[-1] and not bound:
        return "<" + str(P_THRESHOLDS[-1])
    thresholds = {*P_THRESHOLDS[1:], P_THRESHOLDS[0] if alpha is None else float(alpha)}
    beside = [float(t) for t in against if math.isfinite(float(t))]
    if p >= P_THRESHOLDS[-1] or p <= 0:
        decimals = 3 if p < 0.1 else 2
    else:  # a bound below 0.001: two significant digits
        decimals = 1 - math.floor(math.log10(p))
    while True:
        shown = _half_up(p, decimals)
        apart = all((shown > _half_up(t, decimals)) == (p > t) and (shown < _half_up(t, decimals)) == (p < t)
                    for t in beside)
        if decimals >= 17 or apart and all((shown > Decimal(repr(t))) == (p > t) and (shown < Decimal(repr(t))) == (p < t)
                                           for t in thresholds | set(beside)):
            return f"{shown:f}"
        decimals += 1


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _terms(n: int) -> str:
    """"4 ANOVA terms (F tests, which have no floor)": why they can come before a comparison."""
    return f"{_plural(n, 'ANOVA term')} ({'an F test, which has' if n == 1 else 'F tests, which have'} no floor)"


@dataclass(frozen=True)
class Reach:
    """What the exact test's floors leave within reach of significance in one Holm family at
    ``alpha`` (the module docstring): ``floors``, one per comparison, ascending; ``terms``, the
    tests without a floor (the ANOVA terms); ``rejected``, how many of those Holm rejected, once the
    study has results (None before a run)."""

    alpha: float
    floors: tuple[float, ...]
    terms: int
    rejected: int | None = None

    @classmethod
    def of(cls, floors: Iterable[float], terms: int, alpha: float, rejected: int | None = None) -> Reach:
        """From the comparisons' floors in any order; a floor not known (NaN) counts as none (0), so
        that nothing is ever said to be out of reach on a guess."""
        known = sorted(float(f) if math.isfinite(float(f)) else 0.0 for f in floors)
        return cls(float(alpha), tuple(known), max(0, int(terms)), None if rejected is None else int(rejected))

    @property
    def comparisons(self) -> int:
        """C: the tests with a floor."""
        return len(self.floors)

    @property
    def m(self) -> int:
        return self.comparisons + self.terms

    @property
    def first(self) -> float:
        """Holm's first threshold, α/m."""
        return self.alpha / max(1, self.m)

    @property
    def reachable(self) -> int:
        """How many comparisons can be significant (the lowest floors): the longest run with
        (C − i + 1)·f₍ᵢ₎ < α."""
        c = self.comparisons
        return next((i for i, f in enumerate(self.floors) if (c - i) * f >= self.alpha), c)

    @property
    def limit(self) -> float:
        """The best threshold Holm can give a comparison out of reach, α/(C − K) with K the
        reachable ones (every ANOVA term and they rejected first); a floor below it is within
        reach. ∞ when every comparison is."""
        left = self.comparisons - self.reachable
        return self.alpha / left if left else math.inf

    def can(self, floor: float) -> bool:
        """Whether a comparison whose exact test's floor is ``floor`` can be significant."""
        return floor < self.limit

    def ahead(self, floor: float) -> int:
        """The fewest tests Holm must reject before a comparison with p at ``floor`` for it to be
        significant: the fewest k with (m − k)·floor < α (0 below the first threshold)."""
        return next((k for k in range(self.m) if (self.m - k) * floor < self.alpha), self.m)

    def floor_words(self, floor: float, seeds: str, on: str = "on any of them", significant: str = "significant"
                    ) -> tuple[str, str] | None:
        """What the floor ``floor`` (the smallest of the comparisons spoken of, with ``seeds``:
        "8 seeds") leaves within reach, as (claim, reason) — a sentence is "{claim}: {reason}." —
        or None when it is below Holm's first threshold and so holds nothing back. The claim is
        "With 8 seeds no comparison can be significant" only when none can (``can``); between
        the first threshold and ``limit`` it says how many tests must be rejected first. Every
        number prints as ``p_text`` prints a bound."""
        first = self.first
        if floor < first:
            return None
        if not self.can(floor):
            best = self.limit
            shown = p_text(floor, self.alpha, bound=True, against=(best,))
            claim = f"With {seeds} no comparison can be {significant}"
            given = f"the exact test cannot give a p below {shown} {on}"
            left = self.comparisons - self.reachable
            if left == self.m:  # nothing without a floor comes first: the first threshold is the best
                return claim, (f"{given}, above Holm's first threshold over the study's {_plural(self.m, 'test')}, "
                               f"α/{self.m} = {p_text(best, self.alpha, bound=True, against=(floor,))}")
            before = f"the {_terms(self.terms)}" if self.terms else ""
            if self.reachable:
                before += f"{' and ' if before else ''}the {_plural(self.reachable, 'comparison')} with a lower floor"
            return claim, (f"{given}, and of the study's {_plural(self.m, 'test')} only {before} can come first, which "
                           f"leaves a comparison Holm's threshold α/{left} = "
                           f"{p_text(best, self.alpha, bound=True, against=(floor,))} at best")
        k = self.ahead(floor)
        shown = p_text(floor, self.alpha, bound=True, against=(first,))
        if (not self.floors or floor <= self.floors[0]) and k <= self.terms:
            # the first comparison in Holm's order has only ANOVA terms before it: say how many Holm rejected
            who = f"at least {k} of the study's {_terms(self.terms)}"
            rejected = {None: "", 0: "none of them", self.terms: f"all {self.terms}"}.get(
                self.rejected, f"{self.rejected} of the {self.terms}")
            who_end = f" (here Holm rejects {rejected})" if rejected else ""
        else:
            who, who_end = f"at least {k} of the study's other tests", ""
        verb = "has a smaller p and is" if k == 1 else "have smaller p's and are"
        return (f"With {seeds} a comparison can be {significant} only when {who} {verb} rejected first{who_end}",
                f"the exact test cannot give a p below {shown} {on}, above Holm's first threshold over the study's "
                f"{_plural(self.m, 'test')}, α/{self.m} = {p_text(first, self.alpha, bound=True, against=(floor,))}")
