"""The feature store: every PreparedData field round-trips exactly, its arrays stay memory-mapped, and its
fingerprint names the option or file that differs."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
from pathlib import Path

import pytest
import torch

from foxhunt.data.config import DataConfig
from foxhunt.data.dataset.saved_format import FORMAT_VERSION
from foxhunt.data.prepare import prepare_data, prepare_store
from foxhunt.data.store import (
    open_features,
    open_store,
    read_manifest,
    store_data_config,
    write_store,
)
from foxhunt.data.store.fingerprint import changed_inputs
from foxhunt.data.store.layout import WINDOW_ARRAYS, WINDOW_FIELDS
from foxhunt.errors import InputError


@pytest.fixture(scope="module")
def prepared(fixtures_dir, tmp_path_factory):
    """Hourly bars of three contracts rolled into one series, and their store (written with a known_index table,
    the optional array)."""
    cfg = DataConfig(paths=(str(fixtures_dir / "es_fut_ohlcv1h_databento.parquet"),), encoder_length=16, horizon=3)
    data = prepare_data(cfg)
    w = data.windows
    steps = torch.arange(w.horizon, dtype=torch.int64)
    data.windows = dataclasses.replace(w, known_index=(w.known_base[:, None] + steps).to(torch.int32))  # (N, D)
    store = tmp_path_factory.mktemp("store") / "es"
    write_store(data, cfg, store)
    return cfg, data, store


def _bits(t: torch.Tensor | None) -> tuple | None:
    if t is None:  # an optional array the data have not (the anchor, without --anchor)
        return None
    return t.dtype, tuple(t.shape), t.numpy().tobytes()  # bitwise: NaN targets beyond the data compare equal


def test_every_prepared_field_round_trips_exactly(prepared):
    cfg, data, store = prepared
    back = open_store(store)
    for name in WINDOW_ARRAYS:
        assert _bits(getattr(back.windows, name)) == _bits(getattr(data.windows, name)), name
    for name in WINDOW_FIELDS:
        assert getattr(back.windows, name) == getattr(data.windows, name), name
    assert {k: _bits(v) for k, v in back.splits.items()} == {k: _bits(v) for k, v in data.splits.items()}
    assert back.schema == data.schema
    assert back.transform == dataclasses.replace(data.transform, data=dataclasses.replace(cfg, features=str(store)))
    assert back.summary == data.summary
    assert back.rolls == data.rolls and back.rolls  # the roll table, ESH4 -> ESM4
    assert back.own_moves.keys() == data.own_moves.keys() == {"log_range"}
    assert back.own_moves["log_range"].tobytes() == data.own_moves["log_range"].tobytes()
    ids = data.splits["val"][:7]
    assert _bits(back.windows.batch(ids).enc_cont) == _bits(data.windows.batch(ids).enc_cont)


def test_the_manifest_holds_the_digest_of_the_prepared_data(prepared):
    """Computed once as the store is written, equal to the digest of the data in memory and of the data mapped back:
    `train --features` reads it from the manifest instead of reading every page of the store."""
    from foxhunt.train.resume import prepared_digest

    _, data, store = prepared
    digest = read_manifest(store)["digest"]
    assert digest == prepared_digest(data) == prepared_digest(open_store(store))
    assert len(digest) == 64


def test_arrays_stay_mapped_from_the_store_files(prepared):
    _, _, store = prepared
    back = open_store(store)
    maps = Path("/proc/self/maps").read_text()
    for name in ("cont", "target_raw", "starts", "known_index"):
        assert str((store / f"{name}.npy").resolve()) in maps, name
    back.windows.cont[0, 0] += 1.0  # copy-on-write: the process's page changes, never the file
    assert _bits(open_store(store).windows.cont) != _bits(back.windows.cont)


@pytest.mark.parametrize("grid", ["known_index", "known_base"])
def test_a_batch_of_the_store_equals_the_prepared_batch(prepared, grid):
    _, data, store = prepared
    back, want = open_store(store), data.windows
    if grid == "known_base":  # the grid as one lattice: forecast steps at base + k
        back.windows.known_index, want = None, dataclasses.replace(want, known_index=None)
    for ids in (data.splits["train"][[40, 3, 41, 200, 3, 90]], data.splits["val"], data.splits["test"][::7]):
        batch, expected = back.windows.batch(ids), want.batch(ids)
        for field in dataclasses.fields(batch):
            assert _bits(getattr(batch, field.name)) == _bits(getattr(expected, field.name)), field.name


def test_the_manifest_records_the_options_and_input_files(prepared, fixtures_dir):
    cfg, _, store = prepared
    manifest = read_manifest(store)
    assert manifest["data_options"]["encoder_length"] == 16 and manifest["data_options"]["horizon"] == 3
    assert "paths" not in manifest["data_options"] and manifest["paths"] == list(cfg.paths)
    path = fixtures_dir / "es_fut_ohlcv1h_databento.parquet"
    assert manifest["inputs"] == [{"path": str(path), "size_bytes": path.stat().st_size,
                                   "mtime_ns": path.stat().st_mtime_ns}]
    back = store_data_config(store, {"horizon": 3, "epochs": 9})  # the same value, and a non-data option: fine
    assert back == dataclasses.replace(cfg, features=str(store))


def test_other_data_options_are_refused_with_one_line(prepared):
    cfg, _, store = prepared
    with pytest.raises(InputError) as e:
        store_data_config(store, {"horizon": 7})
    assert str(e.value) == (f"--horizon 7 differs from the feature store {store}, prepared with --horizon 3; drop "
                            "--horizon to use the store as prepared, or run `foxhunt prepare` with --horizon 7 into "
                            "a new store")
    with pytest.raises(InputError, match="^--train-end 2024-03-01 differs .* prepared with no --train-end;"):
        store_data_config(store, {"train_end": "2024-03-01"})
    with pytest.raises(InputError, match="^--no-seasonality differs .* prepared with --seasonality;"):
        open_features(dataclasses.replace(cfg, seasonality=False, features=str(store)))


def test_changed_inputs_name_a_modified_or_missing_file(tmp_path):
    f = tmp_path / "bars.parquet"
    f.write_bytes(b"1234")
    st = f.stat()
    inputs = [{"path": str(f), "size_bytes": 4, "mtime_ns": st.st_mtime_ns},
              {"path": str(tmp_path / "gone.parquet"), "size_bytes": 1, "mtime_ns": 5}]
    assert changed_inputs(inputs) == [f"{tmp_path / 'gone.parquet'} (gone)"]
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert changed_inputs(inputs)[0] == f"{f} (modified)"


def test_prepare_replaces_a_store_but_nothing_else(prepared, tmp_path):
    cfg, _, _ = prepared
    taken = tmp_path / "notes"
    taken.mkdir()
    with pytest.raises(InputError, match="exists and is not a feature store"):
        prepare_store(cfg, taken)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "manifest.json").write_text(json.dumps({"format": "other"}))
    with pytest.raises(InputError, match="not a foxhunt-feature-store manifest"):
        open_store(bad)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary directory left


@pytest.mark.parametrize("change", [lambda m: m.pop("format_version"), lambda m: m.update(format_version=1)],
                         ids=["removed", "older"])
def test_a_store_of_another_format_is_refused_in_one_line(prepared, tmp_path, change):
    _, _, store = prepared
    other = Path(shutil.copytree(store, tmp_path / "other"))
    manifest = json.loads((other / "manifest.json").read_text())
    assert manifest["format_version"] == FORMAT_VERSION
    change(manifest)
    (other / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(InputError) as e:
        open_store(other)
    found = "no format_version" if "format_version" not in manifest else "format_version 1"
    assert str(e.value).startswith(f"{other / 'manifest.json'}: {found} (written by foxhunt ")
    assert str(e.value).endswith("prepare the store again with this foxhunt (`foxhunt prepare`)")
    assert "\n" not in str(e.value)


def test_a_changed_input_file_warns_and_the_store_still_opens(daily_path, tmp_path, caplog):
    bars = tmp_path / "bars.parquet"
    shutil.copy(daily_path, bars)
    cfg = DataConfig(paths=(str(bars),), encoder_length=16, horizon=3)
    prepare_store(cfg, tmp_path / "store")
    st = bars.stat()
    os.utime(bars, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    logger = logging.getLogger("foxhunt.data")  # its own handler: the CLI stops `foxhunt` propagating to the root
    logger.addHandler(caplog.handler)
    try:
        data = open_features(dataclasses.replace(cfg, features=str(tmp_path / "store")))
    finally:
        logger.removeHandler(caplog.handler)
    warned = {r.getMessage() for r in caplog.records if r.levelno == logging.WARNING}
    assert len(warned) == 1, warned
    assert f"{bars} (modified)" in warned.pop()
    assert data.windows.n_rows == 600
