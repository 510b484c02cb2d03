"""--init-from RUN (train/init_from.py): which of RUN's weights a new model starts from, category rows matched by
name, and the one-line refusals."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from foxhunt.data.config import DataConfig
from foxhunt.data.features.schema import Feature, Kind, Role
from foxhunt.errors import InputError
from foxhunt.model.config import ModelConfig
from foxhunt.model.saved import save_model_json, save_weights, state_to_cpu
from foxhunt.model.tft import TemporalFusionTransformer
from foxhunt.train.init_from import init_weights, source_model

CFG = ModelConfig(hidden_size=8, attention_heads=2, encoder_length=16, horizon=3)


@pytest.fixture(scope="module")
def source(tmp_path_factory, daily_path):
    """(run directory, prepared data) of a tiny untrained model saved as training saves one, on the daily fixture
    (series ES and NQ): what --init-from reads does not depend on training."""
    from foxhunt.data.prepare import prepare_data

    data = prepare_data(DataConfig(paths=(str(daily_path),), encoder_length=16, horizon=3))
    torch.manual_seed(0)
    model = TemporalFusionTransformer(data.schema.sizes, CFG)
    run = tmp_path_factory.mktemp("source")
    save_model_json(run / "model.json", CFG, data.schema, data.transform, data.transform.data, 0)
    save_weights(run / "model.safetensors", state_to_cpu(model))
    return run, data


def with_series(data, vocab: tuple[str, ...]):
    """The prepared data's schema and transform as if its series were `vocab`."""
    transform = dataclasses.replace(data.transform, series_vocab=vocab)
    features = tuple(dataclasses.replace(f, cardinality=len(vocab) + 1) if f.name == "series" else f
                     for f in data.schema.features)
    return dataclasses.replace(data.schema, features=features), transform


def test_every_weight_is_taken_and_series_rows_are_matched_by_name(source) -> None:
    run, data = source
    assert data.transform.series_vocab == ("ES", "NQ")
    schema, transform = with_series(data, ("NQ", "CL"))  # NQ known there (code 2), CL new
    src = source_model(str(run), CFG)
    torch.manual_seed(1)
    model = TemporalFusionTransformer(schema.sizes, CFG)
    transfer = init_weights(model, schema, transform, src, str(run))
    mine, theirs = model.state_dict(), src.model.state_dict()
    table = theirs["static_cat.table.weight"]  # (3, H): unknown, ES, NQ
    assert torch.equal(mine["static_cat.table.weight"], table[[0, 2, 0]])  # unknown, NQ, CL from unknown
    for name, tensor in mine.items():
        if name != "static_cat.table.weight":
            assert torch.equal(tensor, theirs[name]), name
    n = sum(t.numel() for t in mine.values())
    assert (transfer.taken, transfer.total, transfer.fresh) == (n, n, ())
    assert (transfer.known, transfer.new) == ({"series": 1}, {"series": ("CL",)})
    assert transfer.line() == (f"--init-from {run}: all {n:,} weights from its model; series: 1 known there, 1 new "
                               "(CL) starting from its unknown row; scalers and calibration fitted here")


def test_a_tensor_without_its_shape_there_stays_as_drawn_and_is_named(source) -> None:
    run, data = source
    src = source_model(str(run), CFG)
    other = TemporalFusionTransformer(data.schema.sizes, dataclasses.replace(CFG, quantiles=(0.1, 0.9)))
    torch.manual_seed(1)
    model = TemporalFusionTransformer(data.schema.sizes, CFG)
    drawn = {k: v.clone() for k, v in model.state_dict().items()}
    transfer = init_weights(model, data.schema, data.transform, dataclasses.replace(src, model=other), str(run))
    assert transfer.fresh == ("output.weight", "output.bias")
    assert torch.equal(model.state_dict()["output.weight"], drawn["output.weight"])
    assert transfer.taken == transfer.total - drawn["output.weight"].numel() - drawn["output.bias"].numel()
    assert "drawn fresh (no counterpart there)" in transfer.line()


@pytest.mark.parametrize(("change", "line"), [
    ({"hidden_size": 16}, "another architecture (hidden size 8 there, 16 here); train with --hidden-size 8 to start "
                          "from it, or without --init-from"),
    ({"attention_heads": 4, "horizon": 5}, "another architecture (attention heads 2 there, 4 here, horizon 3 there, "
                                           "5 here); train with --attention-heads 2 --horizon 3 to start from it, "
                                           "or without --init-from"),
    ({"quantiles": (0.05, 0.5, 0.95)}, "another architecture (quantiles 0.1,0.5,0.9 there, 0.05,0.5,0.95 here); "
                                       "train with --quantiles 0.1,0.5,0.9 to start from it, or without --init-from"),
])
def test_another_architecture_is_refused_in_one_line_naming_it(source, change, line) -> None:
    run, _ = source
    with pytest.raises(InputError) as e:
        source_model(str(run), dataclasses.replace(CFG, **change))
    assert str(e.value) == f"--init-from {run}: {line}"


def test_a_directory_that_is_not_a_run_is_refused(tmp_path) -> None:
    with pytest.raises(InputError, match=r"model.json: not found; --init-from must be a run directory written by"):
        source_model(str(tmp_path), CFG)
    (tmp_path / "file").write_text("x")
    with pytest.raises(InputError, match=r"^--init-from \S+file: not a directory; point --init-from at a run"):
        source_model(str(tmp_path / "file"), CFG)


def test_other_inputs_or_another_target_are_refused_naming_them(source) -> None:
    run, data = source
    src = source_model(str(run), CFG)
    vix = Feature("vix", Role.OBSERVED, Kind.CONTINUOUS)
    schema = dataclasses.replace(data.schema, features=(*(f for f in data.schema.features if f.name != "log_volume"),
                                                        vix))
    model = TemporalFusionTransformer(schema.sizes, CFG)
    with pytest.raises(InputError) as e:
        init_weights(model, schema, data.transform, src, str(run))
    assert str(e.value) == (f"--init-from {run}: its observed continuous inputs differ from this run's (only there: "
                            "log_volume; only here: vix); give this run the same inputs (--observed, --vol-features, "
                            "--calendar-features, --seasonality as RUN had them) or train without --init-from")
    ranges = dataclasses.replace(data.schema, target="log_range")
    with pytest.raises(InputError, match=r"its target is log_return, this run's log_range; train with --target "
                                         r"log_return to start from it, or without --init-from$"):
        init_weights(TemporalFusionTransformer(ranges.sizes, CFG), ranges, data.transform, src, str(run))


def test_a_resumed_run_refuses_an_init_from_it_did_not_start_from(tmp_path) -> None:
    """--resume continues from the checkpoint's weights: the RUN the run started from is accepted again (it is what
    the saved configuration holds), any other RUN, or one given to a run started without it, is refused."""
    import json

    from foxhunt.train.init_from import check_resumed, saved_transfer
    from foxhunt.train.run_dir import RunDir

    run = RunDir(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"init_from": {"run": "runs/panel"}}))
    check_resumed(saved_transfer(run), "runs/panel")
    check_resumed(saved_transfer(run), None)
    with pytest.raises(InputError, match=r"^--init-from cannot change when resuming \(the run was started from "
                                         r"runs/panel\)"):
        check_resumed(saved_transfer(run), "runs/other")
    (tmp_path / "config.json").write_text(json.dumps({"init_from": None}))
    with pytest.raises(InputError, match=r"\(the run was started without it\); drop it"):
        check_resumed(saved_transfer(run), "runs/panel")
