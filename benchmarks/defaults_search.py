"""Choose foxhunt's default options on held-out time, then report them on the test period (issue 11).

For each candidate (a set of `foxhunt train` flags) and seed this runs the two commands a user runs, as subprocesses:

    foxhunt train [-f FILE] [split flags] FLAGS --seed S --run-dir OUT/<data>/<candidate>-s<S>
    foxhunt evaluate --model RUN --out-dir RUN/<period> --start A [--end B]  (period: val, then test)

and prints one table per data set: the model's and every baseline's q-risk at p10 / p50 / p90 and the model's skill
against the strongest baseline, on validation (where the choice is made) and on test (reported, never chosen on).

- sample: the bundled ES 1-minute sample with the default split (train / validation / test = 60 / 20 / 20 % of time);
  the validation and test periods are read from the run's data_summary.json.
- spx: ../shared/data/spx_daily.parquet, train before 2014, validation 2014-2015, test 2016-2018.

    python benchmarks/defaults_search.py --data sample --candidates default,vol_range --seeds 0,1 [--jobs 2]

Each run uses one CPU thread; --jobs runs that many at a time. Results are cached per run directory
(RUN/<period>/metrics.json), so a rerun only prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPX = ROOT.parent / "shared" / "data" / "spx_daily.parquet"
DATASETS = {
    "sample": {"train": [], "periods": None},
    "spx": {
        "train": ["-f", str(SPX), "--train-end", "2014-01-01", "--val-end", "2016-01-01"],
        "periods": {"val": ("2014-01-01", "2015-12-31"), "test": ("2016-01-01", None)},
    },
}
# name -> extra `foxhunt train` flags (on top of the current defaults)
CANDIDATES = {
    "default": [],
    "series": ["--scaling", "series"],
    "vol_returns": ["--scaling", "volatility", "--vol-estimator", "returns", "--vol-halflife", "20"],
    "vol_range": ["--scaling", "volatility", "--vol-estimator", "range", "--vol-halflife", "5"],
    "vol_range20": ["--scaling", "volatility", "--vol-estimator", "range", "--vol-halflife", "20"],
    "vol_range_feat": ["--scaling", "volatility", "--vol-estimator", "range", "--vol-halflife", "5",
                       "--vol-features"],
    "no_season": ["--no-seasonality"],
    "unweighted": ["--loss-weight", "none"],
    "weighted": ["--loss-weight", "scale"],
    "h32": ["--hidden-size", "32"],
    "e6": ["--epochs", "6"],
    "spx_readme": ["--scaling", "volatility", "--vol-estimator", "range", "--vol-halflife", "5",
                   "--encoder-length", "63", "--hidden-size", "32", "--epochs", "12", "--patience", "4",
                   "--batch-size", "64"],
}
QS = ("0.1", "0.5", "0.9")


def flags(cand: str) -> list[str]:
    """A candidate's flags; "a+b" combines candidates a and b."""
    return [f for part in cand.split("+") for f in CANDIDATES[part]]


def foxhunt(*args: str) -> None:
    # FOXHUNT_SRC: run a frozen copy of the sources (so that editing the tree does not change runs in flight)
    env = {**os.environ, "PYTHONPATH": os.environ.get("FOXHUNT_SRC", str(ROOT / "src")), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "foxhunt", *args]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr[-2000:]}")


def periods(data: str, run: Path) -> dict[str, tuple[str, str | None]]:
    fixed = DATASETS[data]["periods"]
    if fixed:
        return fixed
    s = json.loads((run / "data_summary.json").read_text())
    train_end, val_end = s["train_end"][:19], s["val_end"][:19]
    return {"val": (train_end, val_end), "test": (val_end, None)}


def one(data: str, cand: str, seed: int, out: Path) -> dict:
    run = out / data / f"{cand}-s{seed}"
    files = DATASETS[data]["train"][:2] if data != "sample" else []
    if not (run / "model.json").exists() and not (run / "test" / "metrics.json").exists():
        foxhunt("train", *DATASETS[data]["train"], *flags(cand), "--seed", str(seed), "--threads", "1",
                "--no-progress", "--run-dir", str(run))
    res = {}
    for name, (start, end) in periods(data, run).items():
        m = run / name / "metrics.json"
        if not m.exists():
            foxhunt("evaluate", "--model", str(run), "--out-dir", str(run / name), "--start", start,
                    *(["--end", end] if end else []), *files, "--threads", "1")
        res[name] = json.loads(m.read_text())
    return {"data": data, "candidate": cand, "seed": seed, **res}


def qrisk(block: dict) -> list[float]:
    qr = block["overall"]["q_risk"]
    return [float(next(v for k, v in qr.items() if float(k) == float(q))) for q in QS]


def table(rows: list[dict], period: str) -> str:
    lines = [f"{'data':<7}{'candidate':<16}{'seed':>5}  {'source':<20}{'p10':>8}{'p50':>8}{'p90':>8}"
             f"{'skill p10':>11}{'skill p90':>11}"]
    for r in rows:
        res = r[period]
        model = qrisk(res["model"])
        base = {k: qrisk(v) for k, v in res["baselines"].items()}
        best = {i: min(b[i] for b in base.values()) for i in (0, 2)}
        sk = [1 - model[i] / best[i] for i in (0, 2)]
        mark = "BEATS ALL" if min(sk) > 0 else ""
        lines.append(f"{r['data']:<7}{r['candidate']:<16}{r['seed']:>5}  {'model':<20}"
                     + "".join(f"{x:8.4f}" for x in model) + f"{sk[0]:11.1%}{sk[1]:11.1%}  {mark}")
        for k, b in base.items():
            lines.append(f"{'':<28}  {k:<20}" + "".join(f"{x:8.4f}" for x in b))
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", choices=[*DATASETS, "both"], default="sample")
    p.add_argument("--candidates", default="default")
    p.add_argument("--seeds", default="0")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--out", type=Path, default=Path("/tmp/foxhunt_defaults"))
    a = p.parse_args()
    datas = list(DATASETS) if a.data == "both" else [a.data]
    jobs = [(d, c, int(s)) for d in datas for c in a.candidates.split(",") for s in a.seeds.split(",")]
    with ThreadPoolExecutor(a.jobs) as pool:
        rows = list(pool.map(lambda j: one(*j, a.out), jobs))
    for period in ("val", "test"):
        print(f"\n== {period} (q-risk, lower is better; skill vs the strongest baseline per quantile)")
        print(table(rows, period), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
