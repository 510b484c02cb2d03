"""Checks before believing a file (issue 9, items 7-13): every case a test that failed on the old loader."""

from __future__ import annotations

import datetime as dt
import logging
import sys
from pathlib import Path

import polars as pl
import pytest

from foxhunt.cli import main
from foxhunt.data.bars.load import load_bars
from foxhunt.data.bars.sessions import CME_EQUITY, calendar_sessions, closed_share, session_for
from foxhunt.data.bars.symbols import trade_date
from foxhunt.data.bars.validate import check_ratio_adjust, clean_bars
from foxhunt.data.config import DataConfig
from foxhunt.data.io.normalise import RAW_SCHEMA
from foxhunt.data.io.read import read_bars
from foxhunt.errors import InputError
from foxhunt.settings import data_config
from tests.data.test_bad_input import _fails

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
ES_1M = FIXTURES / "es_fut_ohlcv1m_databento.parquet"
ES_1D = FIXTURES / "es_fut_ohlcv1d_databento.parquet"
DAILY = FIXTURES / "generic_ohlcv_daily.parquet"
CT = "America/Chicago"
UTC = dt.UTC


def _bars(n: int, bad: dict[int, dict]) -> pl.DataFrame:
    """n clean daily bars of one symbol (open 10, high 11, low 9, close 10.5), with the fields in `bad` overwritten."""
    recs = []
    for i in range(n):
        r = {"open": 10.0, "high": 11.0, "low": 9.0, "close": 10.5, "volume": 100.0, **bad.get(i, {})}
        ts = dt.datetime(2024, 1, 1, tzinfo=UTC) + dt.timedelta(days=i)
        recs.append({"file_idx": 0, "row": i, "ts": ts, **r, "symbol": "A", "instrument_id": None, "rtype": None})
    return pl.DataFrame(recs, schema=RAW_SCHEMA)


# 7. Non-finite prices


def test_infinite_prices_are_dropped_and_counted_like_nan():
    out, stats = clean_bars(_bars(200, {3: {"close": float("inf")}, 7: {"volume": float("-inf")}}), ["f"])
    assert stats["nan_rows_dropped"] == 2
    assert out.height == 198 and out.select(pl.all_horizontal(pl.col("close", "volume").is_finite()).all()).item()


def test_too_many_infinite_prices_stop_the_load(tmp_path):
    path = tmp_path / "inf.csv"
    path.write_text("timestamp,open,high,low,close,volume\n2024-03-04,10,11,9,10,1\n2024-03-05,10,inf,9,10,1\n")
    msg = _fails([path])
    assert f"{path} data row 2" in msg and "1 of 2 rows (50.0%) have a missing or non-finite price" in msg


# 8. OHLC consistency


def test_inconsistent_ohlc_rows_are_dropped_and_counted():
    bad = {5: {"high": 10.2}, 9: {"low": 10.6}}  # high below close 10.5; low above open 10 and close 10.5
    out, stats = clean_bars(_bars(300, bad), ["f"])
    assert stats["inconsistent_rows_dropped"] == 2 and stats["nan_rows_dropped"] == 0
    assert out.height == 298 and 5 not in out.get_column("row").to_list()


def test_too_many_inconsistent_rows_stop_naming_the_first(tmp_path):
    path = tmp_path / "ohlc.csv"
    path.write_text("timestamp,open,high,low,close,volume\n2024-03-04,10,11,9,10,1\n2024-03-05,10,11,10.5,10.8,1\n")
    msg = _fails([path])
    assert f"{path} data row 2" in msg and "low 10.5 is above min(open, close) 10.0" in msg
    assert "1 of 2 rows (50.0%)" in msg and "fix or re-export" in msg


# 9. Mixed bar sizes


def test_minute_and_daily_databento_files_are_refused_naming_both():
    msg = _fails([ES_1M, ES_1D])
    assert str(ES_1M) in msg and str(ES_1D) in msg and "ohlcv-1m" in msg and "ohlcv-1d" in msg


def test_generic_files_of_different_spacing_are_refused(tmp_path):
    minute = tmp_path / "minute.csv"
    minute.write_text(
        "timestamp,open,high,low,close,volume\n"
        + "".join(f"2024-03-04 15:{m:02d},10,11,9,10,1\n" for m in range(30))
    )
    msg = _fails([DAILY, minute])
    assert str(DAILY) in msg and str(minute) in msg and "1d bars" in msg and "1m bars" in msg


