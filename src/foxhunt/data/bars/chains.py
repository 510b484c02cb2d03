"""Whether the symbols that read as contracts of one root are one market's contracts (what `--contracts auto` rolls).

A symbol such as `CU0` reads as root `C`, month `U` (September), year `0` (symbols.py), and the decade of a one-digit
year is the first one not before the bar's, so `CU0` traded in 2011-2017 reads as the September 2020 contract. But
vendors name continuous "main contract" series that way too (Chinese panels: `CU0` copper, `CF0` cotton, `SF0`, `SM0`
and `SN0` ferrosilicon, silicon manganese and tin). Read as contracts, those markets would be joined by a volume roll
into one series named after a letter, with the markets that never lead dropped as far contracts.

The rule, from each contract's first and last trade date and the expiry month its symbol gives: a contract is *near
its expiry* on the days from the first of the month 24 months before its expiry month to the end of the month 3
months after it (the longest a real contract trades past its month: SOFR futures trade through their reference
quarter). A chain of contracts always has one near its expiry: its front, which moves every few months, while the
contracts listed years ahead (CL lists nine years out) trade beside it. So the symbols of a root are read as
contracts of one market when, on at least half of the days that any of them trades (from its first to its last
trade date), one of them is near its expiry. Otherwise (`CF0` and `CU0` trading side by side for six years, each
2.5 years or more before its expiry) each symbol is its own series under its own name, and the loader says so.

Only per-contract summaries are compared (a few hundred rows for millions of bars): the first and last trade date of
each contract come from one pass over the bars' trade dates per run of one symbol.

Limits: a file of under about two years that ends near the expiries its continuous symbols read as (`CU0` bars of
2019-2020) looks like a chain; `--contracts each` keeps every symbol its own series. `--contracts continuous` rolls
the contracts of every root whatever the dates say.

A model keeps what was decided on its training bars (FittedTransform.roots_apart / roots_rolled), and the bars it
forecasts are read that way (`keep_apart`'s `apart` and `rolled`): three months of `CU0` bars of 2019, which alone
would look like a chain, are still the copper series the model knows. Only a root the model never saw is decided
from the bars read.
"""

from __future__ import annotations

import numpy as np
import polars as pl

NEAR_BEFORE = 24  # months before its expiry month from which a contract is near its expiry
NEAR_AFTER = 3  # months after its expiry month up to which it is
MIN_NEAR_SHARE = 0.5  # of a root's traded days with a contract near its expiry: below it, not one market


def keep_apart(df: pl.DataFrame, runs: np.ndarray, apart: tuple[str, ...] = (), rolled: tuple[str, ...] = ()
               ) -> tuple[pl.DataFrame, dict[str, dict], list[str]]:
    """`df` (parsed bars: symbol, root, expiry, trade_date) with root and expiry cleared for the symbols of roots
    whose contracts are not one market's (`roots_apart`), so that each of them is a series of its own;
    `roots_apart`'s entries; and the roots left to roll, sorted. `runs` (R,): the first row of each run of one
    symbol. `apart`, `rolled`: a model's decision (see the module docstring), which the dates do not overrule."""
    spans = contract_spans(df, runs)
    facts = roots_apart(spans, apart, rolled)
    left = sorted(set(spans.get_column("root").to_list()) - set(facts))
    if not facts:
        return df, facts, left
    out = pl.col("root").is_in(pl.Series(list(facts), dtype=pl.Utf8).implode())
    return df.with_columns(
        root=pl.when(out).then(None).otherwise(pl.col("root")),
        expiry=pl.when(out).then(None).otherwise(pl.col("expiry")),
    ), facts, left


