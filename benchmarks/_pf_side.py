"""The pytorch-forecasting side of vs_pytorch_forecasting.py, run with the pytorch-forecasting venv's python; its data
and model builders are also quality.py's (_pf_forecast.py).

    python benchmarks/_pf_side.py --data BARS.parquet [--threads 2] [--epochs 3] [--profile | --count-only]

Reads the bars parquet that the driver wrote (timestamp, symbol, open, high, low, close, volume) and builds
a `TimeSeriesDataSet`: static categorical symbol; known categoricals day of week and month (strings), and time of
day for intraday bars; observed reals log return, log range ln(high/low) and log volume standardized per symbol on
the training rows; target log return, GroupNormalizer per symbol; encoder 60, horizon 5; each series' bars counted on
their own, windows split by the time of their first forecast bar. Fits the documented
`TemporalFusionTransformer` with `Trainer.fit` and runs its forward loop over every window from --train-end
on. Prints one JSON line (the last line on stdout); with --profile, a torch.profiler table instead. Imports
nothing from foxhunt; the driver imports `count_flop` from here so that both sides are counted alike.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import resource
import sys
import time
import warnings
from collections.abc import Callable

import numpy as np
import pandas as pd
import torch

QUANTILES = [0.1, 0.5, 0.9]


def utc(text: str) -> pd.Timestamp:
    """An ISO date or datetime ("2014-01-01", "2015-03-02T09:36:00Z") as a UTC timestamp (UTC when naive)."""
    t = pd.Timestamp(text)
    return t.tz_localize("UTC") if t.tzinfo is None else t.tz_convert("UTC")


def features(path: str, train_end: str, future: int = 0) -> pd.DataFrame:
    """One row per (symbol, bar) with the model's inputs; each series' first bar (no return) is dropped.

    `time_idx` counts each series' own bars, so that a window is `encoder + horizon` consecutive bars of one series,
    as foxhunt's windows are (a calendar index would put a missing day inside a window). Log volume is standardized
    per symbol on the training rows (a symbol with none gets the pooled statistics). Intraday bars (two bars of one
    series on one date) also get the time of day as a known categorical. `future`: placeholder rows appended to each
    series after its last bar (`real` False: target 0, bar times continued at the series' median spacing) so that
    the last origins get a forecast for every step; steps there have no actual and score nothing.
    """
    df = pd.read_parquet(path).sort_values(["symbol", "timestamp"]).reset_index(drop=True)
    df["timestamp"] = pd.to_datetime(df["timestamp"], utc=True)
    df["symbol"] = df["symbol"].astype(str)
    g = df.groupby("symbol", sort=False)
    df["log_return"] = np.log(df["close"] / g["close"].shift(1))
    df["log_range"] = np.log(df["high"] / df["low"])
    df["log_volume"] = np.log1p(df["volume"])
    train = df["timestamp"] < utc(train_end)
    stats = df[train].groupby("symbol")["log_volume"].agg(["mean", "std"])  # fitted on the training rows only
    mean = df["symbol"].map(stats["mean"]).fillna(df.loc[train, "log_volume"].mean())
    std = df["symbol"].map(stats["std"]).where(lambda s: s > 0).fillna(df.loc[train, "log_volume"].std() or 1.0)
    df["log_volume"] = ((df["log_volume"] - mean) / std).fillna(0.0)
    df = df.dropna(subset=["log_return"]).reset_index(drop=True)
    df["real"] = True
    if future:
        df = pd.concat([df, placeholders(df, future)], ignore_index=True)
        df = df.sort_values(["symbol", "timestamp"], kind="stable").reset_index(drop=True)
    df["time_idx"] = df.groupby("symbol", sort=False).cumcount().astype(np.int64)
    df["day_of_week"] = df["timestamp"].dt.day_of_week.astype(str)
    df["month"] = df["timestamp"].dt.month.astype(str)
    if df.groupby(["symbol", df["timestamp"].dt.date]).size().max() > 1:
        df["time_of_day"] = df["timestamp"].dt.strftime("%H:%M")
    return df


def placeholders(df: pd.DataFrame, n: int) -> pd.DataFrame:
    """`n` rows per symbol after its last bar, at its median bar spacing (weekends and nights are not skipped: the
    rows only pad the decoder of the last origins, and the TFT's decoder attention is causal)."""
    last = df.groupby("symbol", sort=False).tail(1)
    step = df.groupby("symbol", sort=False)["timestamp"].diff().groupby(df["symbol"]).median()
    rows = last.loc[last.index.repeat(n)].copy()
    k = np.tile(np.arange(1, n + 1), len(last))
    rows["timestamp"] = rows["timestamp"] + rows["symbol"].map(step).to_numpy() * k
    rows[["log_return", "log_range", "log_volume"]] = 0.0
    rows["real"] = False
    return rows


def origin_times(frame: pd.DataFrame, index: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(origin, first forecast bar) times of each window of a decoded index (symbol, time_idx_first_prediction);
    the origin is NaT where it is a placeholder row."""
    real = frame[frame["real"]]
    at = pd.MultiIndex.from_arrays([index["symbol"].astype(str), index["time_idx_first_prediction"]])
    first = frame.set_index(["symbol", "time_idx"])["timestamp"].reindex(at).to_numpy()
    before = pd.MultiIndex.from_arrays([at.get_level_values(0), at.get_level_values(1) - 1])
    origin = real.set_index(["symbol", "time_idx"])["timestamp"].reindex(before).to_numpy()
    return origin, first


def windows(training, frame: pd.DataFrame, start: pd.Timestamp, end: pd.Timestamp | None = None):
    """`training`'s dataset over `frame`, kept to the windows whose origin is a real bar and whose first forecast
    bar lies in [start, end): foxhunt's rule for validation and for scored origins."""
    from pytorch_forecasting import TimeSeriesDataSet

    ds = TimeSeriesDataSet.from_dataset(training, frame, stop_randomization=True)

    def keep(index: pd.DataFrame) -> np.ndarray:
        origin, first = origin_times(frame, index)
        ok = ~pd.isna(origin) & (first >= start)
        return ok & (first < end) if end is not None else ok

    return ds.filter(keep)


def datasets(df: pd.DataFrame, args: argparse.Namespace):
    """(training, validation, forecast) datasets. Training windows end before --train-end (as foxhunt purges windows
    that cross it); validation windows forecast from --train-end and end before --val-end; forecast windows start
    at --forecast-start (default --train-end) and before --forecast-end."""
    from pytorch_forecasting import GroupNormalizer, TimeSeriesDataSet
    from pytorch_forecasting.data.encoders import NaNLabelEncoder

    ts = df["timestamp"]
    train_cut, val_cut = utc(args.train_end), utc(args.val_end)
    known = [c for c in ("day_of_week", "month", "time_of_day") if c in df.columns]
    # A symbol or a calendar value the training rows never saw gets the encoders' "unknown" code (foxhunt's model
    # forecasts a new series with its own unknown-series embedding); GroupNormalizer scales it by the median.
    encoders = {c: NaNLabelEncoder(add_nan=True) for c in ("symbol", *known)}
    training = TimeSeriesDataSet(
        df[(ts < train_cut) & df["real"]],
        time_idx="time_idx",
        target="log_return",
        group_ids=["symbol"],
        max_encoder_length=args.encoder_length,
        min_encoder_length=args.encoder_length,
        max_prediction_length=args.horizon,
        min_prediction_length=args.horizon,
        static_categoricals=["symbol"],
        time_varying_known_categoricals=known,
        time_varying_unknown_reals=["log_return", "log_range", "log_volume"],
        target_normalizer=GroupNormalizer(groups=["symbol"]),
        categorical_encoders=encoders,
    )
    validation = windows(training, df[(ts < val_cut) & df["real"]], train_cut)
    start = utc(args.forecast_start) if getattr(args, "forecast_start", None) else train_cut
    end = utc(args.forecast_end) if getattr(args, "forecast_end", None) else None
    return training, validation, windows(training, df, start, end)


class LoopTimer:
    """Seconds and samples in the training batches of each epoch, validation excluded (as foxhunt counts)."""

    def __init__(self) -> None:
        self.seconds: list[float] = []
        self.samples: list[int] = []

    def callback(self):
        import lightning.pytorch as pl

        timer = self

        class _Cb(pl.Callback):
            def on_train_epoch_start(self, trainer, module):
                self.t0 = time.perf_counter()
                timer.seconds.append(0.0)
                timer.samples.append(0)

            def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
                timer.seconds[-1] = time.perf_counter() - self.t0
                timer.samples[-1] += len(batch[0]["encoder_lengths"])

        return _Cb()


def build_model(training, args: argparse.Namespace):
    from pytorch_forecasting import QuantileLoss, TemporalFusionTransformer

    return TemporalFusionTransformer.from_dataset(
        training,
        hidden_size=args.hidden_size,
        attention_head_size=args.heads,
        dropout=args.dropout,
        hidden_continuous_size=args.hidden_size,
        lstm_layers=1,
        output_size=len(QUANTILES),
        loss=QuantileLoss(QUANTILES),
    )


def train_step(model, x, y) -> None:
    out = model(x)
    model.loss(out["prediction"], y).backward()


def _lstm_flop(x_shape, w_ih_shape, w_hh_shape, *args, **kwargs) -> int:
    """One LSTM layer forward: the input and recurrent gate matmuls at every step, 2 (T*B) (4H*In + 4H*H)."""
    rows = math.prod(x_shape) // x_shape[-1]
    return 2 * rows * (math.prod(w_ih_shape) + math.prod(w_hh_shape))


def _lstm_backward_flop(x_shape, w_ih_shape, w_hh_shape, *args, **kwargs) -> int:
    """Gradients with respect to the inputs and to the weights: twice the forward matmuls."""
    return 2 * _lstm_flop(x_shape, w_ih_shape, w_hh_shape)


def _sdpa_flop(q_shape, k_shape, v_shape, *args, **kwargs) -> int:
    """q k^T and (softmax) v: 2 B N Lq Lk (d + dv)."""
    return 2 * math.prod(q_shape[:-1]) * k_shape[-2] * (q_shape[-1] + v_shape[-1])


def _sdpa_backward_flop(grad_shape, q_shape, k_shape, v_shape, *args, **kwargs) -> int:
    return 2 * _sdpa_flop(q_shape, k_shape, v_shape)


def count_flop(fn: Callable[[], object]) -> int:
    """Matmul FLOP of `fn()` by FlopCounterMode, plus the CPU kernels it has no formula for (torch 2.13): the
    fused LSTM layer (mkldnn_rnn_layer), which both models run, and CPU flash attention, which either may
    use."""
    from torch.utils.flop_counter import FlopCounterMode

    aten = torch.ops.aten
    extra = {
        aten.mkldnn_rnn_layer: _lstm_flop,
        aten.mkldnn_rnn_layer_backward: _lstm_backward_flop,
        aten._scaled_dot_product_flash_attention_for_cpu: _sdpa_flop,
        aten._scaled_dot_product_flash_attention_for_cpu_backward: _sdpa_backward_flop,
    }
    with FlopCounterMode(display=False, custom_mapping=extra) as counter:
        fn()
    return counter.get_total_flops()


def flop_per_sample(model, loader) -> float:
    """Matmul FLOP of one forward + backward of a training batch, per sample."""
    x, y = next(iter(loader))
    model.train()
    flop = count_flop(lambda: train_step(model, x, y))
    model.zero_grad(set_to_none=True)
    return flop / len(x["encoder_lengths"])


def profile(model, loader, steps: int = 5) -> None:
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model.train()
    it = iter(loader)
    train_step(model, *next(it))  # warm-up, not profiled
    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            optimizer.zero_grad(set_to_none=True)
            train_step(model, *next(it))
            optimizer.step()
    print(f"pytorch-forecasting: {steps} training steps, top 15 ops by self CPU time")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True)
    p.add_argument("--train-end", default="2014-01-01")
    p.add_argument("--val-end", default="2016-01-01")
    p.add_argument("--encoder-length", type=int, default=60)
    p.add_argument("--horizon", type=int, default=5)
    p.add_argument("--hidden-size", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--forecast-batch-size", type=int, default=1024)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--profile", action="store_true", help="print a torch.profiler table of 5 steps instead")
    p.add_argument("--count-only", action="store_true", help="print the parameter count only")
    args = p.parse_args(argv)

    warnings.filterwarnings("ignore")
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    torch.set_num_threads(args.threads)
    import lightning.pytorch as pl

    pl.seed_everything(args.seed, verbose=False)

    training, validation, forecast = datasets(features(args.data, args.train_end), args)
    train_dl = training.to_dataloader(train=True, batch_size=args.batch_size, num_workers=0)
    val_dl = validation.to_dataloader(train=False, batch_size=args.forecast_batch_size, num_workers=0)
    model = build_model(training, args)
    n_params = sum(p.numel() for p in model.parameters() if p.requires_grad)
    if args.count_only:
        print(json.dumps({"n_params": n_params}))
        return 0
    if args.profile:
        profile(model, train_dl)
        return 0

    timer = LoopTimer()
    trainer = pl.Trainer(
        max_epochs=args.epochs, accelerator="cpu", devices=1, check_val_every_n_epoch=1,
        num_sanity_val_steps=0,  # foxhunt has no sanity pass either
        gradient_clip_val=1.0,  # foxhunt clips the gradient norm at 1.0 too
        logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        callbacks=[timer.callback()],
    )
    t0 = time.perf_counter()
    trainer.fit(model, train_dataloaders=train_dl, val_dataloaders=val_dl)
    fit_s = time.perf_counter() - t0
    rss_fit_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux

    fc_dl = forecast.to_dataloader(train=False, batch_size=args.forecast_batch_size, num_workers=0)
    model.eval()
    windows = 0
    t0 = time.perf_counter()
    with torch.no_grad():
        for x, _ in fc_dl:
            model(x)
            windows += len(x["encoder_lengths"])
    forecast_s = time.perf_counter() - t0

    flop = flop_per_sample(model, train_dl)
    loop_rates = [n / s for n, s in zip(timer.samples, timer.seconds, strict=True) if s > 0]
    print(json.dumps({
        "n_params": n_params,
        "train_windows": len(training),
        "val_windows": len(validation),
        "epochs_run": len(timer.seconds),
        "fit_s": fit_s,
        "samples_per_s_loop": float(np.median(loop_rates)) if loop_rates else None,
        "samples_per_s_wall": len(training) * args.epochs / fit_s,
        "forecast_windows": windows,
        "forecast_s": forecast_s,
        "forecast_windows_per_s": windows / forecast_s,
        "forward_windows_per_s": windows / forecast_s,  # the forward loop is all that is timed on this side
        "peak_rss_mb": rss_fit_kb / 1024,
        "peak_rss_mb_incl_forecast": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "flop_per_sample": flop,
        "threads": torch.get_num_threads(),
        "versions": {"torch": torch.__version__, "lightning": pl.__version__, "pandas": pd.__version__,
                     "pytorch_forecasting": __import__("pytorch_forecasting").__version__},
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
