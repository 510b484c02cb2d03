"""The jobs of a pieced `foxhunt prepare` (store/pieced.py runs them on an Executor), and the typed records they
return. Each job is a plain function of picklable arguments, so that it runs in this process, in a spawned worker
process or on a Dask worker alike; what a job hands the next one is a file in the spill folder, which every worker
sees, never shared memory. Rows go straight into the store's .npy files at the piece's place (`put`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.ipc

from foxhunt.data.bars.grid import gap_counts
from foxhunt.data.bars.load import load_raw
from foxhunt.data.bars.validate import BadRows, check_log_target
from foxhunt.data.config import DataConfig
from foxhunt.data.dataset.featurize import EVENT_KEY, moved, series_rows, windowed_rows
from foxhunt.data.dataset.prepare import feature_columns, sorted_bars, train_start_ns
from foxhunt.data.dataset.summary import WindowFacts
from foxhunt.data.dataset.types import FittedTransform
from foxhunt.data.dataset.windows import window_starts
from foxhunt.data.features import covariate_files, inputs, static, timed_categories
from foxhunt.data.features.covariate_files import Held
from foxhunt.data.features.events import key_times
from foxhunt.data.features.features import raw_features
from foxhunt.data.features.known import SharedGrid, sorted_distinct
from foxhunt.data.features.scaling import own_scalers, trailing, train_moments, vol_moments
from foxhunt.data.features.seasonality import minute_of_day
from foxhunt.data.io.discover import Source
from foxhunt.data.io.read import median_spacings, read_bars, rtype_sets
from foxhunt.data.prepare import bar_columns
from foxhunt.data.prepare.plan import Route
from foxhunt.data.store.layout import SPLITS, own_array
from foxhunt.data.store.put import put

PIECE = "__piece"  # each bar's piece, beside the bars of a chunk
CENTER, SCALE = "__center", "__scale"  # the target's center and scale beside the trailing inputs in a spill
MINUTE, CAT, KEY = "__minute", "__cat:", "__key"  # a spill's side columns (Side): a minute, a category, a key


@dataclass(frozen=True)
class ChunkRead:
    """What reading a chunk of files found: the files' entries, their bar sizes and the raw bars' time span."""

    files: list[dict]
    rtypes: list[set]
    spacings: list[int]
    routed: bool  # False when a bar has no symbol: the in-memory path then names the rows
    lo: int
    hi: int
    columns: pl.DataFrame | None = None  # the bar files' declared columns without their rows (bar_columns.py)


@dataclass(frozen=True)
class Fit:
    """A piece's training statistics under the split cuts (scaling.train_moments) and its training rows' gaps."""

    mom: dict[str, np.ndarray]
    train_gaps: tuple[np.ndarray, np.ndarray]  # (values, counts)
    user: dict[str, np.ndarray] | None = None  # the --observed columns' moments (inputs.observed_moments)
    stamps: tuple[np.ndarray, np.ndarray] | None = None  # the training bars' distinct times, counts (--known)
    seen: dict[str, list[str]] | None = None  # categorical --observed: timed_categories.seen of its training rows


@dataclass(frozen=True)
class PieceLoaded:
    """A loaded piece: its series, their lengths, its windows, time span, load report and rolls, its bar gaps,
    and its fit under the cuts it expected. Its sorted distinct timestamps are in the spill folder (`stamps-K`,
    read mapped by `shared`): not held in the `prepare` process beside every other piece's."""

    names: list[str]
    lengths: np.ndarray  # (S,)
    windows: int
    lo: int
    hi: int
    report: dict[str, Any]
    rolls: list[dict]
    gaps: tuple[np.ndarray, np.ndarray]  # (values, counts)
    fit: Fit
    dropped: dict[str, int] | None = None  # inputs.join_observed's counts (--observed)
    static: dict[str, list] | None = None  # static.series_values of its series (--static)
    keys: np.ndarray | None = None  # (G, 2) its rows' first and last time under each events key (events.key_times)
    held: Held | None = None  # its share of the bar files' columns, as the `prepare` process reports them
    bad_rows: BadRows | None = None  # the bad rows it dropped, judged over the panel's (validate.judge_bad_rows)


