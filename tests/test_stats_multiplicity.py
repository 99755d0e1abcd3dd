"""``ablate.stats.multiplicity.adjusted``: statsmodels' adjusted p-values, without a full garbage
collection on every call, and the collector left as it was found."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import numpy as np
import pytest
from statsmodels.stats.multitest import multipletests

from ablate.stats.multiplicity import adjusted


@pytest.mark.parametrize("method", ["holm", "bonferroni", "fdr_bh"])
def test_equal_to_statsmodels(method):
    rng = np.random.default_rng(0)
    for n in (1, 2, 7, 40):
        p = rng.uniform(0, 0.2, n)
        assert np.array_equal(adjusted(p, method), multipletests(p, method=method)[1])
    assert adjusted(np.array([])).size == 0


@pytest.fixture
def collector_off() -> Iterator[None]:
    """No automatic collection while the test runs (one between a test's garbage and the call
    would free what the test counts on finding)."""
    gc.disable()
    yield
    gc.enable()


def test_the_call_collects_nothing_it_did_not_allocate_and_leaves_no_freeze(collector_off):
    assert gc.get_freeze_count() == 0
    gc.collect()
    cycles = []
    for _ in range(1000):  # garbage a full collection would free
        a: list = []
        a.append(a)
        cycles.append(a)
    del cycles, a
    adjusted(np.array([0.01, 0.04, 0.03]))
    assert gc.get_freeze_count() == 0
    assert gc.collect() >= 1000  # still there for the next collection: the call did not walk them


def test_a_process_that_froze_its_objects_keeps_its_freeze_as_it_was(collector_off):
    """A worker froze its imports: the call neither undoes that nor freezes more (what exists at
    each call, garbage included, would otherwise stay for good)."""
    kept = [[] for _ in range(100)]
    gc.freeze()
    frozen = gc.get_freeze_count()
    assert frozen >= len(kept)
    young = [[] for _ in range(1000)]  # alive, tracked and not frozen: a freeze in the call would add them
    leftovers = []
    for _ in range(100):
        a: list = []
        a.append(a)
        leftovers.append(a)
    del leftovers, a
    adjusted(np.array([0.01, 0.04, 0.03]))
    after = gc.get_freeze_count()
    # Frozen objects that die by reference count leave the count (pytest's own, dozens, at times),
    # so not equality: an unfreeze would leave 0, a freeze would add the 1000 young lists and more.
    assert frozen // 2 < after <= frozen, (frozen, after)
    assert len(young) == 1000
    gc.unfreeze()
