"""From loaded bars to model-ready windows: features, train-only scaling, the window index and the splits.

`prepare_from_bars` is the one entry point; `prepare_data` loads the bars first. With `transform=None` the
transform (series vocabulary and scalers) is fitted on the rows before the train cut; with a transform (from a saved
model) the data are featurized exactly as in training. `for_prediction=True` appends `horizon` extrapolated future
rows to each series so that every bar with a full encoder behind it, the last one included, is a forecast origin.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import polars as pl

from foxhunt.allocator import release_freed_memory
from foxhunt.data.bars.chains import decision
from foxhunt.data.bars.grid import DAILY_MIN_SPACING_NS, future_timestamps, median_spacings_ns, session_grid
from foxhunt.data.bars.load import LoadedBars, load_bars
from foxhunt.data.bars.sessions import run_session
from foxhunt.data.bars.validate import check_log_target
from foxhunt.data.config import DataConfig
from foxhunt.data.dataset.featurize import (
    EVENT_KEY,
    SeriesRows,
    Stamped,
    known_width,
    series_rows,
    windowed_rows,
)
from foxhunt.data.dataset.summary import EPOCH, data_summary, iso
from foxhunt.data.dataset.types import UNKNOWN_SERIES, FittedTransform, PreparedData
from foxhunt.data.dataset.windows import (
    SplitResult,
    WindowedData,
    series_bounds,
)
from foxhunt.data.features import inputs, static, timed_categories
from foxhunt.data.features.calendar import calendar_columns
from foxhunt.data.features.features import move_columns, raw_features
from foxhunt.data.features.known import stamp_known
from foxhunt.data.features.scaling import fit_and_trail, observed_names, trailing
from foxhunt.data.features.schema import Feature, FeatureSchema, Kind, Role
from foxhunt.data.util import parallel
from foxhunt.data.util.order import run_starts, sort_keys
from foxhunt.data.util.runs import run_lengths
from foxhunt.errors import InputError

# What scaling and the row tensors read of raw_features' output for every target (log_range: the seasonal profile),
# besides the target's own move columns (features.move_columns) and, with --fill-gaps, `filled`.
FEATURE_COLUMNS = ("ts", "first", "roll", "target", "log_range", "log_volume")
# What raw_features reads of loaded bars that carry their contracts' own prices (bars without them: also PRICES).
FEATURE_INPUTS = ("series", "ts", "contract", "volume", "own_high", "own_low", "own_close", "roll_log_ratio", "roll_gap",
                  "filled")
PRICES = ("high", "low", "close")


def prepare_data(
    cfg: DataConfig, transform: FittedTransform | None = None, for_prediction: bool = False
) -> PreparedData:
    """Load the bars named by `cfg.paths` and prepare them (see `prepare_from_bars`)."""
    step = transform.bar_spacing_ns if transform is not None else None  # --fill-gaps fills to the model's grid
    roots = transform.contract_roots() if transform is not None else None  # and reads the model's series
    return prepare_from_bars(load_bars(cfg, step, roots), cfg, transform, for_prediction)


def prepare_from_bars(
    loaded: LoadedBars,
    cfg: DataConfig,
    transform: FittedTransform | None = None,
    for_prediction: bool = False,
    bar_frame: tuple[str, pl.DataFrame] | None = None,
) -> PreparedData:
    """Featurize, scale, window and split `loaded.bars` (sorted by series, ts; see load.LoadedBars). `bar_frame`:
    (name, frame) when the bars came from a frame in memory: the user's bar-file columns are read from it.

    Raises InputError when no series has enough bars for one window, or when a split ends up empty.
    """
    import torch

    if for_prediction and transform is None:
        raise InputError("prediction needs the fitted transform saved with the model (model.json)")
    e, d = cfg.encoder_length, cfg.horizon
    src = user_sources(cfg, transform, bar_frame)
    dropped = 0
    if src is not None and (src.observed or src.observed_cat):  # joined before the rows are numbered: a bar
        # without a real value goes
        joined, dropped = inputs.observe(loaded.bars, src)
        loaded = LoadedBars(bars=joined, rolls=loaded.rolls, report=loaded.report)
        del joined
    bars, names, sidx, ts_ns = sorted_bars(loaded.bars)
    event_keys = inputs.event_keys(src, bars, strict=not for_prediction)  # (N,) or None: without keyed events
    observed_cat = {} if src is None else {c: bars.get_column(c) for c in src.observed_cat}  # (N,) each, as joined
    static_values = {} if src is None else static.series_values(bars, names, src.static, src.tables,
                                                                 src.static_kinds or {})
    check_log_target(bars, transform.target if transform else cfg.target)
    first, end = series_bounds(sidx)
    check_length(names, end - first, e, d, for_prediction)
    cuts = None if for_prediction else split_cuts(cfg, ts_ns)
    # The grid step a model keeps (known.py) is measured on its training rows only.
    spacing, train_spacing = median_spacings_ns(ts_ns, sidx, cuts[0] if transform is None else None)
    spacing = train_spacing or spacing
    # One bar per series (prediction on a short file) gives no spacing: trust the model's.
    intraday = (
        transform.intraday if transform is not None and spacing == 0 else spacing < DAILY_MIN_SPACING_NS
    )
    if transform is not None and transform.intraday != intraday:
        want, got = ("intraday", "daily") if transform.intraday else ("daily", "intraday")
        raise InputError(f"the model was trained on {want} bars but these bars are {got}; load {want} bars")

    target = transform.target if transform else cfg.target
    scaling = transform.scaling if transform else cfg.scaling
    # Only what features read goes on, then only the feature columns: the bars (and the caller's, when this holds
    # the last reference, as in prepare_data) are dropped before features, scalers and row tensors take memory.
    meta = LoadedBars(bars=loaded.bars.clear(), rolls=loaded.rolls, report=loaded.report)
    del loaded
    user_obs = () if src is None else src.observed
    bars = bars.select(c for c in bars.columns if c in FEATURE_INPUTS or c in user_obs
                       or ("own_close" not in bars.columns and c in PRICES))
    fill_gaps = transform.scalers.get("fill_gaps", False) if transform else cfg.fill_gaps
    keep = [*feature_columns(target, fill_gaps), *user_obs]
    feats = raw_features(bars, cfg.adjust, target, columns=keep).select(keep)
    del bars
    # One chunk per column (the loader's frame may come in several): each of the fit, the scaling and the target
    # reads its columns as numpy views then, where a column of two chunks is copied at every read. "target" is the
    # target's own column under another name: dropped first, as a rechunk would copy the two apart.
    feats = feats.drop("target").rechunk()
    # The known inputs depend on the timestamps and the grid alone: on a second thread they are computed while the
    # scalers are fitted and applied (serially they wait for windowed_rows, so as not to be held through the fit).
    step = (transform.bar_spacing_ns if transform is not None else 0) or spacing  # the model's bar interval
    pending = None if for_prediction or parallel.threads() <= 1 else parallel.submit(
        _boxed, stamp_known, ts_ns, step, d, cfg.exchange_tz if transform is None else transform.exchange_tz, intraday,
        cfg.calendar_features if transform is None else transform.calendar_features,
        None if transform is None else transform.scalers.get("season"), transform is None and cfg.seasonality,
        session_grid(cfg.calendar, cfg.exchange_tz) if transform is None else transform.grid)
    trail = None  # the trailing inputs, when fitting computed them
    if transform is None:
        train_mask = (ts_ns < cuts[0]) & (ts_ns >= train_start_ns(cfg))
        scalers, trail = fit_and_trail(
            feats,
            names,
            sidx,
            train_mask,
            target,
            scaling,
            halflife=cfg.vol_halflife,
            estimator=cfg.vol_estimator,
            vol_features=cfg.vol_features,
            fill_gaps=cfg.fill_gaps,
            season_tz=cfg.exchange_tz if cfg.seasonality and intraday else None,
        )
        fitted_inputs = None
        if src is not None:
            # after the trailing inputs: a context series gives its own log_vol
            feats = inputs.with_context(feats, names, sidx, ts_ns, src, target, trail[0]["log_vol"])
            inputs.fit_observed(feats, names, sidx, train_mask & ~feats["first"].to_numpy(), src,
                                cfg.covariate_scaling, scalers)
            known_scalers = inputs.fit_known(src, ts_ns[train_mask], cfg.covariate_scaling)
            static_fit = static.fit(static_values, names, list(scalers["series"]), src.static_kinds or {})
            timed_vocab = timed_categories.fit(src, observed_cat, train_mask, ts_ns[train_mask])
            fitted_inputs = inputs.fitted(src, cfg.covariate_scaling, known_scalers, event_cap=e + d,
                                          static_fit=static_fit, timed_vocab=timed_vocab)
        transform = FittedTransform(
            # the series with training rows: those the fit gave scalers of their own
            series_vocab=tuple(n for n in names if n in scalers["series"]),
            scalers=scalers,
            target=target,
            scaling=scaling,
            intraday=intraday,
            calendar_features=cfg.calendar_features,
            exchange_tz=cfg.exchange_tz,
            bar_spacing_ns=spacing,
            session=run_session(cfg.calendar),
            inputs=fitted_inputs,
            **decision(meta.report, cfg.contracts),
        )
    elif src is not None and src.context:  # a context series' log_vol is its trailing input: computed once, here
        trail = trailing(feats, names, sidx, transform.scalers, target, scaling)
        feats = inputs.with_context(feats, names, sidx, ts_ns, src, target, trail[0]["log_vol"])
    release_freed_memory()  # the fit's freed temporaries go back before the row tensor takes its memory
    # The row tensor: known columns (filled by windowed_rows), then the observed inputs, standardized straight into it.
    rows = series_rows(feats, names, sidx, ts_ns, transform, trail)
    del feats, trail  # not read past here: gone before the row tensors are built
    if event_keys is not None:
        rows[EVENT_KEY] = event_keys
    future = None
    if for_prediction:
        future = future_timestamps(ts_ns[end - 1], step, d, intraday, transform.exchange_tz, transform.grid)  # (S, d)
    user_known = None if src is None else inputs.known_values(transform.inputs, src, step)
    known = Stamped(transform, step, d, None if pending is None else pending.result(), user_known,
                    () if src is None or src.events is None else src.events.keys)
    out = windowed_rows(rows, names, transform, e, d, cuts, train_start_ns(cfg), known, future)
    del rows, pending
    if not for_prediction:
        check_splits(out.split, cuts, cfg, ts_ns)
    schema = feature_schema(transform, e, d, cfg.adjust)
    timed = None
    if src is not None and (src.observed_cat or src.known_cat):
        timed = timed_categories.arrays(transform.inputs, src, observed_cat, out.ts, out.real, out.known.ts)
    del observed_cat
    windows = _tensors(out, names, known_width(transform), e, d,
                       static.arrays(transform.inputs, static_values, names) if static_values else None, timed)
    windows.check_codes(schema)
    summary = data_summary(meta, schema, out.facts, windows.series_names, cuts, for_prediction, out.roll_bars, spacing,
                           calendar=None if transform.session is None else transform.session.calendar)
    if src is not None:
        summary["inputs"] = inputs.summary(src, dropped)
    return PreparedData(
        schema=schema,
        windows=windows,
        splits={k: torch.from_numpy(v.astype(np.int64)) for k, v in out.split.ids.items()},
        transform=transform,
        summary=summary,
        rolls=list(meta.rolls),
        own_moves=out.own,
    )


def user_sources(cfg: DataConfig, transform: FittedTransform | None,
                 bar_frame: tuple[str, pl.DataFrame] | None = None,
                 bar_reader: inputs.BarReader | None = None) -> inputs.Sources | None:
    """The user's inputs: those `cfg` declares for a new transform, the transform's own for a fitted one (its
    covariates read from `cfg`'s files, its event calendar from the model unless `cfg` names an events file).
    `bar_frame`, `bar_reader`: as inputs.load_sources takes them."""
    if transform is None:
        observed, known, events, saved, context = cfg.observed, cfg.known, cfg.events, None, cfg.context
        static_cols, categorical = cfg.static, cfg.categorical
    elif transform.inputs:
        got = transform.inputs
        observed, known, events, saved = tuple(got["observed"]), tuple(got["known"]), cfg.events, got["events"]
        context = tuple(got.get("context", ()))
        static_cols = tuple(got.get("static", ()))
        observed += tuple(timed_categories.observed_columns(got))
        known += tuple(timed_categories.known_columns(got))
        categorical = (*static.categorical_columns(got), *timed_categories.observed_columns(got),
                       *timed_categories.known_columns(got))
    else:
        return None
    return inputs.load_sources(cfg.paths, observed, known, cfg.covariates, events, cfg.timestamp_col,
                               cfg.symbol_col, cfg.timezone, saved_events=saved, context=context,
                               target=transform.target if transform else cfg.target, static_cols=static_cols,
                               categorical=categorical, bar_frame=bar_frame, fitted=transform is not None,
                               bar_reader=bar_reader, date_format=cfg.date_format)


def feature_columns(target: str, fill_gaps: bool) -> list[str]:
    """What scaling and the row tensors read of raw_features' output, in order (the pieced store's jobs too)."""
    return list(dict.fromkeys((*FEATURE_COLUMNS, *move_columns(target), *(("filled",) if fill_gaps else ()))))


def sorted_bars(bars: pl.DataFrame) -> tuple[pl.DataFrame, list[str], np.ndarray, np.ndarray]:
    """Bars sorted by (series, ts) (sorted only if they are not already), the series names in that order, each
    row's index into the names (N,) and its timestamp in ns (N,)."""
    sidx, names = _ranked_series(bars)  # (N,) 0..S-1 in sorted name order (writable: a tensor shares it)
    ts_ns = bars["ts"].dt.epoch("ns").to_numpy()
    later, same = sidx[1:] >= sidx[:-1], sidx[1:] == sidx[:-1]  # (N - 1,) compared, not differenced: bools
    if not (later.all() and np.all(~same | (ts_ns[1:] >= ts_ns[:-1]))):
        order = np.lexsort((ts_ns, sidx))
        bars, sidx, ts_ns = bars.select(pl.all().gather(order)), sidx[order], ts_ns[order]
    if names is None:
        names = sorted(bars["series"].unique().to_list())
    return bars, names, sidx, ts_ns


