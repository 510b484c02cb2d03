"""The data summary: a JSON-able dict saved with each run (data_summary.json) and its short text form.

Built once by the pipeline (data/prepare) from the WindowFacts of each piece, merged; `format_summary` is what the
CLI prints and `foxhunt inspect` shows.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import numpy as np

from foxhunt.data.features.schema import FeatureSchema, Role
from foxhunt.data.util.runs import value_runs

if TYPE_CHECKING:
    from foxhunt.data.dataset.windows import SplitResult

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
CHUNK = 1 << 18  # windows read at a time: the summary runs when the most memory is in use, its temporaries stay small
SPLITS = ("train", "val", "test")
# What the loader repaired or measured (load.load_bars report keys), shown by `foxhunt inspect`.
CHECKS = (
    "nan_rows_dropped",
    "inconsistent_rows_dropped",
    "duplicates_dropped",
    "duplicates_conflicting",
    "rows_out_of_order",
    "timezone",
    "closed_share",
)


def iso(ns: int) -> str:
    """ns since the epoch as an ISO-8601 UTC string ('2024-03-07T23:00:00Z')."""
    return (EPOCH + timedelta(microseconds=int(ns) // 1000)).isoformat().replace("+00:00", "Z")


def _plain(v: Any) -> Any:
    """JSON-able copy of a report value (dates and other objects become strings)."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return str(v)


def _interval(spacing_ns: int) -> str:
    s = spacing_ns // 10**9
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if s >= size and s % size == 0:
            return f"{s // size}{unit}"
    return f"{spacing_ns}ns"


@dataclass(frozen=True)
class WindowFacts:
    """What the summary reads of the rows and windows, as counts and extremes that merge over consecutive groups of
    series (`merge_facts`): the pipeline (data/prepare) takes them from each piece as it writes it, without the
    panel's arrays or torch.

    Per series (S,): real rows, first and last real timestamp, static code, windows. Per split: windows, (first, last)
    timestamp of the first forecast bar (None without a window), purged windows. `off_grid`: off_grid_windows."""

    rows: np.ndarray  # (S,) int64
    start: np.ndarray  # (S,) int64 ns
    end: np.ndarray  # (S,) int64 ns
    code: np.ndarray  # (S,) int64
    windows: np.ndarray  # (S,) int64
    split_windows: dict[str, int]
    ranges: dict[str, tuple[int, int] | None]
    purged: dict[str, int]
    off_grid: int


def window_facts(ts: np.ndarray, real: np.ndarray, sidx: np.ndarray, code: np.ndarray, starts: np.ndarray, s: int,
                 e: int, split: SplitResult, off_grid: int) -> WindowFacts:
    """WindowFacts of rows (N,) sorted by series (timestamps `ts`, `real`, series index `sidx` in [0, s), static
    `code`) and windows `starts` (W,) of encoder length `e`, split by `split`; `off_grid` counted by the caller."""
    per_window = np.zeros(s, dtype=np.int64)  # windows per series, counted a chunk of windows at a time
    for lo in range(0, len(starts), CHUNK):
        per_window += np.bincount(sidx[starts[lo : lo + CHUNK]], minlength=s)
    per_series = np.array(_real_rows(sidx, real, ts, s), dtype=np.int64).reshape(s, 4)  # (S, 4)
    first_fc = ts[e:][starts] if len(starts) else np.empty(0, np.int64)  # (W,) ts[starts + E]
    return WindowFacts(
        rows=per_series[:, 0], start=per_series[:, 1], end=per_series[:, 2],
        code=code[per_series[:, 3]].astype(np.int64), windows=per_window,
        split_windows={k: int(len(split.ids[k])) for k in SPLITS},
        ranges={k: _span(first_fc, split.ids[k]) if len(split.ids[k]) else None for k in SPLITS},
        purged={k: int(v) for k, v in split.purged.items()}, off_grid=int(off_grid),
    )


