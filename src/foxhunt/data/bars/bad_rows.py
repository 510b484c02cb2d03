"""Bad rows of a read frame, judged: rows with a missing or non-finite price or volume, and rows whose prices
contradict each other, are dropped with one warning unless more than MAX_BAD_FRACTION of the panel's rows are bad
(then the export is broken and the run stops, naming the first). A panel read in pieces (prepare/driver.py) merges its
pieces' counts before they are judged, so the 1% is the panel's in pieces as in memory.

The rules a bar must pass are defined here once (`nonfinite`, `contradicts`, `negative_volume`, `nonpositive`), on
polars expressions for the loader (validate.py, over a frame) and on one bar's floats for the stream (`bar_fault`,
what `Forecaster.update` refuses), so that a bar the loader drops or stops on never reaches a forecast by update."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

import polars as pl

from foxhunt.data.bars.duplicates import Duplicates
from foxhunt.errors import InputError

log = logging.getLogger("foxhunt.data")

MAX_BAD_FRACTION = 0.01
PRICES = ("open", "high", "low", "close")
VALUES = (*PRICES, "volume")
OWN_PRICES = ("own_high", "own_low", "own_close")  # a contract's unadjusted prices (series.OWN)


# -- the rules of one bar: polars expressions of a frame's columns, or one bar's floats ------------------------------
def nonfinite(*values: Any) -> Any:
    """Whether a price or the volume is missing or not finite (NaN, inf): dropped by the loader."""
    if isinstance(values[0], pl.Expr):
        return pl.any_horizontal(*[~v.is_finite().fill_null(False) for v in values])
    return not all(map(math.isfinite, values))


def contradicts(open_: Any, high: Any, low: Any, close: Any) -> Any:
    """Whether finite prices contradict each other, high below max(open, close) or low above min(open, close)
    (high below low is one of these): dropped by the loader. Plain comparisons, for expressions, arrays or floats."""
    return (high < open_) | (high < close) | (low > open_) | (low > close)


def negative_volume(volume: Any) -> Any:
    """Whether the volume is below zero: the loader stops (a broken export, not a bar to drop)."""
    return volume < 0


def nonpositive(*prices: Any) -> Any:
    """Whether a price is zero or below: valid bars (crude oil settled at -37.63), refused only where the math needs
    positive prices (validate.check_ratio_adjust, check_log_target)."""
    if isinstance(prices[0], pl.Expr):
        return pl.min_horizontal(*prices) <= 0
    return min(prices) <= 0


def bar_fault(ohlcv: list[float], positive: bool) -> tuple[str, bool] | None:
    """(what is wrong, whether the loader drops such a bar (else it stops)) for the first of the loader's rules, in
    the loader's order, that one bar's open high low close volume breaks; None for a bar it keeps. `positive`: prices
    must be above zero (a log target, or --adjust ratio on a continuous futures series)."""
    open_, high, low, close, volume = ohlcv
    if nonfinite(*ohlcv):
        return "a missing or non-finite price or volume (NaN, inf)", True
    if contradicts(open_, high, low, close):
        return f"{why_inconsistent(dict(zip(VALUES, ohlcv, strict=True)))} (OHLC prices that contradict each other)", True
    if negative_volume(volume):
        return why_negative_volume(dict(zip(VALUES, ohlcv, strict=True))), False
    if positive and nonpositive(open_, high, low, close):
        return why_nonpositive(dict(zip(VALUES, ohlcv, strict=True))), False
    return None


@dataclass(frozen=True)
class BadRows:
    """The rows with a missing or non-finite value and those with contradicting OHLC prices among the `rows`
    clean_bars checks, with the first of each kind in read order (the row's file_idx, row, symbol, ts and prices;
    None where not looked for): what `judge_bad_rows` decides on. The 1% is of the panel's rows, so the counts of a
    panel read in pieces are merged (`merge`) before they are judged."""

    rows: int
    nonfinite: int = 0
    inconsistent: int = 0
    first_nonfinite: dict | None = None
    first_inconsistent: dict | None = None
    duplicates: Duplicates = Duplicates()  # a piece's (clean_bars with judge=False), told over the panel's rows
    out_of_order: int = 0

    def over(self) -> bool:
        return self.nonfinite + self.inconsistent > MAX_BAD_FRACTION * self.rows

    @staticmethod
    def merge(parts: list[BadRows]) -> BadRows:
        """The BadRows of the rows of `parts` together (pieces of one panel, file_idx counted over its files)."""
        def first(rows: list[dict | None]) -> dict | None:
            return min((r for r in rows if r is not None), key=lambda r: (r["file_idx"], r["row"]), default=None)

        return BadRows(sum(p.rows for p in parts), sum(p.nonfinite for p in parts),
                       sum(p.inconsistent for p in parts), first([p.first_nonfinite for p in parts]),
                       first([p.first_inconsistent for p in parts]),
                       Duplicates.merge([p.duplicates for p in parts]), sum(p.out_of_order for p in parts))


class AllRowsBad(Exception):
    """Every row of a piece of a panel is bad (clean_bars with judge=False): nothing is left to load. Its caller
    judges `bad` over the panel's rows."""

    def __init__(self, bad: BadRows) -> None:
        super().__init__(bad)  # pickled by its args: it comes back from a worker process
        self.bad = bad


