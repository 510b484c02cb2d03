"""Duplicate bars (issue 43.7): copies of one bar are dropped with an info line naming their files; bars of one symbol
and time with other values are a warning naming the first (symbol, time, both values, both files), and more than 1%
of the rows stop the run, in memory, on both of the loader's sort paths and in a pieced prepare."""

from __future__ import annotations

import datetime as dt
import logging

import numpy as np
import polars as pl
import pytest

from foxhunt.cli import main
from foxhunt.data.bars import validate
from foxhunt.data.bars.load import load_bars
from foxhunt.data.bars.validate import INSTRUMENT, clean_bars
from foxhunt.data.config import DataConfig
from foxhunt.data.prepare import entry, prepare_store
from foxhunt.data.prepare.executor import InProcess, Workers
from foxhunt.errors import InputError
from tests.data.io.test_load_fast_paths import _in_time_order, _messy

T0 = dt.datetime(2024, 3, 4, 14, 30, tzinfo=dt.UTC)
REGROUPED = validate._regrouped


def _bars(symbol: str, n: int = 300, shift: float = 0.0) -> pl.DataFrame:
    """`n` 1-minute bars of `symbol` from T0 (weekdays, inside CME's session), prices rising by 0.25 a bar."""
    close = [100.0 + shift + 0.25 * i for i in range(n)]
    return pl.DataFrame({"timestamp": [T0 + dt.timedelta(minutes=i) for i in range(n)], "symbol": symbol,
                         "open": close, "high": [c + 0.5 for c in close], "low": [c - 0.5 for c in close],
                         "close": close, "volume": 10.0})


def _cfg(folder) -> DataConfig:
    return DataConfig(paths=(str(folder),), encoder_length=8, horizon=2)


def test_a_stray_copy_of_a_file_is_dropped_with_a_line_naming_both_files(tmp_path, caplog):
    _bars("KO").write_parquet(tmp_path / "ko.parquet")
    _bars("KO").write_parquet(tmp_path / "ko copy.parquet")
    with caplog.at_level(logging.INFO, logger="foxhunt.data"):
        loaded = load_bars(_cfg(tmp_path))
    assert (loaded.report["duplicates_dropped"], loaded.report["duplicates_conflicting"]) == (300, 0)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert (f"dropped 300 duplicate rows (the first in {tmp_path / 'ko copy.parquet'} and {tmp_path / 'ko.parquet'})"
            in caplog.text)


def test_conflicting_duplicates_below_1_percent_warn_naming_the_first_and_keep_the_last_read(tmp_path, caplog):
    _bars("KO").write_parquet(tmp_path / "a.parquet")
    revised = _bars("KO", n=2).with_columns(close=pl.Series([100.0, 100.5]), high=pl.Series([100.5, 101.0]))
    revised.write_parquet(tmp_path / "b.parquet")  # read after a.parquet: its values are kept
    with caplog.at_level(logging.INFO, logger="foxhunt.data"):
        loaded = load_bars(_cfg(tmp_path))
    assert (loaded.report["duplicates_dropped"], loaded.report["duplicates_conflicting"]) == (2, 1)
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warning == (
        "kept the last read of 1 duplicate bars whose values differ from another bar of the same symbol and time; the"
        f" first: KO at 2024-03-04T14:31:00+00:00 has close 100.25 in {tmp_path / 'a.parquet'} data row 2 and 100.5 in"
        f" {tmp_path / 'b.parquet'} data row 2 (kept; high differs too); check for a stray or outdated copy of a file")
    assert loaded.bars.filter(pl.col("ts") == T0 + dt.timedelta(minutes=1))["close"].to_list() == [100.5]


