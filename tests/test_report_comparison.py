"""The comparison report (``ablate.report.comparison_tables`` and its notebook) over real studies on one
store (``tests/real_studies.py``: cmp-a, its follow-up cmp-b that reuses half of it, and cmp-c on
other data): what it compares, what it refuses to, and that the rendered PDF shows both studies."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest
import real_studies as studies
from pdfs import page_problems
from typer.testing import CliRunner

from ablate import stats
from ablate.report import comparison_tables as cmp
from ablate.stats import norms as sn

NAMES = [studies.FIRST["name"], studies.FOLLOW_UP["name"], studies.OTHER_DATA["name"]]


@pytest.fixture(scope="module")
def three(studies_root):
    return studies.load(studies_root, NAMES)


def test_the_follow_up_reused_what_it_shares(studies_root):
    outcomes = json.loads((studies_root / "outcomes.json").read_text())
    assert outcomes["cmp-a"] == {"queued": 4, "linked": {}, "ran": {"complete": 4}}
    assert outcomes["cmp-b"] == {"queued": 4, "linked": {"cmp-a": 4}, "ran": {"complete": 4}}
    assert outcomes["cmp-c"]["queued"] == 2  # other data: nothing to reuse


def test_variants_comparability_and_reference(three):
    variants = three.variants().to_pandas()
    assert len(variants) == 5  # 2 shared by cmp-a and cmp-b, 2 of cmp-b alone, 1 of cmp-c
    assert list(variants.studies).count("cmp-a, cmp-b") == 2
    assert list(variants.label) == ["normalisation=xi, heads=2, max_length=24", "normalisation=gamma, heads=2",
                                    "normalisation=xi, heads=4", "normalisation=gamma, heads=4",
                                    "normalisation=xi, heads=2, max_length=20"]  # factors first, then what else differs
    ref_id, why = cmp.reference_variant(variants, None, {r.study: r.baseline_cell for r in three.results})
    assert ref_id == three["cmp-a"].baseline_cell and "cmp-a" in why
    comp = stats.comparability(variants, ref_id)
    assert list(comp.comparable) == [True, True, True, True, False]
    assert comp.differs.iloc[-1] == ["max_length"]
    lines = cmp.comparability_lines(variants, comp, ref_id)
    assert "4 of 5 variants share the reference's data" in lines[0]
    assert "max_length 20 vs 24" in lines[1]


def test_frames_hold_each_item_once_with_curves_from_both_studies(three):
    trials, metrics, curves = three.frames()
    assert trials.height == 5 * 2  # five cells × two seeds, a shared one once
    assert trials.select("cell_id", "seed").unique().height == trials.height
    assert set(trials["study"]) == {"cmp-a, cmp-b", "cmp-b", "cmp-c"}
    df = sn.prepare(curves, trials)
    order = sn.variants(df, trials)
    assert len(order) == 5  # every variant's norm curves reach the figure
    per = sn.layer_norms(df, "probe")
    assert set(per.merge(trials.select("cell_id", "study").unique().to_pandas(), on="cell_id").study) == {
        "cmp-a, cmp-b", "cmp-b", "cmp-c"}


def test_a_selection_by_the_design_selector_syntax(three):
    heads = three.select([{"model.heads": 4}])
    assert set(heads.trials["study"]) == {"cmp-b"} and heads.trials["cell_id"].n_unique() == 2
    per_study = three.select({"cmp-a": [{"model.normalisation": "gamma"}]})
    assert per_study.trials.filter(per_study.trials["study"] == "cmp-a")["cell_id"].n_unique() == 1
    assert per_study.trials.filter(per_study.trials["study"] == "cmp-b")["cell_id"].n_unique() == 4
    with pytest.raises(ValueError, match="names what no study knows.*did you mean 'model.heads'"):
        three.select([{"model.haeds": 4}])
    # As the command line and the guide write them: text, or one mapping.
    for one in ("model.heads=4", {"model.heads": 4}, ["model.heads=4"], {"model.heads": [4]}):
        assert three.select(one).trials["cell_id"].to_list() == heads.trials["cell_id"].to_list(), one
    with pytest.raises(ValueError, match="select"):
        three.select("model.heads")  # not key=value


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("pdftotext") is None, reason="poppler-utils (pdftotext) is not installed")
def test_a_comparison_of_two_studies_renders_with_both_studies_curves(studies_root, tmp_path, monkeypatch):
    studies.study_env(monkeypatch, studies_root)
    res = CliRunner().invoke(app_cli(), ["report", "cmp-a", "cmp-b", "--compare", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    html = (tmp_path / "comparison.html").read_text()
    assert not re.search(r"<script[^>]+src=\"https?://", html), "the HTML must be self-contained"
    assert html.count("data:image/svg+xml;base64") >= 3  # figures as vector graphics
    text = subprocess.run(["pdftotext", "-layout", str(tmp_path / "comparison.pdf"), "-"], capture_output=True,
                          text=True).stdout
    for words in ("cmp-a-cmp-b", "Hidden-state norms in shared axes", "4 from cmp-a", "normalisation=gamma, heads=4",
                  "All 4 variants are trained and tested on the same data", "Comparisons with the reference"):
        assert words in " ".join(text.split()), words
    assert page_problems(tmp_path / "comparison.pdf") == []  # no split identifier, no near-empty page
    # A selection with another study's cell: the report says which variant is not compared, and why.
    res = CliRunner().invoke(app_cli(), ["compare", "cmp-a", "cmp-c", "--cells", "model.normalisation=xi",
                                         "--out", str(tmp_path / "c"), "--format", "pdf"])
    assert res.exit_code == 0, res.output
    text = " ".join(subprocess.run(["pdftotext", str(tmp_path / "c" / "comparison.pdf"), "-"], capture_output=True,
                                   text=True).stdout.split())
    assert "1 of 2 variants share the reference's data" in text and "1 is not" in text
    assert "max_length 20 vs 24" in text and "No other variant is on the reference's data" in text


def test_comparison_commands_refuse_bad_input_with_exit_2(studies_root, monkeypatch, tmp_path):
    studies.study_env(monkeypatch, studies_root)
    res = CliRunner().invoke(app_cli(), ["compare", "cmp-a", "cmp-b", "--cells", "model.haeds=4", "--out", str(tmp_path)])
    assert res.exit_code == 2 and "did you mean 'model.heads'" in res.output
    res = CliRunner().invoke(app_cli(), ["compare", "cmp-a", "--cells", "model.heads=16", "--out", str(tmp_path)])
    assert res.exit_code == 2 and "matches no cell" in res.output
    res = CliRunner().invoke(app_cli(), ["compare", "cmp-a", "nope", "--out", str(tmp_path)])
    assert res.exit_code == 1 and "no study named 'nope'" in res.output
    spec = tmp_path / "s.yaml"
    spec.write_text("name: s\ntask: {name: listops}\n")
    res = CliRunner().invoke(app_cli(), ["compare", "--spec", str(spec)])
    assert res.exit_code == 2 and "no `compare:` section" in res.output
    assert not list(tmp_path.glob("*.html"))


def app_cli():
    from ablate.cli import app

    return app
