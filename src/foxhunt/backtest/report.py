"""report.html of a backtest: evaluate's report layout (overall tables, skill, glossary) with figures through time:
q-risk per fold, skill and coverage by month, skill around roll dates."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from foxhunt.evaluate.plots import blank_figure, floats_or_nan, png_bytes
from foxhunt.evaluate.report import write_report


def fold_qrisk_png(folds: list[dict[str, Any]]) -> bytes:
    """Grouped bars: each source's q-risk summed over quantiles, per fold (lower is better)."""
    names = ["model", *folds[0]["metrics"]["baselines"]]
    fig, ax = blank_figure(9, 3.6)
    width = 0.8 / len(names)
    x = np.arange(len(folds))
    lowest = np.inf
    for j, name in enumerate(names):
        vals = floats_or_nan([_qrisk_sum(f["metrics"]["model"] if name == "model" else f["metrics"]["baselines"].get(name))
                        for f in folds])
        lowest = np.nanmin([lowest, *vals])
        ax.bar(x + (j - (len(names) - 1) / 2) * width, vals, width, label=name)
    if np.isfinite(lowest):
        ax.set_ylim(bottom=0.9 * lowest)  # the differences, not the common level, are the point
    ax.set_xticks(x, [f"{f['index']}: {str(f['test_start'])[:10]}" for f in folds], fontsize="small")
    ax.set_ylabel("q-risk, summed over quantiles")
    ax.set_title("q-risk per fold (lower is better)")
    ax.legend(fontsize="small", ncol=min(4, len(names)))
    return png_bytes(fig)


def by_month_png(month: dict[str, Any], key: str, ylabel: str, title: str, level: float | None) -> bytes:
    """One line per source over calendar months; a dashed reference at `level` (0 skill, nominal coverage)."""
    fig, ax = blank_figure(9, 3.6)
    t = np.array(month["month"], dtype="datetime64[M]")
    for name, vals in month[key].items():
        ax.plot(t, floats_or_nan(vals), lw=1.0, marker="o" if len(t) < 40 else None, ms=3, label=name)
    if level is not None:
        ax.axhline(level, color="grey", lw=0.8, ls="--")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small")
    fig.autofmt_xdate()
    return png_bytes(fig)


def rolls_png(rolls: dict[str, Any]) -> bytes:
    fig, ax = blank_figure(7, 3.4)
    for name, vals in rolls["skill"].items():
        ax.plot(rolls["offsets"], floats_or_nan(vals), marker="o", ms=3, lw=1.0, label=f"vs {name}")
    ax.axhline(0, color="grey", lw=0.8, ls="--")
    ax.axvline(0, color="black", lw=0.6)
    n = len(rolls["rolls"])
    ax.set_title(f"skill around roll dates ({n} roll{'s' if n != 1 else ''} pooled)" if n else
                 "skill around roll dates: no roll inside the scored origins")
    ax.set_xlabel("origins from the roll (0: first origin on or after the new contract's first trade date)")
    ax.set_ylabel("skill")
    if ax.get_legend_handles_labels()[0] and n:
        ax.legend(fontsize="small")
    return png_bytes(fig)


def write_backtest_report(path: Path, result: dict[str, Any], claim: list[str], notes: list[str]) -> None:
    """report.html: the verdict over every fold's test origins first (`claim`), then what was run (`notes`), the
    tables and the figures through time."""
    month, overall = result["by_month"], result["overall"]
    images = {
        "q-risk per fold, model vs baselines": fold_qrisk_png(result["folds"]),
        "Skill by month (1 - model / baseline q-risk, summed over quantiles; above 0 the model is better)":
            by_month_png(month, "skill", "skill", "skill over time", 0.0),
        f"Coverage of the {month['interval']} interval by month (nominal dashed)":
            by_month_png(month, "coverage", "coverage", "coverage over time", month["nominal"]),
        "Skill around roll dates": rolls_png(result["around_rolls"]),
    }
    write_report(path, title=f"foxhunt backtest: {result['target']}, {len(result['folds'])} folds",
                 metrics={"model": overall["model"]}, baselines=overall["baselines"], images=images, notes=notes,
                 claim=claim, comparisons={"model": overall["comparisons"]})


def _qrisk_sum(m: dict[str, Any] | None) -> float | None:
    if m is None:
        return None
    vals = [v for v in m["overall"]["q_risk"].values() if v is not None]
    return float(sum(vals)) if vals else None
