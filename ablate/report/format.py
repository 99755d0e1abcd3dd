"""How every report writes a number, an interval, a p-value, a missing value and a table.

One module for both reports, so that a reader meets one convention everywhere:

* a missing or undefined value is ``—`` (``DASH``), never ``n/a`` or ``nan``;
* an interval is ``[low, high]`` after its value (``0.512 [0.480, 0.544]``, ``1.8× [0.49, 6.4]``),
  its level said once in the column header or sentence around it (``mean [95% CI]``);
* a minus sign is ``−``; infinities are ``∞`` / ``−∞``;
* numbers have ``digits`` decimals (accuracies, differences), or with ``sig=True`` ``digits``
  significant digits (norms and CVs spanning orders of magnitude);
* generated sentences say ``significant`` / ``not significant`` and nothing else
  (``verdict``), naming the level they test at.

Everything here is a pure function of its arguments: strings out, no statistics, no figures
(``save_table`` writes files). ``table_html`` writes a display frame (strings, one header per
column) as the plain HTML table the print stylesheet of ``ablate.report.render`` wraps and sizes
for A4: consecutive rows with the same first cell (or a blank one, continuing the row above) are one
*row group* that a page break never splits, and a table too wide for the page is split by columns,
its first column repeated. ``latex_table`` writes the same frame as a booktabs table for a paper,
``save_table`` both it and a CSV.
"""

from __future__ import annotations

import html as _html
import math
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ablate.stats import words

__all__ = [
    "DASH",
    "LEFT",
    "NBSP",
    "P_THRESHOLDS",
    "ci",
    "column_widths",
    "count",
    "finite",
    "inline_markdown",
    "no_break_before_relations",
    "latex_escape",
    "latex_table",
    "level",
    "metric_name",
    "num",
    "p_is",
    "preformatted_block",
    "pval",
    "row_groups",
    "save_table",
    "share",
    "signed",
    "table_block",
    "column_parts",
    "table_html",
    "text_em",
    "verdict",
    "with_ci",
]

DASH = words.DASH  # the one dash: ablate.stats.words.p_text, which pval is, prints it too
NBSP = "\u00a0"  # keeps "[low, high]", "paired t", "3 pairs" on one line in a narrow column


# --- numbers -----------------------------------------------------------------------------------


def finite(x: Any) -> bool:
    """Whether ``x`` is a finite number (False for None, NaN, ±inf and non-numbers)."""
    try:
        return x is not None and math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


