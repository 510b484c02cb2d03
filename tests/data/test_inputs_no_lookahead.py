"""No look-ahead with the user's own inputs: nothing a window up to t sees changes when the observed covariates
after t change, or when the bars after t change; the known inputs at a window's forecast steps change only with the
covariate table or the event calendar; a covariate row stamped after a bar never reaches it.

The bars are hourly CME-session bars of two symbols; the covariates are an unkeyed "macro" table (half-hourly,
stamped off the bar grid, so the as-of join matters), a per-symbol "flow" table, a known "sched" column that runs
past the data and an events file. Everything goes through the real loader and prepare_from_bars.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from foxhunt.data.bars.load import load_bars
from foxhunt.data.config import DataConfig
from foxhunt.data.dataset.types import PreparedData
from foxhunt.data.prepare import prepare_from_bars

HOUR = 3600 * 10**9
DAY = 24 * HOUR
SESSIONS = np.datetime64("2024-02-05", "D") + np.concatenate([np.arange(5), np.arange(7, 12), np.arange(14, 19)])
CUT = "2024-02-12"  # train cut; t is drawn after it
SYMBOLS = ("AAA", "BBB")


def bar_times() -> np.ndarray:
    opens = (SESSIONS - 1).astype("datetime64[ns]").astype(np.int64) + 23 * HOUR  # 17:00 CST the evening before
    return (opens[:, None] + np.arange(23) * HOUR).ravel()


def raw_bars(seed: int) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    ts = bar_times()
    frames = []
    for sym in SYMBOLS:
        close = 100 * np.exp(np.cumsum(rng.normal(0, 0.003, len(ts))))
        wick = np.abs(rng.normal(0, 0.002, (2, len(ts)))) * close
        frames.append(pl.DataFrame({
            "ts_event": pl.Series(ts).cast(pl.Datetime("ns", "UTC")), "symbol": sym, "open": close,
            "high": close + wick[0], "low": close - wick[1], "close": close,
            "volume": rng.integers(10, 1000, len(ts)).astype(np.float64)}))
    return pl.concat(frames).sort("ts_event", "symbol")


def covariates(seed: int) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """(macro: unkeyed observed, half-hourly at :10 and :40; flow: per symbol, hourly at :00; sched: unkeyed known,
    hourly, five days past the bars; events)."""
    rng = np.random.default_rng(seed)
    ts = bar_times()
    start, end = int(ts[0]) - DAY, int(ts[-1]) + 5 * DAY  # past the weekend the last forecast steps fall after
    half = np.arange(start, end, HOUR // 2) + 10 * 60 * 10**9
    macro = pl.DataFrame({"time": pl.Series(half).cast(pl.Datetime("ns", "UTC")), "macro": rng.normal(0, 1, len(half))})
    flow = pl.concat([pl.DataFrame({"time": pl.Series(ts).cast(pl.Datetime("ns", "UTC")), "symbol": s,
                                    "flow": rng.normal(0, 1, len(ts))}) for s in SYMBOLS]).sort("symbol", "time")
    hours = np.arange(start, end, HOUR)
    sched = pl.DataFrame({"time": pl.Series(hours).cast(pl.Datetime("ns", "UTC")),
                          "sched": (rng.random(len(hours)) < 0.1).astype(np.float64)})
    ev = np.sort(rng.choice(ts, 12, replace=False)) + 20 * 60 * 10**9
    events = pl.DataFrame({"time": pl.Series(ev).cast(pl.Datetime("ns", "UTC")), "name": "release"})
    return macro, flow, sched, events


def after(frame: pl.DataFrame, t_ns: int) -> pl.Series:
    return pl.Series(frame["time"].dt.epoch("ns").to_numpy() > t_ns)


def jitter_after(frame: pl.DataFrame, col: str, t_ns: int, seed: int) -> pl.DataFrame:
    noise = pl.Series(np.random.default_rng(seed).normal(0, 5, frame.height))
    return frame.with_columns(pl.when(after(frame, t_ns)).then(pl.col(col) + noise).otherwise(pl.col(col)).alias(col))


def write(folder: Path, name: str, frames: dict[str, pl.DataFrame]) -> dict[str, str]:
    out = {}
    for key, f in frames.items():
        path = folder / f"{name}-{key}.parquet"
        f.write_parquet(path)
        out[key] = str(path)
    return out


def prepare(paths: dict[str, str], **over) -> PreparedData:
    cfg = DataConfig(paths=(paths["bars"],), encoder_length=8, horizon=3, train_end=CUT, test_fraction=0.0,
                     observed=("macro", "flow"), known=("sched",), covariates=(paths["macro"], paths["flow"],
                                                                                paths["sched"]),
                     events=paths["events"], **over)
    return prepare_from_bars(load_bars(cfg), cfg)


def fitted(p: PreparedData) -> dict:
    """The transform without the file names (the two runs read files of different names)."""
    d = p.transform.to_dict()
    d["inputs"] = {k: v for k, v in d["inputs"].items() if k != "sources"}
    d["inputs"]["events"] = {k: v for k, v in d["inputs"]["events"].items() if k != "source"}
    return d


def rows_upto(p: PreparedData, t_ns: int) -> dict[str, int]:
    w = p.windows
    names = np.asarray(w.series_names, dtype=object)[w.series_idx.numpy()]
    return {f"{n}|{t}": i for i, (n, t) in enumerate(zip(names, w.ts_ns.numpy(), strict=True)) if t <= t_ns}


def windows_upto(p: PreparedData, t_ns: int) -> torch.Tensor:
    ids = torch.arange(p.windows.n_windows)
    return ids[p.windows.target_ns(ids)[:, -1] <= t_ns]


def same_windows(p: PreparedData, q: PreparedData, ids: torch.Tensor) -> torch.Tensor:
    """The ids in `q` of the windows `ids` of `p`, matched by series and origin time."""
    def keys(d: PreparedData, w: torch.Tensor) -> list[tuple[str, int]]:
        return [(d.windows.series_names[int(i)], int(t)) for i, t in
                zip(d.windows.series_index(w), d.windows.origin_ns(w), strict=True)]

    every = torch.arange(q.windows.n_windows)
    at = {k: i for i, k in enumerate(keys(q, every))}
    return torch.tensor([at[k] for k in keys(p, ids)], dtype=torch.int64)


def assert_upto_equal(p: PreparedData, q: PreparedData, t_ns: int) -> None:
    """Rows up to t equal, matched by (series, ts); windows ending by t give equal batches."""
    rp, rq = rows_upto(p, t_ns), rows_upto(q, t_ns)
    assert rp.keys() == rq.keys()
    ip, iq = torch.tensor(list(rp.values())), torch.tensor([rq[k] for k in rp])
    for name in ("cont", "target_raw", "center", "scale"):
        torch.testing.assert_close(getattr(p.windows, name)[ip], getattr(q.windows, name)[iq], msg=name)
    wp, wq = windows_upto(p, t_ns), windows_upto(q, t_ns)
    assert len(wp) == len(wq) > 0
    bp, bq = p.windows.batch(wp), q.windows.batch(wq)
    for name in ("enc_cont", "dec_cont", "target", "target_center", "target_scale"):
        torch.testing.assert_close(getattr(bp, name), getattr(bq, name), msg=name)


SETTINGS = settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                    HealthCheck.function_scoped_fixture], database=None, derandomize=True,
                    phases=[Phase.explicit, Phase.generate])


@SETTINGS
@given(seed=st.integers(0, 10**6), t_hours=st.integers(0, 5 * 24), scaling=st.sampled_from(["series", "global"]))
def test_later_covariates_and_bars_change_nothing_up_to_t(tmp_path_factory, seed: int, t_hours: int,
                                                          scaling: str) -> None:
    folder = tmp_path_factory.mktemp("inputs")
    t_ns = int(np.datetime64(CUT, "ns").astype(np.int64)) + t_hours * HOUR
    bars = raw_bars(seed)
    macro, flow, sched, events = covariates(seed)
    base = write(folder, "a", {"bars": bars, "macro": macro, "flow": flow, "sched": sched, "events": events})
    later = bars["ts_event"].dt.epoch("ns").to_numpy() > t_ns
    noise = np.exp(np.random.default_rng(seed + 1).normal(0, 0.02, bars.height))
    moved = bars.with_columns(*[pl.when(pl.Series(later)).then(pl.col(c) * pl.Series(noise)).otherwise(pl.col(c))
                                .alias(c) for c in ("open", "high", "low", "close")])
    moved = moved.with_columns(high=pl.max_horizontal("open", "high", "low", "close"),
                               low=pl.min_horizontal("open", "high", "low", "close"))
    other = write(folder, "b", {"bars": moved, "macro": jitter_after(macro, "macro", t_ns, seed + 2),
                                "flow": jitter_after(flow, "flow", t_ns, seed + 3), "sched": sched, "events": events})
    p, q = prepare(base, covariate_scaling=scaling), prepare(other, covariate_scaling=scaling)
    assert fitted(p) == fitted(q)  # fitted before the cut <= t
    assert_upto_equal(p, q, t_ns)
    assert not torch.equal(p.windows.cont, q.windows.cont)  # and the jitter did reach the rows after t


def test_known_inputs_at_forecast_steps_follow_the_table_not_the_bars(tmp_path) -> None:
    """Dropping the bars after t leaves the known inputs of every forecast step of a window up to t unchanged,
    while a changed `sched` table after t changes them."""
    t_ns = int(np.datetime64(CUT, "ns").astype(np.int64)) + 30 * HOUR
    bars = raw_bars(3)
    macro, flow, sched, events = covariates(3)
    full = write(tmp_path, "a", {"bars": bars, "macro": macro, "flow": flow, "sched": sched, "events": events})
    cut_bars = bars.filter(pl.col("ts_event").dt.epoch("ns") <= t_ns + 10 * HOUR)
    flipped = sched.with_columns(pl.when(after(sched, t_ns)).then(1.0 - pl.col("sched")).otherwise(pl.col("sched"))
                                 .alias("sched"))
    short = write(tmp_path, "b", {"bars": cut_bars, "macro": macro, "flow": flow, "sched": sched, "events": events})
    moved = write(tmp_path, "c", {"bars": bars, "macro": macro, "flow": flow, "sched": flipped, "events": events})
    p, s, m = prepare(full), prepare(short), prepare(moved)
    ids = windows_upto(p, t_ns)
    ids_s = same_windows(p, s, ids)
    ds, dp = s.windows.decoder_ns(ids_s), p.windows.decoder_ns(ids)
    assert torch.equal(ds, dp)
    torch.testing.assert_close(p.windows.batch(ids).dec_cont[p.windows.batch(ids).dec_index],
                               s.windows.batch(ids_s).dec_cont[s.windows.batch(ids_s).dec_index])
    # windows whose forecast steps reach past t read the flipped flags: their decoder inputs differ
    last = p.windows.target_ns(torch.arange(p.windows.n_windows))[:, -1]
    reach = torch.arange(p.windows.n_windows)[last > t_ns]
    bp, bm = p.windows.batch(reach), m.windows.batch(reach)  # the same bars: the same window ids
    assert not torch.equal(bp.dec_cont[bp.dec_index], bm.dec_cont[bm.dec_index])


def test_a_covariate_row_stamped_after_a_bar_never_reaches_it(tmp_path) -> None:
    """Shifting every macro row one minute later than each bar: the join must take the row before."""
    bars = raw_bars(5)
    macro, flow, sched, events = covariates(5)
    ts = bar_times()
    # one row a minute after each bar, holding a value unique to that bar; another at the bar itself
    late = pl.DataFrame({"time": pl.Series(np.concatenate([ts, ts + 60 * 10**9])).cast(pl.Datetime("ns", "UTC")),
                         "macro": np.concatenate([np.zeros(len(ts)), np.arange(1, len(ts) + 1, dtype=float)])})
    paths = write(tmp_path, "a", {"bars": bars, "macro": late.sort("time"), "flow": flow, "sched": sched,
                                  "events": events})
    p = prepare(paths, covariate_scaling="none")
    col = p.windows.cont[:, -2]  # macro: the second-last observed column (flow after it)
    real = p.windows.real
    assert torch.all(col[real] == 0.0)


@pytest.mark.parametrize("scaling", ["series", "global", "none"])
def test_observed_columns_sit_last_and_are_scaled_on_training_rows(tmp_path, scaling: str) -> None:
    bars = raw_bars(7)
    macro, flow, sched, events = covariates(7)
    paths = write(tmp_path, "a", {"bars": bars, "macro": macro, "flow": flow, "sched": sched, "events": events})
    p = prepare(paths, covariate_scaling=scaling)
    sc = p.transform.scalers
    assert sc["user_observed"] == ["macro", "flow"]
    ent = sc["series"]["AAA"]["flow"]
    if scaling == "none":
        assert ent == {"mean": 0.0, "std": 1.0}
    elif scaling == "global":
        assert ent == sc["pooled"]["flow"] == sc["series"]["BBB"]["flow"]
    else:
        assert ent != sc["series"]["BBB"]["flow"]


def context_bars(seed: int) -> pl.DataFrame:
    """`raw_bars` with BBB's first 30 bars and every third one after gone: AAA's rows read BBB's last bar at or
    before them, and none before BBB's first."""
    bars = raw_bars(seed)
    bbb = pl.int_range(pl.len()).over("symbol")
    gone = (pl.col("symbol") == "BBB") & ((bbb < 30) | (bbb % 3 == 1))
    return bars.filter(~gone)