@dataclass(frozen=True)
class Place:
    """Where a piece's rows go: the store's folder and the series, rows and windows of the pieces before it."""

    store: str
    series0: int
    row0: int
    win0: int


@dataclass(frozen=True)
class PieceWritten:
    """A written piece's windows' splits (store ids), summary facts and bars at a roll."""

    splits: dict[str, np.ndarray]
    facts: WindowFacts
    roll_bars: int
    unseen: timed_categories.Unseen | None = None  # its categorical inputs' values unseen in training (`tell`)


@dataclass(frozen=True)
class Side:
    """A piece's columns spilled beside its raw features: each row's minute of the day (--seasonality), categorical
    --observed values as joined, and events key (events.row_keys, with keyed --events)."""

    minute: np.ndarray | None
    cats: dict[str, pl.Series]
    keys: np.ndarray | None


@dataclass(frozen=True)
class PieceTrailed:
    """A piece's trailing inputs' statistics (scaling.vol_moments), and the piece written when its own statistics
    complete the scalers (None: left for `write`; see `trail`)."""

    mom: dict[str, np.ndarray]
    written: PieceWritten | None


def read(cfg: DataConfig, chunk: int, first: int, sources: list[Source], route: Route, spill: str,
         columns: tuple[str, ...] = (), real: frozenset[str] = frozenset()) -> ChunkRead:
    """Read the files of `sources` (the panel's from index `first` on) and spill their bars by piece (`route`) to
    raw-CHUNK-PIECE.arrow, file_idx counted over the whole panel's files; and their `columns` (the bar files'
    columns the user's inputs read; `real`: those that must be numbers) to cols-CHUNK-PIECE.arrow."""
    raw, entries = read_bars(cfg.paths, cfg.timestamp_col, cfg.symbol_col, cfg.timezone, cfg.price_scale,
                             sources=sources, date_format=cfg.date_format)
    rtypes = rtype_sets(raw, len(entries))
    spacings = [0] * len(entries) if all(rtypes) else median_spacings(raw, len(entries))
    ts, symbol = raw.get_column("ts").dt.epoch("ns"), raw.get_column("symbol")
    cols = bar_columns.chunk_columns(sources, columns, cfg.timestamp_col, cfg.symbol_col, cfg.timezone,
                                    real, cfg.date_format) if columns else None
    routed = not symbol.null_count() and (cols is None or not cols.get_column("symbol").null_count())
    out = ChunkRead(entries, rtypes, spacings, routed, int(ts.min()), int(ts.max()), None if cols is None
                    else cols.clear())
    if not out.routed:
        return out
    if cols is not None:  # routed by symbol as the bars are
        keys = cols.get_column("symbol").unique()
        at = cols.get_column("symbol").replace_strict(keys, [route.piece_of(s) for s in keys], return_dtype=pl.Int64)
        for (k,), part in cols.with_columns(at.alias(PIECE)).partition_by(PIECE, maintain_order=True,
                                                                          include_key=False, as_dict=True).items():
            _spill(part, Path(spill) / f"cols-{chunk}-{k}.arrow")
        del cols
    # Routed through the codes of the symbols the plan saw (a few hundred categories, hashed once here) and spilled
    # as those codes; a chunk with symbols the plan's sample missed spills strings (`_raw_frame`).
    seen = list(route.pieces)
    codes = symbol.cast(pl.Enum(seen), strict=False)  # (N,) null where the plan's sample missed the symbol
    if codes.null_count():
        seen = [*seen, *symbol.filter(codes.is_null()).unique().to_list()]
        codes = symbol.cast(pl.Enum(seen))
    else:
        symbol = codes
    piece = np.array([route.piece_of(s) for s in seen], dtype=np.int64)[codes.to_physical().to_numpy()]  # (N,)
    raw = raw.with_columns(symbol, pl.col("file_idx") + first, pl.Series(PIECE, piece)).rechunk()
    for (k,), part in raw.partition_by(PIECE, maintain_order=True, include_key=False, as_dict=True).items():
        _spill(part, Path(spill) / f"raw-{chunk}-{k}.arrow")
    return out


