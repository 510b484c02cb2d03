"""prepare_from_bars end to end: splits and purging, train-only fitting, bad input, prediction mode, summary."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch

from foxhunt.data.bars.load import LoadedBars
from foxhunt.data.config import DataConfig
from foxhunt.data.dataset.summary import format_summary
from foxhunt.data.dataset.types import FittedTransform
from foxhunt.data.features.schema import Kind, Role
from foxhunt.data.prepare import prepare_data, prepare_from_bars
from foxhunt.errors import InputError

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
DAY = 86400 * 10**9


def ns(date: str) -> int:
    return int(np.datetime64(date, "ns").astype(np.int64))


@pytest.fixture(scope="module")
def generic() -> pl.DataFrame:
    """The generic daily export (ES, NQ; 300 business days each) as a bars frame."""
    df = pl.read_parquet(FIXTURES / "generic_ohlcv_daily.parquet")
    return df.select(
        pl.col("symbol").alias("series"),
        pl.col("timestamp").dt.replace_time_zone("UTC").alias("ts"),
        "open",
        "high",
        "low",
        "close",
        pl.col("volume").cast(pl.Float64),
        pl.col("symbol").alias("contract"),
    ).sort("series", "ts")


def loaded(bars: pl.DataFrame, rolls: list[dict] | None = None) -> LoadedBars:
    return LoadedBars(bars=bars, rolls=rolls or [], report={"rows_read": bars.height, "bar_interval": "1d"})


CFG = DataConfig(encoder_length=20, horizon=5, train_end="2024-06-01", val_end="2024-09-01")


def test_date_splits_and_purging_match_brute_force(generic: pl.DataFrame) -> None:
    p = prepare_from_bars(loaded(generic), CFG)
    w = p.windows
    ids = torch.arange(w.n_windows)
    fc = w.target_ns(ids)  # (W, D) every forecast bar is real in training mode
    first, last = fc[:, 0].numpy(), fc[:, -1].numpy()
    cut, vend = ns("2024-06-01"), ns("2024-09-01")
    want = {
        "train": np.flatnonzero((first < cut) & (last < cut)),
        "val": np.flatnonzero((first >= cut) & (first < vend) & (last < vend)),
        "test": np.flatnonzero(first >= vend),
    }
    for k in want:
        assert p.splits[k].tolist() == want[k].tolist()
        assert p.summary["windows"][k] == len(want[k])
    assert p.summary["purged"] == {
        "train": int(((first < cut) & (last >= cut)).sum()),
        "val": int(((first >= cut) & (first < vend) & (last >= vend)).sum()),
    }
    assert p.summary["purged"]["train"] == 2 * (CFG.horizon - 1)  # 2 series, H - 1 windows straddle each cut
    assert p.summary["ranges"]["val"]["first"].startswith("2024-06-03")  # first business day on/after the cut
    # 300 bars per series: 300 - 1 - (E + D) + 1 windows each.
    assert w.n_windows == 2 * (300 - 1 - 25 + 1)
    assert p.summary["series"]["ES"]["windows"] == 275


def test_val_fraction_cut_is_chronological(generic: pl.DataFrame) -> None:
    cfg = DataConfig(encoder_length=20, horizon=5, val_fraction=0.25, test_fraction=0.0)
    p = prepare_from_bars(loaded(generic), cfg)
    ts = generic["ts"].dt.epoch("ns").to_numpy()
    cut = ts.min() + int((ts.max() - ts.min()) * 0.75)
    w = p.windows
    assert (w.target_ns(p.splits["train"]) < cut).all()
    assert (w.target_ns(p.splits["val"])[:, 0] >= cut).all()
    assert len(p.splits["test"]) == 0 and p.summary["val_end"] is None


def test_default_split_is_train_val_test_by_time(generic: pl.DataFrame) -> None:
    """Without --train-end the last 20% of time is test, the 20% before it validation; purged like the dated split."""
    p = prepare_from_bars(loaded(generic), DataConfig(encoder_length=20, horizon=5))
    ts = generic["ts"].dt.epoch("ns").to_numpy()
    lo, span = ts.min(), ts.max() - ts.min()
    cut, vend = lo + int(span * 0.6), lo + int(span * 0.8)
    w = p.windows
    fc = w.target_ns(torch.arange(w.n_windows))  # (W, D)
    first, last = fc[:, 0].numpy(), fc[:, -1].numpy()
    want = {
        "train": np.flatnonzero((first < cut) & (last < cut)),
        "val": np.flatnonzero((first >= cut) & (first < vend) & (last < vend)),
        "test": np.flatnonzero(first >= vend),
    }
    for k in want:
        assert len(want[k]) > 0
        assert p.splits[k].tolist() == want[k].tolist()


def test_test_fraction_is_validated() -> None:
    with pytest.raises(InputError, match="--test-fraction"):
        DataConfig(test_fraction=1.0)
    with pytest.raises(InputError, match="sum less than 1"):
        DataConfig(val_fraction=0.5, test_fraction=0.5)


def test_transform_is_fitted_on_train_rows_only(generic: pl.DataFrame) -> None:
    base = prepare_from_bars(loaded(generic), CFG)
    after = generic["ts"].dt.epoch("ns") >= ns("2024-06-01")
    bumped = generic.with_columns(
        [
            pl.when(after).then(pl.col(c) * 1.5).otherwise(pl.col(c)).alias(c)
            for c in ("high", "close", "volume")
        ]
    )
    other = prepare_from_bars(loaded(bumped), CFG)
    assert other.transform.to_dict() == base.transform.to_dict()
    # Everything before the cut is unchanged too, including the scaled inputs.
    before = ~after.to_numpy()
    assert torch.equal(other.windows.cont[before], base.windows.cont[before])


def test_schema_matches_batch_shapes(generic: pl.DataFrame) -> None:
    p = prepare_from_bars(loaded(generic), CFG)
    b = p.windows.batch(p.splits["train"][:3])
    sizes = p.schema.sizes
    assert b.static_cat.shape == (3, len(sizes.static_cat)) and sizes.static_cat == (3,)  # ES, NQ + unknown
    dense = b.dense()
    assert dense["known_cont"].shape == (3, 25, sizes.known_cont)
    assert dense["observed_cont"].shape == (3, 20, sizes.observed_cont)
    assert dense["known_cat"].shape == (3, 25, 0) and dense["observed_cat"].shape == (3, 20, 0)
    assert p.schema.names(Role.KNOWN, Kind.CONTINUOUS) == [
        "dow_sin",
        "dow_cos",
        "month_sin",
        "month_cos",
        "relative_time",
    ]
    assert p.schema.names(Role.OBSERVED, Kind.CONTINUOUS)[:3] == ["log_return", "log_range", "log_volume"]
    assert p.schema.extra["scaling"] == "volatility"  # the default since issue 11
    assert p.summary["features"]["static"] == ["series"]
    assert torch.isfinite(b.target).all() and (b.target_scale > 0).all()


def test_too_few_bars_says_what_is_needed(generic: pl.DataFrame) -> None:
    short = generic.group_by("series", maintain_order=True).head(30)
    with pytest.raises(
        InputError, match=r"needs 71 bars .* longest series 'ES' has 30.*--encoder-length \(at most 23\)"
    ):
        prepare_from_bars(loaded(short), DataConfig(encoder_length=64, horizon=6))


@pytest.mark.parametrize(
    ("cfg", "pattern"),
    [
        (
            DataConfig(encoder_length=20, horizon=5, train_end="2023-01-01"),
            r"^train split is empty.*--train-end later",
        ),
        (
            DataConfig(encoder_length=20, horizon=5, train_end="2025-06-01"),
            r"^val split is empty.*2025-06-01",
        ),
        (
            DataConfig(encoder_length=20, horizon=5, train_end="2024-06-01", val_end="2025-01-01"),
            r"^test split is empty.*--val-end 2025-01-01",
        ),
        (
            DataConfig(encoder_length=20, horizon=5, train_end="June 2024"),
            r"--train-end 'June 2024' is not an ISO date",
        ),
    ],
)
def test_bad_split_settings(generic: pl.DataFrame, cfg: DataConfig, pattern: str) -> None:
    with pytest.raises(InputError, match=pattern) as e:
        prepare_from_bars(loaded(generic), cfg)
    assert "\n" not in str(e.value)


def test_prediction_windows_include_the_last_bar(generic: pl.DataFrame) -> None:
    fitted = prepare_from_bars(loaded(generic), CFG)
    tf = FittedTransform.from_dict(json.loads(json.dumps(fitted.transform.to_dict())), fitted.transform.data)
    p = prepare_from_bars(loaded(generic), CFG, tf, for_prediction=True)
    w = p.windows
    assert len(p.splits["train"]) == 0 and len(p.splits["val"]) == 0
    assert p.splits["test"].tolist() == list(range(w.n_windows))
    assert w.n_windows == 2 * (300 - 20)  # every bar with a full encoder behind it (from the second bar on)
    ids = p.splits["test"]
    origin = w.origin_ns(ids)
    last = ns("2024-12-09")  # a Monday
    assert (origin == last).sum() == 2  # the last bar of each series is an origin
    final = ids[origin == last]
    assert (w.target_ns(final) == -1).all() and torch.isnan(w.actual(final)).all()
    future = w.target_ns(final, extrapolated=True)[0].tolist()
    assert future == [ns(d) for d in ("2024-12-10", "2024-12-11", "2024-12-12", "2024-12-13", "2024-12-16")]
    # The same window featurized for training and for prediction gets identical inputs and target scaling.
    common = fitted.splits["test"][-1:]
    same = ids[
        (origin == fitted.windows.origin_ns(common))
        & (w.series_code(ids) == fitted.windows.series_code(common))
    ]
    a, b = fitted.windows.batch(common), w.batch(same)
    for name in ("known_cont", "observed_cont"):
        assert torch.equal(a.dense()[name], b.dense()[name]), name
    for name in ("static_cat", "target", "target_scale"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name


def test_prediction_on_an_unseen_series_uses_code_zero(generic: pl.DataFrame) -> None:
    fitted = prepare_from_bars(loaded(generic), CFG)
    new = generic.with_columns(
        pl.col("series").replace({"NQ": "YM"}), pl.col("contract").replace({"NQ": "YM"})
    )
    p = prepare_from_bars(loaded(new), CFG, fitted.transform, for_prediction=True)
    ids = p.splits["test"]
    names = np.array(p.windows.series_names)[p.windows.series_index(ids).numpy()]
    codes = p.windows.series_code(ids).numpy()
    assert set(codes[names == "YM"]) == {0} and set(codes[names == "ES"]) == {1}
    assert p.summary["series"]["YM"]["code"] == 0
    assert "unseen in training" in format_summary(p.summary)


def test_prediction_needs_the_transform_and_an_encoder(generic: pl.DataFrame) -> None:
    with pytest.raises(InputError, match="fitted transform"):
        prepare_from_bars(loaded(generic), CFG, for_prediction=True)
    fitted = prepare_from_bars(loaded(generic), CFG)
    short = generic.group_by("series", maintain_order=True).head(15)
    with pytest.raises(InputError, match=r"needs 21 bars .* has 15; load a longer history"):
        prepare_from_bars(loaded(short), CFG, fitted.transform, for_prediction=True)


def test_unadjusted_roll_bars_are_counted_and_summary_is_json(generic: pl.DataFrame) -> None:
    es = generic.filter(pl.col("series") == "ES").with_columns(
        pl.when(pl.col("ts").dt.epoch("ns") >= ns("2024-03-15"))
        .then(pl.lit("ESM4"))
        .otherwise(pl.lit("ESH4"))
        .alias("contract")
    )
    rolls = [
        {
            "root": "ES",
            "trade_date": np.datetime64("2024-03-15", "D"),
            "from": "ESH4",
            "to": "ESM4",
            "gap": 50.0,
        }
    ]
    cfg = DataConfig(encoder_length=20, horizon=5, train_end="2024-06-01", adjust="none")
    p = prepare_from_bars(loaded(es, rolls), cfg)
    assert p.summary["roll_bars"] == 1 and p.rolls == rolls
    roll_row = int(np.flatnonzero(es["ts"].dt.epoch("ns").to_numpy() == ns("2024-03-15"))[0])
    j = p.schema.names(Role.OBSERVED, Kind.CONTINUOUS).index("roll")
    assert p.windows.cont[roll_row, p.windows.n_known_cont + j] == 1.0
    assert p.windows.target_raw[roll_row] == 0.0  # no return across two unadjusted contracts
    text = json.dumps(p.summary)
    assert json.loads(text)["rolls"][0]["trade_date"] == "2024-03-15"
    lines = format_summary(p.summary).splitlines()
    assert lines[0].startswith("data") and "1 rolls (2024-03-15 ESH4->ESM4)" in lines[0]
    assert any(line.startswith("train") and "purged" in line for line in lines)
    (windows,) = [line for line in lines if line.startswith("windows")]  # totals; each split's count once, below
    purged = sum(p.summary["purged"].values())
    assert windows.endswith(f"of them in the splits; {purged:,} purged at the split boundaries") and " / " not in windows


def test_prepare_data_loads_then_prepares() -> None:
    cfg = DataConfig(paths=(str(FIXTURES / "generic_ohlcv_daily.parquet"),), encoder_length=20, horizon=5)
    p = prepare_data(cfg)
    assert set(p.summary["series"]) == {"ES", "NQ"} and p.summary["rows_read"] == 600
    assert len(p.splits["train"]) > 0 and len(p.splits["val"]) > 0
