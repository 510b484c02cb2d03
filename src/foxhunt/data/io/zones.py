"""Where the read stage's files say, by their own times, that their zone was lost: naive files beside files whose
times carry a zone, and naive intraday files whose bars keep a stock market's local hours.

Naive times are read in `--timezone`, UTC by default. Beside a file with a zone (or epoch counts, UTC by definition)
a naive file is most often one whose vendor dropped the zone, and read as UTC its bars sit hours away from the
others' (a New York-aware KO at 14:45 .. 21:00 UTC beside a naive PEP at 09:45 .. 16:00). Which zone it was written
in the files cannot say, so the mix is refused until `--timezone` says it (`check_zones`); with it, the naive files
are read in that zone and the others by their own, and an info line says so.

A naive intraday file alone cannot be refused: UTC is a fine zone to write in. But bars that sit exactly in a stock
market's local hours (09:30-16:00 for New York) while that market's zone is hours away from UTC are most likely local
times read as UTC; `warn_local_hours` says so in one line per group of such files, naming the zone to pass. The
market hours are a small table (`MARKETS`) of regular sessions: the futures sessions of bars/sessions.py run about 23
hours a day and could not tell local hours from UTC ones. Each file is read once (in a pieced prepare, by one chunk's
job), so each is named once.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass
from zoneinfo import ZoneInfo

import numpy as np
import polars as pl

from foxhunt.data.util.clock import INTRADAY_MAX_NS
from foxhunt.errors import InputError

log = logging.getLogger("foxhunt.data")

ABSOLUTE = ("aware", "epoch")  # kinds of times that name an instant without --timezone


@dataclass(frozen=True)
class Market:
    """A stock market's regular session, in minutes after local midnight (weekdays)."""

    name: str
    tz: str
    open_min: int
    close_min: int


MARKETS = (
    Market("XNYS", "America/New_York", 9 * 60 + 30, 16 * 60),
    Market("XTSE", "America/Toronto", 9 * 60 + 30, 16 * 60),
    Market("CME regular hours", "America/Chicago", 8 * 60 + 30, 15 * 60 + 15),
    Market("XLON", "Europe/London", 8 * 60, 16 * 60 + 30),
    Market("XETR", "Europe/Berlin", 9 * 60, 17 * 60 + 30),
    Market("XNSE", "Asia/Kolkata", 9 * 60 + 15, 15 * 60 + 30),
    Market("XSHG", "Asia/Shanghai", 9 * 60 + 30, 15 * 60),
    Market("XHKG", "Asia/Hong_Kong", 9 * 60 + 30, 16 * 60),
    Market("XTKS", "Asia/Tokyo", 9 * 60, 15 * 60 + 30),
    Market("XASX", "Australia/Sydney", 10 * 60, 16 * 60),
)
WEEKEND_MAX = 0.01  # a file with more of its bars on Saturday or Sunday is no stock market's
MIN_OFFSET_MIN = 60  # a market within an hour of UTC at the file's dates: reading its local times as UTC is close
PROFILE_ROWS = 1 << 20  # about this many bars, of whole days, make the files' profiles
MIN_DAYS = 3  # a file of fewer (sampled) days gets no warning
DAY_NS = 86_400 * 10**9
MIN_NS = 60 * 10**9


def check_zones(files: list[dict], timezone: str | None) -> None:
    """Refuse naive files beside files whose times carry a zone unless `timezone` (--timezone) says where the naive
    ones were written; with it, say in an info line that each kind is read its own way. `files`: the read stage's
    entries (path, timestamps)."""
    absolute = [f["path"] for f in files if f.get("timestamps") in ABSOLUTE]
    naive = [f["path"] for f in files if f.get("timestamps") == "naive"]
    if not absolute or not naive:
        return
    if timezone is not None:
        log.info("read the naive times of %s as %s; %s carries its own zone", _some(naive), timezone,
                 _some(absolute))
        return
    zone = _zone_of(absolute[0])
    guess = f"--timezone {zone}, the zone of {absolute[0]}'s times," if zone else "--timezone ZONE"
    raise InputError(
        f"{naive[0]} has naive times, read as UTC, but {absolute[0]} carries a time zone: read together, their bars"
        f" may sit hours apart; pass {guess} if the naive times were written there (--timezone UTC if they are UTC)"
    )


def _some(paths: list[str]) -> str:
    return paths[0] + (f" (and {len(paths) - 1} more files)" if len(paths) > 1 else "")


