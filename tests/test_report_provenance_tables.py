"""What produced a study's results (ablate.report.provenance_tables)."""

from __future__ import annotations

from ablate.report.provenance_tables import dirty_lines

CLEAN, DIRTY = "180e87fcd386b36d28c4f776cdc72b637dde2c0e", "47e79d827e07d4093a09e3c263ed523ed00031a8+dirty"


def test_runs_from_a_modified_checkout_are_said_before_the_verdicts() -> None:
    assert dirty_lines({"git_commits": {CLEAN: 35}}) == []
    assert dirty_lines({}) == []
    (line,) = dirty_lines({"git_commits": {DIRTY: 37, CLEAN: 35}})
    assert line.startswith("**37 of the 72 trials**") and "(47e79d827e+dirty)" in line
    (line,) = dirty_lines({"git_commits": {DIRTY: 18}})
    assert line.startswith("**All 18 trials**")
