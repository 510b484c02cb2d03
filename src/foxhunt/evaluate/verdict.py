"""The claim an evaluation makes, in one plain sentence: which baseline is strongest, and whether the model beats it.

The rules, the same for `foxhunt evaluate` and for the line `foxhunt train` ends with:
- judged quantiles: the outer pair (the lowest and highest quantile: p10 and p90 by default). The median is left
  out: for returns every zero-median forecast scores a q-risk of 1.0 there, so it tells the sources apart least, and
  the tails are what a volatility forecast is for;
- the strongest baseline has the lowest mean q-risk over the judged quantiles;
- the model is called better only when it beats EVERY baseline at EVERY judged quantile by more than TIE (relative):
  a difference that rounds to 0.0% is a tie, never a win. Otherwise the sentence names the baselines it does not beat;
- a baseline that could not be scored (GARCH without the `arch` package) is named, so "all baselines" means the ones
  that were scored.

Inputs are q-risk dicts keyed by quantile (floats, or their JSON strings after a round trip).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

TIE = 0.001  # |1 - model / baseline| at or below this is a tie: below the 0.1% the sentence can show


@dataclass(frozen=True)
class Verdict:
    sentence: str
    strongest: str | None  # None when no baseline was scored
    better: bool  # beats every scored baseline at every judged quantile
    quantiles: tuple[float, ...]  # the judged quantiles
    skill: dict[str, dict[str, float | None]]  # baseline -> judged quantile (as text) -> 1 - model / baseline

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def judged_quantiles(quantiles: Sequence[float]) -> tuple[float, ...]:
    """The outer pair of `quantiles` (one quantile alone is judged by itself)."""
    qs = sorted(float(q) for q in quantiles)
    return (qs[0], qs[-1]) if len(qs) > 1 else tuple(qs)


def label(q: float) -> str:
    return f"p{q * 100:g}"


def at(d: Mapping[Any, Any] | None, q: float) -> float | None:
    """d[q] whether the keys are floats or their JSON strings; None when missing or not finite."""
    v = next((v for k, v in (d or {}).items() if float(k) == q), None)
    return float(v) if isinstance(v, (int, float)) and v == v and abs(v) != float("inf") else None


def strongest_baseline(baselines: Mapping[str, Mapping[Any, Any]], judged: Sequence[float]) -> str | None:
    """The baseline with the lowest mean q-risk over the judged quantiles (those with every judged value)."""
    means = {}
    for name, qrisk in baselines.items():
        values = [at(qrisk, q) for q in judged]
        if all(v is not None for v in values):
            means[name] = statistics.fmean(v for v in values if v is not None)
    return min(means, key=means.__getitem__) if means else None


def relative(model: float | None, baseline: float | None) -> float | None:
    """Skill 1 - model / baseline (> 0: the model's q-risk is lower), None when either is missing."""
    return None if model is None or baseline is None or baseline == 0 else 1.0 - model / baseline


def outcome(sk: float | None) -> str:
    return "none" if sk is None else "win" if sk > TIE else "loss" if sk < -TIE else "tie"


def describe(sk: float | None, q: float | None = None) -> str:
    """`1.9% lower at p10`, `0.4% higher at p90`, `level at p90 (within 0.1%)` (without `at ...` when q is None)."""
    kind, where = outcome(sk), "" if q is None else f" at {label(q)}"
    if kind == "none" or sk is None:
        return f"not comparable{where}"
    if kind == "tie":
        return f"level{where} (within {TIE:.1%})"
    return f"{abs(sk):.1%} {'lower' if kind == 'win' else 'higher'}{where}"


def verdict(model: Mapping[Any, Any], baselines: Mapping[str, Mapping[Any, Any]], quantiles: Sequence[float],
            who: str = "The model", missing: Mapping[str, str] | None = None) -> Verdict:
    """One sentence judging `model`'s q-risk (by quantile) against every baseline's; `missing`: baselines that were
    expected but not scored, with the reason."""
    judged = judged_quantiles(quantiles)
    where = " and ".join(label(q) for q in judged)
    skills = {b: {f"{q:g}": relative(at(model, q), at(qr, q)) for q in judged} for b, qr in baselines.items()}
    gaps = "".join(f"; {name} was not scored ({why})" for name, why in (missing or {}).items())
    strongest = strongest_baseline(baselines, judged)
    if strongest is None:
        return Verdict(f"No baseline could be scored at {where}, so there is no claim to make{gaps}.", None, False,
                       judged, skills)
    n = len(baselines)
    better = all(outcome(sk) == "win" for by_q in skills.values() for sk in by_q.values())
    against = ", ".join(describe(skills[strongest][f"{q:g}"], q) for q in judged)
    if better:
        scope = "the only baseline" if n == 1 else f"all {n} baselines"
        sentence = (f"{who} beats {scope} at {where}: against the strongest, {strongest}, its q-risk is "
                    f"{against}{gaps}.")
        return Verdict(sentence, strongest, True, judged, skills)
    # each baseline named once, with every judged quantile it is not beaten at
    lost = {b: [describe(by_q[f"{q:g}"], q) for q in judged if outcome(by_q[f"{q:g}"]) != "win"]
            for b, by_q in skills.items() if b != strongest}
    others = [f"{b} ({', '.join(how)})" for b, how in lost.items() if how]
    beats_strongest = all(outcome(sk) == "win" for sk in skills[strongest].values())
    head = f"{who} does not beat every baseline at {where}"
    if beats_strongest:
        sentence = (f"{head}: it beats the strongest, {strongest} ({against}), but not "
                    + "; ".join(others) + f"{gaps}.")
    else:
        also = f"; nor does it beat {'; '.join(others)}" if others else ""
        sentence = f"{head}: against the strongest, {strongest}, its q-risk is {against}{also}{gaps}."
    return Verdict(sentence, strongest, False, judged, skills)


def validation_claim(model: Mapping[Any, Any], baselines: Mapping[str, Mapping[Any, Any]],
                     quantiles: Sequence[float]) -> str:
    """The clause `foxhunt train` ends with: `validation q-risk p10 0.5042 / p90 0.5314 vs 0.5346 / 0.5343 for
    garch_t, the strongest of 5 baselines (5.7% lower / 0.5% lower): better than all 5`."""
    judged = judged_quantiles(quantiles)
    strongest = strongest_baseline(baselines, judged)
    mine = " / ".join(f"{label(q)} {at(model, q):.4f}" for q in judged if at(model, q) is not None)
    if strongest is None:
        return f"validation q-risk {mine}; no baseline could be scored on validation"
    theirs = " / ".join(f"{at(baselines[strongest], q):.4f}" for q in judged)
    v = verdict(model, baselines, quantiles)
    diffs = " / ".join(describe(v.skill[strongest][f"{q:g}"]) for q in judged)
    n = len(baselines)
    if v.better:
        end = f"better than {'it' if n == 1 else f'all {n}'}"
    else:
        lost = [b for b, by_q in v.skill.items() if any(outcome(sk) != "win" for sk in by_q.values())]
        end = "NOT better than " + ", ".join(lost)
    return (f"validation q-risk {mine} vs {theirs} for {strongest}, the strongest of {n} baseline"
            f"{'' if n == 1 else 's'} ({diffs}): {end}")


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
            parts.append(f"{label(q)} {min(values):.4f} / {statistics.median(values):.4f} / {max(values):.4f}")
    return (f"validation q-risk over {len(rows)} seeds (seed {seeds.get('kept_seed')} kept, lowest val_loss): "
            + ", ".join(parts) + " (min / median / max); the claim is for the kept seed")
