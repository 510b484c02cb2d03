"""The CUDA branches, run through a fake of the torch.cuda calls (tests/train/fake_cuda.py): no GPU has ever been
lent to this project, so without these a wrong attribute name or unit would first surface on a user's card.

Each test checks what the branch records or decides: the telemetry numbers in memory.jsonl, the budget fraction
handed to the allocator, bf16 or fp32, an out-of-memory error classified and the ladder's next rung (up to the
optimizer state moved to the host), the plan-exceeded warning, NCCL on cuda:LOCAL_RANK. Tensors stay on the CPU."""

from __future__ import annotations

import datetime as dt
import json
import logging

import pytest
import torch
import torch.distributed as tdist

from foxhunt.data.config import DataConfig
from foxhunt.data.dataset.batch import Batch
from foxhunt.data.features.schema import InputSizes
from foxhunt.data.prepare import prepare_data
from foxhunt.errors import InputError, RankLost, ResourceError
from foxhunt.model.config import ModelConfig
from foxhunt.model.tft import TemporalFusionTransformer
from foxhunt.train import batch_sizes, distributed
from foxhunt.train.config import TrainConfig
from foxhunt.train.console_lines import EpochMemory, MemoryWatch
from foxhunt.train.device import apply_memory_budget, resolve_device
from foxhunt.train.oom import is_oom, release_memory
from foxhunt.train.optim import AdamW, HostAdamW
from foxhunt.train.plan import FRAGMENTATION, measure_step_peak, plan_memory, probe_batch
from foxhunt.train.precision import grad_scaler, resolve_precision
from foxhunt.train.session import describe_device
from foxhunt.train.step import TrainStepper, rng_state, set_rng_state
from foxhunt.train.telemetry import MemoryTracker, format_line
from tests.train.fake_cuda import GIB, MIB, FakeCuda, fake_cuda_fixture  # noqa: F401  (the fixture)

CUDA = torch.device("cuda", 0)
SIZES = InputSizes(static_cat=(3,), static_cont=0, known_cat=(), known_cont=3, observed_cat=(), observed_cont=3)
CFG = ModelConfig(hidden_size=8, attention_heads=2, dropout=0.0, encoder_length=12, horizon=3)


def tracker(tmp_path, device: torch.device = CUDA) -> MemoryTracker:
    return MemoryTracker(device, tmp_path / "memory.jsonl", logging.getLogger("test.fake_cuda"))


def records(tmp_path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "memory.jsonl").read_text().splitlines()]


# -- telemetry -------------------------------------------------------------------------------------------------------


def test_device_telemetry_records_the_allocators_numbers_in_mib(tmp_path, fake_cuda: FakeCuda) -> None:
    t = tracker(tmp_path)
    assert fake_cuda.called("reset_peak_memory_stats") == [(0,)]  # the first record's peak window starts here
    fake_cuda.allocated, fake_cuda.reserved, fake_cuda.peak = 300 * MIB, 512 * MIB, 700 * MIB
    first = t.record("run_start")
    fake_cuda.peak = 900 * MIB  # what the next phase reached
    second = t.record("train_end", epoch=1)
    third = t.record("val_end", epoch=1)  # nothing ran since: the peak was reset to what is allocated
    assert records(tmp_path) == [first, second, third]
    assert (first["device_allocated_mb"], first["device_reserved_mb"], first["device_peak_mb"]) == (300, 512, 700)
    assert first["device_total_mb"] == 141 * 1024
    assert first["device_nvml_used_mb"] == 2048  # NVML's device-wide figure, found by the card's "GPU-" UUID
    assert fake_cuda.called("nvmlDeviceGetHandleByUUID") == [("GPU-" + fake_cuda.uuid,)]
    assert (second["device_peak_mb"], third["device_peak_mb"]) == (900, 300)
    assert len(fake_cuda.called("reset_peak_memory_stats")) == 4  # once more after every record
    assert t.take_peaks()[0] == 900
    line = format_line(first)
    assert ("device_allocated=300.0MiB device_reserved=512.0MiB device_peak=700.0MiB device_total=144384MiB "
            "device_nvml_used=2048.0MiB") in line


