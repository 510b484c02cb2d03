"""A bundled ES sample: seeded 1-minute bars in Databento's `DBNStore.to_parquet()` format, made on first use.

`foxhunt train` with no file needs data that looks like what users feed it, without a network or a shipped
binary. The sample is generated from a fixed seed (a few hundred milliseconds, all vectorized numpy) and
cached as parquet. It has the structure that the loader must handle in real files:

- ESH4, ESM4, a sparse ESU4 and the calendar spread ESH4-ESM4 (about -52, 0.05 grid) in one file, keyed
  by `instrument_id`; minutes without trades have no row;
- CME Globex hours (Sunday-Friday 17:00-16:00 CT, computed in America/Chicago, so the UTC open moves
  with DST on 2024-03-10), the Presidents' Day halt at 12:00 CT, ESH4 stopping at 08:30 CT on 2024-03-15;
- volume moving from ESH4 to ESM4 over the roll week around Thursday 2024-03-07;
- returns whose scale is predictable: a U-shaped RTH profile with London (02:00 CT) and data (07:30 CT)
  bumps in both volatility and volume, GARCH-like clustering across sessions, slow intraday volatility
  clustering and Student-t innovations. Every contract is one shared random walk plus a carry spread,
  so back-adjustment is meaningful.

With `announcements=True` (`foxhunt sample --announcements`) about two scheduled announcements a week add a
volatility burst, and `sample_events` lists them: the known answer for event-calendar inputs (announcements.py).
The default sample does not change with the option's existence: its schedule draws from a stream of its own.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path
from zoneinfo import ZoneInfo

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from foxhunt.atomic import write_with
from foxhunt.cache import cache_dir
from foxhunt.data.io.announcements import EVENT_NAME, schedule, variance_multiplier
from foxhunt.data.io.sample_path import DEFAULT_SEED, SAMPLE_PREFIX, SAMPLE_VERSION
from foxhunt.errors import InputError

CT = ZoneInfo("America/Chicago")
FIRST_TRADE_DATE = dt.date(2024, 2, 19)  # session opens Sunday 2024-02-18 17:00 CT
LAST_TRADE_DATE = dt.date(2024, 3, 15)
EARLY_CLOSES = {dt.date(2024, 2, 19): dt.time(12, 0)}  # Presidents' Day
HOLIDAYS: frozenset[dt.date] = frozenset()  # none inside the sample span (Good Friday is 03-29)
OPEN_MIN = 17 * 60  # CT minute of day when a session opens
ESH4_EXPIRY = dt.datetime(2024, 3, 15, 8, 30, tzinfo=CT)
ROLL_DATE = dt.date(2024, 3, 7)  # CME roll: the Thursday 8 days before expiry

RTYPE_OHLCV_1M = 33
PUBLISHER_GLBX = 1
ROW_GROUP_SIZE = 65_536  # DBNStore.to_parquet writes chunks of this many rows

# instrument_id, symbol, tick
ESH4, ESM4, ESU4, SPREAD = (
    (4001, "ESH4", 0.25),
    (4002, "ESM4", 0.25),
    (4003, "ESU4", 0.25),
    (4501, "ESH4-ESM4", 0.05),
)

ESM4_START = 4950.0  # points; ESH4 trades about 52 below (contango)
H_M_SPREAD = -52.0  # ESH4 - ESM4
U_M_CARRY = 53.5  # ESU4 - ESM4
DAILY_VOLUME = 1.6e6  # all outrights together on an average session
T_DOF = 4.0  # Student-t degrees of freedom of the minute innovations
GARCH_ALPHA, GARCH_BETA = 0.3, 0.65  # session variance persistence, see _session_variance
NEWS_SD = 0.5  # log sd of the session-level variance surprise
LOGVOL_PHI, LOGVOL_SD = 0.99, 0.5  # intraday log-volatility AR(1): ~70-minute half-life

SCHEMA = pa.schema(
    [
        ("rtype", pa.uint8()),
        ("publisher_id", pa.uint16()),
        ("instrument_id", pa.uint32()),
        ("open", pa.float64()),
        ("high", pa.float64()),
        ("low", pa.float64()),
        ("close", pa.float64()),
        ("volume", pa.uint64()),
        ("symbol", pa.large_string()),
        ("ts_event", pa.timestamp("ns", tz="UTC")),
    ]
)


def generate_sample(seed: int = DEFAULT_SEED, announcements: bool = False) -> pa.Table:
    """The sample as the table `DBNStore.to_parquet()` would store: ts_event last, pandas index metadata.

    Rows are sorted by (ts_event, instrument_id). The same seed gives the same table (for a given numpy).
    `announcements` adds the volatility bursts of `sample_events(seed)`; every other draw stays the same.
    """
    rng_z, rng_x, rng_news, rng_gap, rng_spread, rng_noise, rng_hl, rng_vol = (
        np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(8)
    )
    grid = _session_grid()
    n = grid["ts"].size
    seas = _seasonal_table()[grid["tod"]]  # (n,) points per minute on an average session

    z = rng_z.standard_t(T_DOF, n) / np.sqrt(T_DOF / (T_DOF - 2.0))  # unit variance, fat tails
    x = _ar1(rng_x.standard_normal(n), LOGVOL_PHI) * (LOGVOL_SD * np.sqrt(1 - LOGVOL_PHI**2))
    burst = np.exp(x - LOGVOL_SD**2)  # E[burst**2] = 1
    news = np.exp(NEWS_SD * rng_news.standard_normal(grid["session"][-1] + 1) - NEWS_SD**2 / 2)
    h = _session_variance(grid["session"], seas, burst * z, news)[grid["session"]]  # (n,)
    sigma = seas * np.sqrt(h) * burst  # (n,) points per minute
    if announcements:  # on the price sd only: volume, like every random draw, is the default sample's
        sigma = sigma * np.sqrt(variance_multiplier(grid["ts"], announcement_times(seed)))

    gap_sd = np.where(grid["after_weekend"], 12.0, 4.0) * grid["first"]  # reopening gaps, points
    jump = gap_sd * rng_gap.standard_normal(n) / ESM4_START  # log move while closed, before a bar opens
    diffusion = sigma * z / ESM4_START  # log move inside each bar
    drift = (jump + diffusion).sum() / n  # pin the end to the start: the span stays near 4,800-5,100
    log_end = np.cumsum(jump + diffusion - drift)
    log_start = log_end - (diffusion - drift)
    base_start, base_end = ESM4_START * np.exp(log_start), ESM4_START * np.exp(log_end)

    h_m = H_M_SPREAD + _ou(rng_spread, n, phi=0.999, sd=0.6)  # (n,) ESH4 - ESM4 at each bar's end
    u_m = U_M_CARRY + _ou(rng_spread, n, phi=0.999, sd=0.8)
    fair = {  # contract -> (value at bar start, value at bar end, intrabar sd, quote noise sd)
        ESM4: (base_start, base_end, sigma, 0.1),
        ESH4: (base_start + _at_start(h_m, grid["first"]), base_end + h_m, sigma, 0.1),
        ESU4: (base_start + _at_start(u_m, grid["first"]), base_end + u_m, sigma, 0.25),
        SPREAD: (_at_start(h_m, grid["first"]), h_m, np.full(n, 0.08), 0.05),
    }
    volume = _volumes(rng_vol, grid, seas**2 * np.sqrt(h) * burst)
    expiry_ns = int(ESH4_EXPIRY.timestamp()) * 10**9
    alive = {ESM4: None, ESU4: None, ESH4: grid["ts"] < expiry_ns, SPREAD: grid["ts"] < expiry_ns}

    parts = []
    for contract, (start, end, sd, noise_sd) in fair.items():
        traded = volume[contract] > 0
        if alive[contract] is not None:
            traded &= alive[contract]
        noise_end = noise_sd * rng_noise.standard_normal(n)
        noise_start = _at_start(noise_end, grid["first"], fresh=noise_sd * rng_noise.standard_normal(n))
        ohlc = _ohlc(start + noise_start, end + noise_end, sd, contract[2], rng_hl)
        parts.append((contract, grid["ts"][traded], [p[traded] for p in ohlc], volume[contract][traded]))
    return _to_table(parts)


def write_sample(path: str | os.PathLike[str], seed: int = DEFAULT_SEED, announcements: bool = False) -> Path:
    """Write the sample as Databento-style parquet (row groups of 65,536, SNAPPY); atomic; returns the path."""
    table = generate_sample(seed, announcements=announcements)
    write_with(
        path, lambda tmp: pq.write_table(table, tmp, row_group_size=ROW_GROUP_SIZE, compression="snappy")
    )
    return Path(path)


def announcement_times(seed: int = DEFAULT_SEED) -> np.ndarray:
    """(n,) sorted int64 ns UTC: the announcements of `generate_sample(seed, announcements=True)`.

    Drawn from SeedSequence child 8 (the bars use 0-7), so the schedule changes no draw of the bars."""
    rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(9)[8])
    return schedule(rng, [(day, _close(day)) for day in _trade_days()])


def sample_events(seed: int = DEFAULT_SEED) -> pa.Table:
    """The events file of the announcements sample: `ts` (timestamp ns UTC) and `name`, one row per announcement."""
    ts = announcement_times(seed)
    return pa.table({
        "ts": pa.array(ts, pa.timestamp("ns", tz="UTC")),
        "name": pa.array([EVENT_NAME] * ts.size, pa.string()),
    })


def write_sample_events(path: str | os.PathLike[str], seed: int = DEFAULT_SEED) -> Path:
    """Write `sample_events(seed)` as parquet; atomic; returns the path."""
    table = sample_events(seed)
    write_with(path, lambda tmp: pq.write_table(table, tmp))
    return Path(path)


def events_path(bars_path: str | os.PathLike[str]) -> Path:
    """Where the events file of a sample written to `bars_path` goes: X.parquet -> X.events.parquet beside it."""
    p = Path(bars_path)
    stem = p.name[: -len(".parquet")] if p.name.endswith(".parquet") else p.name
    return p.with_name(f"{stem}.events.parquet")


def _trade_days() -> list[dt.date]:
    """The sample's trade dates: weekdays from FIRST_TRADE_DATE to LAST_TRADE_DATE, less HOLIDAYS."""
    days = np.arange(np.datetime64(FIRST_TRADE_DATE), np.datetime64(LAST_TRADE_DATE) + 1)
    return [d.item() for d in days[np.is_busday(days)] if d.item() not in HOLIDAYS]


