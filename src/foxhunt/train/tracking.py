"""Optional experiment tracking (`foxhunt train --track mlflow,tensorboard`): a copy of the run's own records.

metrics.jsonl and memory.jsonl stay the source of truth. A `Tracking` observer is fed by them: the training loop
hands it each epoch's record right after appending it to metrics.jsonl (`Callbacks.on_epoch`), and it forwards the
memory.jsonl lines written since its last look (no hook in the memory tracker). At the end it uploads the run's
files (config, data summary, metrics, memory, calibration, log) as artifacts. A backend that fails (not installed,
a tracking server down, a full disk) logs one warning and is switched off; training never stops for it.

MLflow (extra `track`: mlflow-skinny, with SQLAlchemy and Alembic for its database store). The tracking URI is
`--track-uri`, else $MLFLOW_TRACKING_URI, else the SQLite database runs/mlflow.db with artifacts in runs/mlartifacts.
MLflow 3 refuses a plain directory (file) store unless MLFLOW_ALLOW_FILE_STORE=true ("maintenance mode"), so the
default is a local database file rather than runs/mlruns. One MLflow run per training run, in experiment "foxhunt",
named after the run directory; parameters are the flattened config.json, metrics are stepped by epoch, memory
values (memory_host_rss_mb, ...) by record number.

TensorBoard: event files in RUN_DIR/tensorboard (`tensorboard --logdir runs` shows every run), the same scalars
under the same names, the config as text.

Resuming (`foxhunt train --resume`) continues the same tracked run: RUN_DIR/tracking.json records the MLflow run id
and how many memory.jsonl records were forwarded, so the resumed session appends to that MLflow run (parameters it
already has are kept: MLflow's are immutable) and forwards only the records written since. Epoch records are never
repeated: the loop resumes after the checkpoint's epoch.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from foxhunt.atomic import write_json
from foxhunt.errors import InputError
from foxhunt.model.config import quantile_label
from foxhunt.train.run_dir import RunDir

log = logging.getLogger("foxhunt.train")

BACKENDS = ("mlflow", "tensorboard")
EXPERIMENT = "foxhunt"
DEFAULT_DB = Path("runs") / "mlflow.db"
DEFAULT_ARTIFACTS = Path("runs") / "mlartifacts"
INSTALL_HINT = "pip install 'foxhunt[track]'"
STATE = "tracking.json"  # in the run directory: what has been forwarded (see the module docstring)
ARTIFACTS = ("config.json", "data_summary.json", "metrics.jsonl", "memory.jsonl", "calibration.json", "train.log")
MEMORY_KEYS = ("host_rss_mb", "host_peak_mb", "device_allocated_mb", "device_reserved_mb", "device_peak_mb")


@dataclass(frozen=True)
class TrackingConfig:
    """Which backends to feed and where MLflow writes; validated once (`parse`). Not part of the run's config: a
    resumed run tracks to whatever is asked for now."""

    backends: tuple[str, ...] = ()
    uri: str | None = None  # MLflow tracking URI; None: $MLFLOW_TRACKING_URI or the local default

    @staticmethod
    def parse(values: list[str] | str | None, uri: str | None = None) -> TrackingConfig:
        """`--track` values, repeated and/or comma-separated ("mlflow,tensorboard")."""
        items = [values] if isinstance(values, str) else list(values or [])
        names = [n.strip().lower() for v in items for n in v.split(",") if n.strip()]
        bad = [n for n in names if n not in BACKENDS]
        if bad:
            raise InputError(f"--track {bad[0]!r} is not one of {', '.join(BACKENDS)}; e.g. --track mlflow,tensorboard")
        return TrackingConfig(tuple(dict.fromkeys(names)), uri)

    def mlflow_uri(self) -> str:
        return self.uri or os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{DEFAULT_DB.resolve()}"


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested config values as "a.b" -> text (MLflow parameters are strings of at most 6,000 characters)."""
    out: dict[str, str] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = (json.dumps(v) if isinstance(v, (list, tuple)) else str(v))[:6000]
    return out


