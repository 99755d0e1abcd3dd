"""What every report figure shares: page size, style, the factor → visual channel mapping,
palettes, wrapped labels, empty panels, saving and exporting.

Figures are built on ``matplotlib.figure.Figure`` with an Agg canvas (never pyplot), so they
render headless, touch no global backend state, and display inline in Jupyter. They are sized for
an A4 page (``WIDTH`` inches wide, height growing with content), drawn under ``STYLE`` (print-
legible font sizes, the reports' fonts of ``ablate.report.fonts``, mathtext for notation), and wrap
long labels instead of letting them run off the page.

**One mapping from factors to visual channels** (``Channels``), decided once per report from the
study's factors and levels and used by every figure: the first factor with two or more levels is
the colour, the second the line style and marker, the rest the facet. A level has one colour in
every figure of the report; palettes are the colour-blind-safe Okabe–Ito colours for categories
and an ordered (viridis) ramp for numeric levels; greys are kept for reference lines (chance, zero,
theory), never for a level. Legends name the factor and its levels.

Figures go on the page as vector graphics (``figure_html``: an SVG image, text as outlines) and,
when a report exports, alone into ``figures/`` as PDF, SVG and 300-dpi PNG (``save_figure``). A
report's own figures live in its presentation module (``ablate.report.accuracy``,
``ablate.report.norm_tables``) and are built from these helpers.
"""

from __future__ import annotations

import base64
import html as _html
import io
import itertools
import math
import re
from collections.abc import Hashable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib as mpl
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from ablate.report import fonts

__all__ = [
    "CATEGORICAL",
    "DPI",
    "EXPORT_DPI",
    "GREY",
    "STYLE",
    "WIDTH",
    "Channels",
    "empty",
    "factor_name",
    "figure",
    "figure_html",
    "MAX_HEIGHT",
    "bottom_row",
    "legend_columns",
    "log_axis",
    "log_axis_if_wide",
    "no_data",
    "panel_grid",
    "palette",
    "pdf",
    "png",
    "readable_limits",
    "save_figure",
    "style",
    "supylabel",
    "svg",
    "wrap",
    "wrapped_places",
    "xlabel",
]

#: Figure width in inches: fits an A4 page (8.27 in) with margins.
WIDTH = 6.8
#: The tallest figure, in inches: one A4 page's text height (269 mm) less a heading and a caption of
#: up to six lines, so that a caption is never left alone at the foot of the page before its figure.
#: Figures that grow with the cells (a row per cell, a row of panels per facet) shrink their rows to
#: stay under it, so a 48-cell study's figure is still one page.
MAX_HEIGHT = 8.5
#: Resolution of raster output drawn on screen (figures are embedded as vector graphics).
DPI = 150
#: Resolution of the PNG a report exports beside each figure's PDF and SVG.
EXPORT_DPI = 300
STYLE = {
    "font.family": fonts.MATPLOTLIB_FAMILY,
    "mathtext.fontset": "dejavusans",
    "font.size": 8,
    "axes.titlesize": 8.5,
    "axes.labelsize": 8,
    "xtick.labelsize": 7.5,
    "ytick.labelsize": 7.5,
    "legend.fontsize": 7.5,
    "legend.title_fontsize": 8,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "grid.linewidth": 0.5,
    "pdf.fonttype": 42,  # exported PDFs: embedded TrueType, selectable text
    "svg.fonttype": "path",  # SVGs: text as outlines, the same on every viewer
    "svg.hashsalt": "ablate",  # stable ids: the same figure gives the same SVG
}
#: Reference lines (chance, zero, a ratio of 1) are grey or black: no level is drawn in grey. (A variant's
#: own theory and white-noise curves are in its colour, drawn as REFERENCE and norm_figures.NOISE.)
GREY = {"reference": "0.35", "light": "0.6", "theory": "black"}
#: Okabe–Ito's colour-blind-safe colours (black and yellow left out: black is for means and theory,
#: yellow is unreadable on white), then Paul Tol's muted colours: ten distinguishable categories.
CATEGORICAL = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9",
               "#882255", "#44AA99", "#999933", "#AA4499")
