"""Plots return PNG bytes; the report is one self-contained HTML file that embeds every image."""

from __future__ import annotations

import base64
import json
import re
from html.parser import HTMLParser

import numpy as np
import pytest

from foxhunt.evaluate import plots
from foxhunt.evaluate.metrics import compute_metrics
from foxhunt.evaluate.paired import compare
from foxhunt.evaluate.report import write_report

QS = [0.1, 0.5, 0.9]
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def results():
    rng = np.random.default_rng(0)
    y = rng.normal(0, 0.01, (300, 3))
    model = np.sort(rng.normal(0, 0.01, (300, 3, 3)), axis=-1)
    base = np.broadcast_to(np.array([-0.0128, 0.0, 0.0128]), (300, 3, 3))
    series = np.arange(300) % 2
    m = compute_metrics(y, model, QS, series)
    b = json.loads(json.dumps(compute_metrics(y, base, QS, series)))  # as read back from a metrics file
    c = json.loads(json.dumps(compare(series, np.arange(300) // 2, y, model, base, QS, ("0", "1"))))
    return m, {"rolling_vol": b}, {"model": {"rolling_vol": c}}


def test_every_plot_returns_png(results):
    m, b, _ = results
    interp = {
        "static": {"series": 1.0},
        "encoder": {"log_return": 0.7, "hour": 0.3},
        "decoder": {},
        "attention_by_lag": [[0.5, 0.3, 0.2], [0.4, 0.3, 0.2, 0.1]],
        "encoder_length": 2,
    }
    times = np.arange("2024-01-02", "2024-01-12", dtype="datetime64[D]")
    training = [{"epoch": 0, "step": 10, "train_loss": 0.5, "lr": 1e-3}, {"epoch": 0, "step": 20, "train_loss": 0.4},
                {"epoch": 0, "step": 20, "val_loss": 0.45}]  # fmt: skip
    images = [
        plots.fan_chart(
            times, np.linspace(-1, 1, 10), np.sort(np.random.default_rng(1).normal(size=(10, 3))), QS, "fan"
        ),
        plots.calibration_plot(
            QS, {"model": list(m["overall"]["calibration"].values()), "empty": [None] * 3}
        ),
        plots.qrisk_by_horizon({"model": [list(h["q_risk"].values()) for h in m["per_horizon"]]}, QS),
        plots.variable_importance(interp),
        plots.attention_by_lag(interp),
        plots.training_curves(training),
        plots.training_curves([]),
    ]
    for png in images:
        assert isinstance(png, bytes) and png.startswith(PNG) and len(png) > 1000


class _TagCheck(HTMLParser):
    VOID = {"meta", "img", "br", "hr", "link", "input"}

    def __init__(self):
        super().__init__()
        self.stack, self.errors, self.count = [], [], {}

    def handle_starttag(self, tag, attrs):
        self.count[tag] = self.count.get(tag, 0) + 1
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        if not self.stack or self.stack.pop() != tag:
            self.errors.append(tag)


def test_report_is_self_contained_html(tmp_path, results):
    m, b, c = results
    images = {
        "calibration": plots.calibration_plot(QS, {"model": list(m["overall"]["calibration"].values())}),
        "q-risk by horizon": plots.qrisk_by_horizon(
            {"model": [list(h["q_risk"].values()) for h in m["per_horizon"]]}
        ),
        "attention <by lag>": plots.attention_by_lag({"attention_by_lag": [[0.6, 0.4]]}),
    }
    path = tmp_path / "out" / "report.html"
    write_report(
        path, title="ES <daily> & co", metrics=m, baselines=b, images=images, notes=["target: log_return"],
        comparisons=c,
    )
    text = path.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>") and text.rstrip().endswith("</html>")
    assert text.count("data:image/png;base64,") == len(images)
    embedded = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', text)
    assert [base64.b64decode(e) for e in embedded] == list(images.values())
    assert "ES &lt;daily&gt; &amp; co" in text and "attention &lt;by lag&gt;" in text
    assert 'src="http' not in text and "<link" not in text  # nothing to fetch
    for words in ("q-risk", "coverage", "calibration", "hit rate", "Spearman", "skill", "target: log_return",
                  "Diebold-Mariano"):
        assert words in text
    check = _TagCheck()
    check.feed(text)
    assert check.errors == [] and check.stack == []
    assert check.count["table"] == 6  # overall, skill, by horizon (+skill), by series (+skill)
    # skill of the model against the baseline at q = 0.5 (both cover every pair here), as the table must print it,
    # with its p-value and the origins compared
    sk = 1 - m["overall"]["q_risk"][0.5] / b["rolling_vol"]["overall"]["q_risk"]["0.5"]
    assert (f"+{sk:.3f}" if sk > 0 else f"&minus;{abs(sk):.3f}") in text
    p = c["model"]["rolling_vol"]["dm"]["0.5"]["p_value"]
    assert ("<td>&lt;0.0001</td>" if p < 1e-4 else f"<td>{p:.4f}</td>") in text and "<td>300</td>" in text
    assert not list(tmp_path.joinpath("out").glob(".*tmp"))  # written atomically, no temp file left


def test_report_without_baselines_or_images(tmp_path, results):
    m, _, _ = results
    path = tmp_path / "report.html"
    write_report(path, title="t", metrics={"tft": m}, baselines={}, images={}, notes=[])
    text = path.read_text()
    assert "No baselines were evaluated" in text and "data:image/png" not in text and "tft" in text


def test_every_baseline_is_described_in_the_report():
    """Each baseline evaluate can score has its own line of words in report.html (HAR's once read "see the notes
    above", and no notes said anything of it)."""
    from foxhunt.data.baselines.forecasts import BASELINES
    from foxhunt.evaluate.report import BASELINE_TEXT

    assert set(BASELINES) <= set(BASELINE_TEXT)
    assert "Corsi" in BASELINE_TEXT["har"]
