"""Which bar files the paths on the command line name: files, directories (searched recursively) and globs, each
with the series name for files without a symbol column and the folder below which hive keys are read
(partitions.py).

A Databento batch download is a folder of the bars (`glbx-mdp3-20240218-20240315.ohlcv-1m.dbn.zst`) beside files of
other schemas (`glbx-mdp3-20240218.definition.dbn.zst`: the instruments' definitions) and JSON metadata
(`metadata.json`, `condition.json`, ...). In a folder or glob, files whose name carries a Databento schema other than
OHLCV are not bars and are left out, and one info line says which (with the metadata files): the folder reads as
its bars. A file named on its own is read whatever its name, and one that holds no bars stops naming it.
"""

from __future__ import annotations

import glob
import logging
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from foxhunt.errors import InputError

log = logging.getLogger("foxhunt.data")

SUFFIXES = (".parquet", ".pq", ".csv", ".dbn", ".dbn.zst")
# Databento's schemas other than OHLCV bars, as its batch files name them: `<dataset>-<dates>.<schema>.<encoding>`.
NOT_BARS = re.compile(
    r"\.(definition|statistics|status|imbalance|trades|mbo|mbp-1|mbp-10|tbbo|bbo-1s|bbo-1m|cmbp-1|cbbo-1s|cbbo-1m"
    r"|tcbbo)\.(dbn|csv|json|parquet|pq)(\.zst)?$",
    re.IGNORECASE,
)
SIDECARS = ("metadata.json", "manifest.json", "symbology.json", "condition.json")  # a Databento batch's metadata


@dataclass(frozen=True)
class Source:
    """The files one path argument names, with the series name for files without a symbol column and the folder
    hive keys are read below (None for a single file)."""

    files: list[Path]
    default_name: str
    root: Path | None


def absolute_path(path: str) -> str:
    """A path as typed, made absolute against the working directory (lexically: a glob stays a glob)."""
    return os.path.abspath(os.path.expanduser(path))


def expand_paths(paths: Sequence[str]) -> list[tuple[Path, str]]:
    """Turn files, directories (searched recursively) and globs into a sorted file list.

    Each file comes with the series name to use if it has no symbol column: its stem for a named file, the folder's name
    for a directory or glob (so one-file-per-day folders stay one series).
    """
    return [(f, s.default_name) for s in expand_sources(paths) for f in s.files]


def expand_sources(paths: Sequence[str]) -> list[Source]:
    """`expand_paths` grouped by argument, with the folder below which a directory's or glob's hive keys are read."""
    if not paths:
        raise InputError("no data files given; pass one or more parquet/CSV/DBN files, directories or globs")
    out: list[Source] = []
    for raw in paths:
        p = Path(raw).expanduser()
        if glob.has_magic(str(p)):
            hits = _bars(raw, sorted(Path(h) for h in glob.glob(str(p), recursive=True)))
            if not hits:
                raise InputError(f"{raw}: the pattern matches no {'/'.join(SUFFIXES)} file of bars; check the path")
            out.append(Source(hits, _folder_name(p.parent), _glob_root(p)))
        elif p.is_dir():
            hits = _bars(raw, _walk(p))
            if not hits:
                raise InputError(f"{raw}: the directory holds no {'/'.join(SUFFIXES)} file of bars; check the path")
            out.append(Source(hits, _folder_name(p), p))
        elif p.is_file():
            out.append(Source([p], _stem(p), None))
        else:
            raise InputError(f"{raw}: file not found; check the path")
    return out


def _walk(folder: Path) -> list[Path]:
    """The non-hidden files below `folder`, sorted; os.walk lists a folder once, where rglob + is_file would stat
    every one of thousands of daily files again."""
    return sorted(Path(top, name) for top, _, names in os.walk(folder) for name in names if not name.startswith("."))


def _bars(raw: str, files: list[Path]) -> list[Path]:
    """The files of a folder or glob (`raw`) that may hold bars: a supported suffix and no Databento schema but
    OHLCV in the name; an info line names the Databento files left out (the other schemas and the metadata)."""
    hits = [f for f in files if _supported(f) and not NOT_BARS.search(f.name)]
    left = [f.name for f in files if _supported(f) and NOT_BARS.search(f.name)]
    if left:
        sidecars = sorted({f.name for f in files if f.name.lower() in SIDECARS})
        also = f", and Databento's {', '.join(sidecars)}" if sidecars else ""
        log.info("%s: left out %s (Databento records that are not bars)%s", raw, ", ".join(left), also)
    return hits


def _glob_root(pattern: Path) -> Path:
    """The folder above a glob's first wildcard: hive keys are the key=value folders below it."""
    parts = pattern.parts
    first = next(i for i, part in enumerate(parts) if glob.has_magic(part))
    return Path(*parts[:first]) if first else Path(".")


def is_parquet(p: Path) -> bool:
    """By suffix (.parquet, .pq): what the readers and the store's piece planner scan as parquet."""
    return p.name.lower().endswith((".parquet", ".pq"))


def _supported(p: Path) -> bool:
    return p.name.lower().endswith(SUFFIXES)


def _stem(p: Path) -> str:
    name = p.name
    for suf in sorted(SUFFIXES, key=len, reverse=True):
        if name.lower().endswith(suf):
            return name[: -len(suf)]
    return p.stem


def _folder_name(p: Path) -> str:
    return p.resolve().name or "data"