DASHES = ("-", "--", ":", "-.", (0, (5, 1, 1, 1, 1, 1)), (0, (8, 2)), (0, (1, 3)), (0, (3, 1, 3, 1, 1, 1)))
#: A reference line (chance, a ratio of 1, a theory curve): broad and pale, never a dash pattern, which
#: every pattern above may mean a variant.
REFERENCE = {"lw": 3.0, "alpha": 0.35, "ls": "-", "solid_capstyle": "butt"}
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def style() -> AbstractContextManager:
    """The report style for the figures built inside the ``with`` block."""
    return mpl.rc_context(STYLE)


#: Where a word too long for its line breaks: after the ``=`` of a ``key=value`` or a ``,`` with no
#: space behind it (``parameterisation=`` / ``complex_diagonal,``), never inside a level.
_BREAK = re.compile(r"(?<=[=,])(?=[^\s,=])")
_MATH = re.compile(r"\$[^$]*\$")
#: A piece (between such breaks) of up to this many characters stays whole even on a narrower line:
#: a level such as ``complex_diagonal`` overflows a short tick label a little rather than split.
WHOLE = 24


def wrap(label: Any, width: int = 30) -> str:
    """Wrap ``label`` onto lines of at most ``width`` characters: whole words where they fit, a
    longer word after the ``=`` or ``,`` inside it; a piece longer than ``width`` stands on a line of
    its own, broken inside only past ``WHOLE`` characters. Mathtext (``$…$``) is never broken."""
    original = str(label)
    text = _MATH.sub(lambda m: m.group(0).replace(" ", "\0"), original)  # its spaces held while wrapping
    longest = max(width, WHOLE)
    lines: list[str] = []
    line = ""
    for word in text.split():
        if len(line) + bool(line) + len(word) <= width:
            line += " " * bool(line) + word
            continue
        pieces = [word] if "$" in word else _BREAK.split(word)
        if len(word) <= width or (len(pieces) == 1 and len(word) <= longest):
            lines.append(line)
            line = word
            continue
        for k, piece in enumerate(pieces):
            gap = bool(line) and k == 0
            if len(line) + gap + len(piece) <= width:
                line += " " * gap + piece
                continue
            lines.append(line)
            while len(piece) > longest and "$" not in piece:
                lines.append(piece[:longest])
                piece = piece[longest:]
            line = piece
    lines.append(line)
    return "\n".join(x for x in lines if x).replace("\0", " ") or original


def figure(height: float, width: float = WIDTH) -> Figure:
    """An empty figure ``height`` inches tall (at most ``MAX_HEIGHT``), at most the page's ``WIDTH``
    wide, laid out by matplotlib's constrained layout."""
    fig = Figure(figsize=(min(width, WIDTH), min(height, MAX_HEIGHT)), layout="constrained", dpi=DPI)
    FigureCanvasAgg(fig)
    return fig


def panel_grid(fig: Figure, places: Sequence[tuple[int, int]], *, sharex: bool = True,
               sharey: bool = True) -> list[Any]:
    """One axes at each (row, column) of ``places`` on a grid just big enough for them, and none
    elsewhere: a grid of small multiples whose rows have fewer panels (a one-layer facet beside a
    four-layer one) leaves a blank, never an empty frame. Axes share their x and y with the first."""
    nrows = 1 + max(r for r, _ in places)
    ncols = 1 + max(c for _, c in places)
    spec = fig.add_gridspec(nrows, ncols)
    axes: list[Any] = []
    for r, c in places:
        first = axes[0] if axes else None
        axes.append(fig.add_subplot(spec[r, c], sharex=first if sharex else None, sharey=first if sharey else None))
    return axes


