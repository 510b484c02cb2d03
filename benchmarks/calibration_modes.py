"""Which units should the conformal shift be in? Fit it on a run's validation split both ways and score the test
split (windows after --val-end): p10-p90 coverage and q-risk per quantile, uncalibrated / raw shift / scaled shift.

    python benchmarks/calibration_modes.py RUN_DIR [RUN_DIR ...] [--test-end 2010-01-01]

Each run needs a test split: the default one (the last --test-fraction of time), or --train-end with --val-end. The
data are prepared exactly as in training (the run's own model.json options and files). One table per run.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import torch

from foxhunt.data.prepare import prepare_data
from foxhunt.evaluate.metrics import q_risk
from foxhunt.model.calibration import MODES, Calibration, coverage_summary, outer_label
from foxhunt.train.calibrate import forecast_windows
from foxhunt.train.checkpoint import load_model


def compare(run_dir: str, test_end: str | None = None) -> str:
    lm = load_model(run_dir, "cpu", calibration=False)
    data = prepare_data(lm.data_cfg)
    if len(data.splits["test"]) == 0:
        return f"{run_dir}: no test split (train with --test-fraction above 0, or --val-end)"
    qs = lm.model_cfg.quantiles
    val = forecast_windows(lm.model, data.windows, data.splits["val"], 1024, torch.device("cpu"))
    test = data.splits["test"]
    if test_end:  # only windows whose last forecast bar is before test_end
        test = test[data.windows.target_ns(test)[:, -1] < int(np.datetime64(test_end, "ns").astype(np.int64))]
    y, q, scale, origin = forecast_windows(lm.model, data.windows, test, 1024, torch.device("cpu"))
    label = outer_label(qs)
    head = f"{'forecasts':<14}{label + ' val':>14}{label + ' test':>14}" + "".join(f"{'qrisk p%g' % (x * 100):>12}"
                                                                                 for x in qs)
    lines = [f"{run_dir}: {len(val[0]):,} validation windows, {len(y):,} test windows from "
             f"{np.datetime64(int(origin.min()), 'ns')}", head, "-" * len(head)]
    rows = {"uncalibrated": (val[1], q)}
    for mode in MODES:
        cal = Calibration.fit(val[0], val[1], val[2], qs, mode)
        rows[f"{mode} shift"] = (cal.apply(val[1], val[2]), cal.apply(q, scale))
    for name, (vq, tq) in rows.items():
        cov_v, cov_t = coverage_summary(val[0], vq, qs)[label], coverage_summary(y, tq, qs)[label]
        lines.append(f"{name:<14}{cov_v:>14.3f}{cov_t:>14.3f}" + "".join(f"{r:>12.4f}" for r in q_risk(y, tq, qs)))
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+")
    p.add_argument("--test-end", help="score test windows ending before this date only")
    a = p.parse_args()
    torch.set_num_threads(1)
    for r in a.runs:
        print(compare(r, a.test_end), end="\n\n", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
