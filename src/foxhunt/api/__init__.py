"""The Python API behind `foxhunt/__init__.py` (private modules: import from `foxhunt`).

Importing it (what the first use of `foxhunt.train` or `foxhunt.Forecaster` does) applies the process settings the
CLI applies (foxhunt.allocator.process_settings: OpenMP's spin, polars' allocator) before either imports torch or
polars, so that a notebook trains and forecasts as `foxhunt train` does; a value already in the environment is kept.
Where torch or polars was imported first, this process keeps their defaults (said once, at DEBUG level; its children do not).
"""

import logging

from foxhunt.allocator import process_settings

_late = process_settings()
if _late:
    logging.getLogger("foxhunt").debug(  # a detail: shown with -v or a DEBUG handler, never as a console line
        "torch or polars was imported before foxhunt: this process runs without foxhunt's %s (import foxhunt "
        "first, or set them in the environment; foxhunt/allocator.py says what they change)", ", ".join(_late))
