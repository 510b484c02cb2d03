"""The ladder's parts: what counts as out of memory, what a failed attempt leaves behind, and the rungs that need
a device (the optimizer state moved to the host) checked for their maths on CPU."""

from __future__ import annotations

import gc
import json
import logging
import weakref

import pytest
import torch

from foxhunt.data.config import DataConfig
from foxhunt.data.prepare import prepare_data
from foxhunt.errors import ResourceError
from foxhunt.model.config import ModelConfig
from foxhunt.model.tft import TemporalFusionTransformer
from foxhunt.train import faults
from foxhunt.train.oom import is_oom
from foxhunt.train.optim import AdamW, HostAdamW
from foxhunt.train.step import TrainStepper
from foxhunt.train.telemetry import MemoryTracker
from foxhunt.train.validate import InTraining, validate

CPU = torch.device("cpu")
Q = [0.1, 0.5, 0.9]
CPU_OOM = ("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: you tried to "
           "allocate 548864 bytes. Error code 12 (Cannot allocate memory)")


@pytest.fixture(scope="module")
def data(request):
    fixtures = request.config.rootpath / "tests" / "fixtures"
    return prepare_data(DataConfig(paths=(str(fixtures / "es_fut_ohlcv1h_databento.parquet"),), encoder_length=16,
                                   horizon=3))


def tiny_model(data) -> TemporalFusionTransformer:
    torch.manual_seed(0)
    return TemporalFusionTransformer(data.schema.sizes, ModelConfig(hidden_size=8, attention_heads=2,
                                                                    encoder_length=16, horizon=3, dropout=0.0))


def tracker(tmp_path) -> MemoryTracker:
    return MemoryTracker(CPU, tmp_path / "memory.jsonl", logging.getLogger("test"))


def phases(tmp_path) -> list[str]:
    path = tmp_path / "memory.jsonl"
    return [json.loads(line)["phase"] for line in path.read_text().splitlines()] if path.exists() else []


def test_allocation_failures_are_recognised_and_nothing_else() -> None:
    assert is_oom(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert is_oom(RuntimeError(CPU_OOM))  # what the CPU allocator raises under an address-space limit
    assert is_oom(RuntimeError("CUDA error: out of memory"))
    assert is_oom(MemoryError())
    for other in (RuntimeError("mat1 and mat2 shapes cannot be multiplied (4x8 and 16x8)"),
                  RuntimeError("Expected all tensors to be on the same device"), ValueError("can't allocate memory"),
                  KeyError("x")):
        assert not is_oom(other)


class FailingModel(torch.nn.Module):
    """Wraps a model; its first `fails` forwards allocate a large tensor, then raise RuntimeError(`message`)."""

    def __init__(self, inner: torch.nn.Module, message: str, fails: int):
        super().__init__()
        self.inner, self.message, self.fails = inner, message, fails
        self.activation_checkpointing = False
        self.lost: list[weakref.ref] = []

    def forward(self, batch):
        if self.fails > 0:
            self.fails -= 1
            half_done = torch.ones(4 * 2**20)  # 16 MB the failed attempt had allocated
            self.lost.append(weakref.ref(half_done))
            raise RuntimeError(self.message)  # a new one each time, as torch raises
        return self.inner(batch)


def stepper_for(model, tmp_path) -> TrainStepper:
    opt = AdamW(list(model.parameters()), lr=1e-2, weight_decay=1e-4)
    return TrainStepper(model, opt, torch.tensor(Q), 1.0, CPU, tracker(tmp_path))


def test_a_real_cpu_allocation_failure_climbs_the_ladder_and_frees_the_failed_attempt(data, tmp_path) -> None:
    model = FailingModel(tiny_model(data), CPU_OOM, fails=2)
    stepper = stepper_for(model, tmp_path)
    loss = stepper.step(data.windows.batch(data.splits["train"][:32]), 1, 1)
    assert loss is not None and torch.isfinite(loss)
    assert stepper.micro_batch == 16
    assert phases(tmp_path) == ["oom_retry", "oom_split"]
    gc.collect()
    assert len(model.lost) == 2 and all(ref() is None for ref in model.lost)  # nothing of the failed attempts kept


def test_an_unrelated_runtime_error_is_never_swallowed(data, tmp_path) -> None:
    model = FailingModel(tiny_model(data), "mat1 and mat2 shapes cannot be multiplied (4x8 and 16x8)", fails=1)
    stepper = stepper_for(model, tmp_path)
    with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):
        stepper.step(data.windows.batch(data.splits["train"][:32]), 1, 1)
    assert stepper.recoveries == 0 and stepper.micro_batch is None and phases(tmp_path) == []


def test_optimizer_state_moved_to_the_host_takes_the_same_steps(data, tmp_path) -> None:
    """The rung's maths, on CPU where the host is the device: AdamW continued vs moved to HostAdamW mid-run."""
    batches = [data.windows.batch(data.splits["train"][i : i + 16]) for i in range(0, 96, 16)]
    runs = []
    for move_after in (None, 2):
        model = tiny_model(data)
        stepper = stepper_for(model, tmp_path / str(move_after))
        losses = []
        for k, b in enumerate(batches, start=1):
            torch.manual_seed(k)  # the unknown-series masking draw, the same in both runs
            losses.append(float(stepper.step(b, k, 1)))
            if k == move_after:
                stepper.optimizer = HostAdamW.from_device(stepper.optimizer)
        assert isinstance(stepper.optimizer, HostAdamW) == (move_after is not None)
        runs.append((losses, {k: v.clone() for k, v in model.state_dict().items()}))
    (la, wa), (lb, wb) = runs
    assert lb == pytest.approx(la, rel=1e-6)
    for k in wa:
        torch.testing.assert_close(wb[k], wa[k], rtol=1e-6, atol=1e-7, msg=k)


