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
min_effect = -1.0  # the difference worth detecting for the power line; < 0: the spec's stats.min_effect
max_interactions = 6  # two-factor interaction plots shown at most
cells_per_figure = 64  # rows of the per-cell figures: one figure (one page, rows shrunk to fit) up to this many
export_dir = None  # a directory: every table and figure also written to its tables/ and figures/
results_file = None  # a file of ablate.results.save (the renderer's one read of the stores), read instead

# %%
import itertools
import warnings

import pandas as pd

from ablate import results, stats
from ablate.report import accuracy as acc
from ablate.report import answer_words, provenance_tables, verdicts
from ablate.report import format as fmt
from ablate.report import norm_tables as ns
from ablate.report import sequential_section as seqrep
from ablate.report.display import chunks, export_table, export_to, say, show, show_figure, show_text
from ablate.report.plotting import Channels

warnings.filterwarnings("ignore")
export_to(export_dir, "accuracy")

res = (results.read(results_file) if results_file else
       results.load(study, storage=storage, tracking_uri=tracking_uri, metrics=True))
trials = res.trials.to_pandas()
factors = [f for f in res.factors if f in trials.columns]
channels = Channels.from_trials(trials, factors)  # one factor → colour / line style / facet mapping for every figure
accuracy_like = metric.endswith("accuracy")
higher_is_better = fmt.higher_is_better(metric)  # a loss or bpc: lower; a plug-in metric says
chance = res.chance if accuracy_like else None
n_test = res.spec.task.get("test_size") if accuracy_like and not any(f.startswith("task.") for f in factors) else None
effect = min_effect if min_effect >= 0 else res.spec.stats.min_effect
ref_id, ref_why = verdicts.reference(res, trials, reference)
ref_label = trials.loc[trials.cell_id == ref_id, "cell_label"].iloc[0]
name = fmt.metric_name(metric)
# A sequential study's seeds depended on its results: its comparisons are the sequential design's
# (valid p-values and repeated intervals), and no fixed-design p-value is printed anywhere.
sequential = res.spec.sequential is not None
labels = dict(zip(trials.cell_id, trials.cell_label, strict=False))
say(*acc.header_lines(res, trials))
say(*provenance_tables.dirty_lines(res.provenance()))  # code not recorded: said before any verdict

# %% [markdown]
# ## The answer

# %%
norm_in = verdicts.norm_inputs(res, trials, factors) if "norm_stability" in res.spec.report_names else None
verdict = verdicts.study_verdicts(res, trials, metric, (ref_id, ref_label), alpha, confidence, effect, norm_in,
                                  design_m=verdicts.design_family(res), margin=margin)
comparisons = verdict.comparisons
# What the page's rows are: a sequential study's has its declared comparisons and no factor rows.
answer_words.show_answer(verdict, confidence, "accuracy")  # the answer in words, then the table
say(*acc.measure_lines(metric, chance, margin, ref_label, ref_why))  # after the answer, not before it
# Page one's norm columns: which ‖x‖² is per head, and what ξ does with more heads (the norm report says it
# before its verdicts; here it follows, so that the answer's table stays on page one).
if norm_in is not None:
    say(ns.heads_line(res.spec, "the norm report's figures and stability table's"))

# %% [markdown]
# ## Summary

# %%
say(answer_words.summary_lead(verdict, "accuracy"))
summary = stats.cell_summary(trials, metric, chance, margin, confidence)
conv = stats.cell_convergence(trials, stats.step_budget(trials, res.spec.train.steps), min_gain=effect)
tuned = res.tuning().to_pandas()
say(*[f"- {s}" for s in acc.summary_sentences(summary, metric, chance, margin, higher_is_better, confidence, conv)
      + (seqrep.sentences(res.sequential, res.spec, labels, ref_label) if sequential else
         acc.comparison_sentences(comparisons, metric, alpha, confidence, higher_is_better, conv,
                                  res.spec.stats.power))
      + answer_words.term_sentences(verdict, [metric])  # the factor tests, as page one says them
      # named as page one and the figures name them: the full labels took five lines at 18 cells
      + acc.convergence_sentences(conv.assign(cell_label=conv["cell_id"].map(verdict.labels).fillna(conv["cell_label"]))
                                  if verdict.labels and len(conv) else conv)
      + (acc.tuning_sentences(tuned, res.spec.tune) if res.spec.tune is not None else [])])
# The appendix tables name a cell by its levels where those tell the cells apart, as the figures do.
names = acc.level_names(trials, channels)
names_line = acc.names_line(names, channels)

