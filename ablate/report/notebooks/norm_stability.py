# %% [markdown]
# # Hidden-state norm stability

# %% tags=["parameters"]
study = "quickstart"
storage = None
tracking_uri = None

# %%
import io

import numpy as np
from IPython.display import Image, Markdown, display

from ablate import results
from ablate.report import norms

res = results.load(study, storage=storage, tracking_uri=tracking_uri)
trials = res.trials.to_pandas()
df = norms.prepare(res.curves, res.trials)
order = norms.variants(df, res.trials) if len(df) else []
fig_order, key = norms.short_order(order)  # compact labels for figures: "rotation · xi · 4"
probes = res.spec.probes
CHUNK = 4  # variants per figure in the per-variant figures (one A4 page)


def show(fig):
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=150)
    display(Image(data=buf.getvalue()))


def table(frame, caption):
    display(Markdown(caption))
    display(frame.style.hide(axis="index"))


done = int((trials.status == "complete").sum())
lines = [f"**Study** `{res.study}` · spec hash `{res.spec_hash}` · {len(trials)} trials · {done} complete · "
         f"{len(order)} variants with probe data",
         f"Probes: every {probes.every} steps and at the end, on the first {probes.batch} validation examples "
         f"(eval mode); white-noise probe {'on' if probes.white_noise else 'off'} "
         f"({probes.white_noise_batch} sequences, seed {probes.white_noise_seed})."]
metrics = res.metrics.to_pandas() if len(res.metrics) else None
if metrics is not None and "name" in metrics.columns:
    fp = metrics[metrics.name == "probe/batch_fingerprint"]
    if len(fp):
        same = fp["value"].nunique() == 1
        lines.append(f"Probe batch identical across all {fp[['cell_id', 'seed']].drop_duplicates().shape[0]} runs: "
                     f"**{'yes' if same else 'NO — cells differ in their task; compare with care'}**.")
if key:
    lines.append(f"Figures label variants by their levels of: **{key}**.")
display(Markdown("\n\n".join(lines)))

if len(df):
    per_layer = norms.layer_norms(df, "probe")
    stab = norms.stability_table(per_layer, order)
    ratios = norms.ratio_table(per_layer, stab)
    check = norms.theory_check(df, order)
    drift = norms.spectrum_drift(df, order)
    by_factor = norms.factor_table(stab, trials, res.factors)

# %% [markdown]
# ## Summary
# Generated from the numbers of the tables below.

# %%
if len(df):
    display(Markdown(norms.summary_text(stab, ratios, check, drift, by_factor)))
else:
    display(Markdown("No completed runs with probe data yet."))

# %% [markdown]
# ## State norm vs training step
# **Figure 1.** Probe-batch ‖x‖² (batch mean, averaged over time steps and heads) at every probe step,
# one panel per recurrent layer (a bidirectional block has two), one colour per variant; thin lines are
# seeds, the thick line their mean, the band their min–max.

# %%
if len(df):
    show(norms.norm_vs_step(per_layer, fig_order, key=key))

# %% [markdown]
# **Figure 2.** The same summary on the training batches, from the training forward pass itself
# (every logging step, train mode).

# %%
train_norms = norms.layer_norms(df, "train") if len(df) else []
if len(train_norms):
    show(norms.norm_vs_step(train_norms, fig_order, key=key))
else:
    display(Markdown("No training-batch norms recorded."))

# %% [markdown]
# ## State norm vs time step at initialisation and at the end, with theory
# **Figure 3.** ‖x_t‖² against the time step t within the sequence, at the first and the last probe
# step: probe batch (colour; band: min–max over layers), white-noise input fed straight into each
# recurrent layer (dashed), and the theory for white unit-variance input from x₀ = 0 (dotted):
# 1 − γ_h^(2t) for ξ layers, Σ_j |γ_j|² ‖B_j‖² (1 − |λ_j|^(2t)) / (1 − |λ_j|²) per head for γ layers.

# %%
for i in range(0, len(order), CHUNK):
    show(norms.norm_vs_time(df, fig_order[i:i + CHUNK]))

# %% [markdown]
# ## Stability table

# %%
if len(df):
    table(norms.display_stability(stab),
          "**Table 1. Stability of the state norm per variant.** Coefficient of variation (sd / mean) of the "
          "probe-batch norm over training steps (per seed and layer), over layers (per seed and step) and over "
          "seeds (per layer and step), averaged; bootstrap 95% CI over those units.")
    if len(ratios):
        table(norms.display_ratios(ratios),
              "**Table 2. Ratio between variants.** Each variant's mean CV divided by that of the most stable "
              "variant on the same measure; bootstrap 95% CI resampling both variants' units.")
    if len(by_factor):
        table(norms.display_factors(by_factor),
              "**Table 3. Mean CV per factor level.** The CVs of Table 1 averaged over the variants at each "
              "level of a factor: which factor carries the stability.")

# %% [markdown]
# ## Normalisation check on white-noise input

# %%
if len(df) and len(check):
    table(norms.display_check(check),
          "**Table 4. White-noise check of the normalisation argument.** ‖x_t‖² at the last time step "
          "(mean over heads, layers and seeds) on the probe batch, on white-noise input, the theory for white "
          "input, their ratio, and the stationary theory E‖x_∞^h‖² per head (1 for ξ by construction).")

# %% [markdown]
# ## Spectrum drift over training
# **Figure 4.** Eigenvalue magnitudes |λ| (γ_h for rotation heads), phases (θ) and the stationary
# theory norm per head over training.

# %%
for i in range(0, len(order), CHUNK):
    show(norms.spectrum_figure(df, fig_order[i:i + CHUNK]))
if len(df) and len(drift):
    table(norms.display_drift(drift),
          "**Table 5. Spectrum drift from the first to the last probe step.** Per mode (all layers and seeds); "
          "the input scale is what multiplies B: ξ_h, the LRU's learned γ_j, or sqrt(1 − |λ|²).")

# %% [markdown]
# ## Gradient norms
# **Figure 5.** Gradient norm per optimiser group (recurrent parameters, decayed matrices, the rest) and
# in total, before clipping, at the probe steps (mean over seeds).

# %%
if len(df):
    show(norms.grad_figure(df, fig_order))

# %% [markdown]
# ## Definitions
# - ‖x_t^h‖²: squared norm of head h's state after t + 1 inputs; "mean over t" averages the sequence.
#   A backward layer's t counts from its own start. Padding positions are included.
# - Probe batch: the first `probes.batch` validation examples, identical for every variant and seed
#   whose task is the same (checked above by a fingerprint logged by every run); eval mode.
# - Units of a CV are not independent (one run gives several), so the CIs are optimistic with few seeds.

# %% [markdown]
# ## Provenance

# %%
display(Markdown("\n".join([f"- stores: `{res.stores}`", f"- spec hash: `{res.spec_hash}`",
                            f"- curve rows: {len(df)}; kinds: {', '.join(sorted(set(df['kind']))) if len(df) else '—'}",
                            f"- numpy {np.__version__}"])))
