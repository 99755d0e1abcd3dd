"""Runs that never learned, as page one says them: a cell's flag, and the caveat a verdict carries
when a level (or a cell) it compares is mostly runs that never trained.

The rule is the accuracy report's own (``stats.cell_summary``: a completed run whose metric is
``≤ chance + margin``), with ``margin`` the accuracy report's parameter — its default read from that
report's parameters cell, the one place it is declared. A verdict between a level that trained and
one that did not says the second did not train, not that one variant is better: the page must say
which it is in the sentence that calls it significant.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from ablate import stats
from ablate.report import format as fmt

__all__ = ["caveat", "cell_flag", "cells_caveat", "counts", "default_margin", "comparisons_tail", "lost_cells",
           "lost_sentence", "mostly", "rule", "term_caveat"]

COLUMNS = ["cell_id", "n_never_learned", "n_finished"]


def default_margin() -> float:
    """The accuracy report's declared ``margin`` (its parameters cell)."""
    from ablate.report.parameters import declared_parameters

    return float(declared_parameters("accuracy")["margin"])  # type: ignore[arg-type]


def counts(trials: pd.DataFrame, metric: str, chance: float | None, margin: float,
           factors: list[str]) -> pd.DataFrame:
    """Per cell: ``n_never_learned`` and ``n_finished`` (``stats.cell_summary``) and its level of
    each of ``factors``; empty where the rule does not apply (chance unknown, no such metric)."""
    if chance is None or metric not in trials.columns or not len(trials):
        return pd.DataFrame(columns=COLUMNS)
    summary = stats.cell_summary(trials, metric, chance, margin)[COLUMNS]
    # A named factor ("arch") is no dotted column, so cell_summary does not carry it: the trials do.
    levels = trials.drop_duplicates("cell_id")[["cell_id", *[f for f in factors if f in trials.columns]]]
    out = summary.merge(levels, on="cell_id", how="left")
    out["n_never_learned"] = pd.to_numeric(out["n_never_learned"], errors="coerce").fillna(0).astype(int)
    return out


def cell_flag(table: pd.DataFrame, cell_id: str) -> str:
    """``3 of 3 never learned`` for a cell with any such run, else ``""``."""
    row = table[table["cell_id"].astype(str) == str(cell_id)] if len(table) else table
    if not len(row):
        return ""
    k, n = int(row["n_never_learned"].iloc[0]), int(row["n_finished"].iloc[0])
    return f"{k} of {n} never learned" if k else ""


def _level(factor: str, value: Any) -> str:
    """A level as a sentence names it: its label, with the factor's short name before a number."""
    text = str(value)
    try:
        float(text)
    except ValueError:
        return text
    return f"{factor.split('.')[-1]} {text}"


def mostly(table: pd.DataFrame, factors: list[str]) -> list[tuple[str, int, int]]:
    """(level, never learned, finished) of each level of ``factors`` (a combination of levels for
    several: an interaction's cells) whose runs, pooled over its cells, mostly never learned."""
    if not len(table) or not factors or any(f not in table.columns for f in factors):
        return []
    pooled = table.groupby(factors, sort=False, dropna=False)[["n_never_learned", "n_finished"]].sum()
    out = []
    for key, r in pooled.iterrows():
        values = key if isinstance(key, tuple) else (key,)
        k, n = int(r["n_never_learned"]), int(r["n_finished"])
        if n and 2 * k > n:
            out.append((" · ".join(_level(f, v) for f, v in zip(factors, values, strict=True)), k, n))
    return out


def rule(metric: str, chance: float | None, margin: float) -> str:
    """``test accuracy ≤ chance 0.071 + 0.02``: what never learned means here."""
    return f"{fmt.metric_name(metric)} ≤ chance {fmt.num(chance)} + {margin:g}"


def caveat(groups: list[tuple[str, int, int]], metric: str, chance: float | None, margin: float,
           every: bool = False) -> str:
    """The words a significant verdict carries when ``groups`` (``mostly``) are in it: who never
    learned, by the rule, and what the difference then is (``every``: no level compared trained).
    ``""`` when none is."""
    if not groups:
        return ""
    what = "runs that did not train" if every else "runs that trained and runs that did not"
    return f"{_who(groups)} never learned ({rule(metric, chance, margin)}): the difference is between {what}"


def _who(groups: list[tuple[str, int, int]]) -> str:
    return "; ".join(f"{label}: {k} of {n} runs" for label, k, n in groups)


def term_caveat(table: pd.DataFrame, term: str, metric: str, chance: float | None, margin: float) -> str:
    """`` — LRU: 6 of 6 runs never learned (…): …`` for an ANOVA term (a factor, or an
    interaction's level pairs) with levels whose runs mostly never learned, else ``""``."""
    factors = term.split(" × ")
    groups = mostly(table, factors)
    every = bool(groups) and len(groups) == len(table.drop_duplicates(factors))
    said = caveat(groups, metric, chance, margin, every)
    return f" — {said}" if said else ""


def cells_caveat(table: pd.DataFrame, cell: str, reference: str) -> str:
    """``; its 3 of 3 runs never learned`` (``the reference's``, or both) when a comparison's cell
    or its reference mostly never learned, else ``""``; ``comparisons_tail`` says once what it means."""
    if not len(table):
        return ""
    ids = table["cell_id"].astype(str)
    said = []
    for cid, whose in ((cell, "its"), (reference, "the reference's")):
        row = table[ids == str(cid)]
        k, n = (int(row["n_never_learned"].iloc[0]), int(row["n_finished"].iloc[0])) if len(row) else (0, 0)
        if n and 2 * k > n:
            said.append(f"{whose} {k} of {n}")
    return f"; {' and '.join(said)} runs never learned" if said else ""


def comparisons_tail(metric: str, chance: float | None, margin: float) -> str:
    """What ``cells_caveat`` means, said once after the comparisons it marks."""
    return (f" — never learned: {rule(metric, chance, margin)}; where a compared cell's runs mostly never learned, "
            "the difference is that they did not train")


def lost_cells(trials: pd.DataFrame) -> list[str]:
    """The cells none of whose replicate runs finished (each diverged, failed or was killed): no
    verdict can name them, and a factor's test then rests on the other cells alone."""
    rep = stats.phase_rows(trials, "replicate")
    if not len(rep) or "status" not in rep.columns:
        return []
    done = rep["status"].isin(("complete", "pruned")).groupby(rep["cell_id"], sort=False).any()
    return [str(c) for c, any_done in done.items() if not any_done]


def lost_sentence(labels: list[str]) -> str:
    """Page one's words for ``lost_cells`` (by their labels); ``""`` when there is none."""
    if not labels:
        return ""
    names = ", ".join(f"**{x}**" for x in labels[:-1]) + (" and " if len(labels) > 1 else "") + f"**{labels[-1]}**"
    return (f"Nothing about {names} is tested: no run of {'it' if len(labels) == 1 else 'them'} finished (the "
            "table's flags say how each ended); every verdict below rests on the cells whose runs finished.")
