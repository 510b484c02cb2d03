"""Calibration end to end: `train` fits and saves it, `predict` and `evaluate` apply it (or not, with
--no-calibration), old run directories without it still work, and `evaluate` scores held-out origins by default."""

from __future__ import annotations

import json
import shutil

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest

from foxhunt.cli import main
from foxhunt.model.calibration import DEFAULT_METHOD
from foxhunt.model.config import resolved_method
from foxhunt.model.saved import load_model
from foxhunt.predict.origins import prepare_for_model, select_origins

VAL_END = "2024-09-02"


@pytest.fixture(scope="module")
def run(tmp_path_factory, daily_path, tiny_flags):
    """A tiny model with a three-way split: train before June, validation June to August, test from September.
    Without an anchor, so that the default calibration (auto) is the fixed shifts; with one it is none
    (tests/cli/test_console.py, tests/backtest/test_backtest_cli.py)."""
    out = tmp_path_factory.mktemp("calibrated") / "run"
    assert main(["train", *tiny_flags, "--parquet-file", str(daily_path), "--epochs", "1", "--train-end", "2024-06-03",
                 "--val-end", VAL_END, "--anchor", "none", "--run-dir", str(out)]) == 0
    return out


def _meta(path):
    return json.loads(pq.read_schema(path).metadata[b"foxhunt"])


def test_train_saves_the_calibration_with_its_fit(run):
    cal = json.loads((run / "calibration.json").read_text())
    assert cal["mode"] == "scaled" and np.asarray(cal["shifts"]).shape == (3, 3)  # (horizon, quantiles)
    fitted = cal["fitted_on"]
    summary = json.loads((run / "data_summary.json").read_text())
    assert fitted["windows"] == summary["windows"]["val"] and fitted["pairs"] == 3 * fitted["windows"]
    assert fitted["val_start"] == summary["train_end"] and fitted["val_end"] == summary["val_end"]
    assert fitted["first_origin"] < fitted["last_origin"] < VAL_END  # origins of windows forecasting validation bars
    assert set(cal["coverage"]) == {"before", "after"} and "p10-p90" in cal["coverage"]["after"]
    assert "calibration on validation (" in (run / "train.log").read_text()
    assert load_model(run).calibration is not None


def test_predict_applies_the_shifts_and_says_so(run, daily_path, tmp_path):
    cal_out, raw_out = tmp_path / "cal.parquet", tmp_path / "raw.parquet"
    assert main(["predict", "--model", str(run), "--parquet-file", str(daily_path), "--out", str(cal_out),
                 "--calibration", "fixed"]) == 0
    assert main(["predict", "--model", str(run), "--parquet-file", str(daily_path), "--out", str(raw_out),
                 "--no-calibration"]) == 0
    assert _meta(cal_out)["calibrated"] is True and _meta(raw_out)["calibrated"] is False
    assert _meta(cal_out)["calibration"]["mode"] == "scaled"
    cal, raw = pl.read_parquet(cal_out), pl.read_parquet(raw_out)
    assert cal.columns == raw.columns and cal.height == raw.height
    assert (cal["p10"] <= cal["p50"]).all() and (cal["p50"] <= cal["p90"]).all()
    # calibrated = sort(raw + shift (horizon, quantile) * the window's scale), rebuilt here from the model's pieces
    lm = load_model(run)
    data = prepare_for_model(lm, (str(daily_path),))
    ids = select_origins(data, None, None)
    scale = data.windows.batch(ids).target_scale.numpy()  # (W,) in the files' row order (origin-major)
    q_raw = raw.select("p10", "p50", "p90").to_numpy().reshape(len(ids), 3, 3)
    expect = np.sort(q_raw + lm.calibration.shifts[None] * scale[:, None, None], axis=-1)
    got = cal.select("p10", "p50", "p90").to_numpy().reshape(len(ids), 3, 3)
    np.testing.assert_allclose(got, expect, rtol=1e-5, atol=1e-7)
    assert not np.allclose(got, q_raw)


