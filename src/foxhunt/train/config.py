"""Training options, validated once at the edge and saved whole in config.json and the checkpoint."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from foxhunt.errors import InputError

AUTO = "auto"
PRECISIONS = (AUTO, "32", "bf16", "16-mixed")  # what each means: train/precision.py
LOSS_WEIGHTS = ("none", "scale")


# --epochs auto: as many epochs as show the model about AUTO_EPOCH_WINDOWS training windows, within
# [MIN_AUTO_EPOCHS, MAX_AUTO_EPOCHS], with early stopping (patience) deciding inside that cap. Small real files need
# many epochs and a large one few: a fixed 3 left S&P 500 daily ranges 6% behind what early stopping reaches
# (benchmarks/RESULTS.md, "Epochs"), while the bundled sample's first run stays under a minute (6 epochs).
AUTO_EPOCH_WINDOWS = 80_000
MIN_AUTO_EPOCHS, MAX_AUTO_EPOCHS = 3, 30


def auto_epochs(n_train_windows: int) -> int:
    """The epoch cap of --epochs auto for `n_train_windows` training windows: ceil(AUTO_EPOCH_WINDOWS / n),
    clipped to [MIN_AUTO_EPOCHS, MAX_AUTO_EPOCHS]."""
    return min(MAX_AUTO_EPOCHS, max(MIN_AUTO_EPOCHS, -(-AUTO_EPOCH_WINDOWS // max(n_train_windows, 1))))


@dataclass(frozen=True)
class TrainConfig:
    epochs: int | str = AUTO  # an int, or "auto" (auto_epochs of the training windows; early stopping within)
    batch_size: int | str = 128  # an int or "auto" (largest that fits --memory-budget)
    validation_batch_size: int | str = AUTO  # validation needs no backward activations, so it can be larger
    learning_rate: float = 1e-3
    weight_decay: float = 1e-4
    grad_clip: float = 1.0
    warmup_fraction: float = 0.05  # share of all optimizer steps spent warming the learning rate up
    patience: int = 3  # epochs without validation improvement before stopping
    device: str = AUTO  # auto | cpu | cuda
    seed: int = 0
    run_dir: str | None = None  # default runs/<UTC time>
    memory_log_every: int = 0  # a [MEMORY] record every N train/val batches (0: phase boundaries only)
    memory_budget: int | None = None  # bytes; on CUDA enforced with set_per_process_memory_fraction
    optimizer_state: str = "device"  # device | cpu (AdamW moments kept in host memory)
    max_train_batches: int = 0  # cap on training batches per epoch (0: all); for quick looks at huge files
    num_threads: int = 0  # torch CPU threads (0: torch's default)
    precision: str = AUTO  # one of PRECISIONS
    window_run: int = 16  # training batches are runs of this many windows one horizon apart (1: shuffled singly)
    max_bad_steps: int = 5  # non-finite (skipped) training steps in a row before the run stops
    progress: bool = True
    # none: every sample's scaled pinball counts alike | scale: times its target scale (mean 1 per batch), so that
    # with volatility scaling the loss is the raw-unit pinball that q-risk reports (model/loss.py). On SPX daily
    # validation both gave the same raw q-risk to 0.1% (p10 0.5233 / 0.5229, p90 0.4509 / 0.4510): "none" stays
    loss_weight: str = "none"
    checkpoint_every: int = 0  # a checkpoint every N optimizer steps (0: about every 10 minutes) and at each epoch end
    deterministic: bool = False  # deterministic CUDA kernels (CPU runs are deterministic already)

    def epochs_for(self, n_train_windows: int) -> int:
        """The number of epochs to train at most: --epochs, or auto_epochs of the training windows."""
        return auto_epochs(n_train_windows) if self.epochs == AUTO else int(self.epochs)

    def __post_init__(self) -> None:
        def bad(msg: str) -> None:
            raise InputError(msg)

        if self.epochs != AUTO and (not isinstance(self.epochs, int) or self.epochs < 1):
            bad(f"--epochs must be a positive integer or 'auto', got {self.epochs!r}")
        for flag, value in (("--batch-size", self.batch_size), ("--validation-batch-size", self.validation_batch_size)):
            if value != AUTO and (not isinstance(value, int) or value < 1):
                bad(f"{flag} must be a positive integer or 'auto', got {value!r}")
        if self.batch_size == AUTO and self.memory_budget is None:
            bad("--batch-size auto needs --memory-budget (for example --memory-budget 4GiB)")
        if self.learning_rate <= 0:
            bad(f"--learning-rate must be positive, got {self.learning_rate}")
        if self.grad_clip < 0:
            bad(f"--grad-clip must be >= 0 (0 turns clipping off), got {self.grad_clip}")
        if not 0.0 <= self.warmup_fraction < 1.0:
            bad(f"--warmup-fraction must be in [0, 1), got {self.warmup_fraction}")
        if self.patience < 1:
            bad(f"--patience must be at least 1, got {self.patience}")
        if self.device not in (AUTO, "cpu", "cuda") and not self.device.startswith("cuda:"):
            bad(f"--device {self.device!r} is not one of auto, cpu, cuda, cuda:N")
        if self.optimizer_state not in ("device", "cpu"):
            bad(f"--optimizer-state {self.optimizer_state!r} is not one of device, cpu")
        if self.precision not in PRECISIONS:
            bad(f"--precision {self.precision!r} is not one of {', '.join(PRECISIONS)}")
        if self.precision == "16-mixed" and self.optimizer_state == "cpu":
            bad("--precision 16-mixed cannot scale gradients held by --optimizer-state cpu; use --precision bf16")
        if self.window_run < 1:
            bad(f"--window-run must be at least 1 (1 shuffles windows singly), got {self.window_run}")
        if self.loss_weight not in LOSS_WEIGHTS:
            bad(f"--loss-weight {self.loss_weight!r} is not one of {', '.join(LOSS_WEIGHTS)}")
        if self.max_bad_steps < 1:
            bad(f"--max-bad-steps must be at least 1, got {self.max_bad_steps}")
        if self.checkpoint_every < 0:
            bad(f"--checkpoint-every must be >= 0 (0: about every 10 minutes), got {self.checkpoint_every}")
        if self.memory_log_every < 0:
            bad(f"--memory-log-every must be >= 0, got {self.memory_log_every}")
        if self.memory_budget is not None and self.memory_budget <= 0:
            bad(f"--memory-budget must be positive, got {self.memory_budget}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_dict(d: dict[str, Any]) -> TrainConfig:
        d = dict(d)
        d.setdefault("window_run", 1)  # runs saved before the option existed shuffled windows singly
        d.setdefault("loss_weight", "none")  # and weighed every sample alike
        # fields added later (checkpoint_every, deterministic) take their defaults; unknown ones (a newer foxhunt)
        # are a TypeError the caller reports
        return TrainConfig(**d)


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$", re.IGNORECASE)
_UNITS = {
    "": 1, "b": 1,
    "k": 2**10, "kib": 2**10, "kb": 10**3,
    "m": 2**20, "mib": 2**20, "mb": 10**6,
    "g": 2**30, "gib": 2**30, "gb": 10**9,
    "t": 2**40, "tib": 2**40, "tb": 10**12,
}  # fmt: skip


def parse_size(text: str, what: str = "memory size") -> int:
    """Bytes from "4GiB", "512MiB", "4GB", "1.5g" or "4096": KiB/MiB/GiB and bare K/M/G are powers of 1024,
    KB/MB/GB powers of 1000; case does not matter. Anything else, or zero, raises InputError."""
    m = _SIZE.match(str(text))
    unit = m.group(2).lower() if m else None
    if m is None or unit not in _UNITS or float(m.group(1)) * _UNITS[unit] < 1:
        raise InputError(
            f"{what} {text!r} is not understood; write e.g. 4GiB, 512MiB, 4GB or a count of bytes"
        )
    return int(float(m.group(1)) * _UNITS[unit])