def _close(day: dt.date) -> dt.datetime:
    return dt.datetime.combine(day, EARLY_CLOSES.get(day, dt.time(16, 0)), tzinfo=CT)


def _session_grid() -> dict[str, np.ndarray]:
    """Every minute of every CME session in the span: UTC ns start, CT minute of day, session index, flags."""
    days = _trade_days()
    ts, tod, session, first, after_weekend, trade_day = [], [], [], [], [], []
    for i, day in enumerate(days):  # a loop over ~25 sessions; each session's minutes are one arange
        opens = dt.datetime.combine(day - dt.timedelta(days=1), dt.time(17, 0), tzinfo=CT)
        closes = _close(day)
        m = np.arange(int((closes - opens).total_seconds()) // 60)
        ts.append(int(opens.timestamp()) * 10**9 + m * 60 * 10**9)
        tod.append((OPEN_MIN + m) % 1440)
        session.append(np.full(m.size, i))
        first.append(m == 0)
        after_weekend.append(np.full(m.size, day.weekday() == 0))
        trade_day.append(np.full(m.size, (day - ROLL_DATE).days))
    cat = np.concatenate
    return {
        "ts": cat(ts).astype(np.int64),
        "tod": cat(tod),
        "session": cat(session),
        "first": cat(first),
        "after_weekend": cat(after_weekend),
        "day": cat(trade_day).astype(np.float64),  # trade date in days relative to the roll date
    }


def _seasonal_table() -> np.ndarray:
    """Per-minute price sd (points) by CT minute of day: quiet overnight, bumps at 17:00, 02:00, 07:30, U in RTH."""
    m = np.arange(1440, dtype=np.float64)
    since_open = (m - OPEN_MIN) % 1440
    sd = 0.55 + 0.5 * np.exp(-since_open / 20.0)  # overnight base and the 17:00 CT reopen
    sd += 0.35 * np.exp(-0.5 * ((m - 135.0) / 35.0) ** 2) * (m >= 120)  # London open 02:00 CT
    sd += 0.2 * _smooth_step(m, 120.0, 20.0) * (1 - _smooth_step(m, 420.0, 30.0))  # European morning
    sd += 0.3 * _smooth_step(m, 420.0, 10.0) * (m < 510)  # pre-open build-up
    sd += 1.2 * np.exp(-(m - 450.0) / 8.0) * (m >= 450)  # 07:30 CT data release
    rth = (m >= 510) & (m < 900)
    u_shape = 0.85 + 1.8 * np.exp(-(m - 510.0) / 25.0) + 1.2 * np.exp(-(900.0 - m) / 25.0)
    sd += np.where(rth, u_shape, 0.0)
    sd += np.where((m >= 900) & (m < 960), 0.35 * np.exp(-(m - 900.0) / 30.0), 0.0)  # post-close hour
    return sd


def _smooth_step(m: np.ndarray, at: float, width: float) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-(m - at) / width))


