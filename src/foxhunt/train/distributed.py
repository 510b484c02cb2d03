"""Data-parallel training under torchrun: the process group, who this rank is, and the collectives the loop needs.

`torchrun --nproc_per_node=N -m foxhunt train ...` starts N copies of the command with RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR and MASTER_PORT in their environment; `init_from_env` joins them into one process group (NCCL when the
run is on CUDA, each rank on cuda:LOCAL_RANK; gloo on CPU). Without those variables the run is a single process, no
group is made and every helper here is the identity, so a plain `foxhunt train` runs exactly the code it always ran.

Every collective goes through `Dist`, so every one of them turns a lost peer into `RankLost`, one line that says what
to do, instead of a traceback from the transport. A rank that dies takes its sockets with it: under gloo the others
fail at their next collective at once ("connection closed by peer"; tested). torchrun also stops the remaining
workers as soon as one exits with an error: SIGTERM (which the loop turns into a stop at the next step boundary),
then SIGKILL 30 s later, which bounds a rank blocked inside an NCCL collective. A rank that hangs without dying (a
stuck file system) is caught by the process group's timeout, FOXHUNT_DIST_TIMEOUT_S seconds (default 600): long
enough for the slowest gap between two collectives (reading the data, the memory probe, rank 0 writing a
checkpoint).
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.distributed as tdist

from foxhunt.data.dataset.batch import Batch
from foxhunt.data.dataset.run_order import OrderedIds
from foxhunt.data.dataset.windows import WindowedData
from foxhunt.errors import InputError, RankLost

log = logging.getLogger("foxhunt.train")

TIMEOUT_ENV = "FOXHUNT_DIST_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 600.0
_TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK")


@dataclass(frozen=True)
class Dist:
    """This process's place in the run; `world_size` 1 (the default) is a plain single-process run."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")  # where collectives' tensors live (NCCL: this rank's GPU)
    grouped: bool = False  # in a process group (under torchrun, even with one process): the collectives run

    @property
    def is_main(self) -> bool:
        """Rank 0: the one process that logs, writes the run directory and saves checkpoints."""
        return self.rank == 0

    @property
    def active(self) -> bool:
        return self.grouped

    # -- collectives (each a no-op in a single process) -------------------------------------------------------------
    def _all_reduce(self, values: torch.Tensor, op: tdist.ReduceOp.RedOpType) -> torch.Tensor:
        out = values.to(self.device)
        try:
            tdist.all_reduce(out, op=op)
        except (RuntimeError, tdist.DistError) as e:
            raise self.lost(e) from None
        return out

    def all_sum(self, values: torch.Tensor) -> torch.Tensor:
        """Elementwise sum over ranks of `values` (any shape), returned on the tensor's own device."""
        if not self.active:
            return values
        return self._all_reduce(values, tdist.ReduceOp.SUM).to(values.device)

    def all_max(self, values: Sequence[float]) -> list[float]:
        """Elementwise maximum over ranks of a few host numbers (float64: exact for integers below 2**53)."""
        if not self.active:
            return [float(v) for v in values]
        return self._all_reduce(torch.tensor(values, dtype=torch.float64), tdist.ReduceOp.MAX).tolist()

    def all_min(self, value: int) -> int:
        if not self.active:
            return value
        return int(self._all_reduce(torch.tensor([value], dtype=torch.float64), tdist.ReduceOp.MIN).item())

    def broadcast_module(self, module: torch.nn.Module) -> None:
        """Rank 0's weights and buffers to every rank, as DistributedDataParallel does when it wraps a model, so the
        replicas start equal whatever each process's seed did."""
        if not self.active:
            return
        try:
            for t in [*module.parameters(), *module.buffers()]:
                tdist.broadcast(t.data, src=0)
        except (RuntimeError, tdist.DistError) as e:
            raise self.lost(e) from None

    def lost(self, e: BaseException) -> RankLost:
        """The error to raise when a collective failed. Its line is logged now, not when the CLI catches it: torchrun
        sends SIGTERM to the remaining ranks as soon as one exits, which may end this one while it unwinds."""
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        first = re.sub(r"^\[[^\]]*\]\s*", "", first)  # gloo's source location: "[.../pair.cc:553] "
        line = (f"rank {self.rank} of {self.world_size}: another rank stopped or stopped answering ({first[:160]}); "
                "its own error is above or in torchrun's summary; continue with --resume from the last checkpoint")
        log.error("%s", line)
        return RankLost(line)

    @contextmanager
    def rank_rng(self, seed: int, step: int) -> Iterator[None]:
        """Dropout draws of this rank for `step`, from a generator of its own (seeded from the run's seed, the step
        and the rank), so that ranks do not apply the same masks to their different windows; the shared generator
        (series masking, the checkpoint's RNG state) is left where it was. Reseeded the same way on a retried step,
        so the retry draws the failed attempt's masks. A single process draws from the shared generator as always."""
        if not self.active:
            yield
            return
        devices = [self.device] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed((seed * 1_000_003 + step) * 1_009 + self.rank)
            yield

    # -- the sampler --------------------------------------------------------------------------------------------------
    def shard(self, n: int) -> tuple[int, int]:
        """This rank's part [start, stop) of n items split into contiguous parts whose sizes differ by at most one
        (the first n % world_size ranks take one more): every item in exactly one part, none padded or repeated."""
        base, extra = divmod(n, self.world_size)
        start = self.rank * base + min(self.rank, extra)
        return start, start + base + (self.rank < extra)

    def batches(self, windows: WindowedData, ids: torch.Tensor | OrderedIds,
                batch_size: int) -> Iterator[tuple[Batch, tuple[int, int]]]:
        """The distributed sampler: global batches of `batch_size` windows in the order of `ids` (the epoch's
        order, the same on every rank: it depends on the seed and the epoch only), each split into this rank's
        contiguous shard. Yields (this rank's batch, (its offset in the global batch, the global batch's size)).
        Progress is counted in global batches, so a checkpoint written by N ranks resumes on M. A global batch
        smaller than the ranks (an epoch's last: 225 windows in batches of 16 leave 1 for 2 ranks) gives the ranks
        past its windows an empty shard: a batch of no windows, whose step runs no forward and adds zeros to every
        all-reduce (train/ddp_step.py), so that each rank still joins each collective and the sums stay exact."""
        for i in range(0, len(ids), batch_size):
            n = min(batch_size, len(ids) - i)
            start, stop = self.shard(n)
            yield windows.batch(ids[i + start : i + stop]), (start, n)

    def notice(self, backend: str) -> str:
        """The start-up line of a distributed run. Every full global batch splits evenly (check_batch_size); an
        epoch's last one may not (`shard`), so it does not say evenly."""
        return (f"distributed: {self.world_size} ranks ({backend}), global batch split across them (the last batch "
                "of an epoch may leave some ranks a window fewer, or none); rank 0 writes the run")

    def check_batch_size(self, batch_size: int, flag: str = "--batch-size") -> None:
        if self.active and batch_size % self.world_size:
            raise InputError(f"{flag} {batch_size} is the global batch and must split evenly over the "
                             f"{self.world_size} ranks; pass a multiple of {self.world_size}")


SINGLE = Dist()


def launched_by_torchrun(env: dict[str, str] | os._Environ[str] = os.environ) -> bool:
    return all(v in env for v in _TORCHRUN_VARS)


def timeout_s(env: dict[str, str] | os._Environ[str] = os.environ) -> float:
    raw = env.get(TIMEOUT_ENV, "").strip()
    if not raw:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if value <= 0:
        raise InputError(f"{TIMEOUT_ENV}={raw!r}: must be a positive number of seconds; unset it for "
                         f"{DEFAULT_TIMEOUT_S:.0f}")
    return value


def init_from_env(device: torch.device) -> Dist:
    """Join torchrun's process group (SINGLE when not under torchrun). `device` is the resolved --device: on CUDA
    each rank takes cuda:LOCAL_RANK and NCCL, on CPU gloo."""
    if not launched_by_torchrun():
        return SINGLE
    rank, world, local = (int(os.environ[v]) for v in _TORCHRUN_VARS)
    if device.type == "cuda":
        if local >= torch.cuda.device_count():
            raise InputError(f"LOCAL_RANK {local} but only {torch.cuda.device_count()} GPU(s) visible; start at most "
                             f"{torch.cuda.device_count()} processes a node (--nproc_per_node)")
        device = torch.device("cuda", local)
        torch.cuda.set_device(device)
    backend = "nccl" if device.type == "cuda" else "gloo"
    if not tdist.is_initialized():
        try:
            tdist.init_process_group(backend, timeout=dt.timedelta(seconds=timeout_s()),
                                     device_id=device if device.type == "cuda" else None)
        except (RuntimeError, tdist.DistError) as e:
            raise Dist(rank, world, local, device).lost(e) from None
    return Dist(rank, world, local, device, grouped=True)


def teardown(dist: Dist) -> None:
    if dist.active and tdist.is_initialized():
        tdist.destroy_process_group()


@contextmanager
def console_of(dist: Dist) -> Iterator[None]:
    """Ranks other than 0 show only errors on the console (each rank would print the same lines otherwise)."""
    from foxhunt.console import console_handler

    handler = console_handler()
    if dist.is_main or handler is None:
        yield
        return
    before = handler.level
    handler.setLevel(logging.ERROR)
    try:
        yield
    finally:
        handler.setLevel(before)
