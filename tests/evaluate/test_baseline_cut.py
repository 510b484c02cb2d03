"""Where the baselines stop fitting: on the model's training bars alone, through every command that scores them
(`foxhunt evaluate` on bars and on a feature store, `foxhunt backtest`, and the line `foxhunt train` ends with).

The baselines' own no-look-ahead tests pass a training mask by hand; here the mask comes from the commands, and what
it must be is worked out from the bars file alone: the daily fixture's closes, their log returns (rounded to float32
as foxhunt keeps its targets) and the bars before --train-end (or before each fold's validation start). Every check
fails if the cut moves past the training period (the baselines then see the scored bars) or lets in one bar more.
TRAIN_END and VAL_END are bar times, so a cut that takes in the bar AT the split shows too.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch

from foxhunt.cli import main
from foxhunt.data.baselines.forecasts import BASELINES, BaselineSeries, baseline_forecasts
from foxhunt.data.config import DataConfig
from foxhunt.data.prepare import prepare_data
from foxhunt.evaluate import series_baselines, validation
from foxhunt.evaluate.metrics import q_risk
from foxhunt.evaluate.paired import compare
from foxhunt.evaluate.verdict import validation_claim

QS = (0.1, 0.5, 0.9)
HORIZON = 3
TRAIN_END, VAL_END = "2024-06-03", "2024-08-01"  # Mondays: the daily fixture has a bar at each
FITTED = {"training_quantiles", "rolling_vol", "garch_t", "har"}  # the daily fixture's baselines (no intraday season)


def ns(text: str) -> int:
    return int(np.datetime64(text.replace("+00:00", "").rstrip("Z"), "ns").astype(np.int64))


def hand_returns(path: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Each symbol's bar times (ns) and log returns of its closes (NaN at its first bar), from the file alone."""
    bars = pl.read_parquet(path)
    out = {}
    for name in sorted(set(bars["symbol"])):
        b = bars.filter(pl.col("symbol") == name).sort("timestamp")
        r = np.diff(np.log(b["close"].to_numpy())).astype(np.float32).astype(np.float64)
        out[name] = (b["timestamp"].dt.epoch("ns").to_numpy(), np.concatenate([[np.nan], r]))
    return out


def training_values(hand: dict[str, tuple[np.ndarray, np.ndarray]], before: int) -> dict[str, np.ndarray]:
    """Each symbol's finite returns of the bars strictly before `before` (ns): what the baselines may fit on."""
    return {name: r[(ts < before) & np.isfinite(r)] for name, (ts, r) in hand.items()}


def qrisk(actual: np.ndarray, forecast: np.ndarray) -> dict[float, float]:
    """q-risk per quantile, 2 * sum of pinball / sum of |y|: actual (N,), forecast (N, Q)."""
    d = actual[:, None] - forecast  # (N, Q)
    q = np.asarray(QS)
    return dict(zip(QS, 2 * np.maximum(q * d, (q - 1) * d).sum(axis=0) / np.abs(actual).sum(), strict=True))


class Fits:
    """Every baseline fit the command makes: (baseline, the target values of the rows it was fitted on)."""

    def __init__(self, mp: pytest.MonkeyPatch) -> None:
        self.seen: list[tuple[str, np.ndarray]] = []
        real = series_baselines.baseline_forecasts

        def spy(kind, series, **kw):
            self.seen.append((kind, series.target[series.train_mask]))
            return real(kind, series, **kw)

        mp.setattr(series_baselines, "baseline_forecasts", spy)
        mp.setattr(validation, "_FITTED", OrderedDict())  # no baseline forecasts cached by an earlier run

    def assert_fitted_on(self, want: dict[str, np.ndarray], scorings: int = 1) -> None:
        """Each baseline was fitted once per series and scoring, each time on exactly that series' `want` values."""
        kinds = {k for k, _ in self.seen}
        assert kinds >= FITTED, kinds
        for kind in kinds:
            got = [v for k, v in self.seen if k == kind]
            assert len(got) == scorings * len(want), kind
            for v in got:
                assert any(np.array_equal(v, w) for w in want.values()), (
                    f"{kind} fitted on {len(v)} rows; the training bars are {[len(w) for w in want.values()]}")
            assert all(any(np.array_equal(v, w) for v in got) for w in want.values()), kind


