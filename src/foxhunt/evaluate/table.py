"""The evaluation result as a plain-text table for the terminal (the same numbers as metrics.json)."""

from __future__ import annotations

from typing import Any


def _f(x: Any, width: int = 8, digits: int = 4) -> str:
    return f"{x:>{width}.{digits}f}" if isinstance(x, (int, float)) else f"{'-':>{width}}"


def _get(d: dict[Any, Any], q: float) -> Any:
    return next((v for k, v in d.items() if float(k) == q), None)


def format_results(result: dict[str, Any]) -> str:
    model = result["model"]
    qs = [float(q) for q in model["quantiles"]]
    sources = {"model": model, **result["baselines"]}
    qcols = "".join(f"{'qrisk p' + format(q * 100, 'g'):>12}" for q in qs)
    header = f"{'source':<20}{qcols}{'pinball':>10}{'MAE p50':>10}{'cover':>8}{'hit':>7}{'IC':>8}"
    lines = [
        f"target {result['target']}; {result['period']['origins']:,} origins from "
        f"{result['period']['first_origin']} to {result['period']['last_origin']}",
        header,
        "-" * len(header),
    ]
    for name, res in sources.items():
        o = res["overall"]
        cover = next(iter(o.get("coverage", {}).values()), None)
        lines.append(
            f"{name:<20}" + "".join(_f(_get(o["q_risk"], q), 12) for q in qs)
            + _f(o.get("mean_pinball"), 10, 6) + _f(o.get("mae_median"), 10, 6) + _f(cover, 8, 3)
            + _f(o.get("hit_rate"), 7, 3) + _f(o.get("ic"), 8, 3)
        )
    if result.get("skill"):
        lines.append("")
        lines.append("skill of the model (1 - qrisk_model / qrisk_baseline; > 0 means the model is better)")
        for name, sk in result["skill"].items():
            lines.append(f"  vs {name:<16}" + "".join(_f(_get(sk, q), 12) for q in qs))
    return "\n".join(lines)
