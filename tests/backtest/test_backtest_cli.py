"""`foxhunt backtest` end to end on the daily fixture with a tiny model: folds that never train on their test
period, forecasts equal to `train` + `predict` on the same dates, one score set per fold and overall, and a killed
backtest that resumes at the first unfinished fold. One backtest (two folds) shared by the module."""

from __future__ import annotations

import json
import logging
import shutil
from html import escape
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest

from foxhunt.backtest.report import write_backtest_report
from foxhunt.backtest.run import report_text
from foxhunt.cli import main
from foxhunt.data.bars import load
from foxhunt.data.config import DataConfig
from foxhunt.data.io.sample_path import DEFAULT_SEED, SAMPLE_VERSION, SIMULATED
from foxhunt.data.prepare import prepare_data
from foxhunt.evaluate.verdict import verdict
from foxhunt.model.calibration import DEFAULT_METHOD


@pytest.fixture(scope="module")
def flags(daily_path, tiny_flags) -> list[str]:
    return ["--parquet-file", str(daily_path), *tiny_flags, "--epochs", "1", "--seed", "3", "--quiet"]


@pytest.fixture(scope="module")
def backtest(tmp_path_factory, flags) -> tuple[Path, list[str]]:
    out = tmp_path_factory.mktemp("bt") / "out"
    argv = ["backtest", "--out-dir", str(out), "--folds", "2", "--test-length", "60d", "--val-length", "60d", *flags]
    assert main(argv) == 0
    return out, argv


def folds(out: Path) -> list[dict]:
    return [json.loads((out / f"fold-{k:02d}" / "fold.json").read_text()) for k in (1, 2)]


def ns(text: str | None) -> int | None:
    return None if text is None else int(np.datetime64(text.replace("+00:00", ""), "ns").astype(np.int64))


def test_no_fold_trains_or_validates_on_its_test_period(backtest):
    out, _ = backtest
    for fold in folds(out):
        saved = json.loads((Path(fold["run_dir"]) / "config.json").read_text())
        data = prepare_data(DataConfig.from_dict(saved["data"]))  # the fold's split, rebuilt from its run
        last_fc = data.windows.target_ns(data.splits["train"])[:, -1].max().item()
        assert last_fc < ns(fold["val_start"]) < ns(fold["test_start"])
        assert data.windows.target_ns(data.splits["val"])[:, -1].max().item() < ns(fold["test_start"])
        fc = pl.read_parquet(out / f"fold-{fold['index']:02d}" / "forecasts.parquet").filter(pl.col("horizon") == 1)
        first = fc["target_time"].dt.epoch("ns")
        assert first.min() >= ns(fold["test_start"])
        if fold["test_end"] is not None:
            assert first.max() < ns(fold["test_end"])


def test_forecasts_equal_train_then_predict_on_the_same_dates(backtest, flags, tmp_path, daily_path):
    out, _ = backtest
    fold = folds(out)[0]
    run = tmp_path / "run"
    assert main(["train", *flags, "--train-end", fold["val_start"], "--val-end", fold["test_start"],
                 "--run-dir", str(run)]) == 0
    pred = tmp_path / "pred.parquet"
    assert main(["predict", "--model", str(run), "--parquet-file", str(daily_path), "--start", fold["test_start"],
                 "--end", fold["test_end"], "--out", str(pred), "--threads", "1"]) == 0
    expected = pl.read_parquet(pred)
    assert expected.height > 0
    assert pl.read_parquet(out / "fold-01" / "forecasts.parquet").equals(expected)
    combined = pl.read_parquet(out / "forecasts.parquet")
    assert combined.columns == [*expected.columns, "fold", "calibration"]  # per row: folds may differ in calibration
    first = combined.join(expected.select("symbol", "origin"), on=["symbol", "origin"], how="semi")
    assert first.drop("fold", "calibration").equals(expected) and set(first["fold"]) == {1}


def test_the_joined_forecasts_say_what_they_hold_and_each_rows_fold_and_calibration(backtest):
    out, _ = backtest
    combined = pl.read_parquet(out / "forecasts.parquet")
    meta = json.loads(pq.read_schema(out / "forecasts.parquet").metadata[b"foxhunt"])
    infos = folds(out)
    assert meta["target"] == "log_return" and meta["horizon"] == 3 and meta["bar_interval"] == "1d"
    assert [f["fold"] for f in meta["folds"]] == [1, 2]
    for fold, info in zip(meta["folds"], infos, strict=True):
        assert fold["model_dir"] == str(Path(info["run_dir"]).resolve()) and len(fold["weights_sha256"]) == 64
        rows = combined.filter(pl.col("fold") == fold["fold"])
        assert rows.height > 0 and set(rows["calibration"]) == {info["calibration"]}
        assert fold["calibrated"] is info["calibrated"]


