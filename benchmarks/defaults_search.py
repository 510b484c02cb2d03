"""Choose foxhunt's default options on validation time, then report them on the test period (issue 11).

For each candidate (a full set of the options being chosen) and seed this runs the two commands a user runs, as
subprocesses:

    foxhunt train [-f FILE] [split flags] FLAGS --seed S --run-dir OUT/<data>/<candidate>-s<S>
    foxhunt evaluate --model RUN --out-dir RUN/<period> [--start A --end B]  (period: val, then test)

and prints one table per period: the model's (calibrated and raw) and every baseline's q-risk at p10 / p50 / p90, the
model's skill against the strongest baseline and its p10-p90 coverage. The choice is made on the validation table
(raw model: the calibration was fitted on validation, so calibrated validation scores flatter it); the test table is
reported, never chosen on.

- sample: the bundled ES 1-minute sample with the default split (train / validation / test = 60 / 20 / 20 % of time).
- spx: ../shared/data/spx_daily.parquet with the default split and --test-fraction 0.15, which puts the test period on
  2016-01-04 .. 2018-12-31 (validation 2012-2015, train 1999-2011).
The validation and test periods are read from each run's data_summary.json; the test period is evaluate's default.

    python benchmarks/defaults_search.py --data sample --candidates old,chosen --seeds 0,1,2 [--jobs 2]

Every candidate spells out all the chosen options, so its runs do not change when foxhunt's defaults do. Each run
uses one CPU thread; --jobs runs that many at a time. Results are cached per run directory (RUN/<period>/metrics.json),
so a rerun only prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPX = ROOT.parent / "shared" / "data" / "spx_daily.parquet"
DATASETS = {
    "sample": [],
    "spx": ["-f", str(SPX), "--test-fraction", "0.15"],
}
# The options chosen (issue 11), as `foxhunt train` flags; a candidate overrides some of them.
OLD = {"--scaling": "series", "--vol-estimator": "returns", "--vol-halflife": "20", "--epochs": "3",
       "--patience": "3", "--hidden-size": "16", "--loss-weight": "none"}
CHOSEN = {**OLD, "--scaling": "volatility", "--vol-estimator": "range", "--vol-halflife": "5"}
CANDIDATES = {
    "old": OLD,  # the defaults before issue 11
    "chosen": CHOSEN,  # today's defaults
    "vol_returns20": {**OLD, "--scaling": "volatility"},
    "vol_range20": {**CHOSEN, "--vol-halflife": "20"},
    "vol_range10": {**CHOSEN, "--vol-halflife": "10"},
    "vol_returns5": {**CHOSEN, "--vol-estimator": "returns"},
    "e6p2": {**CHOSEN, "--epochs": "6", "--patience": "2"},
    "e10p2": {**CHOSEN, "--epochs": "10", "--patience": "2"},
    "h32": {**CHOSEN, "--hidden-size": "32"},
    "weighted": {**CHOSEN, "--loss-weight": "scale"},
}
QS = ("0.1", "0.5", "0.9")


def flags(cand: str) -> list[str]:
    return [x for kv in CANDIDATES[cand].items() for x in kv]


def foxhunt(*args: str) -> None:
    # FOXHUNT_SRC: run a frozen copy of the sources (so that editing the tree does not change runs in flight)
    env = {**os.environ, "PYTHONPATH": os.environ.get("FOXHUNT_SRC", str(ROOT / "src")), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "foxhunt", *args]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr[-2000:]}")


def periods(run: Path) -> dict[str, list[str]]:
    """evaluate's period flags: validation (between the run's split dates), test (evaluate's default: after it)."""
    s = json.loads((run / "data_summary.json").read_text())
    return {"val": ["--start", s["train_end"][:19], "--end", s["val_end"][:19]], "test": []}


def one(data: str, cand: str, seed: int, out: Path) -> dict:
    run = out / data / f"{cand}-s{seed}"
    if not (run / "model.json").exists():
        t0 = time.monotonic()
        foxhunt("train", *DATASETS[data], *flags(cand), "--seed", str(seed), "--threads", "1", "--no-progress",
                "--run-dir", str(run))
        (run / "train_seconds.txt").write_text(f"{time.monotonic() - t0:.1f}\n")
    res = {}
    for name, period in periods(run).items():
        m = run / name / "metrics.json"
        if not m.exists():
            files = DATASETS[data][:2] if DATASETS[data][:1] == ["-f"] else []
            foxhunt("evaluate", "--model", str(run), "--out-dir", str(run / name), *period, *files, "--threads", "1")
        res[name] = json.loads(m.read_text())
    return {"data": data, "candidate": cand, "seed": seed, **res}


def qrisk(block: dict) -> list[float]:
    qr = block["overall"]["q_risk"]
    return [float(next(v for k, v in qr.items() if float(k) == float(q))) for q in QS]


def coverage(block: dict) -> float:
    return float(block["overall"]["coverage"]["p10-p90"])


def table(rows: list[dict], period: str) -> str:
    """One row per run and source; skill = 1 - model / strongest baseline at p10 and p90 (> 0: the model wins)."""
    lines = [f"{'data':<7}{'candidate':<15}{'seed':>5}  {'source':<22}{'p10':>8}{'p50':>8}{'p90':>8}{'cov':>7}"
             f"{'skill p10':>11}{'skill p90':>11}"]
    for r in rows:
        res = r[period]
        base = {k: qrisk(v) for k, v in res["baselines"].items()}
        best = [min(b[i] for b in base.values()) for i in (0, 2)]
        models = {"model": res["model"], **({"model_raw": res["model_raw"]} if "model_raw" in res else {})}
        for name, block in models.items():
            q = qrisk(block)
            sk = [1 - q[0] / best[0], 1 - q[2] / best[1]]
            mark = "  BEATS ALL" if min(sk) > 0 else ""
            lines.append(f"{r['data']:<7}{r['candidate']:<15}{r['seed']:>5}  {name:<22}"
                         + "".join(f"{x:8.4f}" for x in q) + f"{coverage(block):7.3f}"
                         + f"{sk[0]:11.1%}{sk[1]:11.1%}{mark}")
        for k, b in base.items():
            lines.append(f"{'':<27}  {k:<22}" + "".join(f"{x:8.4f}" for x in b)
                         + f"{coverage(res['baselines'][k]):7.3f}")
    return "\n".join(lines)


def summary(rows: list[dict], period: str) -> str:
    """Per data set and candidate: the mean over seeds and the seed range (min..max) of the model's p10 / p90 q-risk
    and coverage, calibrated and raw, and how many seeds beat every baseline at both p10 and p90."""
    lines = [f"{'data':<7}{'candidate':<15}{'seeds':>6}  {'source':<10}{'p10 mean (range)':>26}"
             f"{'p90 mean (range)':>26}{'coverage mean (range)':>26}  beat all"]
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        groups.setdefault((r["data"], r["candidate"]), []).append(r[period])
    for (data, cand), res in groups.items():
        for name in ("model", "model_raw"):
            if any(name not in x for x in res):
                continue
            cols = [[qrisk(x[name])[0] for x in res], [qrisk(x[name])[2] for x in res],
                    [coverage(x[name]) for x in res]]
            wins = sum(all(qrisk(x[name])[i] < min(qrisk(b)[i] for b in x["baselines"].values()) for i in (0, 2))
                       for x in res)
            lines.append(f"{data:<7}{cand:<15}{len(res):>6}  {name:<10}"
                         + "".join(f"{sum(c) / len(c):>10.4f} ({min(c):.4f}..{max(c):.4f})" for c in cols)
                         + f"  {wins}/{len(res)}")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", choices=[*DATASETS, "both"], default="sample")
    p.add_argument("--candidates", default="chosen")
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
        print(f"\n== {period}, over seeds\n{summary(rows, period)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
