"""foxhunt vs pytorch-forecasting, side by side: same data, matched model size, one table of measured ratios.

    python benchmarks/vs_pytorch_forecasting.py [--repeats 3] [--threads 2] [--json out.json]
        [--pf-python PATH] [--fox-hidden auto|H] [--fox-args "--flag value ..."] [--workdir DIR]
    python benchmarks/vs_pytorch_forecasting.py --profile [--run-dir RUN]     # top ops of 5 training steps, both sides
    python benchmarks/vs_pytorch_forecasting.py --device cuda                 # foxhunt only, vs NVIDIA's A100 numbers

Run it with foxhunt's python. The pytorch-forecasting side (benchmarks/_pf_side.py) runs with the python of its own
virtualenv (default .venv-bench/bin/python, made with
`python3 -m venv .venv-bench && .venv-bench/bin/pip install torch==2.13.0 &&
 .venv-bench/bin/pip install -r ../shared/bench/pytorch-forecasting-requirements.txt`); without one only foxhunt runs.

Data: real daily bars, 1999-2017, of two series: SPX (../shared/data/spx_daily.parquet) and NASDAQ ("NDX",
`arch.data.nasdaq`, Close). Train before 2014-01-01, validate 2014-2015, forecast everything from 2014 on. Encoder 60,
horizon 5, 4 heads, dropout 0.1, batch 128, quantiles 0.1/0.5/0.9, 3 epochs with validation after each.
pytorch-forecasting gets the documented configuration (hidden 64, 260,564 parameters on three series); foxhunt's
--hidden-size is chosen so that its parameter count is closest (--fox-hidden auto), and the table prints both counts.

What is timed (see ../shared/docs/benchmarking.md), the two sides alternating, medians over --repeats:
- training: the whole `foxhunt train` process (start-up, data preparation, 3 epochs, validation, checkpoints) against
  pytorch-forecasting's `Trainer.fit` alone. "train samples/s" is the training loop's own rate (validation excluded),
  "samples/s wall" is training windows x epochs / that wall time.
- forecasting: the whole `foxhunt predict` process against pytorch-forecasting's forward loop at batch 1,024 under
  torch.no_grad(), over every window from 2014 on; windows per second.
- peak RSS of the training process (foxhunt: os.wait4 on the child; pytorch-forecasting: ru_maxrss after fit).
- FLOP per training sample (one forward + backward of a batch of 128, matmul work) and the achieved GFLOP/s as a share
  of the machine's torch.mm peak at the same thread count, measured in the same run.
Absolute times move 15-30% between runs on shared machines; read the ratios.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _pf_side import count_flop  # noqa: E402  (the same FLOP rules on both sides)

REPO = Path(__file__).resolve().parents[1]
SPX = REPO.parent / "shared" / "data" / "spx_daily.parquet"
DEFAULT_PF_PYTHON = REPO / ".venv-bench" / "bin" / "python"
PF_SIDE = Path(__file__).resolve().parent / "_pf_side.py"
INSTALL_HINT = ("python3 -m venv .venv-bench && .venv-bench/bin/pip install torch==2.13.0 && "
                ".venv-bench/bin/pip install -r ../shared/bench/pytorch-forecasting-requirements.txt")
PF_DOC_PARAMS = 260_564  # the documented pytorch-forecasting size, the target when its side cannot run
START, END = "1999-01-01", "2018-01-01"  # bars 1999-01-01 .. 2017-12-31
TRAIN_END, VAL_END = "2014-01-01", "2016-01-01"
ENCODER, HORIZON, HEADS, DROPOUT, BATCH, EPOCHS = 60, 5, 4, 0.1, 128, 3
NVIDIA_A100 = {"TF32": 12_435, "AMP": 17_608}  # NVIDIA DeepLearningExamples TFT, items/s on one A100


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------------------- data
def write_bars(path: Path) -> Path:
    """SPX and NDX daily bars in foxhunt's generic format (timestamp UTC, symbol, open high low close volume)."""
    import arch.data.nasdaq
    import pandas as pd

    spx = pd.read_parquet(SPX)
    ndx = arch.data.nasdaq.load()
    ndx = pd.DataFrame({
        "timestamp": pd.to_datetime(ndx.index).tz_localize("UTC"),
        "symbol": "NDX",
        **{c.lower(): ndx[c].to_numpy(dtype="float64") for c in ("Open", "High", "Low", "Close", "Volume")},
    })
    bars = pd.concat([spx, ndx], ignore_index=True)
    bars["timestamp"] = pd.to_datetime(bars["timestamp"], utc=True)
    keep = (bars["timestamp"] >= pd.Timestamp(START, tz="UTC")) & (bars["timestamp"] < pd.Timestamp(END, tz="UTC"))
    bars[keep].sort_values(["symbol", "timestamp"]).to_parquet(path, index=False)
    return path


