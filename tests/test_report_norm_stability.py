"""The norm-stability report's presentation (``ablate.report.norm_stability``): its sentences and
tables on constructed frames, its figures, and the report rendered from a real study."""

from __future__ import annotations

import re
import shutil
import subprocess
import uuid

import numpy as np
import pytest
from frames import curve_frame, steady_and_wild

from ablate import stats_norms as sn
from ablate.report import format as fmt
from ablate.report import norm_stability as ns
from ablate.report import plotting


@pytest.fixture(scope="module")
def study(norm_study):
    """The loaded norm study, its stores and its root."""
    import real_studies as studies

    from ablate.stores import resolve

    with pytest.MonkeyPatch.context() as mp:
        studies.study_env(mp, norm_study)
        stores = resolve()
    return studies.load(norm_study, studies.NORM["name"]), stores, norm_study


def test_text_comes_from_the_numbers():
    df, _ = steady_and_wild()
    order = sn.variants(df)
    table = sn.stability(sn.layer_norms(df), order, n_resamples=300)
    ratios = sn.stability_ratios(sn.layer_norms(df), table, n_resamples=300)
    text = ns.summary_text(table, ratios)
    assert text.startswith("**steady** has the most stable state norm (lowest CV) on every measure")
    assert "significant at 95% on each" in text
    assert "as large (significant at 95%)" in text
    again = ns.summary_text(sn.stability(sn.layer_norms(df), order, n_resamples=300), ratios)
    assert again == text  # deterministic
    # Every CV and ratio the text gives is written as the tables print it.
    printed = ns.stability_table(table)
    for col in [c for c in printed.columns if c.startswith("CV ")]:
        assert f"steady varies least (CV {printed[col][0]})" in text  # the most stable, with its CI
        assert f"wild: CV {printed[col][1].split(' [')[0]}," in text
    for cell in ns.ratio_table(ratios)["CV ratio [95% CI]"]:
        assert f"{cell} as large" in text, cell


def test_text_says_when_variants_cannot_be_told_apart():
    rng = np.random.default_rng(1)
    df = curve_frame({"a": 1 + 0.1 * rng.standard_normal((3, 2, 5)), "b": 1 + 0.1 * rng.standard_normal((3, 2, 5))})
    order = sn.variants(df)
    table = sn.stability(sn.layer_norms(df), order, n_resamples=300)
    text = ns.summary_text(table, sn.stability_ratios(sn.layer_norms(df), table, n_resamples=300))
    assert "not significant at 95%" in text
    assert "no difference is significant at 95%" in text


def test_short_labels_name_the_factors():
    order = [(f"c{i}", label) for i, label in enumerate(["p=rot, n=xi", "p=rot, n=gamma", "p=diag, n=xi"])]
    assert ns.short_order(order)[1] == "p · n"
    assert ns.short_order(order)[0][1] == ("c1", "rot · gamma")
    assert ns.short_order([("c0", "RotRNN"), ("c1", "p=rot")]) == ([("c0", "RotRNN"), ("c1", "p=rot")], "")


def test_tables_write_missing_values_as_the_one_dash():
    df, _ = steady_and_wild()
    table = sn.stability(sn.layer_norms(df[df["seed"] == 0]), sn.variants(df), n_resamples=0)
    printed = ns.stability_table(table)
    assert (printed["CV over seeds [95% CI]"] == fmt.DASH).all()  # one seed: no spread over seeds
    assert printed["CV over training steps [95% CI]"].str.fullmatch(r"[\d.]+").all()  # no resamples: no CI
    assert not printed.isin(["n/a", "nan"]).any().any()


def test_figures_fit_the_page():
    df, _ = steady_and_wild()
    order = sn.variants(df)
    fig = ns.norm_vs_step(sn.layer_norms(df), order)
    assert fig.get_figwidth() <= plotting.WIDTH
    assert [ax.get_title() for ax in fig.axes if ax.get_title()] == ["layer 0", "layer 1", "layer 2"]
    empty = ns.norm_vs_time(df, order)  # no dense curves in this frame
    assert [t.get_text() for ax in empty.axes for t in ax.texts] == ["no probe data yet"]


@pytest.mark.skipif(shutil.which("pdftotext") is None, reason="poppler-utils (pdftotext) is not installed")
def test_report_renders_with_its_figures_and_tables(study):
    from ablate.report.render import render

    res, stores, root = study
    out = root / f"out-{uuid.uuid4().hex[:8]}"
    written = render(res.study, ["norm_stability"], out, storage=stores.storage, tracking_uri=stores.tracking)
    html = (out / "norm_stability.html").read_text()
    assert not re.search(r"<script[^>]+src=\"https?://", html)
    assert html.count("data:image/png;base64") >= 5
    pdf = out / "norm_stability.pdf"
    assert pdf in written
    text = subprocess.run(["pdftotext", str(pdf), "-"], capture_output=True, text=True, check=True).stdout
    text = " ".join(text.split())
    for title in ("Summary", "State norm vs training step", "Figure 1.", "Figure 2.",
                  "State norm vs time step at initialisation and at the end, with theory", "Figure 3.",
                  "Stability table", "Table 1. Stability of the state norm per variant", "Table 2. Ratio between variants",
                  "Table 4. White-noise check", "Spectrum drift over training",
                  "Figure 4.", "Table 5. Spectrum drift",
                  "Gradient norms", "Figure 5.", "Probe batch identical across all 4 runs: yes",
                  "RotRNN", "LRU"):
        assert title in text, title
    assert "most stable" in text or "varies least" in text
