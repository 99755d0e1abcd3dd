"""The norm-stability report's presentation (``ablate.report.norm_tables``): its sentences and
tables on constructed frames, its figures, and the report rendered from a real study."""

from __future__ import annotations

import re
import shutil
import uuid
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from frames import curve_frame, steady_and_wild
from pdfs import has, pages, svg_groups

from ablate.report import format as fmt
from ablate.report import norm_figures as nf
from ablate.report import norm_tables as ns
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


def analysis(values: dict, factors: dict | None = None, reference: str = "c0"):
    """(table, comparisons, anova, effects) of constructed curves, as the notebook computes them."""
    df = curve_frame(values)
    norms, order = sn.layer_norms(df), sn.variants(df)
    trials = None
    if factors:
        trials = pd.DataFrame([{"cell_id": f"c{i}", **factors[label]} for i, label in enumerate(values)])
    ps = sn.per_seed(norms, trials)
    names = list(factors[next(iter(factors))]) if factors else []
    anova, _ = sn.factor_anova(ps, names)
    return (sn.stability(ps, norms, order), sn.compare(ps, norms, reference, order), anova,
            sn.main_effects(ps, names))


def test_text_comes_from_the_numbers():
    rng = np.random.default_rng(0)
    table, comp, anova, effects = analysis({"ref": np.exp(0.3 * rng.standard_normal((8, 3, 6))),
                                            "calm": 1 + 0.01 * rng.standard_normal((8, 3, 6))})
    text = ns.summary_text(table, comp, ("c0", "the spec's baseline"))
    assert text.startswith("Every variant is compared with the reference **ref** (the spec's baseline)")
    printed = ns.ratio_table(comp)
    for m in ("training", "depth"):
        row = printed[printed["measure"] == ns.MEASURE_WORDS[m]].iloc[0]
        assert f"{row['ratio to the reference [95% CI]']} the reference's (significant)" in text
    values = ns.stability_table(table)
    assert f"ref {values['CV over training steps [95% CI]'][0]}" in text  # the reference with its interval
    assert "Lowest" not in text  # two variants: nothing to rank beyond the comparison itself
    again = ns.summary_text(table, comp, ("c0", "the spec's baseline"))
    assert again == text  # deterministic


def test_a_two_seed_study_tests_nothing_and_says_why():
    rng = np.random.default_rng(1)
    table, comp, anova, _ = analysis({"a": np.exp(rng.standard_normal((2, 2, 5))),
                                      "b": 1 + 0.01 * rng.standard_normal((2, 2, 5))},
                                     {"a": {"m.p": "x"}, "b": {"m.p": "y"}})
    text = ns.summary_text(table, comp, ("c0", "the spec's baseline"), anova)
    assert "**Nothing is tested: 2 seeds per variant.** A test needs at least 3" in text
    assert "significant" not in text and "not tested" in text
    printed = ns.ratio_table(comp)
    assert set(printed["p (Holm)"]) == {"too few seeds to test (n\u00a0=\u00a02)"}
    assert set(printed["p"]) == {fmt.DASH}


def test_text_says_when_a_comparison_cannot_reach_alpha():
    rng = np.random.default_rng(2)
    values = {k: np.exp(0.2 * rng.standard_normal((5, 2, 5))) for k in ("a", "b", "c", "d")}
    table, comp, _, _ = analysis(values)
    text = ns.summary_text(table, comp, ("c0", "the spec's baseline"))
    # 2/2⁵ = 0.0625 prints as every p does (format.pval): 0.063
    # No ANOVA ran (a one-at-a-time design's is refused): no factor analysis is named.
    assert ("**On every measure, with 5 seeds no comparison can be significant:** the exact test cannot give a p below "
            "0.063 on any comparison, above Holm's first threshold over the study's 3 tests, α/3 = 0.017; the "
            "intervals still apply.") in text
    assert text.count("cannot give a p below") == 1  # the same on every measure: said once
    assert "(significant)" not in text and "factor analysis" not in text
    terms = pd.DataFrame({"measure": ["training"], "term": ["m.p"], "df": [1.0], "df_resid": [16.0], "F": [0.5],
                          "p": [0.5], "p_adj": [1.0], "eta_sq_partial": [0.03], "mark": [""], "significant": [False]})
    with_anova = ns.summary_text(table, comp, ("c0", "the spec's baseline"), terms)
    assert "; the intervals and the factor analysis (Table 1) still apply." in with_anova
    assert "analysis below" not in with_anova


