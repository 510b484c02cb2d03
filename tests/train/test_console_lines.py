"""The lines a training run prints (train/console_lines.py), against hand-computed plans and memory records: the plan as
one line, the epoch's memory, the warnings for growth across validation and for an exceeded plan, the final lines."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from foxhunt.train.console_lines import (
    EpochMemory,
    MemoryWatch,
    WarningCounter,
    data_line,
    next_commands,
    plan_line,
    predicted_mb,
    vs_baseline,
)
from foxhunt.train.telemetry import PhasePeaks

MIB = 2**20
# A step costs 100 MiB plus 10 MiB a sample (training) and 50 plus 5 (validation), at batches 1, 2, 4, 8.
PLAN = {
    "usable_bytes": 1843 * MIB,
    "device": "cpu",
    "rows": [{"batch_size": b, "train": {"total": (100 + 10 * b) * MIB}, "val": {"total": (50 + 5 * b) * MIB}}
             for b in (8, 1, 4, 2)],  # any order
}
CUDA_PLAN = {**PLAN, "device": "cuda:0"}


@pytest.mark.parametrize("batch, step, mib", [(1, "train", 110), (3, "train", 130), (6, "train", 160),
                                              (8, "train", 180), (16, "train", 260), (5, "val", 75)])
def test_predicted_peak_is_read_off_the_linear_plan_between_and_beyond_its_rows(batch, step, mib):
    assert predicted_mb(PLAN, batch, step) == pytest.approx(mib)


def test_the_plan_is_one_line():
    assert plan_line(PLAN, 4, 8) == "plan: train batch 4 needs 140 MiB of 1,843 usable; validation batch 8 needs 90 MiB"
    assert plan_line(CUDA_PLAN, 3, 2, saved=True) == (
        "plan: train batch 3 needs 130 MiB of 1,843 usable on cuda:0; validation batch 2 needs 60 MiB (as resolved "
        "when the run started)")
    assert plan_line(None, 64, 256).startswith("plan: none (batch sizes given: train 64, validation 256)")


def cpu_epoch(growth: float, val_batches: int) -> EpochMemory:
    return EpochMemory(None, 400.0, None, 410.0, None, growth, val_batches, 400.0, 410.0)


def test_epoch_memory_text_and_measure():
    assert cpu_epoch(1.04, 27).text() == "mem peak host 410 MiB, val +1.0 MiB"
    start = {"device_allocated_mb": 20.0, "host_rss_mb": 1000.0}
    end = {"device_allocated_mb": 20.0, "host_rss_mb": 1000.25}
    m = EpochMemory.measure(PhasePeaks(148.0, 1010.0, 990.0), PhasePeaks(90.0, 1500.0, 995.0), start, end, 7)
    assert m == EpochMemory(148.0, 1010.0, 90.0, 1500.0, 0.0, 0.25, 7, 990.0, 995.0)
    assert m.text() == "mem peak device 148 host 1,500 MiB, val device +0.0 host +0.2 MiB"


@pytest.mark.parametrize("val_batches, growth, warned", [(27, 3.9, False), (27, 4.1, True),  # the 4 MiB floor
                                                         (1000, 9.9, False), (1000, 10.5, True)])  # 1 MiB / 100
def test_growth_across_validation_warns_above_one_mib_per_hundred_batches(val_batches, growth, warned):
    watch = MemoryWatch(PLAN, 4)
    assert watch.warnings(2, cpu_epoch(growth, val_batches), 8) == []  # the process's first pass: not judged
    said = watch.warnings(3, cpu_epoch(growth, val_batches), 8)
    assert len(said) == warned
    if warned:
        assert said[0].startswith(f"memory grew across validation in epoch 3: host memory (RssAnon) +{growth:.1f} MiB "
                                  f"over {val_batches:,} batches")


def test_the_first_validation_pass_allocates_once_and_is_not_taken_for_a_leak():
    """The sample's first pass grew +6.8 MiB (RssAnon, 19 batches), later ones under +1.3: only later passes are
    judged, so a run's epoch 0 (or a resumed run's first epoch) says nothing, and a leak shows in the next pass."""
    watch = MemoryWatch(PLAN, 4)
    assert watch.warnings(0, cpu_epoch(6.8, 19), 8) == []
    assert watch.warnings(1, cpu_epoch(0.4, 19), 8) == []
    assert len(watch.warnings(2, cpu_epoch(6.8, 19), 8)) == 1


def test_an_exceeded_plan_warns_once_per_phase_beyond_its_allowance():
    watch = MemoryWatch(CUDA_PLAN, 4)  # training predicted 140 MiB (147 with the 5% allowance); validation at 8: 90
    within = EpochMemory(146.0, 500.0, 94.0, 500.0, 0.0, 0.0, 10, 500.0, 500.0)
    assert watch.warnings(1, within, 8) == []
    over = EpochMemory(148.0, 500.0, 100.0, 500.0, 0.0, 0.0, 10, 500.0, 500.0)
    said = watch.warnings(2, over, 8)
    assert [s.split(":")[0] for s in said] == ["memory plan exceeded in epoch 2"] * 2
    assert "training at batch 4 peaked at 148 MiB, the plan predicted 140 MiB" in said[0]
    assert "validation at batch 8 peaked at 100 MiB, the plan predicted 90 MiB" in said[1]
    assert watch.warnings(3, over, 8) == []  # said once
    assert MemoryWatch(None, 4).warnings(1, over, 8) == []  # no plan, nothing to exceed
    assert MemoryWatch(PLAN, 4).warnings(1, cpu_epoch(0.0, 10), 8) == []  # CPU: no device peak to check


def test_validation_growth_is_read_in_anonymous_memory_not_the_mapped_stores_pages():
    """A store's file pages read in during validation raise RSS, not the process's own memory (RssAnon)."""
    start = {"device_allocated_mb": None, "host_rss_mb": 900.0, "host_anon_mb": 500.0}
    end = {"device_allocated_mb": None, "host_rss_mb": 904.4, "host_anon_mb": 500.1}
    m = EpochMemory.measure(PhasePeaks(None, 910.0, 500.1), PhasePeaks(None, 910.0, 500.1), start, end, 48)
    assert m.growth_host == pytest.approx(0.1)
    assert MemoryWatch(PLAN, 4).warnings(0, m, 8) == []


def test_a_cpu_budget_is_checked_against_the_processs_own_memory_not_a_mapped_stores_pages():
    """Training from a store: its pages read in push the resident set's peak (VmHWM) past the budget, but they are
    page cache the kernel reclaims, not memory the plan gave out; the highest RssAnon record is what is checked."""
    plan = {**PLAN, "budget_bytes": 1024 * MIB, "fixed_bytes": 550 * MIB}
    assert MemoryWatch(plan, 4).warnings(1, EpochMemory(None, 2900.0, None, 3000.0, None, 0.0, 10, 700.0, 720.0),
                                         8) == []
    said = MemoryWatch(plan, 4).warnings(1, EpochMemory(None, 900.0, None, 1000.0, None, 0.0, 10, 700.0, 1030.0), 8)
    assert [s.split(":")[0] for s in said] == ["memory budget exceeded in epoch 1"]
    assert "validation at batch 8 peaked at 1,030 MiB of host memory" in said[0]


def test_a_cpu_run_over_its_budget_warns_once_per_phase_counting_what_the_process_holds():
    """CPU: the peak resident set against the plan's budget; the line names what the plan counted (held outside the
    step, and the step). A plan from before `fixed_bytes` (a resumed old run) is not checked."""
    plan = {**PLAN, "budget_bytes": 1024 * MIB, "fixed_bytes": 550 * MIB}
    watch = MemoryWatch(plan, 4)
    assert watch.warnings(0, EpochMemory(None, 1000.0, None, 1010.0, None, 0.0, 10, 1000.0, 1010.0), 8) == []
    said = watch.warnings(1, EpochMemory(None, 1092.0, None, 900.0, None, 0.0, 10, 1092.0, 900.0), 8)
    assert said == ["memory budget exceeded in epoch 1: training at batch 4 peaked at 1,092 MiB of host memory, over "
                    "the 1,024 MiB budget (the plan: 550 MiB held outside the step and 140 MiB for it); pass a smaller "
                    "--batch-size / --validation-batch-size or raise --memory-budget"]
    assert watch.warnings(2, EpochMemory(None, 1092.0, None, 900.0, None, 0.0, 10, 1092.0, 900.0), 8) == []  # said once
    assert MemoryWatch({**PLAN, "budget_bytes": 1024 * MIB}, 4).warnings(
        1, EpochMemory(None, 1092.0, None, 900.0, None, 0.0, 10, 1092.0, 900.0), 8) == []
    assert plan_line({**plan, "usable_bytes": 371 * MIB}, 4, 8) == (
        "plan: train batch 4 needs 140 MiB of 371 usable (budget 1,024 MiB, 550 held outside the step); validation "
        "batch 8 needs 90 MiB")


def test_warning_counter_keeps_the_count_and_the_first():
    logger = logging.getLogger("foxhunt.test_console_lines")
    counter = WarningCounter()
    logger.addHandler(counter)
    try:
        assert counter.summary(Path("run/train.log")) is None
        logger.info("not a warning")
        logger.warning("first %d", 1)
        assert counter.summary(Path("run/train.log")) == "1 warning in this run (see run/train.log): first 1"
        logger.error("second")
    finally:
        logger.removeHandler(counter)
    assert counter.summary(Path("run/train.log")) == "2 warnings in this run (all in run/train.log); the first: first 1"


def test_final_lines_compare_with_the_baseline_and_fill_in_the_run_paths():
    assert vs_baseline(0.15, 0.2) == "val_loss 0.15000 vs baseline 0.20000 (25.0% lower)"
    assert vs_baseline(0.25, 0.2) == "val_loss 0.25000 vs baseline 0.20000 (25.0% HIGHER)"
    bundled = ("/cache/foxhunt/es_ohlcv1m_sample_v2_seed20240218.parquet",)
    assert next_commands(Path("runs/a"), bundled) == [
        "foxhunt evaluate --model runs/a --out-dir runs/a/eval",
        "foxhunt memory-report runs/a"]
    mine = next_commands(Path("runs/b"), ("my bars.parquet", "more.csv"))
    assert mine[0] == ("foxhunt evaluate --model runs/b --out-dir runs/b/eval --parquet-file 'my bars.parquet' "
                       "--parquet-file more.csv")
    assert next_commands(Path("runs/c"), ("bars/",), "stores/es")[0] == (
        "foxhunt evaluate --model runs/c --out-dir runs/c/eval --features stores/es")  # a run trained from a store


def test_data_line_is_short():
    summary = {"rows": 27353, "bar_interval": "1m", "series": {"ES": {}}, "rolls": [{}],
               "date_range": {"start": "2024-02-18T23:00:00Z", "end": "2024-03-15T20:59:00Z"},
               "windows": {"train": 20416, "val": 6896, "test": 0}}
    assert data_line(summary, ("/c/es_ohlcv1m_sample_v2_seed20240218.parquet",)) == (
        "data: bundled ES sample (simulated), 27,353 1m bars in 1 series (2024-02-18 .. 2024-03-15), 1 roll; windows train "
        "20,416 / val 6,896 / test 0")
    assert data_line({**summary, "rolls": []}, ("a.parquet", "b.parquet")).startswith("data: 2 paths, 27,353 1m bars")
