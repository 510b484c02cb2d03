"""`foxhunt export --format onnx`: the graph matches PyTorch, the sidecar is enough to use it, failures write nothing.

One tiny model is trained and exported once for the module (the export is the slow part: torch.export + onnxscript).
"""

from __future__ import annotations

import json
import shutil
import sys

import numpy as np
import pytest
import torch

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

from foxhunt.cli import main  # noqa: E402
from foxhunt.data.features.schema import Kind, Role  # noqa: E402
from foxhunt.export import onnx as onnx_export  # noqa: E402
from foxhunt.export.graph import ExportedForward  # noqa: E402
from foxhunt.export.parity import (  # noqa: E402
    MAX_RELATIVE_ERROR,
    ParityError,
    check_parity,
    random_cases,
    real_cases,
    relative_error,
)
from foxhunt.model.adaptive import Origins  # noqa: E402
from foxhunt.model.saved import load_model  # noqa: E402
from foxhunt.predict.origins import prepare_for_model  # noqa: E402
from foxhunt.train.calibrate import raw_quantiles  # noqa: E402


@pytest.fixture(scope="module")
def exported(tmp_path_factory, daily_path, tiny_flags):
    """(run dir, model.onnx, the export command's exit status and stdout lines) for a tiny daily model."""
    root = tmp_path_factory.mktemp("export")
    run, out = root / "run", root / "onnx" / "model.onnx"
    # series scaling: the sidecar test below unscales with its per-series table; volatility scaling (the default)
    # takes each bar's trailing volatility, whose recipe test_sidecar_scaling.py rebuilds from the sidecar alone.
    # Without an anchor: the graph of the model's own inputs, its calibration shifts in the sidecar (the default
    # anchored model's graph and sidecar: test_an_anchored_model_takes_its_anchor_as_an_input_...)
    assert main(["train", *tiny_flags, "--parquet-file", str(daily_path), "--epochs", "1", "--max-train-batches", "4",
                 "--scaling", "series", "--anchor", "none", "--run-dir", str(run)]) == 0
    code = main(["export", "--model", str(run), "--format", "onnx", "--out", str(out), "--parquet-file",
                 str(daily_path), "--threads", "1"])
    return run, out, code


@pytest.fixture(scope="module")
def data(exported, daily_path):
    return prepare_for_model(load_model(exported[0]), (str(daily_path),))


def test_export_writes_the_graph_and_its_sidecar(exported, capsys):
    run, out, code = exported
    assert code == 0
    side = json.loads(out.with_name("model.onnx.json").read_text())
    schema = load_model(run).schema
    known = [n for n in schema.names(Role.KNOWN, Kind.CONTINUOUS) if n != "relative_time"]
    inputs = {i["name"]: i for i in side["inputs"]}
    assert list(inputs) == ["static_cat", "encoder_cont", "decoder_cont"]  # the daily model has no other groups
    assert inputs["encoder_cont"]["shape"] == ["batch", 16, len(known) + len(schema.names(Role.OBSERVED, Kind.CONTINUOUS))]
    assert inputs["encoder_cont"]["channels"] == known + schema.names(Role.OBSERVED, Kind.CONTINUOUS)
    assert inputs["decoder_cont"]["channels"] == known and inputs["decoder_cont"]["dtype"] == "float32"
    assert inputs["static_cat"] == {"name": "static_cat", "dtype": "int64", "shape": ["batch", 1],
                                    "dynamic_axes": {"0": "batch"}, "channels": ["series"], "cardinality": [3]}
    assert side["omitted_inputs"] == ["static_cont", "encoder_cat", "decoder_cat", "anchor"]
    assert side["anchor"] is None  # trained with --anchor none
    assert side["output"]["shape"] == ["batch", 3, 3] and side["quantiles"] == [0.1, 0.5, 0.9]
    assert side["built_in"]["relative_time"]["values"][15] == 0.0  # the origin, last of 16 encoder steps
    assert set(side["features"]) == {c for i in side["inputs"] for c in i["channels"]}
    assert "m_0 = std^2 on the series' first bar (the seed itself" in side["features"]["log_vol"]
    assert side["parity"]["max_relative_error"] <= MAX_RELATIVE_ERROR
    assert [c["windows"] for c in side["parity"]["cases"]] == ["1 random", "256 random", "1 real", "256 real"]
    assert not list(out.parent.glob(".*.tmp"))


