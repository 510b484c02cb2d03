"""foxhunt: Temporal Fusion Transformers on futures bars, trained end to end without running out of memory.

The public Python API (everything else is private and may change):

- `RunConfig`, `fit(...) -> Run`: what `foxhunt train` does (options by the CLI's long names);
- `Forecaster.load(run_dir)`: a trained model package, loaded once;
- `Forecaster.predict(df)`, `predict_parquet(path)`: the live forecast of each series from a polars or pandas
  frame, or from the tail of a parquet file;
- `Forecaster.update(bar)`: one new bar per series, forecast incrementally (streaming);
- `InputError`: bad input (a one-line message naming what to fix).

Names load on first use, so `import foxhunt` stays cheap (torch is imported by the first of them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from foxhunt.errors import InputError
from foxhunt.lazy import lazy_names

if TYPE_CHECKING:
    from foxhunt.api.forecaster import Forecaster
    from foxhunt.api.training import Run, RunConfig, fit

__version__ = "0.1.0"
__all__ = ["Forecaster", "InputError", "Run", "RunConfig", "__version__", "fit"]

_LAZY = {"Forecaster": "foxhunt.api.forecaster", "Run": "foxhunt.api.training", "RunConfig": "foxhunt.api.training",
         "fit": "foxhunt.api.training"}


__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals(), __all__)
