"""What a task hands to training: ``TaskInfo``, ``TaskData``, and the numpy-level ``Generated``.

Builders produce ``Generated`` (numpy arrays in compact dtypes, kept as they are in the cache);
``ablate.tasks.load_task`` turns it into ``TaskData`` (torch tensors in the contract's dtypes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np

from ablate.tasks.progress_bar import Reporter

if TYPE_CHECKING:
    import torch

SPLITS = ("train", "val", "test")
IGNORE = -100
"""Per-step targets equal to this are not scored."""
PAD = 0
"""Token id reserved for padding in every token task."""

InputKind = Literal["tokens", "continuous"]
OutputKind = Literal["classification", "per_step"]
Metric = Literal["accuracy", "bpc"]


@dataclass(frozen=True)
class TaskInfo:
    """What a model and a training loop need to know about a task."""

    name: str
    input_kind: InputKind
    vocab_size: int | None
    """Token ids are in [0, vocab_size), 0 is padding; None for continuous inputs."""
    input_dim: int
    """Features per step (1 for tokens, pixels or audio)."""
    num_classes: int
    """Size of the output layer: classes, or the vocabulary for per-step prediction."""
    output_kind: OutputKind
    metric: Metric
    chance: float
    """The metric a constant predictor reaches on the test split (majority rate; unigram bpc)."""
    seq_len: int
    data_version: str


@dataclass
class TaskData:
    info: TaskInfo
    train: tuple[torch.Tensor, torch.Tensor]
    val: tuple[torch.Tensor, torch.Tensor]
    test: tuple[torch.Tensor, torch.Tensor]


@dataclass(frozen=True)
class BuildContext:
    """What a builder gets besides its parameters."""

    reporter: Reporter
    """Progress: ``reporter.stage(description, total)``, then ``reporter.advance(n)``."""
    cache_dir: Path
    """The task cache's root; builders keep downloads under ``cache_dir / "downloads"``."""


@dataclass
class Generated:
    """A builder's output: arrays per split and what ``TaskInfo`` needs beyond the derivable.

    Continuous inputs may be stored compactly (uint8, int16) with ``x_shift``/``x_scale``:
    the float input is ``(x - x_shift) / x_scale``, scalars or one value per feature.
    """

    splits: dict[str, tuple[np.ndarray, np.ndarray]]
    input_kind: InputKind
    num_classes: int
    output_kind: OutputKind
    vocab_size: int | None = None
    input_dim: int = 1
    metric: Metric = "accuracy"
    x_shift: float | list[float] = 0.0
    x_scale: float | list[float] = 1.0
    extra: dict[str, object] = field(default_factory=dict)


def chance_level(gen: Generated) -> float:
    """The metric of the best constant predictor, measured on the test split.

    Accuracy: the rate of the most frequent test target (conservative: no constant predictor
    does better). Bits per character: the cross-entropy of the train unigram (add-one) on test.
    """
    y_test = gen.splits["test"][1].reshape(-1).astype(np.int64)
    y_test = y_test[y_test != IGNORE]
    if gen.metric == "bpc":
        y_train = gen.splits["train"][1].reshape(-1).astype(np.int64)
        counts = np.bincount(y_train[y_train != IGNORE], minlength=gen.num_classes) + 1.0
        logp = np.log2(counts / counts.sum())
        return float(-logp[y_test].mean())
    return float(np.bincount(y_test).max() / len(y_test))


def pad_sequences(rows: list[np.ndarray], fill: int = PAD, length: int | None = None) -> np.ndarray:
    """Right-pad 1-D integer arrays to one length in the smallest fitting integer dtype."""
    length = max(len(r) for r in rows) if length is None else length
    top = max(int(r.max()) for r in rows if len(r))
    dtype = np.uint8 if top < 256 and fill >= 0 else np.int16 if top < 32768 else np.int32
    out = np.full((len(rows), length), fill, dtype=dtype)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


def token_dtype(vocab_size: int) -> type[np.integer]:
    """The smallest integer dtype holding ids below ``vocab_size``."""
    return np.uint8 if vocab_size <= 256 else np.int16 if vocab_size <= 32768 else np.int32


def target_dtype(num_classes: int) -> type[np.integer]:
    """The smallest integer dtype holding classes below ``num_classes`` and ``IGNORE``."""
    return np.int16 if num_classes <= 32768 else np.int32
