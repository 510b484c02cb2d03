"""benchmarks/quality.py's calibration rows without training: foxhunt's commands replaced by fakes that write what
they write (a run directory, evaluate's metrics.json and forecasts.parquet, a backtest's folds, predict's parquet),
so that what is checked is the wiring (one evaluate or predict per method, on the same trained models, no training
per method), the scoring of each method on the same rows and its comparison with the default, against q-risk and
skill computed here by hand."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import _quality_folds as folds_mod  # noqa: E402
import _quality_table as table  # noqa: E402
import quality  # noqa: E402

QS = np.array([0.1, 0.5, 0.9])
NAMES = ["A", "B"]
DAY = 86_400 * 10**9


def panel(n: int, seed: int, t0: int = 0) -> dict[str, np.ndarray]:
    """Two series of `n` daily origins, 2 steps: actual (K, D), the "auto" quantiles too narrow, the "adaptive" ones
    closer to the actual's spread, and a baseline between them."""
    rng = np.random.default_rng(seed)
    series = np.repeat([0, 1], n)
    origin = t0 + np.tile(np.arange(n), 2) * DAY
    actual = rng.standard_normal((2 * n, 2))
    spread = np.array([-1.28, 0.0, 1.28])
    return {"series": series, "origin_ns": origin, "first_ns": origin + DAY, "actual": actual,
            "auto": np.broadcast_to(0.3 * spread, (2 * n, 2, 3)).copy(),
            "adaptive": np.broadcast_to(1.0 * spread, (2 * n, 2, 3)).copy(),
            "baseline_garch_t": np.broadcast_to(0.6 * spread, (2 * n, 2, 3)).copy()}


def write_forecasts(path: Path, p: dict[str, np.ndarray], method: str, extra: bool = False) -> None:
    """`foxhunt predict`'s schema; `extra`: one more origin that is no scored row (dropped by the alignment)."""
    k, d = p["actual"].shape
    df = pl.DataFrame({"symbol": np.repeat(np.asarray(NAMES)[p["series"]], d).tolist(),
                       "origin": np.repeat(p["origin_ns"], d), "horizon": np.tile(np.arange(1, d + 1), k),
                       **{c: p[method][:, :, j].reshape(-1) for j, c in enumerate(("p10", "p50", "p90"))},
                       "actual": p["actual"].reshape(-1)})
    if extra:
        df = pl.concat([df, df.tail(1).with_columns(origin=pl.col("origin") + 99 * DAY, p10=pl.lit(5.0))])
    df.with_columns(pl.col("origin").cast(pl.Datetime("ns", "UTC")), pl.col("horizon").cast(pl.Int16)).write_parquet(path)


def qrisk(y: np.ndarray, f: np.ndarray) -> np.ndarray:
    """By hand: 2 sum pinball / sum |y| per quantile, over the finite actuals."""
    ok = np.isfinite(y)
    e = (y[ok][:, None] - f[ok])  # (N, Q)
    return 2 * np.maximum(QS * e, (QS - 1) * e).sum(axis=0) / np.abs(y[ok]).sum()


def run_dir(path: Path, n_params: int = 1234) -> None:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps({
        "n_params": n_params, "data": {"target": "log_return"}, "train": {"epochs": 2},
        "model": {"quantiles": [0.1, 0.5, 0.9]}}))
    (path / "metrics.jsonl").write_text("\n".join(json.dumps({"epoch": e, "best": e == 2}) for e in (1, 2)))