def load(cfg: DataConfig, k: int, spill: str, chunks: int, entries: list[dict], cuts: tuple,
         src: inputs.Sources | None = None) -> PieceLoaded:
    """Load piece `k` from its chunks' spills as load_bars would, and spill its raw features for the later jobs.
    `src`: the user's inputs, whose observed columns join the bars before their rows are numbered (as in
    prepare_from_bars) and whose static values are read per series."""
    paths = [p for c in range(chunks) if (p := Path(spill) / f"raw-{c}-{k}.arrow").exists()]
    raw, distinct = _raw_frame([_read_spill(p) for p in paths])
    counts = np.bincount(raw.get_column("file_idx").to_numpy(), minlength=len(entries))
    loaded = load_raw(raw, [dict(e, rows=int(n)) for e, n in zip(entries, counts, strict=True)], cfg, consume=True,
                      distinct=distinct, judge=False)  # the share of bad rows is the panel's: judged in `prepare`
    del raw
    _unlink(paths)
    dropped, held = None, None
    if (table := bar_columns.bar_table_of(src)) is not None:  # its share of the bar files' columns (`read`)
        paths = [p for c in range(chunks) if (p := Path(spill) / f"cols-{c}-{k}.arrow").exists()]
        table = bar_columns.piece_table(table, [_read_spill(p) for p in paths])
        src, held = bar_columns.with_table(src, table), covariate_files.held(table)
        _unlink(paths)
    if src is not None and (src.observed or src.observed_cat):
        joined, dropped = inputs.join_observed(loaded.bars, src)
        loaded = dataclasses.replace(loaded, bars=joined)
        del joined
    bars, names, sidx, ts = sorted_bars(loaded.bars)
    values = None if src is None else static.series_values(bars, names, src.static, src.tables,
                                                           src.static_kinds or {})
    lengths = np.bincount(sidx, minlength=len(names))
    check_log_target(bars, cfg.target)
    keep = [*feature_columns(cfg.target, cfg.fill_gaps), *(() if src is None else src.observed)]
    feats = raw_features(bars, cfg.adjust, cfg.target, columns=keep).select(keep)
    minute = minute_of_day(ts, cfg.exchange_tz).astype(np.uint16) if cfg.seasonality else None  # (N,) read twice
    side = Side(minute, {c: bars.get_column(c) for c in (() if src is None else src.observed_cat)},
                inputs.event_keys(src, bars, strict=False))  # the panel is checked in `prepare` (declared.py)
    del bars
    # Spilled without what reading it back restores exactly: `target` (a copy of its move column), `roll` as a bit.
    _spill(feats.drop("target").with_columns(pl.col("roll").cast(pl.Boolean), *(
        pl.Series(name, v) for name, v in ((MINUTE, side.minute), (KEY, side.keys)) if v is not None),
        *(v.alias(CAT + c) for c, v in side.cats.items())), Path(spill) / f"feats-{k}.arrow")
    gaps, train_gaps = gap_counts(ts, sidx, cuts[0])
    share(Path(spill), f"stamps-{k}", sorted_distinct(ts))
    return PieceLoaded(names, lengths, len(window_starts(*_bounds(lengths), cfg.encoder_length + cfg.horizon)),
                       int(ts.min()), int(ts.max()), loaded.report, loaded.rolls, gaps,
                       _fit(cfg, feats, names, sidx, ts, cuts, side, train_gaps), dropped, values,
                       None if side.keys is None else key_times(side.keys, ts, len(src.events.keys)), held,
                       loaded.bad_rows)


def fit(cfg: DataConfig, k: int, spill: str, names: list[str], lengths: np.ndarray, cuts: tuple) -> Fit:
    """Piece `k`'s Fit under `cuts`, from its spilled features: where cleaning moved the cuts `load` expected."""
    feats, sidx, ts, side = _spilled(cfg, spill, k, lengths)
    return _fit(cfg, feats, names, sidx, ts, cuts, side, gap_counts(ts, sidx, cuts[0])[1])


