"""Load bars: read -> resolve symbols -> drop spreads -> validate/clean -> fold Sunday stubs -> pick contracts -> roll.

`load_bars` is the one entry point the rest of foxhunt uses; its `report` is saved with the run so a user can see what
was dropped, sorted, merged and rolled.
"""

from __future__ import annotations

import logging
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from foxhunt.data.bars.bad_rows import BadRows
from foxhunt.data.bars.chains import keep_apart
from foxhunt.data.bars.fill import fill_gaps
from foxhunt.data.bars.rolls import FRONT_MISSING, INSTRUMENT_CHANGE, VOLUME
from foxhunt.data.bars.series import build_series
from foxhunt.data.bars.sessions import check_session_grid
from foxhunt.data.bars.symbols import FUTURES_RE, drop_spreads, parse_futures, resolve_symbols
from foxhunt.data.bars.validate import (
    INSTRUMENT,
    check_ratio_adjust,
    clean_bars,
    merge_sunday_stubs,
    submit_sort_plan,
)
from foxhunt.data.config import DataConfig
from foxhunt.data.io.read import FileFormat, read_bars
from foxhunt.data.util import parallel
from foxhunt.data.util.median import exact_median
from foxhunt.data.util.order import run_starts
from foxhunt.data.util.runs import changes, run_lengths, run_starts_of
from foxhunt.errors import InputError

log = logging.getLogger("foxhunt.data")

ROLL_REASONS = {
    VOLUME: "{to} out-traded {from} for {n} session(s)",
    FRONT_MISSING: "{from} had no bars that session",
    INSTRUMENT_CHANGE: "the continuous file's instrument_id changed",
}

# What `_checks` reads of the parsed bars: it holds only these while build_series takes the others out
CHECKED = ("ts", "symbol", "instrument_id", "root", "open", "high", "low", "close", "file_idx", "row")
BAR_COLUMNS = (
    "series", "ts", "open", "high", "low", "close", "volume", "contract", "own_high", "own_low", "own_close", "roll_log_ratio",
    "roll_gap",
)


@dataclass(frozen=True)
class LoadedBars:
    """Clean bars ready for features.

    bars: sorted by (series, ts); columns series Utf8, ts Datetime("ns", "UTC"), open high low close volume Float64,
      contract Utf8 (the source symbol of each bar; equal to series for non-futures), own_high own_low own_close
      Float64 (the contract's unadjusted prices: features read these, never the adjusted ones), roll_log_ratio Float64
      (ln(new / old) of the roll taking effect on the bar, 0 elsewhere, null for a roll without a price pair), roll_gap
      Float64 (new - old of that roll, the same way; price_change's stitch); with --fill-gaps also a Boolean
      `filled` (True on the bars fill.py added).
    rolls: roll table [{root (the series), trade_date (ISO, first trade date on the new contract), from, to, gap (new -
      old close at the last common bar before the switch), reason ("volume": the next contract out-traded the front
      for `roll_confirm` sessions; "front_missing": the front had no bars that session; "instrument_change": a
      Databento continuous file changed instrument_id)}].
    report: JSON-able summary of what loading did (see `load_bars`).
    bad_rows: the bad rows dropped (bad_rows.BadRows) when the caller judges them (`load_raw(judge=False)`: a piece
      of a panel), else None.
    """

    bars: pl.DataFrame
    rolls: list[dict]
    report: dict
    bad_rows: BadRows | None = None


Roots = tuple[tuple[str, ...], tuple[str, ...]]  # a model's (roots kept apart, roots rolled): chains.keep_apart


