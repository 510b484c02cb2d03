"""One lazy polars scan over many parquet files of one layout: only the named columns, only the row groups a time
bound can hold.

A directory of daily files read one by one costs a plan, a footer parse and a frame per file (1,448 daily files of
2M 1-minute bars: 12 s); one `pl.scan_parquet` over the list reads them in parallel, decodes only the projected
columns and skips row groups whose statistics fall outside the predicate. Each row keeps its file (file_idx, the
position in `files`) and its 0-based row in that file, so that messages can still name them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

from foxhunt.errors import InputError

_FILE, _INDEX = "__foxhunt_file", "__foxhunt_row"


def scan_files(
    files: list[Path], columns: list[str | pl.Expr], predicate: pl.Expr | None = None
) -> tuple[pl.DataFrame, list[int]]:
    """Read `columns` of every file in `files` (one schema) where `predicate` holds (None: every row); a column may
    come as an expression of one file column that keeps its name (a cast), computed while the files are decoded.

    Returns (frame with file_idx UInt32, row UInt32 and `columns`, in file order; rows read per file). A file whose
    columns differ from the first file's makes polars raise: the caller then scans the files one at a time.
    Rows are located without a per-row path: polars numbers the rows of all files in one sequence, and a file's
    own rows start where the files before it end. The frame comes back in one chunk per column (polars returns one
    per file), so that later stages never copy it to align chunks.
    """
    names = [c if isinstance(c, str) else c.meta.output_name() for c in columns]
    if predicate is None and len(files) == 1:  # one file read whole: its row index is the row, file_idx is 0
        frame = (
            pl.scan_parquet(files[0], row_index_name=_INDEX)  # a file may have its own "row" column
            .select(pl.lit(0, pl.UInt32).alias("file_idx"), pl.col(_INDEX).alias("row"), *columns)
            .collect()
        )
        return align_chunks(frame, frame.get_column("row")), [frame.height]
    lf = pl.scan_parquet(files, row_index_name=_INDEX, include_file_paths=_FILE, extra_columns="ignore")
    if predicate is None:  # every file's rows are all here, in file order: a new path starts a new file
        frame = lf.select(pl.col(_INDEX).alias("row"), pl.col(_FILE).rle_id().alias("file_idx"), *columns).collect()
        file_idx = frame.get_column("file_idx")
        if frame.height == 0 or file_idx[-1] != len(files) - 1:  # a file without rows: count them to name it
            return frame.head(0), file_rows(files)
        counts = file_idx.rle().struct.field("len").to_list()  # (F,) rows per file, files in order
        offsets = pl.Series(np.r_[0, np.cumsum(counts)[:-1]], dtype=pl.get_index_type())  # (F,) first row of each
        row = frame.get_column("row") - offsets.gather(file_idx)
        return align_chunks(frame.select("file_idx", row, *names), frame.get_column("row")), counts
    # Some rows are skipped: the footers say where each file starts.
    frame = lf.filter(predicate).select(_INDEX, *columns).collect()
    offsets = np.r_[0, np.cumsum(file_rows(files))[:-1]]
    index = frame.get_column(_INDEX).to_numpy()
    file_idx = np.searchsorted(offsets, index, side="right") - 1
    row = (index - offsets[file_idx]).astype(np.uint32)
    counts = np.bincount(file_idx, minlength=len(files)).tolist()
    located = [pl.Series("file_idx", file_idx, dtype=pl.UInt32), pl.Series("row", row, dtype=pl.UInt32)]
    return align_chunks(frame.drop(_INDEX).with_columns(located), frame.get_column(_INDEX)), counts


def align_chunks(frame: pl.DataFrame, like: pl.Series) -> pl.DataFrame:
    """`frame` with every column cut into the chunks of `like` (polars returns a scan as one chunk per file).

    A column of one chunk is cut by zero-copy slices; without this, the first operation over mixed columns would
    copy the whole frame to align them (100 MB for 2M bars), at the moment the most memory is already in use.
    """
    lengths = like.chunk_lengths()
    if len(lengths) <= 1:
        return frame
    starts = np.r_[0, np.cumsum(lengths)[:-1]]

    def cut(s: pl.Series) -> pl.Series:
        if s.chunk_lengths() == lengths:
            return s
        whole = s.rechunk() if s.n_chunks() > 1 else s
        return pl.concat([whole.slice(int(a), n) for a, n in zip(starts, lengths, strict=True)], rechunk=False)

    return pl.DataFrame([cut(s) for s in frame.iter_columns()])


def file_rows(files: list[Path]) -> list[int]:
    """The row count of each file, from the footers (no page is decoded)."""
    counts = (
        pl.scan_parquet(files, include_file_paths=_FILE, extra_columns="ignore")
        .group_by(_FILE)
        .len()
        .collect()
    )
    by_name = dict(zip(counts.get_column(_FILE).to_list(), counts.get_column("len").to_list(), strict=True))
    return [by_name.get(str(f), 0) for f in files]


def read_error(path: Path | str, e: Exception) -> InputError:
    """The one-line error for a parquet file polars cannot read."""
    text = " ".join(str(e).split())[:200] or type(e).__name__
    return InputError(
        f"{path}: cannot read it as parquet ({text}); the file may be truncated, re-download or re-export it"
    )