def num(x: Any, digits: int = 3, *, sig: bool = False) -> str:
    """``x`` with ``digits`` decimals (``sig``: significant digits, an integer below a million:
    ``2410``, not ``2.41e+03``); ``—`` for missing; ``±∞``."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return DASH
    try:
        v = float(x)
    except (TypeError, ValueError):
        return str(x)
    if math.isnan(v):
        return DASH
    if math.isinf(v):
        return "∞" if v > 0 else "−∞"
    text = f"{v:.{digits}g}" if sig else f"{v:.{digits}f}"
    if sig and "e+" in text and abs(v) < 1e6:
        # 2410, not 2.41e+03: a reader compares it at a glance with 744, and an interval of two such
        # numbers fits a column (in e-notation it split the norm report's Table 1 in two).
        text = f"{float(text):.0f}"
    return text.replace("-", "−")


def signed(x: Any, digits: int = 3, *, sig: bool = False) -> str:
    """``num`` with an explicit sign (``+0.012``)."""
    if not finite(x):
        return num(x, digits, sig=sig)
    return ("+" if float(x) >= 0 else "") + num(x, digits, sig=sig)


def ci(low: Any, high: Any, digits: int = 3, *, sig: bool = False) -> str:
    """``[low, high]``, or ``—`` when either bound is missing."""
    if not (finite(low) and finite(high)):
        return DASH
    return f"[{num(low, digits, sig=sig)},{NBSP}{num(high, digits, sig=sig)}]"


def with_ci(value: Any, low: Any, high: Any, digits: int = 3, sign: bool = False, *, sig: bool = False,
            unit: str = "", why: Any = "") -> str:
    """``value [low, high]`` (``unit`` after the value: ``1.8× [0.49, 6.4]``); when the interval is
    missing, the value alone, or ``value [— why]`` given the reason (``1.000 [— no spread: 3 runs
    equal]``, from a ``ci_note`` column); ``—`` when the value is."""
    text = signed(value, digits, sig=sig) if sign else num(value, digits, sig=sig)
    if text == DASH:
        return DASH
    text += unit if finite(value) else ""
    bounds = ci(low, high, digits, sig=sig)
    if bounds == DASH:
        return f"{text} [{DASH} {why}]" if isinstance(why, str) and why else text
    return f"{text} {bounds}"


#: The thresholds a printed p is read against (``ablate.stats.words``, where ``pval``'s rule lives so
#: that ``ablate plan``, which loads no pandas, prints a floor or a threshold as the reports do).
P_THRESHOLDS = words.P_THRESHOLDS


def pval(p: Any, alpha: float | None = None, *, bound: bool = False, against: Iterable[float] = ()) -> str:
    """A p-value: ``<0.001``; else three decimals below 0.1 and two above (rounded half up), with
    as many more as it takes for the printed value to sit on the same side of every threshold as
    p itself — ``alpha`` (default 0.05) and the marks' 0.01 and 0.001: 0.0499 is ``0.0499``, not
    ``0.050`` beside a star, and 0.0501 is ``0.0501``, not ``0.050``. ``—`` when missing.
    ``bound``: a floor or a threshold (α/m), printed the same way but never as ``<0.001``;
    ``against``: the numbers a sentence sets it beside, which it must print apart from
    (``ablate.stats.words.p_text``, the one rule)."""
    return words.p_text(p, alpha, bound=bound, against=against)


def p_is(p: Any) -> str:
    """A p-value after its name in prose or a figure's note: ``= 0.012``, ``< 0.001``."""
    text = pval(p)
    return "< " + text[1:] if text.startswith("<") else f"= {text}"


def share(k: Any, n: Any) -> str:
    """``k/n (p%)``; ``0`` when k is 0; ``—`` when n is 0 or missing."""
    if not finite(n) or int(n) == 0 or not finite(k):
        return DASH
    k, n = int(k), int(n)
    return "0" if k == 0 else f"{k}/{n}{NBSP}({k / n:.0%})"


def count(k: Any) -> str:
    """A count for a table cell: the number, or blank for zero or missing (nothing to see)."""
    return str(int(k)) if finite(k) and int(k) else ""


def level(confidence: float) -> str:
    """A confidence level as the reports write it: ``95%``."""
    return f"{confidence:.0%}"


def higher_is_better(metric: str) -> bool:
    """Which way ``metric`` (a trials-frame column) is better, as the reports word it
    (``ablate.metrics.higher_is_better``: a loss or bpc lower, a plug-in as it declares)."""
    from ablate import metrics

    return metrics.higher_is_better(metric)


def metric_name(metric: str) -> str:
    """A metric's name in prose and axis labels: ``val/accuracy`` → ``val accuracy``."""
    return metric.replace("_", " ").replace("/", " ")


# --- words -------------------------------------------------------------------------------------


def verdict(significant: bool | None, at: str = "", few: str = "too few runs to test") -> str:
    """The one wording of a test's outcome, in tables and generated sentences alike: ``significant``
    or ``not significant`` (``at {at}`` after it when ``at`` names the level, e.g. ``α = 0.05``), or
    ``few`` when there was nothing to test (``significant=None``), e.g. ``too few seeds to test
    (n = 2)``. Every report's intervals are at the level matching its α (95% for α = 0.05), so "an
    interval excluding no effect" is said the same way."""
    if significant is None:
        return few
    return f"{'' if significant else 'not '}significant" + (f" at {at}" if at else "")


_RELATION = re.compile(r" ([=<>≤≥]) ")


def no_break_before_relations(text: str) -> str:
    """``p_adj = 0.047`` with a no-break space before the ``=`` (and ``<``, ``≤``, …): a line may
    end after the sign, never begin with it."""
    return _RELATION.sub("\u00a0\\1 ", text)


