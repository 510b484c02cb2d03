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
from foxhunt.model.config import quantile_label
from foxhunt.model.saved import state_to_cpu
from foxhunt.train import faults
from foxhunt.train.config import AUTO, AUTO_EPOCH_WINDOWS, MAX_AUTO_EPOCHS, MIN_AUTO_EPOCHS, TrainConfig
from foxhunt.train.console_lines import EpochMemory, MemoryWatch, validation_batches
from foxhunt.train.ddp_step import DistributedStepper
from foxhunt.train.distributed import SINGLE, Dist
from foxhunt.train.guard import BadSteps, check_finite
from foxhunt.train.interrupt import Interrupted, StopRequest
from foxhunt.train.optim import build_optimizer, set_lr, warmup_cosine
from foxhunt.train.precision import autocast
from foxhunt.train.progress import epoch_bar
from foxhunt.train.resume import CHECKPOINT_FORMAT, save_checkpoint
from foxhunt.train.run_dir import RunDir
from foxhunt.train.step import TrainStepper
from foxhunt.train.telemetry import MemoryTracker
from foxhunt.train.validate import InTraining, ValResult, validate

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


@dataclass(frozen=True)
class FitSetup:
    """What stays fixed for the run: the model (on `device`), its data and training config, the quantiles it
    forecasts, the run directory and the memory tracker."""

    model: torch.nn.Module
    data: PreparedData
    cfg: TrainConfig
    quantiles: list[float]
    run: RunDir
    device: torch.device
    tracker: MemoryTracker


@dataclass(frozen=True)
class Sizing:
    """What the memory plan and the ranks decide: the global training batch, the validation batch (the OOM ladder
    may lower it during the run; FitState keeps the lower one), the autocast precision, the plan's dict (None when
    none was made) that the measured peaks are checked against, and the ranks (under torchrun)."""

    batch_size: int
    val_batch_size: int
    precision: str = "32"
    plan: dict[str, Any] | None = None
    dist: Dist = SINGLE


@dataclass(frozen=True)
class Callbacks:
    """`on_best(state_dict)` writes model.safetensors (+ model.json) when validation improves (rank 0 only);
    `on_epoch(record)` sees each epoch's metrics.jsonl record once its checkpoint is written (a hyperparameter search
    prunes there: an exception it raises ends the run, which stays resumable; experiment tracking,
    train/tracking.py, copies it)."""

    on_best: Callable[[dict[str, torch.Tensor]], None]
    on_epoch: Callable[[dict[str, Any]], None] | None = None


