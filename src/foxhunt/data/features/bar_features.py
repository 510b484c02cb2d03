"""Per-bar observed features and the raw target, computed column-wise on a bars frame sorted by (series, ts).

All of these are causal: the value at bar t uses bars t-1 and t of the same series only. Scaling (which needs the
training split) happens later, in `scaling.py`.
"""

from __future__ import annotations

from collections.abc import Collection

import polars as pl

# Observed continuous inputs in batch column order. `log_vol` (trailing volatility) is added by scaling.py because
# its EWMA is seeded from the training std; `roll` is a 0/1 flag and is not standardized.
OBSERVED = ("log_return", "log_range", "log_volume", "log_vol", "roll")
STANDARDIZED = ("log_return", "log_range", "log_volume", "log_vol", "price_change", "price_range")
# Extra observed inputs with DataConfig.vol_features, appended after OBSERVED; computed (and standardized) in
# scaling.py because they need the trailing volatility sigma: the bar's return and range in units of the sigma known
# before the bar (the shock a GARCH filter reacts to, signed so that the leverage effect can be learnt), and the
# log ratio of a fast and a slow trailing volatility to sigma (is volatility rising or falling).
VOL_OBSERVED = ("shock", "range_shock", "log_vol_fast", "log_vol_slow")
# With an intraday volatility profile (seasonality.py) one more observed input, after those: the trailing volatility
# of the returns divided by the profile (ln, standardized): how calm or busy the market is for its time of day.
SEASON_OBSERVED = ("log_vol_season",)
# With DataConfig.fill_gaps one more observed input, after those: 1 on a bar that fill.py added (no trade), else 0.
FILL_OBSERVED = ("filled",)
# --target price_change: the bar's move and range in price units (own_close_t - own_close_t-1, own_high - own_low),
# which stay defined where prices are zero or negative (crude oil, April 2020). They replace log_return and log_range
# as inputs, so the model of such a series takes no log of a price anywhere; log_vol is then ln of a price-unit sigma.
PRICE_OBSERVED = ("price_change", "price_range", "log_volume", "log_vol", "roll")
RETURN_TARGETS = ("log_return", "price_change")  # targets of a signed move: center 0, a direction to hit


def own_move_columns(target: str) -> tuple[str, ...]:
    """The raw columns the baselines read besides the target (data/baselines/forecasts.py), kept per row with the prepared
    data and in a feature store as float32, as the target is: each contract's own log range (the seasonal baseline's
    time-of-day profile) and, for a log_range target, its own log returns (GARCH-t on the range reads the returns)."""
    return ("log_range", "log_return") if target == "log_range" else ("log_range",)


def move_columns(target: str) -> tuple[str, str]:
    """(return column, range column) in the target's units: price units for price_change, logs otherwise."""
    return ("price_change", "price_range") if target == "price_change" else ("log_return", "log_range")


def raw_features(bars: pl.DataFrame, adjust: str, target: str, columns: Collection[str] | None = None) -> pl.DataFrame:
    """`bars` plus Float64 columns log_return, log_range, price_change, price_range, log_volume, roll, target and a
    Boolean `first`. `columns`: of log_return, log_range, price_change, price_range, log_volume and filled, compute
    only these (None: all; the target's own column always); a column that is never read takes no memory.

    - log_return = ln(close_t / close_{t-1}) within a series; 0 on the series' first bar (`first`, never read).
    - A bar whose `contract` differs from the previous bar's is a roll bar (`roll` = 1).
    - Bars from the loader carry each contract's own prices (own_high, own_low, own_close) and the roll's
      roll_log_ratio: returns and ranges come from those, the same under every `adjust`, because adjusted prices are
      shifted by later roll gaps (`difference` makes early returns depend on rolls to come and can push prices to
      zero). A roll bar's return is ln(own_close_t / own_close_{t-1}) - roll_log_ratio: the new contract's move,
      priced through the roll's own ratio (known before the roll), never a jump between two contracts; 0 when the
      roll had no price pair.
    - Bars without those columns (built by hand): prices are used as they are, and with `adjust == "none"` a roll bar's
      return is 0, as the two contracts' prices are not comparable.
    - log_range = ln(high / low) of the bar; log_volume = ln(1 + volume).
    - price_change, price_range: the same in price units, from the same own prices: own_close_t - own_close_{t-1} -
      roll_gap (a roll bar's change is the new contract's own move, priced through the roll's own gap, new - old),
      own_high - own_low. Defined for prices at or below zero, where the logs are NaN.
    - target = log_return, log_range or price_change of the bar itself (a window's targets are those of its forecast
      bars).
    - filled = 1 on bars added by --fill-gaps (a `filled` column of `bars`), else 0.
    """
    first = (pl.col("series") != pl.col("series").shift(1)).fill_null(True)
    roll = ~first & (pl.col("contract") != pl.col("contract").shift(1))
    # One context: polars compares the two string columns side by side, on its two threads.
    out = bars.with_columns(first.alias("first"), roll.fill_null(False).cast(pl.Float64).alias("roll"))
    if "own_close" in bars.columns:
        high, low = pl.col("own_high"), pl.col("own_low")
        # 0 where there is no pair (null): filled, not tested with is_null, so that the log is taken once
        ret = ((pl.col("own_close") / pl.col("own_close").shift(1)).log() - pl.col("roll_log_ratio")).fill_null(0.0)
        change = (pl.col("own_close") - pl.col("own_close").shift(1) - pl.col("roll_gap")).fill_null(0.0)
        zero_ret = zero_change = pl.col("first")
    else:
        high, low = pl.col("high"), pl.col("low")
        ret = (pl.col("close") / pl.col("close").shift(1)).log()
        change = pl.col("close") - pl.col("close").shift(1)
        zero_ret = zero_change = pl.col("first") | ((pl.col("roll") > 0) & pl.lit(adjust == "none"))
    features = [
        pl.when(zero_ret).then(0.0).otherwise(ret).alias("log_return"),
        (high / low).log().alias("log_range"),
        pl.when(zero_change).then(0.0).otherwise(change).alias("price_change"),
        (high - low).alias("price_range"),
        pl.col("volume").cast(pl.Float64).log1p().alias("log_volume"),
        (pl.col("filled").cast(pl.Float64) if "filled" in bars.columns else pl.lit(0.0)).alias("filled"),
    ]
    if columns is not None:
        wanted = {*columns, target}
        features = [f for f in features if f.meta.output_name() in wanted]
    out = out.with_columns(features)
    return out.with_columns(pl.col(target).alias("target"))