def load_bars(cfg: DataConfig, grid_step_ns: int | None = None, roots: Roots | None = None) -> LoadedBars:
    """Read, clean, select contracts and back-adjust the files in `cfg.paths`.

    `grid_step_ns`: the bar interval --fill-gaps fills to (a saved model's `bar_spacing_ns`, so that prediction
    fills to the grid the model was trained on); None measures it on these bars. `roots`: what `--contracts auto`
    decided on a saved model's training bars (FittedTransform.contract_roots), so that its bars are read into the
    series it knows (and the checks' advice names no --calendar: the model's is fixed); None decides every root
    from these bars (chains.py).

    report keys: files [{path, size_bytes, rows, timestamps}], rows_read, duplicates_dropped (duplicates_conflicting
    of them with other values than the bar kept), nan_rows_dropped
    (missing or non-finite), inconsistent_rows_dropped (OHLC contradictions), rows_out_of_order, spreads_dropped,
    symbols (distinct symbols once spreads are dropped), contracts_kept, contracts_dropped, contracts_mode
    ("continuous" | "each" | "symbols"), roots_apart ({root: facts} of the roots whose symbols read as contracts but
    are not one market's, each symbol then its own series: chains.roots_apart; {} unless --contracts auto kept some
    apart), roots_rolled (the roots --contracts auto read as one market's contracts, sorted; [] in the other modes),
    adjust, roll_confirm,
    rolls_by_reason {reason: count}, bar_interval ("1m", "1h", "1d", ...), sunday_stubs_merged, bars_filled (None
    without --fill-gaps), timezone (how timestamps were read), closed_share (share of intraday bars inside the session
    halt or weekend; None for daily bars), series {name: {rows, start, end, contracts}}.
    Prices of zero or below are kept (see validate.py); `prepare` refuses them for a log target.
    Raises InputError for anything the user must fix.
    """
    raw, files = read_bars(cfg.paths, FileFormat.of(cfg), cfg.price_scale, since=cfg.since, until=cfg.until)
    return load_raw(raw, files, cfg, grid_step_ns, consume=True, roots=roots)


def load_raw(
    raw: pl.DataFrame, files: list[dict], cfg: DataConfig, grid_step_ns: int | None = None, *, consume: bool = False,
    distinct: pl.Series | None = None, judge: bool = True, roots: Roots | None = None,
) -> LoadedBars:
    """`load_bars` after reading: `raw` and `files` as `read.read_bars` returns them (or `read.read_frame` for a
    frame in memory), so that bars that never touch a file load exactly as a file's would.

    `consume=True` hands `raw` over: its columns are dropped from it in place once the first stage has read them,
    so that the caller's reference does not keep the file's bars alive beside every later stage's output (2M bars:
    175 MB); `raw` is then left without columns. `load_bars` reads its own frame and consumes it.
    `distinct`: raw's distinct symbols, when the caller has them without hashing every row's string
    (prepare/read_stage.py reads its bars' symbols as codes).
    `roots`: as `load_bars`' (given: the bars are read for that model, whose --calendar is fixed: the checks' advice
    names none). `judge=False`: the share of bad rows is judged by the caller, over the whole panel, from `bad_rows` (see
    validate.clean_bars): a piece's share is not the panel's.
    """
    paths = [f["path"] for f in files]
    rows_read = raw.height
    # How clean_bars will sort the rows, found on the second core meanwhile: it holds when the stages before it
    # leave the instrument columns and the rows as they are (the usual file).
    threaded = parallel.threads() > 1
    # It gives up early on a Databento file with spreads or other symbols that the stages before may drop; it is
    # handed over by pop(), so that no reference here keeps its arrays alive.
    plan = [submit_sort_plan(raw, _outrights)] if threaded else []
    if distinct is None:  # (D,) the file's symbols: hashed once for the two stages below
        distinct = raw.get_column("symbol").unique()
    df, keyed = resolve_symbols(raw, distinct)
    if consume:
        for c in raw.columns:
            raw.drop_in_place(c)
    del raw  # each stage's input is dropped as soon as its output exists: one copy of the bars at a time
    # Symbols change only where one was missing or is split by instrument_id: otherwise they are still `distinct`.
    unchanged = keyed == 0 and not distinct.null_count()
    df, spread_rows, spread_symbols = drop_spreads(df, distinct if unchanged else None)
    if df.height == 0:
        raise InputError(
            f"{paths[0]}: no outright bars left after dropping {spread_rows} spread rows; pass files with outright contracts"
        )
    if plan and (not unchanged or spread_rows):
        plan.pop().result()  # stale: waited for, so that clean_bars' own plan does not run beside it
    df, stats = clean_bars(df, paths, consume=True, plan=plan.pop() if plan else None, judge=judge,
                           columns=(cfg.timestamp_col, cfg.symbol_col))  # df: its own
    bad = stats.pop("bad_rows", None)
    df, stubs = merge_sunday_stubs(df)
    # (R,) the runs of one symbol (bars sorted by instrument): found once for every stage below that reads them
    runs = run_starts_of(df.get_column("symbol"))
    # The bar spacing and the checks only read the bars: they run on the second core, the spacing while this one
    # parses the futures symbols, the checks while build_series picks the contracts (build_series waits for them
    # before it gathers the series: until then they hold the columns they read). Their errors come first, as they
    # would one after the other.
    spaced = parallel.submit(spacing_ns, df.select(*INSTRUMENT, "ts"), runs)
    df = parse_futures(df, cfg.exchange_tz, runs=runs)
    # Symbols that read as contracts of a root but are not one market's (chains.py) are plain symbols from here on:
    # decided before the checks, which treat futures (back-adjusted by a ratio) apart from other series.
    df, apart, rolled = keep_apart(df, runs, *(roots or ((), ()))) if cfg.contracts == "auto" else (df, {}, [])
    checked = parallel.submit(_checks, df.select(CHECKED), files, paths, cfg, runs, spaced, roots is not None)
    # Row locators and ids are read by the checks only: build_series never sees them.
    df = df.drop("file_idx", "row", "instrument_id", "rtype", "by_instrument")
    try:
        bars, rolls, info = build_series(df, cfg.contracts, cfg.adjust, cfg.roll_confirm, runs=runs,
                                         ready=checked.result)
    except BaseException:
        checked.result()
        raise
    del df
    step, grid = checked.result()
    bars, filled = fill_gaps(bars, cfg.exchange_tz, grid_step_ns, cfg.calendar) if cfg.fill_gaps else (bars, None)
    dropped = sorted(set(info["contracts_dropped"]) | set(spread_symbols))
    report = {
        "files": files,
        "rows_read": rows_read,
        **stats,
        "spreads_dropped": spread_rows,
        "symbols": len(info["contracts_kept"]) + len(info["contracts_dropped"]),
        "contracts_kept": info["contracts_kept"],
        "contracts_dropped": dropped,
        "contracts_mode": info["contracts_mode"],
        "roots_apart": apart,
        "roots_rolled": rolled,
        "adjust": cfg.adjust if info["contracts_mode"] == "continuous" else "none",
        "roll_confirm": cfg.roll_confirm,
        "rolls_by_reason": {k: sum(r["reason"] == k for r in rolls) for k in sorted({r["reason"] for r in rolls})},
        "bar_interval": bar_interval(step),
        "sunday_stubs_merged": stubs,
        **grid,
        "bars_filled": filled,
        "series": _series_summary(bars),
    }
    for r in rolls:
        why = ROLL_REASONS[r["reason"]].format(n=cfg.roll_confirm, **r)
        log.info("roll %s on %s: %s -> %s (%s), gap %.4g", r["root"], r["trade_date"], r["from"], r["to"], why, r["gap"])
    return LoadedBars(bars=bars, rolls=rolls, report=report, bad_rows=bad)


