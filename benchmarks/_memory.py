"""What a measured process holds in memory, and the memory tricks of foxhunt switched off to see what each buys.

A process's resident set (RSS, VmRSS) is its anonymous memory (RssAnon: heap, arrays, what only freeing gives back)
plus the file pages it has mapped (RssFile: libraries, and the page cache of any file it maps, a feature store's
included, which the kernel drops when memory is short). The cgroup's memory.current (cgroup v2; memory.usage_in_bytes
on v1) is the anonymous memory of every process in the cgroup plus the page cache charged to it, mapped or not: the
files its processes wrote or read first. A trick that lowers RSS but neither RssAnon nor memory.current only moved
pages between the process and the page cache.

`Peaks` samples a process (and its descendants) every 20 ms; `status` reads it once. `WITHOUT` (the environment
variable FOXHUNT_BENCH_WITHOUT, a comma-separated list of names in TRICKS) switches tricks off in a benchmark's
measured process and in the worker processes `foxhunt prepare` spawns (`switch_off`), by monkeypatching: no user
option exists for them.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

PAGE_MB = os.sysconf("SC_PAGE_SIZE") / 2**20
WITHOUT = "FOXHUNT_BENCH_WITHOUT"


def status(pid: int | str = "self") -> dict[str, float]:
    """VmRSS, VmHWM (the kernel's peak of VmRSS), RssAnon and RssFile of `pid` in MiB, from /proc/PID/status."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return {k: int(fields[k].split()[0]) / 1024 for k in ("VmRSS", "VmHWM", "RssAnon", "RssFile")}


def statm(pid: int | str = "self") -> dict[str, float]:
    """VmRSS, RssFile and RssAnon of `pid` (MiB) from /proc/PID/statm, one line: parsing all of /proc/PID/status every
    20 ms cost ~1.4 ms of the GIL each time, which slowed a measured command ~5%. statm's shared pages are RssFile +
    RssShmem (no shared memory here)."""
    resident, shared = (int(x) for x in Path(f"/proc/{pid}/statm").read_text().split()[1:3])
    return {"VmRSS": resident * PAGE_MB, "RssFile": shared * PAGE_MB, "RssAnon": (resident - shared) * PAGE_MB}


def descendants(pid: int | str = "self") -> list[str]:
    """The pids of every live descendant of `pid` (prepare's worker processes)."""
    out = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            out += task.read_text().split()
        except OSError:
            continue
    return out + [d for c in out for d in descendants(c)]


def cgroup_file(proc_cgroup: str | None = None, root: Path = Path("/sys/fs/cgroup")) -> Path | None:
    """The file that holds this process's cgroup's memory in use: memory.current (cgroup v2, mounted at `root` or at
    `root`/unified) or memory.usage_in_bytes (cgroup v1's memory controller); None where neither is readable.
    `proc_cgroup`: the text of /proc/self/cgroup (read when None)."""
    if proc_cgroup is None:
        try:
            proc_cgroup = Path("/proc/self/cgroup").read_text()
        except OSError:
            return None
    candidates = []
    for line in proc_cgroup.splitlines():
        _, controllers, path = line.split(":", 2)
        rel = path.lstrip("/")
        if controllers == "":
            candidates += [root / rel / "memory.current", root / "unified" / rel / "memory.current"]
        elif "memory" in controllers.split(","):
            candidates.append(root / "memory" / rel / "memory.usage_in_bytes")
    for file in candidates:
        try:
            int(file.read_text())
        except (OSError, ValueError):
            continue
        return file
    return None


def cgroup_mb(file: Path | None) -> float | None:
    """The cgroup's memory in use (MiB) from `file` (cgroup_file); None without one."""
    if file is None:
        return None
    try:
        return int(file.read_text()) / 2**20
    except (OSError, ValueError):
        return None


KEYS = ("VmRSS", "RssAnon", "RssFile", "tree_rss", "tree_anon", "cgroup")


class Peaks:
    """The peaks of VmRSS, RssAnon, RssFile (of `pid`), of VmRSS and RssAnon summed over `pid` and its descendants
    (tree_rss, tree_anon) and of the cgroup's memory (cgroup; None where unreadable), sampled every `every` seconds on
    a thread from `start` to `stop`. `mark` gives the peaks since the previous mark (a stage's), `stop` those of the
    whole run; `start_cgroup` is the cgroup's memory when sampling began, so that peak - start is what the run added
    (the cgroup holds the page cache of earlier runs too)."""

    def __init__(self, pid: int | str = "self", every: float = 0.02, tree: bool = True) -> None:
        self.pid, self.every, self.tree = pid, every, tree
        self.file = cgroup_file()
        self.start_cgroup = cgroup_mb(self.file)
        self.run: dict[str, float] = dict.fromkeys(KEYS, 0.0)
        self.since: dict[str, float] = dict.fromkeys(KEYS, 0.0)
        self._kid_cache: list[str] = []
        self._ticks = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._lock = threading.Lock()

    def start(self) -> Peaks:
        self.start_cgroup = cgroup_mb(self.file)
        self.take()
        self._thread.start()
        return self

    def take(self) -> None:
        """One sample now (also taken every `every` seconds by the thread)."""
        try:
            now = statm(self.pid)
        except (OSError, ValueError):  # the process just ended
            return
        kids = self._kids() if self.tree else []
        tree_rss, tree_anon = now["VmRSS"], now["RssAnon"]
        for kid in kids:
            try:
                k = statm(kid)
            except (OSError, ValueError):  # a worker that just ended
                continue
            tree_rss, tree_anon = tree_rss + k["VmRSS"], tree_anon + k["RssAnon"]
        sample = {**now, "tree_rss": tree_rss, "tree_anon": tree_anon, "cgroup": cgroup_mb(self.file) or 0.0}
        with self._lock:
            for peaks in (self.run, self.since):
                for k in KEYS:
                    peaks[k] = max(peaks[k], sample[k])

    def mark(self) -> dict[str, float]:
        """The peaks since the previous mark (or the start), and a new window from now."""
        self.take()
        with self._lock:
            out, self.since = self.since, dict.fromkeys(KEYS, 0.0)
        return out

    def stop(self) -> dict[str, float | None]:
        """The run's peaks (MiB), with cgroup_start; the cgroup's figures None where it is unreadable."""
        self.take()
        self._done.set()
        self._thread.join()
        out: dict[str, float | None] = dict(self.run)
        if self.file is None:
            out["cgroup"] = None
        out["cgroup_start"] = self.start_cgroup
        return out

    def _kids(self) -> list[str]:
        if self._ticks % 10 == 0:  # finding the descendants reads every thread's children file: every 10th sample
            self._kid_cache = descendants(self.pid)
        self._ticks += 1
        return self._kid_cache

    def _loop(self) -> None:
        while not self._done.wait(self.every):
            self.take()


# --- the tricks, and how each is switched off ---------------------------------------------------------------------


def _nothing(*args: object, **kwargs: object) -> None:
    return None


def _no_direct(path: object, blocks: object, offset: object) -> int:
    """put._direct refusing every write: put writes every byte with pwrite through the page cache."""
    return 0


# name -> the (module, attribute, stand-in) each switches off; an attribute may be a class's ("Class.method")
TRICKS: dict[str, tuple[tuple[str, str, Callable[..., object]], ...]] = {
    # store/put.py: the rows' whole blocks written with O_DIRECT through a staging buffer
    "direct": (("foxhunt.data.store.put", "_direct", _no_direct),),
    # the malloc_trims left (allocator.release_freed_memory): after the known grid, before the windowed rows
    "trim-grid": (("foxhunt.data.features.known", "release_freed_memory", _nothing),),
    "trim-window": (("foxhunt.data.dataset.featurize", "release_freed_memory", _nothing),),
    "trim": (("foxhunt.data.features.known", "release_freed_memory", _nothing),
             ("foxhunt.data.dataset.featurize", "release_freed_memory", _nothing)),
}


def names(spec: str) -> list[str]:
    """The trick names in `spec` (comma- or plus-separated); SystemExit naming any that is not one."""
    out = [n.strip() for n in spec.replace("+", ",").split(",") if n.strip()]
    bad = [n for n in out if n not in TRICKS]
    if bad:
        raise SystemExit(f"{WITHOUT}: no trick named {bad[0]!r}; the tricks: {', '.join(TRICKS)}")
    return out


def target(module: str, attribute: str) -> tuple[object, str]:
    """(the object that holds `attribute`, its last name) in `module`; AttributeError where it is gone (a switch
    that set a new name nobody reads would measure nothing)."""
    import importlib

    owner: object = importlib.import_module(module)
    *path, last = attribute.split(".")
    for part in path:
        owner = getattr(owner, part)
    getattr(owner, last)
    return owner, last


def _switch(spec: str) -> list[str]:
    off = names(spec)
    for name in off:
        for module, attribute, stand_in in TRICKS[name]:
            owner, last = target(module, attribute)
            setattr(owner, last, stand_in)
    return off


def switch_off(spec: str | None = None) -> list[str]:
    """Switch off the tricks named in `spec` (default: the WITHOUT variable) in this process, and in the worker
    processes `foxhunt prepare` starts from now on (they run this module's `_worker_start`, which reads the variable
    they inherit). Returns the names switched off."""
    off = _switch(os.environ.get(WITHOUT, "") if spec is None else spec)
    if off:
        from foxhunt.data.prepare import executor

        if executor._start is not _worker_start:
            globals()["_ORIGINAL_START"] = executor._start
            executor._start = _worker_start
    return off


_ORIGINAL_START: Callable[[], None] | None = None


def _worker_start() -> None:
    """A spawned worker of `foxhunt prepare`: the executor's own start, then the WITHOUT tricks switched off here."""
    from foxhunt.data.prepare import executor

    (_ORIGINAL_START or executor._start)()
    _switch(os.environ.get(WITHOUT, ""))
