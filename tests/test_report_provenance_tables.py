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


def test_the_spec_as_run_prints_prose_as_blocks_and_reads_back_the_same() -> None:
    import yaml

    from ablate.report.provenance_tables import spec_text

    spec = {"name": "x", "description": "Does the RotRNN state norm stay near-constant through training, depth "
            "and seeds while the LRU's varies — and which factor carries it?\n", "multi": "a\nb\n",
            "odd": "x" * 70 + "  ", "train": {"lr": 0.001, "note": "short"}}
    text = spec_text({"spec": spec})
    assert yaml.safe_load(text) == spec
    assert "description: >\n" in text and "multi: |\n" in text
    assert not any(line.strip() in ("'", '"') for line in text.splitlines())  # no line holding a lone quote