# -------------------------------------------------------------------------------------------- foxhunt in-process
def _flag_value(text: str | bool, default: Any) -> Any:
    """A flag's text as the type of the field's default (bool, int, float), else an int/float/str guess."""
    if isinstance(text, bool) or isinstance(default, bool):
        return text if isinstance(text, bool) else text.lower() in ("1", "true", "yes")
    if isinstance(default, int | float):
        return type(default)(text)
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def fox_configs(data: Path, hidden: int, fox_args: list[str], encoder: int = ENCODER, horizon: int = HORIZON):
    """foxhunt's DataConfig and ModelConfig for this benchmark. Flags in --fox-args that name a field of either
    (--hidden-continuous-size 16 -> hidden_continuous_size=16, --vol-features -> True) are applied, so that the size
    search sees the model that `foxhunt train` will build."""
    from foxhunt.data.config import DataConfig
    from foxhunt.model.config import ModelConfig

    data_kw: dict[str, Any] = {"paths": (str(data),), "encoder_length": encoder, "horizon": horizon,
                               "train_end": TRAIN_END, "val_end": VAL_END}
    model_kw: dict[str, Any] = {"hidden_size": hidden, "attention_heads": HEADS, "dropout": DROPOUT,
                                "encoder_length": encoder, "horizon": horizon}
    data_fields = {f.name: f for f in dataclasses.fields(DataConfig)}
    model_fields = {f.name: f for f in dataclasses.fields(ModelConfig)}
    i = 0
    while i < len(fox_args):
        flag = fox_args[i]
        i += 1
        if not flag.startswith("--"):
            continue
        name = flag[2:].replace("-", "_")
        value: Any = True
        if name.startswith("no_") and (name[3:] in data_fields or name[3:] in model_fields):
            name, value = name[3:], False
        elif i < len(fox_args) and not fox_args[i].startswith("--"):
            value = fox_args[i]
            i += 1
        for kw, fields in ((data_kw, data_fields), (model_kw, model_fields)):
            if name in fields:
                kw[name] = _flag_value(value, fields[name].default)
    return DataConfig(**data_kw), ModelConfig(**model_kw)


def fox_model(data: Path, hidden: int, fox_args: list[str]):
    """(model, prepared data, model config) built in-process the way `foxhunt train` builds them."""
    from foxhunt.data.prepare import prepare_data
    from foxhunt.model.tft import TemporalFusionTransformer

    data_cfg, model_cfg = fox_configs(data, hidden, fox_args)
    prepared = prepare_data(data_cfg)
    return TemporalFusionTransformer(prepared.schema.sizes, model_cfg), prepared, model_cfg


def match_hidden(data: Path, target: int, fox_args: list[str]) -> tuple[int, int]:
    """The multiple of 4 in 16..96 whose foxhunt parameter count is closest to `target`; (hidden, count)."""
    from foxhunt.data.prepare import prepare_data
    from foxhunt.model.tft import TemporalFusionTransformer, count_parameters

    data_cfg, _ = fox_configs(data, 16, fox_args)
    sizes = prepare_data(data_cfg).schema.sizes
    counts = {}
    for h in range(16, 97, 4):
        counts[h] = count_parameters(TemporalFusionTransformer(sizes, fox_configs(data, h, fox_args)[1]))
    best = min(counts, key=lambda h: abs(counts[h] - target))
    return best, counts[best]


def fox_train_step(model, batch, quantiles: torch.Tensor) -> None:
    from foxhunt.model.loss import quantile_loss

    quantile_loss(model(batch).quantiles, batch.target, quantiles).backward()