def _series_index(bars: pl.DataFrame) -> np.ndarray:
    """(N,) int64 rank of each bar's series among the sorted names (see `_ranked_series`)."""
    return _ranked_series(bars)[0]


def _ranked_series(bars: pl.DataFrame) -> tuple[np.ndarray, list[str] | None]:
    """(N,) int64 rank of each bar's series among the sorted names, and those names when the runs gave them (None
    otherwise). Loaded bars come sorted by series, one run each: the few run names are ranked and repeated, where
    ranking every bar's name would cast millions of strings (and listing the distinct names hash them)."""
    starts = np.flatnonzero(run_starts(bars, ("series",)))  # (R,)
    run_names = bars.get_column("series").gather(starts).to_list()
    if len(set(run_names)) < len(run_names) or None in run_names:  # not one run per series: rank every bar
        return sort_keys(bars, ("series",))[0].copy(), None
    names = sorted(run_names)
    rank = {n: i for i, n in enumerate(names)}
    return np.repeat(np.array([rank[n] for n in run_names], dtype=np.int64), run_lengths(starts, bars.height)), names


def check_length(names: list[str], lengths: np.ndarray, e: int, d: int, for_prediction: bool) -> None:
    """At least one series must hold one window (the first bar of a series has no return and is never used)."""
    need = e + 1 if for_prediction else e + d + 1
    longest = int(np.argmax(lengths))
    have = int(lengths[longest])
    if have >= need:
        return
    where = f"the longest series {names[longest]!r} has {have}"
    if for_prediction:
        raise InputError(
            f"too few bars for a forecast: the model's encoder needs {need} bars in one series "
            f"(encoder {e} + 1, the first bar has no return), but {where}; load a longer history"
        )
    most = have - d - 1
    fix = (
        f"use a smaller --encoder-length (at most {most})"
        if most >= 1
        else "load a longer history or lower --horizon"
    )
    raise InputError(
        f"too few bars for one window: it needs {need} bars in one series (encoder {e} + horizon {d} + 1, "
        f"the first bar has no return), but {where}; {fix}"
    )


