"""One training run from configuration to run directory: prepare data, plan memory, fit, write the artefacts."""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

import foxhunt
from foxhunt.atomic import write_json
from foxhunt.console import FINAL, SHOW
from foxhunt.data.config import DataConfig
from foxhunt.data.dataset.fit_rows import windows_cut
from foxhunt.data.dataset.saved_format import FORMAT_VERSION
from foxhunt.data.dataset.summary import contracts_text, format_summary
from foxhunt.data.dataset.types import PreparedData
from foxhunt.data.io.sample_path import SIMULATED, is_bundled_sample
from foxhunt.data.prepare import prepare_data
from foxhunt.data.store import manifest_digest, open_features
from foxhunt.errors import InputError
from foxhunt.model.config import ModelConfig, quantile_label
from foxhunt.model.saved import save_model_json, save_training_state, save_weights, training_state
from foxhunt.model.tft import TemporalFusionTransformer, count_parameters, variable_names
from foxhunt.train import faults
from foxhunt.train.batch_sizes import (
    global_batch_sizes,
    refuse_new_batch_mid_epoch,
    resolve_batch_sizes,
    saved_batch_sizes,
)
from foxhunt.train.calibrate import calibrate_run
from foxhunt.train.config import TrainConfig
from foxhunt.train.console_lines import (
    WarningCounter,
    data_line,
    next_commands,
    plan_line,
    vs_baseline,
)
from foxhunt.train.device import apply_memory_budget, resolve_device
from foxhunt.train.distributed import Dist, console_of, init_from_env, teardown
from foxhunt.train.init_from import check_resumed, init_weights, saved_transfer, source_model
from foxhunt.train.interrupt import Interrupted, StopRequest
from foxhunt.train.loop import Callbacks, FitSetup, FitState, Sizing, Trainer
from foxhunt.train.precision import resolve_precision
from foxhunt.train.resume import data_fingerprint, load_checkpoint, prepared_digest, refuse_changed_data
from foxhunt.train.run_dir import RunDir, attach_log_file
from foxhunt.train.telemetry import MemoryTracker
from foxhunt.train.tracking import TrackingConfig, start_tracking
from foxhunt.train.validate import TrainingQuantiles, ValResult, validate

log = logging.getLogger("foxhunt.train")



def warn_if_cpus_busy() -> None:
    """torch's threads wait on each other when other processes hold the cores (a step can run several times
    slower than with one thread); say so, since only the user can choose to share. Reads the scheduler's count of
    runnable threads now (/proc/loadavg), not the load average, which still counts a job that just ended, less the
    job's own (`own_runnable_threads`): a backtest starts a fold's training right after reading the bars or scoring
    a fold, while its own polars and OpenMP pools still spin (1 to 3 runnable threads measured), and its --jobs
    workers share the cores by its plan."""
    threads, cores = torch.get_num_threads(), os.cpu_count() or 1
    try:
        running = int(Path("/proc/loadavg").read_text().split()[3].split("/")[0])
    except (OSError, ValueError, IndexError):
        return
    others = running - max(1, own_runnable_threads())  # this thread is running while it reads
    if threads > 1 and others > 0 and threads > cores - others:
        log.warning("the CPUs are busy (%d other runnable thread%s on %d cores): %d torch threads will wait on "
                    "each other; --threads %d may be faster", others, "s" if others > 1 else "", cores, threads,
                    max(1, cores - others))


def own_runnable_threads() -> int:
    """The runnable threads (state R in /proc/PID/task/TID/stat) of this job's processes (`job_pids`); 0 where
    /proc cannot tell."""
    n = 0
    for pid in job_pids():
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/stat", encoding="ascii", errors="replace") as f:
                    n += f.read().rsplit(")", 1)[1].split()[0] == "R"  # the name in (...) may hold spaces
            except (OSError, IndexError):
                continue  # a thread that ended while it was read
    return n


def job_pids() -> list[int]:
    """This process and its descendants; in a worker of a process pool (a backtest's --jobs), the pool's owner and
    every descendant of it: the workers split the cores between them by the owner's plan."""
    import multiprocessing

    import psutil

    parent = multiprocessing.parent_process()
    try:
        root = psutil.Process(parent.pid if parent is not None and parent.pid else os.getpid())
        return [root.pid, *(c.pid for c in root.children(recursive=True))]
    except psutil.Error:
        return [os.getpid()]