def trail(cfg: DataConfig, k: int, spill: str, names: list[str], lengths: np.ndarray, cuts: tuple,
          transform: FittedTransform, place: Place, src: inputs.Sources | None = None) -> PieceTrailed:
    """Piece `k`'s trailing inputs under the first scalers (`transform`'s) and their statistics. When its series'
    own statistics complete the scalers (`own_scalers`) and the run has no --context, the piece is written now
    (`_write`); otherwise its trailing inputs are spilled for `write`, which runs once the whole panel's statistics
    are in. `src`: the user's inputs; the inputs of a --context series of the piece are spilled for every piece's
    join (`_spilled`)."""
    scalers = transform.scalers
    feats, sidx, ts, side = _spilled(cfg, spill, k, lengths)
    minute = side.minute
    keep = _training_rows(cfg, feats, ts, cuts)  # (n,)
    if scalers.get("season") and scalers["season"]["tz"] != cfg.exchange_tz:
        minute = None  # the spilled minutes are in the exchange's zone: trailing computes the profile's own
    derived = trailing(feats, names, sidx, scalers, cfg.target, cfg.scaling, minute=minute)  # (derived, center, scale)
    mom = vol_moments(derived[0], sidx, len(names), keep, scalers)
    del keep
    for i, c in enumerate(src.context if src is not None else ()):  # its context series' inputs, for every piece
        if c in names:
            _spill(inputs.context_of(feats, derived[0]["log_vol"], np.flatnonzero(sidx == names.index(c)), ts,
                                     cfg.target), Path(spill) / f"{CONTEXT}{i}.arrow")
    # with --context, the context columns' scalers need every piece's join (`context`): no piece is written yet
    own = None if src is not None and src.context else own_scalers(scalers, mom, names)
    if own is None:  # what `write` reads back depends on the first scalers only, fixed by now
        _spill(pl.DataFrame({**derived[0], CENTER: derived[1], SCALE: derived[2]}), Path(spill) / f"trail-{k}.arrow")
        return PieceTrailed(mom, None)
    written = _write(cfg, spill, names, sidx, ts, feats, derived, dataclasses.replace(transform, scalers=own), cuts,
                     place, side, src)
    _unlink([Path(spill) / f"feats-{k}.arrow"])  # read for the last time
    return PieceTrailed(mom, written)


def context(cfg: DataConfig, k: int, spill: str, names: list[str], lengths: np.ndarray, cuts: tuple,
            src: inputs.Sources) -> dict[str, np.ndarray]:
    """Piece `k`'s moments of the --context columns over its training rows (inputs.observed_moments), its rows
    joined with the context series' inputs `trail` spilled."""
    feats, sidx, ts, _ = _spilled(cfg, spill, k, lengths, src)
    return inputs.observed_moments(feats, names, sidx, _training_rows(cfg, feats, ts, cuts), src.context_columns)


def write(cfg: DataConfig, k: int, spill: str, names: list[str], lengths: np.ndarray, cuts: tuple,
          transform: FittedTransform, place: Place, src: inputs.Sources | None = None) -> PieceWritten:
    """Piece `k` written (`_write`) from its spilled features and trailing inputs with the whole panel's transform:
    the pieces `trail` could not write."""
    feats, sidx, ts, side = _spilled(cfg, spill, k, lengths, src)
    spilled = _read_spill(Path(spill) / f"trail-{k}.arrow")
    derived = ({c: spilled.get_column(c).to_numpy() for c in spilled.columns if c not in (CENTER, SCALE)},
               spilled.get_column(CENTER).to_numpy(), spilled.get_column(SCALE).to_numpy())
    _unlink([Path(spill) / f"{name}-{k}.arrow" for name in ("trail", "feats")])  # mapped: readable until unmapped
    return _write(cfg, spill, names, sidx, ts, feats, derived, transform, cuts, place, side, src)


