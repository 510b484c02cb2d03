"""What 8 inputs of your own cost (issue 34): training throughput and peak memory of `foxhunt train`, and the size
and peak memory of `foxhunt prepare`, on the bundled sample with and without 8 real --observed covariates (a
covariate file of 8 random-walk columns stamped every minute), the two alternating.

    python benchmarks/inputs_speed.py [--repeats 3] [--out /tmp/inputs_speed]

Each command runs as its own process (`python -m foxhunt`), one thread; peak RSS is os.wait4's ru_maxrss of that
process; train samples/s is the training loop's own rate (metrics.jsonl, validation excluded), 2 epochs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl

N_INPUTS = 8


def timed(args: list[str]) -> tuple[float, float]:
    """(wall s, peak RSS MiB) of `python -m foxhunt ARGS`."""
    t = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "foxhunt", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env={**os.environ, "OMP_NUM_THREADS": "1"})
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"foxhunt {' '.join(args)} failed")
    return time.perf_counter() - t, usage.ru_maxrss / 1024


def covariates(sample: Path, out: Path) -> list[str]:
    """A file of N_INPUTS random walks, one row per minute over the sample's span."""
    ts = pl.read_parquet(sample, columns=["ts_event"])["ts_event"]
    minutes = pl.datetime_range(ts.min().replace(second=0, microsecond=0), ts.max(), "1m", eager=True,
                                time_zone="UTC")
    rng = np.random.default_rng(0)
    names = [f"x{i}" for i in range(N_INPUTS)]
    pl.DataFrame({"time": minutes, **{n: np.cumsum(rng.normal(0, 1, len(minutes))) for n in names}}).write_parquet(out)
    return names


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", type=Path, default=Path("/tmp/inputs_speed"))
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    sample, cov = a.out / "sample.parquet", a.out / "cov.parquet"
    subprocess.run([sys.executable, "-m", "foxhunt", "sample", "--out", str(sample)], check=True,
                   stdout=subprocess.DEVNULL)
    names = covariates(sample, cov)
    flags = {"none": [], "8 inputs": ["--observed", ",".join(names), "--covariates", str(cov)]}
    got: dict[str, dict[str, list[float]]] = {k: {"rate": [], "train_rss": [], "prep_s": [], "prep_rss": [],
                                                   "store_mib": []} for k in flags}
    for r in range(a.repeats):
        for label, extra in flags.items():
            run_dir, store = a.out / f"run-{label[0]}-{r}", a.out / f"store-{label[0]}-{r}"
            _, rss = timed(["train", "-f", str(sample), *extra, "--epochs", "2", "--threads", "1", "--no-progress",
                            "--quiet", "--run-dir", str(run_dir)])
            rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
            got[label]["rate"].append(statistics.median(x["samples_per_s"] for x in rows if "samples_per_s" in x))
            got[label]["train_rss"].append(rss)
            wall, rss = timed(["prepare", "-f", str(sample), *extra, "--workers", "0", "--out", str(store)])
            got[label]["prep_s"].append(wall)
            got[label]["prep_rss"].append(rss)
            got[label]["store_mib"].append(sum(f.stat().st_size for f in store.rglob("*") if f.is_file()) / 2**20)
            print(label, r, {k: round(v[-1], 1) for k, v in got[label].items()}, flush=True)
    print(f"\n{'':10s} {'train samples/s':>16s} {'train peak MiB':>15s} {'prepare s':>10s} {'prepare peak MiB':>17s} "
          f"{'store MiB':>10s}   (medians of {a.repeats})")
    for label, v in got.items():
        m = {k: statistics.median(x) for k, x in v.items()}
        print(f"{label:10s} {m['rate']:16,.0f} {m['train_rss']:15,.0f} {m['prep_s']:10.1f} {m['prep_rss']:17,.0f} "
              f"{m['store_mib']:10.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