def test_evaluate_scores_held_out_origins_raw_and_calibrated(run, daily_path, tmp_path, capsys):
    cal_dir, raw_dir = tmp_path / "cal", tmp_path / "raw"
    assert main(["evaluate", "--model", str(run), "--parquet-file", str(daily_path), "--out-dir", str(cal_dir)]) == 0
    console = capsys.readouterr().out
    m = json.loads((cal_dir / "metrics.json").read_text())
    # by default only origins whose first forecast bar is after the validation period
    first = pl.read_parquet(cal_dir / "forecasts.parquet").filter(pl.col("horizon") == 1)["target_time"].min()
    assert str(first)[:10] >= VAL_END and m["period"]["scored"].startswith("held out")
    c = m["calibration"]
    assert c["applied"] is True and c["mode"] == "scaled" and set(c["coverage"]) == {"raw", "calibrated"}
    assert c["method"] == resolved_method(DEFAULT_METHOD, anchored=False) == "fixed"
    assert c["coverage"]["calibrated"]["p10-p90"] == m["model"]["overall"]["coverage"]["p10-p90"]
    assert c["coverage"]["raw"]["p10-p90"] == m["model_raw"]["overall"]["coverage"]["p10-p90"]
    assert set(c["coverage"]["raw"]["below"]) == {"0.1", "0.5", "0.9"}
    assert m["model_raw"]["overall"]["n"] == m["model"]["overall"]["n"]
    assert "model (raw)" in console and "p10-p90 coverage: raw" in console
    html = (cal_dir / "report.html").read_text()
    assert "model (raw)" in html and "calibration: fixed scaled conformal shifts" in html
    assert "calibrated (fixed shifts)" in console

    assert main(["evaluate", "--model", str(run), "--parquet-file", str(daily_path), "--out-dir", str(raw_dir),
                 "--no-calibration"]) == 0
    r = json.loads((raw_dir / "metrics.json").read_text())
    assert "model_raw" not in r and r["calibration"]["applied"] is False
    assert r["calibration"]["not_applied"] == "--no-calibration"
    assert r["model"]["overall"]["q_risk"] == pytest.approx(m["model_raw"]["overall"]["q_risk"], rel=1e-5)


def test_evaluate_warns_when_start_reaches_into_validation(run, daily_path, tmp_path, capsys):
    assert main(["evaluate", "--model", str(run), "--parquet-file", str(daily_path), "--out-dir", str(tmp_path / "e"),
                 "--start", "2024-07-01"]) == 0
    assert "--start 2024-07-01 reaches into the model's training and validation period" in capsys.readouterr().err
    assert "NOT held out" in json.loads((tmp_path / "e" / "metrics.json").read_text())["period"]["scored"]
    # bars (here: --end) that stop inside validation: everything is scored, and said to be in-sample
    assert main(["evaluate", "--model", str(run), "--parquet-file", str(daily_path), "--out-dir", str(tmp_path / "f"),
                 "--end", "2024-08-15"]) == 0
    assert "no scoreable origin after the model's training and validation period" in capsys.readouterr().err
    period = json.loads((tmp_path / "f" / "metrics.json").read_text())["period"]
    assert period["scored"].startswith("all origins: NOT held out") and period["first_origin"] < "2024-01-01"