def test_a_ratio_beside_a_depth_value_says_it_is_of_geometric_means():
    """rotation_heads' summary read "heads=1 0.398, 0.899× … the reference's" beside the reference's
    0.418: the values over layers are (mean √CV)², the ratio the test's, of geometric means."""
    rng = np.random.default_rng(20)
    values = {k: np.exp(rng.normal(0, 0.5, (5, 3, 6)) + rng.normal(0, 0.5, (5, 1, 1))) for k in ("ref", "b")}
    table, comp, _, _ = analysis(values)
    text = ns.summary_text(table, comp, ("c0", "the spec's baseline"))
    depth = next(line for line in text.splitlines() if line.startswith("- **Over layers"))
    training = next(line for line in text.splitlines() if line.startswith("- **Over training"))
    row = comp[(comp["measure"] == "depth")].iloc[0]
    assert "(CV of ‖x‖², (mean √CV)² over seeds)" in depth
    assert f"b {ns._value_only(ns.stability_table(table).iloc[1]['CV over layers [95% CI]'])}, ratio of geometric means " \
           f"{ns._ratio_cell(row)} the reference's" in depth
    assert "geometric" not in training  # its values are geometric means: the ratio is their quotient
    # The two estimators differ here, so the quotient of the printed values is not the ratio.
    quotient = table.loc[1, sn.VALUE["depth"]] / table.loc[0, sn.VALUE["depth"]]
    assert abs(quotient - row["ratio"]) > 1e-3


def test_table_1_counts_flagged_runs_zeros_included():
    rng = np.random.default_rng(21)
    table, _, _, _ = analysis({k: np.exp(0.2 * rng.standard_normal((4, 2, 5))) for k in ("a", "b")})
    printed = ns.stability_table(table)
    assert printed["flagged"].tolist() == ["0", "0"]
    assert printed["layers × probe steps"].tolist() == ["2 × 5", "2 × 5"]


def test_no_measure_is_said_out_of_reach_beside_a_significant_comparison():
    """rotrnn_vs_lru_tokens' norm report said "no comparison can be significant on any measure" above
    ratios marked significant: 8 seeds' floor (0.0078) is above α/m = α/7 here, but Holm rejects the
    family's ANOVA terms first (F tests, no floor), and a comparison then meets α/6 or more."""
    from ablate.stats import family as fam

    rng = np.random.default_rng(3)
    table, comp, _, _ = analysis({"ref": np.exp(0.3 * rng.standard_normal((8, 3, 6))),
                                  "calm": 1 + 0.01 * rng.standard_normal((8, 3, 6))})
    terms = pd.DataFrame({"term": ["a", "b", "c"], "p": [1e-6] * 3})
    family = fam.adjust(fam.members([("norm", comp)], [("test_accuracy", terms)]))
    comp = fam.apply(comp, family, "norm", "comparison").assign(power_alpha=0.05 / len(family))
    assert len(family) == 7 and comp["significant"].sum() == 3 and (comp["p_min"] > 0.05 / 7).all()
    text = ns.summary_text(table, comp, ("c0", "the spec's baseline"))
    assert "the reference's (significant)" in text and "no comparison can be significant" not in text
    assert ("**On every measure, with 8 seeds a comparison can be significant only when at least 1 of the study's 3 "
            "ANOVA terms (F tests, which have no floor) has a smaller p and is rejected first (here Holm rejects all "
            "3):** the exact test cannot give a p below 0.008 on any comparison, above Holm's first threshold over "
            "the study's 7 tests, α/7 = 0.007.") in text