def fox_flop_per_sample(run_dir: Path) -> float:
    """FLOP of one forward + backward of 128 training windows / 128, for the model configured in RUN_DIR/model.json.
    Built from the configuration, not the weights (FLOP depend on shapes only), so a run trained before a
    concurrent change to the model code still counts."""
    from foxhunt.data.config import DataConfig
    from foxhunt.data.prepare import prepare_data
    from foxhunt.model.config import ModelConfig
    from foxhunt.model.tft import TemporalFusionTransformer

    meta = json.loads((run_dir / "model.json").read_text())
    model_cfg = ModelConfig.from_dict(meta["model"])
    prepared = prepare_data(DataConfig.from_dict(meta["data"]))
    model = TemporalFusionTransformer(prepared.schema.sizes, model_cfg).train()
    batch = prepared.windows.batch(prepared.splits["train"][:BATCH])
    q = torch.tensor(model_cfg.quantiles)
    return count_flop(lambda: fox_train_step(model, batch, q)) / len(batch)


# --------------------------------------------------------------------------------------------- foxhunt processes
def run_measured(cmd: list[str], log_path: Path) -> tuple[float, float]:
    """Run `cmd` to completion; (wall seconds, peak RSS MB of that one process). Exits with its log's tail on failure."""
    with open(log_path, "w") as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=REPO)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        tail = "\n".join(log_path.read_text().splitlines()[-15:])
        sys.exit(f"failed ({proc.returncode}): {shlex.join(cmd)}\n{tail}")
    return wall, usage.ru_maxrss / 1024


def fox_run(data: Path, work: Path, hidden: int, threads: int, fox_args: list[str], tag: str) -> dict[str, Any]:
    run_dir, out = work / f"fox-run-{tag}", work / f"fox-forecast-{tag}.parquet"
    train = [sys.executable, "-m", "foxhunt", "train", "--parquet-file", str(data), "--train-end", TRAIN_END,
             "--val-end", VAL_END, "--encoder-length", str(ENCODER), "--horizon", str(HORIZON),
             "--attention-heads", str(HEADS), "--dropout", str(DROPOUT), "--batch-size", str(BATCH),
             "--epochs", str(EPOCHS), "--hidden-size", str(hidden), "--threads", str(threads),
             "--run-dir", str(run_dir), "--seed", "0", "--no-progress", *fox_args]
    train_s, rss = run_measured(train, work / f"fox-train-{tag}.log")
    predict = [sys.executable, "-m", "foxhunt", "predict", "--model", str(run_dir), "--parquet-file", str(data),
               "--start", TRAIN_END, "--out", str(out), "--threads", str(threads)]
    predict_s, _ = run_measured(predict, work / f"fox-predict-{tag}.log")

    import pyarrow.parquet as pq

    forecasts = pq.read_table(out, columns=["symbol", "origin"]).to_pandas()
    windows = len(forecasts.drop_duplicates())
    config = json.loads((run_dir / "config.json").read_text())
    epochs = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    train_windows = epochs[0]["train_samples"]
    return {
        "run_dir": str(run_dir),
        "n_params": config["n_params"],
        "train_windows": train_windows,
        "epochs_run": len(epochs),
        "wall_s": train_s,
        "samples_per_s_loop": statistics.median(e["samples_per_s"] for e in epochs),
        "samples_per_s_wall": train_windows * len(epochs) / train_s,
        "forecast_windows": windows,
        "forecast_s": predict_s,
        "forecast_windows_per_s": windows / predict_s,
        "peak_rss_mb": rss,
    }


# ---------------------------------------------------------------------------------------- pytorch-forecasting
def find_pf_python(arg: str | None) -> str | None:
    if arg:
        return arg
    if DEFAULT_PF_PYTHON.exists():
        return str(DEFAULT_PF_PYTHON)
    if importlib.util.find_spec("pytorch_forecasting") is not None:
        return sys.executable
    return None


def pf_call(pf_python: str, data: Path, threads: int, *extra: str) -> dict[str, Any]:
    cmd = [pf_python, str(PF_SIDE), "--data", str(data), "--threads", str(threads), "--train-end", TRAIN_END,
           "--val-end", VAL_END, "--encoder-length", str(ENCODER), "--horizon", str(HORIZON),
           "--batch-size", str(BATCH), "--epochs", str(EPOCHS), *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-15:])
        sys.exit(f"pytorch-forecasting side failed ({proc.returncode}): {shlex.join(cmd)}\n{tail}")
    return json.loads(lines[-1])


