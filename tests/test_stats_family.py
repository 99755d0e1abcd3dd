"""One confirmatory family across reports (ablate.stats.family): members, Holm over all of them,
the adjusted p back in each report's frame, and the sentence that says so."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from statsmodels.stats.multitest import multipletests

from ablate.stats import family as fam
from ablate.stats.multiplicity import adjusted as holm


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
    assert "m = 6" in text and "0.0083" in text
    seq = fam.policy_sentence(adjusted.iloc[0:0], 0.05, sequential_m=3)
    assert "3 comparisons" in seq and "α/m = 0.05/3" in seq and "Bonferroni" in seq
    assert "Nothing is tested" in fam.policy_sentence(adjusted.iloc[0:0], 0.05)


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