def test_short_labels_name_the_factors():
    order = [(f"c{i}", label) for i, label in enumerate(["p=rot, n=xi", "p=rot, n=gamma", "p=diag, n=xi"])]
    assert ns.short_order(order)[1] == "p · n"
    assert ns.short_order(order)[0][1] == ("c1", "rot · gamma")
    assert ns.short_order([("c0", "RotRNN"), ("c1", "p=rot")]) == ([("c0", "RotRNN"), ("c1", "p=rot")], "")
    one = [("c0", "task.seed=0"), ("c1", "task.seed=1")]  # one factor: "0" alone would not say of what
    assert ns.short_order(one) == (one, "")


def test_tables_write_missing_values_as_the_one_dash():
    df, _ = steady_and_wild()
    one = df[df["seed"] == 0]
    norms = sn.layer_norms(one)
    table = sn.stability(sn.per_seed(norms), norms, sn.variants(df))
    printed = ns.stability_table(table)
    assert (printed["spread of log ‖x‖² over seeds [95% CI]"] == fmt.DASH).all()  # one seed: no spread over seeds
    assert printed["CV over training steps [95% CI]"].str.fullmatch(r"[\d.]+").all()  # one seed: no interval
    assert not printed.isin(["n/a", "nan"]).any().any()


def test_figures_fit_the_page():
    df, _ = steady_and_wild()
    order = sn.variants(df)
    fig = nf.norm_vs_step(sn.layer_norms(df), order)
    assert fig.get_figwidth() <= plotting.WIDTH
    assert [ax.get_title() for ax in fig.axes if ax.get_title()] == ["layer 0", "layer 1", "layer 2"]
    empty = nf.norm_vs_time(df, order)  # no dense curves in this frame
    assert [t.get_text() for ax in empty.axes for t in ax.texts] == ["no probe data yet"]


@pytest.mark.skipif(shutil.which("pdftotext") is None, reason="poppler-utils (pdftotext) is not installed")
def test_report_renders_with_its_figures_and_tables(study):
    import dataclasses

    from ablate.report import headings
    from ablate.report.render import render
    from ablate.spec.reports import ReportOptions

    res, stores, root = study
    out = root / f"out-{uuid.uuid4().hex[:8]}"
    # Every section, the optional diagnostics too (a spec's reports: entry naming them all).
    every = ReportOptions(name="norm_stability", sections=list(headings("norm_stability")))
    data = dataclasses.replace(res, spec=res.spec.model_copy(update={"reports": [every]}))
    written = render(res.study, ["norm_stability"], out, data=data)
    html = (out / "norm_stability.html").read_text()
    assert not re.search(r"<script[^>]+src=\"https?://", html)
    assert len(re.findall(r'<img[^>]* src="data:image/svg\+xml;base64,', html)) >= 6
    assert "Left out by default" not in html
    pdf = out / "norm_stability.pdf"
    assert pdf in written
    text = " ".join(pages(pdf))
    for title in ("Summary", "State norm vs training step", "Figure 1.", "Figure 2.", "Figure 7.",
                  "State norm vs time step at initialisation and at the end, with theory", "Figure 3.",
                  "Appendix: stability per variant", ". The state norm's stability per variant",
                  ". Each variant against the reference", ". White-noise check",
                  "Appendix: spectrum drift over training", "Figure 5.", ". Spectrum drift",
                  "Appendix: gradient norms", "Figure 6.", "the same examples in all 4 runs;",
                  "RotRNN", "LRU"):
        assert has(text, title), title
    # Tables are numbered in the order a reader meets them, from 1, skipping none a study's data leaves out.
    captions = [int(n) for n in re.findall(r"Table (\d+)\. [A-Z]", text)]
    assert captions == list(range(1, len(captions) + 1)) and len(captions) >= 4, captions
    # Two seeds per variant: the report tests nothing, and says so before anything else.
    assert has(text, "Nothing is tested: 2 seeds per variant") and not has(text, "(significant)")
    assert has(text, "curve rows") and "{'" not in text  # provenance as a table, not a Python dict


NUMBER = re.compile(r"[+−-]?\d+(?:,\d{3})*(?:\.\d+)?(?:e[+−-]?\d+)?")


