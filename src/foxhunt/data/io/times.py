"""A time column of any file foxhunt reads (bars, --covariates, --events) as UTC nanoseconds: one parser for all.

Text is read by its own shape (ISO 8601, with or without a UTC offset; epoch counts; YYYYMMDD), or by `date_format`
(`--date-format`, a strftime format such as `%m/%d/%Y %H:%M`) when the user gives one. Two shapes are refused rather
than guessed, each in one line that says what is wrong and what to pass:
- dates that put the day and the month side by side (`03/05/2015`, `05.03.2015`, `03-05-2015`): 3 May in Europe,
  March 5 in the US. The parser polars would use takes the first value's reading for the whole column, so a
  month-first file whose first rows have a day of 12 or less loads shifted by months without a word. The message
  suggests the format, and says which order the data show where a value above 12 shows it.
- a column mixing times with a UTC offset and times without one: the naive ones would need --timezone and the
  others not, which is no file's intent.
Naive times are wall-clock times in `timezone`; a time that does not exist there (the hour skipped when daylight
saving starts) stops naming the row.
"""

from __future__ import annotations

import datetime as dt
import re
from calendar import month_name
from pathlib import Path

import polars as pl

from foxhunt.errors import InputError

OFFSET = r"(Z|[+-]\d\d:?\d\d)$"  # a UTC offset (or Z) ending a time
# Day and month side by side, either first, with a 2- or 4-digit year after them: (first, separator, second, year,
# the rest: a time, say)
DAY_MONTH = re.compile(r"^(\d{1,2})([/.-])(\d{1,2})[/.-](\d{4}|\d{2})(.*)$")
# The time after a date, as a format (the suggestion of --date-format; anything else gets none)
TIME_FORMATS = (
    (re.compile(r"^([ T])\d{1,2}:\d\d$"), "%H:%M"),
    (re.compile(r"^([ T])\d{1,2}:\d\d:\d\d$"), "%H:%M:%S"),
    (re.compile(r"^([ T])\d{1,2}:\d\d:\d\d\.\d+$"), "%H:%M:%S%.f"),
)
SAMPLE = dt.datetime(2015, 3, 5, 10, 0, 7, 123000, tzinfo=dt.UTC)  # a day and a month that cannot be swapped


def check_date_format(fmt: str) -> None:
    """Refuse a --date-format that cannot read back the dates it writes (no date in it, unknown codes)."""
    sample = pl.Series([SAMPLE])
    try:
        written = sample.dt.strftime(fmt.replace("%#z", "%z"))  # %#z only parses (Z, +hh:mm or +hhmm)
        back = written.str.to_datetime(fmt, time_unit="ns", strict=False)
        ok = back.dt.date()[0] == SAMPLE.date()
    except Exception:  # polars raises several types for codes it does not know
        ok = False
    if not ok:
        raise InputError(f"--date-format {fmt!r} cannot read dates; give strftime codes for the year, month and day, "
                         "e.g. %m/%d/%Y or %d.%m.%Y %H:%M")


def text_times(text: pl.Series, path: Path, col: str, timezone: str, date_format: str | None = None
               ) -> tuple[pl.Series, str]:
    """Stripped text times -> (Datetime("ns", "UTC") with nulls where the text is null, "naive" | "aware" | "epoch"
    | "date"): by `date_format` when given, else by their own shape (see the module doc). Naive times are wall-clock
    times in `timezone`. Raises InputError naming the file, column and row (see the module doc)."""
    if date_format is not None:
        out, kind = _formatted(text, date_format, path, col)
    elif text.str.contains(r"^\d+$").all():
        return from_epoch(text.cast(pl.Int64))
    else:
        out, kind = _iso(text, path, col)
    return (localize(out, text, timezone, path, col) if kind == "naive" else out), kind


