"""Latency of one live forecast and throughput at batch 256, per model size and inference backend.

    python benchmarks/latency.py [--hidden 16,160] [--backends eager,folded,trace,compile,onnx] [--bars 2000]
                                 [--threads 2] [--sizes 42,1] [--anchor auto|garch_t|none]

Batch 1 is the streaming path a live system runs on every bar: `Forecaster.update(bar)` with a dict bar, i.e.
parsing the bar, advancing the running state (trailing-volatility EWMAs, the ring of the last E input rows), the
known inputs of the bar and of the D forecast steps, the model, unscaling, calibration and the output frame. It is
timed per call over `--bars` consecutive bars of the bundled ES 1-minute sample (after 50 warm-up bars), p50 and
p99; then `update_arrays(bar)` (the same forecast returned as numpy arrays, no output frame) over the next `--bars`
bars; "model" is the live forward alone on the same batch-1 inputs (series code, encoder rows and decoder rows
as numpy arrays, as `update` hands them over; for the torch backends that includes laying them out as a Batch), so
"update_arrays - model" is the cost of parsing the bar, advancing the state and unscaling/calibrating.
"predict(df)" is the path without a running state, for comparison: the loader and feature pipeline of `predict` on
the last `history_bars` bars, once per bar. Throughput is forward passes at batch 256 on consecutive windows of the
sample (as `foxhunt predict` batches them: each distinct bar once), in windows per second.

`--sizes 42,1` times instead calls with a changing number of series, as a live system whose series do not all have
a bar at every time makes them: a panel of max(sizes) series (copies of the sample's, each under its own name, with
its own bars), after `predict` on their history, then `update_arrays` calls cycling through the sizes (a dict bar for
one series, a frame of one row per series otherwise), `--bars` calls of each; per size the first call (where a new
size may cost an export or a trace) and p50 / p99 of the others. 42,1 is a single bar after every call of 42 series.

Models: the default architecture (hidden 16) and hidden 160 (the TFT paper's size), default data options (encoder
32, horizon 5, seasonality), untrained weights (seeded): latency does not depend on their values; a zero
calibration is attached so that its cost is counted. `--anchor` as foxhunt's (default auto: GARCH-t for the sample's
returns): the models start from GARCH-t's forecast (data/baselines/anchor.py), so `update` also advances each series'
GARCH variance and feeds the anchor to the graph; `--anchor none` times a model without one.

Backends share one interface (`Backend.forward(batch) -> scaled quantiles (B, D, Q)`): eager PyTorch (the training
model), the inference model with the weights folded (model/inference/folded.py), its frozen TorchScript trace, the same in onnxruntime (`ort`: what `update` runs when onnxruntime is installed),
torch.compile, and onnxruntime on the model exported by `foxhunt export` (extra `onnx`).
CPU time (process_time) is printed beside wall time: the machine may be shared.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("GOMP_SPINCOUNT", "10000")  # as the CLI sets it (cli.main): short OpenMP spin-waits

import numpy as np
import polars as pl
import torch

import foxhunt
from foxhunt.data.bars.load import load_bars
from foxhunt.data.config import DataConfig
from foxhunt.data.dataset.batch import Batch
from foxhunt.data.dataset.types import PreparedData
from foxhunt.data.io.sample import bundled_sample_path
from foxhunt.data.prepare import prepare_data
from foxhunt.model.calibration import Calibration
from foxhunt.model.config import ModelConfig
from foxhunt.model.inference.traced import (
    BatchForward,
    LiveForward,
    OnnxForward,
    TracedForward,
    inference_forward,
)
from foxhunt.model.saved import LoadedModel, save_model_json, save_weights, state_to_cpu
from foxhunt.model.tft import TemporalFusionTransformer

WARMUP = 50
THROUGHPUT_SECONDS = 3.0


class Backend:
    """Runs the forward pass of a loaded model: scaled quantiles (B, D, Q) from a Batch (`forward`, batch 256) and
    from the live windows' numpy inputs (`live`, what `update` calls: here through a Batch)."""

    name = "eager"

    def __init__(self, lm: LoadedModel, run: Path):
        self.model = lm.model.eval()
        self.live: LiveForward = BatchForward(self.forward, lm.data_cfg.encoder_length, lm.data_cfg.horizon)

    def forward(self, batch: Batch) -> torch.Tensor:
        return self.model(batch).quantiles


