"""The one formatting module of every report (``ablate.report.format``): numbers, intervals, p-values,
the one dash, the one wording of significance, HTML tables — and both reports using it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from frames import make_trials

from ablate import stats
from ablate.report import accuracy as acc
from ablate.report import format as fmt


def test_number_formatting():
    assert fmt.num(np.nan) == fmt.DASH and fmt.num(None) == fmt.DASH and fmt.num(-0.5) == "−0.500"
    assert fmt.with_ci(0.5, 0.4, 0.6) == "0.500 [0.400,\u00a00.600]"
    assert fmt.with_ci(0.5, np.nan, np.nan) == "0.500"
    assert fmt.with_ci(0.01, -0.02, 0.04, sign=True).startswith("+0.010")
    assert fmt.pval(0.0001) == "<0.001" and fmt.pval(0.0123) == "0.012" and fmt.pval(0.5) == "0.50"
    assert fmt.share(0, 4) == "0" and fmt.share(1, 4) == "1/4\u00a0(25%)" and fmt.share(1, 0) == fmt.DASH


def test_significant_digits_and_units():
    assert fmt.num(0.004237, 3, sig=True) == "0.00424" and fmt.num(13.52, 3, sig=True) == "13.5"
    assert fmt.num(-2.5e-5, 2, sig=True) == "−2.5e−05"
    assert fmt.num(np.inf) == "∞" and fmt.num(-np.inf, sig=True) == "−∞" and fmt.num("abc") == "abc"
    assert fmt.with_ci(1.7712, 0.488, 6.45, sig=True, unit="×") == "1.77× [0.488,\u00a06.45]"
    assert fmt.with_ci(1.7712, np.nan, 6.45, sig=True, unit="×") == "1.77×"
    assert fmt.with_ci(np.nan, 0.1, 0.2, unit="×") == fmt.DASH
    assert fmt.ci(0.1, None) == fmt.DASH and fmt.signed(np.nan) == fmt.DASH and fmt.signed(0.0) == "+0.000"
    assert fmt.level(0.95) == "95%" and fmt.level(0.9) == "90%"
    assert fmt.count(0) == "" and fmt.count(np.nan) == "" and fmt.count(3.0) == "3"
    assert fmt.metric_name("val/accuracy") == "val accuracy" and fmt.metric_name("test_loss") == "test loss"


@pytest.mark.parametrize("threshold", [0.05, 0.01, 0.001])
@pytest.mark.parametrize("offset", [-0.02, -0.002, -1e-4, 0.0, 1e-4, 0.002, 0.02])
def test_a_printed_p_never_rounds_across_a_threshold(threshold, offset):
    """Just below α (or a mark's threshold) reads below it, just above reads above, beside a star or
    not; the printed value is the p rounded half up, with digits added only where rounding would cross."""
    p = threshold * (1 + offset)
    text = fmt.pval(p)
    if text.startswith("<"):
        assert p < 0.001 and text == "<0.001"
        return
    shown = float(text)
    assert (shown < threshold) == (p < threshold) and (shown > threshold) == (p > threshold), (p, text)
    assert abs(shown - p) <= 0.0005 + 1e-12  # three decimals below 0.1, or more: never a coarser rounding
    for t in (0.05, 0.01, 0.001):
        assert (shown < t) == (p < t), (p, text, t)


def test_p_values_on_the_examples_of_the_issue():
    assert fmt.pval(0.0499) == "0.0499" and fmt.pval(0.0501) == "0.0501" and fmt.pval(0.05) == "0.050"
    assert fmt.pval(0.0625) == "0.063"  # half up, as by hand (Python's half-to-even gives 0.062)
    assert fmt.pval(0.00999) == "0.00999" and fmt.pval(0.0101) == "0.0101" and fmt.pval(0.001) == "0.001"
    assert fmt.pval(0.125) == "0.13" and fmt.pval(0.0123) == "0.012" and fmt.pval(0.3333) == "0.33"
    assert fmt.pval(0.0995) == "0.100" and fmt.pval(0.0995, alpha=0.1) == "0.0995"  # the report's own α
    assert fmt.pval(0.0499, alpha=0.1) == "0.050"  # 0.05 is no threshold at α = 0.1 (0.01 still is)
    assert fmt.p_is(0.0499) == "= 0.0499"


def test_p_values_in_prose_and_the_one_wording_of_significance():
    assert fmt.p_is(0.0001) == "< 0.001" and fmt.p_is(0.0123) == "= 0.012" and fmt.p_is(np.nan) == f"= {fmt.DASH}"
    assert fmt.verdict(True, "95%") == "significant at 95%"
    assert fmt.verdict(False, "α = 0.05") == "not significant at α = 0.05"
    assert fmt.verdict(None, "95%", few="too few units to test") == "too few units to test"
    assert fmt.verdict(True) == "significant" and fmt.verdict(False) == "not significant"


def test_html_table_escapes_aligns_and_dashes():
    frame = pd.DataFrame({"cell": ["a<b", "c"], "mean [95% CI]": ["0.5 [0.4,\u00a00.6]", np.nan], "n": [2, 3]})
    html = fmt.table_html(frame)
    # A short table is kept on one page ("whole"); a long one may break between its row groups.
    assert html.startswith('<table class="ablate whole">') and "a&lt;b" in html and "<b" not in html.replace("<body", "")
    long = pd.DataFrame({"cell": [f"c{i}" for i in range(fmt.WHOLE_ROWS + 1)]})
    assert "whole" not in fmt.table_html(long) and "whole" not in fmt.table_block(long, "text")
    assert '<div class="ablate-keep"><p>text</p><table class="ablate whole">' in fmt.table_block(frame, "text")
    assert '<th class="l">cell</th><th>mean [95% CI]</th><th>n</th>' in html
    assert f"<td>{fmt.DASH}</td>" in html and "nan" not in html
    wide = fmt.table_html(pd.DataFrame({f"c{i}": ["1"] for i in range(6)}))
    assert 'class="ablate wide whole"' in wide and wide.count("<col style=") == 6
    widths = fmt.column_widths(pd.DataFrame({"cell": ["a long label of a cell"] * 3, "n": ["1"] * 3}), soft=["cell"])
    assert sum(widths) == pytest.approx(100.0) and widths[0] > widths[1]
    block = fmt.table_block(frame, intro="**Table 1.** *Mean*", heading="Per cell")
    assert block.startswith('<div class="ablate-block"><h2>Per cell</h2><div class="ablate-keep"><p><b>Table 1.'
                            '</b> <em>Mean</em></p><table')
    # Only the paragraph just above the table is kept with it: a long introduction may break before it.
    block = fmt.table_block(frame, intro=["first", "second", "last"])
    assert block.startswith('<div class="ablate-block"><p>first</p><p>second</p><div class="ablate-keep">'
                            '<p>last</p><table')
    assert fmt.inline_markdown("a \\* b `x<y`") == "a * b <code>x&lt;y</code>"


def test_both_reports_write_a_missing_value_as_the_one_dash():
    trials = make_trials({"base": 0.8, "other": 0.8}, seeds=1, sd=0.0)
    summary = stats.cell_summary(trials, "test_accuracy", chance=None)
    cells = acc.cell_table(summary, "base", chance_known=False)
    assert (cells["never learned"] == fmt.DASH).all() and (cells["mean [95% CI]"] == "0.800").all()
    assert (cells["sd over seeds"] == fmt.DASH).all()
    comp = acc.comparison_table(stats.compare_to_reference(trials, "test_accuracy", "base"))
    assert comp.loc[0, "p (Holm)"] == fmt.DASH and comp.loc[0, "Δ vs reference [95% CI]"] == "0.800 vs 0.800"
    assert comp.loc[0, "verdict"] == "too few seeds to test (n\u00a0=\u00a01)"
    for frame in (cells, comp):
        assert not frame.isin(["n/a", "nan", "NaN", "None"]).any().any()


def test_row_groups_keep_a_factors_levels_and_a_sources_cells_together():
    frame = pd.DataFrame({"factor": ["a", "a", "b", "", "c"], "level": ["1", "2", "1", "2", "1"]})
    assert fmt.row_groups(frame) == [[0, 1], [2, 3], [4]]
    html = fmt.table_html(frame)
    assert html.count("<tbody") == 3 and html.count('<tbody class="group">') == 2


def test_a_table_too_wide_for_the_page_is_split_by_columns_never_squeezed():
    wide = pd.DataFrame({"cell": ["a cell with a long name"] * 2,
                         **{f"measure {i} [95% CI]": ["0.123 [0.100,\u00a00.150]"] * 2 for i in range(9)}})
    parts = fmt.column_parts(wide)
    assert len(parts) > 1 and all(p[0] == "cell" for p in parts)
    assert [c for p in parts for c in p[1:]] == list(wide.columns[1:])  # every column once, in order
    html = fmt.table_html(wide)
    assert html.count("<table") == len(parts) and "too wide for one page" in html
    # Short, but in parts: the block may break between them, each part whole with its own header (kept
    # whole, the 18-cell answer's parts left page one empty above them).
    block = fmt.table_block(wide, "text")
    assert block.startswith('<div class="ablate-block">') and block.count(' split whole"') == len(parts)
    narrow = wide.iloc[:, :5]
    assert fmt.column_parts(narrow) == [list(narrow.columns)] and "<caption>" not in fmt.table_html(narrow)


def test_a_split_table_spreads_its_columns_evenly_never_one_column_alone() -> None:
    """Filling each part to the page left the last one a single column on a page of its own."""
    def wide(n: int) -> pd.DataFrame:
        return pd.DataFrame({"cell": ["a cell with a long name"] * 2,
                             **{f"measure {i} [95% CI]": ["0.123 [0.100,\u00a00.150]"] * 2 for i in range(n)}})

    fit = max(n for n in range(1, 16) if len(fmt.column_parts(wide(n))) == 1)  # equal columns: this many a page
    assert 2 <= fit < 15
    for n in range(fit + 1, 31):
        parts = fmt.column_parts(wide(n))
        assert len(parts) == -(-n // fit)  # as few parts as filling each to the page
        sizes = [len(p) - 1 for p in parts]
        assert max(sizes) - min(sizes) <= 1, (n, sizes)
        assert [c for p in parts for c in p[1:]] == list(wide(n).columns[1:])


def test_latex_tables_are_booktabs_and_escaped(tmp_path):
    frame = pd.DataFrame({"factor": ["model.heads", "model.heads", "train.lr"], "level": ["1", "4", "3e-3"],
                          "Δ [95% CI]": ["−0.010 [−0.02,\u00a00.00]", "+0.5%", "—"]})
    tex = fmt.latex_table(frame, caption="Main effects & more")
    for rule in (r"\toprule", r"\midrule", r"\bottomrule", r"\addlinespace", r"\begin{tabular}{llr}"):
        assert rule in tex, rule
    assert tex.count(r"\addlinespace") == 1  # between the two row groups, not inside one
    assert r"model.heads" in tex and r"\$" not in tex and r"$-$0.010" in tex and r"+0.5\%" in tex
    assert r"$\Delta$" in tex and "---" in tex and r"\caption{Main effects \& more}" in tex
    assert all(ord(ch) < 128 for ch in tex)  # pdflatex reads it without inputenc tricks
    paths = fmt.save_table(frame, tmp_path, "effects", data=pd.DataFrame({"x": [1.5]}))
    assert [p.name for p in paths] == ["effects.csv", "effects.tex", "effects-data.csv"]
    back = pd.read_csv(paths[0], dtype=str, keep_default_na=False)
    pd.testing.assert_frame_equal(back, frame.map(lambda v: v.replace("\u00a0", " ")))


def test_a_line_never_begins_with_a_relation_sign():
    text = fmt.no_break_before_relations("p_adj = 0.047 *: significant at α = 0.05; p < 0.001, x ≤ 2")
    assert text == "p_adj\u00a0= 0.047 *: significant at α\u00a0= 0.05; p\u00a0< 0.001, x\u00a0≤ 2"
    assert "\u00a0=" in fmt.inline_markdown("**a** = b") and "> quoted" == fmt.no_break_before_relations("> quoted")


def test_a_table_cell_never_begins_a_line_with_a_relation_sign():
    html = fmt.table_html(pd.DataFrame({"note": ["IQM = mean (n < 4: nothing to trim)"]}))
    assert "IQM\u00a0= mean (n\u00a0< 4" in html.replace("&lt;", "<")


def test_significant_digits_print_an_integer_below_a_million_not_e_notation() -> None:
    assert fmt.num(2412.7, 3, sig=True) == "2410" and fmt.num(-38512, 3, sig=True) == "−38500"
    assert fmt.ci(2412.7, 3851.2, 3, sig=True) == "[2410,\u00a03850]"
    assert fmt.num(2.5e6, 3, sig=True) == "2.5e+06" and fmt.num(0.000123, 3, sig=True) == "0.000123"
    assert fmt.num(12.345, 3, sig=True) == "12.3"