def decision(report: dict, contracts: str) -> dict[str, tuple[str, ...]]:
    """FittedTransform's roots_apart and roots_rolled from the load report (load.load_bars) of a model's training
    bars read with --contracts `contracts`; none unless `auto` decided on some root (bars without futures symbols
    decide nothing)."""
    if contracts != "auto" or not (report.get("roots_apart") or report.get("roots_rolled")):
        return {}
    return {"roots_apart": tuple(sorted(report["roots_apart"])), "roots_rolled": tuple(report["roots_rolled"])}


def contract_spans(df: pl.DataFrame, runs: np.ndarray) -> pl.DataFrame:
    """root, expiry, symbols (sorted), first and last (trade dates, days since the epoch) of each futures contract of
    `df` (parsed bars; `runs` (R,) the first row of each run of one symbol)."""
    root, expiry = df.get_column("root"), df.get_column("expiry")
    if root.null_count() == df.height:
        return pl.DataFrame(schema={"root": pl.Utf8, "expiry": pl.Int32, "symbols": pl.List(pl.Utf8),
                                    "first": pl.Int32, "last": pl.Int32})
    n, index = df.height, pl.get_index_type()
    at = pl.Series(runs, dtype=index)
    ends = pl.Series(np.append(runs[1:], n) - 1, dtype=index)
    # A symbol's expiry changes inside its run only where its bars cross the decade its digit names (ESH9 in 2019
    # and in 2020): then the run is cut there too, one pass over the expiries.
    if expiry.gather(at).ne_missing(expiry.gather(ends)).any():
        e = expiry.fill_null(-1).to_numpy()
        runs = np.union1d(runs, np.flatnonzero(e[1:] != e[:-1]) + 1)
        at = pl.Series(runs, dtype=index)
    days = df.get_column("trade_date").to_physical().to_numpy()  # (N,) int32 days since the epoch
    return (
        pl.DataFrame({
            "root": root.gather(at), "expiry": expiry.gather(at), "symbol": df.get_column("symbol").gather(at),
            "first": np.minimum.reduceat(days, runs), "last": np.maximum.reduceat(days, runs),  # (R,)
        })
        .filter(pl.col("root").is_not_null())
        .group_by("root", "expiry")
        .agg(pl.col("symbol").unique().sort().alias("symbols"), pl.col("first").min(), pl.col("last").max())
        .sort("root", "expiry")
    )


def roots_apart(spans: pl.DataFrame, apart: tuple[str, ...] = (), rolled: tuple[str, ...] = ()) -> dict[str, dict]:
    """{root: facts} of the roots of `spans` (contract_spans) whose contracts are not one market's (the rule of the
    module docstring), where a model's decision does not say otherwise: those in `apart` are, those in `rolled` are
    not, whatever their dates. facts: symbols, first and last (ISO trade dates), near_share (the share of the root's
    traded days with a contract near its expiry), pair (the two symbols that trade side by side longest, or the one
    symbol) and side_by_side_days (how long they do: their common days, or the one symbol's)."""
    if not spans.height:
        return {}
    near = spans.with_columns(
        first=pl.max_horizontal("first", _month_start(pl.col("expiry") - NEAR_BEFORE)),
        last=pl.min_horizontal("last", _month_start(pl.col("expiry") + NEAR_AFTER + 1) - 1),
    ).filter(pl.col("first") <= pl.col("last"))
    share = (
        _union_days(spans).join(_union_days(near).rename({"days": "near"}), on="root", how="left")
        .select("root", near_share=pl.col("near").fill_null(0) / pl.col("days"))
        .filter(pl.when(_among(apart)).then(True).when(_among(rolled)).then(False)
                .otherwise(pl.col("near_share") < MIN_NEAR_SHARE))
    )
    if not share.height:
        return {}
    apart = spans.join(share, on="root")
    roots = apart.group_by("root").agg(
        pl.col("symbols").list.explode(keep_nulls=False, empty_as_null=False).unique().sort(),
        pl.col("first").min(), pl.col("last").max(), pl.col("near_share").first(),
    )
    return {
        r["root"]: {
            "symbols": r["symbols"], "first": _iso(r["first"]), "last": _iso(r["last"]),
            "near_share": round(float(r["near_share"]), 4), **_longest_pair(apart, r["root"]),
        }
        for r in roots.sort("root").iter_rows(named=True)
    }


