"""The accuracy report's presentation (``ablate.report.accuracy``): its tables on a real partial study,
its sentences (checked against the tables they quote) and figures (one colour per level, read from
the SVG) on constructed data, and the report rendered through the CLI (HTML, PDF, exports).

The study is the partial accuracy study of ``tests/real_studies.py`` (built once per session): a 2 × 2
grid that tuned and replicated on two seeds with one injected failure, grown by a third
normalisation level whose cells stay pending.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import subprocess
import uuid
import xml.etree.ElementTree as ET
from pathlib import Path

import matplotlib as mpl
import numpy as np
import pandas as pd
import pytest
import real_studies as studies
from frames import CHANCE, METRIC, A, B, factorial, make_trials, set_status
from pdfs import flat, has, pages, svg_colours, svg_groups
from support import ABLATE

from ablate import stats
from ablate.report import accuracy as acc
from ablate.report import format as fmt
from ablate.report import plotting
from ablate.report.plotting import Channels

NAME = studies.ACCURACY_NAME


def _cli(root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "ABLATE_HOME": str(root / ".ablate"), "ABLATE_CACHE_DIR": str(root / "cache")}
    env.pop("ABLATE_STORAGE", None)
    env.pop("ABLATE_TRACKING_URI", None)
    res = subprocess.run([*ABLATE, *args], capture_output=True, text=True, cwd=root,
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
def rendering(study_root) -> tuple[Path, subprocess.CompletedProcess]:
    """The accuracy report, rendered once through the CLI (HTML, PDF and exports), with a chosen
    reference: its directory and the finished command."""
    out = f"out-{uuid.uuid4().hex[:8]}"  # the study is shared: each xdist worker renders its own
    res = _cli(study_root, "report", NAME, "--reports", "accuracy", "--format", "html,pdf", "--out", out,
               "--param", "reference=normalisation=xi, layers=2", "--param", "alpha=0.05", "--export")
    return study_root / out, res


@pytest.fixture(scope="module")
def rendered(rendering) -> Path:
    return rendering[0]


# --- tables on the study ----------------------------------------------------------------------


def test_tables_from_the_study(res):
    trials = res.trials.to_pandas()
    chance = res.chance
    summary = stats.cell_summary(trials, "test_accuracy", chance)
    cells = acc.cell_table(summary, res.baseline_cell)
    assert list(cells.columns) == ["cell", "status", "n", "mean [95% CI]", "sd over seeds", "median", "diverged",
                                   "never learned", "failed", "pending"]
    with_se = acc.cell_table(summary, res.baseline_cell, n_test=32)
    assert "test-set SE (N\u00a0=\u00a032)" in with_se.columns
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
    "The answer", "Summary", "Per cell", "Main effects", "Appendix: cells", "Test accuracy per cell", "mean [95% CI]",
    "sd over seeds", "median", "diverged", "never learned", "pending", "Appendix: comparisons with the reference",
    "exact permutation test", "verdict", "effect size", "p (Holm)", "t-test p (Holm over these", "Power line",
    "seeds for 80% power", "Appendix: few-run estimates", "IQM [95% trimmed-t CI]", "P(cell > reference)",
    "Performance profiles", "Appendix: factor effects", "marginal mean [95% CI]", "Interactions",
    "Analysis of variance", "Appendix: convergence", "Appendix: learning curves", "Learning curves",
    "Appendix: tuning", "best setting", "Appendix: against published numbers", "published in our CI",
    "Appendix: failures", "message", "Provenance", "Package versions", "The spec as run",
]


@pytest.mark.skipif(shutil.which("pdftotext") is None, reason="poppler-utils (pdftotext) is not installed")
def test_pdf_has_every_section_and_table_header(rendered):
    text = "".join(pages(rendered / "accuracy.pdf"))
    missing = [h for h in HEADERS if not has(text, h)]  # wherever the host's layout wraps a header
    assert not missing, f"not in the PDF text: {missing}"
    # The answer first: the body (summary and figures), then every table in an appendix.
    at = [flat(text).index(flat(h)) for h in ("The answer", "Summary", "Per cell", "Appendix: cells",
                                               "Appendix: failures", "Provenance")]
    assert at == sorted(at), at
    assert has(text, "Reference cell: normalisation=xi, layers=2 (chosen with the report parameter")
    # Two seeds a cell (one failed): no ANOVA, as no comparison, is tested below three (one policy for every test).
    assert has(text, "No ANOVA table: too few seeds to test (a cell has 1; at least 3 are needed)")  # its failed seed
    assert has(text, "injected fault") and has(text, "Made-up et al. 2024") and has(text, "Other paper")
    assert not has(text, "did not tune") and has(text, "train.lr")
    assert has(text, "The study is partial")
    # Two seeds per cell: nothing is tested, nothing is significant, and the raw differences are given.
    assert has(text, "too few seeds to test (n = 2)") and has(text, "Δ per seed")
    assert not re.search(r"(?<!not)significant\*", flat(text))  # no verdict carries a mark


@pytest.mark.skipif(shutil.which("pdftotext") is None, reason="poppler-utils (pdftotext) is not installed")
def test_pdf_is_vector_with_the_reports_fonts_and_keeps_row_groups_on_one_page(rendered):
    pdf = rendered / "accuracy.pdf"
    images = subprocess.run(["pdfimages", "-list", str(pdf)], capture_output=True, text=True, check=True).stdout
    assert len(images.strip().splitlines()) == 2, images  # the header only: every figure is vector graphics
    fonts = subprocess.run(["pdffonts", str(pdf)], capture_output=True, text=True, check=True).stdout
    names = [line.split()[0] for line in fonts.strip().splitlines()[2:]]
    assert names and all(n.split("+")[-1].startswith("ablate-") for n in names), names
    # The reference "Pending paper" matches two cells: its rows are one group, on one page.
    text = pages(pdf)
    start = next(i for i, page in enumerate(text) if has(page, "published in our CI"))
    page = flat(text[start])
    group = page[page.index(flat("Pending paper")):]
    group = group[:group.index("Failures")] if "Failures" in group else group
    assert group.count(flat("normalisation=none, layers=")) == 2  # both of its rows, on this page


@pytest.mark.skipif(shutil.which("pdftotext") is None, reason="poppler-utils (pdftotext) is not installed")
def test_pdf_text_stays_inside_the_page(rendered):
    bbox = subprocess.run(["pdftotext", "-bbox", str(rendered / "accuracy.pdf"), "-"], capture_output=True,
                          text=True, check=True).stdout
    pages_ = re.findall(r'<page width="([\d.]+)" height="([\d.]+)">(.*?)</page>', bbox, re.S)
    assert len(pages_) >= 3
    for width, height, body in pages_:
        for x0, _y0, x1, y1 in re.findall(r'xMin="([\d.]+)" yMin="([\d.]+)" xMax="([\d.]+)" yMax="([\d.]+)"', body):
            assert float(x0) >= 0 and float(x1) <= float(width) and float(y1) <= float(height)


def test_html_is_self_contained(rendered):
    html = (rendered / "accuracy.html").read_text(encoding="utf-8")
    assert "<script" not in html.lower()
    for tag in re.findall(r"<(?:img|link|script|iframe|source|video|audio|embed|object)\b[^>]*>", html, re.I):
        for url in re.findall(r'(?:src|href|data)\s*=\s*["\']([^"\']*)', tag, re.I):
            assert not re.match(r"(?i)(https?:|file:)?//", url), f"external resource: {tag[:200]}"
    assert not re.search(r"@import\s+url\(\s*['\"]?(https?:)?//", html, re.I)
    assert not re.search(r"url\(\s*['\"]?file:", html)  # the PDF's font files are not the HTML's business
    # Figures are vector images: per cell, comparisons, profiles, effects, interaction, curves.
    assert len(re.findall(r'<img[^>]* src="data:image/svg\+xml;base64,', html)) >= 6
    assert not re.search(r'<img[^>]* src="data:image/png', html)
    assert "<table class=\"ablate" in html


def test_report_prints_nothing_but_what_it_wrote(rendering):
    out, res = rendering
    assert res.stderr == "", res.stderr  # no kernel, MLflow or library warnings on the terminal
    lines = res.stdout.strip().splitlines()
    assert lines[:2] == [f"wrote {out.name}/accuracy.html", f"wrote {out.name}/accuracy.pdf"]
    assert any(line.startswith("wrote ") and line.endswith(f"{out.name}/figures") for line in lines)


def test_exported_figures_and_tables_exist_and_open(rendered):
    figures, tables = rendered / "figures", rendered / "tables"
    stems = {p.name.split(".")[0] for p in figures.iterdir()}
    assert {"accuracy-cells", "accuracy-comparisons", "accuracy-main-effects", "accuracy-interaction",
            "accuracy-learning-curves", "accuracy-profiles"} <= stems
    for stem in stems:
        assert {p.suffix for p in figures.glob(f"{stem}.*")} == {".pdf", ".svg", ".png"}, stem
        ET.fromstring((figures / f"{stem}.svg").read_bytes())  # parses
        info = subprocess.run(["pdfinfo", str(figures / f"{stem}.pdf")], capture_output=True, text=True).stdout
        assert re.search(r"Pages:\s+1", info), stem
        png = (figures / f"{stem}.png").read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
        width = int.from_bytes(png[16:20], "big")
        assert width == round(plotting.WIDTH * plotting.EXPORT_DPI) or width >= 1500, (stem, width)  # 300 dpi
    names = {p.name for p in tables.iterdir()}
    for stem in ("accuracy-cells", "accuracy-comparisons", "accuracy-power", "accuracy-few-run",
                 "accuracy-main-effects", "accuracy-published", "accuracy-failures",  # no ANOVA at 2 seeds a cell
                 "accuracy-provenance", "accuracy-tuning"):
        assert {f"{stem}.csv", f"{stem}.tex"} <= names, stem
        tex = (tables / f"{stem}.tex").read_text()
        assert r"\toprule" in tex and r"\bottomrule" in tex
        frame = pd.read_csv(tables / f"{stem}.csv", dtype=str, keep_default_na=False)
        assert len(frame.columns) >= 2 and len(frame) >= 1
    cells = pd.read_csv(tables / "accuracy-cells.csv", dtype=str, keep_default_na=False)
    assert cells.columns[0] == "cell" and "mean [95% CI]" in cells.columns
    data = pd.read_csv(tables / "accuracy-cells-data.csv")
    assert {"cell_id", "mean", "ci_low", "ci_high"} <= set(data.columns)


def test_report_cli_rejects_bad_options(study_root):
    res = _cli(study_root, "report", NAME, "--format", "docx", check=False)
    assert res.returncode == 2 and "docx" in res.stderr
    res = _cli(study_root, "report", NAME, "--reports", "accuracy", "--param", "nonsense=1", check=False)
    assert res.returncode == 2 and "reference" in res.stderr
    res = _cli(study_root, "report", NAME, "--reports", "accuracy", "--param", "alpha=lots", check=False)
    assert res.returncode == 2 and "alpha=lots: not a number" in res.stderr

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
    table = acc.comparison_table(comp)
    lines = acc.comparison_sentences(comp, "test_accuracy")
    assert lines[0].startswith("1 of 2 tested comparisons with the reference (variant=base) is significant at "
                               "α = 0.05 (exact permutation test, Holm's correction)")
    better = comp[comp.cell_id == "better"].iloc[0]
    delta = table.loc[table.cell == "variant=better", "Δ vs reference [95% CI]"].iloc[0]
    assert lines[1].startswith(f"variant=better beats the reference on test accuracy by {delta}")
    assert f"p_adj = {fmt.pval(better.p_adj)}" in lines[1] and "exact sign-flip" in lines[1]
    assert "not significant" in lines[2] and "variant=same" in lines[2]
    assert table["verdict"].tolist() == [f"significant {better['mark']}", "not significant n.s."]
    # A loss: lower is better, so a positive difference trails.
    worse = acc.comparison_sentences(comp, "test_loss", higher_is_better=False)
    assert "variant=better trails the reference" in worse[1]


def test_sentences_when_nothing_can_be_tested():
    trials = _planted(0.0, seeds=1)
    comp = stats.compare_to_reference(trials, "test_accuracy", "base")
    lines = acc.comparison_sentences(comp, "test_accuracy")
    assert lines[0] == ("None of the 2 comparisons with the reference (variant=base) can be tested: every cell has "
                        "too few seeds (n = 1; the tests need 3). The raw differences are in the table: read them as "
                        "description, not evidence.")
    summary = stats.cell_summary(trials, "test_accuracy", chance=0.7)
    text = " ".join(acc.summary_sentences(summary, "test_accuracy", 0.7, 0.02))
    assert "3 runs in 3 cells never learned" in text


def test_two_seeds_with_equal_differences_say_too_few_seeds_never_a_p_of_zero():
    """The issue's study: 2 seeds whose differences happen to be equal used to print p_adj < 0.001 ***."""
    trials = make_trials({"ref": 0.80, "heads1": 0.83}, seeds=2, sd=0.0)
    comp = stats.compare_to_reference(trials, METRIC, "ref")
    row = acc.comparison_table(comp).iloc[0]
    assert row["verdict"] == "too few seeds to test (n\u00a0=\u00a02)" and row["p (Holm)"] == fmt.DASH
    assert row["Δ vs reference [95% CI]"] == "Δ per seed: +0.030, +0.030"
    text = " ".join(acc.comparison_sentences(comp, METRIC))
    assert "can be tested" in text and "too few seeds (n = 2" in text
    assert "***" not in text and "< 0.001" not in text and "significant at" not in text.replace("not significant", "")
    power = acc.power_table(comp).iloc[0]
    assert power["note"] == "no spread in these seeds" and power["seeds for 80% power"] == fmt.DASH