# (prepared data, data config, quantiles, the run directory holding the best weights, the device) -> the final line's
# comparison with the baselines on validation. The CLI passes evaluate's (evaluate/validation.py): train never imports
# evaluate.
Judge = Callable[[PreparedData, DataConfig, tuple[float, ...], Path, torch.device], str | None]


@dataclass
class TrainResult:
    run: RunDir
    state: FitState
    baseline: ValResult
    n_params: int
    claim: str | None = None  # the judge's clause for the best epoch


@dataclass(frozen=True)
class _Hooks:
    """What a caller hangs on one run: see `train_run`."""

    on_epoch: Callable[[dict[str, Any]], None] | None = None
    tracking: TrackingConfig | None = None
    judge: Judge | None = None
    final: bool = True


def train_run(data_cfg: DataConfig, model_cfg: ModelConfig, cfg: TrainConfig, resume: bool = False,
              on_epoch: Callable[[dict[str, Any]], None] | None = None,
              tracking: TrackingConfig | None = None, judge: Judge | None = None, final: bool = True) -> TrainResult:
    """One training run into `cfg.run_dir`. `on_epoch` sees each epoch's record (train/loop.py `Callbacks`); `tracking`
    also copies the records to MLflow / TensorBoard (rank 0 only). `judge` compares the best epoch with the
    baselines for the final line (without one, it compares the validation loss with the training-set quantiles');
    `final=False` leaves the final lines to the caller (train/seeds.py prints them once, for the seed it keeps)."""
    if cfg.num_threads:
        torch.set_num_threads(cfg.num_threads)
    torch.manual_seed(cfg.seed)
    device = resolve_device(cfg.device)
    dist = init_from_env(device)  # under torchrun: this rank's place, and cuda:LOCAL_RANK on CUDA
    try:
        with console_of(dist):
            return _train_rank(data_cfg, model_cfg, cfg, dist.device if dist.active else device, dist, resume,
                               _Hooks(on_epoch, tracking, judge, final))
    finally:
        teardown(dist)


def _train_rank(data_cfg: DataConfig, model_cfg: ModelConfig, cfg: TrainConfig, device: torch.device, dist: Dist,
                resume: bool, hooks: _Hooks) -> TrainResult:
    precision = resolve_precision(cfg.precision, device)  # one the device cannot run stops before any file is read
    if isinstance(cfg.batch_size, int):
        dist.check_batch_size(cfg.batch_size)
    run = RunDir.create(cfg.run_dir, resume=resume, write=dist.is_main)  # rank 0 alone writes the run directory
    logger = logging.getLogger("foxhunt")
    handler, warnings = attach_log_file(run) if dist.is_main else None, WarningCounter()  # final lines repeat them
    logger.addHandler(warnings)
    switches = determinism_switches()  # process-wide: put back after the run (tests run many in one process)
    stop = StopRequest()
    try:
        warn_if_cpus_busy()
        if cfg.deterministic:
            use_deterministic_kernels(device)
        with stop:
            return _train(_Rank(data_cfg, model_cfg, cfg, device, dist, precision, resume), run, stop, warnings, hooks)
    except KeyboardInterrupt:  # a second signal, one before training started, or Ctrl-C outside the handlers
        raise Interrupted(stop.signum or signal.SIGINT, run.root, run.checkpoint.exists()) from None
    finally:
        set_determinism_switches(*switches)
        logger.removeHandler(warnings)
        if handler is not None:
            logger.removeHandler(handler)
            handler.close()


