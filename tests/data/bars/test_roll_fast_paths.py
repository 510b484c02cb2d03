"""The roll stage's fast paths (contract-by-contract integer arrays, run-wise sorts) give exactly what the polars
joins and sorts they replaced give: each is held here to that reference, written out, on futures bars built to hit
the awkward cases (rolls with and without a common bar, an old contract with no bar before the pair, a new contract
with no bar before the switch, two symbols of one contract, rows not sorted by contract)."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from foxhunt.data.bars.rolls import ContractIndex
from foxhunt.data.util.order import is_sorted, runs_order, stable_order

DAY = 86_400 * 10**9


def _roll_prices_reference(fut: pl.DataFrame, rolls: pl.DataFrame) -> pl.DataFrame:
    """The polars joins `ContractIndex.roll_prices` replaced: the last common bar before the switch, else the new
    contract's last bar before it paired with the old contract's latest bar at or before that."""
    bars = fut.select("root", "expiry", "ts", "close", bar_date="trade_date")
    keys = rolls.select("root", "seg", "trade_date", "old", "new")

    def side(which: str, name: str) -> pl.DataFrame:
        return (
            keys.join(bars.rename({"expiry": which, "close": name}), on=["root", which])
            .filter(pl.col("bar_date") < pl.col("trade_date"))
            .select("root", "seg", "ts", name)
        )

    old, new = side("old", "old_close"), side("new", "new_close")
    exact = old.join(new, on=["root", "seg", "ts"]).sort("ts").group_by("root", "seg").agg(pl.all().last())
    new_last = new.sort("ts").group_by("root", "seg").agg(pl.all().last()).sort("ts")
    nearest = new_last.join_asof(old.sort("ts"), on="ts", by=["root", "seg"], strategy="backward",
                                    check_sortedness=False)
    loose = nearest.select(exact.columns).join(exact.select("root", "seg"), on=["root", "seg"], how="anti")
    return pl.concat([exact, loose]).rename({"ts": "at"})


def _futures(seed: int = 0) -> pl.DataFrame:
    """Hourly bars of two roots over 40 days: each contract trades a stretch of days, neighbours overlap (ES on the
    hours, NQ's next contract half an hour off: no common bar), sorted by symbol and ts as clean_bars leaves them."""
    rng = np.random.default_rng(seed)
    frames = []
    for root, offset in (("ES", 0), ("NQ", 1800 * 10**9)):
        for k, (first, last) in enumerate(((0, 15), (10, 30), (25, 40))):
            days = np.repeat(np.arange(first, last), 24)
            hours = np.tile(np.arange(24), last - first)
            ts = days * DAY + hours * 3600 * 10**9 + (offset if k % 2 else 0)
            frames.append(pl.DataFrame({
                "root": root, "expiry": 24_300 + 3 * k, "symbol": f"{root}{'HMU'[k]}4",
                "ts": ts, "trade_date": days.astype(np.int32), "close": 100.0 + rng.standard_normal(len(ts)),
                "volume": rng.integers(1, 50, len(ts)).astype(float),
            }))
    fut = pl.concat(frames).with_columns(
        pl.col("ts").cast(pl.Datetime("ns", "UTC")), pl.col("trade_date").cast(pl.Date), pl.col("expiry").cast(pl.Int32)
    )
    return fut.sort("symbol", "ts")


def _rolls(fut: pl.DataFrame) -> pl.DataFrame:
    """Rolls on every awkward date: inside the overlap, at its first day (no new bar before), before the old one
    starts (no old bar at or before the new one's last)."""
    return pl.DataFrame({
        "root": ["ES", "ES", "NQ", "NQ", "ES"], "seg": [1, 2, 1, 2, 3], "trade_date": [12, 25, 14, 28, 11],
        "old": [24_300, 24_303, 24_300, 24_303, 24_306], "new": [24_303, 24_306, 24_303, 24_306, 24_303],
    }, schema_overrides={"seg": pl.Int32}).with_columns(pl.col("trade_date").cast(pl.Date),
                                                        pl.col("old", "new").cast(pl.Int32))


@pytest.mark.parametrize("shuffle", [False, True])
def test_roll_prices_match_the_join_formulation(shuffle):
    fut = _futures()
    if shuffle:  # rows in no order: the index sorts them itself
        fut = fut.sample(fraction=1.0, shuffle=True, seed=1)
    rolls = _rolls(fut)
    index = ContractIndex.of(fut)
    got = index.roll_prices(fut["close"].to_numpy(), rolls).sort("root", "seg")
    want = _roll_prices_reference(fut, rolls).sort("root", "seg")
    assert got.equals(want.select(got.columns), null_equal=True)
    # the cases are all there: an exact pair, a nearest pair, a pair without an old close, a roll with no pair
    assert got.height == rolls.height - 1 and got["old_close"].null_count() == 1
    assert (got["at"].dt.minute() == 30).sum() == 1  # NQ's first roll: contracts half an hour apart, no common bar


def test_daily_volumes_and_first_symbols_match_group_bys():
    fut = _futures().with_columns(  # one contract under two symbols (ESH4, ESH24): the first row read names it
        symbol=pl.when((pl.col("symbol") == "ESH4") & (pl.col("trade_date").dt.day() % 2 == 0)).then(pl.lit("ESH24"))
        .otherwise("symbol")
    ).sample(fraction=1.0, shuffle=True, seed=2)
    index = ContractIndex.of(fut)
    got = index.daily_volume(fut["volume"].to_numpy()).sort("root", "trade_date", "expiry")
    want = fut.group_by("root", "trade_date", "expiry").agg(pl.col("volume").sum()).sort("root", "trade_date", "expiry")
    assert got.equals(want)
    names = index.first_symbols(fut["symbol"]).sort("root", "expiry")
    assert names.equals(fut.group_by("root", "expiry").agg(pl.col("symbol").first()).sort("root", "expiry"))
    assert "ESH24" in fut.filter(pl.col("expiry") == 24_300)["symbol"].to_list()


def test_runs_order_is_the_stable_lexsort():
    rng = np.random.default_rng(0)
    for _ in range(200):
        runs = rng.integers(1, 6)  # runs sorted by minor, in any order, overlapping or not, with repeated keys
        major = np.concatenate([np.full(n, rng.integers(0, 3)) for n in rng.integers(1, 8, runs)])
        minor = np.concatenate([np.sort(rng.integers(0, 10, n)) for n in np.bincount(np.cumsum(
            np.r_[0, major[1:] != major[:-1]]))])
        order = runs_order(major, minor)
        want = np.lexsort((minor, major))
        assert np.array_equal(np.arange(len(major)) if order is None else order, want)
        assert (order is None) == np.array_equal(want, np.arange(len(major)))
        assert is_sorted([major, minor]) == (stable_order([major, minor]) is None)
