"""How the bundled ES sample is named, apart from its generator: the reports that say a result is simulated
(`is_bundled_sample`) need only the name, not pyarrow. The file itself is made by sample.py (`bundled_sample_path`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

DEFAULT_SEED = 20240218
SAMPLE_VERSION = 2  # bump when the generator changes, so cached files are not reused
SAMPLE_PREFIX = "es_ohlcv1m_sample_v"  # the cached file's name starts so; results on it are said to be simulated
SIMULATED = ("the bundled sample is a simulation, not evidence on real ES (SIMULATED ES 1-minute bars: "
             "foxhunt.data.io.sample builds in volatility clustering and a daily profile)")


def is_bundled_sample(paths: Sequence[str]) -> bool:
    """Whether the bars read are the bundled sample alone: every claim made on it (train's final line, evaluate's
    and backtest's reports) says that it is simulated, so that nobody takes it for evidence on real ES."""
    return len(paths) == 1 and Path(paths[0]).name.startswith(SAMPLE_PREFIX)


