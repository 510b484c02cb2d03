"""Training options, validated once at the edge: the run's (TrainConfig, saved whole in config.json and the
checkpoint) and the session's (SessionConfig: seeds, resume, tracking; not saved)."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from foxhunt.errors import InputError
from foxhunt.flags import DEVICE, MEMORY, OUTPUT, TRAINING, Switch, option

if TYPE_CHECKING:
    from foxhunt.train.tracking import TrackingConfig

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


def count_or_auto(value: Any, flag: str) -> int | str:
    """--epochs, --batch-size, --validation-batch-size: a count, or AUTO."""
    if isinstance(value, str) and value.strip().lower() == AUTO:
        return AUTO
    try:
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise ValueError
        return int(value)
    except ValueError:
        raise InputError(f"{flag} must be a positive integer or {AUTO!r}, got {value!r}") from None


def size(value: Any, flag: str) -> int:
    """--memory-budget: bytes, from a count or a size like 4GiB (parse_size)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else parse_size(str(value), flag)


def on_gpu(device: str) -> str:
    """--use-gpu: cuda, or the CUDA device --device names."""
    if device == AUTO:
        return "cuda"
    if not device.startswith("cuda"):
        raise InputError(f"--use-gpu contradicts --device {device}; pass one of them")
    return device


@dataclass(frozen=True)
class TrainConfig:
    """Each field with `option(...)` is an option of `foxhunt train` (and backtest, tune; plan-memory takes the
    memory and device ones), a `--config` key and a `foxhunt.fit` keyword, declared here once (foxhunt/flags.py)."""

    # An int, or "auto" (auto_epochs of the training windows; early stopping within).
    epochs: int | str = option(AUTO, "Epochs, or auto: 3-30 by data size.", TRAINING, metavar="N",
                               parse=count_or_auto)
    # An int or "auto" (the largest that fits --memory-budget).
    batch_size: int | str = option(128, "Batch size, or auto (needs --memory-budget).", TRAINING, metavar="N",
                                   parse=count_or_auto)
    # Validation needs no backward activations, so it can be larger.
    validation_batch_size: int | str = option(AUTO, "Validation batch, or auto: the largest that fits.", TRAINING,
                                              metavar="N", parse=count_or_auto)
    # 2e-3, chosen by the quality benchmark over 6 seeds (benchmarks/RESULTS.md, "The anchored head"): against 1e-3
    # the S&P walk-forward better in 6 of 6 seeds at p10 and 5 of 6 at p90, the other datasets level; at 1e-3 up to
    # a third of its fold models never left the untrained anchor. 3e-3 is no better, 3e-4 worse.
    learning_rate: float = option(2e-3, "Peak learning rate (AdamW).", TRAINING)
    weight_decay: float = option(1e-4, "AdamW weight decay.", TRAINING)
    grad_clip: float = option(1.0, "Gradient-norm clip (0: off).", TRAINING)
    # Share of all optimizer steps spent warming the learning rate up.
    warmup_fraction: float = option(0.05, "Share of steps warming the LR up.", TRAINING)
    # Epochs without validation improvement before stopping.
    patience: int = option(3, "Early stopping: epochs without improvement.", TRAINING)
    device: str = option(AUTO, "auto | cpu | cuda | cuda:N.", DEVICE, metavar="DEVICE",
                         switch=Switch("use_gpu", "Same as --device cuda.", DEVICE, on_gpu))
    seed: int = option(0, "Random seed (a CPU run repeats bit for bit).", TRAINING)
    run_dir: str | None = option(None, "Run directory.", OUTPUT, metavar="PATH", show_default="runs/<UTC time>")
    # A [MEMORY] record every N train/val batches (0: phase boundaries only).
    memory_log_every: int = option(0, "[MEMORY] record every N batches (0: phases only).", MEMORY)
    # Bytes; on CUDA enforced with set_per_process_memory_fraction.
    memory_budget: int | None = option(None, "Memory budget, e.g. 4GiB (enforced on CUDA).", MEMORY,
                                       metavar="SIZE", parse=size)
    # Where the AdamW moments live: device | cpu (host memory).
    optimizer_state: str = option("device", "device | cpu: where the AdamW moments live.", MEMORY, metavar="WHERE")
    # Cap on training batches per epoch (0: all); for quick looks at huge files.
    max_train_batches: int = option(0, "Cap training batches per epoch (0: all).", TRAINING)
    num_threads: int = option(0, "CPU threads for torch (0: torch's default).", DEVICE, name="threads", minimum=0)
    precision: str = option(AUTO, "auto | 32 | bf16 | 16-mixed (autocast).", DEVICE, metavar="MODE")  # PRECISIONS
    # Training batches are runs of this many windows one horizon apart (1: shuffled singly).
    window_run: int = option(16, "Batches as runs of N windows one horizon apart.", TRAINING)
    # none: every sample's scaled pinball counts alike | scale: times its target scale (mean 1 per batch), so that
    # with volatility scaling the loss is the raw-unit pinball that q-risk reports (model/loss.py). On SPX daily
    # validation both gave the same raw q-risk to 0.1% (p10 0.5233 / 0.5229, p90 0.4509 / 0.4510): "none" stays
    loss_weight: str = option("none", "none | scale: pinball loss times target scale.", TRAINING, metavar="MODE")
    # Non-finite (skipped) training steps in a row before the run stops.
    max_bad_steps: int = option(5, "Stop after N non-finite steps in a row.", TRAINING)
    progress: bool = option(True, "Show a progress bar.", OUTPUT)
    # A checkpoint every N optimizer steps (0: about every 10 minutes) and at each epoch end.
    checkpoint_every: int = option(0, "Checkpoint every N steps (0: about every 10 min).", OUTPUT)
    # A run directory whose model's weights this run starts from where names and shapes agree (train/init_from.py);
    # a resumed run continues from its checkpoint instead.
    init_from: str | None = option(None, "Start from this run's weights (fine-tune).", TRAINING, metavar="RUN")
    # Deterministic CUDA kernels (CPU runs are deterministic already).
    deterministic: bool = option(False, "Deterministic CUDA kernels (slower, repeatable).", DEVICE,
                                 flags=("--deterministic",))

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
        """The inverse of `to_dict`, of a config.json of this foxhunt's format (saved_format.check_format, first); an unknown key
        is a TypeError the caller reports."""
        return TrainConfig(**d)


