"""foxhunt vs pytorch-forecasting, side by side: same data, matched model size, one table of measured ratios.

    python benchmarks/vs_pytorch_forecasting.py [--repeats 3] [--threads 2] [--json out.json]
        [--pf-python PATH] [--fox-hidden auto|H] [--fox-args "--flag value ..."] [--workdir DIR]
        [--gomp-spincount N] [--omp-wait-policy passive|active]
    python benchmarks/vs_pytorch_forecasting.py --profile [--run-dir RUN]   # top ops of 5 training steps
    python benchmarks/vs_pytorch_forecasting.py --device cuda               # foxhunt alone vs NVIDIA's A100

Run it with foxhunt's python. The pytorch-forecasting side (benchmarks/_pf_side.py) runs with the python of
its own virtualenv, by default .venv-bench/bin/python, made with
    python3 -m venv .venv-bench && .venv-bench/bin/pip install torch==2.13.0 &&
    .venv-bench/bin/pip install -r ../shared/bench/pytorch-forecasting-requirements.txt
Without one, only the foxhunt side runs.

Data: real daily bars 1999-2017 of two series, SPX (../shared/data/spx_daily.parquet) and NASDAQ ("NDX",
`arch.data.nasdaq`, Close). Train before 2014-01-01, validate 2014-2015, forecast every window from 2014 on.
Encoder 60, horizon 5, 4 heads, dropout 0.1, batch 128, quantiles 0.1/0.5/0.9, 3 epochs, validation after
each. pytorch-forecasting gets its documented configuration (hidden 64; 260,564 parameters on three series);
foxhunt's --hidden-size is the one whose parameter count is closest (--fox-hidden auto). Both counts are
printed.

What is measured (see ../shared/docs/benchmarking.md), the two sides alternating, medians over --repeats:
- training: the whole `foxhunt train` process (start-up, data preparation, 3 epochs, validation, checkpoints)
  against pytorch-forecasting's `Trainer.fit` alone. "train samples/s" is the training loop's own rate
  (validation excluded) on both sides; "samples/s wall" is training windows x epochs / that wall time.
- forecasting: the whole `foxhunt predict` process against pytorch-forecasting's forward loop at batch 1,024
  under torch.no_grad(), over every window from 2014 on; windows per second.
- peak RSS of the training process (foxhunt: os.wait4 on the child; pytorch-forecasting: ru_maxrss after fit).
- FLOP per training sample (one forward + backward of 128 windows, matmul work, LSTM included) and the
  achieved GFLOP/s as a share of the machine's torch.mm peak at the same thread count, measured in this run.
Both sides run with the same torch thread count and the same OpenMP waiting: GOMP_SPINCOUNT=10000 by default, as
foxhunt's CLI sets it (a short spin: on an idle machine as fast as spinning, on a shared one far less harmful;
`--omp-wait-policy passive|active` overrides it for both). Absolute times move 15-30%
between runs on shared machines, far more when other jobs compete for the cores (the script warns when the
CPUs are busy before it starts, or the repeats disagree); read the ratios.
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
from _pf_side import count_flop  # noqa: E402  (one FLOP counter for both sides)

REPO = Path(__file__).resolve().parents[1]
SPX = REPO.parent / "shared" / "data" / "spx_daily.parquet"
DEFAULT_PF_PYTHON = REPO / ".venv-bench" / "bin" / "python"
PF_SIDE = Path(__file__).resolve().parent / "_pf_side.py"
INSTALL_HINT = (
    "python3 -m venv .venv-bench && .venv-bench/bin/pip install torch==2.13.0 && "
    ".venv-bench/bin/pip install -r ../shared/bench/pytorch-forecasting-requirements.txt"
)
PF_DOC_PARAMS = 260_564  # pytorch-forecasting's documented size: the target when its side cannot run
START, END = "1999-01-01", "2018-01-01"  # bars 1999-01-01 .. 2017-12-31
TRAIN_END, VAL_END = "2014-01-01", "2016-01-01"
ENCODER, HORIZON, HEADS, DROPOUT, BATCH, EPOCHS = 60, 5, 4, 0.1, 128, 3
NVIDIA_A100 = {"TF32": 12_435, "AMP": 17_608}  # NVIDIA DeepLearningExamples TFT, items/s on one A100


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------------------- data
def write_bars(path: Path) -> Path:
    """SPX and NDX daily bars in foxhunt's generic format: timestamp (UTC), symbol, open high low close
    volume."""
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
    ts = pd.to_datetime(bars["timestamp"], utc=True)
    bars["timestamp"] = ts
    keep = (ts >= pd.Timestamp(START, tz="UTC")) & (ts < pd.Timestamp(END, tz="UTC"))
    bars[keep].sort_values(["symbol", "timestamp"]).to_parquet(path, index=False)
    return path


# ------------------------------------------------------------------------------------- foxhunt, in-process
def _flag_value(text: str | bool, default: Any) -> Any:
    """A flag's text as the type of the field's default (bool, int, float, tuple), else int, float or str."""
    if isinstance(text, bool) or isinstance(default, bool):
        return text if isinstance(text, bool) else text.lower() in ("1", "true", "yes")
    if isinstance(default, int | float):
        return type(default)(text)
    if isinstance(default, tuple):  # --quantiles 0.1,0.5,0.9
        return tuple(float(x) for x in text.split(","))
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def fox_configs(data: Path, hidden: int, fox_args: list[str]):  # -> (DataConfig, ModelConfig)
    """foxhunt's data and model configuration for this benchmark. Flags in --fox-args that name a field of
    either (--hidden-continuous-size 16 -> hidden_continuous_size=16, --vol-features -> True) are applied, so
    that the size search sees the model `foxhunt train` will build; the others (--precision bf16) only go to
    the command line."""
    from foxhunt.data.config import DataConfig
    from foxhunt.model.config import ModelConfig

    data_kw: dict[str, Any] = {"paths": (str(data),), "encoder_length": ENCODER, "horizon": HORIZON,
                               "train_end": TRAIN_END, "val_end": VAL_END}
    model_kw: dict[str, Any] = {"hidden_size": hidden, "attention_heads": HEADS, "dropout": DROPOUT,
                                "encoder_length": ENCODER, "horizon": HORIZON}
    fields = [(data_kw, {f.name: f for f in dataclasses.fields(DataConfig)}),
              (model_kw, {f.name: f for f in dataclasses.fields(ModelConfig)})]
    i = 0
    while i < len(fox_args):
        name, value, i = fox_args[i][2:].replace("-", "_"), True, i + 1
        if name.startswith("no_") and any(name[3:] in known for _, known in fields):
            name, value = name[3:], False
        elif i < len(fox_args) and not fox_args[i].startswith("--"):
            value, i = fox_args[i], i + 1
        for kw, known in fields:
            if name in known:
                kw[name] = _flag_value(value, known[name].default)
    data_cfg = DataConfig(**data_kw)  # its anchor as foxhunt's default (auto) or --anchor makes it; the model's too
    return data_cfg, ModelConfig(**model_kw, anchored=data_cfg.anchored)


def match_hidden(data: Path, target: int, fox_args: list[str]) -> tuple[int, int]:
    """The multiple of 4 in 16..96 whose foxhunt parameter count is closest to `target`; (hidden, count)."""
    from foxhunt.data.prepare import prepare_data
    from foxhunt.model.tft import TemporalFusionTransformer, count_parameters

    sizes = prepare_data(fox_configs(data, 16, fox_args)[0]).schema.sizes
    counts = {h: count_parameters(TemporalFusionTransformer(sizes, fox_configs(data, h, fox_args)[1]))
              for h in range(16, 97, 4)}
    best = min(counts, key=lambda h: abs(counts[h] - target))
    return best, counts[best]


def fox_model_from_run(run_dir: Path):  # -> (model, PreparedData, ModelConfig)
    """The model configured in RUN_DIR/model.json, with fresh weights, and its prepared data. The weights are
    not loaded: FLOP and profiles depend on shapes only, and a run trained just before a concurrent change to
    the model code would not load."""
    from foxhunt.data.config import DataConfig
    from foxhunt.data.prepare import prepare_data
    from foxhunt.model.config import ModelConfig
    from foxhunt.model.tft import TemporalFusionTransformer

    meta = json.loads((run_dir / "model.json").read_text())
    model_cfg = ModelConfig.from_dict(meta["model"])
    prepared = prepare_data(DataConfig.from_dict(meta["data"]))
    return TemporalFusionTransformer(prepared.schema.sizes, model_cfg), prepared, model_cfg


def fox_train_step(model: torch.nn.Module, batch: Any, quantiles: torch.Tensor) -> None:
    from foxhunt.model.loss import quantile_loss

    quantile_loss(model(batch).quantiles, batch.target, quantiles).backward()


def fox_flop_per_sample(run_dir: Path) -> float:
    """FLOP of one forward + backward of 128 training windows, per window."""
    model, prepared, model_cfg = fox_model_from_run(run_dir)
    batch = prepared.windows.batch(prepared.splits["train"][:BATCH])
    q = torch.tensor(model_cfg.quantiles)
    return count_flop(lambda: fox_train_step(model.train(), batch, q)) / len(batch)


# ------------------------------------------------------------------------------------ foxhunt, processes
GNU_TIME = Path("/usr/bin/time")


def run_measured(cmd: list[str], log_path: Path) -> tuple[float, float]:
    """Run `cmd`; (wall seconds, peak RSS MB of that one process). Exits with the log's tail if it fails.

    The peak comes from GNU time when it is installed: a child started straight from this process (vfork + exec)
    inherits this process's own peak in its ru_maxrss (the kernel records the old address space's high-water mark
    at exec), which here is ~600 MB of torch, pyarrow and pandas. Under /usr/bin/time the measured process is
    forked from a small one. Without it, os.wait4's figure is an upper bound.
    """
    rss_file = log_path.with_suffix(".maxrss")
    wrap = [str(GNU_TIME), "-f", "%M", "-o", str(rss_file)] if GNU_TIME.exists() else []
    with open(log_path, "w") as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen([*wrap, *cmd], stdout=out, stderr=subprocess.STDOUT, cwd=REPO)
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own rusage, not RUSAGE_CHILDREN's running max
        wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        tail = "\n".join(log_path.read_text().splitlines()[-15:])
        sys.exit(f"failed ({proc.returncode}): {shlex.join(cmd)}\n{tail}")
    kib = int(rss_file.read_text().split()[-1]) if wrap else usage.ru_maxrss
    return wall, kib / 1024  # KiB on Linux


def fox_forward_rate(run_dir: Path, data: Path) -> float:
    """foxhunt's forecast loop alone, in this process, over the windows `foxhunt predict` forecasts (batch 1,024):
    the same thing pytorch-forecasting's forward loop is timed on (plus unscaling and sorting the quantiles)."""
    from foxhunt.model.saved import load_model
    from foxhunt.predict.origins import parse_time, prepare_for_model, select_origins
    from foxhunt.predict.predictor import BatchPredictor

    lm = load_model(run_dir, "cpu")
    prepared = prepare_for_model(lm, (str(data),))
    ids = select_origins(prepared, parse_time(TRAIN_END, "--start"), None)
    forecaster = BatchPredictor(lm, prepared, torch.device("cpu"))
    t0 = time.perf_counter()
    n = sum(len(fb.window) for fb in forecaster.iter(ids, 1024))
    return n / (time.perf_counter() - t0)


