"""`--contracts auto` rolls the symbols of a root only when they are one market's contracts (bars/chains.py): vendor
continuous symbols that merely read as contracts (`CU0`, `CF0`: root C) stay their own series under their own names,
real contract chains keep their rolls, and `--contracts continuous` joins them as before."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from foxhunt.cli import main
from foxhunt.data.bars.chains import contract_spans, decision, decision_line, roots_apart
from foxhunt.data.bars.load import load_bars
from foxhunt.data.config import DataConfig
from foxhunt.data.dataset.summary import contracts_text

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
# A panel like the Chinese "main contract" one: continuous symbols whose first letter is shared (C: CF0 cotton and CU0
# copper; S: SF0, SM0, SN0; A: AG0 silver from 2012 and AU0 gold), next to symbols that read as no contract (M0).
LEVELS = {"AG0": 4_000.0, "AU0": 300.0, "CF0": 15_000.0, "CU0": 40_000.0, "M0": 3_000.0, "SF0": 6_000.0,
          "SM0": 7_000.0, "SN0": 120_000.0}
VOLUMES = {"AG0": 800_000, "AU0": 150_000, "CF0": 100_000, "CU0": 300_000, "M0": 1_000_000, "SF0": 50_000,
           "SM0": 90_000, "SN0": 60_000}  # CU0 out-trades CF0, SM0 SF0, AG0 AU0: read as contracts, they would roll
STARTS = {"AG0": dt.date(2012, 5, 10), "SF0": dt.date(2014, 8, 8), "SM0": dt.date(2014, 8, 8),
          "SN0": dt.date(2015, 3, 27)}
FIRST, LAST = dt.date(2011, 7, 28), dt.date(2017, 7, 25)


def panel(path: Path, symbols: tuple[str, ...] = tuple(LEVELS), first: dt.date = FIRST, last: dt.date = LAST) -> str:
    """Daily bars on business days `first` .. `last` (naive midnight timestamps, as the vendor's), each symbol a
    seeded random walk from its own start."""
    rng = np.random.default_rng(0)
    days = pl.date_range(first, last, eager=True)
    days = days.filter(days.dt.weekday() <= 5)
    frames = []
    for sym in symbols:
        d = days.filter(days >= STARTS.get(sym, FIRST))
        close = LEVELS[sym] * np.exp(np.cumsum(rng.normal(0, 0.01, len(d))))
        frames.append(pl.DataFrame({
            "timestamp": d.cast(pl.Datetime("us")), "symbol": sym, "open": close, "high": close * 1.005,
            "low": close * 0.995, "close": close, "volume": VOLUMES[sym] * rng.uniform(0.5, 1.5, len(d)),
        }))
    pl.concat(frames).sort("timestamp", "symbol").write_parquet(path)
    return str(path)


@pytest.fixture(scope="module")
def cn(tmp_path_factory) -> str:
    return panel(tmp_path_factory.mktemp("cn") / "cn.parquet")


def test_continuous_symbols_of_one_letter_stay_their_own_series(cn):
    lb = load_bars(DataConfig(paths=(cn,)))
    assert sorted(lb.report["series"]) == sorted(LEVELS)  # every symbol its own series, under its own name
    assert lb.rolls == [] and lb.report["contracts_dropped"] == []
    assert lb.report["contracts_mode"] == "symbols" and lb.report["adjust"] == "none"
    apart = lb.report["roots_apart"]
    assert {r: v["symbols"] for r, v in apart.items()} == {"A": ["AG0", "AU0"], "C": ["CF0", "CU0"],
                                                           "S": ["SF0", "SM0", "SN0"]}
    assert apart["C"]["near_share"] == 0.0 and apart["C"]["pair"] == ["CF0", "CU0"]
    assert apart["C"]["side_by_side_days"] == (LAST - FIRST).days + 1
    assert (apart["S"]["pair"], apart["S"]["first"], apart["S"]["last"]) == (["SF0", "SM0"], "2014-08-08", "2017-07-25")
    got = lb.bars.filter(pl.col("series") == "CU0")
    raw = pl.read_parquet(cn).filter(pl.col("symbol") == "CU0")
    np.testing.assert_array_equal(got.get_column("close").to_numpy(), raw.get_column("close").to_numpy())
    assert lb.report["symbols"] == len(LEVELS)
    assert json.loads(json.dumps(lb.report)) == lb.report


def test_one_continuous_symbol_keeps_its_name(tmp_path):
    lb = load_bars(DataConfig(paths=(panel(tmp_path / "cu.parquet", ("CU0",)),)))
    assert list(lb.report["series"]) == ["CU0"]
    assert lb.report["roots_apart"]["C"]["pair"] == ["CU0"]


def test_contracts_continuous_rolls_them_as_contracts_of_a_root(cn):
    lb = load_bars(DataConfig(paths=(cn,), contracts="continuous"))
    assert sorted(lb.report["series"]) == ["A", "C", "M0", "S"]
    assert [(r["root"], r["from"], r["to"]) for r in lb.rolls] == [
        ("C", "CF0", "CU0"), ("S", "SF0", "SM0"), ("S", "SM0", "SN0")]
    assert lb.report["roots_apart"] == {} and lb.report["contracts_dropped"] == ["AG0"]


def test_a_models_decision_overrules_the_dates_and_other_roots_are_decided_from_them(cn):
    """A model's saved decision (FittedTransform.contract_roots) is applied whatever the dates say: C rolled, M kept
    apart (no symbol of the panel reads as one of M's), A and S decided by the rule (apart)."""
    lb = load_bars(DataConfig(paths=(cn,)), roots=(("M",), ("C",)))
    assert sorted(lb.report["series"]) == ["AG0", "AU0", "C", "M0", "SF0", "SM0", "SN0"]
    assert [(r["root"], r["from"], r["to"]) for r in lb.rolls] == [("C", "CF0", "CU0")]
    assert sorted(lb.report["roots_apart"]) == ["A", "S"] and lb.report["roots_rolled"] == ["C"]
    assert load_bars(DataConfig(paths=(cn,))).report["roots_rolled"] == []


def test_the_decision_a_model_keeps_is_auto_s_alone():
    assert decision({"roots_apart": {"C": {}}, "roots_rolled": ["ES"]}, "auto") == {
        "roots_apart": ("C",), "roots_rolled": ("ES",)}
    assert decision({"roots_apart": {"C": {}}, "roots_rolled": []}, "each") == {} == decision({}, "auto")
    assert decision({"roots_apart": {}, "roots_rolled": []}, "auto") == {}  # no futures: nothing decided


@pytest.mark.parametrize("name", ["es_fut_ohlcv1m_databento.parquet", "es_fut_ohlcv1h_databento.parquet",
                                  "es_fut_ohlcv1d_databento.parquet", "es_fut_ohlcv1m_databento.dbn.zst"])
def test_databento_contracts_still_roll(name):
    if name.endswith(".dbn.zst"):
        pytest.importorskip("databento_dbn")
    lb = load_bars(DataConfig(paths=(str(FIXTURES / name),)))
    assert list(lb.report["series"]) == ["ES"] and lb.report["roots_apart"] == {}
    assert [(r["from"], r["to"]) for r in lb.rolls] == [("ESH4", "ESM4")]


def _spans(rows: list[tuple[str, str, int, str, str]]) -> pl.DataFrame:
    """(root, symbol, expiry as year * 12 + month, first, last ISO trade date) -> contract_spans' frame."""
    day = lambda s: (dt.date.fromisoformat(s) - dt.date(1970, 1, 1)).days  # noqa: E731
    return pl.DataFrame(
        {"root": [r[0] for r in rows], "expiry": [r[2] for r in rows], "symbols": [[r[1]] for r in rows],
         "first": [day(r[3]) for r in rows], "last": [day(r[4]) for r in rows]},
        schema={"root": pl.Utf8, "expiry": pl.Int32, "symbols": pl.List(pl.Utf8), "first": pl.Int32,
                "last": pl.Int32},
    )


def test_a_chain_with_contracts_listed_years_ahead_is_one_market():
    """CL-like, 2020-01 .. 2025-11: every monthly contract trades from three years before its expiry month to its
    20th, and the Decembers out to 2034 trade all along, years before their expiries: the front is near its expiry on
    every day."""
    rows = []
    for e in range(2020 * 12 + 1, 2025 * 12 + 12):
        y, m = divmod(e - 1, 12)
        first = max(dt.date(y - 3, m + 1, 1), dt.date(2020, 1, 2))
        rows.append(("CL", f"CL{'FGHJKMNQUVXZ'[m]}{y % 100}", e, first.isoformat(), f"{y}-{m + 1:02d}-20"))
    rows += [("CL", f"CLZ{y % 100}", y * 12 + 12, "2020-01-02", "2025-11-20") for y in range(2026, 2035)]
    spans = _spans(rows)
    assert roots_apart(spans) == {}
    assert roots_apart(spans.filter(pl.col("expiry") > 2025 * 12 + 12)) != {}  # the far Decembers alone are not


def test_near_share_by_hand():
    """X traded 2014-01-01 .. 2015-12-31 (730 days), expiry 2016-09: near from 2014-09-01, 487 days, 66.7%: a chain.
    Y: the same days, expiry 2017-01: near from 2015-01-01, 365 days, 50.0%: a chain (at least half). Z: expiry
    2017-02, near from 2015-02-01, 334 days, 45.8%: apart. W: two contracts, one 2011-2012 far from its 2020 expiry,
    one 2019-06-01 .. 2020-07-31 near its 2020-03 expiry up to June 2020 (3 months after): 396 near of 1,158 days."""
    spans = _spans([
        ("X", "XU6", 2016 * 12 + 9, "2014-01-01", "2015-12-31"),
        ("Y", "YF7", 2017 * 12 + 1, "2014-01-01", "2015-12-31"),
        ("Z", "ZG7", 2017 * 12 + 2, "2014-01-01", "2015-12-31"),
        ("W", "WF0", 2020 * 12 + 1, "2011-01-01", "2012-12-31"),
        ("W", "WH0", 2020 * 12 + 3, "2019-06-01", "2020-07-31"),
    ])
    got = roots_apart(spans)
    assert sorted(got) == ["W", "Z"]
    assert got["Z"] == {"symbols": ["ZG7"], "first": "2014-01-01", "last": "2015-12-31",
                        "near_share": round(334 / 730, 4), "pair": ["ZG7"], "side_by_side_days": 730}
    assert got["W"]["near_share"] == round(396 / 1158, 4)
    assert (got["W"]["pair"], got["W"]["side_by_side_days"]) == (["WF0", "WH0"], 0)


def test_contract_spans_match_a_group_by_across_decades_and_unsorted_runs():
    """One pass per run of one symbol gives each contract's first and last trade date, also where a symbol's bars
    cross the decade its digit names (ESH9 in 2019 and 2020: two contracts) or lie out of time order."""
    rng = np.random.default_rng(0)
    days = np.concatenate([rng.integers(17_000, 19_000, 40), rng.integers(18_000, 18_500, 30), rng.integers(0, 10, 5)])
    df = pl.DataFrame({
        "symbol": ["ESH9"] * 40 + ["CLF5"] * 30 + ["SPX"] * 5,
        "root": ["ES"] * 40 + ["CL"] * 30 + [None] * 5,
        "expiry": [2019 * 12 + 3 if d < 18_262 else 2029 * 12 + 3 for d in days[:40]] + [2025 * 12 + 1] * 30
        + [None] * 5,
        "trade_date": days.astype(np.int32),
    }, schema_overrides={"expiry": pl.Int32}).with_columns(pl.col("trade_date").cast(pl.Date))
    got = contract_spans(df, np.array([0, 40, 70]))
    want = (df.filter(pl.col("root").is_not_null())
            .group_by("root", "expiry")
            .agg(pl.col("symbol").unique().sort().alias("symbols"), first=pl.col("trade_date").min().cast(pl.Int32),
                 last=pl.col("trade_date").max().cast(pl.Int32))
            .sort("root", "expiry"))
    assert got.equals(want.select(got.columns))
    assert got.height == 3  # ESH9 of 2019 and of 2029, CLF5


def test_inspect_says_what_it_decided_and_how_to_override_it(cn, capsys):
    assert main(["inspect", cn]) == 0
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("contracts ")]
    assert lines == [
        "contracts 8 symbols read as 8 series: CF0 and CU0 trade side by side for 6.0 years, never within 2 years of"
        " the expiry their names read as, so they are not contracts of one market (nor are those of roots A, S);"
        " --contracts continuous reads them as contracts, one series per root"
    ]
    assert main(["inspect", cn, "--contracts", "continuous"]) == 0
    assert "contracts " not in capsys.readouterr().out.replace("contracts kept", "")


def test_the_line_for_one_symbol_and_for_a_summary_without_a_decision():
    apart = {"C": {"symbols": ["CU0"], "first": "2011-07-28", "last": "2017-07-25", "near_share": 0.25,
                   "pair": ["CU0"], "side_by_side_days": 2190}}
    assert decision_line(apart, 1, 1) == (
        "1 symbol read as 1 series: CU0 trades for 6.0 years, on only 25% of its days within 2 years of the expiry"
        " its name reads as, so it is not a futures contract; --contracts continuous reads them as contracts, one"
        " series per root")
    assert contracts_text({"series": {"ES": {}}, "roots_apart": {}}) is None
    assert contracts_text({"series": {"ES": {}}}) is None  # a summary without a decision
