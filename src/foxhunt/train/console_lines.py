"""What a training run says on the console: a short header, one line per epoch with its memory, warnings that stand
out, and final lines that say where everything is.

The header and epoch lines carry `extra=SHOW`; the details behind them (the memory plan table, every `[MEMORY]`
record, the full data summary) are untagged, so only `--verbose` shows them, while train.log keeps every line.

Memory warnings, from the records the MemoryTracker takes anyway:
- growth across validation: validation keeps nothing past its batch, so the process's own host memory (RssAnon:
  not the file pages of a mapped feature store, which the kernel reads in as validation touches them) and, on CUDA,
  allocated device memory should end a pass where it began. Above 1 MiB per 100 validation batches, never below GROWTH_FLOOR_MB
  (RSS moves by a page or two between reads), it is a leak; the failure foxhunt was written against leaked about 2 MiB
  a batch, in every pass. A process's first pass is not judged: it allocates once what later passes reuse (the
  allocator's arenas for the pass's threads: +0.3 to +7.8 MiB in the first pass of the quality benchmark's 27 runs,
  at most +1.3 MiB in any later one).
- a plan that was exceeded: on CUDA the measured peak of the training (validation) phase against the plan's
  predicted step peak at the batch size in use, beyond the plan's own fragmentation allowance. On CPU the process's
  peak resident set against the budget the plan was made for (--memory-budget, or the memory free when the run
  started): the resident set holds much that no plan of a step counts (libraries, data, the allocator's arenas),
  which the plan takes as `fixed_bytes`, measured before it.
"""

from __future__ import annotations

import logging
import math
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from foxhunt.data.io.sample_path import is_bundled_sample
from foxhunt.train.plan import FRAGMENTATION, MIB

if TYPE_CHECKING:
    from foxhunt.train.telemetry import PhasePeaks

GROWTH_PER_BATCH_MB = 0.01  # 1 MiB per 100 validation batches
GROWTH_FLOOR_MB = 4.0