def test_a_run_without_calibration_still_forecasts_and_says_so_once(run, daily_path, tmp_path, capsys):
    old = tmp_path / "old"
    shutil.copytree(run, old)
    (old / "calibration.json").unlink()
    out = tmp_path / "fc.parquet"
    assert main(["predict", "--model", str(old), "--parquet-file", str(daily_path), "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert err.count("no calibration.json") == 1 and _meta(out)["calibrated"] is False
    assert main(["evaluate", "--model", str(old), "--parquet-file", str(daily_path), "--out-dir", str(tmp_path / "e")]) == 0
    c = json.loads((tmp_path / "e" / "metrics.json").read_text())["calibration"]
    assert c["applied"] is False and "no calibration.json" in c["not_applied"] and set(c["coverage"]) == {"raw"}


def test_the_digest_describes_the_weights_loaded(run, tmp_path):
    """The weights are read once: calibration, the forecasts' metadata and the refusal of another model's forecasts
    all use the digest of the bytes loaded, not of whatever the file holds by the time they ask."""
    from types import SimpleNamespace

    from foxhunt.model.saved import weights_digest
    from foxhunt.predict.provenance import forecast_metadata

    moved = tmp_path / "moved"
    shutil.copytree(run, moved)
    lm = load_model(moved)
    fitted_on = json.loads((run / "calibration.json").read_text())["fitted_on"]["weights_sha256"]
    assert lm.weights_sha256 == fitted_on == weights_digest(run / "model.safetensors")
    assert lm.calibration is not None
    (moved / "model.safetensors").write_bytes(b"other weights")  # replaced after loading
    meta = json.loads(forecast_metadata(lm, SimpleNamespace(summary={}), None)[b"foxhunt"])
    assert meta["weights_sha256"] == fitted_on


def test_stale_or_broken_calibration(run, daily_path, tmp_path, capsys):
    stale = tmp_path / "stale"
    shutil.copytree(run, stale)
    cal = json.loads((stale / "calibration.json").read_text())
    cal["fitted_on"]["weights_sha256"] = "0" * 64  # fitted on other weights
    (stale / "calibration.json").write_text(json.dumps(cal))
    lm = load_model(stale)
    assert lm.calibration is None and "stale" in lm.calibration_note
    (stale / "calibration.json").write_text("{not json")
    assert main(["predict", "--model", str(stale), "--parquet-file", str(daily_path), "--out",
                 str(tmp_path / "x.parquet")]) == 2
    assert "calibration.json: not a foxhunt calibration" in capsys.readouterr().err
    assert not (tmp_path / "x.parquet").exists()


def _adaptive(run):
    return json.loads((run / "calibration.json").read_text())["adaptive"]


AS_OF = "2024-08-27"  # the last validation origin: its 3 forecast bars end Friday 2024-08-30, before --val-end


def test_train_warms_the_adaptive_state_up_through_validation(run):
    a = _adaptive(run)
    assert set(a["series"]) == {"ES", "NQ"}
    # each series' state is as of its last validation origin (no window reaching past validation is ever gathered)
    as_of = {np.datetime64(s["as_of_ns"], "ns").astype("datetime64[D]") for s in a["series"].values()}
    assert as_of == {np.datetime64(AS_OF)} and a["fitted_on"]["as_of"].startswith(AS_OF)
    fixed = json.loads((run / "calibration.json").read_text())["fitted_on"]
    assert a["fitted_on"]["origins"] == fixed["windows"] and fixed["last_origin"].startswith(AS_OF)
    # a model without an anchor: the trackers start at the fixed shifts (fitted on these outcomes: no verdict)
    assert a["fitted_on"]["start"] == "fixed" and "beats_own" not in a["fitted_on"]
    assert a["rule"]["start"] == json.loads((run / "calibration.json").read_text())["shifts"]
    k = len(a["rule"]["grid"])
    for s in a["series"].values():
        w = np.asarray(s["weights"])
        assert w.shape == (k, 3, 3) and np.allclose(w.sum(axis=0), 1) and np.asarray(s["shifts"]).shape == (k, 3, 3)
    assert load_model(run).adaptive is not None


def _predict(run, path, out, *flags):
    assert main(["predict", "--model", str(run), "--parquet-file", str(path), "--out", str(out), *flags]) == 0
    return pl.read_parquet(out)


def test_predict_adaptive_continues_the_saved_state_from_any_start(run, daily_path, tmp_path, capsys):
    whole = _predict(run, daily_path, tmp_path / "a.parquet", "--calibration", "adaptive")
    assert _meta(tmp_path / "a.parquet")["calibration"]["method"] == "adaptive"
    assert "calibrated (adaptive shifts)" in capsys.readouterr().out
    fixed = _predict(run, daily_path, tmp_path / "f.parquet", "--calibration", "fixed")
    assert _meta(tmp_path / "f.parquet")["calibration"]["method"] == "fixed"
    as_of = pl.datetime(2024, 8, 27, time_zone="UTC")
    # before the state's as_of (the model's own validation period) adaptive gives the fixed shifts; after, its own
    before, after = pl.col("origin") < as_of, pl.col("origin") > as_of
    assert whole.filter(before).equals(fixed.filter(before))
    assert not np.allclose(whole.filter(after).select("p10", "p90").to_numpy(),
                           fixed.filter(after).select("p10", "p90").to_numpy())
    # a later --start forecasts the origins in between too (not written), so its rows are the whole run's; from
    # as_of itself (evaluate's default start), the forecasts still waiting for outcomes then
    for start in ("2024-10-15", VAL_END):
        late = _predict(run, daily_path, tmp_path / "l.parquet", "--calibration", "adaptive", "--start", start)
        assert "forecasting" in capsys.readouterr().err  # the lead-in, said once
        assert late.height < whole.height
        assert late.equals(whole.filter(pl.col("origin").is_in(late["origin"].implode())))
    # bars that start after the end of validation leave a gap the state cannot see: said, once
    bars = pl.read_parquet(daily_path)
    bars.filter(pl.col("timestamp") >= pl.lit(np.datetime64("2024-09-16")).cast(bars.schema["timestamp"])).write_parquet(
        tmp_path / "later.parquet")
    _predict(run, tmp_path / "later.parquet", tmp_path / "g.parquet", "--calibration", "adaptive")
    err = capsys.readouterr().err
    assert err.count(f"start after its state's last outcome ({AS_OF}T00:00:00Z") == 1 and "1 more series" in err


def test_predict_adaptive_no_look_ahead(run, daily_path, tmp_path):
    """The bars after t jittered (so their outcomes, and the forecasts from them, change): every forecast from an
    origin at or before t is the same, calibrated by adaptive shifts that moved with each outcome up to t."""
    bars = pl.read_parquet(daily_path)
    t = np.datetime64("2024-10-31")
    later = pl.col("timestamp") > pl.lit(t).cast(bars.schema["timestamp"])
    noise = pl.Series(np.exp(np.random.default_rng(0).normal(0, 0.02, bars.height)))
    jittered = bars.with_columns(*(pl.when(later).then(pl.col(c) * noise).otherwise(pl.col(c)) for c in
                                   ("open", "high", "low", "close")))
    jittered.write_parquet(tmp_path / "jittered.parquet")
    a = _predict(run, daily_path, tmp_path / "a.parquet", "--calibration", "adaptive")
    b = _predict(run, tmp_path / "jittered.parquet", tmp_path / "b.parquet", "--calibration", "adaptive")
    upto = pl.col("origin") <= pl.lit(t).cast(pl.Datetime("ns", "UTC"))
    assert a.filter(upto).drop("actual").equals(b.filter(upto).drop("actual"))
    assert not a.filter(~upto).select("p10", "p50", "p90").equals(b.filter(~upto).select("p10", "p50", "p90"))


def test_evaluate_says_which_calibration_ran(run, daily_path, tmp_path, capsys):
    other = "adaptive"  # the default's (auto: fixed for this model) is checked above
    out = tmp_path / "e"
    assert main(["evaluate", "--model", str(run), "--parquet-file", str(daily_path), "--out-dir", str(out),
                 "--calibration", other]) == 0
    console = capsys.readouterr().out
    c = json.loads((out / "metrics.json").read_text())["calibration"]
    assert c["applied"] is True and c["method"] == other and ("adaptive" in c) == (other == "adaptive")
    assert f"calibrated ({other} shifts)" in console
    note = {"fixed": "calibration: fixed scaled conformal shifts fitted on validation",
            "adaptive": "calibration: adaptive scaled conformal shifts per series, started from the fixed shifts "
                        f"fitted on validation and moved by every outcome since (state as of {AS_OF}"}[other]
    assert note in (out / "report.html").read_text()
    assert main(["predict", "--model", str(run), "--parquet-file", str(daily_path), "--out", str(tmp_path / "x"),
                 "--calibration", "sometimes"]) == 2
    assert "--calibration 'sometimes' is not one of auto, adaptive, fixed, none" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_a_calibration_from_before_the_adaptive_state_gives_fixed_shifts_and_says_so(run, daily_path, tmp_path,
                                                                                       capsys):
    old = tmp_path / "old"
    shutil.copytree(run, old)
    cal = json.loads((old / "calibration.json").read_text())
    del cal["adaptive"]
    (old / "calibration.json").write_text(json.dumps(cal))
    got = _predict(old, daily_path, tmp_path / "o.parquet", "--calibration", "adaptive")
    assert "no adaptive state" in capsys.readouterr().err
    assert _meta(tmp_path / "o.parquet")["calibration"]["method"] == "fixed"
    assert got.equals(_predict(run, daily_path, tmp_path / "f.parquet", "--calibration", "fixed"))
