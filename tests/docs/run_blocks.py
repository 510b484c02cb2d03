"""Run one page's blocks in this process's working directory, in order; a child of tests/docs/pages.py.

Usage: python run_blocks.py PLAN.json RESULTS_DIR. PLAN holds the page's name, its blocks (lang, code, the
line of the opening fence) and whether to go on after a failure. Bash and sh blocks run in
`bash -euo pipefail` (a failing line fails the block); python blocks run here, with exec, in one namespace
for the whole page (later blocks see earlier names). Block i writes its stdout and stderr at the
file-descriptor level to RESULTS_DIR/i.out and i.err (so the output of what it starts is caught too, and what
it wrote before a timeout is kept), and one line to RESULTS_DIR/results.jsonl when it starts and one when it
ends. Standard library only: this runs whatever interpreter runs the tests, before the page has imported
anything.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Any


def record(results: Path, **event: Any) -> None:
    with open(results / "results.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps(event) + "\n")


def run_bash(code: str, name: str, out: Path, err: Path) -> int:
    with open(out, "wb") as o, open(err, "wb") as e:
        return subprocess.run(["bash", "-euo", "pipefail", "-c", code, name], stdout=o, stderr=e,
                              stdin=subprocess.DEVNULL, check=False).returncode


def run_python(code: str, fence: int, name: str, namespace: dict[str, Any], out: Path, err: Path) -> int:
    """exec `code` in `namespace` with fds 1 and 2 on the block's files; tracebacks name the page and its
    lines."""
    compiled = compile("\n" * fence + code, name, "exec")  # line numbers: the page's
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(out, "wb") as o, open(err, "wb") as e:
        os.dup2(o.fileno(), 1)
        os.dup2(e.fileno(), 2)
        try:
            exec(compiled, namespace)
            rc = 0
        except SystemExit as x:  # sys.exit(...) in an example: its status, and its message as python shows it
            rc = x.code if isinstance(x.code, int) else (0 if x.code is None else 1)
            if x.code is not None and not isinstance(x.code, int):
                print(x.code, file=sys.stderr)
        except BaseException as x:  # noqa: BLE001 - the page's failure, reported with its traceback
            traceback.print_exception(type(x), x, x.__traceback__.tb_next if x.__traceback__ else None)
            rc = 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
    return rc


def main(plan_path: str, results_dir: str) -> int:
    sys.path[0] = ""  # as in an interactive python at the page's directory, not this script's folder
    plan = json.loads(Path(plan_path).read_text(encoding="utf-8"))
    results = Path(results_dir)
    namespace: dict[str, Any] = {"__name__": "__main__"}
    failed = 0
    for i, block in enumerate(plan["blocks"]):
        name = f"{plan['page']}:{block['fence']}"
        out, err = results / f"{i}.out", results / f"{i}.err"
        record(results, index=i, event="start")
        if block["lang"] == "python":
            rc = run_python(block["code"], block["fence"], plan["page"], namespace, out, err)
        else:
            rc = run_bash(block["code"], name, out, err)
        record(results, index=i, event="end", rc=rc)
        if rc != 0:
            failed += 1
            if not plan.get("keep_going"):
                break
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
