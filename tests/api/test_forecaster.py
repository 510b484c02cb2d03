"""foxhunt.Forecaster: predict on frames equals `foxhunt predict`; update (streaming) equals predict on the same
history; predict_parquet reads only the tail it needs. One tiny model (tests/api/conftest.py) serves them all."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

import foxhunt
from foxhunt.api.bars import parquet_tail
from foxhunt.cli import main

Q = ["p10", "p50", "p90"]
# `update` and `predict` are the same float32 forward computed two ways (an incremental state and a traced or ONNX
# forward, against the eager model on the whole history), so they agree to float32 rounding of the forecasts' size:
# measured, 7.2e-7 of the median |forecast| at most (1-minute and daily bars). An absolute 1e-6 is 0.4% of an
# intraday p90 (about 2.5e-4) and would pass an error a thousand times that rounding. So the tolerance is relative:
# 2e-6 (about 17 float32 ulps) of each value, plus 2e-6 of the median |forecast| for values near 0 (a p50 return).
FORECAST_RTOL = 2e-6


def assert_same_forecasts(got, want) -> None:
    """`got` equals `want` (quantile forecasts, any shape) to FORECAST_RTOL of each value and of their median size."""
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    scale = float(np.median(np.abs(want)))
    assert scale > 0, "all forecasts are 0: nothing to compare"
    np.testing.assert_allclose(got, want, rtol=FORECAST_RTOL, atol=FORECAST_RTOL * scale)


def assert_same_forecast_rows(got: pl.DataFrame, want: pl.DataFrame) -> None:
    """Forecast rows: the same symbols, times and steps exactly, and the same quantiles (assert_same_forecasts)."""
    assert_frame_equal(got.drop(Q), want.drop(Q))
    assert_same_forecasts(got.select(Q).to_numpy(), want.select(Q).to_numpy())


def test_the_forecast_tolerance_passes_float32_rounding_and_fails_a_1e_5_error():
    rng = np.random.default_rng(0)
    want = np.exp(rng.normal(np.log(2.5e-4), 0.5, (40, 3))) * np.array([-0.5, 0.01, 1.0])  # (N, Q) intraday-sized
    rounded = want.astype(np.float32).astype(np.float64)  # float32 rounding of each value, as the two forwards do
    assert_same_forecasts(rounded * (1 + rng.uniform(-4, 4, want.shape) * 1.2e-7), want)  # a few ulps further
    wrong = want * (1 + 1e-5)
    with pytest.raises(AssertionError):
        assert_same_forecasts(wrong, want)
    assert np.allclose(wrong, want, rtol=1e-6, atol=1e-6)  # which the absolute 1e-6 let through


@pytest.fixture(scope="module")
def bars(daily_path) -> pl.DataFrame:
    return pl.read_parquet(daily_path).sort("symbol", "timestamp")


@pytest.fixture(scope="module")
def run_dir(readme_run):
    return readme_run["run"].run_dir


def _cli_live_rows(run_dir, path, out, *flags) -> pl.DataFrame:
    assert main(["predict", "--model", str(run_dir), "-f", str(path), "--out", str(out), "--threads", "1", *flags]) == 0
    rows = pl.read_parquet(out)
    return rows.filter(pl.col("origin") == pl.col("origin").max().over("symbol"))


@pytest.mark.parametrize("calibrated", [True, False])
def test_predict_on_a_frame_is_foxhunt_predicts_live_rows(run_dir, daily_path, bars, tmp_path, calibrated):
    want = _cli_live_rows(run_dir, daily_path, tmp_path / "f.parquet", *([] if calibrated else ["--no-calibration"]))
    fc = foxhunt.Forecaster.load(run_dir)
    assert_frame_equal(fc.predict(bars, calibrated=calibrated), want)
    assert_frame_equal(fc.predict(bars.to_pandas(), calibrated=calibrated), want)  # pandas reads the same


def _history_and_new(bars: pl.DataFrame, k: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    n = bars.group_by("symbol").len()["len"].min()
    return (bars.group_by("symbol", maintain_order=True).head(n - k),
            bars.group_by("symbol", maintain_order=True).tail(k))


def test_update_equals_predict_on_the_same_history(run_dir, bars):
    history, new = _history_and_new(bars, 2)
    stream, ref = foxhunt.Forecaster.load(run_dir), foxhunt.Forecaster.load(run_dir)  # update runs a trace
    stream.predict(history)  # starts the stream of ES and NQ
    for i in range(2):
        step = new.group_by("symbol", maintain_order=True).agg(pl.all().get(i)).select(bars.columns)
        if i == 0:  # one dict per series, then frames of one row per series
            got = pl.concat([stream.update(bar) for bar in step.iter_rows(named=True)])
        else:
            got = stream.update(step)
        want = ref.predict(pl.concat([history, new.group_by("symbol", maintain_order=True).head(i + 1)]))
        want = want.filter(pl.col("symbol").is_in(got["symbol"].unique().to_list()))
        assert_same_forecast_rows(got, want)
        assert not np.allclose(got.select(Q).to_numpy(), 0)


def test_adaptive_update_bar_by_bar_is_predict_on_each_history(run_dir, bars):
    """With adaptive calibration, `update` advances each series' shifts per bar (scoring the last D origins'
    forecasts as their outcomes arrive) exactly as `predict` carries them through a history from the end of
    validation: the calibrated forecasts of each update are predict's on that longer history. A call for the
    model's own quantiles (calibrated=False) advances the shifts all the same."""
    history, new = _history_and_new(bars, 6)
    stream = foxhunt.Forecaster.load(run_dir, calibration="adaptive")
    ref = foxhunt.Forecaster.load(run_dir, calibration="adaptive")
    assert stream.calibration_method == "adaptive"
    stream.predict(history)
    for i in range(6):
        step = new.group_by("symbol", maintain_order=True).agg(pl.all().get(i)).select(bars.columns)
        seen = pl.concat([history, new.group_by("symbol", maintain_order=True).head(i + 1)])
        raw = i == 2
        got = stream.update(step, calibrated=not raw)
        assert_same_forecast_rows(got, ref.predict(seen, calibrated=not raw))
    fixed = foxhunt.Forecaster.load(run_dir, calibration="fixed").predict(seen)
    assert not np.allclose(got.select(Q).to_numpy(), fixed.select(Q).to_numpy())  # the shifts moved since validation


