"""`Forecaster.update` with static and categorical inputs, on the generic daily fixture (ES and NQ):

- a --static model: `sector` (categorical) a column of the bar files, `tick_value` (real) of a keyed --covariates
  file;
- a model of categorical time inputs: `regime` (--observed) a column of the bar files, carried in each bar; `mood`
  (--observed) of a keyed --covariates file, which a bar may leave out; `session_type` (--known) of a covariate file
  running 30 days past the bars.

`predict` on the history to bar k, then `update` with bars k+1 .. k+5, gives `predict` on the history to each of
them, eager and traced (PARITY); a series first seen by `update` gets the static inputs predict gives it; a regime
unseen in training is code 0 and said once; a value that is not a category stops with one line and the state kept."""

from __future__ import annotations

import logging
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
SECTOR = {"ES": "equity", "NQ": "tech", "YM": "metals"}  # YM: a series training never saw, of a sector it never saw
REGIMES = ("calm", "storm", "trend")
SESSIONS = ("full", "half", "holiday")
MOODS = ("fear", "greed")


@pytest.fixture(scope="module")
def files(tmp_path_factory, daily_path) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("update_static_categorical")
    rng = np.random.default_rng(3)
    bars = pl.read_parquet(daily_path).sort("symbol", "timestamp")
    bars = bars.with_columns(sector=pl.col("symbol").replace_strict(SECTOR),
                             regime=pl.Series([REGIMES[i] for i in rng.integers(0, 3, bars.height)]))
    out = {"bars": folder / "bars.parquet", "ticks": folder / "ticks.csv", "session": folder / "session.csv",
           "mood": folder / "mood.csv"}
    bars.write_parquet(out["bars"])
    out["ticks"].write_text("date,symbol,tick_value\n2020-01-01,ES,12.5\n2020-01-01,NQ,5.0\n2020-01-01,YM,20.0\n")
    days = np.arange(int(bars["timestamp"].min().timestamp() * 1e9) - 5 * DAY,
                     int(bars["timestamp"].max().timestamp() * 1e9) + 30 * DAY, DAY, dtype=np.int64)
    stamps = pl.Series(days).cast(pl.Datetime("ns", "UTC"))
    pl.DataFrame({"date": stamps, "session_type": [SESSIONS[i] for i in rng.integers(0, 3, len(days))]}
                 ).write_csv(out["session"])
    pl.concat([pl.DataFrame({"time": pl.Series(days + 21 * 3600 * 10**9).cast(pl.Datetime("ns", "UTC")),
                             "symbol": [s] * len(days),
                             "mood": [MOODS[i] for i in rng.integers(0, 2, len(days))]}) for s in ("ES", "NQ")]
              ).write_csv(out["mood"])
    return out


def _train(tiny_flags, folder: Path, *flags: str) -> Path:
    run_dir = folder / "run"
    assert main(["train", *flags, *tiny_flags, "--run-dir", str(run_dir)]) == 0
    return run_dir


@pytest.fixture(scope="module")
def static_run(files, tiny_flags, tmp_path_factory) -> Path:
    return _train(tiny_flags, tmp_path_factory.mktemp("static"), "--parquet-file", str(files["bars"]),
                  "--static", "sector,tick_value", "--covariates", str(files["ticks"]))


@pytest.fixture(scope="module")
def timed_run(files, tiny_flags, tmp_path_factory) -> Path:
    return _train(tiny_flags, tmp_path_factory.mktemp("timed"), "--parquet-file", str(files["bars"]),
                  "--observed", "regime,mood", "--known", "session_type", "--covariates", str(files["session"]),
                  "--covariates", str(files["mood"]))


@pytest.fixture(scope="module")
def bars(files) -> pl.DataFrame:
    return pl.read_parquet(files["bars"]).sort("symbol", "timestamp")


def _rows(bars: pl.DataFrame, end: int) -> pl.DataFrame:
    """Each series' first `end` bars."""
    return bars.group_by("symbol", maintain_order=True).head(end)


def _bar_of(bars: pl.DataFrame, i: int) -> pl.DataFrame:
    """Each series' bar i (one row per series)."""
    return bars.group_by("symbol", maintain_order=True).agg(pl.all().get(i)).select(bars.columns)