def test_every_number_of_the_summary_is_a_table_cell():
    rng = np.random.default_rng(4)
    values, factors = {}, {}
    for p in ("rot", "diag"):
        for n in ("xi", "gamma"):
            spread = 0.01 if (p, n) == ("rot", "xi") else 0.3
            values[f"p={p}, n={n}"] = np.exp(spread * rng.standard_normal((6, 2, 6)))
            factors[f"p={p}, n={n}"] = {"m.p": p, "m.n": n}
    table, comp, anova, effects = analysis(values, factors)
    assert anova["significant"].any()  # the text below has factor sentences to check
    text = ns.summary_text(table, comp, ("c0", "the spec's baseline"), anova, effects)
    printed = " ".join(str(v) for t in (ns.stability_table(table), ns.ratio_table(comp), ns.anova_table(anova),
                                        ns.effects_table(effects))
                       for v in t.astype(str).to_numpy().ravel()).replace("\u00a0", " ")
    for token in NUMBER.findall(text.replace("\u00a0", " ")):
        assert token in printed or token in {"0.05", "1", "2", "3", "95"}, token
    # One sentence per term the ANOVA table calls significant.
    k = int((ns.anova_table(anova)["verdict"].str.startswith("significant")).sum())
    assert text.count(" changes ") + text.count(" depends on ") == k


def test_an_interaction_figure_draws_each_level_in_its_channel():
    rng = np.random.default_rng(5)
    values = {f"{p}-{h}": np.exp(0.1 * rng.standard_normal((3, 2, 5))) for p in ("rot", "diag") for h in ("1", "4")}
    factors = {k: {"m.p": k.split("-")[0], "m.h": k.split("-")[1]} for k in values}
    df = curve_frame(values)
    trials = pd.DataFrame([{"cell_id": f"c{i}", **factors[k]} for i, k in enumerate(values)])
    ps = sn.per_seed(sn.layer_norms(df), trials)
    channels = Channels.from_trials(ps, ["m.p", "m.h"])
    fig = nf.interaction_figure(ps, "m.p", "m.h", channels)
    groups = svg_groups(plotting.svg(fig), "level:")
    for lv in ("rot", "diag"):
        assert channels.color[lv].lower() in groups[f"level:m.p={lv}"]
    # Not over seeds: its runs are no independent replicates, so no marginal mean with an interval.
    assert [ax.get_title() for ax in fig.axes if ax.get_title()] == [ns.COLUMN_WORDS[m] for m in sn.MEASURES
                                                                     if m != "seeds"]
    assert {ax.get_yscale() for ax in fig.axes if ax.get_title()} == {"log"}
    # Over layers each point is its cell's value as the stability table prints it, (mean √CV)², not a geometric mean.
    depth = next(ax for ax in fig.axes if ax.get_title() == ns.COLUMN_WORDS["depth"])
    drawn = sorted(float(y) for c in depth.containers for y in c.lines[0].get_ydata())
    table = sn.stability(ps, sn.layer_norms(df), sn.variants(df))
    assert drawn == pytest.approx(sorted(table[sn.VALUE["depth"]]), rel=1e-9)
    assert "over layers (mean √CV)²" in fig._supylabel.get_text().replace("\n", " ")
    # Layers as a factor: CV over layers exists at 4 layers only, one level on that axis, so no panel for it.
    one = {k: v[:, :1] if k.endswith("-1") else v for k, v in values.items()}
    ps1 = sn.per_seed(sn.layer_norms(curve_frame(one)), trials)
    titles = [ax.get_title() for ax in nf.interaction_figure(ps1, "m.p", "m.h", channels).axes if ax.get_title()]
    assert titles == [ns.COLUMN_WORDS[m] for m in ("training", "final")]


def test_a_measure_the_reference_lacks_names_the_factor_analysis_only_where_it_ran():
    """"the factor analysis below takes the variants that have one" sat in an appendix after the factor
    analysis, and in reports with no ANOVA at all."""
    rng = np.random.default_rng(22)
    values = {"ref": np.exp(0.2 * rng.standard_normal((4, 1, 5)))}
    values |= {k: np.exp(0.2 * rng.standard_normal((4, 2, 5))) for k in ("b", "c")}
    table, comp, _, _ = analysis(values)
    assert ns.unreferenced(comp) == ["depth"]
    note = ns.unreferenced_note(comp, "ref")
    assert note.endswith("so nothing is compared with it.") and "factor analysis" not in note
    terms = pd.DataFrame({"measure": ["depth"], "term": ["m.p"]})
    assert ns.unreferenced_note(comp, "ref", terms).endswith(
        "; the factor analysis (Table 1) takes the variants that have one.")
    line = next(t for t in ns.summary_text(table, comp, ("c0", "the spec's baseline")).splitlines()
                if t.startswith("- **Over layers"))
    assert "so nothing is compared with it; the variants that have one: b " in line


