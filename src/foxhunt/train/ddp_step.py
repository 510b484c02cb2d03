"""One data-parallel optimizer step: each rank runs its shard, the ranks agree on what happened, then sum gradients.

This is DistributedDataParallel's scheme (replicas equal from the start, gradients summed across ranks by all-reduce,
the same update everywhere) with one change: the gradient all-reduce runs after the backward pass, not inside it
(as fairseq's legacy DDP does). torch's DDP reduces buckets while backward runs, so a rank that runs out of memory
in its forward pass never joins those collectives and the others wait in them alone until the timeout. Here each
rank first finishes (or fails) its own forward and backward, then one small all-reduce of a status vector says
whether any rank ran out of memory; if one did, every rank climbs the same rung of the out-of-memory ladder
(train/oom.py) and retries the step together, and no rank ever waits in a collective the others skip.

Per step: the status all-reduce (the largest micro-batch that failed, and which parameters have a gradient on any
rank), then one all-reduce of all gradients and the loss in one flat buffer. Each rank weights its loss by its share
of the global batch, so the sum is the gradient of the global batch's mean loss: the update a single process makes
on the whole batch, up to float32 summation order.
"""

from __future__ import annotations

from typing import Any

import torch

from foxhunt.data.dataset.batch import Batch
from foxhunt.train.distributed import Dist
from foxhunt.train.oom import OOM_ERRORS, is_oom
from foxhunt.train.step import UNKNOWN_SERIES_RATE, TrainStepper, mask_series, rng_state, set_rng_state


class DistributedStepper(TrainStepper):
    def __init__(self, *args: Any, dist: Dist, seed: int, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.dist, self.seed = dist, seed
        self.params = list(self.model.parameters())

    def step(self, batch: Batch, global_step: int, epoch: int,
             shard: tuple[int, int] | None = None) -> torch.Tensor | None:
        """`batch` is this rank's shard (possibly empty) of a global batch; `shard` = (offset, global size)."""
        offset, n = shard or (0, len(batch))
        batch = mask_series(batch, UNKNOWN_SERIES_RATE, (offset, n))  # the draws a single process makes
        if self.loss_weight == "scale":  # the global batch's mean target scale, as a single process uses
            ref = self.dist.all_sum(batch.target_scale.double().sum().reshape(1)) / n
        else:
            ref = torch.ones(1)  # unused
        rng = rng_state(self.device)
        attempt = 0
        while True:
            failed = 0
            try:
                with self.dist.rank_rng(self.seed, global_step):
                    total = self._backward(batch, global_step, n, ref.float().squeeze(0))
            except OOM_ERRORS as e:
                if not is_oom(e):
                    raise
                failed = max(1, min(self.micro_batch or len(batch), len(batch)))
            # outside the except block: the failed attempt's tensors can be freed by the ladder
            status = self.dist.all_max([failed, *(p.grad is not None for p in self.params)])
            if status[0] == 0:
                return self._update(self._sum_gradients([s > 0 for s in status[1:]], total))
            attempt += 1
            self._climb(int(status[0]), n, global_step, epoch, first=attempt == 1)
            set_rng_state(rng, self.device)

    def _sum_gradients(self, used: list[bool], total: torch.Tensor) -> torch.Tensor:
        """Sum the gradients of the parameters that have one on any rank (zeros where this rank's shard gave none;
        a parameter no rank used keeps no gradient, as in a single process) and the loss, in one all-reduce."""
        params = [p for p, u in zip(self.params, used, strict=True) if u]
        parts = [(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in params]
        flat = self.dist.all_sum(torch.cat([*parts, total.reshape(1).to(parts[0].dtype if parts else total.dtype)]))
        start = 0
        for p in params:
            p.grad = flat[start : start + p.numel()].view_as(p)
            start += p.numel()
        return flat[-1]
