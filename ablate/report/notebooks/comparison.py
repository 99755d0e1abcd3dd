# %% [markdown]
# # Comparison across studies

# %% tags=["parameters"]
studies = ["quickstart"]
cells = {}  # selectors: a list (every study) or study → list; none: every cell
storage = None
tracking_uri = None
title = ""
reference = None  # a variant label, cell label or cell id; default: the first study's baseline
metric = "test_accuracy"
alpha = 0.05
confidence = 0.95
margin = 0.02  # a run with metric ≤ chance + margin never learned
min_effect = -1.0  # the smallest difference that matters; < 0: the first study's stats.min_effect
export_dir = None  # set by `ablate report --export`
results_file = None  # a file of ablate.results.save (the renderer's one read of the stores), read instead

# %%
import warnings

from ablate import results, stats
from ablate.report import accuracy as acc
from ablate.report import comparison_tables as cmp
from ablate.report import format as fmt
from ablate.report import norm_figures as nf
from ablate.report import norm_tables as ns
from ablate.report.display import export_to, say, show, show_figure
from ablate.report.plotting import Channels
from ablate.stats import norms as sn

warnings.filterwarnings("ignore")
export_to(export_dir, "comparison")

both = (results.read(results_file) if results_file else
        results.load(list(studies), storage=storage, tracking_uri=tracking_uri, curves=True, metrics=True))
if cells:
    both = both.select(cells)
variants = both.variants().to_pandas()
trials_pl, metrics_pl, curves_pl = both.frames()
trials = trials_pl.to_pandas()
ref_id, ref_why = cmp.reference_variant(variants, reference, {r.study: r.baseline_cell for r in both.results})
ref_label = variants.loc[variants.cell_id == ref_id, "label"].iloc[0]
comp = stats.comparability(variants, ref_id)
comparable = set(comp.loc[comp.comparable, "cell_id"])
same = trials[trials.cell_id.isin(comparable)]
known = same["chance"].dropna() if "chance" in same.columns else []
chance = float(known.iloc[0]) if len(known) else None  # one task, one chance level
# Factors every variant has a level of (not another study's named factor): the channels' factors.
factors = [f for f in both.factors if f in trials.columns and trials[f].notna().all()]
channels = Channels.from_trials(trials, factors)  # one factor → colour / line style / facet mapping for every figure
first = both.results[0].spec
effect = min_effect if min_effect >= 0 else first.stats.min_effect
say(*cmp.header_lines(title or " vs ".join(studies), both.names, variants, trials, ref_label, ref_why))

# %% [markdown]
# ## Studies and variants

# %%
summaries = both.summaries()
for s in summaries:
    s["selection"] = cmp.selection_text(s["selectors"])
show(cmp.studies_table(summaries), intro=(
    "**Table 1. The studies.** *reused*: completed runs a study linked from another study (the same cell and "
    "seed, trained once) instead of training them again."))
show(cmp.variants_table(variants, comp, ref_id), intro=(
    "**Table 2. The variants** in the order of the figures: each cell once, with the studies that hold it."))
say(*cmp.comparability_lines(variants, comp, ref_id))

# %% [markdown]
# ## Accuracy

# %%
summary = stats.cell_summary(trials, metric, chance, margin, confidence)
show(acc.cell_table(summary, ref_id, confidence, chance is not None), intro=(
    f"**Table 3. {fmt.metric_name(metric).capitalize()} per variant.** Mean with its t-based confidence interval over completed replicate "
    "runs (*n*); diverged runs are counted apart. Variants not on the reference's data are listed but not "
    "compared."))
show_figure(acc.accuracy_by_cell(trials, metric, chance, margin=margin, confidence=confidence, label_width=46,
                                 channels=channels))

# %% [markdown]
# ## Comparisons with the reference
# Each variant on the reference's data against the reference, by the accuracy report's tests (exact
# permutation tests, never on fewer than three seeds, Holm-corrected across the comparisons).

