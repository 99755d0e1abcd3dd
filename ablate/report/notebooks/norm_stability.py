# %% [markdown]
# # Hidden-state norm stability

# %% tags=["parameters"]
study = "quickstart"
storage = None
tracking_uri = None
export_dir = None  # a directory: every table and figure also written to its tables/ and figures/
results_file = None  # a file of ablate.results.save (the renderer's one read of the stores), read instead
reference = None  # a cell id or label every variant is compared with; default: the baseline cell
alpha = 0.05
confidence = 0.95
margin = 0.02  # page one's never-learned flags, as the accuracy report's (a test holds the two equal)
max_interactions = 6  # two-factor interaction figures shown at most

# %%
import itertools

from ablate import results, stats
from ablate.report import answer_words, provenance_tables, verdicts
from ablate.report import format as fmt
from ablate.report import never_learned as nl
from ablate.report import norm_figures as nf
from ablate.report import norm_tables as ns
from ablate.report import sequential_section as seqrep
from ablate.report.display import export_to, say, show, show_figure
from ablate.report.plotting import Channels
from ablate.stats import norm_theory
from ablate.stats import norms as sn

export_to(export_dir, "norm_stability")
res = results.read(results_file) if results_file else results.load(study, storage=storage, tracking_uri=tracking_uri)
trials = res.trials.to_pandas()
channels = Channels.from_trials(trials, res.factors)  # one factor → colour / line style / facet mapping
df = sn.prepare(res.curves, res.trials)
order = sn.variants(df, res.trials) if len(df) else []
fig_order, key = ns.short_order(order)  # compact labels for figures: "rotation · xi · 4"
say(*ns.header_lines(res, trials, order))
say(*provenance_tables.dirty_lines(res.provenance()))  # code not recorded: said before any verdict

# A sequential study's seeds depended on its results: its comparisons are the sequential design's, and
# no fixed-design p-value is printed.
sequential = res.spec.sequential is not None
ref = verdicts.reference(res, trials, reference)  # declared before the results: the parameter, else the baseline
factors = [f for f in res.factors if f in trials.columns]
if len(df):
    per_layer = sn.layer_norms(df, "probe")
    seeds = sn.per_seed(per_layer, trials, factors)  # one row per run: the unit of every test below
    stab = sn.stability(seeds, per_layer, fig_order, confidence)  # tables name variants as the figures do
    # Runs flagged for late growth are left out above; the comparisons with them put back:
    back = sn.sensitivity(seeds, per_layer, ref[0], fig_order, alpha, confidence, res.spec.stats.min_ratio,
                          res.spec.stats.power)
    check = norm_theory.theory_check(df, fig_order)
    drift = norm_theory.spectrum_drift(df, fig_order)
# One multiplicity family for the whole study (report.verdicts): the accuracy report adjusts over the same tests,
# so both reports print the same p (Holm) for the same test.
ref_label = dict(zip(trials.cell_id, trials.cell_label, strict=False)).get(ref[0], ref[0])
norm_in = verdicts.NormInputs(df, per_layer, seeds, order, fig_order, key) if len(df) else None
verdict = verdicts.study_verdicts(res, trials, "test_accuracy", (ref[0], ref_label), alpha, confidence, norms=norm_in,
                                  design_m=verdicts.design_family(res), margin=margin)
# The norm comparisons, ANOVA and marginal means are the verdicts' (computed once, adjusted over the family).
comp, anova, anova_why, effects = (verdict.norm_comparisons, verdict.norm_anova, verdict.norm_anova_why,
                                   verdict.norm_effects)
varied = [f for f in factors if trials[f].nunique() > 1] if len(df) else []
# One-at-a-time designs: a level's cells differ in other factors too, so its marginal mean mixes in their
# effects — no marginal means or interaction figures then, as no ANOVA.
full = bool(varied) and stats.is_full_factorial(trials, varied)
# Tables numbered in the order the sections show them, counting only those this study's data gives (no gap;
# the factor analysis, when shown, is Table 1, as norm_tables' sentences name it); an absent one's name is "".
shown = {"anova": bool(varied) and len(anova) > 0, "effects": full and len(effects) > 0, "stability": len(df) > 0,
         "ratios": len(df) > 0 and len(comp) > 0, "check": len(df) > 0 and len(check) > 0,
         "drift": len(df) > 0 and len(drift) > 0}
tables = dict.fromkeys(shown, "") | {k: f"Table {i}" for i, k in enumerate([k for k, on in shown.items() if on], 1)}

# %% [markdown]
# ## The answer

