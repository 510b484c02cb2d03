"""`foxhunt inspect`, `foxhunt sample`, `foxhunt plan-memory` and `foxhunt memory-report` from the command line."""

from __future__ import annotations

import json

import polars as pl

from foxhunt.cli import main


def test_inspect_json_has_the_summary_and_the_roll_table(fixtures_dir, capsys):
    assert main(["inspect", str(fixtures_dir / "es_fut_ohlcv1m_databento.parquet"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["rows_read"] == 68_239
    assert set(out["series"]) == {"ES"}
    assert out["windows"]["train"] > 0 and out["windows"]["val"] > 0
    (roll,) = out["rolls"]
    assert set(roll) == {"root", "trade_date", "from", "to", "gap", "reason"}
    assert (roll["root"], roll["from"], roll["to"], roll["reason"]) == ("ES", "ESH4", "ESM4", "volume")


def test_inspect_text_names_rows_contracts_and_splits(fixtures_dir, capsys):
    assert main(["inspect", str(fixtures_dir / "es_fut_ohlcv1m_databento.parquet")]) == 0
    out = capsys.readouterr().out
    for needle in ("68,239 rows read", "ESH4-ESM4", "train", "val", "2024-03-11 ESH4->ESM4 volume"):
        assert needle in out
    # times say their zone (UTC), which need not be the one the bars were read in (--timezone)
    assert "rows 2024-02-18T23:00 UTC .. 2024-03-15T20:59 UTC" in out and "train cut 2024-03-05T12:12 UTC" in out


def test_inspect_roll_confirm_moves_the_roll(fixtures_dir, capsys):
    """ESM4 out-trades ESH4 from Thu 03-07: one session of lead rolls on 03-08, the default two on Mon 03-11."""
    path = str(fixtures_dir / "es_fut_ohlcv1m_databento.parquet")
    assert main(["inspect", path, "--roll-confirm", "1", "--json"]) == 0
    assert [r["trade_date"] for r in json.loads(capsys.readouterr().out)["rolls"]] == ["2024-03-08"]
    assert main(["inspect", path, "--roll-confirm", "0"]) == 2
    assert "--roll-confirm must be at least 1" in capsys.readouterr().err


def test_inspect_a_file_too_short_for_one_window_says_how_many_bars_are_needed(fixtures_dir, capsys):
    code = main(["inspect", str(fixtures_dir / "es_fut_ohlcv1d_databento.parquet"), "--encoder-length", "64"])
    assert code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]  # earlier lines are the loader's progress log
    assert last.startswith("foxhunt: error:") and "needs 70 bars" in last and "--encoder-length" in last


def test_sample_writes_databento_parquet(tmp_path, capsys):
    out = tmp_path / "es.parquet"
    assert main(["sample", "--out", str(out)]) == 0
    bars = pl.read_parquet(out)
    assert bars.columns[-1] == "ts_event" and {"ESH4", "ESM4", "ESH4-ESM4"} <= set(bars["symbol"])
    assert capsys.readouterr().out.splitlines() == [str(out)] and not (tmp_path / "es.events.parquet").exists()


def test_sample_with_announcements_writes_the_events_beside_the_bars(tmp_path, capsys):
    out = tmp_path / "es.parquet"
    assert main(["sample", "--out", str(out), "--announcements"]) == 0
    events = tmp_path / "es.events.parquet"
    assert capsys.readouterr().out.splitlines() == [str(out), str(events)]
    table = pl.read_parquet(events)
    assert table.columns == ["ts", "name"] and set(table["name"]) == {"announcement"} and table.height == 16
    assert pl.read_parquet(out).height > 80_000


def test_plan_memory_prints_a_table_and_the_largest_batch(fixtures_dir, capsys):
    assert main(["plan-memory", "--parquet-file", str(fixtures_dir / "es_fut_ohlcv1h_databento.parquet"),
                 "--memory-budget", "256MiB", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "weights" in out and "largest training batch that fits" in out


def test_plan_memory_without_a_budget_plans_for_4_gib(fixtures_dir, capsys):
    """No --memory-budget: plan-memory's own default (cli/options.MEMORY_OPTIONS), through the plan `train` sizes
    its batches by (train/batch_sizes.budgeted_plan), less what the process holds outside the step on CPU."""
    assert main(["plan-memory", "--parquet-file", str(fixtures_dir / "es_fut_ohlcv1h_databento.parquet"),
                 "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "budget 4096 MiB" in out and "held outside the step" in out and "largest training batch that fits" in out


def test_memory_report_on_a_training_run(tmp_path, tiny, fixtures_dir, capsys):
    run = tmp_path / "run"
    assert main(["train", *tiny, "--parquet-file", str(fixtures_dir / "generic_ohlcv_daily.parquet"), "--epochs",
                 "1", "--memory-log-every", "2", "--validation-batch-size", "8", "--run-dir", str(run)]) == 0
    capsys.readouterr()
    assert main(["memory-report", str(run)]) == 0
    out = capsys.readouterr().out
    assert "val_batch" in out and (run / "memory.png").read_bytes()[:4] == b"\x89PNG"
