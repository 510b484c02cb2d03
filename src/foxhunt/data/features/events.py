"""Scheduled events (FOMC decisions, CPI releases, contract expiries) as known-future inputs (`--events PATH`).

Volatility around a scheduled release is the most forecastable thing in a futures bar series, but only for a model
that knows the schedule: from the bars alone, the minute before a CPI print looks like any other. An events file
lists (time, name) rows; each distinct name becomes three known inputs per bar (`event_columns`):

    {name}_until   bars until its next occurrence, capped and scaled to [0, 1] (0 on the bar that holds it)
    {name}_since   bars since its last occurrence, capped and scaled (1 when there was none)
    {name}_in_bar  1 when an occurrence falls inside the bar

Each value is a function of the bar's start time and the calendar alone, so it can be computed at the forecast
grid's future times. A file with a `symbol` (or `root`) column keys its rows: a key equal to a series name applies to
the whole series, one equal to a contract to that contract's bars (covariates.asof_join's rule, `row_keys`), and a
row with an empty key to every series. A series then reads the calendar of its key (`EventCalendar.for_key`: the
unkeyed rows and its key's); where no key applies, a name only keyed rows hold reads as no event (until and since
at the cap, in_bar 0). The forecast steps of an origin read its key: the contract it holds at the origin. The
calendar, keys included, travels in model.json (`EventCalendar.to_dict`), so a saved model forecasts without the
file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from foxhunt.data.io.normalise import TIME_CANDIDATES, match_column, parse_time, symbol_column, time_column
from foxhunt.data.io.scan import read_error
from foxhunt.data.util.listing import listing
from foxhunt.errors import InputError

NAME_CANDIDATES = ("name", "event")
EXTRA_TIME_CANDIDATE = "ts"  # what foxhunt's own events files call it (`foxhunt sample --announcements`)
SUFFIXES = ("until", "since", "in_bar")


@dataclass(frozen=True, eq=False)
class EventCalendar:
    """Distinct event names and, per name, when it happens. Times are sorted distinct int64 ns UTC, read-only.

    Equality compares names, keys and times, not `source`: the same calendar read from two paths is the same calendar.
    """

    source: str  # the path, for messages
    names: tuple[str, ...]  # distinct slugged event names, sorted (of the unkeyed and the keyed rows)
    times: tuple[np.ndarray, ...]  # per name: (n_k,) sorted distinct int64 ns UTC of its unkeyed rows
    keys: tuple[str, ...] = ()  # distinct keys (series or contract symbols), sorted
    keyed: tuple[tuple[np.ndarray, ...], ...] = ()  # per key, per name: (n_jk,) the times of that key's rows

    def __post_init__(self) -> None:
        if len(self.names) != len(self.times) or list(self.names) != sorted(set(self.names)):
            raise ValueError("EventCalendar needs sorted distinct names, one times array per name")
        if list(self.keys) != sorted(set(self.keys)) or len(self.keyed) != len(self.keys):
            raise ValueError("EventCalendar needs sorted distinct keys, one times array per key and name")
        object.__setattr__(self, "times", _frozen(self.times))
        object.__setattr__(self, "keyed", tuple(_frozen(per, len(self.names)) for per in self.keyed))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, EventCalendar):
            return NotImplemented
        return (self.names, self.keys) == (other.names, other.keys) and all(
            np.array_equal(a, b) for a, b in zip((*self.times, *(t for per in self.keyed for t in per)),
                                                 (*other.times, *(t for per in other.keyed for t in per)), strict=True))

    __hash__ = None  # type: ignore[assignment]  # holds arrays

    def for_key(self, key: str | None) -> EventCalendar:
        """The unkeyed calendar a series under `key` reads (None: no key applies): the same names, each with its
        unkeyed times and the key's."""
        if key is None or not self.keys:
            return EventCalendar(self.source, self.names, self.times)
        per = self.keyed[self.keys.index(key)]
        return EventCalendar(self.source, self.names, tuple(np.union1d(a, b) for a, b in zip(self.times, per,
                                                                                              strict=True)))

    def to_dict(self) -> dict:
        """Plain JSON values (ints, exact to the nanosecond), saved in model.json so a model forecasts without the
        file: {"source", "events": {name: unkeyed times}, and with keys "keyed": {key: {name: times}}}."""
        out = {"source": self.source, "events": {n: _ints(t) for n, t in zip(self.names, self.times, strict=True)}}
        if self.keys:
            out["keyed"] = {k: {n: _ints(t) for n, t in zip(self.names, per, strict=True) if len(t)}
                            for k, per in zip(self.keys, self.keyed, strict=True)}
        return out

    @staticmethod
    def from_dict(d: dict) -> EventCalendar:
        """The inverse of `to_dict`."""
        events, keyed = d["events"], d.get("keyed") or {}
        names, keys = tuple(sorted(events)), tuple(sorted(keyed))
        return EventCalendar(str(d["source"]), names, tuple(np.array(events[n], dtype=np.int64) for n in names), keys,
                             tuple(tuple(np.array(keyed[k].get(n, ()), dtype=np.int64) for n in names) for k in keys))


