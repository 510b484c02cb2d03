"""How good the forecasts are, in one command: foxhunt trained and scored on every development dataset with several
seeds, against the baselines of `foxhunt evaluate` and pytorch-forecasting's TFT at matched size; one table, printed
and appended to benchmarks/RESULTS.md.

    python benchmarks/quality.py [--datasets cn_futures_daily,spx_daily,ko_pep_15min,sample] [--seeds 3] [--quick]
        [--calibrations auto,adaptive] [--train-args "--scaling series"] [--pf-python PATH | --no-pf]
        [--pf-seeds N] [--threads 2] [--workdir DIR] [--record | --no-record] [-- any other `foxhunt train` option]

The table scores p10, p50 and p90: a `--quantiles` among the train options must hold them (others are trained on,
not shown).

Datasets (real market data in ../shared/data, described in its README.md; a file missing there is skipped with a
note, so the script runs in a clone):
- cn_futures_daily: Chinese commodity futures, daily 2011-2017, one global model, the automatic split: `foxhunt
  train`, then `foxhunt evaluate` on the origins after validation;
- spx_daily: S&P 500 daily, walk-forward, one fold a year 2014-2018: `foxhunt backtest --folds 5 --test-length 1y
  --jobs 2` (each fold validated on the year before its test year, trained on everything before that);
- ko_pep_15min: Coca-Cola and PepsiCo, 15-minute bars, the automatic split, bars read as New York time;
- sample: the bundled ES sample. Simulated: its rows are shown apart and are never evidence.
foxhunt runs with every option at its default, plus --train-args and whatever follows `--` (so that a candidate
change is one flag away), with seeds 0..N-1, in-process as a user types the commands; every number is read from the
runs' metrics.json and backtest.json.

Calibration (--calibrations, default auto,adaptive; fixed and none too): one foxhunt row per method, all of them the same
trained models calibrated at forecast time (`evaluate --calibration M`; each backtest fold's model forecast on its
test year by `predict --calibration M`, scored on the backtest's rows as pytorch-forecasting's folds are), and each
method compared with foxhunt's default on the same rows by evaluate's paired test: the table under the main one.

pytorch-forecasting runs from its own virtualenv (--pf-python; default REPO/.venv-bench/bin/python; skipped with a
note when absent): the TFT of benchmarks/_pf_side.py on the bars exactly as foxhunt loaded them (the same series and
rolls), with its usual set-up: standard normalisation per series (GroupNormalizer per symbol), early stopping on the
validation loss, the best epoch's weights kept, its own quantiles uncalibrated. Matched to each foxhunt run: the
hidden size whose parameter count is closest (both counts in the table; a gap over 15% is noted), and the run's
encoder and horizon, heads, dropout, batch size, split dates, epoch cap (`--epochs auto`: foxhunt's own cap for
that many training windows) and patience. Its forecasts are written in `foxhunt predict`'s format and scored by
`foxhunt evaluate --model RUN --forecasts` (a backtest's folds: by the backtest's own summary over each fold's scored
rows, the model column swapped), so the baselines, tests and series counts come from one scorer on the same rows;
evaluate keeps the forecasts whose (symbol, origin) are among its own origins and drops the rest, so the script
checks that both sides were scored on the same number of pairs and notes any difference.

Time: the full run is sized for about 30 minutes on 2 quiet cores, --quick for about 5. The choices that keep it
there: foxhunt's own `--epochs auto` cap, and pytorch-forecasting stopped inside the same cap with the same patience
(3); the backtest trains two fold models at once (`--jobs 2`, a thread each: small models use two processes better
than two threads); pytorch-forecasting trains a seed's backtest folds in one process, and runs on the first seed
only of the simulated sample (--pf-seeds N: the first N seeds of every dataset); --quick is one seed, `--epochs 2`
for both models (leaving early stopping nothing to do) and the last 2 SPX folds (2017-2018), and it appends nothing
to RESULTS.md unless --record. Both models' processes get foxhunt's OpenMP setting (GOMP_SPINCOUNT): OpenMP's
default long spinning slows small models many times over when other jobs share the cores.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from foxhunt.model.config import DEFAULT_METHOD, METHODS

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _quality_folds import (  # noqa: E402
    aligned,
    fold_arrays,
    fold_result,
    forecast_arrays,
    missing_pairs,
    missing_quantiles,
    versus,
)
from _quality_runs import epochs_note, export_bars, fox_epochs, pf_plan, pf_unfit, read  # noqa: E402
from _quality_table import (  # noqa: E402
    PF,
    QUANTILES,
    RESULTS,
    VS_DEFAULT,
    Row,
    Score,
    fox_label,
    git_commit,
    machine,
    record,
    score_of,
    tables,
)

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"
DEFAULT_PF_PYTHON = REPO / ".venv-bench" / "bin" / "python"
PF_FORECAST = Path(__file__).resolve().parent / "_pf_forecast.py"
SIZE_GAP = 0.15  # parameter counts further apart than this are noted


@dataclass(frozen=True)
class Dataset:
    name: str
    file: str | None  # in the data folder; None: the bundled sample
    about: str
    flags: tuple[str, ...] = ()  # `foxhunt train` / `backtest` flags of this dataset
    folds: int = 0  # > 0: a walk-forward backtest of this many yearly folds
    simulated: bool = False
    pf_seeds: int | None = None  # pytorch-forecasting on the first this many seeds (None: all), unless --pf-seeds


DATASETS = {d.name: d for d in (
    Dataset("cn_futures_daily", "cn_futures_daily.parquet", "commodity futures, daily, one global model, automatic split"),
    Dataset("spx_daily", "spx_daily.parquet", "S&P 500 daily, walk-forward, one fold a year", folds=5),
    Dataset("ko_pep_15min", "ko_pep_15min.parquet", "KO and PEP, 15-minute bars, automatic split",
            flags=("--timezone", "America/New_York")),
    Dataset("sample", None, "the bundled ES sample, 1-minute bars, simulated", simulated=True, pf_seeds=1),
)}
BACKTEST = ("--test-length", "1y", "--jobs", "2")  # yearly folds; two fold models train at once, a thread each
QUICK_TRAIN = ("--epochs", "2")  # --quick: before --train-args, so that a typed --epochs wins
QUICK_FOLDS = 2
CALIBRATIONS = ("auto", "adaptive")  # --calibrations' default: today's default and the candidate


@dataclass(frozen=True)
class Settings:
    datasets: tuple[Dataset, ...]
    seeds: tuple[int, ...]
    quick: bool
    train_args: tuple[str, ...]  # --train-args, then what follows `--`
    calibrations: tuple[str, ...]  # foxhunt's rows: each calibration method on the same trained models
    threads: int
    work: Path
    data_dir: Path
    pf_python: str | None
    pf_seeds: int | None  # --pf-seeds: pytorch-forecasting on the first this many seeds of every dataset
    record: bool
    command: str

    @property
    def mode_args(self) -> tuple[str, ...]:
        return (*(QUICK_TRAIN if self.quick else ()), *self.train_args)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------------ arguments
def parse_args(argv: list[str]) -> Settings:
    own, rest = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    if "--train-args" in own[:-1]:  # its value starts with "--", which argparse would take for an option
        i = own.index("--train-args")
        own[i : i + 2] = [f"--train-args={own[i + 1]}"]
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--datasets", default=",".join(DATASETS), help=f"comma-separated, of {', '.join(DATASETS)}")
    p.add_argument("--seeds", help="a count (3: seeds 0, 1, 2) or a comma list (0,5; 7, for seed 7 alone); "
                                   "default 3, 1 with --quick")
    p.add_argument("--quick", action="store_true", help="one seed, 2 epochs, 2 SPX folds: for iterating")
    p.add_argument("--calibrations", default=",".join(CALIBRATIONS),
                   help=f"foxhunt's rows: these calibration methods (of {', '.join(METHODS)}) on the same models, "
                        f"each compared with the default ({DEFAULT_METHOD})")
    p.add_argument("--train-args", default="", help='extra `foxhunt train` flags, e.g. "--scaling series"')
    p.add_argument("--pf-python", help=f"python of the pytorch-forecasting venv (default {DEFAULT_PF_PYTHON})")
    p.add_argument("--no-pf", action="store_true", help="foxhunt alone")
    p.add_argument("--pf-seeds", type=int, help="pytorch-forecasting on the first N seeds of every dataset (default: "
                                                "all, but only the first on the simulated sample)")
    p.add_argument("--threads", type=int, default=2, help="torch threads for both models")
    p.add_argument("--workdir", type=Path, help="the runs go into a new folder here (default: the temp folder)")
    p.add_argument("--data-dir", type=Path, default=DATA, help=f"the development data (default {DATA})")
    p.add_argument("--record", action=argparse.BooleanOptionalAction, default=None,
                   help=f"append the table to {RESULTS.relative_to(REPO)} (default: yes, but not with --quick)")
    a = p.parse_args(own)
    names = [n.strip() for n in a.datasets.split(",") if n.strip()]
    unknown = [n for n in names if n not in DATASETS]
    if unknown:
        p.error(f"--datasets: unknown {', '.join(unknown)}; choose from {', '.join(DATASETS)}")
    methods = tuple(dict.fromkeys(m.strip() for m in a.calibrations.split(",") if m.strip()))
    if not methods or any(m not in METHODS for m in methods):
        p.error(f"--calibrations {a.calibrations!r}: choose from {', '.join(METHODS)}")
    seeds_text = a.seeds or ("1" if a.quick else "3")
    try:
        seeds = (tuple(int(x) for x in seeds_text.split(",") if x.strip()) if "," in seeds_text
                 else tuple(range(int(seeds_text))))
    except ValueError:
        seeds = ()
    if not seeds or a.threads < 1:
        p.error(f"--seeds {seeds_text!r} names no seed" if not seeds else "--threads must be at least 1")
    train = (*shlex.split(a.train_args), *rest)
    missing = missing_quantiles(quantiles_flag(train) or QUANTILES)
    if missing:
        p.error(f"--quantiles: the table scores {', '.join(map(str, QUANTILES))}; add {', '.join(map(str, missing))}")
    pf_python = None if a.no_pf else a.pf_python or (str(DEFAULT_PF_PYTHON) if DEFAULT_PF_PYTHON.exists() else None)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    work = (a.workdir or Path(tempfile.gettempdir())) / f"foxhunt-quality-{stamp}-{os.getpid()}"  # made by main
    return Settings(tuple(DATASETS[n] for n in names), seeds, a.quick, train, methods,
                    a.threads, work, a.data_dir, pf_python, a.pf_seeds, not a.quick if a.record is None else a.record,
                    shlex.join(["python", "benchmarks/quality.py", *argv]))


def quantiles_flag(train: tuple[str, ...]) -> list[float] | None:
    """The levels of the last `--quantiles` among the train flags, the one train takes (None: none given, or not
    numbers: train says why)."""
    given = [x.split("=", 1)[1] if x.startswith("--quantiles=") else train[i + 1]
             for i, x in enumerate(train) if x.startswith("--quantiles=") or (x == "--quantiles" and i + 1 < len(train))]
    try:
        return [float(v) for v in given[-1].split(",") if v.strip()] if given else None
    except ValueError:
        return None


def data_path(ds: Dataset, data_dir: Path) -> Path | None:
    """The dataset's file, or None for the bundled sample."""
    return None if ds.file is None else data_dir / ds.file


