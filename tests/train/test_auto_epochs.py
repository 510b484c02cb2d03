"""--epochs auto (the default): the epoch cap from the number of training windows, with early stopping inside."""

import pytest

from foxhunt.errors import InputError
from foxhunt.settings import train_config
from foxhunt.train.config import (
    AUTO_EPOCH_WINDOWS,
    MAX_AUTO_EPOCHS,
    MIN_AUTO_EPOCHS,
    TrainConfig,
    auto_epochs,
)


@pytest.mark.parametrize(("windows", "epochs"), [
    (15_695, 6),  # the bundled sample: ceil(80,000 / 15,695)
    (3_234, 25),  # S&P 500 daily 1999-2011
    (20_000, 4),
    (80_000, MIN_AUTO_EPOCHS),  # one pass would do; never fewer than 3
    (5_000_000, MIN_AUTO_EPOCHS),
    (298, MAX_AUTO_EPOCHS),  # a tiny file: capped, early stopping decides
    (0, MAX_AUTO_EPOCHS),
])
def test_auto_epochs_show_the_model_about_80000_windows_within_3_to_30(windows, epochs):
    assert AUTO_EPOCH_WINDOWS == 80_000 and (MIN_AUTO_EPOCHS, MAX_AUTO_EPOCHS) == (3, 30)
    assert auto_epochs(windows) == epochs


def test_auto_is_the_default_and_a_count_is_kept_as_given():
    assert TrainConfig().epochs == "auto" and TrainConfig().epochs_for(15_695) == 6
    assert TrainConfig(epochs=2).epochs_for(15_695) == 2
    assert train_config({"epochs": "auto"}).epochs == "auto" and train_config({"epochs": "7"}).epochs == 7
    assert train_config({}).epochs == "auto"


@pytest.mark.parametrize("bad", ["0", "-1", "x", 0])
def test_a_bad_epoch_count_is_refused_in_one_line(bad):
    with pytest.raises(InputError, match="--epochs must be a positive integer or 'auto'"):
        train_config({"epochs": bad})


def test_a_default_run_says_its_cap_and_stops_on_validation(tmp_path, daily_path, capsys):
    """The daily fixture has 298 training windows: auto caps at 30 epochs; with patience 1 it stops well before."""
    from foxhunt.cli import main

    run = tmp_path / "run"
    flags = ["--hidden-size", "8", "--attention-heads", "2", "--encoder-length", "16", "--horizon", "3",
             "--no-progress", "--threads", "1", "--patience", "1", "--learning-rate", "0.05"]
    assert main(["train", "--parquet-file", str(daily_path), *flags, "--run-dir", str(run)]) == 0
    log = (run / "train.log").read_text()
    assert "epochs: auto, at most 30 (about 80,000 training windows in all, 3 to 30 epochs)" in log
    epochs = [line for line in log.splitlines() if " epoch " in line and "/30  train_loss" in line]
    assert 1 <= len(epochs) < 30 and "early stopping: no validation improvement for 1 epochs" in log