def _frozen(times: tuple[np.ndarray, ...], count: int | None = None) -> tuple[np.ndarray, ...]:
    """Read-only int64 copies of `times` (the caller's arrays stay theirs); ValueError unless each is 1-d, sorted
    and distinct (and, with `count`, there are that many)."""
    if count is not None and len(times) != count:
        raise ValueError("EventCalendar needs one times array per name for each key")
    out = []
    for t in times:
        t = np.array(t, dtype=np.int64)
        if t.ndim != 1 or (t.size > 1 and not np.all(np.diff(t) > 0)):
            raise ValueError("EventCalendar times must be 1-d, sorted and distinct")
        t.setflags(write=False)
        out.append(t)
    return tuple(out)


def _ints(t: np.ndarray) -> list[int]:
    return [int(v) for v in t]


def read_events(path: str, timezone: str | None = None, date_format: str | None = None) -> EventCalendar:
    """An events file (parquet, or CSV by its `.csv` suffix): a time column and a `name` (or `event`) column.

    Times are found and parsed as bar files' are (ts_event, timestamp, datetime, date, time, then `ts`; naive
    times are wall-clock in `timezone`, default UTC; text is ISO 8601 or read by `date_format`, --date-format).
    Names are slugged to [a-z0-9_] ("FOMC decision" -> fomc_decision) so that they make column names. A (name, time)
    row given twice is kept once: a calendar exported twice is still one calendar. Every problem is an InputError naming the file, column and row.
    """
    p = Path(path)
    frame = _read(p)
    names = frame.columns
    shown = listing(names, 12)
    time_col = time_column(names) or match_column(names, EXTRA_TIME_CANDIDATE)
    if time_col is None:
        looked = ", ".join((*TIME_CANDIDATES, EXTRA_TIME_CANDIDATE))
        raise InputError(f"{p}: no time column (looked for {looked}); found columns: {shown}; rename it to ts")
    name_col = next((m for c in NAME_CANDIDATES if (m := match_column(names, c)) is not None), None)
    if name_col is None:
        raise InputError(
            f"{p}: no event name column (looked for {', '.join(NAME_CANDIDATES)}); found columns: {shown};"
            " add a `name` column saying which event each row is"
        )
    key_col = symbol_column(names) or match_column(names, "root")
    raw = frame.get_column(name_col).cast(pl.Utf8).str.strip_chars()
    _raise_empty(raw.is_null() | (raw == ""), p, name_col, "a name")
    times = frame.get_column(time_col)
    blank = times.is_null() | ((times.str.strip_chars() == "") if times.dtype == pl.String else False)
    _raise_empty(blank, p, time_col, "a time")
    ts = parse_time(frame, time_col, names, p, True, timezone or "UTC", date_format)[0]
    ts = ts.cast(pl.Int64).to_numpy()  # (rows,) ns UTC
    slug_of = _slugs(raw, p, name_col)
    slugged = raw.replace_strict(slug_of, return_dtype=pl.Utf8).to_numpy()  # (rows,) one slug per row
    out = sorted(set(slug_of.values()))
    key = _keys(frame, key_col)  # (rows,) "" where the row applies to every series

    def times(mask: np.ndarray) -> tuple[np.ndarray, ...]:
        return tuple(np.unique(ts[mask & (slugged == n)]) for n in out)

    keys = sorted(set(key) - {""})
    return EventCalendar(str(p), tuple(out), times(key == ""), tuple(keys), tuple(times(key == k) for k in keys))


