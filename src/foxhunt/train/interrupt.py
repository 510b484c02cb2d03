"""Stopping on SIGINT / SIGTERM without losing work.

While the training loop runs, the first signal only sets a flag: the loop finishes the step (or the validation pass)
it is in, writes a checkpoint at that exact position and raises `Interrupted`, which the CLI turns into exit status
128 + the signal (130 for SIGINT, 143 for SIGTERM) and one line saying how to resume. A second signal stops at once
(the previous checkpoint stays). Outside the loop (reading data, planning memory) a signal stops at once too.
"""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path
from types import FrameType, TracebackType

log = logging.getLogger("foxhunt.train")

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(Exception):  # noqa: N818 (a stop the user asked for, not an error)
    """The run stopped on a signal; `checkpoint` says whether a resumable checkpoint is on disk."""

    def __init__(self, signum: int, run_dir: Path | None, checkpoint: bool, where: str = ""):
        self.signum, self.run_dir, self.checkpoint, self.where = signum, run_dir, checkpoint, where
        super().__init__(self.message())

    @property
    def exit_code(self) -> int:
        return 128 + int(self.signum)

    def message(self) -> str:
        name = signal.Signals(self.signum).name
        if self.checkpoint and self.run_dir is not None:
            at = f" at {self.where}" if self.where else ""
            return (f"interrupted by {name}{at}; checkpoint.pt is saved, continue with: "
                    f"foxhunt train --run-dir {self.run_dir} --resume")
        return f"interrupted by {name} before the first checkpoint; nothing to resume, start the run again"


class StopRequest:
    """Signal handlers for the duration of a run; `deferred` is True while the loop can stop cleanly."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.deferred = False
        self._previous: dict[int, object] = {}

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is not None or not self.deferred:
            self.signum = signum
            raise KeyboardInterrupt(signal.Signals(signum).name)
        self.signum = signum
        log.warning("%s: stopping after this step with a checkpoint (send it again to stop at once)",
                    signal.Signals(signum).name)

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():  # handlers can only be set there
            for s in SIGNALS:
                self._previous[s] = signal.signal(s, self._handle)
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        for s, h in self._previous.items():
            signal.signal(s, h)  # type: ignore[arg-type]
        self._previous.clear()
