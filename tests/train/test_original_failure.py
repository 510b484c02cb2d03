"""The failure foxhunt exists to prevent, reproduced on CPU: hourly ES bars, batch size 1 for training and
validation, 5 epochs with validation every epoch. It must finish, and memory must not grow across validation."""

from __future__ import annotations

import json

from foxhunt.cli import main

GROWTH_TOLERANCE_MB = 4.0  # RSS moves by a page or two; a leak of the old kind grows by ~14 MB per batch


def test_batch_size_one_five_epochs_completes_with_flat_validation_memory(tmp_path, tiny, fixtures_dir):
    run = tmp_path / "run"
    code = main(["train", *tiny, "--parquet-file", str(fixtures_dir / "es_fut_ohlcv1h_databento.parquet"),
                 "--batch-size", "1", "--validation-batch-size", "1", "--epochs", "5", "--patience", "5",
                 "--memory-log-every", "10", "--run-dir", str(run)])
    assert code == 0
    epochs = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [e["epoch"] for e in epochs] == [1, 2, 3, 4, 5]
    assert all(e["val_samples"] > 0 for e in epochs)
    records = [json.loads(line) for line in (run / "memory.jsonl").read_text().splitlines()]
    for epoch in range(1, 6):
        val = [r for r in records if r["phase"] == "val_batch" and r["epoch"] == epoch]
        assert len(val) >= 3, "validation batches were not recorded"
        growth = val[-1]["host_rss_mb"] - val[0]["host_rss_mb"]
        assert growth < GROWTH_TOLERANCE_MB, f"epoch {epoch}: RSS grew {growth:.1f} MiB across validation"
