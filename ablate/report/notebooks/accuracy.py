# %% [markdown]
# # Accuracy

# %% tags=["parameters"]
study = "quickstart"
storage = None
tracking_uri = None
reference = None  # a cell id or label to compare with; default: the baseline cell
metric = "test_accuracy"  # a column of the trials frame: test_accuracy, val_accuracy, test_loss, …
curve_metric = "val/accuracy"  # a logged metric name for the learning curves
alpha = 0.05
confidence = 0.95
margin = 0.02  # a run with metric ≤ chance + margin never learned
max_interactions = 6  # two-factor interaction plots shown at most
cells_per_figure = 16

# %%
import itertools
import warnings

import pandas as pd

from ablate import results, stats
from ablate.report import accuracy as acc
from ablate.report import format as fmt
from ablate.report.display import chunks, say, show, show_figure, show_text

warnings.filterwarnings("ignore")

res = results.load(study, storage=storage, tracking_uri=tracking_uri, curves=False, metrics=True)
trials = res.trials.to_pandas()
factors = [f for f in res.factors if f in trials.columns]
accuracy_like = metric.endswith("accuracy")
higher_is_better = True if accuracy_like else False
chance = res.chance if accuracy_like else None
ref_id, ref_why = res.reference_cell(reference)
ref_label = trials.loc[trials.cell_id == ref_id, "cell_label"].iloc[0]
name = fmt.metric_name(metric)
say(*acc.header_lines(res, trials, metric, chance, margin, ref_label, ref_why))

# %% [markdown]
# ## Summary

# %%
summary = stats.cell_summary(trials, metric, chance, margin, confidence)
comparisons = stats.compare_to_reference(trials, metric, ref_id, alpha, confidence=confidence)
say(*[f"- {s}" for s in acc.summary_sentences(summary, metric, chance, margin, higher_is_better, confidence)
      + acc.comparison_sentences(comparisons, metric, alpha, confidence, higher_is_better)])

# %%
show(acc.cell_table(summary, ref_id, confidence, chance is not None), heading=f"{name[:1].upper() + name[1:]} per cell",
     intro="Mean with its t-based confidence interval over completed replicate runs; *n* counts them. Diverged "
     "runs have no value and are left out of the mean; never-learned runs count in it. Both are shown "
     "apart, as shares of the finished runs. *failed* are infrastructure failures (not a property of the "
     "cell); *pending* are runs not finished yet.")
for part in chunks(summary.cell_id, cells_per_figure):
    show_figure(acc.accuracy_by_cell(trials[trials.cell_id.isin(part)], metric, chance, margin=margin,
                                     confidence=confidence, label_width=46))

# %% [markdown]
# ## Comparisons with the reference
#
# Each cell against the reference on the seeds both ran: a paired t-test where at least two seeds
# are shared (effect size Cohen's d_z; Wilcoxon signed-rank as a rank test), otherwise Welch's
# t-test (Hedges' g; Mann–Whitney U). p-values are Holm-corrected across the comparisons. Marks:
# \* p_adj < α, \*\* < 0.01, \*\*\* < 0.001; n.s. otherwise. Effect-size intervals are bootstrap
# (BCa) and need at least four seeds; with few seeds they are rough.

# %%
reference_line = f"Reference: **{ref_label}**. α = {alpha:g}; intervals at {fmt.level(confidence)}."
if comparisons.empty:
    say(reference_line, "There is no other cell to compare with.")
else:
    show(acc.comparison_table(comparisons, confidence), intro=reference_line)
    for part in chunks(range(len(comparisons)), cells_per_figure):
        show_figure(acc.comparison_plot(comparisons.iloc[part], metric=metric, label_width=46))

# %% [markdown]
# ## Main effects

# %%
full = bool(factors) and stats.is_full_factorial(trials, factors)
if not factors:
    say("No factors were varied: there are no main effects.")
else:
    effects = stats.main_effects(trials, metric, factors, confidence)
    show(acc.main_effects_table(effects, confidence), intro=[
        "The marginal mean of each level: the unweighted mean of the means of the cells at that level, "
        "with a t interval on the pooled within-cell variance. *cells* counts those with results out of "
        "those at the level.",
        "" if full else "**The design is not full factorial**: a level's cells differ in the other factors "
        "too, so these marginal means mix in other factors' effects; the comparisons with the reference "
        "are the cleaner read."])
    show_figure(acc.main_effects_plot(trials, metric, factors, chance, confidence=confidence))