def skip_note(ds: Dataset, data_dir: Path) -> str | None:
    """Why the dataset cannot run here (its file is not in this checkout), or None."""
    path = data_path(ds, data_dir)
    if path is not None and not path.exists():
        return f"{ds.name}: skipped, {path} not found (development data, not in the repository)"
    return None


# ------------------------------------------------------------------------------------------- foxhunt, in-process
@dataclass(frozen=True)
class Took:
    """Wall and CPU seconds of a step (CPU: every thread's; on a shared machine it moves less than the wall)."""

    wall: float
    cpu: float

    def __str__(self) -> str:
        return f"{self.wall:.0f} s ({self.cpu:.0f} s CPU)"


def children_cpu() -> float:
    import resource

    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def foxhunt(argv: list[str], log_path: Path) -> Took:
    """Run one foxhunt command in-process, its console into `log_path`. Stops the benchmark with the log's tail when
    the command fails."""
    from foxhunt.cli import main

    t0, c0 = time.perf_counter(), time.process_time() + children_cpu()  # children: backtest --jobs' workers
    with open(log_path, "a", encoding="utf-8") as out, redirect_stdout(out), redirect_stderr(out):
        print(f"$ foxhunt {shlex.join(argv)}", flush=True)
        code = main(argv)
    if code != 0:
        tail = "\n".join(log_path.read_text(encoding="utf-8").splitlines()[-12:])
        raise SystemExit(f"foxhunt {argv[0]} exited {code} (log {log_path}):\n{tail}")
    return Took(time.perf_counter() - t0, time.process_time() + children_cpu() - c0)


