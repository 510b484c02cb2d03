"""Execute docs/tutorial.ipynb top to bottom, and with --in-place write its fresh outputs back (what the docs render).

The notebook runs in a temporary directory (the sample, the run and its evaluation go there, never into the
repository) on this interpreter's `python3` kernel, with this checkout's src/ first on PYTHONPATH, so it runs the
code beside it whether or not foxhunt is installed. tests/docs/test_notebook.py runs it the same way (`execute`).

Commands (from the repository root; needs the `docs` extra: nbclient, nbformat, ipykernel):
  python benchmarks/run_notebook.py --in-place          # refresh docs/tutorial.ipynb's outputs, then commit them
  python benchmarks/run_notebook.py [NOTEBOOK]          # only check that it runs (prints the time it took)
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "docs" / "tutorial.ipynb"


def execute(path: Path, workdir: Path, timeout: int = 300):
    """The notebook at `path`, executed in `workdir` (each cell given `timeout` seconds); raises on a failing cell.

    Timings are not recorded in the cells' metadata, so a refresh changes only what the cells print and draw."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", record_timing=False,
                            resources={"metadata": {"path": str(workdir)}})
    client.execute()
    return nb


def with_src_on_path(env: dict[str, str]) -> dict[str, str]:
    """`env` with this checkout's src/ first on PYTHONPATH: the kernel (which inherits the environment) and the
    commands the notebook starts import this code, not an installed foxhunt."""
    src = str(ROOT / "src")
    rest = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != src]
    return {**env, "PYTHONPATH": os.pathsep.join([src, *rest])}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("notebook", nargs="?", type=Path, default=NOTEBOOK)
    ap.add_argument("--in-place", action="store_true", help="write the executed notebook back to NOTEBOOK")
    ap.add_argument("--timeout", type=int, default=300, help="seconds each cell may take")
    args = ap.parse_args(argv)
    import nbformat

    os.environ.update(with_src_on_path(dict(os.environ)))
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="foxhunt-notebook-") as tmp:
        nb = execute(args.notebook, Path(tmp), args.timeout)
    seconds = time.perf_counter() - start
    if args.in_place:
        nbformat.write(nb, args.notebook)
        print(f"executed {args.notebook} in {seconds:.1f} s and wrote its outputs back")
    else:
        print(f"executed {args.notebook} in {seconds:.1f} s (outputs not written; --in-place writes them)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
