"""Memory measured while training: one `[MEMORY]` log line and one `memory.jsonl` record per call.

The trainer this project replaces claimed memory fixes in its log that its code lacked; here every number comes from
the allocator or the kernel at the moment of the call. Each record carries the peak since the previous record (device
peak counters and the host high-water mark are reset after every record), so a record's peak belongs to the phase
that just ended, not to the whole run.

Record keys (memory.jsonl, one JSON object per line; MiB = 2**20 bytes):
- phase, epoch, batch: where in the run (batch is null outside per-batch records).
- device_allocated_mb: bytes held by live tensors (torch.cuda.memory_allocated).
- device_reserved_mb: bytes the caching allocator holds from the driver (torch.cuda.memory_reserved).
- device_peak_mb: highest allocated since the previous record (torch.cuda.max_memory_allocated, then reset).
- device_total_mb: the device's capacity (get_device_properties(...).total_memory).
- host_rss_mb: the process's resident set now (VmRSS; psutil where /proc cannot tell).
- host_anon_mb: its anonymous part (RssAnon): the resident set without file pages, such as a mapped feature store's,
  which the kernel reads in and drops as it pleases (the resident set where /proc cannot tell).
- host_peak_mb: the process's peak resident set since the previous record. On Linux this is VmHWM from
  /proc/self/status, reset after each record by writing "5" to /proc/self/clear_refs. Where that reset is not
  allowed (or off Linux) it falls back to resource.getrusage's ru_maxrss, which is the peak since the process
  started and cannot be reset: then host_peak_mb only ever grows.
- time: unix seconds (float).
- reason (out-of-memory ladder records only, phases oom_*): what was done and why, e.g. "out of memory in
  training step 3 (micro-batch 32): releasing caches and retrying it once".
- device_nvml_used_mb (CUDA only, only when pynvml imports): device-wide used memory as NVML sees it, which includes
  the CUDA context, other libraries' allocations and other processes: memory torch's allocator does not count.
Device fields are null on CPU (and on any non-CUDA device).

Under torchrun every rank measures its own process; records that all ranks make at the same point (phase
boundaries, checkpoints, per-batch training records, the training step's out-of-memory rungs, which all ranks climb
together) carry the maximum of each number over the ranks, and only rank 0 logs and writes them. Validation's
per-batch records and rungs are rank 0's own (see `rank_local`).
"""

from __future__ import annotations

import logging
import re
import resource
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

import psutil
import torch

from foxhunt.allocator import glibc
from foxhunt.atomic import append_jsonl

MIB = 2**20
_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")
_M_MMAP_THRESHOLD = -3  # mallopt parameter number in glibc's malloc.h
_STATUS_KB = re.compile(r"^(VmRSS|RssAnon|VmHWM):\s+(\d+)\s+kB", re.MULTILINE)


class PhasePeaks(NamedTuple):
    """The highest of a window of records (MiB): device_peak_mb (None off CUDA), host_peak_mb (the resident set's
    peak, file pages included) and host_anon_mb (the process's own memory, what a CPU budget is checked against)."""

    device: float | None = None
    host: float = 0.0
    anon: float = 0.0

    def add(self, rec: dict[str, Any]) -> PhasePeaks:
        device = self.device if rec["device_peak_mb"] is None else max(self.device or 0.0, rec["device_peak_mb"])
        return PhasePeaks(device, max(self.host, rec["host_peak_mb"]), max(self.anon, rec["host_anon_mb"]))


