"""Reading what a report wrote, independently of the host's line wrapping: PDF text per page
(poppler's ``pdftotext``), flattened so a header or a sentence wrapped at another place still
matches, the colours an SVG figure draws with, and what the page checker (``scripts/check_pages.py``)
finds on the pages."""

from __future__ import annotations

import functools
import importlib.util
import re
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType

SOFT_HYPHEN = "\u00ad"


def pages(pdf: Path, layout: bool = False) -> list[str]:
    """The text of each page, in reading order of the PDF's content (``-raw``: a table cell's
    lines stay together, unlike ``-layout``, which interleaves the lines of neighbouring cells)."""
    mode = "-layout" if layout else "-raw"
    text = subprocess.run(["pdftotext", mode, str(pdf), "-"], capture_output=True, text=True, check=True).stdout
    return text.split("\f")[:-1] if text.endswith("\f") else text.split("\f")


def flat(text: str) -> str:
    """``text`` without whitespace and soft hyphens: where a line breaks no longer matters."""
    return re.sub(r"\s+", "", text.replace(SOFT_HYPHEN, ""))


def has(text: str, phrase: str) -> bool:
    """Whether ``phrase`` occurs in ``text`` however either is wrapped."""
    return flat(phrase) in flat(text)


def svg_colours(svg: bytes | str) -> set[str]:
    """The hex colours an SVG fills or strokes with (matplotlib writes them as ``#rrggbb``)."""
    text = svg.decode() if isinstance(svg, bytes) else svg
    return {c.lower() for c in re.findall(r"(?:fill|stroke)\s*[:=]\s*[\"']?(#[0-9a-fA-F]{6})", text)}


def svg_groups(svg: bytes | str, prefix: str) -> dict[str, set[str]]:
    """``gid`` → the hex colours drawn inside each SVG group whose id starts with ``prefix``
    (matplotlib writes an artist's ``gid`` as its group's id; several groups may share one)."""
    import xml.etree.ElementTree as ET

    root = ET.fromstring(svg.encode() if isinstance(svg, str) else svg)
    out: dict[str, set[str]] = {}
    for g in root.iter("{http://www.w3.org/2000/svg}g"):
        gid = g.get("id", "")
        if gid.startswith(prefix):
            out.setdefault(gid, set()).update(svg_colours(ET.tostring(g, encoding="unicode")))
    return out


@functools.cache
def _check_pages() -> ModuleType:
    """``scripts/check_pages.py``, the page checker (a script, not part of the package)."""
    path = Path(__file__).resolve().parents[1] / "scripts" / "check_pages.py"
    spec = importlib.util.spec_from_file_location("check_pages", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up by name
    spec.loader.exec_module(module)
    return module


def page_problems(pdf: Path, identifiers: Iterable[str] = (), min_fill: float | None = None) -> list[str]:
    """What the page checker finds in ``pdf`` (split identifiers, lines that begin with a separator,
    near-empty pages: filled less than ``min_fill``, default the checker's), one line each:
    ``p. 3: split: complex_diagon / al (complex_diagonal)``."""
    checker = _check_pages()
    return [str(p) for p in checker.page_problems(pdf, identifiers, checker.MIN_FILL if min_fill is None else min_fill)]


def text_problems(texts: list[str], identifiers: Iterable[str] = ()) -> list[str]:
    """The page checker's findings in pages' texts alone (no PDF: split identifiers, leading separators)."""
    return [str(p) for p in _check_pages().text_problems(texts, identifiers)]
