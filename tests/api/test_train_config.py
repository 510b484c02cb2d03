"""foxhunt.RunConfig / foxhunt.train: built from `foxhunt train`'s option names exactly as the flags build them,
validated once, and the package's public surface."""

from __future__ import annotations

import dataclasses
import importlib
import json
import subprocess
import sys

import pytest

import foxhunt
from foxhunt.data.config import DataConfig
from foxhunt.model.config import ModelConfig
from foxhunt.train.config import TrainConfig

README_OPTIONS = {"parquet_file": "bars.parquet", "run_dir": "runs/py", "epochs": 1, "hidden_size": 8,
                  "attention_heads": 2, "encoder_length": 16, "horizon": 3}


def test_from_options_is_what_the_run_saved(readme_run, monkeypatch):
    """The run saves the options as given, the files they name absolute (read from any directory)."""
    saved = json.loads((readme_run["run"].run_dir / "config.json").read_text())
    monkeypatch.chdir(readme_run["cwd"])  # where the page ran: its relative paths resolve there
    cfg = foxhunt.RunConfig.from_options(**README_OPTIONS)
    assert {**cfg.to_dict(), "data": cfg.data.with_absolute_paths().to_dict()} == {
        k: saved[k] for k in ("data", "model", "train")}
    assert saved["data"]["paths"] == [str(readme_run["cwd"] / "bars.parquet")]
    assert cfg.model.encoder_length == cfg.data.encoder_length == 16 and cfg.training.epochs == 1


def test_options_are_checked_once_with_errors_naming_them():
    with pytest.raises(foxhunt.InputError, match="unknown option.*hiden_size"):
        foxhunt.RunConfig.from_options(hiden_size=8)
    with pytest.raises(foxhunt.InputError, match="--hidden-size must be positive"):
        foxhunt.RunConfig.from_options(parquet_file="x.parquet", hidden_size=0)
    with pytest.raises(foxhunt.InputError, match="encoder 32 / horizon 5 differ from the data's 16 / 5"):
        foxhunt.RunConfig(DataConfig(paths=("x",), encoder_length=16), ModelConfig(), TrainConfig())
    cfg = foxhunt.RunConfig.from_options(parquet_file="x.parquet")
    with pytest.raises(foxhunt.InputError, match=r"not both \(got epochs\); .*RunConfig.from_options\(\.\.\., epochs=\.\.\.\)"):
        foxhunt.fit(cfg, epochs=2)  # where a training option goes with a RunConfig
    with pytest.raises(foxhunt.InputError, match="--resume needs --run-dir"):
        foxhunt.fit(resume=True, epochs=2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.data = DataConfig()  # type: ignore[misc]


def test_public_surface_is_all_and_import_is_cheap():
    assert set(foxhunt.__all__) == {"Forecaster", "InputError", "Run", "RunConfig", "__version__", "fit"}
    assert all(getattr(foxhunt, name) is not None for name in foxhunt.__all__)
    importlib.import_module("foxhunt.train.session")  # importing the training package leaves the function alone
    assert callable(foxhunt.fit)
    code = "import sys, foxhunt; print('torch' in sys.modules, 'polars' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_foxhunt_train_is_the_package_and_fit_the_function() -> None:
    """One name, one thing: `foxhunt.train` is the training package, `foxhunt.fit` the function that trains."""
    import types

    import foxhunt.train.loop  # noqa: F401  (binds the package to the attribute)

    assert isinstance(foxhunt.train, types.ModuleType) and not callable(foxhunt.train)
    assert callable(foxhunt.fit) and foxhunt.fit.__module__ == "foxhunt.api.training"
