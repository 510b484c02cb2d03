"""One tiny model for the whole folder: the README's "From Python" code, run once on the daily fixture."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_python_blocks() -> list[str]:
    """The ```python blocks of the README's "From Python" section, in order."""
    text = README.read_text(encoding="utf-8")
    section = text.split("### From Python", 1)[1]
    section = re.split(r"\n##+ ", section, maxsplit=1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


@pytest.fixture(scope="session")
def readme_run(tmp_path_factory, daily_path) -> dict[str, Any]:
    """The namespace after running the README's Python blocks in a directory where `bars.parquet` is the daily
    fixture (two series, ES and NQ, 300 bars each): `run`, `fc`, `bars`, `live`, `raw`, `tail`, `forecast`, `arrays`."""
    cwd = tmp_path_factory.mktemp("readme")
    (cwd / "bars.parquet").symlink_to(daily_path)
    namespace: dict[str, Any] = {}
    before = os.getcwd()
    os.chdir(cwd)
    try:
        exec(compile("\n".join(readme_python_blocks()), str(README), "exec"), namespace)
    finally:
        os.chdir(before)
    return namespace
