"""evaluate's terminal table: every number sits under its heading, in the source rows and the skill rows alike,
whatever the length of the baselines' names; its header says "(simulated)" on the bundled sample only."""

from __future__ import annotations

import pytest

from foxhunt.evaluate.table import format_results

QS = (0.1, 0.5, 0.9)


def block(base: float) -> dict:
    return {"overall": {"q_risk": {str(q): base + q for q in QS}, "mean_pinball": 0.0031, "mae_median": 0.0104,
                        "coverage": {"p10-p90": 0.8}, "hit_rate": 0.51, "ic": 0.02}}


@pytest.mark.parametrize("long_name", ["garch_t", "seasonal_rolling_vol", "a_baseline_named_at_some_length_x"])
def test_columns_line_up_for_any_name_length(long_name):
    names = ["training_quantiles", "rolling_vol", long_name]
    baselines = {n: block(0.4 + 0.01 * i) for i, n in enumerate(names)}
    skill = {n: {str(q): -0.1 * (i + 1) + q / 10 for q in QS} for i, n in enumerate(names)}
    result = {"model": {**block(0.3), "quantiles": list(QS)}, "model_raw": block(0.35), "baselines": baselines,
              "skill": skill, "target": "log_return", "verdict": None,
              "period": {"origins": 10, "first_origin": "2024-01-01T00:00:00Z", "last_origin": "2024-01-10T00:00:00Z"}}
    lines = format_results(result).splitlines()
    header = next(line for line in lines if line.startswith("source"))
    ends = {q: header.index(f"qrisk p{q * 100:g}") + len(f"qrisk p{q * 100:g}") for q in QS}
    rows = {"model": result["model"], "model (raw)": result["model_raw"], **baselines}
    for name, res in rows.items():
        line = next(line for line in lines if line.startswith(f"{name} "))
        for q, e in ends.items():
            assert line[e - 12:e].strip() == f"{res['overall']['q_risk'][str(q)]:.4f}", (name, q, line)
    for name, sk in skill.items():
        line = next(line for line in lines if line.startswith(f"  vs {name} "))
        for q, e in ends.items():
            assert line[e - 12:e].strip() == f"{sk[str(q)]:.4f}", (name, q, line)


def test_the_header_says_simulated_on_the_bundled_sample_only():
    result = {"model": {**block(0.3), "quantiles": list(QS)}, "baselines": {"rolling_vol": block(0.4)}, "skill": {},
              "target": "log_return", "verdict": None,
              "period": {"origins": 10, "first_origin": "2024-01-01T00:00:00Z", "last_origin": "2024-01-10T00:00:00Z"}}
    real, sample = format_results(result).splitlines(), format_results(result, simulated=True).splitlines()
    header = next(line for line in real if line.startswith("source"))
    assert not any("simulated" in line for line in real)
    assert sample == [f"{header}  (simulated)" if line == header else line for line in real]