# %% [markdown]
# ## Interactions
#
# Two-factor marginal means; parallel lines mean the factors act independently.

# %%
varied = [f for f in factors if trials[f].nunique() > 1]
pairs = list(itertools.combinations(varied, 2))
if not pairs:
    say("Fewer than two factors were varied: there are no interactions to show.")
else:
    if len(pairs) > max_interactions:
        say(f"{len(pairs)} factor pairs; the first {max_interactions} are shown "
            "(report parameter `max_interactions`).")
    for f1, f2 in pairs[:max_interactions]:
        wide = stats.interaction_table(trials, metric, f1, f2, confidence, wide=True)
        grid = fmt.table_html(acc.interaction_grid(wide, f1, f2)) if wide.size else ""
        show_figure(acc.interaction_plot(trials, metric, f1, f2, chance, confidence=confidence),
                    title=f"{f1} × {f2}", after=grid)

# %% [markdown]
# ## Analysis of variance

# %%
if not varied:
    say("No factor has two levels or more: no ANOVA.")
else:
    ok, why = stats.anova_applicable(trials, metric, varied)
    subset, dropped = trials, {}
    if not ok:
        subset, dropped = stats.anova_on_finished_levels(trials, metric, varied)
        if dropped:
            ok = stats.anova_applicable(subset, metric, varied)[0]
    if ok:
        show(acc.anova_table(stats.anova(subset, metric, varied)), intro=acc.anova_intro(dropped))
    else:
        say(acc.no_anova_text(why, trials, varied, summary, res.spec.design, full))

# %% [markdown]
# ## Learning curves
#
# Validation metric against training step for each cell's replicate runs: each seed a thin line,
# the mean over seeds thick.

# %%
curves = res.metrics.to_pandas() if len(res.metrics) else pd.DataFrame()
if len(curves):
    curves = curves[(curves.phase == "replicate") & (curves.name == curve_metric)]
if not len(curves):
    say(f"No `{curve_metric}` curves: no finished replicate run has logged them (yet).")
else:
    curve_chance = chance if curve_metric.endswith("accuracy") else None
    for part in chunks(summary.cell_id, 12):
        show_figure(acc.learning_curves(curves, curve_metric, cells=summary[summary.cell_id.isin(part)],
                                        chance=curve_chance))

# %% [markdown]
# ## Tuning

# %%
if res.spec.tune is None:
    say("The study did not tune: every cell ran its configuration as specified.")
else:
    show(acc.tuning_table(res.tuning().to_pandas(), res.spec.tune.objective.metric),
         intro=acc.tuning_intro(res.spec.tune))

# %% [markdown]
# ## Against published numbers

# %%
refs = res.references().to_pandas()
if refs.empty:
    say("The spec lists no published values (`references:`).")
else:
    by_metric = {}
    for m in refs.metric.unique():
        if m in trials.columns:
            by_metric[m] = stats.cell_summary(trials, m, chance if m.endswith("accuracy") else None, margin,
                                              confidence)
    show(acc.reference_table(refs, trials, by_metric, confidence), intro=(
        "Each published value next to this study's mean for the matching cell. *confirmed* says "
        "whether the value has been checked against its source; unconfirmed values are "
        "provisional."))

# %% [markdown]
# ## Failures

# %%
failures = acc.failure_table(trials)
retried = trials[(trials.status == "complete") & (trials.attempts > 1)]
if failures.empty:
    say("No run diverged or failed.")
else:
    show(failures, intro=f"{len(failures)} run{'s' if len(failures) != 1 else ''} did not complete: "
         + ", ".join(f"{int(v)} {k}" for k, v in failures.kind.value_counts().items()) + ".")
if len(retried):
    say(f"{len(retried)} run{'s' if len(retried) != 1 else ''} completed after a retry (a worker was "
        "stopped or lost).")

# %% [markdown]
# ## Provenance

# %%
prov = res.provenance()
show(acc.provenance_table(prov))
if prov["versions"]:
    show(acc.versions_table(prov), intro="**Package versions** (as recorded by each run)")
show_text(acc.spec_text(prov), "The spec as run")