def test_one_file_holding_two_rtypes_is_refused(tmp_path):
    both = tmp_path / "both.parquet"
    pl.concat([pl.read_parquet(ES_1D), pl.read_parquet(FIXTURES / "es_fut_ohlcv1h_databento.parquet")]).write_parquet(
        both
    )
    msg = _fails([both])
    assert str(both) in msg and "ohlcv-1h and ohlcv-1d" in msg


def test_files_of_one_bar_size_are_still_read_together(tmp_path):
    bars = pl.read_parquet(ES_1M)
    cut = dt.datetime(2024, 3, 1, tzinfo=UTC)
    bars.filter(pl.col("ts_event") < cut).write_parquet(tmp_path / "a.parquet")
    bars.filter(pl.col("ts_event") >= cut).write_parquet(tmp_path / "b.parquet")
    raw, files = read_bars([str(tmp_path)])
    assert raw.height == bars.height and len(files) == 2


# 10. Naive local timestamps


@pytest.fixture(scope="module")
def chicago_naive(tmp_path_factory) -> Path:
    """One week of the ES minute fixture with ts_event rewritten as naive Chicago wall-clock times."""
    path = tmp_path_factory.mktemp("tz") / "es_chicago.parquet"
    week = pl.read_parquet(ES_1M).filter(pl.col("ts_event") < dt.datetime(2024, 2, 24, tzinfo=UTC))
    week.with_columns(pl.col("ts_event").dt.convert_time_zone(CT).dt.replace_time_zone(None)).write_parquet(path)
    return path


def test_naive_chicago_times_read_as_utc_are_refused_naming_timezone(chicago_naive):
    msg = _fails([chicago_naive])
    assert str(chicago_naive) in msg and "fall where the exchange is closed" in msg
    assert "--timezone America/Chicago" in msg and "--timezone UTC" in msg


def test_timezone_option_reads_naive_local_times_back_to_utc(chicago_naive):
    got = load_bars(DataConfig(paths=(str(chicago_naive),), timezone=CT))
    week = pl.read_parquet(ES_1M).filter(pl.col("ts_event") < dt.datetime(2024, 2, 24, tzinfo=UTC))
    want = load_bars(DataConfig(paths=(str(_write(week, chicago_naive.parent / "utc.parquet")),)))
    assert got.bars.equals(want.bars)
    assert got.report["closed_share"] == 0.0 and got.report["timezone"] == f"{CT} (naive timestamps)"


def test_timezone_utc_keeps_naive_times_with_a_warning(chicago_naive, caplog):
    got = load_bars(DataConfig(paths=(str(chicago_naive),), timezone="UTC"))
    assert got.report["closed_share"] > 0.01
    assert any("--timezone" in r.getMessage() for r in caplog.records)


def test_unknown_timezone_is_refused():
    with pytest.raises(InputError, match="--timezone 'Mars/Olympus' is not a time zone"):
        DataConfig(timezone="Mars/Olympus")


def test_a_saved_data_config_without_an_option_is_refused_not_defaulted():
    saved = DataConfig().to_dict()
    del saved["timezone"], saved["price_scale"]
    with pytest.raises(KeyError, match="timezone, price_scale"):
        DataConfig.from_dict(saved)


def _write(frame: pl.DataFrame, path: Path) -> Path:
    frame.write_parquet(path)
    return path


# 11. Integer prices


def _cents(tmp_path: Path) -> Path:
    path = tmp_path / "cents.parquet"
    ts = [dt.datetime(2024, 3, d) for d in range(4, 9)]
    cents = [6_902_062, 6_903_000, 6_901_500, 6_904_250, 6_905_000]
    pl.DataFrame(
        {"timestamp": ts, "open": cents, "high": [c + 100 for c in cents], "low": [c - 100 for c in cents],
         "close": cents, "volume": [10] * 5}
    ).write_parquet(path)
    return path


def test_integer_prices_of_a_generic_file_keep_their_value(tmp_path):
    raw, _ = read_bars([str(_cents(tmp_path))])
    assert raw.get_column("close").to_list()[0] == 6_902_062.0


def test_price_scale_turns_integer_cents_into_dollars(tmp_path):
    got = load_bars(DataConfig(paths=(str(_cents(tmp_path)),), price_scale=100))
    assert got.bars.get_column("close").to_list()[0] == pytest.approx(69_020.62)


def test_price_scale_must_be_positive():
    with pytest.raises(InputError, match="--price-scale must be positive"):
        DataConfig(price_scale=0)


# 12. Negative prices