NUMBER = re.compile(r"[+−-]?\d+(?:,\d{3})*(?:\.\d+)?(?:e[+−-]?\d+)?%?")


def _cells_text(*tables: pd.DataFrame) -> str:
    return " ".join(str(v) for t in tables for v in t.astype(str).to_numpy().ravel()).replace("\u00a0", " ")


def test_every_number_and_verdict_of_the_summary_comes_from_a_table_cell():
    """The summary (of the accuracy report) made from the tables it sits above: every number it
    writes is written the same way in a cell of one of them, and each comparison it calls significant
    or not is called so by its row's verdict."""
    rng = np.random.default_rng(3)
    trials = make_trials({"base": 0.70, "up": 0.74, "same": 0.70, "noisy": 0.70}, seeds=8, sd=0.01, rng=rng,
                         factors={"base": {A: "rot"}, "up": {A: "diag"}, "same": {A: "none"}, "noisy": {A: "x"}})
    few = make_trials({"two": 0.9}, seeds=2, sd=0.0, factors={"two": {A: "two"}})
    trials = pd.concat([trials, few], ignore_index=True)
    trials["val_gain_last"] = np.where(trials["cell_id"] == "up", 0.041, 0.0)
    trials["converged"] = trials["cell_id"] != "up"
    summary = stats.cell_summary(trials, METRIC, 0.5)
    comp = stats.compare_to_reference(trials, METRIC, "base", min_effect=0.01)
    conv = stats.cell_convergence(trials, 300)
    sentences = (acc.summary_sentences(summary, METRIC, 0.5, 0.02, conv=conv)
                 + acc.comparison_sentences(comp, METRIC, conv=conv) + acc.convergence_sentences(conv))
    tables = [acc.cell_table(summary, "base", conv=conv), acc.comparison_table(comp, conv=conv), acc.power_table(comp),
              acc.convergence_table(conv)]
    printed = _cells_text(*tables)
    allowed = {"0.05", "95%", "80%", "20%", "3", "2", "8", "4", "0.010"}  # α, levels, counts, min_effect in words
    for sentence in sentences:
        for token in NUMBER.findall(sentence.replace("\u00a0", " ")):
            assert token in printed or token.lstrip("+") in allowed or token in allowed, (token, sentence)
    table = tables[1].set_index("cell")
    improving = "parameterisation=diag"
    for sentence in sentences:
        for label in comp["cell_label"]:
            name = label + (f" {acc.STILL_IMPROVING}" if label == improving else "")
            if sentence.startswith(f"{label} beats") or sentence.startswith(f"{label} trails"):
                assert table.loc[name, "verdict"].startswith("significant"), sentence
            if f"not significant, the largest is {label}:" in sentence:
                assert table.loc[name, "verdict"].startswith("not significant"), sentence
    # The cell still improving is never concluded on without saying so.
    for sentence in sentences:
        if sentence.startswith(improving) or f"largest is {improving}" in sentence or f"mean {METRIC}" in sentence:
            assert improving not in sentence or "still improving" in sentence, sentence
    assert sum(improving in s for s in sentences) >= 2  # it beats the reference: said, with its caveat
    assert any("Budget too small for 1 cell" in s and "+4.1 points" in s for s in sentences)


