"""Which calibration should forecasts get? Adaptive shifts (model/adaptive.py) against the fixed ones fitted on
validation (model/calibration.py) and none, on real data, and an adaptive state per series against one pooled state.

    python benchmarks/calibration_modes.py [--datasets spx,cn,kopep,sample] [--seeds 0,1] [--out DIR]
    python benchmarks/calibration_modes.py --units RUN_DIR [RUN_DIR ...] [--test-end 2010-01-01]

One model per dataset and seed is trained (`foxhunt train`, kept in DIR and reused when there), then scored with
`foxhunt evaluate --calibration none|fixed|adaptive` on its held-out period: calibration is applied at evaluate time,
so the three rows are one model's forecasts. Datasets (../shared/data, skipped with a note when absent):
  spx     S&P 500 daily: --since 2014-01-01 --train-end 2017-01-01 --val-end 2018-01-01 (train 2014-2016, validate
          2017, test 2018: the issue-44 case where the fixed shifts fitted on calm 2017 failed in 2018);
  cn      45 Chinese commodity futures, daily 2011-2017, the automatic split;
  kopep   KO and PEP, 15-minute bars, the automatic split;
  sample  the bundled sample (simulated: never evidence);
  spx1618 (not by default) S&P 500 daily, --test-fraction 0.15: test 2016-2018, docs/benchmarks.md's table.
Beside the three evaluations, one pass over the same forecasts replays adaptive calibration with a single pooled state
(every series' outcomes move one set of shifts, in time order; rate and share for the panel's validation outcomes)
and with a state per series (which must equal evaluate's adaptive row); `vs fixed` is adaptive's mean pinball loss
relative to fixed's (below 0: adaptive is better) and `dm p` the Diebold-Mariano p-values of their difference, over
all quantiles and then per quantile (mean pinball per origin, averaged over the panel at each time, Newey-West with
D - 1 lags).

--units: the older question, which units the fixed shift should be in (raw or scaled), on trained runs' test splits.
One CPU thread.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import sys
from pathlib import Path

import numpy as np
import torch

from foxhunt.cli import main as foxhunt
from foxhunt.data.prepare import prepare_data
from foxhunt.evaluate.metrics import pinball, q_risk
from foxhunt.evaluate.period import model_split
from foxhunt.evaluate.predict import prepare_for_model
from foxhunt.model.adaptive import GRID, AdaptiveCalibration, Origins, Rule, track
from foxhunt.model.calibration import MODES, Calibration, coverage_summary, outer_label
from foxhunt.train.calibrate import forecast_windows
from foxhunt.train.checkpoint import load_model

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
DATASETS = {
    "spx": (["spx_daily.parquet"], ["--since", "2014-01-01", "--train-end", "2017-01-01", "--val-end", "2018-01-01"]),
    "cn": (["cn_futures_daily.parquet"], []),
    "kopep": (["ko_pep_15min.parquet"], []),
    "sample": ([], []),  # the bundled sample: no --parquet-file
    "spx1618": (["spx_daily.parquet"], ["--test-fraction", "0.15"]),  # docs/benchmarks.md's SPX table: test 2016-2018
}
METHODS = ("none", "fixed", "adaptive")


def train(name: str, seed: int, out: Path) -> Path | None:
    files, split = DATASETS[name]
    paths = [str(DATA / f) for f in files]
    if not all(Path(p).exists() for p in paths):
        print(f"{name}: {', '.join(paths)} not found; skipped", flush=True)
        return None
    run = out / f"{name}-s{seed}"
    if not (run / "calibration.json").exists() or "adaptive" not in json.loads((run / "calibration.json").read_text()):
        flags = [a for p in paths for a in ("--parquet-file", p)]
        code = _quietly(run.with_suffix(".log"), ["train", *flags, *split, "--seed", str(seed), "--threads", "1",
                                                  "--no-progress", "--quiet", "--run-dir", str(run)])
        if code != 0:
            raise SystemExit(f"{name} seed {seed}: foxhunt train exited {code}")
    return run


def evaluate(run: Path, name: str, method: str) -> dict:
    out = run / f"eval-{method}"
    if not (out / "metrics.json").exists():
        flags = [a for f in DATASETS[name][0] for a in ("--parquet-file", str(DATA / f))]
        out.mkdir(parents=True, exist_ok=True)
        code = _quietly(out / "console.log", ["evaluate", "--model", str(run), *flags, "--out-dir", str(out),
                                              "--calibration", method, "--threads", "1"])
        if code != 0:
            raise SystemExit(f"{run}: foxhunt evaluate --calibration {method} exited {code}")
    m = json.loads((out / "metrics.json").read_text())
    o = m["model"]["overall"]
    return {"q": [o["q_risk"][k] for k in sorted(o["q_risk"], key=float)], "cover": next(iter(o["coverage"].values())),
            "n": o["n"], "method": m["calibration"].get("method", "none")}


def replay(run: Path, name: str) -> dict[str, dict]:
    """Every method on the same forecasts, adaptive with a state per series and with one pooled state."""
    lm = load_model(run, "cpu")
    paths = tuple(str(DATA / f) for f in DATASETS[name][0]) or (str(_sample()),)
    data = prepare_for_model(lm, paths)
    w, qs, d = data.windows, lm.model_cfg.quantiles, lm.model_cfg.horizon
    split = model_split(run)
    train_cut = _ns(split.train_end)
    ids = data.splits["test"]
    ids = ids[w.target_ns(ids, extrapolated=True)[:, 0] >= train_cut]  # validation onwards, series then time
    y, q, scale, origin = forecast_windows(lm.model, w, ids, 1024, torch.device("cpu"))
    series, yo = w.series_index(ids).numpy(), w.origin_target(ids).numpy().astype(np.float64)
    scored = (w.target_ns(ids, extrapolated=True)[:, 0].numpy() >= split.held_out_ns) & np.isfinite(y).any(axis=1)
    cal, rule = lm.calibration, lm.adaptive.rule
    out = {"none": q, "fixed": cal.apply(q, scale),
           "adaptive": AdaptiveCalibration(rule, {}, {}).runner().correct(q, scale, Origins(series, w.series_names,
                                                                                               origin, yo))}
    per_series = lm.adaptive.fitted_on["per_series"] * lm.adaptive.fitted_on["series"]  # the panel's outcomes
    pooled_rule = dataclasses.replace(rule, rate=math.sqrt(8 * math.log(rule.shape[0]) / per_series),
                                      share=1 / per_series)
    out["adaptive pooled"] = _pooled(pooled_rule, series, origin, yo, q, scale, d)
    res = {}
    for k, f in out.items():
        res[k] = {"q": list(q_risk(y[scored], f[scored], qs)),
                  "cover": coverage_summary(y[scored], f[scored], qs)[outer_label(qs)], "n": int(np.isfinite(y[scored]).sum())}
    for k in ("adaptive", "adaptive pooled"):
        res[k]["dm_p"], res[k]["vs_fixed"] = _dm(y[scored], out["fixed"][scored], out[k][scored], origin[scored], qs, d)
    return res


def _pooled(rule: Rule, series, origin, yo, q, scale, d) -> np.ndarray:
    """One state for the panel: bars in time order (series order within a time), each series' own last D forecasts
    waiting for its outcomes, every outcome moving the shared experts."""
    state = rule.fresh()
    rings: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    out = np.empty_like(q, dtype=np.float64)
    steps = np.arange(d)
    for i in np.lexsort((series, origin)):
        f, s = rings.get(int(series[i]), (np.full((d, d, q.shape[2]), np.nan), np.full(d, np.nan)))
        unit = s[::-1][:, None] if rule.mode == "scaled" else 1.0  # ring oldest first: step h made h bars before
        track(rule, state.shifts, state.weights, (yo[i] - f[::-1][steps, steps]) / unit)
        shift = state.shift()
        out[i] = np.sort(q[i] + shift * (scale[i] if rule.mode == "scaled" else 1.0), axis=-1)
        rings[int(series[i])] = (np.concatenate([f[1:], q[i][None]]), np.concatenate([s[1:], [scale[i]]]))
    return out


def _dm(y, a, b, origin, qs, d) -> tuple[list[float], float]:
    """Diebold-Mariano p-values of equal mean pinball loss, b against a, over all quantiles and then per quantile
    (per origin the mean over steps (and quantiles), averaged over the series at each time; HAC (Newey-West)
    variance with D - 1 lags: forecasts overlap), and b's mean pinball loss relative to a's (below 0: b is better)."""
    import statsmodels.api as sm

    la, lb = pinball(y, a, qs), pinball(y, b, qs)  # (K, D, Q)
    times, inv = np.unique(origin, return_inverse=True)
    ps = []
    for diff in (np.nanmean(lb - la, axis=(1, 2)), *np.nanmean(lb - la, axis=1).T):  # (K,) all, then each quantile
        per_time = np.bincount(inv, diff) / np.bincount(inv)  # (T,)
        fit = sm.OLS(per_time, np.ones(len(times))).fit(cov_type="HAC", cov_kwds={"maxlags": max(d - 1, 0)})
        ps.append(float(fit.pvalues[0]))
    return ps, float(np.nanmean(lb) / np.nanmean(la) - 1)


TO_1_8 = (0.0, 1 / 256, 1 / 128, 1 / 64, 1 / 32, 1 / 16, 1 / 8)
VARIANTS = {  # name -> (grid, rate multiplier): the rule as shipped (GRID), and what validation weighed it against
    "adaptive": (GRID, 1.0), "grid to 1/8": (TO_1_8, 1.0), "grid to 1/8 x4": (TO_1_8, 4.0),
    "grid to 1/8 x1/4": (TO_1_8, 0.25), "rate x4": (GRID, 4.0), "rate x1/4": (GRID, 0.25),
    "one step 1/256": ((1 / 256,), 1.0), "one step 1/64": ((1 / 64,), 1.0), "one step 1/16": ((1 / 16,), 1.0),
}


def validation_study(run: Path) -> dict[str, dict]:
    """The rule chosen on validation alone: the run's validation origins split at their middle time; the first half
    plays validation (fixed shifts fitted on it, the adaptive state warmed up through it from them), the second half
    is scored. Each variant of the rule against the first half's fixed shifts."""
    lm = load_model(run, "cpu", calibration=False)
    data = prepare_data(lm.data_cfg)
    w, qs, d = data.windows, lm.model_cfg.quantiles, lm.model_cfg.horizon
    ids = data.splits["val"]
    y, q, scale, origin = forecast_windows(lm.model, w, ids, 1024, torch.device("cpu"))
    series, yo = w.series_index(ids).numpy(), w.origin_target(ids).numpy().astype(np.float64)
    first = w.target_ns(ids)[:, 0].numpy()
    half = first < np.median(first)
    cal = Calibration.fit(y[half], q[half], scale[half], qs)
    n_series = len(np.unique(series[half]))
    scores_h1 = (y[half][..., None] - q[half]) / scale[half][:, None, None]
    out = {"none": q, "fixed": cal.apply(q, scale)}
    for name, (grid, times) in VARIANTS.items():
        rule = Rule.fit(scores_h1, cal.shifts, qs, cal.mode, per_series=half.sum() / n_series, grid=grid)
        rule = dataclasses.replace(rule, rate=rule.rate * times)
        out[name] = AdaptiveCalibration(rule, {}, {}).runner().correct(q, scale, Origins(series, w.series_names,
                                                                                          origin, yo))
    res = {}
    for k, f in out.items():
        res[k] = {"q": list(q_risk(y[~half], f[~half], qs)), "cover": coverage_summary(y[~half], f[~half], qs)[
            outer_label(qs)], "n": int(np.isfinite(y[~half]).sum())}
        if k not in ("none", "fixed"):
            res[k]["dm_p"], res[k]["vs_fixed"] = _dm(y[~half], out["fixed"][~half], f[~half], origin[~half], qs, d)
    return res


