"""One tiny model for the whole folder: the docs' "From Python" code (docs/production.md), run once on the daily
fixture."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "production.md"


def readme_python_blocks() -> list[str]:
    """The ```python blocks of docs/production.md's "From Python" section (its live-bars subsection included), in
    order. The page's earlier block, which makes a daily file like the fixture, is not among them: here
    `bars.parquet` is the fixture itself."""
    text = PAGE.read_text(encoding="utf-8")
    section = text.split("\n## From Python", 1)[1]
    section = re.split(r"\n## ", section, maxsplit=1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


@pytest.fixture(scope="session")
def readme_run(tmp_path_factory, daily_path) -> dict[str, Any]:
    """The namespace after running the page's Python blocks in a directory where `bars.parquet` is the daily
    fixture (two series, ES and NQ, 300 bars each): `run`, `fc`, `bars`, `live`, `raw`, `tail`, `forecast`, `arrays`,
    and `cwd`, that directory."""
    cwd = tmp_path_factory.mktemp("readme")
    (cwd / "bars.parquet").symlink_to(daily_path)
    namespace: dict[str, Any] = {}
    before = os.getcwd()
    os.chdir(cwd)
    try:
        exec(compile("\n".join(readme_python_blocks()), str(PAGE), "exec"), namespace)
    finally:
        os.chdir(before)
    namespace["cwd"] = cwd
    return namespace


def untrained_run(run: Path, cfg: Any) -> None:
    """Save into `run` a tiny untrained model of the data `cfg` (a DataConfig) names: what a stream needs of a run
    to compute its inputs and its grid, which do not depend on the weights."""
    import torch

    from foxhunt.data.prepare import prepare_data
    from foxhunt.model.config import ModelConfig
    from foxhunt.model.saved import save_model_json, save_weights, state_to_cpu
    from foxhunt.model.tft import TemporalFusionTransformer

    data = prepare_data(cfg)
    torch.manual_seed(0)
    mcfg = ModelConfig(hidden_size=4, attention_heads=1, encoder_length=cfg.encoder_length, horizon=cfg.horizon,
                       anchored=cfg.anchored)
    model = TemporalFusionTransformer(data.schema.sizes, mcfg)
    save_model_json(run / "model.json", mcfg, data.schema, data.transform, cfg, sum(p.numel() for p in model.parameters()))
    save_weights(run / "model.safetensors", state_to_cpu(model))


@pytest.fixture(scope="session")
def intraday_run(tmp_path_factory) -> tuple[Path, Any]:
    """(run directory, bars frame) of a tiny untrained model on the bundled 1-minute sample through Friday
    2024-02-23 (every default option: the CME grid, the time-of-day profile), and those bars as a frame with the
    columns a bars file has (one series, ES). The stream's inputs and the grid do not depend on the weights."""
    import polars as pl

    from foxhunt.data.bars.load import load_bars
    from foxhunt.data.config import DataConfig
    from foxhunt.data.io.sample import bundled_sample_path

    run = tmp_path_factory.mktemp("intraday_run")
    cfg = DataConfig(paths=(str(bundled_sample_path()),), until="2024-02-24")
    untrained_run(run, cfg)
    bars = load_bars(cfg).bars.select(pl.col("ts").alias("ts_event"), pl.col("series").alias("symbol"),
                                      pl.col("own_close").alias("open"), pl.col("own_high").alias("high"),
                                      pl.col("own_low").alias("low"), pl.col("own_close").alias("close"), "volume")
    return run, bars


@pytest.fixture(scope="session")
def xnys_daily_run(tmp_path_factory, daily_path) -> tuple[Path, Any]:
    """(run directory, bars frame) of a tiny untrained model on the daily fixture through Wednesday 2024-11-27 with
    --calendar XNYS (its holidays saved with the model), and the fixture's bars as they are in the file."""
    pytest.importorskip("pandas_market_calendars")
    import polars as pl

    from foxhunt.data.config import DataConfig

    run = tmp_path_factory.mktemp("xnys_daily_run")
    untrained_run(run, DataConfig(paths=(str(daily_path),), until="2024-11-28", calendar="XNYS", encoder_length=16,
                                  horizon=3))
    return run, pl.read_parquet(daily_path)


@pytest.fixture(scope="session")
def xnys_sessions_run(tmp_path_factory, daily_path) -> tuple[Path, Any]:
    """`xnys_daily_run` with --calendar-features: XNYS's holidays and early closes as inputs (Thanksgiving
    2024-11-28 a holiday, 11-29 an early close), and the fixture's bars. Without an anchor, so that the untrained
    model's forecasts move with its inputs (an anchored one forecasts its anchor whatever they are)."""
    pytest.importorskip("pandas_market_calendars")
    import polars as pl

    from foxhunt.data.config import DataConfig

    run = tmp_path_factory.mktemp("xnys_sessions_run")
    untrained_run(run, DataConfig(paths=(str(daily_path),), until="2024-11-28", calendar="XNYS", calendar_features=True,
                                  encoder_length=16, horizon=3, anchor="none"))
    return run, pl.read_parquet(daily_path)
