# %% [markdown]
# # Hidden-state norm stability

# %% tags=["parameters"]
study = "quickstart"
storage = None
tracking_uri = None

# %%
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import seaborn as sns
from IPython.display import Markdown, display

from ablate import results

sns.set_theme(context="paper", style="whitegrid")
res = results.load(study, storage=storage, tracking_uri=tracking_uri)
curves = res.curves.to_pandas() if len(res.curves) else None

# %% [markdown]
# ## State norm vs training step
# Batch mean of ‖x_t‖² on the fixed probe batch, averaged over time steps and heads, per layer.

# %%
if curves is None:
    display(Markdown("No completed runs yet."))
else:
    per_step = curves[curves.kind == "probe"].groupby(["cell_label", "seed", "layer", "step"], as_index=False)[
        "value"].mean()
    g = sns.relplot(data=per_step, x="step", y="value", hue="cell_label", col="layer", kind="line", col_wrap=2,
                    errorbar=("ci", 95), height=3, aspect=1.1, facet_kws={"sharey": False})
    g.set_axis_labels("training step", "mean ‖x_t‖²")
    g.figure.suptitle("State norm vs training step per layer", y=1.03)
    sns.move_legend(g, "lower center", bbox_to_anchor=(0.5, -0.25), ncol=2, title=None, fontsize=7)
    plt.show()