def wrapped_places(n: int, ncols: int) -> list[tuple[int, int]]:
    """``n`` panels row by row, ``ncols`` to a row: their (row, column)."""
    ncols = max(1, ncols)
    return [(i // ncols, i % ncols) for i in range(n)]


def bottom_row(places: Sequence[tuple[int, int]]) -> list[int]:
    """Of panels at ``places``, those with no panel below them (where the x label and ticks go)."""
    last = {c: max(r for r, cc in places if cc == c) for _, c in places}
    return [i for i, (r, c) in enumerate(places) if r == last[c]]


def xlabel(axes: Sequence[Any], used: int, ncols: int, text: str) -> None:
    """``text`` under each of the first ``used`` panels with no panel below it (the figure's legend
    sits below the panels, where a ``supxlabel`` would collide with it)."""
    for i, ax in enumerate(list(axes)[:used]):
        if i + ncols >= used:
            ax.set_xlabel(text, fontsize=8)


def supylabel(fig: Figure, text: str) -> None:
    """``text`` along the figure's left edge, wrapped to the panels' height (the legend above the
    panels must not meet it on a short figure)."""
    fig.supylabel(wrap(text, max(16, int((fig.get_figheight() - 1.3) * 13))), fontsize=8)


def no_data(fig: Figure, message: str) -> Figure:
    """``fig`` as one blank panel saying ``message`` (no runs yet, nothing recorded)."""
    ax = fig.add_subplot()
    ax.set_axis_off()
    ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes, color="0.4")
    return fig


def empty(message: str, height: float = 1.2) -> Figure:
    """A short figure saying ``message``, in place of one that has nothing to show."""
    with style():
        return no_data(figure(height), message)


def palette(keys: Sequence[Hashable], ordered: bool | None = None) -> dict[Hashable, str]:
    """A colour (hex) per key, in order: ``CATEGORICAL`` for up to ten keys that are not an ordered
    series, an even viridis ramp (its light end left out) when ``ordered`` — by default when there
    are three or more keys and all read as numbers — and seaborn's ``husl`` beyond ten."""
    keys = list(keys)
    n = max(1, len(keys))
    if ordered is None:
        ordered = len(keys) >= 3 and all(_number(k) is not None for k in keys)
    if ordered:
        values = [mpl.colors.to_hex(mpl.colormaps["viridis"](x)) for x in np.linspace(0.0, 0.82, n)]
    elif n <= len(CATEGORICAL):
        values = list(CATEGORICAL[:n])
    else:
        import seaborn as sns  # only for more than ten categories: its import costs a report 0.3 s

        values = [mpl.colors.to_hex(c) for c in sns.color_palette("husl", n)]
    return dict(zip(keys, values, strict=False))


def _number(value: Any) -> float | None:
    try:
        return float(str(value))
    except ValueError:
        return None


def factor_name(factor: str, factors: Iterable[str] = ()) -> str:
    """A factor as a legend or a title names it: the last part of its dotted path
    (``model.heads`` → ``heads``) unless another factor ends the same way."""
    short = str(factor).rsplit(".", 1)[-1]
    clash = [f for f in factors if f != factor and str(f).rsplit(".", 1)[-1] == short]
    return str(factor) if clash else short


@dataclass(frozen=True)
class Channels:
    """The report's one mapping from factors to visual channels (see the module's docstring).

    ``color`` maps each level of the colour factor to a hex colour, ``dash`` / ``marker`` each
    level of the style factor to a line style and a marker, and the facet factors' levels name
    the panels. ``cells`` maps a cell id to its levels (factor → level), so figures style a cell
    by its id. A factor with a single level carries no channel; with no factor every cell is
    black, solid, round."""

    factors: tuple[str, ...]
    levels: dict[str, tuple[str, ...]]
    color: dict[str, str] = field(default_factory=dict)
    dash: dict[str, Any] = field(default_factory=dict)
    marker: dict[str, str] = field(default_factory=dict)
    cells: dict[str, dict[str, str]] = field(default_factory=dict)

    @classmethod
    def from_factors(cls, factors: Sequence[str], levels: Mapping[str, Sequence[Any]],
                     cells: Mapping[str, Mapping[str, Any]] | None = None) -> Channels:
        """The mapping for ``factors`` (in order) with their ``levels`` (in order): colour, then
        line style and marker, then facets, over the factors with two levels or more."""
        lv = {f: tuple(str(v) for v in levels.get(f, ())) for f in factors}
        varied = tuple(f for f in factors if len(lv[f]) >= 2)
        color = palette(lv[varied[0]]) if varied else {}
        style = lv[varied[1]] if len(varied) > 1 else ()
        dash = {v: DASHES[i % len(DASHES)] for i, v in enumerate(style)}
        marker = {v: MARKERS[i % len(MARKERS)] for i, v in enumerate(style)}
        known = {str(c): {f: str(v) for f, v in levels_.items()} for c, levels_ in (cells or {}).items()}
        return cls(varied, {f: lv[f] for f in varied}, color, dash, marker, known)

    @classmethod
    def from_trials(cls, trials: Any, factors: Sequence[str] | None = None) -> Channels:
        """The mapping of a trials frame (pandas or polars): its factor columns (``factors``, or the
        dotted-path columns), their levels in order of first appearance, and every cell's levels."""
        frame = trials.to_pandas() if hasattr(trials, "to_pandas") else trials
        if factors is None:
            factors = [c for c in frame.columns if "." in str(c)]
        factors = [f for f in factors if f in frame.columns]
        levels = {f: list(dict.fromkeys(str(v) for v in frame[f].dropna())) for f in factors}
        first = frame.drop_duplicates("cell_id") if "cell_id" in frame.columns else frame.iloc[0:0]
        cells = {str(r["cell_id"]): {f: str(r[f]) for f in factors} for _, r in first.iterrows()}
        return cls.from_factors(factors, levels, cells)

    # --- which factor carries which channel

    @property
    def color_factor(self) -> str | None:
        return self.factors[0] if self.factors else None

    @property
    def style_factor(self) -> str | None:
        return self.factors[1] if len(self.factors) > 1 else None

    @property
    def facet_factors(self) -> tuple[str, ...]:
        return self.factors[2:]

    def name(self, factor: str) -> str:
        """The factor as legends name it."""
        return factor_name(factor, self.factors)

    # --- a cell's look

    def _levels(self, cell: str | Mapping[str, Any]) -> dict[str, str]:
        if isinstance(cell, Mapping):
            return {f: str(v) for f, v in cell.items()}
        return self.cells.get(str(cell), {})

    def style(self, cell: str | Mapping[str, Any]) -> dict[str, Any]:
        """``color``, ``linestyle`` and ``marker`` of a cell (its id, or its levels), and the ``gid``
        its artists carry into the SVG (``cell:<id>``), so a reader (or a test) can find them."""
        levels = self._levels(cell)
        color = self.color.get(levels.get(self.color_factor or "", ""), "black")
        key = levels.get(self.style_factor or "", "")
        gid = f"cell:{cell}" if isinstance(cell, str) else None
        return {"color": color, "linestyle": self.dash.get(key, "-"), "marker": self.marker.get(key, "o"), "gid": gid}

    def level_look(self, factor: str, level: Any) -> dict[str, Any]:
        """How a level of ``factor`` is drawn where the factor has its own line or point (main
        effects, interactions): its colour if it is the colour factor, its line style and marker if
        it is the style factor, else black with the level's own dash and marker; ``gid``
        ``level:<factor>=<level>``."""
        lv = str(level)
        gid = f"level:{factor}={lv}"
        if factor == self.color_factor:
            return {"color": self.color.get(lv, "black"), "linestyle": "-", "marker": "o", "gid": gid}
        if factor == self.style_factor:
            return {"color": "0.2", "linestyle": self.dash.get(lv, "-"), "marker": self.marker.get(lv, "o"),
                    "gid": gid}
        levels = self.levels.get(factor, (lv,))
        k = levels.index(lv) if lv in levels else 0
        return {"color": "black", "linestyle": DASHES[k % len(DASHES)], "marker": MARKERS[k % len(MARKERS)],
                "gid": gid}

    def facet(self, cell: str | Mapping[str, Any]) -> str:
        """The panel a cell belongs to: ``"factor = level"`` of each facet factor ('' without)."""
        levels = self._levels(cell)
        return " · ".join(f"{self.name(f)} = {levels.get(f, '?')}" for f in self.facet_factors)

    def facets(self, cells: Iterable[str] | None = None) -> list[str]:
        """The panels, in the order of the facet factors' levels (only those ``cells`` fill)."""
        present = {self.facet(c) for c in (self.cells if cells is None else cells)}
        combos = itertools.product(*(self.levels[f] for f in self.facet_factors))
        ordered = [" · ".join(f"{self.name(f)} = {v}" for f, v in zip(self.facet_factors, combo, strict=True))
                   for combo in combos]
        return [f for f in ordered if f in present] or [""]

    def compact(self, cell: str, label: str = "") -> str:
        """A cell as a row of a figure names it when the legend or an axis label says the factors
        (``key``): its levels of every factor (``rotation · xi · 4``); ``label`` when the mapping
        does not know the cell or the study has no factor."""
        levels = self._levels(cell)
        if not self.factors or not all(f in levels for f in self.factors):
            return label or str(cell)
        return " · ".join(levels[f] for f in self.factors)

    @property
    def key(self) -> str:
        """What ``compact`` labels list, in order: the factors' names (``parameterisation · normalisation``)."""
        return " · ".join(self.name(f) for f in self.factors)

    def levels_of(self, cell: str) -> str:
        """The cell's colour and style levels as a compact label (``rotation · xi``), facets apart."""
        levels = self._levels(cell)
        return " · ".join(levels.get(f, "?") for f in self.factors[:2])

    # --- legends

    def handles(self, line: bool = True, marker: bool | None = None) -> list[tuple[str, list[Any]]]:
        """(title, handles) per channel: the colour factor's levels, then the style factor's, drawn
        as the figure draws a cell: ``line`` (its colour and line style) or points (its marker);
        ``marker`` adds the style factor's marker to a line (default: only where there is no line,
        since a figure of lines draws them without markers)."""
        marker = not line if marker is None else marker
        out = []
        if self.color_factor:
            out.append((self.name(self.color_factor), [
                mpl.lines.Line2D([], [], color=c, lw=2 if line else 0, ls="-" if line else "",
                                 marker="o" if marker and not line else "", ms=5, label=wrap(v, 28))
                for v, c in self.color.items()]))
        if self.style_factor:
            out.append((self.name(self.style_factor), [
                mpl.lines.Line2D([], [], color="0.2", lw=1.2 if line else 0, ls=self.dash[v] if line else "",
                                 marker=self.marker[v] if marker else "", ms=4.5, label=wrap(v, 28))
                for v in self.dash]))
        return out

    def legend(self, fig: Figure, *, line: bool = True, marker: bool | None = None, extra: Sequence[Any] = (),
               extra_title: str | None = None) -> None:
        """The figure's legend above its panels: one block per channel, titled by the factor and
        listing its levels (left: colour, right: style), each drawn as ``handles`` draws it, and
        ``extra`` handles (seeds, chance, …) below the panels."""
        blocks = self.handles(line, marker)
        for (title, handles), loc in zip(blocks, ("outside upper left", "outside upper right"), strict=False):
            width = sum(len(h.get_label()) + 4 for h in handles)
            ncols = len(handles) if width <= (80 if len(blocks) == 1 else 40) else max(1, math.ceil(len(handles) / 2))
            fig.legend(handles=handles, title=title, loc=loc if len(blocks) > 1 else "outside upper center",
                       ncols=ncols, frameon=False, alignment="left", fontsize=7, title_fontsize=7.5)
        if extra:
            fig.legend(handles=list(extra), title=extra_title, loc="outside lower center",
                       ncols=legend_columns([h.get_label() for h in extra]), frameon=False, fontsize=7)


def interaction_lines(ax: Any, table: Any, f1: str, f2: str, channels: Channels, label_width: int = 40,
                      transform: Any = None) -> None:
    """``table``'s marginal means (``mean``, ``ci_low``, ``ci_high``) over ``f2``'s levels on ``ax``, a
    line per level of ``f1`` in its channel, dodged so the intervals do not overlap; ``transform``
    maps the three columns first (the norm report's logs: ``np.exp``)."""
    lines, xs = list(dict.fromkeys(table[f1])), list(dict.fromkeys(table[f2]))
    offsets = np.linspace(-0.08, 0.08, len(lines)) if len(lines) > 1 else [0.0]
    pos = {lv: i for i, lv in enumerate(xs)}
    for off, lv in zip(offsets, lines, strict=True):
        look = channels.level_look(f1, lv)
        sub = table[table[f1] == lv]
        x = np.array([pos[v] for v in sub[f2]], dtype=float) + off
        mean, low, high = (sub[c].to_numpy(float) for c in ("mean", "ci_low", "ci_high"))
        if transform is not None:
            mean, low, high = transform(mean), transform(low), transform(high)
        err = [np.nan_to_num(mean - low), np.nan_to_num(high - mean)]
        ax.errorbar(x, mean, yerr=err, fmt=look["marker"], ls=look["linestyle"], ms=4.5, lw=1.3, capsize=3,
                    color=look["color"], mec="black", mew=0.5, label=wrap(lv, 22), gid=look["gid"])
    ax.set_xticks(range(len(xs)), [wrap(lv, max(8, int(label_width / max(1, len(xs))))) for lv in xs])
    ax.set_xlim(-0.5, len(xs) - 0.5)
    ax.grid(axis="x", visible=False)


def legend_columns(labels: Sequence[str], width: int = 110) -> int:
    """Columns for a legend of ``labels`` across the page: all in one row when their text fits
    ``width`` characters, else as many as the longest label allows (never text past the page)."""
    if not labels:
        return 1
    lengths = [max(len(line) for line in str(t).splitlines() or [""]) + 5 for t in labels]
    if sum(lengths) <= width:
        return len(labels)
    return max(1, min(len(labels), width // max(lengths)))


def log_axis_if_wide(axes: Sequence[Any], values: np.ndarray, ratio: float = 5.0) -> bool:
    """Put ``axes`` on a log y axis (with plain tick labels) when the positive ``values`` span more
    than ``ratio``; returns whether it did."""
    v = values[np.isfinite(values) & (values > 0)]
    if v.size and values[np.isfinite(values)].min() > 0 and v.max() / v.min() > ratio:
        log_axis(axes, v)
        return True
    return False


def log_axis(axes: Sequence[Any], values: np.ndarray) -> None:
    """Put ``axes`` on a log y axis whose labelled ticks suit the span of the positive ``values``:
    plain numbers (``0.5``, ``20``) where a span of under 3× gets evenly spaced ones, 1-2-5 up to two
    decades, decades beyond — never matplotlib's crowded minor labels (``3×10⁻¹`` over ``4×10⁻¹``)
    nor none at all (its LogLocator draws no tick when it must skip decades and is given subs)."""
    v = values[np.isfinite(values) & (values > 0)]
    span = float(v.max() / v.min()) if v.size else 10.0
    for ax in axes:  # a locator per axis: one instance serves the axis it was last given to
        if span < 3:
            locator: Any = mpl.ticker.MaxNLocator(nbins=4, steps=[1, 2, 2.5, 5, 10])
        else:
            locator = mpl.ticker.LogLocator(subs=(1.0, 2.0, 5.0) if span <= 100 else (1.0,))
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(locator)
        ax.yaxis.set_major_formatter(mpl.ticker.FuncFormatter(lambda y, _: f"{y:g}"))
        ax.yaxis.set_minor_formatter(mpl.ticker.NullFormatter())


def readable_limits(ax: Any, values: np.ndarray) -> None:
    """No offset notation, and a visible span for (near-)constant data such as ξ's stationary norm."""
    ax.ticklabel_format(axis="y", useOffset=False, style="plain")
    v = values[np.isfinite(values)]
    if v.size:
        lo, hi = float(v.min()), float(v.max())
        mid = 0.5 * (lo + hi)
        if hi - lo < 1e-3 * max(abs(mid), 1e-12):
            pad = 0.05 * abs(mid) if mid else 0.05
            ax.set_ylim(mid - pad, mid + pad)


# --- saving ------------------------------------------------------------------------------------


def png(fig: Figure, dpi: int = DPI) -> bytes:
    """``fig`` as PNG bytes."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, metadata={"Software": None})
    return buf.getvalue()


def svg(fig: Figure) -> bytes:
    """``fig`` as SVG bytes: text as outlines (``STYLE``), no date, stable ids."""
    buf = io.BytesIO()
    with mpl.rc_context({"svg.fonttype": STYLE["svg.fonttype"], "svg.hashsalt": STYLE["svg.hashsalt"]}):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    return buf.getvalue()


def pdf(fig: Figure) -> bytes:
    """``fig`` as a vector PDF with its fonts embedded (selectable text)."""
    buf = io.BytesIO()
    with mpl.rc_context({"pdf.fonttype": STYLE["pdf.fonttype"]}):
        fig.savefig(buf, format="pdf", metadata={"CreationDate": None, "Producer": None})
    return buf.getvalue()


def save_figure(fig: Figure, directory: Path, name: str) -> list[Path]:
    """``fig`` alone as ``name.pdf``, ``name.svg`` and ``name.png`` (``EXPORT_DPI``) in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    out = []
    for ext, data in (("pdf", pdf(fig)), ("svg", svg(fig)), ("png", png(fig, EXPORT_DPI))):
        path = directory / f"{name}.{ext}"
        path.write_bytes(data)
        out.append(path)
    return out


def figure_html(fig: Figure, title: str | None = None, after: str = "") -> str:
    """A figure as an embedded vector image (SVG), with its title and ``after`` (HTML, e.g. a table)
    in one block the print stylesheet does not split across pages; drawn at the figure's size."""
    src = "data:image/svg+xml;base64," + base64.b64encode(svg(fig)).decode()
    head = f"<p><b>{_html.escape(title)}</b></p>" if title else ""
    img = f'<img src="{src}" style="width: {int(fig.get_figwidth() * 96)}px" alt="{_html.escape(title or "")}">'
    return f'<div class="ablate-figure">{head}{img}{after}</div>'