def arg(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else None


def settings(tmp_path: Path, *flags: str):
    (tmp_path / "data").mkdir(exist_ok=True)
    for ds in quality.DATASETS.values():
        if ds.file:
            (tmp_path / "data" / ds.file).touch()
    return quality.parse_args(["--no-pf", "--data-dir", str(tmp_path / "data"), "--workdir", str(tmp_path / "w"),
                               *flags])


def test_calibrations_option():
    assert quality.parse_args(["--no-pf"]).calibrations == ("auto", "adaptive")  # the default and the candidate
    assert quality.parse_args(["--no-pf", "--calibrations", "none, adaptive,none"]).calibrations == ("none", "adaptive")
    with pytest.raises(SystemExit) as e:
        quality.parse_args(["--no-pf", "--calibrations", "auto,rolling"])
    assert e.value.code == 2
    assert table.fox_label("auto") == "foxhunt, auto calibration (default)"
    assert table.fox_label("adaptive") == "foxhunt, adaptive calibration"


def test_split_dataset_one_evaluate_per_method_on_one_trained_run(tmp_path, monkeypatch):
    p = panel(30, seed=1)
    calls = []

    def fake(argv, log_path):
        calls.append(argv)
        if argv[0] == "train":
            run_dir(Path(arg(argv, "--run-dir")))
        else:
            assert argv[0] == "evaluate" and arg(argv, "--model").endswith("run")
            out, method = Path(arg(argv, "--out-dir")), arg(argv, "--calibration")
            out.mkdir(parents=True)
            write_forecasts(out / "forecasts.parquet", p, method)
            q = dict(zip(("0.1", "0.5", "0.9"), qrisk(p["actual"], p[method]), strict=True))
            (out / "metrics.json").write_text(json.dumps({
                "model": {"quantiles": [0.1, 0.5, 0.9],
                          "overall": {"q_risk": q, "coverage": {"p10-p90": 0.5}, "n": 120}},
                "skill": {}, "verdict": {"strongest": "garch_t"}, "period": {"origins": 60}}))
        return quality.Took(10.0, 10.0)

    monkeypatch.setattr(quality, "foxhunt", fake)
    s = settings(tmp_path, "--datasets", "cn_futures_daily", "--seeds", "2")
    rows, _ = quality.run(s)
    assert [c[0] for c in calls] == ["train", "evaluate", "evaluate"] * 2  # one training per seed, for both methods
    assert [r.model for r in rows] == ["foxhunt, auto calibration (default)", "foxhunt, adaptive calibration"]
    fixed, adaptive = rows[0].scores[0], rows[1].scores[0]
    np.testing.assert_allclose([fixed.qrisk[q] for q in QS], qrisk(p["actual"], p["auto"]))
    assert table.VS_DEFAULT not in fixed.skill and fixed.notes == ("stopped after 2 of at most 2 epochs, best 2",)
    assert adaptive.notes == () and adaptive.train_s == fixed.train_s == 10.0  # the same training
    want = 1 - qrisk(p["actual"], p["adaptive"]) / qrisk(p["actual"], p["auto"])  # > 0: adaptive better
    assert want[0] > 0 and want[2] > 0
    np.testing.assert_allclose([adaptive.skill[table.VS_DEFAULT][q] for q in QS], want)  # the median's too
    assert adaptive.dm[table.VS_DEFAULT][0.1] < 0.05 and adaptive.won[table.VS_DEFAULT] == (2, 2)
    text = table.tables(rows)
    assert "| cn_futures_daily | foxhunt, auto calibration (default) |" in text
    calib = text.split("Calibration: each method against foxhunt's default (auto)")[1]
    assert f"| cn_futures_daily | adaptive | 2 | {' / '.join(f'{100 * w:+.1f}%' for w in want)} |" in calib
    assert "skill vs auto p10 / p50 / p90 | DM p vs auto p10 / p50 / p90 |" in calib
    assert "| auto |" not in calib


def test_backtest_other_methods_forecast_by_predict_and_scored_on_the_folds_rows(tmp_path, monkeypatch):
    parts = [panel(12, seed=2), panel(12, seed=3, t0=400 * DAY)]
    starts = ["2017-01-01T00:00:00+00:00", "2018-01-01T00:00:00+00:00"]
    ends = ["2018-01-01T00:00:00+00:00", None]
    calls = []

    def fake(argv, log_path):
        calls.append(argv)
        if argv[0] == "backtest":
            bt = Path(arg(argv, "--out-dir"))
            folds = []
            for i, (part, start, end) in enumerate(zip(parts, starts, ends, strict=True), start=1):
                here = bt / f"fold-{i:02d}"
                run_dir(here / "run")
                here.mkdir(parents=True, exist_ok=True)
                np.savez(here / "scored.npz", **{k: part[k] for k in ("series", "origin_ns", "first_ns", "actual",
                                                                      "baseline_garch_t")}, model=part["auto"])
                folds.append({"index": i, "run_dir": str(here / "run"), "test_start": start, "test_end": end,
                              "val_start": "2016-01-01T00:00:00+00:00", "origins": 24, "series_names": NAMES,
                              "quantiles": [0.1, 0.5, 0.9], "target": "log_return", "calibration": "auto",
                              "baseline_gaps": {}})
            own = folds_mod.fold_result(folds_mod.fold_arrays(bt, folds), folds)
            overall = {k: v for k, v in own.items() if k != "verdict"}
            (bt / "backtest.json").write_text(json.dumps({"folds": folds, "overall": overall,
                                                          "verdict": own["verdict"]}, default=float))
        else:
            assert argv[0] == "predict" and arg(argv, "--calibration") == "adaptive"
            k = starts.index(arg(argv, "--start"))
            assert arg(argv, "--end") == ends[k] and arg(argv, "--model").endswith(f"fold-{k + 1:02d}/run")
            write_forecasts(Path(arg(argv, "--out")), parts[k], "adaptive", extra=True)
        return quality.Took(30.0, 30.0)

    monkeypatch.setattr(quality, "foxhunt", fake)
    s = settings(tmp_path, "--datasets", "spx_daily", "--seeds", "1")
    rows, _ = quality.run(s)
    assert [c[0] for c in calls] == ["backtest", "predict", "predict"]  # no training for the second method
    fixed, adaptive = rows[0].scores[0], rows[1].scores[0]
    y = np.concatenate([p["actual"] for p in parts])
    f_fixed, f_adaptive = (np.concatenate([p[m] for p in parts]) for m in ("auto", "adaptive"))
    np.testing.assert_allclose([fixed.qrisk[q] for q in QS], qrisk(y, f_fixed))  # backtest.json's own
    np.testing.assert_allclose([adaptive.qrisk[q] for q in QS], qrisk(y, f_adaptive))  # the extra origin dropped
    base = qrisk(y, np.concatenate([p["baseline_garch_t"] for p in parts]))
    np.testing.assert_allclose(adaptive.skill["garch_t"][0.9], 1 - qrisk(y, f_adaptive)[2] / base[2])
    want = 1 - qrisk(y, f_adaptive) / qrisk(y, f_fixed)
    np.testing.assert_allclose([adaptive.skill[table.VS_DEFAULT][q] for q in QS], want)
    assert fixed.notes[0].startswith("2 yearly folds tested 2017-01-01 .. the last bar; epochs run")
    assert adaptive.notes == () and adaptive.train_s == fixed.train_s == 30.0
