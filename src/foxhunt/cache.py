"""foxhunt's cache folder: files it can always make again (the bundled sample, the exchange sessions), kept so that
the next run need not."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """$FOXHUNT_CACHE_DIR, else ~/.cache/foxhunt (not created here)."""
    return Path(os.environ.get("FOXHUNT_CACHE_DIR") or Path.home() / ".cache" / "foxhunt").expanduser()
