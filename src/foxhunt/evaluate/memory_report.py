"""`foxhunt memory-report RUN_DIR`: what a run's memory did, per phase, from the records training wrote.

The question it answers first is "does anything grow?": a validation pass that keeps device tensors across batches
shows up as allocated memory growing from the first to the last `val_batch` record of an epoch, and a leak across
epochs as growth over the run. Reads RUN_DIR/memory.jsonl (written by foxhunt.train.telemetry.MemoryTracker) and
writes RUN_DIR/memory.png.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import polars as pl
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from foxhunt.atomic import write_with
from foxhunt.errors import InputError

SCHEMA = {
    "phase": pl.String,
    "epoch": pl.Int64,
    "batch": pl.Int64,
    "device_allocated_mb": pl.Float64,
    "device_reserved_mb": pl.Float64,
    "device_peak_mb": pl.Float64,
    "device_total_mb": pl.Float64,
    "host_rss_mb": pl.Float64,
    "host_peak_mb": pl.Float64,
    "time": pl.Float64,
}
# Which stretch of the run a record closes: a record's peak covers the time since the previous record.
REGIONS = {"train_batch": "train", "train_end": "train", "val_batch": "validation", "val_end": "validation"}
REGION_COLORS = {"train": "tab:blue", "validation": "tab:orange", "checkpoint": "tab:green"}


def memory_report(run_dir: Path) -> tuple[str, Path]:
    """Print-ready table of memory per phase and the path of the memory.png written next to memory.jsonl."""
    run_dir = Path(run_dir)
    df = load_memory(run_dir / "memory.jsonl")
    text = format_table(phase_summary(df), df, run_dir / "memory.jsonl")
    png = run_dir / "memory.png"
    plot_memory(df, png)
    return text, png


def load_memory(path: Path) -> pl.DataFrame:
    """All whole records of a memory.jsonl in file (= time) order; a torn last line from a killed run is skipped."""
    if not path.is_file():
        raise InputError(
            f"{path}: not found; memory-report needs the run directory of a `foxhunt train` run (it writes memory.jsonl)"
        )
    data = path.read_bytes()
    # The writer ends every record with a newline; anything after the last one is torn.
    if not data.endswith(b"\n"):
        data = data[: data.rfind(b"\n") + 1]
    if not data.strip():
        raise InputError(
            f"{path}: has no memory records; the run stopped before its first record, train it again"
        )
    try:
        df = pl.read_ndjson(io.BytesIO(data), schema=SCHEMA)
    except Exception as e:  # polars raises its own ComputeError / SchemaError types
        raise InputError(
            f"{path}: is not a foxhunt memory log ({type(e).__name__}: {str(e).splitlines()[0]})"
        ) from e
    required = pl.col("phase", "time", "host_rss_mb")
    bad = df.select(pl.any_horizontal(required.is_null()).arg_true()).to_series()
    if len(bad):
        raise InputError(
            f"{path}: line {bad[0] + 1} has no phase, time or host_rss_mb; not a foxhunt memory log"
        )
    return df


def phase_summary(df: pl.DataFrame) -> pl.DataFrame:
    """One row per phase, in order of first appearance.

    Growth columns are last minus first allocated / RSS: "in epoch" is the largest such difference among the epochs
    (records of the phase within one epoch), "over run" spans all the phase's records.
    """
    per_epoch = (
        df.group_by("phase", "epoch", maintain_order=True)
        .agg(
            (pl.col("device_allocated_mb").last() - pl.col("device_allocated_mb").first()).alias(
                "dev_growth"
            ),
            (pl.col("host_rss_mb").last() - pl.col("host_rss_mb").first()).alias("host_growth"),
        )
        .group_by("phase", maintain_order=True)
        .agg(
            pl.col("dev_growth").max().alias("device_growth_in_epoch_mb"),
            pl.col("host_growth").max().alias("host_growth_in_epoch_mb"),
        )
    )
    overall = df.group_by("phase", maintain_order=True).agg(
        pl.len().alias("records"),
        pl.col("device_peak_mb").max().alias("device_peak_mb"),
        pl.max_horizontal("host_peak_mb", "host_rss_mb").max().alias("host_peak_mb"),
        (pl.col("device_allocated_mb").last() - pl.col("device_allocated_mb").first()).alias(
            "device_growth_run_mb"
        ),
        (pl.col("host_rss_mb").last() - pl.col("host_rss_mb").first()).alias("host_growth_run_mb"),
    )
    return overall.join(per_epoch, on="phase", how="left", maintain_order="left").select(
        "phase",
        "records",
        "device_peak_mb",
        "host_peak_mb",
        "device_growth_in_epoch_mb",
        "device_growth_run_mb",
        "host_growth_in_epoch_mb",
        "host_growth_run_mb",
    )


def format_table(summary: pl.DataFrame, df: pl.DataFrame, path: Path) -> str:
    """Fixed-width text table (MiB); `-` where a value does not exist (device columns of a CPU run)."""
    headers = (
        "phase",
        "n",
        "dev peak",
        "host peak",
        "dev grow/ep",
        "dev grow/run",
        "host grow/ep",
        "host grow/run",
    )
    rows = [
        [str(r[0]), str(r[1])] + ["-" if v is None else f"{v:.1f}" for v in r[2:]]
        for r in summary.iter_rows()
    ]
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(headers)]
    fmt = lambda cells: "  ".join(  # noqa: E731
        c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))
    )
    span = df["time"].max() - df["time"].min()
    lines = [f"{path}: {df.height} records over {span:.1f} s (MiB; growth = last - first allocated / RSS)"]
    lines += [fmt(headers), fmt(["-" * w for w in widths])] + [fmt(r) for r in rows]
    peak, total = df["device_peak_mb"].max(), df["device_total_mb"].max()
    if peak is not None and total:
        lines.append(f"device peak {peak:.1f} MiB of {total:.0f} MiB ({100 * peak / total:.1f}%)")
    lines.append(
        f"host peak {df.select(pl.max_horizontal('host_peak_mb', 'host_rss_mb').max()).item():.1f} MiB"
    )
    return "\n".join(lines)


def plot_memory(df: pl.DataFrame, path: Path) -> None:
    """Write `memory_png(df)` to `path` atomically."""
    png = memory_png(df)
    write_with(path, lambda tmp: tmp.write_bytes(png))


def memory_png(df: pl.DataFrame) -> bytes:
    """Memory over time (host RSS and peak; device allocated / reserved / peak when present), train/validation/checkpoint shaded."""
    t = (df["time"] - df["time"].min()).to_numpy()
    fig = Figure(figsize=(10, 4.5), layout="constrained")  # no pyplot: no global backend, no figure registry
    ax = fig.add_subplot()
    # Peaks belong to the interval before their record, hence steps-pre.
    ax.plot(t, df["host_rss_mb"].to_numpy(), color="black", lw=1.2, label="host RSS")
    ax.plot(
        t,
        df["host_peak_mb"].to_numpy(),
        color="black",
        lw=0.8,
        ls=":",
        drawstyle="steps-pre",
        label="host peak",
    )
    if df["device_allocated_mb"].null_count() < df.height:
        ax.plot(t, df["device_allocated_mb"].to_numpy(), color="tab:red", lw=1.2, label="device allocated")
        ax.plot(
            t, df["device_reserved_mb"].to_numpy(), color="tab:red", lw=0.8, ls="--", label="device reserved"
        )
        ax.plot(
            t,
            df["device_peak_mb"].to_numpy(),
            color="tab:red",
            lw=0.8,
            ls=":",
            drawstyle="steps-pre",
            label="device peak",
        )
    _shade_regions(ax, t, _regions(df["phase"]))
    for x in t[df["phase"].str.contains("oom", literal=True).to_numpy()]:  # OOM recoveries as red lines
        ax.axvline(x, color="red", lw=0.8, ls=":")
    ax.set_xlabel("seconds since first record")
    ax.set_ylabel("MiB")
    ax.set_title("memory by phase")
    handles, _ = ax.get_legend_handles_labels()
    handles += [Patch(color=c, alpha=0.15, label=name) for name, c in REGION_COLORS.items()]
    ax.legend(
        handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small"
    )  # beside the axes
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    return buf.getvalue()


def _regions(phase: pl.Series) -> np.ndarray:
    """The region ("train", "validation", "checkpoint" or "") that each record closes."""
    return (
        pl.select(
            pl.when(phase.str.starts_with("checkpoint"))
            .then(pl.lit("checkpoint"))
            .otherwise(phase.replace_strict(REGIONS, default=""))
        )
        .to_series()
        .to_numpy()
    )


def _shade_regions(ax, t: np.ndarray, region: np.ndarray) -> None:
    """Shade the interval before each record by the region it closes, merged into runs of the same region."""
    if len(t) < 2:
        return
    reg = region[1:]  # interval i spans t[i] .. t[i + 1], closed by record i + 1
    starts = np.flatnonzero(np.r_[True, reg[1:] != reg[:-1]])
    ends = np.r_[starts[1:], len(reg)]
    for s, e in zip(starts, ends, strict=True):
        if reg[s]:
            ax.axvspan(t[s], t[e], color=REGION_COLORS[reg[s]], alpha=0.15, lw=0)