def files(ds: Dataset, s: Settings) -> list[str]:
    path = data_path(ds, s.data_dir)
    return [] if path is None else ["--parquet-file", str(path)]


def train_command(ds: Dataset, seed: int, s: Settings, run_dir: Path) -> list[str]:
    """`foxhunt train` as a user types it: the dataset's file and flags, --quick's, then the candidate's own."""
    return ["train", *files(ds, s), *ds.flags, *s.mode_args, "--seed", str(seed), "--threads", str(s.threads),
            "--no-progress", "--quiet", "--run-dir", str(run_dir)]


def backtest_command(ds: Dataset, seed: int, s: Settings, out_dir: Path) -> list[str]:
    """`foxhunt backtest`: yearly folds ending with the data (the last QUICK_FOLDS with --quick), each validated on
    the year before (the default --val-length), with every train flag of `train_command`."""
    folds = QUICK_FOLDS if s.quick else ds.folds
    return ["backtest", "--folds", str(folds), *BACKTEST, "--out-dir", str(out_dir),
            *train_command(ds, seed, s, out_dir)[1:-2]]  # train's flags without --run-dir, which each fold sets


def eval_dir(out: Path, method: str) -> Path:
    """Where `foxhunt evaluate --calibration method` writes (metrics.json, forecasts.parquet)."""
    return out / f"eval-{method}"