def _inline_parser() -> Any:
    from markdown_it import MarkdownIt

    md = MarkdownIt("zero").enable(["emphasis", "backticks", "escape"])  # no links, HTML or headings
    # Bold as <b>: the print stylesheet and the tables' captions use it.
    md.add_render_rule("strong_open", lambda *_: "<b>")
    md.add_render_rule("strong_close", lambda *_: "</b>")
    return md


_INLINE: Any = None


def inline_markdown(text: str) -> str:
    """``**bold**``, ``*emphasis*`` and ```code``` of one paragraph as escaped HTML (CommonMark's
    inline rules, markdown-it-py; ``\\*`` is a star); a line never begins with a relation sign."""
    global _INLINE
    if _INLINE is None:  # built on first use: a report imports this module, few call it
        _INLINE = _inline_parser()
    return _INLINE.renderInline(no_break_before_relations(text))


# --- HTML tables -------------------------------------------------------------------------------

#: Columns of text, left-aligned (numbers are right-aligned).
LEFT = frozenset({"cell", "variant", "factor", "level", "term", "source", "message", "best setting", "kind", "phase",
                  "value", "package", "version", "confirmed", "metric", "test", "replicates ran", "status", "measure",
                  "reference (most stable)", "when", "verdict", "note", "still improving",
                  "steps used"})


def _cell_text(v: Any) -> str:
    return DASH if v is None or (isinstance(v, float) and np.isnan(v)) else str(v)


#: Where an identifier may break across lines: after the ``=`` of a ``key=value`` and after a ``,``
#: with no space behind it. Anywhere else a level such as ``complex_diagonal`` stays whole.
_BREAK = re.compile(r"(?<=[=,])(?=[^\s,=])")


def _breakable(text: str) -> str:
    """Escaped HTML of a cell's text with a ``<wbr>`` at each place an identifier may break."""
    return "<wbr>".join(_html.escape(piece) for piece in _BREAK.split(no_break_before_relations(text)))


def _pieces(text: str) -> list[str]:
    """The parts of ``text`` a line never breaks inside (between spaces and ``_BREAK``'s places)."""
    return [p for word in text.split(" ") for p in _BREAK.split(word)]


def row_groups(frame: pd.DataFrame) -> list[list[int]]:
    """Row positions in groups: a run of rows whose first cell is equal, or blank after the first
    (a source named once over the cells it matches), is one group."""
    groups: list[list[int]] = []
    last = None
    for i, v in enumerate(frame.iloc[:, 0].tolist() if len(frame.columns) else []):
        text = _cell_text(v)
        if groups and (text == last or text == ""):
            groups[-1].append(i)
        else:
            groups.append([i])
            last = text
    return groups


def _table(frame: pd.DataFrame, classes: str, left: set[str], caption: str) -> str:
    lcls = ' class="l"'
    head = "".join(f"<th{lcls if c in left or i == 0 else ''}>{_html.escape(str(c))}</th>"
                   for i, c in enumerate(frame.columns))
    body = []
    for group in row_groups(frame):
        rows = []
        for _, row in frame.iloc[group].iterrows():
            cells = []
            for c in frame.columns:
                cls = ' class="l"' if c in left or c == frame.columns[0] else ""
                cells.append(f"<td{cls}>{_breakable(_cell_text(row[c]))}</td>")
            rows.append("<tr>" + "".join(cells) + "</tr>")
        # one <tbody> per row group: the print stylesheet keeps each on one page
        opening = '<tbody class="group">' if len(group) > 1 else "<tbody>"
        body.append(opening + "".join(rows) + "</tbody>")
    cap = f"<caption>{_html.escape(caption)}</caption>" if caption else ""
    cols = ""
    if "wide" in classes.split():  # fixed layout: columns share the page by their content, never overflow it
        widths = column_widths(frame, soft=left | {frame.columns[0]})
        cols = "<colgroup>" + "".join(f'<col style="width: {w:.1f}%">' for w in widths) + "</colgroup>"
    return f'<table class="ablate {classes}">{cap}{cols}<thead><tr>{head}</tr></thead>{"".join(body)}</table>'


#: Tables of at most this many rows are kept on one page: their header does not repeat on the next
#: (see ``render._PAGE_CSS``), so the rows a page break carried over would stand unlabelled.
WHOLE_ROWS = 12