def _keys(frame: pl.DataFrame, col: str | None) -> np.ndarray:
    """(rows,) each row's key as text, stripped; "" for a row without one (or a file without the column)."""
    if col is None:
        return np.full(frame.height, "", dtype=object)
    return frame.get_column(col).cast(pl.Utf8).str.strip_chars().fill_null("").to_numpy().astype(object)


def key_of(cal: EventCalendar, series: str, contract: str | None) -> str | None:
    """The key of `cal` a bar of series `series` holding `contract` reads, None where none applies: a key equal to
    the series' name applies to all its bars, else one equal to the bar's contract (covariates.asof_join's rule)."""
    if series in cal.keys:
        return series
    return contract if contract in cal.keys else None


def row_keys(cal: EventCalendar, series: pl.Series, contract: pl.Series) -> np.ndarray | None:
    """(N,) int32 each bar's key (`key_of`) as its index in cal.keys, -1 where none applies, for bars (N,) of
    series `series` holding contract `contract`; None for a calendar without keys. `key_of` is asked once per
    distinct (series, contract) pair: a few per series."""
    if not cal.keys:
        return None
    bars = pl.DataFrame({"s": series.cast(pl.Utf8), "c": contract.cast(pl.Utf8).fill_null("")})
    pairs = bars.unique(maintain_order=True)
    code = [-1 if (k := key_of(cal, s, c or None)) is None else cal.keys.index(k) for s, c in pairs.iter_rows()]
    pairs = pairs.with_columns(pl.Series("k", code, dtype=pl.Int32))
    joined = bars.with_row_index("i").join(pairs, on=["s", "c"], how="left").sort("i")
    return joined.get_column("k").to_numpy()


def key_times(keys: np.ndarray, ts: np.ndarray, n: int) -> np.ndarray:
    """(n, 2) int64 the first and last time of the rows (times `ts` (N,)) under each of `n` keys (`keys` (N,), as
    `row_keys` gives them, -1: none); the largest and the smallest int64 for a key no row holds: the parts of a
    panel's rows (its pieces) merge by a min and a max."""
    out = np.empty((n, 2), dtype=np.int64)
    out[:, 0], out[:, 1] = np.iinfo(np.int64).max, np.iinfo(np.int64).min
    on = keys >= 0
    np.minimum.at(out[:, 0], keys[on], ts[on])
    np.maximum.at(out[:, 1], keys[on], ts[on])
    return out


def event_columns(cal: EventCalendar) -> tuple[str, ...]:
    """The known-input columns `event_features` returns, in its order: per name, until, since, in_bar."""
    return tuple(f"{n}_{s}" for n in cal.names for s in SUFFIXES)


