"""Directories of parquet files, hive layouts and time bounds: read lazily, with only the columns, row groups and
partitions needed, into the same raw frame as the one file they were cut from."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest

from foxhunt.data.bars.load import load_bars
from foxhunt.data.config import DataConfig
from foxhunt.data.io.read import FileFormat, read_bars
from foxhunt.errors import InputError

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
ES_1M = FIXTURES / "es_fut_ohlcv1m_databento.parquet"
ES_DBN = FIXTURES / "es_fut_ohlcv1m_databento.dbn.zst"
KEY = ["symbol", "instrument_id", "ts"]
SINCE = "2024-03-04"
UTC = dt.UTC


@pytest.fixture(scope="module")
def es_raw() -> pl.DataFrame:
    """The 1-minute fixture read as one file, in a row order any layout can be compared in."""
    raw, _ = read_bars([str(ES_1M)])
    return raw.drop("file_idx", "row").sort(KEY)


def _hive(root: Path, frame: pl.DataFrame, keep_symbol: bool) -> list[Path]:
    """`frame` as symbol=X/date=YYYY-MM-DD/part-0.parquet (UTC dates); the files in path order."""
    frame = frame.with_columns(day=pl.col("ts_event").dt.date())
    for (symbol, day), part in frame.group_by("symbol", "day", maintain_order=True):
        folder = root / f"symbol={symbol}" / f"date={day}"
        folder.mkdir(parents=True)
        part.drop("day", *([] if keep_symbol else ["symbol"])).write_parquet(folder / "part-0.parquet")
    return sorted(root.rglob("*.parquet"))


@pytest.fixture(scope="module")
def hive_dir(tmp_path_factory) -> Path:
    """The fixture in hive partitions whose files have no symbol column: the folder names it."""
    return _hive(tmp_path_factory.mktemp("hive") / "es", pl.read_parquet(ES_1M), keep_symbol=False)[0].parents[2]


def test_hive_symbol_key_is_the_symbol_of_files_without_one(hive_dir, es_raw):
    raw, files = read_bars([str(hive_dir)])
    assert raw.drop("file_idx", "row").sort(KEY).equals(es_raw)
    assert len(files) == len(list(hive_dir.rglob("*.parquet"))) and sum(f["rows"] for f in files) == raw.height
    # every row keeps its file and its 0-based row there
    first = files[0]["path"]
    assert raw.filter(pl.col("file_idx") == 0).get_column("row").to_list() == list(range(pl.read_parquet(first).height))
    hive, whole = load_bars(DataConfig(paths=(str(hive_dir),))), load_bars(DataConfig(paths=(str(ES_1M),)))
    assert hive.bars.equals(whole.bars) and hive.rolls == whole.rolls


def test_hive_symbol_must_agree_with_the_files_own_column(tmp_path, es_raw):
    files = _hive(tmp_path / "es", pl.read_parquet(ES_1M), keep_symbol=True)
    raw, _ = read_bars([str(tmp_path / "es")])
    assert raw.drop("file_idx", "row").sort(KEY).equals(es_raw)
    moved = files[0].parents[1].with_name("symbol=ESZ9") / files[0].parent.name / "part-0.parquet"
    moved.parent.mkdir(parents=True)
    files[0].rename(moved)
    with pytest.raises(InputError) as info:
        read_bars([str(tmp_path / "es")])
    msg = str(info.value)
    assert str(moved) in msg and "symbol=ESZ9" in msg and "'ESH4'" in msg and "--symbol-col" in msg
    chosen, _ = read_bars([str(tmp_path / "es")], FileFormat(symbol_col="symbol"))  # the files' own column, by choice
    assert chosen.drop("file_idx", "row").sort(KEY).equals(es_raw)


def test_since_until_never_open_partitions_outside_them(tmp_path, es_raw):
    """A corrupt file in a partition before --since and one after --until: a bounded read never opens them."""
    files = _hive(tmp_path / "es", pl.read_parquet(ES_1M), keep_symbol=False)
    early = next(f for f in files if "date=2024-02-19" in str(f))
    late = next(f for f in files if "date=2024-03-14" in str(f))
    for f in (early, late):
        f.write_bytes(b"not parquet")
    until = "2024-03-12T12:00"
    raw, read = read_bars([str(tmp_path / "es")], since=SINCE, until=until)
    lo, hi = dt.datetime(2024, 3, 4, tzinfo=UTC), dt.datetime(2024, 3, 12, 12, tzinfo=UTC)
    assert raw.drop("file_idx", "row").sort(KEY).equals(es_raw.filter((pl.col("ts") >= lo) & (pl.col("ts") < hi)))
    days = {Path(f["path"]).parent.name for f in read}
    assert min(days) == "date=2024-03-03" and max(days) == "date=2024-03-13"  # one day of margin each side
    with pytest.raises(InputError, match="date=2024-02-19.*cannot read it as parquet"):
        read_bars([str(tmp_path / "es")])
    loaded = load_bars(DataConfig(paths=(str(tmp_path / "es"),), since=SINCE, until=until))
    assert loaded.report["rows_read"] == raw.height
    assert min(s["start"] for s in loaded.report["series"].values()) >= lo.isoformat()


def _corrupt(path: Path, row_groups: list[int], columns: list[str]) -> None:
    """Overwrite the pages of these column chunks with garbage, leaving the footer (and its statistics) intact."""
    meta = pq.read_metadata(path)
    data = bytearray(path.read_bytes())
    for rg in row_groups:
        for i in range(meta.num_columns):
            chunk = meta.row_group(rg).column(i)
            if chunk.path_in_schema in columns:
                start = chunk.dictionary_page_offset or chunk.data_page_offset
                data[start : start + chunk.total_compressed_size] = b"\xff" * chunk.total_compressed_size
    path.write_bytes(bytes(data))


def test_nested_daily_files_read_only_needed_columns_and_row_groups(tmp_path, es_raw):
    """Nested daily folders (no hive keys) with a wide column no reader needs: its pages are garbage in every file,
    and so is every column of the first row groups of the first day after --since. Reading must decode neither."""
    frame = pl.read_parquet(ES_1M).with_columns(depth=pl.col("close") * 0, note=pl.lit("x" * 40))
    frame = frame.with_columns(day=pl.col("ts_event").dt.date())
    for (day,), part in frame.group_by("day", maintain_order=True):
        folder = tmp_path / "ES" / f"{day.year}" / f"{day.month:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        pq.write_table(part.drop("day").to_arrow(), folder / f"{day}.parquet", row_group_size=500, compression="none")
    files = sorted((tmp_path / "ES").rglob("*.parquet"))
    for f in files:
        _corrupt(f, list(range(pq.read_metadata(f).num_row_groups)), ["depth", "note"])
    with pytest.raises(Exception):  # noqa: B017 - the corruption is real: reading the wide columns fails
        pl.read_parquet(files[0])
    raw, read = read_bars([str(tmp_path / "ES")])
    assert raw.drop("file_idx", "row").sort(KEY).equals(es_raw)
    assert raw.get_column("symbol").drop_nulls().unique().sort().to_list()[0] == "ESH4"  # the file's own symbols

    day = next(f for f in files if f.name == f"{SINCE}.parquet")
    noon = dt.datetime(2024, 3, 4, 12, tzinfo=UTC)
    before = pl.read_parquet(day, columns=["ts_event"]).get_column("ts_event") < noon
    n_before = int(before.sum())
    assert n_before >= 1000  # the first two row groups of 500 lie wholly before noon
    _corrupt(day, [0, 1], ["ts_event", "open", "high", "low", "close", "volume", "rtype", "instrument_id", "symbol"])
    raw, read = read_bars([str(tmp_path / "ES")], since=noon.isoformat())
    assert raw.drop("file_idx", "row").sort(KEY).equals(es_raw.filter(pl.col("ts") >= noon))
    i = [f["path"] for f in read].index(str(day))
    assert raw.filter(pl.col("file_idx") == i).get_column("row").min() == n_before  # rows count from the file's start
    assert read[i]["rows"] == before.len() - n_before


def test_dbn_is_read_from_its_records_not_through_pandas(monkeypatch):
    databento = pytest.importorskip("databento")

    def no_pandas(*_a, **_k):
        raise AssertionError("DBNStore.to_df called")

    monkeypatch.setattr(databento.DBNStore, "to_df", no_pandas)
    raw_dbn, files = read_bars([str(ES_DBN)])
    raw_par, _ = read_bars([str(ES_1M)])
    assert raw_dbn.equals(raw_par)  # bit for bit: prices divided as to_df divides them
    assert files[0]["timestamps"] == "aware"


def test_directory_scan_keeps_the_per_file_checks(tmp_path):
    """One scan over a folder still refuses mixed bar sizes naming both files, and files whose columns differ from
    the first file's (order, extras, time unit) are read one by one into the same frame."""
    daily = pl.read_parquet(FIXTURES / "generic_ohlcv_daily.parquet").filter(pl.col("symbol") == "ES")
    start = dt.datetime(2024, 3, 4, 15)
    minute = daily.head(30).with_columns(
        timestamp=pl.datetime_range(start, start + dt.timedelta(minutes=29), "1m", eager=True, time_unit="ns")
    )
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    daily.write_parquet(mixed / "a_daily.parquet")
    minute.write_parquet(mixed / "b_minute.parquet")
    with pytest.raises(InputError) as info:
        read_bars([str(mixed)])
    msg = str(info.value)
    assert str(mixed / "a_daily.parquet") in msg and str(mixed / "b_minute.parquet") in msg and "1m bars" in msg
    bars = pl.read_parquet(ES_1M)
    odd = tmp_path / "odd"
    odd.mkdir()
    third = bars.height // 3
    bars.head(third).write_parquet(odd / "1.parquet")
    bars.slice(third, third).select(reversed(bars.columns)).with_columns(extra=pl.lit(1)).write_parquet(odd / "2.parquet")
    bars.slice(2 * third).with_columns(pl.col("ts_event").dt.cast_time_unit("us")).write_parquet(odd / "3.parquet")
    raw, files = read_bars([str(odd)])
    one, _ = read_bars([str(ES_1M)])
    assert raw.drop("file_idx", "row").equals(one.drop("file_idx", "row")) and len(files) == 3
    assert raw.get_column("file_idx").unique().to_list() == [0, 1, 2]
    bad = tmp_path / "bad"
    bad.mkdir()
    for i in range(3):
        part = daily.slice(10 * i, 10)
        if i == 2:  # a missing timestamp in the last file's sixth row
            part = part.with_columns(pl.when(pl.int_range(pl.len()) == 5).then(None).otherwise("timestamp").alias("timestamp"))
        part.write_parquet(bad / f"{i}.parquet")
    with pytest.raises(InputError, match=f"{bad / '2.parquet'}: column 'timestamp' row 6"):
        read_bars([str(bad)])


def test_bad_bounds_name_the_option(tmp_path):
    with pytest.raises(InputError, match="--since 'March 4'"):
        DataConfig(since="March 4")
    with pytest.raises(InputError, match="--since 2024-03-05 must come before --until 2024-03-04"):
        DataConfig(since="2024-03-05", until="2024-03-04")
    with pytest.raises(InputError, match="no bar lies within --since 2030-01-01"):
        read_bars([str(ES_1M)], since="2030-01-01")