def _write(cfg: DataConfig, spill: str, names: list[str], sidx: np.ndarray, ts: np.ndarray, feats: pl.DataFrame,
           derived: tuple, transform: FittedTransform, cuts: tuple, place: Place, side: Side,
           src: inputs.Sources | None) -> PieceWritten:
    """Run the per-series pipeline (dataset/featurize.py) over a piece, as prepare_from_bars runs it over the panel,
    with the panel's known grid (`share_grid`; its rows under an events key moved into their key's block, which
    the grid's table holds), and write its rows and their categorical codes into the store at its place."""
    rows = series_rows(feats, names, sidx, ts, transform, derived)
    del feats, derived
    known = shared_grid(spill).rows
    if side.keys is not None:
        rows[EVENT_KEY] = side.keys
        known = moved(known, inputs.known_values(transform.inputs, src, transform.bar_spacing_ns), src.events.keys,
                      dict(enumerate(shared(spill, SHIFT).tolist())))
    out = windowed_rows(rows, names, transform, cfg.encoder_length, cfg.horizon, cuts, train_start_ns(cfg), known)
    del rows
    time_cat, unseen = None, {}
    if src is not None and (src.observed_cat or src.known_cat):  # the grid's known codes are the panel's
        time_cat = timed_categories.arrays(transform.inputs, src, side.cats, out.ts, out.real, out.ts[:0], unseen)[0]
    store, row0 = Path(place.store), place.row0
    codes, static_cont = out.codes[:, None], None
    if (Path(spill) / f"{STATIC}cat.npy").exists():  # --static: (S, Sc) and (S, Sr) of the panel's series
        at = out.sidx + place.series0
        codes = np.concatenate([codes, shared(spill, f"{STATIC}cat")[at]], axis=1)  # (n, 1 + Sc)
        static_cont = shared(spill, f"{STATIC}cont")[at]  # (n, Sr)
    arrays = {"cont": out.cont, "static_cat": codes, "static_cont": static_cont, "time_cat": time_cat,
              "target_raw": out.target,
              "center": out.center,
              "scale": out.scale, "ts_ns": out.ts, "real": out.real, "series_idx": out.sidx + place.series0,
              "known_base": out.known.base, "known_index": out.known.index,
              **{own_array(c): v for c, v in out.own.items()}}
    for name, value in arrays.items():
        if value is not None:
            put(store / f"{name}.npy", row0, value)
    put(store / "starts.npy", place.win0, out.starts + row0)
    return PieceWritten({name: out.split.ids[name] + place.win0 for name in SPLITS}, out.facts, out.roll_bars,
                        unseen)


GRID = "grid-"  # the spill files of the panel's SharedGrid, one per field
STATIC = "static-"  # the spill files of the panel's static inputs (static.arrays): static-cont, static-cat
SHIFT = "key-shift"  # the spill file of how far each events key's rows move into its block (featurize.with_blocks)
CONTEXT = "context-"  # the spill file of the I-th --context series' inputs (inputs.context_of), one per series


def share_grid(spill: Path, grid: SharedGrid) -> None:
    """Spill the panel's known grid for the pieces' writes (`shared_grid`)."""
    for f in dataclasses.fields(grid):
        if (value := getattr(grid, f.name)) is not None:
            share(spill, GRID + f.name, value)


def shared_grid(spill: str | Path) -> SharedGrid:
    """The SharedGrid `share_grid` spilled, its arrays mapped."""
    return SharedGrid(**{f.name: shared(spill, GRID + f.name) if (Path(spill) / f"{GRID}{f.name}.npy").exists()
                         else None for f in dataclasses.fields(SharedGrid)})


def _fit(cfg: DataConfig, feats: pl.DataFrame, names: list[str], sidx: np.ndarray, ts: np.ndarray, cuts: tuple,
         side: Side, train_gaps: tuple) -> Fit:
    """A piece's Fit under `cuts`, with its user inputs' statistics where the run declares them."""
    mom = _moments(cfg, feats, len(names), sidx, ts, cuts, side.minute)
    user = stamps = None
    if real := [c for c in cfg.observed if c in feats.columns]:  # the categorical ones are a Side's
        user = inputs.observed_moments(feats, names, sidx, _training_rows(cfg, feats, ts, cuts), real)
    span = (ts < cuts[0]) & (ts >= train_start_ns(cfg))  # as fit_known's: the series' first bars included
    if cfg.known:
        stamps = np.unique(ts[span], return_counts=True)
    return Fit(mom, train_gaps, user, stamps, timed_categories.seen(side.cats, span) if side.cats else None)


def _moments(cfg: DataConfig, feats: pl.DataFrame, s: int, sidx: np.ndarray, ts: np.ndarray, cuts: tuple,
             minute: np.ndarray | None) -> dict[str, np.ndarray]:
    """scalers.train_moments of a piece's training rows under `cuts`."""
    season_tz = cfg.exchange_tz if cfg.seasonality else None
    return train_moments(feats, sidx, s, _training_rows(cfg, feats, ts, cuts), cfg.target, season_tz, minute=minute)


