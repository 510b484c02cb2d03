"""Pass/fail checks on run directories, for benchmarks/gpu_check.sh. Each prints one `PASS`/`FAIL` line with the
measured number next to its threshold, and exits 1 on FAIL.

  flat RUN MAX_MB            growth across every validation pass (device allocated on CUDA, host RSS on CPU) and from
                             epoch 1's first validation record to the end of the last epoch, both below MAX_MB
  budget RUN BUDGET_MB       no memory.jsonl record's device peak above the budget (CUDA; skipped on CPU)
  rungs RUN PHASE...         the run's out-of-memory rungs (memory.jsonl phases oom_*) include these, in this order
  same CLEAN FAULTY RTOL     same epochs, samples and train/val losses within RTOL (the ladder keeps the maths)
  forecasts CLEAN FAULTY RTOL  two forecasts files with the same rows and quantiles within RTOL
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def verdict(ok: bool, what: str) -> bool:
    print(f"{'PASS' if ok else 'FAIL'}  {what}", flush=True)
    return ok


def flat(run: str, max_mb: str) -> bool:
    recs = jsonl(Path(run) / "memory.jsonl")
    key = "device_allocated_mb" if recs[0]["device_allocated_mb"] is not None else "host_rss_mb"
    ok = True
    for epoch in sorted({r["epoch"] for r in recs if r["phase"] == "val_batch"}):
        val = [r for r in recs if r["phase"] == "val_batch" and r["epoch"] == epoch]
        growth = val[-1][key] - val[0][key]
        ok &= verdict(growth < float(max_mb), f"{run}: epoch {epoch} {key} growth across validation {growth:.2f} MiB "
                                              f"(< {max_mb})")
    start = next(r for r in recs if r["phase"] == "val_batch")
    end = [r for r in recs if r["phase"] == "checkpoint"][-1]
    growth = end[key] - start[key]
    return ok & verdict(growth < float(max_mb), f"{run}: {key} growth from epoch 1's validation to the end of the "
                                                f"last epoch {growth:.2f} MiB (< {max_mb})")


def budget(run: str, budget_mb: str) -> bool:
    peaks = [r["device_peak_mb"] for r in jsonl(Path(run) / "memory.jsonl") if r["device_peak_mb"] is not None]
    if not peaks:
        print(f"SKIP  {run}: no device peaks (CPU run)")
        return True
    return verdict(max(peaks) <= float(budget_mb), f"{run}: device peak {max(peaks):.0f} MiB (<= {budget_mb})")


def rungs(run: str, *want: str) -> bool:
    seen = [r["phase"] for r in jsonl(Path(run) / "memory.jsonl") if r["phase"].startswith("oom_")]
    it = iter(seen)
    ok = all(any(s == w for s in it) for w in want)  # a subsequence, in order
    return verdict(ok, f"{run}: rungs {seen} contain {list(want)}")


def same(clean: str, faulty: str, rtol: str) -> bool:
    a = [r for r in jsonl(Path(clean) / "metrics.jsonl") if "train_loss" in r]
    b = [r for r in jsonl(Path(faulty) / "metrics.jsonl") if "train_loss" in r]
    if [(r["epoch"], r["train_samples"], r["val_samples"]) for r in a] != [
            (r["epoch"], r["train_samples"], r["val_samples"]) for r in b]:
        return verdict(False, f"{faulty}: epochs or samples differ from {clean}")
    diff = max(abs(rb[k] - ra[k]) / max(abs(ra[k]), 1e-12) for ra, rb in zip(a, b, strict=True)
               for k in ("train_loss", "val_loss"))
    losses = " ".join(f"{ra['val_loss']:.7f}/{rb['val_loss']:.7f}" for ra, rb in zip(a, b, strict=True))
    return verdict(diff <= float(rtol), f"{faulty}: val losses clean/laddered {losses}; max relative difference "
                                        f"{diff:.2e} (<= {rtol})")


def forecasts(clean: str, faulty: str, rtol: str) -> bool:
    import numpy as np
    import polars as pl

    a, b = pl.read_parquet(clean), pl.read_parquet(faulty)
    keys = ["symbol", "origin", "horizon"]
    if not a.select(keys).equals(b.select(keys)):
        return verdict(False, f"{faulty}: rows differ from {clean}")
    cols = [c for c in a.columns if c.startswith("p")]
    diff = max(float(np.max(np.abs(b[c].to_numpy() - a[c].to_numpy()) / np.maximum(np.abs(a[c].to_numpy()), 1e-6)))
               for c in cols)
    return verdict(diff <= float(rtol), f"{faulty}: {len(a)} rows, max relative quantile difference {diff:.2e} "
                                        f"(<= {rtol})")


if __name__ == "__main__":
    checks = {"flat": flat, "budget": budget, "rungs": rungs, "same": same, "forecasts": forecasts}
    sys.exit(0 if checks[sys.argv[1]](*sys.argv[2:]) else 1)
