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

import numpy as np

from ablate import results, stats
from ablate.report import accuracy as acc
from ablate.report import comparison_tables as cmp
from ablate.report import format as fmt
from ablate.report import norm_figures as nf
from ablate.report import norm_tables as ns
from ablate.report import verdicts
from ablate.report.display import export_to, say, show, show_figure
from ablate.report.plotting import Channels
from ablate.stats import family as fam
from ablate.stats import norms as sn

warnings.filterwarnings("ignore")
export_to(export_dir, "comparison")

both = (results.read(results_file) if results_file else
        results.load(list(studies), storage=storage, tracking_uri=tracking_uri, curves=True, metrics=True))
if cells:
    both = both.select(cells)
variants = both.variants().to_pandas()
trials_pl, metrics_pl, curves_pl = both.frames()
ref_id, ref_why = cmp.reference_variant(variants, reference, {r.study: r.baseline_cell for r in both.results})
ref_label = variants.loc[variants.cell_id == ref_id, "label"].iloc[0]
comp = stats.comparability(variants, ref_id)
comparable = set(comp.loc[comp.comparable, "cell_id"])
# Seed s pairs with the reference's seed s only where it draws the same batches; the others' seeds are
# moved apart, so every test (accuracy and norms) takes them unpaired.
pairing = cmp.seed_pairing(variants, ref_id)
apart = set(pairing.loc[~pairing.same_order, "cell_id"]) & comparable
trials_pl, metrics_pl, curves_pl = (cmp.apart_seeds(f, apart) for f in (trials_pl, metrics_pl, curves_pl))
trials = trials_pl.to_pandas()
same = trials[trials.cell_id.isin(comparable)]
known = same["chance"].dropna() if "chance" in same.columns else []
chance = float(known.iloc[0]) if len(known) else None  # one task, one chance level
first = both.results[0].spec
effect = min_effect if min_effect >= 0 else first.stats.min_effect
# What the compared variants' labels leave out: the settings their studies differ in besides the factors.
named = [f for f in both.factors if "." in f and variants.label.str.contains(f"{f.rsplit('.', 1)[-1]}=").any()]
diffs = cmp.setting_differences(variants[variants.cell_id.isin(comparable)], {r.study: r.spec.tune for r in both.results},
                                named)
# Factors every variant has a level of (not another study's named factor): the channels' factors; the
# study too where the studies' configurations differ, so no figure shows one study's model under another's levels.
factors = [f for f in both.factors if f in trials.columns and trials[f].notna().all()]
channels = Channels.from_trials(trials, factors + (["study"] if len(diffs) else []))
pct = fmt.level(confidence)

# Every test this report makes, before any is shown: its p-values are adjusted over one family.
summary = stats.cell_summary(trials, metric, chance, margin, confidence)
comparisons = (stats.compare_to_reference(same, metric, ref_id, alpha, confidence=confidence, min_effect=effect,
                                          power=first.stats.power) if len(comparable) > 1 else None)
df = sn.prepare(curves_pl, trials_pl)
order = sn.variants(df, trials_pl) if len(df) else []
fig_order, key = ns.short_order(order)
per_layer = sn.layer_norms(df, "probe") if len(df) else None
comp_norms = None
if per_layer is not None:
    seeds = sn.per_seed(per_layer, trials_pl, factors)  # one row per run: the unit of every test
    near = per_layer[per_layer.cell_id.isin(comparable)]
    if near.cell_id.nunique() > 1 and ref_id in set(near.cell_id):
        comp_norms = sn.compare(seeds[seeds.cell_id.isin(comparable)], near, ref_id,
                                [(c, lbl) for c, lbl in fig_order if c in comparable], alpha, confidence,
                                first.stats.min_ratio, first.stats.power)
family = fam.adjust(fam.members([(metric, comparisons), ("norm", comp_norms)]), alpha)
alpha_m = alpha / max(1, len(family))  # Holm's first threshold: where the power lines and floors are set
if comparisons is not None and len(comparisons):
    comparisons = verdicts.power_at(fam.apply(comparisons, family, metric, "comparison", alpha), alpha_m, effect,
                                    first.stats.power)