def _training_rows(cfg: DataConfig, feats: pl.DataFrame, ts: np.ndarray, cuts: tuple) -> np.ndarray:
    """(n,) the rows the scalers are fitted on: before the train cut, from --train-start on, not a series' first."""
    return (ts < cuts[0]) & (ts >= train_start_ns(cfg)) & ~feats["first"].to_numpy()


def _spilled(cfg: DataConfig, spill: str, k: int, lengths: np.ndarray, src: inputs.Sources | None = None
             ) -> tuple[pl.DataFrame, np.ndarray, np.ndarray, Side]:
    """Piece `k`'s spilled raw features (as raw_features gave them), each row's series index (N,), timestamp in ns
    (N,) and its Side columns. `src` (once `trail` spilled the context series' inputs): its --context columns joined."""
    spilled = _read_spill(Path(spill) / f"feats-{k}.arrow")
    have = spilled.columns
    side = Side(spilled.get_column(MINUTE).to_numpy() if MINUTE in have else None,
                {c.removeprefix(CAT): spilled.get_column(c) for c in have if c.startswith(CAT)},
                spilled.get_column(KEY).to_numpy() if KEY in have else None)
    feats = spilled.with_columns(pl.col("roll").cast(pl.Float64), pl.col(cfg.target).alias("target")).select(
        *feature_columns(cfg.target, cfg.fill_gaps), *(c for c in cfg.observed if c in have))
    sidx = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
    ts = feats.get_column("ts").dt.epoch("ns").to_numpy()
    if src is not None and src.context:
        feats = inputs.join_context(feats, ts, {c: _read_spill(Path(spill) / f"{CONTEXT}{i}.arrow")
                                                for i, c in enumerate(src.context)})
    return feats, sidx, ts, side


def _raw_frame(parts: list[pl.DataFrame]) -> tuple[pl.DataFrame, pl.Series]:
    """The frame read_bars gives for a piece's bars (symbols as strings) from its chunks' spills `parts`, and its
    distinct symbols: from the codes of a chunk that spilled codes (`present`, without hashing every row), hashed in
    a chunk that spilled strings."""
    distinct = [present(p.get_column("symbol")) if isinstance(p.schema["symbol"], pl.Enum)
                else p.get_column("symbol").unique() for p in parts]
    raw = pl.concat([p.with_columns(pl.col("symbol").cast(pl.Utf8)) for p in parts], rechunk=False)
    return raw, pl.concat(distinct).unique(maintain_order=True)


def present(codes: pl.Series) -> pl.Series:
    """The distinct values of the Enum series `codes` (no nulls), as strings, counted from its codes."""
    categories = codes.dtype.categories  # (C,)
    used = np.flatnonzero(np.bincount(codes.to_physical().to_numpy(), minlength=len(categories)))
    return categories.gather(pl.Series(used, dtype=pl.get_index_type())).alias(codes.name)


def _spill(frame: pl.DataFrame, path: Path) -> None:
    """Write `frame` to the new Arrow IPC file `path`, through a file opened once (polars' own open of a path
    truncates it, and ext4 then writes a spill to disk at close that is read back from the page cache and deleted)."""
    with open(path, "xb") as f:
        frame.write_ipc(f)


def _read_spill(path: Path) -> pl.DataFrame:
    """The frame `_spill` wrote to `path`, its columns the file's pages, mapped: nothing copied."""
    with pa.memory_map(str(path)) as source:
        return pl.from_arrow(pa.ipc.open_file(source).read_all(), rechunk=False)


def share(spill: Path, name: str, value: np.ndarray) -> None:
    """Write the array `value` to the spill folder for the other jobs and the `prepare` process (`shared`)."""
    np.save(spill / f"{name}.npy", value)


def shared(spill: str | Path, name: str) -> np.ndarray:
    """An array `share` wrote, mapped: read from the page cache as it is used."""
    return np.load(Path(spill) / f"{name}.npy", mmap_mode="r")


def _unlink(paths: list[Path]) -> None:
    for path in paths:
        path.unlink(missing_ok=True)


def _bounds(lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    end = np.cumsum(lengths)
    return end - lengths, end