def train_cmd(data: Path, run_dir: Path, *flags: str) -> list[str]:
    return [sys.executable, "-m", "foxhunt", "train", "--parquet-file", str(data), "--train-end", TRAIN_END,
            "--val-end", VAL_END, "--attention-heads", str(HEADS), "--dropout", str(DROPOUT),
            "--epochs", str(EPOCHS), "--run-dir", str(run_dir), "--seed", "0", "--no-progress", *flags]


def read_epochs(run_dir: Path) -> list[dict[str, Any]]:
    """The records of the epochs that trained: an anchored run's epoch 0 (the untrained model validated) trains
    nothing, and would count as an epoch of 0 samples/s."""
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, filter(str.strip, lines)) if r.get("train_loss") is not None]


def fox_run(data: Path, work: Path, hidden: int, threads: int, fox_args: list[str], tag: str) -> dict:
    import pyarrow.parquet as pq

    run_dir, out = work / f"fox-run-{tag}", work / f"fox-forecast-{tag}.parquet"
    train_s, rss = run_measured(
        train_cmd(data, run_dir, "--encoder-length", str(ENCODER), "--horizon", str(HORIZON), "--batch-size",
                  str(BATCH), "--hidden-size", str(hidden), "--threads", str(threads), *fox_args),
        work / f"fox-train-{tag}.log",
    )
    predict_s, _ = run_measured(
        [sys.executable, "-m", "foxhunt", "predict", "--model", str(run_dir), "--parquet-file", str(data),
         "--start", TRAIN_END, "--out", str(out), "--threads", str(threads)],
        work / f"fox-predict-{tag}.log",
    )
    windows = len(pq.read_table(out, columns=["symbol", "origin"]).to_pandas().drop_duplicates())
    epochs = read_epochs(run_dir)
    train_windows = epochs[0]["train_samples"]
    return {
        "run_dir": str(run_dir),
        "n_params": json.loads((run_dir / "config.json").read_text())["n_params"],
        "train_windows": train_windows,
        "epochs_run": len(epochs),
        "wall_s": train_s,
        "samples_per_s_loop": statistics.median(e["samples_per_s"] for e in epochs),
        "samples_per_s_wall": train_windows * len(epochs) / train_s,
        "forecast_windows": windows,
        "forecast_s": predict_s,
        "forecast_windows_per_s": windows / predict_s,
        "forward_windows_per_s": fox_forward_rate(run_dir, data),
        "peak_rss_mb": rss,
    }


