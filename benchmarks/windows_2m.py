"""Windows for 2,000,000 bars: time and peak memory of `prepare_from_bars`, and the cost of one batch.

The reference is what a per-window copy would hold (W x T x F floats): the window index must stay O(rows x features).
Run: python benchmarks/windows_2m.py [--rows 2000000] [--series 4] [--encoder-length 64] [--horizon 5]
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np
import polars as pl
import psutil
import torch

from foxhunt.data.config import DataConfig
from foxhunt.data.load import LoadedBars
from foxhunt.data.prepare import prepare_from_bars


def synth_bars(rows: int, n_series: int, seed: int = 0) -> pl.DataFrame:
    """`rows` 1-minute bars split over `n_series` series: a random walk with clustered volatility, sorted by series."""
    rng = np.random.default_rng(seed)
    per = rows // n_series
    n = per * n_series
    start = np.datetime64("2015-01-04T23:00", "ns").astype(np.int64)
    ts = start + np.tile(np.arange(per, dtype=np.int64), n_series) * 60 * 10**9
    vol = 1e-4 * np.exp(np.repeat(rng.normal(0, 0.3, n // 500 + 1), 500)[:n])
    ret = rng.standard_normal(n) * vol
    close = 4000.0 * np.exp(np.cumsum(ret))
    open_ = np.concatenate([[close[0]], close[:-1]])
    wick = np.abs(rng.standard_normal(n)) * vol * close
    names = np.repeat([f"S{i}" for i in range(n_series)], per)
    return pl.DataFrame(
        {
            "series": names,
            "ts": pl.Series(ts).cast(pl.Datetime("ns", "UTC")),
            "open": open_,
            "high": np.maximum(open_, close) + wick,
            "low": np.minimum(open_, close) - wick,
            "close": close,
            "volume": rng.integers(1, 5000, n).astype(np.float64),
            "contract": names,
        }
    )


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def median_seconds(fn, reps: int = 20) -> float:
    """Median wall time of `fn()` after one warm-up call (robust to other processes on a shared machine)."""
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--series", type=int, default=4)
    ap.add_argument("--encoder-length", type=int, default=64)
    ap.add_argument("--horizon", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=1024)
    args = ap.parse_args()

    bars = synth_bars(args.rows, args.series)
    loaded = LoadedBars(bars=bars, rolls=[], report={"rows_read": bars.height, "bar_interval": "1m"})
    cfg = DataConfig(encoder_length=args.encoder_length, horizon=args.horizon, scaling="volatility")
    rss_before = psutil.Process().memory_info().rss / 2**20
    peak_before = peak_rss_mb()

    t0 = time.perf_counter()
    data = prepare_from_bars(loaded, cfg)
    t_prepare = time.perf_counter() - t0
    peak_after = peak_rss_mb()

    w = data.windows
    train = data.splits["train"]
    ids = train[torch.randperm(len(train), generator=torch.Generator().manual_seed(0))[: args.batch_size]]
    t_batch = median_seconds(lambda: w.batch(ids))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # intra-op threads stall when other processes hold the cores
    t_batch_1 = median_seconds(lambda: w.batch(ids))
    torch.set_num_threads(threads)

    tensors = [
        v for v in vars(w).values() if isinstance(v, torch.Tensor)
    ]  # row tensors and the window starts
    held = sum(t.element_size() * t.nelement() for t in tensors)
    per_window = w.n_windows * (cfg.window_length * w.cont.shape[1] * 4 + cfg.horizon * 4)

    rows = [
        ("bars", f"{bars.height:,}"),
        ("series", f"{args.series}"),
        ("windows (all splits)", f"{w.n_windows:,}"),
        ("prepare_from_bars", f"{t_prepare:.2f} s"),
        ("RSS before prepare", f"{rss_before:,.0f} MB"),
        ("peak RSS before / after prepare", f"{peak_before:,.0f} / {peak_after:,.0f} MB"),
        ("window tensors held", f"{held / 2**20:,.0f} MB"),
        ("per-window copies would hold", f"{per_window / 2**20:,.0f} MB"),
        ("ratio copies / index", f"{per_window / held:,.1f}x"),
        (f"batch({args.batch_size}), {threads} torch threads", f"{t_batch * 1e3:.2f} ms"),
        (f"batch({args.batch_size}), 1 torch thread", f"{t_batch_1 * 1e3:.2f} ms"),
    ]
    width = max(len(k) for k, _ in rows)
    print(f"{'measure':<{width}}  value")
    for k, v in rows:
        print(f"{k:<{width}}  {v}")


if __name__ == "__main__":
    main()
