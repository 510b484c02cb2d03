"""The hidden folders a `prepare` works in beside its store, and the removal of those a killed one left.

A store is built in `.NAME.HOST-PID.XXXXXXXX.tmp` and a panel prepared in pieces spills through
`.NAME.pieces.HOST-PID.XXXXXXXX`, both in the store's parent folder, both deleted when the run ends, however it ends,
except when it is killed outright (SIGKILL, the machine's out-of-memory killer). An older store being replaced is
moved aside to `.NAME.old.HOST-PID.XXXXXXXX` for the instant between the two renames, then deleted. The host and
process id in the names make such a leftover provably stale: a later `prepare` into the same place removes the ones
of this host whose process is gone, and says so; an old store only while a complete store stands at NAME (killed
between the renames, it is the only copy). Others (another host's on a shared disk, a live process's, one named
before the names carried their owner) are left alone. A process id is only checked in this process's pid namespace:
two containers sharing the folder and the host name could mistake each other's live folders for stale ones.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import socket
import tempfile
from pathlib import Path

from foxhunt.data.store.layout import MANIFEST

log = logging.getLogger("foxhunt.data")

BUILD, SPILL, OLD = "build", "spill", "old"
_PREFIX = {BUILD: "", SPILL: "pieces.", OLD: "old."}


def owner() -> str:
    """`HOST-PID` of this process."""
    return f"{socket.gethostname()}-{os.getpid()}"


def hidden_folder(out: Path, kind: str) -> Path:
    """A new empty folder beside `out` (mode 0700), named for `kind` (BUILD, SPILL or OLD) and this process."""
    prefix = f".{out.name}.{_PREFIX[kind]}{owner()}."
    return Path(tempfile.mkdtemp(prefix=prefix, suffix=".tmp" if kind == BUILD else "", dir=out.parent))


def remove_stale(out: Path) -> list[Path]:
    """Remove the hidden folders beside `out` that a `prepare` of this host, whose process is gone, left; returns
    them. Each removal, or failure to remove, is one warning line; an old store moved aside is kept (and said) unless
    a complete store stands at `out`."""
    name = re.escape(out.name)
    pattern = re.compile(rf"^\.{name}\.(?:pieces\.(?P<spill>.+)|old\.(?P<old>.+)|(?P<build>.+)\.tmp)$")
    removed = []
    try:
        entries = list(out.parent.iterdir()) if out.parent.is_dir() else []
    except OSError:
        return removed
    for path in entries:
        m = pattern.match(path.name)
        rest = m and (m.group("spill") or m.group("old") or m.group("build"))
        tag = re.fullmatch(r"(?P<host>.+)-(?P<pid>\d+)\.[a-z0-9_]+", rest or "")
        if tag is None or tag["host"] != socket.gethostname() or _alive(int(tag["pid"])) or not path.is_dir():
            continue
        if m.group("old") and not (out / MANIFEST).is_file():
            log.warning("kept %s, an older store a `foxhunt prepare` (process %s) moved aside before it was killed: "
                        "no complete store stands at %s, so it may be the only copy; move it back there or delete "
                        "it", path, tag["pid"], out)
            continue
        size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
        shutil.rmtree(path, ignore_errors=True)
        if path.exists():
            log.warning("could not remove all of %s (%.0f MiB), left by a `foxhunt prepare` (process %s) that was "
                        "killed before it finished; delete it by hand", path, size / 2**20, tag["pid"])
            continue
        removed.append(path)
        log.warning("removed %s (%.0f MiB), left by a `foxhunt prepare` (process %s) that was killed before it "
                    "finished", path, size / 2**20, tag["pid"])
    return removed


def _alive(pid: int) -> bool:
    """Whether process `pid` runs on this host (one of another user's counts)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