# %%
comparisons = (stats.compare_to_reference(same, metric, ref_id, alpha, confidence=confidence, min_effect=effect,
                                          power=first.stats.power) if len(comparable) > 1 else None)
if comparisons is None or comparisons.empty:
    say("No other variant is on the reference's data: there is nothing to compare.")
else:
    show(acc.comparison_table(comparisons, confidence), name="comparisons", data=comparisons,
         intro=[*acc.comparison_intro(comparisons, alpha), f"Reference: **{ref_label}**. α = {alpha:g}."])
    say(*[f"- {s}" for s in acc.comparison_sentences(comparisons, metric, alpha, confidence, True,
                                                      power=first.stats.power)])
    show_figure(acc.comparison_plot(comparisons, metric=metric, label_width=46, channels=channels),
                name="comparisons")

# %% [markdown]
# ## Hidden-state norms in shared axes
# **Figure.** Probe-batch ‖x‖² (batch mean, averaged over time steps and heads) against the training step,
# one panel per recurrent layer, every variant on the same axes: thin lines are seeds, the thick line
# their mean, the band their min–max.

# %%
df = sn.prepare(curves_pl, trials_pl)
order = sn.variants(df, trials_pl) if len(df) else []
fig_order, key = ns.short_order(order)
if len(df):
    per_layer = sn.layer_norms(df, "probe")
    show_figure(nf.norm_vs_step(per_layer, fig_order, key=key, channels=channels), name="norm-vs-step")
    seeds = sn.per_seed(per_layer, trials_pl, factors)  # one row per run: the unit of every test
    stab = sn.stability(seeds, per_layer, fig_order, confidence)
    show(ns.stability_table(stab, confidence), intro=(
        "**Table 4. Stability of the state norm per variant** (as in the norm-stability report): per run its CV "
        "over training steps, over layers and its final ‖x‖², geometric means over the seeds with t intervals on "
        "the logs, except over layers: (mean √CV over the seeds)², with the t interval on √CV, squared; over seeds "
        "the spread of log ‖x‖² across seeds (each run's deviation from the median of the others, scaled to the sd "
        "for normal log norms), which does not depend on how many seeds a variant has; flagged runs are left out."))
    near = per_layer[per_layer.cell_id.isin(comparable)]
    if near.cell_id.nunique() > 1 and ref_id in set(near.cell_id):
        comp_norms = sn.compare(seeds[seeds.cell_id.isin(comparable)], near, ref_id,
                                [(c, lbl) for c, lbl in fig_order if c in comparable], alpha, confidence,
                                first.stats.min_ratio, first.stats.power)
        if len(comp_norms):
            show(ns.ratio_table(comp_norms, confidence, first.stats.min_ratio), intro=(
                "**Table 5. Each variant on the reference's data against the reference** (the same probe batch), "
                "on one value per seed: the ratio is exp(mean log difference) with the t interval of that "
                "difference, tested by exact permutation tests of the per-seed log values (sign-flip on shared "
                "seeds, relabelling otherwise), Holm within each measure, nothing tested below three seeds; over "
                "seeds both sides use the same number of seeds (the shared ones, else the first of each), so a "
                "spread over more seeds is never set against one over fewer. The last column: the seeds a ratio "
                f"of {first.stats.min_ratio:g}× would need (power {first.stats.power:g}, t-test at Holm's first "
                "threshold)." + cmp.omitted_measures_note(comp_norms)))
            say(*[f"- {s}" for s in cmp.norm_sentences(comp_norms, dict(fig_order).get(ref_id, ref_label), alpha,
                                                        confidence)])
else:
    say("No completed run of the chosen variants has probe data.")

# %% [markdown]
# ## Provenance

# %%
provenances = [r.provenance() for r in both.results]
show(cmp.studies_provenance_table(provenances), intro="**Table 6. Provenance per study** (as recorded by each run).")
say(*cmp.stores_lines(provenances))
