# %% [markdown]
# # Hidden-state norm stability

# %% tags=["parameters"]
study = "quickstart"
storage = None
tracking_uri = None
export_dir = None  # a directory: every table and figure also written to its tables/ and figures/
results_file = None  # a file of ablate.results.save (the renderer's one read of the stores), read instead

# %%
from ablate import results
from ablate.report import norm_stability as ns
from ablate.report import provenance
from ablate.report.display import chunks, export_to, say, show, show_figure
from ablate.report.plotting import Channels
from ablate.stats import norms as sn

export_to(export_dir, "norm_stability")
res = results.read(results_file) if results_file else results.load(study, storage=storage, tracking_uri=tracking_uri)
trials = res.trials.to_pandas()
channels = Channels.from_trials(trials, res.factors)  # one factor → colour / line style / facet mapping
df = sn.prepare(res.curves, res.trials)
order = sn.variants(df, res.trials) if len(df) else []
fig_order, key = ns.short_order(order)  # compact labels for figures: "rotation · xi · 4"
CHUNK = 4  # variants per figure in the per-variant figures (one A4 page)
say(*ns.header_lines(res, trials, order, key))

if len(df):
    per_layer = sn.layer_norms(df, "probe")
    stab = sn.stability(per_layer, order)
    ratios = sn.stability_ratios(per_layer, stab)
    check = sn.theory_check(df, order)
    drift = sn.spectrum_drift(df, order)
    by_factor = sn.stability_by_factor(stab, trials, res.factors)

# %% [markdown]
# ## Summary
# Generated from the numbers of the tables below; intervals are bootstrap 95% CIs, a ratio's lead
# *significant at α = 0.05* when its interval excludes 1×.

# %%
if len(df):
    say(ns.summary_text(stab, ratios, check, drift, by_factor))
else:
    say("No completed runs with probe data yet.")

# %% [markdown]
# ## State norm vs training step
# **Figure 1.** Probe-batch ‖x‖² (batch mean, averaged over time steps and heads) at every probe step,
# one panel per recurrent layer (a bidirectional block has two); every variant in its colour and line
# style (the legend names the factors and levels); thin lines are seeds, the thick line their mean, the
# band their min–max. On a log axis when the norms span more than 5×.

# %%
if len(df):
    show_figure(ns.norm_vs_step(per_layer, fig_order, key=key, channels=channels), name="norm-vs-step")

# %% [markdown]
# **Figure 2.** The same summary on the training batches, from the training forward pass itself
# (every logging step, train mode).

# %%
train_norms = sn.layer_norms(df, "train") if len(df) else []
if len(train_norms):
    show_figure(ns.norm_vs_step(train_norms, fig_order, key=key, channels=channels), name="norm-vs-step-train")
else:
    say("No training-batch norms recorded.")

# %% [markdown]
# ## State norm vs time step at initialisation and at the end, with theory
# **Figure 3.** ‖x<sub>t</sub>‖² against the time step t within the sequence, at the first and the last
# probe step: probe batch (the variant's colour; band: min–max over layers), white-noise input fed
# straight into each recurrent layer (dashed), and the theory for white unit-variance input from
# x<sub>0</sub> = 0 (dotted): 1 − γ<sub>h</sub><sup>2t</sup> for ξ layers,
# Σ<sub>j</sub> |γ<sub>j</sub>|² ‖B<sub>j</sub>‖² (1 − |λ<sub>j</sub>|<sup>2t</sup>) / (1 − |λ<sub>j</sub>|²)
# per head for γ layers.

# %%
for part in chunks(fig_order, CHUNK) if order else []:
    show_figure(ns.norm_vs_time(df, part, channels=channels), name="norm-vs-time")

# %% [markdown]
# **Figure 4.** The white-noise norm divided by the theory, against t, every variant on one panel: 1 means
# the normalisation argument holds exactly at that time step.

# %%
if order:
    show_figure(ns.theory_ratio(df, fig_order, channels=channels), name="noise-over-theory")

# %% [markdown]
# ## Stability table

# %%
if len(df):
    show(ns.stability_table(stab), name="stability", data=stab, intro=(
        "**Table 1. Stability of the state norm per variant.** Coefficient of variation (sd / mean) of the "
        "probe-batch norm over training steps (per seed and layer), over layers (per seed and step) and over "
        "seeds (per layer and step), averaged; bootstrap 95% CI over those units."))
    if len(ratios):
        show(ns.ratio_table(ratios), name="ratios", data=ratios, intro=(
            "**Table 2. Ratio between variants.** Each variant's mean CV divided by that of the most stable "
            "variant on the same measure; bootstrap 95% CI resampling both variants' units."))
    if len(by_factor):
        show(ns.factor_table(by_factor), name="by-factor", data=by_factor, intro=(
            "**Table 3. Mean CV per factor level.** The CVs of Table 1 averaged over the variants at each "
            "level of a factor: which factor carries the stability."))

# %% [markdown]
# ## Normalisation check on white-noise input

# %%
if len(df) and len(check):
    show(ns.check_table(check), name="white-noise-check", data=check, intro=(
        "**Table 4. White-noise check of the normalisation argument.** ‖x‖² at the last time step "
        "(mean over heads, layers and seeds) on the probe batch, on white-noise input, the theory for white "
        "input, their ratio, and the stationary theory E‖x∞ʰ‖² per head (1 for ξ by construction)."))

# %% [markdown]
# ## Spectrum drift over training
# **Figure 5.** Eigenvalue magnitudes |λ| (γ<sub>h</sub> for rotation heads), phases (θ) and the
# stationary theory norm E‖x<sub>∞</sub><sup>h</sup>‖² per head over training.

# %%
for part in chunks(fig_order, CHUNK) if order else []:
    show_figure(ns.spectrum_figure(df, part, channels=channels), name="spectrum")
if len(df) and len(drift):
    show(ns.drift_table(drift), name="spectrum-drift", data=drift, intro=(
        "**Table 5. Spectrum drift from the first to the last probe step.** Per mode (all layers and seeds); "
        "the input scale is what multiplies B: ξ_h, the LRU's learned γ_j, or sqrt(1 − |λ|²)."))

# %% [markdown]
# ## Gradient norms
# **Figure 6.** Gradient norm per optimiser group (recurrent parameters, decayed matrices, the rest) and
# in total, before clipping, at the probe steps (mean over seeds).

# %%
if len(df):
    show_figure(ns.grad_figure(df, fig_order), name="gradients")

# %% [markdown]
# ## Definitions
# - ‖x<sub>t</sub><sup>h</sup>‖²: squared norm of head h's state after t + 1 inputs; "mean over t" averages the sequence.
#   A backward layer's t counts from its own start. Padding positions are included.
# - Probe batch: the first `probes.batch` validation examples, identical for every variant and seed
#   whose task is the same (checked above by a fingerprint logged by every run); eval mode.
# - Units of a CV are not independent (one run gives several), so the CIs are optimistic with few seeds.

# %% [markdown]
# ## Provenance

# %%
prov = res.provenance()
show(provenance.provenance_table(prov, ns.provenance_rows(df)), name="provenance")
if prov["versions"]:
    show(provenance.versions_table(prov), intro="**Package versions** (as recorded by each run)", name="versions")
