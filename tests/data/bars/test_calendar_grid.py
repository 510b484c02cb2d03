"""The forecast grid follows the run's session (`--calendar`): one weekly table of closed minutes per session.

Before, the grid chose its closures by the time zone alone (CME's halt and weekend in America/Chicago, none
elsewhere; daily bars always skipped Saturday and Sunday), so with --calendar XNYS a forecast from 15:55 ET stepped
to 16:00 ET, into the night, and daily bars of a 24/7 market never forecast a Saturday. Without --calendar the grid
must stay exactly what it was: a hash of today's outputs over a year of origins, computed with the code before this
change, holds it bit for bit."""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import sys

import numpy as np
import polars as pl
import pytest

from foxhunt.cli import main
from foxhunt.data.bars import sessions
from foxhunt.data.bars.fill import fill_gaps
from foxhunt.data.bars.grid import default_grid, future_timestamps, grid_of, on_grid, session_grid
from foxhunt.data.config import DataConfig
from foxhunt.data.dataset.summary import format_summary
from foxhunt.data.dataset.types import FittedTransform
from foxhunt.data.prepare import prepare_store
from foxhunt.data.util import clock

MIN = 60 * 10**9
DAY = 1440 * MIN
CT, ET, SH = "America/Chicago", "America/New_York", "Asia/Shanghai"
# sha256 of the grid below from the code before --calendar reached the grid (git archive of afdb987).
BEFORE = "97ee7afba7cbb03a20dfa8e6a3e387c3165c0d0dda2d1f2ae7f444c0cf9312c8"


def ns(*stamps: str) -> np.ndarray:
    return np.array([np.datetime64(s, "ns").astype(np.int64) for s in stamps])


def iso(a: np.ndarray) -> list[str]:
    return [str(t)[:16] for t in np.asarray(a).astype("datetime64[ns]")]


def year_of_origins() -> np.ndarray:
    """(73031,) origins every 7 min 13 s through 2024: every minute of the week, both DST switches."""
    return ns("2024-01-01")[0] + np.arange(0, 366 * DAY, 7 * MIN + 13 * 10**9)


def grid_hash(grid_of_zone) -> str:
    h = hashlib.sha256()
    origins = year_of_origins()
    for tz, step, intraday in [(CT, MIN, True), (CT, 5 * MIN, True), (CT, 60 * MIN, True), (CT, DAY, False),
                               ("Europe/London", 5 * MIN, True), ("UTC", DAY, False)]:
        h.update(future_timestamps(origins, step, 8, intraday, tz, grid_of_zone(tz)).tobytes())
        h.update(on_grid(origins, intraday, tz, grid_of_zone(tz)).tobytes())
    return h.hexdigest()


def test_without_a_calendar_the_grid_is_bit_identical_to_before(bare_transform):
    assert grid_hash(lambda tz: None) == BEFORE  # no grid: the zone's default
    assert grid_hash(lambda tz: bare_transform({"exchange_tz": tz}).grid) == BEFORE  # a model without --calendar
    assert grid_hash(lambda tz: session_grid(None, tz)) == BEFORE


def test_the_cme_grid_by_hand_at_the_halt_the_weekend_and_both_dst_weekends():
    cases = {  # UTC origin -> its next two 1-minute grid bars (UTC)
        "2024-03-06T21:59": ["2024-03-06T23:00", "2024-03-06T23:01"],  # Wed 15:59 CST -> 17:00 after the halt
        "2024-03-08T21:59": ["2024-03-10T22:00", "2024-03-10T22:01"],  # Fri 15:59 CST -> Sun 17:00 CDT
        "2024-11-01T20:59": ["2024-11-03T23:00", "2024-11-03T23:01"],  # Fri 15:59 CDT -> Sun 17:00 CST
        "2024-03-10T22:00": ["2024-03-10T22:01", "2024-03-10T22:02"],  # Sunday's open is on the grid
        "2024-06-07T19:30": ["2024-06-07T19:31", "2024-06-07T19:32"],  # Fri 14:30 CDT: still open
    }
    for origin, want in cases.items():
        assert iso(future_timestamps(ns(origin), MIN, 2, True, CT)[0]) == want, origin


