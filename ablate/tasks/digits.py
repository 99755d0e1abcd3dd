"""scikit-learn's 8×8 handwritten digits (1,797 images) as 64-step pixel sequences.

Pixels (0 … 16) are read in row-major order, one feature per step, standardised with the
training split's mean and standard deviation. The split is a seeded random partition.
"""

from __future__ import annotations

import numpy as np

from ablate.tasks.data import BuildContext, Generated
from ablate.tasks.realdata import FractionSplitParams, fraction_split, scalar_stats
from ablate.tasks.registration import register_task


class DigitsParams(FractionSplitParams):
    pass


@register_task("digits", DigitsParams, version=1)
def build(p: DigitsParams, ctx: BuildContext) -> Generated:
    from sklearn.datasets import load_digits  # heavy import, only when generating

    digits = load_digits()
    x = digits.data.astype(np.uint8)  # (1797, 64), values 0 … 16
    y = digits.target.astype(np.int16)
    idx = fraction_split(len(x), p.seed, p.val_fraction, p.test_fraction)
    shift, scale = scalar_stats(x[idx["train"]])
    return Generated(
        splits={s: (x[i], y[i]) for s, i in idx.items()},
        input_kind="continuous",
        num_classes=10,
        output_kind="classification",
        x_shift=shift,
        x_scale=scale,
    )
