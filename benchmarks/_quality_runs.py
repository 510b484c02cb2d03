"""What benchmarks/quality.py reads from a foxhunt run directory: its epochs (run, cap, best), what
pytorch-forecasting is matched to (size, shapes, batch, epoch cap, patience), whether pytorch-forecasting's side can
forecast what it forecasts, and its bars as its model reads them, exported for pytorch-forecasting's side."""

from __future__ import annotations

import json
from contextlib import redirect_stderr
from pathlib import Path
from typing import Any

from _quality_table import QUANTILES


def read(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def export_bars(run: Path, path: Path, log_path: Path) -> Path:
    """The bars as the run's model reads them for forecasting (evaluate's own loading: series, rolls, time zone),
    in the generic format pytorch-forecasting's side reads; written once per dataset (loading's console into
    `log_path`)."""
    if path.exists():
        return path
    from foxhunt.data.bars.load import load_bars
    from foxhunt.model.saved import load_model
    from foxhunt.predict.origins import prediction_config

    with open(log_path, "a", encoding="utf-8") as out, redirect_stderr(out):
        lm = load_model(run, "cpu")
        bars = load_bars(prediction_config(lm, lm.data_cfg.paths), lm.transform.bar_spacing_ns).bars
    bars.select(timestamp="ts", symbol="series", open="open", high="high", low="low", close="close",
                volume="volume").write_parquet(path)
    return path


def epoch_cap(run: Path) -> int:
    """The run's epoch cap: --epochs, or `--epochs auto`'s for its training windows (foxhunt's own rule)."""
    from foxhunt.train.config import auto_epochs

    epochs = read(run / "config.json")["train"]["epochs"]
    return auto_epochs(read(run / "data_summary.json")["windows"]["train"]) if epochs == "auto" else int(epochs)


def fox_epochs(run: Path) -> tuple[int, int, int]:
    """(epochs run, cap, best epoch) of a foxhunt run, from its metrics.jsonl; an anchored run's epoch 0 (its anchor,
    validated untrained) is no epoch run, and a best epoch 0 means training never beat the anchor."""
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines() if x.strip()]
    ran = sum(1 for r in lines if r["epoch"] > 0)
    return ran, epoch_cap(run), max((r["epoch"] for r in lines if r.get("best")), default=0)


def epochs_note(items: list[tuple[int, int, int]]) -> str:
    """`stopped after 4 of at most 4 epochs, best 3`, or per fold `epochs run / at most (best) by fold: 7/23 (4), ...`."""
    if len(items) == 1:
        ran, cap, best = items[0]
        return f"stopped after {ran} of at most {cap} epochs, best {best}"
    return "epochs run / at most (best) by fold: " + ", ".join(f"{r}/{c} ({b})" for r, c, b in items)


def pf_plan(run: Path) -> dict[str, Any]:
    """What pytorch-forecasting takes from a foxhunt run: its size to match, shapes, batch, epoch cap, patience."""
    cfg = read(run / "config.json")
    return {"match_params": cfg["n_params"], "encoder_length": cfg["model"]["encoder_length"],
            "horizon": cfg["model"]["horizon"], "heads": cfg["model"]["attention_heads"],
            "dropout": cfg["model"]["dropout"], "batch_size": cfg["resolved"]["batch_size"],
            "patience": cfg["train"]["patience"], "max_train_batches": cfg["train"]["max_train_batches"],
            "epochs": epoch_cap(run)}


def pf_unfit(run: Path) -> str | None:
    """Why pytorch-forecasting's side cannot forecast what this run forecasts, or None."""
    cfg = read(run / "config.json")
    if cfg["data"]["target"] != "log_return":
        return f"pytorch-forecasting left out: its side forecasts log returns, this run {cfg['data']['target']}"
    if tuple(cfg["model"]["quantiles"]) != QUANTILES:
        return "pytorch-forecasting left out: its side forecasts p10, p50, p90 only"
    return None