def test_the_cme_calendar_by_name_is_the_default_grid_less_its_holidays():
    pytest.importorskip("pandas_market_calendars")
    named, default = session_grid("CME Globex Equity", CT), default_grid(CT)
    assert np.array_equal(named.closed, default.closed) and np.array_equal(named.wait, default.wait)
    origins = year_of_origins()[::5]
    got, plain = (future_timestamps(origins, 5 * MIN, 6, True, CT, g) for g in (named, None))
    holiday = named.holiday(named.trade_day(plain.ravel())).reshape(plain.shape).any(axis=1)  # (O,)
    assert 0 < holiday.sum() < len(origins) // 100  # New Year's Day and Christmas, 2024's full closures
    assert np.array_equal(got[~holiday], plain[~holiday])
    # Tue 2024-12-24 15:55 CST: the session of trade date 12-25 (opening 17:00 on the 24th) is closed; 12-26's
    # opens 17:00 on the 25th
    assert iso(future_timestamps(ns("2024-12-24T21:55"), 5 * MIN, 2, True, CT, named)[0]) == [
        "2024-12-25T23:00", "2024-12-25T23:05"]


def test_xnys_five_minute_bars_step_from_the_close_to_the_next_open():
    pytest.importorskip("pandas_market_calendars")
    xnys = session_grid("XNYS", ET)
    step = 5 * MIN
    # Wed 15:55 EST -> Thu 09:30 EST (not 16:00 ET)
    assert iso(future_timestamps(ns("2024-03-06T20:55"), step, 2, True, ET, xnys)[0]) == [
        "2024-03-07T14:30", "2024-03-07T14:35"]
    # Fri 15:55 EST -> Mon 09:30 EDT, over the DST weekend
    assert iso(future_timestamps(ns("2024-03-08T20:55"), step, 2, True, ET, xnys)[0]) == [
        "2024-03-11T13:30", "2024-03-11T13:35"]
    # Fri 15:50 EDT: one bar left, then Monday
    assert iso(future_timestamps(ns("2024-06-07T19:50"), step, 2, True, ET, xnys)[0]) == [
        "2024-06-07T19:55", "2024-06-10T13:30"]
    # every forecast step over a year of origins is inside 09:30-16:00 ET on a weekday
    steps = future_timestamps(year_of_origins(), step, 12, True, ET, xnys)
    wall = clock.local_ns(steps.ravel(), ET)
    minute, weekday = (wall % DAY) // MIN, (wall // DAY + 3) % 7
    assert ((minute >= 570) & (minute < 960) & (weekday < 5)).all()
    assert on_grid(ns("2024-03-06T14:30", "2024-03-06T21:00", "2024-03-09T15:00"), True, ET, xnys).tolist() == [
        True, False, False]


def test_a_sessions_holidays_are_skipped_by_daily_and_intraday_steps():
    """A session's holidays, written by hand (no package): National Day week 2016 on a 09:30-15:00 Shanghai session.
    Daily bars from Friday 09-30 step to Monday 10-10; 5-minute bars from 14:55 CST to the 10-10 09:30 open, from
    a stamp inside the week too; the holidays are off the grid, the days around them on it."""
    week = tuple(f"2016-10-0{d}" for d in range(3, 8))
    grid = grid_of(sessions.Session("test", SH, 9 * 60 + 30, 15 * 60, open_day=0, holidays=week))

    def daily(origin: str, n: int) -> list[str]:
        return [t[:10] for t in iso(future_timestamps(ns(origin), DAY, n, False, "UTC", grid)[0])]

    assert daily("2016-09-30", 5) == ["2016-10-10", "2016-10-11", "2016-10-12", "2016-10-13", "2016-10-14"]
    assert daily("2016-09-29", 3) == ["2016-09-30", "2016-10-10", "2016-10-11"]
    assert daily("2016-10-05", 1) == ["2016-10-10"]
    assert on_grid(ns("2016-09-30", "2016-10-03", "2016-10-07", "2016-10-08", "2016-10-10"), False, "UTC",
                   grid).tolist() == [True, False, False, False, True]
    # intraday, in UTC: 14:55 CST is 06:55, the 09:30 CST open 01:30
    assert iso(future_timestamps(ns("2016-09-30T06:55"), 5 * MIN, 3, True, SH, grid)[0]) == [
        "2016-10-10T01:30", "2016-10-10T01:35", "2016-10-10T01:40"]
    assert iso(future_timestamps(ns("2016-10-05T02:00"), 5 * MIN, 1, True, SH, grid)[0]) == ["2016-10-10T01:30"]
    assert iso(future_timestamps(ns("2016-09-30T01:30"), 5 * MIN, 1, True, SH, grid)[0]) == ["2016-09-30T01:35"]
    assert on_grid(ns("2016-09-30T06:50", "2016-10-04T02:00", "2016-10-10T01:30"), True, SH, grid).tolist() == [
        True, False, True]


