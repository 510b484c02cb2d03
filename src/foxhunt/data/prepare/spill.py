"""Where a piece's results wait between the stages of the pipeline (driver.py), by name: its bars, its raw features
and their side columns, its trailing inputs, its distinct times, and what every piece reads of the panel (the known
grid, the static inputs, the context series' inputs).

`FolderSpill`: files in a folder that every worker sees (a process pool's, a Dask cluster's): frames as Arrow IPC
files and arrays as .npy, each read back mapped (pages of the page cache, nothing copied). `MemorySpill`: the same
names in this process's memory, for a run of one piece in this process: what is put is what is read back, and
nothing is written or copied. Either is handed to the jobs as an argument (a folder spill pickles as its path).
"""

from __future__ import annotations

from concurrent.futures import Future
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.ipc


class FolderSpill:
    """Results as files in `folder` (deleted with it by the caller)."""

    in_memory = False

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)

    def put_frame(self, name: str, frame: pl.DataFrame) -> None:
        """Write `frame` to a new Arrow IPC file, through a file opened once (polars' own open of a path truncates
        it, and ext4 then writes a spill to disk at close that is read back from the page cache and deleted)."""
        with open(self.folder / f"{name}.arrow", "xb") as f:
            frame.write_ipc(f)

    def frame(self, name: str) -> pl.DataFrame:
        """The frame `put_frame` wrote, its columns the file's pages, mapped: nothing copied (readable after `drop`
        until unmapped)."""
        with pa.memory_map(str(self.folder / f"{name}.arrow")) as source:
            return pl.from_arrow(pa.ipc.open_file(source).read_all(), rechunk=False)

    def put_columns(self, name: str, columns: dict[str, np.ndarray]) -> None:
        self.put_frame(name, pl.DataFrame(columns))

    def columns(self, name: str) -> dict[str, np.ndarray]:
        frame = self.frame(name)
        return {c: frame.get_column(c).to_numpy() for c in frame.columns}

    def put_array(self, name: str, value: np.ndarray) -> None:
        np.save(self.folder / f"{name}.npy", value)

    def array(self, name: str) -> np.ndarray:
        """An array `put_array` wrote, mapped: read from the page cache as it is used."""
        return np.load(self.folder / f"{name}.npy", mmap_mode="r")

    def has(self, name: str) -> bool:
        return (self.folder / f"{name}.arrow").exists() or (self.folder / f"{name}.npy").exists()

    def drop(self, *names: str) -> None:
        for name in names:
            for suffix in (".arrow", ".npy"):
                (self.folder / f"{name}{suffix}").unlink(missing_ok=True)


class MemorySpill:
    """Results held in this process, for jobs run in it (executor.InProcess): `hold` and `take` hand over an object
    whose last reference the taker then holds (a piece's loaded bars)."""

    in_memory = True

    def __init__(self) -> None:
        self.held: dict[str, Any] = {}

    def put_frame(self, name: str, frame: pl.DataFrame) -> None:
        self.held[name] = frame.rechunk()  # one chunk a column: each read as a numpy view, not copied at each read

    def frame(self, name: str) -> pl.DataFrame:
        return self.held[name]

    def put_columns(self, name: str, columns: dict[str, np.ndarray]) -> None:
        self.held[name] = dict(columns)

    def columns(self, name: str) -> dict[str, np.ndarray]:
        return self.held[name]

    def put_array(self, name: str, value: np.ndarray) -> None:
        self.held[name] = value

    def array(self, name: str) -> np.ndarray:
        return self.held[name]

    def has(self, name: str) -> bool:
        return name in self.held

    def drop(self, *names: str) -> None:
        for name in names:
            self.held.pop(name, None)

    def hold(self, name: str, value: Any) -> None:
        """Hold `value` (or a Future of it, which a reader waits for: `get`)."""
        self.held[name] = value

    def get(self, name: str) -> Any:
        value = self.held[name]
        return value.result() if isinstance(value, Future) else value

    def take(self, name: str) -> Any:
        return self.held.pop(name)


Spill = FolderSpill | MemorySpill