def _iso(text: pl.Series, path: Path, col: str) -> tuple[pl.Series, str]:
    """Text in a shape of its own: ISO 8601, with a UTC offset on every time or on none."""
    _refuse_day_month(text, path, col)
    offset = text.str.contains(OFFSET)  # (N,) null where the text is
    aware = bool(offset.any())
    if aware:
        _refuse_mixed_offsets(text, offset, path, col)
    try:
        out = text.str.to_datetime(time_unit="ns", time_zone="UTC" if aware else None, strict=False)
    except Exception:
        out = pl.Series([None] * len(text), dtype=pl.Datetime("ns", "UTC" if aware else None))
    raise_bad_time(out.is_null() & text.is_not_null(), text, path, col)
    return out, "aware" if aware else "naive"


def _formatted(text: pl.Series, fmt: str, path: Path, col: str) -> tuple[pl.Series, str]:
    """Text read by --date-format; aware when the format reads an offset (%z)."""
    try:
        out = text.str.to_datetime(fmt, time_unit="ns", strict=False)
    except Exception:  # a format polars cannot use: named the same way as a value it cannot read
        out = pl.Series([None] * len(text), dtype=pl.Datetime("ns"))
    raise_bad_time(out.is_null() & text.is_not_null(), text, path, col, f"with --date-format {fmt!r}")
    if out.dtype.time_zone is not None:  # type: ignore[union-attr]
        return out.dt.convert_time_zone("UTC"), "aware"
    return out, "naive"


def _refuse_day_month(text: pl.Series, path: Path, col: str) -> None:
    """Stop on dates with the day and the month side by side (see the module doc). Looks at the first value only
    unless it is such a date: a column of one shape otherwise either parses or fails naming its row."""
    first_at = int(text.is_not_null().arg_max()) if text.is_not_null().any() else None
    first = text[first_at] if first_at is not None else None
    match = DAY_MONTH.match(first) if first else None
    if match is None:
        return
    parts = text.str.extract_groups(DAY_MONTH.pattern)  # read only on the way to the error
    a = parts.struct.field("1").cast(pl.Int32, strict=False)
    b = parts.struct.field("3").cast(pl.Int32, strict=False)
    day_first, month_first = _first_where(a > 12, text), _first_where(b > 12, text)
    fmt_day, fmt_month = _suggested(match, day_first=True), _suggested(match, day_first=False)
    iso = "or write ISO 8601 dates (YYYY-MM-DD)"
    lead = f"{path}: column {col!r} row {first_at + 1}: {first!r}"
    if day_first and month_first:
        raise InputError(f"{lead} puts the day and the month side by side, and row {day_first[0]} ({day_first[1]!r})"
                         f" has the day first but row {month_first[0]} ({month_first[1]!r}) the month; fix the file,"
                         f" then pass --date-format, {iso}")
    if day_first or month_first:
        (row, seen), fmt, which = (day_first, fmt_day, "day") if day_first else (month_first, fmt_month, "month")
        raise InputError(f"{lead} puts the day and the month side by side, read only with --date-format: pass "
                         f"--date-format {fmt!r} (row {row}, {seen!r}, has the {which} first), {iso}")
    swapped = _first_where(a != b, text)  # the first date that the two orders read as two days
    if swapped is None:
        return  # every date is like 03/03/2015: both orders read the same days
    row, seen = swapped
    x, y = (int(v) for v in DAY_MONTH.match(seen).group(1, 3))  # type: ignore[union-attr]
    raise InputError(f"{path}: column {col!r} row {row}: {seen!r} could be {x} {month_name[y]} or {month_name[x]} "
                     f"{y}: pass --date-format {fmt_day!r} (day first) or {fmt_month!r} (month first), {iso}")