class Compiled(Backend):
    """torch.compile (inductor, default mode): one graph per input shape, compiled on first use. Not in the default
    list: on the shared 2-core machine one shape (hidden 16, batch 1) took 456 s to compile, for 7.6 ms of CPU per
    forward against eager's 11.0 and the trace's 3.7."""

    name = "compile"

    def __init__(self, lm: LoadedModel, run: Path):
        super().__init__(lm, run)
        self.compiled = torch.compile(self.model)

    def forward(self, batch: Batch) -> torch.Tensor:
        return self.compiled(batch).quantiles


class Folded(Backend):
    """The weights folded into fewer, larger ops for inference (foxhunt.model.inference.folded.InferenceTFT), eagerly."""

    name = "folded"

    def __init__(self, lm: LoadedModel, run: Path):
        super().__init__(lm, run)
        self.folded = inference_forward(self.model)

    def forward(self, batch: Batch) -> torch.Tensor:
        return self.folded(batch)


class Traced(Backend):
    """A frozen TorchScript trace per input shape of the folded model (foxhunt.model.inference.traced: what
    `Forecaster.update` runs by default)."""

    name = "trace"

    def __init__(self, lm: LoadedModel, run: Path):
        super().__init__(lm, run)
        self.traced = TracedForward(self.model)

    def forward(self, batch: Batch) -> torch.Tensor:
        return self.traced(batch)


class LiveOnnx(Backend):
    """onnxruntime on the folded inference model, exported in memory (batch 1, and a dynamic batch axis), inputs and
    output bound to preallocated buffers (foxhunt.model.inference.traced.OnnxForward: what `Forecaster.update` runs when onnxruntime is
    installed). `forward` (batch 256, from a Batch) is its trace's."""

    name = "ort"

    def __init__(self, lm: LoadedModel, run: Path):
        super().__init__(lm, run)
        self.onnx = OnnxForward(self.model, lm.data_cfg.encoder_length, lm.data_cfg.horizon)
        self.live = self.onnx

    def forward(self, batch: Batch) -> torch.Tensor:
        return self.onnx.trace(batch)


class OnnxRuntime(Backend):
    """The model exported by `foxhunt export` (parity checked there), run by onnxruntime on the CPU with as many
    intra-op threads as torch has. The graph takes dense per-window inputs (export/graph.py)."""

    name = "onnx"

    def __init__(self, lm: LoadedModel, run: Path):
        from foxhunt.export.onnx import export_onnx, onnx_runtime_model

        super().__init__(lm, run)
        path = export_onnx(lm, run, run / "model.onnx").path
        self.session = onnx_runtime_model(path, threads=torch.get_num_threads())

    def forward(self, batch: Batch) -> torch.Tensor:
        return self.session(batch)


BACKENDS: dict[str, Callable[[LoadedModel, Path], Backend]] = {"eager": Backend, "folded": Folded,
                                                                "trace": Traced, "ort": LiveOnnx,
                                                                "compile": Compiled, "onnx": OnnxRuntime}


@dataclass
class Row:
    hidden: int
    backend: str
    update_p50: float  # ms
    update_p99: float
    update_cpu_p50: float  # ms CPU per call
    update_cpu_p99: float
    arrays_p50: float  # update_arrays: the same without the output frame
    arrays_p99: float
    arrays_cpu_p50: float
    arrays_cpu_p99: float
    model_p50: float
    model_p99: float
    model_cpu_p50: float
    batch256: float  # windows/s
    warm_s: float  # first calls (compilation)


def model_package(data: PreparedData, data_cfg: DataConfig, hidden: int, root: Path) -> Path:
    """A run directory with an untrained model of this size (model.json + model.safetensors)."""
    torch.manual_seed(0)
    cfg = ModelConfig(hidden_size=hidden, encoder_length=data_cfg.encoder_length, horizon=data_cfg.horizon,
                      anchored=data_cfg.anchored)
    model = TemporalFusionTransformer(data.schema.sizes, cfg)
    run = root / f"hidden{hidden}"
    run.mkdir(parents=True, exist_ok=True)
    n = sum(p.numel() for p in model.parameters())
    save_model_json(run / "model.json", cfg, data.schema, data.transform, data_cfg, n)
    save_weights(run / "model.safetensors", state_to_cpu(model))
    return run


def percentiles(ms: list[float]) -> tuple[float, float]:
    p50, p99 = np.percentile(np.asarray(ms), [50, 99])
    return float(p50), float(p99)


def time_calls(fn: Callable[[], object], n: int) -> tuple[list[float], list[float]]:
    """Wall ms and CPU ms (this process, all threads) of each of n calls. On a shared machine the CPU time is the
    better estimate of the work: waiting for a core adds to the wall time only."""
    wall, cpu = [], []
    for _ in range(n):
        t, c = time.perf_counter(), time.process_time()
        fn()
        cpu.append((time.process_time() - c) * 1e3)
        wall.append((time.perf_counter() - t) * 1e3)
    return wall, cpu


