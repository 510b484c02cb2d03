"""`foxhunt plan-memory`: the peak memory of a training step and of a validation step, per batch size, before training.

The plan is analytic: weights, gradients and AdamW's two fp32 moments are counted from the parameters; the data batch
from its shapes; activations from the architecture (`activation_elements`: what each layer saves for backward, and
what is live at once in inference). One probe calibrates the activation term on the real device: the step is run at
two small batch sizes and the per-sample growth of its peak is divided by the analytic per-sample count. Growth, not
the peak itself, so that per-run constants (gradients appearing during backward, workspaces) do not leak into the
per-sample rate. On CUDA the peak is `max_memory_allocated`; on CPU it is the bytes of tensor storage alive at once,
tracked per op with a dispatch mode (`LiveTensorBytes`), since CPU has no allocator counters.

Every term is linear in the batch size B, so the totals grow monotonically with B and the largest batch that fits is
read off the table. Legend: B batch, E encoder steps, D forecast steps, T = E + D, V variables, H hidden, N heads,
K = H / N per-head width, L = D query positions.
"""

from __future__ import annotations

import contextlib
import math
import weakref
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from foxhunt.data.dataset.batch import Batch
from foxhunt.data.features.schema import InputSizes
from foxhunt.model.config import ModelConfig
from foxhunt.model.loss import quantile_loss
from foxhunt.train import faults
from foxhunt.train.oom import OOM_ERRORS, is_oom, release_memory, rung
from foxhunt.train.precision import activation_bytes, autocast

MIB = 2**20
HEADROOM = 0.10  # share of the budget kept free for what no plan sees: other processes, workspaces, drift
FRAGMENTATION = 0.05  # allowance on the predicted peak for allocator rounding and fragmentation
ADAM_MOMENTS = 2  # AdamW keeps exp_avg and exp_avg_sq, each the size of the parameter, in fp32
MIN_CALIBRATION = 0.5  # the analytic activation count is trusted at least this far (see `calibration`)
PROBE_BATCHES = (2, 8)  # two small batches: their difference gives the measured per-sample activation bytes
DEFAULT_BATCH_SIZES = tuple(2**i for i in range(13))  # 1, 2, 4, ..., 4096


@dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes on the device for one step; `total` is the sum of the terms (the predicted peak)."""

    weights: int
    gradients: int
    optimizer: int
    activations: int
    batch: int

    @property
    def total(self) -> int:
        return self.weights + self.gradients + self.optimizer + self.activations + self.batch

    def to_dict(self) -> dict[str, int]:
        return {**asdict(self), "total": self.total}  # the terms in field order, then their sum


@dataclass(frozen=True)
class MemoryRow:
    batch_size: int
    train: MemoryBreakdown
    val: MemoryBreakdown


@dataclass(frozen=True)
class MemoryPlan:
    """Predicted peaks per batch size and the largest batch sizes that fit `budget_bytes` with headroom (0: none).

    A step fits when `total * (1 + FRAGMENTATION) <= budget_bytes * (1 - HEADROOM) - fixed_bytes`: on CPU the budget
    is the process's, and `fixed_bytes` what it holds outside the step (torch, the data, the allocator's arenas).
    The calibration factors are measured / analytic activation bytes per sample (1.0 and `probe` "none" when no
    probe ran).
    """

    rows: tuple[MemoryRow, ...]
    budget_bytes: int
    best_train_batch: int
    best_val_batch: int
    train_calibration: float
    val_calibration: float
    probe: str
    device: str
    optimizer_state_on_cpu: bool
    fixed_bytes: int = 0
    usable_bytes: int = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "usable_bytes", usable_bytes(self.budget_bytes, self.fixed_bytes))

    def format_table(self) -> str:
        """Text table in MiB: the train-step breakdown, the validation-step total, and which rows fit."""
        head = (
            f"memory plan on {self.device}: budget {self.budget_bytes / MIB:.0f} MiB, usable "
            f"{self.usable_bytes / MIB:.0f} MiB after {HEADROOM:.0%} headroom"
            + (f" and {self.fixed_bytes / MIB:.0f} MiB held outside the step" if self.fixed_bytes else "")
            + f"; predicted peaks include "
            f"{FRAGMENTATION:.0%} fragmentation allowance when checked. Calibration train x{self.train_calibration:.3f}, "
            f"val x{self.val_calibration:.3f} ({self.probe})"
            + (". Optimizer state in host memory." if self.optimizer_state_on_cpu else ".")
        )
        cols = ("batch", "weights", "grads", "optim", "activ", "data", "train", "fits", "v.activ", "val", "fits")
        rows = [
            (
                str(r.batch_size),
                *(f"{v / MIB:.1f}" for v in (r.train.weights, r.train.gradients, r.train.optimizer)),
                *(f"{v / MIB:.1f}" for v in (r.train.activations, r.train.batch, r.train.total)),
                _mark(r.batch_size, self.best_train_batch, fits(r.train.total, self.budget_bytes, self.fixed_bytes)),
                f"{r.val.activations / MIB:.1f}",
                f"{r.val.total / MIB:.1f}",
                _mark(r.batch_size, self.best_val_batch, fits(r.val.total, self.budget_bytes, self.fixed_bytes)),
            )
            for r in self.rows
        ]
        widths = [max(len(c), *(len(row[i]) for row in rows)) for i, c in enumerate(cols)]
        line = lambda cells: "  ".join(c.rjust(w) for c, w in zip(cells, widths, strict=True))  # noqa: E731
        best = (
            f"largest training batch that fits: {self.best_train_batch or 'none'}; "
            f"largest validation batch that fits: {self.best_val_batch or 'none'}"
        )
        return "\n".join([head, line(cols), *(line(r) for r in rows), best])

    def holding(self, fixed_bytes: int) -> MemoryPlan:
        """This plan for a process that holds `fixed_bytes` outside the step: the largest batches that fit then."""
        def best(step: str) -> int:
            return max((r.batch_size for r in self.rows if fits(getattr(r, step).total, self.budget_bytes,
                                                                  fixed_bytes)), default=0)
        return replace(self, best_train_batch=best("train"), best_val_batch=best("val"), fixed_bytes=int(fixed_bytes))

    def to_dict(self) -> dict[str, Any]:
        return {
            "budget_bytes": self.budget_bytes,
            "usable_bytes": self.usable_bytes,
            "fixed_bytes": self.fixed_bytes,
            "headroom": HEADROOM,
            "fragmentation": FRAGMENTATION,
            "best_train_batch": self.best_train_batch,
            "best_val_batch": self.best_val_batch,
            "train_calibration": self.train_calibration,
            "val_calibration": self.val_calibration,
            "probe": self.probe,
            "device": self.device,
            "optimizer_state_on_cpu": self.optimizer_state_on_cpu,
            "rows": [
                {"batch_size": r.batch_size, "train": r.train.to_dict(), "val": r.val.to_dict()}
                for r in self.rows
            ],
        }


def _mark(batch_size: int, best: int, ok: bool) -> str:
    return "best" if batch_size == best else ("yes" if ok else "no")


def usable_bytes(budget_bytes: int, fixed_bytes: int = 0) -> int:
    return max(0, int(budget_bytes * (1.0 - HEADROOM)) - fixed_bytes)


def fits(total_bytes: int, budget_bytes: int, fixed_bytes: int = 0) -> bool:
    return total_bytes * (1.0 + FRAGMENTATION) <= usable_bytes(budget_bytes, fixed_bytes)


# -- analytic activation model ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Stage:
    """One stage of the forward pass, per sample, in activation elements (int64 indices count as 2).

    saved: what it saves for backward; ckpt_saved: what it keeps under activation checkpointing (its inputs), None
    when it is never checkpointed; grad: the gradients live while its backward runs; live: the tensors alive at
    once while it runs in inference.
    """

    name: str
    saved: float
    grad: float
    live: float
    ckpt_saved: float | None = None


def stages(sizes: InputSizes, cfg: ModelConfig, device_type: str, elem_bytes: int) -> list[Stage]:
    """The TFT's stages in forward order: an analytic copy of model/tft.py's forward (what each op keeps, not what it
    computes), kept equal to it by tests/train/test_plan.py (`test_probe_agrees_with_the_analytic_model`: measured
    over analytic bytes per sample within 10%); a change to the forward changes these counts with it.

    Dropout saves its mask: on CUDA one byte per element (`m` = 1 / elem_bytes), on CPU a float scale tensor (m = 1).
    Linear layers and einsums whose input is a non-contiguous view save a contiguous copy of it.
    """
    e, d, h = cfg.encoder_length, cfg.horizon, cfg.hidden_size
    t, n, layers = e + d, cfg.attention_heads, cfg.lstm_layers
    k = h // n
    vs, ve, vd = sizes.n_static, sizes.n_encoder, sizes.n_decoder
    m = 0.0 if cfg.dropout == 0 else (1.0 if device_type == "cpu" else 1.0 / elem_bytes)
    idx = 8 / elem_bytes  # an int64 index in activation elements
    n_cat = (len(sizes.static_cat), len(sizes.known_cat), len(sizes.observed_cat))
    head = 4 if cfg.quantile_head == "tied" else 3  # per quantile; tied: its linear outputs too, saved by softplus

    def grn(d_in: float, d_h: float, d_out: float, drop: float = m) -> float:
        # input, ELU input and output, dropout mask and output, GLU input (2 d_out), LayerNorm input and its 2 stats
        return d_in + 3 * d_h + drop * d_h + 3 * d_out + 2

    def gate_add_norm(width: float, drop: float = m) -> float:
        return (4 + drop) * width + 2  # dropout mask and output, GLU input (2x), LayerNorm input and stats

    def stacked(v: float) -> float:
        return v * ((7 + m) * h + 2)  # per variable: a GRN without its input (saved once by the VSN)

    def vsn(v: int) -> float:
        """Per (window, position), with no bar shared between windows (the most a batch can hold): the per-bar
        part (per-variable GRNs, the input's shares of the selection GRN) and the selection itself (context,
        ELU, fc1, gate, softmax weights, the gathered GRN outputs they weigh)."""
        if v == 0:
            return 0.0
        per_bar = stacked(v) + h + v  # per-variable GRNs, fc2 share (H), skip share (V)
        select = (5 + m) * h + 5 * v + 2 + v * h  # context, ELU in/out, fc1, dropout, gate, LayerNorm, softmax, gather
        return per_bar + select

    # Per step and layer: CPU oneDNN's workspace as measured; cuDNN's reserve is of that order (calibrated).
    lstm_step = 17 * h * layers
    attention = (
        t * (3 * h + k)  # θ, key copy, fused K|V projection
        + d * h  # query copy
        + n * d * t * (2 + m if m else 1)  # softmax output, dropout mask and output
        + m * n * d * k + d * k + m * d * h  # head dropout, mixed heads, output dropout
    )  # fmt: skip
    return [
        Stage("embeddings", idx * (n_cat[0] + t * n_cat[1] + e * n_cat[2]), 0.0, (n_cat[1] + n_cat[2]) * t * h),
        Stage("static_vsn", vs * h + vsn(vs), 2 * vs * h, 7 * vs * h, ckpt_saved=vs * h),
        Stage("static_contexts", 4 * h + stacked(4), 8 * h, 28 * h, ckpt_saved=h),
        # Checkpointed, a VSN keeps its inputs and the per-bar terms (the output of its first checkpointed block).
        Stage("encoder_vsn", e * vsn(ve), 2 * e * ve * h, e * (5 * ve * h + 4 * h),
              ckpt_saved=e * (ve * h + h + 3 * ve)),
        Stage("decoder_vsn", d * vsn(vd), 2 * d * vd * h, d * (5 * vd * h + 4 * h),
              ckpt_saved=d * (vd * h + h + 3 * vd)),
        Stage("lstm", t * (h + lstm_step) + 4 * h * layers, 2 * t * h, 8 * t * h),
        Stage("post_lstm", t * gate_add_norm(h), 2 * t * h, 6 * t * h),
        Stage("enrichment", t * grn(h, h, h), 2 * t * h, 6 * t * h, ckpt_saved=t * h),
        Stage("attention", attention, 2 * t * h + 2 * n * d * t, 4 * t * h + 3 * n * d * t),
        Stage("post_attention", d * gate_add_norm(h), 2 * d * h, 6 * d * h),
        Stage("positionwise", d * grn(h, h, h), 2 * d * h, 6 * d * h, ckpt_saved=d * h),
        Stage("output", d * (gate_add_norm(h, 0.0) + h + head * len(cfg.quantiles)), 2 * d * h, 4 * d * h),
    ]  # fmt: skip


def activation_elements(stage_list: Sequence[Stage], checkpointing: bool) -> tuple[float, float]:
    """(train, val) activation elements per sample.

    Train: the peak over the backward pass. While stage i runs its backward, stages before it still hold what they
    saved (their inputs only, when checkpointed), stage i holds all of its saved tensors (recomputed, when
    checkpointed) and its gradients. Val: the largest live set of any stage.
    """
    kept = [s.ckpt_saved if checkpointing and s.ckpt_saved is not None else s.saved for s in stage_list]
    prefix = [sum(kept[:i]) for i in range(len(kept))]
    train = max(before + s.saved + s.grad for before, s in zip(prefix, stage_list, strict=True))
    train = max(train, sum(kept))
    return train, max(s.live for s in stage_list)


# -- measurement -----------------------------------------------------------------------------------------------------


class LiveTensorBytes(TorchDispatchMode):
    """Counts the storage bytes of tensors created inside the mode that are alive at once (current and peak).

    Each op's outputs are recorded by storage (views and in-place results count once) and uncounted when the storage
    is freed. Tensors created before the mode (weights, the batch) are not counted. Used on CPU, where torch keeps no
    allocator statistics; the same quantity as CUDA's memory_allocated, without the caching allocator's rounding.
    """

    def __init__(self) -> None:
        super().__init__()
        self.live: dict[int, int] = {}
        self.current = 0
        self.peak = 0

    def _free(self, key: int) -> None:
        self.current -= self.live.pop(key, 0)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.device.type != "meta":
                storage = t.untyped_storage()
                key, nbytes = storage.data_ptr(), storage.nbytes()
                if nbytes and key not in self.live:
                    self.live[key] = nbytes
                    self.current += nbytes
                    self.peak = max(self.peak, self.current)
                    weakref.finalize(storage, self._free, key)
        return out


def probe_batch(sizes: InputSizes, cfg: ModelConfig, b: int, device: torch.device) -> Batch:
    """A Batch of B samples whose windows share no bar (the most rows a batch of B can carry, so the plan is an
    upper bound): code 0 ("unknown") and zeros; only shapes matter."""
    e, d = cfg.encoder_length, cfg.horizon
    t = e + d

    def codes(*shape: int) -> torch.Tensor:
        return torch.zeros(*shape, dtype=torch.long, device=device)

    def zeros(*shape: int) -> torch.Tensor:
        return torch.zeros(*shape, device=device)

    batch = Batch.from_dense(
        static_cat=codes(b, len(sizes.static_cat)),
        static_cont=zeros(b, sizes.static_cont),
        known_cat=codes(b, t, len(sizes.known_cat)),
        known_cont=zeros(b, t, sizes.known_cont),
        observed_cat=codes(b, e, len(sizes.observed_cat)),
        observed_cont=zeros(b, e, sizes.observed_cont),
        target=zeros(b, d),
        target_center=zeros(b),
        target_scale=torch.ones(b, device=device),
        window=torch.arange(b, device=device),
    )
    return replace(batch, anchor=zeros(b, d, len(cfg.quantiles))) if cfg.anchored else batch  # (B, D, Q)


def measure_step_peak(
    model: nn.Module, batch: Batch, quantiles: torch.Tensor, device: torch.device, train: bool, precision: str = "32"
) -> int:
    """Peak bytes allocated while one forward (+ loss + backward when `train`) runs, above what existed before it."""
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
    tracker = LiveTensorBytes() if not cuda else None
    with tracker if tracker is not None else contextlib.nullcontext():
        if train:
            with autocast(device, precision):
                out = model(batch).quantiles
            loss = quantile_loss(out, batch.target, quantiles)
            loss.backward()
            del loss, out
        else:
            with torch.inference_mode(), autocast(device, precision):
                model(batch)
    if cuda:
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - base
    return tracker.peak


def probe_per_sample(
    model: nn.Module, sizes: InputSizes, cfg: ModelConfig, device: torch.device, precision: str = "32",
) -> tuple[float, float, tuple[int, int]] | None:
    """Measured (train, val) activation bytes per sample, from the step peaks at two batch sizes (PROBE_BATCHES, and
    the sizes used); None when even the smallest probe runs out of memory.

    The out-of-memory ladder of train/oom.py: retry once, then halve both probe batches (the per-sample slope is the
    same quantity at any two sizes), down to 1 and 2; then give up, and the plan stays analytic (it still says which
    batch sizes would fit). Leaves the model as it found it: its mode, its gradients and the RNG streams (dropout
    draws in the probe must not change the training run that follows).
    """
    batches, attempt = PROBE_BATCHES, 0
    while True:
        peaks = None
        try:
            peaks = _probe_peaks(model, sizes, cfg, device, precision, batches)
        except OOM_ERRORS as e:
            if not is_oom(e):
                raise
        release_memory(device)  # outside the except block: the traceback (and the tensors its frames hold) is gone
        if peaks is not None:
            break
        attempt += 1
        where = f"out of memory in the memory probe (batches {batches[0]} and {batches[1]})"
        if attempt == 1:
            rung(None, "oom_retry", f"{where}: released caches; retrying it once")
        elif batches[1] > 2:
            batches = (max(1, batches[0] // 2), max(2, batches[1] // 2))
            rung(None, "oom_halve", f"{where}: probing batches {batches[0]} and {batches[1]} instead")
        else:
            rung(None, "oom_stop", f"{where}: the plan uses the analytic activation count only")
            return None
    span = batches[1] - batches[0]
    return (peaks[True][1] - peaks[True][0]) / span, (peaks[False][1] - peaks[False][0]) / span, batches


def _probe_peaks(
    model: nn.Module, sizes: InputSizes, cfg: ModelConfig, device: torch.device, precision: str,
    batches: tuple[int, int],
) -> dict[bool, list[int]]:
    """Step peaks {train: [at batches[0], at batches[1]], val: [...]}; the model's state is restored however it
    ends. The fault hook's `probe` index counts the four measurements, 1-based."""
    was_training = model.training
    grads = {p: p.grad for p in model.parameters()}
    q = torch.tensor(cfg.quantiles, device=device)
    peaks: dict[bool, list[int]] = {True: [], False: []}
    try:
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            for train in (True, False):
                model.train(train)
                for b in batches:
                    faults.at("probe", len(peaks[True]) + len(peaks[False]) + 1)
                    batch = probe_batch(sizes, cfg, b, device)
                    peaks[train].append(measure_step_peak(model, batch, q, device, train, precision))
                    for p in model.parameters():
                        p.grad = None
                    del batch
    finally:
        model.train(was_training)
        for p, g in grads.items():
            p.grad = g
    return peaks


