"""When a continuous futures series moves to its next contract.

Two sources of rolls:

- Outright contracts (`ESH4`, `ESM4`, ... from a parent `ES.FUT` file): `pick_fronts` walks each root's sessions in
  order. The front moves only to the *next* contract in expiry order that traded in the previous session, and only
  after that contract out-traded the front for `confirm` consecutive sessions (a volume roll). A far contract's
  one-day volume spike never makes the series skip the next contract: jumping past it needs evidence that it does not
  trade at all. If the front has no bars in a session (it expired, or its data are missing), the series moves on that
  session to the nearest later contract that has bars (a forced roll), so no session is lost.
- Databento continuous files (`ES.c.0`, `ES.v.0`, `ES.n.0`): Databento already chose one contract per row, and the
  contract changes where `instrument_id` changes. `continuous_file_rolls` takes those changes as the rolls.

The walk over sessions is a Python loop because the state (front, which contract leads, for how long) carries from
one session to the next; it runs once per (root, session), a few hundred per root and year, never per bar.
"""

from __future__ import annotations

import polars as pl

# reason codes in the roll table
VOLUME = "volume"  # the next contract out-traded the front for `confirm` sessions
FRONT_MISSING = "front_missing"  # the front had no bars in the session
INSTRUMENT_CHANGE = "instrument_change"  # a Databento continuous file switched instrument_id

CONTINUOUS_RE = r"^([A-Z0-9]{1,4})\.([cvn])\.(\d+)(?:#\d+)?$"  # ES.v.0, or ES.v.0#4001 once split by instrument


def pick_fronts(daily: pl.DataFrame, confirm: int) -> pl.DataFrame:
    """Front contract per (root, trade_date).

    `daily`: root, trade_date, expiry, volume; one row per contract with bars in a session. Returns root, trade_date,
    front (an expiry), reason (null, VOLUME or FRONT_MISSING on the session a roll takes effect). The first session's
    front is its nearest expiry. A volume roll on session d uses volumes up to session d - 1 only (no look-ahead).
    """
    cols: dict[str, list] = {"root": [], "trade_date": [], "front": [], "reason": []}
    sessions = (
        daily.sort("root", "trade_date", "expiry")
        .group_by("root", "trade_date", maintain_order=True)
        .agg("expiry", "volume")
    )
    root_now, front, lead, streak = None, None, None, 0
    prev: dict[int, float] = {}  # the previous session's volume per expiry
    for root, day, expiries, volumes in sessions.iter_rows():
        reason = None
        if root != root_now:  # a new root: start on its nearest expiry
            root_now, front, lead, streak = root, expiries[0], None, 0
        else:
            nxt = min((e for e in prev if e > front), default=None)  # the next contract that traded
            if nxt is not None and prev[nxt] > prev.get(front, 0):
                streak = streak + 1 if nxt == lead else 1
                lead = nxt
            else:
                lead, streak = None, 0
            if streak >= confirm:
                front, reason, lead, streak = lead, VOLUME, None, 0
            if front not in expiries:
                ahead = [e for e in expiries if e > front]
                if ahead:
                    front, reason, lead, streak = ahead[0], FRONT_MISSING, None, 0
        prev = dict(zip(expiries, volumes, strict=True))
        for key, value in (("root", root), ("trade_date", day), ("front", front), ("reason", reason)):
            cols[key].append(value)
    schema = {
        "root": pl.Utf8,
        "trade_date": daily.schema["trade_date"],
        "front": daily.schema["expiry"],
        "reason": pl.Utf8,
    }
    return pl.DataFrame(cols, schema=schema)


def continuous_file_rolls(bars: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Segments and rolls of Databento continuous-file series.

    `bars`: series, symbol (one per instrument: `ES.v.0#4001`), trade_date, ts and OHLCV, sorted by (series, ts).
    Returns (bars with a `seg` column, rolls: series, seg, trade_date, from, to, old_close, new_close, reason).
    A continuous file never holds the old and the new contract at one time, so the roll's price pair is the old
    contract's last close and the new contract's first open: the gap then holds the calendar spread plus the market's
    move between those two prints (usually a tick or two on minute bars).
    """
    change = (pl.col("symbol") != pl.col("symbol").shift(1)).over("series").fill_null(False)
    bars = bars.with_columns(seg=change.cast(pl.Int32).cum_sum().over("series"))
    first = bars.group_by("series", "seg").agg(
        pl.col("trade_date").first(), to=pl.col("symbol").first(), new_close=pl.col("open").first()
    )
    last = bars.group_by("series", "seg").agg(
        pl.col("symbol").last().alias("from"), old_close=pl.col("close").last()
    )
    rolls = (
        first.filter(pl.col("seg") > 0)
        .join(last.with_columns(pl.col("seg") + 1), on=["series", "seg"])
        .with_columns(reason=pl.lit(INSTRUMENT_CHANGE))
        .select("series", "seg", "trade_date", "from", "to", "old_close", "new_close", "reason")
        .sort("series", "seg")
    )
    return bars, rolls
