"""The user's own inputs: which columns a run takes, where each comes from, how it is scaled, and what a saved model
keeps of them.

- observed (--observed): a column of the bar files or of a --covariates file, joined to each bar as of its time
  (covariates.asof_join: the last value stamped at or before the bar), standardized on the training rows, and
  appended to the observed inputs after foxhunt's own (scaling.observed_names reads them from the scalers). A
  column of text (or one --categorical names) is categorical instead: coded by timed_categories.py.
- static (--static, --categorical): one value per series, of the bar files or a --covariates file (static.py),
  real (standardized over the training series) or categorical (a vocabulary of the training series' values).
- known (--known, --events): functions of a timestamp (and, for events keyed to a series or contract, of the key
  a series reads: events.key_of), read at the bars' own times and at every forecast step after an origin
  (covariates.known_at, events.event_features), so the decoder sees what is scheduled and never a later bar. They are appended to the known inputs after the calendar's; a categorical one
  (text, or named by --categorical) is coded by timed_categories.py.

A model saves `fit_inputs`' FittedInputs (fitted.py; FittedTransform.inputs): the names, the event calendar itself
and the known inputs' mean and std, so forecasting takes no events file; known covariates are read again from the
run's files (or the ones a forecast names), as their future values are what a forecast needs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from foxhunt.data.features import static
from foxhunt.data.features.bar_features import move_columns
from foxhunt.data.features.covariates import (
    CovariateTable,
    asof_join,
    coverage,
    frame_bar_columns,
    known_at,
    pick,
    read_bar_columns,
    read_covariates,
)
from foxhunt.data.features.events import EventCalendar, event_columns, event_features, read_events, row_keys
from foxhunt.data.features.fitstats import moments_of, select, stats
from foxhunt.data.features.fitted import FittedInputs, Moments, Scalers
from foxhunt.data.io.discover import absolute_path
from foxhunt.data.util.listing import listing
from foxhunt.errors import InputError

if TYPE_CHECKING:
    from foxhunt.data.config import DataConfig

# Column names a user input may not take: the loaded bars' own and foxhunt's inputs, which the joined column would
# overwrite (or be confused with in an importance table).
RESERVED = frozenset({
    "series", "ts", "contract", "open", "high", "low", "close", "volume", "own_high", "own_low", "own_close",
    "roll_log_ratio", "roll_gap", "filled", "first", "roll", "target", "log_return", "log_range", "log_volume",
    "log_vol", "price_change", "price_range", "shock", "range_shock", "log_vol_fast", "log_vol_slow",
    "log_vol_season", "tod_vol", "relative_time", "key", "range_k",
})
MAX_BAD_FRACTION = 0.01  # more bars than this with a NaN, inf or missing user input stop the run


def check_names(observed: Sequence[str], known: Sequence[str], static: Sequence[str] = (),
                categorical: Sequence[str] = ()) -> None:
    """InputError unless the declared names are distinct, not foxhunt's own, and each in one role; --categorical
    names --static, --observed or --known columns only."""
    for flag, names in (("--observed", observed), ("--known", known), ("--static", static),
                        ("--categorical", categorical)):
        for n in names:
            if not n or n != n.strip():
                raise InputError(f"{flag} {n!r}: not a column name; give names separated by commas, e.g. {flag} vix,rate")
            if n in RESERVED:
                raise InputError(f"{flag} {n}: the name is one of foxhunt's own columns or inputs; rename the column")
        dup = sorted({n for n in names if list(names).count(n) > 1})
        if dup:
            raise InputError(f"{flag} names {dup[0]!r} twice; name each column once")
    for (fa, a), (fb, b) in ((("--observed", observed), ("--known", known)),
                             (("--observed", observed), ("--static", static)),
                             (("--known", known), ("--static", static))):
        both = sorted(set(a) & set(b))
        if both:
            raise InputError(f"{both[0]!r} is named by both {fa} and {fb}; an input has one role")
    loose = sorted(set(categorical) - set(static) - set(observed) - set(known))
    if loose:
        raise InputError(f"--categorical {loose[0]}: not a --static, --observed or --known column; name it in one of "
                         "them too")


@dataclass(frozen=True)
class Sources:
    """The declared inputs with their files read: the tables the observed columns join from, the context series
    and the known inputs' sources (covariate tables, the event calendar)."""

    observed: tuple[str, ...]  # the real observed columns
    known: tuple[str, ...]  # the real known covariate columns (the events' columns come from `events`)
    tables: dict[str, CovariateTable]  # column -> the table it is read from
    events: EventCalendar | None
    from_bars: tuple[str, ...] = ()  # the observed and static columns read from the bar files themselves
    context: tuple[str, ...] = ()  # series names (--context)
    context_columns: tuple[str, ...] = ()  # their inputs' names: NQ_log_return, ...
    static: tuple[str, ...] = ()  # --static columns
    static_kinds: dict[str, str] | None = None  # column -> "real" | "categorical" (static.kinds)
    observed_cat: tuple[str, ...] = ()  # the categorical observed columns (timed_categories.py)
    known_cat: tuple[str, ...] = ()  # the categorical known columns

    def of(self, columns: Sequence[str]) -> list[CovariateTable]:
        """The tables `columns` are read from, each once (a table holding two of them is one table)."""
        return list({id(self.tables[c]): self.tables[c] for c in columns}.values())

    @property
    def observed_names(self) -> tuple[str, ...]:
        """Every observed input of the user's, in column order: the declared columns, then the context's."""
        return self.observed + self.context_columns

    @property
    def known_names(self) -> tuple[str, ...]:
        return self.known + (event_columns(self.events) if self.events is not None else ())