# %%
# Head counts that differ change what a heads verdict on the whole state's norm means: said first.
say(ns.heads_line(res.spec))  # "" (nothing said) where head counts agree
answer_words.show_answer(verdict, confidence, "norm_stability")  # the answer in words, then the table
# What the measures are: after the answer, not before it (the answer table names the label key already).
say(*ns.measure_lines(res, trials, key if sequential or verdict.key != key else ""))

# %% [markdown]
# ## Summary

# %%
say(answer_words.summary_lead(verdict, "norm_stability"))  # how the comparisons were tested: fixed or sequential
if len(df) and sequential:
    labels = dict(zip(trials.cell_id, trials.cell_label, strict=False))
    say(ns.summary_text(stab, comp.iloc[0:0], ref, None, effects, check, alpha, confidence),
        *[f"- {s}" for s in seqrep.sentences(res.sequential, res.spec, labels, labels.get(ref[0], ref[0]))])
    say("## Sequential seeds", *seqrep.procedure(res.spec))
    show(seqrep.looks_table(res.spec, res.sequential), name="sequential-looks",
         intro=seqrep.boundaries_note(res.spec, res.sequential))
    decided = seqrep.decisions_table(res.sequential, res.spec, labels)
    if len(decided):
        show(decided, name="sequential-decisions", intro="Every comparison's decision (norm measures as ratios: "
             "analysed on the log scale), the look that made it, the estimate with its repeated confidence interval "
             "and the stage-wise p, and its t statistic at each look (seeds: t (boundary)).")
elif len(df):
    # A significant factor whose level never learned says so, as page one does (report.never_learned).
    say(ns.summary_text(stab, comp, ref, anova, effects, check, alpha, confidence, back,
                        caveat=lambda term: nl.term_caveat(verdict.never, term, verdict.metric, verdict.chance,
                                                           verdict.margin)))
else:
    say("No completed runs with probe data yet.")

# %% [markdown]
# ## State norm vs training step
# **Figure 1.** Probe-batch ‖x‖² (batch mean, averaged over time steps and heads) at every probe step,
# one panel per recurrent layer (a bidirectional block has two) and a row of panels per level of the
# factors past colour and line style; every variant in its colour and line style (the legend names the
# factors and levels); thin lines are seeds, the thick line their mean, the band their min–max (on panels
# of more than four variants the mean alone). A run flagged diverged / non-finite ends in an ×. On a log
# axis when the norms span more than 5×.

# %%
if len(df):
    show_figure(nf.norm_vs_step(per_layer, fig_order, key=key, channels=channels, flags=seeds), name="norm-vs-step")

# %% [markdown]
# ## State norm vs time step at initialisation and at the end, with theory
# **Figure 2.** ‖x<sub>t</sub>‖² against the time step t within the sequence, at the first and the last
# probe step, a row per facet: probe batch (the variant's colour and line style; band: min–max over
# layers, on panels of up to three variants), white-noise input fed
# straight into each recurrent layer (a thin line with open circles in the variant's colour), and the theory
# for white unit-variance input from a zero initial state (a broad pale line in the variant's colour): 1 − γ<sub>h</sub><sup>2t</sup> for ξ layers,
# Σ<sub>j</sub> |γ<sub>j</sub>|² ‖B<sub>j</sub>‖² (1 − |λ<sub>j</sub>|<sup>2t</sup>) / (1 − |λ<sub>j</sub>|²)
# per head for γ layers.

# %%
if order:  # one figure: a row of panels per facet, every variant of the facet on its panels
    show_figure(nf.norm_vs_time(df, fig_order, channels=channels), name="norm-vs-time")

# %% [markdown]
# **Figure 3.** The white-noise norm divided by the theory, against t, every variant on one panel: 1 means
# the normalisation argument holds exactly at that time step.

# %%
if order:
    show_figure(nf.theory_ratio(df, fig_order, channels=channels), name="noise-over-theory")

# %% [markdown]
# ## Appendix: factor effects

# %%
say("Which factor carries the stability, and whether one factor's effect depends on another: an ANOVA of every "
    "run's log value per measure (main effects and two-way interactions, seeds as replicates), "
    + ("descriptive: a sequential study's seeds depended on the results, so no p-value is valid." if sequential
       else "its p-values Holm-corrected over the study's one family (page one)."))
if not len(df) or not varied:
    say("No factor was varied: there are no factor effects." if len(df) else "No probe data yet.")
