"""The table of benchmarks/quality.py: each model's scores on each dataset, read from foxhunt's own result files
(`foxhunt evaluate`'s metrics.json, `foxhunt backtest`'s backtest.json), averaged over the seeds, as markdown; and
its entry in benchmarks/RESULTS.md, with the commit and the machine.

Everything is read, nothing recomputed: q-risk, the strongest baseline and the skill against it, the coverage, and,
where the run wrote them, the Diebold-Mariano p-values and the series won (metrics.json `comparisons`: the model
against each baseline on the rows both forecast). A field the run did not write shows as "-".

foxhunt has one row per calibration method, the same trained models calibrated differently; a method other than
foxhunt's default also carries its comparison with the default's forecasts on the same rows (one more entry of
`comparisons`, VS_DEFAULT), shown in a table of its own: the before / after a change of the default is decided by.
"""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from foxhunt.evaluate.verdict import at, judged_quantiles
from foxhunt.model.config import DEFAULT_METHOD, quantile_label

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "RESULTS.md"
SECTION = "## `benchmarks/quality.py`: how good the forecasts are"
QUANTILES = (0.1, 0.5, 0.9)
DM_AGAINST = ("garch_t", "har")  # the baselines with a Diebold-Mariano column
WON_AT = 0.9  # series won at this quantile
PF = "pytorch-forecasting"
VS_DEFAULT = "default calibration"  # a calibration row's comparison with the default method's forecasts


def fox_label(method: str) -> str:
    """foxhunt's row for a calibration method, foxhunt's default marked."""
    return f"foxhunt, {method} calibration" + (" (default)" if method == DEFAULT_METHOD else "")


@dataclass(frozen=True)
class Score:
    """One model's scores on one dataset for one seed."""

    qrisk: dict[float, float | None]  # quantile -> q-risk
    strongest: str | None  # the verdict's strongest baseline
    skill: dict[str, dict[float, float | None]]  # baseline -> quantile -> 1 - model / baseline
    dm: dict[str, dict[float, float | None]]  # baseline -> quantile -> Diebold-Mariano p-value
    won: dict[str, tuple[int, int]]  # baseline -> (series won at WON_AT, series compared)
    coverage: float | None  # the outer interval's (p10-p90)
    origins: int
    train_s: float | None = None
    n_params: int | None = None
    notes: tuple[str, ...] = ()


def entry(d: Mapping[Any, Any] | None, q: float) -> Any:
    """d[q] whatever it holds, with quantile keys as floats or as their JSON text ("0.9")."""
    return next((v for k, v in (d or {}).items() if float(k) == q), None)


def score_of(result: Mapping[str, Any], origins: int, train_s: float | None = None, n_params: int | None = None,
             notes: Sequence[str] = ()) -> Score:
    """A Score from evaluate's metrics.json, or a backtest's `overall` with its `verdict` added."""
    model = result["model"]["overall"]
    qs = [float(q) for q in result["model"].get("quantiles", QUANTILES)]
    comparisons = result.get("comparisons") or {}
    skills = result.get("skill") or {}
    skill = {b: {q: at(comparisons.get(b, {}).get("skill") or skills.get(b), q) for q in qs}
             for b in {*skills, *comparisons}}
    dm = {b: {q: (entry(c.get("dm"), q) or {}).get("p_value") for q in qs} for b, c in comparisons.items()}
    won = {}
    for b, c in comparisons.items():
        w = entry(c.get("series_won"), WON_AT)
        if w:
            won[b] = (int(w["won"]), int(w["of"]))
    cover = next(iter((model.get("coverage") or {}).values()), None)
    return Score(qrisk={q: at(model["q_risk"], q) for q in qs}, strongest=(result.get("verdict") or {}).get("strongest"),
                 skill=skill, dm=dm, won=won, coverage=cover, origins=origins, train_s=train_s, n_params=n_params,
                 notes=tuple(notes))


@dataclass
class Row:
    """One model on one dataset: a Score per seed."""

    dataset: str
    model: str
    scores: list[Score] = field(default_factory=list)
    simulated: bool = False
    calibration: str | None = None  # foxhunt's rows: the calibration method

    @property
    def strongest(self) -> str | None:
        """The baseline most seeds call strongest (the first such in seed order on a tie)."""
        names = [s.strongest for s in self.scores if s.strongest]
        return Counter(names).most_common(1)[0][0] if names else None


