"""Reports: one papermill notebook per report in ``notebooks/`` (rendered by ``render.py``).

``REPORTS`` (what a spec's ``reports:`` may list: reports of one study) is read from the
notebooks shipped with the package, so a new report is one notebook file; ``COMPARISONS`` are
the notebooks that take several studies (``ablate compare``). Importing this package stays cheap
(no matplotlib, no papermill).
"""

from importlib import resources
from pathlib import Path

#: Reports over several studies at once (parameters ``studies`` and ``cells``), not per study.
COMPARISONS: tuple[str, ...] = ("comparison",)

REPORTS: tuple[str, ...] = tuple(sorted(
    entry.name.removesuffix(".py") for entry in resources.files(__name__).joinpath("notebooks").iterdir()
    if entry.name.endswith(".py") and not entry.name.startswith("_") and entry.name.removesuffix(".py") not in COMPARISONS
))


def notebook_path(report: str) -> Path:
    """The notebook file of a report or comparison; ValueError names the valid ones."""
    if report not in REPORTS + COMPARISONS:
        raise ValueError(f"{report!r} is not one of: {', '.join(REPORTS + COMPARISONS)}")
    return Path(str(resources.files(__name__) / "notebooks" / f"{report}.py"))


def slug(heading: str) -> str:
    """A section heading as a spec names it: lower case, words joined by '-' ("Few-run estimates" →
    "few-run-estimates")."""
    words = "".join(ch.lower() if ch.isalnum() else " " for ch in heading).split()
    return "-".join(words)


def headings(report: str) -> tuple[str, ...]:
    """The sections of a report (the ``## `` headings of its notebook, as ``slug``s), in order:
    what a spec's ``reports: [{name: …, sections: […]}]`` may list."""
    text = resources.files(__name__).joinpath("notebooks", f"{report}.py").read_text(encoding="utf-8")
    return tuple(dict.fromkeys(slug(line[5:]) for line in text.splitlines() if line.startswith("# ## ")))


#: Sections a report leaves out unless a spec's ``reports:`` entry names them (diagnostics beyond the
#: five-minute read; the report's last lines say they exist and how to add them).
OPTIONAL_SECTIONS: dict[str, tuple[str, ...]] = {
    "norm_stability": ("appendix-training-batch-norms", "appendix-spectrum-drift-over-training",
                       "appendix-gradient-norms"),
}


def default_sections(report: str) -> tuple[str, ...]:
    """The sections a report shows when its spec entry names none: all but ``OPTIONAL_SECTIONS``."""
    left_out = set(OPTIONAL_SECTIONS.get(report, ()))
    return tuple(h for h in headings(report) if h not in left_out)
