"""One confirmatory family across reports (ablate.stats.family): members, Holm over all of them,
the adjusted p back in each report's frame, and the sentence that says so."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from statsmodels.stats.multitest import multipletests

from ablate.stats import family as fam
from ablate.stats.multiplicity import adjusted as holm
from ablate.stats.words import Reach, p_text


def _comp(ps: list[float | None]) -> pd.DataFrame:
    return pd.DataFrame({"cell_id": [f"c{i}" for i in range(len(ps))], "cell_label": [f"cell {i}" for i in
                                                                                      range(len(ps))],
                         "p": [np.nan if p is None else p for p in ps]})


def _norm_comp(measures: dict[str, list[float]]) -> pd.DataFrame:
    rows = [{"cell_id": f"c{i}", "cell_label": f"cell {i}", "measure": m, "p": p}
            for m, ps in measures.items() for i, p in enumerate(ps)]
    return pd.DataFrame(rows)


def test_members_skip_untested_rows_and_name_norm_measures() -> None:
    anova = pd.DataFrame({"term": ["a", "b", "a × b"], "p": [0.01, 0.2, np.nan]})
    members = fam.members([("test_accuracy", _comp([0.04, None])), ("norm", _norm_comp({"final": [0.3, 0.001]}))],
                          [("test_accuracy", anova)])
    assert len(members) == 5  # the untested comparison and the untested term take no share of α
    assert set(members["measure"]) == {"test_accuracy", "norm.final"}
    assert list(members.loc[members["kind"] == "term", "key"]) == ["a", "b"]


def test_holm_runs_over_the_whole_family_not_per_report() -> None:
    acc = _comp([0.02, 0.6])
    norms = _norm_comp({"training": [0.03, 0.9], "final": [0.004, 0.5]})
    anova = pd.DataFrame({"term": ["a"], "p": [0.01]})
    adjusted = fam.adjust(fam.members([("test_accuracy", acc), ("norm", norms)], [("test_accuracy", anova)]))
    expected = multipletests(adjusted["p"].to_numpy(), method="holm")[1]
    np.testing.assert_allclose(adjusted["p_adj"], expected)
    # Within the accuracy report alone, Holm over its 3 tests would make 0.02 → 0.04 (significant); over
    # the study's 7 it is not: the report's frame takes the family's p_adj.
    back = fam.apply(acc, adjusted, "test_accuracy", "comparison")
    assert back.loc[0, "p_adj"] == pytest.approx(expected[list(adjusted["key"]).index("c0")])
    assert not back.loc[0, "significant"]
    nback = fam.apply(norms, adjusted, "norm", "comparison")
    final0 = nback[(nback["measure"] == "final") & (nback["cell_id"] == "c0")].iloc[0]
    assert final0["p_adj"] == pytest.approx(0.004 * 7)
    assert final0["significant"] and final0["mark"] == "*"


def test_untested_rows_stay_untested_after_apply() -> None:
    acc = _comp([0.01, None])
    adjusted = fam.adjust(fam.members([("test_accuracy", acc)]))
    back = fam.apply(acc, adjusted, "test_accuracy", "comparison")
    assert np.isnan(back.loc[1, "p_adj"]) and not back.loc[1, "significant"] and back.loc[1, "mark"] == ""


def test_policy_sentence_counts_what_the_family_holds() -> None:
    acc = _comp([0.02, 0.6])
    anova = pd.DataFrame({"term": ["a", "b"], "p": [0.01, 0.3]})
    adjusted = fam.adjust(fam.members([("test_accuracy", acc), ("norm", _norm_comp({"final": [0.1, 0.2]}))],
                                      [("test_accuracy", anova)]))
    text = fam.policy_sentence(adjusted, 0.05)
    assert "4 comparisons with the reference and 2 ANOVA terms on 2 measures" in text
    # α/6 = 0.00833 prints as every p, floor and threshold prints (format.pval), not as "0.0083" here and
    # "0.008" in the power table
    assert "m = 6" in text and "α/m = 0.008," in text
    seq = fam.policy_sentence(adjusted.iloc[0:0], 0.05, sequential_m=3)
    assert "3 comparisons" in seq and "α/m = 0.05/3" in seq and "Bonferroni" in seq
    one = fam.policy_sentence(adjusted.iloc[0:0], 0.05, sequential_m=1)  # it read "The … design's 1 comparisons"
    assert "one comparison is the confirmatory family: it is tested at α = 0.05" in one and "α/m" not in one
    assert "Nothing is tested" in fam.policy_sentence(adjusted.iloc[0:0], 0.05)
    # Two cells on one measure: one test, said as one ("m = 1 tests … adjusted over all 1 by Holm's" before).
    alone = fam.policy_sentence(fam.adjust(fam.members([("test_accuracy", _comp([0.02]))])), 0.05)
    assert "1 comparison with the reference on 1 measure (test_accuracy), m = 1 test: its p is compared with α = 0.05" \
        in alone and "Holm" not in alone, alone


def test_a_null_study_keeps_the_family_rate() -> None:
    """Uniform p-values for 2 reports × 4 measures × 5 tests: per-report Holm errs far more often
    than α across the study; one family stays at or below it."""
    rng = np.random.default_rng(1)
    per_report = whole = 0
    n = 1000
    for _ in range(n):
        acc = _comp(list(rng.uniform(size=5)))
        norms = _norm_comp({m: list(rng.uniform(size=5)) for m in ("training", "depth", "seeds", "final")})
        adjusted = fam.adjust(fam.members([("test_accuracy", acc), ("norm", norms)]))
        whole += bool(adjusted["significant"].any())
        per_report += bool((holm(acc["p"].to_numpy(), "holm") < 0.05).any()
                           or any((holm(g["p"].to_numpy(), "holm") < 0.05).any()
                                  for _, g in norms.groupby("measure")))
    assert whole / n < 0.05 + 3 * np.sqrt(0.05 * 0.95 / n)
    assert per_report / n > 0.15  # what the reports did before: Holm per report and per measure


def _significant(ps: list[float], alpha: float = 0.05) -> np.ndarray:
    """Holm as the reports run it (``family.adjust``: p_adj < α)."""
    return holm(np.asarray(ps, float), "holm") < alpha


@pytest.mark.parametrize("seed", range(40))
def test_reach_says_what_holm_can_reject_given_the_floors(seed: int) -> None:
    """Brute force over every arrangement of the comparisons' p's (each at a floor of the family at
    or above its own, or 1) with the ANOVA terms rejected first (p near 0, the best they can do): a
    comparison can be significant in some arrangement exactly when ``Reach.can`` says so, and none
    can exactly when ``reachable`` is 0 — the floor against α/C, not against Holm's first α/m."""
    import itertools

    rng = np.random.default_rng(seed)
    floors = [2.0 ** (1 - int(n)) for n in rng.integers(3, 11, size=int(rng.integers(1, 5)))]
    terms = int(rng.integers(0, 5))
    reach = Reach.of(floors, terms, 0.05)
    can = [False] * len(floors)
    choices = [sorted({f for f in floors if f >= own} | {1.0}) for own in floors]
    for ps in itertools.product(*choices):
        hit = _significant([*ps, *[1e-9] * terms])[: len(floors)]
        can = [a or bool(b) for a, b in zip(can, hit, strict=True)]
    assert can == [reach.can(f) for f in floors], (floors, terms)
    assert (reach.reachable == 0) == (not any(can))
    # With every ANOVA term ahead, α/C is the best a comparison gets; α/m only when there is none.
    assert reach.limit >= 0.05 / len(floors) or reach.reachable == 0
    for f in set(floors):
        k = reach.ahead(f)  # the fewest tests rejected first: k terms at ~0, every comparison at f
        if reach.can(f) and k <= terms:
            ahead = [1e-9] * k + [1.0] * (terms - k)
            assert _significant([f] * len(floors) + ahead)[0]
            if k:
                assert not _significant([f] * len(floors) + [1e-9] * (k - 1) + [1.0] * (terms - k + 1))[0]


