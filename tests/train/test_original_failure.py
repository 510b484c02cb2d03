"""The failure foxhunt exists to prevent, reproduced on CPU: hourly ES bars, batch size 1 for training and
validation, 5 epochs with validation every epoch. It must finish, and memory must not grow across validation.

The model is sized so that the old bug (each validation batch's autograd graph kept alive) would leak about 2 MiB a
batch, about 190 MiB across the ~100 validation batches between the first and last per-batch records: the
tolerances below are a small fraction of that, and the test checks that this stays so (the graph is measured)."""

from __future__ import annotations

import json

import torch

from foxhunt.cli import main
from foxhunt.data.config import DataConfig
from foxhunt.data.prepare import prepare_data
from foxhunt.model.config import ModelConfig
from foxhunt.model.tft import TemporalFusionTransformer
from foxhunt.train.plan import measure_step_peak

ES = "es_fut_ohlcv1h_databento.parquet"
HIDDEN, ENCODER, HORIZON = 32, 64, 3
GROWTH_TOLERANCE_MB = 4.0  # across one validation pass: RSS moves by a page or two
RUN_TOLERANCE_MB = 8.0  # from the first epoch's validation to the end of the last epoch (five epochs of training)
MIN_LEAK_TO_TOLERANCE = 10  # the old bug must leak at least this many tolerances, or the test proves nothing


def graph_mb_per_batch(fixtures_dir) -> float:
    """Bytes of one batch-1 forward's autograd graph (saved activations): what the old bug kept per batch."""
    data = prepare_data(DataConfig(paths=(str(fixtures_dir / ES),), encoder_length=ENCODER, horizon=HORIZON))
    model = TemporalFusionTransformer(data.schema.sizes, ModelConfig(hidden_size=HIDDEN, attention_heads=2,
                                                                     encoder_length=ENCODER, horizon=HORIZON))
    batch = data.windows.batch(data.splits["val"][:1])
    return measure_step_peak(model, batch, torch.tensor([0.1, 0.5, 0.9]), torch.device("cpu"), train=True) / 2**20


def test_batch_size_one_five_epochs_completes_with_flat_validation_memory(tmp_path, fixtures_dir):
    run = tmp_path / "run"
    code = main(["train", "--parquet-file", str(fixtures_dir / ES), "--hidden-size", str(HIDDEN),
                 "--attention-heads", "2", "--encoder-length", str(ENCODER), "--horizon", str(HORIZON),
                 "--no-progress", "--threads", "1", "--batch-size", "1", "--validation-batch-size", "1",
                 "--epochs", "5", "--patience", "5", "--max-train-batches", "40", "--memory-log-every", "10",
                 "--run-dir", str(run)])
    assert code == 0
    epochs = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [e["epoch"] for e in epochs] == [0, 1, 2, 3, 4, 5]  # 0: the untrained model, its anchor, validated
    assert all(e["val_samples"] > 0 for e in epochs)
    records = [json.loads(line) for line in (run / "memory.jsonl").read_text().splitlines()]

    leak_per_batch = graph_mb_per_batch(fixtures_dir)
    for epoch in range(1, 6):
        val = [r for r in records if r["phase"] == "val_batch" and r["epoch"] == epoch]
        assert len(val) >= 3, "validation batches were not recorded"
        old_bug = leak_per_batch * (val[-1]["batch"] - val[0]["batch"])
        assert old_bug >= MIN_LEAK_TO_TOLERANCE * GROWTH_TOLERANCE_MB, f"the old bug would leak only {old_bug:.1f} MiB"
        growth = val[-1]["host_rss_mb"] - val[0]["host_rss_mb"]
        assert growth < GROWTH_TOLERANCE_MB, f"epoch {epoch}: RSS grew {growth:.1f} MiB across validation"

    # The whole run: the first epoch's first validation record (after the first training steps have allocated
    # what they allocate once: optimizer moments, autograd and allocator pools) against the end of the last epoch.
    start = next(r for r in records if r["phase"] == "val_batch" and r["epoch"] == 1)
    end = next(r for r in records if r["phase"] == "checkpoint" and r["epoch"] == 5)
    growth = end["host_rss_mb"] - start["host_rss_mb"]
    assert growth < RUN_TOLERANCE_MB, f"RSS grew {growth:.1f} MiB from epoch 1's validation to the end of epoch 5"
