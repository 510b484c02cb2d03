"""Where the bundled ES sample lives, apart from its generator: `foxhunt train` with no file needs only the path,
and generating the file (foxhunt.data.sample, which needs pyarrow) happens only when it is missing.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from foxhunt.cache import cache_dir
from foxhunt.errors import InputError

DEFAULT_SEED = 20240218
SAMPLE_VERSION = 2  # bump when the generator changes, so cached files are not reused
SAMPLE_PREFIX = "es_ohlcv1m_sample_v"  # the cached file's name starts so; results on it are said to be simulated
SIMULATED = ("the bundled sample is a simulation, not evidence on real ES (SIMULATED ES 1-minute bars: "
             "foxhunt.data.sample builds in volatility clustering and a daily profile)")


def is_bundled_sample(paths: Sequence[str]) -> bool:
    """Whether the bars read are the bundled sample alone: every claim made on it (train's final line, evaluate's
    and backtest's reports) says that it is simulated, so that nobody takes it for evidence on real ES."""
    return len(paths) == 1 and Path(paths[0]).name.startswith(SAMPLE_PREFIX)


def bundled_sample_path() -> Path:
    """The cached default sample, generated on first use into $FOXHUNT_CACHE_DIR or ~/.cache/foxhunt/.

    The file name carries the generator version and seed, so a changed generator never reuses an old
    file. Concurrent first uses are safe: each writes a temporary file and renames the same content into place.
    """
    path = cache_dir() / f"{SAMPLE_PREFIX}{SAMPLE_VERSION}_seed{DEFAULT_SEED}.parquet"
    if not path.is_file():
        try:
            from foxhunt.data.sample import write_sample

            write_sample(path, DEFAULT_SEED)
        except OSError as e:
            raise InputError(
                f"cannot write the bundled sample to {path} ({e.strerror or e}); "
                "set FOXHUNT_CACHE_DIR to a writable folder"
            ) from e
    return path
