"""Text dates of the bar, --covariates and --events files: ambiguous day/month dates stop in one line naming
--date-format, the format reads all three files alike and is saved with the run, and a column mixing naive and
offset times is told so (issue 43.8)."""

from __future__ import annotations

import datetime as dt
import json

import polars as pl
import pytest

from foxhunt.cli import main
from foxhunt.data.config import DataConfig
from foxhunt.data.features.covariate_files import read_covariates
from foxhunt.data.features.events import read_events
from foxhunt.data.io.read import FileFormat, read_bars
from foxhunt.errors import InputError
from foxhunt.settings import data_config

US = "%m/%d/%Y"


def _bars_csv(path, days: list[dt.date], fmt: str = US) -> None:
    """One daily series, dates written with `fmt`, prices rising by one a day."""
    pl.DataFrame({
        "date": [d.strftime(fmt) for d in days], "symbol": "SPX", "open": [100.0 + i for i in range(len(days))],
        "high": [101.0 + i for i in range(len(days))], "low": [99.0 + i for i in range(len(days))],
        "close": [100.5 + i for i in range(len(days))], "volume": 1000.0,
    }).write_csv(path)


def _first_days(n: int) -> list[dt.date]:
    """`n` business days that are all on the 1st to the 12th of their month: month-first dates read day-first
    parse without a failure (one of the users' files, read as "2d bars")."""
    out, d = [], dt.date(2015, 1, 2)
    while len(out) < n:
        if d.day <= 12 and d.weekday() < 5:
            out.append(d)
        d += dt.timedelta(days=1)
    return out


def test_events_with_a_day_and_a_month_side_by_side_stop_asking_for_the_format(tmp_path):
    path = tmp_path / "events.csv"
    path.write_text("date,name\n03/05/2015,fomc\n04/06/2015,fomc\n")
    with pytest.raises(InputError) as e:
        read_events(str(path))
    msg = str(e.value)
    assert "events.csv: column 'date' row 1: '03/05/2015' could be 3 May or March 5" in msg
    assert "--date-format '%d/%m/%Y' (day first) or '%m/%d/%Y' (month first)" in msg and "ISO 8601" in msg


def test_month_first_bars_whose_days_are_all_12_or_less_stop_instead_of_loading_shifted(tmp_path):
    path = tmp_path / "spx.csv"
    _bars_csv(path, _first_days(40))
    with pytest.raises(InputError, match=r"row 1: '01/02/2015' could be 1 February or January 2: pass --date-format"):
        read_bars([str(path)])


def test_a_value_above_12_says_which_order_and_the_format_to_pass(tmp_path):
    path = tmp_path / "spx.csv"
    days = [dt.date(2015, 3, 2) + dt.timedelta(days=i) for i in range(20)]  # row 12 is 03/13/2015
    _bars_csv(path, days)
    with pytest.raises(InputError) as e:
        read_bars([str(path)])
    assert "pass --date-format '%m/%d/%Y' (row 12, '03/13/2015', has the month first)" in str(e.value)
    both = tmp_path / "both.csv"
    both.write_text("date,symbol,open,high,low,close,volume\n05/03/2015 09:30,A,1,1,1,1,1\n"
                    "13/03/2015 09:30,A,1,1,1,1,1\n03/14/2015 09:30,A,1,1,1,1,1\n")
    with pytest.raises(InputError, match=r"row 2 \('13/03/2015 09:30'\) has the day first but row 3"):
        read_bars([str(both)])
    dots = tmp_path / "dots.csv"
    dots.write_text("date,symbol,open,high,low,close,volume\n05.03.2015 09:30:00,A,1,1,1,1,1\n")
    with pytest.raises(InputError, match=r"--date-format '%d\.%m\.%Y %H:%M:%S' \(day first\)"):
        read_bars([str(dots)])