def _parity(run: Path, bars: pl.DataFrame, trace: bool) -> None:
    """predict to bar k, then update bar by bar (one call for both series, or one call each) == predict on each
    longer history, to 1e-6 of the forecasts' size."""
    n = bars.group_by("symbol").len()["len"].min()
    k = n - NEW
    stream, ref = foxhunt.Forecaster.load(run, trace=trace), foxhunt.Forecaster.load(run, trace=False)
    stream.predict(_rows(bars, k))
    for i in range(k, n):
        step = _bar_of(bars, i)
        got = (pl.concat([stream.update(b) for b in step.iter_rows(named=True)]) if i % 2 else stream.update(step))
        want = ref.predict(_rows(bars, i + 1))
        assert got.height == want.height == 2 * stream.horizon
        assert_frame_equal(got.drop(Q), want.drop(Q))
        got_q, want_q = got.select(Q).to_numpy(), want.select(Q).to_numpy()
        assert_same_forecasts(got_q, want_q)
        assert np.abs(got_q - want_q).max() <= 1e-6 * np.abs(want_q).max()
    if trace:  # the frozen trace ran (onnxruntime's graph takes no categories: its fallback traces)
        fwd = stream._live
        traced = fwd.trace if hasattr(fwd, "trace") else fwd.forward
        assert traced.traces and not traced.failed


@pytest.mark.parametrize("trace", [False, True])
def test_update_of_a_static_model_equals_predict_on_the_same_history(static_run, bars, trace):
    _parity(static_run, bars, trace)


@pytest.mark.parametrize("trace", [False, True])
def test_update_of_categorical_observed_and_known_inputs_equals_predict(timed_run, bars, trace):
    _parity(timed_run, bars.drop("sector"), trace)


@pytest.mark.parametrize("run", ["static_run", "timed_run"])
def test_the_window_predict_primes_forecasts_what_predict_forecasts(run, bars, request):
    """The stream's window of each series' last bar right after predict (its steps' known codes read then) is
    predict's own live window."""
    fc = foxhunt.Forecaster.load(request.getfixturevalue(run), trace=False)
    want = fc.predict(bars).sort("symbol", "horizon")
    q, _, _ = fc._forecast_rows([fc._stream.index[s] for s in ("ES", "NQ")], calibrated=True)  # (B, D, Q)
    assert_same_forecasts(q.reshape(-1, len(Q)), want.select(Q).to_numpy())


def test_the_static_inputs_enter_the_live_window_as_predict_codes_them(static_run, bars):
    fc = foxhunt.Forecaster.load(static_run, trace=False)
    fc.predict(bars)
    rows = [fc._stream.index[s] for s in ("ES", "NQ")]
    b = fc.batch(rows)
    got = fc._lm.transform.inputs
    tick = got.static_scalers["tick_value"]
    assert b.static_cat[:, 1].tolist() == [1, 2]  # equity, tech: index + 1 in the saved vocabulary
    np.testing.assert_allclose(b.static_cont[:, 0].numpy(),
                               (np.array([12.5, 5.0]) - tick.mean) / tick.std, rtol=1e-6)


def test_a_series_first_seen_by_update_gets_what_predict_gives_it(static_run, bars):
    """YM (NQ's bars renamed), never trained on and never predicted: its unseen sector (from its first bar) is code
    0 and its tick_value (from the keyed file) standardized; update from its first bar == predict."""
    ym = bars.filter(pl.col("symbol") == "NQ").with_columns(symbol=pl.lit("YM"), sector=pl.lit("metals"))
    e = foxhunt.Forecaster.load(static_run).encoder_length
    stream, ref = foxhunt.Forecaster.load(static_run, trace=True), foxhunt.Forecaster.load(static_run, trace=False)
    for i in range(e + 3):
        got = stream.update(ym.row(i, named=True))
        if i < e:
            assert got.height == 0  # no full encoder yet (E bars after the first)
            continue
        want = ref.predict(ym.head(i + 1))
        assert_frame_equal(got.drop(Q), want.drop(Q))
        assert_same_forecasts(got.select(Q).to_numpy(), want.select(Q).to_numpy())
    assert stream.batch([stream._stream.index["YM"]]).static_cat[0, 1].item() == 0


def test_a_series_first_seen_by_update_needs_its_bar_files_static_column(static_run, bars):
    fc = foxhunt.Forecaster.load(static_run, trace=False)
    bar = bars.filter(pl.col("symbol") == "ES").drop("sector").row(0, named=True)
    with pytest.raises(foxhunt.InputError, match="the bar of 'ES' has no 'sector'") as err:
        fc.update(bar)
    assert "\n" not in str(err.value)
    assert fc._stream.n.tolist() == [0]


