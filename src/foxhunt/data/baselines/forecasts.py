"""Baseline quantile forecasts that the model must beat, on exactly the model's origins and with no look-ahead.

Conventions (all functions work on ONE series; the caller loops over series):
- `target` (n,) is the series' per-bar target on its own scale, in time order (NaN = missing bar value);
- an origin is the row position of the last bar known when the forecast is made; step h = 1..H forecasts row
  origin + h. A forecast at an origin uses only rows <= origin (and, for fitted parameters, the training rows);
- results are (K, H, Q) for K origins, H steps, Q quantiles, on the target's scale.

Four baselines, each with a returns form (target "log_return") and a volatility-target form ("log_range",
ln(high/low) of a bar, which is positive and scales with volatility):
1. `training_quantiles`: the target's unconditional quantiles on the training rows. Same for both targets.
2. `rolling_vol_normal`: returns: median 0, quantiles sigma * z_q with sigma the std of the last `window` bars up to
   and including the origin. log_range: mean + std * z_q of the last `window` values of the range itself, because a
   range has a positive level that a zero median would ignore, and its recent mean is the natural persistence
   forecast of a volatility series.
3. `garch_t`: GARCH(1,1) with Student-t innovations (the `arch` package, extra `foxhunt[garch]`), fitted once on the
   training rows (the last MAX_GARCH_FIT of them) and run forward without refitting. `garch_range` is its log_range form: a scale model that maps the
   GARCH sigma forecast of the returns to range quantiles through the empirical quantiles of range / sigma on the
   training rows, because the range of a bar is close to proportional to that bar's return volatility (Parkinson
   1980: E[ln(H/L)] = sqrt(8 / pi) sigma for Brownian prices) while its shape (positive, right-skewed) is far from
   normal; the training ratio quantiles carry that shape without assuming a distribution.
4. `seasonal_rolling_vol` (intraday bars only): the rolling-volatility forecast of the target divided by the
   training period's time-of-day volatility profile p (data/features/seasonality.py), multiplied back by p at each forecast
   step's grid time: quantile = p(t_{o+h}) * sigma_z * z_q, sigma_z the std of target / p over the last `window` bars.
   Minute-bar volatility follows the clock (the open, lunch, the close): this is the first forecast an intraday
   quant would write, and a far harder one to beat than a plain rolling volatility that lags every step of the day.
5. `har`: HAR (Corsi 2009), volatility regressed on its daily, weekly and monthly averages, the baseline every
   volatility forecaster is compared to (data/baselines/har.py, which says how it turns into quantiles).

Target "price_change" (close_t - close_t-1 in price units, for prices that may be zero or negative) takes the returns
form of each: its quantiles, median 0 with the rolling std of price changes, and GARCH(1,1)-t fitted on the price
changes themselves (GARCH needs no positivity, only a location and a scale).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from foxhunt.data.baselines.har import har
from foxhunt.data.config import TARGETS
from foxhunt.errors import InputError

BASELINES = ("training_quantiles", "rolling_vol", "garch_t", "seasonal_rolling_vol", "har")
INTRADAY_ONLY = ("seasonal_rolling_vol",)
MIN_GARCH_BARS = 100  # fewer finite training returns than this cannot pin down four GARCH-t parameters
# GARCH-t is fitted on at most the last MAX_GARCH_FIT training returns of a series: 70 sessions of 1-minute bars pin
# its four parameters down, the most recent regime is the one forecast, and the fit's time and memory stay bounded
# (uncapped, a series of 0.9M 1-minute returns took ~10x longer; the model's own training data may be far longer).
MAX_GARCH_FIT = 100_000
_GARCH_HINT = "the GARCH baseline needs the `arch` package: pip install 'foxhunt[garch]'"


def future_targets(target: np.ndarray, origins: np.ndarray, horizon: int) -> np.ndarray:
    """The actuals a forecast at each origin is scored on: rows origin+1..origin+H, (K, H); NaN past the end."""
    target = np.asarray(target, dtype=np.float64)
    rows = np.asarray(origins, dtype=np.int64)[:, None] + np.arange(1, horizon + 1)  # (K, H)
    inside = rows < target.size
    return np.where(inside, target[np.minimum(rows, target.size - 1)], np.nan)


def training_quantiles(
    train_target: np.ndarray, quantiles: Sequence[float] | np.ndarray, horizon: int
) -> np.ndarray:
    """Unconditional quantiles of the training target (linear interpolation, NaN ignored), (H, Q).

    The target at step h is a single bar's value, whose unconditional distribution does not depend on h, so every
    row is the same; the (H, Q) shape lets the caller broadcast it to (K, H, Q) without a copy.
    """
    x = np.asarray(train_target, dtype=np.float64)
    x = x[np.isfinite(x)]
    if x.size == 0:
        raise InputError(
            "training-quantile baseline: the series has no finite target value in the training period"
        )
    qs = np.quantile(x, np.asarray(quantiles, dtype=np.float64), overwrite_input=True)  # (Q,) x is our copy
    return np.broadcast_to(qs, (horizon, qs.size)).copy()


def rolling_vol_normal(
    target: np.ndarray,
    origins: np.ndarray,
    horizon: int,
    quantiles: Sequence[float] | np.ndarray,
    window: int = 20,
    demean: bool = False,
) -> np.ndarray:
    """Normal quantiles from the last `window` bars up to and including each origin, (K, H, Q).

    sigma is the sample std (ddof=1) of the finite values among rows origin-window+1..origin. demean=False (returns):
    median 0, quantile = sigma * z_q. demean=True (log_range): quantile = mean + sigma * z_q, mean of the same rows.
    The same for every step h (a per-bar target under a constant-volatility view). NaN where fewer than 2 finite
    values are available. Window sums come from prefix sums (one pass, no per-origin loop); values are first centred
    on the series' first finite value (typical of its level, and known before any origin, so no future value enters
    the arithmetic) so the sum-of-squares form keeps its precision.
    """
    x = np.asarray(target, dtype=np.float64)
    o = np.asarray(origins, dtype=np.int64)
    finite = np.isfinite(x)
    ref = (
        x[np.argmax(finite)] if finite.any() else 0.0
    )  # first finite value: known before every usable origin
    xc = np.where(finite, x - ref, 0.0)
    c0 = np.concatenate([[0.0], np.cumsum(finite)])  # (n + 1,) prefix counts
    c1 = np.concatenate([[0.0], np.cumsum(xc)])
    c2 = np.concatenate([[0.0], np.cumsum(xc * xc)])
    hi, lo = o + 1, np.maximum(o + 1 - window, 0)  # rows lo..hi-1 = origin-window+1..origin
    cnt, s1, s2 = c0[hi] - c0[lo], c1[hi] - c1[lo], c2[hi] - c2[lo]  # (K,)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_c = s1 / cnt
        var = np.maximum(s2 - cnt * mean_c * mean_c, 0.0) / (cnt - 1)
    sigma = np.where(cnt >= 2, np.sqrt(var), np.nan)  # (K,)
    center = np.where(cnt >= 2, mean_c + ref, np.nan) if demean else np.zeros_like(sigma)
    z = normal_quantiles(quantiles)  # (Q,)
    out = center[:, None] + sigma[:, None] * z  # (K, Q)
    return np.broadcast_to(out[:, None, :], (o.size, horizon, z.size)).copy()


def seasonal_rolling_vol(
    target: np.ndarray,
    profile_rows: np.ndarray,
    profile_steps: np.ndarray,
    origins: np.ndarray,
    horizon: int,
    quantiles: Sequence[float] | np.ndarray,
    window: int = 20,
    demean: bool = False,
) -> np.ndarray:
    """`rolling_vol_normal` of target / p, times p at each forecast step, (K, H, Q).

    `profile_rows` (n,) is the profile at each row's own time (the deseasonalizing divisor); `profile_steps` (K, H)
    at each origin's forecast-step grid times (known at the origin: data/features/known.py), never at the bars that follow.
    """
    z = np.asarray(target, dtype=np.float64) / np.asarray(profile_rows, dtype=np.float64)
    base = rolling_vol_normal(z, origins, horizon, quantiles, window, demean)  # (K, H, Q)
    return base * np.asarray(profile_steps, dtype=np.float64)[..., None]


def normal_quantiles(quantiles: Sequence[float] | np.ndarray) -> np.ndarray:
    """Standard normal quantiles z_q, (Q,)."""
    nd = NormalDist()
    return np.array([nd.inv_cdf(float(q)) for q in quantiles])


@dataclass(frozen=True)
class GarchParams:
    """GARCH(1,1)-t on the target's own scale: r_t = mu + e_t, s2_t = omega + alpha e2_{t-1} + beta s2_{t-1},
    e_t = s_t z_t with z_t standardized Student-t (unit variance) with nu degrees of freedom.

    `init_var` is the variance that starts the filter at row 0: the sample variance of the training residuals.
    """

    mu: float
    omega: float
    alpha: float
    beta: float
    nu: float
    init_var: float
    converged: bool

    @property
    def persistence(self) -> float:
        return self.alpha + self.beta


def garch_available() -> bool:
    """Whether the optional `arch` package is importable (the GARCH baseline needs it)."""
    try:
        import arch  # noqa: F401
    except ImportError:
        return False
    return True


def fit_garch_t(train_returns: np.ndarray) -> GarchParams:
    """Fit GARCH(1,1) with Student-t innovations and a constant mean by maximum likelihood (`arch`), on the last
    MAX_GARCH_FIT finite returns.

    The returns are rescaled to unit sample std for the optimiser (arch's advice for well-conditioned fits) and the
    parameters mapped back: mu and sqrt(omega) scale with the data, alpha, beta and nu do not.
    """
    try:
        from arch import arch_model
    except ImportError as e:
        raise InputError(_GARCH_HINT) from e
    from threadpoolctl import threadpool_limits
    r = np.asarray(train_returns, dtype=np.float64)
    r = r[np.isfinite(r)][-MAX_GARCH_FIT:]
    if r.size < MIN_GARCH_BARS:
        raise InputError(
            f"GARCH baseline: only {r.size} finite training returns in this series (need >= {MIN_GARCH_BARS}); "
            "use a longer training period or leave this baseline out"
        )
    scale = float(r.std())
    if not scale > 0:
        raise InputError(
            "GARCH baseline: the training returns of this series are constant; leave this baseline out"
        )
    # One BLAS thread: the optimiser's path, and so its optimum to ~1e-4, depends on how many threads sum the
    # likelihood's products, and a fit must be the same in a worker of a store prepared in pieces (one thread) as in
    # this process (all cores): the anchor saved with a model, and each baseline of a verdict, come from it.
    with threadpool_limits(limits=1):
        res = arch_model(r / scale, mean="Constant", vol="GARCH", p=1, q=1, dist="t", rescale=False).fit(
            disp="off", show_warning=False
        )
    p = res.params
    mu = float(p["mu"]) * scale
    return GarchParams(
        mu=mu,
        omega=float(p["omega"]) * scale**2,
        alpha=float(p["alpha[1]"]),
        beta=float(p["beta[1]"]),
        nu=float(p["nu"]),
        init_var=float(np.var(r - mu)),
        converged=int(res.convergence_flag) == 0,
    )


def garch_next_variance(returns: np.ndarray, params: GarchParams) -> np.ndarray:
    """One-step-ahead variance after each row, (n,): v[t] = Var(r_{t+1} | rows <= t).

    The recursion v[t] = omega + alpha e2[t] + beta v[t-1] (v[-1] = init_var) is a first-order linear filter, run
    as a blocked prefix scan in numpy (`linear_scan`). A missing return contributes its expected square (the
    unconditional variance, or init_var when alpha + beta >= 1), so a gap neither shocks nor resets the filter.
    """
    r = np.asarray(returns, dtype=np.float64)
    e2 = (r - params.mu) ** 2
    fill = params.omega / (1 - params.persistence) if params.persistence < 1 else params.init_var
    e2 = np.where(np.isfinite(e2), e2, fill)
    return linear_scan(params.omega + params.alpha * e2, params.beta, params.init_var)


def linear_scan(u: np.ndarray, a: float, v0: float) -> np.ndarray:
    """v[t] = a v[t-1] + u[t] with v[-1] = v0 and 0 <= a < 1, (n,), without a Python loop over rows.

    Within a block v[s+j] = a^(j+1) v[s-1] + a^j cumsum_i(u[s+i] a^-i); blocks are as long as a^-j stays below
    1e150, so the loop runs over a few blocks (thousands of rows each for a typical GARCH beta near 0.9).
    """
    u = np.asarray(u, dtype=np.float64)
    if a <= 0.0:
        return u.copy()
    if not a < 1.0:
        raise ValueError(f"linear_scan needs 0 <= a < 1, got {a}")
    block = max(1, min(u.size, int(150 * np.log(10) / -np.log(a))))
    pw = a ** np.arange(block, dtype=np.float64)  # (L,) a^j, shared by every block
    out = np.empty_like(u)
    prev = float(v0)
    for s in range(0, u.size, block):  # loop over blocks, not rows
        m = min(block, u.size - s)
        out[s : s + m] = pw[:m] * (a * prev + np.cumsum(u[s : s + m] / pw[:m]))
        prev = out[s + m - 1]
    return out


def garch_sigma_paths(
    v_next: np.ndarray, origins: np.ndarray, horizon: int, params: GarchParams
) -> np.ndarray:
    """Sigma forecasts for steps 1..H at each origin, (K, H), from the GARCH variance recursion
    s2_{o+h} = omega + (alpha + beta) s2_{o+h-1}, starting at s2_{o+1} = v_next[origin]."""
    s2 = np.empty((np.asarray(origins).size, horizon))
    s2[:, 0] = v_next[np.asarray(origins, dtype=np.int64)]
    for h in range(1, horizon):  # loop over steps, not origins
        s2[:, h] = params.omega + params.persistence * s2[:, h - 1]
    return np.sqrt(s2)


def std_t_quantiles(quantiles: Sequence[float] | np.ndarray, nu: float) -> np.ndarray:
    """Quantiles of the unit-variance Student-t with nu > 2 degrees of freedom, (Q,).

    scipy.special's inverse CDF is what scipy.stats.t.ppf calls, without importing scipy.stats: that import took
    about a second of every `predict` and `Forecaster.load` of an anchored model, whose live anchor needs these."""
    from scipy.special import stdtrit

    return stdtrit(nu, np.asarray(quantiles, dtype=np.float64)) * np.sqrt((nu - 2.0) / nu)


def garch_t(
    target: np.ndarray,
    train_mask: np.ndarray,
    origins: np.ndarray,
    horizon: int,
    quantiles: Sequence[float] | np.ndarray,
    params: GarchParams | None = None,
) -> np.ndarray:
    """GARCH(1,1)-t return quantiles mu + sigma_{o+h} * t_q, (K, H, Q).

    Parameters are fitted on `target[train_mask]` (or passed in `params`) and never refitted; the conditional
    variance is filtered through every row with them, so the forecast at an origin uses returns up to that origin
    only. Origins are meant to lie after the training rows: for an origin inside them the fitted parameters have
    seen later training data.
    """
    x = np.asarray(target, dtype=np.float64)
    params = params or fit_garch_t(x[np.asarray(train_mask, dtype=bool)])
    sigma = garch_sigma_paths(garch_next_variance(x, params), origins, horizon, params)  # (K, H)
    return params.mu + sigma[..., None] * std_t_quantiles(quantiles, params.nu)  # (K, H, Q)


def garch_range(
    log_range: np.ndarray,
    returns: np.ndarray,
    train_mask: np.ndarray,
    origins: np.ndarray,
    horizon: int,
    quantiles: Sequence[float] | np.ndarray,
    params: GarchParams | None = None,
) -> np.ndarray:
    """log_range quantiles as a scale model on GARCH sigma: sigma_{o+h} * Quantile_q(range / sigma | training), (K, H, Q).

    GARCH-t is fitted on the returns of the training rows; for each step h the ratio range[t+h] / sigma_{t+h|t} is
    collected over training origins t (t + h also a training row) and its empirical quantiles become the per-step
    multipliers. See the module docstring for why a scale model.
    """
    rng_ = np.asarray(log_range, dtype=np.float64)
    r = np.asarray(returns, dtype=np.float64)
    train = np.asarray(train_mask, dtype=bool)
    params = params or fit_garch_t(r[train])
    v_next = garch_next_variance(r, params)
    train_rows = np.flatnonzero(train)
    train_origins = train_rows[:-1]
    sig_train = garch_sigma_paths(v_next, train_origins, horizon, params)  # (Kt, H)
    actual = future_targets(rng_, train_origins, horizon)  # (Kt, H)
    rows = train_origins[:, None] + np.arange(1, horizon + 1)
    ok = (rows < rng_.size) & train[np.minimum(rows, rng_.size - 1)] & np.isfinite(actual)
    qs = np.asarray(quantiles, dtype=np.float64)
    mult = np.empty((horizon, qs.size))
    for h in range(horizon):  # loop over steps, not origins
        ratio = actual[ok[:, h], h] / sig_train[ok[:, h], h]
        if ratio.size == 0:
            raise InputError(
                "GARCH range baseline: no training bar has a finite log_range; leave this baseline out"
            )
        mult[h] = np.quantile(ratio, qs)
    sigma = garch_sigma_paths(v_next, origins, horizon, params)  # (K, H)
    return sigma[..., None] * mult  # (K, H, Q)


@dataclass(frozen=True)
class BaselineSeries:
    """One series as every baseline reads it: its target (`target_name` in TARGETS; price_change in the returns
    form, in price units) at each row (n,), the rows the fits may use (`train_mask`, (n,) bool), its log returns
    (n,) where the target is log_range (GARCH's range baseline needs them) and the bars in a day (har.day_bars: HAR
    on intraday bars)."""

    target_name: str
    target: np.ndarray
    train_mask: np.ndarray
    returns: np.ndarray | None = None
    day: int = 1

    def __post_init__(self) -> None:
        if self.target_name not in TARGETS:
            raise ValueError(f"unknown target {self.target_name!r}")
        object.__setattr__(self, "target", np.asarray(self.target, dtype=np.float64))
        object.__setattr__(self, "train_mask", np.asarray(self.train_mask, dtype=bool))


def baseline_forecasts(
    kind: str,
    series: BaselineSeries,
    *,
    origins: np.ndarray,
    horizon: int,
    quantiles: Sequence[float] | np.ndarray,
    window: int = 20,
    profile: tuple[np.ndarray, np.ndarray] | None = None,
) -> np.ndarray:
    """One baseline for one series, (K, H, Q): `kind` in BASELINES, at the rows `origins` (K,) of `series`.

    `profile` (the time-of-day profile at each row (n,) and at each origin's forecast steps (K, H)) is needed for
    "seasonal_rolling_vol", and for "har" on intraday bars. The training-quantile forecast is a read-only broadcast
    view of one (H, Q) table.
    """
    target_name, target, train_mask = series.target_name, series.target, series.train_mask
    origins = np.asarray(origins, dtype=np.int64)
    if kind == "training_quantiles":
        tq = training_quantiles(target[train_mask], quantiles, horizon)  # (H, Q)
        return np.broadcast_to(tq, (origins.size, *tq.shape))
    if kind == "rolling_vol":
        return rolling_vol_normal(
            target, origins, horizon, quantiles, window, demean=target_name == "log_range"
        )
    if kind == "garch_t":
        if target_name != "log_range":  # the returns form: log_return, or price_change in price units
            return garch_t(target, train_mask, origins, horizon, quantiles)
        if series.returns is None:
            raise ValueError("the GARCH baseline for log_range needs the series' log returns")
        return garch_range(target, series.returns, train_mask, origins, horizon, quantiles)
    if kind == "seasonal_rolling_vol":
        if profile is None:
            raise ValueError("the seasonal baseline needs the time-of-day profile (intraday bars only)")
        return seasonal_rolling_vol(target, *profile, origins, horizon, quantiles, window,
                                    demean=target_name == "log_range")
    if kind == "har":
        return har(target, train_mask, origins, horizon, quantiles, volatility_target=target_name == "log_range",
                   day=series.day, profile=profile)
    raise InputError(f"unknown baseline {kind!r}; choose from {', '.join(BASELINES)}")