def declared(observed: Sequence[str], known: Sequence[str], events: str | None, context: Sequence[str] = (),
             static_cols: Sequence[str] = ()) -> bool:
    return bool(observed or known or events or context or static_cols)


def context_inputs(target: str) -> tuple[str, ...]:
    """The inputs of its own a --context series gives: its move, range and volume (features.py's, in the target's
    units) and its trailing volatility (scaling.trailing's log_vol), in column order."""
    return (*move_columns(target), "log_volume", "log_vol")


def context_names(context: Sequence[str], target: str) -> tuple[str, ...]:
    """The inputs each --context series gives every series (`context_inputs`), named SERIES_column."""
    return tuple(f"{c}_{col}" for c in context for col in context_inputs(target))


BarReader = Callable[[list[str], set[str]], CovariateTable]  # (columns, those that must be numbers) -> their table


@dataclass(frozen=True)
class InputNames:
    """The user's inputs a run reads, by role: the options' for a new run, a saved model's for a fitted one (whose
    names differ from the options': its categorical columns, the bar columns a live update carries itself)."""

    observed: tuple[str, ...] = ()
    known: tuple[str, ...] = ()
    static: tuple[str, ...] = ()
    categorical: tuple[str, ...] = ()  # columns taken as categories whatever their type
    context: tuple[str, ...] = ()  # --context series
    target: str = "log_return"  # the target whose moves a context series gives (context_names)


def load_sources(cfg: DataConfig, names: InputNames, saved_events: EventCalendar | None = None,
                 bar_frame: tuple[str, pl.DataFrame] | None = None, fitted: bool = False,
                 bar_reader: BarReader | None = None) -> Sources | None:
    """Read what the declared inputs `names` need: each of `cfg`'s --covariates entries as a table, the bar files'
    own columns for observed and static names no covariate file has, and `cfg`'s events file (or `saved_events`,
    the calendar a model saved). None: nothing declared. A column of text is categorical too, unless `fitted` (a
    saved model's inputs: `names.categorical` names its categorical columns, the other observed and known ones must
    be numbers, as in training). `bar_frame`: (name, frame) of bars in memory, whose own columns stand for the bar
    files'. `bar_reader`: reads the bar files' columns in place of read_bar_columns (a pieced prepare reads them in
    its pieces: prepare/bar_columns.py). `cfg.timezone`, `cfg.date_format`: how every file's times are read
    (normalise.parse_time)."""
    n, timezone, date_format = names, cfg.timezone, cfg.date_format
    if not declared(n.observed, n.known, cfg.events or saved_events, n.context, n.static):
        return None
    real = {*n.observed, *n.known} - set(n.categorical) if fitted else set()  # must be numbers
    tables = [read_covariates([c], timezone=timezone, real=real, date_format=date_format) for c in cfg.covariates]
    have = {c for t in tables for c in t.columns}
    from_bars = [c for c in (*n.observed, *n.static) if c not in have]
    for c in n.known:
        if c not in have:
            where = f" (the --covariates files hold {', '.join(sorted(have))})" if have else ""
            raise InputError(f"--known {c}: no --covariates file has this column{where}; known inputs are read at "
                             "forecast times, which bar files do not hold: put the column, with its future times, in "
                             "a --covariates file")
    if from_bars and bar_frame is not None:
        tables.append(frame_bar_columns(bar_frame[1], bar_frame[0], from_bars, timestamp_col=cfg.timestamp_col,
                                        symbol_col=cfg.symbol_col, timezone=timezone, real=real,
                                        date_format=date_format))
    elif from_bars and bar_reader is not None:
        tables.append(bar_reader(from_bars, real))
    elif from_bars:
        tables.append(read_bar_columns(cfg.paths, from_bars, timestamp_col=cfg.timestamp_col,
                                       symbol_col=cfg.symbol_col, timezone=timezone, real=real,
                                       date_format=date_format))
    chosen = pick(tables, [*n.observed, *n.known, *n.static])
    cal = read_events(cfg.events, timezone=timezone, date_format=date_format) if cfg.events else saved_events
    timed = (*n.observed, *n.known)
    kind = ({c: "categorical" if c in n.categorical else "real" for c in timed} if fitted
            else static.kinds(timed, chosen, n.categorical))
    return Sources(observed=tuple(c for c in n.observed if kind[c] == "real"),
                   known=tuple(c for c in n.known if kind[c] == "real"), tables=chosen, events=cal,
                   from_bars=tuple(from_bars), context=tuple(n.context),
                   context_columns=context_names(n.context, n.target),
                   static=tuple(n.static), static_kinds=static.kinds(n.static, chosen, n.categorical),
                   observed_cat=tuple(c for c in n.observed if kind[c] == "categorical"),
                   known_cat=tuple(c for c in n.known if kind[c] == "categorical"))