def test_backtest_json_scores_model_and_baselines_on_the_same_origins(backtest):
    out, _ = backtest
    result = json.loads((out / "backtest.json").read_text())
    n_folds = []
    for fold in result["folds"]:
        m = fold["metrics"]
        n = m["model"]["overall"]["n"]
        assert n > 0 and {"training_quantiles", "rolling_vol", "garch_t"} <= set(m["baselines"])
        assert all(b["overall"]["n"] == n for b in m["baselines"].values())
        n_folds.append(n)
    assert result["overall"]["model"]["overall"]["n"] == sum(n_folds)
    assert set(result["overall"]["skill"]) == set(result["overall"]["baselines"]) == set(result["overall"]["comparisons"])
    # each comparison on the origins both forecast, per fold and overall, with its p-values and series counts
    for name, c in result["overall"]["comparisons"].items():
        per_fold = [f["metrics"]["comparisons"][name] for f in result["folds"]]
        assert c["origins"] == sum(f["origins"] for f in per_fold) and c["skill"] == result["overall"]["skill"][name]
        for k in ("0.1", "0.5", "0.9"):
            assert 0 <= c["dm"][k]["p_value"] <= 1 and c["series_won"][k]["of"] == c["series"] == 2
            assert c["dm"][k]["periods"] == c["origins"] // 2  # pooled per origin time: ES and NQ share dates
    assert result["short_folds"] == []  # two folds of 60 days
    # the overall rank IC is the mean of the folds' own: none for a median that is one number in each fold
    for name, res in (("model", result["overall"]["model"]), *result["overall"]["baselines"].items()):
        folds = [(f["metrics"]["model"] if name == "model" else f["metrics"]["baselines"][name])["overall"]["ic"]
                 for f in result["folds"]]
        known = [v for v in folds if v is not None]
        assert res["overall"]["ic"] == (pytest.approx(sum(known) / len(known)) if known else None), name
    html = (out / "report.html").read_text()
    assert html.count("<img") >= 4 and "q-risk per fold" in html and "roll dates" in html


def test_the_report_opens_with_the_verdict_then_what_was_run(backtest, daily_path):
    """The verdict over both folds' test origins is evaluate's rule on backtest.json's overall scores, and the
    report's first line; then the backtest in words (no raw options dict) and the data it read."""
    out, _ = backtest
    result = json.loads((out / "backtest.json").read_text())
    overall = result["overall"]
    want = verdict(overall["comparisons"], result["quantiles"], who="Over the 2 test periods, the model")
    assert result["verdict"]["sentence"] == want.sentence and "baseline" in want.sentence
    html = (out / "report.html").read_text()
    assert html[html.index("</h1>"):].replace("\n", "").startswith(f'</h1><p class="claim">{escape(want.sentence)}</p><ul><li>'
                                                 "walk-forward backtest: 2 folds, each tested on 60d after 60d of "
                                                 "validation, trained on every bar before (expanding window), a "
                                                 "model trained at every fold; ")
    assert f"<li>data: {escape(str(daily_path))}</li>" in html
    assert "backtest: {" not in html and "simulated" not in html.lower()


def test_a_backtest_of_the_bundled_sample_says_it_is_simulated(backtest, tmp_path):
    out, _ = backtest
    result = json.loads((out / "backtest.json").read_text())
    sample = str(tmp_path / f"es_ohlcv1m_sample_v{SAMPLE_VERSION}_seed{DEFAULT_SEED}.parquet")  # the sample's name
    claim, notes = report_text(result, (sample,))
    assert claim == [result["verdict"]["sentence"], SIMULATED]
    assert f"data: {sample} (simulated: the bundled sample)" in notes
    write_backtest_report(tmp_path / "report.html", result, claim, notes)
    assert "SIMULATED ES 1-minute bars" in (tmp_path / "report.html").read_text()


