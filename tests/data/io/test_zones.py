"""Files whose times lost their zone (issue 43.6): naive files beside files with a zone stop until --timezone says
where the naive ones were written, in memory and in a pieced prepare; a naive intraday file whose bars keep a stock
market's local hours, read as UTC, gets one warning naming the zone to pass."""

from __future__ import annotations

import datetime as dt
import logging

import polars as pl
import pytest

from foxhunt.data.config import DataConfig
from foxhunt.data.io.read import FileFormat, read_bars
from foxhunt.data.prepare import entry, prepare_store
from foxhunt.data.prepare.executor import InProcess, Workers
from foxhunt.errors import InputError

NY = "America/New_York"


def _session_bars(symbol: str, days: int = 6, first: dt.date = dt.date(2019, 1, 14)) -> pl.DataFrame:
    """15-minute bars stamped at their end, 09:45 .. 16:00 naive New York time, on `days` weekdays."""
    stamps, d = [], first
    while len(stamps) < 26 * days:
        if d.weekday() < 5:
            start = dt.datetime.combine(d, dt.time(9, 30))
            stamps += [start + dt.timedelta(minutes=15 * k) for k in range(1, 27)]
        d += dt.timedelta(days=1)
    price = [50.0 + 0.01 * i for i in range(len(stamps))]
    return pl.DataFrame({"timestamp": stamps, "symbol": symbol, "open": price, "high": [p + 0.05 for p in price],
                         "low": [p - 0.05 for p in price], "close": price, "volume": 1000.0})


@pytest.fixture
def mixed(tmp_path):
    """A New York-aware KO and a naive (New York wall-clock) PEP in one folder."""
    folder = tmp_path / "stocks"
    folder.mkdir()
    _session_bars("KO").with_columns(pl.col("timestamp").dt.replace_time_zone(NY)).write_parquet(folder / "ko.parquet")
    _session_bars("PEP").write_parquet(folder / "pep.parquet")
    return folder


def test_a_naive_file_beside_a_zoned_one_stops_naming_both_and_the_zone(mixed):
    with pytest.raises(InputError) as e:
        read_bars([str(mixed)])
    msg = str(e.value)
    assert msg.startswith(f"{mixed / 'pep.parquet'} has naive times, read as UTC, but {mixed / 'ko.parquet'} carries a"
                          " time zone")
    assert f"pass --timezone {NY}, the zone of {mixed / 'ko.parquet'}'s times," in msg


def test_with_the_timezone_both_read_the_same_hours_and_an_info_line_says_how(mixed, caplog):
    with caplog.at_level(logging.INFO, logger="foxhunt.data"):
        raw, files = read_bars([str(mixed)], FileFormat(timezone=NY))
    assert [f["timestamps"] for f in files] == ["aware", "naive"]  # each file's own, though one scan read both
    first = raw.group_by("file_idx").agg(pl.col("ts").min()).sort("file_idx")["ts"].to_list()
    assert first == [dt.datetime(2019, 1, 14, 14, 45, tzinfo=dt.UTC)] * 2
    assert f"read the naive times of {mixed / 'pep.parquet'} as {NY}; {mixed / 'ko.parquet'} carries its own zone" \
        in caplog.text


@pytest.fixture
def utc_and_naive(tmp_path):
    """A UTC-aware file (as Databento writes them) and a naive New York one in one folder: polars' one scan over both
    reads naive times as the first file's UTC, and UTC times as the first file's naive ones, without an error."""
    folder = tmp_path / "mix"
    folder.mkdir()
    ko = _session_bars("KO").with_columns(pl.col("timestamp").dt.replace_time_zone(NY).dt.convert_time_zone("UTC"))
    ko.write_parquet(folder / "a_ko.parquet")
    _session_bars("PEP").write_parquet(folder / "b_pep.parquet")
    return folder


@pytest.mark.parametrize("pattern", ["", "*.parquet"])
def test_a_folder_or_glob_of_a_utc_file_and_a_naive_one_stops_as_the_files_named_one_by_one(utc_and_naive, pattern):
    files = [str(utc_and_naive / "a_ko.parquet"), str(utc_and_naive / "b_pep.parquet")]
    with pytest.raises(InputError) as named:
        read_bars(files)
    with pytest.raises(InputError) as folder:
        read_bars([str(utc_and_naive / pattern) if pattern else str(utc_and_naive)])
    assert str(folder.value) == str(named.value)
    assert str(folder.value).startswith(f"{files[1]} has naive times, read as UTC, but {files[0]} carries a time zone")


def test_a_folder_of_a_utc_file_and_a_naive_one_reads_each_in_its_zone_as_the_named_files(utc_and_naive):
    fmt = FileFormat(timezone=NY)
    raw, files = read_bars([str(utc_and_naive)], fmt)
    named, _ = read_bars([str(utc_and_naive / "a_ko.parquet"), str(utc_and_naive / "b_pep.parquet")], fmt)
    assert [f["timestamps"] for f in files] == ["aware", "naive"]
    assert raw.equals(named)
    first = raw.group_by("file_idx").agg(pl.col("ts").min()).sort("file_idx")["ts"].to_list()
    assert first == [dt.datetime(2019, 1, 14, 14, 45, tzinfo=dt.UTC)] * 2  # 09:45 New York, both files


def test_a_pieced_prepare_checks_the_files_of_all_its_chunks(mixed, tmp_path, monkeypatch):
    """Two chunks, one file each: no chunk's read sees the mix, the prepare process does (in pieces: the in-memory
    path, which would name the mix too, fails the test)."""
    cfg = DataConfig(paths=(str(mixed),), encoder_length=8, horizon=2)
    monkeypatch.setattr(entry, "given", lambda *args: pytest.fail("prepared as one piece, not in pieces"))
    with pytest.raises(InputError, match="pep.parquet has naive times, read as UTC, but .*ko.parquet carries"):
        prepare_store(cfg, tmp_path / "store", piece_rows=1, min_rows=0, pool=Workers(InProcess(), 2))


def test_naive_bars_in_new_york_hours_read_as_utc_get_one_warning_naming_the_zone(tmp_path, caplog):
    folder = tmp_path / "naive"
    folder.mkdir()
    for s in ("KO", "PEP"):
        _session_bars(s).write_parquet(folder / f"{s.lower()}.parquet")
    with caplog.at_level(logging.WARNING, logger="foxhunt.data"):
        read_bars([str(folder)])
    (line,) = [r.getMessage() for r in caplog.records]
    assert line.startswith(f"{folder / 'ko.parquet'} (and 1 more files): its naive times, read as UTC, run 09:45 .."
                           " 16:00 on weekdays, the hours of XNYS (America/New_York)")
    assert f"pass --timezone {NY}" in line


def test_bars_that_are_utc_or_read_in_a_given_zone_get_no_warning(tmp_path, caplog):
    utc = tmp_path / "utc.parquet"  # the same bars, written in UTC: 14:45 .. 21:00 (or 13:45 .. 20:00 in summer)
    _session_bars("KO").with_columns(pl.col("timestamp").dt.replace_time_zone(NY).dt.convert_time_zone("UTC")
                                     .dt.replace_time_zone(None)).write_parquet(utc)
    local = tmp_path / "local.parquet"
    _session_bars("KO").write_parquet(local)
    with caplog.at_level(logging.WARNING, logger="foxhunt.data"):
        read_bars([str(utc)])
        read_bars([str(local)], FileFormat(timezone="UTC"))  # said so: nothing to hint
        read_bars([str(local)], FileFormat(timezone=NY))
    assert caplog.records == []