class MemoryTracker:
    """Logs and appends memory records at phase boundaries; call `record` from the training loop.

    `every` > 0 makes `maybe_record` record on batches whose index is a multiple of `every` (0 turns per-batch
    records off). `jsonl_path` None logs only.
    """

    def __init__(self, device: torch.device, jsonl_path: Path | None, logger: logging.Logger, every: int = 0):
        if every < 0:
            raise ValueError(f"every must be >= 0, got {every}")
        self.device = torch.device(device)
        self.jsonl_path = Path(jsonl_path) if jsonl_path is not None else None
        self.logger = logger
        self.every = every
        self._cuda = self.device.type == "cuda" and torch.cuda.is_available()
        self._cuda_index = (
            (self.device.index if self.device.index is not None else torch.cuda.current_device())
            if self._cuda
            else None
        )
        self._total_mb = (
            torch.cuda.get_device_properties(self._cuda_index).total_memory / MIB if self._cuda else None
        )
        self._nvml_handle = _nvml_handle(self._cuda_index) if self._cuda else None
        self._hwm_resettable = _reset_hwm()  # also starts the first record's host-peak window here
        if self._cuda:
            torch.cuda.reset_peak_memory_stats(self._cuda_index)
        self._phase_peaks = PhasePeaks()  # since take_peaks()
        # Under torchrun: the maximum over ranks of a few numbers (Dist.all_max); None in a single process
        self.reduce_max: Callable[[Sequence[float]], list[float]] | None = None
        self._local = False

    def record(self, phase: str, epoch: int | None = None, batch: int | None = None,
               reason: str | None = None) -> dict[str, Any]:
        """Measure now, log one `[MEMORY]` line, append one JSON line, reset the peaks; return the record.

        `reason` (the out-of-memory ladder's rungs) is kept in the record as "reason" and ends the log line; it is
        also logged as a warning of its own, since a run that had to recover from running out of memory should say
        so at every verbosity."""
        status = process_status()  # read once: the resident set, its anonymous part and its peak
        rec: dict[str, Any] = {
            "phase": phase,
            "epoch": epoch,
            "batch": batch,
            "device_allocated_mb": None,
            "device_reserved_mb": None,
            "device_peak_mb": None,
            "device_total_mb": self._total_mb,
            "host_rss_mb": host_rss_bytes(status) / MIB,
            "host_anon_mb": anon_rss_bytes(status) / MIB,
            "host_peak_mb": self.peak_host_mb(status),
            "time": time.time(),
        }
        if self._cuda:
            idx = self._cuda_index
            rec["device_allocated_mb"] = torch.cuda.memory_allocated(idx) / MIB
            rec["device_reserved_mb"] = torch.cuda.memory_reserved(idx) / MIB
            rec["device_peak_mb"] = torch.cuda.max_memory_allocated(idx) / MIB
            if self._nvml_handle is not None:
                rec["device_nvml_used_mb"] = _nvml_used_mb(self._nvml_handle)
            torch.cuda.reset_peak_memory_stats(idx)
        # The peak can lag RSS by a page or two between the two reads; a peak below "now" would read as nonsense.
        rec["host_peak_mb"] = max(rec["host_peak_mb"], rec["host_rss_mb"])
        if reason is not None:
            rec["reason"] = reason
        if self.reduce_max is not None and not self._local:
            _max_over_ranks(rec, self.reduce_max)
        if self._hwm_resettable:
            self._hwm_resettable = _reset_hwm()
        self._phase_peaks = self._phase_peaks.add(rec)
        self.logger.info(format_line(rec))
        if reason is not None:
            self.logger.warning(reason)
        if self.jsonl_path is not None:
            append_jsonl(self.jsonl_path, rec)
        return rec

    @contextmanager
    def rank_local(self) -> Iterator[None]:
        """Records made inside are this rank's own, not reduced over ranks: for code whose records the ranks do not
        make together (validation: its shards' batch counts and out-of-memory rungs differ between ranks)."""
        self._local, before = True, self._local
        try:
            yield
        finally:
            self._local = before

    def take_peaks(self) -> PhasePeaks:
        """The peaks over the records since the previous call, and start the next such window: called right after
        a phase's first record, then after its last, it gives the peaks of what ran in between."""
        peaks, self._phase_peaks = self._phase_peaks, PhasePeaks()
        return peaks

    def maybe_record(self, phase: str, epoch: int | None, batch: int) -> None:
        """Record when per-batch records are on (`every` > 0) and `batch` is a multiple of `every`."""
        if self.every > 0 and batch % self.every == 0:
            self.record(phase, epoch, batch)

    def peak_host_mb(self, status: dict[str, int] | None = None) -> float:
        """Peak resident set (MiB) since the previous record; since process start where the peak cannot be reset.
        `status`: process_status() read just now."""
        if self._hwm_resettable:
            status = process_status() if status is None else status
            if "VmHWM" in status:
                return status["VmHWM"] / MIB
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return rss / MIB if sys.platform == "darwin" else rss / 1024  # bytes on macOS, KiB elsewhere


def pin_host_allocator(threshold_bytes: int = 2**20) -> bool:
    """Make glibc malloc serve every block of `threshold_bytes` or more with its own mmap, returned to the kernel on
    free; True if set (glibc only).

    By default glibc raises this threshold each time a large block is freed (up to 32 MiB), after which activation-
    sized blocks come from the heap and stay resident once freed. On CPU that makes host memory track the training
    step's live tensors far less closely: in benchmarks/plan_vs_measured.py (TFT paper size, batch 16) the peak
    resident set over three steps was 1.59x the plan by default and 1.09x with the threshold pinned. Setting it once
    (at the start of a CPU run) also turns glibc's dynamic adjustment off. The cost is a page fault per fresh page.
    """
    libc = glibc()  # None where the C library is not glibc (e.g. musl): the allocator is left alone
    return libc is not None and bool(libc.mallopt(_M_MMAP_THRESHOLD, int(threshold_bytes)))


_MEASURED = ("device_allocated_mb", "device_reserved_mb", "device_peak_mb", "device_nvml_used_mb", "host_rss_mb",
             "host_anon_mb", "host_peak_mb")


def _max_over_ranks(rec: dict[str, Any], reduce_max: Callable[[Sequence[float]], list[float]]) -> None:
    """Replace each measured number of `rec` by its maximum over the ranks (-1 stands for a missing one; a number
    this rank does not measure stays missing, since the ranks of a run measure the same things)."""
    values = [-1.0 if rec.get(k) is None else float(rec[k]) for k in _MEASURED]
    for k, v in zip(_MEASURED, reduce_max(values), strict=True):
        if rec.get(k) is not None:
            rec[k] = v


