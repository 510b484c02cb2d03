"""How a message names a list that may be long: the first few, then how many more."""

from __future__ import annotations

from collections.abc import Sequence


def listing(items: Sequence[object], most: int, none: str = "") -> str:
    """Up to `most` of `items`, comma-separated, then "and K more" for the rest (`none` for no items): a warning or
    error that names series, columns or keys stays one readable line however many there are."""
    if not items:
        return none
    shown = ", ".join(map(str, items[:most]))
    return shown + (f" and {len(items) - most} more" if len(items) > most else "")
