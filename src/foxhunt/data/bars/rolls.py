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

from foxhunt.data.util.order import new_group, runs_order
from foxhunt.data.util.runs import changes, run_lengths

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
    fronts: list = []
    reasons: list = []
    sessions = (
        daily.sort("root", "trade_date", "expiry")
        .group_by("root", "trade_date", maintain_order=True)
        .agg("expiry", "volume")
    )
    root_now, front, lead, streak = None, None, None, 0
    prev: dict[int, float] = {}  # the previous session's volume per expiry
    # the columns as lists, walked together: a row tuple per session costs more than the walk itself
    for root, expiries, volumes in zip(*(sessions.get_column(c).to_list() for c in ("root", "expiry", "volume")),
                                       strict=True):
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
        fronts.append(front)
        reasons.append(reason)
    return pl.DataFrame(
        [
            sessions.get_column("root").cast(pl.Utf8),
            sessions.get_column("trade_date").cast(daily.schema["trade_date"]),
            pl.Series("front", fronts, dtype=daily.schema["expiry"]),
            pl.Series("reason", reasons, dtype=pl.Utf8),
        ]
    )


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

    Bars come in runs of one contract and trade date (sorted by symbol and ts: a few thousand runs over millions of
    bars), so what is the same for every bar of a run is kept once per run.
    roots: sorted root names (a root's code is its index); runs: (K,) the first row of each run of rows of one root,
    expiry and trade date, in row order; code, expiry, day: (K,) int64 of each run (root code, year * 12 + month,
    trade date in days since the epoch); expiry_min: the smallest expiry (contract keys count from it);
    ts, days: (N,) each row's ns and trade date; order: (N,) rows sorted by (contract, ts), None when each
    contract's rows already lie together in ts order (bars sorted by symbol and ts: contracts in symbol order, which
    no method needs to be the contracts' order); blocks: (C,) sorted contract keys and (C,) the first and (C,) one past
    the last row of each in that order; sessions: (S,) the first row, in that order, of each run of one contract and
    trade date.
    """

    roots: list[str]
    runs: np.ndarray
    code: np.ndarray
    expiry: np.ndarray
    day: np.ndarray
    expiry_min: int
    ts: np.ndarray
    days: np.ndarray
    order: np.ndarray | None
    blocks: tuple[np.ndarray, np.ndarray, np.ndarray]
    sessions: np.ndarray

    @staticmethod
    def of(fut: pl.DataFrame) -> ContractIndex:
        """The index of `fut` (columns root, expiry, trade_date, ts; no null root)."""
        root = fut.get_column("root")
        expiries = fut.get_column("expiry").to_numpy()  # (N,) as stored: no bar-sized copy
        days = fut.get_column("trade_date").to_physical().to_numpy()  # (N,) int32 days since the epoch
        ts = fut.get_column("ts").dt.epoch("ns").to_numpy()
        n = len(ts)
        change = changes(root)  # (N,) a new root or expiry: a new contract
        change[1:] |= expiries[1:] != expiries[:-1]
        in_order = bool(np.all((ts[1:] >= ts[:-1]) | change[1:]))  # each run of a contract in ts order
        change[1:] |= days[1:] != days[:-1]
        runs = np.flatnonzero(change)  # (K,)
        del change
        named = root.gather(pl.Series(runs, dtype=pl.get_index_type()))  # (K,) a root's name per run
        roots = named.unique().sort().to_list()
        code = named.cast(pl.Enum(roots)).to_physical().to_numpy().astype(np.int64)  # (K,)
        expiry, day = expiries[runs].astype(np.int64), days[runs].astype(np.int64)  # (K,)
        expiry_min = int(expiry.min()) if n else 0
        key = code * EXPIRY_SPAN + (expiry - expiry_min)  # (K,) each run's contract
        first = np.flatnonzero(np.concatenate([[True], key[1:] != key[:-1]]) if n else key)  # (B,) runs of a contract
        order = None
        if not (in_order and len(np.unique(key[first])) == len(first)):  # a contract in several places, or unsorted
            contract = np.repeat(key, run_lengths(runs, n))  # (N,)
            order = runs_order(contract, ts)
        if order is None:  # the rows are the index's order: its runs are the sessions
            sessions, lo, block_key = runs, runs[first], key[first]
        else:
            contract = contract[order]
            sessions = np.flatnonzero(new_group([contract, days[order]]))
            lo = np.flatnonzero(new_group([contract]))
            block_key = contract[lo]
            del contract
        by = np.argsort(block_key)
        hi = np.append(lo[1:], n)
        return ContractIndex(roots, runs, code, expiry, day, expiry_min, ts, days, order,
                             (block_key[by], lo[by], hi[by]), sessions)

    def codes_of(self, roots: pl.Series) -> np.ndarray:
        """(R,) int64 codes of root names (each one of `roots`)."""
        return roots.cast(pl.Enum(self.roots)).to_physical().to_numpy().astype(np.int64)

    def _sorted(self, x: np.ndarray) -> np.ndarray:
        return x if self.order is None else x[self.order]

    def _run_of(self, rows: np.ndarray) -> np.ndarray:
        """(M,) the run (see `runs`) of each row of `rows` (M,)."""
        return np.searchsorted(self.runs, rows, side="right") - 1

    def _key(self, roots: pl.Series, expiry: pl.Series) -> np.ndarray:
        return self.codes_of(roots) * EXPIRY_SPAN + (expiry.to_numpy().astype(np.int64) - self.expiry_min)

    def daily_volume(self, volume: np.ndarray) -> pl.DataFrame:
        """root, trade_date, expiry, volume (the sum over the contract's bars of the session): `pick_fronts`' input."""
        at = self.sessions  # (S,) a contract's first bar of a session
        run = np.arange(len(at)) if self.order is None else self._run_of(self.order[at])  # (S,)
        return pl.DataFrame(
            {
                "root": pl.Series(self.roots, dtype=pl.Utf8).gather(self.code[run]),
                "trade_date": pl.Series(self.day[run]).cast(pl.Int32).cast(pl.Date),
                "expiry": pl.Series(self.expiry[run]).cast(pl.Int32),
                "volume": np.add.reduceat(self._sorted(volume), at) if len(at) else np.empty(0),
            }
        )

    def first_symbols(self, symbol: pl.Series) -> pl.DataFrame:
        """root, expiry, symbol: the symbol of each contract's first row read."""
        at = np.sort(self.blocks[1])  # (C,) each contract's first row in the index's order
        rows = at if self.order is None else np.minimum.reduceat(self.order, at)
        run = self._run_of(rows)
        return pl.DataFrame(
            {
                "root": pl.Series(self.roots, dtype=pl.Utf8).gather(self.code[run]),
                "expiry": pl.Series(self.expiry[run]).cast(pl.Int32),
                "symbol": symbol.gather(rows),
            }
        )

    def roll_prices(self, close: np.ndarray, rolls: pl.DataFrame) -> pl.DataFrame:
        """root, seg, at, old_close, new_close of each roll (`rolls`: root, seg, trade_date, old, new expiries): the
        last bar before the switch's trade date at which both contracts have a bar, else the new contract's last bar
        before it paired with the old contract's latest bar at or before that; no row when the new contract has no
        bar before the switch. A loop over rolls (a few a year per root), each two binary searches in sorted bars.
        """
        close, ts, day = self._sorted(close), self._sorted(self.ts), self._sorted(self.days)
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