def table_html(frame: pd.DataFrame, *, classes: str = "", align_left: Iterable[str] = (), caption: str = "") -> str:
    """A display frame as a plain HTML table (escaped); text columns left-aligned, numbers right.

    Each row group (``row_groups``) is a ``<tbody>`` the print stylesheet keeps on one page.
    Tables of more than five columns get a fixed layout whose column widths come from their
    content (``column_widths``), so that they fill the page and never overflow it; a table whose
    columns cannot fit the page even at their narrowest is split into several tables by columns
    (``column_parts``), each repeating the first column, and says so in its caption."""
    left = set(align_left) or {c for c in frame.columns if c in LEFT}
    parts = column_parts(frame, soft=left)
    out = []
    for k, cols in enumerate(parts):
        part = frame[cols]
        cls = " ".join(filter(None, [classes, "wide" if len(part.columns) > 5 else "",
                                     "split" if len(parts) > 1 else "", "whole" if len(part) <= WHOLE_ROWS else ""]))
        cap = caption
        if len(parts) > 1:
            shown = [frame.columns.get_loc(c) + 1 for c in cols[1:]]
            cap = (f"{caption} " if caption else "") + (
                f"(part {k + 1} of {len(parts)}: columns {shown[0]}–{shown[-1]} of {len(frame.columns)}; "
                "too wide for one page)")
        table = _table(part, cls, left, cap)
        # WeasyPrint keeps a whole table's rows together but not its caption with them: a part that
        # moved to the next page left its caption at the foot of the last; a block it keeps whole.
        out.append(f'<div class="ablate-part">{table}</div>' if len(parts) > 1 and len(part) <= WHOLE_ROWS else table)
    return "".join(out)


def table_block(frame: pd.DataFrame, intro: str | Iterable[str] = (), heading: str | None = None,
                align_left: Iterable[str] = ()) -> str:
    """A table with its heading and introduction (markdown paragraphs) as one HTML block, so that
    the print stylesheet keeps the text with the table's first rows on one page."""
    intro = [intro] if isinstance(intro, str) else list(intro)
    head = [f"<h2>{_html.escape(heading)}</h2>"] if heading else []
    paras = [f"<p>{inline_markdown(text)}</p>" for text in intro if text]
    table = table_html(frame, align_left=align_left)
    # A short table stays whole (``table_html``'s "whole"), with the end of the paragraph just above
    # it. The rest of the introduction, and that paragraph's start, may break from it: an
    # introduction kept whole with its table moved both to the next page and left this one 40% empty.
    last = paras.pop() if paras else ""
    return '<div class="ablate-block">' + "".join(head + paras) + f'<div class="ablate-keep">{last}{table}</div></div>'


def preformatted_block(text: str, title: str | None = None) -> str:
    """Preformatted text (a spec) with its bold title as one HTML block, set in two columns in print."""
    head = f"<p><b>{_html.escape(title)}</b></p>" if title else ""
    return f'<div class="ablate-block">{head}<pre class="spec">{_html.escape(text)}</pre></div>'


#: Approximate advance widths (em) of DejaVu Sans, the report's font, for sizing table columns.
_WIDE = {"m": 0.97, "w": 0.82, "M": 0.86, "W": 0.99, "−": 0.84, "=": 0.84, "+": 0.84, "%": 0.95, "Δ": 0.68,
         "η": 0.63, "²": 0.4, "…": 1.0}
_NARROW = {"i": 0.28, "l": 0.28, "j": 0.28, "f": 0.35, "t": 0.39, "r": 0.41, " ": 0.32, NBSP: 0.32, ".": 0.32,
           ",": 0.32, ":": 0.34, ";": 0.34, "[": 0.39, "]": 0.39, "(": 0.39, ")": 0.39, "/": 0.34, "|": 0.34,
           "'": 0.28, "_": 0.5, "-": 0.36}


def text_em(text: str) -> float:
    """Rough width of ``text`` in em (DejaVu Sans): enough to size columns, not to typeset."""
    return sum(_WIDE.get(ch) or _NARROW.get(ch) or (0.64 if ch.isdigit() or ch.isupper() else 0.6)
               for ch in text)


