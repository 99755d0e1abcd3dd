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
import base64
import html as html_lib
import io
import itertools
import warnings

import matplotlib

matplotlib.use("Agg")
import pandas as pd
import yaml
from IPython.display import HTML, Markdown, display

from ablate import results, stats
from ablate.report import figures
from ablate.report import tables as tb
from ablate.stores import redact

warnings.filterwarnings("ignore")


def show(frame, intro=(), heading=None):
    """A table with its heading and introduction as one block: the text stays with the table's
    first rows on the page."""
    intro = [intro] if isinstance(intro, str) else list(intro)
    parts = [f"<h2>{html_lib.escape(heading)}</h2>"] if heading else []
    parts += [f"<p>{tb.inline_markdown(text)}</p>" for text in intro if text]
    display(HTML('<div class="ablate-block">' + "".join(parts) + tb.html(frame) + "</div>"))


def say(*lines):
    display(Markdown("\n\n".join(line for line in lines if line)))


def show_fig(fig, title=None, after=""):
    """A figure (with its title and an optional table) as one block a page break does not split."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=150)
    src = "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()
    head = f"<p><b>{html_lib.escape(title)}</b></p>" if title else ""
    img = f'<img src="{src}" style="width: {int(fig.get_figwidth() * 96)}px" alt="{html_lib.escape(title or "")}">'
    display(HTML(f'<div class="ablate-figure">{head}{img}{after}</div>'))


def chunks(seq, n):
    seq = list(seq)
    return [seq[i : i + n] for i in range(0, len(seq), n)] or [[]]


res = results.load(study, storage=storage, tracking_uri=tracking_uri, curves=False, metrics=True)
trials = res.trials.to_pandas()
factors = [f for f in res.factors if f in trials.columns]
accuracy_like = metric.endswith("accuracy")
higher_is_better = True if accuracy_like else False
chance = res.chance if accuracy_like else None
ref_id, ref_why = res.reference_cell(reference)
ref_label = trials.loc[trials.cell_id == ref_id, "cell_label"].iloc[0]
replicates = trials[trials.phase == "replicate"]
tuning_rows = trials[trials.phase == "tune"]
status_counts = replicates.status.value_counts()
n_cells = replicates.cell_id.nunique()
name = tb.metric_name(metric)

lines = [
    f"**Study** `{res.study}` · spec hash `{res.spec_hash}`"
    + (f" — {res.spec.description}" if res.spec.description else ""),
    f"{n_cells} cell{'s' if n_cells != 1 else ''} × {len(res.spec.seed_list)} "
    f"seed{'s' if len(res.spec.seed_list) != 1 else ''} = {len(replicates)} replicate run{'s' if len(replicates) != 1 else ''}"
    + (f", after {len(tuning_rows)} tuning trial{'s' if len(tuning_rows) != 1 else ''}" if len(tuning_rows) else "")
    + ": " + ", ".join(f"{int(v)} {k}" for k, v in status_counts.items()) + ".",
    f"Metric: **{name}** over replicate runs (tuning trials never enter an estimate). "
    + (f"Chance (majority class): {tb.num(chance)}; a run *never learned* when its {name} ≤ chance + {margin:g}."
       if chance is not None else "Chance: not applicable or unknown; never-learned shares are not computed."),
    f"Reference cell: **{ref_label}** ({ref_why}).",
]
say(*lines)

# %% [markdown]
# ## Summary

# %%
summary = stats.cell_summary(trials, metric, chance, margin, confidence)
comparisons = stats.compare_to_reference(trials, metric, ref_id, alpha, confidence=confidence)
say(*[f"- {s}" for s in tb.summary_sentences(summary, metric, chance, margin, higher_is_better, confidence)
      + tb.comparison_sentences(comparisons, metric, alpha, confidence, higher_is_better)])

# %%
show(tb.cell_table(summary, ref_id, confidence, chance is not None), heading=f"{name[:1].upper() + name[1:]} per cell",
     intro="Mean with its t-based confidence interval over completed replicate runs; *n* counts them. Diverged "
     "runs have no value and are left out of the mean; never-learned runs count in it. Both are shown "
     "apart, as shares of the finished runs. *failed* are infrastructure failures (not a property of the "
     "cell); *pending* are runs not finished yet.")
for part in chunks(summary.cell_id, cells_per_figure):
    show_fig(figures.accuracy_by_cell(trials[trials.cell_id.isin(part)], metric, chance, margin=margin,
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
reference_line = f"Reference: **{ref_label}**. α = {alpha:g}; intervals at {confidence:.0%}."
if comparisons.empty:
    say(reference_line, "There is no other cell to compare with.")
else:
    show(tb.comparison_table(comparisons, confidence), intro=reference_line)
    for part in chunks(range(len(comparisons)), cells_per_figure):
        show_fig(figures.comparison_plot(comparisons.iloc[part], metric=metric, label_width=46))

# %% [markdown]
# ## Main effects

# %%
full = bool(factors) and stats.is_full_factorial(trials, factors)
if not factors:
    say("No factors were varied: there are no main effects.")
else:
    effects = stats.main_effects(trials, metric, factors, confidence)
    show(tb.main_effects_table(effects, confidence), intro=[
        "The marginal mean of each level: the unweighted mean of the means of the cells at that level, "
        "with a t interval on the pooled within-cell variance. *cells* counts those with results out of "
        "those at the level.",
        "" if full else "**The design is not full factorial**: a level's cells differ in the other factors "
        "too, so these marginal means mix in other factors' effects; the comparisons with the reference "
        "are the cleaner read."])
    show_fig(figures.main_effects_plot(trials, metric, factors, chance, confidence=confidence))

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
        grid = tb.html(tb.interaction_grid(wide, f1, f2)) if wide.size else ""
        show_fig(figures.interaction_plot(trials, metric, f1, f2, chance, confidence=confidence),
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
        table = stats.anova(subset, metric, varied)
        text = ("Type II ANOVA of a full factorial model (every main effect and interaction) fitted by "
                "least squares (statsmodels). Marks on the uncorrected p: \\* < 0.05, \\*\\* < 0.01, "
                "\\*\\*\\* < 0.001.")
        if dropped:
            left = "; ".join(f"{f}: {', '.join(map(str, lv))}" for f, lv in dropped.items())
            text += (f" **Partial study:** over the levels with results so far — left out until they have "
                     f"completed runs: {left}.")
        show(tb.anova_table(table), intro=text)
    else:
        empty = summary.loc[summary.n == 0, "cell_label"].tolist()
        if not full:
            combos = trials[varied].drop_duplicates()
            total = 1
            for f in varied:
                total *= trials[f].nunique()
            why = (f"the design ({res.spec.design}) is not a full factorial: it has {len(combos)} of the {total} "
                   "combinations of the factors' levels. A factorial ANOVA needs them all; read the comparisons "
                   "with the reference instead")
        elif empty:
            why += f"; cells without a completed run: {', '.join(empty[:8])}" + (" …" if len(empty) > 8 else "")
        say(f"No ANOVA table: {why}.")

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
        show_fig(figures.learning_curves(curves, curve_metric, cells=summary[summary.cell_id.isin(part)],
                                         chance=curve_chance))

# %% [markdown]
# ## Tuning

# %%
if res.spec.tune is None:
    say("The study did not tune: every cell ran its configuration as specified.")
else:
    tune = res.spec.tune
    objective = tune.objective
    space = "; ".join(
        f"{path}: " + (f"choices {dim.choices}" if dim.choices is not None
                       else f"[{dim.low:g}, {dim.high:g}]" + (" log" if dim.log else ""))
        for path, dim in tune.space.items())
    verb = "maximising" if objective.resolved_direction == "maximize" else "minimising"
    show(tb.tuning_table(res.tuning().to_pandas(), objective.metric), intro=(
        f"Each cell ran {tune.trials} tuning trial{'s' if tune.trials != 1 else ''} ({tune.sampler} sampler) "
        f"on tuning seeds {', '.join(map(str, tune.seed_list))}, {verb} {tb.metric_name(objective.metric)}; "
        f"its replicates then ran the best setting. Search space: {space}."))

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
    show(tb.reference_table(refs, trials, by_metric, confidence), intro=(
        "Each published value next to this study's mean for the matching cell. *confirmed* says "
        "whether the value has been checked against its source; unconfirmed values are "
        "provisional."))

# %% [markdown]
# ## Failures

# %%
failures = tb.failure_table(trials)
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


def tally(d):
    return "; ".join(f"{k} ({v} run{'s' if v != 1 else ''})" for k, v in d.items()) or "—"


def when(x):
    return x.strftime("%Y-%m-%d %H:%M") if x is not None else "—"


rows = [
    ("study", prov["study"]),
    ("spec hash", prov["spec_hash"]),
    ("Optuna storage", prov["stores"].get("storage", "—")),
    ("MLflow tracking", prov["stores"].get("tracking", "—")),
    ("items", f"{prov['items']} in {prov['cells']} cells: "
              + ", ".join(f"{v} {k}" for k, v in prov["counts"].items())),
    ("git commit", tally(prov["git_commits"])),
    ("devices", tally(prov["devices"])),
    ("hosts", tally(prov["hosts"])),
    ("first run started", when(prov["first_started"])),
    ("last run finished", when(prov["last_finished"])),
]
show(pd.DataFrame(rows, columns=["", "value"]))
if prov["versions"]:
    show(pd.DataFrame([(pkg, tally(v)) for pkg, v in prov["versions"].items()], columns=["package", "version"]),
         intro="**Package versions** (as recorded by each run)")
spec_text = redact(yaml.safe_dump(prov["spec"], sort_keys=False, allow_unicode=True, width=100))
display(HTML('<div class="ablate-block"><p><b>The spec as run</b></p><pre class="spec">'
             + html_lib.escape(spec_text) + "</pre></div>"))
