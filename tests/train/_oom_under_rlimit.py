"""Run by test_real_oom.py in a subprocess: `foxhunt train` whose training steps run under an address-space limit
(RLIMIT_AS), set when the training steps start, sized between the step peaks of half the batch and the whole batch, so the first step's allocation fails
in the middle of its forward pass with the CPU allocator's RuntimeError, not an injected error.

The limit is lifted when validation starts: what follows (model.safetensors, checkpoint.pt) is written by Rust and
C++ code that aborts the process on a failed allocation, which no Python-level ladder can catch.

Usage: python _oom_under_rlimit.py RUN_DIR TRAIN_ARGS...  (prints the limit's headroom and the two peaks as JSON)
"""

from __future__ import annotations

import ctypes
import json
import re
import resource
import sys
from pathlib import Path

import torch

import foxhunt.train.loop as loop
import foxhunt.train.session as session
from foxhunt.cli import main
from foxhunt.train.plan import measure_step_peak
from foxhunt.train.telemetry import pin_host_allocator

_real_trainer = session.Trainer


def address_space() -> int:
    return int(re.search(r"VmSize:\s+(\d+)\s+kB", Path("/proc/self/status").read_text()).group(1)) * 1024


def limited_trainer(setup, sizing, *args, **kwargs):
    model, data, device, batch_size = setup.model, setup.data, setup.device, sizing.batch_size
    q = torch.tensor(setup.quantiles)
    ids = data.splits["train"][:batch_size]
    model.train()
    with torch.random.fork_rng():  # the measurement must not change the run's random draws
        full = measure_step_peak(model, data.windows.batch(ids), q, device, train=True)
        half = measure_step_peak(model, data.windows.batch(ids[: batch_size // 2]), q, device, train=True)
    model.zero_grad(set_to_none=True)
    ctypes.CDLL("libc.so.6").malloc_trim(0)  # hand freed heap back, so the address space is what is live
    # Headroom for the step: well above half a batch's peak, well below a whole one's. Everything else the run
    # allocates (optimizer state, validation batches, checkpoints) is small beside it at this model size.
    HEADROOM.append((full + half) // 2)
    print(json.dumps({"full_peak": full, "half_peak": half, "headroom": HEADROOM[0]}), flush=True)
    return _real_trainer(setup, sizing, *args, **kwargs)


HEADROOM: list[int] = []
_real_train_epoch = loop.Trainer._train_epoch


def limited_train_epoch(self, *args, **kwargs):
    """The limit set when the training steps start (after an anchored model's epoch 0, a validation)."""
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    resource.setrlimit(resource.RLIMIT_AS, (address_space() + HEADROOM[0], resource.RLIM_INFINITY))
    return _real_train_epoch(self, *args, **kwargs)


# Every block of 64 KiB or more gets its own mapping, returned on free: the address space then follows live tensors.
pin_host_allocator(64 * 1024)
_real_validate = loop.validate


def unlimited_validate(*args, **kwargs):
    resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    return _real_validate(*args, **kwargs)


session.Trainer = limited_trainer
loop.Trainer._train_epoch = limited_train_epoch
loop.validate = unlimited_validate
sys.exit(main(["train", *sys.argv[2:], "--run-dir", sys.argv[1]]))