def test_the_date_format_reads_bars_covariates_and_events_alike(tmp_path):
    days = _first_days(5)
    bars, cov, ev = tmp_path / "spx.csv", tmp_path / "vix.csv", tmp_path / "events.csv"
    _bars_csv(bars, days)
    pl.DataFrame({"date": [d.strftime(US) for d in days], "vix": [15.0, 16, 17, 18, 19]}).write_csv(cov)
    ev.write_text("date,name\n" + "".join(f"{d.strftime(US)} 14:00,fomc\n" for d in days[:2]))
    want = [dt.datetime(d.year, d.month, d.day, tzinfo=dt.UTC) for d in days]
    raw, _ = read_bars([str(bars)], FileFormat(date_format=US))
    assert raw["ts"].to_list() == want
    assert read_covariates([str(cov)], date_format=US).frame["ts"].to_list() == want
    cal = read_events(str(ev), date_format=US + " %H:%M", timezone="America/New_York")
    stamps = [int(dt.datetime(d.year, d.month, d.day, 19, tzinfo=dt.UTC).timestamp()) * 10**9 for d in days[:2]]
    assert cal.times[0].tolist() == stamps  # 14:00 New York (EST) is 19:00 UTC


def test_a_value_the_format_cannot_read_is_named_with_the_format(tmp_path):
    path = tmp_path / "spx.csv"
    _bars_csv(path, _first_days(3))
    path.write_text(path.read_text().replace("01/02/2015", "2015-01-02"))
    with pytest.raises(InputError, match=r"row 1: cannot parse timestamp '2015-01-02' with --date-format '%m/%d/%Y'"):
        read_bars([str(path)], FileFormat(date_format=US))


def test_a_format_that_reads_no_date_is_refused_where_options_are_checked():
    for bad in ("%Q", "%H:%M", "hello"):
        with pytest.raises(InputError, match=f"--date-format '{bad}' cannot read dates"):
            DataConfig(date_format=bad)


def test_the_format_is_saved_with_the_run_and_comes_back_for_later_files():
    cfg = data_config({"date_format": US}, ("spx.csv",))
    assert cfg.date_format == US
    assert DataConfig.from_dict(cfg.to_dict()).date_format == US


def test_a_column_mixing_naive_and_offset_times_says_so(tmp_path):
    path = tmp_path / "mixed.csv"
    path.write_text("timestamp,symbol,open,high,low,close,volume\n2015-03-05 10:00:00,A,1,1,1,1,1\n"
                    "2015-03-05 10:01:00-05:00,A,1,1,1,1,1\n")
    with pytest.raises(InputError) as e:
        read_bars([str(path)])
    msg = str(e.value)
    assert "ISO 8601" not in msg
    assert ("mixed.csv: column 'timestamp' mixes times with a UTC offset (row 2: '2015-03-05 10:01:00-05:00') and "
            "times without one (row 1: '2015-03-05 10:00:00')") in msg


def test_inspect_takes_the_date_format_for_bars_and_says_what_to_pass_without_it(tmp_path, capsys):
    path = tmp_path / "spx.csv"
    _bars_csv(path, _first_days(60))
    assert main(["inspect", str(path), "--encoder-length", "8", "--horizon", "2"]) == 2
    assert "--date-format" in capsys.readouterr().err.strip().splitlines()[-1]
    assert main(["inspect", str(path), "--encoder-length", "8", "--horizon", "2", "--date-format", US, "--json"]) == 0
    series = json.loads(capsys.readouterr().out)["series"]["SPX"]
    assert (series["rows"], series["end"]) == (60, "2015-08-03T00:00:00Z")  # August 3, not March 8


def test_the_format_suggested_for_times_with_an_offset_reads_them(tmp_path):
    path = tmp_path / "offsets.csv"
    path.write_text("timestamp,symbol,open,high,low,close,volume\n03/05/2015 10:00-05:00,A,1,1,1,1,1\n"
                    "03/05/2015 10:01Z,A,1,1,1,1,1\n")
    with pytest.raises(InputError) as e:
        read_bars([str(path)])
    fmt = "%m/%d/%Y %H:%M%#z"
    assert f"or {fmt!r} (month first)" in str(e.value)
    raw, files = read_bars([str(path)], FileFormat(date_format=data_config({"date_format": fmt}, ()).date_format))
    assert raw["ts"].to_list() == [dt.datetime(2015, 3, 5, 15, 0, tzinfo=dt.UTC),
                                   dt.datetime(2015, 3, 5, 10, 1, tzinfo=dt.UTC)]
    assert files[0]["timestamps"] == "aware"