def test_without_pynvml_the_record_has_no_nvml_field_and_cuda_means_the_current_card(tmp_path, monkeypatch) -> None:
    fake = FakeCuda(count=2, current=1).install(monkeypatch)
    rec = tracker(tmp_path, torch.device("cuda")).record("run_start")
    assert "device_nvml_used_mb" not in rec and rec["device_allocated_mb"] == 300
    # "cuda" without an index is the current card: every call asked about card 1
    assert {args[0] for args in fake.called("memory_allocated") + fake.called("get_device_properties")} == {1}


def test_device_fields_carry_the_maximum_over_ranks(tmp_path, fake_cuda: FakeCuda) -> None:
    t = tracker(tmp_path)
    t.reduce_max = lambda values: [v + 1024 if v >= 0 else v for v in values]  # another rank holds 1 GiB more
    fake_cuda.peak = 700 * MIB
    rec = t.record("epoch_start", epoch=1)
    assert (rec["device_allocated_mb"], rec["device_peak_mb"], rec["device_nvml_used_mb"]) == (1324, 1724, 3072)
    assert rec["device_total_mb"] == 141 * 1024  # the card's size is not a measurement


# -- device and budget -----------------------------------------------------------------------------------------------


def test_auto_takes_the_gpu_and_the_budget_becomes_the_allocators_fraction(fake_cuda: FakeCuda) -> None:
    assert resolve_device("auto") == torch.device("cuda")
    assert resolve_device("cuda:0") == CUDA
    with pytest.raises(InputError, match=r"--device cuda:1: only 1 GPU\(s\) visible"):
        resolve_device("cuda:1")
    assert apply_memory_budget(CUDA, 4 * GIB) == pytest.approx(4 / 141)
    assert fake_cuda.called("set_per_process_memory_fraction") == [(4 / 141, CUDA)]
    assert apply_memory_budget(CUDA, 200 * GIB) == 1.0  # more than the card: all of it
    assert apply_memory_budget(CUDA, None) is None and apply_memory_budget(torch.device("cpu"), GIB) is None
    assert len(fake_cuda.called("set_per_process_memory_fraction")) == 2
    assert describe_device(CUDA) == "cuda:0 (NVIDIA H200, 141 GiB)"


# -- precision -------------------------------------------------------------------------------------------------------


def test_auto_precision_is_bf16_only_where_the_card_computes_in_it(monkeypatch) -> None:
    FakeCuda(major=9).install(monkeypatch)
    assert resolve_precision("auto", CUDA) == "bf16"
    assert resolve_precision("16-mixed", CUDA) == "16-mixed"
    assert isinstance(grad_scaler(CUDA, "16-mixed"), torch.amp.GradScaler)
    assert grad_scaler(CUDA, "bf16") is None
    # a V100 (7.0): torch.cuda.is_bf16_supported() says True there, by emulation; auto stays fp32, an explicit
    # bf16 runs
    FakeCuda(name="Tesla V100-SXM2-16GB", major=7, bf16_runs=True).install(monkeypatch)
    assert resolve_precision("auto", CUDA) == "32"
    assert resolve_precision("bf16", CUDA) == "bf16"
    FakeCuda(name="Tesla P100-PCIE-16GB", major=6, bf16_runs=False).install(monkeypatch)
    with pytest.raises(InputError, match="--precision bf16: Tesla P100-PCIE-16GB has no bfloat16; use 16-mixed or 32"):
        resolve_precision("bf16", CUDA)


# -- the out-of-memory ladder ----------------------------------------------------------------------------------------


def test_a_cuda_oom_is_classified_and_releases_the_cache(fake_cuda: FakeCuda) -> None:
    assert is_oom(torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 139.81 GiB "
                                              "total capacity; 137.2 GiB already allocated)"))
    release_memory(CUDA)
    release_memory(torch.device("cpu"))
    assert fake_cuda.called("empty_cache") == [()]  # CUDA's cached blocks only: the CPU has none


