"""The session inputs (`--calendar-features`) follow the run's `--calendar`: its holidays, early closes and session
length, in the batch, in the saved model and (tests/api/test_session_inputs_live.py) in the live stream."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from foxhunt.data.config import DataConfig
from foxhunt.data.dataset.types import FittedTransform
from foxhunt.data.features.calendar import SESSION_CALENDAR, calendar_features, features_calendar
from foxhunt.data.features.known import decoder_features
from foxhunt.data.features.schema import Kind, Role
from foxhunt.data.prepare import prepare_data
from foxhunt.errors import InputError

pytest.importorskip("pandas_market_calendars")

FLAGS = ("early_close", "pre_holiday", "post_holiday")


def ns(*stamps: str) -> np.ndarray:
    return np.array([np.datetime64(s, "ns").astype(np.int64) for s in stamps])


def flags(ts: np.ndarray, calendar: str) -> dict[str, list[float]]:
    f = calendar_features(ts, "UTC", intraday=False, sessions=calendar)
    return {k: f[k].tolist() for k in FLAGS}


def test_daily_flags_are_the_named_calendars() -> None:
    # Mon 09-30 before China's National Day week, Tue 10-08 after it; Wed 11-27 before Thanksgiving, Fri 11-29 after
    # it (NYSE closes at 13:00 ET).
    ts = ns("2024-09-30", "2024-10-08", "2024-11-27", "2024-11-29")
    assert flags(ts, "XSHG") == {"early_close": [0, 0, 0, 0], "pre_holiday": [1, 0, 0, 0], "post_holiday": [0, 1, 0, 0]}
    assert flags(ts, "XNYS") == {"early_close": [0, 0, 0, 1], "pre_holiday": [0, 0, 1, 0], "post_holiday": [0, 0, 0, 1]}
    # CME Globex Equity trades a short Thanksgiving session and knows nothing of Beijing's holidays.
    assert flags(ts, SESSION_CALENDAR) == {"early_close": [0, 0, 0, 1], "pre_holiday": [0, 0, 0, 0],
                                           "post_holiday": [0, 0, 0, 0]}


def test_intraday_minutes_to_close_are_over_the_calendars_own_session() -> None:
    # 12:00 ET on the day after Thanksgiving (close 13:00), 15:00 ET on a Tuesday (close 16:00), 09:30 ET (the open).
    ts = ns("2024-11-29T17:00", "2024-11-26T20:00", "2024-11-26T14:30")
    f = calendar_features(ts, "America/New_York", intraday=True, sessions="XNYS")
    np.testing.assert_allclose(f["to_close"], [60 / 390, 60 / 390, 1.0], atol=1e-12)  # 6.5 h sessions
    assert f["early_close"].tolist() == [1, 0, 0] and f["post_holiday"].tolist() == [1, 0, 0]


def test_the_default_and_24_7() -> None:
    assert features_calendar(None) == SESSION_CALENDAR and features_calendar("XSHG") == "XSHG"
    with pytest.raises(InputError, match="--calendar-features"):
        DataConfig(calendar="24/7", calendar_features=True)


def test_prepared_batches_and_the_saved_transform_carry_the_calendar(xshg_daily_file) -> None:
    cfg = DataConfig(paths=(str(xshg_daily_file),), calendar="XSHG", calendar_features=True, encoder_length=8,
                     horizon=3)
    p = prepare_data(cfg)
    tf = p.transform
    assert tf.features_calendar == "XSHG" and tf.session_calendar == "XSHG"
    assert FittedTransform.from_dict(tf.to_dict(), cfg).session_calendar == "XSHG"
    older = {k: v for k, v in tf.to_dict().items() if k != "features_calendar"}  # saved before it was recorded
    assert FittedTransform.from_dict(older, cfg).session_calendar == SESSION_CALENDAR  # what those models used
    assert dataclasses.replace(tf, data=DataConfig(calendar="XSHG")).session_calendar is None  # no session inputs
    w = p.windows
    ids = torch.arange(len(w.starts))
    origins = w.origin_ns(ids).numpy()
    want = decoder_features(origins, tf.bar_spacing_ns, w.horizon, tf.exchange_tz, tf.intraday, "XSHG",
                            tf.scalers.season, tf.grid)  # (B, D, Kr)
    got = w.batch(ids).dense()["known_cont"][:, w.encoder_length:, : w.n_known_cont]  # (B, D, Kr)
    assert torch.equal(got, torch.from_numpy(want))
    known = p.schema.names(Role.KNOWN, Kind.CONTINUOUS)
    # Thursday 2016-09-29's first step is Friday 09-30, the last session before National Day week; Friday's is
    # Monday 10-10, the first after it (XSHG's grid skips the week).
    for day, flag in (("2016-09-29", "pre_holiday"), ("2016-09-30", "post_holiday")):
        at = torch.from_numpy(origins == ns(day)[0])
        assert int(at.sum()) == 3  # the fixture's three series
        assert got[at, 0, known.index(flag)].tolist() == [1.0, 1.0, 1.0]
