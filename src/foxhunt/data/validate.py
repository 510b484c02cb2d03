"""Validate and clean raw bars: what can be repaired is repaired and counted, what cannot stops with an InputError.

Repaired (counted in the load report):
- rows with a missing or NaN price or volume are dropped, unless more than 1% of all rows are bad (then the export is
  broken and the run stops);
- duplicate rows (same instrument and timestamp, as when downloads overlap) are dropped keeping the last one read;
- rows out of time order within an instrument are sorted (the count is of rows that came earlier than a row before
  them);
- Databento ohlcv-1d Sunday stubs (see `merge_sunday_stubs`).

Fatal (one-line InputError naming file, row, symbol and timestamp): a price of zero or below (spreads, which may be
negative, are dropped before this check), high below low, negative volume.
"""

from __future__ import annotations

import logging

import polars as pl

from foxhunt.errors import InputError

log = logging.getLogger("foxhunt.data")

PRICES = ("open", "high", "low", "close")
VALUES = (*PRICES, "volume")
INSTRUMENT = ("symbol", "instrument_id")  # one instrument; instrument_id is null for generic files
MAX_BAD_FRACTION = 0.01
RTYPE_OHLCV_1D = 35
SUNDAY = 7  # polars weekday: Monday = 1


def clean_bars(df: pl.DataFrame, files: list[str]) -> tuple[pl.DataFrame, dict]:
    """Drop bad/duplicate rows, check prices, sort by (symbol, instrument_id, ts).

    `df` has the read stage's columns (file_idx and row locate a row for messages; `files` maps file_idx to a path).
    Returns (clean frame, {nan_rows_dropped, duplicates_dropped, rows_out_of_order}).
    """
    n = df.height
    bad = pl.any_horizontal(*[pl.col(c).is_null() | pl.col(c).is_nan() for c in VALUES])
    bad_rows = df.filter(bad)
    if bad_rows.height > MAX_BAD_FRACTION * n:
        first = bad_rows.row(0, named=True)
        raise InputError(
            f"{_where(first, files)}: {bad_rows.height} of {n} rows ({100 * bad_rows.height / n:.1f}%) have a missing or"
            " NaN price or volume, more than the 1% that is dropped silently; fix or re-export the data"
        )
    if bad_rows.height:
        log.warning("dropped %d rows with missing or NaN prices", bad_rows.height)
    df = df.filter(~bad)
    _check(df, pl.min_horizontal(*PRICES) <= 0, files, _nonpositive_message)
    _check(df, pl.col("high") < pl.col("low"), files, lambda r: f"high {r['high']} is below low {r['low']}")
    _check(df, pl.col("volume") < 0, files, lambda r: f"volume {r['volume']} is negative")

    before = df.height
    df = df.unique(subset=[*INSTRUMENT, "ts"], keep="last", maintain_order=True)
    duplicates = before - df.height
    late = pl.col("ts") < pl.col("ts").cum_max().shift(1).over(INSTRUMENT)
    out_of_order = df.select(late.fill_null(False).sum()).item()
    if duplicates or out_of_order:
        log.info("dropped %d duplicate rows; sorted %d rows that were out of order", duplicates, out_of_order)
    return df.sort(*INSTRUMENT, "ts"), {
        "nan_rows_dropped": bad_rows.height,
        "duplicates_dropped": duplicates,
        "rows_out_of_order": int(out_of_order),
    }


def merge_sunday_stubs(df: pl.DataFrame) -> tuple[pl.DataFrame, int]:
    """Fold Databento ohlcv-1d (rtype 35) Sunday bars into the following Monday bar of the same instrument.

    ohlcv-1d bars are UTC days, and CME's Monday session opens on Sunday at 22:00/23:00 UTC, so each week starts with a
    one-to-two-hour "Sunday" bar. It is the first part of Monday's session: the merged bar takes its open from the stub,
    the high/low over both, the close from Monday and the summed volume. A stub with no Monday bar becomes the Monday
    bar. `df` must be sorted by instrument and ts; returns (frame, stubs merged).
    """
    stub = (pl.col("rtype") == RTYPE_OHLCV_1D) & (pl.col("ts").dt.weekday() == SUNDAY)
    n = df.select(stub.fill_null(False).sum()).item()
    if n == 0:
        return df, 0
    order = df.columns
    df = df.with_columns(
        _orig=pl.col("ts"),
        ts=pl.when(stub.fill_null(False))
        .then(pl.col("ts") + pl.duration(days=1, time_unit="ns"))
        .otherwise("ts")
        .cast(pl.Datetime("ns", "UTC")),
    )
    merged = (
        df.sort(*INSTRUMENT, "_orig")
        .group_by(*INSTRUMENT, "ts", maintain_order=True)
        .agg(
            pl.col("open").first(),
            pl.col("high").max(),
            pl.col("low").min(),
            pl.col("close").last(),
            pl.col("volume").sum(),
            pl.all().exclude(*VALUES, "_orig").first(),
        )
        .select(order)
    )
    log.info("folded %d Sunday ohlcv-1d stub bars into Monday bars", n)
    return merged, int(n)


def _check(df: pl.DataFrame, cond: pl.Expr, files: list[str], what) -> None:
    hit = df.filter(cond)
    if hit.height:
        r = hit.row(0, named=True)
        extra = f" ({hit.height} rows like this)" if hit.height > 1 else ""
        raise InputError(f"{_where(r, files)}: {what(r)}{extra}; fix or remove the row")


def _nonpositive_message(r: dict) -> str:
    col = next(c for c in PRICES if r[c] <= 0)
    return f"{col} {r[col]} is not positive (outright and plain-symbol prices must be > 0)"


def _where(r: dict, files: list[str]) -> str:
    """'file row N (SYMBOL at ISO-TS)' for one row of the read frame."""
    ts = r["ts"].isoformat() if r["ts"] is not None else "?"
    return f"{files[r['file_idx']]} data row {r['row'] + 1} ({r['symbol']} at {ts})"
