"""Group-sequential comparisons (ablate.stats.group_sequential): boundaries against published values and
their defining property, the decisions of a look, error rates under optional stopping."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from ablate.stats import group_sequential as sq

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


def test_the_futility_boundary_spends_its_beta_and_stops_nothing_at_the_last_look():
    d = design()
    z = d.futility_z()
    assert len(z) == len(d.looks) and z[-1] == math.inf  # the last look: futile when undecided anyway
    # The first look is a one-sided test at what the power2 shape spends by then (β t²).
    assert 1 - sps.norm.cdf(z[0]) == pytest.approx(sq.FUTILITY_BETA * d.fractions[0] ** 2, rel=1e-6)
    assert all(math.isfinite(c) for c in z[:-1])
    assert design(futility_beta=0.0).futility_z() == (math.inf,) * len(d.looks)
    # Stricter than the equivalence boundary at the first looks (little spent early), looser later;
    # compared where equivalence may stop (from EQUIVALENCE_MIN_SEEDS seeds on).
    every = design(equivalence_min_seeds=0)
    assert z[0] > every.equivalence_z()[0] and z[-2] < every.equivalence_z()[-2]


def test_no_look_on_fewer_than_six_seeds_declares_equivalence():
    """On a cell that fails on one seed in seven, 3–5 seeds often hold none of its failures: at β 0.02,
    ±min_effect was declared equivalent 0.03–0.05 of the time there (bench_sequential_robust)."""
    from ablate.stats.rules import EQUIVALENCE_MIN_SEEDS

    d = sq.SequentialDesign.of(3, 9, 3, min_effect=1.0)  # looks at 3, 6, 9
    assert EQUIVALENCE_MIN_SEEDS == 6
    assert d.equivalence_t()[0] == math.inf and all(math.isfinite(c) for c in d.equivalence_t()[1:])
    assert d.equivalence_z()[0] == math.inf
    tight = [0.01, -0.01, 0.0]  # three seeds that agree to 0.01 δ: equivalent before
    assert sq.decide(sq.SequentialDesign.of(3, 9, 3, min_effect=1.0, equivalence_min_seeds=3),
                     diffs=tight)["decision"] == "equivalent"
    # now only the futility stop, which claims less (the power to find δ is spent) and holds its β
    # on such cells (bench_sequential_robust: at most 0.017 of ±δ stopped futile, for 0.03)
    assert sq.decide(d, diffs=tight)["decision"] == "futile"
    assert sq.decide(d, diffs=tight * 2)["decision"] == "equivalent"  # at 6 seeds it may


def test_futility_stops_a_small_effect_early_without_claiming_equivalence():
    d = design()
    base = np.array([0.3, -0.5, 0.6, 0.1, -0.2, 0.4, 0.0, 0.2, -0.3, 0.1, 0.3])
    # 11 seeds (look 5), estimate 0.1, se 0.3: within min_effect (1) at the futility boundary's
    # level (t 2.91 at 10 df) but not at the equivalence boundary's (t 3.28)
    x = list(0.1 + (base - base.mean()) / base.std(ddof=1) * 0.3 * math.sqrt(11))
    r = sq.decide(d, diffs=x)
    assert r["look"] == 5 and r["decision"] == "futile" and math.isnan(r["p"])
    assert abs(r["estimate"]) + r["futility_bound"] * r["se"] < 1.0
    assert abs(r["estimate"]) + r["equivalence_bound"] * r["se"] >= 1.0  # not shown equivalent at its level
    # Without the futility boundary the same look stays open, and a large effect is never futile.
    assert sq.decide(design(futility_beta=0.0), diffs=x)["decision"] == "open"
    assert sq.decide(d, diffs=[v + 1.0 for v in x])["decision"] != "futile"


def test_futility_stops_an_effect_of_min_effect_at_most_at_its_beta():
    """Paired differences with mean min_effect (sd 0.85 of it), looked at 3, 5, …, 15 seeds: the
    share stopped as futile before the last look is at most what the boundary spends."""
    rng = np.random.default_rng(4)
    d = design()
    runs, futile = 400, 0
    for _ in range(runs):
        x = rng.normal(1.0, 0.85, 16)
        for n in d.looks[:-1]:
            r = sq.decide(d, diffs=x[:n], p_value=False)
            if r["decision"] != "open":
                futile += r["decision"] == "futile"
                break
    assert futile / runs <= sq.FUTILITY_BETA + 3 * math.sqrt(sq.FUTILITY_BETA / runs)


def paired_t(x: np.ndarray, looks: tuple[int, ...]) -> np.ndarray:
    """The paired t statistics of the rows of ``x`` on their first n seeds, per look (columns)."""
    return np.stack([x[:, :n].mean(1) / (x[:, :n].std(1, ddof=1) / math.sqrt(n)) for n in looks], axis=1)


def test_t_boundaries_hold_their_rate_where_tail_matched_z_boundaries_do_not():
    """Independent null studies (not the boundaries' own simulated paths), looked at 3, 5, …, 16
    seeds with the efficacy boundaries alone: the t boundaries cross at α/m within the 99.9% band,
    the z boundaries turned into t by their tail probability above it (issue 41)."""
    rng = np.random.default_rng(11)
    studies = 200_000
    d = design(comparisons=3, shape="power3")
    t = np.abs(paired_t(rng.standard_normal((studies, 16)), d.looks))
    half = 3.29 * math.sqrt(d.level * (1 - d.level) / studies)
    exact = (t >= np.array(d.efficacy_t())).any(axis=1).mean()
    matched = (t >= np.array([sq.t_bound(z, n - 1) for z, n in zip(d.efficacy_z(), d.looks, strict=True)])).any(axis=1).mean()
    assert abs(exact - d.level) <= half, (exact, d.level, half)
    assert matched > d.level + half, (matched, d.level, half)


def test_t_boundaries_start_at_the_exact_t_test_and_are_seeded():
    d = design(comparisons=3, shape="power3")
    bounds = d.efficacy_t()
    # the first look is a fixed two-sided t test at what it spends; one look is the fixed t test
    assert bounds[0] == pytest.approx(sps.t.isf(sq.spent(3 / 16, d.level, "power3") / 2, 2), rel=1e-9)
    assert sq.t_boundaries((8,), 0.05) == pytest.approx((sps.t.isf(0.025, 7),))
    assert sq.t_boundaries((8,), 0.05, "pocock", sides=1) == pytest.approx((sps.t.isf(0.05, 7),))
    # the estimated sd makes the joint tails heavier: never below the tail-matched z boundaries
    matched = [sq.t_bound(z, n - 1) for z, n in zip(d.efficacy_z(), d.looks, strict=True)]
    assert all(b >= m - 1e-9 for b, m in zip(bounds, matched, strict=True))
    assert bounds[-1] > matched[-1] + 0.02
    # seeded: the simulated paths, and so the boundaries, are the same in a fresh computation
    first = sq.t_paths(d.looks)[:, :5].copy()
    sq.t_paths.cache_clear()
    assert np.array_equal(sq.t_paths(d.looks)[:, :5], first)
    with pytest.raises(ValueError, match="increasing"):
        sq.t_boundaries((5, 3), 0.05)


def test_the_t_stagewise_p_is_the_t_tail_at_the_first_look_and_alpha_at_the_last_boundary():
    d = design(comparisons=3, shape="obrien_fleming")
    bounds = d.efficacy_t()
    assert sq.t_stagewise_p(d.looks, d.level, d.shape, 0, 30.0) == pytest.approx(2 * sps.t.sf(30.0, 2), rel=1e-9)
    # crossing at or before a look's boundary, under no effect, is what the design spent by then
    for k in (3, len(d.looks) - 1):
        p = sq.t_stagewise_p(d.looks, d.level, d.shape, k, bounds[k])
        assert p == pytest.approx(sq.spent(d.fractions[k], d.level, d.shape), abs=4e-4)
    ps = [sq.t_stagewise_p(d.looks, d.level, d.shape, 5, t) for t in (3.0, 4.0, 6.0)]
    assert ps[0] > ps[1] > ps[2] > sq.spent(d.fractions[4], d.level, d.shape) - 4e-4


def test_a_look_on_fewer_seeds_or_welch_takes_the_boundary_to_its_own_df():
    d = design()
    x = [0.3, 1.2, 0.8, 1.1, 0.9, 1.4]  # 6 seeds: look 2 (5 seeds), at 5 df rather than 4
    r = sq.decide(d, diffs=x)
    assert r["look"] == 2 and r["bound"] == pytest.approx(sq.at_df(d.efficacy_t()[1], 4, 5))
    assert r["bound"] < d.efficacy_t()[1]  # more df, same tail: a smaller t
    w = sq.decide(d, cell=[1.0, 1.3, 0.9, 1.2, 1.1], ref=[0.1, -0.2, 0.3, 0.0, 0.2])
    assert w["look"] == 2 and w["bound"] == pytest.approx(sq.at_df(d.efficacy_t()[1], 4, w["df"]))
