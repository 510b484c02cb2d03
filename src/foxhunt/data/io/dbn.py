"""Read a Databento DBN file (`.dbn`, `.dbn.zst`) of OHLCV bars through its record array, never through pandas.

`DBNStore.to_ndarray()` hands over the records as one numpy structured array (fixed-point int64 prices, uint64
nanosecond times), which polars takes column by column without a copy per row. The frame that comes out is what
`to_df().reset_index()` gives, bit for bit once `normalise.normalise` has seen it. Symbols are resolved per distinct (instrument_id, UTC date), as `to_df` resolves them per
row, from the symbology in the file's metadata.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import polars as pl

from foxhunt.errors import InputError

FIELDS = ("rtype", "publisher_id", "instrument_id", "open", "high", "low", "close", "volume")
PRICES = ("open", "high", "low", "close")
UNDEF_PRICE = 2**63 - 1  # Databento's null price
FIXED_SCALE = 1e9  # Databento's FIXED_PRICE_SCALE


def read_dbn(path: Path) -> pl.DataFrame:
    """Columns ts_event Datetime("ns", "UTC"), rtype, publisher_id, instrument_id, open high low close Float64 (null
    for UNDEF_PRICE), volume, symbol (null where the metadata maps none). Raises InputError naming the file for a missing
    databento package, records that are not OHLCV bars or a truncated file."""
    try:
        import databento as db
        from databento.common.symbology import InstrumentMap
    except ImportError:
        raise InputError(
            f"{path}: reading DBN files needs the databento package; install foxhunt[dbn] or convert to parquet"
        ) from None
    try:
        store = db.DBNStore.from_file(path)
        schema = str(store.schema)
    except Exception as e:
        raise InputError(
            f"{path}: cannot read it as DBN ({_one_line(e)}); the file may be truncated, re-download it"
        ) from None
    if not schema.startswith("ohlcv"):
        raise InputError(f"{path}: holds {schema} records, not OHLCV bars; pass an ohlcv-1s/1m/1h/1d file")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")  # databento warns (not raises) on a truncated file
            records = store.to_ndarray()
    except Exception as e:
        raise InputError(f"{path}: cannot decode its DBN records ({_one_line(e)}); the file may be truncated") from None
    truncated = [w for w in caught if "truncated" in str(w.message)]
    if truncated:
        raise InputError(
            f"{path}: the DBN file is truncated ({_one_line(Exception(truncated[0].message))}); re-download it"
        )
    frame = pl.DataFrame(
        {"ts_event": pl.Series(records["ts_event"].view(np.int64)).cast(pl.Datetime("ns", "UTC"))}
        | {c: _price(records[c]) if c in PRICES else records[c] for c in FIELDS}
    )
    imap = InstrumentMap()
    imap.insert_metadata(store.metadata)
    return frame.with_columns(symbol=_symbols(frame, imap))


def _price(fixed: np.ndarray) -> pl.Series:
    """Fixed-point int64 prices -> Float64 in price units, UNDEF_PRICE -> null, rounded as `to_df` rounds them: the
    int64 becomes a float64, then numpy divides it by 1e9 (polars' scalar division can differ in the last bit)."""
    as_float = np.where(fixed == UNDEF_PRICE, np.nan, fixed.astype(np.float64))
    return pl.Series(as_float / FIXED_SCALE, nan_to_null=True)


def _symbols(frame: pl.DataFrame, imap) -> pl.Series:
    """The symbol of each row: `imap` resolves each distinct (instrument_id, UTC date) once, then a join spreads it."""
    keys = frame.select("instrument_id", day=pl.col("ts_event").dt.date())
    pairs = keys.unique(maintain_order=True)
    names = imap.resolve_many(  # None where the metadata maps nothing, as in to_df
        pairs.get_column("instrument_id").to_numpy(), pairs.get_column("day").to_numpy().astype("datetime64[D]")
    )
    pairs = pairs.with_columns(symbol=pl.Series(list(names), dtype=pl.Utf8))
    return keys.join(pairs, on=["instrument_id", "day"], how="left", maintain_order="left").get_column("symbol")


def _one_line(e: Exception) -> str:
    return " ".join(str(e).split())[:200] or type(e).__name__