# ------------------------------------------------------------------------------------------------------ machine
def matmul_peak_gflops(sizes: tuple[int, ...] = (256, 512, 1024, 1536, 2048), min_s: float = 0.3) -> float:
    """Best fp32 torch.mm rate over square sizes, at the current torch thread count."""
    best = 0.0
    for n in sizes:
        a, b = torch.randn(n, n), torch.randn(n, n)
        torch.mm(a, b)  # warm-up
        reps, t0 = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - t0) < min_s:
            torch.mm(a, b)
            reps += 1
        best = max(best, 2 * n**3 * reps / elapsed / 1e9)
    return best


# -------------------------------------------------------------------------------------------------------- table
COLUMNS = (  # (header, key, format)
    ("parameters", "n_params", "{:,.0f}"),
    ("train samples/s", "samples_per_s_loop", "{:,.0f}"),
    ("samples/s wall", "samples_per_s_wall", "{:,.0f}"),
    ("wall s, 3 epochs", "wall_s", "{:.1f}"),
    ("forecast windows/s", "forecast_windows_per_s", "{:,.0f}"),
    ("peak RSS MB", "peak_rss_mb", "{:,.0f}"),
    ("MFLOP/sample", "mflop_per_sample", "{:.1f}"),
    ("GFLOP/s (% peak)", "gflops", None),
)


def summarize(runs: list[dict[str, Any]], flop: float, peak: float) -> dict[str, Any]:
    keys = ("n_params", "samples_per_s_loop", "samples_per_s_wall", "wall_s", "forecast_windows_per_s",
            "peak_rss_mb", "train_windows", "forecast_windows")
    med = {k: statistics.median(r[k] for r in runs) for k in keys}
    med["mflop_per_sample"] = flop / 1e6
    med["gflops"] = flop * med["samples_per_s_loop"] / 1e9
    med["gflops_share_of_peak"] = med["gflops"] / peak
    return med


def ratios(fox: dict[str, Any], pf: dict[str, Any]) -> dict[str, float]:
    """fox / PF for every column, except wall time: PF / fox (the speed-up)."""
    out = {key: fox[key] / pf[key] for _, key, _ in COLUMNS if key != "wall_s"}
    out["wall_s"] = pf["wall_s"] / fox["wall_s"]
    return out


def format_table(rows: dict[str, dict[str, Any]], ratio: dict[str, float] | None) -> str:
    def cell(row: dict[str, Any], key: str, fmt: str | None) -> str:
        if key == "gflops":
            return f"{row['gflops']:.1f} ({100 * row['gflops_share_of_peak']:.0f}%)"
        return fmt.format(row[key])

    header = ["", *(h for h, _, _ in COLUMNS)]
    body = [[name, *(cell(row, k, f) for _, k, f in COLUMNS)] for name, row in rows.items()]
    if ratio is not None:
        body.append(["ratio", *(f"x{ratio[k]:.2f}" for _, k, _ in COLUMNS)])
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]

    def line(r: list[str]) -> str:
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))

    return "\n".join([line(header), "  ".join("-" * w for w in widths), *map(line, body)])