def use_deterministic_kernels(device: torch.device) -> None:
    """--deterministic: kernels that give the same bits every run, where slower ones exist (CUDA: cuDNN's
    deterministic LSTM and convolution algorithms, no autotuning, a fixed cuBLAS workspace, deterministic
    index/scatter backward). CPU kernels are deterministic already, so on CPU it changes nothing."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # read when cuBLAS starts, i.e. before any matmul
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    # warn_only: an op without a deterministic CUDA kernel prints a torch warning naming it instead of stopping
    torch.use_deterministic_algorithms(True, warn_only=True)
    log.info("--deterministic: deterministic kernels on %s", device, extra=SHOW)


def determinism_switches() -> tuple[bool, bool, bool, bool]:
    return (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
            torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark)


def set_determinism_switches(algorithms: bool, warn_only: bool, cudnn_deterministic: bool, benchmark: bool) -> None:
    """Put the switches back as `determinism_switches` read them. torch.use_deterministic_algorithms imports
    torch._inductor (about 2 s of CPU), so it is called only when a run changed them (--deterministic)."""
    if (algorithms, warn_only) != determinism_switches()[:2]:
        torch.use_deterministic_algorithms(algorithms, warn_only=warn_only)
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = cudnn_deterministic, benchmark


def _both(first: Callable[[dict[str, Any]], None] | None,
          then: Callable[[dict[str, Any]], None] | None) -> Callable[[dict[str, Any]], None] | None:
    """Tracking sees each epoch's record before a caller's hook, which may end the run (a pruned trial)."""
    if first is None or then is None:
        return first or then
    def both(record: dict[str, Any]) -> None:
        first(record)
        then(record)
    return both


@dataclass(frozen=True)
class _Rank:
    """One rank's run as `_train` sees it: its three configs, its device, ranks and precision, and whether it
    resumes the run in the run directory."""

    data_cfg: DataConfig
    model_cfg: ModelConfig
    cfg: TrainConfig
    device: torch.device
    dist: Dist
    precision: str
    resume: bool


def _train(r: _Rank, run: RunDir, stop: StopRequest, warnings: WarningCounter, hooks: _Hooks) -> TrainResult:
    data_cfg, model_cfg, cfg, device, dist = r.data_cfg, r.model_cfg, r.cfg, r.device, r.dist
    checkpoint = load_checkpoint(run.checkpoint) if r.resume else None  # a bad one stops before any work
    saved = saved_transfer(run) if r.resume else None  # what a resumed run took from RUN when it started
    if r.resume:
        check_resumed(saved, cfg.init_from)
    source = source_model(cfg.init_from, model_cfg) if cfg.init_from and not r.resume else None  # so does a bad RUN
    tracker = MemoryTracker(device, run.memory if dist.is_main else None, logging.getLogger("foxhunt.memory"),
                            cfg.memory_log_every)
    if dist.active:
        tracker.reduce_max = dist.all_max  # rank 0's records: the maximum over the ranks
        log.info("%s", dist.notice("NCCL" if device.type == "cuda" else "gloo"), extra=SHOW)
    injector = faults.FaultInjector.from_env()  # a bad FOXHUNT_FAULT_INJECT stops here too; armed for the fit below
    log.info("run directory %s, device %s, torch %s", run.root, describe_device(device), torch.__version__,
             extra=SHOW)
    tracker.record("run_start")
    fraction = apply_memory_budget(device, cfg.memory_budget)
    if fraction is not None:
        log.info("[MEMORY] budget %.0f MiB enforced on %s (fraction %.4f of the card)", cfg.memory_budget / 2**20,
                 device, fraction)
    data, fingerprint = _open_data(data_cfg, run, dist, r.resume)
    model = TemporalFusionTransformer(data.schema.sizes, model_cfg).to(device)
    n_params = count_parameters(model)
    log.info("model: Temporal Fusion Transformer, %s parameters, hidden %d, heads %d, encoder %d, horizon %d, "
             "precision %s", f"{n_params:,}", model_cfg.hidden_size, model_cfg.attention_heads,
             model_cfg.encoder_length, model_cfg.horizon, r.precision, extra=SHOW)
    transfer = None if source is None else init_weights(model, data.schema, data.transform, source, cfg.init_from)
    if transfer is not None:
        log.info("%s", transfer.line(), extra=SHOW)
    tracker.record("model_built")
    sizing = _sizing(r, run, model, data, checkpoint)
    baseline = _baseline(data, model_cfg, cfg, sizing.val_batch_size, device)
    config = _config_record(r, fingerprint, sizing, n_params, baseline)
    config["init_from"] = transfer.to_dict() if transfer is not None else saved
    if dist.is_main:  # rank 0 alone writes the run directory
        write_json(run.config, config)

    saved_data_cfg = data_cfg.with_absolute_paths()  # the model reads its --covariates from any directory

    def on_best(state: dict[str, torch.Tensor]) -> None:
        # model.json first: it is the same all run long, so a run killed between the two files leaves either no
        # weights (not a model yet) or consistent ones, never weights without their description
        save_model_json(run.model_json, model_cfg, data.schema, data.transform, saved_data_cfg, n_params,
                        extra={"variables": dict(zip(("static", "encoder", "decoder"),
                                                             variable_names(data.schema), strict=True)),
                               "training": training_state(False, trainer.state.best_epoch, trainer.epochs)})
        save_weights(run.weights, state)

    def mark(finished: bool, epoch: int) -> None:
        """model.json's "training" (model/saved.py): where the run stands, so a model it leaves says whether the
        run finished."""
        if dist.is_main and run.model_json.exists():
            save_training_state(run.model_json, finished, epoch, trainer.epochs)

    tracked = start_tracking(hooks.tracking, run, config) if dist.is_main else None
    try:
        setup = FitSetup(model, data, cfg, list(model_cfg.quantiles), run, device, tracker)
        callbacks = Callbacks(on_best, _both(lambda record: mark(False, record["epoch"]),
                                             _both(tracked.epoch if tracked is not None else None, hooks.on_epoch)))
        with faults.armed(injector):
            trainer = Trainer(setup, sizing, callbacks, resume=checkpoint, stop=stop)
            state = trainer.fit()
        if dist.is_main:  # the other ranks are done: calibration reads the saved best weights
            log.info("%s", calibrate_run(run, data, device, state.val_batch_size or sizing.val_batch_size),
                     extra=SHOW)
        mark(True, state.epoch)
    except BaseException:
        if tracked is not None:
            tracked.finish("FAILED")
        raise
    if tracked is not None:
        tracked.finish()
    claim = None
    if dist.is_main:
        best = best_record(state)
        judge = hooks.judge
        claim = None if judge is None or best is None else judge(data, data_cfg, model_cfg.quantiles, run.root,
                                                                 device)
        if hooks.final:
            final_lines(run, state, baseline, data_cfg, warnings, claim)
    return TrainResult(run, state, baseline, n_params, claim)


def _open_data(data_cfg: DataConfig, run: RunDir, dist: Dist, resume: bool) -> tuple[PreparedData, dict[str, Any]]:
    """The prepared data (a store is mapped, not read), said on the console and summarised in the run directory; a
    resumed run's refused before anything is written when it is not the data the run started on."""
    data = open_features(data_cfg) if data_cfg.features else prepare_data(data_cfg)
    fingerprint = data_fingerprint(data, _digest(data_cfg, data, dist))
    if resume:
        refuse_changed_data(run.config, fingerprint, f"the feature store {data_cfg.features}" if data_cfg.features
                            else "the input data")
    log.info(data_line(data.summary, data_cfg.paths), extra=SHOW)
    if contracts_text(data.summary):  # what --contracts auto decided against the symbols' names: said by default
        log.info("contracts: %s", contracts_text(data.summary), extra=SHOW)
    log.info("data summary:\n%s", format_summary(data.summary))
    write = write_json if dist.is_main else _write_nothing  # rank 0 alone writes the run directory
    write(run.data_summary, data.summary)
    write(run.rolls, data.rolls)
    if len(data.splits["val"]) == 0:
        raise InputError("the validation split is empty; lower --encoder-length/--horizon or move --train-end earlier")
    return data, fingerprint