def judge_bad_rows(bad: BadRows, files: list[str]) -> None:
    """InputError naming the first bad row when more than MAX_BAD_FRACTION of the rows are bad (the export is
    broken); otherwise one warning with the counts dropped, if any. `files` maps file_idx to a path."""
    n, n_nonfinite, n_inconsistent = bad.rows, bad.nonfinite, bad.inconsistent
    if bad.over():
        if n_nonfinite >= n_inconsistent:
            first = bad.first_nonfinite
            problem = f"{n_nonfinite} of {n} rows ({100 * n_nonfinite / n:.1f}%) have a missing or non-finite price"
            problem += " or volume (NaN, inf)"
        else:
            first = bad.first_inconsistent
            problem = f"{why_inconsistent(first)}; {n_inconsistent} of {n} rows ({100 * n_inconsistent / n:.1f}%) have"
            problem += " OHLC prices that contradict each other"
        others = f" ({n_nonfinite + n_inconsistent} bad rows in all)" if n_nonfinite and n_inconsistent else ""
        raise InputError(
            f"{row_place(first, files)}: {problem}{others}, more than the 1% that is dropped; fix or re-export the data"
        )
    if n_nonfinite or n_inconsistent:
        log.warning(
            "dropped %d rows with missing or non-finite values and %d rows with inconsistent OHLC prices",
            n_nonfinite,
            n_inconsistent,
        )


def why_inconsistent(r: dict) -> str:
    """Why one row's OHLC prices contradict each other."""
    if r["high"] < r["low"]:
        return f"high {r['high']} is below low {r['low']}"
    if r["high"] < max(r["open"], r["close"]):
        return f"high {r['high']} is below max(open, close) {max(r['open'], r['close'])}"
    return f"low {r['low']} is above min(open, close) {min(r['open'], r['close'])}"


def why_negative_volume(r: dict) -> str:
    return f"volume {r['volume']} is negative"


def why_nonpositive(r: dict) -> str:
    """'low -5.5 is not positive': the lowest price of one row or bar (its own prices too, where it has them)."""
    col = min((c for c in (*PRICES, *OWN_PRICES) if c in r), key=lambda c: r[c])
    return f"{col} {r[col]} is not positive"


def row_place(r: dict, files: list[str]) -> str:
    """'file row N (SYMBOL at ISO-TS)' for one row of the read frame."""
    ts = r["ts"].isoformat() if r["ts"] is not None else "?"
    return f"{files[r['file_idx']]} data row {r['row'] + 1} ({r['symbol']} at {ts})"