def merge_facts(parts: list[WindowFacts]) -> WindowFacts:
    """The WindowFacts of consecutive groups of series (their windows numbered one group after the other)."""
    ranges = {k: [r for p in parts if (r := p.ranges[k]) is not None] for k in SPLITS}
    return WindowFacts(
        **{f: np.concatenate([getattr(p, f) for p in parts]) for f in ("rows", "start", "end", "code", "windows")},
        split_windows={k: sum(p.split_windows[k] for p in parts) for k in SPLITS},
        ranges={k: (min(a for a, _ in v), max(b for _, b in v)) if v else None for k, v in ranges.items()},
        purged={k: sum(p.purged.get(k, 0) for p in parts) for k in parts[0].purged},
        off_grid=sum(p.off_grid for p in parts),
    )


def data_summary(
    loaded: Any,
    schema: FeatureSchema,
    facts: WindowFacts,
    series_names: tuple[str, ...] | list[str],
    cuts: tuple[int, int | None] | None,
    for_prediction: bool,
    roll_bars: int,
    spacing_ns: int,
    calendar: str | None = None,
) -> dict[str, Any]:
    """Rows, series, contracts, rolls, windows per split, purged windows, split date ranges, features by role.
    `calendar`: the run's --calendar (None without it), whose sessions the forecast grid follows."""
    report = dict(getattr(loaded, "report", {}) or {})
    series = {}
    for i, name in enumerate(series_names):
        series[name] = {
            "rows": int(facts.rows[i]),
            "start": iso(facts.start[i]),
            "end": iso(facts.end[i]),
            "code": int(facts.code[i]),
            "windows": int(facts.windows[i]),
        }
        if name in report.get("series", {}) and "contracts" in report["series"][name]:
            series[name]["contracts"] = _plain(report["series"][name]["contracts"])
    n_real = int(facts.rows.sum())
    return {
        "mode": "predict" if for_prediction else "train",
        "rows_read": int(report.get("rows_read", n_real)),
        "rows": n_real,
        "files": _plain(report.get("files")),
        "date_range": {"start": iso(facts.start.min()), "end": iso(facts.end.max())},
        "bar_interval": report.get("bar_interval") or _interval(spacing_ns),
        "checks": {k: _plain(report.get(k)) for k in CHECKS if k in report},
        "bars_filled": report.get("bars_filled"),  # None: --fill-gaps was off
        "windows_with_gaps": facts.off_grid,
        "calendar": calendar,
        "intraday": bool(schema.extra.get("intraday", False)),
        "series": series,
        "symbols": report.get("symbols"),
        "roots_apart": _plain(report.get("roots_apart") or {}),
        "contracts_kept": _plain(report.get("contracts_kept")),
        "contracts_dropped": _plain(report.get("contracts_dropped")),
        "rolls": [{k: _plain(v) for k, v in r.items()} for r in getattr(loaded, "rolls", [])],
        "roll_bars": int(roll_bars),
        "target": schema.target,
        "scaling": schema.extra.get("scaling"),
        "encoder_length": schema.encoder_length,
        "horizon": schema.horizon,
        "train_end": iso(cuts[0]) if cuts else None,
        "val_end": iso(cuts[1]) if cuts and cuts[1] is not None else None,
        "windows": dict(facts.split_windows),
        "purged": dict(facts.purged),
        "ranges": {k: dict(zip(("first", "last"), map(iso, r), strict=True)) if r is not None else None
                   for k, r in facts.ranges.items()},
        "features": {r.value: [f.name for f in schema.features if f.role == r] for r in Role},
    }


def _span(values: np.ndarray, ids: np.ndarray) -> tuple[int, int]:
    """(min, max) of values[ids] for ids (K,) not empty, taken CHUNK ids at a time."""
    lo_hi = []
    for lo in range(0, len(ids), CHUNK):
        part = values[ids[lo : lo + CHUNK]]
        lo_hi.append((int(part.min()), int(part.max())))
    return min(a for a, _ in lo_hi), max(b for _, b in lo_hi)