def test_convergence_table_flags_budget_too_small_and_steps_used():
    trials = make_trials({"short": 0.7, "ok": 0.8}, seeds=2)
    trials["converged"] = [False, False, True, True]
    trials["val_gain_last"] = [0.041, 0.03, 0.0, 0.001]
    trials["steps"] = [300, 300, 180, 300]
    trials["stopped_early"] = [False, False, True, False]
    conv = stats.cell_convergence(trials, 300)
    table = acc.convergence_table(conv).set_index("cell")
    assert table.loc[f"short {acc.STILL_IMPROVING}", "val accuracy gain, last 20% of steps"] == "+4.1 points"
    assert table.loc["ok", "steps used"] == "180–300 of 300" and table.loc["ok", "stopped early"] == "1"
    text = " ".join(acc.convergence_sentences(conv))
    assert "Budget too small for 1 cell" in text and "short (val accuracy +4.1 points)" in text
    assert "ok 180–300 of 300" in text and "1 run stopped early" in text
    old = acc.convergence_sentences(stats.cell_convergence(make_trials({"a": 0.7}, seeds=2), 300))
    assert old and "not recorded" in old[0]
    # A 3-step smoke run records its steps but cannot measure a trend: it does not predate the record.
    short = make_trials({"a": 0.7}, seeds=2).assign(steps=[3, 3], converged=[None, None])
    said = acc.convergence_sentences(stats.cell_convergence(short, 3))
    assert said and "cannot be measured at 3 steps per run" in said[0] and "predate" not in said[0], said


