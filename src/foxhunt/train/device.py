"""Choosing the device: `auto` takes a GPU when there is one; asking for CUDA without one is a clear error."""

from __future__ import annotations

import torch

from foxhunt.errors import InputError


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise InputError(
                f"--device {name} (or --use-gpu) asked for a GPU, but torch sees none "
                f"(torch {torch.__version__}, CUDA build: {torch.version.cuda or 'no'}); "
                "drop --use-gpu or pass --device cpu"
            )
        dev = torch.device(name)
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise InputError(f"--device {name}: only {torch.cuda.device_count()} GPU(s) visible")
        return dev
    return torch.device("cpu")


def apply_memory_budget(device: torch.device, budget_bytes: int | None) -> float | None:
    """On CUDA, cap this process's share of the card so a large GPU behaves like a small one; returns the fraction."""
    if budget_bytes is None or device.type != "cuda":
        return None
    total = torch.cuda.get_device_properties(device).total_memory
    fraction = min(1.0, budget_bytes / total)
    torch.cuda.set_per_process_memory_fraction(fraction, device)
    return fraction