def table(rows: list[tuple[str, int, str, dict]]) -> str:
    head = f"{'dataset':<8}{'seed':>5}  {'calibration':<17}{'qrisk p10':>10}{'qrisk p50':>10}{'qrisk p90':>10}" \
           f"{'cover':>8}{'vs fixed':>10}  {'dm p: all, by quantile':<24}{'pairs':>9}"
    lines = [head, "-" * len(head)]
    for name, seed, method, r in rows:
        dm = (f"{r['vs_fixed']:>+10.2%}  {' '.join(f'{p:.3f}' for p in r['dm_p']):<24}" if r.get("dm_p") is not None
              else f"{'':>36}")
        lines.append(f"{name:<8}{seed:>5}  {method:<17}" + "".join(f"{v:>10.4f}" for v in r["q"])
                     + f"{r['cover']:>8.3f}{dm}{r['n']:>9,}")
    return "\n".join(lines)


def mean_rows(rows: list[tuple[str, int, str, dict]]) -> list[tuple[str, int, str, dict]]:
    """Each dataset's and method's mean over the seeds (seed column -1)."""
    out = []
    for name in dict.fromkeys(r[0] for r in rows):
        for method in dict.fromkeys(r[2] for r in rows if r[0] == name):
            got = [r[3] for r in rows if r[0] == name and r[2] == method]
            out.append((name, -1, method, {"q": list(np.mean([g["q"] for g in got], axis=0)),
                                           "cover": float(np.mean([g["cover"] for g in got])), "n": got[0]["n"]}))
    return out


