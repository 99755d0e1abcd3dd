"""ablate.metrics: which way a metric column is better, as the accuracy report words it."""

from __future__ import annotations

import pytest

from ablate import metrics


@pytest.mark.parametrize(("column", "better_up"), [
    ("test_accuracy", True), ("val_accuracy", True), ("test_loss", False), ("val_loss", False),
    ("test_bpc", False), ("test_macro_f1", True),  # the example package's plug-in: higher is better
])
def test_which_way_a_metric_is_better(column: str, better_up: bool) -> None:
    assert metrics.higher_is_better(column) is better_up


def test_a_plugin_metric_declares_lower_is_better(monkeypatch: pytest.MonkeyPatch) -> None:
    def error_rate(logits, targets) -> float:  # pragma: no cover - never called
        return 0.0

    error_rate.higher_is_better = False  # type: ignore[attr-defined]

    class Entry:
        name = "error_rate"

        def load(self):
            return error_rate

    monkeypatch.setattr(metrics.plugins, "installed_of", lambda kind: [Entry()] if kind == "metric" else [])
    assert metrics.higher_is_better("test_error_rate") is False
    assert metrics.higher_is_better("test_accuracy") is True