def fox_split(ds: Dataset, seed: int, s: Settings, out: Path) -> dict[str, Score]:
    """`foxhunt train`, then `foxhunt evaluate --calibration M` (the origins after validation) for each method;
    each method's Score, compared with the default method's forecasts on the same rows."""
    run, logs = out / "run", out / "foxhunt.log"
    train_s = foxhunt(train_command(ds, seed, s, run), logs)
    results = {}
    for method in s.calibrations:
        eval_s = foxhunt(["evaluate", "--model", str(run), *files(ds, s), "--calibration", method, "--out-dir",
                          str(eval_dir(out, method)), "--threads", str(s.threads)], logs)
        log(f"  foxhunt {'train ' + str(train_s) + ', ' if not results else ''}evaluate --calibration {method} "
            f"{eval_s}")
        results[method] = read(eval_dir(out, method) / "metrics.json")
    forecasts = {m: eval_dir(out, m) / "forecasts.parquet" for m in s.calibrations}
    arrays, names = forecast_arrays(forecasts[s.calibrations[0]])
    models = {m: arrays["model"] if k == 0 else aligned(arrays, names, forecasts[m])
              for k, m in enumerate(s.calibrations)}
    notes = {s.calibrations[0]: [epochs_note([fox_epochs(run)])]}
    first_pairs = results[s.calibrations[0]]["model"]["overall"]["n"]
    for m in s.calibrations[1:]:
        pairs = results[m]["model"]["overall"]["n"]
        if pairs != first_pairs:
            notes[m] = [f"NOT the same rows: scored on {pairs:,} (origin, step) pairs, {s.calibrations[0]} on "
                        f"{first_pairs:,}"]
    n_params = read(run / "config.json")["n_params"]
    return {m: score_of(against_default(results[m], m, {**arrays, "model": models[m]}, names, models),
                        results[m]["period"]["origins"], train_s.wall, n_params, notes.get(m, []))
            for m in s.calibrations}


def against_default(result: dict[str, Any], method: str, arrays: dict[str, np.ndarray], names: list[str],
                    models: dict[str, np.ndarray]) -> dict[str, Any]:
    """`result` with the method's forecasts (`arrays`) compared with the default method's (`models`) on the same
    rows, as one more entry of its `comparisons` (VS_DEFAULT); as it was for the default itself, or without it."""
    if method == DEFAULT_METHOD or DEFAULT_METHOD not in models:
        return result
    return {**result, "comparisons": {**result.get("comparisons", {}),
                                      VS_DEFAULT: versus(arrays, names, models[DEFAULT_METHOD])}}