def with_context(feats: pl.DataFrame, names: list[str], sidx: np.ndarray, ts: np.ndarray, src: Sources,
                 target: str, log_vol: np.ndarray) -> pl.DataFrame:
    """`feats` (raw features, rows sorted by series and time; `sidx` (N,) into `names`, `ts` (N,) int64 ns) with
    each context series' inputs (`context_of`) joined as of every row's time (`join_context`). `log_vol` (N,):
    scaling.trailing's log_vol of every row, the series' own input, so a context series' volatility is the one it
    sees itself. InputError naming the series when a context series is not in the data (`check_context`)."""
    if not src.context:
        return feats
    check_context(src.context, names)
    return join_context(feats, ts, {c: context_of(feats, log_vol, np.flatnonzero(sidx == names.index(c)), ts, target)
                                    for c in src.context})


def check_context(context: Sequence[str], names: list[str]) -> None:
    """InputError naming the first --context series `context` that is not one of the panel's series `names`."""
    for c in context:
        if c not in names:
            raise InputError(f"--context {c}: no such series in the data (it has {', '.join(names[:12])}); name one "
                             "of them, or add its bars to --parquet-file")


def context_of(feats: pl.DataFrame, log_vol: np.ndarray, rows: np.ndarray, ts: np.ndarray, target: str
               ) -> pl.DataFrame:
    """A context series' rows `rows` (Nc,) of `feats` (one series' run, sorted by time): their times "ts" (int64 ns)
    and its own inputs (`context_inputs`, float64), which `join_context` reads (a pieced prepare spills them from the
    piece holding the series, for every piece to read)."""
    return pl.DataFrame({"ts": ts[rows], **{
        col: (log_vol if col == "log_vol" else feats.get_column(col).to_numpy())[rows].astype(np.float64)
        for col in context_inputs(target)}})


def join_context(feats: pl.DataFrame, ts: np.ndarray, context: dict[str, pl.DataFrame]) -> pl.DataFrame:
    """`feats` (rows at times `ts` (N,) int64 ns) with each context series' inputs `context` ({series: context_of})
    as of every row's time, named SERIES_column: the context series' last bar at or before it (its bar of the same
    time included: both are known once their bars close), NaN before its first bar (0 once standardized)."""
    cols = {}
    for c, own in context.items():
        at = np.searchsorted(own.get_column("ts").to_numpy(), ts, side="right") - 1  # (N,) its last bar at or before
        for col in own.columns[1:]:
            v = own.get_column(col).to_numpy()[np.maximum(at, 0)]
            v[at < 0] = np.nan
            cols[f"{c}_{col}"] = v
    return feats.with_columns(pl.Series(k, v) for k, v in cols.items())


