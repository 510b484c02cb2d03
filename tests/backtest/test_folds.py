"""Fold dates by hand: calendar and fixed lengths, refit schedules, and the refusal when no training time is left."""

from __future__ import annotations

import numpy as np
import pytest

from foxhunt.backtest.config import parse_length, parse_refit
from foxhunt.backtest.fold_dates import iso, plan_folds, short_folds, short_line
from foxhunt.errors import InputError


def ns(text: str) -> int:
    return int(np.datetime64(text, "ns").astype(np.int64))


FIRST, LAST = ns("1999-01-04"), ns("2018-12-31")


def test_calendar_years_end_with_the_year_of_the_last_bar_and_refit_every_two():
    folds = plan_folds(FIRST, LAST, 3, parse_length("1y", "--test-length"), parse_length("2y", "--val-length"),
                       parse_refit("2"))
    got = [(iso(f.val_start)[:10], iso(f.test_start)[:10], (iso(f.test_end) or "")[:10], f.model_fold)
           for f in folds]
    assert got == [("2014-01-01", "2016-01-01", "2017-01-01", 1), ("2015-01-01", "2017-01-01", "2018-01-01", 1),
                   ("2016-01-01", "2018-01-01", "", 3)]
    assert [f.trains for f in folds] == [True, False, True]


def test_fixed_days_count_back_from_the_day_after_the_last_bar_and_rolling_starts():
    folds = plan_folds(FIRST, LAST, 2, parse_length("10d", "t"), parse_length("5d", "v"), parse_refit("once"),
                       parse_length("1w", "l"))
    # the day after 2018-12-31 is 2019-01-01; tests 2018-12-12 .. 12-22 and 12-22 .. the end
    assert [iso(f.test_start)[:10] for f in folds] == ["2018-12-12", "2018-12-22"]
    assert folds[0].test_end == folds[1].test_start and folds[1].test_end is None
    assert [iso(f.val_start)[:10] for f in folds] == ["2018-12-07", "2018-12-17"]
    assert [iso(f.train_start)[:10] for f in folds] == ["2018-11-30", "2018-12-10"]
    assert [f.model_fold for f in folds] == [1, 1]


def test_too_many_folds_leave_no_training_time():
    with pytest.raises(InputError, match="no training time"):
        plan_folds(FIRST, LAST, 20, parse_length("1y", "t"), parse_length("1y", "v"), 1)


@pytest.mark.parametrize("text", ["1", "y", "0d", "3 weeks", "-2d"])
def test_bad_lengths_name_the_flag(text):
    with pytest.raises(InputError, match="--test-length"):
        parse_length(text, "--test-length")


def test_bad_refit():
    with pytest.raises(InputError, match="--refit"):
        parse_refit("sometimes")


def test_a_rolling_window_drops_windows_forecasting_before_its_start():
    from foxhunt.data.dataset.windows import assign_splits

    first = np.array([0, 10, 20, 30, 40, 50])
    split = assign_splits(first, first + 5, train_cut=32, val_cut=46, train_start=10)
    # 0 is before the start (no split); 30 reaches 35 >= 32 (purged); 40 is val; 50 is test
    assert split.ids["train"].tolist() == [1, 2] and split.ids["val"].tolist() == [4]
    assert split.ids["test"].tolist() == [5]


def test_around_rolls_pools_skill_by_origin_offset():
    from foxhunt.backtest.summary import around_rolls

    day = 86_400 * 10**9
    origin = np.arange(6) * day  # one series, origins on days 0..5; the roll's first trade date is day 3
    y = np.ones((6, 1))
    model = np.full((6, 1, 1), 1.0)  # exact at the median: no loss
    model[4] = 0.0  # one step after the roll: loss 0.5
    base = np.zeros((6, 1, 1))  # loss 0.5 everywhere
    arrays = {"series": np.zeros(6, np.int64), "origin_ns": origin, "actual": y, "model": model,
              "baseline_b": base}
    got = around_rolls(arrays, (0.5,), ("ES",), [{"root": "ES", "trade_date": "1970-01-04"}], bars=2)
    assert got["rolls"] == ["1970-01-04"] and got["offsets"] == [-2, -1, 0, 1, 2]
    assert got["skill"]["b"] == [1.0, 1.0, 1.0, 0.0, 1.0]


