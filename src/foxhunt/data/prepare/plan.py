"""Plan a panel's preparation in pieces: groups of consecutive series, each read on its own.

Series are independent once the things fitted across series are known (the split cuts, the pooled scalers, the
seasonality profile, the vocabulary: fit.py), so a piece is a set of symbols whose bars make whole series.
A symbol's series is its futures root (bars/symbols.series_key: `ESH4` -> `ES`, spreads with their first leg), or
the symbol itself; the pieces are consecutive in series-name order, so that the store's rows (sorted by series) are
the pieces' rows one after the other. Only parquet inputs whose files carry a symbol column can be routed by symbol; anything else is
prepared in one piece.

Under `--contracts auto` a root's symbols may instead be series of their own (bars/chains.py: `CF0` and `CU0` read as
contracts of root `C`, but are cotton and copper), decided from the bars of the root, which one piece holds whole.
Decided either way, a root's series are named within [least, greatest] of the root and its symbols (`C` .. `CU0`),
a range that holds other keys' series too (`C0`, `CS0`): the roots and symbols whose ranges overlap make one group
(`_groups`), and pieces are made of whole groups, so that they stay consecutive in series-name order.

The plan weighs the series from the symbol column of at most PLAN_FILES files spread evenly over the panel, not of
every file (counting all of them cost this process most of a second before any bar was read). The pieces' sizes
are then estimates, and a symbol the sample missed (a spread traded on a few days) goes to
the piece whose range of series keys holds its key (`Route`), so the pieces still hold whole series, in order.
"""

from __future__ import annotations

import bisect
import os
import re
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from foxhunt.data.bars.symbols import SPREAD_RE, series_key
from foxhunt.data.config import DataConfig
from foxhunt.data.io.discover import Source, is_parquet
from foxhunt.data.io.normalise import match_column, symbol_column
from foxhunt.data.prepare.executor import MIN_ROWS, keeps_whole, listed_files

PIECE_ROWS = 2_000_000  # bars per piece: a worker's memory is that of preparing this many bars in memory
# Files whose symbols the plan counts, evenly spaced (every file when there are no more): 64 daily files of a
# futures panel see every root and weigh it within a few percent.
PLAN_FILES = 64


@dataclass(frozen=True)
class Piece:
    """The raw symbol values the plan saw whose bars make the series of one piece, and about how many bars they hold
    (scaled from the plan's sample)."""

    symbols: tuple[str, ...]
    rows: int
    first: str = ""  # the least name a series of the piece may take (the lower end of its first group's range)


@dataclass(frozen=True)
class Route:
    """Which piece each bar goes to, by its (stripped) symbol: those the plan saw by name, any other by its series
    key, into the piece whose range of series names holds it (the pieces' ranges rise piece by piece)."""

    pieces: dict[str, int]  # symbol the plan saw -> its piece
    first_keys: tuple[str, ...]  # (P,) each piece's least series name (Piece.first)
    contracts: str

    def piece_of(self, symbol: str) -> int:
        if symbol in self.pieces:
            return self.pieces[symbol]
        return max(bisect.bisect_right(self.first_keys, series_key(symbol, self.contracts)) - 1, 0)


def route_of(pieces: list[Piece], contracts: str) -> Route:
    """The Route of plan_pieces' `pieces` (more than one) for the --contracts mode `contracts`."""
    return Route({s.strip(): k for k, p in enumerate(pieces) for s in p.symbols},
                 tuple(p.first for p in pieces), contracts)


