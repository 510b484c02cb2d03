"""Write files so that a file that exists is complete: write to a temporary name in the same folder, then rename."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from foxhunt.errors import WriteError


@contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path next to `path`; on success rename it over `path`, on error delete it."""
    final = Path(path)
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent)
    except OSError as e:
        raise _write_error(final, e) from None
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        fsync(tmp_path)  # the data is on disk before the name points at it
        os.chmod(tmp_path, 0o666 & ~umask())  # mkstemp makes 0600; give the file the permissions open() would
        os.replace(tmp_path, final)
    except OSError as e:
        tmp_path.unlink(missing_ok=True)
        raise _write_error(final, e) from e
    except BaseException:
        tmp_path.unlink(missing_ok=True)
        raise


def fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_error(final: Path, e: OSError) -> WriteError:
    what = e.strerror or str(e) or type(e).__name__
    return WriteError(f"cannot write {final} ({what}); nothing was written under that name: free disk space or "
                      "choose a writable location, then run again (a training run continues with --resume)", e)


def umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_text(path: str | os.PathLike[str], text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json(path: str | os.PathLike[str], obj: Any) -> None:
    write_text(path, json.dumps(obj, indent=2, default=json_default) + "\n")


def write_with(path: str | os.PathLike[str], writer: Callable[[Path], None]) -> None:
    """Call `writer(tmp_path)` and rename the result into place."""
    with atomic_path(path) as tmp:
        writer(tmp)


def append_jsonl(path: str | os.PathLike[str], obj: Any) -> None:
    """Append one JSON line and flush it; a line is either whole or absent for readers that skip a torn tail."""
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(obj, default=json_default) + "\n")
            f.flush()
    except OSError as e:
        raise _write_error(Path(path), e) from e


def json_default(o: Any) -> Any:
    import datetime as _dt

    if isinstance(o, (_dt.datetime, _dt.date)):
        return o.isoformat()
    if hasattr(o, "item"):  # numpy / torch scalars
        return o.item()
    if hasattr(o, "tolist"):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")
