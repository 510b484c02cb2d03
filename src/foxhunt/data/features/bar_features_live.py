"""The features of one new bar per series from a small running state: what `Forecaster.update` feeds the model.

The batch forms beside it, bar_features.py and scaling.py, compute every input column-wise over a whole history. Their
trailing volatilities are causal EWMAs with `adjust=False`, i.e. the recursion y_t = (1 - a) y_{t-1} + a x_t, seeded
on a series' first bar: so the state after a bar is a handful of numbers per series, and the next bar's inputs follow
from it in O(1), bit for bit the same recursion. `StreamState` keeps those numbers, the last close and contract, and a
ring buffer of the last E input rows (what the encoder reads) for every series; `prime` fills it from a history in one
vectorized pass (polars' own `ewm_mean`, as scaling.py runs it) and `step` advances it by one bar per series (float
arithmetic per series, no polars, no pass over bars). The known inputs of a bar and of its forecast steps come from
`KnownGrid` (known_live.py), which computes them a span of the grid at a time. Tests hold `step` to `predict` on the
same history (tests/data/features/test_bar_features_live.py, and every `update` test in tests/api).

The user's own inputs (--observed, --known, --events) come from `LiveInputs` (inputs_live.py): a bar's
observed fields are standardized with its series' scalers after foxhunt's own observed columns, and the known ones
follow the calendar's, in the order of the prepared rows; a model without them does no extra work per bar. A
--context series' inputs are those this state computes for that series, as of each bar's time (context_live.py).

Legend: S series in the state, B series in one step, E encoder steps, F continuous input columns (known calendar
columns, the user's known ones, then observed ones, as `WindowedData.cont`), Kr known continuous columns.
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from foxhunt.data.bars.bad_rows import bar_fault
from foxhunt.data.bars.load import bar_interval
from foxhunt.data.features.bar_features import RETURN_TARGETS, move_columns
from foxhunt.data.features.context_live import LiveContext
from foxhunt.data.features.inputs_live import LiveInputs
from foxhunt.data.features.known import grid_width
from foxhunt.data.features.known_live import KnownGrid
from foxhunt.data.features.scaling import (
    FAST_SLOW,
    VOL_FLOOR,
    ewm_range_scale,
    ewma_alpha,
    seeded_ewm,
    standardized,
    variance_proxy,
    vol_columns,
)
from foxhunt.data.features.schema import UNKNOWN_SERIES
from foxhunt.data.features.seasonality import profile_at
from foxhunt.durations import DAY_NS, duration, stamp
from foxhunt.errors import InputError

if TYPE_CHECKING:
    from foxhunt.data.dataset.types import FittedTransform

log = logging.getLogger("foxhunt.api")

# A bar this long after the one the grid expected next (the grid skips weekends and the daily halt, and holidays
# only with --calendar) is said once: a holiday closes a session or two (at most a day past the grid; NYSE's longest
# closure since 1933, after 9/11, was four sessions), so 3 days past it means a stale stream (a feed down, a state
# restored from months ago), not a market closure. Bars coarser than daily: 3 of their own steps.
GAP_WARN_NS = 3 * DAY_NS
GAP_WARN_STEPS = 3

# EWMA states per series, by the halflife factor they run at (1: the trailing volatility; 1/4, 4: --vol-features'
# fast and slow ones), plus the deseasonalized one and the log_range mean / mean square of (volatility, returns).
_STATES = ("v", "v_fast", "v_slow", "v_season", "m", "m2")


class StreamState:
    """Running state of every series seen: the EWMAs, the last bar and a ring of the last E input rows."""

    def __init__(self, transform: FittedTransform, encoder_length: int, horizon: int,
                 user: LiveInputs | None = None):
        self.tf, self.e, self.d = transform, encoder_length, horizon
        self.user = user  # the user's own inputs (inputs_live.py); None: the model has none, no work per bar
        sc, cfg = transform.scalers, transform.data
        self.ret, self.rng = move_columns(transform.target)
        self.observed = transform.observed_names
        self.season = sc.season
        self.vol_features = cfg.vol_features
        self.estimator = cfg.vol_estimator
        self.range_est = self.estimator == "range"
        # prices must be above zero (validate.check_log_target; check_ratio_adjust, for continuous futures series)
        self.log_prices, self.ratio = transform.target.startswith("log_"), cfg.adjust == "ratio" and cfg.contracts != "each"
        self.derived = vol_columns(sc, cfg)  # the trailing inputs `_advance` computes, in scaling.trailing's order
        self.hl = float(cfg.vol_halflife)
        # the calendar's known columns (and tod_vol), from the grid; then the user's known ones (`user`)
        self.n_cal = grid_width(transform.intraday, transform.calendar_features, self.season is not None)
        self.n_known = self.n_cal + (user.n_known if user is not None else 0)
        self.user_dec: dict[int, tuple[int, np.ndarray]] = {}  # row -> (origin, (D, Ku) its steps' user known)
        self.names: list[str] = []
        self.index: dict[str, int] = {}
        self.n = np.zeros(0, np.int64)  # (S,) bars seen
        self.close = np.zeros(0)  # (S,) last own close
        self.contract: list[str | None] = []
        self.ts = np.zeros(0, np.int64)  # (S,) last bar's time
        self.vol = np.zeros(0)  # (S,) floored trailing volatility after the last bar (the next shock's yardstick)
        self.ewm = {k: np.zeros(0) for k in _STATES}  # (S,) each
        self.center = np.zeros(0)  # (S,) target center / scale at the last bar (the origin's)
        self.scale = np.zeros(0)
        self.target = np.zeros(0)  # (S,) the target of the last bar (float32 values, as the prepared rows hold it)
        # (S, 2E, F) each input row at slot j and j + E, so that the window head .. head + E - 1 is contiguous
        self.ring = np.zeros((0, 2 * encoder_length, self.n_known + len(self.observed)), np.float32)
        self.head = np.zeros(0, np.int64)  # (S,) ring slot of the next row
        self.consts = self._constants([])  # (S,) each
        self.const_rows: list[dict[str, float]] = []  # (S,) the scalers `step` reads, as floats
        self.obs_plan: list[list[tuple[str, float | None, float | None]]] = []  # (S,) (column, mean, std) each
        self.code = np.full(0, UNKNOWN_SERIES, dtype=np.int64)  # (S,) the model's series codes
        self.alpha = ewma_alpha(self.hl)
        self.known_grid = KnownGrid(transform, self.season)
        self.context = LiveContext.of(transform, self.observed, self.n_known)  # --context series' records
        self._series_of: dict[str, str] | None = None

    # -- per-series constants ----------------------------------------------------------------------------------
    def _const(self, names: list[str], key: str, field: str) -> np.ndarray:
        """(len(names),) scalers of each series (pooled for a series unseen in training): an input's mean or std
        (`key` its name), or ("target", "center" | "scale"), ("range_k", "value")."""
        own = {("target", "center"): lambda s: s.center, ("target", "scale"): lambda s: s.scale,
               ("range_k", "value"): lambda s: s.range_k}
        return self.tf.scalers.per_series(names, own.get((key, field)) or (lambda s: getattr(s.moments[key], field)))

    def _constants(self, names: list[str]) -> dict[tuple[str, str], np.ndarray]:
        """Every scaler `step` reads, (len(names),) each: looked up once per series, not once per bar."""
        keys = [(self.ret, "std"), ("range_k", "value"), ("target", "center"), ("target", "scale")]
        keys += [(c, f) for c in self.observed if standardized(c, self.tf.scalers) for f in ("mean", "std")]
        return {k: self._const(names, *k) for k in keys}

    def _plans(self, first: int) -> None:
        """`const_rows` and `obs_plan` of the rows from `first` on, from `consts`."""
        c = self.consts
        for r in range(first, len(self.names)):
            self.const_rows.append({"r_std": float(c[(self.ret, "std")][r]), "k": float(c[("range_k", "value")][r]),
                                    "t_c": float(c[("target", "center")][r]),
                                    "t_s": float(c[("target", "scale")][r])})
            self.obs_plan.append([(col, float(c[(col, "mean")][r]), float(c[(col, "std")][r])) if (col, "mean") in c
                                  else (col, None, None) for col in self.observed])

    def codes(self, rows: list[int]) -> np.ndarray:
        """(B,) the model's series codes of state rows `rows` (0: a series unseen in training)."""
        return self.code[rows]

    @property
    def series_of(self) -> dict[str, str]:
        """Each series' current contract (or its name, when it has none) -> the series: how bars are matched."""
        if self._series_of is None:
            self._series_of = {c if c is not None else n: n for n, c in zip(self.names, self.contract, strict=True)}
        return self._series_of

    # -- priming from a history --------------------------------------------------------------------------------
    def prime(self, feats: pl.DataFrame, cont: np.ndarray, center: np.ndarray, scale: np.ndarray) -> None:
        """(Re)start the series of `feats` from their history: `feats` is `raw_features` of loaded bars sorted by
        (series, ts); `cont` (N, F), `center`, `scale` (N,) the prepared inputs of the same rows (the real rows of
        `WindowedData`). Other series keep their state."""
        names = sorted(feats["series"].unique().to_list())
        sidx = feats["series"].rank("dense").cast(pl.Int64).to_numpy() - 1  # (N,)
        end = np.searchsorted(sidx, np.arange(len(names)), side="right")  # (S',) one past each series' last row
        last = end - 1
        states = self._prime_ewm(feats, names, sidx)
        rows = self._rows_for(names)
        self.n[rows] = np.diff(np.concatenate([[0], end]))
        self.close[rows] = feats["own_close" if "own_close" in feats.columns else "close"].to_numpy()[last]
        contracts = feats["contract"].to_list() if "contract" in feats.columns else [None] * len(feats)
        for r, i in zip(rows, last, strict=True):
            self.contract[r] = contracts[i]
        self._series_of = None
        self.ts[rows] = feats["ts"].dt.epoch("ns").to_numpy()[last]
        for k in self.ewm.keys() & states.keys():
            self.ewm[k][rows] = states[k][last]
        self.vol[rows] = states["vol"][last]
        if self.context is not None:  # the context series' inputs at each bar, as inputs.with_context reads them
            self.context.prime(names, sidx, feats["ts"].dt.epoch("ns").to_numpy(), [
                feats[self.ret], feats[self.rng], feats["log_volume"], np.log(states["vol"])])
        self.center[rows], self.scale[rows] = center[last], scale[last]
        self.target[rows] = feats["target"].cast(pl.Float32).to_numpy()[last]
        back = np.arange(self.e)[::-1]  # rows last - E + 1 .. last, oldest first (a short series wraps, unread)
        take = np.clip(last[:, None] - back, 0, None)  # (S', E)
        self.ring[rows] = np.concatenate([cont[take]] * 2, axis=1)  # (S', 2E, F)
        self.head[rows] = 0

    def _prime_ewm(self, feats: pl.DataFrame, names: list[str], sidx: np.ndarray) -> dict[str, np.ndarray]:
        """Every EWMA state (unfloored) and the floored volatility at every row, as scaling.trailing runs them."""
        r_std = self._const(names, self.ret, "std")[sidx]
        t_c, t_s = self._const(names, "target", "center")[sidx], self._const(names, "target", "scale")[sidx]
        k = self._const(names, "range_k", "value")[sidx]
        df = pl.DataFrame({"g": sidx, "first": feats["first"], "r": feats[self.ret], "x": feats[self.rng],
                           "r_std": r_std, "t_c": t_c, "t_s": t_s, "k": k})
        if self.season is not None:
            df = df.with_columns(pl.Series("p2", profile_at(feats["ts"].dt.epoch("ns").to_numpy(), self.season) ** 2))
        def ewm(x: pl.Expr, seed: pl.Expr, hl: float) -> pl.Expr:
            return seeded_ewm(x, seed, hl).over("g")

        proxy = variance_proxy(self.estimator, pl.col("r"), pl.col("x"), pl.col("k"))
        seed = pl.col("r_std") ** 2
        exprs = [ewm(proxy, seed, self.hl).alias("v")]
        if self.vol_features:
            exprs += [ewm(proxy, seed, self.hl / FAST_SLOW).alias("v_fast"),
                      ewm(proxy, seed, self.hl * FAST_SLOW).alias("v_slow")]
        if self.season is not None:
            exprs.append(ewm(proxy / pl.col("p2"), seed, self.hl).alias("v_season"))
        if self._ewm_range_scale():
            exprs += [ewm(pl.col("x"), pl.col("t_c"), self.hl).alias("m"),
                      ewm(pl.col("x") ** 2, pl.col("t_c") ** 2 + pl.col("t_s") ** 2, self.hl).alias("m2")]
        out = df.select(exprs)
        states = {c: out[c].to_numpy() for c in out.columns}
        states["vol"] = np.maximum(np.sqrt(states["v"]), VOL_FLOOR * r_std)
        return states

    def _ewm_range_scale(self) -> bool:
        """log_range under volatility scaling with the returns estimator: center and scale are EWMAs of the range."""
        return ewm_range_scale(self.tf.scaling, self.tf.target, self.estimator)

    def _rows_for(self, names: list[str], tell: bool = False) -> np.ndarray:
        """State rows of `names`, adding fresh (never seen) rows for new series; with `tell` (a stream's bars, not a
        history that preparing it has told of), new series training never saw are said (FittedTransform.tell_unseen)."""
        new = [n for n in dict.fromkeys(names) if n not in self.index]
        if new:
            if tell:
                self.tf.tell_unseen(new)
            s, m = len(self.names), len(new)
            for i, n in enumerate(new):
                self.index[n] = s + i
            self.names += new
            self.contract += [None] * m
            self.n, self.close, self.ts = (np.concatenate([a, np.zeros(m, a.dtype)]) for a in (self.n, self.close,
                                                                                               self.ts))
            self.vol, self.center, self.head = (np.concatenate([a, np.zeros(m, a.dtype)]) for a in (self.vol,
                                                                                                    self.center,
                                                                                                    self.head))
            self.scale = np.concatenate([self.scale, np.ones(m)])
            self.target = np.concatenate([self.target, np.zeros(m)])
            self.ewm = {k: np.concatenate([v, np.zeros(m)]) for k, v in self.ewm.items()}
            self.ring = np.concatenate([self.ring, np.zeros((m, *self.ring.shape[1:]), np.float32)])
            more = self._constants(new)
            self.code = np.concatenate([self.code, self.tf.code(new)])
            self.consts = {k: np.concatenate([v, more[k]]) for k, v in self.consts.items()}
            self._plans(s)
            self._series_of = None
        return np.array([self.index[n] for n in names], dtype=np.int64)

    # -- one bar per series ------------------------------------------------------------------------------------
    def step(self, names: list[str], contracts: list[str | None], ts_ns: list[int], ohlcv: list[list[float]],
             filled: list[bool], max_gap_ns: int | None = None,
             observed: list[list[object]] | None = None) -> list[int]:
        """Append one bar to each series `names` (B,): times (B,) ns after the series' last bar, ohlcv (B, 5)
        open high low close volume, filled (B,), and for a model with the user's inputs each bar's --observed
        fields (B, Ou; None where a bar has no such field). Returns their state rows (B,). Every bar is checked before any
        series moves, so a refused call leaves the state as it was. A bar more than `max_gap_ns` after the bar
        the grid expected next (`gap_ns`) is refused; one more than `gap_warn_ns` after it is said once (a warning
        for the call): its series' state is carried across the gap, as `predict` would carry it on that history.

        The work is a few dozen float operations per series, done on Python floats one series at a time: a numpy
        call costs about a microsecond whatever its size, so for the handful of series of a live call scalar math
        is several times cheaper than numpy over the series (and a batch of hundreds of series spends far longer
        in the model than here). The arithmetic is numpy's, operation for operation (the logs are numpy's own)."""
        if len(set(names)) != len(names):
            raise InputError("update: more than one bar for a series in one call; pass one bar per series, in time "
                             "order, one call per bar time")
        rows = self._rows_for(names, tell=True).tolist()
        if self.context is not None:
            self.context.check(names, ts_ns)
        for i, r in enumerate(rows):
            self._check(r, names[i], contracts[i], ts_ns[i], ohlcv[i])
        self._check_gaps(rows, names, ts_ns, max_gap_ns)
        user_obs, user_known = self._user_inputs(rows, names, contracts, ts_ns, observed)
        for i, r in enumerate(rows):
            self._advance(r, ts_ns[i], ohlcv[i], filled[i], None if user_obs is None else user_obs[i],
                          None if user_known is None else user_known[i])
            if contracts[i] is not None and contracts[i] != self.contract[r]:
                self.contract[r] = contracts[i]
                self._series_of = None
        if self.context is not None:  # once every bar of the call is in: a same-time context bar is read
            self.context.fill(self.ring, rows, ts_ns, self.head, self.e, self.obs_plan)
        return rows

    def _user_inputs(self, rows: list[int], names: list[str], contracts: list[str | None], ts_ns: list[int],
                     observed: list[list[object]] | None) -> tuple[list[list[float]] | None, np.ndarray | None]:
        """The user's inputs of a call's bars, read before any series moves (a refusal leaves the state as it was):
        raw observed values (B, Ou) and the known ones of each bar's time (B, Ku); the known ones of each bar's D
        forecast steps go to `user_dec`, which `decoder` reads. (None, None) for a model without them."""
        if self.user is None:
            return None, None
        held = [c if c is not None else self.contract[r] for c, r in zip(contracts, rows, strict=True)]
        obs, known = self.user.of_bars(names, held, ts_ns, observed, lambda ts: self.known_grid.steps(ts, self.d))
        if known is None:
            return obs, None
        for i, r in enumerate(rows):
            self.user_dec[r] = (int(ts_ns[i]), known[i, 1:])
        return obs, known[:, 0]

    def _check(self, r: int, name: str, contract: str | None, ts: int, ohlcv: list[float]) -> None:
        """One line naming the series and what is wrong with its bar: out of order, a bar the loader drops or stops
        on (bad_rows.bar_fault: the loader's rules, so that update stays predict on the same history), or a roll."""
        first = self.n[r] == 0
        where = f"update: the bar of {name!r} at {np.datetime64(int(ts), 'ns')}Z"
        if not first and ts <= self.ts[r]:
            raise InputError(f"{where} is not after the series' last bar; pass each series' bars once, in time order")
        held = contract if contract is not None else self.contract[r]
        fault = bar_fault(ohlcv, self.log_prices or (self.ratio and held is not None and held != name))
        if fault is not None:
            why, dropped = fault
            does = "predict drops such a bar from a history" if dropped else "predict refuses a history with it"
            if why.endswith("not positive"):
                does += (f" (--target {self.tf.target} takes the log of prices: use --target price_change)"
                         if self.log_prices else " (--adjust ratio cannot back-adjust across it: use --adjust "
                         "difference or none)")
            raise InputError(f"{where}: {why}; {does}, so update refuses it and the stream is as it was: "
                             "fix the bar or leave it out")
        old = self.contract[r]
        if not first and contract is not None and old is not None and contract != old:
            raise InputError(f"update: series {name!r} rolls from {old} to {contract}; a roll needs both "
                             "contracts' prices: call predict(history) with bars through the roll, then update")

    @property
    def gap_warn_ns(self) -> int:
        """How far past the grid's next bar a bar may come before `step` says its state crossed a gap."""
        return max(GAP_WARN_NS, GAP_WARN_STEPS * self.known_grid.step)

    def gap_ns(self, r: int, ts: int) -> tuple[int, int]:
        """(ns from the bar the grid expected next after series r's last bar to a bar at ts (0 when not later),
        that expected bar's time). Weekends, the daily halt and --calendar's holidays are not gaps: the grid skips
        them."""
        due = self.known_grid.steps(int(self.ts[r]), 1)[0]
        return max(0, ts - due), due

    def _check_gaps(self, rows: list[int], names: list[str], ts_ns: list[int], max_gap_ns: int | None) -> None:
        """Refuse a bar past `max_gap_ns`; say once for the call which bars came past `gap_warn_ns`."""
        over = []  # (gap, name, ts, due) of the bars past the warning's threshold
        for r, name, ts in zip(rows, names, ts_ns, strict=True):
            if self.n[r] == 0:  # a series' first bar: nothing carried
                continue
            gap, due = self.gap_ns(r, ts)
            what = (f"the bar of {name!r} at {stamp(ts)} comes {duration(gap)} after the bar the grid expected "
                    f"next ({stamp(due)}; {bar_interval(self.known_grid.step)} bars)")
            if max_gap_ns is not None and gap > max_gap_ns:
                raise InputError(f"update: {what}, past max_gap {duration(max_gap_ns)}; call predict(history) "
                                 "with the bars in between to restart the series, or raise max_gap")
            if gap > self.gap_warn_ns:
                over.append((gap, what))
        if over:
            over.sort(reverse=True)
            more = f" (and {len(over) - 1} more series)" if len(over) > 1 else ""
            log.warning("update: %s%s: the running state (trailing volatilities, the last %d bars) was carried "
                        "across the gap, which the forecast reads as one bar; call predict(history) with the bars "
                        "in between to restart it, or pass max_gap= to refuse such bars", over[0][1], more, self.e)

    def targets(self, rows: list[int]) -> np.ndarray:
        """(B, D) int64 UTC ns of the D forecast steps after the last bar of each series `rows`: the grid's times,
        as `predict` gives them for its live origins (`future_timestamps` of the origin)."""
        out = np.empty((len(rows), self.d), np.int64)
        for i, r in enumerate(rows):
            out[i] = self.known_grid.steps(int(self.ts[r]), self.d)
        return out

    def _advance(self, r: int, ts: int, ohlcv: list[float], filled: bool, user_obs: list[float] | None = None,
                 user_known: np.ndarray | None = None) -> None:
        """Step every EWMA of series r once (scaling.trailing's recursion) and write the bar's input row (known,
        then observed, float32) into its ring, with its target center and scale. `user_obs` (Ou,) raw and
        `user_known` (Ku,) standardized: the user's inputs of the bar (`_user_inputs`)."""
        c = self.const_rows[r]  # this series' scalers, Python floats
        first = bool(self.n[r] == 0)  # a series' first bar: no return, the EWMAs take their seeds
        _, high, low, close, volume = ohlcv
        prev = float(self.close[r])
        if self.ret == "price_change":
            ret, x = close - prev, high - low
        else:
            ret, x = _log(close / prev if prev else _ratio(close, prev), high / low if low else _ratio(high, low))
        if first:
            ret = 0.0
        r_std, k = c["r_std"], c["k"]
        seed = r_std * r_std
        proxy = ret * ret if not self.range_est else k * (x * x)
        ewm, b, a = self.ewm, 1.0 - self.alpha, self.alpha

        def step(key: str, value: float, seed: float, a: float = a, b: float = b) -> float:
            y = seed if first else b * float(ewm[key][r]) + a * value
            ewm[key][r] = y
            return y

        floor = VOL_FLOOR * r_std
        before = r_std if first else float(self.vol[r])  # sigma known before the bar: the shock's yardstick
        vol = _floored(step("v", proxy, seed), floor)
        self.vol[r] = vol
        logs = [vol]  # log_vol, then (seasonality) log_vol_season, then (vol features) the fast and slow ratios
        sig_scale = vol
        if self.season is not None:
            p = self.known_grid.profile(ts)
            p2 = p * p
            vs = _floored(step("v_season", proxy / p2, seed), floor)
            logs.append(vs)
            sig_scale = vs * math.sqrt(p2)
        if self.vol_features:
            fa, sa = ewma_alpha(self.hl / FAST_SLOW), ewma_alpha(self.hl * FAST_SLOW)
            logs.append(_div(_floored(step("v_fast", proxy, seed, fa, 1.0 - fa), floor), vol))
            logs.append(_div(_floored(step("v_slow", proxy, seed, sa, 1.0 - sa), floor), vol))
        logs = _log(*logs)
        values = [logs[0]]  # in `self.derived` (scaling.vol_columns) order
        if self.vol_features:
            values += [_div(ret, before), _div(math.sqrt(k) * x, before), logs[-2], logs[-1]]
        if self.season is not None:
            values.append(logs[1])
        derived = dict(zip(self.derived, values, strict=True))
        if self.tf.scaling == "series":
            center, scale = c["t_c"], c["t_s"]
        elif self.tf.target in RETURN_TARGETS:
            center, scale = 0.0, sig_scale
        elif self.range_est:
            center, scale = 0.0, sig_scale / math.sqrt(k)
        else:
            t_c, t_s = c["t_c"], c["t_s"]
            m = step("m", x, t_c)
            var = step("m2", x * x, t_c * t_c + t_s * t_s) - m * m
            fl = VOL_FLOOR * t_s
            center, scale = m, math.sqrt(max(var, fl * fl))
        raw = {self.ret: ret, self.rng: x, "roll": 0.0, "filled": float(filled),  # features.raw_features' names
               "log_volume": float(np.log1p(volume))}
        if self.context is not None:  # inputs.context_inputs' order; the context columns are written by `fill`
            self.context.record(self.names[r], ts, (ret, x, raw["log_volume"], logs[0]))
            raw.update(self.context.blank)
        if user_obs is not None:  # the user's observed columns, standardized below as training's
            raw.update(zip(self.user.observed, user_obs, strict=True))  # type: ignore[union-attr]
        obs = []
        for col, mean, std in self.obs_plan[r]:  # a handful of columns
            v = derived[col] if col in derived else raw[col]
            if std is not None:  # standardized
                v = (v - mean) / std
            obs.append(v if math.isfinite(v) else 0.0)
        slot = int(self.head[r])
        row = self.ring[r, slot]  # (F,) written at slot and slot + E: any E consecutive slots are a window
        row[:self.n_cal] = self.known_grid.known(ts)
        if user_known is not None:
            row[self.n_cal:self.n_known] = user_known
        row[self.n_known:] = obs
        self.ring[r, slot + self.e] = row
        self.head[r] = (slot + 1) % self.e
        self.n[r] += 1
        self.close[r], self.ts[r] = close, ts
        self.center[r], self.scale[r] = np.float32(center), np.float32(scale)
        self.target[r] = np.float32(x if self.tf.target == "log_range" else ret)  # raw_features' target of the bar

    # -- the model's inputs ------------------------------------------------------------------------------------
    def decoder(self, rows: list[int], out: np.ndarray | None = None) -> np.ndarray:
        """(B, D, Kr) known inputs of the D forecast steps after the last bar of each series `rows`: the values of
        `decoder_features` (from the grid's spans, data/features/known_live.py), written into `out` when given."""
        out = np.empty((len(rows), self.d, self.n_known), np.float32) if out is None else out
        if self.user is None or not self.user.n_known:
            for i, r in enumerate(rows):
                self.known_grid.decoder(int(self.ts[r]), out[i])
            return out
        for i, r in enumerate(rows):  # the calendar's columns from the grid, then the user's known ones
            ts = int(self.ts[r])
            self.known_grid.decoder(ts, out[i, :, :self.n_cal])
            cached = self.user_dec.get(r)
            if cached is None or cached[0] != ts:  # a primed series: its steps' values not read yet
                cached = (ts, self.user.known_at(np.array(self.known_grid.steps(ts, self.d), dtype=np.int64),
                                                 self.user.key(self.names[r], self.contract[r])))
                self.user_dec[r] = cached
            out[i, :, self.n_cal:] = cached[1]
        return out

    def ready(self, rows: list[int]) -> list[int]:
        """The rows of `rows` with a full encoder (E bars after their first, which has no return)."""
        return [r for r in rows if self.n[r] > self.e]

    def encoder(self, rows: list[int]) -> np.ndarray:
        """(B, E, F) the last E input rows of each series `rows`, oldest first: slots head .. head + E - 1 of the
        doubled ring (a view for one series, one gather for several)."""
        if len(rows) == 1:
            h = int(self.head[rows[0]])
            return self.ring[rows[0], h:h + self.e][None]
        order = self.head[rows, None] + np.arange(self.e)  # (B, E)
        return self.ring[np.asarray(rows)[:, None], order]


def _log(*values: float) -> list[float]:
    """numpy's log of a few floats (the batch pipeline's, to the last bit), quietly nan / -inf where undefined."""
    if all(v > 0 for v in values):
        return np.log(values).tolist()
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(values).tolist()


def _ratio(a: float, b: float) -> float:
    """a / b as numpy divides (inf or nan for b = 0, no ZeroDivisionError)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(np.float64(a) / np.float64(b))


def _div(a: float, b: float) -> float:
    return a / b if b else _ratio(a, b)


def _floored(v: float, floor: float) -> float:
    """np.maximum(np.sqrt(v), floor) of floats: nan stays nan."""
    s = math.sqrt(v) if v >= 0 else math.nan
    return s if s >= floor or s != s else floor
