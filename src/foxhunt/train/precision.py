"""Mixed precision: which one a run uses, and the autocast context that applies it.

`32` is plain fp32. `bf16` runs matrix products and most element-wise work in bfloat16 under autocast (same exponent
range as fp32, so no loss scaling). `16-mixed` uses float16 with a gradient scaler (float16 overflows where bfloat16
does not). Weights, optimizer state, the quantile head and the loss stay fp32 in every mode (see the TFT's
`forward`). `auto` picks bf16 on a CUDA device that computes in it natively (native_bf16) and fp32 elsewhere: on CPU
bf16 autocast was slower (1,388 vs 1,476 samples/s on SPX daily, hidden 40) and costs precision.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any

import torch

from foxhunt.errors import InputError
from foxhunt.train.config import PRECISIONS


def resolve_precision(name: str, device: torch.device) -> str:
    """`auto` -> bf16 on CUDA with bf16 support, else 32; an explicit choice the device cannot run is an error."""
    if name not in PRECISIONS:
        raise InputError(f"--precision {name!r} is not one of {', '.join(PRECISIONS)}")
    if name == "auto":
        return "bf16" if device.type == "cuda" and native_bf16(device) else "32"
    if name == "16-mixed" and device.type != "cuda":
        raise InputError("--precision 16-mixed needs a CUDA device (CPU float16 kernels lack the LSTM); "
                         "on CPU use bf16 or 32")
    if name == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise InputError(f"--precision bf16: {torch.cuda.get_device_name(device)} has no bfloat16; use 16-mixed or 32")
    if name == "bf16" and device.type == "cpu" and not cpu_runs_bf16_lstm():
        raise InputError("--precision bf16: this CPU has no bfloat16 LSTM kernel (oneDNN needs AVX2 or AVX-512); "
                         "use --precision 32")
    return name


def native_bf16(device: torch.device) -> bool:
    """Whether the CUDA device `device` has bfloat16 arithmetic of its own: compute capability 8.0 on (Ampere), or a
    ROCm card. Not torch.cuda.is_bf16_supported(): by default it also says True where bfloat16 is only emulated
    (a V100 or T4: half the activation memory, none of the speed, less precision), and it asks about the current
    device, not `device`. An explicit `--precision bf16` still runs where it is emulated."""
    return bool(torch.version.hip) or torch.cuda.get_device_properties(device).major >= 8


@functools.cache
def cpu_runs_bf16_lstm() -> bool:
    """Whether a bfloat16 LSTM runs on this CPU. oneDNN refuses it on CPUs without AVX2/AVX-512 ("could not create
    a primitive descriptor"), which would otherwise stop the run at its first step; one tiny forward asks it."""
    lstm = torch.nn.LSTM(2, 2, batch_first=True)
    try:
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            lstm(torch.zeros(1, 2, 2))
    except RuntimeError:
        return False
    return True


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager[Any]:
    """The autocast context for `precision` on `device` (a no-op for fp32)."""
    if precision == "32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)


def grad_scaler(device: torch.device, precision: str) -> torch.amp.GradScaler | None:
    """A gradient scaler for float16 (its small range underflows gradients without one); None otherwise."""
    return torch.amp.GradScaler(device.type) if precision == "16-mixed" else None


def activation_bytes(precision: str) -> int:
    """Bytes per activation element under autocast: what the memory plan counts."""
    return 4 if precision == "32" else 2
