"""Pixel-sequence Fashion-MNIST (Xiao et al. 2017): 28×28 images as 784-step sequences.

Read from the Debian package ``dataset-fashion-mnist`` (``/usr/share/datasets/fashion-mnist``)
or from ``$ABLATE_FASHION_MNIST_DIR`` holding the same four ``*-idx?-ubyte.gz`` files. Pixels
are read in row-major order, or in one fixed random order (``permute``, as psMNIST), and
standardised with the training split's statistics. The official test set is the test split;
validation is a seeded sample of the official training set. ``train_size`` / ``test_size``
subsample for quick runs.
"""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import numpy as np
from pydantic import Field

from ablate.tasks.data import BuildContext, Generated
from ablate.tasks.realdata import scalar_stats
from ablate.tasks.registration import TaskParams, register_task

DEBIAN_DIR = Path("/usr/share/datasets/fashion-mnist")
ENV_VAR = "ABLATE_FASHION_MNIST_DIR"
FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}


class FashionMnistParams(TaskParams):
    permute: bool = Field(False, description="read pixels in one fixed random order (permuted task)")
    permutation_seed: int = Field(0, ge=0, description="seed of the pixel order; independent of `seed`")
    val_size: int = Field(
        5_000, ge=1, le=30_000, description="validation images taken from the official train set"
    )
    train_size: int | None = Field(None, ge=1, description="training images (default: all the rest, 55,000)")
    test_size: int | None = Field(None, ge=1, le=10_000, description="test images (default: all 10,000)")


def data_dir() -> Path:
    """The directory holding the four IDX files; a ``FileNotFoundError`` saying how to get them."""
    where = Path(os.environ[ENV_VAR]) if os.environ.get(ENV_VAR) else DEBIAN_DIR
    missing = [f for pair in FILES.values() for f in pair if not (where / f).exists()]
    if missing:
        raise FileNotFoundError(
            f"fashion_mnist needs {', '.join(missing)} in {where}; install them with "
            f"`sudo apt-get install dataset-fashion-mnist` (Debian/Ubuntu), or point ${ENV_VAR} "
            "at a directory holding the four Fashion-MNIST *-ubyte.gz files"
        )
    return where


def read_idx(path: Path) -> np.ndarray:
    """An IDX file (gzip-compressed) as a uint8 array of its declared shape."""
    with gzip.open(path, "rb") as f:
        raw = f.read()
    dims = raw[3]
    shape = tuple(int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(dims))
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def available() -> bool:
    try:
        data_dir()
    except FileNotFoundError:
        return False
    return True


@register_task("fashion_mnist", FashionMnistParams, version=1)
def build(p: FashionMnistParams, ctx: BuildContext) -> Generated:
    where = data_dir()
    ctx.reporter.stage("reading", total=2)
    raw = {}
    for split, (images, labels) in FILES.items():
        x = read_idx(where / images).reshape(-1, 784)
        raw[split] = (x, read_idx(where / labels).astype(np.int16))
        ctx.reporter.advance()
    if p.permute:
        order = np.random.default_rng(np.random.SeedSequence([p.permutation_seed, 784])).permutation(784)
        raw = {s: (x[:, order], y) for s, (x, y) in raw.items()}
    rng = np.random.default_rng(np.random.SeedSequence([p.seed, 1]))
    n_train = len(raw["train"][0])
    order = rng.permutation(n_train)
    val_idx = np.sort(order[: p.val_size])
    train_idx = np.sort(order[p.val_size : p.val_size + (p.train_size or n_train)])
    test_idx = np.arange(len(raw["test"][0]))
    if p.test_size is not None:
        test_idx = np.sort(rng.permutation(len(test_idx))[: p.test_size])
    splits = {
        "train": tuple(a[train_idx] for a in raw["train"]),
        "val": tuple(a[val_idx] for a in raw["train"]),
        "test": tuple(a[test_idx] for a in raw["test"]),
    }
    shift, scale = scalar_stats(splits["train"][0])
    return Generated(
        splits=splits,
        input_kind="continuous",
        num_classes=10,
        output_kind="classification",
        x_shift=shift,
        x_scale=scale,
    )
