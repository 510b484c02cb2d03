"""The evaluation result for the terminal: the verdict sentence first, then a plain-text table (the same numbers as
metrics.json)."""

from __future__ import annotations

from typing import Any

from foxhunt.evaluate.paired import left_out_text
from foxhunt.model.config import quantile_label


def _f(x: Any, width: int = 8, digits: int = 4) -> str:
    return f"{x:>{width}.{digits}f}" if isinstance(x, (int, float)) else f"{'-':>{width}}"


def _get(d: dict[Any, Any], q: float) -> Any:
    return next((v for k, v in d.items() if float(k) == q), None)


def coverage_line(cal: dict[str, Any]) -> str:
    """'calibrated (adaptive shifts); p10-p90 coverage: raw 0.612 -> calibrated 0.797 (nominal 0.80); share below p10
    0.18 -> 0.10, ...'."""
    cov = cal["coverage"]
    label = next((k for k in next(iter(cov.values()), {}) if k != "below"), None)
    parts = []
    if label:
        lo, hi = (float(x[1:]) / 100 for x in label.split("-"))
        parts.append(f"{label} coverage: " + " -> ".join(f"{k} {_f(v.get(label), 0, 3).strip()}" for k, v in cov.items())
                     + f" (nominal {hi - lo:.2f})")
    qs = list(next(iter(cov.values()), {}).get("below", {}))
    parts.append("share below " + ", ".join(
        f"{quantile_label(q)} " + " -> ".join(_f(v["below"].get(q), 0, 3).strip() for v in cov.values()) for q in qs))
    how = f" ({cal['method']} shifts)" if cal.get("method") else ""
    state = f"calibrated{how}" if cal.get("applied") else f"not calibrated ({cal.get('not_applied')})"
    return f"{state}; " + "; ".join(parts)


def format_results(result: dict[str, Any], simulated: bool = False) -> str:
    """`simulated`: the bars are the bundled sample; the table's header line says so, as the report's claim does."""
    model = result["model"]
    qs = [float(q) for q in model["quantiles"]]
    raw = {"model (raw)": result["model_raw"]} if result.get("model_raw") else {}
    sources = {"model": model, **raw, **result["baselines"]}
    comparisons = result.get("comparisons") or {}
    skills = {k: c.get("skill") or {} for k, c in comparisons.items()}
    width = max([len("source"), *(len(k) for k in sources), *(len(f"  vs {k}") for k in skills)]) + 2
    qcols = "".join(f"{'qrisk ' + quantile_label(q):>12}" for q in qs)
    header = f"{'source':<{width}}{qcols}{'pinball':>10}{'MAE p50':>10}{'cover':>8}{'hit':>7}{'IC':>8}"
    claim = result.get("verdict") or {}
    lines = [
        *[c for c in (claim.get("sentence"), claim.get("seed_spread")) if c],
        f"target {result['target']}; {result['period']['origins']:,} origins from "
        f"{result['period']['first_origin']} to {result['period']['last_origin']}"
        + (f" ({result['period']['scored']})" if result["period"].get("scored") else ""),
        *([coverage_line(result["calibration"])] if result.get("calibration") else []),
        header + ("  (simulated)" if simulated else ""),
        "-" * len(header),
    ]
    for name, res in sources.items():
        o = res["overall"]
        cover = next(iter(o.get("coverage", {}).values()), None)
        lines.append(
            f"{name:<{width}}" + "".join(_f(_get(o["q_risk"], q), 12) for q in qs)
            + _f(o.get("mean_pinball"), 10, 6) + _f(o.get("mae_median"), 10, 6) + _f(cover, 8, 3)
            + _f(o.get("hit_rate"), 7, 3) + _f(o.get("ic"), 8, 3)
        )
    if skills:
        lines.append("")
        lines.append("skill of the model on the origins both forecast (1 - qrisk_model / qrisk_baseline; > 0 means the "
                     "model is better); p: Diebold-Mariano, pooled over the series (equal: the losses differ by float "
                     "rounding alone, not tested); won: series where the model's q-risk is lower (significantly: in "
                     "brackets)")
        lines.append(f"{'':<{width}}" + "".join(f"{quantile_label(q):>12}" for q in qs) + f"{'origins':>10}"
                     f"{'series':>8}")
        for name, sk in skills.items():
            c = comparisons[name]
            lines.append(f"{'  vs ' + name:<{width}}" + "".join(_f(_get(sk, q), 12) for q in qs)
                         + f"{c['origins']:>10,}{c['series']:>8}")
            lines.append(f"{'    p':<{width}}" + "".join(_p(_get(c['dm'], q)) for q in qs))
            lines.append(f"{'    won':<{width}}" + "".join(_won(_get(c['series_won'], q)) for q in qs))
        for name, c in comparisons.items():
            left = left_out_text(c.get("left_out"))
            if left:
                lines.append(f"left out of the comparison with {name} ({c['left_out']['origins']:,} origins): {left}")
    return "\n".join(lines)


def _p(dm: dict[str, Any] | None) -> str:
    """A test's p-value, or `equal` where the forecasts are equal to float rounding (not tested)."""
    p = (dm or {}).get("p_value")
    if (dm or {}).get("equal"):
        return f"{'equal':>12}"
    return f"{'<0.0001':>12}" if p is not None and p < 1e-4 else _f(p, 12)


def _won(w: dict[str, int] | None) -> str:
    """`12/16 (5)`: series where the model's q-risk is lower, of all compared, and (in brackets) those where it is
    significantly lower."""
    return f"{'-':>12}" if not w else f"{w['won']}/{w['of']} ({w['won_significant']})".rjust(12)