# ---------------------------------------------------------------------------------------------------------- modes
def compare(args: argparse.Namespace, work: Path, data: Path) -> dict[str, Any]:
    fox_args = shlex.split(args.fox_args)
    pf_python = find_pf_python(args.pf_python)
    if pf_python is None:
        log(f"pytorch-forecasting side skipped: no --pf-python, no {DEFAULT_PF_PYTHON}; install it with: {INSTALL_HINT}")
    target = pf_call(pf_python, data, args.threads, "--count-only")["n_params"] if pf_python else PF_DOC_PARAMS

    if args.fox_hidden == "auto":
        hidden, fox_count = match_hidden(data, target, fox_args)
        log(f"foxhunt --hidden-size {hidden}: {fox_count:,} parameters vs pytorch-forecasting {target:,}")
    else:
        hidden = int(args.fox_hidden)

    load = os.getloadavg()[0]
    if load > 0.5:
        log(f"WARNING: load average {load:.1f} before starting: other processes share these cores, so both sides "
            "will be slowed (and not equally); rerun on an idle machine for numbers to quote")
    peak = matmul_peak_gflops()
    log(f"torch.mm peak {peak:.0f} GFLOP/s on {args.threads} threads")
    fox_runs, pf_runs = [], []
    for r in range(args.repeats):
        sides = ["fox", "pf"] if r % 2 == 0 else ["pf", "fox"]  # alternate, so drift hits both sides alike
        for side in sides:
            if side == "fox":
                log(f"repeat {r + 1}/{args.repeats}: foxhunt train + predict")
                fox_runs.append(fox_run(data, work, hidden, args.threads, fox_args, str(r)))
            elif pf_python:
                log(f"repeat {r + 1}/{args.repeats}: pytorch-forecasting fit + forecast")
                pf_runs.append(pf_call(pf_python, data, args.threads))
                pf_runs[-1]["wall_s"] = pf_runs[-1]["fit_s"]

    peak = max(peak, matmul_peak_gflops())  # the machine's peak: the better of the two ends of the run
    fox = summarize(fox_runs, fox_flop_per_sample(Path(fox_runs[0]["run_dir"])), peak)
    rows = {"foxhunt": fox}
    pf = None
    if pf_runs:
        pf = summarize(pf_runs, statistics.median(r["flop_per_sample"] for r in pf_runs), peak)
        rows["pytorch-forecasting"] = pf
        if abs(fox["n_params"] / pf["n_params"] - 1) > 0.15:
            log(f"WARNING: parameter counts differ by more than 15% ({fox['n_params']:,.0f} vs {pf['n_params']:,.0f});"
                " pick --fox-hidden to match")
    ratio = ratios(fox, pf) if pf else None

    print(f"foxhunt vs pytorch-forecasting: SPX+NDX daily 1999-2017, encoder {ENCODER}, horizon {HORIZON}, "
          f"batch {BATCH}, {EPOCHS} epochs; foxhunt --hidden-size {hidden}, pytorch-forecasting hidden 64; "
          f"{args.threads} threads, torch.mm peak {peak:.0f} GFLOP/s; median of {args.repeats}")
    print(format_table(rows, ratio))
    print("wall: foxhunt = whole `foxhunt train` process, pytorch-forecasting = Trainer.fit; forecast: whole "
          "`foxhunt predict` process vs forward loop. ratio: foxhunt / pytorch-forecasting, wall PF / foxhunt.")
    return {
        "setup": {"threads": args.threads, "repeats": args.repeats, "fox_hidden": hidden, "fox_args": fox_args,
                  "encoder_length": ENCODER, "horizon": HORIZON, "batch_size": BATCH, "epochs": EPOCHS,
                  "train_end": TRAIN_END, "val_end": VAL_END, "matmul_peak_gflops": peak,
                  "load_average_at_start": load,
                  "torch": torch.__version__, "pf_python": pf_python},
        "foxhunt": fox, "pytorch_forecasting": pf, "ratio": ratio,
        "runs": {"foxhunt": fox_runs, "pytorch_forecasting": pf_runs},
    }


