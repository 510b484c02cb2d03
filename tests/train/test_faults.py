"""FOXHUNT_FAULT_INJECT: parsing, one-shot firing, errors that name the variable and the bad token, and the hook."""

from __future__ import annotations

import pytest
import torch

from foxhunt.errors import InputError
from foxhunt.train import faults
from foxhunt.train.faults import ENV_VAR, FaultInjector


def test_parses_and_fires_each_fault_once() -> None:
    inj = FaultInjector.from_env({ENV_VAR: " oom@train:5, oom@val:3 "})
    assert inj.pending == (("oom", "train", 5), ("oom", "val", 3))
    for step in range(1, 5):
        inj.check("train", step)
    inj.check("val", 5)
    with pytest.raises(torch.OutOfMemoryError, match=rf"injected by {ENV_VAR}: oom@train:5"):
        inj.check("train", 5)
    inj.check("train", 5)  # the retry of the same step succeeds
    with pytest.raises(torch.cuda.OutOfMemoryError):  # the class a real CUDA failure raises
        inj.check("val", 3)
    inj.check("val", 3)
    assert inj.pending == () and not inj


@pytest.mark.parametrize("env", [{}, {ENV_VAR: ""}, {ENV_VAR: "   "}])
def test_unset_or_blank_means_no_faults(env: dict[str, str]) -> None:
    inj = FaultInjector.from_env(env)
    assert not inj
    for i in range(1, 10):
        inj.check("train", i)
        inj.check("val", i)


@pytest.mark.parametrize(
    ("spec", "token"),
    [
        ("oom@train", "oom@train"),
        ("oom@train:x", "oom@train:x"),
        ("oom@train:5,boom@val:1", "boom@val:1"),
        ("oom@test:1", "oom@test:1"),
        ("oom@train:0", "oom@train:0"),
        ("oom@train:2,oom@train:2", "oom@train:2"),
        ("oom@train:1,", ""),
        ("kill@train:1", "kill@train:1"),
        ("oom@epoch:1", "oom@epoch:1"),
    ],
)
def test_bad_spec_names_variable_and_token(spec: str, token: str) -> None:
    with pytest.raises(InputError) as err:
        FaultInjector.from_env({ENV_VAR: spec})
    msg = str(err.value)
    assert ENV_VAR in msg and f"bad token {token!r}" in msg and "\n" not in msg


def test_unknown_site_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="fault site"):
        FaultInjector.from_env({ENV_VAR: "oom@val:1"}).check("validation", 1)


def test_kill_at_an_epoch_simulates_a_killed_run_once() -> None:
    inj = FaultInjector.from_env({ENV_VAR: "kill@epoch:2"})
    inj.check("epoch", 1)
    with pytest.raises(KeyboardInterrupt, match="kill@epoch:2"):
        inj.check("epoch", 2)
    inj.check("epoch", 2)


def test_a_fault_can_fire_several_times_in_a_row() -> None:
    """`xN`: the first firing at INDEX, then the next N - 1 checks of that site (the retries of a step)."""
    inj = FaultInjector.from_env({ENV_VAR: "oom@train:3x3,nan@train:7x2"})
    assert inj.pending == (("oom", "train", 3), ("nan", "train", 7))
    inj.check("train", 2)
    for _ in range(3):
        with pytest.raises(torch.OutOfMemoryError, match="oom@train:3"):
            inj.check("train", 3)  # the step and two retries
    assert inj.check("train", 3) is None  # the third retry succeeds
    assert inj.check("train", 6) is None
    assert [inj.check("train", 7), inj.check("train", 8), inj.check("train", 9)] == ["nan", "nan", None]
    assert not inj


@pytest.mark.parametrize("site", ["train", "val", "predict", "probe"])
def test_oom_fires_at_every_site_that_runs_the_model(site: str) -> None:
    inj = FaultInjector.from_env({ENV_VAR: f"oom@{site}:1"})
    with pytest.raises(torch.OutOfMemoryError):
        inj.check(site, 1)


@pytest.mark.parametrize(
    ("spec", "problem"),
    [("nan@val:1", "nan goes with the site train"), ("oom@train:2x0", "TIMES must be at least 1"),
     ("oom@train:2x", "expected KIND@SITE:INDEX"), ("nan@epoch:1", "nan goes with the site train")],
)
def test_bad_new_tokens_say_what_is_wrong(spec: str, problem: str) -> None:
    with pytest.raises(InputError, match=problem):
        FaultInjector.from_env({ENV_VAR: spec})


# -- the hook: `faults.at` at named points, armed for a block ----------------------------------------------------------


def test_the_hook_fires_only_while_armed_and_puts_back_what_was_armed_before() -> None:
    assert faults.at("train", 1) is None  # disarmed: every point passes
    with faults.armed("nan@train:1,oom@val:1"):
        with faults.armed("nan@train:2"):  # an inner pass sees its own faults only
            assert faults.at("train", 1) is None and faults.at("val", 1) is None
            assert faults.at("train", 2) == "nan"
        assert faults.at("train", 1) == "nan"  # the outer pass's faults, as it left them
        with pytest.raises(torch.OutOfMemoryError, match="oom@val:1"):
            faults.at("val", 1)
    assert faults.at("train", 1) is None


def test_a_fault_that_ends_the_block_disarms_the_hook() -> None:
    with pytest.raises(KeyboardInterrupt), faults.armed("kill@epoch:1,oom@train:5"):
        faults.at("epoch", 1)
    assert faults.at("train", 5) is None  # the unspent fault went with its pass


def test_armed_without_a_spec_reads_the_variable_when_the_block_starts(monkeypatch) -> None:
    monkeypatch.setenv(ENV_VAR, "nan@train:3")
    with faults.armed():
        monkeypatch.delenv(ENV_VAR)
        assert faults.at("train", 3) == "nan"
    monkeypatch.setenv(ENV_VAR, "oom@train:x")
    with pytest.raises(InputError, match="bad token 'oom@train:x'"), faults.armed():
        pass
    assert faults.at("train", 3) is None