def _digest(data_cfg: DataConfig, data: PreparedData, dist: Dist) -> str | None:
    """The prepared data's digest (resume.prepared_digest): a store's from its manifest, free; data prepared in memory
    hashed on rank 0 alone (it writes config.json and refuses a changed resume; every page of the arrays is read)."""
    if data_cfg.features:
        return manifest_digest(Path(data_cfg.features))
    return prepared_digest(data) if dist.is_main else None


def _sizing(r: _Rank, run: RunDir, model: torch.nn.Module, data: PreparedData,
            checkpoint: dict[str, Any] | None) -> Sizing:
    """The batch sizes: a resumed run's as resolved when it started, else the memory plan's (global under torchrun)."""
    cfg, dist = r.cfg, r.dist
    if r.precision != "32":
        log.info("precision %s: autocast for the model, fp32 weights, optimizer state, quantile head and loss",
                 r.precision)
    saved = saved_batch_sizes(run, cfg) if r.resume else None
    if saved is not None:
        (batch_size, val_batch_size), plan = saved, json.loads(run.config.read_text(encoding="utf-8")).get("memory_plan")
        log.info("batch size %d, validation batch size %d (as resolved when the run started)", *saved)
    else:
        batch_size, val_batch_size, plan = resolve_batch_sizes(model, data, r.model_cfg, cfg, r.device, r.precision,
                                                               dist.world_size if dist.active else 1)
        if dist.active:
            batch_size, val_batch_size = global_batch_sizes(dist, cfg, batch_size, val_batch_size,
                                                            len(data.splits["train"]))
        refuse_new_batch_mid_epoch(run, checkpoint, batch_size)
    dist.check_batch_size(batch_size)  # a run resumed on another number of ranks
    if dist.active:
        log.info("global batch %d: %d a rank", batch_size, batch_size // dist.world_size, extra=SHOW)
    log.info(plan_line(plan, batch_size // dist.world_size, val_batch_size, saved=saved is not None), extra=SHOW)
    return Sizing(batch_size, val_batch_size, r.precision, plan, dist)


def _baseline(data: PreparedData, model_cfg: ModelConfig, cfg: TrainConfig, val_batch_size: int,
              device: torch.device) -> ValResult:
    """The training-set quantiles' validation loss: the loss scale the epochs' losses are read against. Fitted on the
    bars every baseline fits on (data/dataset/fit_rows.py), it is the final line's training_quantiles."""
    val = data.splits["val"]
    baseline = validate(TrainingQuantiles(data, windows_cut(data, val), list(model_cfg.quantiles)), data.windows, val,
                        val_batch_size, list(model_cfg.quantiles), device, loss_weight=cfg.loss_weight)
    log.info("baseline for the loss scale (training_quantiles: each series' quantiles of its training bars; the final "
             "line compares with every baseline): val_loss %.5f  val_qrisk %s",
             baseline.loss, " ".join(f"{quantile_label(q)}={v:.4f}" for q, v in baseline.qrisk.items()), extra=SHOW)
    return baseline


def _config_record(r: _Rank, fingerprint: dict[str, Any], sizing: Sizing, n_params: int,
                   baseline: ValResult) -> dict[str, Any]:
    """config.json: everything the run was made from and what it resolved, as plain values."""
    return {
        "format_version": FORMAT_VERSION,
        "foxhunt_version": foxhunt.__version__,
        "torch_version": torch.__version__,
        "created_utc": dt.datetime.now(dt.UTC).isoformat(),
        "device": str(r.device),
        "data": r.data_cfg.with_absolute_paths().to_dict(),  # read from anywhere: predict, evaluate --model
        "model": r.model_cfg.to_dict(),
        "train": r.cfg.to_dict(),
        "resolved": {"batch_size": sizing.batch_size, "validation_batch_size": sizing.val_batch_size,
                     "precision": sizing.precision},
        "memory_plan": sizing.plan,
        "n_params": n_params,
        "data_fingerprint": fingerprint,
        "baseline": {"name": "training_quantiles", "val_loss": baseline.loss,
                     "val_qrisk": {f"{q:g}": v for q, v in baseline.qrisk.items()}},
    }


def best_record(state: FitState) -> dict[str, Any] | None:
    """The metrics record of the best epoch (None when no epoch finished)."""
    return next((r for r in state.history if r["epoch"] == state.best_epoch), None)


def _write_nothing(path: Path, obj: Any) -> None:
    """The run directory's writer on ranks other than 0."""


def final_lines(run: RunDir, state: FitState, baseline: ValResult, data_cfg: DataConfig,
                warnings: WarningCounter, claim: str | None = None) -> None:
    """Where everything is: the run's warnings again, the best epoch against the baselines (`claim`, else the
    training-set quantiles' loss) and the run directory (the line --quiet keeps), then the next commands with this
    run's paths."""
    repeat = warnings.summary(run.log)
    if repeat is not None:
        log.warning(repeat)
    best = best_record(state)
    if best is not None:
        versus = (f"val_loss {best['val_loss']:.5f}; {claim}" if claim is not None
                  else vs_baseline(best["val_loss"], baseline.loss))
        if is_bundled_sample(data_cfg.paths):
            versus += f"; {SIMULATED}"
        log.info("best epoch %d: %s; run directory %s", best["epoch"], versus, run.root, extra=FINAL)
    else:
        log.info("no epoch finished; run directory %s", run.root, extra=FINAL)
    log.info("next:\n%s", "\n".join("  " + c for c in next_commands(run.root, data_cfg.paths, data_cfg.features)),
             extra=SHOW)


def describe_device(device: torch.device) -> str:
    """`cpu (2 threads)` or `cuda:0 (NVIDIA H200, 140 GiB)`."""
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return f"{device} ({props.name}, {props.total_memory / 2**30:.0f} GiB)"
    if device.type == "cpu":
        return f"cpu ({torch.get_num_threads()} threads)"
    return str(device)