#: A text column is at least as wide as its longest unbreakable piece (``_pieces``: an identifier such
#: as ``parameterisation=``, ``complex_diagonal,``) up to this width (em), so that a level is never
#: broken inside; only a longer piece may break where it must.
WHOLE_EM = 16.0


def _floors(frame: pd.DataFrame, soft: Iterable[str], slack: float, soft_min_em: float,
            first_min_em: float) -> tuple[list[float], list[float]]:
    """(floor, wanted width) in em of each column: see ``column_widths``."""
    soft = set(soft)
    mins, wants = [], []
    for i, c in enumerate(frame.columns):
        texts = [_cell_text(v) for v in frame[c]]
        tokens = [t for text in texts for t in _pieces(text)]
        header = 1.12 * max((text_em(w) for w in re.split(r"[ \n]+", str(c))), default=0.0)  # bold; NBSP joins
        low = slack * max([header, 1.0, *(text_em(t) for t in tokens)])
        filled = [text_em(t) for t in texts if t]  # blank cells (a repeated source) say nothing of width
        typical = slack * float(np.percentile(filled, 90)) if filled else 0.0
        if c in soft or i == 0:  # text may break inside a word longer than WHOLE_EM; numbers may not
            low = max(slack * header, min(low, max(WHOLE_EM, first_min_em if i == 0 else soft_min_em)))
            want = max(low, min(24.0, typical))
        else:  # numbers: room to keep "value [low, high]" on one line, no more
            want = max(low, min(typical, 1.6 * low))
        mins.append(low)
        wants.append(want)
    return mins, wants


def column_parts(frame: pd.DataFrame, available_em: float = 68.0, pad_em: float = 1.2, slack: float = 1.08,
                 soft: Iterable[str] = (), soft_min_em: float = 8.0, first_min_em: float = 13.0) -> list[list[Any]]:
    """The columns of each table a too-wide ``frame`` is split into: as few parts as fit
    ``available_em`` at their floors (``column_widths``), the first column repeated in every part,
    the columns spread evenly over them; one part holding every column when they fit."""
    cols = list(frame.columns)
    if len(cols) <= 2:
        return [cols]
    mins, _ = _floors(frame, set(soft) | {cols[0]}, slack, soft_min_em, first_min_em)
    if sum(m + pad_em for m in mins) <= available_em:
        return [cols]

    first, widths = mins[0] + pad_em, [m + pad_em for m in mins]

    def fill(k: int | None) -> list[list[Any]]:
        """Parts filled to the page (``k`` None), or each to its share of ``k`` parts."""
        parts, i = [], 1
        while i < len(cols):
            target = sum(widths[i:]) / max(1, k - len(parts)) if k else available_em
            current, used = [cols[0]], 0.0
            while i < len(cols):
                w = widths[i]
                if len(current) > 1 and (first + used + w > available_em or used + w / 2 > target):
                    break
                current.append(cols[i])
                used, i = used + w, i + 1
            parts.append(current)
        return parts

    # Filling each part to the page left the last one a single column ("columns 10–10 of 10") on a
    # page of its own: the columns are spread evenly over as many parts, unless that needs more.
    packed = fill(None)
    even = fill(len(packed))
    return even if len(even) <= len(packed) else packed


def column_widths(frame: pd.DataFrame, available_em: float = 68.0, cap_em: float = 24.0, pad_em: float = 1.2,
                  slack: float = 1.08, soft: Iterable[str] = (), soft_min_em: float = 8.0,
                  first_min_em: float = 13.0) -> list[float]:
    """Percent widths for a fixed-layout table that fills ``available_em`` (A4 text width at the
    table font size).

    Every column is at least as wide as its longest unbreakable token (a number, ``[low, high]``,
    a header word in bold, an identifier up to a ``=`` or ``,``); a ``soft`` (text) column may break
    inside a word longer than ``WHOLE_EM``, so its floor is at most the larger of that and
    ``soft_min_em`` (``first_min_em`` for the first column, the row's name). What is left
    goes to the columns whose text is longer than their floor, text columns first (up to the 90th
    percentile of their length, at most ``cap_em``). ``slack`` covers the estimate's error. A table
    whose floors exceed the page is split first (``column_parts``).
    """
    mins, wants = _floors(frame, soft, slack, soft_min_em, first_min_em)
    wants = [min(w, max(m, cap_em)) for w, m in zip(wants, mins, strict=True)]
    room = available_em - pad_em * len(mins)
    flex = sum(w - m for w, m in zip(wants, mins, strict=True))
    if sum(wants) <= room:
        widths = [w * room / sum(wants) for w in wants]
    elif sum(mins) < room and flex > 0:
        share_ = (room - sum(mins)) / flex
        widths = [m + (w - m) * share_ for w, m in zip(wants, mins, strict=True)]
    else:
        widths = mins  # more than the page even at their floors: column_parts splits such tables first
    widths = [w + pad_em for w in widths]
    total = sum(widths)
    return [100.0 * w / total for w in widths]