def test_a_killed_backtest_resumes_at_the_first_unfinished_fold(backtest, capsys, monkeypatch):
    out, argv = backtest  # last in the module: it rewrites fold 2
    first = {p: p.stat().st_mtime_ns for p in (out / "fold-01").rglob("*") if p.is_file()}
    before = pl.read_parquet(out / "forecasts.parquet")
    shutil.rmtree(out / "fold-02")  # killed while fold 2 was training: none of its files were complete
    read_bars = load.read_bars

    def read_and_warn(*args, **kwargs):  # a data warning, as 277 inconsistent rows give, each time the files are read
        logging.getLogger("foxhunt.data").warning("dropped 277 rows with inconsistent OHLC prices")
        return read_bars(*args, **kwargs)

    monkeypatch.setattr(load, "read_bars", read_and_warn)
    assert main([a for a in argv if a != "--quiet"]) == 0
    err = capsys.readouterr().err
    assert err.count("WARNING dropped 277 rows") == 1  # once, though the plan and fold 2 read the files
    assert "dropped 277 rows" in (out / "fold-02" / "run" / "train.log").read_text()  # the fold's log keeps its own
    assert "fold-01: train from the first bar" in err and "(finished)" in err
    assert "fold-02/run, device" in err and "fold-01/run, device" not in err  # one training run: fold 2's
    assert "fold-02: trained, best epoch 1" in err
    assert "next:" not in err and "foxhunt evaluate" not in err  # a fold's run is not the user's: no train hints
    assert {p: p.stat().st_mtime_ns for p in (out / "fold-01").rglob("*") if p.is_file()} == first
    assert (out / "fold-02" / "fold.json").exists()
    assert pl.read_parquet(out / "forecasts.parquet").equals(before)  # the same seed trains the same fold 2


def test_folds_say_which_calibration_they_applied_and_a_bad_one_is_refused(backtest, capsys):
    out, argv = backtest
    # the default (auto) as asked, and as each fold's anchored model applied it: the adaptive shifts where they beat
    # its own quantiles on its validation period (its calibration.json says), none where they did not
    assert json.loads((out / "backtest.json").read_text())["backtest"]["calibration"] == DEFAULT_METHOD == "auto"
    for k, fold in enumerate(folds(out), start=1):
        verdict = json.loads((out / f"fold-{k:02d}" / "run" / "calibration.json").read_text())["adaptive"]["fitted_on"]
        assert fold["calibration"] == ("adaptive" if verdict["beats_own"] else "none")
    assert main([*argv, "--calibration", "often"]) == 2
    assert "--calibration 'often' is not one of auto, adaptive, fixed, none" in capsys.readouterr().err


def test_options_each_fold_sets_are_refused(backtest, capsys):
    out, argv = backtest
    assert main([*argv, "--train-end", "2024-01-01"]) == 2
    assert "--train-end is set by `foxhunt backtest`" in capsys.readouterr().err


def test_folds_trained_in_parallel_give_the_sequential_forecasts(backtest, tmp_path, caplog):
    """--jobs 2 trains both folds' models in worker processes (spawned, one thread each as --threads 1 asks): the
    same seeded runs, so the same forecasts and scores as the sequential backtest."""
    out, argv = backtest
    par = tmp_path / "par"
    at = argv.index("--out-dir")
    with caplog.at_level(logging.INFO, logger="foxhunt"):
        assert main([*argv[:at], "--out-dir", str(par), *argv[at + 2:], "--jobs", "2"]) == 0
    assert "training 2 fold models in 2 processes" in caplog.text  # not lowered to one by the memory check
    assert pl.read_parquet(par / "forecasts.parquet").equals(pl.read_parquet(out / "forecasts.parquet"))
    seq, both = (json.loads((d / "backtest.json").read_text()) for d in (out, par))
    assert [f["metrics"] for f in both["folds"]] == [f["metrics"] for f in seq["folds"]]


def test_each_fold_line_judges_the_verdicts_quantiles_with_their_tests(backtest, daily_path):
    """A fold's line gives the skill at p10 and p90 (the verdict's judged quantiles, not a mean over p10 / p50 / p90)
    on the origins both forecast, with the Diebold-Mariano p-values; a short fold is named in the notes."""
    out, _ = backtest
    result = json.loads((out / "backtest.json").read_text())
    _, notes = report_text({**result, "short_folds": [{"index": 2, "name": "fold-02", "days": 17.0,
                                                        "others_days": 365.0}]}, (str(daily_path),))
    assert notes[1].startswith("fold-02 tests 17 days, under half the others' 365 (median)")
    for info, note in zip(result["folds"], notes[-2:], strict=True):
        garch = info["metrics"]["comparisons"]["garch_t"]
        p = [garch["dm"][k]["p_value"] for k in ("0.1", "0.9")]
        want = (f"garch_t {garch['skill']['0.1']:+.3f} / {garch['skill']['0.9']:+.3f} (p "
                + " / ".join("<0.001" if x < 0.001 else f"{x:.3f}" for x in p) + f") on {garch['origins']:,} origins")
        assert " skill at p10 / p90 vs " in note and want in note, note
