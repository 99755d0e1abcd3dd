"""Group-sequential comparisons (ablate.stats.sequential): boundaries against published values and
their defining property, the decisions of a look, error rates under optional stopping."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from ablate.stats import sequential as sq

FIVE = tuple(i / 5 for i in range(1, 6))


def test_pocock_boundaries_match_the_published_values():
    # Lan–DeMets Pocock-type spending, five equally spaced looks, two-sided α = 0.05
    # (Jennison & Turnbull 2000, Table 7.6; gsDesign sfLDPocock).
    assert sq.boundaries(FIVE, 0.05, "pocock") == pytest.approx((2.4380, 2.4268, 2.4101, 2.3966, 2.3859), abs=2e-4)


def test_a_boundary_spends_exactly_what_its_look_is_given():
    for shape in ("obrien_fleming", "pocock", "power3"):
        bounds = sq.boundaries(FIVE, 0.05, shape)
        # The first look is a plain two-sided test at what it spends.
        assert 2 * (1 - sps.norm.cdf(bounds[0])) == pytest.approx(sq.spent(0.2, 0.05, shape), rel=1e-6)
        # Crossing at or before the last look, under no effect, is the whole α.
        assert sq.stagewise_p(FIVE, bounds, 4, bounds[4]) == pytest.approx(0.05, abs=1e-6)
    assert sq.boundaries((1.0,), 0.05) == pytest.approx((1.959964,))  # one look: the fixed test
    assert sq.boundaries((1.0,), 0.05, "pocock", sides=1) == pytest.approx((1.644854,))


def test_crossing_probabilities_agree_with_simulated_brownian_motion():
    rng = np.random.default_rng(0)
    fractions = (0.3, 0.6, 1.0)
    bounds = sq.boundaries(fractions, 0.05, "obrien_fleming")
    steps = rng.standard_normal((200_000, 3)) * np.sqrt(np.diff((0.0, *fractions)))
    z = np.cumsum(steps, axis=1) / np.sqrt(fractions)
    crossed = (np.abs(z) >= np.array(bounds)).any(axis=1).mean()
    assert crossed == pytest.approx(0.05, abs=0.003)


def design(**kw) -> sq.SequentialDesign:
    return sq.SequentialDesign.of(3, 16, 2, **{"min_effect": 1.0, **kw})


def test_a_look_decides_significant_equivalent_futile_or_open():
    d = design()
    assert d.looks == (3, 5, 7, 9, 11, 13, 15, 16)
    big = sq.decide(d, diffs=[3.0, 3.1, 2.9, 3.05, 2.95, 3.0, 3.02, 2.98, 3.01])
    assert big["decision"] == "significant" and big["look"] == 4 and 0 < big["p"] < 0.05
    assert big["rci_low"] > 0  # the repeated interval excludes no effect with it
    tiny = sq.decide(d, diffs=[0.01, -0.02, 0.0, 0.015, -0.01, 0.005, 0.0, -0.005, 0.01])
    assert tiny["decision"] == "equivalent" and math.isnan(tiny["p"])
    rng = np.random.default_rng(1)
    unclear = rng.normal(0.5, 1.0, 16)
    assert sq.decide(d, diffs=unclear[:7])["decision"] == "open"
    assert sq.decide(d, diffs=unclear)["decision"] in ("futile", "significant", "equivalent")
    assert sq.decide(d, diffs=[1.0, 2.0])["decision"] == "open"  # before the first look: no test
    assert sq.decide(d, diffs=[0.5, 0.5, 0.5])["decision"] == "open"  # no spread: no test, never p = 0


def test_the_family_errs_at_most_alpha_under_optional_stopping():
    """Three null comparisons looked at after 3, 5, …, 16 seeds and stopped at their first decision:
    the family's false-positive rate stays at or below α (Bonferroni inside, spending across looks)."""
    rng = np.random.default_rng(2)
    d = design(comparisons=3)
    family = 0
    studies = 300
    for _ in range(studies):
        hit = False
        for _ in range(3):
            x = rng.normal(0.0, 1.0, 16)
            for n in d.looks:
                r = sq.decide(d, diffs=x[:n], p_value=False)
                if r["decision"] != "open":
                    hit |= r["decision"] == "significant"
                    break
        family += hit
    assert family / studies <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / studies)