class FailingStep:
    """Stands in for the step's forward and backward on the card: out of memory `fails` times, then a loss."""

    def __init__(self, fails: int):
        self.fails, self.sizes = fails, []

    def __call__(self, stepper: TrainStepper, batch: Batch) -> torch.Tensor:
        self.sizes.append(min(stepper.micro_batch or len(batch), len(batch)))
        if len(self.sizes) <= self.fails:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 MiB")
        return torch.tensor(0.25)


def cuda_stepper(tmp_path, monkeypatch, fails: int, precision: str = "32") -> tuple[TrainStepper, FailingStep]:
    torch.manual_seed(0)
    model = TemporalFusionTransformer(SIZES, CFG)
    opt = AdamW(list(model.parameters()), lr=1e-3, weight_decay=0.0)
    stepper = TrainStepper(model, opt, torch.tensor(CFG.quantiles), 1.0, CUDA, tracker(tmp_path),
                           precision=precision)
    failing = FailingStep(fails)
    monkeypatch.setattr(stepper, "_step", lambda batch, global_step: failing(stepper, batch))
    return stepper, failing


def test_the_ladder_on_cuda_climbs_to_the_host_optimizer_and_then_stops(tmp_path, monkeypatch,
                                                                        fake_cuda: FakeCuda) -> None:
    stepper, failing = cuda_stepper(tmp_path, monkeypatch, fails=5)
    batch = probe_batch(SIZES, CFG, 4, torch.device("cpu"))
    fake_cuda.rng = torch.full((16,), 7, dtype=torch.uint8)
    assert float(stepper.step(batch, global_step=3, epoch=1)) == 0.25
    assert failing.sizes == [4, 4, 2, 1, 1, 1]  # retry, split 2, split 1, checkpointing, host optimizer, done
    recs = records(tmp_path)
    assert [r["phase"] for r in recs] == ["oom_retry", "oom_split", "oom_split", "oom_checkpointing",
                                          "oom_optimizer_to_host"]
    assert all(r["device_allocated_mb"] == 300 and r["device_total_mb"] == 141 * 1024 for r in recs)
    assert "micro-batch 4 of batch 4" in recs[0]["reason"] and "micro-batches of 1" in recs[2]["reason"]
    assert stepper.model.activation_checkpointing
    assert isinstance(stepper.optimizer, HostAdamW)
    assert all(p.device.type == "cpu" for p in stepper.optimizer.host_params)
    assert len(fake_cuda.called("empty_cache")) == 6  # each rung, and once more after the moments left the card
    assert len(fake_cuda.called("set_rng_state")) == 5  # each retry draws the failed attempt's dropout masks
    assert torch.equal(fake_cuda.rng, torch.full((16,), 7, dtype=torch.uint8))
    # one more failure at micro-batch 1 with everything tried: stop, saying what was tried
    failing.fails, failing.sizes = 2, []
    with pytest.raises(ResourceError, match=r"after a retry, micro-batches down to 1, --activation-checkpointing, "
                                            r"--optimizer-state cpu; "):
        stepper.step(batch, global_step=4, epoch=1)
    assert [r["phase"] for r in records(tmp_path)][-2:] == ["oom_retry", "oom_stop"]


def test_under_a_float16_scaler_the_ladder_keeps_the_optimizer_on_the_card(tmp_path, monkeypatch,
                                                                          fake_cuda: FakeCuda) -> None:
    stepper, _ = cuda_stepper(tmp_path, monkeypatch, fails=10, precision="16-mixed")
    with pytest.raises(ResourceError) as stop:
        stepper.step(probe_batch(SIZES, CFG, 1, torch.device("cpu")), global_step=1, epoch=1)
    assert [r["phase"] for r in records(tmp_path)] == ["oom_retry", "oom_checkpointing", "oom_stop"]
    assert isinstance(stepper.optimizer, AdamW) and "--optimizer-state cpu" not in str(stop.value)


def test_the_step_keeps_the_cards_generator_state(fake_cuda: FakeCuda) -> None:
    state = rng_state(CUDA)
    assert torch.equal(state[1], fake_cuda.rng)
    fake_cuda.rng = torch.zeros(16, dtype=torch.uint8)
    set_rng_state(state, CUDA)
    assert torch.equal(fake_cuda.rng, torch.arange(16, dtype=torch.uint8))


