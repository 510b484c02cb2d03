"""foxhunt: Temporal Fusion Transformers on futures bars, trained end to end without running out of memory.

The public Python API (everything else is private and may change):

- `TrainConfig`, `train(...) -> Run`: what `foxhunt train` does (options by the CLI's long names);
- `Forecaster.load(run_dir)`: a trained model package, loaded once;
- `Forecaster.predict(df)`, `predict_parquet(path)`: the live forecast of each series from a polars or pandas
  frame, or from the tail of a parquet file;
- `Forecaster.update(bar)`: one new bar per series, forecast incrementally (streaming);
- `InputError`: bad input (a one-line message naming what to fix).

Names load on first use, so `import foxhunt` stays cheap (torch is imported by the first of them).
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

from foxhunt.errors import InputError

# polars allocates through its own jemalloc, which it sets to keep freed pages for 0.5-1 s before handing them back
# (polars/__init__.py appends this variable to its own setting). Loading frees one stage's frame as the next is built,
# a few tenths of a second apart, so those kept pages stacked up into RSS that nothing used. Handing them back at once
# costs page faults when the next stage allocates; huge pages (where the kernel allows them) make those 512x fewer.
# benchmarks/windows_2m.py, 2M bars, 7 runs each on an idle 2-core machine: polars' default peaks at 2.11-2.33x the
# final tensors above the libraries, this at 1.50-1.52x, in the same time (2.2-2.9 s wall either way); without huge
# pages this costs ~0.5 s more. jemalloc reads it when polars loads: it takes effect only if foxhunt is imported
# first, as the CLI does. A value the user set is left alone.
if "polars" not in sys.modules:
    os.environ.setdefault("_RJEM_MALLOC_CONF", "dirty_decay_ms:0,muzzy_decay_ms:0,thp:always,metadata_thp:always")

if TYPE_CHECKING:
    from foxhunt.api.forecaster import Forecaster
    from foxhunt.api.training import Run, TrainConfig, train

__version__ = "0.1.0"
__all__ = ["Forecaster", "InputError", "Run", "TrainConfig", "__version__", "train"]

_LAZY = {"Forecaster": "foxhunt.api.forecaster", "Run": "foxhunt.api.training", "TrainConfig": "foxhunt.api.training",
         "train": "foxhunt.api.training"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'foxhunt' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