def test_xshg_and_xnys_calendars_skip_their_holidays(xshg_days):
    """--calendar's holidays come from pandas-market-calendars: every XSHG trading day of 2016-03 .. 2017-03
    (hand-written, tests/data/conftest.py) steps to the next one, across Qingming, National Day week and the Spring
    Festival; an XNYS 5-minute bar of the Wednesday before Thanksgiving steps to Friday's open."""
    pytest.importorskip("pandas_market_calendars")
    xshg = session_grid("XSHG", SH)
    days = xshg_days.astype("datetime64[ns]").astype(np.int64)
    assert np.array_equal(future_timestamps(days[:-1], DAY, 1, False, "UTC", xshg)[:, 0], days[1:])
    assert [t[:10] for t in iso(future_timestamps(ns("2017-01-26"), DAY, 2, False, "UTC", xshg)[0])] == [
        "2017-02-03", "2017-02-06"]
    assert on_grid(days, False, "UTC", xshg).all()
    xnys = session_grid("XNYS", ET)  # Wed 2024-11-27 15:55 EST -> Fri 11-29 09:30 EST
    assert iso(future_timestamps(ns("2024-11-27T20:55"), 5 * MIN, 2, True, ET, xnys)[0]) == [
        "2024-11-29T14:30", "2024-11-29T14:35"]


def test_24_7_daily_bars_step_into_the_weekend_and_intraday_bars_never_jump():
    always = session_grid("24/7", "UTC")
    friday = ns("2024-03-08")
    assert iso(future_timestamps(friday, DAY, 3, False, "UTC", always)[0]) == [
        "2024-03-09T00:00", "2024-03-10T00:00", "2024-03-11T00:00"]  # Saturday, Sunday, Monday
    assert iso(future_timestamps(friday, DAY, 1, False, "UTC")[0]) == ["2024-03-11T00:00"]  # the default skips them
    origins = year_of_origins()
    got = future_timestamps(origins, MIN, 5, True, "UTC", always)
    assert np.array_equal(got, origins[:, None] + MIN * np.arange(1, 6))
    assert on_grid(origins, True, "UTC", always).all() and on_grid(origins, False, "UTC", always).all()


def test_a_saved_session_gives_its_grid_back_without_the_package(monkeypatch, bare_transform):
    pytest.importorskip("pandas_market_calendars")
    tf = bare_transform({"exchange_tz": ET}, intraday=True, bar_spacing_ns=5 * MIN,
                        session=sessions.calendar_session("XNYS"))
    saved = json.loads(json.dumps(tf.to_dict()))
    assert saved["session"]["calendar"] == "XNYS"
    assert dataclasses.replace(tf, session=None).to_dict()["session"] is None  # without --calendar
    monkeypatch.setitem(sys.modules, "pandas_market_calendars", None)  # predicting where it is not installed
    back = FittedTransform.from_dict(saved, tf.data)
    assert back.session == tf.session and back.grid is grid_of(tf.session)
    assert iso(future_timestamps(ns("2024-03-06T20:55"), 5 * MIN, 1, True, ET, back.grid)[0]) == ["2024-03-07T14:30"]
    assert "2024-11-28" in saved["session"]["holidays"]  # Thanksgiving, kept with the model
    assert iso(future_timestamps(ns("2024-11-27T20:55"), 5 * MIN, 1, True, ET, back.grid)[0]) == ["2024-11-29T14:30"]