def measure(run: Path, backend_name: str, hidden: int, bars: pl.DataFrame, n_bars: int, data: PreparedData) -> Row:
    fc = foxhunt.Forecaster.load(run)
    q, d = len(fc.quantiles), fc.horizon
    fc._lm.calibration = Calibration("scaled", fc.quantiles, np.zeros((d, q)))  # counted, changes nothing
    backend = BACKENDS[backend_name](fc._lm, run)
    fc._live = backend.live
    need = fc.history_bars
    history, stream = bars.head(need), bars.slice(need, WARMUP + 2 * n_bars).to_dicts()
    t0 = time.perf_counter()
    fc.predict(history)  # starts the stream
    for bar in stream[:WARMUP]:
        fc.update(bar)
    warm = time.perf_counter() - t0
    it = iter(stream[WARMUP:])
    update_ms, update_cpu = time_calls(lambda: fc.update(next(it)), n_bars)
    arrays_ms, arrays_cpu = time_calls(lambda: fc.update_arrays(next(it)), n_bars)
    one = fc.live_inputs([0])  # the last bar's live window, batch 1: codes, encoder rows, decoder rows
    anchor = fc._live_anchor([0])  # an anchored model's fourth input (--anchor), else None
    extra = {} if anchor is None else {"anchor": anchor}
    with torch.inference_mode():
        model_ms, model_cpu = time_calls(lambda: backend.live(*one, **extra), n_bars)
        ids = data.splits["train"][:256]
        big = data.windows.batch(ids)
        backend.forward(big)  # compile / warm this shape
        done, t = 0, time.perf_counter()
        while time.perf_counter() - t < THROUGHPUT_SECONDS:
            backend.forward(big)
            done += len(ids)
        rate = done / (time.perf_counter() - t)
    return Row(hidden, backend_name, *percentiles(update_ms), *percentiles(update_cpu), *percentiles(arrays_ms),
               *percentiles(arrays_cpu), *percentiles(model_ms),
               percentiles(model_cpu)[0], rate, warm)


@dataclass
class SizeRow:
    hidden: int
    backend: str
    size: int  # series per call
    first: float  # ms, the first call of this size
    p50: float  # ms wall, the other calls of this size
    p99: float
    cpu_p50: float  # ms CPU
    cpu_p99: float


def panel_of(bars: pl.DataFrame, n: int) -> tuple[pl.DataFrame, list[str]]:
    """`n` copies of the sample's series, each under its own name with its prices scaled (a panel of n series)."""
    names = [f"S{i:02d}" for i in range(n)]
    prices = ("open", "high", "low", "close")
    return pl.concat([bars.with_columns(pl.lit(name).alias("symbol"), *[pl.col(c) * (1 + i / 100) for c in prices])
                      for i, name in enumerate(names)]), names


def measure_sizes(run: Path, backend_name: str, hidden: int, bars: pl.DataFrame, sizes: list[int],
                  calls: int) -> list[SizeRow]:
    """`update_arrays` calls cycling through `sizes` series each (the module docstring), `calls` of each size."""
    fc = foxhunt.Forecaster.load(run)
    q, d = len(fc.quantiles), fc.horizon
    fc._lm.calibration = Calibration("scaled", fc.quantiles, np.zeros((d, q)))  # counted, changes nothing
    fc._live = BACKENDS[backend_name](fc._lm, run).live
    need = fc.history_bars
    panel, names = panel_of(bars.head(need + calls * len(sizes)), max(sizes))
    fc.predict(panel.group_by("symbol", maintain_order=True).head(need))
    rows = {n: iter(panel.filter(pl.col("symbol") == n).slice(need).to_dicts()) for n in names}
    plan = [sizes[i % len(sizes)] for i in range(calls * len(sizes))]
    bar_sets = [[next(rows[n]) for n in names[:size]] for size in plan]  # each series its own next bar
    args = [b[0] if len(b) == 1 else pl.DataFrame(b) for b in bar_sets]
    wall: dict[int, list[float]] = {s: [] for s in sizes}
    cpu: dict[int, list[float]] = {s: [] for s in sizes}
    for size, arg in zip(plan, args, strict=True):
        w, c = time_calls(lambda arg=arg: fc.update_arrays(arg), 1)
        wall[size] += w
        cpu[size] += c
    return [SizeRow(hidden, backend_name, s, wall[s][0], *percentiles(wall[s][1:]), *percentiles(cpu[s][1:]))
            for s in sizes]


