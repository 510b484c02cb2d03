"""The first stage: where each piece's bars come from, and the user's inputs each piece joins.

A panel in pieces (several pieces of whole series, plan.py) is read in chunks of consecutive files by the `read` job,
each chunk's bars spilled by piece, with the bar files' own columns the user's inputs read (bar_columns.py: this
process holds none of their rows); each piece's load job then gathers its bars from the chunks (`piece_bars`) and
loads them as load_bars would. A panel of one piece comes loaded by the caller (`given`): its bars wait in the
spill for its load job, which takes them over.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from foxhunt.data.bars.load import LoadedBars, load_raw
from foxhunt.data.config import DataConfig
from foxhunt.data.dataset.types import FittedTransform
from foxhunt.data.features import covariate_files
from foxhunt.data.features.covariate_files import CovariateTable, Held
from foxhunt.data.features.inputs import Sources
from foxhunt.data.io.discover import Source
from foxhunt.data.io.read import FileFormat, check_bar_sizes, median_spacings, read_bars, rtype_sets
from foxhunt.data.io.zones import check_zones
from foxhunt.data.prepare import bar_columns
from foxhunt.data.prepare.executor import run_all
from foxhunt.data.prepare.plan import PIECE_ROWS, Piece, Route, route_of
from foxhunt.data.prepare.recipe import user_sources
from foxhunt.data.prepare.spill import FolderSpill, MemorySpill, Spill
from foxhunt.data.prepare.splits import split_times

log = logging.getLogger("foxhunt.data")

PIECE = "__piece"  # each bar's piece, beside the bars of a chunk
GIVEN = "bars"  # the spill's name of the bars of a piece loaded by the caller


@dataclass(frozen=True)
class Spilled:
    """Where the pieces' bars wait: in the spills of `chunks` chunks of the files `entries` (read's entries)."""

    chunks: int
    entries: list[dict]


@dataclass(frozen=True)
class Read:
    """What the read stage hands the load stage: the user's inputs and each piece's share of them, where the
    pieces' bars are (`spilled`; None: one piece, loaded by the caller, held in the spill), and the split cuts their
    training statistics are gathered under (`expected`; None: the piece's own bars', the panel's)."""

    src: Sources | None
    shares: list[Sources | None]
    pieces: list[Piece]
    spilled: Spilled | None = None
    expected: tuple[int, int | None] | None = None

    @property
    def files(self) -> list[str]:
        return [] if self.spilled is None else [e["path"] for e in self.spilled.entries]


@dataclass(frozen=True)
class ChunkRead:
    """What reading a chunk of files found: the files' entries, their bar sizes and the raw bars' time span."""

    files: list[dict]
    rtypes: list[set]
    spacings: list[int]
    routed: bool  # False when a bar has no symbol: then the panel is prepared as one piece
    lo: int
    hi: int
    columns: pl.DataFrame | None = None  # the bar files' declared columns without their rows (bar_columns.py)


def given(cfg: DataConfig, transform: FittedTransform | None, loaded: LoadedBars, spill: MemorySpill,
          bar_frame: tuple[str, pl.DataFrame] | None = None) -> Read:
    """The Read of one piece loaded by the caller (`loaded`, taken over by the spill); `bar_frame`: (name, frame)
    when the bars came from a frame in memory, whose columns stand for the bar files' own."""
    src = user_sources(cfg, transform, bar_frame)
    spill.hold(GIVEN, loaded)
    return Read(src, [src], [Piece((), loaded.bars.height)])


def read_pieces(cfg: DataConfig, pieces: list[Piece], executor: Executor, workers: int, sources: list[Source],
                spill: FolderSpill) -> Read | None:
    """Read the files of `sources` (expand_sources' list of `cfg.paths`) in chunks on `executor` (of `workers`
    processes), spilled by piece of `pieces`; None, with a warning, when a bar has no symbol (the panel cannot be cut
    by series)."""
    listed = [(f, source) for source in sources for f in source.files]  # (file, its source), in order
    files = [str(f) for f, _ in listed]
    route = route_of(pieces, cfg.contracts)
    chunks = _chunks(files, max(workers, -(-sum(p.rows for p in pieces) // PIECE_ROWS)))
    reads: list[ChunkRead] = []

    def read_chunks(columns: list[str], real: set[str]) -> CovariateTable | None:  # the bars, and their `columns`
        reads[:] = run_all(executor, read, [(cfg, c, i0, _chunk_sources(listed[i0:i1]), route, spill,
                                             tuple(columns), frozenset(real)) for c, (i0, i1) in enumerate(chunks)])
        return bar_columns.empty_table([r.columns for r in reads], columns, ", ".join(cfg.paths)) if columns else None

    src = user_sources(cfg, None, bar_reader=read_chunks)  # the user's inputs: the bar files' columns read here
    if not reads:
        read_chunks([], set())
    if not all(r.routed for r in reads):
        log.warning("a bar has no symbol, so the panel cannot be cut by series: preparing it in memory, where its "
                    "memory is the whole panel's, not a piece's")
        return None
    check_bar_sizes([x for r in reads for x in r.rtypes], [x for r in reads for x in r.spacings], files)
    entries = [e for r in reads for e in r.files]
    check_zones(entries, cfg.timezone)  # files of two chunks: each chunk's read checked its own
    expected = split_times(cfg, min(r.lo for r in reads), max(r.hi for r in reads))  # before cleaning, off bars
    shares = [restricted(src, lambda key, k=k: route.piece_of(key) == k) for k in range(len(pieces))]
    return Read(src, shares, pieces, Spilled(len(chunks), entries), expected)


def read(cfg: DataConfig, chunk: int, first: int, sources: list[Source], route: Route, spill: FolderSpill,
         columns: tuple[str, ...] = (), real: frozenset[str] = frozenset()) -> ChunkRead:
    """Read the files of `sources` (the panel's from index `first` on) and spill their bars by piece (`route`) as
    raw-CHUNK-PIECE, file_idx counted over the whole panel's files; and their `columns` (the bar files' columns the
    user's inputs read; `real`: those that must be numbers) as cols-CHUNK-PIECE."""
    raw, entries = read_bars(cfg.paths, FileFormat.of(cfg), cfg.price_scale, sources=sources)
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
            spill.put_frame(f"cols-{chunk}-{k}", part)
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
        spill.put_frame(f"raw-{chunk}-{k}", part)
    return out


def piece_bars(cfg: DataConfig, k: int, spill: Spill, spilled: Spilled | None) -> LoadedBars:
    """Piece `k`'s bars: taken from the spill (loaded by the caller: `spilled` None), or gathered from its chunks'
    spills and loaded as load_bars would (the share of bad rows left to the caller, who judges the panel's)."""
    if spilled is None:
        return spill.take(GIVEN)
    names = [n for c in range(spilled.chunks) if spill.has(n := f"raw-{c}-{k}")]
    raw, distinct = _raw_frame([spill.frame(n) for n in names])
    entries = spilled.entries
    counts = np.bincount(raw.get_column("file_idx").to_numpy(), minlength=len(entries))
    loaded = load_raw(raw, [dict(e, rows=int(n)) for e, n in zip(entries, counts, strict=True)], cfg, consume=True,
                      distinct=distinct, judge=False)
    spill.drop(*names)
    return loaded


def piece_sources(k: int, spill: Spill, spilled: Spilled | None, src: Sources | None
                  ) -> tuple[Sources | None, Held | None]:
    """Piece `k`'s share `src` of the user's inputs with its share of the bar files' columns (the chunks' spills),
    and the facts of that share the `prepare` process reports (covariate_files.Held)."""
    if spilled is None or (table := bar_columns.bar_table_of(src)) is None:
        return src, None
    names = [n for c in range(spilled.chunks) if spill.has(n := f"cols-{c}-{k}")]
    table = bar_columns.piece_table(table, [spill.frame(n) for n in names])
    spill.drop(*names)
    return bar_columns.with_table(src, table), covariate_files.held(table)


def restricted(src: Sources | None, keep: Callable[[str], bool]) -> Sources | None:
    """`src` with each keyed table cut to the rows of the keys `keep` accepts: a piece of a panel joins its own
    series' and contracts' keys only (asof_join reads no other), so a job is sent its share of a table rather than
    all of it."""
    if src is None:
        return None
    cut: dict[int, CovariateTable] = {}
    for table in src.of(list(src.tables)):
        if table.keyed:
            keys = table.frame.get_column("key").unique()
            mine = keys.filter(pl.Series([keep(k) for k in keys.to_list()], dtype=pl.Boolean))
            cut[id(table)] = dataclasses.replace(table, frame=table.frame.filter(pl.col("key").is_in(mine.implode())))
    return dataclasses.replace(src, tables={c: cut.get(id(t), t) for c, t in src.tables.items()})


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


def _chunks(files: list[str], n: int) -> list[tuple[int, int]]:
    """[first, end) of `n` (at most one per file) runs of consecutive files of about equal bytes."""
    sizes = np.cumsum([os.path.getsize(f) for f in files])  # (F,)
    n = max(1, min(n, len(files)))
    ends = np.minimum(np.unique(np.searchsorted(sizes, sizes[-1] * np.arange(1, n + 1) / n, side="left") + 1),
                      len(files))
    bounds = np.unique(np.r_[0, ends])
    return [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def _chunk_sources(listed: list[tuple[Path, Source]]) -> list[Source]:
    """The Sources holding just the files of `listed` ((file, its source) of consecutive files), for read_bars."""
    groups: list[tuple[Source, list[Path]]] = []
    for path, source in listed:
        if not groups or groups[-1][0] is not source:
            groups.append((source, []))
        groups[-1][1].append(path)
    return [dataclasses.replace(source, files=files) for source, files in groups]
