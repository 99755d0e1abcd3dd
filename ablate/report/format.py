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

Everything here is a pure function of its arguments: strings out, no statistics, no figures.
``table_html`` writes a display frame (strings, one header per column) as the plain HTML table the
print stylesheet of ``ablate.report.render`` wraps and sizes for A4.
"""

from __future__ import annotations

import html as _html
import math
import re
from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

__all__ = [
    "DASH",
    "LEFT",
    "NBSP",
    "ci",
    "column_widths",
    "count",
    "finite",
    "inline_markdown",
    "level",
    "metric_name",
    "num",
    "p_is",
    "preformatted_block",
    "pval",
    "share",
    "signed",
    "table_block",
    "table_html",
    "text_em",
    "verdict",
    "with_ci",
]

DASH = "—"
NBSP = "\u00a0"  # keeps "[low, high]", "paired t", "3 pairs" on one line in a narrow column


# --- numbers -----------------------------------------------------------------------------------


def finite(x: Any) -> bool:
    """Whether ``x`` is a finite number (False for None, NaN, ±inf and non-numbers)."""
    try:
        return x is not None and math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


def num(x: Any, digits: int = 3, *, sig: bool = False) -> str:
    """``x`` with ``digits`` decimals (``sig``: significant digits); ``—`` for missing; ``±∞``."""
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
            unit: str = "") -> str:
    """``value [low, high]`` (``unit`` after the value: ``1.8× [0.49, 6.4]``); the value alone when
    the interval is missing; ``—`` when the value is."""
    text = signed(value, digits, sig=sig) if sign else num(value, digits, sig=sig)
    if text == DASH:
        return DASH
    text += unit if finite(value) else ""
    bounds = ci(low, high, digits, sig=sig)
    return text if bounds == DASH else f"{text} {bounds}"


def pval(p: Any) -> str:
    """A p-value: ``<0.001``, else three significant digits; ``—`` when missing."""
    if not finite(p):
        return DASH
    p = float(p)
    if p < 0.001:
        return "<0.001"
    return f"{p:.3f}" if p < 0.1 else f"{p:.2f}"


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


def metric_name(metric: str) -> str:
    """A metric's name in prose and axis labels: ``val/accuracy`` → ``val accuracy``."""
    return metric.replace("_", " ").replace("/", " ")


# --- words -------------------------------------------------------------------------------------


def verdict(significant: bool | None, at: str, few: str = "too few runs to test") -> str:
    """The one wording of a test's outcome in generated sentences: ``significant at {at}``,
    ``not significant at {at}``, or ``few`` when there was nothing to test (``significant=None``).
    ``at`` names the level: ``α = 0.05`` for a test, ``95%`` for an interval excluding no effect."""
    if significant is None:
        return few
    return f"{'' if significant else 'not '}significant at {at}"


def inline_markdown(text: str) -> str:
    """``**bold**``, ``*emphasis*`` and ```code``` of one paragraph as escaped HTML; ``\\*`` is a star."""
    star = "\x00"
    out = _html.escape(text.replace("\\*", star), quote=False)
    out = re.sub(r"`([^`]+)`", r"<code>\1</code>", out)
    out = re.sub(r"\*\*([^*]+)\*\*", r"<b>\1</b>", out)
    out = re.sub(r"\*([^*]+)\*", r"<em>\1</em>", out)
    return out.replace(star, "*")


# --- HTML tables -------------------------------------------------------------------------------

#: Columns of text, left-aligned (numbers are right-aligned).
LEFT = frozenset({"cell", "variant", "factor", "level", "term", "source", "message", "best setting", "kind", "phase",
                  "value", "package", "version", "confirmed", "metric", "test", "replicates ran", "status", "measure",
                  "reference (most stable)", "when"})


def _cell_text(v: Any) -> str:
    return DASH if v is None or (isinstance(v, float) and np.isnan(v)) else str(v)