def epoch_scalars(record: dict[str, Any]) -> dict[str, float]:
    """The numbers of a metrics.jsonl epoch record, val_qrisk per quantile as val_qrisk_p10 etc."""
    out = {k: float(v) for k, v in record.items()
           if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "epoch"}
    out.update({f"val_qrisk_{quantile_label(q)}": float(v) for q, v in record.get("val_qrisk", {}).items()})
    return out


class Backend(Protocol):
    name: str

    def start(self, run: RunDir, params: dict[str, Any], resumed: dict[str, Any] | None) -> None: ...

    def state(self) -> dict[str, Any]: ...
    def epoch(self, epoch: int, scalars: dict[str, float]) -> None: ...
    def memory(self, index: int, record: dict[str, Any]) -> None: ...
    def finish(self, run: RunDir, status: str) -> None: ...


class MLflowBackend:
    name = "mlflow"

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self.client: Any = None
        self.run_id: str | None = None

    def start(self, run: RunDir, params: dict[str, Any], resumed: dict[str, Any] | None) -> None:
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(self.uri)
        exp = self.client.get_experiment_by_name(EXPERIMENT)
        if exp is not None:
            exp_id = exp.experiment_id
        else:  # a local database gets its artifacts beside it, not in ./mlruns of wherever training started
            where = DEFAULT_ARTIFACTS.resolve().as_uri() if self.uri.startswith("sqlite:") else None
            exp_id = self.client.create_experiment(EXPERIMENT, artifact_location=where)
        known: dict[str, str] = {}
        if resumed and resumed.get("mlflow_run_id") and resumed.get("mlflow_uri") == self.uri:
            self.run_id = resumed["mlflow_run_id"]
            known = self.client.get_run(self.run_id).data.params
            self.client.update_run(self.run_id, status="RUNNING")
        else:
            self.run_id = self.client.create_run(exp_id, run_name=run.root.name,
                                                 tags={"foxhunt.run_dir": str(run.root.resolve())}).info.run_id
        items = [Param(k, v) for k, v in flatten(params).items() if k not in known]
        for i in range(0, len(items), 100):  # MLflow takes at most 100 parameters a call
            self.client.log_batch(self.run_id, params=items[i : i + 100])
        log.info("tracking to MLflow %s, run %s%s", self.uri, self.run_id, " (resumed)" if known else "")

    def state(self) -> dict[str, Any]:
        return {"mlflow_run_id": self.run_id, "mlflow_uri": self.uri}

    def _metrics(self, values: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(k, v, now, step) for k, v in values.items()])

    def epoch(self, epoch: int, scalars: dict[str, float]) -> None:
        self._metrics(scalars, epoch)

    def memory(self, index: int, record: dict[str, Any]) -> None:
        self._metrics({f"memory_{k}": float(record[k]) for k in MEMORY_KEYS if record.get(k) is not None}, index)

    def finish(self, run: RunDir, status: str) -> None:
        for name in ARTIFACTS:
            if (run.root / name).exists():
                self.client.log_artifact(self.run_id, str(run.root / name))
        self.client.set_terminated(self.run_id, status=status)


class TensorBoardBackend:
    name = "tensorboard"

    def __init__(self) -> None:
        self.writer: Any = None

    def start(self, run: RunDir, params: dict[str, Any], resumed: dict[str, Any] | None) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(run.root / "tensorboard"))  # a resumed session adds an event file
        if resumed is None:
            self.writer.add_text("config", "```\n" + json.dumps(params, indent=2, default=str) + "\n```")
        log.info("tracking to TensorBoard %s", run.root / "tensorboard")

    def state(self) -> dict[str, Any]:
        return {}

    def epoch(self, epoch: int, scalars: dict[str, float]) -> None:
        for k, v in scalars.items():
            self.writer.add_scalar(k, v, epoch)
        self.writer.flush()

    def memory(self, index: int, record: dict[str, Any]) -> None:
        for k in MEMORY_KEYS:
            if record.get(k) is not None:
                self.writer.add_scalar(f"memory/{k}", float(record[k]), index)

    def finish(self, run: RunDir, status: str) -> None:
        self.writer.close()