def test_a_cold_stream_forecasts_once_its_encoder_is_full_as_predict_does(run_dir, bars):
    es = bars.filter(pl.col("symbol") == "ES")
    fc, ref = foxhunt.Forecaster.load(run_dir, trace=False), foxhunt.Forecaster.load(run_dir)  # the eager model
    e = fc.encoder_length
    outs = [fc.update(bar) for bar in es.head(e + 1).iter_rows(named=True)]
    assert [o.height for o in outs] == [0] * e + [fc.horizon]  # the first bar has no return: E + 1 bars
    assert_same_forecast_rows(outs[-1], ref.predict(es.head(e + 1)))
    for bar in es.slice(e + 1, 20).iter_rows(named=True):
        last = fc.update(bar)
    assert_same_forecast_rows(last, ref.predict(es.head(e + 21)))


def test_update_refuses_bars_it_cannot_continue(run_dir, bars):
    fc = foxhunt.Forecaster.load(run_dir, trace=False)
    fc.predict(bars)
    last = bars.filter(pl.col("symbol") == "ES").row(-1, named=True)
    with pytest.raises(foxhunt.InputError, match="'ES' .* is not after the series' last bar"):
        fc.update(last)
    later = {**last, "timestamp": "2024-12-10"}
    with pytest.raises(foxhunt.InputError, match="non-finite"):
        fc.update({**later, "close": float("nan")})
    with pytest.raises(foxhunt.InputError, match="no symbol"):
        fc.update({k: v for k, v in later.items() if k != "symbol"})
    with pytest.raises(foxhunt.InputError, match="rolls from ES to ESH5"):
        fc.update({**later, "symbol": "ESH5"})
    assert fc.update(later).height == fc.horizon  # the refused bars left the state as it was


# Bars the loader drops or stops on (data/bars/bad_rows.py), as changes to a good bar `g`: (the fields changed, the
# rule named, whether predict drops such a bar from a history; else predict refuses the history).
BAD_BARS = {
    "zero price": (lambda g: {"low": 0.0, "close": 0.0}, "low 0.0 is not positive", False),
    "negative price": (lambda g: {"open": -1.0, "high": -0.5, "low": -2.0, "close": -1.5}, "low -2.0 is not positive",
                       False),
    "high below low": (lambda g: {"high": g["low"] - 1}, "is below low", True),
    "high below close": (lambda g: {"close": g["high"] + 1}, "is below max(open, close)", True),
    "low above open": (lambda g: {"open": g["low"] - 1}, "is above min(open, close)", True),
    "negative volume": (lambda g: {"volume": -5.0}, "volume -5.0 is negative", False),
}


@pytest.mark.parametrize("name", list(BAD_BARS))
def test_update_refuses_a_bar_predict_drops_or_refuses_and_the_stream_stays_as_it_was(run_dir, bars, name):
    """A bad bar is refused in one line naming the series, the time and the rule, the stream untouched: the next
    good bar forecasts as predict on the history without the bad bar, which is predict's own answer on the history
    with it where the loader drops such a bar (else predict refuses that history)."""
    change, rule, dropped = BAD_BARS[name]
    history, new = _history_and_new(bars, 2)
    es = new.filter(pl.col("symbol") == "ES")
    fc, ref = foxhunt.Forecaster.load(run_dir, trace=False), foxhunt.Forecaster.load(run_dir, trace=False)
    fc.predict(history)
    good, later = es.row(0, named=True), es.slice(1, 1)
    bad = {**good, **change(good)}
    with pytest.raises(foxhunt.InputError) as e:
        fc.update(bad)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("update: the bar of 'ES' at 2024-") and rule in msg
    assert ("predict drops such a bar from a history" if dropped else "predict refuses a history with it") in msg
    without = ref.predict(pl.concat([history, later]))
    with_bad = pl.concat([history, pl.from_dicts([bad], schema=history.schema), later])
    if dropped:  # the loader drops it: predict on the history with it is predict without it
        assert_same_forecast_rows(ref.predict(with_bad), without)
    else:
        with pytest.raises(foxhunt.InputError):
            ref.predict(with_bad)
    got = fc.update(later.row(0, named=True))  # the next good bar, as if the bad one had never been sent
    assert_same_forecast_rows(got, without.filter(pl.col("symbol") == "ES"))


