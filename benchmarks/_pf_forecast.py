"""pytorch-forecasting's TFT trained its usual way and its forecasts written as `foxhunt predict` writes them, so that
`foxhunt evaluate --forecasts` scores them on foxhunt's rows; run with the pytorch-forecasting venv's python by
benchmarks/quality.py.

    python benchmarks/_pf_forecast.py --data BARS.parquet --train-end T --val-end V --forecast-start S
        [--forecast-end E] --encoder-length 32 --horizon 5 --match-params N --epochs 30 --patience 3 --out PF.parquet
    python benchmarks/_pf_forecast.py --data BARS.parquet --runs RUNS.json ...   # several splits, one process

The data and the model are _pf_side.py's (one builder for both benchmarks): static symbol, known day of week and
month (and time of day for intraday bars), observed log return, log range and log volume, target log return with a
GroupNormalizer per symbol, each series' bars counted on their own. The usual set-up: early stopping on the
validation loss (`--patience` epochs without improvement, at most `--epochs`), the weights of the best epoch kept
(in memory, instead of a checkpoint file). `--match-params N` picks the hidden size (hidden continuous size alike,
4 heads) whose parameter count is closest to N. The forecasts are the model's own quantiles, uncalibrated and
unsorted: its usual output. Prints one JSON line (the last on stdout): parameter count, hidden size, epochs, best
epoch, seconds for the data and for `Trainer.fit`, windows.
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _pf_side import QUANTILES, build_model, datasets, features  # noqa: E402  (one PF builder)

HIDDEN_SIZES = range(4, 129, 2)  # searched by --match-params


def matched_model(training, args: argparse.Namespace):
    """The model at --hidden-size, or at the hidden size whose parameter count is closest to --match-params."""
    if not args.match_params:
        return build_model(training, args)
    best = None
    for h in HIDDEN_SIZES:
        model = build_model(training, argparse.Namespace(**{**vars(args), "hidden_size": h}))
        gap = abs(count(model) - args.match_params)
        if best is None or gap < best[0]:
            best = (gap, h, model)
        elif gap > best[0]:  # the count grows with h: past the closest it only gets worse
            break
    args.hidden_size = best[1]
    return best[2]


def count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


class KeepBest:
    """The weights of the epoch with the lowest validation loss, kept in memory (a checkpoint callback's job)."""

    def __init__(self) -> None:
        self.loss, self.epoch, self.state = float("inf"), 0, None

    def callback(self):
        import lightning.pytorch as pl

        keeper = self

        class _Cb(pl.Callback):
            def on_validation_end(self, trainer, module):
                loss = float(trainer.callback_metrics.get("val_loss", float("inf")))
                if loss < keeper.loss:
                    keeper.loss, keeper.epoch = loss, trainer.current_epoch + 1
                    keeper.state = copy.deepcopy(module.state_dict())

        return _Cb()


def forecast_table(model, dataset, frame: pd.DataFrame, batch_size: int) -> pa.Table:
    """One row per (symbol, origin, horizon) in `foxhunt predict`'s schema (docs/forecasts.md): symbol, origin,
    horizon, target_time, p10, p50, p90, actual (null beyond the data)."""
    loader = dataset.to_dataloader(train=False, batch_size=batch_size, num_workers=0)
    preds, symbols, firsts = [], [], []
    model.eval()
    with torch.no_grad():
        for x, _ in loader:
            preds.append(model(x)["prediction"].numpy())  # (B, D, Q) in the target's units
            index = dataset.x_to_index(x)
            symbols.append(index["symbol"].astype(str).to_numpy())
            firsts.append(index["time_idx"].to_numpy())
    q = np.concatenate(preds)  # (N, D, Q)
    n, d, _ = q.shape
    sym, first = np.concatenate(symbols), np.concatenate(firsts)  # (N,)
    rows = frame.set_index(["symbol", "time_idx"])
    step = np.repeat(first, d) + np.tile(np.arange(d), n)  # (N * D,) each step's row
    at = rows.reindex(pd.MultiIndex.from_arrays([np.repeat(sym, d), step]))
    origin = rows["timestamp"].reindex(pd.MultiIndex.from_arrays([sym, first - 1])).to_numpy()
    actual = at["log_return"].where(at["real"].astype(bool)).to_numpy(dtype=np.float64)
    cols = {
        "symbol": pa.array(np.repeat(sym, d).astype(object), type=pa.string()),
        "origin": pa.array(np.repeat(origin, d), type=pa.timestamp("ns", tz="UTC")),
        "horizon": pa.array(np.tile(np.arange(1, d + 1, dtype=np.int16), n)),
        "target_time": pa.array(at["timestamp"].to_numpy(), type=pa.timestamp("ns", tz="UTC")),
        **{f"p{qq * 100:g}": pa.array(q[:, :, k].reshape(-1).astype(np.float32)) for k, qq in enumerate(QUANTILES)},
        "actual": pa.array(actual, mask=np.isnan(actual)),
    }
    meta = {"calibrated": False, "source": f"pytorch-forecasting {__import__('pytorch_forecasting').__version__}"}
    return pa.table(cols).replace_schema_metadata({b"foxhunt": json.dumps(meta).encode()})


def fit_and_forecast(args: argparse.Namespace) -> dict:
    """Train on one split with early stopping, keep the best epoch, write the forecasts to args.out."""
    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import EarlyStopping

    pl.seed_everything(args.seed, verbose=False)
    t0, c0 = time.perf_counter(), time.process_time()
    frame = features(args.data, args.train_end, future=args.horizon)
    training, validation, forecast = datasets(frame, args)
    model = matched_model(training, args)
    prep_s, prep_cpu = time.perf_counter() - t0, time.process_time() - c0
    keep = KeepBest()
    trainer = pl.Trainer(
        max_epochs=args.epochs, accelerator="cpu", devices=1, check_val_every_n_epoch=1, num_sanity_val_steps=0,
        gradient_clip_val=1.0, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, limit_train_batches=args.max_train_batches or 1.0,
        callbacks=[EarlyStopping(monitor="val_loss", patience=args.patience, mode="min"), keep.callback()],
    )
    t0, c0 = time.perf_counter(), time.process_time()
    trainer.fit(model,
                train_dataloaders=training.to_dataloader(train=True, batch_size=args.batch_size, num_workers=0),
                val_dataloaders=validation.to_dataloader(train=False, batch_size=args.forecast_batch_size,
                                                         num_workers=0))
    fit_s, fit_cpu = time.perf_counter() - t0, time.process_time() - c0
    if keep.state is not None:
        model.load_state_dict(keep.state)
    pq.write_table(forecast_table(model, forecast, frame, args.forecast_batch_size), args.out)
    return {"out": args.out, "n_params": count(model), "hidden_size": args.hidden_size,
            "epochs_run": trainer.current_epoch, "epochs_cap": args.epochs, "best_epoch": keep.epoch,
            "best_val_loss": keep.loss, "prep_s": prep_s, "fit_s": fit_s, "cpu_s": prep_cpu + fit_cpu, "train_windows": len(training),
            "val_windows": len(validation), "forecast_windows": len(forecast)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True)
    p.add_argument("--out", help="forecasts parquet to write")
    p.add_argument("--train-end")
    p.add_argument("--val-end")
    p.add_argument("--forecast-start", help="first forecast bar of the scored origins, on or after")
    p.add_argument("--forecast-end", help="first forecast bar before this")
    p.add_argument("--runs", help="JSON file: a list of runs, each a dict of these options (train_end, val_end, "
                                  "forecast_start, forecast_end, out, epochs, ...), trained one after another")
    p.add_argument("--encoder-length", type=int, default=32)
    p.add_argument("--horizon", type=int, default=5)
    p.add_argument("--hidden-size", type=int, default=16)
    p.add_argument("--match-params", type=int, default=0, help="choose the hidden size closest to this count")
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--forecast-batch-size", type=int, default=1024)
    p.add_argument("--epochs", type=int, default=30, help="at most this many epochs")
    p.add_argument("--patience", type=int, default=3, help="early stopping: epochs without improvement")
    p.add_argument("--max-train-batches", type=int, default=0, help="cap training batches per epoch (0: all)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    runs = json.loads(Path(args.runs).read_text()) if args.runs else [{}]
    for run in runs:
        missing = [k for k in ("out", "train_end", "val_end", "forecast_start") if not {**vars(args), **run}.get(k)]
        if missing:
            p.error(f"a run needs --{missing[0].replace('_', '-')}")

    warnings.filterwarnings("ignore")
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    torch.set_num_threads(args.threads)
    import lightning.pytorch as pl

    results = [fit_and_forecast(argparse.Namespace(**{**vars(args), **run})) for run in runs]
    print(json.dumps({"runs": results, "versions": {"pytorch_forecasting": __import__("pytorch_forecasting").__version__,
                                                    "lightning": pl.__version__, "torch": torch.__version__}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