def print_sizes(rows: list[SizeRow]) -> None:
    print("\n| hidden | backend | series per call | first call ms | update_arrays p50 / p99 ms | CPU p50 / p99 ms |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r.hidden} | {r.backend} | {r.size} | {r.first:.1f} | {r.p50:.2f} / {r.p99:.2f} | "
              f"{r.cpu_p50:.2f} / {r.cpu_p99:.2f} |")


def predict_path(run: Path, bars: pl.DataFrame, n: int) -> tuple[float, float]:
    """p50 / p99 ms of `predict` on the last history_bars bars: the per-bar cost without a running state."""
    fc = foxhunt.Forecaster.load(run)
    need = fc.history_bars
    frames = [bars.slice(i, need) for i in range(n)]
    fc.predict(frames[0])
    it = iter(frames)
    ms, _ = time_calls(lambda: fc.predict(next(it)), n)
    return percentiles(ms)


def series_bars(cfg: DataConfig) -> pl.DataFrame:
    """The sample's continuous ES series as a generic bars frame (each contract's own prices; the open, which no input reads, set to the close), in time order: the
    bars a live feed delivers (the raw file also holds the next contract's bars during the roll week)."""
    bars = load_bars(cfg).bars
    return bars.select(pl.col("ts").alias("ts_event"), pl.col("series").alias("symbol"), pl.col("own_close").alias("open"),
                       pl.col("own_high").alias("high"), pl.col("own_low").alias("low"),
                       pl.col("own_close").alias("close"), "volume")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", default="16,160", help="Hidden sizes, comma-separated.")
    ap.add_argument("--backends", default="eager,trace,ort", help=f"Of {', '.join(BACKENDS)}.")
    ap.add_argument("--bars", type=int, default=2000, help="Timed update calls per model and backend.")
    ap.add_argument("--predict-calls", type=int, default=20, help="Timed predict(df) calls (the stateless path).")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--sizes", default=None, help="Series per update call, cycled (e.g. 42,1): see the docstring.")
    ap.add_argument("--anchor", default="auto", help="--anchor of the model, as foxhunt's (auto: garch_t for returns, "
                    "its live anchor timed too; none: without).")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    sample = str(bundled_sample_path())
    data_cfg = DataConfig(paths=(sample,), anchor=args.anchor)
    data = prepare_data(data_cfg)
    bars = series_bars(data_cfg)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} cores, load average "
          f"{os.getloadavg()[0]:.1f} at start; bundled ES 1m sample, encoder {data_cfg.encoder_length}, "
          f"horizon {data_cfg.horizon}")
    rows, stateless = [], {}
    if args.sizes:
        sizes = [int(n) for n in args.sizes.split(",")]
        with tempfile.TemporaryDirectory() as tmp:
            for hidden in (int(h) for h in args.hidden.split(",")):
                run = model_package(data, data_cfg, hidden, Path(tmp))
                for name in args.backends.split(","):
                    rows += measure_sizes(run, name, hidden, bars, sizes, args.bars)
        print(f"load average {os.getloadavg()[0]:.1f} at the end")
        print_sizes(rows)
        return
    with tempfile.TemporaryDirectory() as tmp:
        for hidden in (int(h) for h in args.hidden.split(",")):
            run = model_package(data, data_cfg, hidden, Path(tmp))
            stateless[hidden] = predict_path(run, bars, args.predict_calls)
            for name in args.backends.split(","):
                rows.append(measure(run, name, hidden, bars, args.bars, data))
                print(rows[-1], flush=True)
    print(f"load average {os.getloadavg()[0]:.1f} at the end")
    print("\n| hidden | backend | update p50 / p99 ms | update CPU p50 / p99 ms | update_arrays p50 / p99 ms "
          "| update_arrays CPU p50 / p99 ms | model p50 / p99 ms | model CPU p50 ms "
          "| batch 256 windows/s | warm-up s | predict(df) p50 / p99 ms |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        p50, p99 = stateless[r.hidden]
        print(f"| {r.hidden} | {r.backend} | {r.update_p50:.2f} / {r.update_p99:.2f} | {r.update_cpu_p50:.2f} / "
              f"{r.update_cpu_p99:.2f} | {r.arrays_p50:.2f} / {r.arrays_p99:.2f} | {r.arrays_cpu_p50:.2f} / "
              f"{r.arrays_cpu_p99:.2f} | {r.model_p50:.2f} / {r.model_p99:.2f} | {r.model_cpu_p50:.2f} | "
              f"{r.batch256:,.0f} | {r.warm_s:.1f} | {p50:.0f} / {p99:.0f} |")


if __name__ == "__main__":
    main()
