"""The bundled ES sample: Databento's physical format, CME sessions, the roll, and learnable volatility."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from foxhunt.data.io import announcements as sample_announcements
from foxhunt.data.io import sample
from foxhunt.errors import InputError

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
OUTRIGHTS = ("ESH4", "ESM4", "ESU4")


@pytest.fixture(scope="module")
def table() -> pa.Table:
    return sample.generate_sample()


@pytest.fixture(scope="module")
def bars(table: pa.Table) -> pl.DataFrame:
    return with_ct(table)


@pytest.fixture(scope="module")
def front(bars: pl.DataFrame) -> pl.DataFrame:
    return front_month(bars)


def with_ct(table: pa.Table) -> pl.DataFrame:
    """Bars with CT time and trade date (CT date of ts + 7 h) added."""
    ct = pl.col("ts_event").dt.convert_time_zone("America/Chicago")
    return pl.from_arrow(table).with_columns(
        ct=ct,
        trade_date=(ct + pl.duration(hours=7)).dt.date(),
        ct_min=ct.dt.hour().cast(pl.Int32) * 60 + ct.dt.minute(),
    )


def front_month(bars: pl.DataFrame) -> pl.DataFrame:
    """ESH4 up to the roll date, ESM4 after, with 1-minute log returns inside one contract and session."""
    roll = dt.date(2024, 3, 7)
    is_front = ((pl.col("symbol") == "ESH4") & (pl.col("trade_date") <= roll)) | (
        (pl.col("symbol") == "ESM4") & (pl.col("trade_date") > roll)
    )
    return (
        bars.filter(is_front)
        .sort("ts_event")
        .with_columns(ret=pl.col("close").log().diff().over("symbol", "trade_date"))
    )


def test_schema_is_databento_to_parquet(table: pa.Table, tmp_path: Path) -> None:
    expected = [
        ("rtype", pa.uint8()),
        ("publisher_id", pa.uint16()),
        ("instrument_id", pa.uint32()),
        ("open", pa.float64()),
        ("high", pa.float64()),
        ("low", pa.float64()),
        ("close", pa.float64()),
        ("volume", pa.uint64()),
        ("symbol", pa.large_string()),
        ("ts_event", pa.timestamp("ns", tz="UTC")),
    ]
    assert [(f.name, f.type) for f in table.schema] == expected
    meta = json.loads(table.schema.metadata[b"pandas"])
    assert meta["index_columns"] == ["ts_event"]
    assert [c["name"] for c in meta["columns"]] == [name for name, _ in expected]
    assert set(table.column("rtype").to_pylist()) == {33}
    assert set(table.column("publisher_id").to_pylist()) == {1}

    path = sample.write_sample(tmp_path / "es.parquet")
    assert path == tmp_path / "es.parquet"
    pf = pq.ParquetFile(path)
    sizes = [pf.metadata.row_group(i).num_rows for i in range(pf.metadata.num_row_groups)]
    assert sizes[:-1] == [65_536] * (len(sizes) - 1) and 0 < sizes[-1] <= 65_536 and len(sizes) >= 2
    assert {pf.metadata.row_group(0).column(i).compression for i in range(10)} == {"SNAPPY"}
    assert pq.read_table(path).equals(table, check_metadata=True)
    assert not list(tmp_path.glob(".*.tmp"))  # the atomic writer left no temporary file


def test_schema_matches_the_databento_fixture(table: pa.Table) -> None:
    fixture = FIXTURES / "es_fut_ohlcv1m_databento.parquet"
    theirs = pq.read_schema(fixture)
    assert table.schema.remove_metadata().equals(theirs.remove_metadata())
    ours_meta = json.loads(table.schema.metadata[b"pandas"])
    their_meta = json.loads(theirs.metadata[b"pandas"])
    for key in ("index_columns", "columns", "column_indexes"):
        assert ours_meta[key] == their_meta[key]


def test_pandas_reads_ts_event_back_as_the_index(tmp_path: Path) -> None:
    pd = pytest.importorskip("pandas")
    frame = pd.read_parquet(sample.write_sample(tmp_path / "es.parquet"))
    assert frame.index.name == "ts_event"
    assert str(frame.index.dtype) == "datetime64[ns, UTC]"
    assert list(frame.columns) == [
        "rtype",
        "publisher_id",
        "instrument_id",
        "open",
        "high",
        "low",
        "close",
        "volume",
        "symbol",
    ]


def test_deterministic_and_seeded(table: pa.Table) -> None:
    assert sample.generate_sample().equals(table, check_metadata=True)
    other = sample.generate_sample(seed=sample.DEFAULT_SEED + 1)
    assert not np.array_equal(other.column("close").to_numpy(), table.column("close").to_numpy())


def test_rows_keyed_and_sorted(bars: pl.DataFrame) -> None:
    assert bars.select(pl.struct("ts_event", "instrument_id").is_unique().all()).item()
    assert bars.select(pl.col("ts_event").is_sorted()).item()
    ids = bars.group_by("symbol").agg(pl.col("instrument_id").unique())
    assert dict(zip(ids["symbol"], ids["instrument_id"].to_list(), strict=True)) == {
        "ESH4": [4001],
        "ESM4": [4002],
        "ESU4": [4003],
        "ESH4-ESM4": [4501],
    }
    assert bars["volume"].min() >= 1  # minutes without trades have no row


def test_sessions_follow_cme_globex_hours(bars: pl.DataFrame) -> None:
    assert bars.filter((pl.col("ct_min") >= 16 * 60) & (pl.col("ct_min") < 17 * 60)).is_empty()
    weekday = pl.col("ct").dt.weekday()  # Monday 1 .. Sunday 7
    assert bars.filter(weekday == 6).is_empty()
    assert bars.filter((weekday == 7) & (pl.col("ct_min") < 17 * 60)).is_empty()
    assert bars.filter((weekday == 5) & (pl.col("ct_min") >= 16 * 60)).is_empty()
    assert bars["trade_date"].min() == dt.date(2024, 2, 19) and bars["trade_date"].max() == dt.date(
        2024, 3, 15
    )
    assert bars.filter(pl.col("trade_date").dt.weekday() > 5).is_empty()


def test_presidents_day_halts_at_noon(bars: pl.DataFrame) -> None:
    esh4 = bars.filter(pl.col("symbol") == "ESH4")
    holiday = esh4.filter(pl.col("trade_date") == dt.date(2024, 2, 19))
    assert holiday["ct"].max().replace(tzinfo=None) == dt.datetime(2024, 2, 19, 11, 59)
    after = esh4.filter(pl.col("trade_date") == dt.date(2024, 2, 20))
    assert after["ct"].min().replace(tzinfo=None) == dt.datetime(2024, 2, 19, 17, 0)
    normal = esh4.filter(pl.col("trade_date") == dt.date(2024, 2, 20))
    assert normal["ct"].max().replace(tzinfo=None) == dt.datetime(2024, 2, 20, 15, 59)


def test_utc_open_moves_with_dst(bars: pl.DataFrame) -> None:
    opens = bars.group_by("trade_date").agg(pl.col("ts_event").min()).sort("trade_date")
    utc = dict(zip(opens["trade_date"], opens["ts_event"], strict=True))
    assert utc[dt.date(2024, 2, 19)] == dt.datetime(2024, 2, 18, 23, 0, tzinfo=dt.UTC)  # CST
    assert utc[dt.date(2024, 3, 8)] == dt.datetime(2024, 3, 7, 23, 0, tzinfo=dt.UTC)
    assert utc[dt.date(2024, 3, 11)] == dt.datetime(2024, 3, 10, 22, 0, tzinfo=dt.UTC)  # CDT from 03-10
    assert utc[dt.date(2024, 3, 15)] == dt.datetime(2024, 3, 14, 22, 0, tzinfo=dt.UTC)


def test_esh4_and_its_spread_stop_at_expiry(bars: pl.DataFrame) -> None:
    expiry = dt.datetime(2024, 3, 15, 8, 30)
    for symbol in ("ESH4", "ESH4-ESM4"):
        last = bars.filter(pl.col("symbol") == symbol)["ct"].max().replace(tzinfo=None)
        assert dt.datetime(2024, 3, 15) < last < expiry
    assert bars.filter(pl.col("symbol") == "ESM4")["trade_date"].max() == dt.date(2024, 3, 15)


def test_ohlc_consistent_and_on_the_tick_grid(bars: pl.DataFrame) -> None:
    o, h, lo, c = (bars[k].to_numpy() for k in ("open", "high", "low", "close"))
    assert np.all(lo <= np.minimum(o, c)) and np.all(h >= np.maximum(o, c))
    prices = np.stack([o, h, lo, c])  # (4, rows)
    spread = (bars["symbol"] == "ESH4-ESM4").to_numpy()
    np.testing.assert_array_equal(prices[:, ~spread] * 4, np.round(prices[:, ~spread] * 4))  # 0.25 exactly
    np.testing.assert_allclose(prices[:, spread] * 20, np.round(prices[:, spread] * 20), atol=1e-6)  # 0.05
    assert 4_700 < prices[:, ~spread].min() and prices[:, ~spread].max() < 5_300
    assert -56 < prices[:, spread].min() and prices[:, spread].max() < -48  # negative: contango
    assert np.mean(h[~spread] > lo[~spread]) > 0.5  # bars have a range, not just a close


def test_contracts_share_one_walk_plus_carry(bars: pl.DataFrame) -> None:
    wide = bars.pivot("symbol", index="ts_event", values="close").drop_nulls(["ESH4", "ESM4", "ESH4-ESM4"])
    gap = (wide["ESH4"] - wide["ESM4"]).to_numpy()
    assert np.abs(gap - wide["ESH4-ESM4"].to_numpy()).max() < 1.5  # spread bar = leg difference, +- noise
    assert abs(np.median(gap) - (-52.0)) < 1.5
    carry = wide.drop_nulls("ESU4").select(pl.col("ESU4") - pl.col("ESM4")).to_series().to_numpy()
    assert abs(np.median(carry) - 53.5) < 1.5


def test_volume_rolls_from_esh4_to_esm4_in_roll_week(bars: pl.DataFrame) -> None:
    daily = (
        bars.filter(pl.col("symbol").is_in(OUTRIGHTS))
        .group_by("trade_date", "symbol")
        .agg(pl.col("volume").sum())
        .sort("volume", descending=True)
        .group_by("trade_date", maintain_order=True)
        .agg(pl.col("symbol").first().alias("front"))
        .sort("trade_date")
    )
    front = dict(zip(daily["trade_date"], daily["front"], strict=True))
    assert all(s == "ESH4" for d, s in front.items() if d <= dt.date(2024, 3, 4))
    assert all(s == "ESM4" for d, s in front.items() if d >= dt.date(2024, 3, 8))
    spread = bars.filter(pl.col("symbol") == "ESH4-ESM4").group_by("trade_date").agg(pl.col("volume").sum())
    by_day = dict(zip(spread["trade_date"], spread["volume"], strict=True))
    assert by_day[dt.date(2024, 3, 6)] > 5 * by_day[dt.date(2024, 2, 27)]  # the roll trades as a spread
    esu4 = bars.filter(pl.col("symbol") == "ESU4")
    assert esu4.height < 0.6 * bars.filter(pl.col("symbol") == "ESM4").height  # sparse back month


def test_intraday_profile_is_u_shaped_with_bumps(front: pl.DataFrame) -> None:
    def mean_abs(lo: int, hi: int) -> float:
        sel = front.filter((pl.col("ct_min") >= lo) & (pl.col("ct_min") < hi))
        return float(sel["ret"].abs().mean())

    def mean_volume(lo: int, hi: int) -> float:
        return float(front.filter((pl.col("ct_min") >= lo) & (pl.col("ct_min") < hi))["volume"].mean())

    rth, overnight = (510, 900), (18 * 60, 24 * 60)
    assert mean_abs(*rth) > 2.0 * mean_abs(*overnight)
    assert mean_volume(*rth) > 4.0 * mean_volume(*overnight)
    assert mean_abs(510, 540) > 1.3 * mean_abs(660, 780) < mean_abs(870, 900)  # U: open, midday, close
    assert mean_volume(510, 540) > 1.3 * mean_volume(660, 780) < mean_volume(870, 900)
    assert mean_abs(120, 180) > 1.3 * mean_abs(0, 90)  # London 02:00 CT
    assert mean_abs(450, 465) > 1.3 * mean_abs(360, 420)  # data 07:30 CT


def test_volatility_is_predictable_and_fat_tailed(front: pl.DataFrame) -> None:
    """The quantile width must be learnable: recent volatility predicts the next bars' volatility."""
    ret = front["ret"].fill_null(0.0).to_numpy()
    a = np.abs(ret)
    recent = np.convolve(a, np.ones(64) / 64)[: a.size]  # mean |r| over bars t-63..t
    ahead = np.convolve(a[::-1], np.ones(5))[: a.size][::-1]  # sum |r| over bars t..t+4
    x, y = np.log(recent[64:-6] + 1e-6), np.log(ahead[65:-5] + 1e-6)
    assert np.corrcoef(x, y)[0, 1] > 0.3
    hourly = front.with_columns(hour_sd=pl.col("ret").std().over(pl.col("ct_min") // 60))
    z = (hourly["ret"] / hourly["hour_sd"]).drop_nulls().drop_nans().to_numpy()
    assert np.mean(z**4) / np.mean(z**2) ** 2 > 4.0  # kurtosis above the normal's 3
    daily = front.group_by("trade_date").agg(pl.col("ret").std()).sort("trade_date")["ret"].to_numpy()
    assert daily.max() > 1.5 * daily.min()  # sessions differ in volatility (GARCH-like)


def test_front_series_size_suits_a_quick_default_run(front: pl.DataFrame) -> None:
    assert 25_000 <= front.height <= 35_000


def test_ar1_matches_the_recursion_across_blocks() -> None:
    e = np.zeros(10)
    e[0], e[6] = 1.0, 2.0
    want = np.array([1, 0.5, 0.25, 0.125, 0.0625, 0.03125, 2.015625, 1.0078125, 0.50390625, 0.251953125])
    np.testing.assert_allclose(sample._ar1(e, 0.5, block=4), want, rtol=1e-12)
    np.testing.assert_allclose(sample._ar1(e, 0.5), want, rtol=1e-12)  # default block shrinks for small phi


def test_bridge_extremes_bound_the_bar() -> None:
    rng = np.random.default_rng(0)
    start = np.array([5000.1, 5000.0, -52.02])
    end = np.array([5000.9, 4999.0, -52.11])
    o, h, lo, c = sample._ohlc(start, end, np.array([1.0, 1.0, 0.1]), 0.25, rng)
    np.testing.assert_array_equal(o, [5000.0, 5000.0, -52.0])
    np.testing.assert_array_equal(c, [5001.0, 4999.0, -52.0])
    assert np.all(h >= np.maximum(o, c)) and np.all(lo <= np.minimum(o, c))


def test_bundled_sample_is_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FOXHUNT_CACHE_DIR", str(tmp_path / "cache"))
    path = sample.bundled_sample_path()
    assert path.parent == tmp_path / "cache" and path.is_file()
    assert f"v{sample.SAMPLE_VERSION}" in path.name and str(sample.DEFAULT_SEED) in path.name
    stamp = path.stat().st_mtime_ns

    def no_regeneration(seed: int = 0) -> pa.Table:
        raise AssertionError("the cached sample was generated again")

    with monkeypatch.context() as m:
        m.setattr(sample, "generate_sample", no_regeneration)
        assert sample.bundled_sample_path() == path
    assert path.stat().st_mtime_ns == stamp

    path.unlink()
    assert sample.bundled_sample_path() == path and path.is_file()  # regenerated when missing
    assert pq.read_table(path).num_rows == sample.generate_sample().num_rows


def test_bundled_sample_defaults_to_home_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FOXHUNT_CACHE_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert sample.bundled_sample_path().parent == tmp_path / ".cache" / "foxhunt"


def test_unwritable_cache_is_an_input_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("FOXHUNT_CACHE_DIR", str(blocker / "cache"))
    with pytest.raises(InputError, match="FOXHUNT_CACHE_DIR"):
        sample.bundled_sample_path()


# -- announcements (opt-in) -----------------------------------------------------------------------------------------

DEFAULT_SHA256 = "e101eece197724c0d5a12acfe74ffcc8ef72bae0d32a3e3d02e5ac59b50cedba"  # the v2 generator, numpy 2


def table_sha256(table: pa.Table) -> str:
    h = hashlib.sha256(str(table.schema).encode())
    for name in table.column_names:
        for buf in table.column(name).combine_chunks().buffers():
            if buf is not None:
                h.update(bytes(buf))
    return h.hexdigest()


def test_default_sample_is_unchanged_by_the_announcements_option(table: pa.Table) -> None:
    """Cached files and published figures rest on the default sample: adding the option changed none of its bytes.
    (The hash was taken from the generator before the option existed; `table` is `generate_sample()`.)"""
    assert table_sha256(table) == DEFAULT_SHA256
    assert sample.generate_sample(announcements=False).equals(table, check_metadata=True)


@pytest.fixture(scope="module")
def announced() -> tuple[pl.DataFrame, pl.DataFrame]:
    """(front-month bars of the announcements sample with `ret`, ct_min and trade_date; its events in CT)."""
    table = sample.generate_sample(announcements=True)
    events = pl.from_arrow(sample.sample_events()).with_columns(
        ct=pl.col("ts").dt.convert_time_zone("America/Chicago")
    )
    return front_month(with_ct(table)), events.with_columns(
        day=pl.col("ct").dt.date(), ct_min=pl.col("ct").dt.hour().cast(pl.Int32) * 60 + pl.col("ct").dt.minute()
    )


def test_announcements_are_scheduled_irregularly(announced) -> None:
    """Four a week, on distinct days of differing weekdays and clock times: not a time-of-day pattern."""
    _, events = announced
    assert events.schema["ts"] == pl.Datetime("ns", "UTC") and set(events["name"]) == {"announcement"}
    weeks = events["day"].dt.week().value_counts()["count"].to_list()
    assert weeks == [sample_announcements.PER_WEEK] * 4  # four weeks in the span
    assert events["day"].n_unique() == events.height
    assert events["day"].dt.weekday().n_unique() >= 3 and events["ct_min"].n_unique() >= 2
    assert set(events["ct_min"]) <= {7 * 60 + 30, 9 * 60, 13 * 60}
    np.testing.assert_array_equal(events["ts"].cast(pl.Int64).to_numpy(), sample.announcement_times())


def test_announcements_burst_beyond_their_clock_times(announced) -> None:
    """The 10 minutes after an announcement move > 3x the same minutes on days without one: a calendar predicts
    them, the clock does not."""
    front_bars, events = announced
    off_days = ~pl.col("trade_date").is_in(events["day"].to_list())
    after, control = [], []
    for day, m in zip(events["day"], events["ct_min"], strict=True):
        window = (pl.col("ct_min") >= m) & (pl.col("ct_min") < m + 10)
        after.append(front_bars.filter(window & (pl.col("trade_date") == day))["ret"].abs())
        control.append(front_bars.filter(window & off_days)["ret"].abs())
    burst, usual = pl.concat(after), pl.concat(control)
    assert burst.len() >= 70  # each announcement minute and the 9 after it trade
    assert burst.mean() > 3.0 * usual.mean()


def test_announcements_move_only_prices(table: pa.Table) -> None:
    """The same rows trade the same volumes, and prices move alike before the first announcement's calm: the
    schedule draws from a stream of its own, so the option moves no random draw and only the calendar tells."""
    other = sample.generate_sample(announcements=True)
    for col in ("ts_event", "instrument_id", "symbol", "volume"):
        assert other.column(col).equals(table.column(col))
    ts = table.column("ts_event").cast(pa.int64()).to_numpy()
    sel = (table.column("symbol").to_numpy(zero_copy_only=False) == "ESM4") & (
        ts < sample.announcement_times()[0] - 20 * 60 * 10**9
    )
    change, change2 = (np.diff(t.column("close").to_numpy()[sel]) for t in (table, other))  # points per bar
    apart = np.abs(change2 - change)  # the pinned end's slightly other trend moves a tick rounding now and then
    assert sel.sum() > 1_000 and np.mean(apart < 1e-9) > 0.5 and apart.max() <= 0.25 + 1e-9
    assert not other.column("close").equals(table.column("close"))


def test_sample_events_read_as_an_event_calendar(tmp_path: Path) -> None:
    from foxhunt.data.features.events import read_events

    bars_path = tmp_path / "es.parquet"
    path = sample.write_sample_events(sample.events_path(bars_path))
    assert path == tmp_path / "es.events.parquet"
    cal = read_events(str(path))
    assert cal.names == ("announcement",)
    np.testing.assert_array_equal(cal.times[0], sample.announcement_times())
    assert sample.events_path("out/x") == Path("out/x.events.parquet")


def test_bundled_variants_are_cached_apart(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FOXHUNT_CACHE_DIR", str(tmp_path))
    plain, announced_path = sample.bundled_sample_path(), sample.bundled_sample_path(announcements=True)
    assert plain != announced_path and "announcements" in announced_path.name
    assert sample.events_path(announced_path).is_file() and not sample.events_path(plain).exists()
    assert table_sha256(pq.read_table(plain)) == DEFAULT_SHA256
    assert not pq.read_table(announced_path).equals(pq.read_table(plain))


def test_announcement_variance_by_hand() -> None:
    from foxhunt.data.io import announcements as news

    minute, at = news.MINUTE_NS, 10**15
    ts = at + minute * np.array([-100, -15, -1, 0, 10, 1000])
    want = [1.0, news.CALM, news.CALM, 1 + news.PEAK, 1 + news.PEAK * np.exp(-10 / news.DECAY_MIN), 1.0]
    np.testing.assert_allclose(news.variance_multiplier(ts, np.array([at])), want, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(news.variance_multiplier(ts, np.array([], dtype=np.int64)), np.ones(6))


def test_no_announcement_runs_into_a_close() -> None:
    """Presidents' Day closes at 12:00 CT: a 13:00 announcement cannot fall on it, however often it is drawn."""
    from foxhunt.data.io import announcements as news

    day = dt.date(2024, 2, 19)
    close = dt.datetime.combine(day, dt.time(12, 0), tzinfo=news.CT)
    for seed in range(20):
        for t in news.schedule(np.random.default_rng(seed), [(day, close)]):
            at = dt.datetime.fromtimestamp(int(t) / 1e9, tz=news.CT)
            assert at + dt.timedelta(minutes=news.AFTER_MIN) <= close
