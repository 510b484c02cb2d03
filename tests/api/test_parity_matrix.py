"""One forecast, every form that computes it: the training model's forward on the windows of the in-memory pipeline
is the reference, and each other form must give its inputs or its forecasts.

On the README's tiny model (tests/api/conftest.py, trained once for the folder) and the daily fixture (ES, NQ):
- batches: the windows `foxhunt train` builds (prepare_data: the scalers fitted again) equal the in-memory
  pipeline's (predict/origins.prepare_for_model: the model's scalers), input for input;
- store: the windows of a feature store (`foxhunt prepare`, read back memory-mapped) equal them too;
- predict: `Forecaster.predict` gives the model's forecasts of the live windows;
- update: the stream (data/features/bar_features_live.py, primed on all but the last bar, then one `update`) gives
  the live windows' inputs and forecasts;
- folded, trace, onnx: model/inference/ (the folded weights, their frozen trace, onnxruntime on the dense live
  windows) give the training model's forecasts of the same live batch.
The forecast forms run again on a model trained with the tied quantile head (`--quantile-head tied`, without an
anchor), and on one trained with `--anchor garch_t` (as the README's is, by default).
Tolerances are those of the tests each form had on its own: exact for the inputs of the batch pipelines, float32
rounding of the forecasts (tests/api/test_forecaster.py) for predict and update, and of the forward
(tests/model/test_inference.py) for the inference forms.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest
import torch

import foxhunt
from foxhunt.data.dataset.types import PreparedData
from foxhunt.data.prepare import prepare_data
from foxhunt.model.inference.folded import InferenceTFT
from foxhunt.model.inference.traced import OnnxForward, TracedForward
from foxhunt.model.saved import load_model
from foxhunt.predict.origins import _transform_text, live_origins, prepare_for_model, store_for_model
from foxhunt.train.calibrate import forecast_windows, mean_pinball, raw_quantiles
from tests.api.test_forecaster import Q, assert_same_forecasts
from tests.model.test_inference import assert_matches_model


@pytest.fixture(scope="module")
def world(readme_run, daily_path) -> SimpleNamespace:
    return make_world(readme_run["run"].run_dir, daily_path)


def with_model_json(run_dir: Path, dest: Path, change: Callable[[dict], None], calibration: bool = True) -> Path:
    """A copy of the run in `dest` whose model.json's "model" is changed by `change`, without calibration.json
    unless `calibration`."""
    shutil.copytree(run_dir, dest, ignore=None if calibration else shutil.ignore_patterns("calibration.json"))
    meta = json.loads((dest / "model.json").read_text())
    change(meta["model"])
    (dest / "model.json").write_text(json.dumps(meta))
    return dest


@pytest.fixture(scope="module")
def tied_world(daily_path, tmp_path_factory) -> SimpleNamespace:
    """A tiny model trained with the tied quantile head (model/quantile_head.py), which `--anchor auto` leaves
    without an anchor: forecasts every form must reproduce through the tied head's own arithmetic."""
    run = tmp_path_factory.mktemp("tied") / "run"
    foxhunt.fit(parquet_file=str(daily_path), quantile_head="tied", epochs=1, hidden_size=8, attention_heads=2,
                encoder_length=16, horizon=3, run_dir=str(run), progress=False, threads=1)
    return make_world(run, daily_path)


def make_world(run_dir: Path, daily_path: Path) -> SimpleNamespace:
    """The model, the bars, the in-memory pipeline's data and its live batch with the training model's forecasts."""
    lm = load_model(run_dir)
    memory = prepare_for_model(lm, (str(daily_path),))
    live = live_origins(memory)  # (S,) each series' window at its last bar
    batch = memory.windows.batch(live)
    with torch.inference_mode():
        scaled = lm.model.eval()(batch).quantiles  # (S, D, Q)
    names = [memory.windows.series_names[i] for i in memory.windows.series_index(live).tolist()]
    bars = pl.read_parquet(daily_path).sort("symbol", "timestamp")
    cfg = dataclasses.replace(lm.data_cfg, paths=(str(daily_path),), features=None)
    return SimpleNamespace(run_dir=run_dir, lm=lm, memory=memory, batch=batch, scaled=scaled, names=names, bars=bars,
                           cfg=cfg, raw=raw_quantiles(batch, scaled)[0].numpy())


def last_windows(data: PreparedData) -> dict[tuple[str, int], int]:
    """(series, origin ns) -> window id of each series' last window with its targets (a store has no later one)."""
    w = data.windows
    ids = torch.arange(w.n_windows)
    ids = ids[~torch.isnan(w.actual(ids)).any(dim=1)]  # (W',) windows whose forecast bars are real
    series = w.series_index(ids)
    last = torch.ones(len(ids), dtype=torch.bool)
    last[:-1] = series[1:] != series[:-1]
    ids = ids[last]
    return {(w.series_names[s], int(t)): int(i) for s, t, i in zip(w.series_index(ids).tolist(),
                                                                  w.origin_ns(ids).tolist(), ids.tolist(), strict=True)}