def test_conflicting_duplicates_above_1_percent_stop_with_one_line_and_status_2(tmp_path, capsys):
    _bars("KO").write_parquet(tmp_path / "a.parquet")
    _bars("KO", n=30, shift=1.0).write_parquet(tmp_path / "b.parquet")  # 30 of 330 rows: 9%
    assert main(["inspect", str(tmp_path), "--encoder-length", "8", "--horizon", "2"]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith(f"foxhunt: error: {tmp_path / 'a.parquet'} data row 1: 30 of 330 rows (9.1%) repeat a bar"
                           " of the same symbol and time with other values, more than the 1% kept with a warning;")
    assert f"KO at 2024-03-04T14:30:00+00:00 has close 100.0 in {tmp_path / 'a.parquet'} data row 1 and 101.0" in last


def _two_contracts_csv(path, column: str = "Market") -> None:
    """ESH4 and ESM4 at the same minutes, told apart only by a column the reader does not take for a symbol."""
    lines = [f"timestamp,{column},open,high,low,close,volume"]
    for i in range(50):
        stamp = (T0 + dt.timedelta(minutes=i)).isoformat()
        lines += [f"{stamp},{symbol},{p},{p + 0.5},{p - 0.5},{p},10" for symbol, p in (("ESH4", 5000.0 + i),
                                                                                        ("ESM4", 5050.0 + i))]
    path.write_text("\n".join(lines) + "\n")


def test_bars_repeated_by_an_unread_symbol_column_name_it_and_the_flag(tmp_path, capsys):
    path = tmp_path / "front.csv"
    _two_contracts_csv(path)
    assert main(["inspect", str(path), "--encoder-length", "8", "--horizon", "2"]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "50 of 100 rows (50.0%) repeat a bar of the same symbol and time with other values" in last
    assert last.endswith("differ too); column 'Market', which is not read, tells them apart (ESH4 and ESM4): pass"
                         " --symbol-col Market if it names each bar's instrument; else remove the stray or outdated"
                         " copy of the file, or pass files that do not overlap")
    loaded = load_bars(DataConfig(paths=(str(path),), symbol_col="Market", contracts="each"))
    assert sorted(loaded.report["series"]) == ["ESH4", "ESM4"]


def test_the_hint_knows_the_columns_read_under_symbol_col(tmp_path, capsys):
    """Read with --symbol-col Ticker, a file's `symbol` column is not read: where it tells the repeated bars apart
    (ESH4 and ESM4 under one ticker), the hint names it, as it names any other column the reader left."""
    pl.concat([_bars("ESH4"), _bars("ESM4", shift=1.0)]).with_columns(Ticker=pl.lit("ES")).write_parquet(
        tmp_path / "front.parquet")
    assert main(["inspect", str(tmp_path), "--symbol-col", "Ticker", "--encoder-length", "8", "--horizon", "2"]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "column 'symbol', which is not read, tells them apart (ESH4 and ESM4): pass --symbol-col symbol" in last


def test_a_stray_copy_gets_no_symbol_hint(tmp_path, capsys):
    """Two copies of one symbol's bars with other values: no column tells them apart, so none is named."""
    _bars("KO").write_parquet(tmp_path / "a.parquet")
    _bars("KO", n=30, shift=1.0).with_columns(source=pl.lit("vendor b")).write_parquet(tmp_path / "b.parquet")
    assert main(["inspect", str(tmp_path), "--encoder-length", "8", "--horizon", "2"]) == 2
    assert "--symbol-col" not in capsys.readouterr().err


@pytest.mark.parametrize("in_time_order", [False, True], ids=["sorted by lexsort", "regrouped"])
def test_both_sort_paths_count_conflicts_as_a_group_by_does(in_time_order, monkeypatch):
    """The loader's two dedup paths (validate._sort_dedup, _regrouped) against a polars group-by of every
    (instrument, ts): each dropped row whose close differs from the row kept (the last read) conflicts."""
    regrouped = []
    monkeypatch.setattr(validate, "_regrouped", lambda *a, **k: regrouped.append(1) or REGROUPED(*a, **k))
    df = _messy(20_000)
    if in_time_order:
        df = _in_time_order(df)
    rows = np.flatnonzero(np.arange(df.height) % 97 == 5)  # a few rows get another close: some are duplicates
    close = df["close"].to_numpy().copy()
    close[rows] += 1.0
    df = df.with_columns(close=pl.Series(close), high=pl.Series(close) + 1, low=pl.Series(close) - 1,
                         open=pl.Series(close))
    keyed = df.group_by(INSTRUMENT + ("ts",), maintain_order=True).agg(pl.col("close"))  # each key's, in read order
    want = int(keyed.select(pl.col("close").list.eval(pl.element() != pl.element().last()).list.sum()).sum().item())
    assert 0 < want <= 0.01 * df.height  # the test hits the case, below the rows that stop a run
    _, stats = clean_bars(df, ["f.parquet"])
    assert stats["duplicates_conflicting"] == want
    assert bool(regrouped) == in_time_order


def test_a_pieced_prepare_judges_conflicts_over_the_panel_as_in_memory(tmp_path, monkeypatch):
    """Two series, two pieces: the 1% is the panel's, as in memory. 5 conflicting PEP bars are 1.6% of PEP's piece
    but 0.8% of the panel: kept with a warning in both; 20 stop both with the same line (20 of 620 rows)."""
    folder = tmp_path / "panel"
    folder.mkdir()
    for s in ("KO", "PEP"):
        _bars(s).write_parquet(folder / f"{s.lower()}.parquet")
    _bars("PEP", n=5, shift=1.0).write_parquet(folder / "pep_late.parquet")  # 5 of 605 rows
    in_memory = prepare_store(_cfg(folder), tmp_path / "whole", workers=0)
    monkeypatch.setattr(entry, "given", lambda *args: pytest.fail("prepared as one piece, not in pieces"))
    manifest = prepare_store(_cfg(folder), tmp_path / "store", piece_rows=1, min_rows=0, pool=Workers(InProcess(), 2))
    assert manifest["summary"]["checks"]["duplicates_conflicting"] == 5
    assert in_memory["summary"]["checks"]["duplicates_conflicting"] == 5
    _bars("PEP", n=20, shift=1.0).write_parquet(folder / "pep_late.parquet")  # 20 of 620 rows
    monkeypatch.undo()
    with pytest.raises(InputError) as whole:
        prepare_store(_cfg(folder), tmp_path / "whole2", workers=0)
    with pytest.raises(InputError) as pieces:
        prepare_store(_cfg(folder), tmp_path / "store2", piece_rows=1, min_rows=0, pool=Workers(InProcess(), 2))
    assert str(pieces.value) == str(whole.value)
    assert "20 of 620 rows (3.2%) repeat a bar" in str(whole.value)
