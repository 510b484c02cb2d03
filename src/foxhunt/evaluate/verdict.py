"""The claim an evaluation makes, in one plain sentence: which baseline is strongest, and whether the model beats it,
with the evidence.

The rules, the same for `foxhunt evaluate`, `foxhunt backtest` and the line `foxhunt train` ends with:
- every comparison is made on the rows both forecast (evaluate/paired.py): a baseline that cannot forecast a series
  or an origin is compared with the model where it can, and the sentence says how much was left out;
- judged quantiles: the outer pair (the lowest and highest quantile: p10 and p90 by default). The median is left
  out: for returns every zero-median forecast scores a q-risk of 1.0 there, so it tells the sources apart least, and
  the tails are what a volatility forecast is for;
- at each judged quantile the model is "better" than a baseline when the Diebold-Mariano test of equal pinball loss,
  pooled over the panel (evaluate/significance.py), rejects at 5% two-sided in its favour, "worse" when it rejects
  against it, and "level" when it does not reject: a difference that could be noise is never a win. Forecasts whose
  losses differ by float rounding alone (significance.ROUNDING) are "level" untested: the test's `equal`;
- the strongest baseline is the one the model's skill is lowest against, averaged over the judged quantiles (q-risks
  on different rows cannot be ranked directly; the skill against each baseline is on that baseline's rows);
- the model is called better only when it is better than EVERY baseline at EVERY judged quantile. Otherwise the
  sentence names the baselines it is not better than;
- a baseline that could not be scored (GARCH without the `arch` package) is named, so "all baselines" means the ones
  that were scored.

Inputs are `Comparison.result()` dicts (evaluate/paired.py), also after a JSON round trip.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from foxhunt.evaluate.significance import ALPHA
from foxhunt.model.config import quantile_label

RULE = f"Diebold-Mariano, {ALPHA:.0%} two-sided, on the origins both forecast"


@dataclass(frozen=True)
class Verdict:
    sentence: str
    strongest: str | None  # None when no baseline was scored
    better: bool  # significantly better than every scored baseline at every judged quantile
    quantiles: tuple[float, ...]  # the judged quantiles
    skill: dict[str, dict[str, float | None]]  # baseline -> judged quantile (as text) -> 1 - model / baseline
    p_value: dict[str, dict[str, float | None]]  # baseline -> judged quantile -> pooled Diebold-Mariano p-value
    outcome: dict[str, dict[str, str]]  # baseline -> judged quantile -> "better", "level", "worse" or "none"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def judged_quantiles(quantiles: Sequence[float]) -> tuple[float, ...]:
    """The outer pair of `quantiles` (one quantile alone is judged by itself)."""
    qs = sorted(float(q) for q in quantiles)
    return (qs[0], qs[-1]) if len(qs) > 1 else tuple(qs)


def at(d: Mapping[Any, Any] | None, q: float) -> Any:
    """d[q] whether the keys are floats or their JSON strings; None when missing or not a finite number (a nested
    dict is returned as it is)."""
    v = next((v for k, v in (d or {}).items() if float(k) == q), None)
    if isinstance(v, Mapping):
        return v
    return float(v) if isinstance(v, (int, float)) and v == v and abs(v) != float("inf") else None


def outcome(c: Mapping[str, Any], q: float) -> str:
    """The comparison's outcome at quantile q: the pooled test's, "level" where its sign disagrees with the skill's
    (the test weighs an origin's steps as one, q-risk each step: only a difference near 0 can flip)."""
    sk, dm = at(c.get("skill"), q), at(c.get("dm"), q) or {}
    kind = dm.get("outcome", "none") if sk is not None else "none"
    if (kind == "better" and sk <= 0) or (kind == "worse" and sk >= 0):
        return "level"
    return kind


def p_short(p: float | None) -> str:
    """`0.031`, `<0.001`, `n/a` (no test)."""
    return "n/a" if p is None else "<0.001" if p < 0.001 else f"{p:.3f}"


def dm_short(dm: Mapping[str, Any] | None) -> str:
    """A test (`DMTest.to_dict()`) in a few characters: its `p_short`, or `equal` where the forecasts' losses are
    equal to float rounding and nothing was tested."""
    return "equal" if (dm or {}).get("equal") else p_short((dm or {}).get("p_value"))


def p_text(p: float | None) -> str:
    """`p = 0.031`, `p < 0.001`, `p n/a`."""
    short = p_short(p)
    return f"p {short[0]} {short[1:]}" if short.startswith("<") else f"p {short}" if p is None else f"p = {short}"


def describe(c: Mapping[str, Any], q: float) -> str:
    """`better at p10 (q-risk 1.9% lower, p = 0.003)`, `level at p90 (q-risk 0.4% higher, p = 0.412)`, `level at
    p10 (q-risk equal to float rounding, not tested)`."""
    sk = at(c.get("skill"), q)
    kind = outcome(c, q)
    if kind == "none" or sk is None:
        return f"not comparable at {quantile_label(q)}"
    if (at(c.get("dm"), q) or {}).get("equal"):
        return f"{kind} at {quantile_label(q)} (q-risk equal to float rounding, not tested)"
    size = "the same" if sk == 0 else f"{abs(sk):.1%} {'lower' if sk > 0 else 'higher'}"
    return f"{kind} at {quantile_label(q)} (q-risk {size}, {p_text((at(c.get('dm'), q) or {}).get('p_value'))})"


def strongest_baseline(comparisons: Mapping[str, Mapping[str, Any]], judged: Sequence[float]) -> str | None:
    """The baseline the model's skill is lowest against, averaged over the judged quantiles (those with every
    judged value)."""
    means = {}
    for name, c in comparisons.items():
        values = [at(c.get("skill"), q) for q in judged]
        if all(v is not None for v in values):
            means[name] = statistics.fmean(v for v in values if v is not None)
    return min(means, key=means.__getitem__) if means else None


def coverage(c: Mapping[str, Any]) -> str:
    """`on 9,328 origins of 35 series (4 series and 580 origins with no forecast of it left out)`."""
    n, s = int(c.get("origins", 0)), int(c.get("series", 0))
    left = c.get("left_out") or {}
    gone, lost = len(left.get("series", [])), int(left.get("origins", 0))
    text = f"on {n:,} origins of {s} series"
    if lost:
        what = f"{gone} series and " if gone else ""
        text += f" ({what}{lost:,} origins with no forecast of it left out)"
    return text


def series_won(c: Mapping[str, Any], judged: Sequence[float]) -> str:
    """`a lower q-risk in 12 of 16 series at p10 (5 significantly) and 14 of 16 at p90 (7 significantly)`; "" for a
    single series, whose test is the pooled one."""
    parts = []
    for i, q in enumerate(judged):
        w = at(c.get("series_won"), q)
        if w and w["of"] > 1:
            of = f" of {w['of']} series" if i == 0 else f" of {w['of']}"
            parts.append(f"{w['won']}{of} at {quantile_label(q)} ({w['won_significant']} significantly)")
    return "a lower q-risk in " + " and ".join(parts) if parts else ""


def verdict(comparisons: Mapping[str, Mapping[str, Any]], quantiles: Sequence[float], who: str = "The model",
            missing: Mapping[str, str] | None = None) -> Verdict:
    """One sentence judging the model against every baseline it was compared with (`comparisons`: baseline ->
    `Comparison.result()`); `missing`: baselines that were expected but not scored, with the reason."""
    judged = judged_quantiles(quantiles)
    where = " and ".join(quantile_label(q) for q in judged)
    keys = {q: f"{q:g}" for q in judged}
    skills = {b: {keys[q]: at(c.get("skill"), q) for q in judged} for b, c in comparisons.items()}
    pvals = {b: {keys[q]: (at(c.get("dm"), q) or {}).get("p_value") for q in judged} for b, c in comparisons.items()}
    kinds = {b: {keys[q]: outcome(c, q) for q in judged} for b, c in comparisons.items()}
    gaps = "".join(f"; {name} was not scored ({why})" for name, why in (missing or {}).items())
    strongest = strongest_baseline(comparisons, judged)
    if strongest is None:
        return Verdict(f"No baseline could be scored at {where}, so there is no claim to make{gaps}.", None, False,
                       judged, skills, pvals, kinds)
    n = len(comparisons)
    better = all(k == "better" for by_q in kinds.values() for k in by_q.values())
    top = comparisons[strongest]
    won = series_won(top, judged)
    against = (f"{' and '.join(describe(top, q) for q in judged)} {coverage(top)}" + (f", with {won}" if won else ""))
    if better:
        scope = "the only baseline" if n == 1 else f"all {n} baselines"
        sentence = f"{who} beats {scope} at {where} ({RULE}): against the strongest, {strongest}, it is {against}{gaps}."
        return Verdict(sentence, strongest, True, judged, skills, pvals, kinds)
    # each baseline named once, with every judged quantile the model is not better at
    others = [f"{b}: " + ", ".join(describe(comparisons[b], q) for q in judged if kinds[b][keys[q]] != "better")
              for b in comparisons if b != strongest and any(k != "better" for k in kinds[b].values())]
    head = f"{who} does not beat every baseline at {where} ({RULE})"
    if all(k == "better" for k in kinds[strongest].values()):
        sentence = f"{head}: it beats the strongest, {strongest} ({against}), but not " + "; ".join(others) + f"{gaps}."
    else:
        also = f"; nor does it beat {'; '.join(others)}" if others else ""
        sentence = f"{head}: against the strongest, {strongest}, it is {against}{also}{gaps}."
    return Verdict(sentence, strongest, False, judged, skills, pvals, kinds)


def validation_claim(comparisons: Mapping[str, Mapping[str, Any]], quantiles: Sequence[float],
                     model: Mapping[Any, Any], origins: int) -> str:
    """The clause `foxhunt train` ends with, from the best weights' validation forecasts: the model's q-risk on every
    validation origin (`model`, `origins`), the strongest baseline's and the model's on the origins it covers with
    the tests, and the figures of every baseline the model is not better than:
    `validation q-risk p10 0.5042 / p90 0.5314 (6,896 origins); the strongest of 5 baselines, garch_t: 0.5346 /
    0.5343 against the model's 0.5042 / 0.5314 on 6,896 origins, better at p10 (q-risk 5.7% lower, p = 0.002),
    level at p90 (q-risk 0.5% lower, p = 0.610): NOT better than garch_t`."""
    judged = judged_quantiles(quantiles)
    mine = " / ".join(f"{quantile_label(q)} {v:.4f}" for q in judged if (v := at(model, q)) is not None)
    strongest = strongest_baseline(comparisons, judged)
    if strongest is None:
        return f"validation q-risk {mine} ({origins:,} origins); no baseline could be scored on validation"
    v = verdict(comparisons, quantiles)
    n = len(comparisons)
    if v.better:
        end = f"better than {'it' if n == 1 else f'all {n}'} (significantly at {' and '.join(map(quantile_label, judged))})"
    else:
        lost = sorted((b for b, by_q in v.outcome.items() if any(k != "better" for k in by_q.values())),
                      key=lambda b: b != strongest)  # the strongest first: its figures are above
        end = "NOT better than " + "; ".join(b if b == strongest else figures(b, comparisons[b], judged)
                                             for b in lost)
    return (f"validation q-risk {mine} ({origins:,} origins); the strongest of {n} baseline{'' if n == 1 else 's'}, "
            f"{figures(strongest, comparisons[strongest], judged)}: {end}")


def figures(name: str, c: Mapping[str, Any], judged: Sequence[float]) -> str:
    """`garch_t: 0.5346 / 0.5343 against the model's 0.5042 / 0.5314 on 6,896 origins, better at p10 (...), ...`."""
    def pair(key: str) -> str:
        return " / ".join("-" if (v := at(c.get(key), q)) is None else f"{v:.4f}" for q in judged)

    return (f"{name}: {pair('baseline_q_risk')} against the model's {pair('model_q_risk')} on "
            f"{int(c.get('origins', 0)):,} origins, " + ", ".join(describe(c, q) for q in judged))


def seed_spread(seeds: Mapping[str, Any], quantiles: Sequence[float]) -> str | None:
    """`validation q-risk over 3 seeds (seed 1 kept, lowest val_loss): p10 0.4992 / 0.5010 / 0.5100, p90 ... (min /
    median / max)` from a run's seeds.json; None for a run of one seed."""
    rows = seeds.get("seeds") or []
    if len(rows) < 2:
        return None
    parts = []
    for q in judged_quantiles(quantiles):
        values = [v for r in rows if (v := at(r.get("val_qrisk"), q)) is not None]
        if values:
            parts.append(f"{quantile_label(q)} {min(values):.4f} / {statistics.median(values):.4f} / {max(values):.4f}")
    return (f"validation q-risk over {len(rows)} seeds (seed {seeds.get('kept_seed')} kept, lowest val_loss): "
            + ", ".join(parts) + " (min / median / max); the claim is for the kept seed")