def calibration(measured: float, analytic: float) -> float:
    """measured / analytic bytes per sample, never below MIN_CALIBRATION: a probe that sees less than half the
    analytic count saw allocator rounding at tiny sizes, not the activations (1.0 when it saw no growth at all)."""
    return 1.0 if measured <= 0 else max(MIN_CALIBRATION, measured / analytic)


# -- the plan --------------------------------------------------------------------------------------------------------


def plan_memory(
    model: nn.Module,
    sizes: InputSizes,
    cfg: ModelConfig,
    device: torch.device,
    budget_bytes: int,
    batch_sizes: Sequence[int] = DEFAULT_BATCH_SIZES,
    optimizer_state_on_cpu: bool = False,
    probe: bool = True,
    precision: str = "32",
) -> MemoryPlan:
    """Predicted train / validation step peaks on `device` for each batch size, and the largest that fit (on CPU,
    `.holding(telemetry.held_outside_step(model))` leaves what the process holds outside the step out of the budget).

    With `probe` the model must already be on `device`; it runs a few small steps there (state restored after).
    `optimizer_state_on_cpu` keeps AdamW's moments in host memory (foxhunt.train.optim.HostAdamW): no optimizer term
    on an accelerator; on CPU the host is the device, so the term stays. The validation step is the one inside a
    training run: the optimizer state stays resident beside the weights, while the gradients are freed before
    validation starts (the loop calls zero_grad(set_to_none=True)), so they are not counted there.
    """
    device = torch.device(device)
    params = [p for p in model.parameters()]
    trainable = [p for p in params if p.requires_grad]
    weights = sum(p.numel() * p.element_size() for p in params) + sum(
        b.numel() * b.element_size() for b in model.buffers()
    )
    gradients = sum(p.numel() * p.element_size() for p in trainable)
    on_host = optimizer_state_on_cpu and device.type != "cpu"
    optimizer = 0 if on_host else sum(ADAM_MOMENTS * p.numel() * 4 for p in trainable)
    # Activations are stored at the autocast precision (weights, gradients and optimizer state stay fp32).
    elem = min(activation_bytes(precision), next((p.element_size() for p in params if p.is_floating_point()), 4))
    stage_list = stages(sizes, cfg, device.type, elem)
    train_el, val_el = activation_elements(stage_list, cfg.activation_checkpointing)
    train_cal = val_cal = 1.0
    how = "none: analytic only"
    if probe:
        model_device = params[0].device if params else device
        if model_device.type != device.type:
            raise ValueError(f"plan_memory(probe=True) needs the model on {device}, it is on {model_device}")
        with faults.armed():  # the probe's own faults (`probe`), as FOXHUNT_FAULT_INJECT is now
            measured = probe_per_sample(model, sizes, cfg, device, precision)
        if measured is None:
            how = "probe ran out of memory: analytic only"
        else:
            train_cal, val_cal = (
                calibration(measured[0], train_el * elem),
                calibration(measured[1], val_el * elem),
            )
            meter = "max_memory_allocated" if device.type == "cuda" else "live tensor bytes"
            how = f"probe: {meter} at batch {' and '.join(map(str, measured[2]))}"
    # A real one-sample batch on the host: tiny, while a meta-device one would import torch._decomp (seconds).
    per_sample_batch = probe_batch(sizes, cfg, 1, torch.device("cpu")).nbytes()
    rows = []
    for b in sorted(set(int(x) for x in batch_sizes)):
        data = b * per_sample_batch
        train_act = math.ceil(b * train_el * elem * train_cal)
        val_act = math.ceil(b * val_el * elem * val_cal)
        train = MemoryBreakdown(weights, gradients, optimizer, train_act, data)
        val = MemoryBreakdown(weights, 0, optimizer, val_act, data)
        rows.append(MemoryRow(b, train, val))
    return MemoryPlan(
        rows=tuple(rows),
        budget_bytes=int(budget_bytes),
        best_train_batch=0,
        best_val_batch=0,
        train_calibration=train_cal,
        val_calibration=val_cal,
        probe=how,
        device=str(device),
        optimizer_state_on_cpu=on_host,
    ).holding(0)
