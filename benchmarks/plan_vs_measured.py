"""Memory plan vs measured peak on CPU, for the TFT paper's model size (hidden 160, 4 heads, encoder 252, horizon 5).

    python benchmarks/plan_vs_measured.py [--batch-sizes 16,64,256]

For each batch size, a fresh subprocess builds the model, warms its kernels up with a one-sample step, then measures
three real training steps (forward, pinball loss, backward, AdamW step) and, in another subprocess, three validation
steps (inference_mode) with the optimizer state resident as in a training run (the loop frees the gradients before
validating); the peak over them.

Measured peak = what was resident before the step (weights; for validation also the AdamW moments,
counted from the tensors) + the rise of the process's peak resident set (VmHWM) during the steps; the peak counter is
reset just before the first step by writing "5" to /proc/self/clear_refs. VmHWM rather than torch.profiler because it is
what the kernel (and its OOM killer) counts: it includes allocator overhead and fragmentation that a profile of
tensor allocations does not see, and it cannot be fooled by the plan's own tensor accounting. A fresh process per
measurement so that one step's freed heap cannot hide the next step's growth. Each measurement runs twice: with
glibc malloc as it comes, and with its mmap threshold pinned (foxhunt.train.telemetry.pin_host_allocator). Linux only.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

import torch

from foxhunt.data.features.schema import InputSizes
from foxhunt.model.config import ModelConfig
from foxhunt.model.loss import quantile_loss
from foxhunt.model.tft import TemporalFusionTransformer
from foxhunt.train.plan import plan_memory, probe_batch
from foxhunt.train.telemetry import pin_host_allocator

MIB = 2**20
STEPS = 3  # the peak over a few steps: the allocator's heap settles after the first
# ES-like inputs: series id (static), day-of-week and month plus two calendar reals (known), four bar features (observed).
SIZES = InputSizes(
    static_cat=(4,), static_cont=0, known_cat=(7, 13), known_cont=2, observed_cat=(), observed_cont=4
)
CFG = ModelConfig(hidden_size=160, attention_heads=4, dropout=0.1, encoder_length=252, horizon=5)


def _status_kib(field: str) -> int:
    return int(
        re.search(rf"^{field}:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.MULTILINE).group(1)
    )


def child(mode: str, b: int, pin: bool) -> None:
    """Measure the steps in this (fresh) process; print a JSON line."""
    if pin:
        assert pin_host_allocator(), "could not pin glibc's mmap threshold"
    torch.manual_seed(0)
    model = TemporalFusionTransformer(SIZES, CFG)
    q = torch.tensor(CFG.quantiles)
    warm = probe_batch(SIZES, CFG, 1, torch.device("cpu"))
    quantile_loss(
        model(warm).quantiles, warm.target, q
    ).backward()  # first-call kernel setup outside the measurement
    model.zero_grad(set_to_none=True)
    with torch.inference_mode():
        model(warm)
    param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    resident = param_bytes
    if mode == "val":  # as in a training run: AdamW moments are resident, gradients freed before validation
        opt = torch.optim.AdamW(model.parameters())
        quantile_loss(model(warm).quantiles, warm.target, q).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        resident += sum(
            t.numel() * t.element_size() for s in opt.state.values() for t in s.values()
        )
        model.eval()
    del warm
    Path("/proc/self/clear_refs").write_text("5")
    base = _status_kib("VmRSS")
    batch = probe_batch(SIZES, CFG, b, torch.device("cpu"))
    if mode == "train":
        opt = torch.optim.AdamW(model.parameters())
    for _ in range(STEPS):
        if mode == "train":
            opt.zero_grad(set_to_none=True)
            loss = quantile_loss(model(batch).quantiles, batch.target, q)
            loss.backward()
            del loss
            opt.step()
        else:
            with torch.inference_mode():
                model(batch)
    peak = (_status_kib("VmHWM") - base) * 1024 + resident
    print(json.dumps({"mode": mode, "batch": b, "measured": peak}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch-sizes", default="16,64,256")
    ap.add_argument("--child", nargs=3, metavar=("MODE", "BATCH", "PIN"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child[0], int(args.child[1]), args.child[2] == "pin")
        return
    sizes = [int(x) for x in args.batch_sizes.split(",")]
    torch.manual_seed(0)
    model = TemporalFusionTransformer(SIZES, CFG)
    plan = plan_memory(model, SIZES, CFG, torch.device("cpu"), 64 * 2**30, batch_sizes=sizes)
    n_params = sum(p.numel() for p in model.parameters())
    print(
        f"TFT hidden {CFG.hidden_size}, heads {CFG.attention_heads}, encoder {CFG.encoder_length}, horizon "
        f"{CFG.horizon}, {SIZES.n_encoder} encoder inputs, {n_params:,} parameters; torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads"
    )
    print(f"calibration train x{plan.train_calibration:.3f} val x{plan.val_calibration:.3f} ({plan.probe})")
    print(
        "measured: default glibc malloc | with telemetry.pin_host_allocator() (mmap threshold pinned at 1 MiB)"
    )
    print(
        f"{'step':5s} {'batch':>5s} {'predicted MiB':>13s} {'measured MiB':>12s} {'ratio':>6s} {'pinned MiB':>10s} {'ratio':>6s}"
    )
    for row in plan.rows:
        for mode, predicted in (("train", row.train.total), ("val", row.val.total)):
            measured = [_measure(mode, row.batch_size, pin) for pin in ("default", "pin")]
            print(
                f"{mode:5s} {row.batch_size:5d} {predicted / MIB:13.1f} {measured[0] / MIB:12.1f} "
                f"{measured[0] / predicted:6.3f} {measured[1] / MIB:10.1f} {measured[1] / predicted:6.3f}"
            )


def _measure(mode: str, b: int, pin: str) -> int:
    cmd = [sys.executable, __file__, "--child", mode, str(b), pin]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["measured"]


if __name__ == "__main__":
    main()
