"""--target price_change: returns in price differences, for series whose prices reach zero or below (issue 9 item 12).

Targets are checked against values computed by hand on a crude-oil-like pair of contracts that crosses zero and rolls;
the CLI test trains, predicts and evaluates on a tiny file with negative prices.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from foxhunt.cli import main
from foxhunt.data.bars.load import load_bars
from foxhunt.data.config import DataConfig
from foxhunt.data.features.features import PRICE_OBSERVED, raw_features
from foxhunt.data.prepare import prepare_from_bars
from foxhunt.errors import InputError

# CLK0 (the front) falls through zero; volume moves to CLM0 on 04-21, so with --roll-confirm 1 the series rolls on
# the 04-22 session. The two contracts trade every day, so the roll is priced at 04-21, the last common bar.
DAYS = (13, 14, 15, 16, 17, 20, 21, 22, 23, 24)
CLK0 = dict(zip(DAYS, (18.0, 10.0, 2.0, -5.0, -37.63, -12.0, 4.0, 9.0, 11.0, 12.0), strict=True))
CLM0 = dict(zip(DAYS, (25.0, 24.0, 22.5, 21.0, 19.0, 20.5, 21.5, 23.0, 22.0, 24.5), strict=True))


def _crude(tmp_path: Path) -> Path:
    """Daily bars: open = close, high = close + 1, low = close - 0.5."""
    lines = ["timestamp,symbol,open,high,low,close,volume"]
    for d in DAYS:
        for sym, px, vol in (("CLK0", CLK0[d], 900 if d < 21 else 50), ("CLM0", CLM0[d], 100 if d < 21 else 950)):
            lines.append(f"2020-04-{d:02d},{sym},{px},{px + 1},{px - 0.5},{px},{vol}")
    path = tmp_path / "cl.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("adjust", ["difference", "none"])
def test_price_change_targets_at_a_roll_across_zero_by_hand(tmp_path, adjust):
    cfg = DataConfig(paths=(str(_crude(tmp_path)),), adjust=adjust, roll_confirm=1, target="price_change")
    loaded = load_bars(cfg)
    (roll,) = loaded.rolls
    assert (roll["from"], roll["to"], roll["trade_date"]) == ("CLK0", "CLM0", "2020-04-22")
    assert roll["gap"] == pytest.approx(CLM0[21] - CLK0[21])
    feats = raw_features(loaded.bars, adjust, "price_change")
    assert feats.get_column("contract").to_list() == ["CLK0"] * 7 + ["CLM0"] * 3
    # CLK0's own day-to-day changes, through zero; at the roll, CLM0's own change 21 -> 22 (never CLM0 - CLK0);
    # then CLM0's own changes. The series' first bar has no change (0, never read).
    want = [0.0, -8.0, -8.0, -7.0, -32.63, 25.63, 16.0, CLM0[22] - CLM0[21], -1.0, 2.5]
    np.testing.assert_allclose(feats.get_column("target").to_numpy(), want, rtol=0, atol=1e-12)
    np.testing.assert_allclose(feats.get_column("price_change").to_numpy(), want, rtol=0, atol=1e-12)
    np.testing.assert_allclose(feats.get_column("price_range").to_numpy(), 1.5, rtol=0, atol=1e-12)
    assert feats.get_column("roll").to_list() == [0.0] * 7 + [1.0, 0.0, 0.0]


def test_price_change_is_the_same_under_every_adjustment(tmp_path):
    path = str(_crude(tmp_path))
    got = {
        a: raw_features(load_bars(DataConfig(paths=(path,), adjust=a)).bars, a, "price_change")["target"].to_list()
        for a in ("difference", "none")
    }
    assert got["difference"] == got["none"]


@pytest.mark.parametrize("scaling", ["series", "volatility"])
@pytest.mark.parametrize("estimator", ["returns", "range"])
def test_prepare_negative_prices_with_price_change_gives_finite_inputs(tmp_path, scaling, estimator):
    cfg = DataConfig(paths=(str(_crude(tmp_path)),), adjust="difference", target="price_change", scaling=scaling,
                     vol_estimator=estimator, vol_features=True, encoder_length=2, horizon=1, val_fraction=0.3)
    p = prepare_from_bars(load_bars(cfg), cfg)
    w = p.windows
    observed = p.schema.names(*_observed_cont())
    assert tuple(observed[: len(PRICE_OBSERVED)]) == PRICE_OBSERVED  # no log of a price among the inputs
    assert not any(n in observed for n in ("log_return", "log_range"))
    assert p.transform.scalers["units"] == "price"
    assert np.isfinite(w.cont.numpy()).all()
    assert np.isfinite(w.target_raw.numpy()).all() and (w.scale.numpy() > 0).all()
    center = w.center.numpy()
    if scaling == "volatility":  # the trailing volatility of price changes, in price units
        assert (center == 0).all() and w.scale.numpy().max() > 1.0
    else:  # the train std of the price changes, centered at 0 like log_return
        assert (center == 0).all() and len(set(w.scale.numpy().tolist())) == 1


def _observed_cont():
    from foxhunt.data.features.schema import Kind, Role

    return Role.OBSERVED, Kind.CONTINUOUS


def test_a_log_target_on_prices_at_or_below_zero_names_price_change(tmp_path):
    cfg = DataConfig(paths=(str(_crude(tmp_path)),), adjust="difference", target="log_range")
    with pytest.raises(InputError) as info:
        prepare_from_bars(load_bars(cfg), cfg)
    msg = str(info.value)
    assert "\n" not in msg
    assert "series CL (CLK0 at 2020-04-16T00:00:00+00:00): own_low -5.5 is not positive" in msg
    assert "--target log_range takes the log of prices" in msg and "use --target price_change" in msg


def test_unknown_target_lists_price_change():
    with pytest.raises(InputError, match="log_return, log_range, price_change"):
        DataConfig(target="price")


def _negative_series(tmp_path: Path, n: int = 260) -> Path:
    """One generic series of business-day bars (no futures symbol) that wanders from +20 to about -30 and back."""
    rng = np.random.default_rng(3)
    close = 20.0 - 40.0 * np.sin(np.linspace(0.0, np.pi, n)) + np.cumsum(rng.normal(0.0, 0.8, n))
    open_ = np.concatenate([[close[0]], close[:-1]])
    wick = np.abs(rng.normal(0.0, 0.5, n))
    days = (dt.date(2019, 1, 1) + dt.timedelta(days=i) for i in range(2 * n))
    ts = [d for d in days if d.weekday() < 5][:n]
    pl.DataFrame({
        "date": ts, "open": open_, "high": np.maximum(open_, close) + wick, "low": np.minimum(open_, close) - wick,
        "close": close, "volume": rng.integers(100, 1000, n),
    }).write_parquet(tmp_path / "wti.parquet")
    assert close.min() < -20 and close.max() > 10
    return tmp_path / "wti.parquet"


def test_cli_trains_predicts_and_evaluates_price_change_on_negative_prices(tmp_path, tiny):
    data = str(_negative_series(tmp_path))
    run = tmp_path / "run"
    assert main(["train", *tiny, "--parquet-file", data, "--target", "log_return", "--epochs", "1",
                 "--run-dir", str(tmp_path / "refused")]) == 2
    assert main(["train", *tiny, "--parquet-file", data, "--target", "price_change", "--scaling", "volatility",
                 "--epochs", "1", "--batch-size", "32", "--run-dir", str(run)]) == 0
    out = tmp_path / "fc.parquet"
    assert main(["predict", "--model", str(run), "--parquet-file", data, "--out", str(out), "--threads", "1"]) == 0
    fc = pl.read_parquet(out)
    q = fc.select(pl.col(pl.Float32, pl.Float64).exclude("actual")).to_numpy()
    assert fc.height > 0 and q.shape[1] == 3 and np.isfinite(q).all()
    assert fc.get_column("actual").drop_nulls().min() < 0  # price changes: negative moves, in price units
    ev = tmp_path / "ev"
    assert main(["evaluate", "--model", str(run), "--parquet-file", data, "--out-dir", str(ev), "--threads", "1"]) == 0
    metrics = json.loads((ev / "metrics.json").read_text())
    assert metrics["target"] == "price_change"
    assert metrics["model"]["overall"]["hit_rate"] is not None  # a signed move: the direction is scored
    assert {"training_quantiles", "rolling_vol"} <= set(metrics["baselines"])
    for m in metrics["baselines"].values():
        assert all(np.isfinite(v) for v in m["overall"]["q_risk"].values())
