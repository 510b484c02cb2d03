"""metrics.jsonl as tests read it. A model with an anchor (the default for a returns target) is validated untrained
before training, as epoch 0 (train_loss None: it forecasts its anchor); the epochs that train follow from 1."""

from __future__ import annotations

from typing import Any


def trained(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records of the epochs that trained (and any event record), without the anchor's epoch 0."""
    anchor = [r for r in records if r.get("epoch") == 0 and "event" not in r]
    assert all(r["train_loss"] is None for r in anchor), anchor  # epoch 0 trains nothing
    return [r for r in records if r not in anchor]