def _zone_of(path: str) -> str | None:
    """The zone of a parquet file's first zoned time column other than UTC; None for any other file."""
    try:
        schema = pl.read_parquet_schema(path)
    except Exception:  # a CSV, a DBN file: its offsets name no zone
        return None
    zones = [t.time_zone for t in schema.values() if isinstance(t, pl.Datetime) and t.time_zone]
    return next((z for z in zones if z != "UTC"), None)


def warn_local_hours(raw: pl.DataFrame, files: list[dict], spacings: list[int], timezone: str | None) -> None:
    """One warning per group of naive intraday files (read as UTC: `timezone` None) whose bars keep the local hours
    of markets hours away from UTC, naming the zones to pass as --timezone. `raw`: the read stage's frame (ts,
    file_idx); `spacings` (F,): each file's median bar spacing in ns (0: not measured).

    A file's day is the median over its days of the first and the last bar's minute (UTC as read), from whole days
    (every k-th day of a large read): a stray bar moves only its own day, an early close none."""
    if timezone is not None:
        return
    naive = [i for i, f in enumerate(files) if f.get("timestamps") == "naive" and 0 < spacings[i] < INTRADAY_MAX_NS]
    if not naive or raw.height == 0:
        return
    ts = raw.get_column("ts").dt.epoch("ns").to_numpy()  # (N,)
    day = ts // DAY_NS  # (N,) the UTC day as read; 1970-01-01 was a Thursday
    every = max(1, raw.height // PROFILE_ROWS)  # every k-th day: whole days, about PROFILE_ROWS bars
    keep = (day % every == 0) & np.isin(raw.get_column("file_idx").to_numpy(), naive)  # (N,)
    days = (
        pl.DataFrame({"f": raw.get_column("file_idx").to_numpy()[keep], "day": day[keep],
                      "minute": (ts[keep] % DAY_NS) // MIN_NS})
        .group_by("f", "day")
        .agg(first=pl.col("minute").min(), last=pl.col("minute").max())
        .group_by("f")
        .agg(days=pl.len(), first=pl.col("first").median(), last=pl.col("last").median(),
             weekend=((pl.col("day") + 3) % 7 >= 5).mean(), day=pl.col("day").median())
        .sort("f")
    )
    groups: dict[tuple, list[str]] = {}
    for i, n, first, last, weekend, middle in days.iter_rows():
        if n < MIN_DAYS or weekend > WEEKEND_MAX:
            continue
        step = max(1, spacings[i] // MIN_NS)
        at = dt.datetime.fromtimestamp(int(middle) * DAY_NS // 10**9, dt.UTC)
        matched = tuple(m for m in MARKETS if _keeps_hours(m, int(first), int(last), step, at))
        if matched:
            groups.setdefault((matched, int(first), int(last)), []).append(files[i]["path"])
    for (matched, first, last), paths in groups.items():
        hours = {f"{_clock(m.open_min)}-{_clock(m.close_min)}" for m in matched}
        names = _either([f"{m.name} ({m.tz})" if len(hours) == 1 else
                         f"{m.name} ({_clock(m.open_min)}-{_clock(m.close_min)} {m.tz})" for m in matched])
        zones = _either(list(dict.fromkeys(m.tz for m in matched)))
        log.warning("%s: its naive times, read as UTC, run %s .. %s on weekdays, the hours of %s in local time%s; "
                    "if they are local times pass --timezone %s (--timezone UTC keeps them as UTC)", _some(paths),
                    _clock(first), _clock(last), names, f" ({hours.pop()})" if len(hours) == 1 else "", zones)


def _keeps_hours(m: Market, first: int, last: int, step: int, at: dt.datetime) -> bool:
    """Whether a day's bars from minute `first` to `last` (bars `step` minutes long) open and close with `m`'s local
    session, stamped at their start or their end, while `m`'s zone is MIN_OFFSET_MIN or more from UTC `at` then."""
    offset = at.astimezone(ZoneInfo(m.tz)).utcoffset()
    if offset is None or abs(offset.total_seconds()) < MIN_OFFSET_MIN * 60:
        return False
    opens = m.open_min - 1 <= first <= m.open_min + step + 1
    return opens and m.close_min - step - 1 <= last <= m.close_min + 1


def _clock(minute: int) -> str:
    return f"{int(minute) // 60:02d}:{int(minute) % 60:02d}"


def _either(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " or " + items[-1]

