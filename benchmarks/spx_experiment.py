"""Real-data check ("Forecasts users can trust"): train on S&P 500 daily bars before 2014, select on 2014-2015 and
score from 2016 against the three baselines, for both targets, printing the q-risk tables.

    python benchmarks/spx_experiment.py [--out /tmp/spx_experiment] [--parquet ../shared/data/spx_daily.parquet]

The settings below were chosen on the 2014-2015 validation period only; they are the same as the README's
`foxhunt train` flags. One CPU thread; about 3-4 minutes per target on a laptop core.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import torch

from foxhunt import settings
from foxhunt.evaluate.run import evaluate_run
from foxhunt.evaluate.table import format_results
from foxhunt.train.session import train_run

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "spx_daily.parquet"
COMMON = {
    "train_end": "2014-01-01",
    "val_end": "2016-01-01",
    "horizon": 5,
    "scaling": "volatility",
    "encoder_length": 63,
    "hidden_size": 32,
    "epochs": 12,
    "patience": 4,
    "batch_size": "64",
    "threads": 1,
    "progress": False,
}
# target -> the options that differ (flag names with underscores)
CONFIGS = {
    "log_return": {"vol_estimator": "range", "vol_halflife": 5.0, "vol_features": False},
    "log_range": {"vol_estimator": "range", "vol_halflife": 5.0, "vol_features": True},
}


def run(target: str, parquet: Path, out: Path) -> None:
    v = {**COMMON, **CONFIGS[target], "target": target, "run_dir": str(out / target)}
    data_cfg = settings.data_config(v, (str(parquet),))
    train_run(data_cfg, settings.model_config(v, data_cfg), settings.train_config(v))
    for name, start, end in (
        ("validation 2014-2015", "2014-01-01", "2015-12-31"),
        ("test 2016+", "2016-01-01", None),
    ):
        sub = "val" if end else "test"
        result = evaluate_run(out / target, (str(parquet),), out / target / sub, start, end, device="cpu")
        print(f"\n== {target}, {name}\n{format_results(result)}", flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--parquet", type=Path, default=DATA)
    p.add_argument("--out", type=Path, default=Path("/tmp/spx_experiment"))
    p.add_argument("--target", choices=[*CONFIGS, "both"], default="both")
    a = p.parse_args()
    torch.set_num_threads(1)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    for target in CONFIGS if a.target == "both" else (a.target,):
        run(target, a.parquet, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