def test_an_until_converged_sentence_says_whether_the_extensions_continued_a_checkpoint():
    trials = make_trials({"a": 0.7}, seeds=3)
    trials["converged"] = [True, True, True]
    trials["steps"] = [4000, 8000, 12000]
    trials["budget"] = [None, 8000, 12000]
    trials["extended_from"] = [None, 4000, 4000]
    for continued, words in (([None, "a · seed 1 · step 3200", "a · seed 2 · step 6400"], "each extended run continued"),
                             ([None, None, None], "each trained from step 0"),
                             ([None, "a · seed 1 · step 3200", None], "1 of the 2 extended runs continued")):
        trials["continued_from"] = continued
        conv = stats.cell_convergence(trials, 4000)
        assert conv.iloc[0]["n_extended"] == 2 and conv.iloc[0]["n_continued"] == sum(c is not None for c in continued)
        assert words in " ".join(acc.convergence_sentences(conv))
        # The two extended runs stopped at 8,000 and 12,000: it said "4,000 → 12,000" as if both had gone on.
        assert "2 of 3 runs, 4,000 → 8,000–12,000 steps" in " ".join(acc.convergence_sentences(conv))
    trials["budget"] = [None, 12000, 12000]
    assert "4,000 → 12,000 steps" in " ".join(acc.convergence_sentences(stats.cell_convergence(trials, 4000)))

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


def _figures(trials: pd.DataFrame, curves: pd.DataFrame, channels: Channels) -> dict:
    cmp = stats.compare_to_reference(trials, METRIC, "rotation-xi")
    profile = stats.performance_profile(trials, METRIC)
    return {
        "cells": acc.accuracy_by_cell(trials, METRIC, CHANCE, channels=channels, n_test=1000),
        "main": acc.main_effects_plot(trials, METRIC, [A, B], chance=CHANCE, channels=channels),
        "inter": acc.interaction_plot(trials, METRIC, A, B, CHANCE, channels=channels),
        "inters": acc.interaction_plots(trials, METRIC, [(A, B)], CHANCE, channels=channels),
        "curves": acc.learning_curves(curves, "val_accuracy", cells=trials, chance=CHANCE, channels=channels),
        "compare": acc.comparison_plot(cmp, metric=METRIC, channels=channels),
        "profiles": acc.performance_profile_plot(profile, METRIC, chance=CHANCE, channels=channels),
    }


def test_figures_build_on_a_partial_study(partial_study, tmp_path):
    trials, curves = partial_study
    figs = _figures(trials, curves, Channels.from_trials(trials, [A, B]))
    for name, fig in figs.items():
        assert fig.get_figwidth() <= 7.0
        paths = plotting.save_figure(fig, tmp_path, name)
        assert all(p.stat().st_size > 1000 for p in paths)
        fig.canvas.draw()  # laid out again at the figure's own resolution (the export drew it at 300 dpi)
        renderer = fig.canvas.get_renderer()
        page = fig.bbox
        for ax in fig.axes:  # nothing drawn outside the figure (labels wrapped, not cut off)
            box = ax.get_tightbbox(renderer)
            assert box.x0 >= page.x0 - 1 and box.x1 <= page.x1 + 1, name
    texts = [t.get_text() for ax in figs["curves"].axes for t in ax.texts]
    assert any(t.startswith("pending:") and "normalisation=layer" in t for t in texts)
    right = [t.get_text() for t in figs["cells"].axes[1].get_yticklabels()]
    assert "pending" in right and any("1 diverged" in t for t in right)


def test_one_colour_per_level_in_every_figure(partial_study):
    """Read from the SVG: a level of the colour factor is drawn in its one colour in every figure
    that shows it, no figure draws a level's colour for anything else, and the legends name the
    factors and their levels (not concatenated labels)."""
    trials, curves = partial_study
    channels = Channels.from_trials(trials, [A, B])
    assert channels.color_factor == A and channels.style_factor == B and not channels.facet_factors
    palette = {c.lower() for c in channels.color.values()}
    assert len(palette) == 2
    figs = _figures(trials, curves, channels)
    for name, fig in figs.items():
        drawn = svg_colours(plotting.svg(fig))
        assert palette <= drawn, (name, palette - drawn)  # both parameterisations, each in its colour
        stray = {c for c in drawn if c in {p.lower() for p in plotting.CATEGORICAL}} - palette
        assert not stray, (name, stray)  # no other palette colour: one mapping, decided once
    # Element by element: every artist drawn for a cell (or a level) is in its level's colour.
    expected = {f"cell:{cid}": channels.style(cid)["color"].lower() for cid in trials["cell_id"].unique()}
    expected |= {f"level:{A}={lv}": c.lower() for lv, c in channels.color.items()}
    checked = 0
    for name, fig in figs.items():
        groups = {**svg_groups(plotting.svg(fig), "cell:"), **svg_groups(plotting.svg(fig), "level:")}
        assert groups or name == "inter", name
        for gid, colours in groups.items():
            if gid in expected and colours:  # (an empty group: a pending cell's seeds, none drawn)
                assert expected[gid] in colours, (name, gid, colours)
                assert not (colours & palette) - {expected[gid]}, (name, gid, colours)
                checked += 1
    assert checked >= 20
    titles = {t.get_text() for fig in figs.values() for leg in fig.legends for t in [leg.get_title()]}
    assert {"parameterisation", "normalisation"} <= titles
    labels = {t.get_text() for leg in figs["curves"].legends for t in leg.get_texts()}
    assert {"rotation", "diagonal", "xi", "none", "layer"} <= labels
    assert not any("parameterisation=" in lbl for lbl in labels)


def test_palettes_are_distinguishable_and_ordered_levels_get_a_ramp():
    from matplotlib.colors import to_rgb

    categorical = plotting.palette(["rotation", "complex_diagonal", "diagonal", "none", "xi", "gamma"])
    rgb = [np.array(to_rgb(c)) for c in categorical.values()]
    closest = min(np.linalg.norm(a - b) for i, a in enumerate(rgb) for b in rgb[i + 1:])
    assert closest > 0.25, closest  # no three near-identical oranges
    ramp = plotting.palette(["1", "4", "16", "32"])
    assert list(ramp.values()) != list(plotting.CATEGORICAL[:4])  # numeric levels: an ordered ramp
    lightness = [sum(to_rgb(c)) for c in ramp.values()]
    assert lightness == sorted(lightness)
    three = Channels.from_factors(["model.heads", "model.normalisation", "train.lr", "task.seed"],
                                  {"model.heads": [1, 4], "model.normalisation": ["xi", "gamma"],
                                   "train.lr": [0.1, 0.01], "task.seed": [0]},
                                  {"c": {"model.heads": 4, "model.normalisation": "gamma", "train.lr": 0.01,
                                         "task.seed": 0}})
    assert three.factors == ("model.heads", "model.normalisation", "train.lr")  # one level: no channel
    assert three.style("c") == {"color": three.color["4"], "linestyle": "--", "marker": "s", "gid": "cell:c"}
    assert three.facet("c") == "lr = 0.01" and three.facets() == ["lr = 0.01"]


