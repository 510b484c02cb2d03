"""The preparing stage's fast paths give exactly what the plain formulations they replaced give: calendar inputs and
forecast grids computed once per distinct timestamp, the trailing EWMAs run once for fitting and applying, scaler
group-bys on series indices, and the loader's shortcuts for files of outright contracts only."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from foxhunt.data.bars.load import LoadedBars
from foxhunt.data.bars.symbols import (
    FUTURES_RE,
    SPREAD_RE,
    drop_spreads,
    parse_futures,
    resolve_symbols,
    trade_date,
)
from foxhunt.data.config import DataConfig
from foxhunt.data.features.bar_features import raw_features
from foxhunt.data.features.known import DecoderKnown, decoder_known, decoder_timestamps, known_columns
from foxhunt.data.features.scaling import apply_scalers, fit_scalers, standardize, trailing
from foxhunt.data.features.seasonality import Season
from foxhunt.data.prepare import prepare_from_bars
from tests.data.features.test_scaling import opts

MIN = 60 * 10**9
CT = "America/Chicago"


def _stamps(offset_ns: int = 0) -> np.ndarray:
    """Minute bars of two series across the 2024 DST weekend, sorted by (series, ts): most minutes in both series,
    some in one only; with `offset_ns`, some bars off the minute lattice."""
    rng = np.random.default_rng(3)
    start = int(np.datetime64("2024-03-08T20:00", "ns").astype(np.int64))  # Fri 14:00 CST
    a = start + np.sort(rng.choice(3000, 900, replace=False)) * MIN
    b = start + np.sort(rng.choice(3000, 900, replace=False)) * MIN
    a[::11] += offset_ns
    return np.concatenate([a, b])


def _decoder_known_reference(ts: np.ndarray, step: int, d: int, season: Season | None) -> DecoderKnown:
    """decoder_known as it was: the grid of every bar, np.unique, every step of every origin checked."""
    grid = decoder_timestamps(ts, step, d, True, CT)  # (N, D)
    table = np.unique(grid)
    base = np.searchsorted(table, ts, side="right").astype(np.int64)
    lattice = np.array_equal(table[np.minimum(base[:, None] + np.arange(d), len(table) - 1)], grid)
    cal = known_columns(table, CT, True, None, season)
    cont = np.stack(list(cal.values()), axis=-1).astype(np.float32)
    return DecoderKnown(cont, table, base, None if lattice else np.searchsorted(table, grid).astype(np.int32))


@pytest.mark.parametrize("offset_ns", [0, 17])
def test_decoder_known_once_per_distinct_timestamp_matches_every_bar(offset_ns):
    ts = _stamps(offset_ns)
    season = Season(CT, 3.0, tuple(np.linspace(0.5, 1.5, 1440).tolist()))
    got, want = decoder_known(ts, MIN, 5, CT, True, None, season), _decoder_known_reference(ts, MIN, 5, season)
    assert (got.index is None) == (offset_ns == 0)
    for field in ("cont", "ts", "base", "index"):
        a, b = getattr(got, field), getattr(want, field)
        assert (a is None and b is None) or (a.dtype == b.dtype and np.array_equal(a, b)), field


def _bars(ts: np.ndarray) -> pl.DataFrame:
    rng = np.random.default_rng(4)
    close = 5000 * np.exp(np.cumsum(rng.normal(0, 1e-4, len(ts))))
    half = len(ts) // 2
    return pl.DataFrame({
        "series": ["ES"] * half + ["NQ"] * (len(ts) - half),
        "ts": pl.Series(ts).cast(pl.Datetime("ns", "UTC")),
        "open": close, "high": close * 1.0002, "low": close * 0.9998, "close": close,
        "volume": rng.integers(1, 50, len(ts)).astype(np.float64),
        "contract": ["ESH4"] * half + ["NQH4"] * (len(ts) - half),
    })


def test_row_calendar_once_per_distinct_timestamp_matches_every_row():
    bars = _bars(_stamps())
    p = prepare_from_bars(LoadedBars(bars, [], {}), DataConfig(encoder_length=10, horizon=5, val_fraction=0.3))
    w, tf = p.windows, p.transform
    cal = known_columns(w.ts_ns.numpy(), tf.exchange_tz, tf.intraday, tf.session_calendar, tf.scalers.season)
    want = np.stack(list(cal.values()), axis=-1).astype(np.float32)  # (N, Kr) row by row, as _windowed did
    assert w.n_known_cont == want.shape[1] == 6  # 5 calendar columns and tod_vol
    assert np.array_equal(w.cont[:, : w.n_known_cont].numpy(), want)


@pytest.mark.parametrize(
    ("target", "scaling", "kw"),
    [
        ("log_return", "volatility", {"season_tz": CT}),
        ("log_range", "volatility", {"vol_features": True}),
        ("log_range", "series", {"vol_estimator": "range", "vol_features": True}),
    ],
)
def test_the_trailing_inputs_standardize_as_apply_scalers(target, scaling, kw):
    bars = _bars(_stamps())
    feats = raw_features(bars, "ratio", target)
    names = ["ES", "NQ"]
    sidx = (bars["series"] == "NQ").to_numpy().astype(np.int64)
    train = np.arange(len(sidx)) % 900 < 600
    season_tz = kw.pop("season_tz", None)
    cfg = opts(target, scaling, vol_halflife=5.0, **kw)
    scalers = fit_scalers(feats, names, sidx, train, cfg, season_tz)
    trail = trailing(feats, names, sidx, scalers, cfg)  # as the trail stage hands them to the write
    got, want = standardize(feats, names, sidx, scalers, cfg, *trail), apply_scalers(feats, names, sidx, scalers, cfg)
    assert all(np.array_equal(a, b) for a, b in zip(got, want, strict=True))
    # The per-series statistics are the name group-by's, to float rounding (fitstats.py sums each series' run of
    # rows by itself, so that a panel fitted in pieces gets the same bits; polars sums in its own order).
    keep = train & ~feats["first"].to_numpy()
    by_name = feats.filter(pl.Series(keep)).group_by("series").agg(
        m=pl.col("log_volume").mean(), s=pl.col("log_volume").std())
    for name, m, s in by_name.iter_rows():
        got = scalers.series[name].moments["log_volume"]
        assert np.allclose([got.mean, got.std], [m, s], rtol=1e-12, atol=0)


def _raw(symbols: list[str]) -> pl.DataFrame:
    n = len(symbols)
    return pl.DataFrame({
        "symbol": symbols, "instrument_id": pl.Series(np.arange(n) % 3, dtype=pl.UInt32),
        "open": np.full(n, 10.0), "high": np.full(n, 11.0), "low": np.linspace(-1, 9, n), "close": np.full(n, 10.0),
    })


def _resolve_reference(df: pl.DataFrame) -> pl.DataFrame:
    """resolve_symbols' expressions for a file without null symbols, as they were before its shortcut."""
    iid = pl.col("instrument_id")
    not_outright = ~pl.col("symbol").str.contains(FUTURES_RE).fill_null(False)
    shared = (iid.n_unique().over("symbol") > 1) & iid.is_not_null() & not_outright
    split = pl.when(shared).then(pl.col("symbol") + "#" + iid.cast(pl.Utf8))
    return df.with_columns(by_instrument=shared.fill_null(False)).with_columns(
        symbol=pl.coalesce(split, pl.col("symbol")))


