"""Run a page's examples as a reader would, in a fresh directory; say which block failed and what it printed.

A reader works in a fresh clone, at its root, with the project installed. So each page runs in a new temporary
directory of its own (the blocks write there, never into the repository) that holds `tests/fixtures`, a link
to the repository's bundled input files: examples may read `tests/fixtures/...` as a reader at the clone's
root would, and must not write there (checked). Its blocks run in document order in one child process
(tests/docs/run_blocks.py) under a time limit for the whole page. `foxhunt` on PATH is this checkout's
(`python -m foxhunt` with the running interpreter, whose folder, with `python` and `pip`, comes next on PATH),
and src/ leads PYTHONPATH, so the examples run the code under test, not another install. OpenMP, MKL and
foxhunt's data stages get one thread each unless the environment says otherwise: the examples are small and
the test machine has two cores.

Bash blocks do not share shell state: a `cd` or an `export` ends with its block. Python blocks share one
namespace.

For a page writer: `python -m tests.docs.pages PAGE.md ...` (from the repository root) runs every block of
each page, past failures, and prints each block's verdict.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.docs.blocks import Block, blocks

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
CHILD = Path(__file__).with_name("run_blocks.py")
PAGE_TIMEOUT_S = 240.0
TAIL_LINES = 40
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "FOXHUNT_DATA_THREADS": "1"}


@dataclass(frozen=True)
class Outcome:
    """What one block did: its exit status (None: still running when the page's time ran out) and output."""

    block: Block
    rc: int | None
    stdout: str
    stderr: str


@dataclass(frozen=True)
class PageRun:
    page: str
    outcomes: list[Outcome]  # the blocks that started, in order
    skipped: list[Block]
    timed_out: bool
    fixtures_changed: bool

    @property
    def failures(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.rc != 0]

    @property
    def ok(self) -> bool:
        return not self.failures and not self.timed_out and not self.fixtures_changed


def environment(shims: Path) -> dict[str, str]:
    """The child's environment: this checkout's `foxhunt` first on PATH and its src/ first on PYTHONPATH."""
    shims.mkdir(parents=True, exist_ok=True)
    script = shims / "foxhunt"
    script.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m foxhunt "$@"\n')
    script.chmod(0o755)
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(shims), os.path.dirname(sys.executable), env.get("PATH", "")])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO / "src"), env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"  # what a block printed before a timeout is in its file
    env.setdefault("MPLBACKEND", "Agg")
    for key, value in ONE_THREAD.items():
        env.setdefault(key, value)
    return env


def fixtures_state(fixtures: Path) -> list[tuple[str, int, int]]:
    return sorted((str(p.relative_to(fixtures)), p.stat().st_size, p.stat().st_mtime_ns)
                  for p in fixtures.rglob("*"))


def run_page(path: Path, work: Path, *, timeout: float = PAGE_TIMEOUT_S, keep_going: bool = False,
             name: str | None = None, fixtures: Path = FIXTURES) -> PageRun:
    """Run the page at `path` in `work`/page (created fresh), with its scratch files in `work`/runner. `name`
    is how the page is named in messages and tracebacks (default: its path relative to the repository)."""
    name = name or (str(path.relative_to(REPO)) if path.is_relative_to(REPO) else path.name)
    found = blocks(path.read_text(encoding="utf-8"), name)
    runnable = [b for b in found if b.skip is None]
    page, runner = work / "page", work / "runner"
    (page / "tests").mkdir(parents=True)
    (page / "tests" / "fixtures").symlink_to(fixtures, target_is_directory=True)
    runner.mkdir()
    plan = {"page": name, "keep_going": keep_going,
            "blocks": [{"lang": b.lang, "code": b.code, "fence": b.line} for b in runnable]}
    (runner / "plan.json").write_text(json.dumps(plan), encoding="utf-8")
    before = fixtures_state(fixtures)
    with open(runner / "child.out", "wb") as out, open(runner / "child.err", "wb") as err:
        # its own process group (start_new_session): a timeout ends all it started
        child = subprocess.Popen([sys.executable, str(CHILD), str(runner / "plan.json"), str(runner)],
                                 cwd=page, env=environment(runner / "bin"), stdin=subprocess.DEVNULL,
                                 stdout=out, stderr=err, start_new_session=True)
        timed_out = False
        try:
            child.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            stop(child)
    return PageRun(name, outcomes(runner, runnable), [b for b in found if b.skip is not None], timed_out,
                   fixtures_state(fixtures) != before)


def stop(child: subprocess.Popen) -> None:
    """End the child's process group: SIGTERM, then SIGKILL after 5 s."""
    for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, None)):
        try:
            os.killpg(child.pid, sig)
        except ProcessLookupError:
            return
        try:
            child.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def outcomes(runner: Path, runnable: list[Block]) -> list[Outcome]:
    log = runner / "results.jsonl"
    events = [json.loads(x) for x in log.read_text(encoding="utf-8").splitlines()] if log.exists() else []
    ends = {e["index"]: e["rc"] for e in events if e["event"] == "end"}
    started = [e["index"] for e in events if e["event"] == "start"]

    def text(p: Path) -> str:
        return p.read_text(encoding="utf-8", errors="replace") if p.exists() else ""

    return [Outcome(runnable[i], ends.get(i), text(runner / f"{i}.out"), text(runner / f"{i}.err"))
            for i in started]


def tail(text: str, n: int = TAIL_LINES) -> str:
    lines = text.rstrip().splitlines()
    cut = len(lines) - n
    return "\n".join(([f"[... {cut} lines ...]"] if cut > 0 else []) + lines[-n:]) or "(nothing)"


def report(run: PageRun, timeout: float = PAGE_TIMEOUT_S) -> str:
    """The first failing block of the page: where it is, its text, what it printed (the tails)."""
    if run.fixtures_changed:
        return f"{run.page}: its examples wrote into tests/fixtures; write into the current directory instead"
    if run.timed_out and not run.outcomes:
        return f"{run.page}: the page did not start its first block within {timeout:g} s"
    bad = next(o for o in run.outcomes if o.rc != 0)
    how = (f"was still running after {timeout:g} s (the page's limit)" if bad.rc is None
           else f"failed (exit {bad.rc})")
    code = "\n".join("    " + x for x in bad.block.code.rstrip().splitlines())
    return (f"{run.page}:{bad.block.line}: the ```{bad.block.lang} block {how}:\n{code}\n"
            f"--- stdout ---\n{tail(bad.stdout)}\n--- stderr ---\n{tail(bad.stderr)}")


def main(argv: list[str]) -> int:
    """Run each page given, every block even past a failure, and print one verdict line per block."""
    import tempfile

    status = 0
    for arg in argv:
        with tempfile.TemporaryDirectory(prefix="foxhunt-page-") as work:
            run = run_page(Path(arg).resolve(), Path(work), keep_going=True)
        for o in run.outcomes:
            verdict = "ok" if o.rc == 0 else ("timed out" if o.rc is None else f"exit {o.rc}")
            first = o.block.code.strip().splitlines()[0] if o.block.code.strip() else ""
            print(f"{run.page}:{o.block.line}  {o.block.lang:6}  {verdict:9}  {first[:70]}")
            if o.rc != 0:
                print("    " + tail(o.stderr or o.stdout, 6).replace("\n", "\n    "))
        for b in run.skipped:
            print(f"{run.page}:{b.line}  {b.lang:6}  skipped    {b.skip}")
        status |= 0 if run.ok else 1
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
