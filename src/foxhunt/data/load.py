"""Load bars: read -> resolve symbols -> drop spreads -> validate/clean -> fold Sunday stubs -> pick contracts -> roll.

`load_bars` is the one entry point the rest of foxhunt uses; its `report` is saved with the run so a user can see what
was dropped, sorted, merged and rolled.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import polars as pl

from foxhunt.data.config import DataConfig
from foxhunt.data.contracts import build_series, drop_spreads, parse_futures, resolve_symbols
from foxhunt.data.fill import fill_gaps
from foxhunt.data.read import read_bars
from foxhunt.data.validate import INSTRUMENT, clean_bars, merge_sunday_stubs
from foxhunt.errors import InputError

log = logging.getLogger("foxhunt.data")

BAR_COLUMNS = ("series", "ts", "open", "high", "low", "close", "volume", "contract")


@dataclass(frozen=True)
class LoadedBars:
    """Clean bars ready for features.

    bars: sorted by (series, ts); columns series Utf8, ts Datetime("ns", "UTC"), open high low close volume Float64,
      contract Utf8 (the source symbol of each bar; equal to series for non-futures); with --fill-gaps also a Boolean
      `filled` (True on the bars fill.py added).
    rolls: roll table [{root, trade_date (ISO, first trade date on the new contract), from, to, gap (new - old close at
      the last common bar before the switch)}].
    report: JSON-able summary of what loading did (see `load_bars`).
    """

    bars: pl.DataFrame
    rolls: list[dict]
    report: dict


def load_bars(cfg: DataConfig, grid_step_ns: int | None = None) -> LoadedBars:
    """Read, clean, select contracts and back-adjust the files in `cfg.paths`.

    `grid_step_ns`: the bar interval --fill-gaps fills to (a saved model's `bar_spacing_ns`, so that prediction
    fills to the grid the model was trained on); None measures it on these bars.

    report keys: files [{path, size_bytes, rows}], rows_read, duplicates_dropped, nan_rows_dropped, rows_out_of_order,
    spreads_dropped, contracts_kept, contracts_dropped, contracts_mode ("continuous" | "each" | "symbols"), adjust,
    bar_interval ("1m", "1h", "1d", ...), sunday_stubs_merged,
    bars_filled (None without --fill-gaps), series {name: {rows, start, end, contracts}}.
    Raises InputError for anything the user must fix.
    """
    raw, files = read_bars(cfg.paths, cfg.timestamp_col, cfg.symbol_col)
    paths = [f["path"] for f in files]
    df, _ = resolve_symbols(raw)
    df, spread_rows, spread_symbols = drop_spreads(df)
    if df.height == 0:
        raise InputError(
            f"{paths[0]}: no outright bars left after dropping {spread_rows} spread rows; pass files with outright contracts"
        )
    df, stats = clean_bars(df, paths)
    df, stubs = merge_sunday_stubs(df)
    df = parse_futures(df, cfg.exchange_tz)
    bars, rolls, info = build_series(df, cfg.contracts, cfg.adjust)
    bars, filled = fill_gaps(bars, cfg.exchange_tz, grid_step_ns) if cfg.fill_gaps else (bars, None)
    dropped = sorted(set(info["contracts_dropped"]) | set(spread_symbols))
    report = {
        "files": files,
        "rows_read": raw.height,
        **stats,
        "spreads_dropped": spread_rows,
        "contracts_kept": info["contracts_kept"],
        "contracts_dropped": dropped,
        "contracts_mode": info["contracts_mode"],
        "adjust": cfg.adjust if info["contracts_mode"] == "continuous" else "none",
        "bar_interval": bar_interval(df),
        "sunday_stubs_merged": stubs,
        "bars_filled": filled,
        "series": _series_summary(bars),
    }
    for r in rolls:
        log.info(
            "roll %s on %s: %s -> %s, gap %.4g", r["root"], r["trade_date"], r["from"], r["to"], r["gap"]
        )
    return LoadedBars(bars=bars, rolls=rolls, report=report)


def bar_interval(df: pl.DataFrame) -> str:
    """The median spacing of consecutive bars within an instrument, as "1s", "1m", "1h", "1d" ("?" with one bar)."""
    step = df.select(pl.col("ts").diff().over(INSTRUMENT).median()).item()
    if step is None:
        return "?"
    ns = int(step.total_seconds() * 1e9) if hasattr(step, "total_seconds") else int(step)
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
