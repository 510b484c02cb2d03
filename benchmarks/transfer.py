"""Transfer from a futures panel to a market with little history: S&P 500 daily with three years of training,
from scratch against the model trained on the 45 Chinese commodity futures, applied as it is and fine-tuned with
`foxhunt train --init-from` (issue 46 item 6).

    python benchmarks/transfer.py [--seeds 3 | --seeds 0,2] [--threads 2] [--workdir DIR] [--data-dir DIR] [--no-long]

Per seed S, every option at its default but these (the commands a user types, each its own process):
- panel: `foxhunt train --parquet-file cn_futures_daily.parquet --seed S` (the automatic split);
- scratch: `foxhunt train --parquet-file spx_daily.parquet --since 2013-01-01 --train-end 2016-01-01
  --val-end 2017-01-01 --seed S`: three years of training (2013-2015, 719 windows), 2016 for validation;
- zero-shot: the panel's model as it is (SPX is a series it never saw: the unknown-series row, pooled scalers);
- fine-tune: scratch's command with `--init-from` the panel's run;
- long (reference, --no-long drops it): S&P 500 from 1999, the same validation year: what 17 years give.
Each is scored by `foxhunt evaluate --parquet-file spx_daily.parquet --since 2013-01-01 --start 2017-01-01`: the
same 502 origins of 2017-2018 (1,503 pairs), its default (fixed) calibration. The baselines fit on the bars before
the model's training cut (evaluate's rule): 2013-2015 for scratch and fine-tune, 2013 to the panel's cut (mid 2015)
for zero-shot, 1999-2015 for long, so their q-risks differ a little between rows.

Prints one markdown table: per arm the q-risk p10 / p50 / p90 (the mean over the seeds), the skill against garch_t
and har at p10 / p90 from evaluate's metrics.json (the largest Diebold-Mariano p over the seeds), and the paired
comparison with scratch on the same rows (benchmarks/versus.py's: skill 1 - arm / scratch, DM p, the largest over
the seeds; then seed by seed at p10 / p90). Runs finished in --workdir are reused, so a stopped run continues where it stopped. About 25 minutes
on 2 quiet cores for 3 seeds, most of it the panel.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from versus import KEYS, forecasts, p_text  # noqa: E402
from versus import paired as paired_with  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"
SPLIT = ("--since", "2013-01-01", "--train-end", "2016-01-01", "--val-end", "2017-01-01")
LONG = ("--train-end", "2016-01-01", "--val-end", "2017-01-01")
SCORE = ("--since", "2013-01-01", "--start", "2017-01-01")
ARMS = ("scratch", "zero-shot", "fine-tune", "long")


def foxhunt(args: list[str], log: Path) -> None:
    """One foxhunt command in its own process, its console in `log`; a failure stops the benchmark."""
    cmd = [sys.executable, "-m", "foxhunt", *args]
    print("$ " + " ".join(cmd[2:]), file=sys.stderr, flush=True)
    with log.open("w") as out:
        if subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=os.environ).returncode:
            sys.exit(f"failed: {' '.join(cmd)}; see {log}")


def trained(run: Path) -> bool:
    return (run / "model.safetensors").exists() and (run / "calibration.json").exists()


def train(run: Path, files: Path, extra: tuple[str, ...], seed: int, threads: int) -> None:
    if trained(run):
        return
    if run.exists():
        import shutil

        shutil.rmtree(run)
    run.parent.mkdir(parents=True, exist_ok=True)
    foxhunt(["train", "--parquet-file", str(files), *extra, "--seed", str(seed), "--run-dir", str(run),
             "--threads", str(threads), "--no-progress"], run.parent / f"{run.name}.log")


def evaluate(run: Path, out: Path, spx: Path, threads: int) -> dict:
    if not (out / "metrics.json").exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        foxhunt(["evaluate", "--model", str(run), "--parquet-file", str(spx), *SCORE, "--out-dir", str(out),
                 "--threads", str(threads)], out.parent / f"{out.name}.log")
    return json.loads((out / "metrics.json").read_text())


def arm_runs(work: Path, seed: int, spx: Path, panel_file: Path, threads: int, long: bool) -> dict[str, Path]:
    """Train what seed `seed` needs; {arm: the run directory scored for it}."""
    s = f"seed-{seed}"
    panel, scratch, fine, full = (work / a / s for a in ("panel", "scratch", "fine-tune", "long"))
    train(panel, panel_file, (), seed, threads)
    train(scratch, spx, SPLIT, seed, threads)
    train(fine, spx, (*SPLIT, "--init-from", str(panel)), seed, threads)
    runs = {"scratch": scratch, "zero-shot": panel, "fine-tune": fine}
    if long:
        train(full, spx, LONG, seed, threads)
        runs["long"] = full
    return runs


def baseline_text(metrics: list[dict], name: str) -> str:
    """The skill against baseline `name` at p10 / p90 (mean over seeds) and the largest DM p-value over them."""
    cells = []
    for q in ("0.1", "0.9"):
        skill = np.mean([m["comparisons"][name]["skill"][q] for m in metrics])
        p = max(m["comparisons"][name]["dm"][q]["p_value"] or 1.0 for m in metrics)
        cells.append(f"{skill:+.1%} ({p_text(p)})")
    return " / ".join(cells)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", default="3", help="a count (3: seeds 0, 1, 2) or a comma list (0, for seed 0)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/foxhunt-transfer"))
    ap.add_argument("--data-dir", type=Path, default=DATA)
    ap.add_argument("--no-long", action="store_true", help="skip the 1999-2015 reference arm")
    a = ap.parse_args(argv)
    spx, panel_file = a.data_dir / "spx_daily.parquet", a.data_dir / "cn_futures_daily.parquet"
    metrics: dict[str, list[dict]] = {arm: [] for arm in ARMS}
    versus: dict[str, list[dict]] = {arm: [] for arm in ARMS}
    seeds = [int(x) for x in a.seeds.split(",") if x.strip()] if "," in a.seeds else range(int(a.seeds))
    for seed in seeds:
        runs = arm_runs(a.workdir, seed, spx, panel_file, a.threads, not a.no_long)
        evals = {arm: a.workdir / "scores" / arm / f"seed-{seed}" / "eval" for arm in runs}  # as versus.py reads
        for arm, run in runs.items():
            metrics[arm].append(evaluate(run, evals[arm], spx, a.threads))
        reference = forecasts(evals["scratch"].parent)
        for arm in runs:
            if arm != "scratch":
                versus[arm].append(paired_with(forecasts(evals[arm].parent), reference))
    print("| arm | seeds | q-risk p10 / p50 / p90 | vs garch_t p10 / p90 (p) | vs har p10 / p90 (p) "
          "| vs scratch, paired: skill p10 / p50 / p90 | DM p p10 / p50 / p90 | seed by seed: skill p10 / p90 (p) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for arm in (arm for arm in ARMS if metrics[arm]):
        ms = metrics[arm]
        qrisk = " / ".join(f"{np.mean([m['model']['overall']['q_risk'][q] for m in ms]):.4f}" for q in KEYS)
        if versus[arm]:
            rs = versus[arm]
            skill = " / ".join(f"{np.mean([r['skill'][q] for r in rs]):+.1%}" for q in KEYS)
            p = " / ".join(p_text(max((r["dm"][q]["p_value"] or 1.0) for r in rs)) for q in KEYS)
            each = ", ".join(" / ".join(f"{r['skill'][q]:+.1%} ({p_text(r['dm'][q]['p_value'])})" for q in ("0.1", "0.9"))
                             for r in rs)
        else:
            skill, p, each = "(reference)", "-", "-"
        print(f"| {arm} | {len(ms)} | {qrisk} | {baseline_text(ms, 'garch_t')} | {baseline_text(ms, 'har')} "
              f"| {skill} | {p} | {each} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
