"""The self-contained evaluation report: one HTML file with the tables, a glossary and every figure embedded.

Someone who never ran foxhunt should be able to open report.html (no network, no other files) and tell whether the
model beats simple baselines. Inputs are the dicts `MetricAccumulator.result()` returns (also after a JSON round
trip, where quantile keys become strings).
"""

from __future__ import annotations

import base64
import html
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from foxhunt.atomic import write_text
from foxhunt.data.io.sample_path import is_bundled_sample
from foxhunt.evaluate.paired import left_out_text


def data_note(paths: Sequence[str]) -> str:
    """A report's `data:` line, which says `(simulated)` for the bundled sample."""
    return f"data: {', '.join(paths)}" + (" (simulated: the bundled sample)" if is_bundled_sample(paths) else "")


BASELINE_TEXT = {
    "training_quantiles": "the target's quantiles over the training period, the same at every origin",
    "rolling_vol": "median 0 (returns) or the recent mean (range), quantiles from a normal with the standard "
    "deviation of the last 20 bars up to the origin",
    "garch_t": "GARCH(1,1) with Student-t errors fitted on the training period, run forward without refitting; for "
    "the range target its volatility forecast is scaled by training-period quantiles of range / volatility",
    "seasonal_rolling_vol": "intraday bars: the rolling volatility of the target divided by the training period's "
    "time-of-day volatility profile, multiplied back by the profile at each forecast step's time of day",
    "har": "HAR (Corsi 2009): for each step, a least-squares regression of the next bar's squared move (the range, for "
    "the range target) on its averages over the last bar, day, week and month, fitted on the training period (intraday: "
    "on the deseasonalized measure); quantiles from the training period's actual / forecast scale",
}

GLOSSARY = [
    (
        "model, model (raw)",
        "model: the forecasts as <code>foxhunt predict</code> writes them, calibrated by conformal shifts fitted "
        "on the model's validation split after training, fixed or adaptive (moved by every outcome since; the "
        "calibration note says which), unless --no-calibration; model (raw): the network's own quantiles, before "
        "that correction, on the same origins.",
    ),
    (
        "q-risk",
        "2 &times; (sum of pinball losses) / (sum of |actual|) over every origin and horizon, per quantile q "
        "(the TFT paper's metric). Lower is better. For returns, forecasting a median of 0 scores exactly 1.0 at "
        "q = 0.5, so a median q-risk below 1 beats the no-change forecast.",
    ),
    (
        "pinball loss",
        "the loss of a quantile forecast: q &times; (y &minus; forecast) when the actual y is above it, "
        "(1 &minus; q) &times; (forecast &minus; y) when below. Its expectation is smallest at the true quantile.",
    ),
    ("MAE (median)", "mean absolute error of the median forecast, in target units."),
    (
        "coverage",
        "share of actuals inside a central interval, e.g. p10-p90 (between the 0.1 and 0.9 quantile forecasts); "
        "it should be close to the nominal width (80% for p10-p90). Lower means over-confident intervals.",
    ),
    (
        "calibration",
        "share of actuals below each quantile forecast; ideally equal to q. Ties (actual exactly equal to the "
        "forecast) count one half.",
    ),
    (
        "hit rate",
        "share of forecasts whose median has the same sign as the actual, cases where either is exactly 0 left "
        "out; 0.5 is a coin flip. Meaningful for returns only.",
    ),
    (
        "IC",
        "information coefficient: Spearman rank correlation between the median forecast and the actual. 0 means "
        "no ranking skill; for returns even a few hundredths can matter.",
    ),
    (
        "skill",
        "1 &minus; q-risk(model) / q-risk(baseline) per quantile: above 0 the model is better (0.05 = 5% lower "
        "loss), below 0 the baseline is better. Each is computed on the (origin, step) pairs both forecast: where a "
        "baseline has no forecast (too little history to fit it, a series that starts after the training cut), the "
        "model is left out too, and the origins and series left out are counted with the reason. Baselines use only "
        "data up to each origin.",
    ),
    (
        "p (Diebold-Mariano)",
        "the two-sided p-value of the Diebold-Mariano test that the model's and the baseline's mean pinball loss are "
        "equal, per quantile: loss differentials per origin (averaged over its forecast steps), a Newey-West "
        "(Bartlett) variance because forecasts of several steps overlap, Student's t. Pooled over the panel, the "
        "differentials of all series at one origin time are summed into one term, since markets move together. "
        "The verdict calls the model better or worse only where p &lt; 0.05, level otherwise. <i>equal</i>: the "
        "two losses differ by float rounding alone (the model's forecasts are float32), so nothing is tested and the "
        "two are level.",
    ),
    (
        "won",
        "series where the model's q-risk is lower than the baseline's, out of the series compared, and in brackets "
        "those where it is significantly lower (the test on that series alone, p &lt; 0.05).",
    ),
    ("n", "number of (origin, horizon) pairs scored."),
]