def test_a_frame_with_one_bad_bar_is_refused_whole_as_a_nan_price_is(run_dir, bars):
    """One call's bars are checked before any series moves: a bad bar of NQ refuses the call, ES's good bar too."""
    history, new = _history_and_new(bars, 1)
    step = new.select(bars.columns)
    fc, ref = foxhunt.Forecaster.load(run_dir, trace=False), foxhunt.Forecaster.load(run_dir, trace=False)
    fc.predict(history)
    bad = step.with_columns(pl.when(pl.col("symbol") == "NQ").then(-1.0).otherwise("volume").alias("volume"))
    with pytest.raises(foxhunt.InputError, match="the bar of 'NQ' .* volume -1.0 is negative"):
        fc.update(bad)
    assert_same_forecast_rows(fc.update(step), ref.predict(pl.concat([history, new])))


def test_predict_parquet_reads_only_the_last_row_groups(run_dir, bars, tmp_path):
    path = tmp_path / "by_time.parquet"
    by_time = bars.sort("timestamp", "symbol")
    by_time.write_parquet(path, row_group_size=50)  # 12 groups of 25 bars per symbol
    tail = parquet_tail(path, 60, None)
    assert_frame_equal(tail, by_time.tail(150))  # 3 groups: 75 bars of each symbol >= 60
    fc = foxhunt.Forecaster.load(run_dir)
    needed = parquet_tail(path, fc.history_bars, None)  # the groups holding each symbol's last history_bars rows
    assert fc.history_bars <= len(needed) < len(by_time)  # only the tail of the file is read
    assert_frame_equal(fc.predict_parquet(path), fc.predict(needed))


def test_update_arrays_are_updates_rows_without_the_frame(run_dir, bars):
    history, new = _history_and_new(bars, 1)
    step = new.select(bars.columns)
    framed, fast = foxhunt.Forecaster.load(run_dir), foxhunt.Forecaster.load(run_dir)
    framed.predict(history)
    fast.predict(history)
    want, live = framed.update(step), fast.update_arrays(step)
    assert not getattr(fast._live, "failed", False)  # the compiled forward ran (onnxruntime or the trace)
    d = fast.horizon
    assert live.symbols == tuple(want["symbol"].to_list()[::d]) and live.levels == fast.quantiles
    assert live.quantiles.shape == (len(live.symbols), d, len(Q)) and live.quantiles.dtype == np.float32
    np.testing.assert_array_equal(live.quantiles.reshape(-1, len(Q)), want.select(Q).to_numpy())
    np.testing.assert_array_equal(live.origin_ns, want["origin"].dt.epoch("ns").to_numpy()[::d])


def _copies(bars: pl.DataFrame, n: int) -> pl.DataFrame:
    """`n` series made of the fixture's two, each under its own name with its prices scaled: a panel of n series."""
    names = [f"S{i:02d}" for i in range(n)]
    prices = ("open", "high", "low", "close")
    return pl.concat([bars.filter(pl.col("symbol") == ("ES", "NQ")[i % 2]).with_columns(
        pl.lit(name).alias("symbol"), *[pl.col(c) * (1 + i / 100) for c in prices]) for i, name in enumerate(names)])


def test_update_stays_on_onnxruntime_when_the_number_of_series_changes(run_dir, bars, caplog):
    """42 series in one call, then one, then five: every call on onnxruntime with the eager model's forecasts. A
    trace made for the 42 used to leave inference tensors in the folded model, and the single-bar export then failed
    ("Inference tensors cannot be saved for backward"): every later update ran the trace, at twice the latency. One
    session serves every batch size above 1 (a dynamic batch axis), so a new count costs no export."""
    from foxhunt.model.inference.traced import OnnxForward

    pytest.importorskip("onnxruntime")
    history, new = _history_and_new(_copies(bars, 42), 2)
    fc, eager = foxhunt.Forecaster.load(run_dir), foxhunt.Forecaster.load(run_dir, trace=False)
    fc.predict(history)
    eager.predict(history)
    names = history["symbol"].unique(maintain_order=True).to_list()
    for i, which in ((0, names), (1, names[:1]), (1, names[1:6])):
        step = new.filter(pl.col("symbol").is_in(which)).group_by("symbol", maintain_order=True).agg(
            pl.all().get(i)).select(new.columns)
        got = fc.update(step)
        assert got.height == len(which) * fc.horizon
        assert_same_forecast_rows(got, eager.update(step))
    assert isinstance(fc._live, OnnxForward) and not fc._live.failed
    assert set(fc._live.sessions) == {1, "batch"} and set(fc._live.bound) == {1, 5, 42}
    assert "onnxruntime cannot run" not in caplog.text
