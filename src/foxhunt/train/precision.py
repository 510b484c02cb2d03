"""Mixed precision: which one a run uses, and the autocast context that applies it.

`32` is plain fp32. `bf16` runs matrix products and most element-wise work in bfloat16 under autocast (same exponent
range as fp32, so no loss scaling). `16-mixed` uses float16 with a gradient scaler (float16 overflows where bfloat16
does not). Weights, optimizer state, the quantile head and the loss stay fp32 in every mode (see the TFT's
`forward`). `auto` picks bf16 on a CUDA device that supports it and fp32 elsewhere: on CPU bf16 autocast was slower
(1,388 vs 1,476 samples/s on SPX daily, hidden 40) and costs precision.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from foxhunt.errors import InputError
from foxhunt.train.config import PRECISIONS


def resolve_precision(name: str, device: torch.device) -> str:
    """`auto` -> bf16 on CUDA with bf16 support, else 32; an explicit choice the device cannot run is an error."""
    if name not in PRECISIONS:
        raise InputError(f"--precision {name!r} is not one of {', '.join(PRECISIONS)}")
    if name == "auto":
        return "bf16" if device.type == "cuda" and torch.cuda.is_bf16_supported() else "32"
    if name == "16-mixed" and device.type != "cuda":
        raise InputError("--precision 16-mixed needs a CUDA device (CPU float16 kernels lack the LSTM); "
                         "on CPU use bf16 or 32")
    if name == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise InputError(f"--precision bf16: {torch.cuda.get_device_name(device)} has no bfloat16; use 16-mixed or 32")
    return name


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