def _date_ns(text: str, flag: str) -> int:
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        raise InputError(f"{flag} {text!r} is not an ISO date; write it as YYYY-MM-DD") from None
    dt = dt if dt.tzinfo else dt.replace(tzinfo=UTC)
    return (dt - EPOCH) // timedelta(microseconds=1) * 1000


def train_start_ns(cfg: DataConfig) -> int:
    """A rolling window's start (DataConfig.train_start) in ns; the earliest int64 without one."""
    return _date_ns(cfg.train_start, "train_start") if cfg.train_start else np.iinfo(np.int64).min


def split_cuts(cfg: DataConfig, ts_ns: np.ndarray | list[np.ndarray]) -> tuple[int, int | None]:
    """(train cut, val cut) in ns UTC: the dates given, or `split_times`' fractions of the bars' span, each moved to
    the first bar at or after it, so that daily bars are cut at a day and the summary's cut is a bar's time.
    Moving a cut past no bar moves no row and no window across it: the splits and the purge are those of the
    fraction's time. `ts_ns`: every bar's time (N,), or arrays that together hold them (a store's pieces' distinct
    times, store/pieced.py)."""
    parts = [ts_ns] if isinstance(ts_ns, np.ndarray) else [p for p in ts_ns if len(p)]
    times = split_times(cfg, min(int(p.min()) for p in parts), max(int(p.max()) for p in parts))
    if cfg.train_end:
        return times
    train_cut, val_cut = times
    return bar_at_or_after(train_cut, parts), None if val_cut is None else bar_at_or_after(val_cut, parts)