def test_context_log_vol_is_the_context_series_own_trailing_volatility_as_of_each_bar(tmp_path) -> None:
    """AAA's BBB_log_vol (covariate scaling none: the raw value) is BBB's ln sigma by hand (the returns estimator:
    sigma^2 an EWMA of r^2 seeded with BBB's training return variance, floored at 0.1 std) at BBB's last bar at or
    before AAA's bar, and 0 (NaN, standardized) before BBB's first bar."""
    bars = context_bars(11)
    macro, flow, sched, events = covariates(11)
    paths = write(tmp_path, "a", {"bars": bars, "macro": macro, "flow": flow, "sched": sched, "events": events})
    p = prepare(paths, context=("BBB",), covariate_scaling="none", vol_estimator="returns")
    assert p.transform.inputs["context"] == ["BBB"]
    assert p.transform.scalers["user_observed"][-4:] == ["BBB_log_return", "BBB_log_range", "BBB_log_volume",
                                                         "BBB_log_vol"]
    b = bars.filter(pl.col("symbol") == "BBB").sort("ts_event")
    b_ts = b["ts_event"].dt.epoch("ns").to_numpy()
    close = b["close"].to_numpy()
    r = np.concatenate([[0.0], np.log(close[1:] / close[:-1])])
    sc = p.transform.scalers
    std, a = sc["series"]["BBB"]["log_return"]["std"], 1.0 - 0.5 ** (1.0 / sc["halflife"])
    v = np.empty(len(r))
    v[0] = std**2
    for i in range(1, len(r)):
        v[i] = (1 - a) * v[i - 1] + a * r[i] ** 2
    log_vol = np.log(np.maximum(np.sqrt(v), 0.1 * std))  # (Nb,)
    w = p.windows
    aaa = (w.series_idx == w.series_names.index("AAA")) & w.real
    ts = w.ts_ns[aaa].numpy()
    at = np.searchsorted(b_ts, ts, side="right") - 1  # BBB's last bar at or before each AAA bar
    want = np.where(at >= 0, log_vol[np.maximum(at, 0)], 0.0)
    assert (at < 0).any() and (b_ts[np.maximum(at, 0)] < ts).any()  # both cases are met
    np.testing.assert_allclose(w.cont[aaa, -1].numpy(), want, rtol=1e-5, atol=1e-6)


