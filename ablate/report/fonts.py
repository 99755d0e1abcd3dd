"""The fonts of every report, named once: DejaVu Sans for text, DejaVu Sans Mono for code.

A report must look the same on every machine, so neither matplotlib nor WeasyPrint may pick
whatever the host has installed under a similar name (a host with ``fonts-liberation``, as any
host with Chromium has, used to get Liberation Sans for the headings and different table wraps).
Both read the same TrueType files: the DejaVu fonts matplotlib ships in its ``mpl-data`` (DejaVu
2.37, Bitstream Vera licence, ``LICENSE_DEJAVU`` beside them), installed with the package by
``pip``/``scripts/setup.sh``. WeasyPrint gets them through ``@font-face`` rules with local file
URLs under family names of our own (``FAMILY``), so fontconfig cannot substitute a system font;
matplotlib draws with them by name (its font manager prefers its own copy) and its mathtext with
its ``dejavusans`` set. Figures embedded in a report keep their text as outlines, so they do not
depend on the reader's fonts either.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

__all__ = ["DIRECTORY", "FAMILY", "FILES", "LICENSE", "MATPLOTLIB_FAMILY", "files", "font_face_css"]

#: Where the font files are: matplotlib's bundled DejaVu.
DIRECTORY = Path(matplotlib.get_data_path()) / "fonts" / "ttf"
LICENSE = DIRECTORY / "LICENSE_DEJAVU"
#: The family names the report's CSS uses (private, so no host font answers to them).
FAMILY = {"sans": "ablate-sans", "mono": "ablate-mono"}
#: The font matplotlib draws every figure's text with.
MATPLOTLIB_FAMILY = "DejaVu Sans"
#: (kind, weight, style) → file name.
FILES = {
    ("sans", "normal", "normal"): "DejaVuSans.ttf",
    ("sans", "bold", "normal"): "DejaVuSans-Bold.ttf",
    ("sans", "normal", "italic"): "DejaVuSans-Oblique.ttf",
    ("sans", "bold", "italic"): "DejaVuSans-BoldOblique.ttf",
    ("mono", "normal", "normal"): "DejaVuSansMono.ttf",
    ("mono", "bold", "normal"): "DejaVuSansMono-Bold.ttf",
    ("mono", "normal", "italic"): "DejaVuSansMono-Oblique.ttf",
    ("mono", "bold", "italic"): "DejaVuSansMono-BoldOblique.ttf",
}


def files() -> list[Path]:
    """Every font file the reports use (they all exist wherever matplotlib is installed)."""
    return [DIRECTORY / name for name in FILES.values()]


def font_face_css() -> str:
    """``@font-face`` rules for ``FAMILY``, each a local file URL (no network)."""
    rules = []
    for (kind, weight, style), name in FILES.items():
        url = (DIRECTORY / name).resolve().as_uri()
        rules.append(f"@font-face {{ font-family: '{FAMILY[kind]}'; font-weight: {weight}; font-style: {style}; "
                     f"src: url('{url}') format('truetype'); }}")
    return "\n".join(rules)