@pytest.mark.parametrize("symbols", [["ESH4", "ESM4", "NQH24"] * 4, ["ESH4", "ES.FUT", "ESM4"] * 4,
                                     ["ESH4", "ESH4-ESM4"] * 4])
def test_outright_only_shortcuts_match_the_row_by_row_expressions(symbols):
    df = _raw(symbols)
    got, n = resolve_symbols(df)
    want = _resolve_reference(df)
    assert got.equals(want) and n == want["by_instrument"].any() * want.filter("by_instrument")["instrument_id"].n_unique()
    low = pl.min_horizontal(*[pl.col(c).fill_nan(None) for c in ("open", "high", "low", "close")])
    spread = pl.col("symbol").str.contains(SPREAD_RE) | (pl.col("by_instrument") & (low.min().over("symbol") <= 0))
    kept, dropped, names = drop_spreads(got)
    assert kept.equals(got.filter(~spread)) and dropped == got.filter(spread).height
    assert names == sorted(set(got.filter(spread)["symbol"]))
    distinct = df["symbol"].unique()  # as load_raw shares it: the same frames and counts
    assert resolve_symbols(df, distinct)[0].equals(got)
    if n == 0:  # no symbol split: df's distinct symbols are still got's
        assert drop_spreads(got, distinct)[0].equals(kept) and drop_spreads(got, distinct)[1:] == (dropped, names)


def test_parse_futures_per_symbol_table_matches_polars_dates_and_years():
    rng = np.random.default_rng(5)
    ts = np.sort(rng.integers(-2 * 10**17, 4 * 10**18, 400))  # 1963 .. 2096, year ends included below
    ts[:4] = np.array(["1969-12-31T23:59:59.999999999", "1970-01-01", "2023-12-31T23:59:59.999999999",
                       "2024-01-01"], dtype="datetime64[ns]").astype(np.int64)
    symbols = rng.choice(np.array(["ESH4", "NQZ24", "ES", None], dtype=object), len(ts))
    df = pl.DataFrame({"ts": pl.Series(np.sort(ts)).cast(pl.Datetime("ns", "UTC")), "symbol": symbols,
                       "by_instrument": False})
    got = parse_futures(df, CT)
    year = pl.col("ts").dt.year()
    digits = pl.col("symbol").str.extract(r"(\d+)$").cast(pl.Int32)
    want = df.with_columns(
        root=pl.col("symbol").str.extract(r"^(ES|NQ)[HZ]"),
        expiry=(year + (digits - year) % (10 ** digits.cast(pl.Utf8).str.len_chars()).cast(pl.Int32)) * 12
        + pl.when(pl.col("symbol").str.contains("H")).then(3).otherwise(12),
        trade_date=trade_date(pl.col("ts"), CT),
    ).with_columns(expiry=pl.when(pl.col("root").is_not_null()).then("expiry"))
    assert got.equals(want, null_equal=True)
    assert got["root"].null_count() > 0 and got["symbol"].null_count() > 0  # plain and null symbols are there