def _mean(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.fmean(vals) if vals else None


def _num(x: float | None, digits: int = 4) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.1f}%"


def _p(x: float | None) -> str:
    return "-" if x is None else "<0.001" if x < 0.001 else f"{x:.3f}"


def cells(row: Row) -> list[str]:
    """The row's cells: means over the seeds; a p-value is the largest over the seeds (significant in every seed when
    it is below 0.05); series won the range over the seeds."""
    s = row.scores
    judged = judged_quantiles(QUANTILES)
    best = row.strongest
    qrisk = " / ".join(_num(_mean([x.qrisk.get(q) for x in s])) for q in QUANTILES)
    skill = " / ".join(_pct(_mean([x.skill.get(best, {}).get(q) for x in s])) for q in judged) if best else "-"

    def dm(b: str) -> str:
        ps = [[x.dm.get(b, {}).get(q) for x in s] for q in judged]
        return " / ".join("-" if any(v is None for v in p) else _p(max(p)) for p in ps)

    won = [x.won[best] for x in s if best in x.won]
    if won:
        lo, hi = min(w for w, _ in won), max(w for w, _ in won)
        won_text = f"{lo}/{won[0][1]}" if lo == hi else f"{lo}-{hi}/{won[0][1]}"
    else:
        won_text = "-"
    params = next((x.n_params for x in s if x.n_params), None)
    train = _mean([x.train_s for x in s])
    return [row.dataset, row.model, f"{params:,}" if params else "-", str(len(s)), qrisk, best or "-", skill,
            *(dm(b) for b in DM_AGAINST), won_text, _num(_mean([x.coverage for x in s]), 3),
            "-" if train is None else f"{train:.0f}"]


def header() -> list[str]:
    judged = " / ".join(quantile_label(q) for q in judged_quantiles(QUANTILES))
    return ["dataset", "model", "params", "seeds", " / ".join(f"q-risk {quantile_label(q)}" if i == 0 else quantile_label(q)
                                                             for i, q in enumerate(QUANTILES)),
            "best baseline", f"skill vs it {judged}", *(f"DM p vs {b} {judged}" for b in DM_AGAINST),
            f"series won {quantile_label(WON_AT)}", "p10-p90 cover", "train s"]


