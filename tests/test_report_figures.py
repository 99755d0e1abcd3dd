"""Every report figure at study scale (``ablate.report.accuracy.figures``, ``ablate.report.norm_figures``,
``ablate.report.plotting``): synthetic studies of 4, 12, 18, 32 and 48 cells over two or three
factors, each figure drawn once with every cell, then checked as a reader would look at it — no
empty panel, no tick label or legend entry drawn over another, a height that fits a page, accuracy
axes on the data rather than on chance."""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Callable

import numpy as np
import pandas as pd
import pytest
from frames import METRIC, make_trials
from matplotlib.collections import Collection, PathCollection
from matplotlib.figure import Figure
from matplotlib.image import AxesImage
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from ablate import stats
from ablate.report import accuracy as acc
from ablate.report import norm_figures as nf
from ablate.report import norm_tables as ns
from ablate.report import plotting
from ablate.report.plotting import Channels
from ablate.stats import norms as sn

P, N, L = "model.parameterisation", "model.normalisation", "model.layers"
#: Cells → the levels of each factor (2 or 3 factors); the layers factor sets the layers of a run.
SIZES = {
    4: {P: ["rotation", "complex_diagonal"], N: ["xi", "gamma"]},
    12: {P: ["rotation", "complex_diagonal"], N: ["xi", "gamma"], L: ["1", "2", "4"]},
    18: {P: ["rotation", "complex_diagonal", "real_diagonal"], N: ["xi", "gamma"], L: ["1", "2", "4"]},
    32: {P: ["rotation", "complex_diagonal", "real_diagonal", "dense"], N: ["xi", "gamma"], L: ["1", "2", "3", "4"]},
    48: {P: ["rotation", "complex_diagonal", "real_diagonal", "dense"], N: ["xi", "gamma", "none"],
         L: ["1", "2", "3", "4"]},
}
#: A page's figure: an A4 page's text height less a title and a caption.
MAX_HEIGHT = 9.6
CHANCE = 0.12
SEEDS = 3
STEPS = (0, 100, 200, 300, 400, 500)
#: The run each study flags as diverged (non-finite norms).
FLAGGED = ("c1", 2)


