"""The format of what foxhunt saves to read back later: a run's model.json and config.json and a feature store's
manifest.json each carry FORMAT_VERSION as "format_version".

A reader takes this format only. What another foxhunt saved is refused in one line that says what to do (train
again, prepare again) rather than read with defaults guessed for the options it lacks: a fitted transform is only
reproduced exactly by the code and options that fitted it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import foxhunt
from foxhunt.errors import InputError

# 2: the fitted transform's scalers and inputs are typed records (features/fitted.py) and the options they were
# fitted under are saved once, in the DataConfig beside them. 3: the DataConfig holds --anchor and the quantiles it
# is computed at, the transform the anchor's fit. Raise it whenever a saved layout changes.
FORMAT_VERSION = 3


def check_format(path: Path, saved: Mapping[str, Any], fix: str) -> None:
    """InputError (one line naming `path`) unless `saved` (a JSON file's object) is of FORMAT_VERSION; `fix`: what
    to do about an older one (retrain, prepare again)."""
    found = saved.get("format_version") if isinstance(saved, Mapping) else None
    if found == FORMAT_VERSION:
        return
    by = saved.get("foxhunt_version", "an unknown version") if isinstance(saved, Mapping) else "an unknown version"
    what = "no format_version" if found is None else f"format_version {found!r}"
    newer = isinstance(found, int) and found > FORMAT_VERSION
    raise InputError(f"{path}: {what} (written by foxhunt {by}); this foxhunt {foxhunt.__version__} reads format "
                     f"{FORMAT_VERSION} only: {fix}{' (or upgrade foxhunt)' if newer else ''}")