CSS = """
body { font-family: system-ui, -apple-system, Segoe UI, Helvetica, Arial, sans-serif; margin: 2em auto; max-width: 1100px;
       color: #222; line-height: 1.4; padding: 0 1em; }
h1 { font-size: 1.6em; } h2 { font-size: 1.25em; margin-top: 1.8em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 0.6em 0 1.2em; font-size: 0.88em; }
th, td { border: 1px solid #ddd; padding: 0.25em 0.55em; text-align: right; }
th { background: #f4f4f4; } td.name, th.name { text-align: left; }
tr.model td { font-weight: 600; } td.good { color: #116611; } td.bad { color: #aa2222; }
figure { margin: 1em 0; } img { max-width: 100%; border: 1px solid #eee; }
p.claim { font-size: 1.1em; background: #f6f8fa; border-left: 4px solid #446; padding: 0.6em 0.9em; }
figcaption { font-size: 0.9em; color: #555; } dt { font-weight: 600; } dd { margin: 0 0 0.5em 1.2em; }
"""


def write_report(
    path: str | Path,
    *,
    title: str,
    metrics: Mapping[str, Any],
    baselines: Mapping[str, Mapping[str, Any]],
    images: Mapping[str, bytes],
    notes: Sequence[str] = (),
    claim: Sequence[str] = (),
    comparisons: Mapping[str, Mapping[str, Mapping[str, Any]]] | None = None,
) -> None:
    """Write report.html atomically.

    metrics: one `MetricAccumulator.result()` (shown as "model") or {model name: result}; baselines: {name: result}
    on the same origins; images: {caption: PNG bytes}, each embedded as a base64 data URI; notes: plain-text lines
    (data, split, run settings) shown near the top; claim: the verdict (evaluate/verdict.py) and what it depends
    on, the first thing a reader sees; comparisons: {model name: {baseline: Comparison.result()}} (evaluate/paired.py),
    the skill tables with their tests, on the pairs each model and baseline both forecast.
    """
    comparisons = comparisons or {}
    models = {"model": metrics} if "overall" in metrics else dict(metrics)
    sources = {**models, **baselines}
    qs = _quantiles(sources)
    parts = [f"<h1>{_e(title)}</h1>"]
    if claim:
        parts.append('<p class="claim">' + "<br>".join(_e(c) for c in claim) + "</p>")
    if notes:
        parts.append("<ul>" + "".join(f"<li>{_e(n)}</li>" for n in notes) + "</ul>")
    parts.append(_baseline_list(baselines))
    parts.append("<h2>Overall</h2>" + _metric_table("source", [(None, sources)], models, qs, full=True))
    if comparisons:
        parts.append("<h2>Skill against the baselines, with significance</h2>" + _comparison_table(comparisons, qs))
    horizon = max((len(r.get("per_horizon", [])) for r in sources.values()), default=0)
    if horizon:
        rows = [
            (h + 1, {k: _at(r.get("per_horizon", []), h) for k, r in sources.items()}) for h in range(horizon)
        ]
        parts.append("<h2>By horizon (bars ahead)</h2>" + _metric_table("h", rows, models, qs, blocks=True))
        if comparisons:
            by_h = [(h + 1, {m: {b: _at(c.get("per_horizon", []), h) for b, c in by_b.items()}
                             for m, by_b in comparisons.items()}) for h in range(horizon)]
            parts.append("<h3>Skill by horizon</h3>" + _skill_table("h", by_h, qs))
    series = _series_keys(sources)
    if series:
        rows = [(s, {k: _series_block(r, s) for k, r in sources.items()}) for s in series]
        parts.append("<h2>By series</h2>" + _metric_table("series", rows, models, qs, blocks=True))
        if comparisons:
            by_s = [(s, {m: {b: _series_block(c, s) for b, c in by_b.items()} for m, by_b in comparisons.items()})
                    for s in series]
            parts.append("<h3>Skill by series</h3>" + _skill_table("series", by_s, qs, tests=True))
    if images:
        parts.append("<h2>Figures</h2>" + "".join(_figure(cap, png) for cap, png in images.items()))
    parts.append(
        "<h2>How to read this report</h2><dl>" + "".join(f"<dt>{t}</dt><dd>{d}</dd>" for t, d in GLOSSARY)
    )
    parts.append("</dl>")
    doc = (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{_e(title)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n"
        + "\n".join(parts)
        + "\n</body>\n</html>\n"
    )
    write_text(path, doc)


def _metric_table(
    key_label: str,
    rows: list[tuple[Any, Mapping[str, Any]]],
    models: Mapping[str, Any],
    qs: list[float],
    full: bool = False,
    blocks: bool = False,
) -> str:
    """One row per (key, source). rows: [(key, {source: result or block})]; `blocks` says the values are already
    metric blocks (per horizon / per series), otherwise whole results whose "overall" block is used."""
    first = _first_block(rows, blocks)
    intervals = list((first or {}).get("coverage", {}))
    head = ([key_label] if blocks else []) + ["source"] + [f"q-risk {q:g}" for q in qs]
    if full:
        head += ["mean pinball", "MAE (median)"]
    head += [f"coverage {c}" for c in intervals]
    if full:
        head += [f"calibration {q:g}" for q in qs]
    head += ["hit rate", "IC", "n"]
    body = []
    for key, by_source in rows:
        for name, r in by_source.items():
            b = r if blocks else (r or {}).get("overall")
            if not b:
                continue
            cells = ([_e(str(key))] if blocks else []) + [_e(name)]
            cells += [_num(_q(b.get("q_risk"), q)) for q in qs]
            if full:
                cells += [_num(b.get("mean_pinball"), 6), _num(b.get("mae_median"), 6)]
            cells += [_num((b.get("coverage") or {}).get(c), 3) for c in intervals]
            if full:
                cells += [_num(_q(b.get("calibration"), q), 3) for q in qs]
            cells += [_num(b.get("hit_rate"), 3), _num(b.get("ic"), 3), str(b.get("n", ""))]
            body.append(_tr(cells, n_names=2 if blocks else 1, model=name in models))
    return _table(head, body, n_names=2 if blocks else 1)


def _comparison_table(comparisons: Mapping[str, Mapping[str, Mapping[str, Any]]], qs: list[float]) -> str:
    """Each model against each baseline on the pairs both forecast: skill, pooled p-value and series won per
    quantile, the origins and series compared, and what was left out and why."""
    head = (["model", "baseline"] + [f"skill {q:g}" for q in qs] + [f"p {q:g}" for q in qs]
            + [f"won {q:g}" for q in qs] + ["origins", "series", "left out"])
    body = []
    for m, by_b in comparisons.items():
        for b, c in by_b.items():
            won = [_q(c.get("series_won"), q) or {} for q in qs]
            cells = [_e(m), _e(b)] + [_signed(_q(c.get("skill"), q)) for q in qs]
            cells += [_p(_q(c.get("dm"), q)) for q in qs]
            cells += [f"{w['won']}/{w['of']} ({w['won_significant']})" if w else "&ndash;" for w in won]
            left = left_out_text(c.get("left_out"))
            cells += [f"{c.get('origins', 0):,}", str(c.get("series", "")),
                      _e(f"{c['left_out']['origins']:,} origins: {left}") if left else "none"]
            body.append(_tr(cells, n_names=2))
    return _table(head, body, n_names=2)


def _skill_table(key_label: str, rows: list[tuple[Any, Mapping[str, Mapping[str, Any]]]], qs: list[float],
                 tests: bool = False) -> str:
    """Skill of each model against each baseline per quantile (with the p-values when `tests`); rows
    [(key, {model: {baseline: comparison block}})]."""
    head = [key_label, "model", "baseline"] + [f"skill {q:g}" for q in qs] + ([f"p {q:g}" for q in qs] if tests else [])
    body = []
    for key, by_model in rows:
        for m, by_b in by_model.items():
            for b, block in by_b.items():
                if not block:
                    continue
                cells = [_e(str(key)), _e(m), _e(b)] + [_signed(_q(block.get("skill"), q)) for q in qs]
                if tests:
                    cells += [_p(_q(block.get("dm"), q)) for q in qs]
                body.append(_tr(cells, n_names=3))
    return _table(head, body, n_names=3)


def _baseline_list(baselines: Mapping[str, Any]) -> str:
    if not baselines:
        return "<p>No baselines were evaluated.</p>"
    items = "".join(
        f"<li><b>{_e(name)}</b>" + (f": {_e(BASELINE_TEXT[name])}" if name in BASELINE_TEXT else "") + "</li>"
        for name in baselines
    )
    return f"<p>Baselines, each compared with the model on the origins both forecast:</p><ul>{items}</ul>"


def _figure(caption: str, png: bytes) -> str:
    data = base64.b64encode(png).decode("ascii")
    return f'<figure><img alt="{_e(caption)}" src="data:image/png;base64,{data}"><figcaption>{_e(caption)}</figcaption></figure>'


def _table(head: list[str], body: list[str], n_names: int) -> str:
    ths = "".join(
        f'<th class="name">{_e(h)}</th>' if i < n_names else f"<th>{_e(h)}</th>" for i, h in enumerate(head)
    )
    return f"<table><thead><tr>{ths}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _tr(cells: list[str], n_names: int, model: bool = False) -> str:
    tds = []
    for i, c in enumerate(cells):
        cls = (
            "name"
            if i < n_names
            else ("good" if c.startswith("+") else "bad" if c.startswith("&minus;") else "")
        )
        tds.append(f'<td class="{cls}">{c}</td>' if cls else f"<td>{c}</td>")
    return f'<tr class="model">{"".join(tds)}</tr>' if model else f"<tr>{''.join(tds)}</tr>"


def _quantiles(sources: Mapping[str, Any]) -> list[float]:
    for r in sources.values():
        if r and r.get("quantiles"):
            return [float(q) for q in r["quantiles"]]
        if r and r.get("overall", {}).get("q_risk"):
            return sorted(float(q) for q in r["overall"]["q_risk"])
    return []


def _series_keys(sources: Mapping[str, Any]) -> list[Any]:
    keys: list[Any] = []
    for r in sources.values():
        for k in (r or {}).get("per_series", {}) or {}:
            if k not in keys and str(k) not in map(str, keys):
                keys.append(k)
    return keys


def _series_block(result: Mapping[str, Any], key: Any) -> Mapping[str, Any] | None:
    per = (result or {}).get("per_series") or {}
    if key in per:
        return per[key]
    return next((v for k, v in per.items() if str(k) == str(key)), None)


def _first_block(rows: list[tuple[Any, Mapping[str, Any]]], blocks: bool) -> Mapping[str, Any] | None:
    for _, by_source in rows:
        for r in by_source.values():
            b = r if blocks else (r or {}).get("overall")
            if b:
                return b
    return None


def _at(seq: Sequence[Any], i: int) -> Any:
    return seq[i] if i < len(seq) else None


def _q(d: Mapping[Any, Any] | None, q: float) -> Any:
    """d[q] whether the keys are floats or their JSON strings."""
    if not d:
        return None
    if q in d:
        return d[q]
    return next((v for k, v in d.items() if float(k) == q), None)


def _num(v: Any, digits: int = 4) -> str:
    return "&ndash;" if v is None or v != v else f"{v:.{digits}f}"


def _p(dm: Mapping[str, Any] | None) -> str:
    """A test's p-value, or `equal` where the forecasts are equal to float rounding (not tested)."""
    if (dm or {}).get("equal"):
        return "equal"
    v = (dm or {}).get("p_value")
    return "&ndash;" if v is None or v != v else "&lt;0.0001" if v < 1e-4 else f"{v:.4f}"


def _signed(v: Any) -> str:
    if v is None or v != v:
        return "&ndash;"
    v = round(v, 3) + 0.0  # -0.0004 shows as 0.000, not as a loss
    return f"+{v:.3f}" if v > 0 else f"&minus;{abs(v):.3f}" if v < 0 else "0.000"


def _e(s: str) -> str:
    return html.escape(str(s), quote=True)