def observe(bars: pl.DataFrame, src: Sources) -> tuple[pl.DataFrame, int]:
    """`bars` (sorted by series, ts) with the observed columns joined as of each bar's time, and without the bars
    where a real one is NaN, infinite or missing after the series' first value (their count is returned). InputError
    where a series has no real value at its first bar (the as-of join has nothing at or before it), or where more
    than MAX_BAD_FRACTION of the bars would go. A categorical column's missing value is no reason to drop a bar: it
    is coded 0 (timed_categories.py)."""
    if not (src.observed or src.observed_cat):
        return bars, 0
    joined, counts = join_observed(bars, src)
    check_dropped(counts)
    return joined, counts[DROPPED]


DROPPED, BARS = "", " bars"  # join_observed's counts of the bars dropped and of all (no column's names)


def join_observed(bars: pl.DataFrame, src: Sources) -> tuple[pl.DataFrame, dict[str, int]]:
    """`observe`'s bars without judging how many went, and the counts of bars without a finite real value: per
    column, of any (DROPPED) and of all (BARS), as a piece of a panel sends them back, so that `check_dropped`
    judges the whole panel's sums. The leading-value error is a series' own and is raised here."""
    cols = src.observed + src.observed_cat
    joined = asof_join(bars, src.of(cols), cols)
    if not src.observed:
        return joined, {DROPPED: 0, BARS: joined.height}
    first = (pl.col("series") != pl.col("series").shift(1)).fill_null(True)
    for c in src.observed:
        lead = joined.filter(first & pl.col(c).is_null())
        if lead.height:
            row = lead.row(0, named=True)
            t = src.tables[c]
            rows = t.frame.filter(pl.col("key").is_in([row["series"], row.get("contract")])) if t.keyed else t.frame
            if not rows.height:  # a keyed file without the series: no --since helps
                raise InputError(f"--observed {c}: {t.source} has no row for series {row['series']} (by its name or "
                                 f"its contract {row.get('contract')}); add the series' rows to the file")
            start = rows["ts"].min()
            raise InputError(f"--observed {c}: {t.source} has no value at or before the first bar of series "
                             f"{row['series']} ({row['ts']:%Y-%m-%dT%H:%M:%SZ}); its first row is at "
                             f"{start:%Y-%m-%dT%H:%M:%SZ}: pass --since {start:%Y-%m-%dT%H:%M:%S} or extend the file")
    bad = pl.any_horizontal(~pl.col(c).is_finite().fill_null(False) for c in src.observed)
    counts = joined.select(*((~pl.col(c).is_finite().fill_null(False)).sum().alias(c) for c in src.observed),
                           bad.sum().alias(DROPPED)).row(0, named=True)
    counts = {k: int(v) for k, v in counts.items()} | {BARS: joined.height}
    return (joined.filter(~bad) if counts[DROPPED] else joined), counts


def check_dropped(counts: dict[str, int]) -> None:
    """InputError naming the worst column where more than MAX_BAD_FRACTION of the bars would be dropped (`counts`:
    join_observed's, or the sums of a panel's pieces')."""
    if counts[DROPPED] > MAX_BAD_FRACTION * counts[BARS]:
        worst = max((c for c in counts if c not in (DROPPED, BARS)), key=counts.get)
        raise InputError(f"--observed {worst}: {counts[worst]:,} of {counts[BARS]:,} bars have no finite value "
                         f"(NaN, inf or none as of the bar); more than {MAX_BAD_FRACTION:.0%} of the bars would be "
                         "dropped: fill or fix the column")


def fit_observed(feats: pl.DataFrame, names: list[str], sidx: np.ndarray, keep: np.ndarray, src: Sources,
                 mode: str, scalers: Scalers) -> Scalers:
    """`scalers` with each observed user column's {mean, std} over rows where `keep`, per series ("series"; pooled
    for a series without training rows), the pooled values for every series ("global"), or 0 and 1 ("none"),
    listed as `user_observed`, which scaling.observed_names appends after foxhunt's own."""
    if not src.observed_names:
        return scalers
    return scale_observed(observed_moments(feats, names, sidx, keep, src.observed_names), names, src.observed_names,
                          mode, scalers)


TRAINED = "user:rows"  # observed_moments' key of each series' training rows


def observed_moments(feats: pl.DataFrame, names: list[str], sidx: np.ndarray, keep: np.ndarray,
                     cols: Sequence[str]) -> dict[str, np.ndarray]:
    """The per-series moments (fitstats) `fit_observed` fits from: of each observed column `cols` over the rows where
    `keep` and its value is finite (a context series' NaN before its first bar), and TRAINED. The moments of
    consecutive series groups concatenate (fitstats.concat) into the panel's."""
    mom = {TRAINED: select(keep, sidx, len(names)).n}
    for c in cols:
        x = feats[c].to_numpy().astype(np.float64)
        sel = select(keep & np.isfinite(x), sidx, len(names))
        mom.update(moments_of(x.take(sel.at), sel, c))
    return mom