def test_onnx_matches_pytorch_on_random_and_real_windows_at_batch_1_and_256(exported, data):
    """The graph against the model's own forward: random inputs through the same wrapper, real windows through the
    foxhunt batch (shared bars, row indices), which the graph never sees."""
    run, out, _ = exported
    lm = load_model(run)
    ort_model = onnx_export.onnx_runtime_model(out)
    wrapper = onnx_export.torch_reference(ExportedForward(lm.model, lm.schema))
    for case in random_cases(lm.schema, seed=7):
        assert relative_error(ort_model.run(case.inputs), wrapper(case.inputs)) <= MAX_RELATIVE_ERROR, case.label
    ids = data.splits["test"]
    for pick in (ids[-1:], ids[-256:]):
        batch = data.windows.batch(pick)
        with torch.inference_mode():
            want = lm.model(batch).quantiles
        got = ort_model(batch)  # the callable takes the model's own Batch
        assert got.shape == (len(pick), 3, 3) and len(pick) in (1, 256)
        assert relative_error(got.numpy(), want.numpy()) <= MAX_RELATIVE_ERROR


def test_a_tied_quantile_head_exports_with_parity(exported, data, tmp_path):
    """The tied head (model/quantile_head.py; here the exported run's weights read by it: the same parameters) in
    the graph: `foxhunt export` checks parity on random and real windows itself; its output is in order."""
    run = tmp_path / "tied"
    shutil.copytree(exported[0], run, ignore=shutil.ignore_patterns("calibration.json"))
    meta = json.loads((run / "model.json").read_text())
    meta["model"]["quantile_head"] = "tied"
    (run / "model.json").write_text(json.dumps(meta))
    out = tmp_path / "tied.onnx"
    assert main(["export", "--model", str(run), "--out", str(out), "--threads", "1"]) == 0
    side = json.loads(out.with_name("tied.onnx.json").read_text())
    assert side["quantile_head"] == "tied" and side["parity"]["max_relative_error"] <= MAX_RELATIVE_ERROR
    batch = data.windows.batch(data.splits["test"][-256:])
    with torch.inference_mode():
        want = load_model(run).model(batch).quantiles
    got = onnx_export.onnx_runtime_model(out)(batch)
    assert relative_error(got.numpy(), want.numpy()) <= MAX_RELATIVE_ERROR and (got.diff(dim=-1) >= 0).all()


def test_the_sidecar_alone_turns_the_output_into_calibrated_forecasts(exported, data):
    """Unscale with the sidecar's per-series scalers and apply its shifts as it says, in numpy: the same forecasts
    as `foxhunt predict` makes (train/calibrate.raw_quantiles, then Calibration.apply)."""
    run, out, _ = exported
    side = json.loads(out.with_name("model.onnx.json").read_text())
    lm = load_model(run)
    batch = data.windows.batch(data.splits["test"][-64:])
    with torch.inference_mode():
        raw, _ = raw_quantiles(batch, lm.model(batch).quantiles)
    want = lm.calibration.apply(raw.numpy(), batch.target_scale.numpy())
    q = onnx_export.onnx_runtime_model(out)(batch).numpy().astype(np.float64)  # (B, D, Q) scaled
    vocab = side["series"]["vocabulary"]
    series = [vocab[c - 1] for c in batch.static_cat[:, 0].tolist()]
    target = [side["scaling"]["scalers"]["series"][s]["target"] for s in series]
    scale = np.array([t["scale"] for t in target])[:, None, None]
    center = np.array([t["center"] for t in target])[:, None, None]
    got = np.sort(q * scale + center, axis=-1) + np.asarray(side["calibration"]["shifts"])[None] * scale
    np.testing.assert_allclose(np.sort(got, axis=-1), want, rtol=1e-4, atol=1e-7)