class WarningCounter(logging.Handler):
    """Counts the warnings (and errors) logged during a run and keeps the first, for the final summary."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0
        self.first: str | None = None

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1
        if self.first is None:
            self.first = record.getMessage()

    def summary(self, log_file: Path) -> str | None:
        if not self.count:
            return None
        if self.count == 1:
            return f"1 warning in this run (see {log_file}): {self.first}"
        return f"{self.count} warnings in this run (all in {log_file}); the first: {self.first}"


# -- the header ------------------------------------------------------------------------------------------------------


def data_line(summary: dict[str, Any], paths: tuple[str, ...]) -> str:
    """`data: bundled ES sample (simulated), 27,353 1m bars in 1 series (2024-02-18 .. 2024-03-15), 1 roll; windows train ...`"""
    if is_bundled_sample(paths):
        source = "bundled ES sample (simulated)"
    else:
        source = Path(paths[0]).name if len(paths) == 1 else f"{len(paths)} paths"
    span = summary.get("date_range") or {}
    rolls = len(summary.get("rolls") or [])
    windows = summary.get("windows") or {}
    return (
        f"data: {source}, {summary.get('rows', 0):,} {summary.get('bar_interval', '')} bars in "
        f"{len(summary.get('series') or {})} series ({str(span.get('start', '?'))[:10]} .. "
        f"{str(span.get('end', '?'))[:10]}), {rolls} roll{'' if rolls == 1 else 's'}; windows "
        + " / ".join(f"{k} {n:,}" for k, n in windows.items())
    )


def predicted_mb(plan: dict[str, Any], batch: int, step: str) -> float:
    """The plan's predicted peak (MiB) of a `step` ("train" or "val") at `batch`, which need not be a row of the
    plan: every term is linear in the batch size, so the nearest two rows give it (beyond them, the last two)."""
    rows = sorted(plan["rows"], key=lambda r: r["batch_size"])
    if len(rows) == 1:
        return rows[0][step]["total"] / MIB
    i = next((k for k, r in enumerate(rows) if r["batch_size"] >= batch), len(rows) - 1)
    lo, hi = rows[max(0, i - 1)], rows[max(1, i)]
    b0, b1 = lo["batch_size"], hi["batch_size"]
    t0, t1 = lo[step]["total"], hi[step]["total"]
    return (t0 + (t1 - t0) * (batch - b0) / (b1 - b0)) / MIB


def plan_line(plan: dict[str, Any] | None, batch: int, val_batch: int, saved: bool = False) -> str:
    """The memory plan as one line: `plan: train batch 128 needs 49 MiB of 19,975 usable (budget 22,774 MiB, 522 held
    outside the step); validation batch 256 ...`"""
    if plan is None:
        return (f"plan: none (batch sizes given: train {batch:,}, validation {val_batch:,}); "
                "`foxhunt plan-memory` predicts their memory")
    where = "" if plan.get("device", "cpu") == "cpu" else f" on {plan['device']}"
    if plan.get("fixed_bytes"):  # CPU: the process's budget, less what it held before the plan
        where = f" (budget {plan['budget_bytes'] / MIB:,.0f} MiB, {plan['fixed_bytes'] / MIB:,.0f} held outside the step)"
    return (
        f"plan: train batch {batch:,} needs {predicted_mb(plan, batch, 'train'):,.0f} MiB of "
        f"{plan['usable_bytes'] / MIB:,.0f} usable{where}; validation batch {val_batch:,} needs "
        f"{predicted_mb(plan, val_batch, 'val'):,.0f} MiB" + (" (as resolved when the run started)" if saved else "")
    )


# -- each epoch ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EpochMemory:
    """Peaks (MiB) of an epoch's training and validation phases, and the growth across its validation pass.
    Device fields are None off CUDA; `*_host` the resident set's peak (a mapped store's pages included), `*_anon`
    the highest of the process's own memory (RssAnon) the phase's records saw, what a CPU budget is checked
    against."""

    train_device: float | None
    train_host: float
    val_device: float | None
    val_host: float
    growth_device: float | None
    growth_host: float
    val_batches: int
    train_anon: float
    val_anon: float

    @staticmethod
    def measure(train: PhasePeaks, val: PhasePeaks, val_start: dict[str, Any], val_end: dict[str, Any],
                val_batches: int) -> EpochMemory:
        """From the tracker's peaks of each phase and its val_start / val_end records."""
        growth_device = None
        if val_start["device_allocated_mb"] is not None:
            growth_device = val_end["device_allocated_mb"] - val_start["device_allocated_mb"]
        own = "host_anon_mb" if "host_anon_mb" in val_start and "host_anon_mb" in val_end else "host_rss_mb"
        return EpochMemory(train.device, train.host, val.device, val.host, growth_device,
                           val_end[own] - val_start[own], val_batches, train.anon, val.anon)

    def text(self) -> str:
        """`mem peak host 463 MiB, val +1.0 MiB` (CUDA: `mem peak device 812 host 1,520 MiB, val device +0.0 ...`)."""
        host = max(self.train_host, self.val_host)
        if self.train_device is None or self.val_device is None or self.growth_device is None:
            return f"mem peak host {host:,.0f} MiB, val {self.growth_host:+.1f} MiB"
        device = max(self.train_device, self.val_device)
        return (f"mem peak device {device:,.0f} host {host:,.0f} MiB, val device {self.growth_device:+.1f} "
                f"host {self.growth_host:+.1f} MiB")

    def growth_limit(self) -> float:
        return max(GROWTH_FLOOR_MB, GROWTH_PER_BATCH_MB * self.val_batches)