# ----------------------------------------------------------------------------------- pytorch-forecasting
def find_pf_python(arg: str | None) -> str | None:
    if arg:
        if not Path(arg).exists():
            sys.exit(f"--pf-python {arg}: no such file; give the python of pytorch-forecasting's virtualenv "
                     "(the module docstring says how to make it), or leave the option out")
        return arg
    if DEFAULT_PF_PYTHON.exists():
        return str(DEFAULT_PF_PYTHON)
    if importlib.util.find_spec("pytorch_forecasting") is not None:
        return sys.executable
    return None


def pf_call(pf_python: str, data: Path, threads: int, *extra: str) -> dict[str, Any]:
    """Run _pf_side.py; its last JSON line on stdout."""
    cmd = [pf_python, str(PF_SIDE), "--data", str(data), "--threads", str(threads), "--train-end", TRAIN_END,
           "--val-end", VAL_END, "--encoder-length", str(ENCODER), "--horizon", str(HORIZON),
           "--batch-size", str(BATCH), "--epochs", str(EPOCHS), *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-15:])
        sys.exit(f"pytorch-forecasting side failed ({proc.returncode}): {shlex.join(cmd)}\n{tail}")
    return json.loads(lines[-1])


# --------------------------------------------------------------------------------------------------- machine
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