def _outrights(symbols: pl.Series) -> bool:
    """Whether every symbol is a futures outright: resolve_symbols and drop_spreads then leave the rows as they are."""
    return bool(symbols.str.contains(FUTURES_RE).all())


def _checks(df: pl.DataFrame, files: list[dict], paths: list[str], cfg: DataConfig, runs: np.ndarray,
            spaced: Future[float | None], model: bool = False) -> tuple[float | None, dict]:
    """The checks of parsed bars that only read them: (bar spacing in ns, from `spaced`; `check_session_grid`'s
    report entries, `model`: read for a saved model); raises InputError for bars a user must fix."""
    step = spaced.result()
    grid = check_session_grid(df, files, cfg.timezone, cfg.exchange_tz, step, runs=runs, calendar=cfg.calendar,
                              model=model)
    if cfg.adjust == "ratio" and cfg.contracts != "each":  # continuous futures are back-adjusted across rolls
        check_ratio_adjust(df, paths, where=pl.col("root").is_not_null())
    return step, grid


def spacing_ns(df: pl.DataFrame, runs: np.ndarray | None = None) -> float | None:
    """The median spacing in ns of consecutive bars within an instrument; None without two bars of one instrument.

    `df` is sorted by instrument and ts (clean_bars), so a gap is a difference of neighbouring rows of one instrument.
    `runs` (R,): the first row of each run of one symbol, when the caller has them (`runs.run_starts_of`):
    then only instrument_id is compared row by row.
    """
    if runs is None:
        first = run_starts(df, INSTRUMENT)  # (N,) the first row of each instrument
    else:
        first = changes(df.get_column("instrument_id"))
        first[runs] = True
    gaps = np.diff(df.get_column("ts").dt.epoch("ns").to_numpy())[~first[1:]]
    return exact_median(gaps) if len(gaps) else None


def bar_interval(step_ns: float | None) -> str:
    """The bar spacing `step_ns` (see `spacing_ns`) as "1s", "1m", "1h", "1d" ("?" with one bar)."""
    if step_ns is None:
        return "?"
    ns = int(step_ns) // 1000 * 1000  # whole microseconds, as the spacing was once read through a timedelta
    for unit, size in (
        ("d", 86_400 * 10**9),
        ("h", 3_600 * 10**9),
        ("m", 60 * 10**9),
        ("s", 10**9),
        ("ms", 10**6),
    ):
        if ns >= size and ns % size == 0:
            return f"{ns // size}{unit}"
    return f"{ns}ns"


