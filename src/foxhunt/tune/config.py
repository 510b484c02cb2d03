"""`foxhunt tune`'s own options (each trial takes `foxhunt train`'s), declared on their fields (foxhunt/flags.py):
a flag of the command and a key of its `--config` file, written once."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from foxhunt.errors import InputError
from foxhunt.flags import OUTPUT, SEARCH, option


@dataclass(frozen=True)
class TuneConfig:
    # In the study in total (finished or pruned), counting earlier runs of the same study.
    trials: int = option(dataclasses.MISSING, "Trials in the study in total (run again to go on).", SEARCH)
    out_dir: Path = option(Path("tune"), "Where trials/, study.db, best.toml etc. go.", OUTPUT, metavar="PATH",
                           flags=("--out-dir",))
    search: Path | None = option(None, "Search space TOML.", SEARCH, metavar="PATH", show_default="the README's")
    timeout: float | None = option(None, "Stop starting trials after this many seconds.", SEARCH, metavar="S")
    storage: str | None = option(None, "Optuna storage URL, shared across processes.", SEARCH, metavar="URL",
                                 show_default="sqlite:///OUT_DIR/study.db")
    study_name: str = option("foxhunt", "The study's name in the storage.", SEARCH, metavar="NAME")
    seed: int = 0  # the sampler's (train's --seed), plus the number of trials in the study when this process starts

    def __post_init__(self) -> None:
        if self.trials < 1:
            raise InputError(f"--trials must be at least 1, got {self.trials}")
        if self.timeout is not None and self.timeout <= 0:
            raise InputError(f"--timeout must be positive seconds, got {self.timeout}")

    @property
    def storage_url(self) -> str:
        return self.storage or f"sqlite:///{(self.out_dir / 'study.db').resolve()}"