def cpu_busy(seconds: float = 1.0) -> float | None:
    """Share of all CPUs busy over the next `seconds` (from /proc/stat); None without /proc/stat."""

    def sample() -> tuple[int, int]:
        ticks = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        return sum(ticks), ticks[3] + ticks[4]  # total, idle + iowait

    try:
        total0, idle0 = sample()
        time.sleep(seconds)
        total1, idle1 = sample()
    except OSError:
        return None
    return 1 - (idle1 - idle0) / max(1, total1 - total0)


# ----------------------------------------------------------------------------------------------------- table
COLUMNS = (  # (header, key, format)
    ("parameters", "n_params", "{:,.0f}"),
    ("train samples/s", "samples_per_s_loop", "{:,.0f}"),
    ("samples/s wall", "samples_per_s_wall", "{:,.0f}"),
    ("wall s, 3 epochs", "wall_s", "{:.1f}"),
    ("forecast windows/s", "forecast_windows_per_s", "{:,.0f}"),
    ("forward windows/s", "forward_windows_per_s", "{:,.0f}"),
    ("peak RSS MB", "peak_rss_mb", "{:,.0f}"),
    ("MFLOP/sample", "mflop_per_sample", "{:.1f}"),
    ("GFLOP/s (% peak)", "gflops", None),
)