def test_the_sidecar_words_keep_adaptive_shifts_as_foxhunt_does(exported, data):
    """Follow the sidecar's adaptive `how_to_update` in plain loops from its saved state, over every origin of one
    series: the calibrated forecasts of the adaptive Runner (model/adaptive.py), to float rounding."""
    run, out, _ = exported
    side = json.loads(out.with_name("model.onnx.json").read_text())["calibration"]
    lm = load_model(run)
    w = data.windows
    ids = data.splits["test"][w.series_index(data.splits["test"]) == 0]  # every origin of the first series
    name = w.series_names[0]
    batch = w.batch(ids)
    with torch.inference_mode():
        raw, _ = raw_quantiles(batch, lm.model(batch).quantiles)
    raw, scale = raw.numpy().astype(np.float64), batch.target_scale.numpy().astype(np.float64)
    origin, y = w.origin_ns(ids).numpy(), w.origin_target(ids).numpy().astype(np.float64)
    want = lm.adaptive.runner().correct(raw, scale, Origins(np.zeros(len(ids), int), [name], origin, y))
    a = side["adaptive"]
    rule, state = a["rule"], a["series"][name]
    c, wt = np.array(state["shifts"]), np.array(state["weights"])  # (K, D, Q)
    k_, d_, q_ = c.shape
    got = np.empty_like(raw)
    for n in range(len(ids)):
        if origin[n] > state["as_of_ns"]:
            for h in range(d_):
                if n - h - 1 < 0:
                    continue
                for j, tau in enumerate(rule["quantiles"]):
                    score = (y[n] - raw[n - h - 1, h, j]) / scale[n - h - 1]  # mode "scaled"
                    for k in range(k_):
                        u = score - c[k, h, j]
                        wt[k, h, j] *= np.exp(-rule["rate"] * max(tau * u, (tau - 1) * u) / rule["loss_scale"][h][j])
                        c[k, h, j] += rule["step"][k][h][j] * ((1 if u > 0 else 0) - (1 - tau))
                    wt[:, h, j] = (1 - rule["share"]) * wt[:, h, j] / wt[:, h, j].sum() + rule["share"] / k_
        shift = np.array(rule["start"]) if origin[n] < state["as_of_ns"] else (wt * c).sum(axis=0)
        got[n] = np.sort(raw[n] + shift * scale[n], axis=-1)
    assert rule["mode"] == "scaled" and (origin > state["as_of_ns"]).sum() > 10
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)
    assert side["default_method"] in ("adaptive", "fixed")


def test_relative_error_is_relative_above_one_scaled_unit_and_absolute_below():
    assert relative_error(np.array([1.0, 2.0 + 2e-5]), np.array([1.0, 2.0])) == pytest.approx(1e-5)
    assert relative_error(np.array([1e-3 + 5e-7]), np.array([1e-3])) == pytest.approx(5e-7)  # not 5e-4
    assert relative_error(np.array([np.nan]), np.array([0.0])) == float("inf")
    assert relative_error(np.zeros((1, 3)), np.zeros((2, 3))) == float("inf")


