"""The confirmatory family: every test a study's verdicts rest on, corrected once and the same way
in every report.

A study's reports test two kinds of hypotheses on each measure they analyse — each cell against the
declared reference (``stats.compare_to_reference``; ``stats.norms.compare``) and each term of the
factor ANOVA (``stats.anova``; ``stats.norms.factor_anova``). Corrected within each report, or
within each measure, a study of identical variants shows *some* "significant" verdict far more
often than α (13–20 % of null norm studies when Holm ran per measure). So the family is declared
once — by default every comparison with the reference and every ANOVA term on every measure the
study's reports test — and every p-value of it is Holm-adjusted over all of it, whichever report
prints it. Holm's first threshold is α/m, the Bonferroni share a sequential design gives each of
its comparisons (``runner.sequential_looks.designs``), so the two designs spend α the same way; the
sequential one cannot use Holm's later steps, because its comparisons stop at different looks.

Measures are named as the sequential design names them: a metric (``test_accuracy``) or a norm
measure (``norm.training``, ``norm.depth``, ``norm.seeds``, ``norm.final``).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

from ablate.stats.estimators import mark_for
from ablate.stats.multiplicity import adjusted
from ablate.stats.words import Reach, family_words, p_text

__all__ = ["FAMILY_COLUMNS", "adjust", "apply", "members", "policy_sentence", "reach", "reach_of"]

#: One row per test of the family: which measure, which kind (``comparison`` with the reference or
#: ANOVA ``term``), the cell id or the term, the label a report prints, the raw p, and the smallest p
#: its test can give (a comparison's exact test: ``p_min``; NaN for a term, an F test, which has none).
FAMILY_COLUMNS = ["measure", "kind", "key", "label", "p", "floor"]

NORM_PREFIX = "norm."


def members(
    comparisons: Iterable[tuple[str, pd.DataFrame]] = (),
    anovas: Iterable[tuple[str, pd.DataFrame]] = (),
) -> pd.DataFrame:
    """The family's tests from the reports' frames.

    ``comparisons``: (measure, frame with ``cell_id``, ``cell_label``, ``p``) pairs; a norm
    comparison frame with a ``measure`` column (``stats.norms.compare``) is passed with measure
    ``"norm"`` and split by its column. ``anovas``: (measure, frame with ``term``, ``p``) likewise
    (``stats.norms.factor_anova``'s frame with measure ``"norm"``). Rows without a p (not tested:
    too few seeds, no spread) are not members: they take no share of α."""
    rows = []
    for kind, pairs, key, label in (("comparison", comparisons, "cell_id", "cell_label"),
                                    ("term", anovas, "term", "term")):
        for measure, frame in pairs:
            if frame is None or len(frame) == 0:
                continue
            for r in frame.to_dict("records"):
                p = r.get("p")
                if p is None or not np.isfinite(float(p)):
                    continue
                m = f"{NORM_PREFIX}{r['measure']}" if measure == "norm" else measure
                floor = r.get("p_min") if kind == "comparison" else None
                rows.append({"measure": m, "kind": kind, "key": str(r[key]), "label": str(r[label]), "p": float(p),
                             "floor": np.nan if floor is None else float(floor)})
    return pd.DataFrame(rows, columns=FAMILY_COLUMNS)


def adjust(family: pd.DataFrame, alpha: float = 0.05, method: str = "holm") -> pd.DataFrame:
    """``family`` with ``p_adj`` (Holm over every row, statsmodels ``multipletests``),
    ``significant`` (``p_adj < alpha``) and ``mark``."""
    out = family.copy()
    out["p_adj"] = adjusted(out["p"].to_numpy(float), method)
    out["significant"] = (out["p_adj"] < alpha).astype(bool)
    out["mark"] = [mark_for(p, alpha) for p in out["p_adj"]]
    return out


def apply(frame: pd.DataFrame, adjusted: pd.DataFrame, measure: str, kind: str, alpha: float = 0.05
          ) -> pd.DataFrame:
    """``frame`` (a comparison or ANOVA frame of one report) with its ``p_adj``, ``mark`` and
    ``significant`` taken from the family: a row the family does not hold (untested) gets NaN,
    "" and False. ``measure`` as in ``members`` (``"norm"``: per row, from its ``measure``). A
    comparison frame also gets ``reach``, the family's ``Reach`` on every row: what its floors leave
    within reach, for the sentences that say so (``reach_of``)."""
    out = frame.copy()
    key = "cell_id" if kind == "comparison" else "term"
    sub = adjusted[adjusted["kind"] == kind] if len(adjusted) else adjusted
    lookup = dict(zip(zip(sub["measure"], sub["key"], strict=True), sub["p_adj"], strict=True)) if len(sub) else {}
    names = ([f"{NORM_PREFIX}{m}" for m in out["measure"]] if measure == "norm" else [measure] * len(out))
    out["p_adj"] = [float(lookup.get((m, str(k)), np.nan)) for m, k in zip(names, out[key], strict=True)]
    out["mark"] = [mark_for(p, alpha) for p in out["p_adj"]]
    out["significant"] = (out["p_adj"] < alpha).astype(bool)
    if kind == "comparison":
        out["reach"] = [reach(adjusted, alpha)] * len(out)
    return out


def reach(family: pd.DataFrame, alpha: float = 0.05) -> Reach:
    """What the family's floors leave within reach (``ablate.stats.words.Reach``): its comparisons'
    floors, its ANOVA terms, which have none, and how many of those Holm rejected (``adjust``)."""
    if not len(family):
        return Reach.of((), 0, alpha)
    comparisons = family[family["kind"] == "comparison"]
    terms = family[family["kind"] != "comparison"]
    floors = comparisons["floor"] if "floor" in comparisons else pd.Series(np.nan, index=comparisons.index)
    rejected = int(terms["significant"].sum()) if "significant" in terms else None
    return Reach.of(floors.to_numpy(float), len(terms), alpha, rejected)


def reach_of(tested: pd.DataFrame, alpha: float = 0.05) -> Reach:
    """The ``Reach`` of the family the comparisons ``tested`` were adjusted in: ``apply``'s, or for a
    frame that never met a family (``stats.compare_to_reference`` alone, Holm over its own rows) its
    own tested rows' floors and, when its ``power_alpha`` says it was corrected over m > those
    rows, the rest as tests without a floor — the most any of them could leave within reach, so a
    comparison is never said to be out of reach when it is not."""
    if "reach" in tested and len(tested) and isinstance(tested["reach"].iloc[0], Reach):
        return tested["reach"].iloc[0]
    floors = tested["p_min"].to_numpy(float) if "p_min" in tested else np.zeros(len(tested))
    m = len(tested)
    if "power_alpha" in tested and len(tested) and np.isfinite(float(tested["power_alpha"].iloc[0])):
        m = max(m, round(alpha / float(tested["power_alpha"].iloc[0])))
    return Reach.of(floors, m - len(tested), alpha)


def policy_sentence(adjusted: pd.DataFrame, alpha: float = 0.05, sequential_m: int | None = None,
                    comparison: bool = False) -> str:
    """The one sentence every report prints about the family: its size, what is in it, how it is
    corrected. ``sequential_m``: the number of comparisons of a sequential design (its family)."""
    if sequential_m == 1:
        head = (f"**Multiplicity.** The sequential design's one comparison is the confirmatory family: it is tested "
                f"at α = {alpha:g} (nothing to correct for)")
    elif sequential_m is not None:
        head = (f"**Multiplicity.** The sequential design's {sequential_m} comparisons are the confirmatory "
                f"family: each is tested at α/m = {alpha:g}/{sequential_m} (Bonferroni — its comparisons stop at "
                "different looks, so Holm's later steps do not apply)")
    if sequential_m is not None:
        return (f"{head}; fixed-design p-values and factor tests "
                "are not valid after a data-dependent number of seeds: none is a verdict, and the fixed-design p "
                "printed beside each decision is labelled descriptive.")
    m = len(adjusted)
    if m == 0:
        return ("**Multiplicity.** Nothing is tested yet (too few seeds or no spread), so no p-value is corrected "
                "or printed.")
    n_comp = int((adjusted["kind"] == "comparison").sum())
    measures = list(dict.fromkeys(adjusted["measure"]))
    whose, scope = (("One family for this comparison", "this comparison") if comparison else
                    ("One confirmatory family for the whole study, the same in every report", "the study"))
    first = p_text(alpha / m, alpha, bound=True)
    if m == 1:  # "m = 1 tests … adjusted over all 1 by Holm's step-down method": nothing to adjust
        return (f"**Multiplicity.** {whose}: {family_words(n_comp, m - n_comp, len(measures))} ({measures[0]}), "
                f"m = 1 test: its p is compared with α = {alpha:g} as it is, there being nothing to correct for.")
    return (f"**Multiplicity.** {whose}: {family_words(n_comp, m - n_comp, len(measures))} ({', '.join(measures)}), "
            f"m = {m} tests. Every p (Holm){' here' if comparison else ''} is adjusted over all {m} by Holm's "
            f"step-down method, so the chance of any false \"significant\" in {scope} stays at α = {alpha:g}; "
            + (f"the first threshold is α/m = {first}. Each study's own report adjusts over its own family, so a test "
               "both print can show another p (Holm) there." if comparison else
               f"the first threshold, α/m = {first}, is the share a sequential design would give each."))
