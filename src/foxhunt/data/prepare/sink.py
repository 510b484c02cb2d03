"""Where the pipeline's arrays go: a feature store's files (`StoreSink`) or this process's memory (`MemorySink`).

The driver allocates the row and window arrays once the pieces are loaded (`allocate`: name -> dtype and shape, as
the store's layout names them), the write jobs put each piece's rows at its place (`put`), the driver saves the
panel's own arrays (the known grid, the splits: `save`), and `finish` makes the result: the store's manifest (the
store renamed into place), or the PreparedData whose tensors share the arrays.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from foxhunt.data.config import DataConfig
from foxhunt.data.dataset.types import FittedTransform, PreparedData
from foxhunt.data.dataset.windows import WindowedData
from foxhunt.data.features.features import own_move_columns
from foxhunt.data.features.schema import FeatureSchema
from foxhunt.data.store.layout import OPTIONAL, SPLITS, WINDOW_ARRAYS, own_array
from foxhunt.data.store.put import put
from foxhunt.data.store.write import finish, manifest_of, save_array

Shapes = dict[str, tuple[str, tuple[int, ...]]]  # array name -> (dtype, shape)


class StoreSink:
    """A store being filled in `tmp` (write.make_tmp), renamed to `out` by `finish`. The row arrays are sparse files
    made by open_memmap, which the jobs (in any process that sees the folder) write rows into with `put`."""

    def __init__(self, tmp: Path, out: Path) -> None:
        self.tmp, self.out = Path(tmp), Path(out)
        self.entries: dict[str, dict] = {}

    def allocate(self, shapes: Shapes) -> None:
        for name, (dtype, shape) in shapes.items():
            array = np.lib.format.open_memmap(self.tmp / f"{name}.npy", mode="w+", dtype=dtype, shape=shape)
            del array  # the file stays, sparse: the jobs write its rows
            self.entries[name] = {"file": f"{name}.npy", "dtype": dtype, "shape": list(shape)}

    def put(self, name: str, row0: int, value: np.ndarray) -> None:
        """Rows `value` of the array `name` from `row0` on; an array not allocated (known_index, sized by the grid,
        which a panel of one piece computes beside its stages) is saved whole from its one piece."""
        if name not in self.entries:
            assert row0 == 0, f"{name}: not allocated, so written whole by one piece"
            self.save(name, value)
            return
        put(self.tmp / f"{name}.npy", row0, value)

    def save(self, name: str, value: np.ndarray) -> None:
        self.entries[name] = save_array(self.tmp, f"{name}.npy", value)

    def finish(self, cfg: DataConfig, fields: dict[str, Any], schema: FeatureSchema, transform: FittedTransform,
               summary: dict[str, Any], rolls: list[dict]) -> dict[str, Any]:
        """The store's manifest, written with its arrays (in write_store's order) and the store renamed into place."""
        order = [*WINDOW_ARRAYS, *(f"split_{s}" for s in SPLITS),
                 *(own_array(c) for c in own_move_columns(transform.target))]
        manifest = manifest_of(cfg, {k: self.entries[k] for k in order if k in self.entries}, fields, schema,
                               transform, summary, rolls)
        finish(self.tmp, self.out, manifest)
        return manifest


class MemorySink:
    """The arrays of a panel prepared as one piece in this process: each taken as the piece gives it, not copied
    (a panel in memory is one piece: its rows are every array's)."""

    def __init__(self) -> None:
        self.shapes: Shapes = {}
        self.arrays: dict[str, np.ndarray] = {}

    def allocate(self, shapes: Shapes) -> None:
        self.shapes.update(shapes)

    def put(self, name: str, row0: int, value: np.ndarray) -> None:
        """The array `name` is `value`, cast to its dtype (known_index, sized by the grid, needs no allocation)."""
        assert row0 == 0 and name not in self.arrays, f"{name}: a memory sink holds one piece's rows"
        self.save(name, np.asarray(value, dtype=self.shapes[name][0]) if name in self.shapes else value)

    def save(self, name: str, value: np.ndarray) -> None:
        self.arrays[name] = value if value.flags.writeable else value.copy()  # torch shares writable memory only

    def array(self, name: str) -> np.ndarray:
        """The array `name`: as put or saved; zeros of its shape when nothing was put (a width of 0)."""
        if name not in self.arrays:
            dtype, shape = self.shapes[name]
            self.arrays[name] = np.zeros(shape, dtype=dtype)
        return self.arrays[name]

    def finish(self, cfg: DataConfig, fields: dict[str, Any], schema: FeatureSchema, transform: FittedTransform,
               summary: dict[str, Any], rolls: list[dict]) -> PreparedData:
        """The PreparedData of the arrays, its tensors sharing them."""
        import torch

        names = [n for n in WINDOW_ARRAYS if n in self.shapes or n in self.arrays]
        tensors = {n: torch.from_numpy(self.array(n)) for n in names}
        missing = sorted(set(WINDOW_ARRAYS) - OPTIONAL - set(tensors))
        assert not missing, f"arrays never allocated: {missing}"
        windows = WindowedData(**tensors, **fields)
        windows.check_codes(schema)
        return PreparedData(
            schema=schema,
            windows=windows,
            splits={k: torch.from_numpy(np.asarray(self.arrays[f"split_{k}"], dtype=np.int64)) for k in SPLITS},
            transform=transform,
            summary=summary,
            rolls=rolls,
            own_moves={c: self.array(own_array(c)) for c in own_move_columns(transform.target)},
        )


Sink = StoreSink | MemorySink
