"""Issue 43's panel in small: a baseline that cannot forecast every series, and a series with a gap before the
training cut. The daily fixture with NQ starting in February 2024 (about 80 training returns: GARCH-t, which needs
100, is left out for NQ, as it was for 4 of the futures panel's series) and closed from 13 to 31 May, just before
--train-end 2024-06-03 (NQ's first validation origin is then 10 May, three weeks before the cut).

- `evaluate` compares GARCH-t with the model on ES alone (the rows both forecast), says what it left out and why, and
  its skill is that comparison's, not the model's q-risk over both series against GARCH-t's over one;
- `train` and `evaluate` fit every series' baselines on the same bars: the rows before the training cut. Before,
  train cut every series at the panel's first validation origin (NQ's, 10 May), evaluate at the training cut;
- `train`'s final line is that comparison on the validation windows.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch

from foxhunt.cli import main
from foxhunt.data.config import DataConfig
from foxhunt.data.prepare import prepare_data
from foxhunt.evaluate import validation
from foxhunt.evaluate.metrics import q_risk
from foxhunt.evaluate.paired import compare
from foxhunt.evaluate.verdict import validation_claim
from foxhunt.model.config import quantile_label
from tests.evaluate.test_baseline_cut import FITTED, Fits, hand_returns, ns, training_values

QS = (0.1, 0.5, 0.9)
TRAIN_END, VAL_END = "2024-06-03", "2024-08-01"


@pytest.fixture(scope="module")
def gap_path(tmp_path_factory, daily_path) -> Path:
    bars = pl.read_parquet(daily_path)
    nq, t = pl.col("symbol") == "NQ", pl.col("timestamp")
    late = t < dt.datetime(2024, 2, 1)
    closed = (t >= dt.datetime(2024, 5, 13)) & (t < dt.datetime(2024, 6, 3))
    path = tmp_path_factory.mktemp("gap") / "bars.parquet"
    bars.filter(~(nq & (late | closed))).write_parquet(path)
    return path


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tiny_flags, gap_path) -> tuple[Path, Fits]:
    run = tmp_path_factory.mktemp("rows") / "run"
    with pytest.MonkeyPatch.context() as mp:
        fits = Fits(mp)
        assert main(["train", "--parquet-file", str(gap_path), *tiny_flags, "--epochs", "1", "--seed", "3",
                     "--train-end", TRAIN_END, "--val-end", VAL_END, "--run-dir", str(run)]) == 0
    return run, fits


@pytest.fixture(scope="module")
def evaluated(trained, gap_path, tmp_path_factory) -> tuple[Path, Fits, str]:
    run, _ = trained
    out = tmp_path_factory.mktemp("rows") / "eval"
    with pytest.MonkeyPatch.context() as mp:
        fits = Fits(mp)
        console = io.StringIO()
        with contextlib.redirect_stdout(console):
            assert main(["evaluate", "--model", str(run), "--parquet-file", str(gap_path), "--out-dir", str(out),
                         "--threads", "1"]) == 0
    return out, fits, console.getvalue()


def test_train_and_evaluate_fit_each_series_baselines_on_the_same_bars(trained, evaluated, gap_path):
    _, in_train = trained
    _, in_evaluate, _ = evaluated
    want = training_values(hand_returns(gap_path), ns(TRAIN_END))  # each series' returns before the training cut
    in_train.assert_fitted_on(want)  # ES's run to 31 May, not to NQ's first validation origin (10 May)
    in_evaluate.assert_fitted_on(want)
    for kind in FITTED:
        fitted = [sorted((len(v), v.tobytes()) for k, v in fits.seen if k == kind) for fits in (in_train, in_evaluate)]
        assert fitted[0] == fitted[1], kind


def test_evaluate_compares_each_baseline_on_the_rows_both_forecast(evaluated):
    out, _, console = evaluated
    metrics = json.loads((out / "metrics.json").read_text())
    fc = pl.read_parquet(out / "forecasts.parquet").filter(pl.col("actual").is_not_null()).sort("symbol", "origin",
                                                                                                 "horizon")
    es = fc.filter(pl.col("symbol") == "ES")
    y = es["actual"].cast(pl.Float64).to_numpy()[:, None]  # (N, 1): each (origin, step) pair a row
    q = np.stack([es[quantile_label(q)].cast(pl.Float64).to_numpy() for q in QS], axis=-1)[:, None, :]
    model_es = q_risk(y, q, QS)  # the model's q-risk on ES, the series GARCH-t forecasts
    own = metrics["baselines"]["garch_t"]["overall"]["q_risk"]  # GARCH-t's own rows are ES's
    for i, k in enumerate(f"{x:g}" for x in QS):  # the skill is the model's on ES against GARCH-t's on ES
        assert metrics["skill"]["garch_t"][k] == pytest.approx(1 - model_es[i] / own[k], rel=1e-4)
    garch = metrics["comparisons"]["garch_t"]
    assert (garch["series"], garch["origins"]) == (1, es["origin"].n_unique())
    assert garch["left_out"]["series"] == ["NQ"]
    assert garch["left_out"]["origins"] == fc.filter(pl.col("symbol") == "NQ")["origin"].n_unique()
    assert garch["left_out"]["reasons"]["NQ"].startswith("GARCH baseline: only ")
    for i, k in enumerate(f"{x:g}" for x in QS):
        assert garch["model_q_risk"][k] == pytest.approx(model_es[i], rel=1e-5)
        assert garch["baseline_q_risk"][k] == pytest.approx(own[k], rel=1e-12)
        assert 0 <= garch["dm"][k]["p_value"] <= 1 and garch["dm"][k]["periods"] == es["origin"].n_unique()
    full = metrics["comparisons"]["training_quantiles"]  # forecasts both series: every origin
    assert full["origins"] == metrics["period"]["origins"] and full["left_out"]["origins"] == 0
    assert metrics["verdict"]["skill"]["garch_t"] == {k: garch["skill"][k] for k in ("0.1", "0.9")}
    assert ("left out of the comparison with garch_t (" f"{garch['left_out']['origins']:,} origins): NQ (GARCH "
            "baseline: only ") in console


def test_train_final_line_compares_on_the_validation_rows_both_forecast(trained, gap_path):
    run, _ = trained
    data = prepare_data(DataConfig.from_dict(json.loads((run / "config.json").read_text())["data"]))
    val = validation.validation_forecasts(run, data, torch.device("cpu"))
    forecasts, why = validation.validation_baselines(data, val, QS)
    names = data.windows.series_names
    comparisons = {k: compare(val.series, val.origin_ns, val.actual, val.quantiles, f, QS, names, why.get(k))
                   for k, f in forecasts.items()}
    es = int((val.series == names.index("ES")).sum())
    assert comparisons["garch_t"]["origins"] == es and comparisons["garch_t"]["left_out"]["series"] == ["NQ"]
    model = dict(zip(QS, q_risk(val.actual, val.quantiles, QS).tolist(), strict=True))
    final = next(line for line in (run / "train.log").read_text().splitlines() if "best epoch" in line)
    assert validation_claim(comparisons, QS, model, len(val)) in final