def _crude(tmp_path: Path) -> Path:
    """Daily CLK0/CLM0 bars 2020-04-13 .. 04-24; CLK0 trades at -37.63 on 04-20, volume moves to CLM0 from 04-21."""
    rows = []
    days = [d for d in range(13, 25) if dt.date(2020, 4, d).weekday() < 5]
    for d in days:
        k = -37.63 if d == 20 else 20.0 + 0.1 * d
        rows.append((f"2020-04-{d:02d}", "CLK0", k, 900 if d < 21 else 50))
        rows.append((f"2020-04-{d:02d}", "CLM0", 25.0 + 0.1 * d, 100 if d < 21 else 950))
    path = tmp_path / "cl.csv"
    path.write_text(
        "timestamp,symbol,open,high,low,close,volume\n"
        + "".join(f"{t},{s},{c},{c + 1},{c - 1},{c},{v}\n" for t, s, c, v in rows)
    )
    return path


def test_negative_prices_load_with_difference_adjustment(tmp_path):
    got = load_bars(DataConfig(paths=(str(_crude(tmp_path)),), adjust="difference"))
    (roll,) = got.rolls
    assert (roll["from"], roll["to"]) == ("CLK0", "CLM0")
    assert got.bars.get_column("low").min() < 0  # the negative bar is kept, shifted by the roll gap


def test_negative_prices_load_unadjusted(tmp_path):
    got = load_bars(DataConfig(paths=(str(_crude(tmp_path)),), adjust="none"))
    assert got.bars.get_column("close").min() == -37.63


def test_negative_prices_with_ratio_adjustment_name_adjust(tmp_path):
    path = _crude(tmp_path)
    msg = _fails([path])  # --adjust ratio is the default
    assert f"{path} data row" in msg and "low -38.63 is not positive (1 row like this)" in msg
    assert "--adjust difference" in msg and "--adjust none" in msg


def test_ratio_check_passes_positive_prices():
    check_ratio_adjust(_bars(5, {}), ["f"])


# 13. Sessions per root


def test_trade_date_uses_the_roots_session_start():
    # Monday 2024-03-04 18:00 CT: ES (opens 17:00) is already in Tuesday's session, corn (opens 19:00) still Monday's.
    ts = dt.datetime(2024, 3, 5, 0, 0, tzinfo=UTC)
    got = pl.select(
        es=trade_date(pl.lit(ts), CT, pl.lit("ES")), zc=trade_date(pl.lit(ts), CT, pl.lit("ZC"))
    ).row(0)
    assert got == (dt.date(2024, 3, 5), dt.date(2024, 3, 4))


def test_sessions_come_from_the_exchange_calendar():
    zc = session_for("ZC")
    assert (zc.calendar, zc.open_min, zc.close_min) == ("CMEGlobex_Grains", 19 * 60, 13 * 60 + 20)
    assert session_for("ES").open_min == 17 * 60 and session_for("ES").tz == CT


def test_unknown_root_or_no_calendar_package_gets_the_cme_equity_default(monkeypatch):
    assert session_for("XYZ") == CME_EQUITY == session_for(None)
    monkeypatch.setitem(sys.modules, "pandas_market_calendars", None)  # import now raises ImportError
    session_for.cache_clear()
    calendar_sessions.cache_clear()
    try:
        assert session_for("ZC") == CME_EQUITY
    finally:
        session_for.cache_clear()
        calendar_sessions.cache_clear()


# What `foxhunt inspect` reports


def test_inspect_reports_dropped_rows_time_zone_and_halt_share(tmp_path, capsys):
    path = tmp_path / "daily.parquet"
    frame = pl.read_parquet(DAILY)
    frame.with_columns(
        close=pl.when(pl.int_range(pl.len()) == 10).then(float("inf")).otherwise("close"),
        high=pl.when(pl.int_range(pl.len()) == 20).then(pl.col("low") - 1).otherwise("high"),
    ).write_parquet(path)
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "dropped 1 missing/non-finite, 1 inconsistent (OHLC) and 0 duplicate rows" in out
    assert "times read as UTC (naive timestamps), session halt not checked (daily bars)" in out


def test_inspect_json_has_the_halt_share_of_minute_bars(capsys):
    assert main(["inspect", str(ES_1M), "--json", "--timezone", "UTC"]) == 0
    import json

    checks = json.loads(capsys.readouterr().out)["checks"]
    assert checks["closed_share"] == 0.0 and checks["timezone"] == "UTC (timestamps with a zone)"
    assert checks["nan_rows_dropped"] == 0 and checks["inconsistent_rows_dropped"] == 0


