"""`--fill-gaps`: put sparse intraday bars on the regular grid, so that a horizon of H bars means H clock intervals.

Without it, bar k after an origin is whenever the k-th next trade happened: on a 1-second file with 60% of seconds
traded most windows' forecast spans are longer than their horizon, by a different amount each time. With it, every
grid interval inside a session has a bar.

The rule (stated in docs/model.md, "Filling gaps"):
- The grid is the one the forecast steps use (`grid.future_timestamps`): every bar interval from the previous
  bar, off the session's closures: `--calendar`'s, else (America/Chicago) the CME daily halt (16:00-17:00 CT) and
  the weekend (Fri 16:00 - Sun 17:00 CT).
- A missing grid bar is filled only inside the trade date (session) of the bar before the gap or of the bar after it:
  the tail of a session that went quiet and the head of one that opened late are filled, but halts and weekends
  never are, and a session with no bar at all (a holiday, an outage) stays missing. Daily and coarser bars are
  never filled (each bar is its own session).
- A gap is filled only when the grid bars missing in it (after the two rules above) span at most FILL_MAX_NS
  (2 hours). A longer silence inside a session is a halt or an early close (CME closes at 12:00 CT on some holidays
  and reopens at 17:00), not a quiet market, and stays a gap.
- A filled bar is a zero-volume bar at the previous close (open = high = low = close), of the previous bar's
  contract (so a roll stays on the first real bar of the new contract, whose price it is), flagged `filled`. Its return and range are 0 and count as real targets: no trade means the last traded
  price did not move over that interval, which is what a position marked to the last trade earns. Masking them would
  make the forecast of step k a forecast for "the k-th interval that trades", which is what filling removes. The
  model sees the flag as an observed input, and the load report and the data summary count the filled bars.
"""

from __future__ import annotations

import logging

import numpy as np
import polars as pl

from foxhunt.data.bars.grid import median_spacing_ns, on_grid, session_grid
from foxhunt.data.util.clock import DAY_NS, INTRADAY_MAX_NS
from foxhunt.data.util.runs import changes

log = logging.getLogger("foxhunt.data")

FILL_MAX_NS = 2 * 3600 * 10**9  # longest run of missing grid time that is filled (longer: a halt)


def fill_gaps(bars: pl.DataFrame, exchange_tz: str, step_ns: int | None = None,
              calendar: str | None = None) -> tuple[pl.DataFrame, int]:
    """`bars` (sorted by series, ts; load.LoadedBars columns) plus the missing grid bars and a Boolean `filled`.

    `step_ns`: the grid's bar interval (a saved model's); None (or 0): the median spacing of `bars`. `calendar`:
    the run's `--calendar`, whose sessions the grid and the trade dates follow (None: the zone's default grid).
    Returns (bars sorted by series, ts, number of bars filled). See the module doc for which gaps are filled.
    """
    out = bars.with_columns(filled=pl.lit(False))
    if bars.height < 2:
        return out, 0
    sidx = np.cumsum(changes(bars["series"]))  # (N,) a number per run of one series: only its equality is read
    ts = bars["ts"].dt.epoch("ns").to_numpy()
    step = int(step_ns or median_spacing_ns(ts, sidx))
    if step == 0 or step >= INTRADAY_MAX_NS:
        log.info("--fill-gaps: %s bars are never filled (only intraday bars are)", "daily" if step else "single")
        return out, 0
    a_row = np.flatnonzero((sidx[1:] == sidx[:-1]) & (np.diff(ts) > step))  # (G,) bar before each gap
    a, b = ts[a_row], ts[a_row + 1]
    m = (b - a - 1) // step  # lattice points a + j * step strictly before b, j = 1..m
    # Only points within a day of either end can share a trade date with it: j in [1, J] and [m - J + 1, m].
    j_max = DAY_NS // step + 1
    head = np.minimum(m, j_max)
    tail_lo = np.maximum(head + 1, m - j_max + 1)
    tail = np.maximum(m - tail_lo + 1, 0)
    gap = np.concatenate([np.repeat(np.arange(len(a_row)), head), np.repeat(np.arange(len(a_row)), tail)])
    j = np.concatenate([_ranges(np.ones_like(head), head), _ranges(tail_lo, tail)])
    cand = a[gap] + j * step  # (C,)
    grid = session_grid(calendar, exchange_tz)
    days = grid.trade_day(np.concatenate([cand, a, b]))
    c_day, a_day, b_day = days[: len(cand)], days[len(cand) : len(cand) + len(a)], days[len(cand) + len(a) :]
    keep = on_grid(cand, True, exchange_tz, grid) & ((c_day == a_day[gap]) | (c_day == b_day[gap]))
    missing = np.bincount(gap[keep], minlength=len(a_row)) * step  # (G,) grid time missing in each gap
    keep &= (missing <= FILL_MAX_NS)[gap]
    src = a_row[gap[keep]]  # (F,) the bar each filled bar copies its close and contract from
    if len(src) == 0:
        return out, 0
    prev = bars.select(pl.all().gather(src))
    close = prev["close"]
    filled = pl.DataFrame(
        {
            "series": prev["series"],
            "ts": pl.Series(cand[keep]).cast(pl.Datetime("ns", "UTC")),
            "open": close,
            "high": close,
            "low": close,
            "close": close,
            "volume": pl.Series(np.zeros(len(src))),
            "contract": prev["contract"],
            "filled": pl.Series(np.ones(len(src), dtype=bool)),
        }
        | _own_prices(prev)
    ).select(out.columns).cast(out.schema)
    log.info("--fill-gaps: filled %d missing bars of %gs (%.1f%% of the bars)", len(src), step / 1e9,
             100 * len(src) / (bars.height + len(src)))
    return _merged(out, filled, src, cand[keep]), len(src)


def _merged(bars: pl.DataFrame, filled: pl.DataFrame, src: np.ndarray, ts: np.ndarray) -> pl.DataFrame:
    """`bars` (sorted by series, ts) with the `filled` bars (F,) each put after its source bar `src` (F,) in order
    of their `ts` (F,): the sort by (series, ts) of both, found without comparing millions of strings. A filled bar
    lies strictly between its source bar and the next, and no two share a timestamp, so that order is the only one.
    """
    n = bars.height
    by = np.lexsort((ts, src))  # (F,) filled bars by source, then time
    source = np.repeat(np.arange(n), np.bincount(src, minlength=n) + 1)  # (N + F,) each output row's source bar
    first = np.diff(source, prepend=-1) > 0  # (N + F,) the source bar itself; the filled bars follow it
    order = np.empty(n + len(src), dtype=np.int64)  # (N + F,) output row -> row of bars, then of filled
    order[first] = np.arange(n)
    order[~first] = n + by
    return pl.concat([bars, filled], how="vertical")[pl.Series(order, dtype=pl.get_index_type())]


def _ranges(start: np.ndarray, count: np.ndarray) -> np.ndarray:
    """Concatenated start[i] + arange(count[i]) for all i, without a Python loop."""
    total = int(count.sum())
    offsets = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(count) - count, count)
    return np.repeat(start, count) + offsets


def _own_prices(prev: pl.DataFrame) -> dict[str, pl.Series]:
    """A filled bar's contract-own prices (what features read, series.OWN): flat at the copied bar's own close,
    and no roll takes effect on it (the roll stays on the first real bar of the new contract)."""
    if "own_close" not in prev.columns:
        return {}
    own = prev["own_close"]
    zero = pl.Series(np.zeros(len(own)))
    return {"own_high": own, "own_low": own, "own_close": own, "roll_log_ratio": zero, "roll_gap": zero}
