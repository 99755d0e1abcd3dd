"""The ``comparison`` report's presentation: several studies (or some of their cells) side by side.

The notebook (``ablate/report/notebooks/comparison.py``) loads the studies with
``ablate.results.load([...])``, keeps the chosen cells (``Studies.select``), and analyses the
variants (``Studies.frames``: each cell once, labelled by what differs) with the accuracy and
norm-stability analyses (``ablate.stats``, ``ablate.stats.norms``) and their presentation
(``ablate.report.accuracy``, ``ablate.report.norm_stability``), which it reuses as they are.
What is particular to a comparison is here: which studies and cells, which variants can be
compared (``stats.comparability``: same task and data version), and per-study provenance.
"""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from ablate.report import format as fmt

__all__ = [
    "comparability_lines",
    "header_lines",
    "provenance_table",
    "reference_variant",
    "selection_text",
    "stores_lines",
    "studies_table",
    "variants_table",
]


def selection_text(selectors: list[dict[str, Any]]) -> str:
    """Selectors as the command line writes them: ``model.heads=8; variant=RotRNN``."""
    if not selectors:
        return "every cell"
    return "; ".join(", ".join(f"{k}={json.dumps(v) if not isinstance(v, str) else v}" for k, v in s.items())
                     for s in selectors)


def reference_variant(variants: pd.DataFrame, reference: str | None = None,
                      baselines: dict[str, str] | None = None) -> tuple[str, str]:
    """(cell id, why) of the variant the others are compared with: ``reference`` (a cell id, a
    variant label or a cell label) when given, else the first study's baseline cell when it is
    shown, else the first variant. KeyError names the variants."""
    if variants.empty:
        raise KeyError("no variants: no cell of the studies matches the selection")
    if reference:
        for _, v in variants.iterrows():
            if reference in (v["cell_id"], v["label"], v["cell_label"]):
                return str(v["cell_id"]), "chosen with the report parameter `reference`"
        known = ", ".join(repr(lbl) for lbl in variants["label"])
        raise KeyError(f"no variant with id or label {reference!r}; variants are: {known}")
    first = str(variants["study"].iloc[0])
    base = (baselines or {}).get(first)
    if base is not None and base in set(variants["cell_id"]):
        return base, f"the baseline of study {first}"
    return str(variants["cell_id"].iloc[0]), "the first variant shown"


def header_lines(title: str, names: list[str], variants: pd.DataFrame, trials: pd.DataFrame,
                 ref_label: str, ref_why: str) -> list[str]:
    """The opening paragraphs: what is compared, and with what."""
    done = int(((trials["status"] == "complete") & (trials["phase"] == "replicate")).sum())
    shared = int((variants["studies"].str.contains(",")).sum())
    lines = [f"**{title}** · studies {', '.join(f'`{n}`' for n in names)} · {len(variants)} variants "
             f"({shared} held by more than one study: trained once, shown once) · {done} completed replicate runs",
             f"Reference: **{ref_label}** ({ref_why}). A variant is a cell (its resolved configuration, data and "
             "code); labels name the factor levels that differ between the variants shown."]
    return lines


def studies_table(summaries: list[dict[str, Any]]) -> pd.DataFrame:
    """Per study: its spec hash, the cells shown of its cells, its selection, replicate runs
    complete, and how many of them it reused from another study. ``summaries``: one mapping per
    study with ``study``, ``spec_hash``, ``cells``, ``shown``, ``selection``, ``complete``,
    ``reused`` (a mapping source study → runs)."""
    rows = []
    for s in summaries:
        reused = ", ".join(f"{n} from {src}" for src, n in s["reused"].items()) or fmt.DASH
        rows.append({"study": s["study"], "spec hash": s["spec_hash"], "cells shown": f"{s['shown']} of {s['cells']}",
                     "selection": s["selection"], "complete runs": fmt.count(s["complete"]), "reused": reused})
    return pd.DataFrame(rows, columns=["study", "spec hash", "cells shown", "selection", "complete runs", "reused"])


def variants_table(variants: pd.DataFrame, comp: pd.DataFrame, reference_id: str) -> pd.DataFrame:
    """Per variant: its label, the studies holding it, its cell id, data version and code version,
    and whether it is compared with the reference."""
    ok = dict(zip(comp["cell_id"], comp["comparable"], strict=True))
    rows = []
    for _, v in variants.iterrows():
        rows.append({"variant": v["label"] + (" (reference)" if v["cell_id"] == reference_id else ""),
                     "studies": v["studies"], "cell id": v["cell_id"], "data version": str(v["data_version"])[:8],
                     "code version": v["code_version"],
                     "compared": "reference" if v["cell_id"] == reference_id else "yes" if ok.get(v["cell_id"]) else "no"})
    return pd.DataFrame(rows, columns=["variant", "studies", "cell id", "data version", "code version", "compared"])


def comparability_lines(variants: pd.DataFrame, comp: pd.DataFrame, reference_id: str) -> list[str]:
    """Which variants the statistics compare, and for the others why not (from ``stats.comparability``)."""
    ref = variants.loc[variants["cell_id"] == reference_id].iloc[0]
    ref_task = json.loads(ref["task"])
    merged = variants.merge(comp, on="cell_id")
    apart = merged[~merged["comparable"]]
    if apart.empty:
        return [f"All {len(variants)} variants are trained and tested on the same data (task `{ref_task.get('name')}`, "
                f"data version `{str(ref['data_version'])[:8]}`): their accuracies and state norms compare directly, "
                "and the statistics below take every one."]
    lines = [f"{len(merged) - len(apart)} of {len(variants)} variants share the reference's data (task "
             f"`{ref_task.get('name')}`, data version `{str(ref['data_version'])[:8]}`) and are compared with it. "
             f"{len(apart)} {'is' if len(apart) == 1 else 'are'} not — a difference on other data is not an effect "
             "of the factors:"]
    for _, v in apart.iterrows():
        task = json.loads(v["task"])
        if not v["same_task"]:
            why = f"another task ({task.get('name')} vs {ref_task.get('name')})"
        elif v["differs"]:
            why = "other data: " + ", ".join(f"{k} {task.get(k)} vs {ref_task.get(k)}" for k in v["differs"])
        else:
            why = "the same task parameters but another version of the task's generator"
        lines.append(f"- **{v['label']}** ({v['studies']}): {why}.")
    return lines


def provenance_table(provenances: list[dict[str, Any]]) -> pd.DataFrame:
    """Per study (``Results.provenance()`` of each): spec hash, commits, devices, dates."""
    def tally(counts: dict[str, int]) -> str:
        return "; ".join(f"{k[:10]} ({v})" for k, v in counts.items()) or fmt.DASH

    rows = []
    for p in provenances:
        rows.append({"study": p["study"], "spec hash": p["spec_hash"], "commits (runs)": tally(p["git_commits"]),
                     "devices (runs)": tally(p["devices"]),
                     "first started": str(p["first_started"])[:16] if p["first_started"] else fmt.DASH,
                     "last finished": str(p["last_finished"])[:16] if p["last_finished"] else fmt.DASH})
    return pd.DataFrame(rows, columns=["study", "spec hash", "commits (runs)", "devices (runs)", "first started",
                                       "last finished"])


def stores_lines(provenances: list[dict[str, Any]]) -> list[str]:
    """The stores the studies were read from (credentials redacted by the results API)."""
    stores = list(dict.fromkeys((p["stores"].get("storage", ""), p["stores"].get("tracking", "")) for p in provenances))
    return [f"- storage `{s}`, tracking `{t}`" for s, t in stores]