def profile(args: argparse.Namespace, data: Path) -> None:
    """Top 15 ops by self CPU time over 5 training steps, foxhunt in-process, then pytorch-forecasting."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    fox_args = shlex.split(args.fox_args)
    if args.run_dir:  # the model configured in an existing run directory
        from foxhunt.data.config import DataConfig
        from foxhunt.data.prepare import prepare_data
        from foxhunt.model.config import ModelConfig
        from foxhunt.model.tft import TemporalFusionTransformer

        meta = json.loads((Path(args.run_dir) / "model.json").read_text())
        model_cfg = ModelConfig.from_dict(meta["model"])
        prepared = prepare_data(DataConfig.from_dict(meta["data"]))
        model = TemporalFusionTransformer(prepared.schema.sizes, model_cfg)
    else:
        auto = args.fox_hidden == "auto"
        hidden = match_hidden(data, PF_DOC_PARAMS, fox_args)[0] if auto else int(args.fox_hidden)
        model, prepared, model_cfg = fox_model(data, hidden, fox_args)
    model.train()
    q = torch.tensor(model_cfg.quantiles)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-4)
    batches = prepared.windows.iter_batches(prepared.splits["train"], BATCH, shuffle=True,
                                            generator=torch.Generator().manual_seed(0))
    fox_train_step(model, next(batches), q)  # warm-up, not profiled

    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(5):
            optimizer.zero_grad(set_to_none=True)
            fox_train_step(model, next(batches), q)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
    print(f"foxhunt (hidden {model_cfg.hidden_size}): 5 training steps, top 15 ops by self CPU time")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15))
    pf_python = find_pf_python(args.pf_python)
    if pf_python is None:
        log(f"pytorch-forecasting side skipped: install it with: {INSTALL_HINT}")
        return
    subprocess.run([pf_python, str(PF_SIDE), "--data", str(data), "--threads", str(args.threads), "--profile"],
                   check=True, cwd=REPO)


def cuda(args: argparse.Namespace, work: Path, data: Path) -> dict[str, Any]:
    """foxhunt alone on one GPU in bf16 at NVIDIA's TFT benchmark size (hidden 128, encoder 168, horizon 24)."""
    help_text = subprocess.run([sys.executable, "-m", "foxhunt", "train", "--help"], capture_output=True,
                               text=True, cwd=REPO, env={**os.environ, "COLUMNS": "200"}).stdout
    precision = ["--precision", "bf16"] if "--precision" in help_text else []
    if not precision:
        log("WARNING: this foxhunt has no --precision flag; training in its default precision")
    run_dir = work / "fox-cuda"
    cmd = [sys.executable, "-m", "foxhunt", "train", "--parquet-file", str(data), "--train-end", TRAIN_END,
           "--val-end", VAL_END, "--encoder-length", "168", "--horizon", "24", "--attention-heads", str(HEADS),
           "--dropout", str(DROPOUT), "--batch-size", "1024", "--hidden-size", "128", "--epochs", str(EPOCHS),
           "--use-gpu", *precision, "--run-dir", str(run_dir), "--seed", "0", "--no-progress",
           *shlex.split(args.fox_args)]
    wall, _ = run_measured(cmd, work / "fox-cuda.log")
    epochs = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    rate = statistics.median(e["samples_per_s"] for e in epochs)
    print(f"foxhunt on {torch.cuda.get_device_name() if torch.cuda.is_available() else 'cuda'}, bf16, batch 1024, "
          f"hidden 128, encoder 168, horizon 24: {rate:,.0f} samples/s (median of {len(epochs)} epochs; "
          f"process {wall:.1f}s)")
    print(f"NVIDIA DeepLearningExamples TFT on one A100: {NVIDIA_A100['TF32']:,} items/s (TF32), "
          f"{NVIDIA_A100['AMP']:,} items/s (AMP); foxhunt / AMP = x{rate / NVIDIA_A100['AMP']:.2f}")
    return {"device": "cuda", "samples_per_s": rate, "wall_s": wall, "nvidia_a100_items_per_s": NVIDIA_A100,
            "precision": "bf16" if precision else "default"}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=3, help="alternating repetitions; medians are reported")
    p.add_argument("--threads", type=int, default=2, help="torch threads on both sides (and for the matmul peak)")
    p.add_argument("--pf-python", help=f"python of the pytorch-forecasting venv (default {DEFAULT_PF_PYTHON})")
    p.add_argument("--fox-hidden", default="auto", help="foxhunt --hidden-size, or auto: closest parameter count")
    p.add_argument("--fox-args", default="", help='extra `foxhunt train` flags, e.g. "--precision bf16"')
    p.add_argument("--json", type=Path, help="also write the results here")
    p.add_argument("--workdir", type=Path, help="keep data, run directories and logs here (default: a temp dir)")
    p.add_argument("--profile", action="store_true", help="torch.profiler top ops of 5 training steps instead")
    p.add_argument("--run-dir", help="with --profile: profile the model configured in this foxhunt run directory")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="cuda: foxhunt alone vs NVIDIA's A100")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)

    with tempfile.TemporaryDirectory(prefix="fox-vs-pf-") as tmp:
        work = args.workdir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        data = write_bars(work / "bars.parquet")
        if args.profile:
            profile(args, data)
            return 0
        result = cuda(args, work, data) if args.device == "cuda" else compare(args, work, data)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
