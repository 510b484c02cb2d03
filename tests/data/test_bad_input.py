"""Bad input stops with one InputError line that names the file, the column or row, and what to do."""

from __future__ import annotations

import sys
from pathlib import Path

import polars as pl
import pytest

from foxhunt.data.bars.load import load_bars
from foxhunt.data.config import DataConfig
from foxhunt.data.prepare import prepare_from_bars
from foxhunt.errors import InputError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
HEADER = "timestamp,symbol,open,high,low,close,volume\n"
GOOD = "2024-03-04 15:00,AAA,10,11,9,10.5,100\n2024-03-05 15:00,AAA,10.5,12,10,11,120\n"


def _fails(paths, **kw) -> str:
    """Load and return the InputError message, checking it is one line."""
    with pytest.raises(InputError) as info:
        load_bars(DataConfig(paths=tuple(str(p) for p in paths), **kw))
    msg = str(info.value)
    assert "\n" not in msg and msg
    return msg


def _csv(tmp_path: Path, body: str, header: str = HEADER, name: str = "bars.csv") -> Path:
    path = tmp_path / name
    path.write_text(header + body)
    return path


def test_missing_file(tmp_path):
    msg = _fails([tmp_path / "nope.parquet"])
    assert "nope.parquet: file not found" in msg


def test_glob_matching_nothing(tmp_path):
    assert "matches no" in _fails([tmp_path / "*.parquet"])


def test_directory_without_data_files(tmp_path):
    (tmp_path / "readme.txt").write_text("x")
    assert "holds no" in _fails([tmp_path])