def _ar1(e: np.ndarray, phi: float, block: int = 512) -> np.ndarray:
    """y_t = phi y_{t-1} + e_t from y_{-1} = 0, scanned in blocks: a cumsum inside each, a carry between them."""
    block = max(1, min(block, int(np.log(1e6) / -np.log(phi))))  # keep phi**-block <= 1e6 (precision)
    n = e.size
    nb = -(-n // block)
    j = np.arange(block)
    padded = np.zeros(nb * block)
    padded[:n] = e
    local = np.cumsum(padded.reshape(nb, block) * phi ** (-j), axis=1) * phi**j  # (nb, B) each from zero
    carry = np.zeros(nb)  # y at the end of the previous block
    for b in range(1, nb):  # a loop over ~70 blocks, not over bars
        carry[b] = phi**block * carry[b - 1] + local[b - 1, -1]
    return (local + carry[:, None] * phi ** (j + 1)).ravel()[:n]


def _ou(rng: np.random.Generator, n: int, phi: float, sd: float) -> np.ndarray:
    """A stationary AR(1) with lag-one coefficient phi and marginal sd, started at its stationary law."""
    k = np.arange(n)
    path = _ar1(rng.standard_normal(n), phi) * np.sqrt(1 - phi**2)
    start = rng.standard_normal() * phi ** (k + 1)  # the remembered past, decaying
    return sd * (path + start)


def _session_variance(
    session: np.ndarray, seas: np.ndarray, shock: np.ndarray, news: np.ndarray
) -> np.ndarray:
    """Each session's variance multiplier news_d * h_d (mean 1), GARCH(1,1) on realized variance.

    h_d = w + a RV_{d-1} + b h_{d-1}, where RV_{d-1} = news_{d-1} q_{d-1} h_{d-1} is the previous session's
    realized variance (q: the minute shocks' variance ratio) and news_d a lognormal session-level surprise.
    """
    w2 = seas**2
    q = np.bincount(session, w2 * shock**2) / np.bincount(session, w2)  # (S,) mean 1
    h = np.ones(q.size)
    for d in range(1, q.size):  # a loop over ~25 sessions
        h[d] = (1 - GARCH_ALPHA - GARCH_BETA) + (GARCH_ALPHA * news[d - 1] * q[d - 1] + GARCH_BETA) * h[d - 1]
    return news * h


def _at_start(at_end: np.ndarray, first: np.ndarray, fresh: np.ndarray | None = None) -> np.ndarray:
    """The value at each bar's start: the previous bar's end inside a session, `fresh` (or own end) at an open."""
    start = np.concatenate([at_end[:1], at_end[:-1]])
    return np.where(first, at_end if fresh is None else fresh, start)


def _volumes(rng: np.random.Generator, grid: dict[str, np.ndarray], activity: np.ndarray) -> dict:
    """Contracts traded per minute: negative binomial around the roll schedule; zero means no bar."""
    session_activity = np.bincount(grid["session"], activity).mean()
    total = DAILY_VOLUME * activity / session_activity  # (n,) expected outright volume
    day = grid["day"]
    m_share = 0.015 + 0.97 / (1.0 + np.exp(-(day + 0.7) / 0.8))  # ESM4 takes over around Wed-Thu
    u_share = np.full_like(day, 0.003)
    share = {
        ESH4: 1.0 - m_share - u_share,
        ESM4: m_share,
        ESU4: u_share,
        SPREAD: 0.012 + 0.22 * np.exp(-0.5 * ((day + 1.0) / 1.3) ** 2),  # the roll trades as a spread
    }
    dispersion = {ESH4: 4.0, ESM4: 4.0, ESU4: 0.25, SPREAD: 0.5}  # low = bursty, many empty minutes
    out = {}
    for contract, s in share.items():  # a loop over four contracts
        mean = total * s
        k = dispersion[contract]
        out[contract] = rng.poisson(mean * rng.gamma(k, 1.0 / k, mean.size))
    return out


def _ohlc(
    start: np.ndarray, end: np.ndarray, sd: np.ndarray, tick: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Bars on the tick grid; high/low are exact draws of a Brownian bridge's max/min from start to end."""
    b = end - start
    reach = np.sqrt(b**2 + 2.0 * sd**2 * rng.standard_exponential((2, b.size)))  # (2, n)
    per = 1.0 / tick
    o, c = np.round(start * per) / per, np.round(end * per) / per
    hi = np.maximum(np.round((start + (b + reach[0]) / 2.0) * per) / per, np.maximum(o, c))
    lo = np.minimum(np.round((start + (b - reach[1]) / 2.0) * per) / per, np.minimum(o, c))
    return o, hi, lo, c


def _to_table(parts: list) -> pa.Table:
    """Concatenate the contracts, sort by (ts_event, instrument_id) as Databento files are, and wrap as Arrow."""
    ids = np.concatenate([np.full(ts.size, c[0], np.uint32) for c, ts, _, _ in parts])
    which = np.concatenate([np.full(ts.size, i) for i, (_, ts, _, _) in enumerate(parts)])
    ts = np.concatenate([p[1] for p in parts])
    order = np.lexsort((ids, ts))
    n = ts.size
    numeric = [
        np.full(n, RTYPE_OHLCV_1M, np.uint8),
        np.full(n, PUBLISHER_GLBX, np.uint16),
        ids[order],
        *(np.concatenate([p[2][j] for p in parts])[order] for j in range(4)),  # open, high, low, close
        np.concatenate([p[3] for p in parts]).astype(np.uint64)[order],
    ]
    symbols = _large_strings([c[1] for c, _, _, _ in parts], which[order])
    columns = [*(_arrow(col, f.type) for col, f in zip(numeric, SCHEMA, strict=False)), symbols]
    columns.append(_arrow(ts[order], SCHEMA.field("ts_event").type))
    table = pa.Table.from_arrays(columns, schema=SCHEMA)
    return table.replace_schema_metadata({b"pandas": json.dumps(_pandas_metadata()).encode()})


def _arrow(values: np.ndarray, type_: pa.DataType) -> pa.Array:
    """A numpy column as Arrow without copying; from buffers because `pa.array` imports pandas (~1 s) if present."""
    return pa.Array.from_buffers(type_, values.size, [None, pa.py_buffer(np.ascontiguousarray(values))])


def _large_strings(names: list[str], index: np.ndarray) -> pa.Array:
    """`names[index]` as a large_string array, built from offsets and bytes without a per-row loop."""
    encoded = [name.encode() for name in names]
    lengths = np.array([len(b) for b in encoded], np.int64)[index]  # (n,)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    width = max(len(b) for b in encoded)
    padded = np.frombuffer(b"".join(b.ljust(width, b"\0") for b in encoded), np.uint8).reshape(
        len(names), width
    )
    data = padded[index][np.arange(width) < lengths[:, None]]  # row-major: each row's bytes in order
    return pa.Array.from_buffers(
        pa.large_string(), index.size, [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    )


def _pandas_metadata() -> dict:
    """What `pa.Schema.from_pandas` stores for `to_df()` under pandas 3: ts_event is the index."""
    numpy_types = {"rtype": "uint8", "publisher_id": "uint16", "instrument_id": "uint32", "volume": "uint64"}
    columns = []
    for field in SCHEMA:
        if field.name == "symbol":
            kind, numpy_type, meta = "object", "str", None
        elif field.name == "ts_event":
            kind, numpy_type, meta = "datetimetz", "datetime64[ns]", {"timezone": "UTC"}
        else:
            kind = numpy_type = numpy_types.get(field.name, "float64")
            meta = None
        columns.append(
            {
                "name": field.name,
                "field_name": field.name,
                "pandas_type": kind,
                "numpy_type": numpy_type,
                "metadata": meta,
            }
        )
    return {
        "index_columns": ["ts_event"],
        "column_indexes": [
            {
                "name": None,
                "field_name": None,
                "pandas_type": "unicode",
                "numpy_type": "str",
                "metadata": {"encoding": "UTF-8"},
            }
        ],
        "columns": columns,
        "attributes": {},
        "creator": {"library": "pyarrow", "version": pa.__version__},
        "pandas_version": "3.1.1",
    }


def bundled_sample_path(announcements: bool = False) -> Path:
    """The cached default sample, generated on first use into $FOXHUNT_CACHE_DIR or ~/.cache/foxhunt/.

    The file name carries the generator version and seed, so a changed generator never reuses an old
    file. Concurrent first uses are safe: each writes a temporary file and renames the same content into place.
    The announcements variant has a name of its own (`_announcements`), its events file beside it (`events_path`).
    """
    variant = "_announcements" if announcements else ""
    path = cache_dir() / f"{SAMPLE_PREFIX}{SAMPLE_VERSION}_seed{DEFAULT_SEED}{variant}.parquet"
    if not path.is_file() or (announcements and not events_path(path).is_file()):
        try:
            if announcements:
                write_sample_events(events_path(path), DEFAULT_SEED)
            write_sample(path, DEFAULT_SEED, announcements=announcements)
        except OSError as e:
            raise InputError(
                f"cannot write the bundled sample to {path} ({e.strerror or e}); "
                "set FOXHUNT_CACHE_DIR to a writable folder"
            ) from e
    return path