def assert_same_windows(world: SimpleNamespace, other: PreparedData) -> None:
    """`other`'s last windows of each series: the same inputs and targets as the in-memory pipeline's windows at the
    same origins, exactly, hence the same forecasts."""
    theirs = last_windows(other)
    mine = _windows_at(world.memory, theirs)
    assert len(theirs) == len(world.names) and mine.keys() == theirs.keys()
    keys = sorted(theirs)
    a = other.windows.batch(torch.tensor([theirs[k] for k in keys]))
    b = world.memory.windows.batch(torch.tensor([mine[k] for k in keys]))
    for name, value in a.dense().items():
        torch.testing.assert_close(value, b.dense()[name], rtol=0, atol=0, msg=name)
    for name in ("static_cat", "target", "target_center", "target_scale"):
        torch.testing.assert_close(getattr(a, name), getattr(b, name), rtol=0, atol=0, equal_nan=True, msg=name)
    with torch.inference_mode():
        torch.testing.assert_close(world.lm.model(a).quantiles, world.lm.model(b).quantiles, rtol=0, atol=0)


def _windows_at(data: PreparedData, keys: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
    """The window ids of `data` whose (series, origin ns) are in `keys`."""
    w = data.windows
    ids = torch.arange(w.n_windows)
    at = zip(w.series_index(ids).tolist(), w.origin_ns(ids).tolist(), strict=True)
    return {k: i for i, k in enumerate((w.series_names[s], int(t)) for s, t in at) if k in keys}


def check_batches(world: SimpleNamespace, tmp_path) -> None:
    train = prepare_data(world.cfg)  # as `foxhunt train` prepares it: the scalers fitted on the training split
    assert _transform_text(train.transform) == _transform_text(world.lm.transform)
    assert_same_windows(world, train)


def check_store(world: SimpleNamespace, tmp_path) -> None:
    from foxhunt.data.prepare.entry import prepare_store

    prepare_store(world.cfg, tmp_path / "store", workers=1)
    assert_same_windows(world, store_for_model(world.lm, tmp_path / "store"))


def _by_symbol(frame: pl.DataFrame, names: list[str]) -> np.ndarray:
    """(S, D, Q) the quantile columns of forecast rows, series in `names` order."""
    return np.stack([frame.filter(pl.col("symbol") == n).sort("horizon").select(Q).to_numpy() for n in names])


def check_predict(world: SimpleNamespace, tmp_path) -> None:
    got = foxhunt.Forecaster.load(world.run_dir).predict(world.bars, calibrated=False)
    assert_same_forecasts(_by_symbol(got, world.names), world.raw)


def check_update(world: SimpleNamespace, tmp_path) -> None:
    bars = world.bars
    history = bars.group_by("symbol", maintain_order=True).agg(pl.all().slice(0, pl.len() - 1)).explode(
        pl.exclude("symbol")).select(bars.columns)
    fc = foxhunt.Forecaster.load(world.run_dir)
    fc.predict(history)
    got = fc.update(bars.group_by("symbol", maintain_order=True).tail(1), calibrated=False)
    assert_same_forecasts(_by_symbol(got, world.names), world.raw)
    stream = fc.batch([fc._stream.index[n] for n in world.names])  # the live windows' inputs, from the state
    want = world.batch.dense()
    for name, value in stream.dense().items():
        np.testing.assert_allclose(value.numpy(), want[name].numpy(), rtol=1e-6, atol=1e-6, err_msg=name)


def check_folded(world: SimpleNamespace, tmp_path) -> None:
    fast = InferenceTFT(world.lm.model)
    with torch.inference_mode():
        assert_matches_model(world.lm.model, world.batch, fast(world.batch))


def check_trace(world: SimpleNamespace, tmp_path) -> None:
    traced = TracedForward(world.lm.model)
    with torch.inference_mode():
        got = traced(world.batch)
    assert len(traced.traces) == 1 and not traced.failed
    assert_matches_model(world.lm.model, world.batch, got)


def check_onnx(world: SimpleNamespace, tmp_path) -> None:
    pytest.importorskip("onnxruntime")
    b, cfg = world.batch, world.lm.data_cfg
    fwd = OnnxForward(world.lm.model, cfg.encoder_length, cfg.horizon)
    codes, enc, dec = b.static_cat[:, 0].numpy(), b.enc_cont[b.enc_index].numpy(), b.dec_cont[b.dec_index].numpy()
    anchor = {} if b.anchor is None else {"anchor": b.anchor.numpy()}  # an anchored model's fourth input
    got = fwd(codes, enc, dec, **anchor)  # (S, D, Q) from the dense live windows
    assert len(fwd.sessions) == 1 and not fwd.failed
    assert_matches_model(world.lm.model, b, torch.from_numpy(got))


FORMS: dict[str, Callable[[SimpleNamespace, object], None]] = {
    "batches": check_batches, "store": check_store, "predict": check_predict, "update": check_update,
    "folded": check_folded, "trace": check_trace, "onnx": check_onnx,
}


@pytest.mark.parametrize("form", list(FORMS))
def test_every_form_gives_the_in_memory_pipelines_windows_and_the_models_forecasts(form, world, tmp_path):
    FORMS[form](world, tmp_path)


@pytest.mark.parametrize("form", [f for f in FORMS if f not in ("batches", "store")])  # the head is not in them
def test_every_form_gives_a_tied_heads_forecasts(form, tied_world, tmp_path):
    assert tied_world.lm.model_cfg.quantile_head == "tied" and not tied_world.lm.model_cfg.anchored
    assert (np.diff(tied_world.scaled.numpy(), axis=-1) >= 0).all()  # in order before any sorting
    FORMS[form](tied_world, tmp_path)


def test_a_model_saved_before_the_quantile_head_option_forecasts_as_it_did(world, tmp_path):
    """model.json without `quantile_head` (written before the option) reads as the independent head, the only one
    there was, and gives the same forecasts, calibrated ones included, bit for bit."""
    old = with_model_json(Path(world.run_dir), tmp_path / "old", lambda m: m.pop("quantile_head"))
    lm = load_model(old)
    assert lm.model_cfg.quantile_head == "independent" and type(lm.model.output) is torch.nn.Linear
    with torch.inference_mode():
        torch.testing.assert_close(lm.model(world.batch).quantiles, world.scaled, rtol=0, atol=0)
    want = foxhunt.Forecaster.load(world.run_dir).predict(world.bars)
    assert want.equals(foxhunt.Forecaster.load(old).predict(world.bars))


@pytest.fixture(scope="module")
def anchored_world(daily_path, tmp_path_factory) -> SimpleNamespace:
    """A tiny model trained with `--anchor garch_t` on the daily fixture (each series' GARCH-t fitted on its ~180
    training returns): every form must add the same anchor to the same correction."""
    pytest.importorskip("arch")
    run = tmp_path_factory.mktemp("anchored") / "run"
    foxhunt.fit(parquet_file=str(daily_path), anchor="garch_t", epochs=2, hidden_size=8, attention_heads=2,
                encoder_length=16, horizon=3, run_dir=str(run), progress=False, threads=1)
    world = make_world(run, daily_path)
    assert set(world.lm.transform.anchor.params) == {"ES", "NQ"}  # both series fitted, none on the fallback
    return world


@pytest.mark.parametrize("form", ["batches", "store", "predict", "update", "folded", "trace", "onnx"])
def test_every_form_gives_an_anchored_models_forecasts(form, anchored_world, tmp_path):
    assert anchored_world.batch.anchor is not None and anchored_world.lm.model_cfg.anchored
    FORMS[form](anchored_world, tmp_path)


def test_an_untrained_anchored_model_forecasts_its_anchor(anchored_world):
    """The correction starts at zero: a model of the same shapes, untrained, gives the batch's anchor (to 1e-6)."""
    from foxhunt.model.tft import TemporalFusionTransformer

    lm = anchored_world.lm
    fresh = TemporalFusionTransformer(lm.schema.sizes, lm.model_cfg).eval()
    with torch.inference_mode():
        got = fresh(anchored_world.batch).quantiles
    torch.testing.assert_close(got, anchored_world.batch.anchor, rtol=0, atol=1e-6)
    assert not torch.allclose(anchored_world.scaled, anchored_world.batch.anchor, atol=1e-3)  # training moved it


def test_an_anchored_runs_adaptive_shifts_start_at_its_own_quantiles_and_auto_follows_their_validation_loss(
        anchored_world):
    """train/calibrate.py: the trackers start at zero shift (the model's own quantiles) and their run through
    validation, each shift from earlier outcomes only, is scored against those quantiles; the default applies the
    adaptive shifts only where they scored lower."""
    lm, data = anchored_world.lm, prepare_data(anchored_world.cfg)  # as `foxhunt train` prepared it: its splits
    fit = lm.adaptive.fitted_on
    assert fit["start"] == "none" and not lm.adaptive.rule.start.any()
    y, q, _, _ = forecast_windows(lm.model, data.windows, data.splits["val"], 256, torch.device("cpu"))
    losses = fit["validation_pinball"]
    np.testing.assert_allclose(losses["own"], mean_pinball(y, q, lm.model_cfg.quantiles), rtol=1e-5)
    assert losses["adaptive"] != losses["own"] and fit["beats_own"] == (sum(losses["adaptive"]) < sum(losses["own"]))
    assert lm.resolved_method("auto") == ("adaptive" if fit["beats_own"] else "none")


def test_an_anchored_run_validates_its_anchor_first_as_epoch_0(anchored_world):
    """metrics.jsonl starts with epoch 0: the untrained model (its anchor) validated and kept as the best so far, so
    that early stopping can only end on weights better than the baseline on validation (train/loop.py)."""
    records = [json.loads(line) for line in (Path(anchored_world.run_dir) / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in records] == [0, 1, 2]
    first = records[0]
    assert first["train_loss"] is None and first["best"] and first["train_samples"] == 0
    best = min(records, key=lambda r: r["val_loss"])
    assert json.loads((Path(anchored_world.run_dir) / "config.json").read_text())["data"]["anchor"] == "garch_t"
    assert best["best"]
