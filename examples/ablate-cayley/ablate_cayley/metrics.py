"""A metric: macro-averaged F1 over the classes, computed on the test set after training
(``train.metrics: [macro_f1]``; the trials frame's ``test_macro_f1``). Accuracy hides a model that
always answers the majority class; macro F1 does not."""

from __future__ import annotations

import torch
from sklearn.metrics import f1_score


def macro_f1(logits: torch.Tensor, targets: torch.Tensor) -> float:
    """Macro F1 of the arg-max predictions (``logits`` (M, C), ``targets`` (M,))."""
    preds = logits.argmax(-1).cpu().numpy()
    return float(f1_score(targets.cpu().numpy(), preds, average="macro", labels=range(logits.shape[-1]),
                          zero_division=0.0))