def test_norm_figures_use_the_reports_one_mapping():
    df, _ = steady_and_wild()
    order = sn.variants(df)
    channels = Channels.from_factors(["variant"], {"variant": ["steady", "wild"]},
                                     {"c0": {"variant": "steady"}, "c1": {"variant": "wild"}})
    fig = nf.norm_vs_step(sn.layer_norms(df), order, channels=channels)
    groups = svg_groups(plotting.svg(fig), "cell:")
    assert {g: c & {channels.color["steady"].lower(), channels.color["wild"].lower()} for g, c in groups.items()} == {
        "cell:c0": {channels.color["steady"].lower()}, "cell:c1": {channels.color["wild"].lower()}}
    assert [leg.get_title().get_text() for leg in fig.legends][0] == "variant"
    # The wild variant's norms span far more than 5×: a log axis.
    assert {ax.get_yscale() for ax in fig.axes if ax.get_title()} == {"log"}


def test_flagged_runs_are_counted_named_and_put_back():
    """A run whose ‖x‖² grew 10⁴× over its last probe steps: a count in the stability table, a line naming it
    in the summary, and what putting it back changes; identical seeds print why there is no interval."""
    rng = np.random.default_rng(30)
    k = np.linspace(0, 1, 8)
    values = {name: np.exp(rng.normal(0, 0.3, (5, 1, 1)) + rng.normal(0, 0.05, (5, 2, 8))) for name in ("ref", "b")}
    values["b"][3] *= np.exp(np.log(1e4) * np.clip((k - 0.5) / 0.5, 0, 1))
    values["same"] = np.repeat(values["ref"][:1], 5, axis=0)
    values["scaled"] = 1.1 * values["ref"]  # the same CVs as the reference, to round-off
    df = curve_frame(values)
    norms, order = sn.layer_norms(df), sn.variants(df)
    ps = sn.per_seed(norms)
    table, comp = sn.stability(ps, norms, order), sn.compare(ps, norms, "c0", order)
    back = sn.sensitivity(ps, norms, "c0", order)
    printed = ns.stability_table(table)
    assert printed["flagged"].tolist() == ["0", "1", "0", "0"]
    assert printed.loc[2, "CV over training steps [95% CI]"].endswith("(no interval: no spread beyond round-off)")
    text = ns.summary_text(table, comp, ("c0", "the spec's baseline"), sensitivity=back)
    assert "**1 run flagged and left out** of every value, interval and test above" in text
    assert "b: seed 3: late growth: ‖x‖² grew" in text and "Put back (the late-growing ones)" in text
    row = ns.ratio_table(comp).set_index(["measure", "variant"]).loc[(ns.MEASURE_WORDS["training"], "scaled")]
    assert row["p (Holm)"].startswith("not tested: no spread beyond round-off") and row["p"] == fmt.DASH
    assert row["ratio to the reference [95% CI]"] == "1× on every seed"


def test_the_ratio_grid_is_the_long_table_one_row_per_variant():
    rng = np.random.default_rng(11)
    values = {"ref": np.exp(0.3 * rng.standard_normal((5, 3, 6)))}
    values |= {f"v{i}": np.exp(0.3 * rng.standard_normal((5, 3, 6)) + 0.2 * i) for i in range(4)}
    _, comp, _, _ = analysis(values)
    long, grid = ns.ratio_table(comp), ns.ratio_grid(comp)
    assert list(grid["variant"]) == ["v0", "v1", "v2", "v3"]
    assert list(grid.columns[2:]) == list(dict.fromkeys(long["measure"]))
    notes = grid.attrs["notes"]
    for _, r in long.iterrows():
        cell = grid.loc[grid["variant"] == r["variant"], r["measure"]].iloc[0]
        printed = r["ratio to the reference [95% CI]"]
        if "(no interval: " in printed:  # the reason is a footnote, said once below the table
            head, reason = printed.split(" (no interval: ")
            assert cell.startswith(head + " (no interval") and reason.rstrip(")") in notes
        else:
            assert cell.startswith(printed) and r["p (Holm)"] in cell
    descriptive = ns.ratio_grid(comp, tested=False)
    assert "p (Holm)" not in " ".join(descriptive.iloc[:, 2:].to_numpy().ravel())