def _drawn(fig) -> tuple[list[str], int]:
    """A figure's visible texts, and how many data points its axes plot (lines, markers, bars)."""
    texts = [t.get_text() for t in fig.findobj(mpl.text.Text) if t.get_visible() and t.get_text().strip()]
    points = 0
    for ax in fig.axes:
        # a reference or chance line is two points and no marker; data have markers or more points
        points += sum(len(line.get_xdata()) for line in ax.get_lines()
                      if line.get_marker() not in (None, "None", "", " ") or len(line.get_xdata()) > 2)
        points += sum(len(c.get_offsets()) for c in ax.collections)
        points += len(ax.patches)
    return texts, points


def test_figures_of_an_empty_study_say_so_and_plot_nothing(partial_study):
    """Before: this test only checked that nothing raised. Every figure of a study with no finished
    run draws no data point and says why it is empty."""
    trials, curves = partial_study
    nothing = set_status(trials, "rotation-xi", [0, 1, 2, 3], "pending")
    for cid in nothing["cell_id"].unique():
        nothing = set_status(nothing, cid, list(range(4)), "pending")
    figures = {
        "cells": acc.accuracy_by_cell(nothing, METRIC, CHANCE),
        "main effects": acc.main_effects_plot(nothing, METRIC, [A, B]),
        "interaction": acc.interaction_plot(nothing, METRIC, A, B),
        "interactions": acc.interaction_plots(nothing, METRIC, [(A, B)]),
        "curves": acc.learning_curves(curves.iloc[0:0], "val_accuracy", cells=nothing),
        "profiles": acc.performance_profile_plot(stats.performance_profile(nothing, METRIC), METRIC),
        "comparisons": acc.comparison_plot(stats.compare_to_reference(nothing, METRIC, "rotation-xi"), metric=METRIC),
    }
    for name, fig in figures.items():
        texts, points = _drawn(fig)
        assert points == 0, (name, points)
        assert any(word in " ".join(texts).lower() for word in ("no ", "nothing", "not yet", "pending", "too few")), (name, texts)
    # With runs but the chance level unknown, the cells are drawn and no chance line is.
    texts, points = _drawn(acc.accuracy_by_cell(trials, METRIC, None))
    assert points > 0 and not any("chance" in t for t in texts)


def test_tuning_sentences_name_a_spread_and_an_edge_of_the_tuned_settings_the_table_shows():
    """The rotation-heads cases: cells tuned by separate draws trained at learning rates 3× apart
    (and the ranking followed them); on a grid, every cell chose its largest value. The sentences
    quote the tuning table's values."""
    import json as _json

    from ablate.spec.models import TuneSpec

    tuning = pd.DataFrame({
        "cell_id": ["a", "b", "c"], "cell_label": ["heads=1", "heads=4", "heads=16"],
        "planned": 3, "complete": 3, "pruned": 0, "failed": 0, "unfinished": 0, "best_index": [2, 1, 1],
        "best_value": [0.49, 0.46, 0.52], "tuned_from": None,
        "best_params": [_json.dumps({"train.lr": v, "train.batch_size": 32}) for v in (0.00626, 0.00273, 0.00845)]})
    tpe = TuneSpec(trials=3, space={"train.lr": {"low": 1e-3, "high": 1e-2, "log": True}})
    [line] = acc.tuning_sentences(tuning, tpe)
    assert line.startswith("The cells' best train.lr spans 0.00273 (heads=4) to 0.00845 (heads=16), 3.1×")
    assert "(tpe sampler)" in line and "tune.sampler: grid" in line
    shown = acc.tuning_table(tuning, "val_accuracy")["best setting"].tolist()
    assert "train.lr=0.00273" in shown[1] and "train.lr=0.00845" in shown[2]
    close = tuning.assign(best_params=[_json.dumps({"train.lr": v}) for v in (0.004, 0.005, 0.006)])
    assert acc.tuning_sentences(close, tpe) == []
    # A grid whose largest value every cell chose; one cell at the lower edge of a log range.
    grid = TuneSpec(trials=3, sampler="grid", space={"train.lr": [2.5e-3, 5e-3, 1e-2]})
    top = tuning.assign(best_params=[_json.dumps({"train.lr": 0.01})] * 3)
    assert acc.tuning_sentences(top, grid) == [
        "The best train.lr of every cell is at the largest end of the search space (choices 0.0025, 0.005, 0.01): "
        "the best setting may lie beyond it."]
    low = tuning.assign(best_params=[_json.dumps({"train.lr": v}) for v in (0.00105, 0.004, 0.005)])
    assert acc.tuning_sentences(low, tpe)[0].startswith("The best train.lr of heads=1 is at the smallest end")
    # Grid picks 4× apart: on one tuning seed the sentence says how to pick by a mean; on three it does not.
    spread = tuning.assign(best_params=[_json.dumps({"train.lr": v}) for v in (0.0025, 0.005, 0.01)])
    assert acc.tuning_sentences(spread, grid)[-1].endswith(
        "Each cell picked it on one tuning seed, whose noise can decide between close settings; `tune.seeds: 3` "
        "(with `tune.trials: 9`) picks by the mean over three.")
    on_three = TuneSpec(trials=9, sampler="grid", seeds=3, space={"train.lr": [2.5e-3, 5e-3, 1e-2]})
    assert acc.tuning_sentences(spread, on_three)[-1].endswith("a difference between cells can be one of train.lr.")
    assert "the best mean over the seeds" in acc.tuning_intro(on_three)
    assert acc.tuning_intro(grid).startswith("Each cell ran 3 tuning trials (grid sampler) on tuning seed 10000,")
    # Most cells at an edge: the few that are not are named, between semicolons (labels have commas).
    labels = ["p=rotation, n=xi", "p=rotation, n=gamma", "p=complex, n=xi"]
    most = tuning.assign(cell_label=labels, best_params=[_json.dumps({"train.lr": v}) for v in (0.01, 0.01, 0.005)])
    assert acc.tuning_sentences(most, grid)[0].startswith(
        "The best train.lr of 2 of 3 cells (all but p=complex, n=xi) is at the largest end")
    four = pd.concat([tuning, tuning.iloc[[0]].assign(cell_id="d", cell_label="heads=32")], ignore_index=True)
    two = four.assign(best_params=[_json.dumps({"train.lr": v}) for v in (0.01, 0.005, 0.01, 0.005)])
    assert acc.tuning_sentences(two, grid)[0].startswith("The best train.lr of 2 of 4 cells (heads=1; heads=16) is at")
    # More than acc.text.NAMED_CELLS to name: the count, and the table that names them.
    many = pd.concat([tuning.iloc[[0]].assign(cell_id=f"c{i}", cell_label=f"p={i}") for i in range(10)],
                     ignore_index=True).assign(best_params=[_json.dumps({"train.lr": 0.01 if i < 6 else 0.0025})
                                                            for i in range(10)])
    assert acc.tuning_sentences(many, grid)[:2] == [
        "The best train.lr of 6 of 10 cells (the appendix's tuning table gives each) is at the largest end of the "
        "search space (choices 0.0025, 0.005, 0.01): the best setting may lie beyond it.",
        "The best train.lr of 4 of 10 cells (the appendix's tuning table gives each) is at the smallest end of the "
        "search space (choices 0.0025, 0.005, 0.01): the best setting may lie beyond it."]
    three = many.assign(best_params=[_json.dumps({"train.lr": 0.01 if i < 7 else 0.005}) for i in range(10)])
    assert acc.tuning_sentences(three, grid)[0].startswith("The best train.lr of 7 of 10 cells (all but p=7; p=8; p=9)")


