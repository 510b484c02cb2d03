"""Reading a hive-partitioned directory of daily 1-minute parquet files: rows/s and peak RSS of `read_bars`.

A synthetic Databento-style panel (`symbol=ESM4/date=YYYY-MM-DD/part-0.parquet`, the symbol in the folder name only,
columns as `to_df().to_parquet()` writes them plus two wide columns no reader needs) is written once into a temporary
folder; then each case runs in a fresh process, which reports its wall time, CPU time and peak RSS
(the child's own `ru_maxrss`, read in it at the end). Cases:
- import: the interpreter, polars and foxhunt.data.io.read alone (the floor under every other peak);
- full: the whole directory;
- last30: only the last 30 days (`read_bars(since=...)`; code without the option reads everything and filters);
- es1m / dbn: the shared 1-minute fixture as parquet and as DBN (databento, and with it pandas, imported before the
  clock starts).
Run: python benchmarks/read_partitioned.py [--rows 2000000] [--repeat 3]
Numbers on a machine shared with other work vary by tens of percent; compare runs made side by side.
"""

from __future__ import annotations

import argparse
import datetime as dt
import inspect
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl

FIXTURES = Path(__file__).resolve().parents[1].parent / "shared" / "fixtures"
BARS_PER_DAY = 23 * 60  # 23:00 to 22:00 UTC, a CME equity session
SYMBOLS = ("ESM4", "NQM4")


def write_panel(root: Path, rows: int, seed: int = 0) -> int:
    """About `rows` 1-minute bars over weekday partitions, split evenly across SYMBOLS; returns the files written."""
    rng = np.random.default_rng(seed)
    n_days = max(1, rows // (BARS_PER_DAY * len(SYMBOLS)))
    days = [d for d in (dt.date(2019, 1, 1) + dt.timedelta(k) for k in range(n_days * 2)) if d.weekday() < 5][:n_days]
    minutes = np.arange(BARS_PER_DAY, dtype=np.int64) * 60 * 10**9
    for s, symbol in enumerate(SYMBOLS):
        price = 3000.0 * (s + 1)
        for day in days:
            start = int(dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC).timestamp() * 1e9) - 3600 * 10**9
            close = price * np.exp(np.cumsum(rng.normal(0, 2e-4, BARS_PER_DAY)))
            price = float(close[-1])
            open_ = np.r_[close[0], close[:-1]]
            spread = np.abs(rng.normal(0, 2e-4, BARS_PER_DAY)) * close
            frame = pl.DataFrame({
                "ts_event": pl.Series(start + minutes).cast(pl.Datetime("ns", "UTC")),
                "rtype": pl.Series(np.full(BARS_PER_DAY, 33, np.uint8)),
                "publisher_id": pl.Series(np.full(BARS_PER_DAY, 1, np.uint16)),
                "instrument_id": pl.Series(np.full(BARS_PER_DAY, 4001 + s, np.uint32)),
                "open": open_,
                "high": np.maximum(open_, close) + spread,
                "low": np.minimum(open_, close) - spread,
                "close": close,
                "volume": pl.Series(rng.integers(1, 500, BARS_PER_DAY).astype(np.uint64)),
                "order_book": rng.normal(size=BARS_PER_DAY),  # wide columns the reader must not materialise
                "notes": pl.Series(["x" * 64] * BARS_PER_DAY),
            })
            folder = root / f"symbol={symbol}" / f"date={day.isoformat()}"
            folder.mkdir(parents=True, exist_ok=True)
            frame.write_parquet(folder / "part-0.parquet")
    return len(days) * len(SYMBOLS)


def child(case: str, path: str, since: str | None) -> None:
    """One measured read in this process; prints {rows, wall_s, cpu_s}."""
    from foxhunt.data.io.read import read_bars

    if case == "import":
        print(json.dumps({"rows": 0, "wall_s": 0.0, "cpu_s": 0.0, "rss_mib": _peak_mib()}))
        return
    if case == "dbn":
        import databento  # noqa: F401 - imported before timing: the table times decoding, not pandas' import
    t0, c0 = time.perf_counter(), time.process_time()
    if since and "since" in inspect.signature(read_bars).parameters:
        raw, _ = read_bars([path], since=since)
    else:
        raw, _ = read_bars([path])
        if since:  # code without date bounds: read everything, keep the tail
            raw = raw.filter(pl.col("ts") >= dt.datetime.fromisoformat(since).replace(tzinfo=dt.UTC))
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(json.dumps({"rows": raw.height, "wall_s": wall, "cpu_s": cpu, "rss_mib": _peak_mib()}))


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def measure(case: str, path: str, since: str | None) -> dict:
    """Run `child` in a fresh interpreter; {rows, wall_s, cpu_s, rss_mib} as it printed them."""
    cmd = [sys.executable, __file__, "--child", case, "--path", path] + (["--since", since] if since else [])
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--child")
    ap.add_argument("--path")
    ap.add_argument("--since")
    args = ap.parse_args()
    if args.child:
        child(args.child, args.path, args.since)
        return
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "panel"
        n_files = write_panel(root, args.rows)
        last = max(p.name.split("=")[1] for p in (root / f"symbol={SYMBOLS[0]}").iterdir())
        since = (dt.date.fromisoformat(last) - dt.timedelta(30)).isoformat()
        size = sum(p.stat().st_size for p in root.rglob("*.parquet")) / 2**20
        print(f"panel: {n_files} files, {size:.0f} MiB, last day {last}; foxhunt from {_foxhunt_path()}")
        cases = [("import", str(root), None), ("es1m", str(FIXTURES / "es_fut_ohlcv1m_databento.parquet"), None),
                 ("dbn", str(FIXTURES / "es_fut_ohlcv1m_databento.dbn.zst"), None), ("last30", str(root), since),
                 ("full", str(root), None)]
        print(f"{'case':<8} {'rows':>10} {'wall s':>8} {'cpu s':>8} {'rows/s':>12} {'peak RSS MiB':>13}")
        for case, path, bound in cases:
            runs = [measure(case, path, bound) for _ in range(args.repeat)]
            wall = float(np.median([r["wall_s"] for r in runs]))
            cpu = float(np.median([r["cpu_s"] for r in runs]))
            rows = runs[0]["rows"]
            rate = f"{rows / wall:,.0f}" if wall else "-"
            rss = float(np.median([r["rss_mib"] for r in runs]))
            print(f"{case:<8} {rows:>10,} {wall:>8.3f} {cpu:>8.3f} {rate:>12} {rss:>13.0f}")


def _foxhunt_path() -> str:
    out = subprocess.run([sys.executable, "-c", "import foxhunt; print(foxhunt.__file__)"],
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


if __name__ == "__main__":
    main()
