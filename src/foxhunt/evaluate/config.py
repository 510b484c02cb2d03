"""`foxhunt evaluate`'s options (the shared ones are predict/config.py's), declared on the fields of the record
`evaluate_run` takes."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from foxhunt.flags import DATA, FORECASTS, OUTPUT, again, option
from foxhunt.predict.config import ForecastConfig


@dataclass(frozen=True, kw_only=True)
class EvaluateConfig(ForecastConfig):
    """What to score and where the report goes: a feature store's windows are scored rather than forecast; without
    --start, only origins after the model's validation period (evaluate/period.py); --forecasts scores a parquet
    file of forecasts instead of predicting."""

    features: Path | None = option(None, "Score on a `foxhunt prepare` store's windows.", DATA, metavar="PATH")
    start: str | None = again(ForecastConfig, "start", show_default="after validation")
    forecasts: Path | None = option(None, "Score these forecasts instead of predicting.", FORECASTS, metavar="PATH")
    out_dir: Path = option(dataclasses.MISSING, "Where metrics.json, report.html etc. go.", OUTPUT, metavar="PATH",
                           flags=("--out-dir",))