def split_times(cfg: DataConfig, lo: int, hi: int) -> tuple[int, int | None]:
    """(train cut, val cut) in ns UTC before `split_cuts` puts them on bars: from the dates, or by fractions of the
    time span [lo, hi]: the last `test_fraction` is test (none when 0), the `val_fraction` before it validation,
    the rest train."""
    if cfg.train_end:
        val_cut = _date_ns(cfg.val_end, "--val-end") if cfg.val_end else None
        return _date_ns(cfg.train_end, "--train-end"), val_cut
    test = cfg.test_fraction
    val_cut = lo + int((hi - lo) * (1.0 - test)) if test > 0 else None
    return lo + int((hi - lo) * (1.0 - cfg.val_fraction - test)), val_cut


CUT_CHUNK = 1 << 20  # bar times bar_at_or_after compares at a time (its temporaries: a few MB)


def bar_at_or_after(t: int, parts: list[np.ndarray]) -> int:
    """The least time at or after `t` in the arrays `parts` (any order); `t` itself when none is."""
    best = None
    for p in parts:
        for lo in range(0, len(p), CUT_CHUNK):
            chunk = np.asarray(p[lo : lo + CUT_CHUNK])
            later = chunk[chunk >= t]
            if len(later):
                best = int(later.min()) if best is None else min(best, int(later.min()))
    return t if best is None else best