class Tracking:
    """Feeds the chosen backends from the run's records; every backend call is guarded (module docstring)."""

    def __init__(self, cfg: TrackingConfig, run: RunDir) -> None:
        self.run = run
        self.backends: list[Backend] = [MLflowBackend(cfg.mlflow_uri()) if n == "mlflow" else TensorBoardBackend()
                                        for n in cfg.backends]
        self._memory_offset = 0  # bytes of memory.jsonl already forwarded
        self._memory_index = 0
        self._resumed = self._previous_state()
        if self._resumed is not None:  # skip the memory records an earlier session of this run forwarded
            self._skip_memory(int(self._resumed.get("memory_records", 0)))

    def _previous_state(self) -> dict[str, Any] | None:
        """tracking.json of an earlier session of this run (a resume: metrics.jsonl has epochs), else None."""
        path = self.run.root / STATE
        if not (path.exists() and self.run.metrics.exists() and self.run.metrics.stat().st_size):
            return None
        try:
            return dict(json.loads(path.read_text()))
        except (OSError, ValueError):
            return None

    def _skip_memory(self, n: int) -> None:
        if not self.run.memory.exists():
            return
        with open(self.run.memory, "rb") as f:
            for _ in range(n):
                line = f.readline()
                if not line.endswith(b"\n"):
                    break
                self._memory_offset += len(line)
                self._memory_index += 1

    def _save_state(self) -> None:
        """What has been forwarded, for a resumed session (tracking.json, atomic)."""
        state: dict[str, Any] = {"memory_records": self._memory_index}
        for b in self.backends:
            state.update(b.state())
        try:
            write_json(self.run.root / STATE, state)
        except OSError as e:  # the run goes on: a resume would at worst repeat memory records
            log.warning("could not write %s (%s)", self.run.root / STATE, e)

    def _call(self, method: str, *args: Any) -> None:
        for b in list(self.backends):
            try:
                getattr(b, method)(*args)
            except Exception as e:  # a tracker must never stop training: warn once, then leave it off
                self.backends.remove(b)
                hint = f" ({INSTALL_HINT})" if isinstance(e, ImportError) else ""
                first = str(e).splitlines()[0] if str(e) else type(e).__name__
                log.warning("--track %s failed (%s: %s)%s; it is off for the rest of the run, metrics.jsonl and "
                            "memory.jsonl hold everything", b.name, type(e).__name__, first[:300], hint)

    def start(self, params: dict[str, Any]) -> None:
        self._call("start", self.run, params, self._resumed)
        self._save_state()

    def epoch(self, record: dict[str, Any]) -> None:
        """One metrics.jsonl epoch record (called right after it is appended), then the new memory records."""
        self._call("epoch", int(record["epoch"]), epoch_scalars(record))
        self._forward_memory()

    def finish(self, status: str = "FINISHED") -> None:
        self._forward_memory()
        self._call("finish", self.run, status)

    def _forward_memory(self) -> None:
        if not self.backends:
            return
        for rec in self._new_memory_records():
            self._call("memory", self._memory_index, rec)
            self._memory_index += 1
        self._save_state()

    def _new_memory_records(self) -> Iterator[dict[str, Any]]:
        """Whole lines of memory.jsonl past the last look (a line still being written is left for the next)."""
        path = self.run.memory
        if not path.exists():
            return
        with open(path, "rb") as f:
            f.seek(self._memory_offset)
            chunk = f.read()
        end = chunk.rfind(b"\n") + 1
        self._memory_offset += end
        for line in chunk[:end].splitlines():
            try:
                yield json.loads(line)
            except ValueError:
                continue


def start_tracking(cfg: TrackingConfig | None, run: RunDir, params: dict[str, Any]) -> Tracking | None:
    """A started `Tracking`, or None when no backend was asked for."""
    if cfg is None or not cfg.backends:
        return None
    tracking = Tracking(cfg, run)
    tracking.start(params)
    return tracking
