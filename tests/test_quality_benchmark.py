"""benchmarks/quality.py's pieces that need no real data and no training: the table from fabricated result files,
skipping a dataset whose file is absent, the train options passed through, the RESULTS.md entry, the alignment of
pytorch-forecasting's forecasts on a backtest fold's rows, a run of more quantiles read at the table's, and the PF side's
per-series bar index."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import polars as pl
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import _pf_side  # noqa: E402
import _quality_folds as folds  # noqa: E402
import _quality_runs as runs  # noqa: E402
import _quality_table as table  # noqa: E402
import quality  # noqa: E402


def metrics_json(tmp_path: Path, name: str, qrisk: tuple[float, float, float], skill: tuple[float, float],
                 comparisons: dict | None = None, strongest: str = "garch_t") -> dict:
    """An evaluate metrics.json, as evaluate writes it (quantile keys become text in the round trip)."""
    m = {
        "model": {"quantiles": [0.1, 0.5, 0.9],
                  "overall": {"q_risk": dict(zip((0.1, 0.5, 0.9), qrisk, strict=True)),
                              "coverage": {"p10-p90": 0.78}, "n": 500}},
        "baselines": {"garch_t": {}, "har": {}},
        "skill": {"garch_t": {0.1: skill[0], 0.5: 0.0, 0.9: skill[1]}, "har": {0.1: 0.05, 0.5: 0.0, 0.9: 0.04}},
        "verdict": {"strongest": strongest, "sentence": "..."},
        "period": {"origins": 100},
    }
    if comparisons is not None:
        m["comparisons"] = comparisons
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(m))
    return json.loads(path.read_text())


def comparison(skill: tuple[float, float], p: tuple[float, float], won: int) -> dict:
    return {"skill": {0.1: skill[0], 0.5: 0.0, 0.9: skill[1]},
            "dm": {q: {"p_value": v, "outcome": "level"} for q, v in zip((0.1, 0.9), p, strict=True)},
            "series_won": {0.9: {"won": won, "won_significant": 1, "lost_significant": 0, "of": 39}}}


def test_table_from_metrics_with_significance(tmp_path):
    seeds = [
        metrics_json(tmp_path, "s0", (0.60, 1.01, 0.58), (0.02, -0.01),
                     {"garch_t": comparison((0.02, -0.01), (0.010, 0.30), 12), "har": comparison((0.05, 0.04), (0.002, 0.04), 20)}),
        metrics_json(tmp_path, "s1", (0.62, 1.03, 0.56), (0.01, 0.01),
                     {"garch_t": comparison((0.01, 0.01), (0.040, 0.20), 15), "har": comparison((0.05, 0.04), (0.0004, 0.01), 21)}),
    ]
    row = table.Row("cn_futures_daily", "foxhunt",
                    [table.score_of(m, 100, train_s=60.0 + i, n_params=40_130) for i, m in enumerate(seeds)])
    cells = dict(zip(table.header(), table.cells(row), strict=True))
    assert cells["params"] == "40,130" and cells["seeds"] == "2"
    assert cells["q-risk p10 / p50 / p90"] == "0.6100 / 1.0200 / 0.5700"  # means over the seeds
    assert cells["best baseline"] == "garch_t"
    assert cells["skill vs it p10 / p90"] == "+1.5% / +0.0%"
    assert cells["DM p vs garch_t p10 / p90"] == "0.040 / 0.300"  # the largest over the seeds
    assert cells["DM p vs har p10 / p90"] == "0.002 / 0.040"
    assert cells["series won p90"] == "12-15/39"
    assert cells["p10-p90 cover"] == "0.780" and cells["train s"] == "60"
    text = table.tables([row])
    assert text.splitlines()[0].startswith("| dataset | model | params |")
    assert "seed 0 skill p10 / p90 | seed 1 skill p10 / p90" in text and "| +2.0% / -1.0% | +1.0% / +1.0% |" in text
    assert "| seed 3 skill p10 / p90 | seed 4 skill p10 / p90 |" in table.tables([row], seeds=(3, 4))  # --seeds 3,4


def test_table_without_significance_shows_dashes(tmp_path):
    """Before evaluate writes `comparisons`, the tests and series counts are "-", the rest is read as before."""
    score = table.score_of(metrics_json(tmp_path, "m", (0.5959, 1.02, 0.5901), (-0.0714, -0.0281)), 10_567, 61.7)
    cells = dict(zip(table.header(), table.cells(table.Row("cn", "foxhunt", [score])), strict=True))
    assert cells["skill vs it p10 / p90"] == "-7.1% / -2.8%"
    assert cells["DM p vs garch_t p10 / p90"] == "- / -" and cells["DM p vs har p10 / p90"] == "- / -"
    assert cells["series won p90"] == "-" and cells["params"] == "-"
    assert table.by_seed([table.Row("cn", "foxhunt", [score])]) is None  # one seed: no spread to show


def test_simulated_sample_is_shown_apart(tmp_path):
    score = table.score_of(metrics_json(tmp_path, "m", (0.52, 1.0, 0.52), (0.03, 0.02)), 6900)
    text = table.tables([table.Row("cn", "foxhunt", [score]), table.Row("sample", "foxhunt", [score], simulated=True)])
    real, simulated = text.split("The bundled sample (simulated")
    assert "| cn |" in real and "| sample |" not in real and "| sample |" in simulated


def test_absent_data_is_skipped_with_a_note(tmp_path, monkeypatch, capsys):
    def no_foxhunt(*args, **kwargs):
        raise AssertionError("nothing may run without the data")

    monkeypatch.setattr(quality, "foxhunt", no_foxhunt)
    code = quality.main(["--datasets", "cn_futures_daily,spx_daily,ko_pep_15min", "--data-dir", str(tmp_path / "none"),
                         "--no-pf", "--workdir", str(tmp_path / "work")])
    assert code == 0
    out = capsys.readouterr().out
    for name in ("cn_futures_daily.parquet", "spx_daily.parquet", "ko_pep_15min.parquet"):
        assert f"skipped, {tmp_path / 'none' / name} not found" in out
    assert "| dataset |" not in out  # no table without a dataset


@pytest.mark.parametrize(("flags", "says"), [(["--datasets", "cn"], "unknown cn; choose from cn_futures_daily"),
                                             (["--seeds", "0"], "--seeds '0' names no seed"),
                                             (["--seeds", "x"], "--seeds 'x' names no seed"),
                                             (["--", "--quantiles", "0.2,0.5,0.8"], "--quantiles: the table scores "
                                                                                    "0.1, 0.5, 0.9; add 0.1, 0.9"),
                                             (["--train-args=--quantiles=0.05,0.5"], "add 0.1, 0.9"),
                                             (["--", "--quantiles", "0.1,0.5,0.9", "--quantiles=0.5"], "add 0.1, 0.9")])
def test_bad_options_are_refused(tmp_path, capsys, flags, says):
    with pytest.raises(SystemExit) as e:
        quality.parse_args([*flags, "--workdir", str(tmp_path)])
    assert e.value.code == 2 and says in capsys.readouterr().err


def test_train_options_pass_through(tmp_path):
    s = quality.parse_args(["--quick", "--train-args", "--scaling series", "--data-dir", str(tmp_path),
                            "--workdir", str(tmp_path / "w"), "--", "--hidden-size", "8"])
    assert s.seeds == (0,) and not s.record  # --quick: one seed, nothing appended to RESULTS.md
    assert s.mode_args == ("--epochs", "2", "--scaling", "series", "--hidden-size", "8")  # typed flags come last
    cn, spx = quality.DATASETS["cn_futures_daily"], quality.DATASETS["spx_daily"]
    train = quality.train_command(cn, 1, s, tmp_path / "run")
    assert train[:3] == ["train", "--parquet-file", str(tmp_path / "cn_futures_daily.parquet")]
    assert train[3:9] == ["--epochs", "2", "--scaling", "series", "--hidden-size", "8"]
    assert train[train.index("--seed") + 1] == "1" and train[-2:] == ["--run-dir", str(tmp_path / "run")]
    bt = quality.backtest_command(spx, 0, s, tmp_path / "bt")
    assert bt[:5] == ["backtest", "--folds", "2", "--test-length", "1y"] and "--run-dir" not in bt
    assert "--scaling" in bt and "--hidden-size" in bt and bt[bt.index("--jobs") + 1] == "2"
    full = quality.parse_args(["--seeds", "0,4", "--data-dir", str(tmp_path), "--workdir", str(tmp_path / "w")])
    assert full.seeds == (0, 4) and full.record and full.mode_args == ()
    assert quality.parse_args(["--seeds", "7,", "--workdir", str(tmp_path / "w")]).seeds == (7,)
    assert quality.backtest_command(spx, 0, full, tmp_path / "bt")[:3] == ["backtest", "--folds", "5"]
    sample = quality.train_command(quality.DATASETS["sample"], 0, full, tmp_path / "run")
    assert "--parquet-file" not in sample  # the bundled sample is train's default


def test_pytorch_forecasting_seeds(tmp_path):
    """Every seed of the real datasets, the first of the simulated sample; --pf-seeds N: the first N of every one."""
    s = quality.parse_args(["--data-dir", str(tmp_path), "--workdir", str(tmp_path / "w")])
    seeds = {name: quality.pf_seeds(ds, s) for name, ds in quality.DATASETS.items()}
    assert seeds == {"cn_futures_daily": (0, 1, 2), "spx_daily": (0, 1, 2), "ko_pep_15min": (0, 1, 2), "sample": (0,)}
    s = quality.parse_args(["--pf-seeds", "2", "--data-dir", str(tmp_path), "--workdir", str(tmp_path / "w")])
    assert all(quality.pf_seeds(ds, s) == (0, 1) for ds in quality.DATASETS.values())


def test_record_puts_the_newest_entry_first(tmp_path):
    results = tmp_path / "RESULTS.md"
    results.write_text("# Benchmark results\n\n## Other\n\ntext\n")
    table.record("### first\n\ntable 1", results)
    table.record("### second\n\ntable 2", results)
    body = results.read_text()
    assert body.index("## Other") < body.index(table.SECTION) < body.index("### second") < body.index("### first")
    results.write_text(f"# R\n\n{table.SECTION}\n\n**Current: x.**\n\n### old\n\n## Next\n")
    table.record("### new", results)
    body = results.read_text()
    assert body.index("**Current: x.**") < body.index("### new") < body.index("### old") < body.index("## Next")


def test_forecasts_aligned_on_a_folds_rows(tmp_path):
    arrays = {"series": np.array([0, 0, 1]), "origin_ns": np.array([10, 20, 10]), "actual": np.zeros((3, 2))}
    rows = [("A", 10, 1, 1.0), ("A", 10, 2, 2.0), ("B", 10, 1, 3.0), ("B", 10, 2, 4.0), ("B", 30, 1, 9.0)]
    pl.DataFrame({"symbol": [r[0] for r in rows],
                  "origin": pl.Series([r[1] for r in rows]).cast(pl.Datetime("ns", "UTC")),
                  "horizon": pl.Series([r[2] for r in rows], dtype=pl.Int16),
                  **{c: [r[3] + k / 10 for r in rows] for k, c in enumerate(("p10", "p50", "p90"))},
                  }).write_parquet(tmp_path / "pf.parquet")
    q = folds.aligned(arrays, ["A", "B"], tmp_path / "pf.parquet")  # (K, D, Q)
    assert q.shape == (3, 2, 3)
    np.testing.assert_allclose(q[0], [[1.0, 1.1, 1.2], [2.0, 2.1, 2.2]])
    assert np.isnan(q[1]).all()  # A at 20: no forecast, and B at 30 is no row of the fold
    np.testing.assert_allclose(q[2, :, 0], [3.0, 4.0])


def test_folds_of_a_run_with_more_quantiles_are_scored_at_the_tables(tmp_path):
    """A backtest trained with --quantiles 0.05,0.1,0.5,0.9,0.95: its fold arrays are read at p10, p50 and p90 (the
    columns another calibration's forecasts are aligned at), and a run without one of them is refused in words."""
    qs = [0.05, 0.1, 0.5, 0.9, 0.95]
    rng = np.random.default_rng(0)
    five = np.sort(rng.normal(size=(4, 2, 5)), axis=-1)
    here = tmp_path / "fold-01"
    here.mkdir()
    np.savez(here / "scored.npz", series=np.zeros(4, int), origin_ns=np.arange(4), first_ns=np.zeros(4, int),
             actual=rng.normal(size=(4, 2)), model=five, baseline_garch_t=five * 1.1)
    fold = {"index": 1, "quantiles": qs, "series_names": ["A"], "target": "log_return", "baseline_gaps": {}}
    arrays = folds.fold_arrays(tmp_path, [fold])
    np.testing.assert_array_equal(arrays["model"], five[..., [1, 2, 3]])
    np.testing.assert_array_equal(arrays["baseline_garch_t"], five[..., [1, 2, 3]] * 1.1)
    assert set(folds.fold_result(arrays, [fold])["model"]["overall"]["q_risk"]) == {0.1, 0.5, 0.9}
    with pytest.raises(SystemExit, match=r"--quantiles \[0.2, 0.5, 0.8\] lacks \[0.1, 0.9\]"):
        folds.table_columns([0.2, 0.5, 0.8])


def test_pf_bars_count_each_series_own_bars(tmp_path):
    days = pd.to_datetime(["2020-01-01", "2020-01-02", "2020-01-03", "2020-01-06", "2020-01-07"], utc=True)
    bars = pd.concat([
        pd.DataFrame({"timestamp": days, "symbol": "A", "close": [1.0, 2.0, 4.0, 8.0, 16.0]}),
        pd.DataFrame({"timestamp": days.delete(2), "symbol": "B", "close": [1.0, 1.0, 1.0, 1.0]}),  # a day missing
    ]).assign(open=1.0, high=2.0, low=1.0, volume=10.0)
    bars.to_parquet(tmp_path / "bars.parquet")
    df = _pf_side.features(str(tmp_path / "bars.parquet"), "2020-01-04", future=2)
    a, b = df[df["symbol"] == "A"], df[df["symbol"] == "B"]
    assert a["time_idx"].tolist() == [0, 1, 2, 3, 4, 5] and b["time_idx"].tolist() == [0, 1, 2, 3, 4]
    np.testing.assert_allclose(a["log_return"].iloc[:4], np.log(2.0))  # the first bar (no return) is dropped
    assert a["real"].tolist() == [True] * 4 + [False] * 2 and "time_of_day" not in df
    assert a["timestamp"].iloc[-1] == pd.Timestamp("2020-01-09", tz="UTC")  # the median spacing continued
    index = pd.DataFrame({"symbol": ["A", "B", "A"], "time_idx_first_prediction": [2, 1, 5]})
    origin, first = _pf_side.origin_times(df, index)
    assert origin[0] == days[2] and first[0] == days[3]
    assert origin[1] == days[1] and first[1] == days[3]  # B has no Jan 3: its next bar after Jan 2 is Jan 6
    assert pd.isna(origin[2])  # A's bar 4 is a placeholder: no origin


def test_pf_bars_of_intraday_series_know_the_time_of_day(tmp_path):
    ts = pd.date_range("2019-01-14 14:45", periods=6, freq="15min", tz="UTC")
    pd.DataFrame({"timestamp": ts, "symbol": "KO", "open": 1.0, "high": 1.1, "low": 0.9, "close": 1.0,
                  "volume": 5.0}).to_parquet(tmp_path / "bars.parquet")
    df = _pf_side.features(str(tmp_path / "bars.parquet"), "2019-01-14T15:30:00Z")
    assert df["time_of_day"].tolist() == ["15:00", "15:15", "15:30", "15:45", "16:00"]


def test_a_failed_pytorch_forecasting_process_is_a_note_not_a_stop(tmp_path):
    """pf_call raises PFFailed, which run() turns into a note, with the last line of its log."""
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho 'ValueError: no windows left' >&2\nexit 3\n")
    fake.chmod(0o755)
    s = quality.parse_args(["--pf-python", str(fake), "--workdir", str(tmp_path / "w")])
    with pytest.raises(quality.PFFailed, match=r"exit 3, ValueError: no windows left \(log .*pf.log\)"):
        quality.pf_call(s, tmp_path / "bars.parquet", [{"out": "x"}], 0, tmp_path)


def test_epochs_of_a_run_and_the_cap_pytorch_forecasting_gets(tmp_path):
    """`--epochs auto`'s cap is foxhunt's own for the run's training windows (80,000 / 21,921 -> 4)."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({
        "n_params": 40_210, "train": {"epochs": "auto", "patience": 3, "max_train_batches": 0},
        "model": {"encoder_length": 32, "horizon": 5, "attention_heads": 4, "dropout": 0.1},
        "resolved": {"batch_size": 128}}))
    (run / "data_summary.json").write_text(json.dumps({"windows": {"train": 21_921}}))
    (run / "metrics.jsonl").write_text("\n".join(json.dumps({"epoch": e, "best": e in (1, 3)}) for e in (1, 2, 3, 4)))
    assert runs.fox_epochs(run) == (4, 4, 3)
    assert runs.pf_plan(run) == {"match_params": 40_210, "encoder_length": 32, "horizon": 5, "heads": 4,
                                    "dropout": 0.1, "batch_size": 128, "patience": 3, "max_train_batches": 0,
                                    "epochs": 4}
    assert runs.epochs_note([(4, 4, 3)]) == "stopped after 4 of at most 4 epochs, best 3"
    assert runs.epochs_note([(7, 23, 4), (5, 22, 2)]) == "epochs run / at most (best) by fold: 7/23 (4), 5/22 (2)"
