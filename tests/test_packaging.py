"""What the README's first command installs is what the main job's verdict needs; its test command shows the
suite's count."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0].lower()


def test_the_garch_baseline_is_installed_by_the_first_command():
    """`pip install -e .` (no extras) must bring arch: without it `foxhunt train` compares with 3 baselines and
    leaves out GARCH-t, the one a quant checks first."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert "arch" in {_name(r) for r in project["dependencies"]}
    first = re.search(r"```bash\n(.+?)\n```", (REPO / "README.md").read_text(), re.DOTALL).group(1)
    assert "pip install -e ." in first and "foxhunt train" in first


def test_torch_is_declared_as_a_range_not_a_pin():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    torch = [r for r in project["dependencies"] if _name(r) == "torch"]
    assert torch and "==" not in torch[0] and ">=" in torch[0]


def _readme_test_command() -> list[str]:
    """The README's "run the tests" command: its last step, `python -m pytest ...`, as words."""
    block = next(b for b in re.findall(r"```bash\n(.+?)\n```", (REPO / "README.md").read_text(), re.DOTALL)
                 if "pytest" in b)
    return block.split("&&")[-1].split()


def test_ci_runs_the_readme_s_test_command():
    ci = [line.split("#")[0].split() for line in (REPO / ".ci" / "run").read_text().splitlines()]
    assert _readme_test_command() in ci


@pytest.mark.parametrize("extra", [[], ["-q"]], ids=["as-written", "with-q"])
def test_the_readme_s_test_command_ends_with_pytest_s_count(tmp_path, extra):
    """The closing "N passed" line is what a person checks after the suite: pyproject's addopts must not hide it,
    neither from the README's command nor from the habitual `pytest -q` (two -q hide it). Run on a one-test
    project with this repository's pyproject.toml."""
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_one.py").write_text("def test_one():\n    pass\n")
    words = _readme_test_command()
    assert words[:3] == ["python", "-m", "pytest"]
    run = subprocess.run([sys.executable, *words[1:], "-p", "no:cacheprovider", *extra], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert re.search(r"^=*\s*1 passed in [\d.]+s", run.stdout, re.MULTILINE), run.stdout
