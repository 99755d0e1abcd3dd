"""The ``accuracy`` report's presentation: its tables, its sentences and its figures.

Every function takes a frame from ``ablate.stats`` (the analysis) or the results API and returns a
display frame (strings, one header per column), a list of sentences, or a matplotlib Figure.
Sentences are made only from the strings the tables print (each sentence function builds the
table it speaks for and quotes its cells), with one wording of significance (``format.verdict``);
numbers, intervals, p-values and missing values are written by ``ablate.report.format``. Figures
share the page size, style and the one factor → channel mapping (``plotting.Channels``) of
``ablate.report.plotting``: a cell has the same colour, line style and marker in every figure.
Adding a section to the report touches its analysis function in ``ablate.stats``, its table /
sentences / figure here, and the notebook ``ablate/report/notebooks/accuracy.py`` that shows them.

    tables.py   the display frames (cells, comparisons, power, few-run, convergence, effects,
                ANOVA, failures, tuning, references) and how the appendix tables name a cell
                (by its levels where they tell the cells apart) and say a column of one value once
    text.py     the lines around the tables and the sentences that quote them
    figures.py  the figures

This package re-exports their public names: ``from ablate.report import accuracy as acc`` reads
every one as ``acc.<name>``.
"""

from __future__ import annotations

from ablate.report.accuracy.figures import (
    accuracy_by_cell,
    comparison_plot,
    interaction_plot,
    interaction_plots,
    learning_curves,
    main_effects_plot,
    performance_profile_plot,
)
from ablate.report.accuracy.tables import (
    BELOW_RESOLUTION,
    IQM_CI_MIN_N,
    STILL_IMPROVING,
    anova_table,
    below_resolution,
    cell_table,
    comparison_intro,
    comparison_table,
    constant_columns,
    convergence_table,
    effect_size_note,
    failure_table,
    few_run_note,
    few_run_table,
    interaction_grid,
    level_names,
    main_effects_table,
    named,
    names_line,
    power_floor_note,
    power_table,
    reference_table,
    t_test_column,
    tuning_table,
)
from ablate.report.accuracy.text import (
    anova_intro,
    comparison_sentences,
    convergence_sentences,
    header_lines,
    main_effects_withheld,
    measure_lines,
    no_anova_text,
    summary_sentences,
    t_test_note,
    tuning_intro,
    tuning_sentences,
)
from ablate.report.provenance_tables import provenance_table, spec_text, versions_table

__all__ = [
    "BELOW_RESOLUTION",
    "IQM_CI_MIN_N",
    "STILL_IMPROVING",
    "accuracy_by_cell",
    "anova_intro",
    "anova_table",
    "below_resolution",
    "cell_table",
    "comparison_intro",
    "comparison_plot",
    "comparison_sentences",
    "comparison_table",
    "constant_columns",
    "convergence_sentences",
    "convergence_table",
    "effect_size_note",
    "failure_table",
    "few_run_note",
    "few_run_table",
    "header_lines",
    "measure_lines",
    "interaction_grid",
    "interaction_plot",
    "interaction_plots",
    "learning_curves",
    "level_names",
    "main_effects_plot",
    "main_effects_withheld",
    "main_effects_table",
    "named",
    "names_line",
    "no_anova_text",
    "performance_profile_plot",
    "power_floor_note",
    "power_table",
    "provenance_table",
    "reference_table",
    "spec_text",
    "summary_sentences",
    "t_test_column",
    "t_test_note",
    "tuning_intro",
    "tuning_sentences",
    "tuning_table",
    "versions_table",
]

