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

from dataclasses import dataclass

import numpy as np
import polars as pl

from foxhunt.data.order import new_group, runs_order

EXPIRY_SPAN = 1 << 24  # expiries (months) of one root are numbered below this in a contract key

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


@dataclass(frozen=True)
class ContractIndex:
    """Outright futures bars seen contract by contract, as integer arrays: what picking fronts and pricing rolls
    read, without grouping or joining millions of rows by their strings.

    roots: sorted root names (a root's code is its index); code, expiry, day, ts: (N,) int64 of each row (root code,
    year * 12 + month, trade date in days since the epoch, ns); order: (N,) rows sorted by (contract, ts), None when
    each contract's rows already lie together in ts order (bars sorted by symbol and ts: contracts in symbol order,
    which no method needs to be the contracts' order); contract: (N,) int64 contract key (code, expiry) in that order;
    blocks: (C,) sorted contract keys and (C,) the first and (C,) one past the last row of each in that order.
    """

    roots: list[str]
    code: np.ndarray
    expiry: np.ndarray
    day: np.ndarray
    ts: np.ndarray
    order: np.ndarray | None
    contract: np.ndarray
    blocks: tuple[np.ndarray, np.ndarray, np.ndarray]

    @staticmethod
    def of(fut: pl.DataFrame) -> ContractIndex:
        """The index of `fut` (columns root, expiry, trade_date, ts; no null root)."""
        root = fut.get_column("root")
        expiry = fut.get_column("expiry").to_numpy().astype(np.int64)
        # Rows come in runs of one root and expiry: each run's root is ranked once and repeated (an Enum cast of
        # millions of strings costs more than the whole index).
        change = root.ne_missing(root.shift(1)).to_numpy() | np.concatenate([[True], expiry[1:] != expiry[:-1]])
        starts = np.flatnonzero(change) if len(expiry) else np.zeros(0, dtype=np.int64)  # (B,)
        named = root.gather(pl.Series(starts, dtype=pl.get_index_type()))  # (B,)
        roots = named.unique().sort().to_list()
        code = np.repeat(named.cast(pl.Enum(roots)).to_physical().to_numpy().astype(np.int64),
                         np.diff(np.append(starts, len(expiry))))  # (N,)
        day = fut.get_column("trade_date").cast(pl.Int32).to_numpy().astype(np.int64)
        ts = fut.get_column("ts").dt.epoch("ns").to_numpy()
        contract = code * EXPIRY_SPAN + (expiry - expiry.min() if len(expiry) else expiry)
        key = contract[starts]  # (B,) a contract in one run, in ts order: no row to move
        together = len(np.unique(key)) == len(key) and bool(np.all((ts[1:] >= ts[:-1]) | change[1:]))
        order = None if together else runs_order(contract, ts)
        if order is not None:
            contract = contract[order]
            starts = np.flatnonzero(new_group([contract]))
            key = contract[starts]
        by = np.argsort(key)
        ends = np.append(starts[1:], len(contract))
        return ContractIndex(roots, code, expiry, day, ts, order, contract, (key[by], starts[by], ends[by]))

    def codes_of(self, roots: pl.Series) -> np.ndarray:
        """(R,) int64 codes of root names (each one of `roots`)."""
        return roots.cast(pl.Enum(self.roots)).to_physical().to_numpy().astype(np.int64)

    def _sorted(self, x: np.ndarray) -> np.ndarray:
        return x if self.order is None else x[self.order]

    def _key(self, roots: pl.Series, expiry: pl.Series) -> np.ndarray:
        return self.codes_of(roots) * EXPIRY_SPAN + (expiry.to_numpy().astype(np.int64) - self.expiry.min())

    def daily_volume(self, volume: np.ndarray) -> pl.DataFrame:
        """root, trade_date, expiry, volume (the sum over the contract's bars of the session): `pick_fronts`' input."""
        day = self._sorted(self.day)
        first = new_group([self.contract, day])  # (N,) a contract's first bar of a session
        at = np.flatnonzero(first)
        rows = at if self.order is None else self.order[at]
        return pl.DataFrame(
            {
                "root": pl.Series(self.roots, dtype=pl.Utf8).gather(self.code[rows]),
                "trade_date": pl.Series(day[at]).cast(pl.Int32).cast(pl.Date),
                "expiry": pl.Series(self.expiry[rows]).cast(pl.Int32),
                "volume": np.add.reduceat(self._sorted(volume), at) if len(at) else np.empty(0),
            }
        )

    def first_symbols(self, symbol: pl.Series) -> pl.DataFrame:
        """root, expiry, symbol: the symbol of each contract's first row read."""
        at = np.flatnonzero(new_group([self.contract]))
        rows = at if self.order is None else np.minimum.reduceat(self.order, at)
        return pl.DataFrame(
            {
                "root": pl.Series(self.roots, dtype=pl.Utf8).gather(self.code[rows]),
                "expiry": pl.Series(self.expiry[rows]).cast(pl.Int32),
                "symbol": symbol.gather(rows),
            }
        )

    def roll_prices(self, close: np.ndarray, rolls: pl.DataFrame) -> pl.DataFrame:
        """root, seg, at, old_close, new_close of each roll (`rolls`: root, seg, trade_date, old, new expiries): the
        last bar before the switch's trade date at which both contracts have a bar, else the new contract's last bar
        before it paired with the old contract's latest bar at or before that; no row when the new contract has no
        bar before the switch. A loop over rolls (a few a year per root), each two binary searches in sorted bars.
        """
        close, ts, day = self._sorted(close), self._sorted(self.ts), self._sorted(self.day)
        old_key, new_key = self._key(rolls["root"], rolls["old"]), self._key(rolls["root"], rolls["new"])
        switch = rolls.get_column("trade_date").cast(pl.Int32).to_numpy()
        found: list[tuple[int, int, float | None, float]] = []  # (roll, at, old close, new close)

        keys, firsts, ends = self.blocks

        def before(key: int, date: int) -> slice:  # the contract's bars on trade dates before `date`
            at = min(int(np.searchsorted(keys, key)), len(keys) - 1)
            lo, hi = (firsts[at], ends[at]) if len(keys) and keys[at] == key else (0, 0)
            return slice(lo, lo + np.searchsorted(day[lo:hi], date))

        for i in range(len(rolls)):
            old, new = before(old_key[i], switch[i]), before(new_key[i], switch[i])
            old_ts, new_ts = ts[old], ts[new]
            if not len(new_ts):
                continue
            pos = np.searchsorted(old_ts, new_ts, side="right") - 1  # (n_new,) the old bar at or before each
            same = np.flatnonzero((pos >= 0) & (old_ts[np.maximum(pos, 0)] == new_ts)) if len(old_ts) else pos[:0]
            j = same[-1] if len(same) else len(new_ts) - 1  # the last common bar, else the new contract's last
            old_close = float(close[old.start + pos[j]]) if pos[j] >= 0 else None
            found.append((i, int(new_ts[j]), old_close, float(close[new.start + j])))
        pick = [f[0] for f in found]
        return pl.DataFrame(
            {
                "root": rolls["root"].gather(pick),
                "seg": rolls["seg"].gather(pick),
                "at": pl.Series([f[1] for f in found], dtype=pl.Int64).cast(pl.Datetime("ns", "UTC")),
                "old_close": pl.Series([f[2] for f in found], dtype=pl.Float64),
                "new_close": pl.Series([f[3] for f in found], dtype=pl.Float64),
            }
        )