def scale_observed(mom: dict[str, np.ndarray], names: list[str], cols: Sequence[str], mode: str,
                   scalers: Scalers) -> Scalers:
    """`fit_observed` of the columns `cols` from `observed_moments`' `mom` of the series `names`, listed after those
    `user_observed` lists already (a pieced prepare fits the --context columns last: prepare/fit.py)."""
    per, pooled = stats(mom, tuple(cols), names, mom[TRAINED] > 0)
    if mode == "none":
        pooled = dict.fromkeys(cols, Moments(0.0, 1.0))
    own = {name: {c: per[name][c] if mode == "series" and name in per else pooled[c] for c in cols}
           for name in scalers.series}
    return scalers.with_moments(own, pooled, tuple(cols))


def fit_known(src: Sources, ts_train: np.ndarray, mode: str) -> dict[str, Moments]:
    """{column: {mean, std}} of each known covariate over the training bars' times (`ts_train`, int64 ns): one
    value per time for every series, so "series" scaling is the global one here; "none": 0 and 1."""
    return fit_known_counted(src, *np.unique(ts_train, return_counts=True), mode)


def fit_known_counted(src: Sources, stamps: np.ndarray, counts: np.ndarray, mode: str) -> dict[str, Moments]:
    """`fit_known` of the training bars' sorted distinct times `stamps` (T,), each `counts` (T,) bars: a panel's
    pieces add up their counts, and each time's value is read once."""
    out = {}
    if not src.known:
        return out
    values = known_at(stamps, src.of(src.known), src.known).astype(np.float64)  # (T, K)
    for j, c in enumerate(src.known):
        ok = np.isfinite(values[:, j])
        x, w = values[ok, j], counts[ok].astype(np.float64)
        n = float(w.sum())
        mean = float(np.dot(w, x) / n) if n else 0.0
        std = float(np.sqrt(np.dot(w, np.square(x - mean)) / (n - 1))) if n > 1 else 0.0
        out[c] = Moments(0.0, 1.0) if mode == "none" else Moments(mean, std if np.isfinite(std) and std > 0 else 1.0)
    return out


def fit_inputs(src: Sources, known_scalers: dict[str, Moments], static_fit: static.StaticFit | None = None,
               timed_vocab: dict[str, tuple[str, ...]] | None = None) -> FittedInputs:
    """What a model keeps of its inputs (FittedTransform.inputs). `known_scalers`: fit_known_counted's;
    `static_fit`: static.fit's; `timed_vocab`: timed_categories.fit's ("observed" and "known" list the real
    columns, "observed_cat" and "known_cat" the categorical ones)."""
    fit = static_fit or static.StaticFit({}, {})
    return FittedInputs(
        observed=src.observed, known=src.known, static=src.static, static_kinds=dict(src.static_kinds or {}),
        static_scalers=fit.scalers, static_vocab=fit.vocab, observed_cat=src.observed_cat, known_cat=src.known_cat,
        timed_vocab=dict(timed_vocab or {}), bar_columns=src.from_bars, context=src.context,
        known_scalers=known_scalers, events=src.events,
        # a --covariates file as an absolute path (read from anywhere: the ONNX sidecar's your_inputs.sources); a
        # bar-file column names the bars, which forecasting passes anew
        sources={c: src.tables[c].source if c in src.from_bars else absolute_path(src.tables[c].source)
                 for c in (*src.observed, *src.observed_cat, *src.known, *src.known_cat, *src.static)},
    )


def known_names(fitted: FittedInputs | None) -> tuple[str, ...]:
    """The user's known inputs of a fitted transform, in column order (after the calendar's)."""
    return fitted.known_names if fitted is not None else ()


KnownValues = Callable[..., np.ndarray]  # (ts (U,), key: str | None = None) -> (U, Ku) float32