def summarize(runs: list[dict[str, Any]], flop: float, peak: float) -> dict[str, Any]:
    keys = ("n_params", "samples_per_s_loop", "samples_per_s_wall", "wall_s", "forecast_windows_per_s",
            "forward_windows_per_s", "peak_rss_mb", "train_windows", "forecast_windows")
    med = {k: statistics.median(r[k] for r in runs) for k in keys}
    med["mflop_per_sample"] = flop / 1e6
    med["gflops"] = flop * med["samples_per_s_loop"] / 1e9
    med["gflops_share_of_peak"] = med["gflops"] / peak
    return med


def ratios(fox: dict[str, Any], pf: dict[str, Any]) -> dict[str, float]:
    """foxhunt / pytorch-forecasting for every column, except wall time: PF / foxhunt (the speed-up)."""
    out = {key: fox[key] / pf[key] for _, key, _ in COLUMNS}
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
        cells = zip(r, widths, strict=True)
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(cells))

    return "\n".join([line(header), "  ".join("-" * w for w in widths), *map(line, body)])


# ----------------------------------------------------------------------------------------------------- modes
def omp_setting() -> str:
    policy = os.environ.get("OMP_WAIT_POLICY")
    return f"OMP_WAIT_POLICY={policy}" if policy else f"GOMP_SPINCOUNT={os.environ.get('GOMP_SPINCOUNT', '')}"


def compare(args: argparse.Namespace, work: Path, data: Path) -> dict[str, Any]:
    fox_args = shlex.split(args.fox_args)
    pf_python = find_pf_python(args.pf_python)
    if pf_python is None:
        log(f"pytorch-forecasting side skipped (no --pf-python, no {DEFAULT_PF_PYTHON}); install it: "
            f"{INSTALL_HINT}")
    target = PF_DOC_PARAMS
    if pf_python:
        target = pf_call(pf_python, data, args.threads, "--count-only")["n_params"]
    if args.fox_hidden == "auto":
        hidden, count = match_hidden(data, target, fox_args)
        log(f"foxhunt --hidden-size {hidden}: {count:,} parameters vs pytorch-forecasting {target:,}")
    else:
        hidden = int(args.fox_hidden)

    busy = cpu_busy()
    if busy is not None and busy > 0.25:
        log(f"WARNING: the CPUs were {100 * busy:.0f}% busy before starting: other processes share these "
            "cores, so both sides are slowed, and not equally; rerun on an idle machine for numbers to quote")
    peak = matmul_peak_gflops()
    log(f"torch.mm peak {peak:.0f} GFLOP/s on {args.threads} threads")
    fox_runs: list[dict[str, Any]] = []
    pf_runs: list[dict[str, Any]] = []
    for r in range(args.repeats):
        for side in ("fox", "pf") if r % 2 == 0 else ("pf", "fox"):  # alternate, so drift hits both sides
            if side == "fox":
                log(f"repeat {r + 1}/{args.repeats}: foxhunt train + predict")
                fox_runs.append(fox_run(data, work, hidden, args.threads, fox_args, str(r)))
            elif pf_python:
                log(f"repeat {r + 1}/{args.repeats}: pytorch-forecasting fit + forecast")
                res = pf_call(pf_python, data, args.threads)
                pf_runs.append({**res, "wall_s": res["fit_s"]})  # the wall column: Trainer.fit alone
    peak = max(peak, matmul_peak_gflops())  # the machine's peak: the better of the two ends of the run
    for name, runs in (("foxhunt", fox_runs), ("pytorch-forecasting", pf_runs)):
        walls = [r["wall_s"] for r in runs]
        if len(walls) > 1 and max(walls) > 1.5 * min(walls):
            log(f"WARNING: {name}'s wall times spread {min(walls):.0f}-{max(walls):.0f} s over the repeats: "
                "the cores were probably shared with other jobs; the medians are less trustworthy")

    rows = {"foxhunt": summarize(fox_runs, fox_flop_per_sample(Path(fox_runs[0]["run_dir"])), peak)}
    if pf_runs:
        pf_flop = statistics.median(r["flop_per_sample"] for r in pf_runs)
        rows["pytorch-forecasting"] = summarize(pf_runs, pf_flop, peak)
    fox, pf = rows["foxhunt"], rows.get("pytorch-forecasting")
    reference = pf["n_params"] if pf else target
    if abs(fox["n_params"] / reference - 1) > 0.15:
        log(f"WARNING: foxhunt has {fox['n_params']:,.0f} parameters, pytorch-forecasting {reference:,.0f}: "
            "more than 15% apart; choose --fox-hidden to match")
    ratio = ratios(fox, pf) if pf else None

    print(f"foxhunt vs pytorch-forecasting: SPX+NDX daily 1999-2017, encoder {ENCODER}, horizon {HORIZON}, "
          f"batch {BATCH}, {EPOCHS} epochs; foxhunt --hidden-size {hidden}, pytorch-forecasting hidden 64; "
          f"{args.threads} threads, {omp_setting()}, torch.mm peak "
          f"{peak:.0f} GFLOP/s; median of {args.repeats}")
    print(format_table(rows, ratio))
    if pf:
        print("wall: the whole `foxhunt train` process vs Trainer.fit; forecast: the whole `foxhunt predict` "
              "process vs the forward loop. ratio: foxhunt / pytorch-forecasting (wall: PF / foxhunt).")
    return {
        "setup": {"threads": args.threads, "repeats": args.repeats, "fox_hidden": hidden,
                  "fox_args": fox_args, "encoder_length": ENCODER, "horizon": HORIZON, "batch_size": BATCH,
                  "epochs": EPOCHS, "train_end": TRAIN_END, "val_end": VAL_END, "matmul_peak_gflops": peak,
                  "cpu_busy_at_start": busy, "omp": omp_setting(),
                  "torch": torch.__version__, "pf_python": pf_python},
        "foxhunt": fox, "pytorch_forecasting": pf, "ratio": ratio,
        "runs": {"foxhunt": fox_runs, "pytorch_forecasting": pf_runs},
    }


