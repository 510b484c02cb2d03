"""evaluate's terminal table: every number sits under its heading, in the source rows and the skill rows alike
(skill, p-value, series won), whatever the length of the baselines' names, and each comparison says how many origins
and series it compared and what it left out; its header says "(simulated)" on the bundled sample only."""

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
    comparisons = {n: comparison(sk, 0.01 * (i + 1)) for i, (n, sk) in enumerate(skill.items())}
    result = {"model": {**block(0.3), "quantiles": list(QS)}, "model_raw": block(0.35), "baselines": baselines,
              "skill": skill, "comparisons": comparisons, "target": "log_return", "verdict": None,
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
        at = next(i for i, line in enumerate(lines) if line.startswith(f"  vs {name} "))
        line, p, won = lines[at : at + 3]
        for q, e in ends.items():
            assert line[e - 12:e].strip() == f"{sk[str(q)]:.4f}", (name, q, line)
            assert p[e - 12:e].strip() == f"{comparisons[name]['dm'][str(q)]['p_value']:.4f}", (name, q, p)
            assert won[e - 12:e].strip() == "3/4 (1)", (name, q, won)
        assert line.split()[-2:] == ["1,234", "4"]  # origins and series compared
    assert ("left out of the comparison with training_quantiles (56 origins): NI0 (no bars before "
            "2015-03-02T09:36:00Z (the training cut) to fit on)") in lines


def comparison(skill: dict, p: float) -> dict:
    """A comparison (evaluate/paired.py) with this skill and p-value at every quantile, 4 series, one left out."""
    return {"skill": skill, "origins": 1234, "series": 4,
            "dm": {q: {"p_value": p, "outcome": "level"} for q in skill},
            "series_won": {q: {"won": 3, "won_significant": 1, "lost_significant": 0, "of": 4} for q in skill},
            "left_out": {"origins": 56, "series": ["NI0"], "origins_by_series": {"NI0": 56},
                         "reasons": {"NI0": "no bars before 2015-03-02T09:36:00Z (the training cut) to fit on"}}}


def test_the_header_says_simulated_on_the_bundled_sample_only():
    result = {"model": {**block(0.3), "quantiles": list(QS)}, "baselines": {"rolling_vol": block(0.4)}, "skill": {},
              "target": "log_return", "verdict": None,
              "period": {"origins": 10, "first_origin": "2024-01-01T00:00:00Z", "last_origin": "2024-01-10T00:00:00Z"}}
    real, sample = format_results(result).splitlines(), format_results(result, simulated=True).splitlines()
    header = next(line for line in real if line.startswith("source"))
    assert not any("simulated" in line for line in real)
    assert sample == [f"{header}  (simulated)" if line == header else line for line in real]