def test_fill_gaps_fills_the_late_open_of_an_xnys_session_and_never_the_night():
    pytest.importorskip("pandas_market_calendars")
    # 1-minute bars: Wed 15:58, 15:59 EST, then Thu 09:31 (the 09:30 bar is missing) and 09:32
    stamps = ["2024-03-06T20:58", "2024-03-06T20:59", "2024-03-07T14:31", "2024-03-07T14:32"]
    ts = ns(*stamps)
    bars = pl.DataFrame({"series": "AAPL", "ts": pl.Series(ts).cast(pl.Datetime("ns", "UTC")), "open": 1.0,
                         "high": 1.0, "low": 1.0, "close": 1.0, "volume": 1.0, "contract": "AAPL"})
    out, n = fill_gaps(bars, ET, calendar="XNYS")
    assert n == 1 and iso(out.filter("filled")["ts"].dt.epoch("ns").to_numpy()) == ["2024-03-07T14:30"]
    assert fill_gaps(bars, ET)[1] == 0  # no calendar: a 17.5 h gap with no closure in the zone, never filled


def _summary(gaps: int, windows: int) -> dict:
    return {"rows_read": 10, "rows": 10, "series": {}, "bar_interval": "5m", "windows": {"train": windows, "val": 0, "test": 0},
            "windows_with_gaps": gaps, "bars_filled": None, "intraday": True, "rolls": [],
            "features": {"static": [], "known": [], "observed": []}, "target": "log_return", "scaling": "series",
            "encoder_length": 16, "horizon": 3, "ranges": {}, "purged": {}}


def _gaps_line(summary: dict) -> str:
    return next(line for line in format_summary(summary).splitlines() if line.startswith("gaps"))


def test_the_gaps_line_names_calendar_when_many_windows_miss_bars():
    many, few = _gaps_line(_summary(300, 1000)), _gaps_line(_summary(100, 1000))
    assert "--calendar" in many and "--fill-gaps" in many
    assert "--calendar" not in few


def test_the_gaps_line_never_suggests_the_calendar_already_given():
    line = _gaps_line({**_summary(1000, 1000), "calendar": "24/7"})
    assert "(100%)" in line and "see --calendar" not in line and "sessions of --calendar 24/7" in line


