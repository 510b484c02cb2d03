"""The run directory: one place that names every file a run writes.

Every file is written atomically (temporary name, then rename), so a file that exists is complete; `train.log`,
`metrics.jsonl` and `memory.jsonl` are append-only logs written line by line.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass
from pathlib import Path

from foxhunt.errors import InputError

LOG_FORMAT = "%(asctime)s %(levelname)s %(message)s"
CALIBRATION_FILE = "calibration.json"


@dataclass(frozen=True)
class RunDir:
    root: Path

    @property
    def config(self) -> Path:
        return self.root / "config.json"

    @property
    def data_summary(self) -> Path:
        return self.root / "data_summary.json"

    @property
    def rolls(self) -> Path:
        return self.root / "rolls.json"

    @property
    def metrics(self) -> Path:
        return self.root / "metrics.jsonl"

    @property
    def memory(self) -> Path:
        return self.root / "memory.jsonl"

    @property
    def weights(self) -> Path:
        return self.root / "model.safetensors"

    @property
    def model_json(self) -> Path:
        return self.root / "model.json"

    @property
    def calibration(self) -> Path:
        """Conformal shifts fitted on the validation split after training (model/calibration.py)."""
        return self.root / CALIBRATION_FILE

    @property
    def checkpoint(self) -> Path:
        return self.root / "checkpoint.pt"

    @property
    def log(self) -> Path:
        return self.root / "train.log"

    @staticmethod
    def create(path: str | None, resume: bool = False, write: bool = True) -> RunDir:
        """A fresh run directory (default runs/<UTC time>); refuses to write over a finished run unless resuming.
        `write` False (the ranks of a distributed run other than 0): only the check, nothing is created."""
        if path is None:
            stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S.%fZ")
            path = str(Path("runs") / stamp)
        run = RunDir(Path(path))
        if not resume and (run.weights.exists() or run.checkpoint.exists()):
            raise InputError(
                f"--run-dir {run.root} already holds a run (model.safetensors / checkpoint.pt); "
                "choose a new --run-dir or continue it with --resume"
            )
        if not write:
            return run
        try:
            run.root.mkdir(parents=True, exist_ok=True)
            probe = run.root / ".foxhunt-write-test"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as e:
            raise InputError(f"--run-dir {run.root}: cannot write there ({e.strerror or type(e).__name__}); "
                             "choose a writable --run-dir") from None
        for stale in run.root.glob(".*.tmp"):  # left by a run killed while writing; never a complete file
            stale.unlink(missing_ok=True)
        return run


def attach_log_file(run: RunDir) -> logging.Handler:
    """Copy every `foxhunt` log record into RUN_DIR/train.log; the caller removes the handler when the run ends."""
    handler = logging.FileHandler(run.log, encoding="utf-8")
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    handler.setLevel(logging.INFO)
    logger = logging.getLogger("foxhunt")
    logger.addHandler(handler)
    if logger.level == logging.NOTSET or logger.level > logging.INFO:
        logger.setLevel(logging.INFO)
    return handler