def plan_pieces(cfg: DataConfig, piece_rows: int = PIECE_ROWS, workers: int = 2, min_rows: int = MIN_ROWS,
                sources: list[Source] | None = None) -> list[Piece]:
    """Pieces of whole series in series order, each of at most `piece_rows` bars (or one series), and at least one
    per worker process (`workers`); one piece when the panel cannot be read by symbol, holds one series or
    fewer than `min_rows` bars, with --fill-gaps (its bar grid is measured on the whole panel), or with --since /
    --until (a root without a bar in range would make its piece fail where the whole panel reads)."""
    counts = None if keeps_whole(cfg) else _symbol_counts(cfg, sources)
    total = sum(n for _, n in counts or ())
    if counts is None or total < min_rows:
        return [Piece((), total)]
    piece_rows = min(piece_rows, max(1, -(-total // max(workers, 1))))
    by_key: dict[str, list[tuple[str, int]]] = {}
    for symbol, n in counts:
        by_key.setdefault(series_key(symbol, cfg.contracts), []).append((symbol, n))
    pieces, symbols, rows, first = [], [], 0, ""
    for lower, keys in _groups(by_key, cfg.contracts):
        more = sum(n for key in keys for _, n in by_key[key])
        if symbols and rows + more > piece_rows:
            pieces.append(Piece(tuple(symbols), rows, first))
            symbols, rows = [], 0
        first = lower if not symbols else first
        symbols += [s for key in keys for s, _ in by_key[key]]
        rows += more
    pieces.append(Piece(tuple(symbols), rows, first))
    return pieces


def _groups(by_key: dict[str, list[tuple[str, int]]], contracts: str) -> list[tuple[str, list[str]]]:
    """(least series name, series keys) of each group of `by_key`'s keys (series key -> its (symbol, bars)) whose
    ranges of series names overlap, in name order. A key's range is [least, greatest] of the key and, under
    `--contracts auto`, its symbols that are not spreads (each a series of its own if chains.py keeps them apart)."""
    ranges = []
    for key, members in by_key.items():
        symbols = [s.strip() for s, _ in members] if contracts == "auto" else []
        names = [key, *(s for s in symbols if not re.search(SPREAD_RE, s))]
        ranges.append((min(names), max(names), key))
    groups: list[tuple[str, str, list[str]]] = []  # (lower, upper, keys)
    for lower, upper, key in sorted(ranges):
        if groups and lower <= groups[-1][1]:
            groups[-1] = (groups[-1][0], max(groups[-1][1], upper), [*groups[-1][2], key])
        else:
            groups.append((lower, upper, [key]))
    return [(lower, keys) for lower, _, keys in groups]


def _symbol_counts(cfg: DataConfig, sources: list[Source] | None) -> list[tuple[str, int]] | None:
    """(raw symbol, about how many bars) of the files named by `cfg.paths`, from the symbol column of `plan_sample`'s
    files scaled by their share of the bytes; None when a file is not parquet or has no symbol column (hive
    `symbol=` folders name whole files: not read by symbol here)."""
    files = listed_files(cfg, sources)
    if not files or not all(is_parquet(f) for f in files):
        return None
    names = list(pl.read_parquet_schema(files[0]))
    column = match_column(names, cfg.symbol_col) if cfg.symbol_col is not None else symbol_column(names)
    if column is None:
        return None
    sample = plan_sample(files)
    try:
        counts = (pl.scan_parquet(sample, extra_columns="ignore").group_by(column).len().collect())
    except Exception:  # files of several layouts: the reader names the problem when it reads them
        return None
    if counts.get_column(column).null_count():
        return None
    scale = 1.0 if len(sample) == len(files) else _bytes(files) / max(_bytes(sample), 1)
    return sorted(zip(counts.get_column(column).cast(pl.Utf8).to_list(),
                      (round(n * scale) for n in counts.get_column("len").to_list()), strict=True))


def plan_sample(files: list[Path]) -> list[Path]:
    """At most PLAN_FILES of `files`, evenly spaced through them (the middle one of each run of equal length)."""
    if len(files) <= PLAN_FILES:
        return files
    return [files[(2 * k + 1) * len(files) // (2 * PLAN_FILES)] for k in range(PLAN_FILES)]


def _bytes(files: list[Path]) -> int:
    return sum(os.path.getsize(f) for f in files)