def check_splits(
    split: SplitResult, cuts: tuple[int, int | None], cfg: DataConfig, ts_ns: np.ndarray
) -> None:
    span = f"the data cover {iso(int(ts_ns.min()))[:10]} .. {iso(int(ts_ns.max()))[:10]}"
    train_cut, val_cut = cuts
    by_date = cfg.train_end is not None
    if len(split.ids["train"]) == 0:
        fix = "move --train-end later" if by_date else "lower --val-fraction"
        raise InputError(
            f"train split is empty: no window's forecast bars all fall before {iso(train_cut)} "
            f"({split.purged['train']} purged for crossing it); {span}; {fix} or use a smaller --encoder-length"
        )
    if len(split.ids["val"]) == 0:
        end = f"and {iso(val_cut)}" if val_cut is not None else "and the end of the data"
        fix = "move --train-end earlier or --val-end later" if by_date else "raise --val-fraction or --test-fraction"
        raise InputError(
            f"val split is empty: no window's forecast bars fall between {iso(train_cut)} {end} "
            f"({split.purged['val']} purged for crossing the end); {span}; {fix} or use a smaller --horizon"
        )
    if val_cut is not None and len(split.ids["test"]) == 0:
        where, fix = (
            (f"--val-end {cfg.val_end}", "move --val-end earlier or drop it (then all after --train-end validates)")
            if by_date
            else (iso(val_cut), "raise --test-fraction, or set it to 0 for no test split")
        )
        raise InputError(f"test split is empty: no window's first forecast bar is on or after {where}; {span}; {fix}")


