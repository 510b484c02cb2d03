"""A per-epoch progress bar (loss and samples/s) on stderr; silent when not wanted."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn


class EpochBar:
    def __init__(self, progress: Progress | None, task: int | None):
        self._progress, self._task = progress, task

    def update(self, advance: int, loss: float | None, samples_per_s: float) -> None:
        if self._progress is not None and self._task is not None:
            text = f"loss {loss:.4f}  {samples_per_s:,.0f} samples/s" if loss is not None else ""
            self._progress.update(self._task, advance=advance, info=text)


@contextmanager
def epoch_bar(epoch: int, epochs: int, total_batches: int, enabled: bool) -> Iterator[EpochBar]:
    if not enabled:
        yield EpochBar(None, None)
        return
    console = Console(stderr=True)
    with Progress(
        TextColumn(f"epoch {epoch}/{epochs}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
        TextColumn("{task.fields[info]}"), console=console, transient=True,
    ) as progress:
        task = progress.add_task("train", total=total_batches, info="")
        yield EpochBar(progress, task)