def test_a_covariate_files_category_may_be_left_out_of_the_bar(timed_run, bars, files):
    """mood comes from a keyed --covariates file: a bar without it reads the file as of its time, as predict does."""
    n = bars.group_by("symbol").len()["len"].min()
    given, read = foxhunt.Forecaster.load(timed_run), foxhunt.Forecaster.load(timed_run)
    mood = pl.read_csv(files["mood"], try_parse_dates=True)
    for fc in (given, read):
        fc.predict(_rows(bars, n - 2))
    step = _bar_of(bars, n - 2)
    day = step["timestamp"][0].replace(tzinfo=None)
    last = mood.filter(pl.col("time").dt.replace_time_zone(None) <= day).group_by("symbol").last()
    step_with = step.join(last.select("symbol", "mood"), on="symbol", how="left")
    assert step_with["mood"].null_count() == 0
    assert_frame_equal(read.update(step), given.update(step_with))


def test_a_series_the_keyed_file_does_not_name_reads_code_0_whatever_the_call_holds(timed_run, bars):
    """mood's file names ES and NQ only: YM's bar alone in a call, without mood, is coded 0 as predict on the panel
    codes it (each bar looks up its own row; a join over the call's bars refused a call naming no key)."""
    n = bars.group_by("symbol").len()["len"].min()
    panel = pl.concat([bars, bars.filter(pl.col("symbol") == "NQ").with_columns(symbol=pl.lit("YM"))])
    fc, ref = foxhunt.Forecaster.load(timed_run, trace=False), foxhunt.Forecaster.load(timed_run, trace=False)
    fc.predict(_rows(panel, n - 1))
    got = fc.update(_bar_of(panel, n - 1).filter(pl.col("symbol") == "YM").row(0, named=True))
    want = ref.predict(_rows(panel, n)).filter(pl.col("symbol") == "YM")
    assert_frame_equal(got.drop(Q), want.drop(Q))
    assert_same_forecasts(got.select(Q).to_numpy(), want.select(Q).to_numpy())
    assert fc.batch([fc._stream.index["YM"]]).enc_cat[-1, 2].item() == 0  # session_type, regime, mood


def test_a_regime_unseen_in_training_is_code_0_said_once(timed_run, bars, caplog):
    n = bars.group_by("symbol").len()["len"].min()
    panic = bars.with_columns(regime=pl.when(pl.int_range(pl.len()).over("symbol") >= n - 3).then(pl.lit("panic"))
                              .otherwise(pl.col("regime")))
    fc, ref = foxhunt.Forecaster.load(timed_run, trace=False), foxhunt.Forecaster.load(timed_run, trace=False)
    fc.predict(_rows(panic, n - 3))
    with caplog.at_level(logging.WARNING, logger="foxhunt.data"):
        for i in range(n - 3, n):
            got = fc.update(_bar_of(panic, i))
    said = [r.getMessage() for r in caplog.records if "unseen in training" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith("--observed regime:") and "panic" in said[0]
    enc_cat = fc.batch([fc._stream.index["ES"]]).enc_cat  # (E, Kc + Oc): session_type, then regime, mood
    assert enc_cat[-3:, 1].tolist() == [0, 0, 0]
    want = ref.predict(panic)
    assert_frame_equal(got.drop(Q), want.drop(Q))
    assert_same_forecasts(got.select(Q).to_numpy(), want.select(Q).to_numpy())


def test_a_value_that_is_not_a_category_stops_in_one_line_and_keeps_the_state(timed_run, bars):
    n = bars.group_by("symbol").len()["len"].min()
    fc, ref = foxhunt.Forecaster.load(timed_run, trace=False), foxhunt.Forecaster.load(timed_run, trace=False)
    fc.predict(_rows(bars, n - 1))
    before = fc._stream.n.copy()
    step = _bar_of(bars, n - 1)
    bad = step.with_columns(regime=pl.Series([["calm"], ["storm"]]))
    with pytest.raises(foxhunt.InputError, match=r"the bar of 'ES' has 'regime' = \['calm'\], not a category") as err:
        fc.update(bad)
    assert "\n" not in str(err.value)
    assert fc._stream.n.tolist() == before.tolist()
    bar = step.row(0, named=True)
    with pytest.raises(foxhunt.InputError, match="the bar of 'ES' has no 'regime'"):
        fc.update({k: v for k, v in bar.items() if k != "regime"})  # a bar-file column: the bar must carry it
    assert_same_forecasts(fc.update(step).select(Q).to_numpy(), ref.predict(bars).select(Q).to_numpy())