# %% [markdown]
# ## Main effects
# Each level's marginal mean and interval (the table, interactions and ANOVA: appendix on factor effects).

# %%
full = bool(factors) and stats.is_full_factorial(trials, factors)
if not factors:
    say("No factors were varied: there are no main effects.")
elif not full:  # marginal means of a one-at-a-time design mix the factors: the appendix keeps them, with why
    say(acc.main_effects_withheld(trials, factors, res.spec.design))
else:
    show_figure(acc.main_effects_plot(trials, metric, factors, chance, confidence=confidence, channels=channels),
                name="main-effects")

# %% [markdown]
# ## Per cell
# Each seed a point in its cell's colour and marker, the mean and its interval a bar (numbers: the appendix).

# %%
for part in chunks(summary.cell_id, cells_per_figure):
    show_figure(acc.accuracy_by_cell(trials[trials.cell_id.isin(part)], metric, chance, margin=margin,
                                     confidence=confidence, label_width=46, channels=channels, n_test=n_test),
                name="cells")

# %% [markdown]
# ## Appendix: cells

# %%
show(acc.cell_table(acc.named(summary, names), ref_id, confidence, chance is not None, n_test=n_test, conv=conv),
     heading=f"{name[:1].upper() + name[1:]} per cell", name="cells", data=summary,
     intro=["Mean with its t-based confidence interval (kept inside [0, 1] for an accuracy; computed at the 99% "
            "level so that it covers at least 95% on skewed and ceiling runs, docs/calibration.md) over completed "
            "replicate runs; *n* counts them. The sd "
            "over seeds is the seed-to-seed spread"
            + (f"; the test-set SE is how much one run's accuracy would move on another test set of the same "
               f"{n_test:,} examples (binomial, sqrt(p(1 − p)/N)): where the two are alike, the seeds differ by "
               "little more than the test set's own noise" if n_test else "")
            + ". Diverged runs have no value and are left out of the mean; never-learned runs count in it. Both "
            "are shown apart, as shares of the finished runs. *failed* are infrastructure failures (not a property "
            "of the cell); *pending* are runs not finished yet.",
            f"{acc.STILL_IMPROVING} still improving when its step budget ran out (see the appendix on convergence)."
            if conv.still_improving.any() else "", names_line])

# %% [markdown]
# ## Appendix: comparisons with the reference

# %%
if sequential:
    say("### Sequential seeds", *seqrep.procedure(res.spec))
    show(seqrep.looks_table(res.spec, res.sequential), name="sequential-looks", intro=[
        "The looks and their boundaries: a comparison is significant at a look when |t| of its paired difference "
        "reaches the look's t boundary (where the paired t statistic's first crossing, simulated under no effect, "
        "spends what the α-spending function gives the look; the |z| column is the boundary for a known sd); equivalent when the interval estimate ± the equivalence t × se lies "
        "inside ±min_effect.", seqrep.boundaries_note(res.spec, res.sequential)])
    decided = seqrep.decisions_table(res.sequential, res.spec, labels)
    if len(decided):
        show(decided, name="sequential-decisions", intro=(
            "Every comparison's decision, the look that made it, the estimate with its repeated confidence "
            "interval and the stage-wise p, and its t statistic at each look it was analysed (seeds: t (boundary))."))
reference_line = f"Reference: **{ref_label}**. α = {alpha:g}; intervals at {fmt.level(confidence)}."
if comparisons.empty:
    say(reference_line, "There is no other cell to compare with.")
