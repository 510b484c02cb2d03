"""Figures for the evaluation report; each function returns PNG bytes.

Drawn on `matplotlib.figure.Figure` objects without pyplot: no global backend switch, no figure registry to leak
memory across calls, safe in a headless process (Agg renders the PNG).
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from foxhunt.evaluate.metrics import interval_pairs, median_index

DPI = 100
_BAND_ALPHA = (0.15, 0.25, 0.35, 0.45)


def fan_chart(
    times: Sequence[Any] | np.ndarray,
    actual: Sequence[float] | np.ndarray,
    quantile_preds: np.ndarray,
    quantiles: Sequence[float] | np.ndarray,
    title: str = "forecast fan",
) -> bytes:
    """Actuals over time with central intervals (q paired with 1 - q) shaded and the median drawn.

    times (n,) numbers or datetimes, actual (n,), quantile_preds (n, Q) for one step ahead of one series.
    """
    qs = np.asarray(quantiles, dtype=np.float64)
    preds = np.asarray(quantile_preds, dtype=np.float64)  # (n, Q)
    t = np.asarray(times)
    fig, ax = blank_figure(9, 3.6)
    for k, (lo, hi, label) in enumerate(interval_pairs(qs)):  # widest band first, palest
        alpha = _BAND_ALPHA[min(k, len(_BAND_ALPHA) - 1)]
        ax.fill_between(t, preds[:, lo], preds[:, hi], color="tab:blue", alpha=alpha, lw=0, label=label)
    mid = median_index(qs)
    if mid is not None:
        ax.plot(t, preds[:, mid], color="tab:blue", lw=1.0, label="median")
    ax.plot(
        t, np.asarray(actual, dtype=np.float64), color="black", lw=0.8, marker=".", ms=2.5, label="actual"
    )
    ax.set_title(title)
    ax.set_ylabel("target")
    ax.legend(loc="upper left", fontsize="small", ncol=4)
    if t.size and np.issubdtype(t.dtype, np.datetime64):
        fig.autofmt_xdate()
    return png_bytes(fig)


def calibration_plot(
    nominal: Sequence[float],
    observed_by_model: Mapping[str, Sequence[float | None]],
    title: str = "calibration",
) -> bytes:
    """Observed share of actuals below each quantile against its nominal level; the diagonal is perfect."""
    fig, ax = blank_figure(4.6, 4.2)
    ax.plot([0, 1], [0, 1], color="grey", lw=0.8, ls="--", label="perfect")
    for name, obs in observed_by_model.items():
        ax.plot(nominal, floats_or_nan(obs), marker="o", ms=4, lw=1.2, label=name)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("nominal quantile level")
    ax.set_ylabel("share of actuals below the forecast")
    ax.set_title(title)
    ax.legend(fontsize="small")
    return png_bytes(fig)


def qrisk_by_horizon(
    per_horizon: Mapping[str, Sequence[Sequence[float | None]]],
    quantiles: Sequence[float] | None = None,
    title: str = "q-risk by horizon (lower is better)",
) -> bytes:
    """One panel per quantile, one line per model or baseline: q-risk at steps 1..H. per_horizon {name: [(Q) per h]}."""
    arrays = {
        name: np.array([floats_or_nan(row) for row in rows], dtype=np.float64) for name, rows in per_horizon.items()
    }
    n_q = max((a.shape[1] for a in arrays.values() if a.ndim == 2), default=1)
    qs = list(quantiles) if quantiles is not None else [None] * n_q
    fig = Figure(figsize=(min(3.4 * n_q, 12), 3.4), layout="constrained")
    axes = fig.subplots(1, n_q, squeeze=False)[0]
    for j, ax in enumerate(axes):
        for name, a in arrays.items():
            if a.ndim == 2 and a.shape[1] > j:
                ax.plot(np.arange(1, a.shape[0] + 1), a[:, j], marker="o", ms=3, lw=1.2, label=name)
        ax.set_title(f"q = {qs[j]:g}" if qs[j] is not None else f"quantile {j + 1}")
        ax.set_xlabel("horizon (bars ahead)")
        ax.xaxis.get_major_locator().set_params(integer=True)
    axes[0].set_ylabel("q-risk")
    axes[0].legend(fontsize="small")
    fig.suptitle(title)
    return png_bytes(fig)


def variable_importance(interp: Mapping[str, Any], title: str = "variable importance") -> bytes:
    """Mean variable-selection weights, one horizontal bar panel each for static, encoder and decoder variables."""
    groups = [(k, interp.get(k) or {}) for k in ("static", "encoder", "decoder")]
    groups = [(k, g) for k, g in groups if g] or [("no variables", {})]
    heights = [max(1.2, 0.28 * len(g) + 0.8) for _, g in groups]
    fig = Figure(figsize=(6.5, sum(heights)), layout="constrained")
    axes = fig.subplots(len(groups), 1, squeeze=False, height_ratios=heights)[:, 0]
    for ax, (key, g) in zip(axes, groups, strict=True):
        items = sorted(g.items(), key=lambda kv: kv[1])  # largest at the top
        ax.barh([k for k, _ in items], [v for _, v in items], color="tab:blue")
        ax.set_title(f"{key} variables", fontsize="medium")
        ax.set_xlabel("mean selection weight")
        ax.tick_params(axis="y", labelsize="small")
    fig.suptitle(title)
    return png_bytes(fig)


def attention_by_lag(interp: Mapping[str, Any], title: str = "attention by lag") -> bytes:
    """Mean attention weight against lag (0 = the forecast step itself), one line per forecast step."""
    fig, ax = blank_figure(8, 3.6)
    for d, row in enumerate(interp.get("attention_by_lag") or []):
        ax.plot(np.arange(len(row)), row, lw=1.0, label=f"step {d + 1}")
    enc = interp.get("encoder_length")
    ax.set_xlabel("lag (bars before the forecast step)" + (f"; encoder length {enc}" if enc else ""))
    ax.set_ylabel("mean attention weight")
    ax.set_title(title)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small", ncol=2)
    return png_bytes(fig)


def training_curves(records: Sequence[Mapping[str, Any]], title: str = "training curves") -> bytes:
    """Every numeric key with "loss" in its name against the step (or epoch, or record index); learning rate below
    on a log scale when records carry "lr". Records missing a value are skipped for that curve only."""
    xkey = next(
        (k for k in ("step", "global_step", "epoch") if any(r.get(k) is not None for r in records)), None
    )
    keys = sorted({k for r in records for k, v in r.items() if "loss" in k and _is_number(v)})
    has_lr = any(_is_number(r.get("lr")) for r in records)
    fig = Figure(figsize=(8, 5.2 if has_lr else 3.6), layout="constrained")
    axes = fig.subplots(2 if has_lr else 1, 1, squeeze=False, sharex=True)[:, 0]
    for k in keys:
        x, y = _series(records, xkey, k)
        axes[0].plot(x, y, lw=1.0, marker="o" if len(x) < 50 else None, ms=3, label=k)
    axes[0].set_ylabel("loss")
    axes[0].set_title(title)
    if keys:
        axes[0].legend(fontsize="small")
    else:
        axes[0].text(
            0.5, 0.5, "no loss values recorded", ha="center", va="center", transform=axes[0].transAxes
        )
    if has_lr:
        x, y = _series(records, xkey, "lr")
        axes[1].plot(x, y, color="tab:grey", lw=1.0)
        axes[1].set_yscale("log")
        axes[1].set_ylabel("learning rate")
    axes[-1].set_xlabel(xkey or "record")
    return png_bytes(fig)


def blank_figure(w: float, h: float) -> tuple[Figure, Any]:
    """A figure with one axes, made without pyplot, so no global figure state; shared with backtest's report."""
    fig = Figure(figsize=(w, h), layout="constrained")
    return fig, fig.add_subplot()


def png_bytes(fig: Figure) -> bytes:
    """The figure as PNG bytes at the reports' DPI, ready to embed."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    return buf.getvalue()


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) and np.isfinite(v)


def floats_or_nan(values: Sequence[Any]) -> list[float]:
    """Missing or non-finite values as NaN, which matplotlib leaves as gaps."""
    return [float(v) if _is_number(v) else np.nan for v in values]


def _series(
    records: Sequence[Mapping[str, Any]], xkey: str | None, ykey: str
) -> tuple[list[float], list[float]]:
    """(x, y) of the records that have a number for ykey (and for xkey when there is one)."""
    pts = [
        (r.get(xkey) if xkey else i, r[ykey])
        for i, r in enumerate(records)
        if _is_number(r.get(ykey)) and (xkey is None or _is_number(r.get(xkey)))
    ]
    return [float(p[0]) for p in pts], [float(p[1]) for p in pts]
