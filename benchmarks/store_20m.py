"""The feature store on a 20-million-row panel: prepare it, train a slice of an epoch from it, and the same from the
parquet directly; preparation rows/s, and the memory of each command (RSS, RssAnon, the cgroup's) against the
store's size on disk; with --without, `prepare` with memory tricks switched off, to see what each buys.

A synthetic Databento ohlcv-1m panel (four CME equity roots, quarterly contracts overlapping around each roll, as
benchmarks/windows_2m.py writes it) is split into one hive partition per UTC day (`date=YYYY-MM-DD/part-0.parquet`).
Each command then runs in a fresh child process (`foxhunt prepare`, `foxhunt train --features`, `foxhunt train
--parquet-file`), which samples its own /proc/self/statm every 20 ms (its workers' too; benchmarks/_memory.py):
RssAnon (the process's own memory) and RssFile (mapped file pages, the store's included, which the kernel can drop
at will) are reported apart, with VmHWM (= getrusage ru_maxrss, their sum's peak; the kernel updates it lazily, so
the larger of it and the sampled peak of VmRSS is reported), and the rise of the cgroup's memory.current (its
processes' anonymous memory and the page cache charged to it: the store's pages written or read) where it is
readable. Each training run starts with none of the store in the page cache (posix_fadvise DONTNEED), as a store
larger than memory would. Wall and CPU seconds (user + system, all threads) of each child too.
Issue 13's targets, each printed with PASS or MISS: preparation > 1,000,000 rows/s on 2 cores (wall; rows per CPU
second / 2 beside it), and training's peak anonymous memory (RssAnon) < 25% of the store's size: its RSS also counts
the store's pages mapped by the batches, page cache the kernel reclaims when memory is short.

Validation runs over every validation window after the slice of an epoch, so the store is prepared with a short
validation period (--val-fraction 0.002): the training slice, not validation, is what is measured.
Run: python benchmarks/store_20m.py [--rows 20000000] [--max-train-batches 50] [--workdir DIR] [--keep]
     [--workers 2] [--prepare-only | --train-only] [--skip-direct] [--repeat N] [--inputs N] [--flags '...']
     [--without TRICKS ...]
`foxhunt prepare` runs its series groups in worker processes (data/prepare): its CPU seconds include theirs,
and its peak RSS is reported for the process alone and with its workers ("+workers").
The machine may be shared: wall times then include waiting for the CPU; CPU seconds do not. On Linux the seconds
the hypervisor gave other guests (steal) and the cores sat waiting for the disk (iowait) during `prepare` are
printed beside it, and --repeat N runs each command N times, each listed, the rates taken from the run of median
wall time: one run's wall time on a shared VM says as much about the host's hour as about the code.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl

from foxhunt.allocator import POLARS_ALLOCATOR, polars_allocator_for

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _memory import TRICKS, WITHOUT, Peaks, names, status, switch_off  # noqa: E402
from windows_2m import write_futures_file  # noqa: E402  (the same synthetic panel, one file)

DATA_FLAGS = ["--encoder-length", "64", "--horizon", "5", "--val-fraction", "0.002", "--test-fraction", "0.2"]
MODEL_FLAGS = ["--hidden-size", "16", "--attention-heads", "2", "--epochs", "1", "--batch-size", "256",
               "--validation-batch-size", "1024", "--no-progress", "--threads", "2", "-q"]


ROWS_PER_GROUP = 6_000_000  # windows_2m's panel spans at most ~1,300 sessions of its four roots (~7M rows)


def write_daily_panel(folder: Path, rows: int, inputs: int = 0) -> int:
    """About `rows` ohlcv-1m rows as hive partitions by UTC day; returns the number of rows written. Past
    ROWS_PER_GROUP rows the panel holds several groups of four roots, each group's roots renamed with a digit
    (`ES1H2`: root ES1) and its instrument ids offset. `inputs`: that many extra real columns x1..xN (random walks
    over the panel's rows), for `--observed`."""
    groups = -(-rows // ROWS_PER_GROUP)
    frames = []
    for g in range(groups):
        single = folder.parent / f"panel-{g}.parquet"
        write_futures_file(single, rows // groups, seed=g)
        frame = pl.read_parquet(single)
        single.unlink()
        if g:
            renamed = pl.col("symbol").str.replace(r"^(.+)([FGHJKMNQUVXZ]\d)$", f"${{1}}{g}${{2}}")
            frame = frame.with_columns(symbol=renamed, instrument_id=pl.col("instrument_id") + 100_000 * g)
        frames.append(frame)
    frame = pl.concat(frames).sort("ts_event", "instrument_id").with_columns(date=pl.col("ts_event").dt.date())
    del frames
    rng = np.random.default_rng(0)
    frame = frame.with_columns(pl.Series(name, np.cumsum(rng.standard_normal(frame.height))) for name in
                               input_names(inputs))
    for (day,), part in frame.partition_by("date", as_dict=True, maintain_order=True).items():
        target = folder / f"date={day}" / "part-0.parquet"
        target.parent.mkdir(parents=True, exist_ok=True)
        part.drop("date").write_parquet(target)
    return frame.height


def input_names(inputs: int) -> list[str]:
    return [f"x{i}" for i in range(1, inputs + 1)]


# --- the measured child -----------------------------------------------------------------------------------------


def child(args: list[str]) -> None:
    """Run `foxhunt ARGS` in this process, sampling its memory (_memory.Peaks: its workers' too); print one JSON line
    of measurements. The tricks named in FOXHUNT_BENCH_WITHOUT are switched off first (_memory.switch_off). The start
    RSS is taken after the libraries the command uses are imported: what its process holds before it reads data
    (`prepare` never imports torch, as the CLI runs it; `train` does)."""
    if args[0] != "prepare":
        import torch  # noqa: F401 - imported before the start RSS is taken

    from foxhunt.cli import main

    off = switch_off()
    base = status()
    peaks = Peaks().start()
    t0, c0 = time.perf_counter(), time.process_time()
    kids0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    code = main(args)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)  # prepare's workers, joined by now
    wall = time.perf_counter() - t0
    cpu = time.process_time() - c0 + (kids.ru_utime + kids.ru_stime) - (kids0.ru_utime + kids0.ru_stime)
    got = peaks.stop()
    end = status()
    print(json.dumps({"code": code, "without": off, "wall_s": wall, "cpu_s": cpu, "base_rss_mb": base["VmRSS"],
                      "base_anon_mb": base["RssAnon"], "peak_rss_mb": max(end["VmHWM"], got["VmRSS"]),
                      "peak_anon_mb": got["RssAnon"], "peak_file_mb": got["RssFile"],
                      "sampled_peak_rss_mb": got["VmRSS"], "peak_tree_rss_mb": max(got["tree_rss"], got["VmRSS"]),
                      "peak_tree_anon_mb": max(got["tree_anon"], got["RssAnon"]), "cgroup_peak_mb": got["cgroup"],
                      "cgroup_start_mb": got["cgroup_start"]}))


def run_child(args: list[str], without: str = "") -> dict:
    """One command in a fresh process, with the memory tricks `without` (_memory.TRICKS names, comma-separated)
    switched off; its measurements, with ru_maxrss of the children so far (MiB).

    The child imports polars before it runs the command, so polars' allocator is set here, as the CLI sets it for
    that command (foxhunt/allocator.py); not from this process's variable, where polars has written its default."""
    env = {k: v for k, v in os.environ.items() if k not in (POLARS_ALLOCATOR, WITHOUT)}
    polars_allocator_for(args[0], env)
    env[WITHOUT] = without
    before = host_seconds()
    out = subprocess.run([sys.executable, __file__, "--child", *args], capture_output=True, text=True, check=False,
                         env=env)
    after = host_seconds()
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0 or not lines:
        raise SystemExit(f"foxhunt {' '.join(args)} failed ({out.returncode}):\n{out.stdout[-3000:]}{out.stderr[-3000:]}")
    result = json.loads(lines[-1])
    if result["code"] != 0:
        raise SystemExit(f"foxhunt {' '.join(args)} exited {result['code']}:\n{out.stderr[-3000:]}")
    result["children_maxrss_mb"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    if before is not None and after is not None:
        result.update({k: after[k] - before[k] for k in before})
    return result


def drop_cache(folder: Path) -> None:
    """Ask the kernel to drop the page cache of every file under `folder` (posix_fadvise DONTNEED; written pages are
    flushed first), so that a command reads it from the disk as a store larger than memory would be: every train
    run then starts from the same page cache, whatever the runs before it read."""
    for f in folder.rglob("*"):
        if f.is_file():
            fd = os.open(f, os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def host_seconds() -> dict[str, float] | None:
    """The machine's CPU seconds so far (all cores, /proc/stat) that no process here could use: `steal_s`, taken by
    the hypervisor for other guests, and `iowait_s`, idle while waiting for the disk; None off Linux. A run's share
    of them says how much of its wall time the machine, not the code, decided."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    if fields[0] != "cpu" or len(fields) < 9:
        return None
    tick = os.sysconf("SC_CLK_TCK")
    return {"iowait_s": int(fields[5]) / tick, "steal_s": int(fields[8]) / tick}


def size_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


def median_run(runs: list[dict]) -> dict:
    """The run of median wall time (of an even number, the slower of the two in the middle)."""
    return sorted(runs, key=lambda m: m["wall_s"])[len(runs) // 2]


def cgroup_rise(m: dict) -> str:
    """What the run added to the cgroup's memory (its peak less the memory at its start), or '-' unreadable."""
    return "-" if m.get("cgroup_peak_mb") is None else f"{m['cgroup_peak_mb'] - m['cgroup_start_mb']:,.0f}"


def report(rows: int, files: int, parquet_mb: float, store_mb: float, preps: list[dict], store: dict | None,
           direct: dict | None) -> None:
    """One table of the measured commands and the targets' PASS/MISS (`store` None: prepare alone). With several
    `prepare` runs (`preps`) each is listed, and the rates are those of the run of median wall time."""
    prep = median_run(preps)
    rate, cpu_rate = rows / prep["wall_s"], rows / (prep["cpu_s"] / 2)
    print(f"panel: {rows:,} rows in {files} daily files, {parquet_mb:,.0f} MiB of parquet; store {store_mb:,.0f} MiB")
    print(f"{'command':<30} {'wall s':>7} {'cpu s':>7} {'start RSS':>9} {'peak RSS':>9} {'anon':>7} {'file':>7} "
          f"{'% store':>8} {'+workers':>9} {'anon':>7} {'cgroup+':>8}  (MiB; anon/file: peaks of RssAnon/RssFile "
          "sampled every 20 ms; +workers: the peak of the process's and its workers' RSS together, and of their "
          "RssAnon; cgroup+: the rise of the cgroup's memory.current, page cache included)")
    for name, m in (("prepare", prep), ("train --features (store)", store), ("train --parquet-file (direct)", direct)):
        if m is None:
            continue
        print(f"{name:<30} {m['wall_s']:7.1f} {m['cpu_s']:7.1f} {m['base_rss_mb']:9,.0f} {m['peak_rss_mb']:9,.0f} "
              f"{m['peak_anon_mb']:7,.0f} {m['peak_file_mb']:7,.0f} {100 * m['peak_rss_mb'] / store_mb:7.0f}% "
              f"{m['peak_tree_rss_mb']:9,.0f} {m['peak_tree_anon_mb']:7,.0f} {cgroup_rise(m):>8}")
    if len(preps) > 1:
        print(f"prepare, {len(preps)} runs (steal: CPU seconds the hypervisor gave other guests; iowait: idle waiting "
              "for the disk; both over the machine's 2 cores):")
        for i, m in enumerate(preps, 1):
            host = (f"   steal {m['steal_s']:4.1f} s  iowait {m['iowait_s']:4.1f} s" if "steal_s" in m else "")
            print(f"  run {i}: {m['wall_s']:5.1f} s wall {m['cpu_s']:5.1f} s CPU  {rows / m['wall_s']:>11,.0f} rows/s"
                  f"{host}")
        over = sum(rows / m["wall_s"] > 1e6 for m in preps)
        print(f"  {over} of {len(preps)} runs over 1,000,000 rows/s on wall time; the rates below are the median "
              "run's")
    elif "steal_s" in prep:
        print(f"the machine during prepare: steal {prep['steal_s']:.1f} s, iowait {prep['iowait_s']:.1f} s (CPU seconds "
              "over its 2 cores the hypervisor gave other guests, and idle waiting for the disk)")
    print(f"preparation rows/s on wall time (target > 1,000,000): {rate:,.0f}  {'PASS' if rate > 1e6 else 'MISS'}")
    print(f"preparation rows/s on CPU time / 2 cores: {cpu_rate:,.0f}  {'PASS' if cpu_rate > 1e6 else 'MISS'}")
    if store is None:
        return
    ratio = store["peak_anon_mb"] / store_mb
    print(f"train from the store: peak RssAnon {100 * ratio:.0f}% of the store (target < 25%)  "
          f"{'PASS' if ratio < 0.25 else 'MISS'}; peak RSS {store['peak_rss_mb']:,.0f} MiB "
          f"({100 * store['peak_rss_mb'] / store_mb:.0f}% of the store), of it mapped file pages "
          f"{store['peak_file_mb']:,.0f} MiB (the store's pages the batches read, and the libraries: page cache the "
          f"kernel reclaims); RssAnon above the interpreter and libraries (after importing torch) "
          f"{100 * (store['peak_anon_mb'] - store['base_anon_mb']) / store_mb:.0f}% of the store")


def compare(runs: dict[tuple[str, str], list[dict]]) -> None:
    """One line per command and set of tricks switched off: medians of wall and CPU seconds, and of each memory peak
    (MiB), over the runs of that pair (`runs`: (command, without) -> measurements)."""
    print(f"\n{'command':<9} {'without':<16} {'runs':>4} {'wall s':>7} {'cpu s':>7} {'RSS':>7} {'RssAnon':>7} "
          f"{'RssFile':>7} {'+wk RSS':>8} {'+wk anon':>8} {'cgroup+':>8}  (medians; MiB)")
    for (command, without), ms in runs.items():
        def med(key: str, ms: list[dict] = ms) -> float:
            return float(np.median([m[key] for m in ms]))

        rises = [m["cgroup_peak_mb"] - m["cgroup_start_mb"] for m in ms if m.get("cgroup_peak_mb") is not None]
        rise = f"{np.median(rises):8,.0f}" if rises else f"{'-':>8}"
        print(f"{command:<9} {without or '(none)':<16} {len(ms):4d} {med('wall_s'):7.1f} {med('cpu_s'):7.1f} "
              f"{med('peak_rss_mb'):7,.0f} {med('peak_anon_mb'):7,.0f} {med('peak_file_mb'):7,.0f} "
              f"{med('peak_tree_rss_mb'):8,.0f} {med('peak_tree_anon_mb'):8,.0f} {rise}")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2:])
        return
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=20_000_000)
    p.add_argument("--max-train-batches", type=int, default=50)
    p.add_argument("--workdir", type=Path, default=None, help="Default: a temporary directory, deleted after.")
    p.add_argument("--keep", action="store_true", help="Keep the panel, the store and the runs.")
    p.add_argument("--workers", type=int, default=2, help="`foxhunt prepare --workers` (0: in memory, one piece).")
    p.add_argument("--prepare-only", action="store_true", help="Measure `foxhunt prepare` alone.")
    p.add_argument("--train-only", action="store_true", help="Measure training alone, from the store already in "
                   "--workdir (a run with --keep made it).")
    p.add_argument("--repeat", type=int, default=1, help="Run each command this many times (each `prepare` into a "
                   "fresh store): each run is listed, and the rates are the median run's.")
    p.add_argument("--without", nargs="*", default=[], metavar="TRICKS", help="Also run `prepare` with these "
                   f"memory tricks switched off, one set per word (names: {', '.join(TRICKS)}; 'direct+trim' "
                   "switches two off at once), alternating with the default run by run; a table of medians follows "
                   "(training from a store runs none of them).")
    p.add_argument("--inputs", type=int, default=0, help="Add this many real columns to the bars and declare them "
                   "--observed (what inputs of your own cost at scale); the panel is written to its own folder.")
    p.add_argument("--flags", default="", help="More data flags for prepare and train, e.g. '--context ES'.")
    p.add_argument("--skip-direct", action="store_true", help="Do not train from the parquet directly (it needs "
                   "the memory of prepare).")
    a = p.parse_args()
    if a.repeat < 1:
        p.error("--repeat takes 1 or more")
    for spec in a.without:
        names(spec)  # SystemExit naming a trick that is not one
    work = a.workdir or Path(tempfile.mkdtemp(prefix="store_20m."))
    panel, store = work / ("panel" if not a.inputs else f"panel-{a.inputs}-inputs"), work / "store"
    declared = (["--observed", ",".join(input_names(a.inputs))] if a.inputs else []) + a.flags.split()
    work.mkdir(parents=True, exist_ok=True)
    runs: dict[tuple[str, str], list[dict]] = {}
    try:
        t0 = time.perf_counter()
        rows = write_daily_panel(panel, a.rows, a.inputs) if not panel.exists() else pl.scan_parquet(
            str(panel / "**" / "*.parquet")).select(pl.len()).collect().item()
        print(f"panel written in {time.perf_counter() - t0:.0f}s", flush=True)
        files = sum(1 for _ in panel.rglob("*.parquet"))
        for _ in range(0 if a.train_only else a.repeat):
            for without in ["", *a.without]:
                shutil.rmtree(store, ignore_errors=True)  # each run writes a new store: none to replace (and delete)
                m = run_child(["prepare", "--parquet-file", str(panel), *DATA_FLAGS, *declared, "--workers",
                               str(a.workers), "--out", str(store)], without)
                runs.setdefault(("prepare", without), []).append(m)
                print(f"prepare{' without ' + without if without else ''}: {m}", flush=True)
        preps = runs.get(("prepare", ""), [])
        if a.prepare_only:
            report(rows, files, size_mb(panel), size_mb(store), preps, None, None)
            if a.without:
                compare(runs)
            return
        slice_flags = [*MODEL_FLAGS, "--max-train-batches", str(a.max_train_batches)]
        for r in range(a.repeat):
            drop_cache(store)
            m = run_child(["train", "--features", str(store), *slice_flags, "--run-dir", str(work / f"run-store-{r}")])
            runs.setdefault(("train", ""), []).append(m)
            print(f"train --features: {m}", flush=True)
        from_store = median_run(runs[("train", "")])
        direct = None if a.skip_direct else run_child(["train", "--parquet-file", str(panel), *DATA_FLAGS, *declared,
                                                       *slice_flags, "--run-dir", str(work / "run-direct")])
        print(f"train --parquet-file: {direct}", flush=True)
        if preps:
            report(rows, files, size_mb(panel), size_mb(store), preps, from_store, direct)
        if a.without:
            compare(runs)
    finally:
        if not a.keep and a.workdir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