def _real_rows(sidx: np.ndarray, real: np.ndarray, ts: np.ndarray, s: int) -> list[tuple[int, int, int, int]]:
    """Per series: (real rows, first and last real timestamp, row of its first real bar). Rows grouped by series (one
    run each, as prepared) are read run by run; otherwise every series masks all rows."""
    runs = value_runs(sidx, s + 1)
    if runs is not None and len(runs) == s and sorted(i for _, _, i in runs) == list(range(s)):
        out = [(0, 0, 0, 0)] * s
        for lo, hi, i in runs:
            if real[lo:hi].all():  # training rows are all real: the run itself, no positions to gather through
                out[i] = (hi - lo, int(ts[lo:hi].min()), int(ts[lo:hi].max()), lo)
                continue
            at = lo + np.flatnonzero(real[lo:hi])  # (rows of the series,)
            out[i] = (len(at), int(ts[at].min()), int(ts[at].max()), int(at[0]))
        return out
    out = []
    for i in range(s):  # one pass per series (a handful), not per row
        at = np.flatnonzero(real & (sidx == i))
        out.append((len(at), int(ts[at].min()), int(ts[at].max()), int(at[0])))
    return out


def _count(v: Any) -> str:
    """'2 (ESH4, ESM4)' for a short list of names, '12' for a long one or a number."""
    if isinstance(v, (list, tuple)):
        return f"{len(v)} ({', '.join(map(str, v))})" if 0 < len(v) <= 4 else str(len(v))
    return "-" if v is None else str(v)


def _checks_text(c: dict[str, Any]) -> str:
    """'dropped 2 missing/non-finite, 1 inconsistent (OHLC) and 0 duplicate rows, sorted 0; times read as ...'."""
    text = (
        f"dropped {c.get('nan_rows_dropped', 0):,} missing/non-finite, {c.get('inconsistent_rows_dropped', 0):,}"
        f" inconsistent (OHLC) and {c.get('duplicates_dropped', 0):,} duplicate rows"
        + (f" ({c['duplicates_conflicting']:,} with other values)" if c.get("duplicates_conflicting") else "")
        + f", sorted {c.get('rows_out_of_order', 0):,}"
    )
    if c.get("timezone"):
        text += f"; times read as {c['timezone']}"
    share = c.get("closed_share")
    text += (
        f", {100 * share:.1f}% of bars in the session halt/weekend"
        if share is not None
        else ", session halt not checked (daily bars)"
        if "closed_share" in c
        else ""
    )
    return text


# Windows missing bars above this share: the forecast grid (whose sessions --calendar chooses) is likely not the
# market's, as for a 24/7 or a stock market read on CME's grid, rather than the market being quiet.
CALENDAR_HINT_SHARE = 0.2


def windows_text(summary: dict[str, Any], splits: bool = True) -> str:
    """'49,197 windows, 48,849 of them in the splits (train 24,472 / val 12,257 / test 12,120); 348 purged at the split
    boundaries': every window of the series (the per-series counts; a store's `starts`) and those the splits hold
    (the gaps line's share), as prepare says them; without `splits` (inspect, whose per-split lines follow) the
    totals only. A purged window's encoder and forecast span straddle a split boundary; with a rolling training
    window (backtest) those forecasting before its start are in none."""
    s = summary
    total = sum(info["windows"] for info in s["series"].values())
    used, purged = sum(s["windows"].values()), sum(s.get("purged", {}).values())
    counts = " / ".join(f"{k} {s['windows'][k]:,}" for k in SPLITS)
    each = f" ({counts})" if splits else ""
    if used >= total:  # no window left out of the splits
        return f"{used:,} windows{each}"
    out = [f"{purged:,} purged at the split boundaries"] if purged else []
    if total - used - purged:
        out.append(f"{total - used - purged:,} before the training window's start")
    return f"{total:,} windows, {used:,} of them in the splits{each}; {' and '.join(out)}"


def contracts_text(summary: dict[str, Any]) -> str | None:
    """`45 symbols read as 45 series: ...`: what `--contracts auto` decided where it kept the symbols of a
    root apart (bars/chains.py), and how to override it; None where it kept none apart."""
    apart = summary.get("roots_apart")
    if not apart:
        return None
    from foxhunt.data.bars.chains import decision_line

    n = summary.get("symbols") or sum(len(v["symbols"]) for v in apart.values())
    return decision_line(apart, n, len(summary["series"]))