def test_validation_at_size_one_moves_the_optimizer_state_before_it_stops(data, tmp_path) -> None:
    model = tiny_model(data).eval()
    ids = data.splits["val"][:6]

    def predict(b):
        return model(b).quantiles

    clean = validate(predict, data.windows, ids, 1, Q, CPU)
    moved = []

    def optimizer_to_host() -> bool:
        moved.append(True)
        return len(moved) == 1  # the first call moves it; after that there is nothing left to move

    in_training = InTraining(tracker(tmp_path), 1, optimizer_to_host)
    with faults.armed("oom@val:4x2"):  # batch 4 fails, and its retry
        result = validate(predict, data.windows, ids, 1, Q, CPU, training=in_training)
    assert result.loss == pytest.approx(clean.loss, rel=1e-6) and result.n_samples == clean.n_samples
    assert phases(tmp_path) == ["oom_retry", "oom_optimizer_to_host"]
    assert moved == [True]
    with (faults.armed("oom@val:2x2"),  # nothing left to move: the next rung is the stop
          pytest.raises(ResourceError, match="after a retry; the largest validation batch that fitted in this run")):
        validate(predict, data.windows, ids, 1, Q, CPU, training=in_training)
    assert phases(tmp_path)[2:] == ["oom_retry", "oom_stop"]


def _steps(data, batches, micro_batch: int | None, loss_weight: str, tmp_path):
    """(losses, final weights, the micro-batch sizes each forward saw) of a tiny dropout-0 model stepped through
    `batches` with micro-batches of `micro_batch` windows (None: each batch whole)."""
    model = tiny_model(data)
    sizes: list[int] = []
    model.register_forward_pre_hook(lambda module, args: sizes.append(len(args[0])))
    opt = AdamW(list(model.parameters()), lr=1e-2, weight_decay=1e-4)
    stepper = TrainStepper(model, opt, torch.tensor(Q), 1.0, CPU, tracker(tmp_path), micro_batch,
                           loss_weight=loss_weight)
    losses = []
    for k, b in enumerate(batches, start=1):
        torch.manual_seed(k)  # the unknown-series masking draw, the same in every run
        losses.append(float(stepper.step(b, k, 1)))
    return losses, {k: v.clone() for k, v in model.state_dict().items()}, sizes


QKV_BIAS, KEY = "attention.qkv.bias", slice(8, 16)  # tiny_model's 2 heads of 4: [Q 0:8 | K 8:16 | shared V 16:20]


def _but_key_bias(name: str, weights: torch.Tensor) -> torch.Tensor:
    """The weights without the attention's key bias, which has no gradient in exact arithmetic (it shifts each
    query's logits over all keys alike, which softmax ignores): AdamW normalises the float32 rounding left there
    (~4e-12) into steps of the learning rate's order, split or not, so it is compared apart, more loosely."""
    return torch.cat([weights[: KEY.start], weights[KEY.stop :]]) if name == QKV_BIAS else weights


@pytest.mark.parametrize("loss_weight", ["none", "scale"])
@pytest.mark.parametrize(("micro_batch", "parts"), [(8, [8, 8, 8, 6]), (7, [7, 7, 7, 7, 2])])
def test_uneven_micro_batches_take_the_steps_of_the_whole_batch(data, tmp_path, loss_weight, micro_batch, parts):
    """Batches of 30 in micro-batches whose last one is smaller: each micro-batch's loss weighs len(part) / 30 (and,
    under --loss-weight scale, its samples' scales are divided by the whole batch's mean scale), so the gradient is
    the whole batch's and 4 steps end on the same weights. An even split (32 -> 16/8/4) weighs every part alike and
    cannot tell these weights from 1 / number of parts."""
    batches = [data.windows.batch(data.splits["train"][i : i + 30]) for i in range(0, 120, 30)]  # (30,) windows each
    assert len(set(batches[0].target_scale.tolist())) > 1  # volatility scaling: the scale weights are not all 1
    clean_losses, clean, whole = _steps(data, batches, None, loss_weight, tmp_path / "clean")
    losses, split, seen = _steps(data, batches, micro_batch, loss_weight, tmp_path / "split")
    assert whole == [30] * 4 and seen == parts * 4
    assert losses == pytest.approx(clean_losses, rel=1e-6)
    for k in clean:  # measured: 1.1e-6 at most
        torch.testing.assert_close(_but_key_bias(k, split[k]), _but_key_bias(k, clean[k]), rtol=1e-5, atol=1e-6, msg=k)
    # the key bias's drift, measured: 1.4e-5 at most, split evenly (30 -> 15) or not
    torch.testing.assert_close(split[QKV_BIAS][KEY], clean[QKV_BIAS][KEY], rtol=0, atol=1e-4)

