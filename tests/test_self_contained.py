"""A clone with nothing beside it passes its own tests: no test reads a file outside the repository."""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent

# What reaching out of the checkout looks like: ../shared, the repository root's parent, a path above tests/'s parent.
OUTSIDE = re.compile(r"""["']shared["']|\.\./shared|rootpath\.parent|parents\[\d\]\.parent|REPO\.parent""")


def test_no_test_reads_outside_the_repository():
    offenders = [f"{path.relative_to(TESTS)}:{n}: {line.strip()}"
                 for path in sorted(TESTS.rglob("*.py")) if path != Path(__file__).resolve()
                 for n, line in enumerate(path.read_text().splitlines(), 1) if OUTSIDE.search(line)]
    assert not offenders, "tests that read outside the repository:\n" + "\n".join(offenders)


def test_the_bundled_fixtures_are_in_the_repository():
    names = {p.name for p in (TESTS / "fixtures").iterdir()}
    assert {"es_fut_ohlcv1m_databento.parquet", "es_fut_ohlcv1h_databento.parquet", "es_fut_ohlcv1d_databento.parquet",
            "es_fut_ohlcv1m_databento.dbn.zst", "es_fut_ohlcv1m_databento_raw.parquet", "generic_ohlcv_daily.parquet",
            "generic_ohlcv_daily.csv", "es_fut_definition_databento.parquet", "spx_daily.parquet"} <= names