else:
    table = acc.comparison_table(acc.named(comparisons, names), confidence, conv, alpha, n_test=n_test)
    intro = [*acc.comparison_intro(comparisons, alpha, "the study's one family (page one)"),
             acc.t_test_note(comparisons, len(verdict.family)), acc.effect_size_note(acc.named(comparisons, names), n_test), reference_line, names_line]
    if sequential:  # the seeds were added by the results: no fixed-design p or verdict
        table = table.drop(columns=["test", "p", "p (Holm)", "verdict", acc.t_test_column(comparisons)])
        intro = [reference_line, "A sequential study: the differences and intervals below are descriptive, on the "
                 "seeds each cell got; the tests are the sequential design's (above).", names_line]
    shown, every = acc.constant_columns(table, ["n", "test"])
    show(shown, intro=[*intro, every], name="comparisons", data=comparisons)
    for part in chunks(range(len(comparisons)), cells_per_figure):
        show_figure(acc.comparison_plot(comparisons.iloc[part], metric=metric, label_width=46, channels=channels,
                                        sequential=seqrep.decision_words(res.sequential, res.spec, metric)
                                        if sequential else None),
                    name="comparisons")
    # The m its α/m was computed at (verdicts.power_m): the family tested, the design's, or a sequential
    # study's own comparisons — never the count of a family a sequential study empties on purpose.
    where = (f"each comparison's share of the sequential design's α (Bonferroni over its {verdict.power_m} "
             "comparisons; a fixed-design t-test's seeds, a guide to the design's size, not its looks' power)"
             if sequential else "Holm's first threshold over the study's family")
    power_shown, power_every = acc.constant_columns(acc.power_table(acc.named(comparisons, names),
                                                                    res.spec.stats.power), ["n", "at α/m", "note"])
    show(power_shown, name="power", intro=(
        f"**Power line.** The power a t-test on this many seeds has to detect a difference of {fmt.num(effect)} "
        f"(the spec's `stats.min_effect`) given the spread observed, and the seeds that would reach "
        f"{res.spec.stats.power:.0%} power (statsmodels' noncentral t), at "
        f"α/{verdict.power_m} = {fmt.pval(comparisons.power_alpha.iloc[0], alpha, bound=True)}, {where}; never fewer than the exact test needs to "
        f"reach it at all. A blank power says why in its note.", acc.power_floor_note(comparisons), power_every))

# %% [markdown]
# ## Appendix: few-run estimates
#
# Following rliable (Agarwal et al. 2021, *Deep RL at the edge of the statistical precipice*): the mean,
# the interquartile mean (IQM: the middle half of the runs, so one odd seed moves it little) and
# P(cell > reference), each with an interval that covers at a handful of seeds (rliable's percentile
# bootstrap does not): the t interval of the mean, a trimmed-t interval of the IQM (from five runs, the
# fewest its coverage is measured at, docs/calibration.md; below four runs it trims nothing and is the
# mean) and Newcombe's score interval of P(cell > reference). The performance profiles' band is an exact
# (Clopper–Pearson) interval at each τ. Beside the tests above, not instead of them.

# %%
# The figure before the table: the table flows on into the page the figure leaves, where a figure after
# it would leave the rest of the table's last page empty.
profile = stats.performance_profile(trials, metric, confidence=confidence)
if len(profile):
    show_figure(acc.performance_profile_plot(profile, metric, chance=chance, channels=channels, confidence=confidence),
                title="Performance profiles: the share of a cell's runs above each score τ", name="profiles")
few = stats.few_run_estimates(trials, metric, ref_id, confidence)
show(acc.few_run_table(acc.named(few, names), ref_id, confidence), name="few-run", data=few,
     intro=[acc.few_run_note(few), names_line])

# %% [markdown]
# ## Appendix: factor effects

# %%
say("**Main effects, interactions and the analysis of variance** "
    + ("of the runs, descriptive: a sequential study's answer page has no factor rows (its seeds depended on the "
       "results)." if sequential else "behind the answer page's factor rows."))
if not factors:
    say("No factors were varied: there are no main effects.")
else:
    effects = stats.main_effects(trials, metric, factors, confidence)
    show(acc.main_effects_table(effects, confidence), name="main-effects", data=effects, intro=[
        "**Main effects.** The marginal mean of each level: the unweighted mean of the means of the cells at that "
        "level, with a seed-blocked t interval (of the per-seed means over the level's cells) where those cells "
        "share their seeds (jackknifed over seeds, when a cell lost a run), else a Welch t interval (each cell its own "
        "variance). *cells* counts those with results "
        "out of those at the level.",
        "" if full else "**The design is not full factorial**: a level's cells differ in the other factors "
        "too, so these marginal means mix in other factors' effects; the comparisons with the reference "
        "are the cleaner read."])
varied = [f for f in factors if trials[f].nunique() > 1]
pairs = list(itertools.combinations(varied, 2))
if not pairs:
    say("**Interactions.** Fewer than two factors were varied: there are no interactions to show.")
else:
    say("**Interactions.** Two-factor marginal means; parallel lines mean the factors act independently.")
    if len(pairs) > max_interactions:
        say(f"{len(pairs)} factor pairs; the first {max_interactions} are shown "
            "(report parameter `max_interactions`).")
    # One figure of a panel per pair (a figure per pair took a page and a half at three factors), then each
    # pair's grid of marginal means.
    show_figure(acc.interaction_plots(trials, metric, pairs[:max_interactions], chance, confidence=confidence,
                                      channels=channels), name="interaction")
    for f1, f2 in pairs[:max_interactions]:
        wide = stats.interaction_table(trials, metric, f1, f2, confidence, wide=True)
        if wide.size:
            grid = acc.interaction_grid(wide, f1, f2)
            show(grid)
            export_table(grid, "interaction", f"{f1} × {f2}: marginal means", data=wide.reset_index())