def evaluate_training_quantiles(out: Path, want: dict[str, np.ndarray]) -> None:
    """metrics.json's training_quantiles q-risk is that of the quantiles of `want`, on evaluate's scored rows."""
    metrics = json.loads((out / "metrics.json").read_text())
    fc = pl.read_parquet(out / "forecasts.parquet").filter(pl.col("actual").is_not_null())
    tq = {name: np.quantile(v, QS) for name, v in want.items()}
    forecast = np.stack([tq[s] for s in fc["symbol"]])  # (N, Q): one table a series, the same at every step
    expected = qrisk(fc["actual"].cast(pl.Float64).to_numpy(), forecast)
    got = metrics["baselines"]["training_quantiles"]["overall"]["q_risk"]
    assert metrics["model"]["overall"]["n"] == fc.height
    np.testing.assert_allclose([got[f"{q:g}"] for q in QS], [expected[q] for q in QS], rtol=1e-9)


@pytest.fixture(scope="module")
def hand(daily_path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    return hand_returns(daily_path)


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tiny_flags, daily_path) -> tuple[Path, Fits]:
    """A tiny model trained to TRAIN_END, validated to VAL_END, with the bars after it held out; and its final
    line's baseline fits."""
    run = tmp_path_factory.mktemp("cut") / "run"
    with pytest.MonkeyPatch.context() as mp:
        fits = Fits(mp)
        assert main(["train", "--parquet-file", str(daily_path), *tiny_flags, "--epochs", "1", "--seed", "3",
                     "--train-end", TRAIN_END, "--val-end", VAL_END, "--run-dir", str(run)]) == 0
    return run, fits


def test_train_final_line_scores_baselines_fitted_on_the_training_bars_alone(trained, hand):
    run, fits = trained
    fits.assert_fitted_on(training_values(hand, ns(TRAIN_END)))
    # the final line, worked out from the bars: every baseline fitted on the bars before TRAIN_END, compared on the
    # validation windows with the best weights' forecasts
    saved = json.loads((run / "config.json").read_text())["data"]
    data = prepare_data(DataConfig.from_dict(saved))
    val = validation.validation_forecasts(run, data, torch.device("cpu"))
    names = data.windows.series_names
    comparisons = {}
    for kind in (k for k in BASELINES if k in FITTED):  # in the order foxhunt scores them
        forecast = np.empty_like(val.quantiles, dtype=np.float64)
        for s, name in enumerate(names):
            ts, r = hand[name]
            pick = val.series == s
            forecast[pick] = baseline_forecasts(kind, BaselineSeries("log_return", r, ts < ns(TRAIN_END)),
                                                origins=np.searchsorted(ts, val.origin_ns[pick]), horizon=HORIZON,
                                                quantiles=QS)
        comparisons[kind] = compare(val.series, val.origin_ns, val.actual, val.quantiles, forecast, QS, names)
    final = next(line for line in (run / "train.log").read_text().splitlines() if "best epoch" in line)
    model = dict(zip(QS, q_risk(val.actual, val.quantiles, QS).tolist(), strict=True))
    assert validation_claim(comparisons, QS, model, len(val)) in final


def test_evaluate_fits_the_baselines_on_the_model_training_bars_alone(trained, hand, daily_path, tmp_path,
                                                                      monkeypatch):
    """By default evaluate scores the bars after validation; the baselines still fit on the training bars only."""
    run, _ = trained
    fits = Fits(monkeypatch)
    out = tmp_path / "eval"
    assert main(["evaluate", "--model", str(run), "--parquet-file", str(daily_path), "--out-dir", str(out),
                 "--threads", "1"]) == 0
    first = pl.read_parquet(out / "forecasts.parquet").filter(pl.col("horizon") == 1)["target_time"]
    assert first.dt.epoch("ns").min() >= ns(VAL_END)  # held out: the scored bars are neither training nor validation
    want = training_values(hand, ns(TRAIN_END))
    fits.assert_fitted_on(want)
    evaluate_training_quantiles(out, want)


