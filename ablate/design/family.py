"""The confirmatory family a design implies: what the reports will test and correct together
(``ablate.stats.family``), counted from the spec before anything runs — for ``ablate plan``'s
warning that a design's comparisons cannot be significant (or only behind its ANOVA terms), and for a report's power line before its seeds
allow a test. Counted as the reports count, measure by measure: ``tests/test_design_family.py``
holds it to every committed report's own count. It is the family the reports test once every cell
has ``MIN_N_TEST`` seeds; below that they test nothing (``tested``), and the family is empty."""

from __future__ import annotations

import math
from collections.abc import Sequence

from ablate.design.cells import Cell, cells
from ablate.spec import Spec
from ablate.stats.words import family_words

#: The measures the norm report tests (``ablate.stats.family``'s names).
NORM_MEASURES = ("norm.training", "norm.depth", "norm.seeds", "norm.final")
#: Norm measures with no ANOVA term (``ablate.stats.norms.factor_anova``: a run's deviation from its
#: variant's median is not an independent replicate).
NO_ANOVA = ("norm.seeds",)
#: ``ablate.stats.MIN_N_TEST``, mirrored, not imported (plan does not load SciPy; tests hold them
#: equal): the fewest seeds a cell needs before the reports test it — no comparison, no ANOVA below.
MIN_N_TEST = 3


def tested(spec: Spec) -> bool:
    """Whether the reports will test anything at the study's seeds: every cell runs them all (a
    sequential study's first look has ``min`` ≥ ``MIN_N_TEST``, which the spec enforces)."""
    return spec.sequential is not None or len(spec.seed_list) >= MIN_N_TEST


def _terms(grid: Sequence[Cell], factors: Sequence[str]) -> int:
    """Main effects and two-way interactions of the factors varied in ``grid``, when it is their
    full factorial (the reports' ANOVA needs one) of more than two cells (two cells' one contrast is
    their comparison, ``report.verdicts.TWO_CELLS``); else none."""
    if len(grid) <= 2:
        return 0
    varied = [name for name in factors if len({c.labels[name] for c in grid}) > 1]
    levels = math.prod(len({c.labels[name] for c in grid}) for name in varied) if varied else 1
    return len(varied) + math.comb(len(varied), 2) if varied and len(grid) == levels else 0


def family_counts(spec: Spec) -> tuple[int, int, int]:
    """(comparisons, ANOVA terms, measures) of the study's family as the design sets it: every other
    cell against the reference (the baseline's cell, else the first) and, on a full factorial, every
    main effect and two-way interaction, on every measure. The accuracy is tested by every report;
    the norm measures when the norm report is asked for, the depth (over layers) only between cells
    of more than one layer, and the spread over seeds with no ANOVA. The comparisons are the tests
    with a floor (the exact test's, ``ablate.stats.words.Reach``), the terms those without. The
    seeds are not counted: this is the family once they allow a test (``tested``)."""
    if not spec.report_names:
        return 0, 0, 0
    grid = cells(spec)
    base = spec.baseline()
    reference = next((c for c in grid if c.config == base), grid[0])
    deep = [c for c in grid if c.config["model"]["layers"] > 1]
    counts: list[tuple[int, int]] = [(len(grid) - 1, _terms(grid, list(spec.factors)))]  # the accuracy
    for measure in NORM_MEASURES if "norm_stability" in spec.report_names else ():
        on = deep if measure == "norm.depth" else grid
        compared = len(on) - 1 if reference in on else 0
        counts.append((compared, 0 if measure in NO_ANOVA or not on else _terms(on, list(spec.factors))))
    return sum(c for c, _ in counts), sum(t for _, t in counts), sum(1 for c, t in counts if c or t)


def family_size(spec: Spec) -> tuple[int, str]:
    """m of the study's family as the design sets it (``family_counts``), and how it is made up:
    "15 comparisons with the reference and 12 ANOVA terms on 5 measures"."""
    if not spec.report_names:
        return 0, "no report"
    comparisons, terms, measures = family_counts(spec)
    return comparisons + terms, family_words(comparisons, terms, measures)