def predict_fold(ds: Dataset, s: Settings, fold: dict[str, Any], method: str, out: Path) -> Path:
    """A backtest fold's saved model forecast on its test year with `method` (`foxhunt predict`); the parquet."""
    path = out / "calibration" / f"fold-{fold['index']:02d}-{method}.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    end = ["--end", fold["test_end"]] if fold["test_end"] else []
    foxhunt(["predict", "--model", fold["run_dir"], *files(ds, s), "--start", fold["test_start"], *end,
             "--calibration", method, "--threads", str(s.threads), "--out", str(path)], out / "foxhunt.log")
    return path


def fox_backtest(ds: Dataset, seed: int, s: Settings, out: Path) -> dict[str, Score]:
    """`foxhunt backtest` (`backtest_command`), read from its backtest.json for the method it ran; each other
    method's forecasts of every fold's test year (`predict_fold`, no training) scored by the backtest's summary on
    its rows; each method's Score."""
    wall = foxhunt(backtest_command(ds, seed, s, out / "bt"), out / "foxhunt.log")
    bt = read(out / "bt" / "backtest.json")
    folds = bt["folds"]
    log(f"  foxhunt backtest ({len(folds)} folds) {wall}")
    ran = {f["calibration"] for f in folds}
    results, arrays, notes = {}, {}, {}
    for m in s.calibrations:
        if ran == {m}:
            arrays[m], results[m] = fold_arrays(out / "bt", folds), {**bt["overall"], "verdict": bt["verdict"]}
            continue
        t0 = time.perf_counter()
        arrays[m] = fold_arrays(out / "bt", folds, [predict_fold(ds, s, f, m, out) for f in folds])
        results[m] = fold_result(arrays[m], folds)
        log(f"  foxhunt predict --calibration {m}, {len(folds)} folds: {time.perf_counter() - t0:.0f} s")
        missing = missing_pairs(arrays[m])
        if missing:
            notes[m] = [f"NOT the same rows: no forecast for {missing:,} (origin, step) pairs the backtest scored"]
    first, last = folds[0], folds[-1]
    n_params = read(Path(first["run_dir"]) / "config.json")["n_params"]
    span = f"{first['test_start'][:10]} .. {last['test_end'][:10] if last['test_end'] else 'the last bar'}"
    notes.setdefault(s.calibrations[0], []).insert(0, f"{len(folds)} yearly folds tested {span}; " + epochs_note(
        [fox_epochs(Path(f["run_dir"])) for f in folds]))
    names = folds[-1]["series_names"]
    models = {m: a["model"] for m, a in arrays.items()}
    origins = sum(f["origins"] for f in folds)
    return {m: score_of(against_default(results[m], m, arrays[m], names, models), origins, wall.wall, n_params,
                        notes.get(m, [])) for m in s.calibrations}


# ------------------------------------------------------------------------------------------ pytorch-forecasting
class PFFailed(RuntimeError):
    """pytorch-forecasting's process failed: noted in the table, foxhunt's rows kept."""


def pf_call(s: Settings, bars: Path, runs: list[dict[str, Any]], seed: int, out: Path) -> list[dict[str, Any]]:
    """Train and forecast each run in one pytorch-forecasting process; each run's JSON."""
    spec = out / "pf-runs.json"
    spec.write_text(json.dumps(runs, indent=1), encoding="utf-8")
    cmd = [s.pf_python, str(PF_FORECAST), "--data", str(bars), "--runs", str(spec), "--threads", str(s.threads),
           "--seed", str(seed)]
    t0, c0 = time.perf_counter(), children_cpu()
    with open(out / "pf.log", "w", encoding="utf-8") as err:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=err, text=True, cwd=REPO)
    log(f"  {PF} process {Took(time.perf_counter() - t0, children_cpu() - c0)}")
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        last = next((line for line in reversed((out / "pf.log").read_text(encoding="utf-8").splitlines())
                     if line.strip()), "no output")
        raise PFFailed(f"exit {proc.returncode}, {last.strip()} (log {out / 'pf.log'})")
    (out / "pf-result.json").write_text(lines[-1], encoding="utf-8")
    return json.loads(lines[-1])["runs"]