if not varied:
    say("**Analysis of variance.** No factor has two levels or more: no ANOVA.")
else:
    ok, why = stats.anova_applicable(trials, metric, varied)
    subset, dropped = trials, {}
    if not ok:
        subset, dropped = stats.anova_on_finished_levels(trials, metric, varied)
        if dropped:
            ok = stats.anova_applicable(subset, metric, varied)[0]
    if ok and len(verdict.anova):  # the family's ANOVA: main effects and two-way interactions, Holm over the study
        table = verdict.anova
        shown = acc.anova_table(table)
        intro = "**Analysis of variance.** " + acc.anova_intro(dropped, sequential)
        if sequential:
            shown = shown.drop(columns=[c for c in ("p", "p (Holm)") if c in shown.columns])
        show(shown, intro=intro, name="anova", data=table)
    else:
        # Applicable on the finished levels but not tested (too few seeds): the design is not the reason.
        say("**Analysis of variance.** " + acc.no_anova_text(why if not ok else verdict.anova_why, trials, varied,
                                                             summary, res.spec.design, full or ok))

# %% [markdown]
# ## Appendix: convergence

# %%
if conv.n_known.any() or conv.steps_differ.any():
    show(acc.convergence_table(acc.named(conv, names)), name="convergence", data=conv, intro=[
        "Per cell: the runs still improving when their step budget ran out (the validation metric's trend over "
        "the last 20% of the steps they ran rose beyond its pass-to-pass noise and the tolerance; a run stopped "
        "early ended on its plateau and never counts), the largest such gain, the steps actually used of the budget, "
        "early stops and the median step of the best validation value. A cell is marked "
        f"{acc.STILL_IMPROVING} when its runs taken together were still rising (a one-sided t-test of the gains of "
        "the runs that used their whole budget), not whenever one of them is: one run in twenty of a flat cell is "
        "flagged by its noise alone.", names_line])
else:
    say("No convergence record: the study's trials predate it (or ran no validation). Whether more steps "
        "would change the results is not known.")

# %% [markdown]
# ## Appendix: learning curves
#
# Validation metric against training step: every cell's mean over its replicate seeds in the cell's
# colour and line style, the band between its lowest and highest seed.

# %%
curves = res.metrics.to_pandas() if len(res.metrics) else pd.DataFrame()
if len(curves):
    curves = curves[(curves.phase == "replicate") & (curves.name == curve_metric)]
if not len(curves):
    say(f"No `{curve_metric}` curves: no finished replicate run has logged them (yet).")
else:
    curve_chance = chance if curve_metric.endswith("accuracy") else None
    show_figure(acc.learning_curves(curves, curve_metric, cells=summary, chance=curve_chance, channels=channels),
                title="Learning curves: the validation metric against the training step", name="learning-curves")

# %% [markdown]
# ## Appendix: tuning

# %%
if res.spec.tune is None:
    say("The study did not tune: every cell ran its configuration as specified.")
else:
    show(acc.tuning_table(acc.named(tuned, names), res.spec.tune.objective.metric),
         intro=[acc.tuning_intro(res.spec.tune), names_line], name="tuning")

# %% [markdown]
# ## Appendix: against published numbers

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
    show(acc.reference_table(refs, trials, by_metric, confidence), name="published", intro=(
        "Each published value next to this study's mean for the matching cell. *confirmed* says "
        "whether the value has been checked against its source; unconfirmed values are "
        "provisional."))

# %% [markdown]
# ## Appendix: failures

# %%
failures = acc.failure_table(trials)
retried = trials[(trials.status == "complete") & (trials.attempts > 1)]
if failures.empty:
    say("No run diverged or failed.")
else:
    show(failures, name="failures", intro=f"{len(failures)} run{'s' if len(failures) != 1 else ''} did not "
         "complete: " + ", ".join(f"{int(v)} {k}" for k, v in failures.kind.value_counts().items()) + ".")
if len(retried):
    say(f"{len(retried)} run{'s' if len(retried) != 1 else ''} completed after a retry (a worker was "
        "stopped or lost).")

# %% [markdown]
# ## Provenance

# %%
prov = res.provenance()
show(acc.provenance_table(prov), name="provenance")
if prov["versions"]:
    show(acc.versions_table(prov), intro="**Package versions** (as recorded by each run)", name="versions")
show_text(acc.spec_text(prov), "The spec as run")