# -- the plan against what was measured ------------------------------------------------------------------------------


def test_the_probe_reads_the_cards_peak_above_what_was_allocated(fake_cuda: FakeCuda) -> None:
    """measure_step_peak on CUDA: synchronize, reset the peak, read allocated, run the step, synchronize, read the
    peak; the step's bytes are the peak above the allocated base (here 37 MiB, reached during the forward)."""
    model = TemporalFusionTransformer(SIZES, CFG)
    model.register_forward_hook(lambda *_: setattr(fake_cuda, "peak", fake_cuda.allocated + 37 * MIB))
    batch = probe_batch(SIZES, CFG, 4, torch.device("cpu"))
    for train in (True, False):
        assert measure_step_peak(model, batch, torch.tensor(CFG.quantiles), CUDA, train) == 37 * MIB
    assert [n for n, _ in fake_cuda.calls if n in ("synchronize", "reset_peak_memory_stats", "memory_allocated",
                                                    "max_memory_allocated")] == [
        "synchronize", "reset_peak_memory_stats", "memory_allocated", "synchronize", "max_memory_allocated"] * 2


def test_without_a_budget_the_validation_batch_is_planned_on_the_cards_free_memory(monkeypatch, fake_cuda: FakeCuda,
                                                                                   fixtures_dir) -> None:
    data = prepare_data(DataConfig(paths=(str(fixtures_dir / "es_fut_ohlcv1h_databento.parquet"),),
                                   encoder_length=12, horizon=3))
    model = TemporalFusionTransformer(data.schema.sizes, CFG)
    asked = []

    def plan_on_the_card(model, sizes, cfg, device, budget, **kw):
        asked.append((device, budget, kw["probe"]))  # the probe's steps need real CUDA tensors: analytic here
        return plan_memory(model, sizes, cfg, device, budget, **{**kw, "probe": False})

    monkeypatch.setattr(batch_sizes, "plan_memory", plan_on_the_card)
    fake_cuda.free = 10 * GIB
    batch, val_batch, plan = batch_sizes.resolve_batch_sizes(model, data, CFG, TrainConfig(batch_size=64), CUDA)
    assert asked == [(CUDA, int(0.8 * 10 * GIB), True)]  # 80% of what is free on the card, measured by a probe
    assert fake_cuda.called("mem_get_info") == [(CUDA,)]
    assert (batch, plan["device"]) == (64, "cuda:0")
    assert plan["best_val_batch"] >= len(data.splits["val"])  # 8 GiB hold every validation window at once
    assert val_batch == len(data.splits["val"])


def epoch_on_card(tmp_path, fake: FakeCuda, train_peak_mb: float, val_peak_mb: float,
                  val_growth_mb: float = 0.0) -> EpochMemory:
    """An epoch's records as train/loop.py takes them, with the card peaking where the test says."""
    tmp_path.mkdir()
    t = tracker(tmp_path)
    t.record("epoch_start", epoch=1)
    t.take_peaks()
    fake.peak = int(train_peak_mb * MIB)
    t.record("train_end", epoch=1)
    train_peaks = t.take_peaks()
    val_start = t.record("val_start", epoch=1)
    fake.peak = int(val_peak_mb * MIB)
    fake.allocated += int(val_growth_mb * MIB)
    val_end = t.record("val_end", epoch=1)
    return EpochMemory.measure(train_peaks, t.take_peaks(), val_start, val_end, 500)


