"""The training loop: explicit, short, and careful with memory.

Per epoch: shuffled training batches (one indexing op each), an OOM-safe optimizer step, validation under
`torch.inference_mode()` with running sums, best weights kept by validation loss, a resumable checkpoint, early
stopping, and a `[MEMORY]` record at every phase boundary. Checkpoints are also written inside an epoch (every
`--checkpoint-every` steps, else about every 10 minutes) and on SIGINT/SIGTERM; a resumed run continues from the
exact step and, on CPU, repeats the uninterrupted run bit for bit.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

import foxhunt
from foxhunt.atomic import append_jsonl, write_text
from foxhunt.console import SHOW, show_progress
from foxhunt.data.dataset.batch import Batch
from foxhunt.data.dataset.run_order import OrderedIds, RunOrder
from foxhunt.data.dataset.types import PreparedData
from foxhunt.errors import InputError
from foxhunt.train.checkpoint import CHECKPOINT_FORMAT, save_checkpoint, state_to_cpu
from foxhunt.train.config import AUTO, AUTO_EPOCH_WINDOWS, MAX_AUTO_EPOCHS, MIN_AUTO_EPOCHS, TrainConfig
from foxhunt.train.console import EpochMemory, MemoryWatch, validation_batches
from foxhunt.train.ddp_step import DistributedStepper
from foxhunt.train.distributed import SINGLE, Dist
from foxhunt.train.faults import FaultInjector
from foxhunt.train.guard import BadSteps, check_finite
from foxhunt.train.interrupt import Interrupted, StopRequest
from foxhunt.train.optim import build_optimizer, set_lr, warmup_cosine
from foxhunt.train.precision import autocast
from foxhunt.train.progress import epoch_bar
from foxhunt.train.run_dir import RunDir
from foxhunt.train.step import TrainStepper
from foxhunt.train.telemetry import MemoryTracker
from foxhunt.train.validate import ValResult, validate

log = logging.getLogger("foxhunt.train")


CHECKPOINT_SECONDS = 600.0  # without --checkpoint-every: a checkpoint inside an epoch about every 10 minutes


@dataclass
class FitState:
    """Everything about progress that a resumed run needs, as plain values."""

    epoch: int = 0  # epochs completed
    global_step: int = 0
    best_val_loss: float = float("inf")
    best_epoch: int = 0
    bad_epochs: int = 0
    micro_batch: int | None = None
    val_batch_size: int | None = None  # smaller than planned after a validation OOM
    history: list[dict[str, Any]] = field(default_factory=list)
    # A checkpoint inside epoch `epoch + 1`: its batches already stepped and their running sums (exact floats).
    epoch_batches: int = 0
    epoch_loss_sum: float = 0.0
    epoch_seen: int = 0
    epoch_seconds: float = 0.0
    epoch_bad_steps: int = 0  # non-finite batches skipped so far in that epoch
    bad_steps_in_row: int = 0


class CheckpointClock:
    """When a checkpoint inside an epoch is due: every `every_steps` steps, or (0) every `seconds` of wall time."""

    def __init__(self, every_steps: int, seconds: float = CHECKPOINT_SECONDS):
        self.every_steps, self.seconds = every_steps, seconds
        self.last = time.monotonic()

    def due(self, global_step: int) -> bool:
        if self.every_steps > 0:
            return global_step % self.every_steps == 0
        return time.monotonic() - self.last >= self.seconds

    def reset(self) -> None:
        self.last = time.monotonic()


def fit(
    model: torch.nn.Module,
    data: PreparedData,
    cfg: TrainConfig,
    quantiles: list[float],
    run: RunDir,
    device: torch.device,
    tracker: MemoryTracker,
    injector: FaultInjector,
    batch_size: int,
    val_batch_size: int,
    on_best: Any,  # callable(state_dict) -> None: writes model.safetensors (+ model.json)
    resume: dict[str, Any] | None = None,
    precision: str = "32",
    stop: StopRequest | None = None,
    plan: dict[str, Any] | None = None,
    dist: Dist = SINGLE,
    on_epoch: Callable[[dict[str, Any]], None] | None = None,
) -> FitState:
    """Train for `cfg.epochs` (TrainConfig.epochs_for) or until early stopping; `plan` (the memory plan's dict, if
    one was made) is what the measured peaks are checked against. Under torchrun (`dist`) every rank runs this with
    the same global `batch_size`, steps on its shard of each batch and validates its shard of the validation
    windows; only rank 0 writes metrics, weights and checkpoints, and every decision (stop, checkpoint, early
    stopping) is the same on all ranks because everything it depends on is reduced across them. `on_epoch(record)`
    sees each epoch's metrics.jsonl record once its checkpoint is written (a hyperparameter search prunes there: an
    exception it raises ends the run, which stays resumable; experiment tracking, train/tracking.py, copies it)."""
    train_ids, val_ids = data.splits["train"], data.splits["val"]
    n_batches = -(-len(train_ids) // batch_size)
    if cfg.max_train_batches:
        n_batches = min(n_batches, cfg.max_train_batches)
    epochs = cfg.epochs_for(len(train_ids))  # the cap; early stopping may end the run sooner
    if cfg.epochs == AUTO and dist.is_main:
        log.info("epochs: auto, at most %d (about %s training windows in all, %d to %d epochs); early stopping "
                 "after %d without improvement", epochs, f"{AUTO_EPOCH_WINDOWS:,}", MIN_AUTO_EPOCHS, MAX_AUTO_EPOCHS,
                 cfg.patience, extra=SHOW)
    total_steps = n_batches * epochs
    warmup = int(cfg.warmup_fraction * total_steps)
    stop = stop or StopRequest()

    optimizer = build_optimizer(model, cfg.learning_rate, cfg.weight_decay, cfg.optimizer_state == "cpu", device)
    state = FitState()
    if resume is not None:
        state = restore(resume, model, optimizer, device)
        val_batch_size = state.val_batch_size or val_batch_size
        if dist.is_main:
            write_text(run.metrics, "".join(json.dumps(r) + "\n" for r in state.history))  # drop records past it
        log.info("resuming at epoch %d, batch %d (step %d, best val loss %.6f at epoch %d)", state.epoch + 1,
                 state.epoch_batches, state.global_step, state.best_val_loss, state.best_epoch, extra=SHOW)
    q = torch.tensor(quantiles, dtype=torch.float32, device=device)
    dist.broadcast_module(model)
    extra: dict[str, Any] = {"dist": dist, "seed": cfg.seed} if dist.active else {}
    stepper = (DistributedStepper if dist.active else TrainStepper)(
        model, optimizer, q, cfg.grad_clip, device, injector, tracker, state.micro_batch, precision=precision,
        loss_weight=cfg.loss_weight, **extra)
    if resume is not None and stepper.scaler is not None and "scaler" in resume:
        stepper.scaler.load_state_dict(resume["scaler"])
    clock = CheckpointClock(cfg.checkpoint_every)

    bad_steps = BadSteps(cfg.max_bad_steps, data.windows, run.metrics if dist.is_main else None)
    bad_steps.in_row = state.bad_steps_in_row  # a resumed run counts on from where it stopped
    watch = MemoryWatch(plan, batch_size // dist.world_size)  # the plan is one rank's
    val_lo, val_hi = dist.shard(len(val_ids))  # this rank's validation windows: each counted once over the ranks

    def predict(b: Batch) -> torch.Tensor:
        with autocast(device, precision):
            return model(b).quantiles

    def save(where: str) -> None:
        state.micro_batch, state.val_batch_size = stepper.micro_batch, val_batch_size
        state.bad_steps_in_row = bad_steps.in_row
        state.epoch_bad_steps = bad_steps.epoch_count if where == "step" else 0
        if dist.is_main:  # the replicas are equal: one copy is the run's
            ckpt = checkpoint_state(model, stepper.optimizer, state, device, stepper.scaler)
            check_finite(ckpt["model"], "checkpoint.pt")  # non-finite weights are never saved
            save_checkpoint(run.checkpoint, ckpt)
            del ckpt
        clock.reset()
        tracker.record("checkpoint", epoch=state.epoch + (where == "step"), batch=state.epoch_batches or None)

    def stop_here(where: str) -> None:
        assert stop.signum is not None
        raise Interrupted(stop.signum, run.root, True, where)

    stop.deferred = True  # from here a signal stops at the next step boundary, with a checkpoint
    for epoch in range(state.epoch + 1, epochs + 1):
        if state.bad_epochs >= cfg.patience:
            break
        tracker.record("epoch_start", epoch=epoch)
        tracker.take_peaks()  # the epoch's peaks start here
        t0 = time.perf_counter() - state.epoch_seconds
        model.train()
        gen = torch.Generator().manual_seed(cfg.seed * 100_003 + epoch)
        # Runs of windows one horizon apart: they share most encoder bars, never a forecast bar (overlapping
        # targets made batches of adjacent windows generalise worse; see docs/model.md). The order depends only on the
        # seed and the epoch, so a resumed epoch rebuilds it and skips the batches already stepped.
        # Taken a batch at a time (data/dataset/run_order.py): the whole order of a 15M-window epoch would hold ~120 MB per
        # int64 copy, and `train_ids[order]` would read every page of a store's mapped split array.
        order = RunOrder(len(train_ids), min(cfg.window_run, batch_size), gen, stride=data.windows.horizon)
        skip = state.epoch_batches
        epoch_ids = OrderedIds(train_ids, order, skip * batch_size, n_batches * batch_size)
        loss_sum = torch.tensor(state.epoch_loss_sum, dtype=torch.float64, device=device)
        seen, shown = state.epoch_seen, skip
        bad_steps.new_epoch(state.epoch_bad_steps)
        with epoch_bar(epoch, epochs, n_batches, cfg.progress and show_progress() and dist.is_main) as bar:
            bar.update(skip, None, 0.0)
            for i, (batch, shard) in enumerate(dist.batches(data.windows, epoch_ids, batch_size), start=skip + 1):
                set_lr(stepper.optimizer, warmup_cosine(state.global_step, total_steps, warmup, cfg.learning_rate))
                state.global_step += 1
                loss = stepper.step(batch, state.global_step, epoch, shard)
                if loss is None:  # non-finite: no update was made; NonFiniteError after --max-bad-steps in a row
                    bad_steps.bad(batch, state.global_step, epoch, *stepper.last_bad)
                else:
                    bad_steps.good()
                    loss_sum += loss.double() * shard[1]  # the global batch's mean loss times its size
                    seen += shard[1]
                tracker.maybe_record("train_batch", epoch, i)
                if i % 20 == 0 or i == n_batches:  # sync with the device only to show progress
                    bar.update(i - shown, float("nan") if loss is None else float(loss),
                                seen / (time.perf_counter() - t0))
                    shown = i
                if agreed_stop_or_due(dist, stop, i < n_batches and clock.due(state.global_step)):  # end: below
                    state.epoch_batches, state.epoch_loss_sum, state.epoch_seen = i, float(loss_sum), seen
                    state.epoch_seconds = time.perf_counter() - t0
                    save("step")
                    if stop.requested:
                        stop_here(f"step {state.global_step} (epoch {epoch}, batch {i}/{n_batches})")
        train_seconds = time.perf_counter() - t0
        train_loss = float(loss_sum) / max(1, seen)
        lr = stepper.optimizer.param_groups[0]["lr"]
        tracker.record("train_end", epoch=epoch)
        train_peaks = tracker.take_peaks()

        stepper.optimizer.zero_grad(set_to_none=True)  # the last step's gradients are not needed while validating
        model.eval()
        val_start = tracker.record("val_start", epoch=epoch)
        with tracker.rank_local():  # per-batch records and rungs are this rank's alone
            val = validate(predict, data.windows, val_ids[val_lo:val_hi], val_batch_size, quantiles, device,
                           injector, tracker, epoch, optimizer_to_host=stepper.optimizer_to_host, dist=dist,
                           loss_weight=cfg.loss_weight)
        val_batch_size = val.batch_size
        val_end = tracker.record("val_end", epoch=epoch)
        memory = EpochMemory.measure(train_peaks, tracker.take_peaks(), val_start, val_end,
                                     validation_batches(len(val_ids), val_batch_size))

        improved = val.loss < state.best_val_loss
        if improved:
            state.best_val_loss, state.best_epoch, state.bad_epochs = val.loss, epoch, 0
            if dist.is_main:
                best_state = state_to_cpu(model)
                check_finite(best_state, "model.safetensors")
                on_best(best_state)
        else:
            state.bad_epochs += 1
        state.epoch = epoch
        state.epoch_batches, state.epoch_loss_sum, state.epoch_seen, state.epoch_seconds = 0, 0.0, 0, 0.0
        record = epoch_record(epoch, train_loss, val, lr, seen, train_seconds, time.perf_counter() - t0, improved)
        record["bad_steps"] = bad_steps.epoch_count  # skipped non-finite batches
        state.history.append(record)
        if dist.is_main:
            append_jsonl(run.metrics, record)
        log.info("%s  %s", format_epoch(record, epochs), memory.text(), extra=SHOW)
        for warning in watch.warnings(epoch, memory, val_batch_size):
            log.warning(warning)
        save("epoch")
        injector.check("epoch", epoch)  # test hook: simulate a run killed here
        if on_epoch is not None:
            on_epoch(record)
        if agreed_stop_or_due(dist, stop):
            stop_here(f"the end of epoch {epoch}")
    stop.deferred = False
    if state.bad_epochs >= cfg.patience and state.epoch < epochs:
        log.info("early stopping: no validation improvement for %d epochs (best %.6f at epoch %d)",
                 cfg.patience, state.best_val_loss, state.best_epoch, extra=SHOW)
    return state


def agreed_stop_or_due(dist: Dist, stop: StopRequest, due: bool = False) -> bool:
    """Whether to checkpoint here: a signal arrived or a checkpoint is due, on any rank (a signal may reach one rank
    only, and the checkpoint clock is each rank's own), so that all ranks stop or save at the same step."""
    if not dist.active:
        return stop.requested or due
    signum, due_any = dist.all_max([stop.signum or 0, due])
    if signum and stop.signum is None:
        stop.signum = int(signum)
    return bool(signum or due_any)


def checkpoint_state(model: torch.nn.Module, optimizer: Any, state: FitState, device: torch.device,
                     scaler: Any = None) -> dict[str, Any]:
    """Weights, optimizer, progress and every RNG the loop draws from (the global CPU generator feeds series
    masking and CPU dropout; the CUDA one feeds dropout on the GPU); the epoch's order is rebuilt from the seed."""
    out: dict[str, Any] = {
        "format": CHECKPOINT_FORMAT,
        "foxhunt_version": foxhunt.__version__,
        "model": state_to_cpu(model),
        "optimizer": optimizer.state_dict(),
        "fit_state": json.dumps(asdict(state)),
        "rng_cpu": torch.get_rng_state(),
    }
    if device.type == "cuda":
        out["rng_cuda"] = torch.cuda.get_rng_state(device)
    if scaler is not None:
        out["scaler"] = scaler.state_dict()
    return out


def restore(ckpt: dict[str, Any], model: torch.nn.Module, optimizer: Any, device: torch.device) -> FitState:
    """Load a checkpoint into the model and optimizer and set the RNGs; returns the progress it holds. A checkpoint
    that does not fit this run's model (config.json edited, files mixed from two runs) is bad input."""
    try:
        state = FitState(**json.loads(ckpt["fit_state"]))
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        torch.set_rng_state(ckpt["rng_cpu"])
    except (KeyError, TypeError, ValueError, RuntimeError) as e:
        raise InputError(f"checkpoint.pt does not fit the run in config.json ({str(e).splitlines()[0]}); resume "
                         "with the run's own files or start a new run") from e
    if device.type == "cuda" and "rng_cuda" in ckpt:
        torch.cuda.set_rng_state(ckpt["rng_cuda"], device)
    return state


def epoch_record(epoch: int, train_loss: float, val: ValResult, lr: float, seen: int, train_s: float,
                 total_s: float, improved: bool) -> dict[str, Any]:
    return {
        "epoch": epoch,
        "train_loss": train_loss,
        "val_loss": val.loss,
        "val_qrisk": {f"{q:g}": v for q, v in val.qrisk.items()},
        "lr": lr,
        "samples_per_s": seen / train_s if train_s > 0 else 0.0,
        "seconds": total_s,
        "train_samples": seen,
        "val_samples": val.n_samples,
        "best": improved,
    }


def format_epoch(r: dict[str, Any], epochs: int) -> str:
    qrisk = " ".join(f"p{float(q) * 100:g}={v:.4f}" for q, v in r["val_qrisk"].items())
    return (
        f"epoch {r['epoch']}/{epochs}  train_loss {r['train_loss']:.5f}  val_loss {r['val_loss']:.5f}  "
        f"val_qrisk {qrisk}  lr {r['lr']:.2e}  {r['samples_per_s']:,.0f} samples/s  {r['seconds']:.1f}s"
        + ("  *best" if r["best"] else "")
    )