def test_floor_words_say_none_only_when_none_can_be_significant() -> None:
    # rotrnn_vs_lru_tokens: 5 comparisons at 8 seeds' floor (0.0078), 4 ANOVA terms, m = 9: above α/9, below α/5.
    reach = Reach.of([2 / 256] * 5, 4, 0.05, rejected=4)
    claim, reason = reach.floor_words(2 / 256, "8 seeds")
    assert "no comparison" not in claim
    assert claim == ("With 8 seeds a comparison can be significant only when at least 3 of the study's 4 ANOVA "
                     "terms (F tests, which have no floor) have smaller p's and are rejected first (here Holm rejects "
                     "all 4)")
    assert reason == ("the exact test cannot give a p below 0.008 on any of them, above Holm's first threshold over "
                      "the study's 9 tests, α/9 = 0.006")
    # 7 comparisons: α/7 = 0.0071 is the best Holm can give one, below the floor: none can.
    claim, reason = Reach.of([2 / 256] * 7, 4, 0.05).floor_words(2 / 256, "8 seeds")
    assert claim == "With 8 seeds no comparison can be significant"
    assert "only the 4 ANOVA terms (F tests, which have no floor) can come first" in reason
    assert "α/7 = 0.007 at best" in reason
    # No ANOVA term: α/C is α/m, the first threshold, as before.
    claim, reason = Reach.of([0.125] * 11, 0, 0.05).floor_words(0.125, "4 seeds")
    assert claim == "With 4 seeds no comparison can be significant"
    assert reason.endswith("above Holm's first threshold over the study's 11 tests, α/11 = 0.005")
    assert Reach.of([2 / 512] * 3, 4, 0.05).floor_words(2 / 512, "9 seeds") is None  # below α/7: nothing held back


def test_a_floor_and_a_threshold_print_as_a_p_and_apart() -> None:
    assert p_text(0.0625, bound=True) == p_text(0.0625) == "0.063"  # 2/2⁵, never 0.062 beside 0.063
    assert p_text(0.05 / 49, bound=True) == "0.00102"  # above 0.001, so printed above it
    assert p_text(0.05 / 60, bound=True) == "0.00083" and p_text(0.05 / 60) == "<0.001"  # a bound is a number
    # 2/2⁹ beside α/13: both 0.004 at three decimals; apart, each on its side
    assert p_text(2 / 512, bound=True, against=(0.05 / 13,)) == "0.0039"
    assert p_text(0.05 / 13, bound=True, against=(2 / 512,)) == "0.0038"
