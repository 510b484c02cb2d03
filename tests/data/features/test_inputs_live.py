"""`Forecaster.update` with the user's own inputs: a model of an observed covariate (vix, from a --covariates file),
a known covariate (holiday_eve) and an events file (FOMC for every series, expiries keyed to ES), on the generic
daily fixture (ES and NQ). `predict` on the
history to bar k, then `update` with bars k+1 .. k+5 carrying vix, gives `predict` on the history to each of them,
eager and traced; a bar may leave vix out (read from the model's file as of its time); what update cannot give
stops with one line and the state untouched."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

import foxhunt
from foxhunt.cli import main
from tests.api.test_forecaster import Q, assert_same_forecasts

DAY = 86_400 * 10**9
NEW = 5  # bars per series given to update


@pytest.fixture(scope="module")
def files(tmp_path_factory, daily_path) -> dict[str, Path]:
    """An unkeyed daily `vix` file stamped at 21:00 UTC (a midnight bar sees the day before's), a known
    `holiday_eve` file 30 days past the bars, and an events file (every 20th day)."""
    folder = tmp_path_factory.mktemp("update_inputs")
    bars = pl.read_parquet(daily_path)
    rng = np.random.default_rng(1)
    days = np.arange(int(bars["timestamp"].min().timestamp() * 1e9) - 5 * DAY,
                     int(bars["timestamp"].max().timestamp() * 1e9) + 30 * DAY, DAY, dtype=np.int64)
    out = {"vix": folder / "vix.csv", "eve": folder / "eve.parquet", "events": folder / "events.csv"}
    pl.DataFrame({"time": pl.Series(days + 21 * 3600 * 10**9).cast(pl.Datetime("ns", "UTC")),
                  "vix": 15 + np.abs(rng.normal(0, 5, len(days)))}).write_csv(out["vix"])
    pl.DataFrame({"date": pl.Series(days).cast(pl.Datetime("ns", "UTC")),
                  "holiday_eve": (rng.random(len(days)) < 0.2).astype(float)}).write_parquet(out["eve"])
    fomc, expiry = days[::20] + 13 * 3600 * 10**9, days[7::15] + 14 * 3600 * 10**9  # expiries: ES's alone
    pl.DataFrame({"time": pl.Series(np.concatenate([fomc, expiry])).cast(pl.Datetime("ns", "UTC")),
                  "name": ["FOMC decision"] * len(fomc) + ["expiry"] * len(expiry),
                  "symbol": [""] * len(fomc) + ["ES"] * len(expiry)}).write_csv(out["events"])
    return out


@pytest.fixture(scope="module")
def run(files, daily_path, tiny_flags, tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("run") / "run"
    assert main(["train", "--parquet-file", str(daily_path), "--observed", "vix", "--known", "holiday_eve",
                 "--covariates", str(files["vix"]), "--covariates", str(files["eve"]), "--events",
                 str(files["events"]), *tiny_flags, "--run-dir", str(run_dir)]) == 0
    return run_dir


@pytest.fixture(scope="module")
def bars(daily_path, files) -> pl.DataFrame:
    """The fixture's bars, each with the vix value the as-of join gives it (the file's last row at or before)."""
    bars = pl.read_parquet(daily_path).sort("symbol", "timestamp")
    vix = pl.read_csv(files["vix"], try_parse_dates=True)
    stamps = vix["time"].cast(pl.Datetime("ns", "UTC")).to_physical().to_numpy()
    at = np.searchsorted(stamps, bars["timestamp"].cast(pl.Int64).to_numpy(), side="right") - 1
    assert (at >= 0).all()
    return bars.with_columns(vix=pl.Series(vix["vix"].to_numpy()[at]))


def _rows(bars: pl.DataFrame, end: int) -> pl.DataFrame:
    """Each series' first `end` bars."""
    return bars.group_by("symbol", maintain_order=True).head(end)


def _bar_of(bars: pl.DataFrame, i: int) -> pl.DataFrame:
    """Each series' bar i (one row per series)."""
    return bars.group_by("symbol", maintain_order=True).agg(pl.all().get(i)).select(bars.columns)


def same_as_predict(got: pl.DataFrame, want: pl.DataFrame, rows: int) -> float:
    """Assert an update's forecast rows (`rows` of them) are predict's, up to float rounding; the largest quantile
    difference, for the caller's bound over its steps."""
    assert got.height == want.height == rows
    assert_frame_equal(got.drop(Q), want.drop(Q))
    assert_same_forecasts(got.select(Q).to_numpy(), want.select(Q).to_numpy())
    return float(np.abs(got.select(Q).to_numpy() - want.select(Q).to_numpy()).max())