def tracking_backends(value: Any, flag: str) -> tuple[str, ...]:
    """--track: names, repeated and/or comma-separated (mlflow,tensorboard); TrackingConfig.parse names the flag."""
    from foxhunt.train.tracking import TrackingConfig

    return TrackingConfig.parse(value).backends


@dataclass(frozen=True)
class SessionConfig:
    """How a training session runs, beside what the run is (the three configs) and not saved with it: the seeds it
    trains, whether it resumes, where it is also tracked. Options of `foxhunt train` and keywords of `foxhunt.fit`,
    declared here once; validated together, before any file is read."""

    seeds: int = option(1, "Train N seeds from --seed; keep the best.", TRAINING)
    resume: bool = option(False, "Continue the run in --run-dir from its checkpoint.", OUTPUT)
    track: tuple[str, ...] = option((), "Also log to mlflow | tensorboard (extra: track).", OUTPUT, metavar="NAME",
                                    repeat=True, parse=tracking_backends)
    track_uri: str | None = option(None, "MLflow tracking URI.", OUTPUT, metavar="URI",
                                   show_default="$MLFLOW_TRACKING_URI")

    def __post_init__(self) -> None:
        if self.seeds < 1:
            raise InputError(f"--seeds {self.seeds}: give the number of trainings to run, 1 or more")
        if self.seeds > 1 and self.resume:
            raise InputError("--resume with --seeds is not supported; resume the kept run (--run-dir RUN --resume, "
                             "without --seeds) or a stopped seed's own run (--run-dir RUN/seeds/seed-S --resume)")
        if self.seeds > 1 and self.track:
            raise InputError("--track with --seeds is not supported; track a single-seed run (--seed S)")

    @property
    def tracking(self) -> TrackingConfig:
        from foxhunt.train.tracking import TrackingConfig

        return TrackingConfig(self.track, self.track_uri)


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
