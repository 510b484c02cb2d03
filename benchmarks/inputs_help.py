"""Where the user's own inputs help (issue 34), measured with the commands a user runs, called in-process.

events: the bundled sample with scheduled announcements (`foxhunt sample --announcements`, volatility bursts at
    irregular announced times) trained with and without `--events` (the announcements file written beside it), each
    seed scored on the test period (`foxhunt evaluate`: the model and every baseline), and q-risk on the windows
    whose forecast span holds an announcement, from `foxhunt predict` over the same period; and the mean forecast
    p10 / p50 / p90 on the burst's own bars (from an announcement to DECAY_MIN minutes after): a calendar model
    should raise every quantile there, p10 too.
nasdaq: S&P 500 daily bars 1999-2018 (test 2016-2018, as benchmarks/spx_experiment.py) with the NASDAQ composite's
    log return, log range and log volume on the same days (`arch.data.nasdaq`) as --observed covariates.
context: the same, with NASDAQ's bars in the data as series NDX and `--context NDX`; scored on SPX alone.
vix: S&P 500 daily bars 2014-2018 (the span `arch.data.vix` covers) with the VIX close as an --observed covariate.

    python benchmarks/inputs_help.py events|nasdaq|context|vix [--seeds 0,1,2] [--out /tmp/inputs_help] [--target T]
        [--both "--horizon 30"] [--per-week N]

--per-week N (events): N announcements a week instead of the sample's 4, drawn from the week's (trade day, clock
    time) slots by this script's own schedule (`denser_schedule`; the generator's option is unchanged): more bursts
    to learn from and to score on, to tell whether a result is the calendar's or too few examples'.

Prints one table per experiment: q-risk at p10 / p50 / p90 with and without the inputs, per seed and the mean,
and every baseline's on the same origins.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
from pathlib import Path

import numpy as np
import polars as pl

from foxhunt.cli import main as foxhunt
from foxhunt.data.io import announcements as news

SPX = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "spx_daily.parquet"
QUANTILES = ("p10", "p50", "p90")


def run(args: list[str]) -> None:
    with contextlib.redirect_stdout(io.StringIO()):
        code = foxhunt(args)
    if code != 0:
        raise SystemExit(f"foxhunt {' '.join(args[:1])} exited {code}: {' '.join(args)}")


def train_and_score(name: str, files: list[str], extra: list[str], seed: int, out: Path, target: str,
                    split: list[str]) -> dict:
    """Train one run, evaluate it on the period after validation; metrics.json's q-risk of the model and of every
    baseline, and the run directory."""
    run_dir = out / f"{name}-s{seed}"
    if not (run_dir / "model.json").exists():
        run(["train", *files, *split, *extra, "--target", target, "--seed", str(seed), "--threads", "1",
             "--no-progress", "--quiet", "--run-dir", str(run_dir)])
    ev = run_dir / "test"
    if not (ev / "metrics.json").exists():
        run(["evaluate", "--model", str(run_dir), *files, "--out-dir", str(ev), "--threads", "1"])
    return {"metrics": json.loads((ev / "metrics.json").read_text()), "run_dir": run_dir}


def q_risks(m: dict, series: str | None = None) -> dict[str, list[float]]:
    """{model or baseline: [p10, p50, p90] q-risk} of a metrics.json, over all series or of the one named."""
    keys = ("0.1", "0.5", "0.9")

    def block(v: dict) -> dict:
        return v["overall"] if series is None else v["per_series"][series]

    out = {"model": [block(m["model"])["q_risk"][k] for k in keys]}
    for b, v in m.get("baselines", {}).items():
        out[b] = [block(v)["q_risk"][k] for k in keys]
    return out


def q_risk_rows(fc: pl.DataFrame) -> list[float]:
    """q-risk (2 sum pinball / sum |y|) at p10, p50, p90 over the rows of a forecasts frame."""
    y = fc["actual"].to_numpy()
    out = []
    for col in QUANTILES:
        q = float(col[1:]) / 100
        pred = fc[col].to_numpy()
        e = y - pred
        out.append(float(2 * np.sum(np.maximum(q * e, (q - 1) * e)) / np.sum(np.abs(y))))
    return out


def announcement_windows(fc: pl.DataFrame, events: np.ndarray, step_ns: int) -> pl.DataFrame:
    """The rows of the windows (symbol, origin) whose forecast span holds an announcement: some step's bar
    [target_time, target_time + step) contains an event."""
    t = fc["target_time"].dt.epoch("ns").to_numpy()
    at = np.searchsorted(events, t, side="left")
    hit = (at < len(events)) & (events[np.minimum(at, len(events) - 1)] < t + step_ns)
    keys = fc.select("symbol", "origin").filter(pl.Series(hit)).unique()
    return fc.join(keys, on=["symbol", "origin"], how="semi")


def burst_rows(fc: pl.DataFrame, events: np.ndarray, step_ns: int, minutes: float) -> pl.DataFrame:
    """The rows whose target bar [target_time, target_time + step) holds an announcement or starts less than
    `minutes` after one: the bars of the volatility burst."""
    t = fc["target_time"].dt.epoch("ns").to_numpy()
    last = np.searchsorted(events, t + step_ns, side="left") - 1  # the last announcement before the bar's end
    since = t - events[np.maximum(last, 0)]  # ns; negative where it falls inside the bar
    return fc.filter(pl.Series((last >= 0) & (since < minutes * 60 * 10**9)))


def levels(rows: dict[str, list[list[float]]], title: str) -> None:
    """The mean forecast p10 / p50 / p90 (and the mean actual) per run, each the mean over the seeds."""
    print(f"\n{title}")
    print(f"{'':28s} {'p10':>10s} {'p50':>10s} {'p90':>10s} {'actual':>10s}   per seed p10")
    for label, vals in rows.items():
        arr = np.array(vals)  # (seeds, 4)
        seeds = "  ".join(f"{v[0]:.4g}" for v in arr)
        print(f"{label:28s} " + " ".join(f"{m:10.4g}" for m in arr.mean(axis=0)) + f"   {seeds}")


def table(rows: dict[str, dict[str, list[list[float]]]], title: str) -> None:
    print(f"\n{title}")
    print(f"{'':28s} {'p10':>8s} {'p50':>8s} {'p90':>8s}   per seed (p10 / p90)")
    for label, per in rows.items():
        for who, vals in per.items():
            arr = np.array(vals)  # (seeds, 3)
            seeds = "  ".join(f"{v[0]:.4f}/{v[2]:.4f}" for v in arr)
            mean = arr.mean(axis=0)
            print(f"{label + ' ' + who:28s} {mean[0]:8.4f} {mean[1]:8.4f} {mean[2]:8.4f}   {seeds}")


def events_experiment(seeds: list[int], out: Path, target: str, both: list[str]) -> None:
    sample = out / "sample.parquet"
    run(["sample", "--out", str(sample), "--announcements"])
    ev_path = sample.with_suffix(".events.parquet")
    events = np.sort(pl.read_parquet(ev_path)["ts"].dt.epoch("ns").to_numpy())
    files = ["--parquet-file", str(sample)]
    rows = {"plain": {}, "events": {}}
    sub = {"plain": {}, "events": {}}
    level = {"plain": [], "events": []}
    for seed in seeds:
        for label, extra in (("plain", []), ("events", ["--events", str(ev_path)])):
            got = train_and_score(label, files, [*both, *extra], seed, out, target, [])
            for who, v in q_risks(got["metrics"]).items():
                if label == "plain" or who == "model":
                    rows[label].setdefault(who, []).append(v)
            period = got["metrics"]["period"]
            fc_path = got["run_dir"] / "test" / "forecasts.parquet"
            if not fc_path.exists():
                run(["predict", "--model", str(got["run_dir"]), *files, "--out", str(fc_path), "--start",
                     period["first_origin"], "--threads", "1"])
            fc = pl.read_parquet(fc_path).filter(pl.col("actual").is_not_null())
            step = json.loads((got["run_dir"] / "model.json").read_text())["transform"]["bar_spacing_ns"]
            hit = announcement_windows(fc, events, int(step))
            sub[label].setdefault("model", []).append(q_risk_rows(hit))
            sub[label].setdefault("model, all windows", []).append(q_risk_rows(fc))
            burst = burst_rows(fc, events, int(step), news.DECAY_MIN)
            level[label].append(burst.select(pl.mean(*QUANTILES, "actual")).row(0))
            print(f"seed {seed} {label}: {hit.select('symbol', 'origin').unique().height:,} announcement windows "
                  f"of {fc.select('symbol', 'origin').unique().height:,}", flush=True)
    table(rows, f"events: q-risk on the test period ({target}), metrics.json")
    table(sub, "events: q-risk on the windows whose forecast span holds an announcement (from predict)")
    levels(level, f"events: the mean forecast on the burst's bars (from an announcement to {news.DECAY_MIN:g} "
                  f"minutes after), {burst.height:,} rows a seed")


def spx_with(name: str, covariates: pl.DataFrame | None, columns: list[str], seeds: list[int], out: Path,
             target: str, split: list[str], bars: Path, series: str | None = None) -> None:
    """Each seed with and without the inputs: `columns` of `covariates` as --observed, or with no covariates
    `columns` as the flags themselves (--context NDX); scored over all series or on `series` alone."""
    if covariates is not None:
        cov = out / f"{name}.parquet"
        covariates.write_parquet(cov)
        flags = ["--observed", ",".join(columns), "--covariates", str(cov)]
    else:
        flags = columns
    files = ["--parquet-file", str(bars)]
    rows = {"plain": {}, name: {}}
    for seed in seeds:
        for label, extra in (("plain", []), (name, flags)):
            got = train_and_score(f"{name}-{label}", files, extra, seed, out, target, split)
            for who, v in q_risks(got["metrics"], series).items():
                if label == "plain" or who == "model":
                    rows[label].setdefault(who, []).append(v)
            print(f"seed {seed} {label}: model p10/p50/p90 {q_risks(got['metrics'], series)['model']}", flush=True)
    table(rows, f"{name}: SPX q-risk on the test period ({target})")


def nasdaq_frame() -> pl.DataFrame:
    import arch.data.nasdaq

    d = pl.from_pandas(arch.data.nasdaq.load().reset_index())
    return d.select(
        pl.col("Date").cast(pl.Datetime("ns")).dt.replace_time_zone("UTC").alias("time"),
        (pl.col("Close") / pl.col("Close").shift(1)).log().fill_null(0.0).alias("nq_log_return"),
        (pl.col("High") / pl.col("Low")).log().alias("nq_log_range"),
        pl.col("Volume").cast(pl.Float64).log1p().alias("nq_log_volume"),
    )


def nasdaq_bars() -> pl.DataFrame:
    """NASDAQ composite daily bars in the layout of the SPX fixture, symbol NDX."""
    import arch.data.nasdaq

    d = pl.from_pandas(arch.data.nasdaq.load().reset_index())
    return d.select(pl.col("Date").cast(pl.Datetime("ns")).dt.replace_time_zone("UTC").alias("timestamp"),
                    pl.lit("NDX").alias("symbol"), *(pl.col(c.title()).alias(c) for c in
                                                      ("open", "high", "low", "close", "volume")))


def vix_frame() -> pl.DataFrame:
    import arch.data.vix

    d = pl.from_pandas(arch.data.vix.load().reset_index())
    return d.select(pl.col("Date").cast(pl.Datetime("ns")).dt.replace_time_zone("UTC").alias("time"),
                    pl.col("vix").log().alias("log_vix"))


def denser_schedule(per_week: int):
    """A schedule for `foxhunt sample --announcements` with `per_week` announcements a week, drawn at random from
    the week's (trade day, clock time) slots that leave the session AFTER_MIN minutes (the generator's rule), so a
    day may hold two or three at different clock times."""
    import datetime as dt


    def schedule(rng: np.random.Generator, sessions) -> np.ndarray:
        weeks: dict[tuple[int, int], list[dt.datetime]] = {}
        for day, close in sessions:
            for t in news.CLOCK_TIMES:
                at = dt.datetime.combine(day, t, tzinfo=news.CT)
                if at + dt.timedelta(minutes=news.AFTER_MIN) <= close:
                    weeks.setdefault(day.isocalendar()[:2], []).append(at)
        picked = [slots[i] for slots in weeks.values() for i in rng.permutation(len(slots))[:per_week]]
        return np.sort(np.array([int(at.timestamp()) * 10**9 for at in picked], dtype=np.int64))

    return schedule


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("experiment", choices=("events", "nasdaq", "context", "vix"))
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--out", type=Path, default=Path("/tmp/inputs_help"))
    p.add_argument("--target", default=None, help="default: log_range for events, log_return for SPX")
    p.add_argument("--both", default="", help="more flags for both runs of each seed, e.g. '--horizon 30'")
    p.add_argument("--per-week", type=int, default=None, help="events: announcements a week (default: the sample's)")
    a = p.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    seeds = [int(s) for s in a.seeds.split(",")]
    both = a.both.split()
    out = a.out / (a.experiment + "".join(both).replace("--", "_") + (f"_{a.per_week}a_week" if a.per_week else ""))
    if a.per_week:
        import foxhunt.data.io.sample as sample

        sample.schedule = denser_schedule(a.per_week)  # what generate_sample calls: this process's sample only
    out.mkdir(parents=True, exist_ok=True)
    if a.experiment == "events":
        events_experiment(seeds, out, a.target or "log_range", both)
    elif a.experiment == "nasdaq":
        spx_with("nasdaq", nasdaq_frame(), ["nq_log_return", "nq_log_range", "nq_log_volume"], seeds, out,
                 a.target or "log_return", ["--test-fraction", "0.15"], SPX)
    elif a.experiment == "context":  # SPX and NDX as one panel, scored on SPX
        bars = out / "spx_ndx.parquet"
        spx = pl.read_parquet(SPX)
        ndx = nasdaq_bars().cast(spx.schema)
        pl.concat([spx, ndx]).write_parquet(bars)
        spx_with("context", None, ["--context", "NDX"], seeds, out, a.target or "log_return",
                 ["--test-fraction", "0.15"], bars, series="SPX")
    else:
        bars = out / "spx_2014.parquet"
        pl.read_parquet(SPX).filter(pl.col("timestamp") >= pl.datetime(2014, 1, 3, time_zone="UTC")).write_parquet(bars)
        spx_with("vix", vix_frame(), ["log_vix"], seeds, out, a.target or "log_return",
                 ["--train-end", "2016-12-31", "--val-end", "2017-12-31"], bars)
    return 0


if __name__ == "__main__":
    sys.exit(main())
