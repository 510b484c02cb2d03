"""The exchange sessions are kept in the cache folder, so that loading bars does not import pandas-market-calendars
(and pandas) in every process: about 0.7 s of CPU per `foxhunt` command and per `prepare` worker."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from foxhunt.data.bars import sessions
from foxhunt.data.bars.sessions import CACHE_FILE, calendar_sessions, session_for

pytest.importorskip("pandas_market_calendars")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty cache folder of this test's own, and the in-process memo cleared before and after."""
    monkeypatch.setenv("FOXHUNT_CACHE_DIR", str(tmp_path))
    calendar_sessions.cache_clear()
    session_for.cache_clear()
    yield tmp_path
    calendar_sessions.cache_clear()
    session_for.cache_clear()


def _fresh() -> dict:
    """calendar_sessions() as a new process would read them (the cache file, else the calendars)."""
    calendar_sessions.cache_clear()
    return calendar_sessions()


def test_a_second_process_reads_the_sessions_without_importing_the_calendars(cache):
    first = calendar_sessions()
    assert (cache / CACHE_FILE).is_file()
    code = (
        "import sys, json; from foxhunt.data.bars.sessions import calendar_sessions, session_for;"
        "t = calendar_sessions(); z = session_for('ZC');"
        "print(json.dumps(['pandas_market_calendars' in sys.modules, 'pandas' in sys.modules,"
        " [z.calendar, z.open_min, z.close_min], sorted(t)]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "FOXHUNT_CACHE_DIR": str(cache)})
    imported_calendars, imported_pandas, zc, names = json.loads(out.stdout)
    assert not imported_calendars and not imported_pandas
    assert zc == ["CMEGlobex_Grains", 19 * 60, 13 * 60 + 20]  # the exchange's, not the CME equity default
    assert names == sorted(first)


def test_another_install_of_the_package_reads_the_calendars_anew(cache, monkeypatch):
    truth = calendar_sessions()
    saved = json.loads((cache / CACHE_FILE).read_text())
    saved["sessions"]["CMEGlobex_Grains"]["open_min"] = 1  # what an older package version might have said
    (cache / CACHE_FILE).write_text(json.dumps(saved))
    assert _fresh()["CMEGlobex_Grains"].open_min == 1  # same install: the cache is believed
    monkeypatch.setattr(sessions, "_package_key", lambda: "an upgraded package")
    assert _fresh() == truth  # a new key: read from the calendars, and the cache rewritten
    assert json.loads((cache / CACHE_FILE).read_text())["key"] == "an upgraded package"


@pytest.mark.parametrize("content", ["{not json", '{"key": 3}', '[]', ""])
def test_a_damaged_cache_file_is_replaced(cache, content):
    truth = calendar_sessions()
    (cache / CACHE_FILE).write_text(content)
    assert _fresh() == truth
    assert json.loads((cache / CACHE_FILE).read_text())["sessions"].keys() == truth.keys()


def test_an_unwritable_cache_folder_only_costs_the_import(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("FOXHUNT_CACHE_DIR", str(blocker / "cache"))  # a folder inside a file: cannot exist
    calendar_sessions.cache_clear()
    try:
        assert calendar_sessions()["CMEGlobex_Grains"].open_min == 19 * 60
    finally:
        calendar_sessions.cache_clear()