def _inspect(capsys, *args: str) -> dict:
    assert main(["inspect", *args, "--encoder-length", "16", "--horizon", "5", "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_inspect_counts_no_missing_bars_over_the_holidays_of_the_calendar(xshg_daily_file, capsys):
    """XSHG's trading days: on the default grid (weekdays) every window whose forecast spans a holiday misses bars;
    on XSHG's none does."""
    pytest.importorskip("pandas_market_calendars")
    default, xshg = (_inspect(capsys, str(xshg_daily_file), *flags) for flags in ([], ["--calendar", "XSHG"]))
    assert default["windows_with_gaps"] > 0 and xshg["windows_with_gaps"] == 0


def test_naive_dates_read_in_shanghai_keep_their_days(xshg_daily_file, capsys):
    """The fixture's naive dates read with --timezone Asia/Shanghai are the dates they show (data/io/dates.py): the
    same windows, splits, dates and gaps (none on XSHG's grid) as read without it, and the same dates printed.
    Before, every bar sat at 16:00 UTC of the day before, on the grid's closed days around each holiday."""
    pytest.importorskip("pandas_market_calendars")
    flags = (str(xshg_daily_file), "--calendar", "XSHG")
    utc, shanghai = (_inspect(capsys, *flags, *more) for more in ([], ["--timezone", SH]))
    assert shanghai["windows_with_gaps"] == utc["windows_with_gaps"] == 0
    for key in ("date_range", "series", "train_end", "val_end", "windows", "ranges"):
        assert shanghai[key] == utc[key], key
    assert shanghai["date_range"] == {"start": "2016-03-01T00:00:00Z", "end": "2017-03-31T00:00:00Z"}
    text = []
    for more in ([], ["--timezone", SH]):
        assert main(["inspect", *flags, *more, "--encoder-length", "16", "--horizon", "5"]) == 0
        text.append([line for line in capsys.readouterr().out.splitlines() if line.startswith(("series", "train"))])
    assert text[0] == text[1] and "2016-03-01T00:00 UTC .. 2017-03-31T00:00 UTC" in text[1][0]


def test_inspect_counts_windows_missing_bars_among_the_windows_of_the_splits(xshg_daily_file, capsys):
    """On the 24/7 grid every window of weekday bars misses bars (5 weekdays always span a weekend): all of the
    windows of the splits, not more (the purged ones are in no split)."""
    always = _inspect(capsys, str(xshg_daily_file), "--calendar", "24/7")
    assert sum(always["purged"].values()) > 0
    assert always["windows_with_gaps"] == sum(always["windows"].values())


def test_a_24_7_daily_model_forecasts_saturday(tiny, tmp_path):
    """End to end: daily bars of every day (weekends too) trained with --calendar 24/7; the live forecast from a
    Friday's bar steps to Saturday, Sunday, Monday (the default grid would go to Monday, Tuesday, Wednesday)."""
    rng = np.random.default_rng(3)
    n = 300
    days = [dt.date(2023, 5, 14) + dt.timedelta(days=i) for i in range(n)]  # ends on Friday 2024-03-08
    assert days[-1] == dt.date(2024, 3, 8)
    close = 100 * np.exp(np.cumsum(rng.normal(0, 0.02, n)))
    open_ = np.concatenate([[close[0]], close[:-1]])
    wick = np.abs(rng.normal(0, 0.01, n)) * close
    csv = tmp_path / "coin_1d.csv"
    pl.DataFrame({"date": days, "open": open_, "high": np.maximum(open_, close) + wick,
                  "low": np.minimum(open_, close) - wick, "close": close,
                  "volume": rng.integers(100, 1000, n)}).write_csv(csv)
    run = tmp_path / "run"
    assert main(["train", "-f", str(csv), "--calendar", "24/7", *tiny, "--epochs", "1", "--run-dir", str(run)]) == 0
    out = tmp_path / "f.parquet"
    assert main(["predict", "--model", str(run), "-f", str(csv), "--out", str(out), "--threads", "1"]) == 0
    rows = pl.read_parquet(out)
    live = rows.filter(pl.col("origin") == pl.col("origin").max()).sort("horizon")
    assert [t.date() for t in live["target_time"].to_list()] == [dt.date(2024, 3, d) for d in (9, 10, 11)]


def test_a_store_prepared_in_pieces_keeps_the_calendar_grid(fixtures_dir, tmp_path):
    """`foxhunt prepare --calendar 24/7` in pieces and in memory: the same grid, which steps through CME's halt (the
    default grid jumps it), and the session saved with the store's transform."""
    es = pl.read_parquet(fixtures_dir / "es_fut_ohlcv1m_databento.parquet")
    es = es.filter(pl.col("ts_event") < pl.col("ts_event").min() + pl.duration(days=4))
    frames = [es.with_columns(symbol=pl.col("symbol").str.replace_all("ES", root),
                              instrument_id=pl.col("instrument_id") + 1000 * k)
              for k, root in enumerate(("ES", "NQ", "YM"))]
    frame = pl.concat(frames).sort("ts_event", "instrument_id").with_columns(day=pl.col("ts_event").dt.date())
    panel = tmp_path / "panel"
    for (day,), part in frame.partition_by("day", as_dict=True, maintain_order=True).items():
        (panel / f"date={day}").mkdir(parents=True)
        part.drop("day").write_parquet(panel / f"date={day}" / "part-0.parquet")
    cfg = DataConfig(paths=(str(panel),), encoder_length=16, horizon=3, calendar="24/7")
    pieces = prepare_store(cfg, tmp_path / "pieces", piece_rows=1, workers=2, min_rows=0)
    whole = prepare_store(cfg, tmp_path / "whole", workers=0)
    assert pieces["transform"]["session"]["calendar"] == "24/7" == whole["transform"]["session"]["calendar"]
    grid = np.load(tmp_path / "pieces" / pieces["arrays"]["known_ts"]["file"])
    assert np.array_equal(grid, np.load(tmp_path / "whole" / whole["arrays"]["known_ts"]["file"]))
    assert _in_cme_halt(grid).any()  # 24/7: the grid runs through 16:00-17:00 CT
    default = prepare_store(dataclasses.replace(cfg, calendar=None, exchange_tz=CT), tmp_path / "default", workers=0)
    assert default["transform"]["session"] is None
    assert not _in_cme_halt(np.load(tmp_path / "default" / default["arrays"]["known_ts"]["file"])).any()


def _in_cme_halt(ts_ns: np.ndarray) -> np.ndarray:
    minute = (clock.local_ns(ts_ns, CT) % DAY) // MIN
    return (minute >= 16 * 60) & (minute < 17 * 60)
