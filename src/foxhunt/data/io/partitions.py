"""Hive partition keys in file paths and the time bounds (`--since`, `--until`) that prune partitions before reading.

A hive layout names a partition in each folder: `symbol=ESH4/date=2024-03-07/part-0.parquet`. The keys are read from
the folders between the directory the user named and the file. A `date` key (also `day`, `trade_date`; ISO
`2024-03-07` or `20240307`) lets a bounded read skip whole partitions without opening their files: a partition is
kept when its date lies within the bounds widened by one day on each side, because a trade date's session starts the
evening before (CME: 17:00 Chicago) and a UTC-dated file may hold its evening's bars. The exact bound is then applied
to every bar's timestamp.
"""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from foxhunt.errors import InputError

DATE_KEYS = ("date", "day", "trade_date")
MARGIN = dt.timedelta(days=1)  # a partition's date vs the UTC times of its bars
NAIVE_MARGIN = dt.timedelta(hours=2)  # a naive wall-clock time vs UTC, across a daylight-saving change
# A zoned or naive time vs the label of its bar: a daily bar is labelled by its local date (dates.py), up to the
# zone's offset (14 h) before or a day and a half (a local evening west of UTC) after its time
LABEL_MARGIN = dt.timedelta(days=2)


@dataclass(frozen=True)
class TimeBounds:
    """Bars with since <= ts < until are read (UTC, either end open when None)."""

    since: dt.datetime | None = None
    until: dt.datetime | None = None

    @staticmethod
    def parse(since: str | None, until: str | None) -> TimeBounds:
        """ISO dates or times (UTC when naive) -> TimeBounds; InputError naming --since / --until when bad."""
        lo, hi = parse_time(since, "--since"), parse_time(until, "--until")
        if lo is not None and hi is not None and lo >= hi:
            raise InputError(f"--since {since} must come before --until {until}; widen the range")
        return TimeBounds(lo, hi)

    @property
    def active(self) -> bool:
        return self.since is not None or self.until is not None

    def keeps_day(self, day: dt.date) -> bool:
        """Whether a partition dated `day` may hold bars within the bounds (one day of margin each side)."""
        if self.since is not None and day < self.since.date() - MARGIN:
            return False
        return self.until is None or day <= self.until.date() + MARGIN

    def mask(self, col: str = "ts") -> pl.Expr:
        """The exact bound on a Datetime("ns", "UTC") column."""
        cond = pl.lit(True)
        if self.since is not None:
            cond &= pl.col(col) >= self.since
        if self.until is not None:
            cond &= pl.col(col) < self.until
        return cond

    def pushdown(self, dtype: pl.DataType, col: str, timezone: str) -> pl.Expr | None:
        """The bound on a file's own time column, in its own type, so that polars can check it against row-group
        statistics before decoding any page: exact for UTC columns, two hours wider for naive ones in UTC (where a
        daylight-saving change of `timezone` moves an hour), two days wider for other zones (a daily bar's label is
        its local date: dates.py) and a day wider for dates. None for text and epoch counts, which are bounded after
        parsing only."""
        if isinstance(dtype, pl.Datetime) and dtype.time_zone is not None:
            zone = _zone(dtype.time_zone)
            margin = dt.timedelta(0) if dtype.time_zone == "UTC" else LABEL_MARGIN

            def as_column(t: dt.datetime) -> dt.datetime | dt.date:
                return t.astimezone(zone)
        elif isinstance(dtype, pl.Datetime):
            zone, margin = _zone(timezone), NAIVE_MARGIN if timezone == "UTC" else LABEL_MARGIN

            def as_column(t: dt.datetime) -> dt.datetime | dt.date:
                return t.astimezone(zone).replace(tzinfo=None)
        elif dtype == pl.Date:
            margin = MARGIN

            def as_column(t: dt.datetime) -> dt.datetime | dt.date:
                return t.date()
        else:
            return None
        cond = pl.lit(True)
        if self.since is not None:
            cond &= pl.col(col) >= pl.lit(as_column(self.since - margin))
        if self.until is not None:
            cond &= pl.col(col) < pl.lit(as_column(self.until + margin))
        return cond


def parse_time(text: str | None, flag: str) -> dt.datetime | None:
    """An ISO date or time -> aware UTC datetime (naive means UTC); InputError naming `flag` when it is not one."""
    if text is None or str(text).strip() == "":
        return None
    try:
        t = dt.datetime.fromisoformat(str(text).strip())
    except ValueError:
        raise InputError(f"{flag} {text!r} is not a date or time; use ISO 8601 like 2024-03-07 or 2024-03-07T14:30") from None
    return t.replace(tzinfo=dt.UTC) if t.tzinfo is None else t.astimezone(dt.UTC)


def hive_keys(path: Path, root: Path) -> dict[str, str]:
    """The key=value folder names between `root` and the file `path` ({} outside a hive layout)."""
    top, full = str(root).rstrip(os.sep) + os.sep, str(path)
    if not full.startswith(top):
        return {}
    parts = full[len(top):].split(os.sep)[:-1]  # string work: thousands of files, no Path objects
    return {k: v for k, _, v in (p.partition("=") for p in parts if "=" in p) if k}


def partition_day(keys: dict[str, str]) -> dt.date | None:
    """The date a partition names (DATE_KEYS, ISO or YYYYMMDD); None without a parseable one."""
    for k, v in keys.items():
        if k.lower() in DATE_KEYS:
            for fmt in ("%Y-%m-%d", "%Y%m%d"):
                try:
                    return dt.datetime.strptime(v, fmt).date()
                except ValueError:
                    continue
    return None


def _zone(name: str) -> dt.tzinfo:
    from zoneinfo import ZoneInfo

    return ZoneInfo(name)
