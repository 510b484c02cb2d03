"""Bars a saved model forecasts are of its bar spacing: 2-minute bars into a 1-minute model are refused in one line
naming the file and both spacings (their forecast steps would sit on the 1-minute grid), by `Forecaster.predict`
and `foxhunt predict`; bars with gaps, whose median gap is still the model's, are forecast."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

import foxhunt
from foxhunt.api.bars import FRAME_NAME
from foxhunt.cli import main
from foxhunt.data.prepare.driver import model_gap_share
from foxhunt.errors import InputError

TAIL = 2000  # bars of the sample's end: enough for the encoder, few to prepare


@pytest.fixture(scope="module")
def tail(intraday_run) -> pl.DataFrame:
    return intraday_run[1].tail(TAIL)


def test_predict_refuses_bars_of_another_intraday_spacing(intraday_run, tail):
    fc = foxhunt.Forecaster.load(intraday_run[0])
    with pytest.raises(InputError) as got:
        fc.predict(tail.gather_every(2))  # 2-minute bars
    said = str(got.value)
    assert said.startswith(f"{FRAME_NAME}: ") and "trained on 1m bars" in said and "these bars are 2m apart" in said
    assert "\n" not in said


def test_predict_forecasts_sparse_bars_of_the_models_spacing(intraday_run, tail):
    keep = np.random.default_rng(0).random(tail.height) > 0.3  # 30% of the bars missing: the median gap is 1m
    fc = foxhunt.Forecaster.load(intraday_run[0])
    out = fc.predict(tail.filter(pl.Series(keep)))
    assert out["symbol"].to_list() == ["ES"] * fc.horizon


def test_cli_predict_refuses_another_spacing_in_one_line(intraday_run, tail, tmp_path, capsys):
    path = tmp_path / "es2m.parquet"
    tail.gather_every(2).write_parquet(path)
    code = main(["predict", "--model", str(intraday_run[0]), "-f", str(path), "--out", str(tmp_path / "f.parquet"),
                 "--threads", "1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err[-1] == (f"foxhunt: error: {path}: the model was trained on 1m bars but these bars are 2m apart (the "
                       "median gap between a series' bars; 0.0% of the gaps are 1m); forecast 1m bars with it, or "
                       "train a model on these 2m bars")
    assert not (tmp_path / "f.parquet").exists()


def test_thin_bars_of_the_models_spacing_pass_where_bars_of_another_do_not():
    """The median gap of thinly traded bars exceeds the model's spacing; gaps of that spacing still occur, so they
    are its bars (tests/data/features/test_known_future.py forecasts such a file on the model's grid)."""
    minute = 60 * 10**9
    thin = [(np.array([minute, 2 * minute, 3 * minute]), np.array([30, 40, 30]))]  # median 2m, 30% of gaps 1m
    assert model_gap_share(thin, minute) == pytest.approx(0.3)
    assert model_gap_share([(np.array([2 * minute]), np.array([99]))], minute) == 0.0
    assert model_gap_share([], minute) == 1.0