@pytest.mark.parametrize("trace", [False, True])
def test_update_with_inputs_equals_predict_on_the_same_history(run, bars, trace):
    n = bars.group_by("symbol").len()["len"].min()
    k = n - NEW
    stream, ref = foxhunt.Forecaster.load(run, trace=trace), foxhunt.Forecaster.load(run, trace=False)
    stream.predict(_rows(bars, k).drop("vix"))  # the frame has no vix: predict joins it from the file
    worst = 0.0
    for i in range(k, n):
        step = _bar_of(bars, i)
        got = (pl.concat([stream.update(b) for b in step.iter_rows(named=True)]) if i % 2 else stream.update(step))
        worst = max(worst, same_as_predict(got, ref.predict(_rows(bars, i + 1).drop("vix")), 2 * stream.horizon))
    assert worst < 1e-5


def test_a_bar_may_leave_out_a_covariate_files_column(run, bars):
    """vix comes from a --covariates file: a bar without it reads the file as of its time, as predict does."""
    n = bars.group_by("symbol").len()["len"].min()
    given, read = foxhunt.Forecaster.load(run), foxhunt.Forecaster.load(run)
    for fc in (given, read):
        fc.predict(_rows(bars, n - 2).drop("vix"))
    step = _bar_of(bars, n - 2)
    assert_frame_equal(read.update(step.drop("vix")), given.update(step))


def test_a_non_finite_observed_value_is_refused_and_the_state_kept(run, bars):
    n = bars.group_by("symbol").len()["len"].min()
    fc, ref = foxhunt.Forecaster.load(run, trace=False), foxhunt.Forecaster.load(run, trace=False)
    fc.predict(_rows(bars, n - 1).drop("vix"))
    bar = _bar_of(bars, n - 1).row(0, named=True)
    with pytest.raises(foxhunt.InputError, match="the bar of 'ES' has a non-finite 'vix'"):
        fc.update({**bar, "vix": float("nan")})
    with pytest.raises(foxhunt.InputError, match="'vix' = 'high', not a number"):
        fc.update({**bar, "vix": "high"})
    want = ref.predict(_rows(bars, n).drop("vix")).filter(pl.col("symbol") == "ES")
    assert_same_forecasts(fc.update(bar).select(Q).to_numpy(), want.select(Q).to_numpy())


def test_a_known_covariate_that_does_not_cover_the_steps_stops_with_one_line(run, bars, files, tmp_path):
    short = tmp_path / "eve_short.parquet"
    last = bars["timestamp"].max()
    pl.read_parquet(files["eve"]).filter(pl.col("date").dt.replace_time_zone(None) <= last).write_parquet(short)
    fc = foxhunt.Forecaster.load(run, trace=False, covariates=[str(files["vix"]), str(short)])
    bar = bars.filter(pl.col("symbol") == "ES").row(-1, named=True)
    with pytest.raises(foxhunt.InputError, match="column 'holiday_eve' has no value at") as err:
        fc.update(bar)  # the bar is covered, its forecast steps are not
    assert "\n" not in str(err.value)
    assert fc._stream.n.tolist() == [0]  # refused before the series moved


def test_update_continues_a_history_whose_bars_without_a_value_predict_dropped(run, bars, files, tmp_path):
    """A vix row of NaN drops the bar it joins to (both series' bar of the next day) from the prepared history;
    the stream is primed from the bars kept, so update still continues predict."""
    holed = tmp_path / "vix_holed.parquet"
    vix = pl.read_csv(files["vix"], try_parse_dates=True)
    t = bars["timestamp"][150]  # the row a bar of the middle joins to: the last one at or before it
    row = vix.filter(pl.col("time").dt.replace_time_zone(None) <= t).height - 1
    vix.with_columns(vix=pl.when(pl.int_range(vix.height) == row).then(float("nan"))
                     .otherwise(pl.col("vix"))).write_parquet(holed)
    cov = [str(holed), str(files["eve"])]
    n = bars.group_by("symbol").len()["len"].min()
    fc, ref = foxhunt.Forecaster.load(run, trace=False, covariates=cov), foxhunt.Forecaster.load(run, trace=False,
                                                                                                covariates=cov)
    fc.predict(_rows(bars, n - 1).drop("vix"))
    assert int(fc._stream.n.sum()) < 2 * (n - 1)  # bars were dropped
    assert_same_forecasts(fc.update(_bar_of(bars, n - 1)).select(Q).to_numpy(),
                          ref.predict(_rows(bars, n).drop("vix")).select(Q).to_numpy())