def test_a_plan_exceeded_on_the_card_is_said_once_per_phase(tmp_path, fake_cuda: FakeCuda) -> None:
    model = TemporalFusionTransformer(SIZES, CFG)
    plan = plan_memory(model, SIZES, CFG, CUDA, 4 * GIB, batch_sizes=(1024, 2048), probe=False).to_dict()
    assert plan["device"] == "cuda:0" and plan["best_train_batch"] == 2048
    predicted = {step: plan["rows"][1][step]["total"] / MIB for step in ("train", "val")}  # 91 and 27 MiB
    fake_cuda.allocated = 0  # the plan counts everything on the card: weights, gradients, moments, activations
    watch = MemoryWatch(plan, 2048)
    within = epoch_on_card(tmp_path / "a", fake_cuda, predicted["train"] * (1 + FRAGMENTATION) - 0.1,
                           predicted["val"])
    assert within.train_device is not None and within.text().startswith("mem peak device 96 host ")
    assert watch.warnings(1, within, 2048) == []
    over = epoch_on_card(tmp_path / "b", fake_cuda, predicted["train"] * 1.5, predicted["val"] * 1.5, 8.0)
    said = watch.warnings(2, over, 2048)
    assert said[0].startswith("memory grew across validation in epoch 2: device memory +8.0 MiB over 500 batches")
    assert said[1] == ("memory plan exceeded in epoch 2: training at batch 2,048 peaked at 137 MiB, the plan "
                       "predicted 91 MiB (+5% allowance); batch sizes it chose may not fit the budget: pass a "
                       "smaller --batch-size / --validation-batch-size")
    assert said[2].startswith("memory plan exceeded in epoch 2: validation at batch 2,048 peaked at 40 MiB, the "
                              "plan predicted 27 MiB")
    assert watch.warnings(3, over, 2048)[1:] == []  # said once per phase


# -- NCCL ------------------------------------------------------------------------------------------------------------


def torchrun_env(monkeypatch, rank: int, world: int, local: int) -> list[tuple[tuple, dict]]:
    for k, v in (("RANK", rank), ("WORLD_SIZE", world), ("LOCAL_RANK", local)):
        monkeypatch.setenv(k, str(v))
    monkeypatch.delenv(distributed.TIMEOUT_ENV, raising=False)
    joined: list[tuple[tuple, dict]] = []
    monkeypatch.setattr(tdist, "is_initialized", lambda: False)
    monkeypatch.setattr(tdist, "init_process_group", lambda *a, **kw: joined.append((a, kw)))
    return joined


def test_under_torchrun_on_cuda_each_rank_takes_its_card_and_nccl(monkeypatch) -> None:
    fake = FakeCuda(count=2).install(monkeypatch)
    joined = torchrun_env(monkeypatch, rank=3, world=4, local=1)
    dist = distributed.init_from_env(torch.device("cuda"))
    assert dist == distributed.Dist(3, 4, 1, torch.device("cuda", 1), grouped=True)
    assert fake.called("set_device") == [(torch.device("cuda", 1),)] and fake.current == 1
    assert joined == [(("nccl",), {"timeout": dt.timedelta(seconds=600), "device_id": torch.device("cuda", 1)})]
    # a rank's generator is forked on its own card
    with dist.rank_rng(seed=5, step=2):
        pass
    assert fake.called("get_rng_state") == [(torch.device("cuda", 1),)]
    assert [args[1] for args in fake.called("set_rng_state")] == [torch.device("cuda", 1)]


def test_more_ranks_on_a_node_than_cards_is_refused_and_a_failed_join_is_rank_lost(monkeypatch) -> None:
    FakeCuda(count=2).install(monkeypatch)
    torchrun_env(monkeypatch, rank=2, world=3, local=2)
    with pytest.raises(InputError, match=r"LOCAL_RANK 2 but only 2 GPU\(s\) visible; start at most 2 processes"):
        distributed.init_from_env(torch.device("cuda"))
    torchrun_env(monkeypatch, rank=1, world=2, local=1)

    def refused(*_, **__):
        raise tdist.DistError("[c10d] NCCL error: unhandled system error")

    monkeypatch.setattr(tdist, "init_process_group", refused)
    with pytest.raises(RankLost, match="rank 1 of 2: another rank stopped or stopped answering"):
        distributed.init_from_env(torch.device("cuda"))


def test_under_torchrun_on_cpu_it_is_gloo_without_a_card(monkeypatch, fake_cuda: FakeCuda) -> None:
    joined = torchrun_env(monkeypatch, rank=0, world=2, local=0)
    assert distributed.init_from_env(torch.device("cpu")).device == torch.device("cpu")
    assert joined == [(("gloo",), {"timeout": dt.timedelta(seconds=600), "device_id": None})]
    assert fake_cuda.called("set_device") == []