def test_evaluate_from_inside_training_fits_no_bar_past_the_first_origin(trained, hand, daily_path, tmp_path,
                                                                         monkeypatch):
    """--start inside the training period: the baselines fit on the bars up to the first scored origin, never on
    the first bar they are scored on."""
    run, _ = trained
    fits = Fits(monkeypatch)
    out = tmp_path / "eval"
    assert main(["evaluate", "--model", str(run), "--parquet-file", str(daily_path), "--start", "2024-03-01",
                 "--out-dir", str(out), "--threads", "1"]) == 0
    scored = pl.read_parquet(out / "forecasts.parquet").filter(pl.col("actual").is_not_null())
    first_origin = int(scored["origin"].dt.epoch("ns").min())
    assert first_origin < ns(TRAIN_END)
    want = training_values(hand, first_origin + 1)  # the origin's own bar is known when it forecasts
    fits.assert_fitted_on(want)
    evaluate_training_quantiles(out, want)


def test_evaluate_on_a_feature_store_fits_the_baselines_on_the_training_bars_alone(trained, hand, daily_path,
                                                                                   tiny_flags, tmp_path, monkeypatch):
    """A store's windows are mapped from its own files: the same cut (the model's --train-end) on its times."""
    run, _ = trained
    store = tmp_path / "store"
    assert main(["prepare", "--parquet-file", str(daily_path), "--encoder-length", "16", "--horizon", str(HORIZON),
                 "--train-end", TRAIN_END, "--val-end", VAL_END, "--out", str(store)]) == 0
    fits = Fits(monkeypatch)
    out = tmp_path / "eval"
    assert main(["evaluate", "--model", str(run), "--features", str(store), "--start", VAL_END, "--out-dir",
                 str(out), "--threads", "1"]) == 0
    want = training_values(hand, ns(TRAIN_END))
    fits.assert_fitted_on(want)
    evaluate_training_quantiles(out, want)


def test_backtest_folds_fit_their_baselines_on_their_model_training_bars_alone(hand, daily_path, tiny_flags,
                                                                               tmp_path, monkeypatch):
    """Each fold's baselines fit on the bars before the validation start of the run that forecasts it: with
    --refit once, fold 2 is forecast by fold 1's model, and its baselines fit where that model's training ended."""
    fits = Fits(monkeypatch)
    out = tmp_path / "bt"
    assert main(["backtest", "--out-dir", str(out), "--folds", "2", "--test-length", "60d", "--val-length", "60d",
                 "--refit", "once", "--parquet-file", str(daily_path), *tiny_flags, "--epochs", "1", "--seed", "3",
                 "--quiet"]) == 0
    result = json.loads((out / "backtest.json").read_text())
    starts = {f["index"]: f["val_start"] for f in result["folds"]}
    assert [f["model_fold"] for f in result["folds"]] == [1, 1]
    for fold in result["folds"]:
        want = training_values(hand, ns(starts[fold["model_fold"]]))
        with np.load(out / f"fold-{fold['index']:02d}" / "scored.npz") as z:
            series, actual, got = z["series"], z["actual"], z["baseline_training_quantiles"]
        forecast = np.empty_like(got)
        for s, name in enumerate(fold["series_names"]):
            forecast[series == s] = np.quantile(want[name], QS)
        np.testing.assert_array_equal(got, forecast)
        ok = np.isfinite(actual)
        expected = qrisk(actual[ok], forecast[ok])
        reported = fold["metrics"]["baselines"]["training_quantiles"]["overall"]["q_risk"]
        np.testing.assert_allclose([reported[f"{q:g}"] for q in QS], [expected[q] for q in QS], rtol=1e-9)
    fits.assert_fitted_on(training_values(hand, ns(starts[1])), scorings=2)  # no fold trains past fold 1's bars
