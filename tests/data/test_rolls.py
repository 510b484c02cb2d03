"""Roll rules on small Databento-shaped files: confirmed next-contract rolls, forced rolls when the front has no bars,
features from each contract's own prices under every --adjust, and Databento continuous files."""

from __future__ import annotations

import datetime as dt
import math
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from foxhunt.data.bars.load import load_bars
from foxhunt.data.config import DataConfig
from foxhunt.data.features.features import raw_features
from foxhunt.data.prepare import prepare_from_bars
from foxhunt.errors import InputError

IID = {"ESH4": 4001, "ESM4": 4002, "ESU4": 4003}
MINUTES = 3  # bars per session, 15:00-15:02 UTC (09:00 CT: the trade date is the UTC date)


def databento(path: Path, rows: list[tuple[str, int, int, float, float]]) -> str:
    """Write an ohlcv-1m parquet shaped like Databento's `to_parquet()`.

    rows: (symbol, instrument_id, March 2024 day, close of the session's first bar, session volume). Each row is
    MINUTES bars; the close climbs 0.25 a bar, open = close, high = close + 0.5, low = close - 0.5.
    """
    out = []
    for sym, iid, day, close, vol in rows:
        for m in range(MINUTES):
            c = close + 0.25 * m
            ts = dt.datetime(2024, 3, day, 15, m, tzinfo=dt.UTC)
            out.append((33, 1, iid, c, c + 0.5, c - 0.5, c, vol // MINUTES, sym, ts))
    cols = ["rtype", "publisher_id", "instrument_id", "open", "high", "low", "close", "volume", "symbol", "ts_event"]
    frame = pl.DataFrame(out, schema=cols, orient="row").with_columns(
        pl.col("rtype").cast(pl.UInt8),
        pl.col("publisher_id").cast(pl.UInt16),
        pl.col("instrument_id").cast(pl.UInt32),
        pl.col("volume").cast(pl.UInt64),
        pl.col("ts_event").cast(pl.Datetime("ns", "UTC")),
    )
    frame.sort("ts_event", "instrument_id").write_parquet(path)
    return str(path)


def outrights(spec: dict[int, dict[str, float]], price: dict[str, float]) -> list[tuple]:
    """{day: {symbol: volume}} -> rows, each contract at its price."""
    return [(s, IID[s], day, price[s], v) for day, vols in spec.items() for s, v in vols.items()]


def sessions(lb) -> dict[str, str]:
    """{trade date: contract} of the series' bars (one contract per session)."""
    b = lb.bars.group_by(pl.col("ts").dt.date().alias("d")).agg(pl.col("contract").unique()).sort("d")
    return {str(d): (c[0] if len(c) == 1 else tuple(sorted(c))) for d, c in b.iter_rows()}


PRICES = {"ESH4": 5000.0, "ESM4": 5050.0, "ESU4": 5100.0}
DAYS = (4, 5, 6, 7, 8, 11)


# --- 1. a far contract's volume spike --------------------------------------------------------------------------------


def test_far_contract_volume_spike_does_not_skip_the_next_contract(tmp_path):
    """ESU4 trades 5M on one session while ESH4 is front: the series stays on ESH4 and rolls to ESM4 (the next
    contract) once ESM4 has out-traded ESH4 for two sessions; it never follows ESU4."""
    spec = {
        4: {"ESH4": 900, "ESM4": 90, "ESU4": 9},
        5: {"ESH4": 900, "ESM4": 90, "ESU4": 5_000_001},  # one-session spike in a far contract
        6: {"ESH4": 900, "ESM4": 90, "ESU4": 9},
        7: {"ESH4": 90, "ESM4": 900, "ESU4": 9},
        8: {"ESH4": 90, "ESM4": 900, "ESU4": 9},
        11: {"ESH4": 90, "ESM4": 900, "ESU4": 9},
    }
    path = databento(tmp_path / "es.parquet", outrights(spec, PRICES))
    lb = load_bars(DataConfig(paths=(path,)))
    assert list(sessions(lb).values()) == ["ESH4"] * 5 + ["ESM4"]
    assert "ESU4" not in lb.report["contracts_kept"]
    assert [(r["trade_date"], r["from"], r["to"], r["reason"]) for r in lb.rolls] == [
        ("2024-03-11", "ESH4", "ESM4", "volume")
    ]
    assert lb.report["rolls_by_reason"] == {"volume": 1} and lb.report["roll_confirm"] == 2
    one = load_bars(DataConfig(paths=(path,), roll_confirm=1))  # one session of lead is enough: roll on 03-08
    assert [(r["trade_date"], r["to"]) for r in one.rolls] == [("2024-03-08", "ESM4")]


def test_one_session_lead_of_the_next_contract_does_not_roll_by_default(tmp_path):
    spec = {d: {"ESH4": 900, "ESM4": 90} for d in DAYS}
    spec[5] = {"ESH4": 90, "ESM4": 900}  # ESM4 leads one session only (a block trade), then ESH4 again
    path = databento(tmp_path / "es.parquet", outrights(spec, PRICES))
    assert load_bars(DataConfig(paths=(path,))).rolls == []
    assert [r["trade_date"] for r in load_bars(DataConfig(paths=(path,), roll_confirm=1)).rolls] == ["2024-03-06"]


def test_jumps_past_a_next_contract_that_does_not_trade(tmp_path):
    """With no ESM4 bars at all, ESU4 is the next traded contract and may take over after two sessions of lead."""
    spec = {d: {"ESH4": 900, "ESU4": 90} for d in DAYS}
    spec[7] = spec[8] = {"ESH4": 90, "ESU4": 900}
    lb = load_bars(DataConfig(paths=(databento(tmp_path / "es.parquet", outrights(spec, PRICES)),)))
    assert [(r["trade_date"], r["to"], r["reason"]) for r in lb.rolls] == [("2024-03-11", "ESU4", "volume")]


def test_roll_confirm_is_validated_and_old_saved_configs_default_to_one_session():
    with pytest.raises(InputError, match="--roll-confirm must be at least 1"):
        DataConfig(roll_confirm=0)
    saved = DataConfig(roll_confirm=3).to_dict()
    assert DataConfig.from_dict(saved).roll_confirm == 3
    del saved["roll_confirm"]  # a run saved before the option: it rolled on the previous session's volume alone
    assert DataConfig.from_dict(saved).roll_confirm == 1


# --- 2. the front stops trading --------------------------------------------------------------------------------------


def test_front_without_bars_rolls_on_that_session_and_keeps_every_session(tmp_path):
    """ESH4 leads every session it trades, then stops (expiry, or missing data): the series moves to ESM4 on the first
    session without ESH4 bars, and no session is lost."""
    spec = {d: {"ESH4": 900, "ESM4": 90} for d in (4, 5, 6)} | {d: {"ESM4": 900} for d in (7, 8, 11)}
    lb = load_bars(DataConfig(paths=(databento(tmp_path / "es.parquet", outrights(spec, PRICES)),)))
    assert list(sessions(lb)) == [f"2024-03-{d:02d}" for d in DAYS]
    assert lb.bars.height == len(DAYS) * MINUTES
    assert [(r["trade_date"], r["from"], r["to"], r["reason"]) for r in lb.rolls] == [
        ("2024-03-07", "ESH4", "ESM4", "front_missing")
    ]
    assert lb.rolls[0]["gap"] == pytest.approx(50.0)  # at the last common bar, 03-06 15:02
    # The roll bar's return is ESM4's own, from its 03-06 close to its 03-07 first close; not ESH4 -> ESM4.
    f = raw_features(lb.bars, "ratio", "log_return")
    roll = f.filter(pl.col("roll") > 0)
    assert roll.height == 1
    assert roll.get_column("log_return")[0] == pytest.approx(math.log(5050.0 / 5050.5), abs=1e-12)


# --- 3. returns and ranges are each contract's own under every --adjust ---------------------------------------------

# A backwardated market, rolled by volume with roll_confirm=1: ESH4 at 10 leads 03-04..05, ESM4 leads 03-06..07
# (roll on 03-07 at the 03-06 15:02 pair: ESH4 10.5, ESM4 4.5, gap -6), then ESM4 rallies to 8 while ESU4 sits at 4;
# ESU4 leads 03-08 (roll on 03-11 at the 03-08 pair: ESM4 8.5, ESU4 4.5, gap -4). Difference adjustment shifts ESH4
# by -10: its adjusted prices straddle zero.
BACKWARDATED = [
    ("ESH4", 4001, 4, 10.0, 900),
    ("ESH4", 4001, 5, 10.0, 900),
    ("ESH4", 4001, 6, 10.0, 90),
    ("ESH4", 4001, 7, 10.0, 90),
    ("ESM4", 4002, 4, 4.0, 90),
    ("ESM4", 4002, 5, 4.0, 90),
    ("ESM4", 4002, 6, 4.0, 900),
    ("ESM4", 4002, 7, 4.0, 900),
    ("ESM4", 4002, 8, 8.0, 90),
    ("ESM4", 4002, 11, 8.0, 90),
    ("ESU4", 4003, 4, 4.0, 9),
    ("ESU4", 4003, 5, 4.0, 9),
    ("ESU4", 4003, 6, 4.0, 9),
    ("ESU4", 4003, 7, 4.0, 9),
    ("ESU4", 4003, 8, 4.0, 900),
    ("ESU4", 4003, 11, 4.0, 900),
    ("ESU4", 4003, 12, 4.0, 900),
]


def _own(bars: pl.DataFrame, source: str) -> tuple[np.ndarray, np.ndarray]:
    """From the source file: each bar's log return from its own contract's close at the series' previous timestamp
    (0 on the first bar), and its own log range."""
    raw = pl.read_parquet(source).rename({"ts_event": "ts", "symbol": "contract"})
    b = (
        bars.select("contract", "ts", prev_ts=pl.col("ts").shift(1))
        .join(raw.select("contract", "ts", "close", "high", "low"), on=["contract", "ts"], how="left")
        .join(raw.select("contract", prev_ts="ts", prev_close="close"), on=["contract", "prev_ts"], how="left")
    )
    ret = b.select((pl.col("close") / pl.col("prev_close")).log().fill_null(0.0)).to_series().to_numpy()
    return ret, b.select((pl.col("high") / pl.col("low")).log()).to_series().to_numpy()


@pytest.mark.parametrize("adjust", ["difference", "ratio", "none"])
def test_returns_and_ranges_are_the_contracts_own_under_every_adjust(tmp_path, adjust):
    path = databento(tmp_path / "es.parquet", BACKWARDATED)
    lb = load_bars(DataConfig(paths=(path,), adjust=adjust, roll_confirm=1))
    assert [(r["trade_date"], r["gap"]) for r in lb.rolls] == [("2024-03-07", -6.0), ("2024-03-11", -4.0)]
    if adjust == "difference":
        assert lb.bars.get_column("low").min() < 0  # the displayed prices went below zero
    f = raw_features(lb.bars, adjust, "log_return")
    own_ret, own_range = _own(lb.bars, path)
    np.testing.assert_allclose(f.get_column("log_range").to_numpy(), own_range, atol=1e-12)
    np.testing.assert_allclose(f.get_column("log_return").to_numpy(), own_ret, atol=1e-12)
    for target in ("log_return", "log_range"):
        t = raw_features(lb.bars, adjust, target).get_column("target").to_numpy()
        assert np.isfinite(t).all()


def test_difference_returns_do_not_depend_on_later_rolls(tmp_path):
    """Dropping the data after 03-08 removes the 03-11 roll: the returns of the bars both files share are equal."""
    full = databento(tmp_path / "full.parquet", BACKWARDATED)
    cut = databento(tmp_path / "cut.parquet", [r for r in BACKWARDATED if r[2] <= 8])
    feats = [
        raw_features(load_bars(DataConfig(paths=(p,), adjust="difference", roll_confirm=1)).bars, "difference",
                     "log_return")
        for p in (full, cut)
    ]
    shared = feats[1].height
    for col in ("log_return", "log_range"):
        np.testing.assert_array_equal(feats[0].get_column(col).head(shared).to_numpy(), feats[1].get_column(col))


def test_backwardated_market_gives_finite_targets_in_prepared_windows(tmp_path):
    path = databento(tmp_path / "es.parquet", BACKWARDATED)
    cfg = DataConfig(paths=(path,), adjust="difference", roll_confirm=1, encoder_length=4, horizon=2,
                     train_end="2024-03-08")
    p = prepare_from_bars(load_bars(cfg), cfg)
    assert np.isfinite(np.asarray(p.windows.target_raw)).all()


def test_fixture_difference_returns_equal_ratio_returns():
    """On the 1-minute ES fixture `difference` used to change 16,588 bars' returns; now every --adjust gives the
    same returns and ranges."""
    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "es_fut_ohlcv1m_databento.parquet"
    got = {
        a: raw_features(load_bars(DataConfig(paths=(str(fixture),), adjust=a)).bars, a, "log_return")
        for a in ("difference", "ratio", "none")
    }
    for a in ("ratio", "none"):
        for col in ("log_return", "log_range"):
            np.testing.assert_allclose(got["difference"].get_column(col), got[a].get_column(col), atol=1e-12)


# --- 4. Databento continuous files -----------------------------------------------------------------------------------


def test_continuous_file_is_one_series_rolled_at_instrument_changes(tmp_path):
    """`ES.v.0` on every row, instrument_id 4001 then 4002: one series ES, one roll where the instrument changes."""
    rows = [("ES.v.0", 4001, d, 5000.0, 900) for d in (4, 5, 6)] + [("ES.v.0", 4002, d, 5050.0, 900) for d in (7, 8)]
    lb = load_bars(DataConfig(paths=(databento(tmp_path / "v0.parquet", rows),)))
    assert list(lb.report["series"]) == ["ES"]
    assert lb.report["contracts_mode"] == "continuous"
    assert lb.report["series"]["ES"]["contracts"] == ["ES.v.0#4001", "ES.v.0#4002"]
    # The pair: the old instrument's last close (5000.5 on 03-06) and the new one's first open (5050 on 03-07).
    assert lb.rolls == [
        {"root": "ES", "trade_date": "2024-03-07", "from": "ES.v.0#4001", "to": "ES.v.0#4002", "gap": 49.5,
         "reason": "instrument_change"}
    ]
    old = lb.bars.filter(pl.col("contract") == "ES.v.0#4001")
    np.testing.assert_allclose(old.get_column("close"), old.get_column("own_close") * 5050.0 / 5000.5, rtol=1e-12)
    f = raw_features(lb.bars, "ratio", "log_return").filter(pl.col("roll") > 0)
    assert f.get_column("log_return").to_list() == pytest.approx([0.0], abs=1e-12)  # first bar: open == close


def test_continuous_file_with_two_ranks_keeps_both_names(tmp_path):
    rows = [("ES.c.0", 4001, d, 5000.0, 900) for d in (4, 5)] + [("ES.c.0", 4002, d, 5050.0, 900) for d in (6, 7)]
    rows += [("ES.c.1", 4002, d, 5050.0, 90) for d in (4, 5)] + [("ES.c.1", 4003, d, 5100.0, 90) for d in (6, 7)]
    lb = load_bars(DataConfig(paths=(databento(tmp_path / "c.parquet", rows),)))
    assert sorted(lb.report["series"]) == ["ES.c.0", "ES.c.1"]
    assert [(r["root"], r["trade_date"], r["reason"]) for r in lb.rolls] == [
        ("ES.c.0", "2024-03-06", "instrument_change"),
        ("ES.c.1", "2024-03-06", "instrument_change"),
    ]


def test_continuous_file_and_outrights_of_one_root_clash(tmp_path):
    rows = [("ES.v.0", 4001, d, 5000.0, 900) for d in (4, 5)] + outrights({4: {"ESM4": 9}, 5: {"ESM4": 9}}, PRICES)
    with pytest.raises(InputError, match=r"series name\(s\) ES come from two sources"):
        load_bars(DataConfig(paths=(databento(tmp_path / "mix.parquet", rows),)))
