"""`Forecaster.update` of a --context model: a tiny model of the generic daily fixture (ES and NQ) trained with
--context NQ, so both series read NQ's log return, range, volume and log_vol as of each bar. `predict` on the
history to bar k, then `update` with bars k .. k+4 of both series, gives `predict` on each longer history, eager
and traced: NQ's bar of the same time reaches ES's whatever their order in a call, a series that lags NQ reads NQ's
bar of its own time, and a context series the stream has no bar of stops with one line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

import foxhunt
from foxhunt.cli import main
from foxhunt.data.features.context_live import LiveContext
from foxhunt.export.sidecar import user_words
from tests.api.test_forecaster import Q, assert_same_forecasts
from tests.data.features.test_inputs_live import same_as_predict

NEW = 5  # bars per series given to update


@pytest.fixture(scope="module")
def run(daily_path, tiny_flags, tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("context") / "run"
    assert main(["train", "--parquet-file", str(daily_path), "--context", "NQ", *tiny_flags, "--run-dir",
                 str(run_dir)]) == 0
    return run_dir


@pytest.fixture(scope="module")
def bars(daily_path) -> pl.DataFrame:
    return pl.read_parquet(daily_path).sort("symbol", "timestamp")


def _rows(bars: pl.DataFrame, end: int, nq_end: int | None = None) -> pl.DataFrame:
    """Each series' first `end` bars (NQ's first `nq_end`, when given)."""
    head = bars.group_by("symbol", maintain_order=True).head(end).select(bars.columns)
    if nq_end is None:
        return head
    return pl.concat([head.filter(pl.col("symbol") != "NQ"), bars.filter(pl.col("symbol") == "NQ").head(nq_end)])


def _bar_of(bars: pl.DataFrame, i: int) -> pl.DataFrame:
    """Each series' bar i (one row per series, ES first)."""
    return bars.group_by("symbol", maintain_order=True).agg(pl.all().get(i)).select(bars.columns)


def test_the_model_reads_four_inputs_of_nq(run, daily_path, capsys):
    """model.json's scalers, the export sidecar's words and `foxhunt inspect` each name NQ_log_vol."""
    fc = foxhunt.Forecaster.load(run, trace=False)
    tf = fc._lm.transform
    assert tf.inputs.context == ("NQ",)
    assert tf.scalers.user_observed == ("NQ_log_return", "NQ_log_range", "NQ_log_volume", "NQ_log_vol")
    assert "log_vol input" in user_words(fc._lm)["NQ_log_vol"]
    assert main(["inspect", str(daily_path), "--context", "NQ", "--encoder-length", "16", "--horizon", "3"]) == 0
    assert "input     NQ_log_vol: observed real from --context NQ" in capsys.readouterr().out


@pytest.mark.parametrize("trace", [False, True])
def test_update_of_a_context_model_equals_predict_on_the_same_history(run, bars, trace):
    n = bars.group_by("symbol").len()["len"].min()
    k = n - NEW
    stream, ref = foxhunt.Forecaster.load(run, trace=trace), foxhunt.Forecaster.load(run, trace=False)
    stream.predict(_rows(bars, k))
    worst = 0.0
    for i in range(k, n):
        step = _bar_of(bars, i)
        if i % 2:  # one call per bar, NQ's first: ES's call reads NQ's bar of the same time from the state
            got = pl.concat([stream.update(b) for b in reversed(list(step.iter_rows(named=True)))]).sort("symbol")
        else:  # one call, ES's bar before NQ's
            got = stream.update(step)
        worst = max(worst, same_as_predict(got, ref.predict(_rows(bars, i + 1)), 2 * stream.horizon))
    assert worst < 1e-6


def test_a_series_that_lags_the_context_series_reads_its_bar_of_the_same_time(run, bars):
    """NQ runs two bars ahead of ES: ES's bars read NQ's recorded bar of their own time, not NQ's latest."""
    n = bars.group_by("symbol").len()["len"].min()
    k = n - 4
    fc, ref = foxhunt.Forecaster.load(run, trace=False), foxhunt.Forecaster.load(run, trace=False)
    fc.predict(_rows(bars, k))
    nq, es = bars.filter(pl.col("symbol") == "NQ"), bars.filter(pl.col("symbol") == "ES")
    for i in (k, k + 1):
        fc.update(nq.row(i, named=True))
    for i in (k, k + 1):
        got = fc.update(es.row(i, named=True))
        want = ref.predict(_rows(bars, i + 1, nq_end=k + 2)).filter(pl.col("symbol") == "ES")
        assert_frame_equal(got.drop(Q), want.drop(Q))
        assert_same_forecasts(got.select(Q).to_numpy(), want.select(Q).to_numpy())


