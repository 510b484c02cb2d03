"""Events keyed to a series or a contract (`--events` with a symbol/root column): reading the keys, which rows a
key applies to (covariates.asof_join's rule), and the until/since/in_bar values of two series, one with a keyed
event and one without, at their bars and at their forecast steps, by hand; the forecast steps read the calendar
and never a later bar."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch

from foxhunt.data.bars.load import load_bars
from foxhunt.data.config import DataConfig
from foxhunt.data.dataset.types import PreparedData
from foxhunt.data.features.events import EventCalendar, event_features, key_of, read_events, row_keys
from foxhunt.data.prepare import prepare_from_bars
from foxhunt.errors import InputError

DAY = 86_400 * 10**9
CAP = 7  # encoder 4 + horizon 3
IN_BARS = np.array([CAP, CAP, 1])  # until and since in bars (they are stored divided by the cap), in_bar as is


def at(day: str, hour: float = 0.0) -> int:
    return int(np.datetime64(day, "ns").astype(np.int64)) + int(hour * 3600 * 10**9)


def write_bars(path: Path) -> Path:
    """Daily bars (midnight UTC) of ES and NQ on the weekdays of January and February 2024."""
    days = pl.date_range(pl.date(2024, 1, 1), pl.date(2024, 2, 29), "1d", eager=True)
    days = days.filter(days.dt.weekday() <= 5)
    rng = np.random.default_rng(0)
    frames = []
    for s in ("ES", "NQ"):
        c = 100 * np.exp(np.cumsum(rng.normal(0, 0.01, len(days))))
        frames.append(pl.DataFrame({"date": days, "symbol": s, "open": c, "high": c * 1.01, "low": c * 0.99,
                                    "close": c, "volume": 1000.0}))
    pl.concat(frames).write_parquet(path)
    return path


EVENTS = "time,name,symbol\n2024-01-10T13:30:00,CPI,\n2024-01-19T14:30:00,expiry,ES\n2024-01-30T14:30:00,expiry,ZZ\n"


def prepare(tmp_path: Path, events: str = EVENTS, bars: Path | None = None, train_end: str = "2024-02-10"
            ) -> PreparedData:
    (tmp_path / "ev.csv").write_text(events)
    bars = bars or write_bars(tmp_path / "bars.parquet")
    cfg = DataConfig(paths=(str(bars),), encoder_length=4, horizon=3, train_end=train_end, test_fraction=0.0,
                     events=str(tmp_path / "ev.csv"))
    return prepare_from_bars(load_bars(cfg), cfg)


def test_read_keys_rows_and_an_empty_key_applies_to_every_series(tmp_path) -> None:
    (tmp_path / "ev.csv").write_text(EVENTS)
    cal = read_events(str(tmp_path / "ev.csv"))
    assert cal.names == ("cpi", "expiry") and cal.keys == ("ES", "ZZ")
    assert cal.times[0].tolist() == [at("2024-01-10", 13.5)] and cal.times[1].size == 0  # expiry: keyed only
    assert cal.keyed[0][1].tolist() == [at("2024-01-19", 14.5)] and cal.keyed[1][0].size == 0
    es = cal.for_key("ES")
    assert es.keys == () and [t.tolist() for t in es.times] == [[at("2024-01-10", 13.5)], [at("2024-01-19", 14.5)]]
    assert cal.for_key(None) == EventCalendar(cal.source, cal.names, cal.times)
    back = EventCalendar.from_dict(json.loads(json.dumps(cal.to_dict())))
    assert back == cal and back.keys == ("ES", "ZZ")
    assert cal.to_dict()["keyed"] == {"ES": {"expiry": [at("2024-01-19", 14.5)]}, "ZZ": {"expiry": [at("2024-01-30", 14.5)]}}
    root = tmp_path / "root.csv"
    root.write_text("ts,event,root\n2024-01-10,cpi,ES\n")
    assert read_events(str(root)).keys == ("ES",)


def test_a_key_naming_the_series_applies_to_all_its_bars_else_one_naming_the_contract() -> None:
    cal = EventCalendar("t", ("x",), (np.zeros(0, np.int64),), ("ES", "NQH4", "NQM4"),
                        ((np.array([1]),), (np.array([2]),), (np.array([3]),)))
    series = pl.Series(["ES", "ES", "NQ", "NQ", "NQ", "YM"])
    contract = pl.Series(["NQH4", "ESH4", "NQH4", "NQM4", None, "YMH4"])
    assert row_keys(cal, series, contract).tolist() == [0, 0, 1, 2, -1, -1]
    assert [key_of(cal, s, c) for s, c in zip(series, contract, strict=True)] == ["ES", "ES", "NQH4", "NQM4", None,
                                                                                     None]
    assert row_keys(EventCalendar("t", (), ()), series, contract) is None


def expected(ts: np.ndarray, times: list[int]) -> np.ndarray:
    """(n, 3) until, since, in_bar of daily bars at `ts` by the definition, over the occurrences `times`."""
    return event_features(ts, DAY, EventCalendar("t", ("x",), (np.array(times, dtype=np.int64),)), CAP) * IN_BARS


def test_each_series_reads_its_own_events_at_its_bars_and_forecast_steps(tmp_path) -> None:
    p = prepare(tmp_path)
    w = p.windows
    kr = w.n_known_cont
    assert p.transform.inputs["known_names"][-3:] == ["expiry_until", "expiry_since", "expiry_in_bar"]
    names = np.asarray(w.series_names)[w.series_idx.numpy()]
    ts = w.ts_ns.numpy()
    ev = (w.cont[:, kr - 6 : kr].numpy() * np.tile(IN_BARS, 2)).round(4)  # (N, 6) cpi's three, then expiry's, in bars
    by = {(n, int(t)): ev[i] for i, (n, t) in enumerate(zip(names, ts, strict=True))}
    # by hand, in bars of a day: cpi at Jan 10 13:30 (every series), expiry at Jan 19 14:30 (ES only)
    for day, cpi, es_expiry in [("2024-01-09", (1, 7, 0), (7, 7, 0)), ("2024-01-10", (0, 7, 1), (7, 7, 0)),
                                ("2024-01-11", (7, 0, 0), (7, 7, 0)), ("2024-01-15", (7, 4, 0), (4, 7, 0)),
                                ("2024-01-19", (7, 7, 0), (0, 7, 1)), ("2024-01-22", (7, 7, 0), (7, 2, 0))]:
        assert by[("ES", at(day))].tolist() == [*cpi, *es_expiry], day
        assert by[("NQ", at(day))].tolist() == [*cpi, 7, 7, 0], day  # no event: until and since at the cap
    # forecast steps: the origins of Jan 16 (steps Jan 17, 18, 19) and Jan 18 (Jan 19, 22, 23)
    ids = torch.arange(w.n_windows)
    origin, series = w.origin_ns(ids).numpy(), np.asarray(w.series_names)[w.series_index(ids).numpy()]
    b = w.batch(ids)
    dec = (b.dec_cont[b.dec_index].numpy()[..., kr - 3 : kr] * IN_BARS).round(4)  # (W, D, 3) expiry at each step
    for day, es_steps in [("2024-01-16", [[2, 7, 0], [1, 7, 0], [0, 7, 1]]),
                          ("2024-01-18", [[0, 7, 1], [7, 2, 0], [7, 3, 0]])]:
        i = {s: int(np.flatnonzero((origin == at(day)) & (series == s))[0]) for s in ("ES", "NQ")}
        assert dec[i["ES"]].tolist() == es_steps, day
        assert dec[i["NQ"]].tolist() == [[7, 7, 0]] * 3, day
    # every step of every window: the definition at the step's time under its series' calendar
    steps = w.decoder_ns(ids).numpy()  # (W, D)
    for s, times in (("ES", [at("2024-01-19", 14.5)]), ("NQ", [])):
        rows = series == s
        want = expected(steps[rows].ravel(), times).reshape(-1, 3, 3).round(4)
        np.testing.assert_array_equal(dec[rows], want)


def test_forecast_steps_follow_the_calendar_not_the_later_bars(tmp_path) -> None:
    """Dropping the bars after Jan 22 leaves every decoder input of the windows with an origin by Jan 17, whose
    steps reach ES's expiry on Jan 19, unchanged (the split cut differs: the event inputs are not scaled)."""
    full = prepare(tmp_path)
    short_path = tmp_path / "short.parquet"
    pl.read_parquet(tmp_path / "bars.parquet").filter(pl.col("date") <= pl.date(2024, 1, 22)).write_parquet(short_path)
    (tmp_path / "b").mkdir()
    short = prepare(tmp_path / "b", bars=short_path, train_end="2024-01-16")
    t = at("2024-01-17")
    for p in (full, short):
        p.ids = torch.arange(p.windows.n_windows)[p.windows.origin_ns(torch.arange(p.windows.n_windows)) <= t]

    def decoder(p: PreparedData) -> dict:
        b = p.windows.batch(p.ids)
        kr = p.windows.n_known_cont
        dec = b.dec_cont[b.dec_index][..., kr - 6 : kr]  # (W, D, 6) the events' inputs
        keys = zip(np.asarray(p.windows.series_names)[p.windows.series_index(p.ids).numpy()],
                   p.windows.origin_ns(p.ids).tolist(), strict=True)
        return {k: dec[i] for i, k in enumerate(keys)}

    a, s = decoder(full), decoder(short)
    assert a.keys() == s.keys() and len(a) > 0
    for k in a:
        torch.testing.assert_close(a[k], s[k], msg=str(k))


def test_keys_that_name_no_series_or_contract_stop_training_in_one_line(tmp_path) -> None:
    with pytest.raises(InputError, match=r"ev.csv: no symbol in the events file names a series or contract of the "
                                         r"bars \(the file has YM, ZZ; the series are ES, NQ\)") as e:
        prepare(tmp_path, "time,name,symbol\n2024-01-10,cpi,YM\n2024-01-19,expiry,ZZ\n")
    assert "\n" not in str(e.value)


def test_key_groups_are_each_keys_rows_in_order():
    from foxhunt.data.dataset.featurize import key_groups

    keys = np.array([2, -1, 0, 2, -1, 0, 0, 5], dtype=np.int32)
    got = [(g, rows.tolist()) for g, rows in key_groups(keys)]
    assert got == [(0, [2, 5, 6]), (2, [0, 3]), (5, [7])]
    assert key_groups(np.full(3, -1, dtype=np.int32)) == [] and key_groups(np.zeros(0, dtype=np.int32)) == []
