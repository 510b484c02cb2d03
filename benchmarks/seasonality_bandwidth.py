"""How much to smooth the time-of-day volatility profile (data/features/seasonality.py): measured on held-out time.

The profile is fitted on the training rows of the bundled ES sample (the default split) for several kernel
bandwidths and scored on the validation rows by QLIKE, mean(proxy / v + ln v) with v = c p(t)^2 and c the mean
proxy of the validation rows (the same for every bandwidth; lower is better), for two proxies: the squared range in
units of its training mean (what foxhunt fits on) and the squared return. The sample is synthetic, so the fitted
profile is also compared with the generator's own (`sample._seasonal_table`): RMS error of ln p over traded minutes.

    python benchmarks/seasonality_bandwidth.py
"""

from __future__ import annotations

import sys

import numpy as np

from foxhunt.data.bars.load import load_bars
from foxhunt.data.config import DataConfig
from foxhunt.data.features.bar_features import raw_features
from foxhunt.data.features.seasonality import fit_profile, minute_of_day, profile_at
from foxhunt.data.io.sample import _seasonal_table, bundled_sample_path

BANDWIDTHS = (0.0, 1.0, 2.0, 3.0, 5.0, 10.0, 15.0, 30.0)


def qlike(proxy: np.ndarray, p: np.ndarray) -> float:
    v = proxy.mean() * p**2
    return float(np.mean(proxy / v + np.log(v)))


def main() -> int:
    cfg = DataConfig(paths=(str(bundled_sample_path()),))
    bars = load_bars(cfg).bars.sort("series", "ts")
    feats = raw_features(bars, cfg.adjust, "log_return")
    ts = bars["ts"].dt.epoch("ns").to_numpy()
    lo, hi = ts.min(), ts.max()
    train = (ts < lo + (hi - lo) * 0.6) & ~feats["first"].to_numpy()
    val = (ts >= lo + (hi - lo) * 0.6) & (ts < lo + (hi - lo) * 0.8) & ~feats["first"].to_numpy()
    x2 = feats["log_range"].to_numpy() ** 2
    r2 = feats["log_return"].to_numpy() ** 2
    rng_proxy = x2 / x2[train].mean()
    truth = _seasonal_table()
    traded = np.unique(minute_of_day(ts[train], "America/Chicago"))
    print(f"{'bandwidth (min)':>16}{'QLIKE range':>14}{'QLIKE return':>14}{'RMS ln p vs truth':>19}")
    for bw in BANDWIDTHS:
        season = fit_profile(ts, rng_proxy, train, "America/Chicago", bw)
        p = profile_at(ts[val], season)
        lp = np.log(np.asarray(season.profile)[traded])
        lt = np.log(truth[traded])
        err = (lp - lp.mean()) - (lt - lt.mean())
        print(f"{bw:>16g}{qlike(rng_proxy[val], p):>14.5f}{qlike(r2[val] / r2[train].mean(), p):>14.5f}"
              f"{np.sqrt(np.mean(err**2)):>19.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