def _tensors(rows: SeriesRows, names: list[str], kr: int, e: int, d: int,
             user_static: tuple[np.ndarray, np.ndarray] | None = None,
             timed: tuple[np.ndarray, np.ndarray] | None = None) -> WindowedData:
    """`rows` as the WindowedData tensors (sharing the arrays). `user_static`: the series' (S, Sr) real and (S, Sc)
    categorical static inputs (static.arrays), repeated over each series' rows after the series code. `timed`: the
    (N, Kc + Oc) and (U, Kc) codes of the categorical known and observed inputs (timed_categories.arrays)."""
    import torch

    if timed is None:
        timed = (np.zeros((len(rows.codes), 0), dtype=np.int64), np.zeros((len(rows.known.ts), 0), dtype=np.int64))

    codes = rows.codes[:, None]  # (N, 1): a view of the fresh (N,) codes
    static_cont = np.zeros((len(rows.codes), 0), dtype=np.float32)
    if user_static is not None:
        cont, cat = user_static
        codes = np.concatenate([codes, cat[rows.sidx]], axis=1)  # (N, 1 + Sc)
        static_cont = cont[rows.sidx]  # (N, Sr)
    return WindowedData(
        cont=torch.from_numpy(rows.cont),
        static_cat=torch.from_numpy(codes),
        static_cont=torch.from_numpy(static_cont),
        time_cat=torch.from_numpy(timed[0]),
        target_raw=torch.from_numpy(rows.target),
        center=torch.from_numpy(rows.center),
        scale=torch.from_numpy(rows.scale),
        ts_ns=torch.from_numpy(np.array(rows.ts, dtype=np.int64)),  # a copy: polars gave a read-only view
        real=torch.from_numpy(rows.real),
        series_idx=torch.from_numpy(rows.sidx),
        starts=torch.from_numpy(rows.starts),
        encoder_length=e,
        horizon=d,
        n_known_cont=kr,
        n_known_cat=timed[1].shape[1],
        series_names=tuple(names),
        known_cont=torch.from_numpy(rows.known.cont),
        known_cat=torch.from_numpy(timed[1]),
        known_ts=torch.from_numpy(rows.known.ts),
        known_base=torch.from_numpy(rows.known.base),
        known_index=None if rows.known.index is None else torch.from_numpy(rows.known.index),
    )


def _boxed(fn: Callable[..., Any], *args: Any) -> list:
    """[fn(*args)]: a list its taker pops the value from, so that the future holding the list keeps no reference."""
    return [fn(*args)]


def feature_schema(tf: FittedTransform, e: int, d: int, adjust: str) -> FeatureSchema:
    season = ("tod_vol",) if tf.scalers.get("season") else ()
    known = [*calendar_columns(tf.intraday, tf.calendar_features), *season, *inputs.known_names(tf.inputs),
             "relative_time"]
    vocab = (tf.inputs or {}).get("static_vocab", {})
    timed = (tf.inputs or {}).get("timed_vocab", {})
    features = (
        Feature("series", Role.STATIC, Kind.CATEGORICAL, cardinality=len(tf.series_vocab) + 1),
        *(Feature(n, Role.STATIC, Kind.CATEGORICAL, cardinality=len(vocab[n]) + 1)
          for n in static.categorical_columns(tf.inputs)),
        *(Feature(n, Role.STATIC, Kind.CONTINUOUS) for n in static.real_columns(tf.inputs)),
        *(Feature(n, Role.KNOWN, Kind.CATEGORICAL, cardinality=len(timed[n]) + 1)
          for n in timed_categories.known_columns(tf.inputs)),
        *(Feature(n, Role.KNOWN, Kind.CONTINUOUS) for n in known),
        *(Feature(n, Role.OBSERVED, Kind.CATEGORICAL, cardinality=len(timed[n]) + 1)
          for n in timed_categories.observed_columns(tf.inputs)),
        *(Feature(n, Role.OBSERVED, Kind.CONTINUOUS) for n in observed_names(tf.scalers)),
    )
    extra = {
        "scaling": tf.scaling,
        "vol_halflife": tf.scalers["halflife"],
        "vol_estimator": tf.scalers.get("estimator", "returns"),
        "intraday": tf.intraday,
        "calendar_features": tf.calendar_features,
        "exchange_tz": tf.exchange_tz,
        "unknown_series_code": UNKNOWN_SERIES,
        "adjust": adjust,
    }
    return FeatureSchema(features=features, target=tf.target, encoder_length=e, horizon=d, extra=extra)