class Trainer:
    """Trains for `cfg.epochs` (TrainConfig.epochs_for) or until early stopping: `Trainer(...).fit()`.

    Under torchrun (`sizing.dist`) every rank runs it with the same global batch size, steps on its shard of each
    batch and validates its shard of the validation windows; only rank 0 writes metrics, weights and checkpoints, and
    every decision (stop, checkpoint, early stopping) is the same on all ranks because everything it depends on is
    reduced across them. `resume` is a loaded checkpoint.pt; `stop` the run's signal handler.
    """

    def __init__(self, setup: FitSetup, sizing: Sizing, callbacks: Callbacks,
                 resume: dict[str, Any] | None = None, stop: StopRequest | None = None):
        self.setup, self.sizing, self.callbacks = setup, sizing, callbacks
        cfg, data, dist = setup.cfg, setup.data, sizing.dist
        self.train_ids, self.val_ids = data.splits["train"], data.splits["val"]
        self.n_batches = -(-len(self.train_ids) // sizing.batch_size)
        if cfg.max_train_batches:
            self.n_batches = min(self.n_batches, cfg.max_train_batches)
        self.epochs = cfg.epochs_for(len(self.train_ids))  # the cap; early stopping may end the run sooner
        if cfg.epochs == AUTO and dist.is_main:
            log.info("epochs: auto, at most %d (about %s training windows in all, %d to %d epochs); early stopping "
                     "after %d without improvement", self.epochs, f"{AUTO_EPOCH_WINDOWS:,}", MIN_AUTO_EPOCHS,
                     MAX_AUTO_EPOCHS, cfg.patience, extra=SHOW)
        self.total_steps = self.n_batches * self.epochs
        self.warmup = int(cfg.warmup_fraction * self.total_steps)
        self.stop = stop or StopRequest()
        self.val_batch_size = sizing.val_batch_size
        self.state, self.stepper = self._restore_and_step(resume)
        self.clock = CheckpointClock(cfg.checkpoint_every)
        self.bad_steps = BadSteps(cfg.max_bad_steps, data.windows, setup.run.metrics if dist.is_main else None)
        self.bad_steps.in_row = self.state.bad_steps_in_row  # a resumed run counts on from where it stopped
        self.watch = MemoryWatch(sizing.plan, sizing.batch_size // dist.world_size)  # the plan is one rank's
        self.val_lo, self.val_hi = dist.shard(len(self.val_ids))  # this rank's windows: each counted once overall

    def _restore_and_step(self, resume: dict[str, Any] | None) -> tuple[FitState, TrainStepper]:
        """The progress to start from (a resumed run's, with its weights, optimizer, RNGs and validation batch size)
        and the stepper."""
        s, dist = self.setup, self.sizing.dist
        optimizer = build_optimizer(s.model, s.cfg.learning_rate, s.cfg.weight_decay,
                                    s.cfg.optimizer_state == "cpu", s.device)
        state = FitState()
        if resume is not None:
            state = restore(resume, s.model, optimizer, s.device)
            self.val_batch_size = state.val_batch_size or self.val_batch_size
            if dist.is_main:
                write_text(s.run.metrics, "".join(json.dumps(r) + "\n" for r in state.history))  # drop later ones
            log.info("resuming at epoch %d, batch %d (step %d, best val loss %.6f at epoch %d)", state.epoch + 1,
                     state.epoch_batches, state.global_step, state.best_val_loss, state.best_epoch, extra=SHOW)
        q = torch.tensor(s.quantiles, dtype=torch.float32, device=s.device)
        dist.broadcast_module(s.model)
        extra: dict[str, Any] = {"dist": dist, "seed": s.cfg.seed} if dist.active else {}
        stepper = (DistributedStepper if dist.active else TrainStepper)(
            s.model, optimizer, q, s.cfg.grad_clip, s.device, s.tracker, state.micro_batch,
            precision=self.sizing.precision, loss_weight=s.cfg.loss_weight, **extra)
        if resume is not None and stepper.scaler is not None and "scaler" in resume:
            stepper.scaler.load_state_dict(resume["scaler"])
        return state, stepper

    # -- the run ---------------------------------------------------------------------------------------------------
    def fit(self) -> FitState:
        """Run the epochs left; returns the progress (FitState.history holds every epoch's record)."""
        state, patience = self.state, self.setup.cfg.patience
        self.stop.deferred = True  # from here a signal stops at the next step boundary, with a checkpoint
        if self.setup.model.cfg.anchored and not state.history and not state.epoch_batches:
            self._anchor_epoch()
        for epoch in range(state.epoch + 1, self.epochs + 1):
            if state.bad_epochs >= patience:
                break
            self._epoch(epoch)
        self.stop.deferred = False
        if state.bad_epochs >= patience and state.epoch < self.epochs:
            log.info("early stopping: no validation improvement for %d epochs (best %.6f at epoch %d)",
                     patience, state.best_val_loss, state.best_epoch, extra=SHOW)
        return state

    def _epoch(self, epoch: int) -> None:
        """Train, validate, keep the weights if they are the best, write the epoch's record and checkpoint."""
        tracker = self.setup.tracker
        tracker.record("epoch_start", epoch=epoch)
        tracker.take_peaks()  # the epoch's peaks start here
        t0 = time.perf_counter() - self.state.epoch_seconds
        loss_sum, seen = self._train_epoch(epoch, t0)
        train_seconds = time.perf_counter() - t0
        train_loss = loss_sum / max(1, seen)
        lr = self.stepper.optimizer.param_groups[0]["lr"]
        tracker.record("train_end", epoch=epoch)
        val, memory = self._validate(epoch, tracker.take_peaks())
        improved = self._keep_if_best(val.loss, epoch)
        state = self.state
        state.epoch = epoch
        state.epoch_batches, state.epoch_loss_sum, state.epoch_seen, state.epoch_seconds = 0, 0.0, 0, 0.0
        record = epoch_record(epoch, train_loss, val, lr, seen, train_seconds, time.perf_counter() - t0, improved,
                              self.bad_steps.epoch_count)
        self._end_epoch(epoch, record, memory)

    def _anchor_epoch(self) -> None:
        """Epoch 0 of an anchored model: the untrained model, which forecasts its anchor, validated and kept as the
        best so far, so that training ends no worse on validation than the baseline it starts from."""
        t0 = time.perf_counter()
        s = self.setup
        s.model.eval()
        with torch.no_grad():  # the run's first forward pass makes its one-time allocations outside the memory check
            s.model(s.data.windows.batch(self.val_ids[: self.val_batch_size]).to(s.device))
        val, memory = self._validate(0, s.tracker.take_peaks())
        improved = self._keep_if_best(val.loss, 0)
        record = epoch_record(0, None, val, 0.0, 0, 0.0, time.perf_counter() - t0, improved, bad_steps=0)
        self._end_epoch(0, record, memory)

    def _epoch_ids(self, epoch: int) -> OrderedIds:
        """The windows of epoch `epoch` not stepped yet, in the epoch's order.

        Runs of windows one horizon apart: they share most encoder bars, never a forecast bar (overlapping targets
        made batches of adjacent windows generalise worse; see docs/model.md). The order depends only on the seed and
        the epoch, so a resumed epoch rebuilds it and skips the batches already stepped. Taken a batch at a time
        (data/dataset/run_order.py): the whole order of a 15M-window epoch would hold ~120 MB per int64 copy, and
        `train_ids[order]` would read every page of a store's mapped split array."""
        cfg, batch_size = self.setup.cfg, self.sizing.batch_size
        gen = torch.Generator().manual_seed(cfg.seed * 100_003 + epoch)
        order = RunOrder(len(self.train_ids), min(cfg.window_run, batch_size), gen,
                         stride=self.setup.data.windows.horizon)
        return OrderedIds(self.train_ids, order, self.state.epoch_batches * batch_size, self.n_batches * batch_size)

    def _train_epoch(self, epoch: int, t0: float) -> tuple[float, int]:
        """Step through the epoch's batches, from the first not stepped yet; returns (the loss summed over the
        samples seen, the samples seen). Checkpoints when one is due and stops at a signal."""
        s, state, dist, stop, clock = self.setup, self.state, self.sizing.dist, self.stop, self.clock
        stepper, bad_steps, tracker, n_batches = self.stepper, self.bad_steps, s.tracker, self.n_batches
        total_steps, warmup, peak_lr = self.total_steps, self.warmup, s.cfg.learning_rate
        s.model.train()
        epoch_ids, skip = self._epoch_ids(epoch), state.epoch_batches
        loss_sum = torch.tensor(state.epoch_loss_sum, dtype=torch.float64, device=s.device)
        seen, shown = state.epoch_seen, skip
        bad_steps.new_epoch(state.epoch_bad_steps)
        with epoch_bar(epoch, self.epochs, n_batches, s.cfg.progress and show_progress() and dist.is_main) as bar:
            bar.update(skip, None, 0.0)
            batches = dist.batches(s.data.windows, epoch_ids, self.sizing.batch_size)
            for i, (batch, shard) in enumerate(batches, start=skip + 1):
                set_lr(stepper.optimizer, warmup_cosine(state.global_step, total_steps, warmup, peak_lr))
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
                    self._save("step")
                    if stop.requested:
                        self._stop_here(f"step {state.global_step} (epoch {epoch}, batch {i}/{n_batches})")
        return float(loss_sum), seen

    def _validate(self, epoch: int, train_peaks: Any) -> tuple[ValResult, EpochMemory]:
        """This rank's share of the validation windows (the sums are added over the ranks), and the epoch's memory
        (`train_peaks`: the training phase's)."""
        s, stepper, tracker = self.setup, self.stepper, self.setup.tracker
        model, device, precision = s.model, s.device, self.sizing.precision

        def predict(b: Batch) -> torch.Tensor:
            with autocast(device, precision):
                return model(b).quantiles

        stepper.optimizer.zero_grad(set_to_none=True)  # the last step's gradients are not needed while validating
        model.eval()
        val_start = tracker.record("val_start", epoch=epoch)
        with tracker.rank_local():  # per-batch records and rungs are this rank's alone
            val = validate(predict, s.data.windows, self.val_ids[self.val_lo : self.val_hi], self.val_batch_size,
                           s.quantiles, device, s.cfg.loss_weight,
                           InTraining(tracker, epoch, stepper.optimizer_to_host, self.sizing.dist))
        self.val_batch_size = val.batch_size
        val_end = tracker.record("val_end", epoch=epoch)
        return val, EpochMemory.measure(train_peaks, tracker.take_peaks(), val_start, val_end,
                                        validation_batches(len(self.val_ids), self.val_batch_size))

    # -- early stopping, records and checkpoints -------------------------------------------------------------------
    def _keep_if_best(self, val_loss: float, epoch: int) -> bool:
        """Whether `val_loss` is the best yet: then the weights go to `on_best` (rank 0), else one more epoch
        without improvement counts towards --patience."""
        state = self.state
        if not val_loss < state.best_val_loss:  # a NaN loss is no improvement
            state.bad_epochs += 1
            return False
        state.best_val_loss, state.best_epoch, state.bad_epochs = val_loss, epoch, 0
        if self.sizing.dist.is_main:
            best_state = state_to_cpu(self.setup.model)
            check_finite(best_state, "model.safetensors")
            self.callbacks.on_best(best_state)
        return True

    def _end_epoch(self, epoch: int, record: dict[str, Any], memory: EpochMemory) -> None:
        """Append and show the epoch's record, checkpoint, call `on_epoch`, and stop if a signal came."""
        self.state.history.append(record)
        if self.sizing.dist.is_main:
            append_jsonl(self.setup.run.metrics, record)
        log.info("%s  %s", format_epoch(record, self.epochs), memory.text(), extra=SHOW)
        for warning in self.watch.warnings(epoch, memory, self.val_batch_size):
            log.warning(warning)
        self._save("epoch")
        faults.at("epoch", epoch)  # test hook: simulate a run killed here
        if self.callbacks.on_epoch is not None:
            self.callbacks.on_epoch(record)
        if agreed_stop_or_due(self.sizing.dist, self.stop):
            self._stop_here(f"the end of epoch {epoch}")

    def _save(self, where: str) -> None:
        """Write checkpoint.pt (rank 0) at the end of an epoch (`where` "epoch") or inside one ("step")."""
        s, state, stepper, bad_steps = self.setup, self.state, self.stepper, self.bad_steps
        state.micro_batch, state.val_batch_size = stepper.micro_batch, self.val_batch_size
        state.bad_steps_in_row = bad_steps.in_row
        state.epoch_bad_steps = bad_steps.epoch_count if where == "step" else 0
        if self.sizing.dist.is_main:  # the replicas are equal: one copy is the run's
            ckpt = checkpoint_state(s.model, stepper.optimizer, state, s.device, stepper.scaler)
            check_finite(ckpt["model"], "checkpoint.pt")  # non-finite weights are never saved
            save_checkpoint(s.run.checkpoint, ckpt)
            del ckpt
        self.clock.reset()
        s.tracker.record("checkpoint", epoch=state.epoch + (where == "step"), batch=state.epoch_batches or None)

    def _stop_here(self, where: str) -> None:
        assert self.stop.signum is not None
        raise Interrupted(self.stop.signum, self.setup.run.root, True, where)


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


def epoch_record(epoch: int, train_loss: float | None, val: ValResult, lr: float, seen: int, train_s: float,
                 total_s: float, improved: bool, bad_steps: int) -> dict[str, Any]:
    """One line of metrics.jsonl; every epoch's (epoch 0's too) has the same keys. `bad_steps`: the non-finite
    batches skipped in the epoch."""
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
        "bad_steps": bad_steps,
    }


def format_epoch(r: dict[str, Any], epochs: int) -> str:
    qrisk = " ".join(f"{quantile_label(q)}={v:.4f}" for q, v in r["val_qrisk"].items())
    if r["train_loss"] is None:  # epoch 0 of an anchored model: its anchor, untrained
        return f"epoch 0/{epochs} (the anchor, untrained)  val_loss {r['val_loss']:.5f}  val_qrisk {qrisk}" + (
            "  *best" if r["best"] else "")
    return (
        f"epoch {r['epoch']}/{epochs}  train_loss {r['train_loss']:.5f}  val_loss {r['val_loss']:.5f}  "
        f"val_qrisk {qrisk}  lr {r['lr']:.2e}  {r['samples_per_s']:,.0f} samples/s  {r['seconds']:.1f}s"
        + ("  *best" if r["best"] else "")
    )
