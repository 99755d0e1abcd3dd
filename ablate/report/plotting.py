"""What every report figure shares: page size, style, palettes, wrapped labels, empty panels, saving.

Figures are built on ``matplotlib.figure.Figure`` with an Agg canvas (never pyplot), so they
render headless, touch no global backend state, and display inline in Jupyter. They are sized for
an A4 page (``WIDTH`` inches wide, height growing with content), drawn under ``STYLE`` (print-
legible font sizes, embedded fonts), and wrap long labels instead of letting them run off the
page. A report's own figures live in its presentation module (``ablate.report.accuracy``,
``ablate.report.norm_stability``) and are built from these helpers; ``figure_html`` is how a
notebook puts one on the page.
"""

from __future__ import annotations

import base64
import html as _html
import io
import textwrap
from collections.abc import Hashable, Sequence
from contextlib import AbstractContextManager
from typing import Any

import matplotlib as mpl
import numpy as np
import seaborn as sns
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

__all__ = [
    "DPI",
    "STYLE",
    "WIDTH",
    "empty",
    "figure",
    "figure_html",
    "log_axis_if_wide",
    "no_data",
    "palette",
    "png",
    "readable_limits",
    "style",
    "wrap",
]

#: Figure width in inches: fits an A4 page (8.27 in) with margins.
WIDTH = 6.8
#: Resolution of the figures as the reports embed them.
DPI = 150
STYLE = {
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
    "pdf.fonttype": 42,
    "svg.fonttype": "none",
}


def style() -> AbstractContextManager:
    """The report style for the figures built inside the ``with`` block."""
    return mpl.rc_context(STYLE)


def wrap(label: Any, width: int = 30) -> str:
    """Wrap ``label`` onto lines of at most ``width`` characters (breaking long words if needed)."""
    text = str(label)
    return "\n".join(textwrap.wrap(text, width=width, break_on_hyphens=False)) or text


def figure(height: float, width: float = WIDTH) -> Figure:
    """An empty figure ``height`` inches tall, at most the page's ``WIDTH`` wide, laid out by
    matplotlib's constrained layout."""
    fig = Figure(figsize=(min(width, WIDTH), height), layout="constrained", dpi=DPI)
    FigureCanvasAgg(fig)
    return fig


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


def palette(keys: Sequence[Hashable], colors: str = "colorblind") -> dict[Hashable, Any]:
    """A colour per key, in order: seaborn's ``colors`` palette for up to ten keys, ``husl`` beyond
    (a ten-colour palette would repeat)."""
    n = max(1, len(keys))
    values = sns.color_palette(colors, n) if n <= 10 else sns.color_palette("husl", n)
    return dict(zip(keys, values, strict=False))


def log_axis_if_wide(axes: Sequence[Any], values: np.ndarray, ratio: float = 30.0) -> bool:
    """Put ``axes`` on a log y axis (with plain tick labels) when the positive ``values`` span more
    than ``ratio``; returns whether it did."""
    v = values[np.isfinite(values) & (values > 0)]
    if v.size and values[np.isfinite(values)].min() > 0 and v.max() / v.min() > ratio:
        for ax in axes:
            ax.set_yscale("log")
            ax.yaxis.set_major_locator(mpl.ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
            ax.yaxis.set_major_formatter(mpl.ticker.FuncFormatter(lambda y, _: f"{y:g}"))
            ax.yaxis.set_minor_formatter(mpl.ticker.NullFormatter())
        return True
    return False


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
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


def figure_html(fig: Figure, title: str | None = None, after: str = "") -> str:
    """A figure as an embedded image, with its title and ``after`` (HTML, e.g. a table) in one block
    the print stylesheet does not split across pages; drawn at the figure's size in inches."""
    src = "data:image/png;base64," + base64.b64encode(png(fig)).decode()
    head = f"<p><b>{_html.escape(title)}</b></p>" if title else ""
    img = f'<img src="{src}" style="width: {int(fig.get_figwidth() * 96)}px" alt="{_html.escape(title or "")}">'
    return f'<div class="ablate-figure">{head}{img}{after}</div>'
