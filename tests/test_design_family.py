"""The family a design implies (``ablate.design.family``) is the one its reports test: the count
``ablate plan`` warns with is each committed report's own "m = N tests"."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ablate import design
from ablate.design.family import family_size

ROOT = Path(__file__).resolve().parents[1]
REPORTS = sorted(p.parent.parent for p in (ROOT / "reports").glob("*/data/spec.yaml"))


@pytest.mark.parametrize("folder", REPORTS, ids=[p.name for p in REPORTS])
def test_the_design_counts_the_family_its_report_tested(folder: Path) -> None:
    spec = design.load(folder / "data" / "spec.yaml")
    if spec.sequential is not None:
        pytest.skip("a sequential study's reports test the sequential design's comparisons")
    text = re.sub(r"<[^>]+>|&nbsp;|\u00a0", " ", (folder / "accuracy.html").read_text(encoding="utf-8"))
    said = re.search(r"the same in every report: (.+?), m = (\d+) tests", " ".join(text.split()))
    assert said is not None, "the report's family sentence"
    m, how = family_size(spec)
    assert m == int(said[2])
    assert said[1].startswith(how)  # "15 comparisons with the reference and 12 ANOVA terms on 5 measures"
