"""The docs' numbers agree with each other and with the tests they cite: one measured figure per claim.

The README states the main job's time in its first lines; the pages under docs/ hold the rest (the console sample in
getting-started.md, the flat-validation claim in training.md, the verdict sentence in forecasts.md, the tables and
the speed comparison in benchmarks.md)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
DOCS = REPO / "docs"
CONSOLE = (DOCS / "getting-started.md").read_text()
TRAINING = (DOCS / "training.md").read_text()
FORECASTS = (DOCS / "forecasts.md").read_text()
BENCHMARKS = (DOCS / "benchmarks.md").read_text()


def test_the_flat_validation_claim_is_what_its_test_measures():
    said = re.search(r"measures (\d+) vs (\d+)\s+batches", TRAINING)
    assert said, "docs/training.md no longer cites the flat-validation test"
    test = (REPO / "tests" / "train" / "test_flat_validation.py").read_text()
    measured = re.search(r"def test_validation_peak_is_the_same_for_(\d+)_and_(\d+)_batches", test)
    assert said.groups() == measured.groups()
    front = re.search(r"the same peak for (\d+) and (\d+) batches", README)
    assert front and front.groups() == measured.groups()


def test_the_training_time_is_one_number_throughout():
    """The README's first lines, the console sample and "Speed and memory" give the same time for the main job."""
    first = re.search(r"`foxhunt train` then takes\s+([\d-]+ s) on a 2-core CPU", README)
    speed = re.search(r"The default `foxhunt train` on the bundled\s+sample takes ([\d-]+ s) on 2 cores", BENCHMARKS)
    started = re.search(r"The default `foxhunt train` takes ([\d-]+ s) on a 2-core CPU", CONSOLE)
    assert first and speed and started and first.group(1) == speed.group(1) == started.group(1)
    console = re.search(r"`time foxhunt train --run-dir\s+runs/sample`: ([\d.]+) s wall.*?; ([\d.]+) s with it\s+cached",
                        CONSOLE, re.DOTALL)
    low, high = (float(x) for x in first.group(1).removesuffix(" s").split("-"))
    assert console and all(low <= float(t) <= high + 1 for t in console.groups())
    epochs = [float(s) for s in re.findall(r"^epoch \d+/\d+ .*? ([\d.]+)s  \*best", CONSOLE, re.MULTILINE)]
    assert epochs and sum(epochs) < float(console.group(1))  # the epochs fit inside the whole run's time


def test_the_console_samples_final_claim_is_the_arithmetic_of_its_own_numbers():
    """The final line's skill against the strongest baseline is 1 - model / baseline of the q-risks it prints: of the
    unrounded ones, so the printed size lies within what the 4-decimal q-risks allow (3.2% from 0.4968 / 0.5135,
    whose ratio is 3.23-3.27%)."""
    final = (r"^best epoch \d: val_loss [\d.]+; validation q-risk p10 ([\d.]+) / p90 ([\d.]+) \([\d,]+ origins\); "
             r"the strongest of (\d) baselines, (\w+): ([\d.]+) / ([\d.]+) against the model's ([\d.]+) / ([\d.]+) on "
             r"[\d,]+ origins, \w+ at p10 \(q-risk ([\d.]+)% (lower|higher), p [=<] [\d.]+\), \w+ at p90 \(q-risk "
             r"([\d.]+)% (lower|higher), p [=<] [\d.]+\)")
    for page in (CONSOLE, README):  # the README's trimmed copy keeps the final line whole
        line = re.search(final, page, re.MULTILINE)
        assert line, "a console sample has no final claim"
        b10, b90, m10, m90 = (float(x) for x in line.groups()[4:8])
        for m, b, size, way in ((m10, b10, *line.groups()[8:10]), (m90, b90, *line.groups()[10:12])):
            assert way == ("lower" if m < b else "higher")
            half = 5e-5  # each q-risk is printed to 4 decimals
            gaps = [abs(1 - (m + dm) / (b + db)) * 100 for dm in (-half, half) for db in (-half, half)]
            assert min(gaps) - 0.05 <= float(size) <= max(gaps) + 0.05, (size, m, b)


def test_the_verdict_example_is_within_the_sample_tables_seed_range():
    """The evaluate sentence quoted for the sample run is seed 0 of the sample's table in docs/benchmarks.md."""
    said = re.search(r"garch_t, it is better at p10 \(q-risk ([\d.]+)% lower, p [^)]+\) and better at p90\s+\(q-risk "
                     r"([\d.]+)% lower", FORECASTS)
    table = BENCHMARKS[BENCHMARKS.index("### The bundled sample (simulated)"):]
    model = re.search(r"\| foxhunt TFT, the default [^|]+\| [\d.]+ \(([\d.]+)-([\d.]+)\) \| [^|]+\| "
                      r"[\d.]+ \(([\d.]+)-([\d.]+)\)", table)
    garch = re.search(r"\| GARCH\(1,1\)-t \| ([\d.]+) \| [\d.]+ \| ([\d.]+) \|", table)
    assert said and model and garch
    lo10, hi10, lo90, hi90 = (float(x) for x in model.groups())
    g10, g90 = (float(x) for x in garch.groups())
    assert 100 * (1 - hi10 / g10) - 0.05 <= float(said.group(1)) <= 100 * (1 - lo10 / g10) + 0.05
    assert 100 * (1 - hi90 / g90) - 0.05 <= float(said.group(2)) <= 100 * (1 - lo90 / g90) + 0.05