def test_the_summary_names_only_the_significant_variants_past_a_few():
    rng = np.random.default_rng(12)
    values = {"ref": np.exp(0.05 * rng.standard_normal((10, 3, 6)))}
    values |= {f"v{i}": np.exp(0.05 * rng.standard_normal((10, 3, 6))) for i in range(4)}
    values["far"] = np.exp(0.05 * rng.standard_normal((10, 3, 6)) + 3.0)
    table, comp, _, _ = analysis(values)
    text = ns.summary_text(table, comp, ("c0", "the spec's baseline"))
    assert "(every variant's ratio: the answer table)" in text
    final = next(line for line in text.splitlines() if line.startswith("- **At the end"))
    assert "far" in final and "v3" not in final


def test_the_anova_and_effects_grids_quote_the_long_tables():
    rng = np.random.default_rng(13)
    values, factors = {}, {}
    for a in ("x", "y"):
        for b in ("p", "q"):
            label = f"{a}{b}"
            values[label] = np.exp(0.2 * rng.standard_normal((4, 2, 5)) + (1.0 if a == "y" else 0.0))
            factors[label] = {"m.a": a, "m.b": b}
    _, _, anova, effects = analysis(values, factors)
    long, grid = ns.anova_table(anova), ns.anova_grid(anova)
    assert list(grid["term"]) == list(dict.fromkeys(anova["term"]))
    for i, r in long.iterrows():
        cell = grid.loc[grid["term"] == r["term"], r["measure"]].iloc[0]
        assert cell.startswith(f"F({r['df']}) = {r['F']}, p {r['p (Holm)']}") and cell.endswith(r["partial η²"])
        assert (anova.loc[i, "mark"] in cell) if anova.loc[i, "mark"] else True
    assert "p " not in " ".join(ns.anova_grid(anova, tested=False).iloc[:, 1:].to_numpy().ravel())
    printed = ns.effects_table(effects)
    levels = ns.wide(printed, ["factor", "level"], lambda r: r[ns.effects_column()])
    assert len(levels) == 4 and set(levels.columns[2:]) == set(printed["measure"])
    # Each measure's column names its mean, the one the stability table's values are.
    assert set(levels.columns[2:]) == {"CV over training steps, geometric mean", "CV over layers, (mean √CV)²",
                                       "final ‖x‖², geometric mean"}


def test_a_study_whose_head_counts_differ_says_which_norm_is_per_head_and_what_xi_does():
    """A reviewer read 'heads change the final ‖x‖²' as a finding: under ξ each head has unit power,
    so the whole state's norm grows with the head count by construction; the stability table's mean is per head."""
    from support import DESIGN_BASE

    from ablate import design

    heads = design.validate({**DESIGN_BASE, "factors": {"model.heads": [1, 2]}})
    line = ns.heads_line(heads)
    assert "the stability table's mean ‖x‖²" in line and "the final ‖x‖² is the whole state's (summed over heads)" in line
    assert ("xi" == heads.model.normalisation) is ("grows with the head count by construction" in line)
    gamma = design.validate({**DESIGN_BASE, "model": {**DESIGN_BASE["model"], "normalisation": "gamma",
                                                       "parameterisation": "rotation"},
                             "factors": {"model.heads": [1, 2]}})
    assert "by construction" not in ns.heads_line(gamma)
    assert ns.heads_line(design.validate({**DESIGN_BASE, "factors": {"model.layers": [1, 2]}})) == ""
    # The accuracy report's page one prints the norm columns too, and points to the norm report's tables.
    assert "in the norm report's figures and stability table's mean ‖x‖²" in ns.heads_line(
        heads, "the norm report's figures and stability table's")


