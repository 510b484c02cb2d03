"""Daily bars of a Chinese market, on its trading days: weekdays less the Shanghai exchange's holidays, written by
hand (National Day week 2016-10-03 .. 07, Spring Festival 2017-01-27 .. 02-02, ...), so that the tests of the
holiday grid (test_calendar_grid.py, test_store_pieces.py) do not take their expected dates from the calendar
package they check."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

XSHG_HOLIDAYS = ("2016-04-04", "2016-05-02", "2016-06-09", "2016-06-10", "2016-09-15", "2016-09-16", "2016-10-03",
                 "2016-10-04", "2016-10-05", "2016-10-06", "2016-10-07", "2017-01-02", "2017-01-27", "2017-01-30",
                 "2017-01-31", "2017-02-01", "2017-02-02")


@pytest.fixture(scope="session")
def xshg_days() -> np.ndarray:
    """(N,) datetime64[D] XSHG's trading days 2016-03-01 .. 2017-03-31: the weekdays less XSHG_HOLIDAYS."""
    days = np.arange(np.datetime64("2016-03-01"), np.datetime64("2017-04-01"))
    return days[np.is_busday(days) & ~np.isin(days, np.array(XSHG_HOLIDAYS, dtype="datetime64[D]"))]


@pytest.fixture(scope="session")
def xshg_daily_file(tmp_path_factory, xshg_days):
    """Three commodities' daily bars (naive dates, one parquet file, so that `prepare` may read it in pieces) on
    `xshg_days`."""
    rng = np.random.default_rng(11)
    days = xshg_days
    frames = []
    for k, symbol in enumerate(("COPPER", "REBAR", "SOYMEAL")):
        close = (100 + 50 * k) * np.exp(np.cumsum(rng.normal(0, 0.01, len(days))))
        open_ = np.concatenate([[close[0]], close[:-1]])
        wick = np.abs(rng.normal(0, 0.005, len(days))) * close
        frames.append(pl.DataFrame({
            "timestamp": days.astype("datetime64[us]"), "symbol": symbol, "open": open_,
            "high": np.maximum(open_, close) + wick, "low": np.minimum(open_, close) - wick, "close": close,
            "volume": rng.integers(1_000, 5_000, len(days)).astype(np.float64)}))
    path = tmp_path_factory.mktemp("xshg") / "cn_daily.parquet"
    pl.concat(frames).write_parquet(path)
    return path
