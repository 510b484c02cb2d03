"""`--fill-gaps`: which missing bars are filled, what a filled bar holds, and how the rest of foxhunt sees it."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import polars as pl
import torch

from foxhunt.cli import main
from foxhunt.data.bars.fill import fill_gaps
from foxhunt.data.bars.load import load_bars
from foxhunt.data.config import DataConfig
from foxhunt.data.prepare import prepare_data, prepare_from_bars
from foxhunt.settings import data_config

MIN = 60 * 10**9
CT = "America/Chicago"


def minute_bars(stamps: list[str], contract: str = "ESH4") -> pl.DataFrame:
    """Bars at the given UTC minutes (ISO), closes 100, 101, ...: loaded-bars columns."""
    ts = np.array([np.datetime64(s, "ns").astype(np.int64) for s in stamps])
    close = 100.0 + np.arange(len(ts))
    return pl.DataFrame(
        {
            "series": "ES",
            "ts": pl.Series(ts).cast(pl.Datetime("ns", "UTC")),
            "open": close - 0.5,
            "high": close + 1,
            "low": close - 1,
            "close": close,
            "volume": np.full(len(ts), 10.0),
            "contract": contract,
        }
    )


RUN = [f"2024-01-30T14:{m:02d}" for m in range(10)]  # ten 1-minute bars days earlier: the median spacing is 1 m


def filled_at(out: pl.DataFrame) -> list[str]:
    return [str(t)[:16] for t in out.filter("filled")["ts"].dt.replace_time_zone(None).to_list()]


def test_a_gap_inside_a_session_becomes_flagged_zero_volume_bars_at_the_previous_close() -> None:
    bars = minute_bars(["2024-02-06T15:00", "2024-02-06T15:01", "2024-02-06T15:04", "2024-02-06T15:05"])
    out, n = fill_gaps(bars, CT)
    assert n == 2 and filled_at(out) == ["2024-02-06 15:02", "2024-02-06 15:03"]
    new = out.filter("filled")
    for c in ("open", "high", "low", "close"):
        assert new[c].to_list() == [101.0, 101.0]  # the close of the 15:01 bar
    assert new["volume"].to_list() == [0.0, 0.0] and new["contract"].to_list() == ["ESH4", "ESH4"]
    assert out["ts"].is_sorted() and out.height == 6
    assert out.filter(~pl.col("filled")).drop("filled").equals(bars)  # the real bars are untouched


def test_the_halt_and_the_weekend_are_never_filled_but_the_session_edges_are() -> None:
    # Thu 15:57 CST, then Thu 17:02 (after the 16:00-17:00 halt), Fri 15:58, then Sun 17:01 (after the weekend)
    halt, _ = fill_gaps(minute_bars([*RUN, "2024-02-08T21:56", "2024-02-08T21:57", "2024-02-08T23:02"]), CT)
    assert filled_at(halt) == ["2024-02-08 21:58", "2024-02-08 21:59", "2024-02-08 23:00", "2024-02-08 23:01"]
    weekend, _ = fill_gaps(minute_bars([*RUN, "2024-02-09T21:58", "2024-02-11T23:01"]), CT)
    assert filled_at(weekend) == ["2024-02-09 21:59", "2024-02-11 23:00"]  # Fri 15:59 CST, Sun 17:00 CST


def test_a_missing_session_and_a_long_silence_stay_gaps() -> None:
    # Wed 15:59 CST, next bar Thu 17:00: Thursday's whole session (Wed 17:00 - Thu 16:00) is missing (a holiday)
    holiday, n = fill_gaps(minute_bars([*RUN, "2024-02-07T21:59", "2024-02-08T23:00"]), CT)
    assert n == 0 and not holiday["filled"].any()
    # an early close: trading stops at 12:00 CT and the next bar is the next session's (4 h of the session silent)
    early, n = fill_gaps(minute_bars([*RUN, "2024-02-19T17:59", "2024-02-19T23:00"]), CT)
    assert n == 0
    # 2 hours of silence inside a session is the most that is filled
    two_h, n = fill_gaps(minute_bars([*RUN, "2024-02-06T15:00", "2024-02-06T17:01"]), CT)
    assert n == 120
    _, n = fill_gaps(minute_bars([*RUN, "2024-02-06T15:00", "2024-02-06T17:02"]), CT)
    assert n == 0


def test_daily_bars_are_never_filled() -> None:
    days = minute_bars(["2024-02-05T00:00", "2024-02-06T00:00", "2024-02-08T00:00", "2024-02-09T00:00"])
    out, n = fill_gaps(days, CT)
    assert n == 0 and out["filled"].to_list() == [False] * 4


def test_load_and_prepare_with_fill_gaps(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    start = np.datetime64("2024-02-06T15:00", "ns").astype(np.int64)
    ts = start + np.sort(rng.choice(400, 250, replace=False)) * MIN
    close = 5000 * np.exp(np.cumsum(rng.normal(0, 1e-3, len(ts))))
    raw = pl.DataFrame({"ts_event": pl.Series(ts).cast(pl.Datetime("ns", "UTC")), "symbol": "ESH4",
                        "open": close, "high": close * 1.001, "low": close * 0.999, "close": close,
                        "volume": rng.integers(1, 100, len(ts)).astype(np.float64)})
    path = tmp_path / "es.parquet"
    raw.write_parquet(path)
    cfg = DataConfig(paths=(str(path),), encoder_length=8, horizon=4, fill_gaps=True)
    loaded = load_bars(cfg)
    span = (ts[-1] - ts[0]) // MIN + 1
    assert loaded.report["bars_filled"] == span - len(ts) and loaded.bars.height == span
    p = prepare_from_bars(loaded, cfg)
    assert p.schema.names(*_observed())[-1] == "filled"
    w = p.windows
    flag = w.cont[:, -1]  # the observed 'filled' input, last column
    is_filled = torch.from_numpy(loaded.bars["filled"].to_numpy())
    assert torch.equal(flag, is_filled.float())
    assert (w.target_raw[is_filled] == 0).all()  # no trade: the last price did not move (a real zero, not NaN)
    assert p.summary["bars_filled"] == span - len(ts) and p.summary["windows_with_gaps"] == 0
    # every forecast step is now one bar interval: the targets sit on the grid the decoder's inputs describe
    ids = torch.arange(w.n_windows)
    assert torch.equal(w.target_ns(ids), w.decoder_ns(ids))
    plain = prepare_from_bars(load_bars(DataConfig(paths=(str(path),), encoder_length=8, horizon=4)),
                              DataConfig(paths=(str(path),), encoder_length=8, horizon=4))
    assert plain.summary["windows_with_gaps"] > 0.5 * plain.windows.n_windows and plain.summary["bars_filled"] is None


def _observed():
    from foxhunt.data.features.schema import Kind, Role

    return Role.OBSERVED, Kind.CONTINUOUS


def test_fill_gaps_round_trips_through_saved_configs() -> None:
    cfg = DataConfig(fill_gaps=True)
    assert DataConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    assert data_config({"fill_gaps": True}, ()).fill_gaps is True


def test_inspect_reports_gaps_and_filled_bars(fixtures_dir: Path, capsys) -> None:
    path = str(fixtures_dir / "es_fut_ohlcv1m_databento.parquet")
    assert main(["inspect", path, "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)
    # 90: with the default --roll-confirm 2 the series stays on ESH4 through 2024-03-08, a session in which the
    # expiring contract misses 13 minutes (30 with --roll-confirm 1).
    assert plain["bars_filled"] is None and plain["windows_with_gaps"] == 90
    assert main(["inspect", path, "--json", "--fill-gaps"]) == 0
    filled = json.loads(capsys.readouterr().out)
    assert filled["bars_filled"] == 18 and filled["rows"] == plain["rows"] + 18
    assert filled["windows_with_gaps"] == 5  # the Presidents' Day early close, never filled
    assert filled["features"]["observed"][-1] == "filled"
    assert main(["inspect", path, "--fill-gaps"]) == 0
    text = capsys.readouterr().out
    # 27,323 windows less 4 purged at the train cut and 4 at the validation end
    assert "filled    18 missing bars" in text and "5 of the 27,315 windows" in text


def test_a_fill_gaps_model_predicts_and_flags_filled_actuals(tmp_path: Path, tiny: list[str]) -> None:
    """Train with --fill-gaps, predict: the saved config fills the prediction file the same way, and the forecast
    table says which actuals are filled bars."""
    rng = np.random.default_rng(1)
    start = np.datetime64("2024-02-06T00:00", "ns").astype(np.int64)  # Mon 18:00 CST
    ts = start + np.sort(rng.choice(900, 600, replace=False)) * MIN
    close = 5000 * np.exp(np.cumsum(rng.normal(0, 1e-3, len(ts))))
    path = tmp_path / "es.parquet"
    pl.DataFrame({"ts_event": pl.Series(ts).cast(pl.Datetime("ns", "UTC")), "symbol": "ESH4", "open": close,
                  "high": close * 1.001, "low": close * 0.999, "close": close,
                  "volume": rng.integers(1, 100, len(ts)).astype(np.float64)}).write_parquet(path)
    run, out = tmp_path / "run", tmp_path / "fc.parquet"
    assert main(["train", *tiny, "--parquet-file", str(path), "--epochs", "1", "--fill-gaps", "--run-dir",
                 str(run)]) == 0
    assert main(["predict", "--model", str(run), "--parquet-file", str(path), "--out", str(out)]) == 0
    fc = pl.read_parquet(out)
    assert fc.columns[-2:] == ["actual", "actual_filled"]
    seen = fc.filter(pl.col("actual").is_not_null())
    assert seen["actual_filled"].sum() > 0 and (seen.filter("actual_filled")["actual"] == 0).all()
    assert fc.filter(pl.col("actual").is_null())["actual_filled"].is_null().all()


def test_prediction_fills_to_the_models_grid_not_the_files(tmp_path: Path) -> None:
    """A file of 2-minute bars predicted by a 1-minute --fill-gaps model is filled every minute, as in training."""
    stamps = [f"2024-02-06T15:{m:02d}" for m in range(0, 60, 2)]
    assert fill_gaps(minute_bars(stamps), CT)[1] == 0  # on its own its median spacing is 2 minutes: no gap
    out, n = fill_gaps(minute_bars(stamps), CT, step_ns=MIN)
    assert n == 29 and out["ts"].diff().drop_nulls().unique().to_list() == [np.timedelta64(1, "m")]
    train_path, live_path = tmp_path / "train.parquet", tmp_path / "live.parquet"
    for path, step in ((train_path, 1), (live_path, 2)):
        ts = np.datetime64("2024-02-06T14:00", "ns").astype(np.int64) + np.arange(0, 100, step) * MIN
        close = 5000 + np.arange(len(ts), dtype=np.float64)
        pl.DataFrame({"ts_event": pl.Series(ts).cast(pl.Datetime("ns", "UTC")), "symbol": "ESH4", "open": close,
                      "high": close + 1, "low": close - 1, "close": close, "volume": 10.0}).write_parquet(path)
    cfg = DataConfig(paths=(str(train_path),), encoder_length=8, horizon=4, fill_gaps=True)
    model = prepare_data(cfg)
    live = prepare_data(replace(cfg, paths=(str(live_path),)), transform=model.transform, for_prediction=True)
    assert model.transform.bar_spacing_ns == MIN and live.summary["bars_filled"] == 49
    ids = live.splits["test"]
    assert (live.windows.decoder_ns(ids)[:, 0] - live.windows.origin_ns(ids) == MIN).all()
