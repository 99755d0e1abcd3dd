"""What every report figure shares (``ablate.report.plotting``): labels that wrap at an identifier's
separators, and legend glyphs drawn as the figure draws its cells."""

from __future__ import annotations

from ablate.report.plotting import Channels, wrap


def test_labels_wrap_after_the_separators_never_inside_a_level() -> None:
    label = "parameterisation=complex_diagonal, normalisation=xi, layers=1"
    assert wrap(label, 22) == "parameterisation=\ncomplex_diagonal,\nnormalisation=xi,\nlayers=1"
    assert wrap(label, 80) == label
    assert wrap("complex_diagonal", 8) == "complex_diagonal"  # a level overflows a short line rather than split
    assert wrap("a = b and some words here", 10) == "a = b and\nsome words\nhere"  # prose as textwrap has it
    assert all(len(line) <= 24 for line in wrap("x" * 50, 20).splitlines())


def test_legend_glyphs_draw_what_the_figure_draws() -> None:
    channels = Channels.from_factors(["model.parameterisation", "model.normalisation"],
                                     {"model.parameterisation": ["rotation", "complex_diagonal"],
                                      "model.normalisation": ["xi", "gamma"]})
    (_, colours), (_, styles) = channels.handles(line=True)  # lines without markers: glyphs without markers
    assert all(h.get_marker() in ("", "None", None) for h in colours + styles)
    assert [h.get_linestyle() for h in styles] == ["-", "--"]
    (_, colours), (_, styles) = channels.handles(line=False)  # points: the style level's marker, no line
    assert [h.get_marker() for h in styles] == ["o", "s"] and all(h.get_linestyle() == "None" for h in styles)
    (_, styles) = channels.handles(line=True, marker=True)[1]  # a figure whose lines carry markers says so
    assert [h.get_marker() for h in styles] == ["o", "s"]


def test_mathtext_is_never_broken() -> None:
    label = r"layers = 1 · stationary theory $\mathrm{E}\,\Vert x_\infty^h\Vert^2$"
    assert wrap(label, 20) == "layers = 1 ·\nstationary theory\n" + r"$\mathrm{E}\,\Vert x_\infty^h\Vert^2$"
    assert wrap(r"$\Vert x\Vert^2$ (mean over t, heads)", 12) == "$\\Vert x\\Vert^2$\n(mean over\nt, heads)"


def _labels_in_view(ax) -> list[str]:
    ax.figure.canvas.draw()
    lo, hi = ax.get_ylim()
    return [t.get_text() for t in ax.get_yticklabels() if t.get_text() and lo <= t.get_position()[1] <= hi]


def test_a_log_axis_labels_its_ticks_at_any_span_on_a_short_panel() -> None:
    """matplotlib's LogLocator given 1-2-5 subs drew no tick at all on a short panel spanning four
    decades (the 18-cell norm report's panels had no y labels), and crowded minor labels inside one."""
    import numpy as np

    from ablate.report import plotting

    for low, high in ((0.49, 19005.0), (0.5, 40.0), (0.31, 0.48), (0.62, 0.7)):
        with plotting.style():
            fig = plotting.figure(1.3)
            ax = fig.add_subplot()
            ax.plot([0, 1], [low, high])
            plotting.log_axis([ax], np.array([low, high]))
            labels = _labels_in_view(ax)
        assert len(labels) >= 2, (low, high, labels)
        assert all("times" not in t for t in labels)  # plain numbers, no 3×10⁻¹