def size_note(fox: int, runs: list[dict[str, Any]]) -> str:
    """PF's size against foxhunt's, and its epochs (each fold's)."""
    pf = runs[0]
    gap = pf["n_params"] / fox - 1
    text = (f"hidden {pf['hidden_size']}, {pf['n_params']:,} parameters against foxhunt's {fox:,} ({gap:+.0%}); "
            + epochs_note([(r["epochs_run"], r["epochs_cap"], r["best_epoch"]) for r in runs]))
    return text + (f"; sizes more than {SIZE_GAP:.0%} apart" if abs(gap) > SIZE_GAP else "")


def pf_split(ds: Dataset, seed: int, s: Settings, out: Path) -> Score:
    """pytorch-forecasting on the run's split, scored by `foxhunt evaluate --forecasts` against the same run."""
    run = out / "run"
    summary, plan = read(run / "data_summary.json"), pf_plan(run)
    bars = export_bars(run, out.parent / "bars.parquet", out / "foxhunt.log")
    spec = {**plan, "train_end": summary["train_end"], "val_end": summary["val_end"],
            "forecast_start": summary["val_end"], "out": str(out / "pf.parquet")}
    res = pf_call(s, bars, [spec], seed, out)[0]
    eval_s = foxhunt(["evaluate", "--model", str(run), *files(ds, s), "--forecasts", spec["out"], "--out-dir",
                      str(out / "pf-eval"), "--threads", str(s.threads)], out / "foxhunt.log")
    train_s = res["prep_s"] + res["fit_s"]
    log(f"  {PF} data + fit {Took(train_s, res['cpu_s'])}, evaluate --forecasts {eval_s}")
    m, fox = read(out / "pf-eval" / "metrics.json"), read(eval_dir(out, s.calibrations[0]) / "metrics.json")
    notes = [size_note(plan["match_params"], [res])]
    pairs = (m["model"]["overall"]["n"], fox["model"]["overall"]["n"])
    if pairs[0] != pairs[1]:
        notes.append(f"NOT the same rows: scored on {pairs[0]:,} (origin, step) pairs, foxhunt on {pairs[1]:,}")
    return score_of(m, m["period"]["origins"], train_s, res["n_params"], notes)


def pf_backtest(ds: Dataset, seed: int, s: Settings, out: Path) -> Score:
    """pytorch-forecasting on every fold of the backtest, scored by the backtest's own summary on its rows."""
    folds = read(out / "bt" / "backtest.json")["folds"]
    bars = export_bars(Path(folds[0]["run_dir"]), out.parent / "bars.parquet", out / "foxhunt.log")
    runs = [{**pf_plan(Path(f["run_dir"])), "train_end": f["val_start"], "val_end": f["test_start"],
             "forecast_start": f["test_start"], "forecast_end": f["test_end"],
             "out": str(out / f"pf-fold-{f['index']:02d}.parquet")} for f in folds]
    res = pf_call(s, bars, runs, seed, out)
    arrays = fold_arrays(out / "bt", folds, [Path(r["out"]) for r in res])
    train_s = sum(r["prep_s"] + r["fit_s"] for r in res)
    log(f"  {PF} {len(res)} folds, data + fit {Took(train_s, sum(r['cpu_s'] for r in res))}")
    notes = [size_note(runs[0]["match_params"], res)]
    missing = missing_pairs(arrays)
    if missing:
        notes.append(f"NOT the same rows: no forecast for {missing:,} (origin, step) pairs foxhunt was scored on")
    return score_of(fold_result(arrays, folds), sum(f["origins"] for f in folds), train_s, res[0]["n_params"], notes)


# --------------------------------------------------------------------------------------------------- the run
def pf_seeds(ds: Dataset, s: Settings) -> tuple[int, ...]:
    """The seeds pytorch-forecasting runs on for this dataset: --pf-seeds, or the dataset's own limit."""
    n = s.pf_seeds if s.pf_seeds is not None else ds.pf_seeds
    return s.seeds if n is None else s.seeds[:n]


