"""AdamW and its learning-rate schedule.

The optimizer state is never dropped to make room: that loses Adam's moments and frees nothing while the
optimizer is still referenced. If the moments are what does not fit, `--optimizer-state cpu` keeps them (and an fp32
master copy of the weights) in host memory: gradients go to the host, the step runs there, weights come back.
"""

from __future__ import annotations

import functools
import logging
import math
from typing import Any

import torch

log = logging.getLogger("foxhunt.train")

# The torch versions (first, last) the fast path was run on and checked: torch._fused_adamw_ with the signature below,
# as torch.optim.AdamW(fused=True) itself calls it (torch's sources have it since 2.0 on CUDA, 2.4 on CPU, but only
# 2.13 was run here). Whatever the version, each process checks the kernel at its first step (fused_kernel_works).
FUSED_KNOWN_GOOD = ("2.13", "2.13")


def _fused_update(params: list[torch.Tensor], grads: list[torch.Tensor], exp_avg: list[torch.Tensor],
                  exp_avg_sq: list[torch.Tensor], steps: list[torch.Tensor], group: dict[str, Any]) -> None:
    """One AdamW step on tensors of one device and dtype with torch's private fused kernel (the one behind
    `torch.optim.AdamW(fused=True)`): steps counted first, as torch.optim does."""
    torch._foreach_add_(steps, 1)
    torch._fused_adamw_(
        params, grads, exp_avg, exp_avg_sq, [], steps, lr=float(group["lr"]), beta1=group["betas"][0],
        beta2=group["betas"][1], weight_decay=group["weight_decay"], eps=group["eps"], amsgrad=False,
        maximize=False,
    )


@functools.cache
def fused_kernel_works(device_type: str, dtype: torch.dtype) -> bool:
    """Whether `_fused_update` exists in this torch and takes the AdamW step on `device_type` tensors of `dtype`.

    torch._fused_adamw_ is private: pyproject allows any torch >= 2.4, and a later one may rename it, change its
    signature or drop a device's kernel. So each process asks once per (device, dtype): one step on a 2-element tensor
    from zero state, whose exact result is known (m = (1 - b1) g, v = (1 - b2) g^2, bias-corrected to g and g^2).
    False means AdamW takes torch.optim.AdamW's steps instead (the same update; slower, and torch.optim imports
    torch._dynamo)."""
    lr, wd, b1, b2, eps = 0.1, 0.5, 0.9, 0.999, 1e-8
    device = torch.device(device_type)
    p = torch.tensor([1.0, -2.0], dtype=dtype, device=device)
    g = torch.tensor([0.5, -0.25], dtype=dtype, device=device)
    m, v, step = torch.zeros_like(p), torch.zeros_like(p), torch.zeros((), dtype=torch.float32, device=device)
    group = {"lr": lr, "betas": (b1, b2), "weight_decay": wd, "eps": eps}
    try:
        _fused_update([p], [g], [m], [v], [step], group)
    except (AttributeError, TypeError, RuntimeError, NotImplementedError) as e:  # missing, another signature, no kernel
        log.info("torch %s: the fused AdamW kernel does not run on %s %s (%s: %s); AdamW takes torch.optim.AdamW's "
                 "steps (the same update, slower)", torch.__version__, device_type, dtype, type(e).__name__,
                 str(e).splitlines()[0] if str(e) else "")
        return False
    expected = [x * (1 - lr * wd) - lr * gx / (abs(gx) + eps) for x, gx in ((1.0, 0.5), (-2.0, -0.25))]
    rtol = 1e-2 if torch.finfo(dtype).bits < 32 else 1e-5
    ok = (float(step) == 1.0 and torch.allclose(p.float().cpu(), torch.tensor(expected), rtol=rtol)
          and torch.allclose(m.float().cpu(), (1 - b1) * g.float().cpu(), rtol=rtol))
    if not ok:
        log.info("torch %s: the fused AdamW kernel gave another update than AdamW's on %s %s; AdamW takes "
                 "torch.optim.AdamW's steps (the same update, slower)", torch.__version__, device_type, dtype)
    return ok


