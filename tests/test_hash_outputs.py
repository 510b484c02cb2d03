"""benchmarks/hash_outputs.py (the outputs-unchanged check of refactors) keeps working: two runs on a fixture give
the same, non-empty hashes, in memory and from the store."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "hash_outputs.py"
FIXTURE = ROOT / "tests" / "fixtures" / "generic_ohlcv_daily.parquet"


@pytest.mark.parametrize("mode", [[], ["--store", "--workers", "0"]])
def test_hashes_are_repeatable(tmp_path, mode):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    runs = []
    for i in range(2):
        out = tmp_path / f"{i}.json"
        subprocess.run([sys.executable, str(SCRIPT), str(FIXTURE), "--out", str(out), *mode], check=True, env=env)
        runs.append(json.loads(out.read_text())["hashes"])
    assert runs[0] == runs[1]
    arrays = [k for k, v in runs[0].items() if "dtype" in v]
    assert len(arrays) >= 10 and all(len(runs[0][k]["sha256"]) == 64 for k in runs[0])
    key = "transform" if not mode else "manifest.json"
    assert runs[0][key]["value"]
    done = subprocess.run([sys.executable, str(SCRIPT), "--compare", str(tmp_path / "0.json"),
                           str(tmp_path / "1.json")], env=env, capture_output=True, text=True)
    assert done.returncode == 0 and "0 of" in done.stdout
