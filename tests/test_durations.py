"""One reading of a span written as text (foxhunt/durations.py): a backtest's fold lengths and a stream's `max_gap`
agree on every text both take, and each refuses, in one line naming its flag, the units that mean nothing or two
things where it reads them."""

from __future__ import annotations

import pytest

from foxhunt.api.gaps import parse_gap
from foxhunt.backtest.config import Length, parse_length
from foxhunt.errors import InputError

S = 10**9


@pytest.mark.parametrize(("text", "ns"), [("45s", 45 * S), ("90min", 5_400 * S), ("36h", 36 * 3_600 * S),
                                          ("3d", 3 * 86_400 * S), ("2w", 14 * 86_400 * S), (" 4 w ", 28 * 86_400 * S)])
def test_both_read_a_fixed_span_alike(text, ns):
    assert parse_gap(text) == ns
    assert -parse_length(text, "--test-length").back(0) == ns


@pytest.mark.parametrize("text", ["soon", "3 weeks", "-2d", "0d", "1", "d", "2x"])
def test_both_refuse_what_is_not_a_span(text):
    with pytest.raises(InputError, match="max_gap") as gap:
        parse_gap(text)
    with pytest.raises(InputError, match="--val-length") as length:
        parse_length(text, "--val-length")
    assert "\n" not in str(gap.value) + str(length.value)
    assert gap.value.exit_code == length.value.exit_code == 2


@pytest.mark.parametrize(("text", "length"), [("3mo", Length(3, "mo")), ("1y", Length(1, "y"))])
def test_calendar_spans_are_fold_lengths_not_gaps(text, length):
    assert parse_length(text, "--test-length") == length
    with pytest.raises(InputError, match=r"^max_gap '.+' is not a fixed duration .*write days or weeks, e\.g\. '30d'$"):
        parse_gap(text)


def test_m_is_minutes_in_a_gap_and_ambiguous_in_a_fold_length():
    assert parse_gap("90m") == 5_400 * S
    with pytest.raises(InputError, match=r"^--test-length '6m' is ambiguous; write 6min for minutes or 6mo for months$"):
        parse_length("6m", "--test-length")


def test_a_fold_length_is_a_whole_count_a_gap_may_be_fractional():
    assert parse_gap("1.5h") == 5_400 * S
    with pytest.raises(InputError, match="--test-length '1.5h' is not a length; write a positive whole count"):
        parse_length("1.5h", "--test-length")