def known_values(fitted: FittedInputs | None, src: Sources, step_ns: int, cap: int) -> KnownValues | None:
    """(ts (U,) int64 ns, key) -> (U, Ku) float32: the known covariates standardized with the fitted mean and std,
    then the event features on the grid of `step_ns`, capped at `cap` steps (encoder plus forecast steps), under
    the events' key `key` (events.key_of; None: the unkeyed rows alone); None without user known inputs."""
    names = known_names(fitted)
    if fitted is None or not names:
        return None
    mean = np.array([fitted.known_scalers[c].mean for c in src.known], dtype=np.float64)
    std = np.array([fitted.known_scalers[c].std for c in src.known], dtype=np.float64)
    calendars: dict[str | None, EventCalendar] = {}  # key -> the calendar its series read, made on first use

    def values(ts: np.ndarray, key: str | None = None) -> np.ndarray:
        out = np.empty((len(ts), len(names)), dtype=np.float32)  # (U, Ku)
        k = len(src.known)
        if k:
            raw = known_at(ts, src.of(src.known), src.known).astype(np.float64)  # (U, K)
            out[:, :k] = np.nan_to_num((raw - mean) / std, nan=0.0, posinf=0.0, neginf=0.0)
        if src.events is not None:
            if key not in calendars:
                calendars[key] = src.events.for_key(key)
            out[:, k:] = event_features(ts, step_ns, calendars[key], cap)
        return out

    return values


def summary(src: Sources, dropped: int) -> dict:
    """The data summary's account of the user's inputs (`foxhunt inspect`, the run's data.json): each column with
    its role, kind, source, rows and first and last time; the events; the bars dropped for a missing value."""
    per_context = len(src.context_columns) // max(1, len(src.context))
    cols = [{"name": n, "role": "observed", "kind": "real", "source": f"--context {src.context[i // per_context]}"}
            for i, n in enumerate(src.context_columns)]
    kinds = {**(src.static_kinds or {}), **dict.fromkeys((*src.observed_cat, *src.known_cat), "categorical")}
    for role, names in (("observed", src.observed + src.observed_cat), ("known", src.known + src.known_cat),
                        ("static", src.static)):
        for c, cov in zip(names, coverage(src.of(names), names), strict=True):
            cols.append({"name": c, "role": role, "kind": kinds.get(c, "real"), **cov})
    events = None
    if src.events is not None:
        ev = src.events
        events = {"source": ev.source, "names": list(ev.names), "columns": list(event_columns(ev)),
                  "count": int(sum(len(t) for t in (*ev.times, *(t for per in ev.keyed for t in per)))),
                  "keys": list(ev.keys)}
    return {"columns": cols, "events": events, "dropped_bars": int(dropped)}


def summary_lines(s: dict) -> list[str]:
    """`summary` as the lines `format_summary` prints, one per input."""
    lines = [f"input     {c['name']}: {c['role']} {c['kind']} from {c['source']}"
             + (f", {c['rows']:,} rows {str(c['first'])[:16]} .. {str(c['last'])[:16]}" if "rows" in c else "")
             for c in s["columns"]]
    if s.get("events"):
        ev = s["events"]
        keyed = f" (keyed to {listing(ev['keys'], 5)})" if ev.get("keys") else ""
        lines.append(f"events    {ev['count']:,} events of {', '.join(ev['names'])}{keyed} from {ev['source']}: known "
                     f"inputs {', '.join(ev['columns'])}")
    if s.get("dropped_bars"):
        lines.append(f"dropped   {s['dropped_bars']:,} bars without a finite value of an --observed input")
    return lines


def event_keys(src: Sources | None, bars: pl.DataFrame, strict: bool) -> np.ndarray | None:
    """(N,) int32 the events' key each bar of `bars` (series, contract) reads (events.row_keys), -1 where none
    applies; None without keyed events. `strict` (training): InputError when no key names a series or contract of
    the bars, as a keyed covariate file's (covariates.asof_join): its events would read as none for every series,
    inputs no model can learn from, and the likelier cause is symbols spelled another way. A forecast takes bars
    of any series: a model's keys may name none of them."""
    cal = None if src is None else src.events
    keys = None if cal is None else row_keys(cal, bars.get_column("series"), bars.get_column("contract"))
    if keys is not None and strict:
        check_keyed(cal, bool((keys >= 0).any()), lambda: bars.get_column("series").cast(pl.Utf8).unique().to_list())
    return keys


def check_keyed(cal: EventCalendar, any_keyed: bool, series: Callable[[], list[str]]) -> None:
    """`event_keys`' check of training bars under `cal`'s keys, where `any_keyed` says whether a bar is under a key
    (the pieces of a panel each say it of theirs); `series`: the bars' series names, asked where none is."""
    if not any_keyed:
        raise InputError(f"{cal.source}: no symbol in the events file names a series or contract of the bars (the file "
                         f"has {listing(cal.keys, 5)}; the series are {listing(sorted(set(series())), 5)}); use the series' "
                         "names or their contract symbols, or leave the symbol empty to apply an event to every series")
