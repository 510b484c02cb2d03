"""What a search leaves: best.toml (a `foxhunt train --config` file), trials.csv and summary.json (every trial's
parameters, validation loss, seconds and state) and Optuna's parameter importance."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import polars as pl

from foxhunt.atomic import write_json, write_text, write_with
from foxhunt.console import FINAL, SHOW
from foxhunt.tune.space import Param

log = logging.getLogger("foxhunt.tune")
MIN_FOR_IMPORTANCE = 2  # completed trials Optuna's importance needs
NOT_REPEATED = {"config", "verbose", "quiet", "run_dir", "resume"}  # what best.toml leaves to the next command


def toml_value(v: Any) -> str:
    """A TOML literal for an option value (str, bool, int, float or a list of them)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, list | tuple):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    return json.dumps(str(v))  # a TOML basic string: JSON's escapes are valid TOML


def shown(v: Any) -> str:
    """An option value as the console writes it: as typed (lists comma-separated, bools lowercase)."""
    if isinstance(v, list | tuple):
        return ",".join(shown(x) for x in v)
    return str(v).lower() if isinstance(v, bool) else str(v)


def as_json(typed: dict[str, Any]) -> dict[str, Any]:
    """The typed options as plain JSON values, sorted by name (what the study stores as its fixed options)."""
    return json.loads(json.dumps(dict(sorted(typed.items())), default=str))


def repeated(typed: dict[str, Any]) -> dict[str, Any]:
    """The typed options every trial shares that a `foxhunt train --config` file repeats."""
    return {k: v for k, v in typed.items() if k not in NOT_REPEATED and v is not None}


def best_toml(params: dict[str, Any], typed: dict[str, Any], trial: int, value: float) -> str:
    """The options typed for the search plus the best trial's drawn ones: `foxhunt train --config best.toml`
    trains it. A typed option is never drawn (run.py `searched_space`), so the two never name the same option."""
    merged = {**repeated(typed), **params}
    lines = [f"# foxhunt tune: best trial {trial}, validation q-risk (mean over quantiles) {value:.6g}",
             "# train it: foxhunt train --config best.toml (flags typed there override these)"]
    lines += [f"{k.replace('_', '-')} = {toml_value(v)}" for k, v in sorted(merged.items())]
    return "\n".join(lines) + "\n"


def trial_rows(study: Any) -> list[dict[str, Any]]:
    """One row per trial. `epochs` counts the trained epochs the trial reported (1.. as `foxhunt train` numbers them),
    not epoch 0, the untrained anchor an anchored model validates first."""
    return [{"trial": t.number, "state": t.state.name, "val_qrisk": t.value,
             "epochs": sum(1 for epoch in t.intermediate_values if epoch > 0), "seconds": t.user_attrs.get("seconds"),
             **{f"param:{k}": v for k, v in t.params.items()}}
            for t in study.get_trials(deepcopy=False)]


def importance(study: Any) -> dict[str, float] | None:
    """Optuna's parameter importance (fANOVA), None with fewer than two completed trials."""
    import optuna

    complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    if len(complete) < MIN_FOR_IMPORTANCE or len({json.dumps(t.params, sort_keys=True) for t in complete}) < 2:
        return None
    try:
        return {k: float(v) for k, v in optuna.importance.get_param_importances(study).items()}
    except (RuntimeError, ValueError) as e:  # e.g. every completed trial has the same value
        log.warning("parameter importance not computed: %s", e)
        return None


def format_table(rows: list[dict[str, Any]], space: tuple[Param, ...]) -> str:
    head = ["trial", "state", "val_qrisk", "epochs", "seconds", *(p.flag[2:] for p in space)]
    body = [[str(r["trial"]), r["state"], "" if r["val_qrisk"] is None else f"{r['val_qrisk']:.5f}", str(r["epochs"]),
             "" if r["seconds"] is None else f"{r['seconds']:.1f}",
             *(_cell(r.get(f"param:{p.name}")) for p in space)] for r in rows]
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(head)]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(line, widths, strict=True)) for line in [head, *body])


def write_outputs(study: Any, out_dir: Path, space: tuple[Param, ...], typed: dict[str, Any]) -> dict[str, Any]:
    rows = trial_rows(study)
    imp = importance(study)
    complete = [r for r in rows if r["state"] == "COMPLETE"]
    best = min(complete, key=lambda r: r["val_qrisk"]) if complete else None
    summary = {"study": study.study_name, "searched": [p.name for p in space], "fixed": as_json(repeated(typed)),
               "trials": rows, "importance": imp,
               "best": None if best is None else {"trial": best["trial"], "val_qrisk": best["val_qrisk"],
                                                  "params": study.best_trial.params}}
    write_json(out_dir / "summary.json", summary)
    write_with(out_dir / "trials.csv", lambda p: pl.DataFrame(rows, infer_schema_length=None).write_csv(p))
    log.info("trials:\n%s", format_table(rows, space), extra=SHOW)
    if imp is not None:
        log.info("parameter importance: %s", ", ".join(f"{k} {v:.2f}" for k, v in imp.items()), extra=SHOW)
    if best is None:
        log.warning("no trial completed yet: no best.toml written")
        return summary
    write_text(out_dir / "best.toml", best_toml(study.best_trial.params, typed, best["trial"], best["val_qrisk"]))
    log.info("best trial %d: val q-risk %.5f; wrote %s (train it with foxhunt train --config %s)", best["trial"],
             best["val_qrisk"], out_dir / "best.toml", out_dir / "best.toml", extra=FINAL)
    return summary


def _cell(v: Any) -> str:
    if v is None:
        return ""
    return f"{v:.4g}" if isinstance(v, float) else str(v)
