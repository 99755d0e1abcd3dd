"""How a family's size is said, in the reports and by ``ablate plan`` before a run; imports nothing
(plan loads neither SciPy nor pandas)."""

from __future__ import annotations


def family_words(comparisons: int, terms: int, measures: int) -> str:
    """"15 comparisons with the reference and 12 ANOVA terms on 5 measures": how a family is made
    up, as the reports say it and ``ablate plan`` counts it before a run (``ablate.design.family``)."""
    parts = [f"{comparisons} comparison{'s' if comparisons != 1 else ''} with the reference"] if comparisons else []
    if terms:
        parts.append(f"{terms} ANOVA term{'s' if terms != 1 else ''}")
    return f"{' and '.join(parts)} on {measures} measure{'s' if measures != 1 else ''}"
