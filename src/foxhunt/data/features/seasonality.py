"""Intraday volatility seasonality: the training period's volatility profile by minute of the exchange day.

Minute-bar volatility follows the clock: high at the reopen and the cash open, low at lunch and overnight, with bumps
at the London open and the 07:30 CT data. A trailing volatility (an EWMA of recent bars) lags every one of these
steps, so a practitioner divides returns by the time-of-day profile first, estimates volatility on what is left, and
multiplies the profile back in for the time being forecast. foxhunt does the same:

- `fit_profile` measures the profile on the training rows only: the mean per-bar variance proxy (each series'
  proxy in units of its own training variance, so that series of different levels pool) by minute of the day in the
  exchange time zone, smoothed over the day by a circular Gaussian kernel (Nadaraya-Watson on the pooled sums, so
  minutes without bars borrow from their neighbours and the halt needs no special case), divided by the overall
  mean. The profile is the square root of that: relative volatility, about 1 on average. One-minute means over a
  few weeks are noisy (a handful of bars each, heavy-tailed); a bandwidth of a few minutes keeps the sharp steps
  (the open decays over ~20 minutes) while averaging out most of the noise (benchmarks/seasonality_bandwidth.py).
- `profile_at` reads it at any timestamp: a function of the clock alone, so it is a known-future input and the
  decoder's value comes from the origin's grid (known.py), never from later bars.

The fitted profile (`Season`: the zone, the bandwidth and 1440 floats) is saved with the scalers in model.json, so
`predict` computes exactly the training values. Daily bars have no time of day: there is no profile.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from foxhunt.data.util.clock import DAY_NS, MIN_NS, local_ns

MINUTES = 24 * 60
BANDWIDTH_MIN = 3.0  # Gaussian kernel sd in minutes: the best held-out fit within 1% (see the module doc)


@dataclass(frozen=True)
class Season:
    """A fitted time-of-day profile: relative volatility at each minute of the day in zone `tz`."""

    tz: str
    bandwidth: float  # the kernel's sd in minutes it was smoothed with
    profile: tuple[float, ...]  # (MINUTES,)

    def to_dict(self) -> dict[str, Any]:
        return {"tz": self.tz, "bandwidth": self.bandwidth, "profile": list(self.profile)}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> Season:
        return Season(str(d["tz"]), float(d["bandwidth"]), tuple(float(x) for x in d["profile"]))


def minute_of_day(ts_ns: np.ndarray, tz: str) -> np.ndarray:
    """(N,) int64 minute of the day 0..1439 in zone `tz` of UTC ns timestamps."""
    return wall_minute(local_ns(np.asarray(ts_ns, dtype=np.int64), tz))


def wall_minute(wall: np.ndarray) -> np.ndarray:
    """(N,) int64 minute of the day 0..1439 of wall-clock times `wall` (clock.local_ns)."""
    return (wall % DAY_NS) // MIN_NS


def smooth_circular(sums: np.ndarray, counts: np.ndarray, bandwidth: float) -> np.ndarray:
    """Kernel-weighted mean over a circular day: sum_j K(i - j) sums_j / sum_j K(i - j) counts_j, (M,).

    K is a Gaussian of sd `bandwidth` (in bins) wrapped around the day; bandwidth 0 is the raw mean per bin. A bin
    with no weight at all (no bar within reach) is NaN.
    """
    m = len(sums)
    if bandwidth <= 0:
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(counts > 0, sums / np.maximum(counts, 1e-300), np.nan)
    lag = np.minimum(np.arange(m), m - np.arange(m))  # circular distance of each lag
    kernel = np.exp(-0.5 * (lag / bandwidth) ** 2)  # (M,)
    kf = np.fft.rfft(kernel)
    num = np.fft.irfft(np.fft.rfft(sums) * kf, m)  # circular convolution
    den = np.fft.irfft(np.fft.rfft(counts) * kf, m)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 1e-9 * max(den.max(), 1e-300), num / den, np.nan)


def fit_profile(
    ts_ns: np.ndarray, proxy: np.ndarray, train_mask: np.ndarray, tz: str, bandwidth: float = BANDWIDTH_MIN
) -> Season:
    """The relative volatility profile by minute of the day, fitted where `train_mask` holds.

    `proxy` (N,) is a per-bar variance proxy already in units of its series' training variance (non-finite rows are
    skipped). The profile is mean-variance-normalized: sqrt(smoothed mean proxy at the minute / overall mean proxy);
    minutes the kernel cannot reach get 1.
    """
    keep = np.asarray(train_mask, dtype=bool) & np.isfinite(proxy)
    minute = minute_of_day(np.asarray(ts_ns)[keep], tz)
    sums = np.bincount(minute, weights=np.asarray(proxy, dtype=np.float64)[keep], minlength=MINUTES)
    counts = np.bincount(minute, minlength=MINUTES).astype(np.float64)
    return profile_from_sums(sums, counts, tz, bandwidth)


def profile_from_sums(sums: np.ndarray, counts: np.ndarray, tz: str, bandwidth: float = BANDWIDTH_MIN) -> Season:
    """`fit_profile` from the proxy's sums and counts by minute of the day (MINUTES,): these add up over any
    split of the rows, so a panel fitted in pieces gets the profile of the whole."""
    overall = sums.sum() / counts.sum() if counts.sum() > 0 and sums.sum() > 0 else 1.0
    rel = smooth_circular(sums, counts, bandwidth) / overall
    profile = np.sqrt(np.where(np.isfinite(rel) & (rel > 0), rel, 1.0))
    return Season(tz, float(bandwidth), tuple(float(x) for x in profile))


def profile_at(ts_ns: np.ndarray, season: Season) -> np.ndarray:
    """(shape of ts_ns) float64 relative volatility of the fitted profile `season` at each timestamp."""
    ts = np.asarray(ts_ns, dtype=np.int64)
    return profile_of_minute(minute_of_day(ts.ravel(), season.tz), season).reshape(ts.shape)


def profile_of_minute(minute: np.ndarray, season: Season) -> np.ndarray:
    """(N,) float64 relative volatility of the fitted profile `season` at minutes of the day `minute` (N,) in its
    zone."""
    return np.asarray(season.profile, dtype=np.float64)[minute]
