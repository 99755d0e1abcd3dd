"""Pages of report PDFs side by side as one PNG, a labelled row per PDF: to look at a report as
pages, or to set a report before a change above the same report after it.

    .venv/bin/python scripts/contact_sheet.py OUT.png "before (b1b0b2f)=old.pdf" "after=new.pdf" --pages 4

Needs pdftoppm (poppler-utils, installed by scripts/setup.sh) and Pillow (a matplotlib dependency).
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
from pathlib import Path

from PIL import Image, ImageDraw

PAD = 8
LABEL = 24  # pixels above each row for its label


def pages(pdf: Path, n: int, dpi: int) -> list[Image.Image]:
    """The first ``n`` pages of ``pdf`` at ``dpi``."""
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["pdftoppm", "-r", str(dpi), "-png", "-f", "1", "-l", str(n), str(pdf), f"{tmp}/p"], check=True)
        # pdftoppm pads page numbers to the page count's width: sort by number, not by text
        files = sorted(Path(tmp).glob("p-*.png"), key=lambda p: int(p.stem.rsplit("-", 1)[1]))
        return [Image.open(p).convert("RGB") for p in files]


def row(images: list[Image.Image], label: str) -> Image.Image:
    """``images`` left to right, each framed, under ``label``."""
    height = max(i.height for i in images)
    out = Image.new("RGB", (sum(i.width for i in images) + PAD * (len(images) + 1), height + LABEL + 4), "white")
    draw = ImageDraw.Draw(out)
    draw.text((PAD, 6), label, fill="black")
    x = PAD
    for image in images:
        out.paste(image, (x, LABEL))
        draw.rectangle([x - 1, LABEL - 1, x + image.width, LABEL + image.height], outline="#999999")
        x += image.width + PAD
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the PNG to write")
    parser.add_argument("rows", nargs="+", metavar="LABEL=PDF", help="one row per PDF, under its label")
    parser.add_argument("--pages", type=int, default=4, help="pages per row (the first N)")
    parser.add_argument("--dpi", type=int, default=45)
    args = parser.parse_args()
    rows = []
    for spec in args.rows:
        label, sep, path = spec.rpartition("=")
        if not sep or not Path(path).is_file():
            parser.error(f"{spec!r}: give LABEL=PDF with an existing PDF")
        rows.append(row(pages(Path(path), args.pages, args.dpi), label))
    sheet = Image.new("RGB", (max(r.width for r in rows), sum(r.height for r in rows)), "white")
    y = 0
    for r in rows:
        sheet.paste(r, (0, y))
        y += r.height
    args.out.parent.mkdir(parents=True, exist_ok=True)
    sheet.save(args.out, optimize=True)
    print(f"wrote {args.out} ({sheet.width}×{sheet.height})")


if __name__ == "__main__":
    main()