else:
    if len(anova):
        show(ns.anova_grid(anova, tested=not sequential), name="anova", data=anova, intro=(
            f"**{tables['anova']}. ANOVA of the per-seed log values** (type II), a row per term, a column per measure: F on "
            "the term's and the residual degrees of freedom"
            + (", partial η². A sequential study: the seeds depended on the results, so the F tests' p-values "
               "are not valid and are not shown." if sequential else
               ", p (Holm, over the study's one family) with its mark, partial η².")))
    depth = len(effects) > 0 and "depth" in set(effects["measure"])
    reasons: dict[str, list[str]] = {}  # one line per reason: a design's refusal is the same on every measure
    for m, why in anova_why.items():
        reasons.setdefault(why, []).append(ns.COLUMN_WORDS[m])
    for why, measures in reasons.items():
        say(f"- {', '.join(measures)}: {why}.")
    if not full:
        say("**No marginal means or interaction figures**: the design is not a full factorial over the varied "
            "factors, so a level's cells differ in the other factors too and its marginal mean would mix in their "
            "effects; the comparisons with the reference" + (f" ({tables['ratios']})" if tables["ratios"] else "")
            + " are the cleaner read.")
    elif len(effects):
        show(ns.wide(ns.effects_table(effects, confidence), ["factor", "level"],
                     lambda r: r[ns.effects_column(confidence)]),
             name="main-effects", data=effects, intro=(
            f"**{tables['effects']}. Marginal means per factor level**, each measure's mean as in "
            f"{tables['stability']} (its column says which): the unweighted mean of the cells' mean log values at that level, exponentiated (a geometric "
            "mean)" + ("; over layers of their mean √CV, squared" if depth else "")
            + ", with a seed-blocked t interval (of the per-seed means over the level's cells) where those cells "
            "share their seeds (jackknifed over seeds, when a cell lost a run), else a Welch t interval (each cell its own "
            "variance); "
            f"a row per factor level, a column per measure ({fmt.level(confidence)} intervals)."))
    pairs = list(itertools.combinations(varied, 2)) if full else []
    if len(pairs) > max_interactions:
        say(f"{len(pairs)} factor pairs; the first {max_interactions} are shown (report parameter `max_interactions`).")
    for i, (f1, f2) in enumerate(pairs[:max_interactions]):
        show_figure(nf.interaction_figure(seeds, f1, f2, channels, confidence), name="interaction",
                    title=f"Figure 4{'abcdefgh'[i] if len(pairs) > 1 else ''}. {f1} × {f2}: marginal means per "
                          "measure, as " + (f"{tables['effects']}'s" if tables["effects"] else "the marginal means")
                          + " (geometric" + ("; over layers (mean √CV)²" if depth else "")
                          + "); parallel lines mean the two factors act independently.")

# %% [markdown]
# ## Appendix: stability per variant

# %%
if len(df):
    ratio = ("" if not tables["ratios"] else
             f" and its ratio to the reference, descriptive ({tables['ratios']}; the tests are the sequential design's, "
             "page one)" if sequential else f" and its ratio to the reference with the test's p-values ({tables['ratios']})")
    say(f"Per-variant detail behind the answer page: every variant's value per measure ({tables['stability']}){ratio}.")
    show(ns.stability_table(stab, confidence), name="stability", data=stab, intro=(
        f"**{tables['stability']}. The state norm's stability per variant, over its seeds.** Each run gives one value per "
        "measure: its CV of the probe-batch ‖x‖² across probe steps (per layer, averaged over layers), across "
        "layers (per probe step, averaged over steps), its whole state's ‖x‖² at its last probe step, and the "
        "spread of log ‖x‖² over seeds (each run's scaled mean absolute deviation from the median of the other "
        "runs). A variant's value over training steps and at the end is the geometric mean over its seeds with "
        "the t interval of the mean log; over layers (mean √CV)² with the t interval of the mean √CV, squared — "
        f"both t intervals computed at {fmt.level(stats.robust_level(confidence))} and printed as "
        f"{fmt.level(confidence)}, as in the accuracy report (docs/science.md §13.5, docs/calibration.md); over "
        "seeds the mean deviation with the interval of that spread for normal runs (from the quantiles of the "
        "spread of normal samples, not a t interval; none at two seeds, whose two deviations are one distance). "
        "No interval where there is no spread beyond round-off. **flagged**: runs with non-finite or zero ‖x‖², "
        "or that grew late far more than their variant's other runs — left out of every value and test, named in "
        "the summary, marked in the figures."
        + (f" {tables['ratios']}'s ratios over layers are of geometric means, so they need not equal the quotient of two "
           "values here." if len(comp) and "depth" in set(comp["measure"]) - set(ns.unreferenced(comp)) else "")))
    if len(comp):
        ratios = ns.ratio_grid(comp, confidence, res.spec.stats.min_ratio, tested=not sequential)
        show(ratios, name="ratios", data=comp, intro=((
            f"**{tables['ratios']}. Each variant against the reference, {dict(fig_order).get(ref[0], ref[0])}** "
            f"({ref[1]}). The ratio is exp(mean log difference) over the seeds, with the t interval of that "
            "difference; over seeds, the ratio of the two spreads on the same seeds. The test is the "
            f"exact permutation test of the per-seed log values ({ns.tests_text(comp)}) — sign-flip on shared seeds, "
            "relabelling otherwise "
            "(over seeds: each variant's runs aligned on their median, whole runs permuted between the two — or "
            "each shared seed's pair swapped — and both spreads recomputed, the interval the ratios that test "
            "does not reject) — "
            "Holm-corrected over the study's one family (page one); fewer than three seeds are not tested and their per-seed values "
            "are shown. A row per variant, a column per measure: the ratio [CI], then p (Holm) with its mark, or "
            "why the comparison is not tested; the answer page gives each verdict and the seeds a decision needs."
            if not sequential else  # no test's p is printed: the caption says what the table holds instead
            f"**{tables['ratios']}. Each variant against the reference, {dict(fig_order).get(ref[0], ref[0])}** "
            f"({ref[1]}). "
            "The ratio is exp(mean log difference) over the seeds, with the t interval of that difference; over "
            "seeds, the ratio of the two spreads on the same seeds, its interval the ratios the permutation test of "
            "the spreads does not reject. Descriptive: a sequential study's seeds depended on the results, so no "
            "p-value is shown; its comparisons are the sequential design's decisions on the measures it declared "
            "(page one and the decisions table).")
            + (f" Notes: {ns.grid_notes(ratios)}." if ns.grid_notes(ratios) else "")
            + ns.unreferenced_note(comp, dict(fig_order).get(ref[0], ref[0]), anova)))

