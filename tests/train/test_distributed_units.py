"""The pieces of data-parallel training that need no second process: the sampler's shards, the series mask of a shard,
the global-batch check, and how a run decides it is under torchrun."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from foxhunt.errors import InputError
from foxhunt.train.distributed import SINGLE, Dist, init_from_env, launched_by_torchrun, timeout_s
from foxhunt.train.step import mask_series


@given(n=st.integers(0, 200), world=st.integers(1, 9))
def test_shards_hold_every_item_once_and_differ_by_at_most_one(n, world):
    parts = [Dist(rank=r, world_size=world).shard(n) for r in range(world)]
    assert parts[0][0] == 0 and parts[-1][1] == n
    assert all(a[1] == b[0] for a, b in zip(parts, parts[1:], strict=False))  # contiguous, no gap, no overlap
    sizes = [stop - start for start, stop in parts]
    assert max(sizes) - min(sizes) <= 1


class IdWindows:
    """Windows whose batch is its ids: shows which windows each rank gets."""

    def batch(self, ids: torch.Tensor) -> torch.Tensor:
        return ids


def test_each_global_batch_is_split_over_the_ranks():
    ids = torch.randperm(23, generator=torch.Generator().manual_seed(0))
    per_rank = [list(Dist(rank=r, world_size=3).batches(IdWindows(), ids, 8)) for r in range(3)]  # type: ignore[arg-type]
    assert [len(b) for b in per_rank] == [3, 3, 3]  # global batches of 8, 8, 7
    for step in range(3):
        shards = [per_rank[r][step] for r in range(3)]
        assert torch.equal(torch.cat([s[0] for s in shards]), ids[step * 8 : step * 8 + 8])
        assert [s[1] for s in shards] == ([(0, 8), (3, 8), (6, 8)] if step < 2 else [(0, 7), (3, 7), (5, 7)])


def test_a_shards_series_mask_is_the_single_process_mask():
    from foxhunt.data.dataset.batch import Batch

    b, e, d = 10, 4, 2
    batch = Batch.from_dense(torch.arange(1, b + 1).view(b, 1), torch.zeros(b, 0), torch.zeros(b, e + d, 0,
                             dtype=torch.long), torch.zeros(b, e + d, 1), torch.zeros(b, e, 0, dtype=torch.long),
                             torch.zeros(b, e, 1), torch.zeros(b, d), torch.zeros(b), torch.ones(b), torch.arange(b))
    torch.manual_seed(5)
    whole = mask_series(batch, 0.5).static_cat[:, 0]
    parts = []
    for start, stop in ((0, 4), (4, 7), (7, 10)):
        torch.manual_seed(5)  # every rank's generator is where the single process's is
        parts.append(mask_series(batch.slice(start, stop), 0.5, (start, b)).static_cat[:, 0])
    assert torch.equal(torch.cat(parts), whole)
    assert (whole == 0).any() and (whole != 0).any()


def test_the_global_batch_must_split_evenly():
    ranks = Dist(world_size=3, grouped=True)
    ranks.check_batch_size(33)
    with pytest.raises(InputError, match="--batch-size 32 is the global batch .* 3 ranks; pass a multiple of 3"):
        ranks.check_batch_size(32)
    SINGLE.check_batch_size(31)  # one process takes any batch


def test_the_notice_says_the_last_batch_may_split_unevenly():
    ranks = Dist(world_size=2, grouped=True)
    assert ranks.notice("gloo") == ("distributed: 2 ranks (gloo), global batch split across them (the last batch of "
                                    "an epoch may leave some ranks a window fewer, or none); rank 0 writes the run")
    assert "evenly" not in ranks.notice("NCCL")
    ranks.check_batch_size(16)  # 225 windows in global batches of 16: the last holds 1, rank 1 gets none
    assert [Dist(rank=r, world_size=2).shard(225 % 16) for r in range(2)] == [(0, 1), (1, 1)]


def test_a_run_without_torchruns_variables_is_one_process(monkeypatch):
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(var, raising=False)
    assert not launched_by_torchrun()
    assert init_from_env(torch.device("cpu")) is SINGLE
    assert launched_by_torchrun({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"})


def test_the_timeout_variable_is_checked():
    assert timeout_s({}) == 600.0
    assert timeout_s({"FOXHUNT_DIST_TIMEOUT_S": "30"}) == 30.0
    with pytest.raises(InputError, match="FOXHUNT_DIST_TIMEOUT_S='soon': must be a positive number"):
        timeout_s({"FOXHUNT_DIST_TIMEOUT_S": "soon"})


@pytest.fixture
def group():
    """A gloo process group of one rank, in this process: the collectives run, and sum over one rank."""
    import torch.distributed as tdist

    tdist.init_process_group("gloo", store=tdist.HashStore(), rank=0, world_size=1)
    yield Dist(rank=0, world_size=1, grouped=True)
    tdist.destroy_process_group()


def test_the_distributed_step_is_the_single_process_step(group, daily_path, tmp_path):
    """Through the status all-reduce, an out-of-memory retry taken together and the gradient all-reduce, one rank
    makes exactly the single-process update (a parameter no rank used keeps no gradient, as in one process)."""
    import logging

    from foxhunt.data.config import DataConfig
    from foxhunt.data.prepare import prepare_data
    from foxhunt.model.config import ModelConfig
    from foxhunt.model.tft import TemporalFusionTransformer
    from foxhunt.train import faults
    from foxhunt.train.ddp_step import DistributedStepper
    from foxhunt.train.optim import AdamW
    from foxhunt.train.step import TrainStepper
    from foxhunt.train.telemetry import MemoryTracker

    data = prepare_data(DataConfig(paths=(str(daily_path),), encoder_length=16, horizon=3))
    batch = data.windows.batch(data.splits["train"][:24])
    q = torch.tensor([0.1, 0.5, 0.9])
    results = []
    for kind in ("single", "distributed"):
        torch.manual_seed(0)
        model = TemporalFusionTransformer(data.schema.sizes, ModelConfig(hidden_size=8, attention_heads=2,
                                                                         encoder_length=16, horizon=3, dropout=0.0))
        model.register_parameter("unused", torch.nn.Parameter(torch.ones(3)))
        tracker = MemoryTracker(torch.device("cpu"), tmp_path / f"{kind}.jsonl", logging.getLogger("test"))
        args = (model, AdamW(model.parameters(), lr=1e-2, weight_decay=1e-4), q, 1.0, torch.device("cpu"), tracker)
        stepper = TrainStepper(*args) if kind == "single" else DistributedStepper(*args, dist=group, seed=0)
        torch.manual_seed(1)
        with faults.armed("oom@train:1"):
            loss = stepper.step(batch, 1, 1, (0, len(batch)))
        assert model.unused.grad is None
        results.append((loss, {k: v.clone() for k, v in model.state_dict().items()},
                        (tmp_path / f"{kind}.jsonl").read_text().count('"oom_retry"')))
    (loss_a, weights_a, retries_a), (loss_b, weights_b, retries_b) = results
    assert torch.equal(loss_a, loss_b) and retries_a == retries_b == 1
    assert all(torch.equal(weights_a[k], weights_b[k]) for k in weights_a)


def test_memory_records_carry_the_maximum_over_ranks_except_rank_local_ones(tmp_path):
    import json
    import logging

    from foxhunt.train.telemetry import MemoryTracker

    tracker = MemoryTracker(torch.device("cpu"), tmp_path / "memory.jsonl", logging.getLogger("test"))
    big = 1e7  # MiB: another rank far larger than this process could be, whatever the suite ran before
    tracker.reduce_max = lambda values: [v + big if v >= 0 else 7.0 for v in values]
    synced = tracker.record("epoch_start", epoch=1)
    with tracker.rank_local():
        local = tracker.record("val_batch", epoch=1, batch=1)
    assert synced["host_rss_mb"] > big and synced["host_peak_mb"] > big
    assert synced["device_peak_mb"] is None  # not measured here (CPU): stays missing whatever the others send
    assert local["host_rss_mb"] < big and local["device_peak_mb"] is None
    written = [json.loads(line) for line in (tmp_path / "memory.jsonl").read_text().splitlines()]
    assert [r["host_rss_mb"] > big for r in written] == [True, False]


def test_an_empty_shard_is_a_batch_of_no_windows(fixtures_dir, tmp_path):
    """A global batch smaller than the ranks leaves a rank no windows: its batch, from memory or from a store, has
    every per-window field with 0 rows and the shape of a one-window batch otherwise, and the log line of a skipped
    non-finite step can describe it (the rank joins the step's collectives with it)."""
    import dataclasses

    from foxhunt.data.config import DataConfig
    from foxhunt.data.prepare import prepare_data
    from foxhunt.data.store import open_store, write_store
    from foxhunt.train.guard import describe_batch

    cfg = DataConfig(paths=(str(fixtures_dir / "es_fut_ohlcv1h_databento.parquet"),), encoder_length=16, horizon=3)
    data = prepare_data(cfg)
    write_store(data, cfg, tmp_path / "store")
    none, one = torch.zeros(0, dtype=torch.int64), data.splits["train"][:1]
    for windows in (data.windows, open_store(tmp_path / "store").windows):
        empty, single = windows.batch(none), windows.batch(one)
        assert len(empty) == 0
        for f in dataclasses.fields(empty):
            got, ref = getattr(empty, f.name), getattr(single, f.name)
            if ref is None:  # an optional field these data have not (the anchor, without --anchor)
                assert got is None, f.name
                continue
            shape = ref.shape if f.name == "pos_cont" else (0, *ref.shape[1:])  # pos_cont: (T, P) whatever B
            assert (got.dtype, got.shape) == (ref.dtype, shape), f.name
        assert describe_batch(windows, empty) == "no windows on this rank"
