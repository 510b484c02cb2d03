"""The hidden folders a killed `prepare` leaves beside its store (data/store/leftovers.py): an older store moved aside
is named for its process like the others, removed only while a complete store stands in its place, and a removal
that failed is not said to have succeeded."""

from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from foxhunt.data.store import leftovers, write
from foxhunt.data.store.layout import MANIFEST


@pytest.fixture(scope="module")
def dead_pid() -> int:
    dead = subprocess.Popen([sys.executable, "-c", ""])
    dead.wait()
    return dead.pid


def folder(path: Path) -> Path:
    path.mkdir()
    (path / "cont.npy").write_bytes(b"x" * 1000)
    return path


def test_a_replaced_store_is_moved_aside_under_a_name_that_carries_its_owner(tmp_path, monkeypatch):
    out, tmp = folder(tmp_path / "store"), folder(tmp_path / "new")
    (out / MANIFEST).write_text("{}")
    monkeypatch.setattr(shutil, "rmtree", lambda *a, **k: None)  # as if killed right after the second rename
    write._swap_in(tmp, out)
    aside = [p.name for p in tmp_path.iterdir() if p.name != "store"]
    assert len(aside) == 1 and aside[0].startswith(f".store.old.{socket.gethostname()}-{os.getpid()}.")
    assert (tmp_path / aside[0] / MANIFEST).is_file() and (out / "cont.npy").is_file()


def test_an_old_store_left_aside_is_removed_only_while_a_complete_store_stands_in_its_place(tmp_path, dead_pid,
                                                                                            caplog):
    out = tmp_path / "store"
    old = folder(tmp_path / f".store.old.{socket.gethostname()}-{dead_pid}.ab12cd34")
    with caplog.at_level(logging.WARNING, logger="foxhunt.data"):
        assert leftovers.remove_stale(out) == []  # killed between the renames: the only copy
    assert old.is_dir()
    assert f"kept {old}, an older store a `foxhunt prepare` (process {dead_pid}) moved aside" in caplog.text
    assert "move it back there or delete it" in caplog.text
    folder(out)
    assert leftovers.remove_stale(out) == []  # a store being written there, not complete
    (out / MANIFEST).write_text("{}")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="foxhunt.data"):
        assert leftovers.remove_stale(out) == [old]
    assert not old.exists() and f"removed {old} (0 MiB)" in caplog.text


def test_a_leftover_that_could_not_be_removed_is_said_so(tmp_path, dead_pid, monkeypatch, caplog):
    stale = folder(tmp_path / f".store.{socket.gethostname()}-{dead_pid}.ab12cd34.tmp")
    monkeypatch.setattr(shutil, "rmtree", lambda *a, **k: None)  # a read-only folder, a file held open elsewhere
    with caplog.at_level(logging.WARNING, logger="foxhunt.data"):
        assert leftovers.remove_stale(tmp_path / "store") == []
    assert stale.is_dir() and "removed" not in caplog.text
    assert f"could not remove all of {stale} (0 MiB)" in caplog.text and "delete it by hand" in caplog.text