@SETTINGS
@given(seed=st.integers(0, 10**6), t_hours=st.integers(0, 5 * 24), scaling=st.sampled_from(["series", "none"]))
def test_later_bars_of_a_context_series_change_nothing_up_to_t(tmp_path_factory, seed: int, t_hours: int,
                                                               scaling: str) -> None:
    """--context BBB: BBB's bars after t moved change no row or window up to t (BBB_log_vol included), and do
    reach AAA's context columns after t."""
    folder = tmp_path_factory.mktemp("context")
    t_ns = int(np.datetime64(CUT, "ns").astype(np.int64)) + t_hours * HOUR
    bars = context_bars(seed)
    macro, flow, sched, events = covariates(seed)
    later = pl.Series((bars["ts_event"].dt.epoch("ns").to_numpy() > t_ns) & (bars["symbol"] == "BBB").to_numpy())
    noise = pl.Series(np.exp(np.random.default_rng(seed + 1).normal(0, 0.02, bars.height)))
    moved = bars.with_columns(*[pl.when(later).then(pl.col(c) * noise * (1.002 if c == "high" else 1.0))
                                .otherwise(pl.col(c)).alias(c) for c in ("open", "high", "low", "close")])
    moved = moved.with_columns(high=pl.max_horizontal("open", "high", "low", "close"),
                               low=pl.min_horizontal("open", "high", "low", "close"))  # returns and ranges move
    frames = {"macro": macro, "flow": flow, "sched": sched, "events": events}
    p = prepare(write(folder, "a", {"bars": bars, **frames}), context=("BBB",), covariate_scaling=scaling)
    q = prepare(write(folder, "b", {"bars": moved, **frames}), context=("BBB",), covariate_scaling=scaling)
    assert fitted(p) == fitted(q)
    assert_upto_equal(p, q, t_ns)
    w = p.windows
    aaa_after = (w.series_idx == w.series_names.index("AAA")) & w.real & (w.ts_ns > t_ns)
    assert not torch.equal(w.cont[aaa_after, -1], q.windows.cont[aaa_after, -1])  # BBB_log_vol
