"""Which bar files the paths on the command line name: files, directories (searched recursively) and globs, each
with the series name for files without a symbol column and the folder below which hive keys are read
(partitions.py)."""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from foxhunt.errors import InputError

SUFFIXES = (".parquet", ".pq", ".csv", ".dbn", ".dbn.zst")


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
            hits = sorted(Path(h) for h in glob.glob(str(p), recursive=True) if _supported(Path(h)))
            if not hits:
                raise InputError(f"{raw}: the pattern matches no {'/'.join(SUFFIXES)} file; check the path")
            out.append(Source(hits, _folder_name(p.parent), _glob_root(p)))
        elif p.is_dir():
            hits = _walk(p)
            if not hits:
                raise InputError(f"{raw}: the directory holds no {'/'.join(SUFFIXES)} file; check the path")
            out.append(Source(hits, _folder_name(p), p))
        elif p.is_file():
            out.append(Source([p], _stem(p), None))
        else:
            raise InputError(f"{raw}: file not found; check the path")
    return out


def _walk(folder: Path) -> list[Path]:
    """The supported, non-hidden files below `folder`, sorted; os.walk lists a folder once, where rglob + is_file
    would stat every one of thousands of daily files again."""
    return sorted(
        Path(top, name)
        for top, _, names in os.walk(folder)
        for name in names
        if not name.startswith(".") and name.lower().endswith(SUFFIXES)
    )


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
