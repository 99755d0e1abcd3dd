"""Reports: one papermill notebook per report in ``notebooks/`` (rendered by ``render.py``).

``REPORTS`` is read from the notebooks shipped with the package, so a new report is one
notebook file; importing this package stays cheap (no matplotlib, no papermill).
"""

from importlib import resources

REPORTS: tuple[str, ...] = tuple(sorted(
    entry.name.removesuffix(".py") for entry in resources.files(__name__).joinpath("notebooks").iterdir()
    if entry.name.endswith(".py") and not entry.name.startswith("_")
))

# ``ablate.results.load`` appends what it could not read (one sentence a line) to the file this
# environment variable names, when set: render sets it for a report's kernel, so that a report
# says its data are incomplete whatever its notebook shows.
MISSING_NOTES = "ABLATE_MISSING_NOTES"