def markdown(rows: Sequence[Sequence[str]], head: Sequence[str]) -> str:
    lines = ["| " + " | ".join(head) + " |", "| " + " | ".join("---" for _ in head) + " |"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def by_seed(rows: Sequence[Row], seeds: Sequence[int] | None = None) -> str | None:
    """Skill against the strongest baseline seed by seed (None with one seed): the spread a mean hides. `seeds`: the
    seed of each score, in order (None: 0, 1, 2 ..., quality.py's default)."""
    n = max((len(r.scores) for r in rows), default=0)
    if n < 2:
        return None
    judged = judged_quantiles(QUANTILES)
    body = []
    for r in rows:
        best = r.strongest
        body.append([r.dataset, r.model, best or "-",
                     *(" / ".join(_pct(x.skill.get(best, {}).get(q)) for q in judged) if best else "-"
                       for x in r.scores)])
    return markdown(body, ["dataset", "model", "vs", *(f"seed {seed_of(i, seeds)} skill "
                                                        f"{' / '.join(map(quantile_label, judged))}" for i in range(n))])


def seed_of(i: int, seeds: Sequence[int] | None) -> int:
    """The seed of a row's i-th score."""
    return seeds[i] if seeds is not None and i < len(seeds) else i


def against_default(rows: Sequence[Row], seeds: Sequence[int] | None = None) -> str | None:
    """Each calibration method against foxhunt's default on the same rows, dataset by dataset (None when no row has
    that comparison), at every quantile (the median's cost counts too): skill (> 0: the method is better), the
    Diebold-Mariano p-values (largest over the seeds), the series won at p90 (range over the seeds), then, with
    several seeds, each seed's skill with its p-value."""
    compared = [r for r in rows if r.scores and all(VS_DEFAULT in x.skill for x in r.scores)]
    if not compared:
        return None
    body = []
    for r in compared:
        s = r.scores
        skill = " / ".join(_pct(_mean([x.skill[VS_DEFAULT].get(q) for x in s])) for q in QUANTILES)
        ps = [[x.dm.get(VS_DEFAULT, {}).get(q) for x in s] for q in QUANTILES]
        dm = " / ".join("-" if any(v is None for v in p) else _p(max(p)) for p in ps)
        won = [x.won[VS_DEFAULT] for x in s if VS_DEFAULT in x.won]
        lo, hi = (min(w for w, _ in won), max(w for w, _ in won)) if won else (0, 0)
        won_text = "-" if not won else f"{lo}/{won[0][1]}" if lo == hi else f"{lo}-{hi}/{won[0][1]}"
        per_seed = [" / ".join(f"{_pct(x.skill[VS_DEFAULT].get(q))} ({_p(x.dm.get(VS_DEFAULT, {}).get(q))})"
                               for q in QUANTILES) for x in s] if len(s) > 1 else []
        body.append([r.dataset + (" (simulated)" if r.simulated else ""), str(r.calibration), str(len(s)), skill,
                     dm, won_text, *per_seed])
    width = max(len(b) for b in body)
    body = [b + ["-"] * (width - len(b)) for b in body]
    q = " / ".join(map(quantile_label, QUANTILES))
    return markdown(body, ["dataset", "calibration", "seeds", f"skill vs {DEFAULT_METHOD} {q}",
                           f"DM p vs {DEFAULT_METHOD} {q}", f"series won {quantile_label(WON_AT)}",
                           *(f"seed {seed_of(i, seeds)} skill (p) {q}" for i in range(width - 6))])


def tables(rows: Sequence[Row], seeds: Sequence[int] | None = None) -> str:
    """The real datasets' table, the seed-by-seed skill, the calibration methods against the default, then the
    simulated sample's table apart. `seeds`: the run's, in the order of each row's scores (None: 0, 1, 2 ...)."""
    real = [r for r in rows if not r.simulated and r.scores]
    simulated = [r for r in rows if r.simulated and r.scores]
    parts = []
    if real:
        parts.append(markdown([cells(r) for r in real], header()))
        spread = by_seed(real, seeds)
        if spread:
            parts += ["Skill against the strongest baseline, seed by seed:", spread]
    if simulated:
        parts += ["The bundled sample (simulated: shows that the model learns what was built in; never evidence):",
                  markdown([cells(r) for r in simulated], header())]
    calibration = against_default(real + simulated, seeds)
    if calibration:
        parts += [f"Calibration: each method against foxhunt's default ({DEFAULT_METHOD}) on the same forecasts' rows "
                  "(skill > 0: the method is better; evaluate's paired Diebold-Mariano test, pooled over the panel; "
                  "the same trained models):", calibration]
    notes = [f"- {r.dataset}, {r.model}: {n}" for r in rows for n in dict.fromkeys(n for s in r.scores for n in s.notes)]
    if notes:
        parts.append("\n".join(notes))
    return "\n\n".join(parts)


def git_commit() -> str:
    """The measured code: HEAD's short hash, and whether tracked files differ from it."""

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], capture_output=True, text=True, cwd=REPO).stdout.strip()

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    return head + (" with uncommitted changes" if git("status", "--porcelain", "--untracked-files=no") else "")


def machine(load_at_start: float) -> str:
    """The CPU, its cores, how busy they were (other jobs slow both models, and not equally), Python and torch."""
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    import torch

    return (f"{cpu}, {os.cpu_count()} cores, load average {load_at_start:.1f} at the start and "
            f"{os.getloadavg()[0]:.1f} at the end; Python {platform.python_version()}, torch {torch.__version__}")


def record(text: str, path: Path = RESULTS) -> None:
    """Put the entry at the top of the quality section of RESULTS.md, under its "**Current: ...**" line if it has
    one (the section is made at the end of the file if absent)."""
    body = path.read_text(encoding="utf-8") if path.exists() else "# Benchmark results\n"
    if SECTION not in body:
        body = body.rstrip("\n") + f"\n\n{SECTION}\n"
    head = body.index(SECTION) + len(SECTION)
    rest = body[head:].lstrip("\n")
    if rest.startswith("**Current"):
        current, _, rest = rest.partition("\n\n")
        body = body[:head] + "\n\n" + current
        head = len(body)
    body = body[:head] + "\n\n" + text.rstrip("\n") + "\n" + ("\n" + rest if rest else "")
    path.write_text(body, encoding="utf-8")