if comp_norms is not None and len(comp_norms):
    comp_norms = verdicts.power_at(fam.apply(comp_norms, family, "norm", "comparison", alpha), alpha_m,
                                   float(np.log(first.stats.min_ratio)), first.stats.power)
# Tables numbered in the order they are shown, counting only those shown (no gap); an absent one's name is "".
compared, normed = comparisons is not None and len(comparisons) > 0, comp_norms is not None and len(comp_norms) > 0
shown = {"answer": compared, "studies": True, "variants": True, "settings": len(diffs) > 0, "cells": True,
         "comparisons": compared, "power": compared, "stability": per_layer is not None, "ratios": normed,
         "provenance": True}
tables = dict.fromkeys(shown, "") | {k: f"Table {i}" for i, k in enumerate([k for k, on in shown.items() if on], 1)}
say(*cmp.header_lines(title or " vs ".join(studies), both.names, variants, trials, ref_label, ref_why))

# %% [markdown]
# ## The answer

# %%
# A table's caption is one short paragraph, kept on the table's page (format.table_block); what explains
# it follows the table, so a page break never leaves a caption at the foot of a page above no table.
say(cmp.family_sentence(family, alpha))
if comparisons is None or comparisons.empty:
    say("No other variant is on the reference's data: there is nothing to compare.")
else:
    cells_shown = acc.cell_table(summary, ref_id, confidence, chance is not None)
    ref_mean = cells_shown[f"mean [{pct} CI]"].iloc[list(summary.cell_id).index(ref_id)]  # a row per summary row
    show(cmp.answer_table(comparisons, confidence, alpha), intro=(
        f"**{tables['answer']}. Each variant against the reference on {fmt.metric_name(metric)}**: the difference "
        f"of the means [{pct} t interval], p (Holm) over this comparison's family, the verdict at α = {alpha:g}."))
    say(*cmp.answer_lines(comparisons, comp_norms, ref_label, ref_mean, metric, alpha, confidence,
                          (tables["answer"], tables["ratios"])))
say(cmp.settings_sentence(diffs, tables.get("settings", "")), *cmp.comparability_lines(variants, comp, ref_id),
    cmp.pairing_line(pairing, variants, comparable, ref_id))

# %% [markdown]
# ## Studies and variants

# %%
summaries = both.summaries()
for s in summaries:
    s["selection"] = cmp.selection_text(s["selectors"])
show(cmp.studies_table(summaries), intro=f"**{tables['studies']}. The studies.**")
say("*reused*: completed runs a study linked from another study (the same cell and seed, trained once) instead of "
    "training them again.")
show(cmp.variants_table(variants, comp, ref_id), intro=(
    f"**{tables['variants']}. The variants** in the order of the figures, each cell once."))
if len(diffs):
    show(cmp.settings_table(diffs, variants[variants.cell_id.isin(comparable)]),
         intro=f"**{tables['settings']}. What the labels leave out.**")
    say("Each compared variant's value of every setting its study differs in from the other studies (a section of "
        "several keys by the keys whose values differ; *tuned*: chosen per variant by the protocol in the *tune* "
        "column).")

# %% [markdown]
# ## Accuracy

# %%
show(acc.cell_table(summary, ref_id, confidence, chance is not None),
     intro=f"**{tables['cells']}. {fmt.metric_name(metric).capitalize()} per variant.**")
say("Mean with its t-based confidence interval over completed replicate runs (*n*); diverged runs are counted apart. "
    "Variants not on the reference's data are listed but not compared.")
show_figure(acc.accuracy_by_cell(trials, metric, chance, margin=margin, confidence=confidence, label_width=46,
                                 channels=channels), title=f"Figure 1. {fmt.metric_name(metric).capitalize()} per "
                                                           "variant: each seed a point, the mean and its interval a bar.")

