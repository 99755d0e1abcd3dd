"""Check a report PDF's pages for what makes them hard to read, and print what it finds per page:

* ``split``: an identifier (a factor, a level, a ``key=value``) broken inside a word across two
  lines — ``complex_diagon`` / ``al``; a break after ``=`` or ``,`` is where one should break;
* ``leading``: a line that begins with ``,`` or ``=`` (the break fell before the separator);
* ``empty``: a page, other than the last, whose text and figures fill less than a third of it.

    .venv/bin/python scripts/check_pages.py reports/*/*.pdf            # exit status 1 if any problem
    .venv/bin/python scripts/check_pages.py --counts reports/*/*.pdf   # one line of counts per PDF

Text comes from poppler's ``pdftotext -raw`` (a table cell's lines stay together in the order they
were drawn), how full a page is from ``pdftoppm`` at low resolution (the lowest non-white row
above the footer), so it measures figures as well as text. The identifiers are the ones the
document itself prints whole somewhere (tokens with ``_``, an inner ``.`` or ``=``, and both
sides of a ``key=value``), plus any given with ``--identifier``. Needs poppler-utils, numpy and
Pillow.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

#: A page is near-empty below this share of its text area filled (the last page excepted).
MIN_FILL = 1 / 3
#: The report's page margins (``ablate.report.render``'s ``@page``) as shares of an A4 page's
#: height: the footer (page number) lives in the bottom margin and does not count as content.
TOP, BOTTOM = 13 / 297, 15 / 297
SOFT_HYPHEN = "\u00ad"

_TOKEN = re.compile(r"[\w.=]+")
_TAIL = re.compile(r"[\w.=\-" + SOFT_HYPHEN + r"]+$")
_HEAD = re.compile(r"^[\w.]+")


@dataclass(frozen=True)
class Problem:
    """One finding: its page (1-based), its kind (``split``, ``leading``, ``empty``) and what it is."""

    page: int
    kind: str
    text: str

    def __str__(self) -> str:
        return f"p. {self.page}: {self.kind}: {self.text}"


def page_texts(pdf: Path) -> list[str]:
    """Each page's text, in the PDF's drawing order."""
    out = subprocess.run(["pdftotext", "-raw", str(pdf), "-"], capture_output=True, text=True, check=True).stdout
    texts = out.split("\f")
    return texts[:-1] if out.endswith("\f") else texts


def identifiers(texts: Iterable[str], extra: Iterable[str] = ()) -> set[str]:
    """The identifiers the text prints whole: tokens with ``_``, an inner ``.`` or ``=``, and the
    key and the value of each ``key=value`` (a level such as ``xi`` is one only beside its key). A
    token that ends a line continued by a word is left out: it may be the first part of a split one."""
    found = set(extra)
    for text in texts:
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        for i, line in enumerate(lines):
            tokens = _TOKEN.findall(line)
            if tokens and i + 1 < len(lines) and _HEAD.match(lines[i + 1]) and line.endswith(tokens[-1]):
                tokens = tokens[:-1]
            for token in tokens:
                token = token.strip(".")
                if "=" in token:
                    found.update(p.strip(".") for p in token.split("=") if p.strip("."))
                    found.add(token)
                elif "_" in token.strip("_") or "." in token:
                    found.add(token)
    return {f for f in found if re.search(r"[A-Za-z_]", f)}


def _split_at(end: str, start: str, known: set[str]) -> str | None:
    """The identifier broken between a line ending ``end`` and the next starting ``start``, or None."""
    tail, head = _TAIL.search(end.rstrip()), _HEAD.match(start.lstrip())
    if not tail or not head:
        return None
    left, right = tail.group(0), head.group(0)
    if left.endswith(("=", ",")):  # the place to break
        return None
    left = left.rstrip("-" + SOFT_HYPHEN) if end.rstrip().endswith(("-", SOFT_HYPHEN)) else left
    piece = left.rsplit("=", 1)[-1]
    for a in dict.fromkeys((piece, left)):
        joined = a + right
        if a and joined in known and a not in known and re.search(r"[A-Za-z_]", joined):
            return f"{a} / {right} ({joined})"
    if piece.endswith("_") and piece.strip("_"):  # broken at an underscore: never whole
        return f"{piece} / {right}"
    return None


def text_problems(texts: Sequence[str], extra: Iterable[str] = ()) -> list[Problem]:
    """``split`` and ``leading`` findings in the pages' texts (``page_texts``)."""
    known = identifiers(texts, extra)
    found = []
    for number, text in enumerate(texts, start=1):
        lines = [line for line in text.splitlines() if line.strip()]
        for first, second in zip(lines, lines[1:], strict=False):
            split = _split_at(first, second, known)
            if split:
                found.append(Problem(number, "split", split))
        found += [Problem(number, "leading", line.strip()[:60]) for line in lines
                  if line.lstrip().startswith((",", "="))]
    return found


def fill(pdf: Path, dpi: int = 30) -> list[float]:
    """Per page, the share of its text area (between the top and bottom margins) down to the lowest
    non-white pixel: 0 for a blank page, 1 for a page filled to its foot."""
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["pdftoppm", "-r", str(dpi), "-gray", str(pdf), f"{tmp}/p"], check=True)
        files = sorted(Path(tmp).glob("p-*.pgm"), key=lambda p: int(p.stem.rsplit("-", 1)[1]))
        shares = []
        for path in files:
            pixels = np.asarray(Image.open(path).convert("L"))
            height = pixels.shape[0]
            top, bottom = int(TOP * height), int(round((1 - BOTTOM) * height))
            inked = np.flatnonzero((pixels[top:bottom] < 235).any(axis=1))
            shares.append(0.0 if inked.size == 0 else (inked[-1] + 1) / (bottom - top))
        return shares


def page_problems(pdf: Path, extra: Iterable[str] = (), min_fill: float = MIN_FILL) -> list[Problem]:
    """Every finding in ``pdf``, by page (``text_problems`` and near-empty pages)."""
    found = text_problems(page_texts(pdf), extra)
    shares = fill(pdf)
    found += [Problem(i, "empty", f"{share:.0%} full") for i, share in enumerate(shares[:-1], start=1)
              if share < min_fill]
    return sorted(found, key=lambda p: (p.page, p.kind))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pdfs", nargs="+", type=Path)
    parser.add_argument("--identifier", action="append", default=[], help="an identifier to look for (repeatable)")
    parser.add_argument("--counts", action="store_true", help="one line per PDF: its counts per kind")
    args = parser.parse_args(argv)
    bad = 0
    for pdf in args.pdfs:
        found = page_problems(pdf, args.identifier)
        bad += bool(found)
        if args.counts:
            kinds = {k: sum(p.kind == k for p in found) for k in ("split", "leading", "empty")}
            print(f"{pdf}: " + ", ".join(f"{k} {n}" for k, n in kinds.items()))
            continue
        print(f"{pdf}: {len(found)} problem{'s' if len(found) != 1 else ''}")
        for problem in found:
            print(f"  {problem}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
