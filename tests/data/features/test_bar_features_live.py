"""The live stream on 1-minute bars with every default option (range volatility, the time-of-day profile, the CME
grid): `update_arrays` bar by bar through a daily halt gives what `predict` gives on the same history."""

from __future__ import annotations

import numpy as np
import polars as pl
import torch

import foxhunt
from foxhunt.data.bars.load import load_bars
from foxhunt.data.config import DataConfig
from foxhunt.data.io.sample import bundled_sample_path
from foxhunt.data.prepare import prepare_data
from foxhunt.model.config import ModelConfig
from foxhunt.model.saved import save_model_json, save_weights, state_to_cpu
from foxhunt.model.tft import TemporalFusionTransformer
from tests.api.test_forecaster import assert_same_forecasts


def _untrained_run(tmp_path, cfg: DataConfig):
    """A model package of a tiny untrained model (the stream's inputs do not depend on the weights' values)."""
    data = prepare_data(cfg)
    torch.manual_seed(0)
    mcfg = ModelConfig(hidden_size=4, attention_heads=1, encoder_length=cfg.encoder_length, horizon=cfg.horizon,
                       anchored=cfg.anchored)
    model = TemporalFusionTransformer(data.schema.sizes, mcfg)
    save_model_json(tmp_path / "model.json", mcfg, data.schema, data.transform, cfg,
                    sum(p.numel() for p in model.parameters()))
    save_weights(tmp_path / "model.safetensors", state_to_cpu(model))
    return tmp_path


def test_update_arrays_through_a_halt_equals_predict(tmp_path):
    cfg = DataConfig(paths=(str(bundled_sample_path()),), until="2024-02-21")
    run = _untrained_run(tmp_path, cfg)
    bars = load_bars(cfg).bars.select(pl.col("ts").alias("ts_event"), pl.col("series").alias("symbol"),
                                      pl.col("own_close").alias("open"), pl.col("own_high").alias("high"),
                                      pl.col("own_low").alias("low"), pl.col("own_close").alias("close"), "volume")
    fc, ref = foxhunt.Forecaster.load(run), foxhunt.Forecaster.load(run)
    gap = bars["ts_event"].diff().dt.total_minutes().fill_null(0).to_numpy()  # (N,)
    halt = int(np.flatnonzero((gap >= 60) & (np.arange(len(gap)) > fc.history_bars + 60))[0])  # first bar after it
    start, end = halt - 60, halt + 40
    first = start - fc.history_bars
    fc.predict(bars.slice(first, fc.history_bars))
    for i, bar in enumerate(bars.slice(start, end - start).iter_rows(named=True)):
        live = fc.update_arrays(bar)
        if i % 20 == 19 or start + i == halt:
            want = ref.predict(bars.slice(first, start + i + 1 - first))
            q = want.select("p10", "p50", "p90").to_numpy()  # the default quantiles
            assert_same_forecasts(live.quantiles.reshape(-1, q.shape[1]), q)  # p90 about 2.5e-4: relative