def test_few_run_table_names_each_interval_and_says_when_the_iqm_is_the_mean():
    trials = make_trials({"base": 0.80, "up": 0.82}, seeds=5, sd=0.01, rng=np.random.default_rng(8))
    trials = pd.concat([trials, make_trials({"three": 0.81}, seeds=3, sd=0.01)], ignore_index=True)
    few = stats.few_run_estimates(trials, METRIC, "base")
    table = acc.few_run_table(few, "base").set_index("cell")
    assert list(table.columns) == ["n", "mean [95% t CI]", "IQM [95% trimmed-t CI]",
                                   "P(cell > reference) [95% Newcombe CI]"]
    assert table.loc["three", "IQM [95% trimmed-t CI]"] == "the mean (n\u00a0<\u00a04: nothing trimmed)"
    up = few.set_index("cell_id").loc["up"]
    assert table.loc["up", "IQM [95% trimmed-t CI]"] == fmt.with_ci(up["iqm"], up["iqm_ci_low"], up["iqm_ci_high"])
    assert table.loc["up", "P(cell > reference) [95% Newcombe CI]"] == fmt.with_ci(
        up["prob_improvement"], up["pi_ci_low"], up["pi_ci_high"], digits=2)
    assert table.loc["base (reference)", "P(cell > reference) [95% Newcombe CI]"] == fmt.DASH


def test_holms_threshold_and_the_power_line_count_only_the_tested_comparisons():
    seeds = {"base": list(range(5)), "a": list(range(5)), "b": list(range(5)), "two": [0, 1]}
    trials = make_trials({c: 0.8 for c in seeds}, seeds=seeds, sd=0.01, rng=np.random.default_rng(9))
    comp = stats.compare_to_reference(trials, METRIC, "base")
    intro = " ".join(acc.comparison_intro(comp))
    assert "over the study's 2 tests, α/2 = 0.025" in intro and "α/3" not in intro
    text = " ".join(acc.comparison_sentences(comp, METRIC))
    assert "above Holm's first threshold over the study's 2 tests, α/2 = 0.025" in text and "(m = 2 tests in" in text
    assert (acc.power_table(comp)["at α/m"] == "0.025").all()


def test_profile_band_is_labelled_by_what_it_is():
    trials = make_trials({"base": 0.80, "up": 0.82}, seeds=4, sd=0.01)
    fig = acc.performance_profile_plot(stats.performance_profile(trials, METRIC), METRIC)
    labels = [t.get_text() for legend in fig.legends + [ax.get_legend() for ax in fig.axes if ax.get_legend()]
              for t in legend.get_texts()]
    assert "95% Clopper–Pearson band (pointwise)" in labels


def test_a_clear_difference_held_back_by_the_family_says_why() -> None:
    """A cell ahead of the reference on every one of 4 seeds, its interval well above 0, is not
    significant after Holm over 12 tests (the exact test's floor is 0.125): the sentence says so
    rather than calling it one of 'the differences that are not significant' and leaving it there."""
    trials = make_trials({"ref": 0.30, "better": 0.58, "same": 0.30}, seeds=4, sd=0.01, rng=np.random.default_rng(8))
    comp = stats.compare_to_reference(trials, METRIC, "ref").assign(power_alpha=0.05 / 12)
    text = " ".join(acc.comparison_sentences(comp, METRIC))
    assert "the largest is better" in text
    assert "Its interval excludes 0 and it is ahead on every seed, yet not significant" in text
    # Its own comparisons are 2 of the 12 its α/m says: the other 10 counted as tests with no floor, the
    # most that can come first, and still 0.125 is above α/2.
    assert ("yet not significant: with 4 seeds the exact test cannot give a p below 0.13 on it, and of the study's 12 "
            "tests only the 10 ANOVA terms (F tests, which have no floor) can come first, which leaves a comparison "
            "Holm's threshold α/2 = 0.025 at best — more seeds would decide it.") in text


def test_a_three_seed_cell_at_one_prints_no_interval_but_why():
    """The issue's cell at 1.0: never ``1.000 [1.000, 1.000]`` in the cell or the few-run table."""
    trials = make_trials({"base": 0.9, "top": 1.0}, seeds=3, sd=0.0)
    trials.loc[trials.cell_id == "base", METRIC] = [0.9, 0.92, 0.95]
    trials.loc[trials.cell_id == "top", METRIC] = [1.0, sum([0.1] * 10), 1.0]  # 1.0 to round-off
    cells = acc.cell_table(stats.cell_summary(trials, METRIC, 0.5), "base").set_index("cell")
    assert cells.loc["top", "mean [95% CI]"] == "1.000 [— no spread: 3 runs equal]"
    few = acc.few_run_table(stats.few_run_estimates(trials, METRIC, "base"), "base").set_index("cell")
    assert few.loc["top", "mean [95% t CI]"] == "1.000 [— no spread: 3 runs equal]"
    assert "[1.000, 1.000]" not in few.to_string() + cells.to_string()