class AdamW:
    """AdamW (Loshchilov and Hutter 2019) on torch's fused multi-tensor kernel: the update of
    `torch.optim.AdamW(fused=True)`, without `torch.optim.Optimizer`.

    Why not torch.optim: its methods import torch._dynamo on first use (about 2 s and 70 MB in every training
    process), and foxhunt never compiles its optimizer. The state is Adam's two moments and a step count per
    parameter, created on the first step; `param_groups` has the one group (its "lr" is what the schedule sets), so
    gradient scalers and `set_lr` work with it as with a torch optimizer.

    The kernel is private API: where this torch lacks it or it takes other arguments (fused_kernel_works), the same
    state is stepped by `torch.optim.AdamW` (its default foreach or per-tensor implementation) instead.
    """

    def __init__(self, params: list[torch.nn.Parameter], lr: float, weight_decay: float,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8):
        self.params = [p for p in params if p.requires_grad]
        self.param_groups = [{"params": self.params, "lr": lr, "weight_decay": weight_decay, "betas": betas,
                              "eps": eps}]
        self.exp_avg: list[torch.Tensor] = []
        self.exp_avg_sq: list[torch.Tensor] = []
        self.steps: list[torch.Tensor] = []

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None

    def _init_state(self) -> None:
        self.exp_avg = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params]
        self.exp_avg_sq = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params]
        self.steps = [torch.zeros((), dtype=torch.float32, device=p.device) for p in self.params]

    @torch.no_grad()
    def step(self) -> None:
        if not self.exp_avg:
            self._init_state()
        g = self.param_groups[0]
        groups: dict[tuple[torch.device, torch.dtype], list[int]] = {}
        for i, p in enumerate(self.params):  # the fused kernel takes one device and dtype per call
            if p.grad is not None:
                groups.setdefault((p.device, p.dtype), []).append(i)
        for (device, dtype), idx in groups.items():
            if not fused_kernel_works(device.type, dtype):
                self._torch_step(idx)
                continue
            pick = lambda ts, idx=idx: [ts[i] for i in idx]  # noqa: E731
            _fused_update(pick(self.params), [self.params[i].grad for i in idx], pick(self.exp_avg),
                          pick(self.exp_avg_sq), pick(self.steps), g)

    def _torch_step(self, idx: list[int]) -> None:
        """The step of the parameters `idx` by torch.optim.AdamW, on this optimizer's own state tensors (which it
        updates in place, step counts included), with the hyperparameters of `param_groups` as they are now.
        Capturable on CUDA: the step counts stay on the device there, and torch.optim reads them without a sync."""
        g = self.param_groups[0]
        params = [self.params[i] for i in idx]
        opt = torch.optim.AdamW(params, lr=float(g["lr"]), betas=g["betas"], eps=g["eps"],
                                weight_decay=g["weight_decay"], capturable=params[0].device.type == "cuda")
        for i, p in zip(idx, params, strict=True):  # rebound every step: load_state_dict replaces the tensors
            opt.state[p] = {"step": self.steps[i], "exp_avg": self.exp_avg[i], "exp_avg_sq": self.exp_avg_sq[i]}
        opt.step()

    def state_dict(self) -> dict[str, Any]:
        group = {k: v for k, v in self.param_groups[0].items() if k != "params"}
        return {"param_group": group, "exp_avg": self.exp_avg, "exp_avg_sq": self.exp_avg_sq, "steps": self.steps}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if len(state["exp_avg"]) not in (0, len(self.params)):
            raise ValueError(f"optimizer state for {len(state['exp_avg'])} parameters, the model has "
                             f"{len(self.params)}")
        self.param_groups[0].update(state["param_group"])
        to = lambda ts: [t.to(p.device) for t, p in zip(ts, self.params, strict=True)]  # noqa: E731
        self.exp_avg, self.exp_avg_sq, self.steps = to(state["exp_avg"]), to(state["exp_avg_sq"]), to(state["steps"])


class HostAdamW:
    """AdamW whose state lives in host memory while the model lives on the device."""

    def __init__(self, params: list[torch.nn.Parameter], lr: float, weight_decay: float):
        self.device_params = [p for p in params if p.requires_grad]
        self.host_params = [p.detach().to("cpu", copy=True).requires_grad_(True) for p in self.device_params]
        self.inner = AdamW(self.host_params, lr=lr, weight_decay=weight_decay)

    @staticmethod
    def from_device(opt: AdamW) -> HostAdamW:
        """The same optimizer with its state (moments, step counts, learning rate) moved to host memory: the next
        steps are the ones `opt` would have taken. `opt` must not be used afterwards (its device state is dropped)."""
        host = HostAdamW(opt.params, lr=opt.param_groups[0]["lr"], weight_decay=opt.param_groups[0]["weight_decay"])
        host.inner.param_groups[0].update({k: v for k, v in opt.param_groups[0].items() if k != "params"})
        host.inner.param_groups[0]["params"] = host.host_params
        cpu = lambda ts: [t.detach().to("cpu", copy=True) for t in ts]  # noqa: E731
        host.inner.exp_avg, host.inner.exp_avg_sq, host.inner.steps = cpu(opt.exp_avg), cpu(opt.exp_avg_sq), cpu(
            opt.steps)
        opt.exp_avg, opt.exp_avg_sq, opt.steps = [], [], []
        return host

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self.inner.param_groups

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.device_params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        for hp, dp in zip(self.host_params, self.device_params, strict=True):
            hp.grad = None if dp.grad is None else dp.grad.to("cpu")
        self.inner.step()
        for hp, dp in zip(self.host_params, self.device_params, strict=True):
            dp.copy_(hp, non_blocking=True)
            hp.grad = None

    def state_dict(self) -> dict[str, Any]:
        return self.inner.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.inner.load_state_dict(state)
        with torch.no_grad():  # the master copies must match the restored device weights
            for hp, dp in zip(self.host_params, self.device_params, strict=True):
                hp.copy_(dp.detach().cpu())


def build_optimizer(
    model: torch.nn.Module, lr: float, weight_decay: float, state_on_host: bool, device: torch.device
) -> AdamW | HostAdamW:
    params = [p for p in model.parameters() if p.requires_grad]
    if state_on_host and device.type != "cpu":
        return HostAdamW(params, lr, weight_decay)
    # fused: one kernel for all parameters instead of a loop over them (benchmarks/RESULTS.md)
    return AdamW(params, lr=lr, weight_decay=weight_decay)


def warmup_cosine(step: int, total_steps: int, warmup_steps: int, base_lr: float, floor: float = 0.05) -> float:
    """Linear warm-up to `base_lr`, then cosine decay to `floor * base_lr` at `total_steps`."""
    if warmup_steps > 0 and step < warmup_steps:
        return base_lr * (step + 1) / warmup_steps
    span = max(1, total_steps - warmup_steps)
    progress = min(1.0, (step - warmup_steps) / span)
    return base_lr * (floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress)))


def set_lr(optimizer: AdamW | HostAdamW, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr
