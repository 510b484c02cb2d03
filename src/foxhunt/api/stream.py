"""The features of one new bar per series from a small running state: what `Forecaster.update` feeds the model.

`data/features.py` and `data/scaling.py` compute every input column-wise over a whole history. Their trailing
volatilities are causal EWMAs with `adjust=False`, i.e. the recursion y_t = (1 - a) y_{t-1} + a x_t, seeded on a
series' first bar: so the state after a bar is a handful of numbers per series, and the next bar's inputs follow from
it in O(1), bit for bit the same recursion. `StreamState` keeps those numbers, the last close and contract, and a
ring buffer of the last E input rows (what the encoder reads) for every series; `prime` fills it from a history in
one vectorized pass (polars' own `ewm_mean`, as scaling.py runs it) and `step` advances it by one bar per series
(numpy over the series, no polars, no Python loop over bars). Tests hold `step` to `predict` on the same history.

Legend: S series in the state, B series in one step, E encoder steps, F continuous input columns (known calendar
columns, then observed ones, as `WindowedData.cont`), Kr known continuous columns.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from foxhunt.data.calendar import future_timestamps
from foxhunt.data.features import RETURN_TARGETS, SEASON_OBSERVED, STANDARDIZED, VOL_OBSERVED, move_columns
from foxhunt.data.known import known_columns
from foxhunt.data.prepare import UNKNOWN_SERIES, FittedTransform
from foxhunt.data.scaling import FAST_SLOW, VOL_FLOOR, _alpha, observed_names
from foxhunt.data.seasonality import profile_at
from foxhunt.errors import InputError

# EWMA states per series, by the halflife factor they run at (1: the trailing volatility; 1/4, 4: --vol-features'
# fast and slow ones), plus the deseasonalized one and the log_range mean / mean square of (volatility, returns).
_STATES = ("v", "v_fast", "v_slow", "v_season", "m", "m2")


class StreamState:
    """Running state of every series seen: the EWMAs, the last bar and a ring of the last E input rows."""

    def __init__(self, transform: FittedTransform, encoder_length: int, horizon: int):
        self.tf, self.e, self.d = transform, encoder_length, horizon
        sc = transform.scalers
        self.ret, self.rng = move_columns(transform.target)
        self.observed = observed_names(sc)
        self.season = sc.get("season") or None
        self.vol_features = bool(sc.get("vol_features", False))
        self.range_est = sc.get("estimator", "returns") == "range"
        self.hl = float(sc["halflife"])
        self.n_known = len(known_columns(np.zeros(1, np.int64), transform.exchange_tz, transform.intraday,
                                         transform.calendar_features, self.season))
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
        self.ring = np.zeros((0, encoder_length, self.n_known + len(self.observed)), np.float32)  # (S, E, F)
        self.head = np.zeros(0, np.int64)  # (S,) ring slot of the next row
        self.grid = np.full((0, horizon), -1, np.int64)  # (S, D) forecast steps of the last origin (-1: none yet)
        self.dec = np.zeros((0, horizon, self.n_known), np.float32)  # (S, D, Kr) their known inputs
        self.consts = self._constants([])  # (S,) each
        self.code = np.full(0, UNKNOWN_SERIES, dtype=np.int64)  # (S,) the model's series codes

    # -- per-series constants ----------------------------------------------------------------------------------
    def _const(self, names: list[str], key: str, field: str) -> np.ndarray:
        """(len(names),) scalers[series][key][field] (pooled for a series unseen in training)."""
        sc = self.tf.scalers
        if key == "range_k" and "range_k" not in sc["pooled"]:
            return np.ones(len(names))
        return np.array([sc["series"].get(n, sc["pooled"])[key][field] for n in names], dtype=np.float64)

    def _constants(self, names: list[str]) -> dict[tuple[str, str], np.ndarray]:
        """Every scaler `step` reads, (len(names),) each: looked up once per series, not once per bar."""
        keys = [(self.ret, "std"), ("range_k", "value"), ("target", "center"), ("target", "scale")]
        keys += [(c, f) for c in self.observed if c in STANDARDIZED or c in VOL_OBSERVED or c in SEASON_OBSERVED
                 for f in ("mean", "std")]
        return {k: self._const(names, *k) for k in keys}

    def codes(self, rows: np.ndarray) -> np.ndarray:
        """(B,) the model's series codes of state rows `rows` (0: a series unseen in training)."""
        return self.code[rows]

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
        self.ts[rows] = feats["ts"].dt.epoch("ns").to_numpy()[last]
        for k in self.ewm.keys() & states.keys():
            self.ewm[k][rows] = states[k][last]
        self.vol[rows] = states["vol"][last]
        self.center[rows], self.scale[rows] = center[last], scale[last]
        back = np.arange(self.e)[::-1]  # rows last - E + 1 .. last, oldest first (a short series wraps, unread)
        take = np.clip(last[:, None] - back, 0, None)  # (S', E)
        self.ring[rows] = cont[take]
        self.head[rows] = 0
        self.grid[rows] = -1

    def _prime_ewm(self, feats: pl.DataFrame, names: list[str], sidx: np.ndarray) -> dict[str, np.ndarray]:
        """Every EWMA state (unfloored) and the floored volatility at every row, as scaling.trailing runs them."""
        r_std = self._const(names, self.ret, "std")[sidx]
        t_c, t_s = self._const(names, "target", "center")[sidx], self._const(names, "target", "scale")[sidx]
        k = self._const(names, "range_k", "value")[sidx]
        df = pl.DataFrame({"g": sidx, "first": feats["first"], "r": feats[self.ret], "x": feats[self.rng],
                           "r_std": r_std, "t_c": t_c, "t_s": t_s, "k": k})
        if self.season:
            df = df.with_columns(pl.Series("p2", profile_at(feats["ts"].dt.epoch("ns").to_numpy(), self.season) ** 2))
        first = pl.col("first")

        def ewm(x: pl.Expr, seed: pl.Expr, hl: float) -> pl.Expr:
            return pl.when(first).then(seed).otherwise(x).ewm_mean(alpha=_alpha(hl), adjust=False).over("g")

        proxy = pl.col("r") ** 2 if not self.range_est else pl.col("k") * pl.col("x") ** 2
        seed = pl.col("r_std") ** 2
        exprs = [ewm(proxy, seed, self.hl).alias("v")]
        if self.vol_features:
            exprs += [ewm(proxy, seed, self.hl / FAST_SLOW).alias("v_fast"),
                      ewm(proxy, seed, self.hl * FAST_SLOW).alias("v_slow")]
        if self.season:
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
        return self.tf.scaling == "volatility" and self.tf.target == "log_range" and not self.range_est

    def _rows_for(self, names: list[str]) -> np.ndarray:
        """State rows of `names`, adding fresh (never seen) rows for new series."""
        new = [n for n in dict.fromkeys(names) if n not in self.index]
        if new:
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
            self.ewm = {k: np.concatenate([v, np.zeros(m)]) for k, v in self.ewm.items()}
            self.ring = np.concatenate([self.ring, np.zeros((m, *self.ring.shape[1:]), np.float32)])
            self.grid = np.concatenate([self.grid, np.full((m, self.d), -1, np.int64)])
            self.dec = np.concatenate([self.dec, np.zeros((m, *self.dec.shape[1:]), np.float32)])
            more = self._constants(new)
            self.code = np.concatenate([self.code, self.tf.code(new)])
            self.consts = {k: np.concatenate([v, more[k]]) for k, v in self.consts.items()}
        return np.array([self.index[n] for n in names], dtype=np.int64)

    # -- one bar per series ------------------------------------------------------------------------------------
    def step(self, names: list[str], contracts: list[str | None], ts_ns: np.ndarray, ohlcv: np.ndarray,
             filled: np.ndarray) -> np.ndarray:
        """Append one bar to each series `names` (B,): times (B,) ns after the series' last bar, ohlcv (B, 5)
        open high low close volume, filled (B,) bool. Returns their state rows (B,)."""
        if len(set(names)) != len(names):
            raise InputError("update: more than one bar for a series in one call; pass one bar per series, in time "
                             "order, one call per bar time")
        rows = self._rows_for(names)
        first = self.n[rows] == 0  # (B,) a series' first bar: no return, the EWMAs take their seeds
        self._check(rows, first, names, contracts, ts_ns, ohlcv)
        high, low, close, volume = ohlcv[:, 1], ohlcv[:, 2], ohlcv[:, 3], ohlcv[:, 4]
        if self.ret == "price_change":
            r, x = close - self.close[rows], high - low
        else:
            with np.errstate(divide="ignore", invalid="ignore"):
                r, x = np.log(close / self.close[rows]), np.log(high / low)
        r = np.where(first, 0.0, r)
        obs, center, scale = self._advance(rows, first, r, x, ts_ns, {
            "log_return": r, "price_change": r, "log_range": x, "price_range": x,
            "log_volume": np.log1p(volume), "roll": np.zeros(len(rows)), "filled": filled.astype(np.float64)})
        slot = self.head[rows]
        on_grid = self.grid[rows, 0] == ts_ns  # (B,) the bar is the last forecast's first step: its inputs are known
        self.ring[rows, slot, :self.n_known] = self.dec[rows, 0] if on_grid.all() else self._known(ts_ns)
        self.ring[rows, slot, self.n_known:] = obs
        self.head[rows] = (slot + 1) % self.e
        self.n[rows] += 1
        self.close[rows], self.ts[rows], self.center[rows], self.scale[rows] = close, ts_ns, center, scale
        for r_, c in zip(rows, contracts, strict=True):
            if c is not None:
                self.contract[r_] = c
        return rows

    def _check(self, rows: np.ndarray, first: np.ndarray, names: list[str], contracts: list[str | None],
               ts_ns: np.ndarray, ohlcv: np.ndarray) -> None:
        """One line naming the series and what is wrong with its bar: out of order, not finite, or a roll."""
        late = ~first & (ts_ns <= self.ts[rows])
        bad = ~np.isfinite(ohlcv).all(axis=1)
        for i in np.flatnonzero(late | bad)[:1]:
            what = "is not after the series' last bar" if late[i] else "has a missing or non-finite price or volume"
            raise InputError(f"update: the bar of {names[i]!r} at {np.datetime64(int(ts_ns[i]), 'ns')}Z {what}; "
                             "pass each series' bars once, in time order, with finite prices")
        for i, r in enumerate(rows):
            old = self.contract[r]
            if not first[i] and contracts[i] is not None and old is not None and contracts[i] != old:
                raise InputError(f"update: series {names[i]!r} rolls from {old} to {contracts[i]}; a roll needs both "
                                 "contracts' prices: call predict(history) with bars through the roll, then update")

    def _advance(self, rows: np.ndarray, first: np.ndarray, r: np.ndarray, x: np.ndarray, ts_ns: np.ndarray,
                 raw: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Step every EWMA once (scaling.trailing's recursion); the bar's observed inputs (B, Or) float32 and its
        target center and scale (B,)."""
        c = {key: v[rows] for key, v in self.consts.items()}  # (B,) each
        r_std, k = c[(self.ret, "std")], c[("range_k", "value")]
        t_c, t_s = c[("target", "center")], c[("target", "scale")]
        proxy = r**2 if not self.range_est else k * x**2

        def ewm(key: str, value: np.ndarray, seed: np.ndarray, hl: float) -> np.ndarray:
            a = _alpha(hl)
            y = np.where(first, seed, (1.0 - a) * self.ewm[key][rows] + a * value)
            self.ewm[key][rows] = y
            return y

        def floored(v: np.ndarray) -> np.ndarray:
            return np.maximum(np.sqrt(v), VOL_FLOOR * r_std)

        before = np.where(first, r_std, self.vol[rows])  # sigma known before the bar: the shock's yardstick
        vol = floored(ewm("v", proxy, r_std**2, self.hl))
        self.vol[rows] = vol
        derived = {"log_vol": np.log(vol)}
        sig_scale = vol
        if self.season:
            p2 = profile_at(ts_ns, self.season) ** 2
            vs = floored(ewm("v_season", proxy / p2, r_std**2, self.hl))
            derived["log_vol_season"] = np.log(vs)
            sig_scale = vs * np.sqrt(p2)
        if self.vol_features:
            with np.errstate(divide="ignore", invalid="ignore"):
                derived.update({
                    "shock": r / before, "range_shock": np.sqrt(k) * x / before,
                    "log_vol_fast": np.log(floored(ewm("v_fast", proxy, r_std**2, self.hl / FAST_SLOW)) / vol),
                    "log_vol_slow": np.log(floored(ewm("v_slow", proxy, r_std**2, self.hl * FAST_SLOW)) / vol)})
        if self.tf.scaling == "series":
            center, scale = t_c, t_s
        elif self.tf.target in RETURN_TARGETS:
            center, scale = np.zeros(len(rows)), sig_scale
        elif self.range_est:
            center, scale = np.zeros(len(rows)), sig_scale / np.sqrt(k)
        else:
            m = ewm("m", x, t_c, self.hl)
            var = ewm("m2", x**2, t_c**2 + t_s**2, self.hl) - m**2
            center, scale = m, np.sqrt(np.maximum(var, (VOL_FLOOR * t_s) ** 2))
        obs = np.empty((len(rows), len(self.observed)), dtype=np.float32)  # (B, Or)
        for j, col in enumerate(self.observed):  # a handful of columns
            v = derived[col] if col in derived else raw[col]
            if (col, "mean") in c:  # standardized
                v = (v - c[(col, "mean")]) / c[(col, "std")]
            obs[:, j] = np.nan_to_num(v, nan=0.0, posinf=0.0, neginf=0.0)
        return obs, center.astype(np.float32), scale.astype(np.float32)

    # -- the known inputs --------------------------------------------------------------------------------------
    def _known(self, ts_ns: np.ndarray) -> np.ndarray:
        """(N, Kr) float32 known inputs of timestamps (N,): `known_columns`, as the ring and the decoder store them."""
        cols = known_columns(ts_ns, self.tf.exchange_tz, self.tf.intraday, self.tf.calendar_features, self.season)
        return np.stack(list(cols.values()), axis=-1).astype(np.float32)

    def decoder(self, rows: np.ndarray) -> np.ndarray:
        """(B, D, Kr) known inputs of the D forecast steps after the last bar of each series `rows`: the values of
        `decoder_features`. When a bar lands on the previous origin's first step, that grid shifts by one and only
        the new last step is computed: `future_timestamps` walks the grid one step at a time, each from the last,
        so the grid after the new bar is the old one's tail and one step more (tests/api hold the two to each other).
        """
        tf, d = self.tf, self.d
        ts = self.ts[rows]
        shift = self.grid[rows, 0] == ts  # (B,)
        fresh, moved = rows[~shift], rows[shift]
        if len(fresh):
            grid = future_timestamps(ts[~shift], tf.bar_spacing_ns, d, tf.intraday, tf.exchange_tz)  # (B', D)
            self.grid[fresh] = grid
            self.dec[fresh] = self._known(grid.ravel()).reshape(len(fresh), d, -1)
        if len(moved):
            new = future_timestamps(self.grid[moved, -1], tf.bar_spacing_ns, 1, tf.intraday, tf.exchange_tz)
            self.grid[moved] = np.concatenate([self.grid[moved, 1:], new], axis=1)
            self.dec[moved] = np.concatenate([self.dec[moved, 1:], self._known(new[:, 0])[:, None]], axis=1)
        return self.dec[rows]

    # -- the encoder inputs ------------------------------------------------------------------------------------
    def ready(self, rows: np.ndarray) -> np.ndarray:
        """Which of `rows` have a full encoder (E bars after their first, which has no return)."""
        return self.n[rows] > self.e

    def encoder(self, rows: np.ndarray) -> np.ndarray:
        """(B, E, F) the last E input rows of each series `rows`, oldest first: one gather from the rings."""
        order = (self.head[rows, None] + np.arange(self.e)) % self.e  # (B, E) ring slots, oldest first
        return self.ring[rows[:, None], order]