def format_line(rec: dict[str, Any]) -> str:
    """The one-line log form of a record: `[MEMORY] phase=... epoch=... batch=... device ... host ...`."""

    def v(x: Any) -> str:
        return "-" if x is None else str(x)

    head = f"[MEMORY] phase={rec['phase']} epoch={v(rec['epoch'])} batch={v(rec['batch'])}"
    if rec["device_allocated_mb"] is None:
        dev = "device=cpu"
    else:
        dev = (
            f"device_allocated={rec['device_allocated_mb']:.1f}MiB device_reserved={rec['device_reserved_mb']:.1f}MiB "
            f"device_peak={rec['device_peak_mb']:.1f}MiB device_total={rec['device_total_mb']:.0f}MiB"
        )
        if rec.get("device_nvml_used_mb") is not None:
            dev += f" device_nvml_used={rec['device_nvml_used_mb']:.1f}MiB"
    host = f"host_rss={rec['host_rss_mb']:.1f}MiB host_peak={rec['host_peak_mb']:.1f}MiB"
    tail = f" reason={rec['reason']!r}" if rec.get("reason") else ""
    return f"{head} {dev} {host}{tail}"


def _reset_hwm() -> bool:
    """Reset the kernel's peak-RSS counter (VmHWM) for this process; False where that is not possible."""
    try:
        _CLEAR_REFS.write_text("5")
    except OSError:
        return False
    return "VmHWM" in process_status()


def _nvml_handle(cuda_index: int) -> Any:
    """The NVML handle of torch's device `cuda_index`, matched by UUID (indices differ under CUDA_VISIBLE_DEVICES)."""
    try:
        import pynvml  # optional: nvidia-ml-py

        pynvml.nvmlInit()
        uuid = str(torch.cuda.get_device_properties(cuda_index).uuid)
        if not uuid.startswith(("GPU-", "MIG-")):
            uuid = "GPU-" + uuid
        return pynvml.nvmlDeviceGetHandleByUUID(uuid)
    except Exception:  # no pynvml, no driver library, MIG slice without a handle: the field is optional
        return None


def _nvml_used_mb(handle: Any) -> float | None:
    try:
        import pynvml

        return pynvml.nvmlDeviceGetMemoryInfo(handle).used / MIB
    except Exception:
        return None


# The container's memory limit and use: cgroup v2, then v1 (a limit near 2**63 is v1's "none").
_CGROUP_FILES = ((Path("/sys/fs/cgroup/memory.max"), Path("/sys/fs/cgroup/memory.current")),
                 (Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"), Path("/sys/fs/cgroup/memory/memory.usage_in_bytes")))


def available_host_bytes() -> int:
    """Host memory this process can still take: the kernel's MemAvailable (psutil), or less where a cgroup
    (a container's memory limit) leaves less room: its limit minus its current use."""
    free = int(psutil.virtual_memory().available)
    for limit_file, usage_file in _CGROUP_FILES:
        try:
            limit = limit_file.read_text().strip()
            if limit == "max" or int(limit) >= 2**60:
                return free
            return max(0, min(free, int(limit) - int(usage_file.read_text().strip())))
        except (OSError, ValueError):
            continue
    return free


def free_bytes(device: torch.device) -> int:
    """Memory still free where `device`'s tensors live: a CUDA device's (mem_get_info), else the host's
    (`available_host_bytes`)."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    return available_host_bytes()


def process_status() -> dict[str, int]:
    """Bytes of this process's VmRSS, RssAnon and VmHWM, from one read of /proc/self/status; empty where there is
    none (off Linux)."""
    try:
        text = _STATUS.read_text()
    except OSError:
        return {}
    return {name: int(kb) * 1024 for name, kb in _STATUS_KB.findall(text)}


def host_rss_bytes(status: dict[str, int] | None = None) -> int:
    """The process's resident set; `status`: process_status() read just now."""
    status = process_status() if status is None else status
    return status["VmRSS"] if "VmRSS" in status else int(psutil.Process().memory_info().rss)


def anon_rss_bytes(status: dict[str, int] | None = None) -> int:
    """The process's own memory (RssAnon): its resident set without file pages, such as a mapped feature store's,
    which the kernel reads in and drops as it pleases; the resident set where /proc cannot tell. `status`:
    process_status() read just now."""
    status = process_status() if status is None else status
    return status["RssAnon"] if "RssAnon" in status else host_rss_bytes(status)


def held_outside_step(model: torch.nn.Module) -> int:
    """Host memory this process holds outside a training step, which a CPU memory plan leaves out of the budget:
    its own memory now (RssAnon: the interpreter, torch, the prepared data in memory, the allocator's arenas) less
    the model's weights, which the plan counts in every step. A mapped store's file pages are not counted: they are
    page cache, which MemAvailable already counts as free and the kernel reclaims."""
    weights = sum(t.numel() * t.element_size() for t in (*model.parameters(), *model.buffers()))
    return max(0, anon_rss_bytes() - weights)