def test_inspect_refuses_chicago_times_in_one_line(chicago_naive, capsys):
    assert main(["inspect", str(chicago_naive)]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("foxhunt: error:") and "--timezone" in last


def test_halt_share_uses_each_roots_session():
    # Tuesday 2024-03-05 14:00 CT (20:00 UTC): ES trades, corn (ZC) is in its 13:20-19:00 halt.
    bars = pl.DataFrame(
        {"ts": [dt.datetime(2024, 3, 5, 20, 0, tzinfo=UTC)] * 2, "root": ["ES", "ZC"], "symbol": ["ESH4", "ZCH4"]}
    )
    assert closed_share(bars.head(1), CT) == 0.0
    assert closed_share(bars.tail(1), CT) == 1.0


def test_new_flags_reach_the_data_config():
    cfg = data_config({"timezone": CT, "price_scale": "100"}, ())
    assert (cfg.timezone, cfg.price_scale) == (CT, 100.0)
    assert (data_config({}, ()).timezone, data_config({}, ()).price_scale) == (None, 1.0)


def test_naive_new_york_times_read_as_utc_name_the_calendars_zone(tmp_path):
    pytest.importorskip("pandas_market_calendars")
    path = _new_york_15m(tmp_path, dt.time(9, 30))
    with pytest.raises(InputError) as err:
        load_bars(DataConfig(paths=(str(path),), calendar="XNYS"))
    assert "--timezone America/New_York" in str(err.value) and "America/Chicago" not in str(err.value)


def _new_york_15m(tmp_path: Path, first: dt.time) -> Path:
    """Naive New York 15-minute bars of KO on eight weekdays, 26 a day from `first` (09:30: start stamps)."""
    days = [day for d in range(10) if (day := dt.date(2024, 3, 4) + dt.timedelta(days=d)).weekday() < 5]
    times = [dt.datetime.combine(day, first) + dt.timedelta(minutes=15 * k) for day in days for k in range(26)]
    n = len(times)
    return _write(pl.DataFrame({"timestamp": times, "symbol": ["KO"] * n, "open": [60.0] * n, "high": [60.1] * n,
                                "low": [59.9] * n, "close": [60.0] * n, "volume": [1e4] * n}),
                  tmp_path / f"ko_{first.hour}{first.minute}.parquet")


def test_bars_stamped_at_their_end_are_named_under_a_calendar(tmp_path, caplog):
    pytest.importorskip("pandas_market_calendars")
    for first, warned in ((dt.time(9, 45), True), (dt.time(9, 30), False)):  # 09:45 .. 16:00, 09:30 .. 15:45
        path = _new_york_15m(tmp_path, first)
        caplog.clear()
        load_bars(DataConfig(paths=(str(path),), calendar="XNYS", timezone="America/New_York"))
        said = [r.getMessage() for r in caplog.records if "stamped at their end" in r.getMessage()]
        assert len(said) == warned
        if warned:
            assert said[0].startswith(str(path)) and "(16:00)" in said[0] and "timestamp - 15m" in said[0]


def test_shifted_bars_get_the_zone_message_not_the_end_stamp_one(tmp_path, caplog):
    """UTC times (14:30 .. 20:45) read as New York's sit at the 16:00 close every day and never at the open, as end
    stamps do, but most of them fall in the closed hours: only the closed-bars warning, which names --timezone."""
    pytest.importorskip("pandas_market_calendars")
    path = _new_york_15m(tmp_path, dt.time(14, 30))
    caplog.set_level(logging.WARNING, logger="foxhunt")
    load_bars(DataConfig(paths=(str(path),), calendar="XNYS", timezone="America/New_York"))
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert not [m for m in said if "stamped at their end" in m]
    closed = [m for m in said if "the XNYS calendar is closed" in m]
    assert len(closed) == 1 and "--timezone" in closed[0] and "--calendar NAME" in closed[0]


def test_a_saved_models_bars_are_advised_only_what_predict_takes(tmp_path, caplog):
    """Read for a saved model (its roots given), whose calendar is fixed: the advice names --timezone, which
    predict, evaluate and export take, and no --calendar, which they do not."""
    pytest.importorskip("pandas_market_calendars")
    path = _new_york_15m(tmp_path, dt.time(14, 30))
    caplog.set_level(logging.WARNING, logger="foxhunt")
    load_bars(DataConfig(paths=(str(path),), calendar="XNYS", timezone="America/New_York"), None, ((), ()))
    closed = [r.getMessage() for r in caplog.records if "the XNYS calendar is closed" in r.getMessage()]
    assert len(closed) == 1
    assert f"if {path}'s naive times are in another zone pass --timezone ZONE" in closed[0]
    assert "--calendar" not in closed[0] and "a model trained with its calendar" in closed[0]
