"""What the README's first command installs is what the main job's verdict needs."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

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