def event_features(ts_ns: np.ndarray, step_ns: int, cal: EventCalendar, cap: int) -> np.ndarray:
    """(U, 3K) float32 features for bar start times `ts_ns` (U,) (int64 ns UTC, any order) of bars `step_ns` long.

    For each name, with e_next the first occurrence >= ts and e_prev the last one < ts:
        until  = min((e_next - ts) // step, cap) / cap, 1 when there is none (0 on the bar holding it)
        since  = min((ts - e_prev) // step, cap) / cap, 1 when there is none
        in_bar = 1 when some occurrence e has ts <= e < ts + step
    Every row depends on its own timestamp and the calendar alone, never on the other timestamps asked.
    """
    if cap < 1 or step_ns < 1:
        raise ValueError(f"event_features needs cap >= 1 and step_ns >= 1, got cap={cap}, step_ns={step_ns}")
    ts = np.asarray(ts_ns, dtype=np.int64).ravel()  # (U,)
    out = np.empty((ts.size, 3 * len(cal.names)), dtype=np.float32)  # (U, 3K)
    for k, t in enumerate(cal.times):  # a loop over event names, not timestamps
        i = np.searchsorted(t, ts, side="left")  # (U,) index of the first occurrence >= ts
        has_next, has_prev = i < t.size, i > 0
        nxt = t[np.minimum(i, t.size - 1)] if t.size else ts  # (U,) valid where has_next
        prv = t[np.maximum(i - 1, 0)] if t.size else ts  # (U,) valid where has_prev
        until = np.where(has_next, np.minimum((nxt - ts) // step_ns, cap), cap)
        since = np.where(has_prev, np.minimum((ts - prv) // step_ns, cap), cap)
        out[:, 3 * k] = until / cap
        out[:, 3 * k + 1] = since / cap
        out[:, 3 * k + 2] = has_next & (nxt - ts < step_ns)
    return out


def _read(path: Path) -> pl.DataFrame:
    """The file's rows, CSV cells as text (a bad cell then gets an error naming its row, as in bar files)."""
    try:
        if path.stat().st_size == 0:
            raise InputError(f"{path}: the events file is empty (0 bytes); re-export it or leave out --events")
        if path.name.lower().endswith(".csv"):
            names = pl.read_csv(path, n_rows=0).columns
            frame = pl.read_csv(path, schema_overrides=dict.fromkeys(names, pl.Utf8))
        else:
            frame = pl.read_parquet(path)
    except InputError:
        raise
    except FileNotFoundError:
        raise InputError(f"{path}: no such events file; check the path given to --events") from None
    except Exception as e:  # polars raises several types for truncated or foreign files
        if path.name.lower().endswith(".csv"):
            text = " ".join(str(e).split())[:200] or type(e).__name__
            raise InputError(f"{path}: cannot read it as CSV ({text}); check the file is comma-separated text") from None
        raise read_error(path, e) from None
    if frame.height == 0:
        raise InputError(f"{path}: the events file has no rows; add events or leave out --events")
    return frame


def _raise_empty(bad: pl.Series, path: Path, col: str, what: str) -> None:
    if bad.any():
        i = int(bad.arg_max())
        raise InputError(f"{path}: column {col!r} row {i + 1} is empty; give every event {what} or drop the row")


def slug(name: str) -> str:
    """An event name as a column-name stem: lower case, every run of other characters one underscore, trimmed."""
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def _slugs(raw: pl.Series, path: Path, col: str) -> dict[str, str]:
    """raw name -> slug for the file's few distinct names; an error for a slug that is no identifier or is shared."""
    first_row = {}  # raw name -> 1-based row where it first appears, for messages
    for i, name in enumerate(raw.to_list()):
        first_row.setdefault(name, i + 1)
    out: dict[str, str] = {}
    owner: dict[str, str] = {}  # slug -> the raw name that made it
    for name, row in first_row.items():  # a loop over distinct names
        s = slug(name)
        if not re.fullmatch(r"[a-z][a-z0-9_]*", s):
            raise InputError(
                f"{path}: column {col!r} row {row}: event name {name!r} becomes {s!r}, not a name foxhunt can use"
                " (it must start with a letter; letters, digits and spaces after); rename it"
            )
        if s in owner:
            raise InputError(
                f"{path}: column {col!r}: event names {owner[s]!r} (row {first_row[owner[s]]}) and {name!r}"
                f" (row {row}) both become {s!r}; rename one of them, or spell them the same if they are one event"
            )
        owner[s], out[name] = name, s
    return out