def _series_summary(bars: pl.DataFrame) -> dict:
    """{series: {rows, start, end, contracts}}, series in order of their first bar, contracts in order of theirs."""
    # (N,) each: the two columns are compared on two threads
    new_series, new_contract = parallel.map_threads(lambda c: run_starts(bars, (c,)), ("series", "contract"))
    starts = np.flatnonzero(new_series)  # (S,) bars come sorted by series: one run each
    names = bars.get_column("series").gather(starts).to_list()
    if len(set(names)) < len(names):  # a series in several runs (bars built by hand): group them
        return _grouped_summary(bars)
    ts = bars.get_column("ts").dt.epoch("ns").to_numpy()
    bounds = (
        pl.Series(np.concatenate([np.minimum.reduceat(ts, starts), np.maximum.reduceat(ts, starts)]) if len(ts) else ts)
        .cast(pl.Datetime("ns", "UTC"))
        .to_list()
    )
    at = np.flatnonzero(new_series | new_contract)  # (R,) runs of one contract, a few per roll
    contracts: dict[str, list] = {n: [] for n in names}
    for name, contract in zip(
        bars.get_column("series").gather(at).to_list(), bars.get_column("contract").gather(at).to_list(), strict=True
    ):
        if contract not in contracts[name]:
            contracts[name].append(contract)
    rows = run_lengths(starts, len(ts)).tolist()
    s = len(names)
    return {
        n: {"rows": rows[i], "start": bounds[i].isoformat(), "end": bounds[s + i].isoformat(), "contracts": contracts[n]}
        for i, n in enumerate(names)
    }


def _grouped_summary(bars: pl.DataFrame) -> dict:
    rows = (
        bars.group_by("series", maintain_order=True)
        .agg(
            rows=pl.len(),
            start=pl.col("ts").min(),
            end=pl.col("ts").max(),
            contracts=pl.col("contract").unique(maintain_order=True),
        )
        .to_dicts()
    )
    return {
        r["series"]: {
            "rows": r["rows"],
            "start": r["start"].isoformat(),
            "end": r["end"].isoformat(),
            "contracts": r["contracts"],
        }
        for r in rows
    }


SUMMED = ("rows_read", "nan_rows_dropped", "inconsistent_rows_dropped", "duplicates_dropped", "rows_out_of_order",
          "spreads_dropped", "sunday_stubs_merged", "symbols", "duplicates_conflicting")


def merge_reports(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """The load report (load.load_bars) of the whole panel from its pieces' reports, pieces in series order.

    Counts add up; lists of contracts and the series join; the share of bars inside the session halt is merged
    from the counts behind each piece's share. `bar_interval` is each piece's (pieces of one bar size agree)."""
    first = reports[0]
    out = dict(first)
    out["files"] = [dict(f, rows=sum(r["files"][i]["rows"] for r in reports)) for i, f in enumerate(first["files"])]
    for key in SUMMED:
        if key in first:
            out[key] = sum(r[key] for r in reports)
    out["contracts_kept"] = [c for r in reports for c in r["contracts_kept"]]
    out["contracts_dropped"] = sorted({c for r in reports for c in r["contracts_dropped"]})
    out["roots_apart"] = {k: v for r in reports for k, v in r.get("roots_apart", {}).items()}  # a root: one piece
    out["roots_rolled"] = sorted({k for r in reports for k in r.get("roots_rolled", [])})
    reasons = sorted({k for r in reports for k in r["rolls_by_reason"]})
    out["rolls_by_reason"] = {k: sum(r["rolls_by_reason"].get(k, 0) for r in reports) for k in reasons}
    out["series"] = {k: v for r in reports for k, v in r["series"].items()}
    if first.get("closed_share") is not None:
        kept = [_checked_rows(r) for r in reports]
        closed = sum(round(r["closed_share"] * n) for r, n in zip(reports, kept, strict=True))
        out["closed_share"] = float(closed / sum(kept)) if sum(kept) else 0.0
    return out


def _checked_rows(report: dict[str, Any]) -> int:
    """The bars a piece's session-grid check saw: those read, less spreads, dropped rows and merged stubs."""
    return report["rows_read"] - sum(report.get(k, 0) for k in SUMMED[1:3]) - report.get("duplicates_dropped", 0) \
        - report.get("spreads_dropped", 0) - report.get("sunday_stubs_merged", 0)