def run(s: Settings) -> tuple[list[Row], list[str]]:
    """Every dataset and seed, foxhunt then pytorch-forecasting; the rows and the notes (skips)."""
    rows: list[Row] = []
    notes: list[str] = []
    if s.pf_python is None:
        notes.append(f"{PF}: skipped, no --pf-python and no {DEFAULT_PF_PYTHON} (benchmarks/"
                     "vs_pytorch_forecasting.py says how to make that virtualenv)")
    for ds in s.datasets:
        skip = skip_note(ds, s.data_dir)
        if skip:
            notes.append(skip)
            log(skip)
            continue
        fox = {m: Row(ds.name, fox_label(m), simulated=ds.simulated, calibration=m) for m in s.calibrations}
        pf = Row(ds.name, PF, simulated=ds.simulated)
        for seed in s.seeds:
            out = s.work / ds.name / f"seed-{seed}"
            out.mkdir(parents=True, exist_ok=True)
            log(f"{ds.name}, seed {seed} ({out})")
            for m, score in (fox_backtest if ds.folds else fox_split)(ds, seed, s, out).items():
                fox[m].scores.append(score)
            probe = Path(read(out / "bt" / "backtest.json")["folds"][0]["run_dir"]) if ds.folds else out / "run"
            why = pf_unfit(probe)
            if s.pf_python and why is None and seed in pf_seeds(ds, s):
                try:
                    pf.scores.append((pf_backtest if ds.folds else pf_split)(ds, seed, s, out))
                except PFFailed as e:  # foxhunt's rows stand without it
                    log(f"  {PF} failed: {e}")
                    notes.append(f"{ds.name}: {PF} failed on seed {seed}: {e}")
            elif why and why not in notes:
                notes.append(f"{ds.name}: {why}")
        chosen = pf_seeds(ds, s)
        if s.pf_python and len(chosen) < len(s.seeds) and not any(n.startswith(f"{ds.name}: {PF} left") for n in notes):
            which = f"seed {', '.join(map(str, chosen))} only" if chosen else "not run"
            notes.append(f"{ds.name}: {PF} {which}, to keep the run's time (--pf-seeds N for more)")
        rows += [r for r in (*fox.values(), pf) if r.scores]
    return rows, notes


def report(s: Settings, rows: list[Row], notes: list[str], started: datetime, wall: float, load: float) -> str:
    mode = f"quick ({shlex.join(QUICK_TRAIN)}, {QUICK_FOLDS} SPX folds)" if s.quick else "full"
    head = (f"### {started:%Y-%m-%d %H:%M} UTC, commit {git_commit()}, {mode}, seeds "
            f"{', '.join(map(str, s.seeds))}; {wall / 60:.1f} min")
    pf = (f"- {PF}: GroupNormalizer per symbol, early stopping on the validation loss within foxhunt's epoch cap "
          "and patience, the best epoch kept, the hidden size with the closest parameter count, its own quantiles "
          "(uncalibrated); every backtest fold; scored on foxhunt's rows by foxhunt's scorer") if s.pf_python else None
    lines = [head, "", f"- command: `{s.command}`", f"- machine: {machine(load)}",
             "- datasets: " + "; ".join(f"{d.name} ({d.about})" for d in s.datasets),
             f"- foxhunt train options: {shlex.join(s.mode_args) or 'the defaults'}"
             + "".join(f"; {d.name} also {shlex.join(d.flags)}" for d in s.datasets if d.flags),
             "- columns: means over the seeds; a DM p-value is the largest over the seeds (two-sided test of equal "
             "pinball loss, pooled over the panel); series won: against the best baseline, the range over the seeds; "
             f"train s: the wall time of `foxhunt train` (the whole `foxhunt backtest`) and of {PF}'s data and "
             "`Trainer.fit` (every fold's)",
             f"- foxhunt calibration: {', '.join(s.calibrations)}, each on the same trained models (`evaluate "
             "--calibration M`; SPX: each fold's model forecast on its test year by `predict --calibration M` and "
             f"scored by the backtest's summary on its rows); {DEFAULT_METHOD} is foxhunt's default",
             *([pf] if pf else []), *(f"- {n}" for n in notes), "", tables(rows, s.seeds)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from foxhunt.allocator import process_settings

    process_settings()  # foxhunt's OpenMP setting, here and in pytorch-forecasting's processes: the same waiting
    s = parse_args(list(sys.argv[1:] if argv is None else argv))
    s.work.mkdir(parents=True, exist_ok=True)
    log(f"runs in {s.work}; foxhunt options: {shlex.join(s.mode_args) or 'the defaults'}")
    started, t0, load = datetime.now(UTC), time.perf_counter(), os.getloadavg()[0]
    rows, notes = run(s)
    text = report(s, rows, notes, started, time.perf_counter() - t0, load)
    print(text)
    if s.record and rows:
        record(text)
        log(f"appended to {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
