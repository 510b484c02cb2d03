"""`Forecaster.update` reads a bar's text time as the files were read: by the model's --date-format when it was
given (data/io/times.py, one parser for bars, covariates, events and the stream), else as ISO 8601."""

from __future__ import annotations

import pytest

from foxhunt.api.bars import stream_bars
from foxhunt.errors import InputError

BAR = {"symbol": "ES", "open": 1.0, "high": 2.0, "low": 0.5, "close": 1.5, "volume": 10.0}


def test_a_text_time_is_read_by_the_models_date_format():
    day_first = stream_bars({**BAR, "ts_event": "03/05/2015 14:30"}, {}, "ES", None, date_format="%d/%m/%Y %H:%M")
    iso = stream_bars({**BAR, "ts_event": "2015-05-03T14:30"}, {}, "ES", None)
    assert day_first.ts_ns == iso.ts_ns == [1_430_663_400 * 10**9]  # 3 May 2015 14:30 UTC


def test_a_time_the_format_cannot_read_names_the_bar_and_the_format():
    with pytest.raises(InputError, match=r"update: the bar of 'ES'.*--date-format '%m/%d/%Y'"):
        stream_bars({**BAR, "ts_event": "31/05/2015"}, {}, "ES", None, date_format="%m/%d/%Y")