# %% [markdown]
# ## Comparisons with the reference

# %%
if comparisons is not None and len(comparisons):
    say(*cmp.in_comparison_words(acc.comparison_intro(comparisons, alpha, "this comparison's family (page one)")))
    show(acc.comparison_table(comparisons, confidence), name="comparisons", data=comparisons,
         intro=f"**{tables['comparisons']}. The tests.** Reference: **{ref_label}**. α = {alpha:g}.")
    say(*[f"- {s}" for s in cmp.in_comparison_words(
        acc.comparison_sentences(comparisons, metric, alpha, confidence, True, power=first.stats.power))])
    show_figure(acc.comparison_plot(comparisons, metric=metric, label_width=46, channels=channels),
                title="Figure 2. Each variant's difference from the reference, with its interval.",
                name="comparisons")
    show(acc.power_table(comparisons, first.stats.power), name="power",
         intro=f"**{tables['power']}. The power table.**")
    say(f"The power a t-test on this many seeds has to detect a difference of {fmt.num(effect)} (the first study's "
        f"`stats.min_effect`) given the spread observed, and the seeds that would reach {first.stats.power:.0%} power "
        f"(statsmodels), at α/{max(1, len(family))} = {fmt.pval(alpha_m)}, Holm's first threshold over this "
        "comparison's family; never fewer than the exact test needs to reach it at all.")

# %% [markdown]
# ## Hidden-state norms in shared axes

# %%
if per_layer is not None:
    show_figure(nf.norm_vs_step(per_layer, fig_order, key=key, channels=channels), name="norm-vs-step", title=(
        "Figure 3. Probe-batch ‖x‖² (batch mean, averaged over time steps and heads) against the training step, one "
        "panel per recurrent layer, every variant on the same axes: thin lines are seeds, the thick line their mean, "
        "the band their min–max."))
    stab = sn.stability(seeds, per_layer, fig_order, confidence)
    show(ns.stability_table(stab, confidence), intro=(
        f"**{tables['stability']}. Stability of the state norm per variant** (as in the norm-stability report)."))
    say("Per run its CV over training steps, over layers and its final ‖x‖², geometric means over the seeds with t "
        "intervals on the logs, except over layers: (mean √CV over the seeds)², with the t interval on √CV, squared; "
        "over seeds the spread of log ‖x‖² across seeds (each run's deviation from the median of the others, scaled "
        "to the sd for normal log norms), which does not depend on how many seeds a variant has; flagged runs are "
        "left out.")
    if comp_norms is not None and len(comp_norms):
        ratios = ns.ratio_grid(comp_norms, confidence, first.stats.min_ratio)
        show(ratios, name="ratios", data=comp_norms, intro=(
            f"**{tables['ratios']}. Each variant on the reference's data against the reference** (the same probe "
            "batch): the ratio to the reference [interval]; p (Holm) with its mark, or why it is not tested."))
        say("The ratio is exp(mean log difference) over the seeds with the t interval of that difference, tested by "
            f"exact permutation tests of the per-seed log values ({ns.tests_text(comp_norms)}: sign-flip on shared "
            "seeds, relabelling otherwise), Holm-adjusted over this comparison's family (page one), nothing tested "
            "below three seeds; over seeds both sides use the same number of seeds (the shared ones, else the first "
            "of each), so a spread over more seeds is never set against one over fewer."
            + cmp.omitted_measures_note(comp_norms), ns.grid_notes(ratios))
        say(*[f"- {s}" for s in cmp.norm_sentences(comp_norms, dict(fig_order).get(ref_id, ref_label), alpha,
                                                    confidence, tables["stability"])])
else:
    say("No completed run of the chosen variants has probe data.")

# %% [markdown]
# ## Provenance

# %%
provenances = [r.provenance() for r in both.results]
show(cmp.studies_provenance_table(provenances), intro=(
    f"**{tables['provenance']}. Provenance per study** (as recorded by each run)."))
say(*cmp.stores_lines(provenances))