def _suggested(match: re.Match, day_first: bool) -> str:
    """The --date-format of a date like `match`'s (its separator, year digits and time part)."""
    sep, year, rest = match.group(2), match.group(4), match.group(5)
    date = sep.join(("%d", "%m") if day_first else ("%m", "%d")) + sep + ("%Y" if len(year) == 4 else "%y")
    offset = re.search(OFFSET, rest)
    clock = rest[: offset.start()] if offset else rest
    time = next((m.group(1) + f for r, f in TIME_FORMATS if (m := r.match(clock))), "" if not clock else None)
    if time is None:
        return date + " ..."  # a time of another shape: the user completes it
    return date + time + ("" if offset is None else "%#z")  # %#z reads Z as well as +hh:mm and +hhmm


def _first_where(mask: pl.Series, values: pl.Series) -> tuple[int, str] | None:
    """(1-based row, value) of the first row where `mask` holds; None where it holds nowhere."""
    hit = mask.fill_null(False)
    if not hit.any():
        return None
    i = int(hit.arg_max())
    return i + 1, values[i]


def _refuse_mixed_offsets(text: pl.Series, offset: pl.Series, path: Path, col: str) -> None:
    """Stop on a column where some times carry a UTC offset and others none, naming the first row of each kind."""
    naive = ~offset & (text != "")
    if not naive.fill_null(False).any():
        return
    i, j = int(offset.fill_null(False).arg_max()), int(naive.fill_null(False).arg_max())
    raise InputError(
        f"{path}: column {col!r} mixes times with a UTC offset (row {i + 1}: {text[i]!r}) and times without one (row"
        f" {j + 1}: {text[j]!r}); write every time with its offset, or none (naive times are read in --timezone)"
    )


def localize(naive: pl.Series, shown: pl.Series, timezone: str, path: Path, col: str) -> pl.Series:
    """Naive wall-clock times in `timezone` -> UTC; the earlier of two repeated (DST fall-back) times is taken."""
    if timezone == "UTC":
        return naive.dt.replace_time_zone("UTC")
    local = naive.dt.replace_time_zone(timezone, ambiguous="earliest", non_existent="null")
    gap = local.is_null() & naive.is_not_null()
    if gap.any():
        i = int(gap.arg_max())
        raise InputError(
            f"{path}: column {col!r} row {i + 1}: {shown.cast(pl.Utf8, strict=False)[i]} does not exist in {timezone}"
            " (the hour skipped when daylight saving starts); check --timezone"
        )
    return local.dt.convert_time_zone("UTC")


def from_epoch(s: pl.Series) -> tuple[pl.Series, str]:
    """Integer epoch counts; the unit follows from the magnitude (a 2020s date is ~1.6e9 s, ~1.6e18 ns).

    Eight-digit values (19000101 .. 29991231) are YYYYMMDD dates, as many vendor exports write them: as epoch seconds
    they would all fall in 1970.
    """
    s = s.cast(pl.Int64, strict=False)  # uint64 past int64 (UNDEF_TIMESTAMP) becomes null -> error
    if s.min() is not None and 19_000_101 <= s.min() and s.max() <= 29_991_231:
        return s.cast(pl.Utf8).str.to_datetime("%Y%m%d", time_unit="ns", time_zone="UTC", strict=False), "date"
    mag = s.abs().median() or 0
    unit = "ns" if mag > 1e17 else "us" if mag > 1e14 else "ms" if mag > 1e11 else "s"
    return pl.from_epoch(s, time_unit=unit).dt.cast_time_unit("ns").dt.replace_time_zone("UTC"), "epoch"


def raise_bad_time(bad: pl.Series, shown: pl.Series, path: Path, col: str, how: str | None = None) -> None:
    """`how`: the --date-format the values were read with, for the message."""
    if bad.any():
        i = int(bad.arg_max())
        value = f"{path}: column {col!r} row {i + 1}: cannot parse timestamp {shown.cast(pl.Utf8, strict=False)[i]!r}"
        if how is not None:
            raise InputError(f"{value} {how}; check the format against the file (strftime codes)")
        raise InputError(f"{value}; use ISO 8601 (2024-03-08 14:30:00) or epoch nanoseconds, or pass --date-format")
