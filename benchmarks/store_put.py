"""What O_DIRECT buys `prepare` when it writes a store's rows (data/store/put.py): 2 GiB of float32 rows written with
`put` into a fresh .npy in 16 pieces, as shipped (whole blocks past the page cache) and through the page cache
(benchmarks/_memory.py's `direct` switch), each in a fresh process, alternating.

Each run prints its wall and CPU seconds for the writes, the fsync that follows (what the page cache still held
dirty), the peaks of RSS and RssAnon (sampled every 20 ms) and the rise of the cgroup's memory.current (the page
cache charged to it: the written pages that stayed cached).
Run: python benchmarks/store_put.py [--repeat 2] [--gib 2] [--dir /tmp]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _memory import WITHOUT, Peaks, switch_off  # noqa: E402

PIECES = 16
WIDTH = 12  # float32 columns a row, as a store's `cont` array


def measure(path: Path, gib: float) -> dict:
    """Write `gib` GiB of rows into `path` with put (the tricks in FOXHUNT_BENCH_WITHOUT switched off first)."""
    from numpy.lib.format import open_memmap

    from foxhunt.data.store.put import put

    off = switch_off()
    rows = int(gib * 2**30) // (4 * WIDTH) // PIECES * PIECES
    open_memmap(path, mode="w+", dtype=np.float32, shape=(rows, WIDTH))
    piece = np.random.default_rng(0).standard_normal((rows // PIECES, WIDTH)).astype(np.float32)  # (rows/16, 12)
    peaks = Peaks(tree=False).start()
    t0, c0 = time.perf_counter(), time.process_time()
    for k in range(PIECES):
        put(path, k * len(piece), piece)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    fd = os.open(path, os.O_RDONLY)
    t1 = time.perf_counter()
    os.fsync(fd)
    fsync = time.perf_counter() - t1
    os.close(fd)
    got = peaks.stop()
    rise = None if got["cgroup"] is None else got["cgroup"] - got["cgroup_start"]
    return {"without": off, "write_s": wall, "cpu_s": cpu, "fsync_s": fsync, "peak_rss_mb": got["VmRSS"],
            "peak_anon_mb": got["RssAnon"], "cgroup_rise_mb": rise}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--gib", type=float, default=2.0)
    ap.add_argument("--dir", type=Path, default=None, help="where to write (default: a temporary directory)")
    ap.add_argument("--measure", type=Path, help=argparse.SUPPRESS)  # the child process
    a = ap.parse_args()
    if a.measure:
        print(json.dumps(measure(a.measure, a.gib)))
        return
    with tempfile.TemporaryDirectory(dir=a.dir) as tmp:
        path = Path(tmp) / "rows.npy"
        for _ in range(a.repeat):
            for without in ("", "direct"):
                out = subprocess.run([sys.executable, __file__, "--measure", str(path), "--gib", str(a.gib)],
                                     check=True, capture_output=True, text=True, env={**os.environ, WITHOUT: without})
                m = json.loads(out.stdout.strip().splitlines()[-1])
                path.unlink()
                rise = "-" if m["cgroup_rise_mb"] is None else f"{m['cgroup_rise_mb']:,.0f}"
                print(f"{'through the page cache' if without else 'O_DIRECT':<24} write {m['write_s']:6.2f} s wall "
                      f"{m['cpu_s']:5.2f} s CPU, fsync {m['fsync_s']:5.2f} s; peak RSS {m['peak_rss_mb']:,.0f} MiB, "
                      f"RssAnon {m['peak_anon_mb']:,.0f} MiB; cgroup +{rise} MiB", flush=True)


if __name__ == "__main__":
    main()
