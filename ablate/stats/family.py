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
from ablate.stats.words import family_words

__all__ = ["FAMILY_COLUMNS", "adjust", "apply", "members", "policy_sentence"]

#: One row per test of the family: which measure, which kind (``comparison`` with the reference or
#: ANOVA ``term``), the cell id or the term, the label a report prints, the raw p.
FAMILY_COLUMNS = ["measure", "kind", "key", "label", "p"]

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
                rows.append({"measure": m, "kind": kind, "key": str(r[key]), "label": str(r[label]), "p": float(p)})
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
    "" and False. ``measure`` as in ``members`` (``"norm"``: per row, from its ``measure``)."""
    out = frame.copy()
    key = "cell_id" if kind == "comparison" else "term"
    sub = adjusted[adjusted["kind"] == kind] if len(adjusted) else adjusted
    lookup = dict(zip(zip(sub["measure"], sub["key"], strict=True), sub["p_adj"], strict=True)) if len(sub) else {}
    names = ([f"{NORM_PREFIX}{m}" for m in out["measure"]] if measure == "norm" else [measure] * len(out))
    out["p_adj"] = [float(lookup.get((m, str(k)), np.nan)) for m, k in zip(names, out[key], strict=True)]
    out["mark"] = [mark_for(p, alpha) for p in out["p_adj"]]
    out["significant"] = (out["p_adj"] < alpha).astype(bool)
    return out


def policy_sentence(adjusted: pd.DataFrame, alpha: float = 0.05, sequential_m: int | None = None) -> str:
    """The one sentence every report prints about the family: its size, what is in it, how it is
    corrected. ``sequential_m``: the number of comparisons of a sequential design (its family)."""
    if sequential_m is not None:
        return (f"**Multiplicity.** The sequential design's {sequential_m} comparisons are the confirmatory "
                f"family: each is tested at α/m = {alpha:g}/{sequential_m} (Bonferroni — its comparisons stop at "
                "different looks, so Holm's later steps do not apply); fixed-design p-values and factor tests "
                "are not valid after a data-dependent number of seeds and are not printed.")
    m = len(adjusted)
    if m == 0:
        return ("**Multiplicity.** Nothing is tested yet (too few seeds or no spread), so no p-value is corrected "
                "or printed.")
    n_comp = int((adjusted["kind"] == "comparison").sum())
    measures = list(dict.fromkeys(adjusted["measure"]))
    return (f"**Multiplicity.** One confirmatory family for the whole study, the same in every report: "
            f"{family_words(n_comp, m - n_comp, len(measures))} ({', '.join(measures)}), m = {m} tests. Every p (Holm) is adjusted over all {m} by Holm's "
            f"step-down method, so the chance of any false \"significant\" in the study stays at α = {alpha:g}; "
            f"the first threshold, α/m = {alpha / m:.2g}, is the share a sequential design would give each.")