# --- tables for papers -------------------------------------------------------------------------

#: Characters LaTeX treats specially, and the Unicode the reports write, as pdflatex reads them.
_LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                  "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}
_LATEX_UNICODE = {"−": "$-$", "—": "---", "–": "--", "…": r"\ldots{}", NBSP: "~", "×": r"$\times$", "±": r"$\pm$",
                  "≤": r"$\le$", "≥": r"$\ge$", "→": r"$\to$", "∞": r"$\infty$", "Δ": r"$\Delta$", "α": r"$\alpha$",
                  "γ": r"$\gamma$", "ξ": r"$\xi$", "λ": r"$\lambda$", "η": r"$\eta$", "θ": r"$\theta$",
                  "Σ": r"$\Sigma$", "²": r"$^2$", "‖": r"$\|$", "·": r"$\cdot$", "₀": r"$_0$", "ʰ": r"$^h$",
                  "’": "'", "“": "``", "”": "''"}


def latex_escape(text: Any) -> str:
    """``text`` as LaTeX source for pdflatex: specials escaped, the reports' Unicode as commands."""
    out = []
    for ch in _cell_text(text):
        if ch == "\\":
            out.append(r"\textbackslash{}")
        else:
            out.append(_LATEX_SPECIAL.get(ch) or _LATEX_UNICODE.get(ch) or ch)
    return "".join(out).replace("$$", "")


def latex_table(frame: pd.DataFrame, caption: str = "", label: str = "") -> str:
    """A display frame as a booktabs table (``\\toprule``/``\\midrule``/``\\bottomrule``; needs
    ``\\usepackage{booktabs}``): text columns left, numbers right, a little space between row
    groups, the caption above."""
    left = {c for c in frame.columns if c in LEFT} | ({frame.columns[0]} if len(frame.columns) else set())
    spec = "".join("l" if c in left else "r" for c in frame.columns)
    lines = [r"\begin{table}[ht]", r"\centering"]
    if caption:
        lines.append(rf"\caption{{{latex_escape(caption)}}}")
    if label:
        lines.append(rf"\label{{{label}}}")
    lines += [rf"\begin{{tabular}}{{{spec}}}", r"\toprule",
              " & ".join(latex_escape(c) for c in frame.columns) + r" \\", r"\midrule"]
    for k, group in enumerate(row_groups(frame)):
        if k:
            lines.append(r"\addlinespace")
        for _, row in frame.iloc[group].iterrows():
            lines.append(" & ".join(latex_escape(row[c]) for c in frame.columns) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    return "\n".join(lines) + "\n"


def save_table(frame: pd.DataFrame, directory: Path, name: str, caption: str = "",
               data: pd.DataFrame | None = None) -> list[Path]:
    """``frame`` as printed into ``directory``: ``name.csv`` (UTF-8; no-break spaces as spaces) and
    ``name.tex`` (``latex_table``), and the numeric frame behind it as ``name-data.csv`` when given."""
    directory.mkdir(parents=True, exist_ok=True)
    csv = directory / f"{name}.csv"
    frame.map(lambda v: _cell_text(v).replace(NBSP, " ")).to_csv(csv, index=False)
    tex = directory / f"{name}.tex"
    tex.write_text(latex_table(frame, caption, label=f"tab:{name}"), encoding="utf-8")
    out = [csv, tex]
    if data is not None:
        path = directory / f"{name}-data.csv"
        data.to_csv(path, index=False)
        out.append(path)
    return out