def test_truncated_parquet(tmp_path):
    data = (FIXTURES / "generic_ohlcv_daily.parquet").read_bytes()
    path = tmp_path / "cut.parquet"
    path.write_bytes(data[: len(data) // 2])
    msg = _fails([path])
    assert str(path) in msg and "cannot read it as parquet" in msg and "re-download" in msg


def test_empty_file(tmp_path):
    path = tmp_path / "empty.csv"
    path.write_bytes(b"")
    assert f"{path}: the file is empty" in _fails([path])


def test_header_only_file_has_no_rows(tmp_path):
    path = _csv(tmp_path, "")
    assert f"{path}: the file has no rows" in _fails([path])


def test_missing_required_column_lists_found_columns(tmp_path):
    path = _csv(tmp_path, "2024-03-04,AAA,10,11,9,100\n", header="timestamp,symbol,open,high,low,volume\n")
    msg = _fails([path])
    assert "missing required column(s) close" in msg
    assert "found columns: timestamp, symbol, open, high, low, volume" in msg
    assert msg.endswith("(close as close, last, settle, settlement, price, c; any case): rename the columns that hold"
                        " them to one of these")


def test_missing_time_column(tmp_path):
    path = _csv(tmp_path, "AAA,10,11,9,10,100\n", header="symbol,open,high,low,close,volume\n")
    msg = _fails([path])
    assert "no time column" in msg and "--timestamp-col" in msg


def test_unknown_timestamp_col_override(tmp_path):
    msg = _fails([_csv(tmp_path, GOOD)], timestamp_col="when")
    assert "no column 'when' (from --timestamp-col)" in msg


def test_prices_not_numeric_in_csv(tmp_path):
    path = _csv(tmp_path, GOOD + "2024-03-06 15:00,AAA,11,12,10,abc,90\n")
    msg = _fails([path])
    assert str(path) in msg and "column 'close' row 3: 'abc' is not a number" in msg


def test_prices_not_numeric_in_parquet(tmp_path):
    path = tmp_path / "text.parquet"
    pl.read_parquet(FIXTURES / "generic_ohlcv_daily.parquet").with_columns(
        pl.col("high").cast(pl.Utf8) + "x"
    ).write_parquet(path)
    msg = _fails([path])
    assert "column 'high' row 1" in msg and "not a number" in msg


def test_non_positive_price_loads_but_a_log_target_names_target(tmp_path):
    # Issue 9 item 12: a price of zero or below no longer stops loading (crude oil went negative); the log target
    # is what is undefined, so preparing the data names --target.
    path = _csv(tmp_path, GOOD + "2024-03-06 15:00,AAA,11,12,-1,11,90\n")
    cfg = DataConfig(paths=(str(path),))
    loaded = load_bars(cfg)
    assert loaded.bars.get_column("low").to_list() == [9.0, 10.0, -1.0]
    with pytest.raises(InputError) as info:
        prepare_from_bars(loaded, cfg)
    msg = str(info.value)
    assert "\n" not in msg
    assert "series AAA (AAA at 2024-03-06T15:00:00+00:00): low -1.0 is not positive" in msg
    assert "--target log_return" in msg


def test_high_below_low_names_timestamp_and_symbol(tmp_path):
    path = _csv(tmp_path, GOOD + "2024-03-06 15:00,AAA,11,10,12,11,90\n")
    msg = _fails([path])
    assert "data row 3 (AAA at 2024-03-06T15:00:00+00:00): high 10.0 is below low 12.0" in msg


def test_negative_volume(tmp_path):
    msg = _fails([_csv(tmp_path, GOOD + "2024-03-06 15:00,AAA,11,12,10,11,-5\n")])
    assert "volume -5.0 is negative" in msg


def test_unparseable_timestamp(tmp_path):
    path = _csv(tmp_path, GOOD + "yesterday,AAA,11,12,10,11,90\n")
    msg = _fails([path])
    assert str(path) in msg and "column 'timestamp' row 3: cannot parse timestamp 'yesterday'" in msg


def test_null_timestamp_in_parquet(tmp_path):
    path = tmp_path / "nullts.parquet"
    frame = pl.read_parquet(FIXTURES / "generic_ohlcv_daily.parquet").head(5)
    frame.with_columns(
        pl.when(pl.int_range(5) == 2).then(None).otherwise("timestamp").alias("timestamp")
    ).write_parquet(path)
    assert "column 'timestamp' row 3: cannot parse timestamp None" in _fails([path])


def test_too_many_nan_prices(tmp_path):
    path = _csv(tmp_path, GOOD + "2024-03-06 15:00,AAA,11,12,10,NaN,90\n")
    msg = _fails([path])
    assert "1 of 3 rows (33.3%) have a missing or non-finite price" in msg and str(path) in msg


def test_empty_symbol_cell(tmp_path):
    msg = _fails([_csv(tmp_path, GOOD + "2024-03-06 15:00,,11,12,10,11,90\n")])
    assert "column 'symbol' row 3 is empty" in msg


def test_only_spreads_left_nothing(tmp_path):
    path = _csv(tmp_path, "2024-03-04 15:00,ESH4-ESM4,-50,-49,-51,-50,10\n")
    assert "no outright bars left after dropping 1 spread rows" in _fails([path])


def test_dbn_without_databento_package(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "databento", None)  # import databento -> ImportError
    msg = _fails([FIXTURES / "es_fut_ohlcv1m_databento.dbn.zst"])
    assert "install foxhunt[dbn]" in msg


def test_dbn_that_is_not_ohlcv():
    pytest.importorskip("databento")
    msg = _fails([FIXTURES / "es_fut_definition_databento.dbn.zst"])
    assert "holds definition records, not OHLCV bars" in msg


def test_truncated_dbn(tmp_path):
    pytest.importorskip("databento")
    data = (FIXTURES / "es_fut_ohlcv1m_databento.dbn.zst").read_bytes()
    path = tmp_path / "cut.dbn.zst"
    path.write_bytes(data[: len(data) // 2])
    msg = _fails([path])
    assert str(path) in msg and "truncated" in msg


def test_databento_definition_parquet_is_named_as_such() -> None:
    path = Path(__file__).resolve().parents[1] / "fixtures" / "es_fut_definition_databento.parquet"
    with pytest.raises(InputError, match="definition records, not OHLCV bars"):
        load_bars(DataConfig(paths=(str(path),)))