def test_appendix_tables_name_cells_by_their_levels_where_the_levels_tell_them_apart():
    trials = factorial()
    channels = Channels.from_trials(trials, [A, B])
    names = acc.level_names(trials, channels)
    assert names and all(" · " in n for n in names.values()) and len(set(names.values())) == len(names)
    summary = stats.cell_summary(trials, METRIC, CHANCE)
    table = acc.cell_table(acc.named(summary, names), trials["cell_id"].iloc[0])
    assert table["cell"].tolist()[0] == names[trials["cell_id"].iloc[0]] + " (reference)"
    assert acc.names_line(names, channels) == f"A row names its cell by its levels of {channels.key}."
    # A label that does not name its levels (another family's cell): the tables keep the labels.
    odd = trials.assign(cell_label=trials["cell_label"].where(trials["cell_id"] != trials["cell_id"].iloc[0], "minGRU"))
    assert acc.level_names(odd, channels) == {} and acc.names_line({}, channels) == ""
    assert acc.named(summary, {}) is summary


def test_a_column_with_one_value_on_every_row_is_said_once():
    trials = _planted(0.05)
    table = acc.comparison_table(stats.compare_to_reference(trials, "test_accuracy", "base"))
    shown, said = acc.constant_columns(table, ["n", "test"])
    assert "n" not in shown.columns and "test" not in shown.columns
    assert said == f"Every row: n {table['n'].iloc[0]}; test {table['test'].iloc[0]}."
    one, said = acc.constant_columns(table.iloc[:1], ["n"])
    assert one.equals(table.iloc[:1]) and said == ""  # one row: nothing to factor out
    varied = table.assign(n=["8 pairs", "7 pairs"])
    assert "n" in acc.constant_columns(varied, ["n"])[0].columns


def test_interactions_of_three_factors_are_one_figure_with_a_panel_per_pair():
    from test_report_figures import SIZES, Study, empty_axes, off_page, overlaps

    study = Study(18)
    names = list(SIZES[18])
    pairs = list(itertools.combinations(names, 2))
    fig = acc.interaction_plots(study.trials, METRIC, pairs, CHANCE, channels=study.channels)
    assert len(fig.axes) == 3 and fig.get_figheight() <= 3.5
    assert [ax.get_title() for ax in fig.axes] == [
        f"{plotting.factor_name(a, names)} × {plotting.factor_name(b, names)}" for a, b in pairs]
    assert not empty_axes(fig) and not overlaps(fig) and not off_page(fig)


def test_the_convergence_sentence_counts_the_runs_its_table_counts():
    """Review item 11: a cell with 1 of 4 runs still improving, but whose runs taken together are
    not rising (no †), used to sit under "Every run … had stopped improving"; a cell with no run
    still improving printed the largest gain of all its runs in a column defined as the gain of
    those still improving."""
    trials = make_trials({"one": 0.7, "none": 0.8}, seeds=4)
    trials["converged"] = [False, True, True, True, True, True, True, True]
    trials["val_gain_last"] = [0.02, -0.01, 0.0, -0.005, 0.01, 0.0, 0.005, -0.003]
    trials["val_gain_se"] = 0.005
    conv = stats.cell_convergence(trials, 300)
    assert not conv["still_improving"].any()  # the trend test: neither cell as a whole
    table = acc.convergence_table(conv).set_index("cell")
    gain = "val accuracy gain, last 20% of steps"
    assert table.loc["one", "still improving"] == "1 of 4" and table.loc["one", gain] == "+2.0 points"
    assert table.loc["none", "still improving"] == "0 of 4" and table.loc["none", gain] == fmt.DASH
    text = " ".join(acc.convergence_sentences(conv))
    assert "had stopped improving" not in text
    assert ("1 run in 1 cell without † was still improving when its budget ran out, though its cell taken as a "
            "whole was not" in text)
    assert "one 1 of 4 (val accuracy +2.0 points)" in text
    # No run flagged anywhere: then, and only then, the sentence that every run had stopped.
    trials["converged"] = True
    flat = " ".join(acc.convergence_sentences(stats.cell_convergence(trials, 300)))
    assert "Every run whose convergence is recorded had stopped improving" in flat


def test_the_t_test_column_says_which_comparisons_its_holm_is_over():
    """Review item 8: the t-test p is Holm-adjusted over the table's comparisons, not over the study's
    family that p (Holm) is: its header and the table's note say so, with both counts."""
    comp = stats.compare_to_reference(_planted(0.05), "test_accuracy", "base")
    table = acc.comparison_table(comp)
    assert "t-test p (Holm over these 2; descriptive)" in table.columns and "t-test p (Holm)" not in table.columns
    assert acc.t_test_note(comp, 49) == ("The t-test p is Holm-adjusted over these 2 comparisons only, not over the "
                                         "study's family of 49 tests that p (Holm) is adjusted over: a check on the "
                                         "exact test beside it, not a verdict.")
    one = comp.iloc[:1]
    assert acc.t_test_column(one) == "t-test p (Holm over this 1; descriptive)"
    assert acc.t_test_note(one, 9).startswith("The t-test p is Holm-adjusted over this 1 comparison only")


# --- review items 14, 22: what a design or a seed count cannot support is not printed --------------


def test_the_iqm_interval_is_shown_only_at_run_counts_its_coverage_was_measured_at():
    """Review item 22: at 4 runs the 25% trim keeps 2 (one degree of freedom) and the interval
    spanned most of the range (0.320 [0.000, 0.801]); the benchmark measures it from 5 runs."""
    trials = make_trials({"base": 0.32, "four": 0.33}, seeds=4, sd=0.03, rng=np.random.default_rng(4))
    trials = pd.concat([trials, make_trials({"five": 0.33}, seeds=5, sd=0.03, rng=np.random.default_rng(5))],
                       ignore_index=True)
    few = stats.few_run_estimates(trials, METRIC, "base")
    assert np.isnan(few.set_index("cell_id").loc["four", "iqm_ci_low"])  # not computed, so not exported
    table = acc.few_run_table(few, "base").set_index("cell")
    col = "IQM [95% trimmed-t CI]"
    four = few.set_index("cell_id").loc["four"]
    assert acc.IQM_CI_MIN_N == stats.IQM_CI_MIN_N == 5
    assert table.loc["four", col] == f"{fmt.num(four['iqm'])} (n\u00a0<\u00a05)"
    assert "[" not in table.loc["base (reference)", col]
    assert acc.few_run_note(few).startswith("IQM (n\u00a0<\u00a05): its interval is not shown below 5 runs")
    assert acc.few_run_note(few[few.n >= 5]) == ""
    five = few.set_index("cell_id").loc["five"]
    assert table.loc["five", col] == fmt.with_ci(five["iqm"], five["iqm_ci_low"], five["iqm_ci_high"])


