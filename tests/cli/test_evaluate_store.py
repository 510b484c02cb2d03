"""`foxhunt evaluate --features STORE`: the model and every baseline scored on a store's windows, as from the bars;
and a run trained from a store ends with the comparison against every baseline, as one trained from the bars."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from foxhunt.cli import main

END = "2024-03-14"  # before the last bars: the bars' last origins need targets a store's windows do not reach


def final_line(run: Path) -> str:
    line = next(line for line in (run / "train.log").read_text().splitlines() if "best epoch" in line)
    return line[line.index("best epoch") :].replace(str(run), "RUN")  # without the time stamp and the run's path


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_flags, fixtures_dir):
    """The ES 1-minute fixture (intraday: all four baselines) prepared as a store, a few batches trained from it and
    from the bars, and evaluate run on the store and on the bars up to END."""
    root = tmp_path_factory.mktemp("evaluate-store")
    bars = str(fixtures_dir / "es_fut_ohlcv1m_databento.parquet")
    assert main(["prepare", "--parquet-file", bars, "--encoder-length", "16", "--horizon", "3", "--out",
                 str(root / "store")]) == 0
    common = [*tiny_flags, "--epochs", "1", "--max-train-batches", "5"]
    assert main(["train", *common, "--features", str(root / "store"), "--run-dir", str(root / "store-run")]) == 0
    assert main(["train", *common, "--parquet-file", bars, "--run-dir", str(root / "bars-run")]) == 0
    model = str(root / "store-run")
    assert main(["evaluate", "--model", model, "--features", str(root / "store"), "--end", END, "--out-dir",
                 str(root / "on-store"), "--threads", "1"]) == 0
    assert main(["evaluate", "--model", model, "--parquet-file", bars, "--end", END, "--out-dir",
                 str(root / "on-bars"), "--threads", "1"]) == 0
    return root


def metrics(path: Path) -> dict:
    return json.loads((path / "metrics.json").read_text())


def test_evaluate_on_a_store_scores_the_model_and_every_baseline_as_on_the_bars(runs):
    store, bars = metrics(runs / "on-store"), metrics(runs / "on-bars")
    assert set(store["baselines"]) == {"training_quantiles", "rolling_vol", "garch_t", "seasonal_rolling_vol", "har"}
    assert store["period"] == bars["period"] and store["period"]["origins"] > 1000
    assert store.keys() == bars.keys() and "model" in store
    for key in ("model", "model_raw", "baselines", "skill", "verdict", "calibration", "quantile_crossings"):
        assert store.get(key) == bars.get(key), key  # model_raw: only where calibration moved the quantiles
    assert (runs / "on-store" / "report.html").is_file() and (runs / "on-store" / "interpretation.json").is_file()
    assert f"data: feature store {runs / 'store'}" in (runs / "on-store" / "report.html").read_text()


def test_without_end_the_bars_score_each_series_last_origins_which_a_store_has_not(runs, fixtures_dir):
    """The one difference between the two: from the bars, the last horizon - 1 origins of each series are scored on
    the steps they have (period.partial_origins, said on the console); a store's windows all have every step."""
    model, bars = str(runs / "store-run"), str(fixtures_dir / "es_fut_ohlcv1m_databento.parquet")
    for how, where in (("--features", str(runs / "store")), ("--parquet-file", bars)):
        assert main(["evaluate", "--model", model, how, where, "--out-dir", str(runs / f"all{how}"),
                     "--threads", "1", "--no-calibration"]) == 0
    store, on_bars = metrics(runs / "all--features")["period"], metrics(runs / "all--parquet-file")["period"]
    series = len(metrics(runs / "all--parquet-file")["model"]["per_series"])
    assert store["partial_origins"] == 0 and on_bars["partial_origins"] == series * (3 - 1)  # horizon 3
    assert on_bars["origins"] - store["origins"] == on_bars["partial_origins"]
    assert store["first_origin"] == on_bars["first_origin"] and store["last_origin"] < on_bars["last_origin"]


def test_a_run_trained_from_a_store_ends_pointing_to_evaluate_on_the_store(runs):
    """The bars-trained run ends with every baseline; the store-trained one with the training-set quantiles (its
    peak memory stays the training's), naming the evaluate command that scores them all on the store."""
    assert "the strongest of 5 baselines" in final_line(runs / "bars-run")
    assert "baseline" in final_line(runs / "store-run") and "strongest" not in final_line(runs / "store-run")
    log = (runs / "store-run" / "train.log").read_text()
    assert f"`foxhunt evaluate --model RUN --features {runs / 'store'}` scores every baseline" in log
    assert f"foxhunt evaluate --model {runs / 'store-run'} --out-dir {runs / 'store-run' / 'eval'} --features" in log


def test_forecasts_predicted_from_the_store_are_scored_as_evaluate_scores_them(runs):
    model, store, out = str(runs / "store-run"), str(runs / "store"), runs / "given"
    assert main(["predict", "--model", model, "--features", store, "--end", END, "--out", str(out / "p.parquet"),
                 "--threads", "1"]) == 0
    assert main(["evaluate", "--model", model, "--features", store, "--forecasts", str(out / "p.parquet"), "--end",
                 END, "--out-dir", str(out), "--threads", "1"]) == 0
    got, full = metrics(out), metrics(runs / "on-store")
    assert got["period"] == full["period"] and got["baselines"] == full["baselines"]
    for q, v in full["model"]["overall"]["q_risk"].items():  # the same quantiles, summed in one piece
        assert got["model"]["overall"]["q_risk"][q] == pytest.approx(v, rel=1e-9)


def test_a_store_missing_an_array_of_its_format_is_refused(runs, capsys):
    """Every store of this format keeps the own moves the baselines read: a manifest without one is not scored
    with baselines left out, but refused in one line."""
    damaged = runs / "damaged"
    shutil.copytree(runs / "store", damaged)
    manifest = json.loads((damaged / "manifest.json").read_text())
    del manifest["arrays"]["own_log_range"]
    (damaged / "manifest.json").write_text(json.dumps(manifest))
    capsys.readouterr()
    out = runs / "on-damaged"
    code = main(["evaluate", "--model", str(runs / "store-run"), "--features", str(damaged), "--end", END,
                 "--out-dir", str(out), "--threads", "1"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and not (out / "metrics.json").exists()
    assert err.endswith(f"{damaged / 'manifest.json'}: no entry for the array 'own_log_range'; run `foxhunt prepare` "
                        "again")


def test_evaluate_refuses_both_inputs_and_a_store_prepared_otherwise(runs, fixtures_dir, capsys):
    out = runs / "refused"
    code = main(["evaluate", "--model", str(runs / "store-run"), "--features", str(runs / "store"),
                 "--parquet-file", str(fixtures_dir / "es_fut_ohlcv1m_databento.parquet"), "--out-dir", str(out)])
    assert code == 2 and "pass one" in capsys.readouterr().err and not out.exists()
    other = runs / "other"
    assert main(["prepare", "--parquet-file", str(fixtures_dir / "es_fut_ohlcv1m_databento.parquet"),
                 "--encoder-length", "16", "--horizon", "3", "--val-fraction", "0.3", "--out", str(other)]) == 0
    capsys.readouterr()
    code = main(["evaluate", "--model", str(runs / "store-run"), "--features", str(other), "--out-dir", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and "prepared with other series, scalers or bar spacing" in err
    assert not out.exists()