def _longest_pair(spans: pl.DataFrame, root: str) -> dict:
    """pair and side_by_side_days of `root`'s contracts in `spans`: the two trading together longest."""
    own = spans.filter(pl.col("root") == root).select(
        symbol=pl.col("symbols").list.first(), first="first", last="last"
    )
    if own.height == 1:
        return {"pair": own.get_column("symbol").to_list(),
                "side_by_side_days": int(own.item(0, "last") - own.item(0, "first") + 1)}
    pairs = (
        own.join(own, how="cross", suffix="_b")
        .filter(pl.col("symbol") < pl.col("symbol_b"))
        .with_columns(days=pl.min_horizontal("last", "last_b") - pl.max_horizontal("first", "first_b") + 1)
        .sort("days", "symbol", "symbol_b", descending=[True, False, False])
        .row(0, named=True)
    )
    return {"pair": [pairs["symbol"], pairs["symbol_b"]], "side_by_side_days": max(int(pairs["days"]), 0)}


def _union_days(spans: pl.DataFrame) -> pl.DataFrame:
    """root, days: how many days the root's [first, last] spans cover together."""
    return (
        spans.sort("root", "first")
        .with_columns(_reach=pl.col("last").cum_max().over("root"))
        .with_columns(_block=(pl.col("first") > pl.col("_reach").shift(1).over("root") + 1).fill_null(True)
                      .cum_sum().over("root"))
        .group_by("root", "_block")
        .agg(pl.col("first").min(), pl.col("last").max())
        .group_by("root")
        .agg(days=(pl.col("last") - pl.col("first") + 1).sum())
    )


def _among(roots: tuple[str, ...]) -> pl.Expr:
    return pl.col("root").is_in(pl.Series(list(roots), dtype=pl.Utf8).implode())


def _month_start(expiry: pl.Expr) -> pl.Expr:
    """The first day (days since the epoch) of the month `expiry` (year * 12 + month)."""
    months = expiry - 1  # (year * 12 + month - 1)
    return pl.date(months // 12, months % 12 + 1, 1).cast(pl.Int32)


def _iso(day: int) -> str:
    return str(np.datetime64(int(day), "D"))


def decision_line(apart: dict[str, dict], symbols: int, series: int) -> str:
    """What `--contracts auto` decided, in one line: `45 symbols read as 45 series: CF0 and CU0 trade side by side
    for 6.0 years, ...; --contracts continuous ...`. `apart`: `roots_apart`'s entries (not empty)."""
    root = max(apart, key=lambda r: (len(apart[r]["pair"]), apart[r]["side_by_side_days"], r))
    facts = apart[root]
    years = facts["side_by_side_days"] / 365.25
    two = len(facts["pair"]) == 2
    share = f"on only {facts['near_share']:.0%} of {'their' if two else 'its'} days"
    near = "never" if facts["near_share"] == 0 else share
    if two:
        a, b = facts["pair"]
        why = (f"{a} and {b} trade side by side for {years:.1f} years, {near} within {NEAR_BEFORE // 12} years of the"
               " expiry their names read as, so they are not contracts of one market")
    else:
        why = (f"{facts['pair'][0]} trades for {years:.1f} years, {near} within {NEAR_BEFORE // 12} years of the"
               " expiry its name reads as, so it is not a futures contract")
    others = sorted(set(apart) - {root})
    more = f" (nor are those of root{'s' if len(others) > 1 else ''} {', '.join(others)})" if others else ""
    return (f"{symbols} symbol{'s' if symbols != 1 else ''} read as {series} series: {why}{more}; "
            "--contracts continuous reads them as contracts, one series per root")
