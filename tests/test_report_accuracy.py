"""The accuracy report's presentation (``ablate.report.accuracy``): its tables on a real partial study,
its sentences and figures on constructed data, and the report rendered through the CLI (HTML, PDF).

The study is the partial accuracy study of ``tests/real_studies.py`` (built once per session): a 2 × 2
grid that tuned and replicated on two seeds with one injected failure, grown by a third
normalisation level whose cells stay pending.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import real_studies as studies
from frames import CHANCE, METRIC, A, B, factorial, set_status

from ablate import stats
from ablate.report import accuracy as acc
from ablate.report import format as fmt

NAME = studies.ACCURACY_NAME


def _cli(root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "ABLATE_HOME": str(root / ".ablate"), "ABLATE_CACHE_DIR": str(root / "cache")}
    env.pop("ABLATE_STORAGE", None)
    env.pop("ABLATE_TRACKING_URI", None)
    res = subprocess.run([sys.executable, "-m", "ablate.cli", *args], capture_output=True, text=True, cwd=root,
                         env=env, timeout=600)
    if check:
        assert res.returncode == 0, f"{args}: {res.stdout}\n{res.stderr}"
    return res


@pytest.fixture(scope="module")
def study_root(accuracy_study) -> Path:
    return accuracy_study


@pytest.fixture(scope="module")
def res(study_root):
    return studies.load(study_root, NAME, curves=False, metrics=True)


@pytest.fixture(scope="module")
def rendered(study_root) -> Path:
    """The accuracy report, rendered once through the CLI (HTML and PDF), with a chosen reference."""
    out = f"out-{uuid.uuid4().hex[:8]}"  # the study is shared: each xdist worker renders its own
    _cli(study_root, "report", NAME, "--reports", "accuracy", "--format", "html,pdf", "--out", out,
         "--param", "reference=normalisation=xi, layers=2", "--param", "alpha=0.05")
    return study_root / out


# --- tables on the study ----------------------------------------------------------------------


def test_tables_from_the_study(res):
    trials = res.trials.to_pandas()
    chance = res.chance
    summary = stats.cell_summary(trials, "test_accuracy", chance)
    cells = acc.cell_table(summary, res.baseline_cell)
    assert list(cells.columns) == ["cell", "status", "n", "mean [95% CI]", "median", "sd", "diverged",
                                   "never learned", "failed", "pending"]
    assert cells.cell.iloc[0].endswith("(reference)")
    by = dict(zip(summary.cell_label, cells.to_dict("records"), strict=True))
    assert by["normalisation=gamma, layers=2"]["failed"] == "1" and by["normalisation=gamma, layers=2"]["n"] == 1
    assert by["normalisation=none, layers=1"]["status"] == "pending"
    assert by["normalisation=none, layers=1"]["mean [95% CI]"] == fmt.DASH
    failures = acc.failure_table(trials)
    assert list(failures.columns) == ["cell", "phase", "seed", "kind", "attempts", "message"]
    assert failures.kind.tolist() == ["error"] and "injected fault" in failures.message[0]
    refs = acc.reference_table(res.references().to_pandas(), trials, {"test_accuracy": summary})
    assert refs.confirmed.tolist()[0] == "yes" and "no (unconfirmed)" in refs.confirmed.tolist()
    assert refs.source.tolist()[-2:] == ["Pending paper", ""]  # two matching cells, the source named once
    assert refs["ours: mean [95% CI]"].tolist()[-2:] == ["pending", "pending"]

# --- the rendered report ----------------------------------------------------------------------


HEADERS = [
    "Summary", "Test accuracy per cell", "mean [95% CI]", "median", "diverged", "never learned", "pending",
    "Comparisons with the reference", "effect size", "p (Holm)", "rank test",
    "Main effects", "marginal mean [95% CI]", "Interactions", "Analysis of variance", "partial η²",
    "Learning curves", "Tuning", "best setting", "Against published numbers", "published in our CI",
    "Failures", "message", "Provenance", "Package versions", "The spec as run",
]


@pytest.mark.skipif(shutil.which("pdftotext") is None, reason="poppler-utils (pdftotext) is not installed")
def test_pdf_has_every_section_and_table_header(rendered):
    # Reading order, not -layout: a header that wraps inside its cell stays one phrase.
    text = subprocess.run(["pdftotext", str(rendered / "accuracy.pdf"), "-"], capture_output=True,
                          text=True, check=True).stdout
    flat = " ".join(text.split())
    missing = [h for h in HEADERS if h not in flat]
    assert not missing, f"not in the PDF text: {missing}"
    assert "Reference cell: normalisation=xi, layers=2 (chosen with the report parameter" in flat
    assert "Partial study" in flat and "model.normalisation: none" in flat  # the ANOVA says what it left out
    assert "injected fault" in flat and "Made-up et al. 2024" in flat and "Other paper" in flat
    assert "did not tune" not in flat and "train.lr" in flat
    assert "The study is partial" in flat


@pytest.mark.skipif(shutil.which("pdftotext") is None, reason="poppler-utils (pdftotext) is not installed")
def test_pdf_text_stays_inside_the_page(rendered):
    bbox = subprocess.run(["pdftotext", "-bbox", str(rendered / "accuracy.pdf"), "-"], capture_output=True,
                          text=True, check=True).stdout
    pages = re.findall(r'<page width="([\d.]+)" height="([\d.]+)">(.*?)</page>', bbox, re.S)
    assert len(pages) >= 3
    for width, height, body in pages:
        for x0, _y0, x1, y1 in re.findall(r'xMin="([\d.]+)" yMin="([\d.]+)" xMax="([\d.]+)" yMax="([\d.]+)"', body):
            assert float(x0) >= 0 and float(x1) <= float(width) and float(y1) <= float(height)


def test_html_is_self_contained(rendered):
    html = (rendered / "accuracy.html").read_text(encoding="utf-8")
    assert "<script" not in html.lower()
    for tag in re.findall(r"<(?:img|link|script|iframe|source|video|audio|embed|object)\b[^>]*>", html, re.I):
        for url in re.findall(r'(?:src|href|data)\s*=\s*["\']([^"\']*)', tag, re.I):
            assert not re.match(r"(?i)(https?:)?//", url), f"external resource: {tag[:200]}"
    assert not re.search(r"@import\s+url\(\s*['\"]?(https?:)?//", html, re.I)
    assert html.count("data:image/png;base64") >= 5  # per cell, comparisons, effects, interaction, curves
    assert "<table class=\"ablate" in html


def test_report_cli_rejects_bad_options(study_root):
    res = _cli(study_root, "report", NAME, "--format", "docx", check=False)
    assert res.returncode == 2 and "docx" in res.stderr
    res = _cli(study_root, "report", NAME, "--reports", "accuracy", "--param", "nonsense=1", check=False)
    assert res.returncode == 2 and "reference" in res.stderr
    res = _cli(study_root, "report", NAME, "--reports", "accuracy", "--param", "alpha=lots", check=False)
    assert res.returncode == 2 and "not a float" in res.stderr

# --- sentences on constructed data -------------------------------------------------------------


def _planted(effect: float, seeds: int = 8) -> pd.DataFrame:
    rng = np.random.default_rng(1)
    rows = []
    for cell, shift in (("base", 0.0), ("better", effect), ("same", 0.0)):
        for seed in range(seeds):
            rows.append({"cell_id": cell, "cell_label": f"variant={cell}", "seed": seed, "phase": "replicate",
                         "status": "complete", "variant": cell,
                         "test_accuracy": 0.6 + shift + rng.normal(0, 0.01)})
    return pd.DataFrame(rows)


def test_sentences_report_only_what_the_numbers_say():
    trials = _planted(0.05)
    comp = stats.compare_to_reference(trials, "test_accuracy", "base")
    lines = acc.comparison_sentences(comp, "test_accuracy")
    assert lines[0].startswith("1 of 2 comparisons with the reference (variant=base) is significant")
    better = comp[comp.cell_id == "better"].iloc[0]
    assert lines[1].startswith(f"variant=better beats the reference on test accuracy by {fmt.signed(better.mean_diff)}")
    assert f"p_adj {fmt.p_is(better.p_adj)}" in lines[1] and "paired t, 8 shared seeds" in lines[1]
    assert "not significant" in lines[2] and "variant=same" in lines[2]
    table = acc.comparison_table(comp)
    assert table[""].tolist() == [better["mark"], "n.s."]
    # A loss: lower is better, so a positive difference trails.
    worse = acc.comparison_sentences(comp, "test_loss", higher_is_better=False)
    assert "variant=better trails the reference" in worse[1]


def test_sentences_when_nothing_can_be_tested():
    trials = _planted(0.0, seeds=1)
    comp = stats.compare_to_reference(trials, "test_accuracy", "base")
    lines = acc.comparison_sentences(comp, "test_accuracy")
    assert lines == ["0 of 0 comparisons with the reference (variant=base) are significant at α = 0.05 after "
                     "Holm's correction; 2 cells have too few completed seeds to test."]
    summary = stats.cell_summary(trials, "test_accuracy", chance=0.7)
    text = " ".join(acc.summary_sentences(summary, "test_accuracy", 0.7, 0.02))
    assert "3 runs in 3 cells never learned" in text

# --- figures on a partial study ---------------------------------------------------------------


@pytest.fixture
def partial_study():
    trials = factorial(effect_a=0.03, seeds=4, rng=np.random.default_rng(6))
    trials = set_status(trials, "diagonal-layer", [0, 1, 2, 3], "pending")
    trials = set_status(trials, "rotation-none", [3], "diverged")
    trials.loc[(trials["cell_id"] == "rotation-none") & (trials["seed"] == 0), METRIC] = 0.5
    trials["cell_label"] = (
        "parameterisation=" + trials[A] + ", normalisation=" + trials[B] + " (a long label)"
    )
    steps = np.arange(0, 300, 50)
    curves = pd.DataFrame(
        [
            {
                "cell_id": cid,
                "cell_label": lbl,
                "seed": seed,
                "step": st,
                "name": "val_accuracy",
                "value": 0.5 + 0.3 * (1 - np.exp(-st / (80 + 10 * seed))),
            }
            for cid, lbl, seed, status in trials[["cell_id", "cell_label", "seed", "status"]].itertuples(
                index=False
            )
            if status == "complete"
            for st in steps
        ]
    )
    return trials, curves


def test_figures_build_on_a_partial_study(partial_study, tmp_path):
    trials, curves = partial_study
    cmp = stats.compare_to_reference(trials, METRIC, "rotation-xi", n_resamples=200)
    figs = {
        "cells": acc.accuracy_by_cell(trials, METRIC, CHANCE),
        "main": acc.main_effects_plot(trials, METRIC, [A, B], chance=CHANCE),
        "inter": acc.interaction_plot(trials, METRIC, A, B, CHANCE),
        "curves": acc.learning_curves(curves, "val_accuracy", cells=trials, chance=CHANCE),
        "compare": acc.comparison_plot(cmp, metric=METRIC),
    }
    for name, fig in figs.items():
        assert fig.get_figwidth() <= 7.0
        fig.savefig(tmp_path / f"{name}.pdf")
        fig.savefig(tmp_path / f"{name}.png")
        assert (tmp_path / f"{name}.pdf").stat().st_size > 1000
        renderer = fig.canvas.get_renderer()
        page = fig.bbox
        for ax in fig.axes:  # nothing drawn outside the figure (labels wrapped, not cut off)
            box = ax.get_tightbbox(renderer)
            assert box.x0 >= page.x0 - 1 and box.x1 <= page.x1 + 1, name
    texts = [t.get_text() for t in figs["curves"].axes[5].texts]
    assert "pending" in texts
    right = [t.get_text() for t in figs["cells"].axes[1].get_yticklabels()]
    assert "pending" in right and any("1 diverged" in t for t in right)


def test_figures_survive_an_empty_study(partial_study):
    trials, curves = partial_study
    nothing = set_status(trials, "rotation-xi", [0, 1, 2, 3], "pending")
    for cid in nothing["cell_id"].unique():
        nothing = set_status(nothing, cid, list(range(4)), "pending")
    acc.accuracy_by_cell(nothing, METRIC, CHANCE)
    acc.accuracy_by_cell(trials, METRIC, None)  # chance unknown
    acc.main_effects_plot(nothing, METRIC, [A, B])
    acc.interaction_plot(nothing, METRIC, A, B)
    acc.learning_curves(curves.iloc[0:0], "val_accuracy", cells=nothing)
