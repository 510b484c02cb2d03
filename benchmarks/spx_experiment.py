"""Real-data check (issue 11): S&P 500 daily bars 1999-2018 with foxhunt's default options, the test period on
2016-2018, scored against every baseline; the two commands a user runs, called in-process:

    foxhunt train -f spx_daily.parquet --test-fraction 0.15 --target T [EXTRA] --seed S --run-dir OUT/T-sS
    foxhunt evaluate --model OUT/T-sS -f spx_daily.parquet --out-dir OUT/T-sS/test

`--test-fraction 0.15` is the default time split with the last 15% of the span as test: 2016-01-04 .. 2018-12-31
(validation 2012-2015, where early stopping and the conformal calibration are fitted; train 1999-2011). evaluate's
default period is what follows validation, so the test period is scored without a --start. The defaults themselves
were chosen on validation scores only (benchmarks/defaults_search.py); the log_range run adds --vol-features, chosen
on validation in an earlier round.

    python benchmarks/spx_experiment.py [--out /tmp/spx_experiment] [--target log_return] [--seeds 0,1,2]

One CPU thread; under a minute per run on a quiet laptop core.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from foxhunt.cli import main as foxhunt

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "spx_daily.parquet"
SPLIT = ["--test-fraction", "0.15"]  # test 2016-01-04 .. 2018-12-31
EXTRA = {"log_return": [], "log_range": ["--vol-features"]}  # target -> flags on top of the defaults


def run(target: str, seed: int, parquet: Path, out: Path) -> None:
    run_dir = out / f"{target}-s{seed}"
    files = ["--parquet-file", str(parquet)]
    code = foxhunt(["train", *files, *SPLIT, "--target", target, *EXTRA[target], "--seed", str(seed),
                    "--threads", "1", "--no-progress", "--quiet", "--run-dir", str(run_dir)])
    if code == 0:
        code = foxhunt(["evaluate", "--model", str(run_dir), *files, "--out-dir", str(run_dir / "test"),
                        "--threads", "1"])
    if code != 0:
        raise SystemExit(f"{target} seed {seed}: foxhunt exited {code}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--parquet", type=Path, default=DATA)
    p.add_argument("--out", type=Path, default=Path("/tmp/spx_experiment"))
    p.add_argument("--target", choices=[*EXTRA, "both"], default="both")
    p.add_argument("--seeds", default="0")
    a = p.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    for target in EXTRA if a.target == "both" else (a.target,):
        for seed in a.seeds.split(","):
            print(f"\n== {target}, seed {seed}, test 2016-2018", flush=True)
            run(target, int(seed), a.parquet, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