def test_skill_by_month_and_around_rolls_is_on_the_rows_both_forecast():
    """Origin 0 has no baseline forecast (too little history): the model's loss there (2.0) is left out of both
    skills, as evaluate leaves it out; the baseline's own q-risk by month is on its own rows."""
    from foxhunt.backtest.summary import around_rolls, monthly

    day = 86_400 * 10**9
    origin = np.arange(4) * day  # January 1970, one series; the roll's first trade date is day 2
    y = np.ones((4, 1))
    model = np.array([-3.0, 1.0, 0.0, 1.0])[:, None, None]  # losses at the median: 2.0, 0, 0.5, 0
    base = np.array([np.nan, 0.0, 0.0, 0.0])[:, None, None]  # losses: -, 0.5, 0.5, 0.5
    arrays = {"series": np.zeros(4, np.int64), "origin_ns": origin, "first_ns": origin + day, "actual": y,
              "model": model, "baseline_b": base}
    month = monthly(arrays, (0.5,))
    assert month["skill"]["b"] == [pytest.approx(1 - 0.5 / 1.5)]  # not 1 - 2.5 / 1.5
    assert month["qrisk"]["b"] == [pytest.approx(2 * 1.5 / 3)] and month["qrisk"]["model"] == [pytest.approx(2 * 2.5 / 4)]
    rolls = around_rolls(arrays, (0.5,), ("ES",), [{"root": "ES", "trade_date": "1970-01-03"}], bars=2)
    assert rolls["skill"]["b"] == [None, 1.0, 0.0, 1.0, None]  # offset -2 is origin 0: nothing to compare


def test_jobs_are_cut_to_what_the_free_memory_holds(monkeypatch, daily_path):
    from foxhunt.backtest import jobs
    from foxhunt.data.config import DataConfig
    from foxhunt.model.config import ModelConfig
    from foxhunt.train.config import TrainConfig

    data = DataConfig(paths=(str(daily_path),), encoder_length=16, horizon=3)
    model, train = ModelConfig(hidden_size=8, attention_heads=2, encoder_length=16, horizon=3), TrainConfig(device="cpu")
    device, host = jobs.per_job_bytes(data, model, train, jobs.resolve_device("cpu"))
    assert device > 0 and host > jobs.PROCESS_BYTES
    monkeypatch.setattr(jobs, "free_bytes", lambda _: int(3.5 * (device + host) / jobs.USABLE))
    assert jobs.jobs_that_fit(8, data, model, train) == 3
    assert jobs.jobs_that_fit(2, data, model, train) == 2


def test_a_fold_much_shorter_than_the_others_is_named():
    """Calendar years: the last fold is the part of 2017 the data reach into, 16 days against 365; named in one line
    (the console's warning, and the report's notes through report_text) and in backtest.json."""
    first, last = ns("2010-01-04"), ns("2017-01-17")
    folds = plan_folds(first, last, 3, parse_length("1y", "--test-length"), parse_length("1y", "--val-length"), 1)
    short = short_folds(folds, last)
    assert short == [{"index": 3, "name": "fold-03", "days": 16.0, "others_days": 365.5}]
    assert short_line(short) == ("fold-03 tests 16 days, under half the others' 365.5 (median): scores on so few "
                                 "origins are noisy, read them with their p-values")
    equal = plan_folds(first, last, 3, parse_length("60d", "--test-length"), parse_length("60d", "--val-length"), 1)
    assert short_folds(equal, last) == []


def test_a_fold_resumed_on_changed_data_stops_the_backtest_with_its_own_way_out(tmp_path, monkeypatch, daily_path):
    """A fold killed mid-training, resumed after the input changed, stops with one line naming the backtest's
    --out-dir (not the fold's --run-dir, which the user never chose)."""
    from foxhunt.backtest.fold_dates import Fold
    from foxhunt.backtest.fold_run import run_dir, train_fold
    from foxhunt.data.config import DataConfig
    from foxhunt.model.config import ModelConfig
    from foxhunt.train import session
    from foxhunt.train.config import TrainConfig
    from foxhunt.train.resume import DataChanged

    fold = Fold(1, None, 10**18, 2 * 10**18, None, 1)
    run_dir(tmp_path, fold).mkdir(parents=True)
    (run_dir(tmp_path, fold) / "checkpoint.pt").write_bytes(b"")

    def changed(*args, **kwargs):
        raise DataChanged("the fold's own line", "the input data", "bars.parquet 10 now 9 rows")

    monkeypatch.setattr(session, "train_run", changed)
    with pytest.raises(InputError) as stop:
        train_fold(fold, DataConfig(paths=(str(daily_path),)), ModelConfig(), TrainConfig(), tmp_path)
    assert str(stop.value) == (f"{tmp_path}: the input data changed since this backtest started (bars.parquet 10 now 9 "
                               "rows); its finished folds were trained and scored on the data as it was; run it into "
                               "a new --out-dir")