def _calendar_hint(calendar: str | None) -> str:
    """Why so many windows may miss bars: the grid's sessions. `--calendar` is suggested only when not given."""
    if calendar is None:
        return "; so many may mean the grid's sessions are not the market's: see --calendar NAME (e.g. 24/7, XNYS)"
    return f"; so many may mean the market does not keep the sessions of --calendar {calendar} (its days or hours)"


def _utc(iso_time: str) -> str:
    """A summary's time (`iso`, UTC) to the minute, saying its zone: the bars may have been read in another one."""
    return f"{iso_time[:16]} UTC"


def format_summary(summary: dict[str, Any]) -> str:
    """A compact multi-line text: data, series, features, target, and one line per split."""
    s = summary
    n_series = len(s["series"])
    rolls = s.get("rolls", [])
    roll_text = ", ".join(
        f"{r.get('trade_date')} {r.get('from')}->{r.get('to')}" + (f" {r['reason']}" if r.get("reason") else "")
        for r in rolls[:3]
    )
    roll_text = f"{len(rolls)} rolls" + (
        f" ({roll_text}{', ...' if len(rolls) > 3 else ''})" if rolls else ""
    )
    lines = [
        f"data      {s['rows_read']:,} rows read, {s['rows']:,} used in {n_series} series, {s['bar_interval']} bars; "
        f"contracts kept {_count(s.get('contracts_kept'))}, dropped {_count(s.get('contracts_dropped'))}; {roll_text}",
    ]
    contracts = contracts_text(s)
    if contracts:
        lines.append("contracts " + contracts)
    if s.get("checks"):
        lines.append("checks    " + _checks_text(s["checks"]))
    filled, gaps, n_windows = s.get("bars_filled"), s.get("windows_with_gaps", 0), sum(s["windows"].values())
    if filled is not None:
        lines.append(f"filled    {filled:,} missing bars ({100 * filled / max(1, s['rows']):.1f}% of rows, --fill-gaps)")
    if gaps:
        lines.append(
            f"gaps      {gaps:,} of the {n_windows:,} windows in the splits ({100 * gaps / max(1, n_windows):.0f}%) "
            "miss bars in their "
            "forecast span, so step k is not k bar intervals ahead"
            + ("; see --fill-gaps" if s.get("intraday") and filled is None else "")
            + (_calendar_hint(s.get("calendar")) if gaps > CALENDAR_HINT_SHARE * n_windows else "")
        )
    for name, info in s["series"].items():
        lines.append(
            f"series    {name}: {info['rows']:,} rows {_utc(info['start'])} .. {_utc(info['end'])}, "
            f"{info['windows']:,} windows, code {info['code']}"
            + (" (unseen in training)" if info["code"] == 0 else "")
        )
    feats = s["features"]
    lines.append("features  " + " | ".join(f"{role}: {', '.join(feats[role]) or '-'}" for role in feats))
    if s.get("inputs"):
        from foxhunt.data.features.inputs import summary_lines

        lines.extend(summary_lines(s["inputs"]))
    lines.append(
        f"target    {s['target']}, scaling {s['scaling']}, encoder {s['encoder_length']}, horizon {s['horizon']}"
        + (f", train cut {_utc(s['train_end'])}" if s.get("train_end") else "")
        + (f", val end {_utc(s['val_end'])}" if s.get("val_end") else "")
    )
    lines.append("windows   " + windows_text(s, splits=False))  # each split's count is on its own line below
    for k in SPLITS:
        r = s["ranges"].get(k)
        span = f"  first forecast bar {_utc(r['first'])} .. {_utc(r['last'])}" if r else ""
        purged = s["purged"].get(k, 0)
        lines.append(
            f"{k:<9} {s['windows'][k]:>10,} windows{span}" + (f"  ({purged:,} purged)" if purged else "")
        )
    return "\n".join(lines)