# %% [markdown]
# ## Appendix: training-batch norms
# **Figure 5.** The same summary as Figure 1 on the training batches, from the training forward pass itself
# (every logging step, train mode).

# %%
train_norms = sn.layer_norms(df, "train") if len(df) else []
if len(train_norms):
    show_figure(nf.norm_vs_step(train_norms, fig_order, key=key, channels=channels), name="norm-vs-step-train")
else:
    say("No training-batch norms recorded.")

# %% [markdown]
# ## Appendix: normalisation check on white-noise input

# %%
if len(df) and len(check):
    show(ns.check_table(check), name="white-noise-check", data=check, intro=(
        f"**{tables['check']}. White-noise check of the normalisation argument.** ‖x‖² at the last time step "
        "(mean over heads, layers and seeds) on the probe batch, on white-noise input, the theory for white "
        "input, their ratio, and the stationary theory E‖x∞ʰ‖² per head (1 for ξ by construction)."))

# %% [markdown]
# ## Appendix: spectrum drift over training

# %%
# The table before the figure: the figure is most of a page, and after it a short table would
# leave the page before nearly empty.
if len(df) and len(drift):
    show(ns.drift_table(drift), name="spectrum-drift", data=drift, intro=(
        f"**{tables['drift']}. Spectrum drift from the first to the last probe step.** Per mode (all layers and seeds); "
        "the input scale is what multiplies B: ξ_h, the LRU's learned γ_j, or sqrt(1 − |λ|²)."))
if order:
    show_figure(nf.spectrum_figure(df, fig_order, channels=channels), name="spectrum", title=(
        "Figure 6. Eigenvalue magnitudes |λ| (γ_h for rotation heads), phases (θ) and the stationary theory "
        "norm E‖x∞ʰ‖² per head over training."))

# %% [markdown]
# ## Appendix: gradient norms
# **Figure 7.** Gradient norm per optimiser group (recurrent parameters, decayed matrices, the rest) and
# in total, before clipping, at the probe steps (mean over seeds): a panel per group, a row per facet,
# every variant in its colour and line style.

# %%
if len(df):
    show_figure(nf.grad_figure(df, fig_order, channels=channels), name="gradients")

# %% [markdown]
# ## Definitions
# - ‖x<sub>t</sub><sup>h</sup>‖²: squared norm of head h's state after t + 1 inputs; "mean over t" averages the sequence.
#   A backward layer's t counts from its own start. Padding positions are included.
# - Probe batch: the first `probes.batch` validation examples, identical for every variant and seed
#   whose task is the same (checked above by a fingerprint logged by every run); eval mode.
# - The seed is the unit of replication: the probe steps and layers of one run share its initialisation, data
#   order and drift, so a run is reduced to one value per measure before anything is tested or resampled.
# - Norms and CVs are close to log-normal: ratios and means are taken on the log scale and shown exponentiated.

# %% [markdown]
# ## Provenance

# %%
prov = res.provenance()
show(provenance_tables.provenance_table(prov, ns.provenance_rows(df)), name="provenance")
if prov["versions"]:
    show(provenance_tables.versions_table(prov), intro="**Package versions** (as recorded by each run)", name="versions")
