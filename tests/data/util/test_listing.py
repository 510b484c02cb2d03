"""A long list in a message: the first few named, then how many more (data/util/listing.py)."""

from __future__ import annotations

from foxhunt.data.util.listing import listing


def test_up_to_most_names_then_how_many_more() -> None:
    assert listing(["a", "b"], 3) == "a, b"
    assert listing(["a", "b", "c"], 3) == "a, b, c"
    assert listing(["a", "b", "c", "d", "e"], 3) == "a, b, c and 2 more"
    assert listing([1, 2], 1) == "1 and 1 more"
    assert listing([], 3) == "" and listing([], 3, "no value columns") == "no value columns"