def _at_resolution() -> pd.DataFrame:
    """minrnn_selective_copy's minlstm · 2: three paired differences 0.500, 0.501, 0.5019 (sd 0.00094,
    below one example of a 1,000-example test set: d_z 534), beside an ordinary comparison."""
    trials = make_trials({"ref": 0.45, "flat": 0.95, "noisy": 0.47}, seeds=3, sd=0.0)
    trials.loc[trials.cell_id == "ref", METRIC] = [0.456, 0.450, 0.462]
    trials.loc[trials.cell_id == "flat", METRIC] = [0.956, 0.951, 0.963875]
    trials.loc[trials.cell_id == "noisy", METRIC] = [0.470, 0.440, 0.480]
    return trials


def test_an_effect_size_divided_by_a_spread_below_the_test_sets_resolution_is_not_printed():
    comp = stats.compare_to_reference(_at_resolution(), METRIC, "ref")
    flat = comp.set_index("cell_id").loc["flat"]
    assert flat["sd_diff"] < 1 / 1000 and flat["effect_size"] > 100
    es = "effect size [95% CI]"
    table = acc.comparison_table(comp, n_test=1000).set_index("cell")
    assert table.loc["flat", es] == f"{fmt.DASH} ({acc.BELOW_RESOLUTION})"
    assert table.loc["noisy", es].startswith("d_z\u00a0")
    # the difference and its interval stand
    assert table.loc["flat", "Δ vs reference [95% CI]"] == acc.comparison_table(comp).set_index("cell").loc[
        "flat", "Δ vs reference [95% CI]"]
    note = acc.effect_size_note(comp, 1000)
    assert "1/N = 0.001" in note and "flat (sd 0.00094)" in note and "noisy" not in note
    # no test-set size (another metric, a study varying its task): the effect size as before
    assert acc.comparison_table(comp).set_index("cell").loc["flat", es].startswith("d_z\u00a0+")
    assert acc.effect_size_note(comp, None) == ""
    # a larger test set's resolution is finer: the same spread is above 1/N
    assert not acc.below_resolution(comp, 100_000).any()
    # no spread at all is the analysis' own case, printed with its reason as before
    assert not acc.below_resolution(comp.assign(sd_diff=0.0), 1000).any()


def test_a_blank_power_and_an_unreachable_exact_test_say_why():
    """Review item 22: 'power now —' with no note; and a t-test's power beside an exact test that
    cannot reach α/m at this n says that the exact test cannot."""
    comp = stats.compare_to_reference(_at_resolution(), METRIC, "ref").assign(power_alpha=0.05 / 8)
    assert acc.power_floor_note(comp).startswith("The power is the t-test's: for every comparison (3 seeds) the exact "
                                                 "test, which gives the verdict, cannot give a p below 0.25, above α/m")
    blank = acc.power_table(comp.assign(min_effect=0.0, power_now=np.nan, seeds_needed=np.nan)).set_index("cell")
    assert (blank["power now"] == fmt.DASH).all() and blank["note"].str.startswith("no difference to detect").all()
    # eight seeds: the floor is below α/m, no such note
    many = make_trials({"ref": 0.5, "up": 0.52}, seeds=8, sd=0.01, rng=np.random.default_rng(2))
    assert acc.power_floor_note(stats.compare_to_reference(many, METRIC, "ref")) == ""


def test_a_design_that_is_not_full_factorial_says_why_it_draws_no_main_effects():
    """Review item 14: a one-at-a-time design's level means mix in the other factors' effects."""
    trials = make_trials({"base": 0.8, "tanh": 0.7, "none": 0.83}, seeds=3,
                         factors={"base": {A: "linear", B: "γ"}, "tanh": {A: "tanh", B: "γ"},
                                  "none": {A: "linear", B: "none"}})
    assert not stats.is_full_factorial(trials, [A, B])
    text = acc.main_effects_withheld(trials, [A, B], "one_at_a_time")
    assert text.startswith("No main-effects figure: the design (one_at_a_time) is not a full factorial — it has 3 "
                           "of the 4 combinations")
    assert "each cell against the reference, in the per-cell figure" in text
    notebook = (Path(acc.__file__).resolve().parents[1] / "notebooks" / "accuracy.py").read_text()
    body = notebook.split("## Per cell")[0].split("## Main effects")[1]
    assert "elif not full:" in body and "main_effects_withheld" in body


def test_the_comparison_intro_names_the_family_its_p_values_are_adjusted_over():
    """A report's p (Holm) is over the study's one family, not the comparisons alone: the intro
    says whichever it was given, and says the comparisons alone by default (``compare_to_reference``)."""
    trials = make_trials({"base": 0.8, "a": 0.8}, seeds=5, sd=0.01, rng=np.random.default_rng(3))
    comp = stats.compare_to_reference(trials, METRIC, "base")
    assert "Its p-values are Holm-adjusted over the comparisons;" in " ".join(acc.comparison_intro(comp))
    said = " ".join(acc.comparison_intro(comp, family="the study's one family (page one)"))
    assert "Holm-adjusted over the study's one family (page one);" in said and "across the comparisons" not in said


def test_the_summarys_highest_mean_says_it_is_no_test():
    """The largest mean is descriptive, even on a null result: the summary says so, as the norm
    report's lowest does."""
    trials = make_trials({"base": 0.8, "a": 0.8}, seeds=3, sd=0.01, rng=np.random.default_rng(3))
    first = acc.summary_sentences(stats.cell_summary(trials, METRIC, CHANCE, 0.02), METRIC, CHANCE, 0.02)[0]
    assert first.startswith("Highest mean test accuracy: ") and first.endswith("; descriptive, not a test).")
