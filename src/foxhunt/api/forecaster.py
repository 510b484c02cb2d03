"""`foxhunt.Forecaster`: a trained model loaded once, forecasting from frames, parquet tails or one bar at a time.

`predict` runs the loader and the feature pipeline of `foxhunt predict` on a frame in memory (no file is written or
read) and forecasts the live window of each series. It also (re)starts each of those series' stream: `update` then
appends one bar per series to a small running state (data/features/bar_features_live.py: the trailing-volatility EWMAs
and a ring of the last E input rows) and forecasts from it without polars, the loader or any pass over the history, so
a live system can forecast on every bar. Both give the rows of `foxhunt predict`'s output for the live origins.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import torch

from foxhunt.api.bars import FRAME_NAME, as_polars, parquet_tail, stream_bars
from foxhunt.data.bars.load import load_raw
from foxhunt.data.baselines.anchor_live import LiveAnchor
from foxhunt.data.dataset.batch import Batch
from foxhunt.data.dataset.types import PreparedData
from foxhunt.data.features.bar_features import raw_features
from foxhunt.data.features.bar_features_live import StreamState
from foxhunt.data.features.inputs_live import LiveInputs
from foxhunt.data.io.read import read_frame
from foxhunt.durations import parse_gap
from foxhunt.model.adaptive import Origins, Runner
from foxhunt.model.calibration import DEFAULT_METHOD, Calibration
from foxhunt.model.inference.traced import BatchForward, LiveCats, LiveForward, live_forward
from foxhunt.model.saved import LoadedModel, load_model
from foxhunt.predict.bar_range import check_start, with_window
from foxhunt.predict.calibrated import calibration_method, forecast_calibration, pick_calibration
from foxhunt.predict.origins import (
    live_origins,
    parse_time,
    prediction_config,
    prepare_for_model,
    prepare_loaded,
    select_origins,
    store_for_model,
    with_sources,
)
from foxhunt.predict.parquet import forecast_table, write_forecasts
from foxhunt.predict.predictor import BatchPredictor, ForecastBatch

# Bars of history per series that `predict_parquet` reads beyond the encoder: enough for the seed of the slowest
# trailing-volatility EWMA to weigh less than 1e-6 (2^-20) in the forecast inputs.
SEED_HALFLIVES = 20


@dataclass(frozen=True)
class LiveForecast:
    """The forecasts of one `update_arrays` call: one row per series that had a full encoder."""

    symbols: tuple[str, ...]  # (B,) series, in the order of the bars given
    origin_ns: np.ndarray  # (B,) int64 UTC ns of each series' new bar (the forecast origin)
    quantiles: np.ndarray  # (B, D, Q) float32 forecasts in the target's units, sorted along Q; D = horizon
    levels: tuple[float, ...]  # (Q,) the quantile levels
    target_ns: np.ndarray  # (B, D) int64 UTC ns of each step: the forecast grid after the origin (`predict`'s)


class Forecaster:
    """A trained model and its feature pipeline, loaded once from a run directory (see `load`)."""

    def __init__(self, lm: LoadedModel, device: torch.device, trace: bool = True, calibration: str = DEFAULT_METHOD):
        self._lm, self._device = lm, device
        self._method = calibration  # as asked for; `forecast_calibration` says when the run has less
        self._cal = pick_calibration(lm, calibration)  # fixed shifts, the adaptive state, or none
        # the adaptive shifts' running state, advanced by `predict` through each history and by every `update`
        self._runner = self._cal if isinstance(self._cal, Runner) else None
        self._model = lm.model.eval()
        e, d = lm.data_cfg.encoder_length, lm.data_cfg.horizon
        # Scaled quantiles (B, D, Q) of the live windows (codes, encoder rows, decoder rows; model/inference/traced.py): the
        # inference model in onnxruntime or as a frozen trace, compiled on first use, or the eager training model;
        # benchmarks swap in other backends (torch.compile, onnxruntime on the export) through a BatchForward.
        self._live: LiveForward = live_forward(self._model, e, d, device) if trace else BatchForward(
            self._eager, e, d, device)
        self._state: StreamState | None = None  # made on first use: `foxhunt predict` never streams
        tf = lm.transform  # --anchor: the baseline each forecast starts from, one more input (anchor_live.py)
        self._anchor = None if tf.anchor is None else LiveAnchor(tf.anchor, d, lm.model_cfg.quantiles)

    @classmethod
    def load(cls, run_dir: str | Path, device: str | torch.device = "cpu", trace: bool = True,
             covariates: Sequence[str] | None = None, events: str | None = None, since: str | None = None,
             until: str | None = None, calibration: str = DEFAULT_METHOD, timezone: str | None = None) -> Forecaster:
        """Load the model package in `run_dir` (model.json, model.safetensors, the scalers inside model.json and
        calibration.json when it was fitted on these weights). No training data is read. `trace`: `update` runs
        the model with its weights folded for inference (model/inference/folded.py), compiled on first use (about a
        second): in onnxruntime when it is installed (one graph for batch 1, one for any larger batch), else as a
        frozen TorchScript trace per batch size (a twentieth and an eighth of the eager CPU time at batch 1, the
        same numbers to float rounding); False runs it eagerly.
        `covariates`, `events`: a model trained with inputs of your own reads them from these files instead of the
        training run's. `since`, `until` (ISO dates or times, UTC when naive): `predict` and `write_forecasts` read
        the bars with since <= time < until; by default from the training run's --since (its inputs may start
        there) to the newest bar, whatever its --until (predict/bar_range.py). `timezone`: the zone of naive times
        in the frames, files and bars given (None: the model's --timezone, UTC when it had none). `calibration`: "adaptive" (shifts per
        series that every outcome moves, carried from the end of validation through the histories `predict` is
        given and every `update`), "fixed" (the shifts fitted on validation) or "none"; `calibrated=False` on a
        call gives the model's own quantiles whatever it is."""
        dev = torch.device(device)
        lm = with_sources(load_model(run_dir, dev), tuple(covariates) if covariates else None, events)
        return cls(with_window(lm, since, until, timezone), dev, trace, calibration)

    # -- what the model is -------------------------------------------------------------------------------------
    @property
    def quantiles(self) -> tuple[float, ...]:
        return tuple(self._lm.model_cfg.quantiles)

    @property
    def encoder_length(self) -> int:
        return self._lm.data_cfg.encoder_length

    @property
    def horizon(self) -> int:
        return self._lm.data_cfg.horizon

    @property
    def calibration(self) -> Calibration | None:
        """The fixed conformal calibration fitted on validation (None: the run has none for these weights)."""
        return self._lm.calibration

    @property
    def calibration_method(self) -> str:
        """The calibration calibrated forecasts get: "adaptive", "fixed" or "none" (what `load` asked for, or less
        when the run lacks it)."""
        return calibration_method(self._cal)

    @property
    def history_bars(self) -> int:
        """Bars per series `predict_parquet` reads: the encoder, the first bar (no return) and the warm-up that
        makes the trailing volatility's starting value negligible (its slowest halflife x SEED_HALFLIVES)."""
        cfg = self._lm.transform.data
        slowest = float(cfg.vol_halflife) * (4.0 if cfg.vol_features else 1.0)
        return self.encoder_length + 1 + int(np.ceil(slowest * SEED_HALFLIVES))

    # -- forecasts -------------------------------------------------------------------------------------------
    def predict(self, df: Any, calibrated: bool = True) -> pl.DataFrame:
        """Forecast the latest window of every series in `df` (polars or pandas; the columns a bars file has: a time
        column, open high low close volume, optionally a symbol), read as `foxhunt predict` reads a file with the
        model's own options, within the data window of `load` (the training run's --since by default). Returns
        `foxhunt predict`'s rows for each series' last bar: symbol, origin, horizon,
        target_time (the forecast grid's time of each step: the bars' spacing from the origin, skipping the closures
        the grid knows, see data/bars/grid.future_timestamps), one column per quantile (calibrated unless `calibrated=False`),
        actual (null). Also restarts the `update` stream of these series from this history. Bars of another kind or
        spacing than the model's are an InputError; a series with fewer bars than the encoder needs is left out and a
        symbol the model never saw forecast with its unknown-series row, each said once as a warning (the `foxhunt`
        logger), as `foxhunt predict` says them."""
        frame = as_polars(df)
        cfg = prediction_config(self._lm, (FRAME_NAME,))
        raw, entry = read_frame(frame, FRAME_NAME, cfg.timestamp_col, cfg.symbol_col, cfg.timezone, cfg.price_scale,
                                cfg.date_format, since=cfg.since, until=cfg.until)
        loaded = load_raw(raw, [entry], cfg, self._lm.transform.bar_spacing_ns,
                          roots=self._lm.transform.contract_roots())
        data = prepare_loaded(self._lm, loaded, (FRAME_NAME,), frame)  # its own columns: --observed ones
        self._prime(loaded.bars, data)
        if self._runner is not None:  # restarted with the stream, then carried through this history (lead_in)
            self._runner.restart(data.windows.series_names)
        fc = BatchPredictor(self._lm, data, self._device, calibration=self._runner or self._calibration(calibrated))
        ids = live_origins(data)
        tables = [forecast_table(_as_asked(fb, calibrated), data.windows.series_names, self.quantiles)
                  for fb in fc.iter(ids, 1024)]
        out = pl.from_arrow(pa.concat_tables(tables))
        assert isinstance(out, pl.DataFrame)
        return out

    def predict_parquet(self, path: str | Path, calibrated: bool = True) -> pl.DataFrame:
        """`predict` on the tail of a parquet file in time order: only the last row groups, until each symbol has
        `history_bars` rows (the forecast then equals one from the whole file to the EWMA seed's 1e-6); the whole
        file when `load` was given an `until`, whose last bars may lie anywhere in it."""
        rows = self.history_bars if self._lm.data_cfg.until is None else sys.maxsize
        frame = parquet_tail(path, rows, self._lm.data_cfg.symbol_col)
        return self.predict(frame, calibrated)

    def update(self, bar: Any, calibrated: bool = True, max_gap: Any = None) -> pl.DataFrame:
        """Append one new bar per series (a dict, or a frame with one row per series) and forecast each of those
        series from its last E bars; the rows of `predict` on the same history, for the series with a full encoder
        (a series `predict` never saw starts from its first bar). A bar continues its series' contract: a roll needs
        `predict` on bars through it. `update_arrays` is the same forecast without building a frame.

        A bar that comes more than 3 days after the bar the forecast grid expected next (weekends, the daily halt
        and the holidays of the model's --calendar are not gaps) is said once, as a warning: the series' state is
        carried across the gap, as `predict` carries it on such a history. `max_gap` (a datetime.timedelta, or
        text like "36h", "3d") refuses, with an InputError and the state untouched, a bar that comes more than
        that after the expected one. A bar the loader drops or stops on (bad_rows.bar_fault: a non-finite value,
        contradicting OHLC prices, a negative volume, a price at or below zero where the target takes logs) is an
        InputError naming the rule, the state untouched; one such bar in a frame refuses the whole call.

        A model trained with inputs of your own: the bar carries each --observed column by name (one the model read
        from a --covariates file may be left out, and is read from that file as of the bar's time; a column of the
        bar files must be given), a categorical one as its value (text); the known covariates and events come from
        the model's covariate source (see `load`) at the bar and at its forecast steps (data/features/inputs_live.py). Static
        inputs are those `predict` gave the series (a series first seen here: its covariate file's value, or its
        first bar's field for a column of the bar files). Categories are coded with the model's vocabulary, a value
        unseen in training as 0 (said once). A missing or non-finite field, or a step a known file does not cover,
        is an InputError naming the column, with the state untouched. A --context model reads each context series'
        inputs from the stream's own state of that series (its last bar at or before the bar's time, one of the
        same call included: data/features/context_live.py), so its bars come through `update` too; a context series the
        stream has no bar of is an InputError."""
        live = self.update_arrays(bar, calibrated, max_gap)
        n = len(live.symbols)
        fb = ForecastBatch(
            series=np.arange(n), window=np.arange(n), origin_ns=live.origin_ns,
            target_ns=live.target_ns, quantiles=live.quantiles,
            actual=np.full((n, self.horizon), np.nan),
            filled=np.zeros((n, self.horizon), bool) if "filled" in self._stream.observed else None)
        out = pl.from_arrow(forecast_table(fb, live.symbols, self.quantiles))
        assert isinstance(out, pl.DataFrame)
        return out

    def update_arrays(self, bar: Any, calibrated: bool = True, max_gap: Any = None) -> LiveForecast:
        """`update` for a live loop: the same forecasts as numpy arrays, with no frame built (most of a call's cost at
        batch 1; benchmarks/latency.py). Series without a full encoder yet are
        left out, as in `update`. Not thread-safe: the running state and the model's input buffers are reused
        across calls, so give each thread its own Forecaster. `max_gap`: as in `update`."""
        st = self._stream
        ready = st.ready(self._step(bar, parse_gap(max_gap)))
        q, _, origin = self._forecast_rows(ready, calibrated)
        return LiveForecast(tuple(st.names[i] for i in ready), origin, q, self.quantiles, st.targets(ready))

    def write_forecasts(self, paths: tuple[str, ...], out: Path, start: str | None = None, end: str | None = None,
                        batch_size: int = 1024, calibrated: bool = True, features: Path | None = None
                        ) -> tuple[int, str]:
        """`foxhunt predict`: forecasts for every origin of the bar files `paths` whose first forecast bar lies in
        [start, end] (ISO dates or times, UTC when naive), streamed to the parquet file `out` (atomic). Returns
        (origins, the calibration applied: "adaptive", "fixed" or "none"). `features`: read the windows of this
        feature store instead of `paths` (its origins only: no live one; see predict/origins.store_for_model)."""
        start_ns = parse_time(start, "--start")
        if features is not None:
            data = store_for_model(self._lm, features)
        else:
            data = prepare_for_model(self._lm, paths)  # within the data window of `load`
            check_start(data, start_ns, start, self._lm)
        ids = select_origins(data, start_ns, parse_time(end, "--end", end=True))
        cal = forecast_calibration(self._lm, self._method if calibrated else "none")
        write_forecasts(self._lm, data, ids, out, batch_size, self._device, calibration=cal)
        return len(ids), calibration_method(cal)

    # -- internals -------------------------------------------------------------------------------------------
    def _eager(self, batch: Batch) -> torch.Tensor:
        return self._model(batch).quantiles

    @property
    def _stream(self) -> StreamState:
        if self._state is None:
            tf = self._lm.transform
            user = LiveInputs(tf, self._lm.data_cfg) if tf.inputs is not None else None  # reads the files once
            self._state = StreamState(tf, self.encoder_length, self.horizon, user)
        return self._state

    def _calibration(self, calibrated: bool) -> Calibration | Runner | None:
        return self._cal if calibrated else None

    def _prime(self, bars: pl.DataFrame, data: PreparedData) -> None:
        w = data.windows
        real = w.real  # (N + S*D,) the loaded bars, in their order; appended future rows are not
        if int(real.sum()) != bars.height:  # bars dropped for a missing --observed value: prime from those kept
            kept = pl.DataFrame({"series": [w.series_names[i] for i in w.series_idx[real].tolist()],
                                 "ts": pl.Series(w.ts_ns[real].numpy()).cast(pl.Datetime("ns", "UTC"))})
            bars = bars.join(kept.with_columns(pl.col("ts").cast(bars.schema["ts"])), on=["series", "ts"],
                             how="semi", maintain_order="left")
        feats = raw_features(bars, self._lm.data_cfg.adjust, self._lm.transform.target)
        self._stream.prime(feats, w.cont[real].numpy(), w.center[real].numpy(), w.scale[real].numpy())
        user = self._stream.user
        if user is not None and user.codes is not None:  # static and categorical inputs, as predict coded them
            user.codes.prime(w)
        if self._anchor is not None:  # each series' GARCH filter through its history, as the prepared rows ran it
            returns = feats.select(pl.when(pl.col("first")).then(None).otherwise(pl.col("target")).cast(pl.Float64)
                                   .alias("r"), "series").partition_by("series", as_dict=True, maintain_order=True)
            for (name,), part in returns.items():
                self._anchor.prime(name, part["r"].fill_null(np.nan).to_numpy())

    def _step(self, bar: Any, max_gap_ns: int | None = None) -> list[int]:
        """Parse `bar` and advance the stream; the state rows of its series (B,)."""
        st = self._stream
        only = st.names[0] if len(st.names) == 1 else None
        fields = st.user.fields if st.user is not None else ()
        cfg = self._lm.data_cfg
        b = stream_bars(bar, st.series_of, only, cfg.timezone, fields, cfg.date_format,
                        daily=not self._lm.transform.intraday)
        rows = st.step(b.names, b.contracts, b.ts_ns, b.ohlcv, b.filled, max_gap_ns, b.observed)
        if self._anchor is not None:
            for r in rows:  # the series of this update
                self._anchor.step(st.names[r], float(st.target[r]), bool(st.n[r] == 1))
        return rows

    def live_inputs(self, rows: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The model's inputs for the live windows of stream rows `rows` (B,): series codes (B,), each window's own
        E encoder rows (B, E, F) and the known inputs of its D forecast steps (B, D, Kr)."""
        st = self._stream
        return st.codes(rows), st.encoder(rows), st.decoder(rows)

    def live_cats(self, rows: list[int]) -> LiveCats | None:
        """The static and categorical inputs of the live windows of stream rows `rows` (data/features/codes_live.py); None
        for a model without them (its forward takes the series codes and real rows only)."""
        st = self._stream
        codes = st.user.codes if st.user is not None else None
        if codes is None:
            return None
        return codes.cats([st.names[r] for r in rows], st.ts[rows].tolist(), st.targets(rows))

    def batch(self, rows: list[int]) -> Batch:
        """`live_inputs` of stream rows `rows` as the model's Batch (no bar shared across windows)."""
        st = self._stream
        b = BatchForward(self._eager, self.encoder_length, self.horizon, self._device).batch(
            *self.live_inputs(rows), self.live_cats(rows), self._live_anchor(rows))
        dev = self._device
        b.target_center = torch.from_numpy(st.center[rows].astype(np.float32)).to(dev)
        b.target_scale = torch.from_numpy(st.scale[rows].astype(np.float32)).to(dev)
        b.window = torch.as_tensor(rows, device=dev)
        return b

    def _live_anchor(self, rows: list[int]) -> np.ndarray | None:
        """(B, D, Q) the anchor of stream rows `rows` at their last bar, scaled as their targets are; None for a
        model without one."""
        if self._anchor is None:
            return None
        st = self._stream
        return self._anchor.at([st.names[r] for r in rows], st.center[rows], st.scale[rows])

    def _forecast_rows(self, rows: list[int], calibrated: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Quantiles (B, D, Q) in target units (calibrated unless told not), target scales (B,), origins (B,):
        the scaled forecasts unscaled and sorted as `raw_quantiles` does (float32), then calibrated."""
        st = self._stream
        scale = st.scale[rows]
        if not rows:
            return np.zeros((0, self.horizon, len(self.quantiles)), np.float32), scale, st.ts[rows]
        cats = self.live_cats(rows)
        anchor = self._live_anchor(rows)
        scaled = self._live(*self.live_inputs(rows), *(() if cats is None else (cats,)),
                            **({} if anchor is None else {"anchor": anchor}))  # (B, D, Q)
        q = scaled * scale.astype(np.float32)[:, None, None] + st.center[rows].astype(np.float32)[:, None, None]
        q.sort(axis=-1)
        if self._runner is not None:  # advanced by every bar, whether this call wants calibrated forecasts or not
            at = Origins(np.arange(len(rows)), [st.names[r] for r in rows], st.ts[rows], st.target[rows])
            shifted = self._runner.correct(q, scale, at).astype(np.float32)
            return (shifted if calibrated else q), scale, st.ts[rows]
        cal = self._calibration(calibrated)
        if cal is not None:
            q = cal.correct(q, scale).astype(np.float32)
        return q, scale, st.ts[rows]


def _as_asked(fb: ForecastBatch, calibrated: bool) -> ForecastBatch:
    """`fb`, or its model's own quantiles when the call asked for them (the adaptive state advanced all the same)."""
    return fb if calibrated or fb.raw is None else dataclasses.replace(fb, quantiles=fb.raw, raw=None)
