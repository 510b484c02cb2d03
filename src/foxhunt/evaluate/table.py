"""The evaluation result for the terminal: the verdict sentence first, then a plain-text table (the same numbers as
metrics.json)."""

from __future__ import annotations

from typing import Any


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
        f"p{float(q) * 100:g} " + " -> ".join(_f(v["below"].get(q), 0, 3).strip() for v in cov.values()) for q in qs))
    how = f" ({cal['method']} shifts)" if cal.get("method") else ""
    state = f"calibrated{how}" if cal.get("applied") else f"not calibrated ({cal.get('not_applied')})"
    return f"{state}; " + "; ".join(parts)


def format_results(result: dict[str, Any], simulated: bool = False) -> str:
    """`simulated`: the bars are the bundled sample; the table's header line says so, as the report's claim does."""
    model = result["model"]
    qs = [float(q) for q in model["quantiles"]]
    raw = {"model (raw)": result["model_raw"]} if result.get("model_raw") else {}
    sources = {"model": model, **raw, **result["baselines"]}
    skills = result.get("skill") or {}
    # the name column fits the longest name (a baseline's, or its `  vs NAME` in the skill rows), so every number sits
    # under its heading whatever the names' length
    width = max([len("source"), *(len(k) for k in sources), *(len(f"  vs {k}") for k in skills)]) + 2
    qcols = "".join(f"{'qrisk p' + format(q * 100, 'g'):>12}" for q in qs)
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
        lines.append("skill of the model (1 - qrisk_model / qrisk_baseline; > 0 means the model is better)")
        for name, sk in skills.items():
            lines.append(f"{'  vs ' + name:<{width}}" + "".join(_f(_get(sk, q), 12) for q in qs))
    return "\n".join(lines)