class MemoryWatch:
    """The memory warnings of a run, epoch by epoch; a plan that was exceeded is said once per phase."""

    def __init__(self, plan: dict[str, Any] | None, batch: int):
        self.plan, self.batch = plan, batch
        self.exceeded: set[str] = set()
        self.passes = 0  # validation passes judged so far: the first one's growth is the pass's one-off allocation

    def warnings(self, epoch: int, m: EpochMemory, val_batch: int) -> list[str]:
        """What went wrong with memory in `epoch` (validated at `val_batch`), one line each."""
        out = []
        limit = m.growth_limit()
        first, self.passes = not self.passes, self.passes + 1
        for meter, growth in (("device memory", m.growth_device), ("host memory (RssAnon)", m.growth_host)):
            if not first and growth is not None and growth > limit:
                out.append(f"memory grew across validation in epoch {epoch}: {meter} +{growth:.1f} MiB over "
                           f"{m.val_batches:,} batches (more than {limit:.1f} MiB): something keeps data past its "
                           "batch; memory.jsonl has the records")
        if self.plan is None:
            return out
        if m.train_device is None:
            return out + self._over_host_budget(epoch, m, val_batch)
        for phase, measured, batch, step in (("training", m.train_device, self.batch, "train"),
                                             ("validation", m.val_device, val_batch, "val")):
            predicted = predicted_mb(self.plan, batch, step)
            if measured is None or phase in self.exceeded or measured <= predicted * (1 + FRAGMENTATION):
                continue
            self.exceeded.add(phase)
            out.append(f"memory plan exceeded in epoch {epoch}: {phase} at batch {batch:,} peaked at "
                       f"{measured:,.0f} MiB, the plan predicted {predicted:,.0f} MiB (+{FRAGMENTATION:.0%} "
                       "allowance); batch sizes it chose may not fit the budget: pass a smaller --batch-size / "
                       "--validation-batch-size")
        return out

    def _over_host_budget(self, epoch: int, m: EpochMemory, val_batch: int) -> list[str]:
        """CPU: a phase whose own memory (its highest RssAnon record) went past the plan's budget; a mapped store's
        file pages are page cache, not counted (a plan from before `fixed_bytes` was made against the step alone, so
        it is not checked)."""
        plan, out = self.plan or {}, []
        if "fixed_bytes" not in plan:
            return out
        budget, fixed = plan["budget_bytes"] / MIB, plan["fixed_bytes"] / MIB
        for phase, measured, batch, step in (("training", m.train_anon, self.batch, "train"),
                                             ("validation", m.val_anon, val_batch, "val")):
            if phase in self.exceeded or measured <= budget:
                continue
            self.exceeded.add(phase)
            out.append(f"memory budget exceeded in epoch {epoch}: {phase} at batch {batch:,} peaked at {measured:,.0f} "
                       f"MiB of host memory, over the {budget:,.0f} MiB budget (the plan: {fixed:,.0f} MiB held "
                       f"outside the step and {predicted_mb(plan, batch, step):,.0f} MiB for it); pass a smaller "
                       "--batch-size / --validation-batch-size or raise --memory-budget")
        return out


def validation_batches(n_windows: int, batch: int) -> int:
    return math.ceil(n_windows / max(1, batch))


# -- the end ---------------------------------------------------------------------------------------------------------


def vs_baseline(val_loss: float, baseline_loss: float) -> str:
    """`val_loss 0.15527 vs baseline 0.16514 (6.0% lower)`."""
    change = 100 * (1 - val_loss / baseline_loss)
    return (f"val_loss {val_loss:.5f} vs baseline {baseline_loss:.5f} "
            f"({abs(change):.1f}% {'lower' if change >= 0 else 'HIGHER'})")


def next_commands(run: Path, paths: tuple[str, ...], features: str | None = None) -> list[str]:
    """The commands that come next, with this run's data (its feature store when it trained from one): evaluate and
    the memory report. No --start: evaluate scores only the bars after the validation period by default
    (evaluate/period.py), the period that neither training, early stopping nor calibration has seen."""
    files = [] if is_bundled_sample(paths) else list(paths)
    evaluate = ["foxhunt", "evaluate", "--model", str(run), "--out-dir", str(run / "eval")]
    for flag, f in [("--features", features)] if features else [("--parquet-file", f) for f in files]:
        evaluate += [flag, f]
    return [shlex.join(evaluate), shlex.join(["foxhunt", "memory-report", str(run)])]