def profile(args: argparse.Namespace, data: Path) -> None:
    """Top 15 ops by self CPU time over 5 training steps: foxhunt in-process, then pytorch-forecasting."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    if args.run_dir:
        model, prepared, model_cfg = fox_model_from_run(Path(args.run_dir))
    else:  # the model `foxhunt train` would build here; no need to train it first
        from foxhunt.data.prepare import prepare_data
        from foxhunt.model.tft import TemporalFusionTransformer

        fox_args = shlex.split(args.fox_args)
        auto = args.fox_hidden == "auto"
        hidden = match_hidden(data, PF_DOC_PARAMS, fox_args)[0] if auto else int(args.fox_hidden)
        data_cfg, model_cfg = fox_configs(data, hidden, fox_args)
        prepared = prepare_data(data_cfg)
        model = TemporalFusionTransformer(prepared.schema.sizes, model_cfg)
    model.train()
    q = torch.tensor(model_cfg.quantiles)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-4)
    batches = prepared.windows.iter_batches(prepared.splits["train"], BATCH, shuffle=True,
                                            generator=torch.Generator().manual_seed(0))
    fox_train_step(model, next(batches), q)  # warm-up, not profiled
    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(5):  # as foxhunt's training step: zero_grad, forward, loss, backward, clip, AdamW
            optimizer.zero_grad(set_to_none=True)
            fox_train_step(model, next(batches), q)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
    print(f"foxhunt (hidden {model_cfg.hidden_size}): 5 training steps, top 15 ops by self CPU time")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15))

    pf_python = find_pf_python(args.pf_python)
    if pf_python is None:
        log(f"pytorch-forecasting side skipped; install: {INSTALL_HINT}")
        return
    cmd = [pf_python, str(PF_SIDE), "--data", str(data), "--threads", str(args.threads), "--profile"]
    subprocess.run(cmd, check=True, cwd=REPO)


def cuda(args: argparse.Namespace, work: Path, data: Path) -> dict[str, Any]:
    """foxhunt alone on one GPU, bf16, at NVIDIA's TFT benchmark size: hidden 128, encoder 168, horizon 24.
    NVIDIA's figures are for their electricity data set; these two series give only about 7 batches of 1,024
    per epoch, so start-up work weighs more here: treat the comparison as a lower bound for foxhunt."""
    help_text = subprocess.run([sys.executable, "-m", "foxhunt", "train", "--help"], capture_output=True,
                               text=True, cwd=REPO, env={**os.environ, "COLUMNS": "200"}).stdout
    precision = ["--precision", "bf16"] if "--precision" in help_text else []
    if not precision:
        log("WARNING: this foxhunt has no --precision flag; it trains in its default precision")
    run_dir = work / "fox-cuda"
    cmd = train_cmd(data, run_dir, "--encoder-length", "168", "--horizon", "24", "--batch-size", "1024",
                    "--hidden-size", "128", "--use-gpu", *precision, *shlex.split(args.fox_args))
    wall, _ = run_measured(cmd, work / "fox-cuda.log")
    epochs = read_epochs(run_dir)
    rate = statistics.median(e["samples_per_s"] for e in epochs)
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "cuda"
    print(f"foxhunt on {gpu}, {'bf16' if precision else 'default precision'}, batch 1024, hidden 128, "
          f"encoder 168, horizon 24: {rate:,.0f} samples/s (median of {len(epochs)} epochs; "
          f"process {wall:.1f} s)")
    print(f"NVIDIA DeepLearningExamples TFT on one A100: {NVIDIA_A100['TF32']:,} items/s (TF32), "
          f"{NVIDIA_A100['AMP']:,} items/s (AMP); foxhunt / AMP = x{rate / NVIDIA_A100['AMP']:.2f}")
    return {"device": gpu, "precision": "bf16" if precision else "default", "samples_per_s": rate,
            "wall_s": wall, "nvidia_a100_items_per_s": NVIDIA_A100}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add = p.add_argument
    add("--repeats", type=int, default=3, help="alternating repetitions; medians are reported")
    add("--threads", type=int, default=2, help="torch threads on both sides and for the matmul peak")
    add("--pf-python", help=f"python of the pytorch-forecasting venv (default {DEFAULT_PF_PYTHON})")
    add("--fox-hidden", default="auto", help="foxhunt --hidden-size, or auto: the closest parameter count")
    add("--fox-args", default="", help='extra `foxhunt train` flags, e.g. "--precision bf16"')
    add("--json", type=Path, help="also write the results here")
    add("--workdir", type=Path, help="keep data, run directories and logs here (default: a temp dir)")
    add("--profile", action="store_true", help="torch.profiler top ops of 5 training steps instead")
    add("--run-dir", help="with --profile: the model configured in this foxhunt run directory")
    add("--device", choices=("cpu", "cuda"), default="cpu", help="cuda: foxhunt alone vs NVIDIA's A100")
    add("--gomp-spincount", default="10000",
        help="GOMP_SPINCOUNT for both sides' processes (default 10000, as foxhunt's CLI sets it)")
    add("--omp-wait-policy", choices=("passive", "active"),
        help="OMP_WAIT_POLICY for both sides' processes instead of the spin count")
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--fox-args" in argv[:-1]:  # its value starts with "--", which argparse would take for an option
        i = argv.index("--fox-args")
        argv[i : i + 2] = [f"--fox-args={argv[i + 1]}"]
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)

    with tempfile.TemporaryDirectory(prefix="fox-vs-pf-") as tmp:
        work = args.workdir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        data = write_bars(work / "bars.parquet")
        if args.profile:  # both sides as this process's environment has it
            profile(args, data)
            return 0
        # The same OpenMP waiting for every child process (this one's runtime is already loaded). It moves the
        # numbers: on an idle 2-core machine passive waiting cost foxhunt about 45% and pytorch-forecasting about
        # 25% of training throughput; with another job on the cores, long-spinning threads ran 10-50x slower.
        os.environ["GOMP_SPINCOUNT"] = str(args.gomp_spincount)
        if args.omp_wait_policy:
            os.environ["OMP_WAIT_POLICY"] = args.omp_wait_policy.upper()
        result = cuda(args, work, data) if args.device == "cuda" else compare(args, work, data)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
