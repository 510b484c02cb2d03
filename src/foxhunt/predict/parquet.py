"""Forecasts as a parquet file: one row per (series, origin, horizon), streamed batch by batch into a file written
under a temporary name and renamed when complete, its key-value metadata saying what it holds, which model made it
from which bars, and how it is calibrated (predict/provenance.py)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from foxhunt.atomic import atomic_path
from foxhunt.data.dataset.types import PreparedData
from foxhunt.model.adaptive import Runner
from foxhunt.model.calibration import Calibration
from foxhunt.model.config import quantile_label
from foxhunt.model.saved import LoadedModel
from foxhunt.predict.interpretation import InterpretationAccumulator
from foxhunt.predict.predictor import BatchPredictor, ForecastBatch
from foxhunt.predict.provenance import forecast_metadata

log = logging.getLogger("foxhunt.evaluate")


def forecast_table(fb: ForecastBatch, names: tuple[str, ...], quantiles: tuple[float, ...]) -> pa.Table:
    """Long format: one row per (series, origin, horizon)."""
    b, d, _ = fb.quantiles.shape
    sym = np.asarray(names, dtype=object)[np.repeat(fb.series, d)]
    tgt = fb.target_ns.reshape(-1)
    cols: dict[str, pa.Array] = {
        "symbol": pa.array(sym, type=pa.string()),
        "origin": pa.array(np.repeat(fb.origin_ns, d), type=pa.timestamp("ns", tz="UTC")),
        "horizon": pa.array(np.tile(np.arange(1, d + 1, dtype=np.int16), b)),
        "target_time": pa.array(tgt, type=pa.timestamp("ns", tz="UTC"), mask=tgt < 0),
    }
    for k, q in enumerate(quantiles):
        cols[quantile_label(q)] = pa.array(fb.quantiles[:, :, k].reshape(-1))
    act = fb.actual.reshape(-1)
    cols["actual"] = pa.array(act, mask=np.isnan(act))
    if fb.filled is not None:  # --fill-gaps models: which actuals are filled bars (no trade in that interval)
        cols["actual_filled"] = pa.array(fb.filled.reshape(-1), mask=np.isnan(act))
    return pa.table(cols)


def write_forecasts(
    lm: LoadedModel, data: PreparedData, ids: torch.Tensor, out: Path, batch_size: int, device: torch.device,
    interpretation: InterpretationAccumulator | None = None, calibration: Calibration | Runner | None = None,
    consume: Callable[[ForecastBatch], None] | None = None,
) -> BatchPredictor:
    """Predict `ids` and stream the rows into `out` (parquet, atomic), calibrated with `calibration` when given.
    `consume` is handed each batch as it is written (to keep it, or to score it)."""
    fc = BatchPredictor(lm, data, device, interpretation, calibration=calibration)
    meta = forecast_metadata(lm, data, calibration)
    with atomic_path(out) as tmp:
        writer = None
        try:
            for fb in fc.iter(ids, batch_size):
                table = forecast_table(fb, data.windows.series_names, lm.model_cfg.quantiles).replace_schema_metadata(meta)
                if writer is None:
                    writer = pq.ParquetWriter(tmp, table.schema, compression="zstd")
                writer.write_table(table)
                if consume is not None:
                    consume(fb)
        finally:
            if writer is not None:
                writer.close()
    if fc.crossed:
        log.warning("quantiles crossed in %d of %d (origin, horizon) pairs (%.2f%%); sorted them", fc.crossed,
                    fc.pairs, 100 * fc.crossed / max(1, fc.pairs))
    return fc