def table_html(frame: pd.DataFrame, *, classes: str = "", align_left: Iterable[str] = (), caption: str = "") -> str:
    """A display frame as a plain HTML table (escaped); text columns left-aligned, numbers right.

    Tables of more than five columns get a fixed layout whose column widths come from their
    content (``column_widths``), so that they fill the page and never overflow it."""
    left = set(align_left) or {c for c in frame.columns if c in LEFT}
    classes = " ".join(filter(None, [classes, "wide" if len(frame.columns) > 5 else ""]))
    lcls = ' class="l"'
    head = "".join(f"<th{lcls if c in left or i == 0 else ''}>{_html.escape(str(c))}</th>"
                   for i, c in enumerate(frame.columns))
    body = []
    for _, row in frame.iterrows():
        cells = []
        for c in frame.columns:
            cls = ' class="l"' if c in left or c == frame.columns[0] else ""
            cells.append(f"<td{cls}>{_html.escape(_cell_text(row[c]))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    cap = f"<caption>{_html.escape(caption)}</caption>" if caption else ""
    cols = ""
    if "wide" in classes.split():  # fixed layout: columns share the page by their content, never overflow it
        widths = column_widths(frame, soft=left | {frame.columns[0]})
        cols = "<colgroup>" + "".join(f'<col style="width: {w:.1f}%">' for w in widths) + "</colgroup>"
    return (f'<table class="ablate {classes}">{cap}{cols}<thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table>")


def table_block(frame: pd.DataFrame, intro: str | Iterable[str] = (), heading: str | None = None) -> str:
    """A table with its heading and introduction (markdown paragraphs) as one HTML block, so that
    the print stylesheet keeps the text with the table's first rows on one page."""
    intro = [intro] if isinstance(intro, str) else list(intro)
    parts = [f"<h2>{_html.escape(heading)}</h2>"] if heading else []
    parts += [f"<p>{inline_markdown(text)}</p>" for text in intro if text]
    return '<div class="ablate-block">' + "".join(parts) + table_html(frame) + "</div>"


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


def column_widths(frame: pd.DataFrame, available_em: float = 68.0, cap_em: float = 24.0, pad_em: float = 1.2,
                  slack: float = 1.08, soft: Iterable[str] = (), soft_min_em: float = 8.0,
                  first_min_em: float = 13.0) -> list[float]:
    """Percent widths for a fixed-layout table that fills ``available_em`` (A4 text width at the
    table font size).

    Every column is at least as wide as its longest unbreakable token (a number, ``[low, high]``,
    a header word in bold); a ``soft`` (text) column may break inside a long word, so its floor is
    at most ``soft_min_em`` (``first_min_em`` for the first column, the row's name). What is left
    goes to the columns whose text is longer than their floor, text columns first (up to the 90th
    percentile of their length, at most ``cap_em``). ``slack`` covers the estimate's error.
    """
    mins, wants = [], []
    for i, c in enumerate(frame.columns):
        texts = [_cell_text(v) for v in frame[c]]
        tokens = [t for text in texts for t in text.split(" ")]
        header = 1.12 * max((text_em(w) for w in str(c).split()), default=0.0)  # bold
        low = slack * max([header, 1.0, *(text_em(t) for t in tokens)])
        filled = [text_em(t) for t in texts if t]  # blank cells (a repeated source) say nothing of width
        typical = slack * float(np.percentile(filled, 90)) if filled else 0.0
        if c in soft:  # text may break inside a long word; numbers may not
            low = max(slack * header, min(low, first_min_em if i == 0 else soft_min_em))
            want = max(low, min(cap_em, typical))
        else:  # numbers: room to keep "value [low, high]" on one line, no more
            want = max(low, min(typical, 1.6 * low))
        mins.append(low)
        wants.append(want)
    room = available_em - pad_em * len(mins)
    flex = sum(w - m for w, m in zip(wants, mins, strict=True))
    if sum(wants) <= room:
        widths = [w * room / sum(wants) for w in wants]
    elif sum(mins) < room and flex > 0:
        share_ = (room - sum(mins)) / flex
        widths = [m + (w - m) * share_ for w, m in zip(wants, mins, strict=True)]
    else:
        widths = mins  # too many columns for the page: break inside tokens rather than overflow
    widths = [w + pad_em for w in widths]
    total = sum(widths)
    return [100.0 * w / total for w in widths]