def test_a_graph_that_disagrees_fails_and_writes_nothing(exported, tmp_path, monkeypatch, capsys):
    """A graph whose weights differ from the model's (here: the exported file, checked against a model with one
    weight moved) stops `foxhunt export` with exit status 1 and one line; neither the .onnx nor its sidecar is
    written."""
    run, out, _ = exported

    def stale_graph(lm_, path):
        shutil.copyfile(out, path)
        moved = load_model(run).model
        with torch.no_grad():
            moved.output.bias += 1e-3
        return ExportedForward(moved, lm_.schema)

    monkeypatch.setattr(onnx_export, "export_graph", stale_graph)
    target = tmp_path / "bad.onnx"
    assert main(["export", "--model", str(run), "--out", str(target)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("foxhunt: error: the exported model disagrees with PyTorch on 1 random windows: max "
                          "relative error 0.001") and err.endswith(f"nothing was written to {target}")
    assert len(err.splitlines()) == 1 and list(tmp_path.iterdir()) == []
    case = random_cases(load_model(run).schema, batches=(2,))
    with pytest.raises(ParityError):
        check_parity(lambda x: np.zeros((2, 3, 3)), lambda x: np.ones((2, 3, 3)), case)


def test_export_names_the_extra_when_onnxruntime_is_missing(exported, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import fails as if not installed
    assert main(["export", "--model", str(exported[0]), "--out", str(tmp_path / "m.onnx")]) == 2
    err = capsys.readouterr().err
    assert "pip install 'foxhunt[onnx]'" in err and len(err.strip().splitlines()) == 1
    assert main(["export", "--model", str(exported[0]), "--format", "tflite", "--out", str(tmp_path / "m.onnx")]) == 2
    assert not list(tmp_path.iterdir())


def test_an_out_without_the_onnx_suffix_names_the_real_sidecar(exported, tmp_path, capsys):
    assert main(["export", "--model", str(exported[0]), "--out", str(tmp_path / "xnoext")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"foxhunt: error: --out {tmp_path / 'xnoext'}: name the file *.onnx, e.g. --out "
                   f"{tmp_path / 'xnoext.onnx'} (its sidecar is written next to it as xnoext.onnx.json)"]
    assert not list(tmp_path.iterdir())


def test_real_cases_take_the_last_window_and_up_to_256_spread(data):
    one, many = real_cases(data)
    assert one.batch == 1 and many.batch == min(256, len(data.splits["test"]))
    last = data.windows.batch(data.splits["test"][-1:])
    assert torch.equal(one.inputs["static_cat"], last.static_cat)


def test_an_anchored_model_takes_its_anchor_as_an_input_the_sidecar_says_how_to_compute(tmp_path, daily_path,
                                                                                        tiny_flags):
    """The default anchor (GARCH-t): the graph's seventh input is the anchor (B, D, Q), its parity holds on real windows, and
    the sidecar's fitted GARCH-t per series and formula give the anchor the model was fed, from the returns alone."""
    pytest.importorskip("arch")
    from foxhunt.data.baselines.anchor import scaled_quantiles
    from foxhunt.data.baselines.forecasts import GarchParams, garch_next_variance

    run, out = tmp_path / "run", tmp_path / "model.onnx"
    assert main(["train", *tiny_flags, "--parquet-file", str(daily_path), "--epochs", "1",  # the default anchor
                 "--run-dir", str(run)]) == 0
    assert main(["export", "--model", str(run), "--format", "onnx", "--out", str(out), "--parquet-file",
                 str(daily_path), "--threads", "1"]) == 0
    side = json.loads(out.with_name("model.onnx.json").read_text())
    inputs = {i["name"]: i for i in side["inputs"]}
    assert inputs["anchor"]["shape"] == ["batch", 3, 3]
    assert inputs["anchor"]["channels"] == ["anchor_q0.1", "anchor_q0.5", "anchor_q0.9"]
    assert side["parity"]["max_relative_error"] <= MAX_RELATIVE_ERROR and side["anchor"]["kind"] == "garch_t"
    lm = load_model(run)
    # what `--calibration auto` applies to this anchored model: the adaptive shifts only if they won on validation
    cal = side["calibration"]
    assert cal["default_method"] == ("adaptive" if cal["adaptive"]["fitted_on"]["beats_own"] else "none")
    assert cal["adaptive"]["fitted_on"]["start"] == "none" and not np.any(cal["adaptive"]["rule"]["start"])
    data = prepare_for_model(lm, (str(daily_path),))
    w = data.windows
    last = data.splits["test"][-1:]  # the last window: its series' newest origin
    origin = int(w._origin(last)[0])
    s = int(w.series_index(last)[0])
    rows = (w.series_idx == s).nonzero()[:, 0].numpy()
    r = w.target_raw.numpy()[rows[0]:origin + 1].astype(np.float64)
    r[0] = np.nan  # a series' first bar has no return
    p = GarchParams(**side["anchor"]["series"][w.series_names[s]])
    want = scaled_quantiles(p, garch_next_variance(r, p)[-1:], w.center.numpy()[origin:origin + 1],
                            w.scale.numpy()[origin:origin + 1], 3, side["quantiles"])
    np.testing.assert_allclose(w.batch(last).anchor.numpy(), want, rtol=1e-5, atol=1e-6)
