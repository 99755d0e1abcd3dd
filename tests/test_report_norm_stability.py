"""The norm-stability report's presentation (``ablate.report.norm_stability``): its sentences and
tables on constructed frames, its figures, and the report rendered from a real study."""

from __future__ import annotations

import re
import shutil
import uuid

import numpy as np
import pytest
from frames import curve_frame, steady_and_wild
from pdfs import has, pages, svg_groups

from ablate.report import format as fmt
from ablate.report import norm_stability as ns
from ablate.report import plotting
from ablate.report.plotting import Channels
from ablate.stats import norms as sn


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
    assert "Its lead over every other variant is significant at α = 0.05 on each" in text
    assert "as large (significant at α = 0.05)" in text
    again = ns.summary_text(sn.stability(sn.layer_norms(df), order, n_resamples=300), ratios)
    assert again == text  # deterministic
    # Every CV and ratio the text gives is written as the tables print it.
    printed = ns.stability_table(table)
    for col in [c for c in printed.columns if c.startswith("CV ")]:
        assert f"steady varies least (CV {printed[col][0]})" in text  # the most stable, with its CI
        assert f"wild: CV {printed[col][1].split(' [')[0]}," in text
    printed = ns.ratio_table(ratios)
    for cell, said in zip(printed["CV ratio [95% CI]"], printed["verdict"], strict=True):
        assert f"{cell} as large ({said} at α = 0.05)" in text, cell


def test_text_says_when_variants_cannot_be_told_apart():
    rng = np.random.default_rng(1)
    df = curve_frame({"a": 1 + 0.1 * rng.standard_normal((3, 2, 5)), "b": 1 + 0.1 * rng.standard_normal((3, 2, 5))})
    order = sn.variants(df)
    table = sn.stability(sn.layer_norms(df), order, n_resamples=300)
    text = ns.summary_text(table, sn.stability_ratios(sn.layer_norms(df), table, n_resamples=300))
    assert "as large (not significant at α = 0.05)" in text
    assert "Its lead over the other variants is not significant at α = 0.05 on any measure" in text
    assert "significant at α = 0.05 on each" not in text  # the opening line and the bullets agree


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
    assert len(re.findall(r'<img[^>]* src="data:image/svg\+xml;base64,', html)) >= 6
    pdf = out / "norm_stability.pdf"
    assert pdf in written
    text = " ".join(pages(pdf))
    for title in ("Summary", "State norm vs training step", "Figure 1.", "Figure 2.", "Figure 6.",
                  "State norm vs time step at initialisation and at the end, with theory", "Figure 3.",
                  "Stability table", "Table 1. Stability of the state norm per variant", "Table 2. Ratio between variants",
                  "Table 4. White-noise check", "Spectrum drift over training",
                  "Figure 4.", "Table 5. Spectrum drift",
                  "Gradient norms", "Figure 5.", "Probe batch identical across all 4 runs: yes",
                  "RotRNN", "LRU"):
        assert has(text, title), title
    assert has(text, "most stable") or has(text, "varies least")
    assert has(text, "curve rows") and "{'" not in text  # provenance as a table, not a Python dict


NUMBER = re.compile(r"[+−-]?\d+(?:,\d{3})*(?:\.\d+)?(?:e[+−-]?\d+)?")


def test_every_number_of_the_summary_is_a_table_cell():
    rng = np.random.default_rng(4)
    df = curve_frame({"p=rot, n=xi": 1 + 0.01 * rng.standard_normal((3, 2, 6)),
                      "p=rot, n=gamma": np.exp(0.3 * rng.standard_normal((3, 2, 6))),
                      "p=diag, n=xi": 1 + 0.05 * rng.standard_normal((3, 2, 6))})
    order = sn.variants(df)
    norms = sn.layer_norms(df)
    table = sn.stability(norms, order, n_resamples=300)
    ratios = sn.stability_ratios(norms, table, n_resamples=300)
    trials = df.drop_duplicates("cell_id")[["cell_id", "cell_label"]].assign(
        **{"p": ["rot", "rot", "diag"], "n": ["xi", "gamma", "xi"]})
    by_factor = sn.stability_by_factor(table, trials, ["p", "n"])
    text = ns.summary_text(table, ratios, by_factor=by_factor)
    printed = " ".join(str(v) for t in (ns.stability_table(table), ns.ratio_table(ratios), ns.factor_table(by_factor))
                       for v in t.astype(str).to_numpy().ravel()).replace("\u00a0", " ")
    for token in NUMBER.findall(text.replace("\u00a0", " ")):
        assert token in printed or token in {"0.05", "1", "2", "3", "95"}, token
    # The opening line counts what the bullets and the ratio table's verdicts say.
    verdicts = ns.ratio_table(ratios)["verdict"]
    k = int((verdicts == "significant").sum())
    assert (k == 0) == ("not significant at α = 0.05 on any measure" in text)


def test_norm_figures_use_the_reports_one_mapping():
    df, _ = steady_and_wild()
    order = sn.variants(df)
    channels = Channels.from_factors(["variant"], {"variant": ["steady", "wild"]},
                                     {"c0": {"variant": "steady"}, "c1": {"variant": "wild"}})
    fig = ns.norm_vs_step(sn.layer_norms(df), order, channels=channels)
    groups = svg_groups(plotting.svg(fig), "cell:")
    assert {g: c & {channels.color["steady"].lower(), channels.color["wild"].lower()} for g, c in groups.items()} == {
        "cell:c0": {channels.color["steady"].lower()}, "cell:c1": {channels.color["wild"].lower()}}
    assert [leg.get_title().get_text() for leg in fig.legends][0] == "variant"
    # The wild variant's norms span far more than 5×: a log axis.
    assert {ax.get_yscale() for ax in fig.axes if ax.get_title()} == {"log"}
