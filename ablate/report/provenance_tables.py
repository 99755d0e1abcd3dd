"""What produced a study's results, as tables every report shows the same way (and a comparison
of studies can reuse): the study and its stores, counts, commits, devices, hosts and dates; the
package versions each run recorded; the spec as run. Input is ``Results.provenance()`` (stores
already redacted); output display frames and text, written by ``ablate.report.format``."""

from __future__ import annotations

from typing import Any

import pandas as pd
import yaml

from ablate.report.format import DASH
from ablate.terminal import count

__all__ = ["dirty_lines", "lineage_rows", "provenance_table", "spec_text", "tally", "versions_table"]


def tally(counts: dict[str, int]) -> str:
    """``value (k runs); …`` — what each run recorded, most common first."""
    return "; ".join(f"{k} ({v} run{'s' if v != 1 else ''})" for k, v in counts.items()) or DASH


def provenance_table(prov: dict[str, Any], extra: list[tuple[str, str]] | None = None) -> pd.DataFrame:
    """``Results.provenance()`` as rows: study, spec hash, stores, counts, commits, devices, hosts,
    times, and ``extra`` rows a report adds (what it read)."""

    def when(x: Any) -> str:
        return x.strftime("%Y-%m-%d %H:%M") if x is not None else DASH

    rows = [
        ("study", prov["study"]),
        ("spec hash", prov["spec_hash"]),
        ("Optuna storage", prov["stores"].get("storage", DASH)),
        ("MLflow tracking", prov["stores"].get("tracking", DASH)),
        ("items", f"{prov['items']} in {prov['cells']} cells: "
                  + ", ".join(f"{v} {k}" for k, v in prov["counts"].items())),
        ("reused", ", ".join(f"{count(n, 'item')} trained by study {k}" for k, n in prov.get("reused_from", {}).items())
         or DASH),
        *lineage_rows(prov),
        ("git commit", tally(prov["git_commits"])),
        ("devices", tally(prov["devices"])),
        ("hosts", tally(prov["hosts"])),
        ("first run started", when(prov["first_started"])),
        ("last run finished", when(prov["last_finished"])),
        *(extra or []),
    ]
    return pd.DataFrame(rows, columns=["", "value"])


def dirty_lines(prov: dict[str, Any]) -> list[str]:
    """A header line when runs trained from a checkout with uncommitted changes (``+dirty``): their
    code is that commit plus changes nobody recorded, which a reader should know before the verdicts,
    not only from the provenance table at the end. None when every run's commit is clean."""
    commits = prov.get("git_commits") or {}
    dirty = {c: n for c, n in commits.items() if c.endswith("+dirty")}
    if not dirty:
        return []
    k, total = sum(dirty.values()), sum(commits.values())
    named = ", ".join(f"{c.removesuffix('+dirty')[:10]}+dirty" for c in dirty)
    return [f"**{'All' if k == total else f'{k} of the'} {total} trials** (replicate runs and any tuning) trained from a checkout "
            f"with uncommitted changes ({named}): the code they ran is that commit plus changes not recorded "
            "(provenance table)."]


def lineage_rows(prov: dict[str, Any]) -> list[tuple[str, str]]:
    """Rows for the runs that did not train from step 0 alone: those that continued a kept WSD
    stable-phase checkpoint, and those trained until converged (cell: seeds, declared → reached
    steps). None for a study without either (or provenance recorded before them)."""
    rows = []
    if prov.get("continued"):
        n = int(prov["continued"])
        rows.append(("continued", f"{n} item{'s' if n != 1 else ''} branched from a kept stable-phase checkpoint "
                                  "of a shorter WSD run of their lineage (trained only the difference)"))
    extended = prov.get("extended") or {}
    if extended:
        parts = [f"{cell}: " + ", ".join(f"seed {seed} {declared:,} → {reached:,}" for seed, declared, reached in runs)
                 for cell, runs in extended.items()]
        rows.append(("extended until converged", "; ".join(parts) + " steps"))
    return rows


def versions_table(prov: dict[str, Any]) -> pd.DataFrame:
    """Package versions as each run recorded them (``Results.provenance()["versions"]``)."""
    return pd.DataFrame([(pkg, tally(v)) for pkg, v in prov["versions"].items()], columns=["package", "version"])


def spec_text(prov: dict[str, Any]) -> str:
    """The spec as run, as YAML, credentials redacted."""
    from ablate.stores import redact

    return redact(yaml.dump(prov["spec"], Dumper=_ProseDumper, sort_keys=False, allow_unicode=True,
                          width=56))  # a column of the two the page prints it in


class _ProseDumper(yaml.SafeDumper):
    """Long strings (a description) as folded blocks: quoted, they wrapped inside the quotes and
    ended on a line holding a lone quote."""


def _prose(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    style = "|" if "\n" in text.rstrip("\n") else ">" if len(text) > 60 else None  # the emitter quotes what can't be
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_ProseDumper.add_representer(str, _prose)