def compare_units(run_dir: str, test_end: str | None = None) -> str:
    """The fixed shift fitted on validation in raw and in scaled units, scored on the run's test split."""
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


def _quietly(log: Path, argv: list[str]) -> int:
    """The CLI in-process, its console (stdout and stderr) into `log`."""
    with open(log, "w") as f, contextlib.redirect_stdout(f), contextlib.redirect_stderr(f):
        return foxhunt(argv)


def _sample() -> Path:
    from foxhunt.data.io.sample import bundled_sample_path

    return bundled_sample_path()


def _ns(iso: str) -> int:
    return int(np.datetime64(iso.replace("+00:00", "").rstrip("Z"), "ns").astype(np.int64))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", default="spx,cn,kopep,sample")
    p.add_argument("--seeds", default="0,1")
    p.add_argument("--out", type=Path, default=Path("/tmp/calibration_modes"))
    p.add_argument("--units", nargs="+", metavar="RUN_DIR", help="compare the fixed shift's units on these runs")
    p.add_argument("--validation", action="store_true", help="weigh the adaptive rule's variants on validation only")
    p.add_argument("--test-end", help="--units: score test windows ending before this date only")
    a = p.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    if a.units:
        for r in a.units:
            print(compare_units(r, a.test_end), end="\n\n", flush=True)
        return 0
    evaluated, replayed = [], []
    for name in a.datasets.split(","):
        for seed in (int(s) for s in a.seeds.split(",")):
            run = train(name, seed, a.out)
            if run is None:
                break
            if a.validation:
                replayed += [(name, seed, k, r) for k, r in validation_study(run).items()]
                print(table(replayed[-len(VARIANTS) - 2:]), "\n", flush=True)
                continue
            for method in METHODS:
                r = evaluate(run, name, method)
                assert r["method"] == method or method == "none", (run, method, r["method"])
                evaluated.append((name, seed, method, r))
            for method, r in replay(run, name).items():
                replayed.append((name, seed, method, r))
            print(table(evaluated[-3:] + replayed[-4:]), "\n", flush=True)
    if a.validation:
        print("validation only: second half scored, the first half as validation (mean over seeds: seed -1)")
        print(table(replayed + mean_rows(replayed)))
        return 0
    print("foxhunt evaluate --calibration none | fixed | adaptive (held-out period; mean over seeds: seed -1)")
    print(table(evaluated + mean_rows(evaluated)))
    print("\nreplayed on the same forecasts: adaptive per series (= evaluate's) and one pooled state")
    print(table(replayed + mean_rows(replayed)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
