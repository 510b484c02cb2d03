"""docs/tutorial.ipynb runs top to bottom on the bundled sample (as CI runs it: benchmarks/run_notebook.py's
`execute`, in a temporary directory) and shows what its text says: the evaluation table with the model and every
baseline, a fan chart and the variable importances drawn, and `update` forecasts with sorted quantiles that match
`predict`. The committed copy carries its outputs, since the docs site renders them without executing it."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import time
from pathlib import Path

import pytest

from foxhunt.data.baselines import forecasts as baselines

nbformat = pytest.importorskip("nbformat")  # the `docs` extra
pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "docs" / "tutorial.ipynb"
BASELINES = list(baselines.BASELINES)  # every one: the sample is intraday
BUDGET_S = 90  # the whole notebook on a 2-core CI machine (measured: about 30 s)

# Appended to the executed copy only: reads the kernel's variables after the last cell, so the checks below look at
# the objects the notebook built, not at their printed form.
PROBE = """
import json as _json
print("PROBE " + _json.dumps({
    "cwd": str(Path.cwd()),
    "sources": evaluation["source"].to_list(),
    "qrisk": evaluation.drop("source").to_numpy().ravel().tolist(),
    "fan_points": len(day),
    "streamed": streamed.select(pl.col("origin").dt.epoch("ns"), "horizon", "p10", "p50", "p90",
                                pl.col("actual").is_null().alias("no_actual")).to_dicts(),
    "new_bars": new_bars["ts_event"].dt.epoch("ns").to_list(),
    "horizon": fc.horizon,
    "gap": gap,
    "scale": float(last["p90"].abs().median()),
}))
"""


def load_runner():
    spec = importlib.util.spec_from_file_location("run_notebook", ROOT / "benchmarks" / "run_notebook.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def outputs_of(nb, marker: str) -> list:
    """The outputs of the one code cell whose source contains `marker`."""
    cells = [c for c in nb.cells if c.cell_type == "code" and marker in c.source]
    assert len(cells) == 1, f"{len(cells)} code cells contain {marker!r}"
    return cells[0].outputs


def text_of(outputs: list) -> str:
    return "".join(o.get("text", "") for o in outputs if o.output_type == "stream")


def png_of(outputs: list) -> bytes:
    import base64

    pngs = [o.data["image/png"] for o in outputs if "data" in o and "image/png" in o.data]
    assert len(pngs) == 1, f"{len(pngs)} images"
    return base64.b64decode(pngs[0])


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    """The notebook with the probe, executed in a temporary directory; and the seconds it took."""
    runner = load_runner()
    tmp = tmp_path_factory.mktemp("notebook")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(PROBE))
    path = tmp / "tutorial.ipynb"
    nbformat.write(nb, path)
    with pytest.MonkeyPatch.context() as mp:  # the kernel inherits the environment: this checkout's code, no $HOME
        mp.setenv("PYTHONPATH", runner.with_src_on_path(dict(os.environ))["PYTHONPATH"])
        mp.setenv("FOXHUNT_CACHE_DIR", str(tmp / "cache"))  # module scope: before conftest's per-test cache is set
        mp.setenv("IPYTHONDIR", str(tmp / "ipython"))
        mp.setenv("JUPYTER_RUNTIME_DIR", str(tmp / "runtime"))
        start = time.perf_counter()
        out = runner.execute(path, tmp, timeout=120)
        seconds = time.perf_counter() - start
    probe = json.loads(text_of(out.cells[-1].outputs).split("PROBE ", 1)[1])
    return out, probe, seconds, tmp


def test_runs_in_a_temporary_directory_within_budget(executed):
    _, probe, seconds, tmp = executed
    assert seconds < BUDGET_S, f"the notebook took {seconds:.0f} s (budget {BUDGET_S} s)"
    assert Path(probe["cwd"]).resolve() == tmp.resolve()
    assert (tmp / "runs" / "tutorial" / "model.json").is_file()
    assert not (ROOT / "docs" / "runs").exists() and not (ROOT / "docs" / "bars.parquet").exists()


def test_evaluation_scores_the_model_and_every_baseline(executed):
    nb, probe, _, _ = executed
    # the tutorial's model has an anchor (the default): calibration auto applies none, so no "model (raw)" row
    assert probe["sources"] == ["model", *BASELINES]
    assert all(math.isfinite(q) and q > 0 for q in probe["qrisk"])
    table = text_of(outputs_of(nb, '"evaluate"'))
    assert table.splitlines()[0].startswith("The model (uncalibrated)")  # the verdict opens the table
    for name in BASELINES:
        assert f"\n{name} " in table


def test_fan_chart_and_variable_importance_are_drawn(executed):
    nb, probe, _, _ = executed
    fan = outputs_of(nb, "fill_between")
    assert len(png_of(fan)) > 20_000  # a drawn chart, not an empty figure
    assert probe["fan_points"] > 1000  # one session of one-minute forecasts (23 hours)
    assert "p10-p90 covered" in text_of(fan)
    importance = outputs_of(nb, "interpretation.json")
    assert len(png_of(importance)) > 10_000


def test_update_forecasts_each_streamed_bar_with_sorted_quantiles(executed):
    _, probe, _, _ = executed
    rows, d = probe["streamed"], probe["horizon"]
    assert len(probe["new_bars"]) == 5 and len(rows) == 5 * d
    assert [r["origin"] for r in rows] == [t for t in probe["new_bars"] for _ in range(d)]
    assert [r["horizon"] for r in rows] == list(range(1, d + 1)) * 5
    assert all(r["p10"] <= r["p50"] <= r["p90"] and r["p10"] < r["p90"] for r in rows)
    assert all(r["no_actual"] for r in rows)  # live forecasts: nothing realised yet
    assert probe["gap"] <= 4e-6 * probe["scale"]  # update == predict on the same history (README: 2e-6 + 2e-6)


def test_committed_notebook_carries_its_outputs():
    """The docs site renders the committed outputs: every code cell was executed, none failed, both charts are in."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert [c.execution_count for c in code] == list(range(1, len(code) + 1))
    assert not [o for c in code for o in c.outputs if o.output_type == "error"]
    assert len(png_of(outputs_of(nb, "fill_between"))) > 20_000
    assert len(png_of(outputs_of(nb, "interpretation.json"))) > 10_000