def test_a_one_at_a_time_design_shows_no_marginal_means_and_names_no_factor_analysis(tmp_path):
    """lru_ablations varies three factors one at a time (5 of 12 combinations): its norm report printed
    marginal means and interaction figures whose level means mix in the other factors' effects, under a summary
    saying "the factor analysis below still apply" although the ANOVA was refused."""
    from pathlib import Path

    from ablate import results, stats
    from ablate.report.render import render

    export = Path(__file__).resolve().parents[1] / "reports" / "lru_ablations" / "data"
    res = results.read_export(export)
    trials = res.trials.to_pandas()
    varied = [f for f in res.factors if trials[f].nunique() > 1]
    assert len(varied) >= 2 and not stats.is_full_factorial(trials, varied)
    render(res.study, ["norm_stability"], tmp_path, ("html",), data=res)
    html = re.sub(r"<[^>]+>", "", (tmp_path / "norm_stability.html").read_text())
    text = " ".join(html.replace("&#x27;", "'").split())
    assert "No marginal means or interaction figures: the design is not a full factorial" in text
    assert "Marginal means per factor level" not in text and "Figure 4" not in text and "factor analysis" not in text
    # Its tables are numbered from 1 without a gap where the factor analysis' would be.
    assert re.findall(r"Table (\d+)\. ([A-Z][a-z]+)", text)[:3] == [("1", "The"), ("2", "Each"), ("3", "White")]
    assert "the design is not a full factorial: it has 5 of the 12 combinations" in text


def test_the_measure_lines_count_the_probe_batch_check_over_the_runs_it_covers() -> None:
    """rotrnn_norm_stability's tuning trials probed too: 120 runs checked (72 tuning trials, 3 on each
    tuning seed, counted once a seed until 2026-12-07: "72 runs"), 48 replicate runs analysed.
    A batch that agrees is said after the answer; the header keeps only the study line."""
    from ablate.report import norm_tables
    from ablate.results.exports import read_export

    res = read_export(Path(__file__).resolve().parents[1] / "reports" / "rotrnn_norm_stability" / "data")
    trials = res.trials.to_pandas()
    assert len(norm_tables.header_lines(res, trials, [])) == 1
    lines = norm_tables.measure_lines(res, trials)
    assert ("the same examples in all 120 runs (tuning trials included; 48 analysed); a white-noise probe of 32 "
            "sequences (seed 0).") in lines[0]


def test_a_probe_batch_that_differs_is_said_in_the_header_before_any_verdict(monkeypatch) -> None:
    """Cells that probed different examples make every norm comparison suspect: that stays on top."""
    from ablate.report import norm_tables
    from ablate.results.exports import read_export

    res = read_export(Path(__file__).resolve().parents[1] / "reports" / "rotrnn_norm_stability" / "data")
    trials = res.trials.to_pandas()
    monkeypatch.setattr(norm_tables.sn, "probe_batch_check", lambda metrics: (56, False))
    head = norm_tables.header_lines(res, trials, [])
    assert head[1] == ("Probe batch identical across all 56 runs (tuning trials included; 48 analysed): "
                       "**NO — cells differ in their task; compare with care**.")
    assert "the same examples" not in norm_tables.measure_lines(res, trials)[0]


def test_a_significant_factor_sentence_carries_the_caveat_it_is_given_and_an_ns_one_does_not() -> None:
    """The body's factor sentence says what page one says of a level that never learned."""
    anova = pd.DataFrame({"term": ["arch", "heads"], "measure": ["final", "final"], "df": [1, 1], "df_resid": [8, 8],
                          "F": [134.2, 0.5], "p": [1e-6, 0.5], "p_adj": [1e-5, 0.5], "eta_sq_partial": [0.94, 0.06], "mark": ["***", ""],
                          "significant": [True, False]})
    said = ns.factor_sentences(anova, None, 0.05, caveat=lambda term: f" — {term}: 6 of 6 runs never learned")
    assert len(said) == 1 and said[0].endswith("— arch: 6 of 6 runs never learned.")
    assert ns.factor_sentences(anova, None, 0.05)[0].endswith(").")
