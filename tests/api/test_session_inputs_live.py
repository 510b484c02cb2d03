"""A model with --calendar XNYS --calendar-features: its session inputs are XNYS's in the saved model, in `predict`
and in `Forecaster.update`, which agrees with `predict` on the longer history across Thanksgiving."""

from __future__ import annotations

import datetime as dt
import json

import polars as pl

import foxhunt
from tests.api.test_forecaster import assert_same_forecast_rows


def test_update_across_thanksgiving_agrees_with_predict(xnys_sessions_run):
    run, bars = xnys_sessions_run
    saved = json.loads((run / "model.json").read_text())["transform"]
    assert saved["features_calendar"] == "XNYS"
    es = bars.filter(pl.col("symbol") == "ES")
    through = es.filter(pl.col("timestamp") <= dt.datetime(2024, 11, 26))
    fc, ref = foxhunt.Forecaster.load(run), foxhunt.Forecaster.load(run)
    fc.predict(through)
    for day in (27, 29):  # Wednesday before the holiday (a pre-holiday session), Friday after it (an early close)
        bar = es.filter(pl.col("timestamp") == dt.datetime(2024, 11, day))
        got = fc.update(bar.row(0, named=True)).filter(pl.col("symbol") == "ES")
        want = ref.predict(es.filter(pl.col("timestamp") <= dt.datetime(2024, 11, day))).filter(pl.col("symbol") == "ES")
        assert_same_forecast_rows(got, want)
