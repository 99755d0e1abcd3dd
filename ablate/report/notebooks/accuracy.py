# %% [markdown]
# # Accuracy

# %% tags=["parameters"]
study = "quickstart"
storage = None
tracking_uri = None

# %%
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns
from IPython.display import Markdown, display

from ablate import results

sns.set_theme(context="paper", style="whitegrid")
res = results.load(study, storage=storage, tracking_uri=tracking_uri)
trials = res.trials.to_pandas()
display(Markdown(f"**Study** `{res.study}` · spec hash `{res.spec_hash}` · "
                 f"{len(trials)} trials · {(trials.status == 'complete').sum()} complete"))

# %% [markdown]
# ## Test accuracy per cell

# %%
done = trials[trials.status == "complete"]
table = (
    trials.groupby("cell_label", sort=False)
    .agg(n=("test_accuracy", "count"), mean=("test_accuracy", "mean"), std=("test_accuracy", "std"),
         pending=("status", lambda s: int((s == "pending").sum())),
         failed=("status", lambda s: int(s.isin(["failed", "diverged", "killed"]).sum())))
    .reset_index()
)
table["test accuracy"] = [
    "pending" if n == 0 else f"{m:.3f} ± {s:.3f}" if n > 1 else f"{m:.3f}"
    for n, m, s in zip(table.n, table["mean"], table["std"].fillna(0.0))
]
chance = res.chance
display(Markdown(f"Chance (majority class): {chance:.3f}" if chance is not None else "Chance: unknown"))
display(table[["cell_label", "n", "test accuracy", "pending", "failed"]]
        .rename(columns={"cell_label": "cell"}).style.hide(axis="index"))

# %% [markdown]
# ## Learning curves

# %%
metrics = res.metrics.to_pandas() if len(res.metrics) else pd.DataFrame()
if len(metrics):
    val = metrics[metrics.name == "val/accuracy"]
    fig, ax = plt.subplots(figsize=(7, 3.5))
    sns.lineplot(data=val, x="step", y="value", hue="cell_label", units="seed", estimator=None,
                 lw=0.8, alpha=0.6, ax=ax)
    if chance is not None:
        ax.axhline(chance, ls=":", c="grey", label="chance")
    ax.set(ylabel="validation accuracy", title="Validation accuracy vs training step")
    ax.legend(fontsize=7, loc="best")
    plt.show()
else:
    display(Markdown("No completed runs yet."))

# %% [markdown]
# ## Provenance

# %%
display(Markdown("\n".join([f"- stores: `{res.stores}`", f"- spec hash: `{res.spec_hash}`"])))