def test_a_context_series_the_stream_has_no_bar_of_stops_with_one_line(run, bars):
    fc = foxhunt.Forecaster.load(run, trace=False)
    es = bars.filter(pl.col("symbol") == "ES")
    with pytest.raises(foxhunt.InputError, match="reads --context NQ as of each bar, and no bar of NQ") as err:
        fc.update(es.row(0, named=True))
    assert "\n" not in str(err.value)
    fc.update(_bar_of(bars, 0))  # with NQ's bar in the call: taken
    assert fc._stream.n.tolist() == [1, 1]


def test_live_context_reads_the_last_record_at_or_before_and_0_before_the_first():
    """NQ recorded at 10 and 30: rows at 5, 10, 20, 30 read none (0), 10's, 10's, 30's, standardized by each row's
    plan ((x - mean) / std); a series that is not a context series is not recorded."""
    observed = ["log_return", "NQ_log_return", "NQ_log_range", "NQ_log_volume", "NQ_log_vol"]
    ctx = LiveContext(["NQ"], "log_return", observed, offset=2)
    ctx.record("NQ", 10, (1.0, 2.0, 3.0, 4.0))
    ctx.record("ES", 20, (9.0, 9.0, 9.0, 9.0))
    ctx.record("NQ", 30, (5.0, 6.0, 7.0, 8.0))
    e = 2
    ring = np.full((4, 2 * e, 2 + len(observed)), -1.0, np.float32)  # (S, 2E, F)
    head = np.ones(4, np.int64)  # each row's last input row at slot 0
    plans = [[(c, 1.0, 2.0) for c in observed]] * 4
    ctx.fill(ring, [0, 1, 2, 3], [5, 10, 20, 30], head, e, plans)
    want = np.array([[0.0] * 4, [0.0, 0.5, 1.0, 1.5], [0.0, 0.5, 1.0, 1.5], [2.0, 2.5, 3.0, 3.5]], np.float32)
    np.testing.assert_array_equal(ring[:, 0, 3:], want)
    np.testing.assert_array_equal(ring[:, e, 3:], want)  # the ring's copy E slots on
    assert (ring[:, 1, :] == -1.0).all() and (ring[:, 0, :3] == -1.0).all()  # nothing else written
    assert ctx.times == {"NQ": [10, 30]}


def test_a_bar_older_than_the_records_kept_stops_before_it_reads_a_wrong_bar(monkeypatch):
    """Once a context series' older records are let go, a bar from before the first kept one is refused in one
    line (it would read no bar, or a wrong one); a bar within the records is read as before."""
    import foxhunt.data.features.context_live as live_context

    monkeypatch.setattr(live_context, "KEEP", 2)
    observed = ["log_return", "NQ_log_return", "NQ_log_range", "NQ_log_volume", "NQ_log_vol"]
    ctx = LiveContext(["NQ"], "log_return", observed, offset=2)
    ctx.prime(["ES", "NQ"], np.array([0, 1, 1, 1]), np.array([5, 10, 20, 30]), [np.arange(4.0)] * 4)
    assert ctx.times == {"NQ": [20, 30]} and ctx.trimmed == {"NQ"}
    ctx.check(["ES", "NQ"], [20, 25])  # within the records: taken
    with pytest.raises(foxhunt.InputError, match="the bar of 'ES' at .* more than 2 of NQ's bars back") as err:
        ctx.check(["ES"], [15])
    assert "\n" not in str(err.value)
    ctx.prime(["ES", "NQ"], np.array([0, 1, 1]), np.array([5, 20, 30]), [np.arange(3.0)] * 4)  # a shorter history
    assert ctx.trimmed == set()
    ctx.check(["ES"], [15])  # before NQ's first bar: read as none (0), as predict reads it


def test_a_refused_call_with_the_context_series_first_bar_leaves_it_unknown(run, bars):
    """NQ's first bar in a call that is refused (ES's close is NaN) does not make NQ a series with bars: a
    later call of ES alone is still refused for want of NQ's bars, not read as 0."""
    fc = foxhunt.Forecaster.load(run, trace=False)
    step = _bar_of(bars, 0)
    with pytest.raises(foxhunt.InputError, match="missing or non-finite price"):
        fc.update(step.with_columns(close=pl.when(pl.col("symbol") == "ES").then(float("nan")).otherwise(pl.col("close"))))
    with pytest.raises(foxhunt.InputError, match="reads --context NQ as of each bar, and no bar of NQ"):
        fc.update(step.filter(pl.col("symbol") == "ES").row(0, named=True))
    fc.update(step)  # both bars: taken