class Study:
    """A constructed study of ``SIZES[n]``: its trials, curves and the notebooks' frames."""

    def __init__(self, n: int, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.factors = SIZES[n]
        names = list(self.factors)
        combos = list(itertools.product(*self.factors.values()))
        assert len(combos) == n
        levels = {f"c{i}": dict(zip(names, combo, strict=True)) for i, combo in enumerate(combos)}
        # Accuracies as the issue's 12-cell study had them: every cell in 0.35-0.40, chance 0.12.
        means = {cid: 0.35 + 0.05 * rng.random() for cid in levels}
        self.trials = make_trials(means, SEEDS, sd=0.01, rng=rng, factors=levels)
        self.channels = Channels.from_trials(self.trials, names)
        self.order = list(self.trials.drop_duplicates("cell_id")[["cell_id", "cell_label"]]
                          .itertuples(index=False, name=None))
        self.fig_order, self.key = ns.short_order(self.order)
        self.curves = self._accuracy_curves(rng)
        self.norms = self._norm_curves(levels, rng)

    def _accuracy_curves(self, rng: np.random.Generator) -> pd.DataFrame:
        rows = [{"cell_id": r.cell_id, "cell_label": r.cell_label, "seed": r.seed, "step": s, "name": "val/accuracy",
                 "value": CHANCE + (getattr(r, METRIC) - CHANCE) * (1 - np.exp(-s / 150)) + 0.005 * rng.standard_normal()}
                for r in self.trials.itertuples() for s in STEPS]
        return pd.DataFrame(rows)

    def _norm_curves(self, levels: dict[str, dict[str, str]], rng: np.random.Generator) -> pd.DataFrame:
        rows: list[dict] = []
        labels = dict(self.order)
        for cid, lv in levels.items():
            layers = int(lv.get(L, "2"))
            scale = {"xi": 1.0, "gamma": 8.0, "none": 3000.0}[lv[N]]  # four decades: a log axis must still tick
            for seed, layer, head in itertools.product(range(SEEDS), range(layers), range(2)):
                base = dict(cell_id=cid, cell_label=labels[cid], seed=seed, layer=layer, head=head)
                for k, step in enumerate(STEPS):
                    v = scale * (1 + 0.1 * k) * np.exp(0.2 * rng.standard_normal())
                    if (cid, seed) == FLAGGED and k >= len(STEPS) - 2:
                        v = np.inf  # a run that blew up: its last probes are not finite
                    rows.append({**base, "step": step, "t": -1, "kind": "probe", "quantity": "norm_sq_mean", "value": v})
                    rows.append({**base, "step": step, "t": -1, "kind": "train", "quantity": "norm_sq_mean",
                                 "value": v * 1.1})
                    rows.append({**base, "step": step, "t": -1, "kind": "spectrum", "quantity": "abs",
                                 "value": 0.9 + 0.01 * k + 0.01 * rng.standard_normal()})
                    rows.append({**base, "step": step, "t": -1, "kind": "spectrum", "quantity": "phase",
                                 "value": 0.3 + 0.05 * rng.standard_normal()})
                    rows.append({**base, "step": step, "t": -1, "kind": "theory", "quantity": "norm_sq_stationary",
                                 "value": scale})
                for step in (STEPS[0], STEPS[-1]):
                    for t in range(16):
                        grow = 1 - 0.8 ** (2 * (t + 1))
                        for kind, v in (("probe", scale * grow * 1.2), ("white_noise", scale * grow * 1.02),
                                        ("theory", scale * grow)):
                            rows.append({**base, "step": step, "t": t, "kind": kind, "quantity": "norm_sq", "value": v})
            for seed, step in itertools.product(range(SEEDS), STEPS):
                for group in ("recurrent", "decayed", "rest", "total"):
                    rows.append(dict(cell_id=cid, cell_label=labels[cid], seed=seed, layer=np.nan, head=0, step=step,
                                     t=-1, kind="grad", quantity=group, value=np.exp(rng.standard_normal())))
        return sn.prepare(pd.DataFrame(rows), self.trials)


@pytest.fixture(scope="module", params=sorted(SIZES))
def study(request) -> Study:
    return Study(request.param)


def _figures(s: Study) -> dict[str, Callable[[], Figure]]:
    """Every figure of both reports, each drawn once with all the study's cells, as the notebooks call them."""
    t, ch, names = s.trials, s.channels, list(s.factors)
    comparisons = stats.compare_to_reference(t, METRIC, "c0")
    profile = stats.performance_profile(t, METRIC)
    per_layer = sn.layer_norms(s.norms)
    seeds = sn.per_seed(per_layer, t, names)
    seeds = seeds.assign(nonfinite=[(c, s_) == FLAGGED for c, s_ in zip(seeds["cell_id"], seeds["seed"], strict=True)])
    out = {
        "accuracy_by_cell": lambda: acc.accuracy_by_cell(t, METRIC, CHANCE, channels=ch, label_width=46, n_test=2000),
        "comparison_plot": lambda: acc.comparison_plot(comparisons, metric=METRIC, label_width=46, channels=ch),
        "main_effects_plot": lambda: acc.main_effects_plot(t, METRIC, names, CHANCE, channels=ch),
        "learning_curves": lambda: acc.learning_curves(s.curves, "val/accuracy", cells=t, chance=CHANCE, channels=ch),
        "performance_profile_plot": lambda: acc.performance_profile_plot(profile, METRIC, chance=CHANCE, channels=ch),
        "norm_vs_step": lambda: nf.norm_vs_step(per_layer, s.fig_order, key=s.key, channels=ch, flags=seeds),
        "norm_vs_step_train": lambda: nf.norm_vs_step(sn.layer_norms(s.norms, "train"), s.fig_order, channels=ch),
        "norm_vs_time": lambda: nf.norm_vs_time(s.norms, s.fig_order, channels=ch),
        "theory_ratio": lambda: nf.theory_ratio(s.norms, s.fig_order, channels=ch),
        "spectrum_figure": lambda: nf.spectrum_figure(s.norms, s.fig_order, channels=ch),
        "grad_figure": lambda: nf.grad_figure(s.norms, s.fig_order, channels=ch),
        "no factors": lambda: nf.norm_vs_step(per_layer[per_layer["cell_id"].isin(["c0", "c1", "c2"])], s.order[:3]),
    }
    for f1, f2 in itertools.combinations(names, 2):
        out[f"interaction_plot {f1} × {f2}"] = lambda f1=f1, f2=f2: acc.interaction_plot(t, METRIC, f1, f2, CHANCE,
                                                                                       channels=ch)
        out[f"interaction_figure {f1} × {f2}"] = lambda f1=f1, f2=f2: nf.interaction_figure(seeds, f1, f2, ch)
    return out


# --- what a reader checks ------------------------------------------------------------------------


def _has_data(ax) -> bool:
    for a in ax.get_children():
        if not a.get_visible():
            continue
        if isinstance(a, Line2D) and len(np.atleast_1d(a.get_xdata())) and a not in (ax.xaxis, ax.yaxis):
            return True
        if isinstance(a, Collection) and (len(a.get_offsets()) or len(a.get_paths())):
            return True
        if isinstance(a, Patch) and a is not ax.patch and a not in ax.spines.values():
            return True
        if isinstance(a, AxesImage):
            return True
    return False


def empty_axes(fig: Figure) -> list[str]:
    """Axes with nothing drawn in them; a twin (the right-hand counts) shares its twin's place."""
    full = [ax for ax in fig.axes if _has_data(ax)]
    places = {tuple(np.round(ax.get_position().bounds, 6)) for ax in full}
    return [ax.get_title() or f"axes {i}" for i, ax in enumerate(fig.axes)
            if ax not in full and tuple(np.round(ax.get_position().bounds, 6)) not in places]


def _tick_labels(ax) -> list:
    out = []
    for axis, (lo, hi) in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
        lo, hi = min(lo, hi), max(lo, hi)
        for tick in [*axis.get_major_ticks(), *axis.get_minor_ticks()]:  # a log axis inside a decade labels minors
            if not tick.get_visible() or not lo - 1e-9 * abs(hi - lo) <= tick.get_loc() <= hi + 1e-9 * abs(hi - lo):
                continue
            out += [lbl for lbl in (tick.label1, tick.label2) if lbl.get_visible() and lbl.get_text().strip()]
    return out


def texts(fig: Figure) -> list:
    """Every drawn piece of text a reader reads: tick labels, titles, axis labels, legends."""
    out = []
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        out += _tick_labels(ax)
        out += [t for t in (ax.title, ax._left_title, ax._right_title, ax.xaxis.label, ax.yaxis.label)
                if t.get_visible() and t.get_text().strip()]
        legend = ax.get_legend()
        if legend is not None:
            out += [t for t in [*legend.get_texts(), legend.get_title()] if t.get_text().strip()]
    for legend in fig.legends:
        out += [t for t in [*legend.get_texts(), legend.get_title()] if t.get_text().strip()]
    out += [t for t in (fig._suptitle, fig._supxlabel, fig._supylabel) if t is not None and t.get_text().strip()]
    return out


_DRAWN: weakref.WeakKeyDictionary[Figure, tuple[list, np.ndarray]] = weakref.WeakKeyDictionary()


def drawn(fig: Figure) -> tuple[list, np.ndarray]:
    """The figure drawn, and its texts with their boxes in pixels: once per figure, as every check
    reads the same drawing (drawing a 48-cell figure again for each check doubled this file's time).
    A figure changed after its first check would be read as first drawn: the tests do not change one."""
    if fig not in _DRAWN:
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        items = texts(fig)
        _DRAWN[fig] = items, np.array([t.get_window_extent(renderer).extents for t in items]).reshape(-1, 4)
    return _DRAWN[fig]


def overlaps(fig: Figure) -> list[str]:
    """Pairs of texts whose drawn boxes overlap (a pixel of slack)."""
    items, boxes = drawn(fig)
    found = []
    for i, j in itertools.combinations(range(len(items)), 2):
        a, b = boxes[i], boxes[j]
        if min(a[2], b[2]) - max(a[0], b[0]) > 1 and min(a[3], b[3]) - max(a[1], b[1]) > 1:
            found.append(f"{items[i].get_text()!r} over {items[j].get_text()!r}")
    return found


def unlabelled_axes(fig: Figure) -> list[str]:
    """Panels with data whose y axis reads nowhere: fewer than two y tick labels on it and on every
    panel with the same y limits and scale (a shared axis labelled on its row's first panel)."""
    drawn(fig)
    def labelled(ax) -> bool:
        mine = {id(lbl) for tk in [*ax.yaxis.get_major_ticks(), *ax.yaxis.get_minor_ticks()]
                for lbl in (tk.label1, tk.label2)}
        return sum(id(t) in mine for t in _tick_labels(ax)) >= 2
    shown = [(ax.get_ylim(), ax.get_yscale()) for ax in fig.axes if labelled(ax)]
    return [ax.get_title() or "axes" for ax in fig.axes if _has_data(ax) and not labelled(ax)
            and (ax.get_ylim(), ax.get_yscale()) not in shown]


def off_page(fig: Figure) -> list[str]:
    """Texts that run past the figure's edges (a pixel of slack)."""
    items, boxes = drawn(fig)
    w, h = fig.bbox.width, fig.bbox.height
    return [t.get_text() for t, e in zip(items, boxes, strict=True)
            if e[0] < -1 or e[1] < -1 or e[2] > w + 1 or e[3] > h + 1]


# --- the tests ---------------------------------------------------------------------------------------


def test_every_figure_reads_at_every_size(study: Study) -> None:
    problems = []
    for name, draw in _figures(study).items():
        fig = draw()
        problems += [f"{name}: empty axes {e!r}" for e in empty_axes(fig)]
        problems += [f"{name}: {o}" for o in overlaps(fig)[:3]]
        problems += [f"{name}: off the page {o!r}" for o in off_page(fig)[:3]]
        problems += [f"{name}: no y tick labels on {u!r}" for u in unlabelled_axes(fig)[:3]]
        if fig.get_figheight() > MAX_HEIGHT:
            problems.append(f"{name}: {fig.get_figheight():.1f} in tall")
        if fig.get_figwidth() > plotting.WIDTH:
            problems.append(f"{name}: {fig.get_figwidth():.1f} in wide")
    assert not problems, f"{len(study.order)} cells:\n" + "\n".join(problems)


def test_the_checks_see_what_a_reader_would() -> None:
    """The checks above catch an empty panel and labels drawn over each other (else they prove nothing)."""
    with plotting.style():
        fig = plotting.figure(2.0)
        full, blank = fig.subplots(1, 2)
        full.plot([0, 1], [0, 1])
        full.set_xticks([0, 0.01], ["a long tick label", "another long one"])
    assert empty_axes(fig) == ["axes 1"]
    assert overlaps(fig) == ["'a long tick label' over 'another long one'"]


def test_the_issues_layers_grid_draws_a_panel_per_layer_a_facet_has() -> None:
    """Layers 1/2/4 as the facet: rows of 1, 2 and 4 panels (7), where a full grid drew 12, 5 of them empty."""
    s = Study(12)
    fig = nf.norm_vs_step(sn.layer_norms(s.norms), s.fig_order, channels=s.channels)
    rows = {}
    for ax in fig.axes:
        facet, layer = ax.get_title().rsplit(" · ", 1)
        rows.setdefault(facet, []).append(layer)
    assert rows == {"layers = 1": ["layer 0"], "layers = 2": ["layer 0", "layer 1"],
                    "layers = 4": ["layer 0", "layer 1", "layer 2", "layer 3"]}


def test_accuracy_axes_sit_on_the_data_and_chance_is_drawn_only_inside() -> None:
    s = Study(12)
    fig = acc.accuracy_by_cell(s.trials, METRIC, CHANCE, channels=s.channels)
    ax = fig.axes[0]
    lo, hi = ax.get_xlim()
    summary = stats.cell_summary(s.trials, METRIC, CHANCE)
    low, high = min(s.trials[METRIC].min(), summary["ci_low"].min()), max(s.trials[METRIC].max(), summary["ci_high"].max())
    assert low - 0.1 * (high - low) <= lo <= low and high <= hi <= high + 0.1 * (high - low)  # the data's, not chance's
    assert lo > CHANCE
    assert not [ln for ln in ax.get_lines() if ln.get_label() == "chance"]
    assert "chance (0.12) is off the axis" in [t.get_text() for leg in fig.legends for t in leg.get_texts()]
    effects = acc.main_effects_plot(s.trials, METRIC, list(s.factors), CHANCE, channels=s.channels)
    assert all(ax.get_ylim()[0] > CHANCE for ax in effects.axes)
    # Chance inside the data's range: drawn, and the axis is still the data's.
    near = s.trials.assign(**{METRIC: s.trials[METRIC] - 0.25})
    fig = acc.accuracy_by_cell(near, METRIC, CHANCE, channels=s.channels)
    ax = fig.axes[0]
    assert [ln.get_xdata()[0] for ln in ax.get_lines() if ln.get_label() == "chance"] == [CHANCE]
    assert 0 < ax.get_xlim()[0] < CHANCE < ax.get_xlim()[1] < near[METRIC].max() + 0.1


def test_a_forest_of_seventeen_rows_is_one_figure_on_one_axis() -> None:
    s = Study(18)
    comparisons = stats.compare_to_reference(s.trials, METRIC, "c0")
    fig = acc.comparison_plot(comparisons, metric=METRIC, channels=s.channels)
    ax = fig.axes[0]
    assert len(comparisons) == 17 and len(ax.get_yticks()) == 17
    assert [t.get_text() for t in ax.get_yticklabels()][0] == "rotation · xi · 2"  # levels, the key above
    assert ax.get_title(loc="left") == "rows: parameterisation · normalisation · layers"
    assert fig.get_figheight() <= plotting.MAX_HEIGHT


def test_runs_flagged_nonfinite_are_marked() -> None:
    s = Study(4)
    per_layer = sn.layer_norms(s.norms)
    finite = per_layer[np.isfinite(per_layer["value"])]
    calm = nf.norm_vs_step(finite, s.fig_order, channels=s.channels)
    assert not [c for ax in calm.axes for c in ax.collections if isinstance(c, PathCollection)]
    flags = pd.DataFrame({"cell_id": ["c2"], "seed": [0], "nonfinite": [True]})
    for fig, cells in ((nf.norm_vs_step(finite, s.fig_order, channels=s.channels, flags=flags), {"cell:c2"}),
                       (nf.norm_vs_step(per_layer, s.fig_order, channels=s.channels), {"cell:c1"})):  # inf values
        marked = {c.get_gid() for ax in fig.axes for c in ax.collections if isinstance(c, PathCollection)}
        assert marked == cells
        assert "run flagged diverged / non-finite (its last finite value)" in [
            t.get_text() for leg in fig.legends for t in leg.get_texts()]
    assert nf.flagged_runs(flags, per_layer) == {("c2", 0), FLAGGED}


def test_rows_keep_their_labels_where_the_levels_do_not_tell_the_cells_apart() -> None:
    """A comparison over studies: "minGRU" and "RotRNN" would read "8" and "16" by their heads alone."""
    trials = make_trials({"a": 0.4, "b": 0.5}, 3, factors={"a": {"model.heads": "8"}, "b": {"model.heads": "16"}})
    channels = Channels.from_trials(trials, ["model.heads"])
    fig = acc.accuracy_by_cell(trials, METRIC, CHANCE, channels=channels)
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["8", "16"]  # labels "heads=8": levels
    trials["cell_label"] = trials["cell_id"].map({"a": "minGRU", "b": "RotRNN"})
    fig = acc.accuracy_by_cell(trials, METRIC, CHANCE, channels=channels)
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["minGRU", "RotRNN"]


def test_the_mean_over_seeds_is_drawn_only_where_every_seed_reached():
    """One seed stopped early at step 100 and another probed once more off the grid (step 150): a
    mean of whichever seeds were left dropped and spiked there; it now ends at step 100."""
    rows = [{"cell_id": "c0", "layer": 0, "step": step, "seed": seed, "value": 1.0 + seed}
            for seed, steps in ((0, [0, 50, 100]), (1, [0, 50, 100, 150, 200])) for step in steps]
    fig = nf.norm_vs_step(pd.DataFrame(rows), [("c0", "c0")])
    thick = [line for line in fig.axes[0].get_lines() if line.get_linewidth() == 1.7]
    assert len(thick) == 1 and list(thick[0].get_xdata()) == [0, 50, 100]
    assert list(thick[0].get_ydata()) == [1.5, 1.5, 1.5]


def test_reference_lines_are_never_drawn_in_a_dash_pattern_a_variant_may_have():
    """Chance, theory, a ratio of 1 and the white-noise curves were dashed or dotted, patterns the
    line-style channel gives variants (gamma dashed, heads=16 dotted): now broad and pale, or thin
    with open circles."""
    s = Study(min(SIZES))
    ch = s.channels
    figs = [nf.norm_vs_time(s.norms, s.fig_order, channels=ch), nf.theory_ratio(s.norms, s.fig_order, channels=ch),
            acc.learning_curves(s.curves, "val/accuracy", cells=s.trials, chance=CHANCE, channels=ch)]
    checked = 0
    for fig in figs:
        lines = [line for ax in fig.axes for line in ax.get_lines()]
        lines += [h for leg in fig.legends for h in leg.legend_handles if isinstance(h, Line2D)]
        for line in lines:
            if line.get_label() in ("chance", "white-noise input") or line.get_label().startswith(("theory",)) or \
                    line.get_linewidth() == plotting.REFERENCE["lw"]:
                checked += 1
                assert line.get_linestyle() in ("-", "None"), (line.get_label(), line.get_linestyle())
    assert checked >= 4
